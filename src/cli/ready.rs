//! `git swarm ready`: what a claim without id could take now, best first.

use crate::model::Kind;
use crate::ops;

use super::output::{task_line, tasks_json};
use super::{CliResult, Ctx, parse_kind};

#[derive(Debug, clap::Args)]
pub(crate) struct ReadyArgs {
    /// `work` or `plan`.
    #[arg(long, default_value = "work", value_parser = parse_kind)]
    kind: Kind,
}

pub(super) fn run(ctx: &mut Ctx, args: ReadyArgs) -> CliResult<()> {
    let snap = ctx.read(false)?;
    let now = ctx.now();
    let ready = ops::ready(&snap.board, args.kind, now);
    for t in &ready {
        ctx.out.line(task_line(t, now));
    }
    ctx.out.doc(&tasks_json(ready.iter().copied(), now));
    Ok(())
}
