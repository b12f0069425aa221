//! `git swarm claim [<id>]`: claim a task, or the best ready one of a kind.

use std::time::Duration;

use crate::model::Kind;
use crate::ops::{self, Actor, DomainError};

use super::output::task_json;
use super::{CliResult, Ctx, parse_id, parse_kind, parse_lease};

#[derive(Debug, clap::Args)]
pub(crate) struct ClaimArgs {
    /// The task to claim [default: the best ready task of --kind].
    #[arg(value_parser = parse_id)]
    id: Option<String>,
    /// How long the claim lasts unless renewed [default: the swarm's lease].
    #[arg(long, value_name = "DUR", value_parser = parse_lease)]
    lease: Option<Duration>,
    /// The kind of task a claim without id takes.
    #[arg(long, default_value = "work", value_parser = parse_kind)]
    kind: Kind,
}

pub(super) fn run(ctx: &mut Ctx, args: ClaimArgs) -> CliResult<()> {
    // Claiming a task this agent already holds renews it, but only if it is the claim this clone recorded.
    let recorded = args.id.as_deref().and_then(|id| ctx.recalled_epoch(ctx.agent(), id));
    ctx.refuse_a_runners_id(ctx.agent(), "claim")?;
    // A claim by id reads that task alone; the next ready one reads the tasks it touches, chosen by the index.
    let one = args.id.as_deref().map(|id| [id]);
    let reads = one.as_ref().map_or(crate::Reads::Next(args.kind), |a| crate::Reads::Tasks(a));
    let swarm = ctx.swarm()?;
    let (_swarm, c) = ctx.transact_on(reads, |snap, now, agent| {
        // After the judge's stop nothing is claimed, by a runner or by hand, until `git swarm goal` (on the very
        // state the claim commits against).
        if let Some(stop) =
            crate::runner::last_cycle(swarm.store(), snap.commit).filter(|c| c.verdict == crate::runner::Verdict::Stop)
        {
            return Err(DomainError::Stopped { cycle: stop.cycle });
        }
        let lease = args.lease.unwrap_or(snap.board.config.lease);
        let actor = Actor { agent: agent.to_string(), now };
        ops::claim(&snap.board, &actor, args.id.as_deref(), args.kind, lease, recorded)
    })?;
    // Nothing was ready; the commit only recorded exhausted claims as failed.
    let t = c.value.ok_or(DomainError::NothingReady { kind: args.kind })?;
    if let Some(claim) = &t.claim {
        ctx.remember_epoch(&claim.agent, &t.id, claim.epoch);
    }
    ctx.out.line(&t.id);
    ctx.out.doc(&task_json(&t, ctx.now()));
    Ok(())
}
