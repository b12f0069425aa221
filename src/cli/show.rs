//! `git swarm show <id>`: one task.

use crate::ops::{self, DomainError};

use super::output::{task_detail, task_json};
use super::{CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The task's id.
    #[arg(value_parser = parse_id)]
    id: String,
}

pub(super) fn run(ctx: &mut Ctx, args: ShowArgs) -> CliResult<()> {
    // Read live tasks in full and finished ones by name; then the one file asked for.
    let swarm = ctx.swarm()?;
    let snap = swarm.read(false)?;
    ctx.out.problems(&snap.problems);
    let now = ctx.now();
    let task = match snap.board.tasks.get(&args.id) {
        Some(s) => s.task.clone(),
        None => match swarm.store().read_closed(&snap, &args.id)? {
            Some(Ok(t)) => t,
            Some(Err(problem)) => {
                ctx.out.problems(std::slice::from_ref(&problem));
                return Err(DomainError::UnknownTask(args.id.clone()).into());
            }
            None => return Err(DomainError::UnknownTask(args.id.clone()).into()),
        },
    };
    let waiting = ops::waiting_on(&snap.board, &task);
    // The worker's hand-off (`notes/<id>.md`): what was done and what is left, as the agent put it.
    let handoff = match swarm.store().read_text(snap.commit, &crate::state::note_path(&task.id), 64 * 1024) {
        Ok(Some(Ok(t))) => Some(t),
        _ => None,
    };
    ctx.out.line(task_detail(&task, now, &waiting, handoff.as_deref()));
    let mut doc = task_json(&task, now);
    doc["handoff"] = serde_json::json!(handoff);
    ctx.out.doc(&doc);
    Ok(())
}
