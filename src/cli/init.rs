//! `git swarm init`: create the state ref on the remote; a second run changes nothing.

use std::time::Duration;

use crate::model::Config;
use crate::short;
use serde_json::json;

use super::{CliError, CliResult, Ctx, parse_lease};

#[derive(Debug, clap::Args)]
pub(crate) struct InitArgs {
    /// The branch workers land code on [default: the current branch, else main].
    #[arg(long, value_name = "BRANCH")]
    target: Option<String>,
    /// Default lease of a claim.
    #[arg(long, value_name = "DUR", value_parser = parse_lease)]
    lease: Option<Duration>,
    /// Attempts (fails and expired leases) before a task is failed.
    #[arg(long, value_name = "N")]
    max_attempts: Option<u32>,
    /// Start from these settings (a swarm.toml: [run], [roles.*], …); the flags above override it.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// With --config: when the swarm exists, replace its settings with these (one `config` op; the tasks stay).
    /// Also repairs a swarm.toml that cannot be read.
    #[arg(long, requires = "config")]
    force: bool,
}

pub(super) fn run(ctx: &mut Ctx, args: InitArgs) -> CliResult<()> {
    let agent = ctx.agent().to_string();
    let swarm = ctx.swarm()?;
    let target_given = args.target.is_some();
    let target = match args.target {
        Some(t) => t,
        None => current_branch(&swarm.local.repo).unwrap_or_else(|| "main".into()),
    };
    let mut config = match &args.config {
        Some(path) => {
            let text = super::read_text_arg(path, "--config")?;
            let mut c: Config = toml::from_str(&text)
                .map_err(|e| CliError::usage(format!("--config {}: {}", path.display(), e.to_string().trim())))?;
            if target_given || !text.lines().any(|l| l.trim_start().starts_with("target")) {
                c.target = target;
            }
            c
        }
        None => Config { target, ..Config::default() },
    };
    if let Some(l) = args.lease {
        config.lease = l;
    }
    if let Some(n) = args.max_attempts {
        config.max_attempts = n;
    }
    crate::config::check(&config).map_err(|e| CliError::usage(format!("init: {e}")))?;
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let (commit, created) = match swarm.init(&ctx.retry, &who, &clock, &config, &agent) {
        Ok((_, false)) | Err(crate::TxnError::BrokenSettings { .. }) if args.force => {
            // The swarm exists (its settings readable or not): --force replaces them.
            return replace_settings(ctx, &swarm, &config);
        }
        other => other?,
    };
    let refname = swarm.ref_name();
    // The settings this clone wrote are trusted by it (not those of a swarm that was there already).
    if created {
        super::trust::trust_own(ctx, &swarm, commit, false);
    }
    if created {
        ctx.out.line(format!(
            "initialized swarm '{}' on {} ({refname} at {})",
            swarm.name,
            swarm.remote_label,
            short(&commit.to_string())
        ));
    } else {
        ctx.out.line(format!(
            "swarm '{}' already exists on {} ({refname} at {}); nothing changed",
            swarm.name,
            swarm.remote_label,
            short(&commit.to_string())
        ));
    }
    // What was asked of an existing swarm and not done: each flag that differs from its settings, with the way.
    let mut ignored = Vec::new();
    if !created {
        let have = swarm.read(false)?.board.config;
        let asked = [
            ("--target", target_given.then(|| config.target.clone()), have.target.clone(), "target"),
            (
                "--lease",
                args.lease.map(|_| crate::time::format_duration(config.lease)),
                crate::time::format_duration(have.lease),
                "lease",
            ),
            ("--max-attempts", args.max_attempts.map(|n| n.to_string()), have.max_attempts.to_string(), "max_attempts"),
        ];
        for (flag, want, has, key) in asked {
            if let Some(want) = want.filter(|w| *w != has) {
                ctx.out.warn(format!(
                    "{flag} {want} was not applied: the swarm exists with {key} = {has} \
                     (`git swarm config set {key} {want}` changes it)"
                ));
                ignored.push(flag);
            }
        }
        if args.config.is_some() && config != have {
            ctx.out.warn(
                "the settings of --config were not applied: the swarm exists with its own \
                 (`git swarm init --config <file> --force` replaces them; the tasks stay)",
            );
            ignored.push("--config");
        }
    }
    if created {
        warn_unless_branch(ctx, &swarm, &config.target);
    }
    ctx.out.doc(&json!({
        "ref": refname,
        "commit": commit.to_string(),
        "created": created,
        "remote": swarm.remote_label,
        "ignored": ignored,
    }));
    Ok(())
}

/// `init --config <file> --force` on a swarm that exists: its settings replaced by the file's, whatever they were
/// (settings that cannot be read included), by one `config` op; the tasks, cycles and spend stay.
fn replace_settings(ctx: &mut Ctx, swarm: &crate::Swarm, config: &Config) -> CliResult<()> {
    let mut was_broken = false;
    let (_, c) = ctx.transact_settings(|snap, now, agent| {
        was_broken = snap.board.broken_settings.is_some();
        let actor = crate::ops::Actor { agent: agent.to_string(), now };
        Ok((crate::ops::configure(&snap.board, &actor, config, "init --force")?, ()))
    })?;
    let refname = swarm.ref_name();
    match c.commit {
        Some(commit) => {
            super::trust::trust_own(ctx, swarm, commit, false);
            let what =
                if was_broken { "replaced the settings that could not be read" } else { "replaced the settings" };
            ctx.out.line(format!(
                "swarm '{}' on {}: {what} ({refname} at {})",
                swarm.name,
                swarm.remote_label,
                short(&commit.to_string())
            ));
            warn_unless_branch(ctx, swarm, &config.target);
        }
        None => {
            ctx.out.line(format!("swarm '{}' on {}: the settings are these already", swarm.name, swarm.remote_label))
        }
    }
    ctx.out.doc(&json!({"ref": refname, "commit": c.commit.map(|c| c.to_string()), "created": false,
        "replaced": c.commit.is_some(), "remote": swarm.remote_label}));
    Ok(())
}

/// Say so when the remote has no branch `target` (a typo like `mian`, or a repository with no commit yet): no task
/// can land until it has one. Says nothing when the remote cannot be asked.
pub(super) fn warn_unless_branch(ctx: &Ctx, swarm: &crate::Swarm, target: &str) {
    if let Ok(None) = swarm.fetch_branch(&format!("refs/heads/{target}")) {
        ctx.out.warn(format!(
            "{} has no branch '{}': no task can land until it has one (push it, or name another with `git swarm \
             config set target <branch>`)",
            swarm.remote_label,
            crate::escape::line(target)
        ));
    }
}

fn current_branch(repo: &gix::Repository) -> Option<String> {
    let head = repo.head_name().ok()??;
    Some(head.shorten().to_string())
}
