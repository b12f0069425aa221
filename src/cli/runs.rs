//! `git swarm runs`: the runs of the fleet's workflow on GitHub Actions, newest first; with `--gitlab`, the
//! pipelines of the GitLab project (`ci/gitlab.rs`).

use crate::escape::line;
use crate::github::WORKFLOW_FILE;
use crate::github::api::validate_workflow;
use serde_json::json;

use super::ci::{api_error, client, repo_slug};
use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct RunsArgs {
    /// How many runs, newest first.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    limit: u32,
    /// The GitHub repository [default: from the swarm's remote URL].
    #[arg(long, value_name = "OWNER/NAME", conflicts_with = "gitlab")]
    repo: Option<String>,
    /// The workflow file under .github/workflows/ (or its numeric id).
    #[arg(long, value_name = "FILE", default_value = WORKFLOW_FILE, conflicts_with = "gitlab")]
    workflow: String,
    /// The pipelines of a GitLab project instead (the token from GITLAB_TOKEN, the API from GITLAB_API_URL or the
    /// remote's server).
    #[arg(long)]
    gitlab: bool,
    /// The GitLab project, `group/name` or its numeric id (with --gitlab) [default: from the swarm's remote URL].
    #[arg(long, value_name = "PATH|ID", requires = "gitlab")]
    project: Option<String>,
    /// Only pipelines of this source (with --gitlab): api, trigger, web, schedule, parent_pipeline, push, …
    #[arg(long, value_name = "SOURCE", requires = "gitlab")]
    source: Option<String>,
}

pub(super) fn run(ctx: &mut Ctx, a: RunsArgs) -> CliResult<()> {
    if a.gitlab {
        return super::ci::runs_gitlab(ctx, a.project.as_deref(), a.limit, a.source.as_deref());
    }
    validate_workflow(&a.workflow).map_err(|e| CliError::usage(format!("--workflow: {e}")))?;
    let repo = repo_slug(ctx, a.repo.as_deref())?;
    let api = client(&ctx.env)?;
    let list = api.runs(&repo, &a.workflow, a.limit).map_err(api_error)?;
    let opt = |v: &Option<String>| v.as_deref().map(line).unwrap_or_else(|| "-".into());
    if list.workflow_runs.is_empty() {
        ctx.out.note(format!("no runs of {} on {repo} yet (start one with `git swarm dispatch`)", a.workflow));
    }
    for r in &list.workflow_runs {
        let state = match (&r.status, &r.conclusion) {
            (_, Some(c)) => line(c),
            (Some(s), None) => line(s),
            (None, None) => "-".into(),
        };
        ctx.out.line(format!(
            "{:<12} {:<12} {:<18} {}  {}",
            r.id,
            state,
            opt(&r.event),
            opt(&r.created_at),
            opt(&r.html_url)
        ));
    }
    let runs: Vec<_> = list
        .workflow_runs
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "number": r.run_number, "attempt": r.run_attempt, "title": r.display_title,
                "status": r.status, "conclusion": r.conclusion, "event": r.event, "branch": r.head_branch,
                "created_at": r.created_at, "updated_at": r.updated_at, "url": r.html_url,
            })
        })
        .collect();
    ctx.out.doc(&json!({"repo": repo.to_string(), "workflow": a.workflow, "total": list.total_count, "runs": runs}));
    Ok(())
}
