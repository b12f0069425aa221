//! `git swarm compact`: replace the state ref's history by one root commit holding the current board, by
//! compare-and-swap; the old history (the audit log) is kept under `refs/swarm-archive/<name>/<n>`.

use serde_json::json;

use super::{CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct CompactArgs {
    /// Only when more than N ops were written since the last compaction (for a scheduled job).
    #[arg(long, value_name = "N", default_value_t = 0)]
    if_longer_than: usize,
}

pub(super) fn run(ctx: &mut Ctx, args: CompactArgs) -> CliResult<()> {
    let agent = ctx.agent().to_string();
    let swarm = ctx.swarm()?;
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let done = swarm.compact(&ctx.retry, &who, &clock, &agent, args.if_longer_than)?;
    let refname = swarm.ref_name();
    // Kept work of tasks that have landed since is pruned with the history (a failure to delete is said, not fatal).
    let pruned = match swarm.read(true).and_then(|s| swarm.prune_kept_work(&s.board)) {
        Ok(p) => p,
        Err(e) => {
            ctx.out.warn(format!("could not prune the kept work of done tasks: {e}"));
            vec![]
        }
    };
    if !pruned.is_empty() {
        ctx.out.line(format!("deleted {} kept work ref(s) of tasks done since", pruned.len()));
    }
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
                          "ops": c.ops, "root": c.root, "pruned": pruned}),
        None => json!({"compacted": false, "ref": refname, "pruned": pruned}),
    });
    Ok(())
}
