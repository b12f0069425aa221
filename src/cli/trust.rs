//! `git swarm trust`: what this clone's runners would run of the swarm's shared settings — the agents' commands
//! and endpoints, the check, the target, the prompt overrides — with its digest; `--yes` (or `y` at the prompt)
//! records the digest in this clone's git config (`swarm.trusted`). A runner that meets settings its clone does
//! not trust stops before it claims (docs/security.md, *Trust*).

use std::io::IsTerminal;

use git_swarm::trust::Document;
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub struct TrustArgs {
    /// Trust them without asking (what a script or a workflow does; needed without a terminal).
    #[arg(long)]
    yes: bool,
    /// Only print the digest (to pin it, e.g. as GIT_SWARM_TRUST in a workflow file).
    #[arg(long, conflicts_with = "yes")]
    digest: bool,
}

/// The trust document of the newest board.
pub fn document(swarm: &git_swarm::txn::Swarm) -> CliResult<Document> {
    let snap = swarm.read(false)?;
    let prompts = swarm
        .store()
        .list_dir(snap.commit, "prompts")
        .map_err(|e| CliError::io(format!("cannot read the prompt overrides: {e}")))?;
    Ok(Document::of(&snap.board.config, &prompts))
}

/// Record what a command of this clone just wrote to the state ref as trusted (`init --config`, `config set`): a
/// clone trusts its own settings. A failure is said, not fatal.
pub fn trust_own(ctx: &Ctx, swarm: &git_swarm::txn::Swarm) {
    match document(swarm)
        .map_err(|e| e.message)
        .and_then(|d| git_swarm::trust::record(swarm.local.repo.common_dir(), &d))
    {
        Ok(_) => {}
        Err(e) => ctx.out.warn(format!("could not record the new settings as trusted here: {e}")),
    }
}

pub fn run(ctx: &mut Ctx, args: TrustArgs) -> CliResult<()> {
    let swarm = ctx.swarm()?;
    let doc = document(&swarm)?;
    let trusted = git_swarm::trust::is_trusted(
        &doc,
        &git_swarm::trust::trusted_digests(&git_swarm::trust::clone_digests(&swarm.local.repo)),
    );
    if args.digest {
        ctx.out.line(&doc.digest);
        ctx.out.doc(&json!({"digest": doc.digest, "trusted": trusted, "settings": doc.lines}));
        return Ok(());
    }
    let home = swarm.local.repo.common_dir().join("swarm");
    let before = git_swarm::trust::last_trusted(&home, &git_swarm::trust::clone_digests(&swarm.local.repo));
    ctx.out.line(format!(
        "the shared settings of swarm '{}' on {} (digest {}):",
        swarm.name,
        swarm.remote_label,
        doc.short()
    ));
    for l in &doc.lines {
        ctx.out.line(format!("  {}", git_swarm::escape::line(l)));
    }
    if trusted {
        ctx.out.line("trusted in this clone");
        ctx.out.doc(&json!({"digest": doc.digest, "trusted": true, "recorded": false, "settings": doc.lines}));
        return Ok(());
    }
    let changed = git_swarm::trust::changes(before.as_ref(), &doc);
    if before.is_some() && !changed.is_empty() {
        ctx.out.line("changed since what this clone trusted last:");
        for c in &changed {
            ctx.out.line(format!("  {}", git_swarm::escape::line(c)));
        }
    }
    let yes = args.yes || ask(ctx)?;
    if !yes {
        ctx.out.doc(&json!({"digest": doc.digest, "trusted": false, "recorded": false, "settings": doc.lines}));
        return Err(CliError::io("not trusted: this clone's runners will not run these settings")
            .hint("`git swarm trust --yes` trusts them without asking"));
    }
    git_swarm::trust::record(swarm.local.repo.common_dir(), &doc).map_err(CliError::io)?;
    ctx.out.line(format!(
        "trusted: this clone's runners may run these settings ({} in git config {})",
        doc.short(),
        git_swarm::trust::TRUST_KEY
    ));
    ctx.out.doc(&json!({"digest": doc.digest, "trusted": true, "recorded": true, "settings": doc.lines}));
    Ok(())
}

/// Ask on the terminal; no terminal is a usage error (scripts pass `--yes`).
fn ask(ctx: &Ctx) -> CliResult<bool> {
    if !std::io::stdin().is_terminal() || ctx.out.json {
        return Err(CliError::usage("trust: no terminal to ask on").hint("pass --yes to trust these settings"));
    }
    eprint!("let this clone's runners run these settings? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer).map_err(|e| CliError::io(format!("cannot read the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}
