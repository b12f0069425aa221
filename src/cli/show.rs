//! `git swarm show <id>`: one task.

use git_swarm::ops::{self, DomainError};

use super::output::{task_detail, task_json};
use super::{CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The task's id.
    #[arg(value_parser = parse_id)]
    id: String,
}

pub fn run(ctx: &mut Ctx, args: ShowArgs) -> CliResult<()> {
    let snap = ctx.read(true)?;
    let now = ctx.now();
    let stored = snap.board.tasks.get(&args.id).ok_or_else(|| DomainError::UnknownTask(args.id.clone()))?;
    let waiting = ops::waiting_on(&snap.board, &stored.task);
    ctx.out.line(task_detail(&stored.task, now, &waiting));
    ctx.out.doc(&task_json(&stored.task, now));
    Ok(())
}
