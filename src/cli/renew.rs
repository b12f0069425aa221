//! `git swarm renew [<id>]`: extend the lease of my claim, or of all my claims.

use std::time::Duration;

use crate::ops::{self, Actor};

use super::output::tasks_json;
use super::{CliResult, Ctx, parse_id, parse_lease};

#[derive(Debug, clap::Args)]
pub(crate) struct RenewArgs {
    /// The task [default: every task I hold].
    #[arg(value_parser = parse_id)]
    id: Option<String>,
    /// The new lease, from now [default: the swarm's lease].
    #[arg(long, value_name = "DUR", value_parser = parse_lease)]
    lease: Option<Duration>,
    /// The epoch I claimed under [default: the one recorded by my claim in this clone].
    #[arg(long, requires = "id")]
    epoch: Option<u64>,
}

pub(super) fn run(ctx: &mut Ctx, args: RenewArgs) -> CliResult<()> {
    let agent = ctx.agent().to_string();
    let epoch = match (&args.id, args.epoch) {
        (_, Some(e)) => Some(e),
        (Some(id), None) => ctx.recalled_epoch(&agent, id),
        (None, None) => None,
    };
    // Renewing one claim reads that task alone; every claim of mine needs every task.
    let one = args.id.as_deref().map(|id| [id]);
    let reads = one.as_ref().map_or(crate::Reads::Live, |a| crate::Reads::Tasks(a));
    let (_swarm, c) = ctx.transact_on(reads, |snap, now, agent| {
        let lease = args.lease.unwrap_or(snap.board.config.lease);
        let actor = Actor { agent: agent.to_string(), now };
        ops::renew(&snap.board, &actor, args.id.as_deref(), epoch, lease, None)
    })?;
    if c.value.is_empty() {
        ctx.out.line(format!("{agent} holds no claims; nothing to renew"));
    }
    for t in &c.value {
        if let Some(cl) = &t.claim {
            ctx.out.line(format!("renewed {} until {}", t.id, cl.lease_until));
        }
    }
    ctx.out.doc(&tasks_json(c.value.iter(), ctx.now()));
    Ok(())
}
