//! `git swarm ci github`: write the GitHub Actions workflow of a fleet (`.github/workflows/git-swarm.yml`);
//! `git swarm ci gitlab` (`ci/gitlab.rs`): the GitLab CI pipeline of one. Also the pieces `dispatch` and `runs`
//! share: which repository, which token, and the forge's errors as `CliError`s; and what both generators share:
//! the install flags, the refusal of local paths and the push budget's warning.

mod gitlab;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub(super) use gitlab::{dispatch_gitlab, runs_gitlab};

use crate::github::api::{ApiError, Client, DEFAULT_API_URL};
use crate::github::install::{self, Build, Source, sh_word};
use crate::github::workflow::{self, Options};
use crate::github::{RepoSlug, WORKFLOW_FILE, budget, portable};
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct CiArgs {
    #[command(subcommand)]
    cmd: CiCmd,
}

#[derive(Debug, clap::Subcommand)]
enum CiCmd {
    /// Write .github/workflows/git-swarm.yml: a matrix of worker jobs running `git swarm run worker --until-idle`
    /// (optional planner and judge jobs), started with `git swarm dispatch` or on a schedule.
    Github(GithubArgs),
    /// Write .gitlab-ci.yml (or, with --include, .gitlab/git-swarm.yml): a dispatched pipeline starts a child
    /// pipeline of `parallel` worker jobs running `git swarm run worker --until-idle` (optional planner and judge),
    /// one fleet per swarm at a time; started with `git swarm dispatch --gitlab`, a schedule or the web.
    Gitlab(gitlab::GitlabArgs),
}

/// How the runners get git-swarm and the agents' CLIs: the flags every `ci <forge>` takes.
#[derive(Debug, clap::Args)]
pub(super) struct InstallArgs {
    /// The shell command that installs git-swarm on a runner when the cache misses, instead of the default
    /// [default: cargo install --locked --git <repository> --rev <the commit of this binary> git-swarm].
    #[arg(long, value_name = "CMD", conflicts_with_all = ["install_from", "install_rev", "from_crates_io"])]
    install: Option<String>,
    /// The git repository the runners build git-swarm from [default: the package's repository].
    #[arg(long, value_name = "GIT-URL")]
    install_from: Option<String>,
    /// The commit (40 hex digits) the runners build [default: the commit this binary was built from].
    #[arg(long, value_name = "COMMIT")]
    install_rev: Option<String>,
    /// Install git-swarm from crates.io (`cargo install --locked git-swarm --version <this version>`): only once
    /// that version is published there.
    #[arg(long, conflicts_with_all = ["install_from", "install_rev"])]
    from_crates_io: bool,
    /// Install this preset's CLI on the runners at the release git-swarm is tested with (repeatable; `none`: no
    /// CLI) [default: the presets the swarm's settings name].
    #[arg(long, value_name = "PRESET")]
    agent_cli: Vec<String>,
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
    #[command(flatten)]
    inst: InstallArgs,
    /// A shell command each runner job runs after the checkout, before the runner, e.g. a toolchain or the
    /// project's dependencies (repeatable). Each runs in a shell of its own, without the agents' secrets: an
    /// `export` is lost; add a folder to the runner's PATH with `echo DIR >> "$GIT_SWARM_PATH"`, a variable with
    /// `echo NAME=value >> "$GIT_SWARM_ENV"`.
    #[arg(long, value_name = "CMD")]
    setup: Vec<String>,
    /// A repository secret handed to the agents as an environment variable of that name (repeatable)
    /// [default: ANTHROPIC_API_KEY, OPENAI_API_KEY].
    #[arg(long, value_name = "NAME")]
    secret: Vec<String>,
    /// The time limit of each job, in minutes (GitHub-hosted runners stop a job at 360).
    #[arg(long, value_name = "MINUTES", default_value_t = 120)]
    timeout: u32,
    /// The GitHub environment (Settings → Environments) of the jobs that run agents: its secrets and protection
    /// rules apply to them.
    #[arg(long, value_name = "NAME")]
    environment: Option<String>,
    /// The runner label of every job.
    #[arg(long, value_name = "LABEL", default_value = "ubuntu-latest")]
    runs_on: String,
    /// Pin the shared settings even when they name paths of this machine (a temporary folder, a home directory,
    /// this clone) or a server on loopback, which a runner may not have.
    #[arg(long)]
    allow_local_paths: bool,
    /// Overwrite an existing, different workflow file.
    #[arg(long)]
    force: bool,
    /// Print the workflow instead of writing it.
    #[arg(long)]
    stdout: bool,
}

pub(super) fn run(ctx: &mut Ctx, args: CiArgs) -> CliResult<()> {
    match args.cmd {
        CiCmd::Github(a) => github(ctx, a),
        CiCmd::Gitlab(a) => gitlab::run(ctx, a),
    }
}

/// The command line that writes this workflow again (for its header comment).
fn regenerate_line(ctx: &Ctx, a: &GithubArgs) -> String {
    let mut words = vec!["git swarm".to_string()];
    if ctx.swarm_name != "default" {
        words.push(format!("--swarm {}", sh_word(&ctx.swarm_name)));
    }
    words.push(format!("ci github --workers {}", a.workers));
    if a.agents_per_job != 1 {
        words.push(format!("--agents-per-job {}", a.agents_per_job));
    }
    if let Some(s) = &a.schedule {
        words.push(format!("--schedule {}", sh_word(s)));
    }
    for (on, flag) in [(a.planner, "--planner"), (a.judge, "--judge")] {
        if on {
            words.push(flag.into());
        }
    }
    a.inst.regenerate_words(&mut words);
    for s in &a.setup {
        words.push(format!("--setup {}", sh_word(s)));
    }
    for s in &a.secret {
        words.push(format!("--secret {}", sh_word(s)));
    }
    if a.timeout != 120 {
        words.push(format!("--timeout {}", a.timeout));
    }
    if a.runs_on != "ubuntu-latest" {
        words.push(format!("--runs-on {}", sh_word(&a.runs_on)));
    }
    if let Some(e) = &a.environment {
        words.push(format!("--environment {}", sh_word(e)));
    }
    if a.allow_local_paths {
        words.push("--allow-local-paths".into());
    }
    words.push("--force".into());
    words.join(" ")
}

impl InstallArgs {
    /// These flags as the header's command line writes them again.
    pub(super) fn regenerate_words(&self, words: &mut Vec<String>) {
        if let Some(i) = &self.install {
            words.push(format!("--install {}", sh_word(i)));
        }
        if let Some(u) = &self.install_from {
            words.push(format!("--install-from {}", sh_word(u)));
        }
        if let Some(r) = &self.install_rev {
            words.push(format!("--install-rev {}", sh_word(r)));
        }
        if self.from_crates_io {
            words.push("--from-crates-io".into());
        }
        for p in &self.agent_cli {
            words.push(format!("--agent-cli {}", sh_word(p)));
        }
    }
}

/// Where the runners install git-swarm from, with what the user must know about it said on stderr: the commit
/// built and where from, a dirty build, a URL no hosted runner reaches, crates.io that must have the version.
pub(super) fn install_source(ctx: &Ctx, a: &InstallArgs) -> CliResult<Source> {
    let build = Build::this();
    if let Some(cmd) = &a.install {
        return Ok(Source::Command(cmd.clone()));
    }
    if a.from_crates_io {
        ctx.out.warn(format!(
            "the runners install git-swarm {v} from crates.io (`cargo install --locked git-swarm --version {v}`): \
            it must be published there, or every job fails at its first step",
            v = build.version
        ));
        return Ok(Source::CratesIo { version: build.version });
    }
    if a.install_from.is_none() && a.install_rev.is_none() && build.packaged {
        // Built from the published package: that version is on crates.io.
        return Ok(Source::CratesIo { version: build.version });
    }
    let url = a.install_from.clone().unwrap_or_else(|| build.repository.clone());
    install::validate_git_url(&url).map_err(|m| CliError::usage(format!("--install-from: {m}")))?;
    let rev = match &a.install_rev {
        Some(r) if install::is_commit(r) => r.to_ascii_lowercase(),
        Some(r) => {
            return Err(CliError::usage(format!(
                "--install-rev: '{}' is not a commit: give its 40 hex digits (`git rev-parse <rev>`)",
                crate::escape::line(r)
            )));
        }
        None => match &build.commit {
            Some(c) => {
                if build.dirty {
                    ctx.out.warn(format!(
                        "this git-swarm was built from {c} with uncommitted changes: the runners build {c} from {} \
                        without them (commit, push and rebuild, or name a commit with --install-rev)",
                        crate::escape::line(&url)
                    ));
                }
                c.clone()
            }
            None => {
                return Err(CliError::usage(
                    "this git-swarm does not know the commit it was built from (it was not built from a git work \
                    tree), so the workflow cannot install the same on the runners",
                )
                .hint("name the commit to build with --install-rev <40 hex digits> (and --install-from <git URL>)")
                .hint("or --from-crates-io once this version is published there, or --install '<command>'"));
            }
        },
    };
    if install::is_local_url(&url) {
        ctx.out.warn(format!(
            "the runners build git-swarm from {}, a path on this machine: a hosted runner cannot reach it",
            crate::escape::line(&url)
        ));
    }
    ctx.out.note(format!(
        "the runners build git-swarm {} from {} (cargo install --git): that commit must be pushed there",
        &rev[..12],
        crate::escape::line(&url)
    ));
    Ok(Source::Git { url, rev })
}

/// The commands that install the agents' CLIs: `--agent-cli` (`none`: no CLI), else the presets the pinned
/// settings name (one with no registry is left to `--setup`, with a warning).
pub(super) fn agent_clis(ctx: &Ctx, a: &InstallArgs, lines: &[String]) -> CliResult<Vec<String>> {
    if a.agent_cli.iter().any(|p| p == "none") {
        if a.agent_cli.len() > 1 {
            return Err(CliError::usage("--agent-cli none goes alone"));
        }
        return Ok(Vec::new());
    }
    if !a.agent_cli.is_empty() {
        return a
            .agent_cli
            .iter()
            .map(|p| install::agent_cli(p).map_err(|m| CliError::usage(format!("--agent-cli: {m}"))))
            .collect();
    }
    let mut out = Vec::new();
    for p in install::presets_named(lines) {
        match install::agent_cli(&p) {
            Ok(cmd) => out.push(cmd),
            Err(m) => ctx.out.warn(format!("the settings name the preset {}: {m}", crate::escape::line(&p))),
        }
    }
    Ok(out)
}

/// Refuse (exit 2) pinned settings that name paths of this machine, unless `--allow-local-paths`.
/// `what`: the file that would pin them (`workflow`, `pipeline`).
pub(super) fn refuse_local_names(ctx: &Ctx, what: &str, allow_local_paths: bool, lines: &[String]) -> CliResult<()> {
    let clone = crate::repo::discover(ctx.dir(), &ctx.env).ok().and_then(|r| r.workdir().map(PathBuf::from));
    let found = portable::local_names(lines, clone.as_deref(), ctx.env.home());
    if found.is_empty() {
        return Ok(());
    }
    let list = found
        .iter()
        .map(|l| format!("{} names {}", l.key, crate::escape::line(&l.found)))
        .collect::<Vec<_>>()
        .join("; ");
    if allow_local_paths {
        ctx.out.warn(format!("pinned anyway (--allow-local-paths): {list}; every runner must have them"));
        return Ok(());
    }
    Err(CliError::usage(format!(
        "the shared settings this {what} would pin name what only this machine has, which no runner has: {list}"
    ))
    .hint(
        "use a path relative to the repository (commit the script: agents run in a work tree of the clone), a \
        command on the runners' PATH, or install it with --setup; change it with `git swarm config set <key> <value>`",
    )
    .hint("or pin it anyway with --allow-local-paths (a self-hosted runner that has it)"))
}

fn github(ctx: &mut Ctx, a: GithubArgs) -> CliResult<()> {
    let mut o = Options::new(a.workers);
    o.agents_per_job = a.agents_per_job;
    o.schedule = a.schedule.clone();
    o.planner = a.planner;
    o.judge = a.judge;
    o.swarm = ctx.swarm_name.clone();
    o.install = install_source(ctx, &a.inst)?;
    o.setup = a.setup.clone();
    if !a.secret.is_empty() {
        o.secrets = a.secret.clone();
    }
    o.timeout_minutes = a.timeout;
    o.runs_on = a.runs_on.clone();
    o.environment = a.environment.clone();
    o.regenerate = regenerate_line(ctx, &a);
    (o.trust, o.agent_clis) = pin_settings(ctx, "workflow", a.allow_local_paths, &a.inst)?;
    let text = workflow::render(&o).map_err(|e| CliError::usage(e.to_string()))?;

    warn_push_budget(ctx, &budget::GITHUB, a.workers, a.agents_per_job);
    if a.stdout {
        if ctx.out.json {
            ctx.out.doc(&json!({"path": null, "written": false, "workflow": text}));
        } else {
            ctx.out.line(text.trim_end());
        }
        return Ok(());
    }
    let rel = Path::new(".github").join("workflows").join(WORKFLOW_FILE);
    let (shown, written) = write_generated(ctx, &rel, &text, a.force, "workflow", &[])?;
    if written {
        ctx.out
            .note("next: commit and push it to the default branch, add the agents' secrets, then `git swarm dispatch`");
    }
    let mut jobs = vec!["prepare", "worker"];
    if a.planner {
        jobs.push("planner");
    }
    if a.judge {
        jobs.push("judge");
    }
    ctx.out.doc(&json!({"path": shown, "written": written, "workers": a.workers,
        "agents_per_job": a.agents_per_job, "jobs": jobs, "install": o.install.command(),
        "agent_clis": o.agent_clis}));
    Ok(())
}

/// The shared settings the fleet runs, pinned by their digest (a later change needs the file regenerated:
/// docs/github-actions.md, *Trust*), after the refusal of what names this machine; and the commands that install the
/// agents' CLIs. Without a readable swarm nothing is pinned, which a warning says. `what`: the file (`workflow`).
pub(super) fn pin_settings(
    ctx: &mut Ctx,
    what: &str,
    allow_local_paths: bool,
    inst: &InstallArgs,
) -> CliResult<(Option<String>, Vec<String>)> {
    match ctx.swarm().and_then(|s| super::trust::document(&s)) {
        Ok(doc) => {
            refuse_local_names(ctx, what, allow_local_paths, &doc.lines)?;
            Ok((Some(doc.digest), agent_clis(ctx, inst, &doc.lines)?))
        }
        Err(e) => {
            let clis = agent_clis(ctx, inst, &[])?;
            ctx.out.warn(format!(
                "the swarm's settings cannot be read ({}): the {what} pins no trust digest, and its runners will \
                 not run shared agent commands; run this again after `git swarm init`",
                e.message
            ));
            Ok((None, clis))
        }
    }
}

/// Write a generated file at `rel` (under the top of the work tree): nothing when it already holds `text`, a refusal
/// (exit 2) when it holds something else and not `force`, with `hints` after the usual one. Its path as shown, and
/// whether it was written (`wrote …` or `… is up to date` on stdout).
pub(super) fn write_generated(
    ctx: &Ctx,
    rel: &Path,
    text: &str,
    force: bool,
    what: &str,
    hints: &[&str],
) -> CliResult<(String, bool)> {
    let repo = crate::repo::discover(ctx.dir(), &ctx.env).map_err(|e| CliError::io(e.to_string()))?;
    let top = repo
        .workdir()
        .map(PathBuf::from)
        .ok_or_else(|| CliError::usage("this repository has no work tree (bare): use --stdout, or run in a clone"))?;
    let path = top.join(rel);
    let shown = path.display().to_string();
    let written = match std::fs::read_to_string(&path) {
        Ok(old) if old == text => false,
        Ok(_) if !force => {
            let mut e = CliError::usage(format!("{shown} exists and differs from the {what} asked for"))
                .hint("overwrite it with --force, or see the new one with --stdout");
            for h in hints {
                e = e.hint(*h);
            }
            return Err(e);
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(CliError::io(format!("{shown}: {e}"))),
    };
    if written {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| CliError::io(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(&path, text).map_err(|e| CliError::io(format!("{shown}: {e}")))?;
        ctx.out.line(format!("wrote {shown}"));
    } else {
        ctx.out.line(format!("{shown} is up to date"));
    }
    Ok((shown, written))
}

/// The push budget of a fleet of `workers` jobs of `agents_per_job` agents on `forge`, at 5-minute tasks and the
/// default lease (10m), counting the benchmark's contended races: a warning when the fleet can push faster.
pub(super) fn warn_push_budget(ctx: &Ctx, forge: &budget::Forge, workers: u32, agents_per_job: u32) {
    let (task, lease) = (Duration::from_secs(5 * 60), Duration::from_secs(10 * 60));
    let most = forge.max_workers(task, lease, budget::ATTEMPTS_CONTENDED);
    if agents_per_job > 1 {
        // Jobs of several agents push in batches, paced by one share each: the budget holds while a job's wait
        // stays under a sixth of the lease (docs/github-actions.md, "More than 100 agents").
        let jobs = forge.max_batching_jobs(lease);
        if u64::from(workers) > jobs {
            ctx.out.warn(format!(
                "{workers} jobs of {agents_per_job} agents: under a budget of {:.0} pushes a minute each job waits {} s \
                between pushes, past a sixth of the default lease (10m), so the fleet can push faster than the budget; \
                at most {jobs} such jobs, or a longer lease (`git swarm config set lease 30m`): see {}",
                forge.pushes_per_minute,
                (60.0 * f64::from(workers) / forge.pushes_per_minute).round(),
                forge.doc
            ));
        }
    } else if u64::from(workers) > most {
        let rate = budget::pushes_per_worker_minute(task, lease, budget::ATTEMPTS_CONTENDED) * f64::from(workers);
        ctx.out.warn(format!(
            "{workers} workers with 5-minute tasks push about {rate:.0} times a minute; {} (about {most} such \
             workers): see the push budget in {}",
            forge.says, forge.doc
        ));
    }
}

/// The GitHub repository of the swarm: `--repo`, else the swarm's remote when it is on github.com.
pub(super) fn repo_slug(ctx: &Ctx, flag: Option<&str>) -> CliResult<RepoSlug> {
    if let Some(r) = flag {
        return r.parse().map_err(|e: String| CliError::usage(format!("--repo: {e}")));
    }
    let remote = ctx.remote_cli().unwrap_or_else(|| "origin".into());
    let repo = crate::repo::discover(ctx.dir(), &ctx.env).map_err(|e| CliError::io(e.to_string()))?;
    let url = repo
        .config_snapshot()
        .string(format!("remote.{remote}.url").as_str())
        .map(|u| u.to_string())
        .unwrap_or_else(|| remote.clone());
    RepoSlug::from_remote_url(&url).ok_or_else(|| {
        CliError::usage(format!(
            "cannot tell the GitHub repository: the remote '{}' is {}, not a github.com URL",
            crate::escape::line(&remote),
            crate::escape::line(&crate::secrets::redact(&url))
        ))
        .hint("name it with --repo owner/name")
    })
}

/// A client of the API at `$GITHUB_API_URL` (else api.github.com) with `$GITHUB_TOKEN` (else `$GH_TOKEN`).
pub(super) fn client(env: &crate::environment::Environment) -> CliResult<Client> {
    let token = env.github_token().ok_or(ApiError::NoToken).map_err(api_error)?;
    Client::new(env.github_api_url().unwrap_or(DEFAULT_API_URL), token).map_err(api_error)
}

/// GitHub's errors with what to do about them.
pub(super) fn api_error(e: ApiError) -> CliError {
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
