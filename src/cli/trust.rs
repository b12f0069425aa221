//! `git swarm trust`: what this clone's runners would run of the swarm's shared settings — the agents' commands
//! and endpoints, the check, the target, the prompt overrides — with its digest; `--yes` (or `y` at the prompt)
//! records the digest in this clone's git config (`swarm.trusted`). A runner that meets settings its clone does
//! not trust stops before it claims (docs/security.md, *Trust*).

use std::io::IsTerminal;

use crate::trust::Document;
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct TrustArgs {
    /// Trust them without asking (what a script or a workflow does; needed without a terminal).
    #[arg(long)]
    yes: bool,
    /// Only print the digest (to pin it, e.g. as GIT_SWARM_TRUST in a workflow file).
    #[arg(long, conflicts_with = "yes")]
    digest: bool,
}

/// The trust document of the newest board.
pub(super) fn document(swarm: &crate::Swarm) -> CliResult<Document> {
    let snap = swarm.read(false)?;
    document_at(swarm, snap.commit)
}

/// The trust document of the state at `commit`.
pub(super) fn document_at(swarm: &crate::Swarm, commit: gix::ObjectId) -> CliResult<Document> {
    let store = swarm.store();
    let snap = store.read(commit, false).map_err(|e| CliError::io(e.to_string()))?;
    let prompts = store
        .list_dir(commit, crate::state::PROMPTS_DIR)
        .map_err(|e| CliError::io(format!("cannot read the prompt overrides: {e}")))?;
    Ok(Document::of(&snap.board.config, &prompts))
}

/// Record the settings of `commit`, which a command of this clone just wrote (`init --config`, `config set`), as
/// trusted here: a clone trusts its own settings — but not what it did not write: after an edit, only when the
/// settings before it were trusted here too (or the edit changed nothing a runner runs), so that `config set` of
/// a timeout never trusts a command someone else pushed. What is not recorded is said, with the way to trust it.
pub(super) fn trust_own(ctx: &Ctx, swarm: &crate::Swarm, commit: gix::ObjectId, edited: bool) {
    let common = swarm.local.repo.common_dir();
    let res = (|| -> Result<bool, String> {
        let after = document_at(swarm, commit).map_err(|e| e.message)?;
        if edited {
            let parent =
                swarm.store().repo.find_commit(commit).ok().and_then(|c| c.parent_ids().next().map(|p| p.detach()));
            let before = parent.map(|p| document_at(swarm, p)).transpose().map_err(|e| e.message)?;
            let digests = crate::trust::trusted_digests(&crate::trust::clone_digests(&swarm.local.repo), &ctx.env);
            let fine =
                before.as_ref().is_some_and(|b| b.digest == after.digest || crate::trust::is_trusted(b, &digests));
            if !fine {
                return Ok(false);
            }
        }
        crate::trust::record(common, &after)?;
        Ok(true)
    })();
    match res {
        Ok(true) => {}
        Ok(false) => ctx.out.warn(
            "the settings before this change were not trusted here, so the new ones are not either: \
             `git swarm trust` shows them",
        ),
        Err(e) => ctx.out.warn(format!("could not record the new settings as trusted here: {e}")),
    }
}

pub(super) fn run(ctx: &mut Ctx, args: TrustArgs) -> CliResult<()> {
    let swarm = ctx.swarm()?;
    let doc = document(&swarm)?;
    let trusted = crate::trust::is_trusted(
        &doc,
        &crate::trust::trusted_digests(&crate::trust::clone_digests(&swarm.local.repo), &ctx.env),
    );
    if args.digest {
        ctx.out.line(&doc.digest);
        ctx.out.doc(&json!({"digest": doc.digest, "trusted": trusted, "settings": doc.lines}));
        return Ok(());
    }
    let home = swarm.local.repo.common_dir().join("swarm");
    let before = crate::trust::last_trusted(&home, &crate::trust::clone_digests(&swarm.local.repo));
    ctx.out.line(format!(
        "the shared settings of swarm '{}' on {} (digest {}):",
        swarm.name,
        swarm.remote_label,
        doc.short()
    ));
    for l in &doc.lines {
        ctx.out.line(format!("  {}", crate::escape::line(l)));
    }
    if trusted {
        ctx.out.line("trusted in this clone");
        ctx.out.doc(&json!({"digest": doc.digest, "trusted": true, "recorded": false, "settings": doc.lines}));
        return Ok(());
    }
    let changed = crate::trust::changes(before.as_ref(), &doc);
    if before.is_some() && !changed.is_empty() {
        ctx.out.line("changed since what this clone trusted last:");
        for c in &changed {
            ctx.out.line(format!("  {}", crate::escape::line(c)));
        }
    }
    let yes = args.yes || ask(ctx)?;
    if !yes {
        ctx.out.doc(&json!({"digest": doc.digest, "trusted": false, "recorded": false, "settings": doc.lines}));
        return Err(CliError::io("not trusted: this clone's runners will not run these settings")
            .hint("`git swarm trust --yes` trusts them without asking"));
    }
    crate::trust::record(swarm.local.repo.common_dir(), &doc).map_err(CliError::io)?;
    ctx.out.line(format!(
        "trusted: this clone's runners may run these settings ({} in git config {})",
        doc.short(),
        crate::trust::TRUST_KEY
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
