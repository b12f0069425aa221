//! `git swarm done <id>`: my claimed task is done (final).

use crate::ops;

use super::{CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub(crate) struct DoneArgs {
    #[arg(value_parser = parse_id)]
    id: String,
    /// The commit that carries the work: any revision of this repository (HEAD, a branch, a commit id).
    #[arg(long, value_name = "REV")]
    commit: Option<String>,
    /// A note for the record (what was done, what is left).
    #[arg(long)]
    note: Option<String>,
    /// The epoch I claimed under [default: the one recorded by my claim in this clone].
    #[arg(long)]
    epoch: Option<u64>,
}

pub(super) fn run(ctx: &mut Ctx, args: DoneArgs) -> CliResult<()> {
    // The board records a commit id, never a name that moves: resolved here, refused when it names nothing.
    let commit = match &args.commit {
        Some(rev) => Some(ctx.resolve_commit(rev, "--commit")?),
        None => None,
    };
    let swarm = ctx.holder_op(&args.id, args.epoch, "done", |board, actor, epoch| {
        ops::done(board, actor, &args.id, epoch, commit.map(|c| c.to_string()), args.note.clone(), None)
    })?;
    if let Some(c) = commit {
        warn_unless_on_target(ctx, &swarm, c);
    }
    Ok(())
}

/// The task's code belongs on the target branch: say so when the commit is not there (it is recorded all the same;
/// the push may just not have happened yet).
fn warn_unless_on_target(ctx: &Ctx, swarm: &crate::Swarm, commit: gix::ObjectId) {
    let Ok(snap) = swarm.read(false) else { return };
    let target = snap.board.config.target;
    let tip = match swarm.fetch_branch(&format!("refs/heads/{target}")) {
        Ok(Some(tip)) => tip,
        Ok(None) => {
            ctx.out.warn(format!(
                "{} has no branch {target}: commit {} is not on it",
                swarm.remote_label,
                short(commit)
            ));
            return;
        }
        Err(_) => return,
    };
    if !crate::runner::git::is_ancestor(swarm.local.repo.common_dir(), commit, tip) {
        ctx.out.warn(format!(
            "the task is done with commit {}, which is not on {}'s {target} (at {}): nothing lands it for you — push \
             it there (`git push {} {}:{target}`), or the task's code is not where the swarm and its workers look",
            short(commit),
            swarm.remote_label,
            short(tip),
            swarm.remote_label,
            short(commit),
        ));
    }
}

fn short(id: gix::ObjectId) -> String {
    id.to_string()[..12].to_string()
}
