//! `git swarm fail <id> --reason <text>`: my claimed task failed; open again while attempts remain.

use crate::ops;

use super::{CliError, CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub(crate) struct FailArgs {
    #[arg(value_parser = parse_id)]
    id: String,
    /// Why it failed (kept with the task for the next attempt and the planners).
    #[arg(long)]
    reason: String,
    /// The epoch I claimed under [default: the one recorded by my claim in this clone].
    #[arg(long)]
    epoch: Option<u64>,
}

pub(super) fn run(ctx: &mut Ctx, args: FailArgs) -> CliResult<()> {
    if args.reason.trim().is_empty() {
        return Err(CliError::usage("fail: --reason is empty"));
    }
    ctx.holder_op(&args.id, args.epoch, "failed", |board, actor, epoch| {
        ops::fail(board, actor, &args.id, epoch, ops::Failing::because(args.reason.clone()))
    })
    .map(drop)
}
