//! The runner: long-running loops that drive agents through the board — workers that land their own code,
//! planners (and sub-planners) that file tasks, a judge that ends cycles.
//!
//! A runner is one agent identity in one clone. It talks to the swarm only through [`Swarm`] (`txn`), runs agents
//! through [`crate::agent`], and does its git work in work trees of its own ([`Places`], outside the git
//! directory), never in the user's. It does no terminal I/O: what happens is reported as [`Event`]s to the caller.

mod baseline;
mod caches;
mod claim;
pub(crate) mod contained;
pub(crate) mod desk;
mod event;
pub(crate) mod git;
pub(crate) mod goal;
pub(crate) mod judge;
mod landing;
pub(crate) mod outbox;
mod places;
pub(crate) mod planner;
pub(crate) mod planted;
pub(crate) mod prompts;
mod propose;
pub(crate) mod rebase;
mod setup;
mod slot;
mod snapshot;
mod spent;
pub(crate) mod status;
mod text;
mod wait;
mod warm;
pub(crate) mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gix::ObjectId;

use crate::agent::{self, Backend};
use crate::environment::Environment;
use crate::model::{Config, Task};
use crate::ops::{self, Actor, Change, DomainError};
use crate::time::Timestamp;
use crate::{Committed, Reach, Retry, Swarm, TxnError};
use crate::{Identity, Snapshot};

pub(crate) use crate::config::{Role, RunSettings};
pub(crate) use event::{Event, Mode, RunEnd, RunError};
pub(crate) use places::{Places, live_runner, worktrees};
use places::{clear_own_worktree, lock_pid_file, runner_alive};
pub(crate) use places::{remove_runner_worktree, sweep_legacy_worktrees};
pub(crate) use spent::Spent;
pub(crate) use text::{board_text, reason_from, redact_secrets, task_lines};
pub(crate) use text::{commit_ident, counts, goal, handoffs, last_cycle, scrub};
use wait::sleep_unless;
pub(crate) use wait::{MAX_POLL, MIN_POLL, SHARED_READ, watch_refs};

pub(crate) use crate::model::{CycleRecord, Verdict};

/// Everything a runner needs.
pub(crate) struct Runner<'a> {
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
    /// The process environment, as it was at the start: what its agents' environments are cut from.
    pub env: Arc<Environment>,
    /// Runs of the check this runner made (each one, its baselines and the checks of a batch's prefixes included).
    pub check_runs: std::sync::atomic::AtomicU64,
}

pub(crate) use crate::ops::cycle::budget_spent as cycle_budget_spent;

/// What a runner is started with; the rest of a [`Runner`] is derived from it ([`Runner::new`]).
pub(crate) struct Start<'a> {
    pub swarm: &'a Swarm,
    pub agent: String,
    pub who: Identity,
    pub clock: &'a dyn Fn() -> Timestamp,
    pub retry: Retry,
    pub stop: Arc<AtomicBool>,
    pub remote_env: String,
    pub exec: Option<String>,
    pub check: Option<String>,
    pub git_config: crate::config::Local,
    pub desk: Option<Arc<desk::Desk>>,
    /// The process environment, as it was at the start.
    pub env: Arc<Environment>,
}

impl<'a> Runner<'a> {
    /// A runner of agent `start.agent` in the clone of `start.swarm`, telling its events to `events`: its home in the
    /// clone's git directory, the identity its commits get where the repository has none, the digests the clone
    /// trusts.
    pub(crate) fn new(start: Start<'a>, events: &'a mut dyn FnMut(Event)) -> Runner<'a> {
        let Start { swarm, agent, who, clock, retry, stop, remote_env, exec, check, git_config, desk, env } = start;
        Runner {
            swarm,
            home: swarm.local.repo.common_dir().join("swarm"),
            commit_ident: commit_ident(&swarm.local.repo, &agent, &env),
            trusted: crate::trust::clone_digests(&swarm.local.repo),
            agent,
            who,
            clock,
            retry,
            stop,
            remote_env,
            exec,
            check,
            events,
            git_config,
            probes: Default::default(),
            pid_lock: None,
            spent: Default::default(),
            desk,
            contain: Default::default(),
            env,
            check_runs: Default::default(),
        }
    }
}

impl Runner<'_> {
    pub(crate) fn emit(&mut self, e: Event) {
        (self.events)(e);
    }

    /// Tell this clone's boards that this runner's claim `epoch` of `task` is in `phase` now ([`status`]);
    /// `timeout`: the agent's time limit, with its first phase.
    pub(crate) fn phase(&self, task: &str, epoch: u64, phase: status::Phase, timeout: Option<Duration>) {
        status::set(&self.home, &self.agent, task, epoch, phase, (self.clock)(), timeout);
    }

    /// This runner's task ended: its boards show only what the ref knows of it.
    pub(crate) fn phase_over(&self) {
        status::clear(&self.home, &self.agent);
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Where this clone's runners keep their work trees and run files.
    pub(crate) fn places(&self) -> Places {
        Places::of(&self.common_dir(), &self.env)
    }

    pub(crate) fn log_file(&self) -> PathBuf {
        self.home.join("logs").join(format!("{}.log", self.agent))
    }

    pub(crate) fn run_dir(&self) -> PathBuf {
        self.places().run_dir(&self.agent)
    }

    pub(crate) fn common_dir(&self) -> PathBuf {
        self.swarm.local.repo.common_dir().to_path_buf()
    }

    /// One op through the transaction loop, as this runner's agent.
    pub(crate) fn transact<T>(
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
    pub(crate) fn backend(&self, config: &Config, role: Role) -> Result<agent::Prepared, RunError> {
        let backend = match &self.exec {
            Some(exec) => Backend::Command { exec: exec.clone() },
            None => crate::config::backend_for(&self.git_config.apply(config), role)
                .map_err(RunError::Settings)?
                .ok_or(RunError::NoAgent { role })?,
        };
        // `[run] sandbox = "required"` on a machine with none refuses here, before the first claim.
        let contained = self.sandbox_program()?.is_some();
        agent::prepare_in(&backend, &self.run_dir(), &self.probes, contained, &self.env)
            .map_err(|e| RunError::CannotStart { role, error: e })
    }

    /// At a runner's start: say that its agents will run uncontained, when `[run] sandbox = "auto"` finds no
    /// sandbox here (`required` refuses in [`Runner::backend`]; `off` was asked for).
    pub(crate) fn say_containment(&mut self) {
        if self.contain_mode() == agent::sandbox::Mode::Auto
            && let agent::sandbox::Support::Missing { why, hint } = agent::sandbox::support(&self.env)
        {
            self.emit(Event::Warning(format!(
                "agents run uncontained: {why} — they can read this machine's files and keys and write the clone ({hint}; \
                 [run] sandbox = \"required\" refuses to run without it)"
            )));
        }
    }

    pub(crate) fn settings(&self, config: &Config) -> Result<RunSettings, RunError> {
        config.check().map_err(RunError::Settings)?;
        let mut s = RunSettings::from_config(&self.git_config.apply(config)).map_err(|e| {
            // Only this clone's `git config swarm.*` overrides break it: name them, not swarm.toml.
            match RunSettings::from_config(config) {
                Ok(_) => RunError::Setup(format!(
                    "this clone's git config: {e} (it overrides swarm.toml: `git config --get-regexp '^swarm\\.'` \
                     lists the overrides; set it right, or remove it with `git config --unset swarm.<table>.<key>`)"
                )),
                Err(_) => RunError::Settings(e),
            }
        })?;
        if let Some(c) = &self.check {
            s.check = Some(c.clone()).filter(|c| !c.trim().is_empty());
        }
        self.swarm.pacer.configure(s.pushes_per_minute, config.lease, Some(Arc::clone(&self.stop)));
        propose::configure(config);
        let home = self.env.home();
        let paths = |v: &[String]| v.iter().filter_map(|p| contained::expand(p, home)).collect();
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
        if crate::trust::is_trusted(&doc, &crate::trust::trusted_digests(&self.trusted, &self.env)) {
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
    pub(crate) fn setup(&mut self) -> Result<(), RunError> {
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
        // Work an earlier runner of this clone could not push aside (the remote away): pushed now.
        let (pushed, failed) = self.swarm.push_kept_here();
        for refname in pushed {
            let task = refname.rsplit('/').nth(1).unwrap_or_default().to_string();
            self.emit(Event::KeptAside { task, refname });
        }
        for (refname, e) in failed {
            self.emit(Event::Warning(format!("work kept in this clone at {refname} is not pushed yet: {e}")));
        }
        // Scratch refs (and their locks) of fetches whose process was killed: nothing else would remove them until
        // this clone's next `git fetch` through git.
        crate::clear_dead_scratch(&self.swarm.local);
        // Locks a runner killed while it set a private record of this clone left (git never removes them).
        self.swarm.local.clear_stale_private_locks();
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

    /// Remove this runner's work tree, run files (prompt, hand-off, a CLI's last message) and its own index: what it
    /// kept for its agents is not left in the cache folder once it is done.
    pub(crate) fn teardown(&self) {
        self.slot().remove();
    }

    /// The remote may be away for a while: this runner's ops (and reads, and pushes aside) ride it out for a third
    /// of the lease, so that its claims outlive the outage ([`crate::Retry::outage`]).
    ///
    /// And the ref may be crowded for a while: a runner's op keeps racing for as long as a sixth of the lease
    /// (at least the 5 minutes of a hand-run op), however many races it loses, with pauses up to a twelfth of it.
    /// A runner that gave up on a crowded ref made things worse: its batch of landings broke up into one op an
    /// agent, more writers on the ref than before (64 processes of 1,000 agents, each winning one update in 64,
    /// lose 200 races in a row often enough). A sixth of the lease is safe for the claims a landing carries: a
    /// holder renews with a third left, and the agents of a desk keep theirs while they wait.
    pub(crate) fn ride_out(&mut self, config: &crate::model::Config) {
        self.retry.outage = config.lease / 3;
        self.retry.max_attempts = u32::MAX;
        self.retry.max_elapsed = self.retry.max_elapsed.max(config.lease / 6);
        self.retry.max_pause = self.retry.max_pause.max(config.lease / 12);
    }

    /// Say so when this runner's ops waited out an outage of the remote since it last looked.
    pub(crate) fn say_ridden_out(&mut self) {
        if let Some((away, tries)) = crate::take_ridden_out() {
            let label = self.swarm.remote_label.clone();
            self.emit(Event::Warning(format!(
                "{label} did not answer for {:.1} s ({tries} tries): the runner waited it out and went on",
                away.as_secs_f64()
            )));
        }
    }

    /// The newest state (every task when `full`), read through an outage of the remote (`Retry::outage`).
    pub(crate) fn read(&self, full: bool) -> Result<Snapshot, RunError> {
        if full {
            return Ok(self.swarm.riding_out(&self.retry, || self.swarm.read(full))?);
        }
        self.read_shared(crate::Reads::Live)
    }

    /// The newest state as `reads` reads it, its tip shared with the other agents of this process when one of them
    /// fetched it a moment ago ([`desk::Desk::shared_tip`]).
    fn read_shared(&self, reads: crate::Reads<'_>) -> Result<Snapshot, RunError> {
        let read = || {
            let tip = self.state_tip(SHARED_READ)?;
            self.swarm.read_for_tip(reads, tip, self.clock)
        };
        Ok(self.swarm.riding_out(&self.retry, read)?)
    }

    /// The state ref's tip, at most `every` old when another agent of this process fetched it.
    fn state_tip(&self, every: Duration) -> Result<Option<ObjectId>, TxnError> {
        match &self.desk {
            Some(desk) => desk.shared_tip(&self.swarm.ref_name(), every, || self.swarm.tip()),
            None => self.swarm.tip(),
        }
    }

    /// The tip of the branch `refname` on the remote, shared as [`Runner::state_tip`] is.
    pub(crate) fn branch_tip(&self, refname: &str) -> Result<Option<ObjectId>, TxnError> {
        let fetch = || self.swarm.riding_out(&self.retry, || self.swarm.fetch_branch(refname));
        match &self.desk {
            Some(desk) => desk.shared_tip(refname, SHARED_READ, fetch),
            None => fetch(),
        }
    }

    /// The newest state with its settings and none of its tasks (a read of `swarm.toml`, not of the board): what
    /// a runner needs to start. 1,000 agents starting at once over 64 processes each read a 2,000-task board
    /// twice before their first claim, about 50 s of this machine's two cores (`bench/internet.py`).
    pub(crate) fn read_settings(&self) -> Result<Snapshot, RunError> {
        self.read_shared(crate::Reads::Tasks(&[]))
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
        self.wait_for_work(seen, max, backoff, None)
    }

    /// [`Runner::wait_for_change`], but a move of the ref wakes the runner only when `wake` finds something for it
    /// to do on the new state (read from the objects the poll brought; once a process for all its agents,
    /// [`desk::Desk::worth_waking`]); other moves count as no change, and the poll's backoff keeps growing. At
    /// the end of a drain, 1,000 idle agents over 64 processes woke at every update of a busy ref, claimed nothing
    /// and read the board again: some 70 fetches a second, which starved the landings still in flight of CPU
    /// (`bench/internet.py`).
    pub(crate) fn wait_for_work(
        &self,
        mut seen: ObjectId,
        max: Duration,
        backoff: &mut Duration,
        wake: Option<&dyn Fn(&Snapshot) -> bool>,
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
            // Through an outage, as every read of a runner (an idle agent's poll met one and ended its runner).
            let tip = self.swarm.riding_out(&self.retry, || self.state_tip(nap))?;
            match (tip, wake) {
                (Some(t), _) if t == seen => {}
                (Some(t), Some(wake)) if !self.worth_waking(t, wake) => seen = t,
                _ => {
                    *backoff = MIN_POLL;
                    return Ok(());
                }
            }
            if rx.is_none() {
                *backoff = (*backoff * 3 / 2).min(MAX_POLL);
            }
        }
    }

    /// Is there something for this runner to do on the state `tip` ([`Runner::wait_for_work`])? A state that
    /// cannot be read wakes it (its own read then says what is wrong).
    fn worth_waking(&self, tip: ObjectId, wake: &dyn Fn(&Snapshot) -> bool) -> bool {
        let judge = || self.swarm.store().read(tip, false).map_or(true, |snap| wake(&snap));
        match &self.desk {
            Some(desk) => desk.worth_waking(tip, judge),
            None => judge(),
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

    /// Run an agent in the slot's work tree (`run`: the slot, the `HEAD` of the agent's git directory, and the
    /// commit a conflict run replays); `poll` as in [`agent::run`], also stopped by the stop flag. The caller checks
    /// the outcome with [`cannot_start`]: an agent that could not be started at all (exit 126 or 127) is a runner
    /// error. With the outcome, what an uncontained agent changed in the git directory and [`planted::Guard`] put
    /// back, and what the agent filed (to be said). `attempt`: the claim (task, epoch) the run is part of, whose
    /// usage it adds to and whose budget stops it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_agent(
        &self,
        agent: &agent::Prepared,
        (slot, head, replayed): (&slot::Slot, Option<ObjectId>, Option<ObjectId>),
        prompt: &str,
        mut env: Vec<(String, String)>,
        timeout: Duration,
        attempt: Option<(&Task, u64)>,
        (role, config): (Role, &Config),
        poll: &mut dyn FnMut() -> bool,
    ) -> Result<(agent::Outcome, Vec<String>), RunError> {
        let stop = Arc::clone(&self.stop);
        env.extend(agent.env.iter().cloned());
        let contained = self.contain_run(slot, role, Some(agent), config, head, replayed)?;
        env.extend(contained.env.iter().cloned());
        // What an uncontained agent may not leave changed in the git directory.
        let guard = self.guard();
        let (live, budget) = match attempt {
            Some((t, epoch)) => {
                let (l, b) = self.spent.watch(&t.id, epoch, t.usage);
                (Some(l), b)
            }
            None => (None, None),
        };
        let inv = agent::Invocation {
            cwd: &slot.tree,
            prompt,
            prompt_file: slot.run.join("prompt.md"),
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
        // Nor does a lost race make it pause for long: a twelfth of the lease at most, several tries in the third
        // that is left.
        let unpaced = Retry {
            paced: false,
            outage: Duration::ZERO,
            max_pause: (lease / 12).max(Duration::from_millis(250)),
            ..self.retry.clone()
        };
        let usage = self.spent.of(task, epoch);
        match self
            .transact_with(&unpaced, |snap, actor| ops::renew(&snap.board, actor, Some(&id), Some(epoch), lease, usage))
        {
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
    pub(crate) fn release(&mut self, task: &str, epoch: u64) {
        let id = task.to_string();
        let usage = self.spent.of(task, epoch);
        match self.transact(|snap, actor| ops::release(&snap.board, actor, &id, Some(epoch), usage)) {
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
            hint: match &out.sandbox_hint {
                // What the sandbox hides of it, not a program missing on this machine.
                Some(hidden) => {
                    format!("{hidden}; then start the runner again (the task was given back with no attempt spent)")
                }
                None => "the command or a program it runs is missing here; fix it, then start the runner again (the \
                         task was given back with no attempt spent)"
                    .into(),
            },
        },
    })
}
