//! The runner: long-running loops that drive agents through the board — workers that land their own code,
//! planners (and sub-planners) that file tasks, a judge that ends cycles.
//!
//! A runner is one agent identity in one clone. It talks to the swarm only through [`Swarm`] (`txn`), runs agents
//! through [`crate::agent`], and does its git work in work trees of its own ([`Places`], outside the git
//! directory), never in the user's. It does no terminal I/O: what happens is reported as [`Event`]s to the caller.

mod baseline;
mod claim;
pub mod contained;
pub mod desk;
pub mod git;
pub mod goal;
pub mod judge;
mod landing;
pub mod outbox;
pub mod planner;
pub mod planted;
pub mod prompts;
mod propose;
pub mod rebase;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gix::ObjectId;

use crate::agent::{self, Backend};
use crate::model::{Config, Kind, Status, Task};
use crate::ops::{self, Actor, Board, Change, DomainError};
use crate::store::{Identity, Snapshot, Store};
use crate::time::Timestamp;
use crate::txn::{Committed, Reach, Retry, Swarm, TxnError};
use crate::usage::Usage;

pub use crate::config::{Role, RunSettings};

/// What a runner reports while it works.
#[derive(Debug, Clone)]
pub enum Event {
    Claimed {
        task: String,
        title: String,
        epoch: u64,
        kind: Kind,
    },
    AgentStarted {
        task: String,
        what: &'static str,
    },
    AgentExited {
        task: String,
        exit: String,
        secs: f64,
    },
    Renewed {
        task: String,
        until: Timestamp,
    },
    Landed {
        task: String,
        commit: String,
        lost_races: u32,
        exit_to_landed: Duration,
        next: Option<String>,
    },
    Failed {
        task: String,
        reason: String,
        attempts_left: bool,
    },
    Released {
        task: String,
    },
    LostClaim {
        task: String,
        why: String,
    },
    KeptAside {
        task: String,
        refname: String,
    },
    Conflict {
        task: String,
        files: Vec<String>,
        attempt: u32,
    },
    Proposed {
        plan: String,
        count: usize,
    },
    PlanDone {
        plan: String,
        rounds: u32,
    },
    Verdict {
        cycle: u64,
        verdict: Verdict,
        reasons: String,
    },
    Waiting {
        why: String,
    },
    Warning(String),
    /// What the runner did with the swarm's pull/merge request (`[forge]`): opened, merged, taken in, ready.
    Forge(String),
}

pub use crate::model::{CycleRecord, Verdict};

/// Why a runner stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// `--once` found nothing to claim.
    NothingReady,
    /// `--once` did its task, or `--max-tasks` were done.
    Done,
    /// `--until-idle`: nothing ready and no live claim.
    Idle,
    /// The judge said stop (cycle n).
    SwarmStopped { cycle: u64 },
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// The running cycle spent its budget (`[run.budget]`): no more claims until a new cycle.
    BudgetSpent { why: String },
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Txn(#[from] TxnError),
    #[error(transparent)]
    Git(#[from] git::GitError),
    #[error(transparent)]
    Agent(#[from] agent::AgentError),
    #[error("swarm.toml: {0}")]
    Settings(String),
    #[error("no agent is configured for the {role} role: pass --exec, or set [roles.{role}] in swarm.toml")]
    NoAgent { role: Role },
    /// The agent cannot start on this machine (found before a claim, or it exited 126/127): nothing is spent.
    #[error("{role}: {error}")]
    CannotStart { role: Role, error: agent::CannotStart },
    #[error("{0}")]
    Setup(String),
    /// The shared settings this runner would run are not trusted by its clone (`crate::trust`): nothing claimed.
    #[error(
        "the swarm's shared settings are not trusted in this clone (digest {short}): {}",
        changes.iter().take(6).cloned().collect::<Vec<_>>().join("; ")
    )]
    Untrusted { short: String, digest: String, changes: Vec<String> },
    /// Another runner of this clone runs under the same agent id (it holds the id's pid file locked).
    #[error("a runner with the agent id {agent} already runs in this clone{}", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    AlreadyRunning { agent: String, pid: Option<u32> },
    /// A request that cannot be met as asked (exit 2 in the CLI).
    #[error("{0}")]
    Usage(String),
}

/// How a runner loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Until the judge says stop, or a signal.
    #[default]
    Forever,
    /// One task; [`RunEnd::NothingReady`] when there is none.
    Once,
    /// Until nothing is ready and no claim is live.
    UntilIdle,
}

/// Everything a runner needs.
pub struct Runner<'a> {
    pub swarm: &'a Swarm,
    pub agent: String,
    pub who: Identity,
    pub clock: &'a dyn Fn() -> Timestamp,
    pub retry: Retry,
    /// Set by Ctrl-C / SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// `<git common dir>/swarm`.
    pub home: PathBuf,
    /// What `GIT_SWARM_REMOTE` tells agents (the remote as the user named it).
    pub remote_env: String,
    /// `--exec`: the agent command for this runner, whatever the config says.
    pub exec: Option<String>,
    /// `--check`.
    pub check: Option<String>,
    pub events: &'a mut dyn FnMut(Event),
    /// Git identity for commits the runner makes, when the repository has none configured.
    pub commit_ident: Vec<(String, String)>,
    /// This clone's `git config swarm.*` settings, over `swarm.toml`'s.
    pub git_config: crate::config::Local,
    /// What this runner found out about its agents' CLIs (versions), once.
    pub probes: agent::Probes,
    /// The lock on this runner's pid file, held while it runs ([`Runner::setup`]): no second runner of this clone
    /// can take the same agent id (its work tree and its agent's process group).
    pub pid_lock: Option<nix::fcntl::Flock<std::fs::File>>,
    /// The digests of shared settings this clone trusts (`git config swarm.trusted`; `crate::trust`).
    pub trusted: Vec<String>,
    /// What this runner's claims have spent, and the budgets it keeps.
    pub spent: Spent,
    /// The landing desk this runner shares with the other agents of its process (`run worker --agents <n>`):
    /// its landings and idle claims are published in batches with theirs ([`desk`]).
    pub desk: Option<Arc<desk::Desk>>,
    /// How it contains the agents it starts (`[run] sandbox`…), as of the settings it read last ([`contained`]).
    pub contain: contained::Policy,
}

/// What a runner's claims have spent so far, attempt by attempt (agent runs and conflict runs), and the budgets of
/// the settings it read last.
#[derive(Debug, Default)]
pub struct Spent {
    attempts: std::sync::Mutex<std::collections::BTreeMap<(String, u64), Attempt>>,
    budgets: std::sync::Mutex<(crate::usage::Limit, crate::usage::Limit)>,
}

#[derive(Debug, Default)]
struct Attempt {
    /// What the attempt's finished runs reported.
    ended: Option<Usage>,
    /// The run going on.
    live: Option<agent::LiveUsage>,
}

impl Spent {
    /// What the attempt `epoch` of `task` has spent so far (its finished runs and the one going on).
    pub fn of(&self, task: &str, epoch: u64) -> Option<Usage> {
        let map = self.attempts.lock().ok()?;
        let a = map.get(&(task.to_string(), epoch))?;
        let live = a.live.as_ref().and_then(|l| l.lock().ok().and_then(|u| *u));
        crate::usage::plus(a.ended, live)
    }

    /// A run of the attempt starts: what it spends is watched, and it stops at the task's budget (what the task's
    /// ended attempts spent, `prior`, counts).
    pub fn watch(
        &self,
        task: &str,
        epoch: u64,
        prior: Option<Usage>,
    ) -> (agent::LiveUsage, Option<(crate::usage::Limit, Usage)>) {
        let live: agent::LiveUsage = Default::default();
        let mut ended = None;
        if let Ok(mut map) = self.attempts.lock() {
            let a = map.entry((task.to_string(), epoch)).or_default();
            a.live = Some(Arc::clone(&live));
            ended = a.ended;
        }
        let limit = self.budgets.lock().map(|b| b.0).unwrap_or_default();
        let budget = limit.is_set().then(|| (limit, crate::usage::plus(prior, ended).unwrap_or_default()));
        (live, budget)
    }

    /// The run is over: what it reported joins the attempt's.
    pub fn ended(&self, task: &str, epoch: u64, usage: Option<Usage>) {
        if let Ok(mut map) = self.attempts.lock()
            && let Some(a) = map.get_mut(&(task.to_string(), epoch))
        {
            a.live = None;
            a.ended = crate::usage::plus(a.ended, usage);
        }
    }

    /// The attempt is over (recorded on the board, or lost).
    pub fn forget(&self, task: &str, epoch: u64) {
        if let Ok(mut map) = self.attempts.lock() {
            map.remove(&(task.to_string(), epoch));
        }
    }

    /// The task budget and the cycle budget of the settings read last.
    pub fn budgets(&self) -> (crate::usage::Limit, crate::usage::Limit) {
        self.budgets.lock().map(|b| *b).unwrap_or_default()
    }
}

pub(crate) use crate::ops::cycle::budget_spent as cycle_budget_spent;

impl Runner<'_> {
    pub(crate) fn emit(&mut self, e: Event) {
        (self.events)(e);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Where this clone's runners keep their work trees and run files.
    pub fn places(&self) -> Places {
        Places::of(&self.common_dir())
    }

    pub fn worktree(&self) -> PathBuf {
        self.places().worktree(&self.agent)
    }

    pub(crate) fn log_file(&self) -> PathBuf {
        self.home.join("logs").join(format!("{}.log", self.agent))
    }

    pub fn run_dir(&self) -> PathBuf {
        self.places().run_dir(&self.agent)
    }

    pub fn common_dir(&self) -> PathBuf {
        self.swarm.local.repo.common_dir().to_path_buf()
    }

    /// One op through the transaction loop, as this runner's agent.
    pub fn transact<T>(
        &self,
        op: impl FnMut(&Snapshot, &Actor) -> Result<(Change, T), DomainError>,
    ) -> Result<Committed<T>, TxnError> {
        self.transact_with(&self.retry, op)
    }

    fn transact_with<T>(
        &self,
        retry: &Retry,
        mut op: impl FnMut(&Snapshot, &Actor) -> Result<(Change, T), DomainError>,
    ) -> Result<Committed<T>, TxnError> {
        let agent = self.agent.clone();
        self.swarm.transact(retry, &self.who, self.clock, |snap, now| {
            op(snap, &Actor { agent: agent.clone(), now }).map(|(ch, v)| (scrub(ch), v))
        })
    }

    /// The agent of `role` (`--exec`, else the config), ready to run here: its program installed, a preset's
    /// flags chosen for the CLI's version ([`agent::prepare`]). Called before the first claim, so that an agent
    /// that cannot start is found before it costs anyone an attempt.
    pub fn backend(&self, config: &Config, role: Role) -> Result<agent::Prepared, RunError> {
        let backend = match &self.exec {
            Some(exec) => Backend::Command { exec: exec.clone() },
            None => crate::config::backend_for(&self.git_config.apply(config), role)
                .map_err(RunError::Settings)?
                .ok_or(RunError::NoAgent { role })?,
        };
        // `[run] sandbox = "required"` on a machine with none refuses here, before the first claim.
        let contained = self.sandbox_program()?.is_some();
        agent::prepare_in(&backend, &self.run_dir(), &self.probes, contained)
            .map_err(|e| RunError::CannotStart { role, error: e })
    }

    /// At a runner's start: say that its agents will run uncontained, when `[run] sandbox = "auto"` finds no
    /// sandbox here (`required` refuses in [`Runner::backend`]; `off` was asked for).
    pub(crate) fn say_containment(&mut self) {
        if self.contain_mode() == agent::sandbox::Mode::Auto
            && let agent::sandbox::Support::Missing { why, hint } = agent::sandbox::support()
        {
            self.emit(Event::Warning(format!(
                "agents run uncontained: {why} — they can read this machine's files and keys and write the clone ({hint}; \
                 [run] sandbox = \"required\" refuses to run without it)"
            )));
        }
    }

    pub fn settings(&self, config: &Config) -> Result<RunSettings, RunError> {
        config.check().map_err(RunError::Settings)?;
        let mut s = RunSettings::from_config(&self.git_config.apply(config)).map_err(RunError::Settings)?;
        if let Some(c) = &self.check {
            s.check = Some(c.clone()).filter(|c| !c.trim().is_empty());
        }
        self.swarm.pacer.configure(s.pushes_per_minute, config.lease, Some(Arc::clone(&self.stop)));
        propose::configure(config);
        let home = contained::runner_home();
        let paths = |v: &[String]| v.iter().filter_map(|p| contained::expand(p, home.as_deref())).collect();
        self.contain.set(contained::Settings {
            mode: s.sandbox,
            network: s.network,
            read: paths(&s.sandbox_read),
            write: paths(&s.sandbox_write),
        });
        if let Ok(mut b) = self.spent.budgets.lock() {
            *b = (s.budget.task(), s.budget.cycle());
        }
        Ok(s)
    }

    /// Refuse to go on (before a claim, or before the agent of a claim runs) when this runner would run shared
    /// settings of the ref — the role's agent, the check, a prompt override — that its clone does not trust. What
    /// comes from this clone (`--exec`, `--check`, `git config swarm.*`) needs no trust.
    pub(crate) fn check_trust(&self, snap: &Snapshot, role: Role) -> Result<(), RunError> {
        let config = &snap.board.config;
        let applied = self.git_config.apply(config);
        // The table the role's agent comes from (its own, else `[roles.default]`): shared unless this clone chose
        // the agent of that table itself — any shared key that survives (a `base_url`, an `api_key_env`) counts.
        let own = applied.extra.get("roles").and_then(|r| r.get(role.as_str())).and_then(|t| t.as_table());
        let chooses = |t: &toml::Table| ["exec", "preset", "backend", "api"].iter().any(|k| t.contains_key(*k));
        let picked = if own.is_some_and(chooses) { role.as_str() } else { "default" };
        let agent_shared = self.exec.is_none()
            && !self.git_config.chooses_agent(picked)
            && crate::config::backend_for(&applied, role).ok().flatten().is_some();
        let check_of = |c: &Config| RunSettings::from_config(c).ok().and_then(|s| s.check);
        let check_shared = matches!(role, Role::Worker | Role::Judge)
            && self.check.is_none()
            && check_of(config).is_some()
            && check_of(&applied) == check_of(config);
        let prompts = self.swarm.store().list_dir(snap.commit, crate::state::PROMPTS_DIR).unwrap_or_default();
        let mine: &[&str] = match role {
            Role::Worker => &["worker.md", "conflict.md"],
            Role::Planner => &["planner.md", "sub-planner.md"],
            Role::Judge => &["judge.md"],
        };
        let prompt_shared = prompts.iter().any(|(name, _)| mine.contains(&name.as_str()));
        // `[forge]` chooses where this runner's forge token goes.
        let forge_shared = config.extra.contains_key("forge");
        if !(agent_shared || check_shared || prompt_shared || forge_shared) {
            return Ok(());
        }
        let doc = crate::trust::Document::of(config, &prompts);
        if crate::trust::is_trusted(&doc, &crate::trust::trusted_digests(&self.trusted)) {
            return Ok(());
        }
        // What changed since the newest document this clone trusted (kept by `git swarm trust`).
        let before = crate::trust::last_trusted(&self.home, &self.trusted);
        Err(RunError::Untrusted {
            short: doc.short().to_string(),
            digest: doc.digest.clone(),
            changes: crate::trust::changes(before.as_ref(), &doc),
        })
    }

    /// Prepare this runner's folders: logs, run files, and no stray work tree of a runner that died.
    pub fn setup(&mut self) -> Result<(), RunError> {
        let places = self.places();
        for d in [self.home.join("logs"), self.run_dir(), places.trees()] {
            std::fs::create_dir_all(&d).map_err(|e| RunError::Setup(format!("cannot create {}: {e}", d.display())))?;
        }
        // Logs and run files hold what agents print and read: their owner's alone.
        for d in [self.home.join("logs"), self.run_dir()] {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        }
        // Orphans of the agents become this runner's children, so that none outlives its run (`agent::contain`).
        crate::agent::contain::become_subreaper();
        let pid_file = places.pid_file(&self.agent);
        // First the id: a second runner with it would kill the first one's agent and delete its work tree.
        if self.pid_lock.is_none() {
            self.pid_lock = Some(lock_pid_file(&pid_file, &self.agent)?);
        }
        // Scratch refs (and their locks) of fetches whose process was killed: nothing else would remove them until
        // this clone's next `git fetch` through git.
        crate::remote::clear_dead_scratch(&self.swarm.local);
        // What a `git worktree add` killed half-way left goes first: until then git fails every work tree command.
        let gone = |name: &str| name == self.agent || !runner_alive(&places, name);
        git::clear_stale_registrations(&self.common_dir(), &places.trees(), &gone);
        // Work trees of runners that are gone (their pid file names a process that no longer runs) are removed;
        // so is ours, whatever state a killed predecessor with our name left it in.
        for (name, path, alive) in worktrees(&places) {
            if name == self.agent {
                clear_own_worktree(&places, &self.common_dir(), &name, &path);
            } else if !alive {
                remove_runner_worktree(&places, &self.common_dir(), &name, &path);
            }
        }
        sweep_legacy_worktrees(&self.home, &self.common_dir());
        let _ = git::run(&self.common_dir(), &["worktree", "prune"]);
        if let Some(lock) = self.pid_lock.as_mut() {
            use std::io::{Seek, Write};
            let f: &mut std::fs::File = lock;
            let _ = f.set_len(0);
            let _ = f.seek(std::io::SeekFrom::Start(0));
            let _ = f.write_all(std::process::id().to_string().as_bytes());
        }
        Ok(())
    }

    /// Remove this runner's run files (prompt, hand-off, a CLI's last message): what it kept for its agents is not
    /// left in the cache folder once it is done.
    pub(crate) fn teardown(&self) {
        let _ = std::fs::remove_dir_all(self.run_dir());
    }

    /// The state's newest snapshot, in full (every task) when `full`.
    /// The remote may be away for a while: this runner's ops (and reads, and pushes aside) ride it out for a third
    /// of the lease, so that its claims outlive the outage ([`crate::txn::Retry::outage`]).
    pub(crate) fn ride_out(&mut self, config: &crate::model::Config) {
        self.retry.outage = config.lease / 3;
    }

    /// The newest state, read through an outage of the remote (`Retry::outage`).
    pub fn read(&self, full: bool) -> Result<Snapshot, RunError> {
        Ok(self.swarm.riding_out(&self.retry, || self.swarm.read(full))?)
    }

    /// The judge's last verdict, when it is `stop`.
    pub(crate) fn stopped_at(&self, snap: &Snapshot) -> Option<u64> {
        match last_cycle(self.swarm.store(), snap.commit) {
            Some(c) if c.verdict == Verdict::Stop => Some(c.cycle),
            _ => None,
        }
    }

    /// Wait until the state ref moves from `seen`, the stop flag is set, or `max` passes. Local remotes are
    /// watched for changes (`notify`); URL remotes are polled with a backoff that `backoff` carries across calls.
    pub(crate) fn wait_for_change(
        &self,
        seen: ObjectId,
        max: Duration,
        backoff: &mut Duration,
    ) -> Result<(), RunError> {
        let started = Instant::now();
        let watch_dir = match self.swarm.remote.reach() {
            Reach::Itself(store) | Reach::Path(store) => Some(store.repo.common_dir().to_path_buf()),
            Reach::Transport => None,
        };
        let (_watcher, rx) = match &watch_dir {
            Some(dir) => watch_refs(dir),
            None => (None, None),
        };
        loop {
            if self.stopping() {
                return Ok(());
            }
            let left = max.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Ok(());
            }
            let nap = (*backoff).min(left);
            match &rx {
                Some(rx) => {
                    let _ = rx.recv_timeout(nap.min(Duration::from_millis(250)));
                }
                None => sleep_unless(&self.stop, nap),
            }
            if self.swarm.tip()? != Some(seen) {
                *backoff = MIN_POLL;
                return Ok(());
            }
            if rx.is_none() {
                *backoff = (*backoff * 3 / 2).min(MAX_POLL);
            }
        }
    }

    /// Environment common to every agent this runner starts.
    pub(crate) fn base_env(&self, role: Role) -> Vec<(String, String)> {
        let mut env = vec![
            ("GIT_SWARM_AGENT".to_string(), self.agent.clone()),
            ("GIT_SWARM_SWARM".to_string(), self.swarm.name.clone()),
            ("GIT_SWARM_REMOTE".to_string(), self.remote_env.clone()),
            ("GIT_SWARM_ROLE".to_string(), role.as_str().to_string()),
        ];
        env.extend(self.commit_ident.iter().cloned());
        env
    }

    /// Run an agent; `poll` as in [`agent::run`], also stopped by the stop flag. The caller checks the outcome with
    /// [`cannot_start`]: an agent that could not be started at all (exit 126 or 127) is a runner error. With the
    /// outcome, what the agent changed in the git directory and [`planted::Guard`] put back (to be said).
    /// `attempt`: the claim (task, epoch) the run is part of, whose usage it adds to and whose budget stops it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_agent(
        &self,
        agent: &agent::Prepared,
        cwd: &Path,
        prompt: &str,
        mut env: Vec<(String, String)>,
        timeout: Duration,
        attempt: Option<(&Task, u64)>,
        (role, config): (Role, &Config),
        poll: &mut dyn FnMut() -> bool,
    ) -> Result<(agent::Outcome, Vec<String>), RunError> {
        let stop = Arc::clone(&self.stop);
        env.extend(agent.env.iter().cloned());
        agent.clear_last_message();
        let contained = self.contain_run(cwd, role, Some(agent), config)?;
        env.extend(contained.env.iter().cloned());
        // What the agent may not leave changed in the git directory (in a sandbox: only its work tree's links).
        let guard = self.guard(cwd);
        let (live, budget) = match attempt {
            Some((t, epoch)) => {
                let (l, b) = self.spent.watch(&t.id, epoch, t.usage);
                (Some(l), b)
            }
            None => (None, None),
        };
        let inv = agent::Invocation {
            cwd,
            prompt,
            prompt_file: self.run_dir().join("prompt.md"),
            env,
            log: Some(self.log_file()),
            timeout: Some(timeout),
            grace: Duration::from_secs(10),
            report: agent.report.clone(),
            live,
            budget,
            contain: Some(contained.contain.clone()),
        };
        let out = agent::run(&agent.backend, &inv, &mut || !stop.load(Ordering::Relaxed) && poll());
        if let Some((t, epoch)) = attempt {
            self.spent.ended(&t.id, epoch, out.as_ref().ok().and_then(|o| o.usage));
        }
        let mut planted = guard.restore();
        self.bring_objects(&contained)?;
        planted.extend(self.file_outbox());
        Ok((out?, planted))
    }

    /// Renew my claim on `task` when less than a third of its lease is left (`until` moves with it): the event to
    /// report, if any; `Err` when the claim is lost. A remote that is away for a moment is not an error (the lease
    /// still runs; the next poll tries again). Holders keep their leases through `landing::LeaseKeeper`.
    pub(crate) fn try_renew(
        &self,
        task: &str,
        epoch: u64,
        until: &mut Timestamp,
        lease: Duration,
    ) -> Result<Option<Event>, String> {
        let now = (self.clock)();
        let left = Duration::from_millis(until.0.saturating_sub(now.0));
        if left > lease / 3 {
            return Ok(None);
        }
        let id = task.to_string();
        // Not paced: a renewal keeps a claim alive; the budget waits for everything else.
        // Nor does it wait out an outage: the next poll tries again, and the lease has two thirds left.
        let unpaced = Retry { paced: false, outage: Duration::ZERO, ..self.retry.clone() };
        let usage = self.spent.of(task, epoch);
        match self.transact_with(&unpaced, |snap, actor| {
            ops::renew_reporting(&snap.board, actor, &id, Some(epoch), lease, usage)
        }) {
            Ok(c) => match c.value.first().and_then(|t| t.claim.as_ref()) {
                Some(cl) => {
                    *until = cl.lease_until;
                    Ok(Some(Event::Renewed { task: id, until: cl.lease_until }))
                }
                None => Ok(None),
            },
            Err(TxnError::Domain(e)) => Err(e.to_string()),
            Err(e) => Ok(Some(Event::Warning(format!("renewing {id}: {e}")))),
        }
    }

    /// Give a claim back (on a signal); errors are reported, not raised: the lease runs out anyway.
    pub fn release(&mut self, task: &str, epoch: u64) {
        let id = task.to_string();
        let usage = self.spent.of(task, epoch);
        match self.transact(|snap, actor| ops::release_reporting(&snap.board, actor, &id, Some(epoch), usage)) {
            Ok(_) => {
                self.spent.forget(task, epoch);
                self.emit(Event::Released { task: id })
            }
            Err(e) => self.emit(Event::Warning(format!("could not release {id}: {e} (its lease will run out)"))),
        }
    }
}

/// [`RunError::CannotStart`] when an agent exited 126 or 127: `sh` could not start its command.
pub(crate) fn cannot_start(role: Role, agent: &agent::Prepared, out: &agent::Outcome) -> Result<(), RunError> {
    if !agent::could_not_start(out) {
        return Ok(());
    }
    let last = out.tail.iter().rev().find(|l| !l.trim().is_empty()).cloned().unwrap_or_default();
    Err(RunError::CannotStart {
        role,
        error: agent::CannotStart {
            what: agent.label.clone(),
            why: format!("it {} ({})", out.exit, redact_secrets(&crate::escape::line(&last))),
            hint: "the command or a program it runs is missing here; fix it, then start the runner again (the task \
                   was given back with no attempt spent)"
                .into(),
        },
    })
}

/// Where a clone's runners keep their things. The clone-wide ones (`logs/`, claim records, hook stamps) are in
/// `home`, `<git dir>/swarm/`. The work trees and each runner's run files (prompt, hand-off, its agent's last
/// message) are in `base`, **outside the git directory**: agent CLIs guard whatever is under a `.git/` folder
/// (Claude Code denies writes there while its permission checks are on, Codex's sandbox makes it read-only), so an
/// agent in a work tree under `.git/swarm/` could not write its own files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    pub home: PathBuf,
    pub base: PathBuf,
}

impl Places {
    /// `$XDG_CACHE_HOME/git-swarm/worktrees/<repository>-<hash of the git directory>` (else under `~/.cache`);
    /// `<git dir>/swarm` when neither is set.
    ///
    /// The folder chosen is recorded in `<git dir>/swarm/worktree-base` the first time, and used from then on by
    /// every process of the clone whatever its environment (a runner under another `HOME`, `sudo`, a moved clone),
    /// so that each finds what the others left. Where it cannot be made (a `HOME` that is not writable), the git
    /// directory's `swarm/` is used instead.
    pub fn of(common_dir: &Path) -> Places {
        let home = common_dir.join("swarm");
        let record = home.join("worktree-base");
        if let Ok(text) = std::fs::read_to_string(&record) {
            let base = PathBuf::from(text.trim_end_matches('\n'));
            if base.is_absolute() {
                return Places { home, base };
            }
        }
        let abs = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .and_then(abs)
            .or_else(|| std::env::var_os("HOME").and_then(abs).map(|h| h.join(".cache")));
        let chosen = Places::under(common_dir, cache.as_deref());
        if std::fs::create_dir_all(&chosen.base).is_err() {
            return Places { base: home.clone(), home };
        }
        if std::fs::create_dir_all(&home).is_ok() {
            // Written whole, then moved into place: a reader sees no half-written path.
            let tmp = home.join(format!("worktree-base.{}.tmp", std::process::id()));
            if std::fs::write(&tmp, format!("{}\n", chosen.base.display())).is_ok() {
                let _ = std::fs::rename(&tmp, &record);
            }
        }
        chosen
    }

    /// [`Places::of`] with the cache folder given (`None`: none is known).
    pub fn under(common_dir: &Path, cache: Option<&Path>) -> Places {
        let home = common_dir.join("swarm");
        let base = match cache {
            Some(c) => c.join("git-swarm").join("worktrees").join(clone_key(common_dir)),
            None => home.clone(),
        };
        Places { home, base }
    }

    /// The work trees, and the pid file of each runner beside its tree.
    pub fn trees(&self) -> PathBuf {
        self.base.join("trees")
    }

    pub fn worktree(&self, agent: &str) -> PathBuf {
        self.trees().join(agent)
    }

    pub fn pid_file(&self, agent: &str) -> PathBuf {
        self.trees().join(format!("{agent}.pid"))
    }

    pub fn run_dir(&self, agent: &str) -> PathBuf {
        self.base.join("run").join(agent)
    }
}

/// A folder name for a clone: its repository's name and a hash of its git directory's path (FNV-1a, stable
/// across builds), so that two clones never share work trees.
fn clone_key(common_dir: &Path) -> String {
    let path = std::fs::canonicalize(common_dir).unwrap_or_else(|_| common_dir.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let top = if path.file_name().is_some_and(|n| n == ".git") { path.parent() } else { Some(path.as_path()) };
    let name: String = top
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().trim_end_matches(".git").to_string())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .take(40)
        .collect();
    format!("{}-{h:016x}", if name.is_empty() { "repo" } else { &name })
}

/// The runners' work trees: name (the runner's agent id), path, and whether the runner that owns it still runs
/// (its pid file names a live process other than this one).
pub fn worktrees(places: &Places) -> Vec<(String, PathBuf, bool)> {
    let dir = places.trees();
    let Ok(entries) = std::fs::read_dir(&dir) else { return vec![] };
    let mut out: Vec<_> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let alive = runner_alive(places, &name);
            (name, e.path(), alive)
        })
        .collect();
    out.sort();
    out
}

/// Take the lock on a runner's pid file (created if missing), or say which runner holds it. A lock, not the pid
/// alone: it ends with its process whatever way that dies, and a pid the system gave to another process since
/// does not count. The file is opened close-on-exec, so no agent (nor a daemon it leaves) holds it.
fn lock_pid_file(path: &Path, agent: &str) -> Result<nix::fcntl::Flock<std::fs::File>, RunError> {
    use nix::fcntl::{Flock, FlockArg};
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| RunError::Setup(format!("cannot open {}: {e}", path.display())))
    };
    // The lock is also held for a moment by a reader that checks whether the runner is alive, and for as long as it
    // takes by a runner that clears what a killed runner of this id left (its work tree, its agent:
    // `remove_runner_worktree`) — with `--agents <n>` a sibling of this very process, whose tree removal waits on
    // the clone's other `git worktree` commands. While the file names a process that no longer runs (the killed
    // runner), that is such a clean-up: wait for it. Only a live holder refuses.
    let started = Instant::now();
    let mut tries = 0u32;
    loop {
        match Flock::lock(open()?, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
            Err((_, e)) => return Err(RunError::Setup(format!("cannot lock {}: {e}", path.display()))),
        }
        let pid = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<u32>().ok());
        let dead = pid.is_some_and(|p| p != std::process::id() && !process_alive(p));
        if tries >= 5 && (!dead || started.elapsed() > PID_LOCK_CLEAN_UP) {
            return Err(RunError::AlreadyRunning { agent: agent.to_string(), pid });
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(40));
    }
}

/// How long a starting runner waits for the clean-up of a killed runner with its id (see `lock_pid_file`).
const PID_LOCK_CLEAN_UP: Duration = Duration::from_secs(120);

/// The pid of the runner `name` of this clone, when one runs (another process holds its pid file locked; `0` when
/// the file does not say which). The CLI refuses its holder ops under such an id: they are the runner's to make.
pub fn live_runner(places: &Places, name: &str) -> Option<u32> {
    runner_alive(places, name)
        .then(|| std::fs::read_to_string(places.pid_file(name)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0))
}

/// Does the runner `name` of this clone run (another process holds its pid file locked)?
fn runner_alive(places: &Places, name: &str) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let Ok(file) = std::fs::File::open(places.pid_file(name)) else { return false };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_unlocked_on_drop) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// Work trees that runners of an earlier version left under `<git dir>/swarm/worktrees/` (killed before they could
/// remove them): removed, with their registrations, once their runner is gone. Returns how many.
pub(crate) fn sweep_legacy_worktrees(home: &Path, common_dir: &Path) -> usize {
    let legacy = Places { home: home.to_path_buf(), base: home.to_path_buf() };
    let old = home.join("worktrees");
    let Ok(entries) = std::fs::read_dir(&old) else { return 0 };
    let mut n = 0;
    for e in entries.flatten().filter(|e| e.path().is_dir()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = old.join(format!("{name}.pid"));
        let alive = std::fs::read_to_string(&pid)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .is_some_and(|p| p != std::process::id() && process_alive(p));
        if !alive {
            agent::kill_leftover(&agent::pgid_file_of(&legacy.run_dir(&name).join("prompt.md")), &e.path());
            git::remove_worktree(common_dir, &e.path());
            let _ = std::fs::remove_file(pid);
            n += 1;
        }
    }
    n
}

/// Remove a runner's work tree: first stop an agent its killed runner could not stop, which may still work in it.
pub(crate) fn remove_runner_worktree(places: &Places, common_dir: &Path, name: &str, path: &Path) {
    use nix::fcntl::{Flock, FlockArg};
    // The id's lock, held through the removal: a runner that runs already is not touched, and one that starts
    // meanwhile is told the id is busy instead of getting a tree that is being deleted. The pid file stays (its
    // lock, not its presence, says who runs): unlinking it could leave a starting runner holding a lock on a file
    // nobody else sees.
    let pid_file = places.pid_file(name);
    let _lock = match std::fs::File::open(&pid_file) {
        Ok(f) => match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => Some(l),
            Err(_) => return,
        },
        Err(_) => None,
    };
    clear_own_worktree(places, common_dir, name, path);
}

/// [`remove_runner_worktree`] for the runner that calls it: its pid file stays (it holds the lock on it).
fn clear_own_worktree(places: &Places, common_dir: &Path, name: &str, path: &Path) {
    agent::kill_leftover(&agent::pgid_file_of(&places.run_dir(name).join("prompt.md")), path);
    git::remove_worktree(common_dir, path);
}

/// Does a process with this id run? (Signal 0: no signal is sent, only the check.)
fn process_alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|p| {
        matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None), Ok(()) | Err(nix::errno::Errno::EPERM))
    })
}

pub(crate) const MIN_POLL: Duration = Duration::from_millis(200);
pub(crate) const MAX_POLL: Duration = Duration::from_secs(10);

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
}

/// Watch a repository's refs (loose refs under `refs/swarm/` and `packed-refs`) for changes.
pub(crate) fn watch_refs(
    common_dir: &Path,
) -> (Option<notify::RecommendedWatcher>, Option<std::sync::mpsc::Receiver<()>>) {
    use notify::Watcher;
    let (tx, rx) = std::sync::mpsc::channel();
    let Ok(mut w) = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        // inotify reports reads too (a file opened, closed unwritten): only a change can move a ref. Without this
        // filter every reader of the ref woke every waiter, which read the ref and woke the others (and itself):
        // idle runners and `watch` spun on the CPU.
        if let Ok(e) = &res
            && matches!(e.kind, notify::EventKind::Access(_))
        {
            return;
        }
        let _ = tx.send(());
    }) else {
        return (None, None);
    };
    let refs = common_dir.join("refs").join("swarm");
    let ok = w.watch(&refs, notify::RecursiveMode::Recursive).is_ok()
        | w.watch(common_dir, notify::RecursiveMode::NonRecursive).is_ok();
    if ok { (Some(w), Some(rx)) } else { (None, None) }
}

/// The record of the last cycle, if any judge has spoken: the highest-numbered `cycles/<n>.toml` that reads (a
/// broken newer file must not hide a `stop` before it; the judge's next record replaces it).
pub fn last_cycle(store: &Store, commit: ObjectId) -> Option<CycleRecord> {
    let files = store.list_dir(commit, crate::state::CYCLES_DIR).ok()?;
    let mut numbered: Vec<(u64, bool, ObjectId)> = files
        .iter()
        .filter_map(|(name, id)| {
            let n = name.strip_suffix(".toml").and_then(|n| n.parse::<u64>().ok())?;
            // `cycles/01.toml` parses as 1 too: the canonical `1.toml` comes first.
            Some((n, *name != format!("{n}.toml"), *id))
        })
        .collect();
    numbered.sort_by_key(|&(n, odd, _)| (std::cmp::Reverse(n), odd));
    numbered.into_iter().find_map(|(n, _, id)| {
        let text = store.blob_text(id, 64 * 1024).ok()?;
        let mut rec: CycleRecord = toml::from_str(&text).ok()?;
        rec.cycle = n;
        Some(rec)
    })
}

/// The goal of the swarm (`goal.md`), if one was set.
pub fn goal(store: &Store, commit: ObjectId) -> Option<String> {
    match store.read_text(commit, GOAL_PATH, 256 * 1024) {
        Ok(Some(Ok(t))) => Some(t),
        _ => None,
    }
}

pub(crate) use crate::state::GOAL_PATH;

/// `notes/<id>.md` of the state at `commit`: the hand-offs, newest task first, at most `budget` bytes in all.
pub fn handoffs(store: &Store, snap: &Snapshot, only_parent: Option<&str>, budget: usize) -> String {
    let Ok(files) = store.list_dir(snap.commit, crate::state::NOTES_DIR) else { return String::new() };
    let mut notes: Vec<(Timestamp, String, String)> = Vec::new();
    for (name, id) in files {
        let Some(task_id) = name.strip_suffix(".md") else { continue };
        let task = snap.board.tasks.get(task_id).map(|s| &s.task);
        if let Some(p) = only_parent
            && task.and_then(|t| t.parent.as_deref()) != Some(p)
        {
            continue;
        }
        let at = task.and_then(|t| t.result.as_ref()).and_then(|r| r.at).unwrap_or(Timestamp::from_secs(0));
        let title = task.map(|t| t.title.clone()).unwrap_or_default();
        if let Ok(text) = store.blob_text(id, 64 * 1024) {
            notes.push((at, format!("## {task_id}: {title}"), text));
        }
    }
    notes.sort_by_key(|n| std::cmp::Reverse(n.0));
    let mut out = String::new();
    for (_, head, text) in notes {
        let piece = format!("{head}\n{}\n\n", text.trim());
        if out.len() + piece.len() > budget {
            out.push_str("(older hand-offs left out)\n");
            break;
        }
        out.push_str(&piece);
    }
    if out.is_empty() { "(none yet)".into() } else { out }
}

/// The board as text for prompts: one line a task.
pub(crate) fn board_text(board: &Board, budget: usize) -> String {
    task_lines(board, budget, |t| t.parent.as_deref().map(|p| format!(" (parent {p})")).unwrap_or_default())
}

/// One line a task, oldest first: `id [kind status] title<extra>`, within `budget` bytes (task text escaped).
pub(crate) fn task_lines(board: &Board, budget: usize, extra: impl Fn(&Task) -> String) -> String {
    let mut tasks: Vec<&Task> = board.tasks.values().map(|s| &s.task).collect();
    tasks.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let mut out = String::new();
    for t in tasks {
        let line = format!(
            "{} [{} {}] {}{}\n",
            t.id,
            t.kind,
            t.status,
            crate::escape::line(&t.title),
            crate::escape::line(&extra(t))
        );
        if out.len() + line.len() > budget {
            out.push_str("(more tasks left out)\n");
            break;
        }
        out.push_str(&line);
    }
    if out.is_empty() { "(no tasks yet)".into() } else { out }
}

/// Counts of tasks by status.
pub fn counts(board: &Board) -> [(Status, usize); 5] {
    let mut c = Status::ALL.map(|s| (s, 0usize));
    for st in board.tasks.values().map(|s| s.task.status).chain(board.closed.values().map(|c| c.status)) {
        if let Some(e) = c.iter_mut().find(|(s, _)| *s == st) {
            e.1 += 1;
        }
    }
    c
}

/// The identity of every commit a runner and its agents make, in the environment (`GIT_AUTHOR_*`,
/// `GIT_COMMITTER_*`): the clone's `user.name`/`user.email` when it has them, else the agent id. In the environment
/// and not in git config, because agent CLIs run their shell tools with a git config of their own (Gemini CLI sets
/// `GIT_CONFIG_GLOBAL=/dev/null`), and on a fresh machine there is none at all: the agent's own commit must work.
///
/// A variable the runner's own environment sets already (a CI job that exports an identity) is left as it is.
pub fn commit_ident(repo: &gix::Repository, agent: &str) -> Vec<(String, String)> {
    let cfg = repo.config_snapshot();
    let get = |k: &str| cfg.string(k).map(|v| v.to_string()).filter(|v| !v.trim().is_empty());
    let name = get("user.name").unwrap_or_else(|| agent.to_string());
    let email = get("user.email").unwrap_or_else(|| format!("{agent}@git-swarm.invalid"));
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    [
        ("GIT_AUTHOR_NAME", &name),
        ("GIT_COMMITTER_NAME", &name),
        ("GIT_AUTHOR_EMAIL", &email),
        ("GIT_COMMITTER_EMAIL", &email),
    ]
    .into_iter()
    .filter(|(k, _)| !set(k))
    .map(|(k, v)| (k.to_string(), v.clone()))
    .collect()
}

/// The last lines of an agent's output, one line, for a failure reason.
pub(crate) fn reason_from(what: &str, tail: &[String]) -> String {
    let lines: Vec<&str> =
        tail.iter().rev().take(8).map(String::as_str).collect::<Vec<_>>().into_iter().rev().collect();
    let text = redact_secrets(&lines.join(" | "));
    let text = crate::escape::line(&text);
    let cut: String = text.chars().take(600).collect();
    if cut.is_empty() { what.to_string() } else { format!("{what}: {cut}") }
}

/// Text that goes from an agent into the state ref (failure reasons, hand-offs) with what looks like a secret
/// replaced by `[redacted]` ([`crate::secrets`]: this process's secrets by name and by value, and secret shapes).
/// Best effort: the state ref is readable by everyone who can fetch the repository.
pub(crate) fn redact_secrets(text: &str) -> String {
    crate::secrets::scrub(text)
}

/// Redact secrets from everything a runner writes into the state ref: files (hand-offs, verdicts), the summary,
/// results and failure reasons, and the text of tasks the change files (a planner's proposals, the judge's next
/// cycle). Text people wrote into tasks that exist already is left as it is.
pub fn scrub(mut ch: Change) -> Change {
    for text in ch.files.values_mut() {
        *text = redact_secrets(text);
    }
    ch.summary = redact_secrets(&ch.summary);
    for w in &mut ch.writes {
        let t = &mut w.task;
        if let Some(note) = t.result.as_mut().and_then(|r| r.note.as_mut()) {
            *note = redact_secrets(note);
        }
        for f in &mut t.failures {
            f.reason = redact_secrets(&f.reason);
        }
        if t.epoch == 0 && t.status == crate::model::Status::Open {
            t.title = redact_secrets(&t.title);
            t.body = redact_secrets(&t.body);
            t.acceptance = redact_secrets(&t.acceptance);
        }
    }
    ch
}
