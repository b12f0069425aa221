//! `git swarm log`: the audit log of the swarm, newest first (one commit of the state ref per op).

use serde_json::json;

use super::{CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct LogArgs {
    /// Show at most this many ops.
    #[arg(short = 'n', long = "max-count", value_name = "N")]
    max_count: Option<usize>,
    /// Go on past compactions, through the histories they archived (fetched when needed).
    #[arg(long)]
    archived: bool,
}

pub(super) fn run(ctx: &mut Ctx, args: LogArgs) -> CliResult<()> {
    let swarm = ctx.swarm()?;
    let snap = swarm.read(false)?;
    let entries = swarm.history(snap.commit, args.max_count.unwrap_or(usize::MAX), args.archived)?;
    for e in &entries {
        ctx.out.line(format!(
            "{}  {}  {:<12} {}",
            &e.commit[..12.min(e.commit.len())],
            e.time,
            crate::escape::line(e.agent.as_deref().unwrap_or("-")),
            crate::escape::line(&e.summary)
        ));
    }
    ctx.out.doc(&serde_json::Value::Array(
        entries
            .iter()
            .map(|e| {
                let also: Vec<_> = e
                    .also
                    .iter()
                    .map(|(op, task, epoch, agent)| {
                        json!({"op": op, "task": task, "epoch": epoch, "agent": agent.as_ref().or(e.agent.as_ref())})
                    })
                    .collect();
                json!({"commit": e.commit, "time": e.time.to_string(), "op": e.op, "task": e.task,
                       "agent": e.agent, "epoch": e.epoch, "summary": e.summary, "also": also})
            })
            .collect(),
    ));
    Ok(())
}
