//! `git swarm list`: every task.

use crate::model::Status;

use super::output::{task_line, tasks_json};
use super::{CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only tasks with this status (open, claimed, done, failed, cancelled).
    #[arg(long, value_parser = |s: &str| s.parse::<Status>())]
    status: Option<Status>,
    /// Only tasks with this label.
    #[arg(long)]
    label: Option<String>,
}

pub(super) fn run(ctx: &mut Ctx, args: ListArgs) -> CliResult<()> {
    let snap = ctx.read(true)?;
    let now = ctx.now();
    let mut tasks: Vec<_> = snap
        .board
        .tasks
        .values()
        .map(|s| &s.task)
        .filter(|t| args.status.is_none_or(|st| t.status == st))
        .filter(|t| args.label.as_ref().is_none_or(|l| t.labels.contains(l)))
        .collect();
    tasks.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
    if tasks.is_empty() {
        ctx.out.note("no tasks");
    }
    for t in &tasks {
        ctx.out.line(task_line(t, now));
    }
    ctx.out.doc(&tasks_json(tasks.iter().copied(), now));
    Ok(())
}
