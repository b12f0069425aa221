//! `git swarm dispatch`: start the fleet's workflow on GitHub Actions through the REST API (`workflow_dispatch`);
//! with `--gitlab`, a pipeline of the fleet's GitLab CI file (`POST /projects/:id/pipeline`, `ci/gitlab.rs`).

use std::collections::BTreeMap;

use crate::github::WORKFLOW_FILE;
use crate::github::api::validate_workflow;
use crate::github::workflow::MAX_WORKERS;
use serde_json::json;

use super::ci::{api_error, client, repo_slug};
use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct DispatchArgs {
    /// Worker jobs [default: the workflow's `workers` input default].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORKERS)))]
    workers: Option<u32>,
    /// A goal for the planner job (the workflow must have one: `git swarm ci github --planner`).
    #[arg(long, value_name = "TEXT")]
    goal: Option<String>,
    /// The branch or tag whose workflow file runs [default: the repository's default branch].
    #[arg(long = "ref", value_name = "REF")]
    git_ref: Option<String>,
    /// The GitHub repository [default: from the swarm's remote URL].
    #[arg(long, value_name = "OWNER/NAME", conflicts_with = "gitlab")]
    repo: Option<String>,
    /// The workflow file under .github/workflows/ (or its numeric id).
    #[arg(long, value_name = "FILE", default_value = WORKFLOW_FILE, conflicts_with = "gitlab")]
    workflow: String,
    /// Start a GitLab CI pipeline (`git swarm ci gitlab`) instead: the token from GITLAB_TOKEN, the API from
    /// GITLAB_API_URL or the remote's server.
    #[arg(long)]
    gitlab: bool,
    /// The GitLab project, `group/name` or its numeric id (with --gitlab) [default: from the swarm's remote URL].
    #[arg(long, value_name = "PATH|ID", requires = "gitlab")]
    project: Option<String>,
}

pub(super) fn run(ctx: &mut Ctx, a: DispatchArgs) -> CliResult<()> {
    if a.gitlab {
        check_ref(a.git_ref.as_deref())?;
        return super::ci::dispatch_gitlab(ctx, a.project.as_deref(), a.git_ref, a.workers, a.goal);
    }
    validate_workflow(&a.workflow).map_err(|e| CliError::usage(format!("--workflow: {e}")))?;
    check_ref(a.git_ref.as_deref())?;
    let repo = repo_slug(ctx, a.repo.as_deref())?;
    // The token is checked before any request is made.
    let api = client(&ctx.env)?;
    let git_ref = match a.git_ref {
        Some(r) => r,
        None => api.default_branch(&repo).map_err(api_error)?,
    };
    let mut inputs = BTreeMap::new();
    inputs.insert("swarm".to_string(), ctx.swarm_name.clone());
    if let Some(n) = a.workers {
        inputs.insert("workers".to_string(), n.to_string());
    }
    if let Some(g) = a.goal.filter(|g| !g.trim().is_empty()) {
        inputs.insert("goal".to_string(), g);
    }
    let d = api.dispatch(&repo, &a.workflow, &git_ref, &inputs).map_err(api_error)?;
    let workers = a.workers.map(|n| format!("{n} worker(s)")).unwrap_or_else(|| "the default number of workers".into());
    ctx.out.line(format!(
        "dispatched {} on {repo} at {}: {workers}, swarm {}",
        a.workflow,
        crate::escape::line(&git_ref),
        ctx.swarm_name
    ));
    if let Some(url) = &d.html_url {
        ctx.out.line(format!("run: {}", crate::escape::line(url)));
    }
    ctx.out.note("watch it with `git swarm runs` and the board with `git swarm status`");
    ctx.out.doc(&json!({
        "repo": repo.to_string(),
        "workflow": a.workflow,
        "ref": git_ref,
        "inputs": inputs,
        "run": d.run_id.map(|id| json!({"id": id, "url": d.html_url})),
    }));
    Ok(())
}

/// `--ref`: a branch or tag name, no white space or control characters.
fn check_ref(git_ref: Option<&str>) -> CliResult<()> {
    if let Some(r) = git_ref
        && (r.trim().is_empty() || r.chars().any(|c| c.is_control() || c == ' '))
    {
        return Err(CliError::usage(format!("--ref '{}' is not a branch or tag", crate::escape::line(r))));
    }
    Ok(())
}
