//! `git swarm compact`: replace the state ref's history by one root commit holding the current board, by
//! compare-and-swap; the old history (the audit log) is kept under `refs/swarm-archive/<name>/<n>`.

use serde_json::json;

use super::{CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// Only when more than N ops were written since the last compaction (for a scheduled job).
    #[arg(long, value_name = "N", default_value_t = 0)]
    if_longer_than: usize,
}

pub fn run(ctx: &mut Ctx, args: CompactArgs) -> CliResult<()> {
    let agent = ctx.agent().to_string();
    let swarm = ctx.swarm()?;
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let done = swarm.compact(&ctx.retry, &who, &clock, &agent, args.if_longer_than)?;
    let refname = swarm.ref_name();
    match &done {
        Some(c) => ctx.out.line(format!(
            "compacted {refname} on {}: {} op(s) archived at {}; the new root is {}",
            swarm.remote_label,
            c.ops,
            c.archive,
            &c.root[..12]
        )),
        None => ctx.out.line(format!(
            "nothing to compact: {refname} holds {} op(s) since its root",
            if args.if_longer_than > 0 { format!("no more than {}", args.if_longer_than) } else { "no".into() }
        )),
    }
    ctx.out.doc(&match done {
        Some(c) => json!({"compacted": true, "ref": refname, "archive": c.archive, "archived": c.archived,
                          "ops": c.ops, "root": c.root}),
        None => json!({"compacted": false, "ref": refname}),
    });
    Ok(())
}
