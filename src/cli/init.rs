//! `git swarm init`: create the state ref on the remote; a second run changes nothing.

use std::time::Duration;

use git_swarm::model::Config;
use git_swarm::store::short;
use serde_json::json;

use super::{CliError, CliResult, Ctx, parse_lease};

#[derive(Debug, clap::Args)]
pub struct InitArgs {
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
}

pub fn run(ctx: &mut Ctx, args: InitArgs) -> CliResult<()> {
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
    git_swarm::config::check(&config).map_err(|e| CliError::usage(format!("init: {e}")))?;
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let (commit, created) = swarm.init(&ctx.retry, &who, &clock, &config, &agent)?;
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
    ctx.out
        .doc(&json!({"ref": refname, "commit": commit.to_string(), "created": created, "remote": swarm.remote_label}));
    Ok(())
}

fn current_branch(repo: &gix::Repository) -> Option<String> {
    let head = repo.head_name().ok()??;
    Some(head.shorten().to_string())
}
