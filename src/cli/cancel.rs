//! `git swarm cancel <id>`: a task that will not be done (open or claimed: a holder is fenced off).

use crate::ops::{self, Actor};
use serde_json::json;

use super::output::task_json;
use super::{CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub(crate) struct CancelArgs {
    /// The open or claimed task.
    #[arg(value_parser = parse_id)]
    id: String,
    /// Why, for the record (the task's failures, `git swarm show`).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
}

pub(super) fn run(ctx: &mut Ctx, args: CancelArgs) -> CliResult<()> {
    let id = args.id.clone();
    let reason = args.reason.clone().unwrap_or_else(|| format!("by {}", ctx.agent()));
    let (_swarm, c) = ctx.transact(|snap, now, agent| {
        let actor = Actor { agent: agent.to_string(), now };
        let (change, task, waiting) = ops::cancel_task(&snap.board, &actor, &id, &reason)?;
        Ok((change, (task, waiting)))
    })?;
    let (task, waiting) = c.value;
    let now = ctx.now();
    match (&task, c.commit) {
        (Some(t), Some(_)) => {
            ctx.out.line(format!("cancelled: {} {}", t.id, crate::escape::line(&t.title)));
        }
        _ => ctx.out.line(format!("{id} is cancelled already; nothing changed")),
    }
    if !waiting.is_empty() {
        ctx.out.warn(format!(
            "{} task(s) wait on {id} and can never run now: {} — cancel them too (`git swarm cancel <id>`), or give \
             them other dependencies with a planner",
            waiting.len(),
            waiting.join(", ")
        ));
    }
    let mut doc = task.as_ref().map(|t| task_json(t, now)).unwrap_or_else(|| json!({"id": id, "status": "cancelled"}));
    if let Some(o) = doc.as_object_mut() {
        o.insert("changed".into(), json!(c.commit.is_some()));
        o.insert("blocked".into(), json!(waiting));
    }
    ctx.out.doc(&doc);
    Ok(())
}
