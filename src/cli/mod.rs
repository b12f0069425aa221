//! The command line: parsing (clap derive), the context every subcommand gets, and dispatch.
//! One file per subcommand; each has an `XArgs` struct and `run(ctx, args)`.

mod add;
mod board;
mod cancel;
mod ci;
mod claim;
mod compact;
mod completions;
mod config;
mod demo;
mod dispatch;
mod doctor;
mod done;
mod error;
mod fail;
mod frame;
mod goal;
mod hooks;
mod init;
mod list;
mod log;
mod man;
mod output;
mod ready;
mod release;
mod renew;
mod retry;
mod run;
mod runs;
mod setup;
mod show;
mod status;
mod trust;
mod up;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::environment::Environment;
use crate::model::{Kind, validate_agent};
use crate::ops::DomainError;
use crate::store::{Identity, Snapshot};
use crate::time::Timestamp;
use crate::txn::{Retry, Swarm, TxnError};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use error::{CliError, CliResult};
use output::Printer;

/// Coordinate many coding agents on one repository, with no server: a task board in a git ref, changed only by
/// compare-and-swap.
#[derive(Debug, Parser)]
#[command(name = "git-swarm", version, about, max_term_width = 100)]
#[command(propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes, before or after its name.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// Run as if started in <DIR>, like `git -C` (several combine: each is relative to the one before; an empty
    /// one changes nothing).
    #[arg(short = 'C', global = true, value_name = "DIR", action = clap::ArgAction::Append,
          value_parser = clap::builder::OsStringValueParser::new())]
    pub dir: Vec<std::ffi::OsString>,
    /// The shared remote holding the swarm: a remote's name, a URL or a path
    /// [default: $GIT_SWARM_REMOTE, else git config swarm.remote, else origin, else this repository].
    #[arg(long, global = true, value_name = "NAME-OR-URL")]
    pub remote: Option<String>,
    /// Which swarm: the ref refs/swarm/<NAME> [default: $GIT_SWARM_SWARM, else git config swarm.name, else default].
    #[arg(long, global = true, value_name = "NAME")]
    pub swarm: Option<String>,
    /// This agent's identity (letters, digits, '-', '_', '.') [default: $GIT_SWARM_AGENT, else git config swarm.agent,
    /// else user-host].
    #[arg(long, global = true, value_name = "ID")]
    pub agent: Option<String>,
    /// Machine output on stdout: one JSON document.
    #[arg(long, global = true)]
    pub json: bool,
}

impl GlobalArgs {
    /// Where the command runs: the current directory moved by every `-C` in turn, as git does (each relative to
    /// the one before; an empty one changes nothing).
    pub fn start_dir(&self) -> CliResult<PathBuf> {
        let mut dir = PathBuf::new();
        for d in self.dir.iter().filter(|d| !d.is_empty()) {
            dir = dir.join(d);
            if !dir.is_dir() {
                return Err(CliError::usage(format!("-C {}: not a directory", dir.display())));
            }
        }
        if dir.as_os_str().is_empty() {
            dir =
                std::env::current_dir().map_err(|e| CliError::io(format!("cannot read the current directory: {e}")))?;
        }
        Ok(std::path::absolute(&dir).unwrap_or(dir))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the swarm's state ref on the remote (a second run changes nothing).
    Init(init::InitArgs),
    /// Add an open task; prints its id.
    Add(add::AddArgs),
    /// List every task.
    List(list::ListArgs),
    /// Show one task.
    Show(show::ShowArgs),
    /// The tasks a claim without id could take now, best first.
    Ready(ready::ReadyArgs),
    /// Claim a task (or the best ready one); prints its id.
    Claim(claim::ClaimArgs),
    /// Extend the lease of my claim (all my claims without id).
    Renew(renew::RenewArgs),
    /// Give my claim back: the task is open again.
    Release(release::ReleaseArgs),
    /// Mark my claimed task done.
    Done(done::DoneArgs),
    /// Mark my claimed task failed (open again while attempts remain).
    Fail(fail::FailArgs),
    /// Open a failed or cancelled task again, its attempts reset.
    Retry(retry::RetryArgs),
    /// Cancel an open or claimed task: it will not be done (a holder is fenced off; `retry` opens it again).
    Cancel(cancel::CancelArgs),
    /// Set the swarm's goal and start the next cycle with a fresh root plan (also after the judge's stop).
    Goal(goal::GoalArgs),
    /// Counts by status, agents and what they hold, expired leases.
    Status(status::StatusArgs),
    /// The audit log of the swarm, newest first.
    Log(log::LogArgs),
    /// Replace the state ref's history by one root commit; the old history is kept under refs/swarm-archive/.
    Compact(compact::CompactArgs),
    /// The swarm's shared settings (swarm.toml on the state ref): show them, get, set or unset one.
    Config(config::ConfigArgs),
    /// Show what this clone's runners would run of the shared settings, and trust it (--yes).
    Trust(trust::TrustArgs),
    /// Check the swarm and this clone (a state ref rewound or deleted, stale locks, stray work trees); --fix repairs.
    Doctor(doctor::DoctorArgs),
    /// Run an agent loop: a worker, a planner or a judge.
    Run(run::RunArgs),
    /// A whole swarm on a throwaway repository with scripted agents, in under a minute.
    Demo(demo::DemoArgs),
    /// Start a local fleet (workers, planners, a judge) with a live board; Ctrl-C stops it.
    Up(up::UpArgs),
    /// Install the manual page (git swarm --help) and the bash, zsh and fish completions for this user.
    Setup(setup::SetupArgs),
    /// Print the shell completion script for bash, zsh or fish.
    Completions(completions::CompletionsArgs),
    /// Print the manual page git-swarm(1) (roff).
    #[command(hide = true)]
    Man(man::ManArgs),
    /// Where this clone's runners keep their work trees and run files, as JSON (`{"home", "base"}`): for the tests,
    /// which look into them from outside.
    #[command(name = "__places", hide = true)]
    Places,
    /// Git hooks (the Swarm-Task trailer, a claim check before push): install, uninstall, status.
    Hooks(hooks::HooksArgs),
    /// A live board in the terminal, redrawn when the state ref moves (--once: one frame).
    Watch(watch::WatchArgs),
    /// The board as one self-contained HTML page (--html <file>) or JSON (--json).
    Board(board::BoardArgs),
    /// Write the CI file of a fleet of runners: `ci github` (GitHub Actions) or `ci gitlab` (GitLab CI).
    Ci(ci::CiArgs),
    /// Start the fleet's GitHub Actions workflow (token GITHUB_TOKEN or GH_TOKEN), or with --gitlab its GitLab CI
    /// pipeline (token GITLAB_TOKEN).
    Dispatch(dispatch::DispatchArgs),
    /// The runs of the fleet's GitHub Actions workflow (or with --gitlab its GitLab pipelines), newest first.
    Runs(runs::RunsArgs),
}

/// Everything a subcommand needs: the parsed globals, the printer, and the swarm once opened.
/// Opens the command's swarm ([`Ctx::opener`]).
#[derive(Debug, Clone)]
pub struct Opener {
    dir: PathBuf,
    remote: Option<String>,
    swarm_name: String,
    transport: crate::Transport,
    env: Arc<Environment>,
}

impl Opener {
    pub fn open(&self) -> CliResult<Swarm> {
        let repo = crate::repo::discover(&self.dir, &self.env).map_err(|e| CliError::from(TxnError::from(e)))?;
        Ok(crate::open_swarm(repo, self.remote.as_deref(), &self.swarm_name, self.transport)?)
    }
}

pub struct Ctx {
    pub out: Printer,
    /// The repository until the swarm is opened, which then owns it (`swarm.local.repo`).
    repo: Option<gix::Repository>,
    /// The swarm, opened on first use and shared by every later use in the command (a command may read and
    /// transact).
    swarm: Option<std::rc::Rc<Swarm>>,
    pub swarm_name: String,
    remote: Option<String>,
    transport: crate::Transport,
    clock_offset: i64,
    pub retry: Retry,
    common_dir: PathBuf,
    agent: String,
    /// Where the command runs (`-C`, else the current directory), absolute.
    dir: PathBuf,
    /// Was the agent id given (`--agent`, `$GIT_SWARM_AGENT`, `swarm.agent`), or derived from user and host?
    agent_given: bool,
    /// `git config swarm.*` over `swarm.toml` (an error only for the commands that use it).
    git_config: Result<crate::config::Local, String>,
    /// The process environment, as it was at the start (`cli::main`).
    pub env: Arc<Environment>,
}

impl Ctx {
    fn new(global: GlobalArgs, env: Arc<Environment>) -> CliResult<Ctx> {
        let out = Printer::new(global.json);
        let dir = global.start_dir()?;
        // As git: run *in* that directory, so that relative paths (`--body-file`, `board --html`, a relative
        // `GIT_DIR`) mean what they would mean there.
        if !global.dir.is_empty() {
            std::env::set_current_dir(&dir)
                .map_err(|e| CliError::usage(format!("-C {}: cannot change into it: {e}", dir.display())))?;
        }
        let repo = crate::repo::discover(&dir, &env).map_err(|e| CliError::from(TxnError::from(e)))?;
        let cfg = repo.config_snapshot();
        let get = |key: &str| cfg.string(key).map(|v| v.to_string()).filter(|v| !v.is_empty());
        let (env_swarm, env_remote) = (env.swarm().map(String::from), env.remote().map(String::from));
        let swarm_name =
            global.swarm.clone().or(env_swarm).or_else(|| get("swarm.name")).unwrap_or_else(|| "default".into());
        crate::model::validate_swarm_name(&swarm_name).map_err(|e| CliError::usage(format!("--swarm: {e}")))?;
        let remote = global.remote.clone().or(env_remote).or_else(|| get("swarm.remote"));
        if let Some(r) = remote.as_deref().filter(|r| r.starts_with('-') || r.is_empty()) {
            return Err(CliError::usage(format!(
                "--remote '{}': not a remote name, URL or path",
                crate::escape::line(r)
            )));
        }
        let transport = match env.transport().map(Ok).or_else(|| get("swarm.transport").map(|t| t.parse())) {
            Some(t) => t.map_err(|e: String| CliError::usage(format!("swarm.transport: {e}")))?,
            None => crate::Transport::Auto,
        };
        let common_dir = repo.common_dir().to_path_buf();
        let git_config = crate::config::Local::from_git(cfg.plumbing()).map_err(|e| e.to_string());
        let clock_offset = env.clock_offset();
        // A bad agent id is a usage error for every command, not only for those that write. An empty or non-UTF-8
        // `$GIT_SWARM_AGENT` is unset (`environment`: the git hooks must not stop on it).
        let given = global.agent.clone().or_else(|| env.agent().map(String::from)).or_else(|| get("swarm.agent"));
        let agent_given = given.is_some();
        let agent = given.unwrap_or_else(|| default_agent(&common_dir, &env));
        validate_agent(&agent).map_err(|e| CliError::usage(format!("--agent: {e}")))?;
        let mut retry = Retry::default();
        retry.max_elapsed = env.max_retry().unwrap_or(retry.max_elapsed);
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Ok(Ctx {
            out,
            repo: Some(repo),
            swarm: None,
            swarm_name,
            remote,
            transport,
            clock_offset,
            retry,
            common_dir,
            agent,
            dir,
            agent_given,
            git_config,
            env,
        })
    }

    /// This clone's `git config swarm.*` settings for runners; a bad key is a usage error naming it.
    pub fn git_config(&self) -> CliResult<crate::config::Local> {
        self.git_config.clone().map_err(|e| {
            CliError::usage(e).hint("see the keys with `man git-swarm` (CONFIGURATION) or docs/configuration.md")
        })
    }

    /// This agent's id: `--agent`, `$GIT_SWARM_AGENT`, else `<user>-<host>` (validated once, in `new`).
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The id of a long-running runner: as [`Ctx::agent`] when given; else `<user>-<host>-<4 hex>`, so that two
    /// runners started in one clone without `--agent` never share an id (and a work tree, and claims).
    pub fn runner_agent(&self) -> String {
        if self.agent_given {
            return self.agent.clone();
        }
        let base: String = self.agent.chars().take(58).collect();
        format!("{base}-{:04x}", fastrand::u16(..))
    }

    pub fn now(&self) -> Timestamp {
        Timestamp::now_with_offset(self.clock_offset)
    }

    /// The clock ops see: the system clock, shifted by `GIT_SWARM_CLOCK_OFFSET` (tests skew it).
    pub fn clock(&self) -> impl Fn() -> Timestamp + use<> {
        let offset = self.clock_offset;
        move || Timestamp::now_with_offset(offset)
    }

    /// `--remote` (or `$GIT_SWARM_REMOTE`, or `git config swarm.remote`) as given.
    pub fn remote_cli(&self) -> Option<String> {
        self.remote.clone()
    }

    /// Where the command runs.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The repository the command runs in, whether the swarm is open yet or not.
    pub fn repo(&self) -> Option<&gix::Repository> {
        self.repo.as_ref().or_else(|| self.swarm.as_deref().map(|s| &s.local.repo))
    }

    /// The remote as agents should name it (`GIT_SWARM_REMOTE`): `--remote`, else `origin` when configured, else
    /// this repository's path.
    pub fn remote_arg(&self) -> String {
        if let Some(r) = &self.remote {
            return r.clone();
        }
        let has_origin = self.repo().is_some_and(|r| r.config_snapshot().string("remote.origin.url").is_some());
        if has_origin { "origin".into() } else { self.common_dir.to_string_lossy().into_owned() }
    }

    /// The swarm, opened on the first call; every later call shares it.
    pub fn swarm(&mut self) -> CliResult<std::rc::Rc<Swarm>> {
        if let Some(s) = &self.swarm {
            return Ok(std::rc::Rc::clone(s));
        }
        let repo = self.repo.take().ok_or_else(|| CliError::io("internal: the repository is gone"))?;
        let swarm =
            std::rc::Rc::new(crate::open_swarm(repo, self.remote.as_deref(), &self.swarm_name, self.transport)?);
        self.swarm = Some(std::rc::Rc::clone(&swarm));
        Ok(swarm)
    }

    /// What opens this command's swarm again, in another thread (a `Swarm` is not `Send`): one per agent of
    /// `run worker --agents`.
    pub fn opener(&self) -> Opener {
        Opener {
            dir: self.dir.clone(),
            remote: self.remote.clone(),
            swarm_name: self.swarm_name.clone(),
            transport: self.transport,
            env: Arc::clone(&self.env),
        }
    }

    /// The identity written on state commits: the configured user, else the agent.
    pub fn identity(swarm: &Swarm, agent: &str) -> Identity {
        let cfg = swarm.local.repo.config_snapshot();
        let name = cfg.string("user.name").map(|v| v.to_string()).filter(|v| !v.trim().is_empty());
        let email = cfg.string("user.email").map(|v| v.to_string()).filter(|v| !v.trim().is_empty());
        Identity {
            name: name.unwrap_or_else(|| agent.to_string()),
            email: email.unwrap_or_else(|| format!("{agent}@git-swarm.invalid")),
        }
    }

    /// Run one op through the transaction loop, reporting unreadable files on the way.
    pub fn transact<T>(
        &mut self,
        op: impl FnMut(&Snapshot, Timestamp, &str) -> Result<(crate::ops::Change, T), DomainError>,
    ) -> CliResult<(std::rc::Rc<Swarm>, crate::txn::Committed<T>)> {
        self.transact_on(crate::txn::Reads::Live, op)
    }

    /// [`Ctx::transact`] for an op that reads only part of the board ([`crate::txn::Reads`]).
    pub fn transact_on<T>(
        &mut self,
        reads: crate::txn::Reads<'_>,
        op: impl FnMut(&Snapshot, Timestamp, &str) -> Result<(crate::ops::Change, T), DomainError>,
    ) -> CliResult<(std::rc::Rc<Swarm>, crate::txn::Committed<T>)> {
        let mut op = op;
        let agent = self.agent().to_string();
        let swarm = self.swarm()?;
        let who = Self::identity(&swarm, &agent);
        let clock = self.clock();
        // Remember what the last attempt could not read, to report it whether the op went through or not.
        let mut seen = Vec::new();
        let res = swarm.transact_on(reads, &self.retry, &who, &clock, |snap, now| {
            seen.clone_from(&snap.problems);
            op(snap, now, &agent)
        });
        self.out.problems(&seen);
        Ok((swarm, res?))
    }

    /// [`Ctx::transact`] for an op that writes the settings ([`Swarm::transact_settings`]): it may replace a
    /// `swarm.toml` that cannot be read. What the board's settings were is in the snapshot the op gets.
    pub fn transact_settings<T>(
        &mut self,
        mut op: impl FnMut(&Snapshot, Timestamp, &str) -> Result<(crate::ops::Change, T), DomainError>,
    ) -> CliResult<(std::rc::Rc<Swarm>, crate::txn::Committed<T>)> {
        let agent = self.agent().to_string();
        let swarm = self.swarm()?;
        let who = Self::identity(&swarm, &agent);
        let clock = self.clock();
        let mut seen = Vec::new();
        let res = swarm.transact_settings(&self.retry, &who, &clock, |snap, now| {
            seen.clone_from(&snap.problems);
            op(snap, now, &agent)
        });
        // The broken `swarm.toml` this op replaced is no problem to report.
        seen.retain(|p| p.path != "swarm.toml" || res.is_err());
        self.out.problems(&seen);
        Ok((swarm, res?))
    }

    /// Read the newest board, reporting unreadable files.
    pub fn read(&mut self, full: bool) -> CliResult<Snapshot> {
        let swarm = self.swarm()?;
        let snap = swarm.read(full)?;
        self.out.problems(&snap.problems);
        Ok(snap)
    }

    /// The local record of the epoch this agent claimed a task under, so that a later `done`/`fail` of a stale
    /// holder is fenced off even when it has the same agent id.
    fn held_path(&self, agent: &str, id: &str) -> PathBuf {
        self.common_dir.join("swarm").join("held").join(&self.swarm_name).join(agent).join(id)
    }

    pub fn remember_epoch(&self, agent: &str, id: &str, epoch: u64) {
        let p = self.held_path(agent, id);
        // Best effort: without the record, fencing falls back to the agent id alone.
        if let Some(parent) = p.parent()
            && std::fs::create_dir_all(parent).is_ok()
        {
            let _ = std::fs::write(&p, epoch.to_string());
        }
    }

    pub fn recalled_epoch(&self, agent: &str, id: &str) -> Option<u64> {
        std::fs::read_to_string(self.held_path(agent, id)).ok()?.trim().parse().ok()
    }

    /// Drop the record of `epoch`, unless another claim of this agent has replaced it meanwhile.
    pub fn forget_epoch(&self, agent: &str, id: &str, epoch: Option<u64>) {
        if epoch.is_none() || self.recalled_epoch(agent, id) == epoch {
            let _ = std::fs::remove_file(self.held_path(agent, id));
        }
    }

    /// Refuse a holder op (`claim`, `done`, `fail`, `release`) under the agent id of a runner that runs in this
    /// clone: its agent inherits the id, and an agent that finishes its own task would have it done without its
    /// code (the landing then refused). `renew` stays open to the agent's hooks.
    pub fn refuse_a_runners_id(&self, agent: &str, what: &str) -> CliResult<()> {
        // Inside a runner's agent run (its outbox is set; in a sandbox the runner's pid file is not even visible).
        let in_run = self.env.outbox().is_some() && self.env.agent() == Some(agent);
        let pid = match crate::runner::live_runner(&crate::runner::Places::of(&self.common_dir, &self.env), agent) {
            Some(pid) => pid.to_string(),
            None if in_run => "its own".to_string(),
            None => return Ok(()),
        };
        Err(CliError::new(
            error::Exit::Refused,
            format!(
                "{what}: {agent} is the agent id of a runner that runs in this clone (pid {pid}); its claims are the \
                 runner's to claim, finish and give back"
            ),
        )
        .hint("an agent of a runner just exits, its hand-off written: the runner lands or fails its task")
        .hint("to act by hand, stop that runner first, or use another id (--agent)"))
    }

    /// The shape of `release`, `done` and `fail`: an op by the holder of `id`, under `epoch` (the flag, else the
    /// recorded one), then the task printed as `<verb> <id>` or as JSON.
    pub fn holder_op(
        &mut self,
        id: &str,
        epoch: Option<u64>,
        verb: &str,
        op: impl Fn(
            &crate::ops::Board,
            &crate::ops::Actor,
            Option<u64>,
        ) -> Result<(crate::ops::Change, crate::model::Task), DomainError>,
    ) -> CliResult<std::rc::Rc<Swarm>> {
        let agent = self.agent().to_string();
        let what = match verb {
            "failed" => "fail",
            "released" => "release",
            v => v,
        };
        self.refuse_a_runners_id(&agent, what)?;
        let epoch = epoch.or_else(|| self.recalled_epoch(&agent, id));
        let (swarm, c) = self.transact_on(crate::txn::Reads::Tasks(&[id]), |snap, now, agent| {
            let actor = crate::ops::Actor { agent: agent.to_string(), now };
            op(&snap.board, &actor, epoch)
        })?;
        self.forget_epoch(&agent, id, c.value.result.as_ref().and_then(|r| r.epoch).or(epoch));
        let t = c.value;
        let after = match (verb, t.status) {
            ("failed", crate::model::Status::Open) => " (open again for another attempt)".to_string(),
            ("failed", _) => " (no attempts left)".to_string(),
            _ => String::new(),
        };
        self.out.line(format!("{verb} {}: {}{after}", t.id, crate::escape::line(&t.title)));
        self.out.doc(&output::task_json(&t, self.now()));
        Ok(swarm)
    }

    /// The commit a revision names in this repository (`HEAD`, a branch, a short or full id). A revision that
    /// names nothing, or no commit, is a usage error naming `flag`.
    pub fn resolve_commit(&self, rev: &str, flag: &str) -> CliResult<gix::ObjectId> {
        let bad = |why: String| {
            CliError::usage(format!("{flag} '{}': {why}", crate::escape::line(rev)))
                .hint("give a commit of this repository: HEAD, a branch, or a commit id")
        };
        if rev.trim().is_empty() || rev.starts_with('-') {
            return Err(bad("not a revision".into()));
        }
        // git's own revision syntax, in the directory the command runs in (its work tree's HEAD).
        crate::runner::git::rev_parse(&self.dir, rev).map_err(|_| bad("no such commit in this repository".into()))
    }
}

/// The default agent id: `<user>-<host>-<clone>`, where `<clone>` is a short random id kept in this clone
/// (`<git dir>/swarm/clone-id`, made on first use): two clones on one machine are two agents, and every work tree
/// of one clone is the same agent (a claim made in one can be finished from another).
fn default_agent(common_dir: &std::path::Path, env: &Environment) -> String {
    let base = user_host(env);
    match clone_id(common_dir) {
        Some(c) => format!("{}-{c}", base.chars().take(55).collect::<String>()),
        None => base,
    }
}

/// This clone's short id (4 hex digits), made once; `None` when the git directory cannot hold it (read-only). The
/// file names the git directory it was made in: a clone copied with its `.git` (`cp -a`, an image, a snapshot) gets
/// an id of its own, or the copy and the original would be one agent.
fn clone_id(common_dir: &std::path::Path) -> Option<String> {
    let file = common_dir.join("swarm").join("clone-id");
    let here = std::fs::canonicalize(common_dir).unwrap_or_else(|_| common_dir.to_path_buf());
    let valid = |s: &str| (4..=16).contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit());
    let read = |text: &str| -> Option<String> {
        let mut lines = text.lines();
        let id = lines.next()?.trim().to_string();
        let made_in = lines.next().map(str::trim).filter(|p| !p.is_empty());
        (valid(&id) && made_in.is_none_or(|p| std::path::Path::new(p) == here)).then_some(id)
    };
    let existing = std::fs::read_to_string(&file).ok();
    if let Some(id) = existing.as_deref().and_then(read) {
        return Some(id);
    }
    let dir = file.parent()?;
    std::fs::create_dir_all(dir).ok()?;
    let id = format!("{:04x}", fastrand::u16(..));
    // Written whole, then linked into place: a reader never sees it half written, and of two commands that make
    // it at once, the first link wins for both. A copied or broken file is replaced (renamed over).
    let tmp = dir.join(format!("clone-id.{}.tmp", std::process::id()));
    std::fs::write(&tmp, format!("{id}\n{}\n", here.display())).ok()?;
    let placed = if existing.is_some() { std::fs::rename(&tmp, &file) } else { std::fs::hard_link(&tmp, &file) };
    let _ = std::fs::remove_file(&tmp);
    match placed {
        Ok(()) => Some(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::read_to_string(&file).ok().as_deref().and_then(read)
        }
        Err(_) => None,
    }
}

fn user_host(env: &Environment) -> String {
    let user = env.user().unwrap_or("agent");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| env.host().map(String::from))
        .unwrap_or_else(|| "host".into());
    let clean = |s: &str| -> String {
        s.trim().chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '-' }).collect()
    };
    let id = format!("{}-{}", clean(user), clean(&host));
    let id: String = id.trim_matches('-').chars().take(64).collect();
    if id.is_empty() { "agent".into() } else { id }
}

/// Read a text argument from a file (`-`: stdin), naming the flag in errors.
pub fn read_text_arg(path: &std::path::Path, flag: &str) -> CliResult<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| CliError::io(format!("{flag} -: cannot read stdin: {e}")))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| CliError::io(format!("{flag} {}: {e}", path.display())))
}

/// Parse a `--kind`.
pub fn parse_kind(s: &str) -> Result<Kind, String> {
    match s {
        "work" => Ok(Kind::Work),
        "plan" => Ok(Kind::Plan),
        _ => Err(format!("unknown kind '{s}' (work or plan)")),
    }
}

/// Parse a `--lease` or other duration flag.
pub fn parse_lease(s: &str) -> Result<Duration, String> {
    crate::time::parse_duration(s)
}

/// Parse a command flag (`--exec`): a command that is only blanks would run nothing (and fail every task).
pub fn parse_command(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("the command is empty: give the agent's command line, e.g. --exec 'claude -p'".into());
    }
    Ok(s.to_string())
}

/// Parse a task id argument.
pub fn parse_id(s: &str) -> Result<String, String> {
    crate::model::validate_id(s)?;
    Ok(s.to_string())
}

/// The entry point of the binary.
pub fn main() -> ExitCode {
    // The trampoline an agent starts through (`agent::enter`): no command line to parse, no output but why not.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == crate::agent::enter::ARG) {
        let why = match crate::agent::enter::Enter::parse(&args[2..]) {
            Ok(e) => e.exec(),
            Err(why) => why,
        };
        eprintln!("git-swarm: cannot start the agent: {why}");
        // What a command that could not start exits with: the runner gives the claim back and stops.
        return ExitCode::from(126);
    }
    // Shown as `git swarm` in usage lines; set here, not on the type, so that completions are generated for the
    // binary's own name (`git-swarm`).
    let matches = Cli::command().bin_name("git swarm").try_get_matches();
    let subcommand = matches.as_ref().ok().and_then(|m| m.subcommand_name()).map(str::to_string);
    let parsed = matches.and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            // Scripts that asked for JSON get one document, even when the command line is wrong.
            if code == 2 && std::env::args_os().any(|a| a == "--json") {
                let message = e.kind().to_string();
                CliError::usage(message).report_json_only();
            }
            return ExitCode::from(code);
        }
    };
    // The process environment, read once, here (`environment`): the engine's part of it installed, a bad value
    // of a knob stops the command before anything runs.
    let (env, bad) = Environment::from_vars(std::env::vars_os());
    let engine = git_swarm_core::Process::from_vars(&env.utf8_vars()).map(git_swarm_core::install).err();
    let mut bad: Vec<(String, String)> = bad.iter().map(|b| (b.to_string(), b.fix())).collect();
    bad.extend(engine.map(|why| (why, "unset it, or give it a valid value".into())));
    if let Some((why, fix)) = bad.first() {
        if !matches!(cli.command, Command::Hooks(_)) {
            CliError::usage(why).hint(fix).report(cli.global.json);
            return ExitCode::from(2);
        }
        // A hook's handler never fails a commit or an agent for it: said, and the defaults then.
        bad.iter().for_each(|(why, _)| Printer::new(false).warn(format!("git swarm: {why} (taken as unset)")));
    }
    let (json, profile) = (cli.global.json, env.profile().map(PathBuf::from));
    let started = std::time::Instant::now();
    let code = match run(cli, Arc::new(env)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.report(json);
            ExitCode::from(e.code())
        }
    };
    if let Some(file) = profile {
        write_profile(&file, subcommand.as_deref(), started.elapsed());
    }
    code
}

/// Append where this process's ops spent their time (`crate::txn::profile`) to `file`, one JSON line: the
/// subcommand (nothing else of the command line: it may hold task text), the wall time, per phase the milliseconds and how many times, the attempts lost and
/// published. Best effort: a profile that cannot be written changes nothing of the command's outcome.
fn write_profile(file: &std::path::Path, command: Option<&str>, wall: std::time::Duration) {
    use std::io::Write;
    let p = crate::txn::profile::totals();
    let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
    let mut line = serde_json::json!({
        "command": command,
        "wall_ms": ms(wall),
        "lost": p.lost,
        "published": p.published,
        "contenders": p.contenders,
    });
    for (phase, spent, times) in p.phases {
        line[phase.name()] = serde_json::json!({ "ms": ms(spent), "n": times });
    }
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        // One write of the whole line: processes appending at once do not interleave.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn run(cli: Cli, env: Arc<Environment>) -> CliResult<()> {
    // The demo makes its own repositories: it runs anywhere, in a repository or not.
    // These need no repository: the demo makes its own, the others write or print files about the tool itself.
    match cli.command {
        Command::Demo(a) => return demo::run(&Printer::new(cli.global.json), a, &env),
        Command::Setup(a) => return setup::run(&Printer::new(cli.global.json), a, &env),
        Command::Completions(a) => return completions::run(a),
        Command::Man(a) => return man::run(a),
        Command::Places => {
            let repo =
                crate::repo::discover(&cli.global.start_dir()?, &env).map_err(|e| CliError::io(e.to_string()))?;
            let places = crate::runner::Places::of(repo.common_dir(), &env);
            println!("{}", serde_json::json!({"home": places.home, "base": places.base}));
            return Ok(());
        }
        _ => {}
    }
    // The hooks' handlers make their own context: a broken setup must not fail a commit or an agent.
    if let Command::Hooks(a) = cli.command {
        return hooks::run(cli.global, a, env);
    }
    let mut ctx = Ctx::new(cli.global, env)?;
    match cli.command {
        Command::Init(a) => init::run(&mut ctx, a),
        Command::Add(a) => add::run(&mut ctx, a),
        Command::List(a) => list::run(&mut ctx, a),
        Command::Show(a) => show::run(&mut ctx, a),
        Command::Ready(a) => ready::run(&mut ctx, a),
        Command::Claim(a) => claim::run(&mut ctx, a),
        Command::Renew(a) => renew::run(&mut ctx, a),
        Command::Release(a) => release::run(&mut ctx, a),
        Command::Done(a) => done::run(&mut ctx, a),
        Command::Fail(a) => fail::run(&mut ctx, a),
        Command::Retry(a) => retry::run(&mut ctx, a),
        Command::Cancel(a) => cancel::run(&mut ctx, a),
        Command::Goal(a) => goal::run(&mut ctx, a),
        Command::Status(a) => status::run(&mut ctx, a),
        Command::Log(a) => log::run(&mut ctx, a),
        Command::Compact(a) => compact::run(&mut ctx, a),
        Command::Doctor(a) => doctor::run(&mut ctx, a),
        Command::Config(a) => config::run(&mut ctx, a),
        Command::Trust(a) => trust::run(&mut ctx, a),
        Command::Run(a) => run::run(&mut ctx, a),
        Command::Up(a) => up::run(&mut ctx, a),
        Command::Watch(a) => watch::run(&mut ctx, a),
        Command::Board(a) => board::run(&mut ctx, a),
        Command::Ci(a) => ci::run(&mut ctx, a),
        Command::Dispatch(a) => dispatch::run(&mut ctx, a),
        Command::Runs(a) => runs::run(&mut ctx, a),
        Command::Demo(_)
        | Command::Setup(_)
        | Command::Completions(_)
        | Command::Man(_)
        | Command::Places
        | Command::Hooks(_) => Ok(()),
    }
}
