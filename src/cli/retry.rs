//! `git swarm retry <id>… | --failed`: open failed or cancelled tasks again, their attempts reset — all of them
//! in one op, or none.

use crate::model::{Status, Task};
use crate::ops::{self, Actor, DomainError};
use serde_json::Value;

use super::output::task_json;
use super::{CliError, CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub(crate) struct RetryArgs {
    /// The failed or cancelled tasks (one op: all of them open again, or none when one cannot be).
    #[arg(value_parser = parse_id, required_unless_present = "failed", conflicts_with = "failed")]
    ids: Vec<String>,
    /// Every task that is `failed` now (not the cancelled ones).
    #[arg(long)]
    failed: bool,
}

pub(super) fn run(ctx: &mut Ctx, args: RetryArgs) -> CliResult<()> {
    let agent = ctx.agent().to_string();
    let swarm = ctx.swarm()?;
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let res = swarm.transact(&ctx.retry, &who, &clock, |snap, now| {
        let actor = Actor { agent: agent.clone(), now };
        let ids: Vec<String> = if args.failed {
            // Finished tasks are stored apart: the failed ones among them are known by their status alone.
            let live = snap.board.tasks.values().filter(|s| s.task.status == Status::Failed).map(|s| s.task.id.clone());
            let closed = snap.board.closed.iter().filter(|(_, c)| c.status == Status::Failed).map(|(id, _)| id.clone());
            let mut ids: Vec<String> = live.chain(closed).collect();
            ids.sort();
            ids.dedup();
            ids
        } else {
            let mut ids = args.ids.clone();
            ids.dedup();
            ids
        };
        let mut board = snap.board.clone();
        let mut all: Option<ops::Change> = None;
        let mut opened: Vec<Task> = Vec::new();
        for id in &ids {
            // A finished task is stored apart and may not be read into the board: read it by name.
            let (task, path) = match board.tasks.get(id) {
                Some(s) => (s.task.clone(), s.path.clone()),
                None => match swarm.store().read_closed(snap, id) {
                    Ok(Some(Ok(t))) => {
                        let path = board.closed.get(id).map(|c| c.path.clone()).unwrap_or_default();
                        (t, path)
                    }
                    _ => return Err(DomainError::UnknownTask(id.clone())),
                },
            };
            let (change, t) = ops::retry(&board, &actor, &task, &path)?;
            ops::apply(&mut board, &change);
            all = Some(match all {
                Some(before) => before.then(change),
                None => change,
            });
            opened.push(t);
        }
        Ok((all.unwrap_or_default(), opened))
    });
    let c = res.map_err(CliError::from)?;
    if c.value.is_empty() {
        ctx.out.note("no task is failed: nothing to retry");
    }
    for t in &c.value {
        ctx.out.line(format!("open again: {} {} (attempts reset)", t.id, crate::escape::line(&t.title)));
    }
    // One id: the task object, as before; several (or --failed): an array of them.
    let now = ctx.now();
    let doc = match (args.failed, c.value.as_slice()) {
        (false, [one]) => task_json(one, now),
        (_, many) => Value::Array(many.iter().map(|t| task_json(t, now)).collect()),
    };
    ctx.out.doc(&doc);
    Ok(())
}
