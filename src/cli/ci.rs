//! `git swarm ci github`: write the GitHub Actions workflow of a fleet (`.github/workflows/git-swarm.yml`).
//! Also the pieces `dispatch` and `runs` share: which repository, which token, and GitHub's errors as `CliError`s.

use std::path::PathBuf;
use std::time::Duration;

use git_swarm::github::api::{ApiError, Client, DEFAULT_API_URL};
use git_swarm::github::workflow::{self, Options};
use git_swarm::github::{RepoSlug, WORKFLOW_FILE, budget};
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub struct CiArgs {
    #[command(subcommand)]
    cmd: CiCmd,
}

#[derive(Debug, clap::Subcommand)]
enum CiCmd {
    /// Write .github/workflows/git-swarm.yml: a matrix of worker jobs running `git swarm run worker --until-idle`
    /// (optional planner and judge jobs), started with `git swarm dispatch` or on a schedule.
    Github(GithubArgs),
}

#[derive(Debug, clap::Args)]
struct GithubArgs {
    /// Worker jobs (the default of the workflow's `workers` input; a schedule uses it).
    #[arg(long, value_name = "N", default_value_t = 4)]
    workers: u32,
    /// Agents in each worker job (`git swarm run worker --agents <n>`): the fleet is the jobs × this, and their
    /// landings go in batches (GitHub limits concurrent jobs, not agents).
    #[arg(long, value_name = "N", default_value_t = 1)]
    agents_per_job: u32,
    /// Also start on this cron schedule (five fields, UTC), e.g. '0 */6 * * *'.
    #[arg(long, value_name = "CRON")]
    schedule: Option<String>,
    /// Add a planner job (`git swarm run planner --until-idle`; the workflow gets a `goal` input).
    #[arg(long)]
    planner: bool,
    /// Add a judge job (`git swarm run judge --until-idle`).
    #[arg(long)]
    judge: bool,
    /// The shell command that installs git-swarm on a runner when the cache misses
    /// [default: cargo install --locked git-swarm --version <this version>].
    #[arg(long, value_name = "CMD")]
    install: Option<String>,
    /// A shell command each runner job runs before the runner, e.g. installing the agent's CLI (repeatable).
    #[arg(long, value_name = "CMD")]
    setup: Vec<String>,
    /// A repository secret handed to the agents as an environment variable of that name (repeatable)
    /// [default: ANTHROPIC_API_KEY, OPENAI_API_KEY].
    #[arg(long, value_name = "NAME")]
    secret: Vec<String>,
    /// The time limit of each job, in minutes (GitHub-hosted runners stop a job at 360).
    #[arg(long, value_name = "MINUTES", default_value_t = 120)]
    timeout: u32,
    /// The runner label of every job.
    #[arg(long, value_name = "LABEL", default_value = "ubuntu-latest")]
    runs_on: String,
    /// Overwrite an existing, different workflow file.
    #[arg(long)]
    force: bool,
    /// Print the workflow instead of writing it.
    #[arg(long)]
    stdout: bool,
}

pub fn run(ctx: &mut Ctx, args: CiArgs) -> CliResult<()> {
    match args.cmd {
        CiCmd::Github(a) => github(ctx, a),
    }
}

/// `'text'` for a POSIX shell.
fn sh_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+".contains(c)) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The command line that writes this workflow again (for its header comment).
fn regenerate_line(ctx: &Ctx, a: &GithubArgs) -> String {
    let mut words = vec!["git swarm".to_string()];
    if ctx.swarm_name != "default" {
        words.push(format!("--swarm {}", sh_quote(&ctx.swarm_name)));
    }
    words.push(format!("ci github --workers {}", a.workers));
    if a.agents_per_job != 1 {
        words.push(format!("--agents-per-job {}", a.agents_per_job));
    }
    if let Some(s) = &a.schedule {
        words.push(format!("--schedule {}", sh_quote(s)));
    }
    for (on, flag) in [(a.planner, "--planner"), (a.judge, "--judge")] {
        if on {
            words.push(flag.into());
        }
    }
    if let Some(i) = &a.install {
        words.push(format!("--install {}", sh_quote(i)));
    }
    for s in &a.setup {
        words.push(format!("--setup {}", sh_quote(s)));
    }
    for s in &a.secret {
        words.push(format!("--secret {}", sh_quote(s)));
    }
    if a.timeout != 120 {
        words.push(format!("--timeout {}", a.timeout));
    }
    if a.runs_on != "ubuntu-latest" {
        words.push(format!("--runs-on {}", sh_quote(&a.runs_on)));
    }
    words.push("--force".into());
    words.join(" ")
}

fn github(ctx: &mut Ctx, a: GithubArgs) -> CliResult<()> {
    let mut o = Options::new(a.workers);
    o.agents_per_job = a.agents_per_job;
    o.schedule = a.schedule.clone();
    o.planner = a.planner;
    o.judge = a.judge;
    o.swarm = ctx.swarm_name.clone();
    if let Some(i) = &a.install {
        o.install = i.clone();
    }
    o.setup = a.setup.clone();
    if !a.secret.is_empty() {
        o.secrets = a.secret.clone();
    }
    o.timeout_minutes = a.timeout;
    o.runs_on = a.runs_on.clone();
    o.regenerate = regenerate_line(ctx, &a);
    // The fleet runs the shared settings as they are now, pinned by their digest; a later change needs this file
    // regenerated (docs/github-actions.md, *Trust*).
    o.trust = match ctx.swarm().and_then(|s| super::trust::document(&s)) {
        Ok(doc) => Some(doc.digest),
        Err(e) => {
            ctx.out.warn(format!(
                "the swarm's settings cannot be read ({}): the workflow pins no trust digest, and its runners will \
                 not run shared agent commands; run this again after `git swarm init`",
                e.message
            ));
            None
        }
    };
    let text = workflow::render(&o).map_err(|e| CliError::usage(e.to_string()))?;

    // The push budget at 5-minute tasks and the default lease (10m), counting the benchmark's contended races.
    let (task, lease) = (Duration::from_secs(5 * 60), Duration::from_secs(10 * 60));
    let most = budget::max_workers(task, lease, budget::ATTEMPTS_CONTENDED);
    if a.agents_per_job > 1 {
        // Jobs of several agents push in batches, paced by one share each: the budget holds while a job's wait
        // stays under a sixth of the lease (docs/github-actions.md, "More than 100 agents").
        let jobs = budget::max_batching_jobs(lease);
        if u64::from(a.workers) > jobs {
            ctx.out.warn(format!(
                "{} jobs of {} agents: under a budget of {:.0} pushes a minute each job waits {} s between pushes,                  past a sixth of the default lease (10m), so the fleet can push faster than the budget; at most {jobs}                  such jobs, or a longer lease (`git swarm config set lease 30m`): see docs/github-actions.md",
                a.workers,
                a.agents_per_job,
                budget::PUSHES_PER_MINUTE,
                (60.0 * f64::from(a.workers) / budget::PUSHES_PER_MINUTE).round()
            ));
        }
    } else if u64::from(a.workers) > most {
        let rate = budget::pushes_per_worker_minute(task, lease, budget::ATTEMPTS_CONTENDED) * f64::from(a.workers);
        ctx.out.warn(format!(
            "{} workers with 5-minute tasks push about {rate:.0} times a minute; GitHub recommends at most {:.0} a \
             repository (about {most} such workers): see the push budget in docs/github-actions.md",
            a.workers,
            budget::PUSHES_PER_MINUTE
        ));
    }
    if a.stdout {
        if ctx.out.json {
            ctx.out.doc(&json!({"path": null, "written": false, "workflow": text}));
        } else {
            ctx.out.line(text.trim_end());
        }
        return Ok(());
    }
    let repo = git_swarm::discover(ctx.dir()).map_err(|e| CliError::io(e.to_string()))?;
    let top = repo
        .workdir()
        .map(PathBuf::from)
        .ok_or_else(|| CliError::usage("this repository has no work tree (bare): use --stdout, or run in a clone"))?;
    let path = top.join(".github").join("workflows").join(WORKFLOW_FILE);
    let shown = path.display().to_string();
    let written = match std::fs::read_to_string(&path) {
        Ok(old) if old == text => false,
        Ok(_) if !a.force => {
            return Err(CliError::usage(format!("{shown} exists and differs from the workflow asked for"))
                .hint("overwrite it with --force, or see the new one with --stdout"));
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(CliError::io(format!("{shown}: {e}"))),
    };
    if written {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| CliError::io(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(&path, &text).map_err(|e| CliError::io(format!("{shown}: {e}")))?;
        ctx.out.line(format!("wrote {shown}"));
        ctx.out
            .note("next: commit and push it to the default branch, add the agents' secrets, then `git swarm dispatch`");
    } else {
        ctx.out.line(format!("{shown} is up to date"));
    }
    let mut jobs = vec!["prepare", "worker"];
    if a.planner {
        jobs.push("planner");
    }
    if a.judge {
        jobs.push("judge");
    }
    ctx.out.doc(&json!({"path": shown, "written": written, "workers": a.workers,
        "agents_per_job": a.agents_per_job, "jobs": jobs}));
    Ok(())
}

/// The GitHub repository of the swarm: `--repo`, else the swarm's remote when it is on github.com.
pub fn repo_slug(ctx: &Ctx, flag: Option<&str>) -> CliResult<RepoSlug> {
    if let Some(r) = flag {
        return r.parse().map_err(|e: String| CliError::usage(format!("--repo: {e}")));
    }
    let remote = ctx.remote_cli().unwrap_or_else(|| "origin".into());
    let repo = git_swarm::discover(ctx.dir()).map_err(|e| CliError::io(e.to_string()))?;
    let url = repo
        .config_snapshot()
        .string(format!("remote.{remote}.url").as_str())
        .map(|u| u.to_string())
        .unwrap_or_else(|| remote.clone());
    RepoSlug::from_remote_url(&url).ok_or_else(|| {
        CliError::usage(format!(
            "cannot tell the GitHub repository: the remote '{}' is {}, not a github.com URL",
            git_swarm::escape::line(&remote),
            git_swarm::escape::line(&git_swarm::remote::redact(&url))
        ))
        .hint("name it with --repo owner/name")
    })
}

/// A client of the API at `$GITHUB_API_URL` (else api.github.com) with `$GITHUB_TOKEN` (else `$GH_TOKEN`).
pub fn client() -> CliResult<Client> {
    let token = ["GITHUB_TOKEN", "GH_TOKEN"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .ok_or(ApiError::NoToken)
        .map_err(api_error)?;
    let base = std::env::var("GITHUB_API_URL").ok().filter(|v| !v.trim().is_empty());
    Client::new(base.as_deref().unwrap_or(DEFAULT_API_URL), &token).map_err(api_error)
}

/// GitHub's errors with what to do about them.
pub fn api_error(e: ApiError) -> CliError {
    let msg = e.to_string();
    match e {
        ApiError::NoToken => CliError::usage(msg).hint(
            "a token with Actions read and write (fine-grained) or the repo and workflow scopes (classic); \
             `export GH_TOKEN=$(gh auth token)` takes the GitHub CLI's",
        ),
        ApiError::BadBase { .. } => CliError::usage(msg),
        ApiError::Unauthorized { .. } => {
            CliError::io(msg).hint("the token is wrong, expired or revoked: make a new one and set GITHUB_TOKEN")
        }
        ApiError::Forbidden { .. } => CliError::io(msg).hint(
            "the token may not start workflows here: it needs Actions read and write (fine-grained) or the repo and \
             workflow scopes (classic), and the repository must allow Actions (Settings → Actions)",
        ),
        ApiError::RateLimited { .. } => CliError::io(msg).hint("run the command again after that time"),
        ApiError::NotFound { .. } => CliError::io(msg)
            .hint("the workflow file must be committed on the default branch (or the --ref given) before it can run")
            .hint("and the token must have access to the repository (a private one hides itself as 404)"),
        ApiError::Unprocessable { .. } => CliError::io(msg).hint(
            "the workflow must have a workflow_dispatch trigger with these inputs (regenerate it with \
             `git swarm ci github`, commit and push), and the ref must exist",
        ),
        _ => CliError::io(msg),
    }
}
