//! `git swarm ci gitlab`: write the GitLab CI pipeline of a fleet (`.gitlab-ci.yml`, or `.gitlab/git-swarm.yml` for
//! a project's own `.gitlab-ci.yml` to include). Also `dispatch --gitlab` and `runs --gitlab`: which project, which
//! API and token, and GitLab's errors as `CliError`s.

use std::collections::BTreeMap;
use std::path::Path;

use crate::escape::line;
use crate::fleet::budget;
use crate::fleet::install::sh_word;
use crate::gitlab::api::{ApiError, Client, validate_source};
use crate::gitlab::pipeline::{self, MAX_WORKERS, Options, PUSH_TOKEN};
use crate::gitlab::{CI_FILE, DEFAULT_API_URL, INCLUDE_FILE, Project, RemoteProject};
use serde_json::json;

use super::{InstallArgs, install_source, pin_settings, warn_push_budget, write_generated};
use crate::cli::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct GitlabArgs {
    /// Worker jobs (`parallel`, 1 to 200): the most a dispatch can start (SWARM_WORKERS picks fewer).
    #[arg(long, value_name = "N", default_value_t = 4)]
    workers: u32,
    /// Agents in each worker job (`git swarm run worker --agents <n>`): the fleet is the jobs × this, and their
    /// landings go in batches.
    #[arg(long, value_name = "N", default_value_t = 1)]
    agents_per_job: u32,
    /// Add a planner job (`git swarm run planner --until-idle`; a dispatch's SWARM_GOAL gives it a goal).
    #[arg(long)]
    planner: bool,
    /// Add a judge job (`git swarm run judge --until-idle`).
    #[arg(long)]
    judge: bool,
    #[command(flatten)]
    inst: InstallArgs,
    /// A shell command each runner job runs before the runner, e.g. the project's dependencies (repeatable; without
    /// the secrets in its environment).
    #[arg(long, value_name = "CMD")]
    setup: Vec<String>,
    /// A CI/CD variable the agents use (their API key), kept out of the builds, installs and setup commands
    /// (repeatable) [default: ANTHROPIC_API_KEY, OPENAI_API_KEY].
    #[arg(long, value_name = "NAME")]
    secret: Vec<String>,
    /// The time limit of each runner job, in minutes (the prepare job's is at most 60).
    #[arg(long, value_name = "MINUTES", default_value_t = 120)]
    timeout: u32,
    /// The image of the jobs that run agents (`none`: no image, for shell executors). It needs git, and Node 22 for
    /// the npm agent CLIs.
    #[arg(long, value_name = "IMAGE", default_value = "node:22-bookworm")]
    image: String,
    /// The image of the prepare job, which builds git-swarm (`none`: --image): a Rust toolchain on the same system
    /// as --image, whose jobs run the binary it built.
    #[arg(long, value_name = "IMAGE", default_value = "rust:1-bookworm")]
    build_image: String,
    /// A runner tag every job asks for (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// The GitLab environment of the jobs that run agents (`action: access`): CI/CD variables scoped to it reach
    /// those jobs alone.
    #[arg(long, value_name = "NAME")]
    environment: Option<String>,
    /// `[run] sandbox` of the runner jobs: `required` (no agent runs uncontained, where it could read the runner's
    /// push credential) or `auto`.
    #[arg(long, value_name = "MODE", default_value = "required")]
    sandbox: String,
    /// Write .gitlab/git-swarm.yml for the project's own .gitlab-ci.yml to include, instead of .gitlab-ci.yml; its
    /// fleet starts only when a pipeline has SWARM_FLEET=1 (`dispatch --gitlab` sets it).
    #[arg(long)]
    include: bool,
    /// Pin the shared settings even when they name paths of this machine or a server on loopback.
    #[arg(long)]
    allow_local_paths: bool,
    /// Overwrite an existing, different file.
    #[arg(long)]
    force: bool,
    /// Print the pipeline instead of writing it.
    #[arg(long)]
    stdout: bool,
}

/// The command line that writes this file again (for its header comment).
fn regenerate_line(ctx: &Ctx, a: &GitlabArgs) -> String {
    let mut words = vec!["git swarm".to_string()];
    if ctx.swarm_name != "default" {
        words.push(format!("--swarm {}", sh_word(&ctx.swarm_name)));
    }
    words.push(format!("ci gitlab --workers {}", a.workers));
    if a.agents_per_job != 1 {
        words.push(format!("--agents-per-job {}", a.agents_per_job));
    }
    for (on, flag) in [(a.planner, "--planner"), (a.judge, "--judge"), (a.include, "--include")] {
        if on {
            words.push(flag.into());
        }
    }
    a.inst.regenerate_words(&mut words);
    for (flag, values) in [("--setup", &a.setup), ("--secret", &a.secret), ("--tag", &a.tags)] {
        for v in values {
            words.push(format!("{flag} {}", sh_word(v)));
        }
    }
    if a.timeout != 120 {
        words.push(format!("--timeout {}", a.timeout));
    }
    if a.image != "node:22-bookworm" {
        words.push(format!("--image {}", sh_word(&a.image)));
    }
    if a.build_image != "rust:1-bookworm" {
        words.push(format!("--build-image {}", sh_word(&a.build_image)));
    }
    if let Some(e) = &a.environment {
        words.push(format!("--environment {}", sh_word(e)));
    }
    if a.sandbox != "required" {
        words.push(format!("--sandbox {}", sh_word(&a.sandbox)));
    }
    if a.allow_local_paths {
        words.push("--allow-local-paths".into());
    }
    words.push("--force".into());
    words.join(" ")
}

pub(in crate::cli) fn run(ctx: &mut Ctx, a: GitlabArgs) -> CliResult<()> {
    let none = |s: &str| (s != "none").then(|| s.to_string());
    let mut o = Options::new(a.workers);
    o.agents_per_job = a.agents_per_job;
    o.planner = a.planner;
    o.judge = a.judge;
    o.swarm = ctx.swarm_name.clone();
    o.install = install_source(ctx, &a.inst)?;
    o.setup = a.setup.clone();
    if !a.secret.is_empty() {
        o.secrets = a.secret.clone();
    }
    o.timeout_minutes = a.timeout;
    o.image = none(&a.image);
    o.build_image = none(&a.build_image);
    o.tags = a.tags.clone();
    o.environment = a.environment.clone();
    o.sandbox = a.sandbox.clone();
    o.include = a.include;
    o.path = if a.include { INCLUDE_FILE } else { CI_FILE }.to_string();
    o.regenerate = regenerate_line(ctx, &a);
    (o.trust, o.agent_clis) = pin_settings(ctx, "pipeline", a.allow_local_paths, &a.inst)?;
    let text = pipeline::render(&o).map_err(|e| CliError::usage(e.to_string()))?;
    warn_push_budget(ctx, &budget::GITLAB, a.workers, a.agents_per_job);
    if a.sandbox == "auto" {
        ctx.out.warn(
            "--sandbox auto: on a runner without bubblewrap the agents run uncontained, where they can read the \
             runner's environment (its push credential among it) through /proc",
        );
    }
    if a.stdout {
        if ctx.out.json {
            ctx.out.doc(&json!({"path": null, "written": false, "pipeline": text}));
        } else {
            ctx.out.line(text.trim_end());
        }
        return Ok(());
    }
    let hint = "or write .gitlab/git-swarm.yml instead with --include, and include it from your .gitlab-ci.yml";
    let hints: &[&str] = if a.include { &[] } else { &[hint] };
    let (shown, written) = write_generated(ctx, Path::new(&o.path), &text, a.force, "pipeline", hints)?;
    if a.include {
        let top = crate::repo::discover(ctx.dir(), &ctx.env).ok().and_then(|r| r.workdir().map(Path::to_path_buf));
        let main = top.map(|t| std::fs::read_to_string(t.join(CI_FILE)).unwrap_or_default()).unwrap_or_default();
        if !main.contains(INCLUDE_FILE) {
            ctx.out.note(format!(
                "add it to your {CI_FILE}: `include: [{{local: {INCLUDE_FILE}}}]` (its jobs are in the default \
                 stages build and test, which your `stages:` must list)"
            ));
        }
    }
    if written {
        ctx.out.note(format!(
            "next: commit and push it to the default branch, add the masked CI/CD variable {PUSH_TOKEN} (a project \
             access token with write_repository) and the agents' keys, then `git swarm dispatch --gitlab`"
        ));
    }
    let mut jobs = vec!["git-swarm", "prepare", "worker"];
    if a.planner {
        jobs.push("planner");
    }
    if a.judge {
        jobs.push("judge");
    }
    ctx.out.doc(&json!({"path": shown, "written": written, "workers": a.workers,
        "agents_per_job": a.agents_per_job, "jobs": jobs, "install": o.install.command(),
        "agent_clis": o.agent_clis, "include": a.include}));
    Ok(())
}

/// The GitLab project of the swarm and the API beside it: `--project`, else the swarm's remote's URL (any GitLab
/// server: the API is derived from its host); `GITLAB_API_URL` over the derived API.
fn project_of(ctx: &Ctx, flag: Option<&str>) -> CliResult<(Project, String)> {
    let env_api = ctx.env.gitlab_api_url().map(String::from);
    let remote = ctx.remote_cli().unwrap_or_else(|| "origin".into());
    let url = crate::repo::discover(ctx.dir(), &ctx.env)
        .ok()
        .and_then(|r| r.config_snapshot().string(format!("remote.{remote}.url").as_str()).map(|u| u.to_string()))
        .unwrap_or_else(|| remote.clone());
    let from_remote = RemoteProject::from_remote_url(&url);
    let api =
        env_api.or_else(|| from_remote.as_ref().map(|r| r.api.clone())).unwrap_or_else(|| DEFAULT_API_URL.to_string());
    if let Some(p) = flag {
        let project = p.parse().map_err(|e: String| CliError::usage(format!("--project: {e}")))?;
        return Ok((project, api));
    }
    match from_remote {
        Some(r) => Ok((r.project, api)),
        None => Err(CliError::usage(format!(
            "cannot tell the GitLab project: the remote '{}' is {}, not the URL of a project on a GitLab server",
            line(&remote),
            line(&crate::secrets::redact(&url))
        ))
        .hint("name it with --project group/name (or its numeric id), and the server with GITLAB_API_URL")),
    }
}

/// A client of `api` with `$GITLAB_TOKEN`.
fn client(api: &str, env: &crate::environment::Environment) -> CliResult<Client> {
    let token = env.gitlab_token().ok_or(ApiError::NoToken).map_err(api_error)?;
    Client::new(api, token).map_err(api_error)
}

/// GitLab's errors with what to do about them.
fn api_error(e: ApiError) -> CliError {
    let msg = e.to_string();
    match e {
        ApiError::NoToken => CliError::usage(msg).hint(
            "a personal or project access token with the `api` scope whose user may run pipelines (Developer); \
             `export GITLAB_TOKEN=$(glab config get token)` takes the GitLab CLI's",
        ),
        ApiError::BadBase { .. } => CliError::usage(msg),
        ApiError::Unauthorized { .. } => {
            CliError::io(msg).hint("the token is wrong, expired or revoked: make a new one and set GITLAB_TOKEN")
        }
        ApiError::Forbidden { .. } => CliError::io(msg).hint(
            "the token needs the `api` scope, and its user the Developer role (pipelines on a protected branch need \
             the right to merge or push there)",
        ),
        ApiError::NotFound { .. } => CliError::io(msg)
            .hint("check --project (group/name) and the server (GITLAB_API_URL)")
            .hint("a private project that the token cannot see answers 404 too"),
        ApiError::Refused { .. } => CliError::io(msg).hint(
            "the ref must exist, and the pipeline file (git swarm ci gitlab) must be committed there: with no job \
             that its rules let run, GitLab creates no pipeline",
        ),
        ApiError::RateLimited { .. } => CliError::io(msg).hint("run the command again after that time"),
        _ => CliError::io(msg),
    }
}

/// `git swarm dispatch --gitlab`: a pipeline on `git_ref` (else the default branch) with `SWARM_FLEET=1`,
/// `SWARM_WORKERS` and `SWARM_GOAL` (`POST /projects/:id/pipeline`).
pub(in crate::cli) fn dispatch_gitlab(
    ctx: &mut Ctx,
    project: Option<&str>,
    git_ref: Option<String>,
    workers: Option<u32>,
    goal: Option<String>,
) -> CliResult<()> {
    if let Some(n) = workers
        && (n == 0 || n > MAX_WORKERS)
    {
        return Err(CliError::usage(format!("--workers {n} is not between 1 and {MAX_WORKERS} (GitLab's `parallel`)")));
    }
    let (project, api) = project_of(ctx, project)?;
    // The token is checked before any request is made.
    let api = client(&api, &ctx.env)?;
    let git_ref = match git_ref {
        Some(r) => r,
        None => api.default_branch(&project).map_err(api_error)?,
    };
    let mut variables = BTreeMap::new();
    variables.insert("SWARM_FLEET".to_string(), "1".to_string());
    if let Some(n) = workers {
        variables.insert("SWARM_WORKERS".to_string(), n.to_string());
    }
    if let Some(g) = goal.filter(|g| !g.trim().is_empty()) {
        variables.insert("SWARM_GOAL".to_string(), g);
    }
    let p = api.create_pipeline(&project, &git_ref, &variables).map_err(api_error)?;
    let workers = workers.map(|n| format!("{n} worker(s)")).unwrap_or_else(|| "the file's number of workers".into());
    ctx.out.line(format!(
        "started pipeline {} on {project} at {}: {workers}, swarm {}",
        p.id,
        line(&git_ref),
        ctx.swarm_name
    ));
    if let Some(url) = &p.web_url {
        ctx.out.line(format!("pipeline: {}", line(url)));
    }
    ctx.out.note("watch it with `git swarm runs --gitlab` and the board with `git swarm status`");
    ctx.out.doc(&json!({
        "project": project.to_string(), "api": api.base(), "ref": git_ref, "variables": variables,
        "pipeline": {"id": p.id, "iid": p.iid, "status": p.status, "url": p.web_url},
    }));
    Ok(())
}

/// `git swarm runs --gitlab`: the newest pipelines of the project (of one `source` when given).
pub(in crate::cli) fn runs_gitlab(
    ctx: &mut Ctx,
    project: Option<&str>,
    limit: u32,
    source: Option<&str>,
) -> CliResult<()> {
    if let Some(s) = source {
        validate_source(s).map_err(|e| CliError::usage(format!("--source: {e}")))?;
    }
    let (project, api) = project_of(ctx, project)?;
    let api = client(&api, &ctx.env)?;
    let list = api.pipelines(&project, limit, source).map_err(api_error)?;
    let opt = |v: &Option<String>| v.as_deref().map(line).unwrap_or_else(|| "-".into());
    if list.is_empty() {
        ctx.out.note(format!("no pipelines of {project} yet (start one with `git swarm dispatch --gitlab`)"));
    }
    for p in &list {
        ctx.out.line(format!(
            "{:<12} {:<12} {:<16} {}  {}",
            p.id,
            opt(&p.status),
            opt(&p.source),
            opt(&p.created_at),
            opt(&p.web_url)
        ));
    }
    let pipelines: Vec<_> = list
        .iter()
        .map(|p| {
            json!({"id": p.id, "iid": p.iid, "status": p.status, "source": p.source, "ref": p.git_ref, "sha": p.sha,
                "created_at": p.created_at, "updated_at": p.updated_at, "url": p.web_url})
        })
        .collect();
    ctx.out.doc(&json!({"project": project.to_string(), "pipelines": pipelines}));
    Ok(())
}
