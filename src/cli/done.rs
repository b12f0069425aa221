//! `git swarm done <id>`: my claimed task is done (final).

use git_swarm::ops;

use super::{CliError, CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub struct DoneArgs {
    #[arg(value_parser = parse_id)]
    id: String,
    /// The commit that carries the work.
    #[arg(long, value_name = "SHA")]
    commit: Option<String>,
    /// A note for the record (what was done, what is left).
    #[arg(long)]
    note: Option<String>,
    /// The epoch I claimed under [default: the one recorded by my claim in this clone].
    #[arg(long)]
    epoch: Option<u64>,
}

pub fn run(ctx: &mut Ctx, args: DoneArgs) -> CliResult<()> {
    if let Some(c) = &args.commit
        && (c.is_empty() || c.len() > 64 || !c.chars().all(|ch| ch.is_ascii_hexdigit()))
    {
        return Err(CliError::usage(format!(
            "--commit '{}' is not a commit id (hex digits)",
            git_swarm::escape::line(c)
        )));
    }
    ctx.holder_op(&args.id, args.epoch, "done", |board, actor, epoch| {
        ops::done(board, actor, &args.id, epoch, args.commit.clone(), args.note.clone())
    })
}
