//! `git swarm release <id>`: give my claim back; the task is open again.

use crate::ops;

use super::{CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub(crate) struct ReleaseArgs {
    #[arg(value_parser = parse_id)]
    id: String,
    /// The epoch I claimed under [default: the one recorded by my claim in this clone].
    #[arg(long)]
    epoch: Option<u64>,
}

pub(super) fn run(ctx: &mut Ctx, args: ReleaseArgs) -> CliResult<()> {
    ctx.holder_op(&args.id, args.epoch, "released", |board, actor, epoch| {
        ops::release(board, actor, &args.id, epoch, None)
    })
    .map(drop)
}
