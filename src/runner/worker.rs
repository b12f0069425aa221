//! The worker: claim the best ready work task, run the agent in a fresh work tree at the tip of the target branch,
//! then land its commits and mark the task done in one atomic push (and claim the next task in the same push).

use std::path::Path;
use std::time::{Duration, Instant};

use gix::ObjectId;

use super::claim::{claim_op, judge_stopped};
use super::landing::{
    Abort, Alone, Job, Landed, Landing, LeaseKeeper, Publisher, ROLL_FORWARD_DEPTH, Recording, landing_op,
};
use super::{Event, Mode, Role, RunEnd, RunError, RunSettings, Runner, git, prompts};
use crate::agent::{Exit, Prepared};
use crate::model::{Kind, Task};
use crate::ops::claim::Claimed;
use crate::ops::land::{Finish, Outcome};
use crate::ops::{self, DomainError};
use crate::store::Snapshot;
use crate::time::Timestamp;
use crate::txn::{Reach, TxnError};
use crate::usage::Limit;

/// Options of `git swarm run worker`.
#[derive(Debug, Clone, Default)]
pub struct WorkerOptions {
    pub mode: Mode,
    pub max_tasks: Option<u64>,
}

/// What a worker did.
#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    pub landed: u64,
    pub failed: u64,
    pub lost: u64,
}

/// A claim this runner holds.
#[derive(Debug, Clone)]
struct Held {
    task: Task,
    epoch: u64,
    until: Timestamp,
}

impl Held {
    fn from(task: Task) -> Option<Held> {
        let c = task.claim.clone()?;
        Some(Held { task, epoch: c.epoch, until: c.lease_until })
    }
}

/// How one task ended.
enum TaskEnd {
    Landed,
    Failed,
    /// The claim was lost (taken over) or given back; nothing recorded by us.
    Gone,
    /// A signal: the claim was released.
    Interrupted,
}

pub fn run(r: &mut Runner<'_>, opts: &WorkerOptions) -> Result<(RunEnd, WorkerStats), RunError> {
    // While it runs, the desk's leaders may wait for this agent's requests.
    let _member = r.desk.as_ref().map(super::desk::Desk::enter);
    r.setup()?;
    let res = run_loop(r, opts);
    r.phase_over();
    r.teardown();
    res
}

fn run_loop(r: &mut Runner<'_>, opts: &WorkerOptions) -> Result<(RunEnd, WorkerStats), RunError> {
    // A missing agent or broken settings are found before anything is claimed.
    let snap = r.read_settings()?;
    guard_checked_out_target(r, &snap.board.config.target)?;
    r.check_trust(&snap, Role::Worker)?;
    let config = snap.board.config;
    r.ride_out(&config);
    let window = r.settings(&config)?.batch_window;
    r.backend(&config, Role::Worker)?;
    r.say_containment();
    if super::landing::fetch_target(r, &format!("refs/heads/{}", config.target))?.is_none() {
        return Err(missing_target(r, &config.target));
    }
    let mut stats = WorkerStats::default();
    let mut held: Option<Held> = None;
    let mut done_tasks = 0u64;
    let mut backoff = super::MIN_POLL;
    // Expired claims with no attempts left, looked up on the target (their code, when it landed): a sweep finishes
    // those as done rather than failing them.
    let mut looked_up: std::collections::BTreeMap<String, Option<ObjectId>> = Default::default();
    loop {
        r.say_ridden_out();
        if r.stopping() {
            if let Some(h) = held.take() {
                r.release(&h.task.id, h.epoch);
            }
            return Ok((RunEnd::Interrupted, stats));
        }
        let want_more = |n: u64| opts.mode != Mode::Once && opts.max_tasks.is_none_or(|m| n < m);
        let h = match held.take() {
            Some(h) => h,
            None => match claim_next_task(r, &config, window, opts.mode, &mut looked_up, &mut backoff)? {
                Next::Task(h) => *h,
                Next::Again => continue,
                Next::End(end) => return Ok((end, stats)),
            },
        };
        r.emit(Event::Claimed {
            task: h.task.id.clone(),
            title: h.task.title.clone(),
            epoch: h.epoch,
            kind: Kind::Work,
        });
        let (id, epoch) = (h.task.id.clone(), h.epoch);
        let (end, next) = match work_on(r, h, want_more(done_tasks + 1)) {
            Ok(x) => x,
            Err(e) => {
                // Whatever went wrong, the task is given back for another agent rather than left to its lease.
                r.release(&id, epoch);
                return Err(e);
            }
        };
        done_tasks += 1;
        match end {
            TaskEnd::Landed => stats.landed += 1,
            TaskEnd::Failed => stats.failed += 1,
            TaskEnd::Gone => stats.lost += 1,
            TaskEnd::Interrupted => return Ok((RunEnd::Interrupted, stats)),
        }
        held = next;
        if !want_more(done_tasks) {
            if let Some(h) = held.take() {
                r.release(&h.task.id, h.epoch);
            }
            r.propose(true);
            return Ok((RunEnd::Done, stats));
        }
    }
}

/// What the worker loop does next, once it looked for a claim.
enum Next {
    Task(Box<Held>),
    /// Look again (a sweep, a lookup of exhausted claims, a change of the ref after a wait).
    Again,
    End(RunEnd),
}

/// Claim the next work task (through the desk when other agents share this process), or say why not: the judge
/// stopped the swarm, the cycle spent its budget, nothing is ready (`mode` says whether to wait for a change of the
/// state ref); expired claims with no attempts left are looked up on the target first (`looked_up`).
fn claim_next_task(
    r: &mut Runner<'_>,
    config: &crate::model::Config,
    window: Duration,
    mode: Mode,
    looked_up: &mut std::collections::BTreeMap<String, Option<ObjectId>>,
    backoff: &mut Duration,
) -> Result<Next, RunError> {
    // Where main is protected: take it back into the swarm's branch when it moved (`runner::propose`).
    if let Err(e) = r.sync_target(config) {
        r.emit(Event::Warning(format!("the swarm's branch was not brought up to date: {e}")));
    }
    // One read: the claim's own. A stop of the judge is seen there, and nothing is claimed then.
    let cycle_budget = r.spent.budgets().1;
    let classic = |r: &Runner<'_>| {
        let store = r.swarm.store();
        r.transact(|snap, actor| claim_op(store, snap.commit, &snap.board, actor, looked_up, &cycle_budget))
            .map(|c| c.value)
    };
    // With other agents in this process, the claim goes with whatever they publish next.
    let claimed = match r.desk.clone() {
        Some(desk) => {
            let spec = super::desk::ClaimSpec { looked_up: looked_up.clone(), cycle_budget, window };
            match desk.claim(r, spec) {
                super::desk::Outcome::Claimed(res) => res.map_err(TxnError::Domain),
                _ => classic(r),
            }
        }
        None => classic(r),
    };
    match claimed {
        Ok(c) => match c {
            Claimed::Stopped(cycle) => Ok(Next::End(RunEnd::SwarmStopped { cycle })),
            Claimed::Budget(why) => Ok(Next::End(RunEnd::BudgetSpent { why })),
            Claimed::LookUp(ids) => {
                let target = format!("refs/heads/{}", config.target);
                let tip = super::landing::fetch_target(r, &target)?.ok_or_else(|| missing_target(r, &config.target))?;
                for (id, epoch) in ids {
                    // Only a landing of one of its claims (the expired one's, or an earlier one's).
                    let code = landed_code(r, tip, &id, None, 1..=epoch, &config.target)?;
                    if let Some(code) = code {
                        r.emit(Event::Warning(format!(
                            "{id}: its claim ran out with no attempts left, and its code is on {} \
                             ({code}): finishing it as done",
                            config.target
                        )));
                    }
                    looked_up.insert(id, code);
                }
                Ok(Next::Again)
            }
            // None: a sweep of exhausted claims; look again.
            Claimed::Task(t) => Ok(t.and_then(|t| Held::from(*t)).map_or(Next::Again, |h| Next::Task(Box::new(h)))),
        },
        Err(TxnError::Domain(DomainError::NothingReady { .. })) => {
            // Idle: what landed is in the request before the runner waits (or goes).
            r.propose(true);
            if mode == Mode::Once {
                return Ok(Next::End(RunEnd::NothingReady));
            }
            let snap = r.read(false)?;
            if mode == Mode::UntilIdle && ops::claim::idle(&snap.board, (r.clock)()) {
                return Ok(Next::End(RunEnd::Idle));
            }
            r.emit(Event::Waiting { why: "no ready work task".into() });
            // Woken by a state with something to claim or sweep, a stop of the judge, or (until idle) nothing left.
            let store = r.swarm.store();
            let wake = |snap: &Snapshot| {
                let now = (r.clock)();
                let actor = ops::Actor { agent: r.agent.clone(), now };
                judge_stopped(store, snap)
                    || (mode == Mode::UntilIdle && ops::claim::idle(&snap.board, now))
                    || !matches!(
                        ops::claim::next_work(&snap.board, &actor, None, looked_up, &cycle_budget),
                        Err(DomainError::NothingReady { .. })
                    )
            };
            r.wait_for_work(snap.commit, Duration::from_secs(30), backoff, Some(&wake))?;
            Ok(Next::Again)
        }
        Err(e) => Err(e.into()),
    }
}

/// With the repository itself as the remote, landing moves the target branch in this repository: refuse when it is
/// checked out in a work tree, whose files would silently fall behind (git refuses such a push for the same reason).
fn guard_checked_out_target(r: &mut Runner<'_>, target: &str) -> Result<(), RunError> {
    let branch = format!("refs/heads/{target}");
    // A non-bare repository on a local path, written in-process: its own checkout must not be on the target.
    if let Reach::Path(store) = r.swarm.remote.reach() {
        let head = store.repo.head_name().ok().flatten().map(|h| h.as_bstr().to_string());
        if let (Some(dir), Some(h)) = (store.repo.workdir(), head)
            && h == branch
        {
            return Err(RunError::Setup(format!(
                "the swarm's remote {} has {target} checked out: landing would move it under that work tree (git \
                 push refuses that too). Check out another branch there, or use a bare remote",
                dir.display()
            )));
        }
        return Ok(());
    }
    if !matches!(r.swarm.remote.reach(), Reach::Itself(_)) {
        return Ok(());
    }
    if let Some((_, path)) = git::checked_out_branches(&r.common_dir()).into_iter().find(|(b, _)| *b == branch) {
        return Err(RunError::Setup(format!(
            "the target branch {target} is checked out in {}, and this repository is the swarm's remote: landing \
             would move it under that work tree. Check out another branch there (git switch -c mine), or give the \
             swarm a bare remote (--remote)",
            path.display()
        )));
    }
    Ok(())
}

/// Work on one claimed task, from a fresh work tree to landed (or failed). Returns the next task when it was
/// claimed in the same push.
fn work_on(r: &mut Runner<'_>, mut h: Held, claim_next: bool) -> Result<(TaskEnd, Option<Held>), RunError> {
    let snap = r.read(false)?;
    // Settings changed on the ref since the claim, and not trusted here: the claim goes back unspent.
    r.check_trust(&snap, Role::Worker)?;
    let config = snap.board.config.clone();
    let settings = r.settings(&config)?;
    let backend = r.backend(&config, Role::Worker)?;
    let branch = format!("refs/heads/{}", config.target);
    let slot = r.slot();
    let base = match super::landing::fetch_target(r, &branch)? {
        Some(b) => b,
        None => return Err(missing_target(r, &config.target)),
    };
    // A task claimed before (a takeover) may have landed its code already, its `done` lost with half a landing
    // (the remote took the branch and failed the state ref, then the holder died): finish it, never redo it.
    if h.task.epoch > 1 {
        // No cut-off by date: committer clocks are whatever the machines that landed said. Only a landing of an
        // earlier claim counts: this one has landed nothing yet.
        let landed = landed_code(r, base, &h.task.id, None, 1..=h.epoch - 1, &config.target)?;
        if let Some(code) = landed {
            return roll_forward(r, &h, code, None, None, claim_next, config.lease, Instant::now());
        }
    }
    // A work tree made afresh by the runner at the target's tip (whatever was in it before is removed: nothing of
    // an earlier task, and no process of an earlier run still working in it).
    let checkout = slot.checkout(&r.swarm.local.repo, base, r.agent_owner(), &[]).map_err(RunError::Setup)?;
    let outcome = run_worker_agent(r, &backend, &settings, &snap, &mut h, &slot, base, &config)?;
    let job = Job { settings: &settings, config: &config, state: snap.commit, backend: &backend };
    finish(r, &job, &mut h, &slot, &checkout, base, &branch, outcome, claim_next)
}

/// The code of task `id` on the target at `tip` (since `stop`): a runner's landing of one of its claims whose epoch
/// is in `epochs` ([`crate::store::Store::landed_commit`]). Commits that only name the task are said, never taken.
fn landed_code(
    r: &mut Runner<'_>,
    tip: ObjectId,
    id: &str,
    stop: Option<ObjectId>,
    epochs: std::ops::RangeInclusive<u64>,
    target: &str,
) -> Result<Option<ObjectId>, RunError> {
    let found = r
        .swarm
        .local
        .landed_commit(tip, id, stop, epochs, ROLL_FORWARD_DEPTH)
        .map_err(|e| RunError::Setup(format!("cannot read {target}: {e}")))?;
    for w in super::landing::refused_warnings(id, target, &found.refused) {
        r.emit(w);
    }
    Ok(found.code.map(|(code, _)| code))
}

/// Finish a task whose code is on the target already (`code`): `done` alone, in one update of the state ref.
/// `handoff`: the agent's, when this runner ran it; else a note saying what happened.
#[allow(clippy::too_many_arguments)]
fn roll_forward(
    r: &mut Runner<'_>,
    h: &Held,
    code: ObjectId,
    handoff: Option<String>,
    work: Option<ObjectId>,
    claim_next: bool,
    lease: Duration,
    since: Instant,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let (id, epoch) = (h.task.id.clone(), h.epoch);
    let note = handoff.unwrap_or_else(|| {
        format!(
            "Status: done\n\nRolled forward by {}: the code of this task was on the target already ({code}), its \
             `done` was not (a landing whose state half failed).\n",
            r.agent
        )
    });
    let store = r.swarm.store();
    let (usage, cycle_budget) = (r.spent.of(&id, epoch), r.spent.budgets().1);
    let res = r.transact(|snap, actor| {
        let stopped = claim_next && judge_stopped(store, snap);
        let code = code.to_string();
        let l = ops::land::Record {
            id: &id,
            epoch,
            code: &code,
            note: Some(&note),
            claim_next,
            lease,
            usage,
            cycle_budget,
        };
        landing_op(&snap.board, actor, stopped, &l)
    });
    match res {
        Ok(c) => {
            r.spent.forget(&id, epoch);
            let next = say_landed(r, id, code, c.lost_races, since, c.value);
            r.emit(Event::Warning(format!("rolled {} forward: its code was on the target already", h.task.id)));
            Ok((TaskEnd::Landed, next))
        }
        Err(TxnError::Domain(e)) => {
            // The code on the target is a twin's (whoever took the task over from us landed it): ours is kept
            // aside, as any fenced holder's is.
            if let Some(tip) = work {
                keep_aside(r, h, tip);
            }
            r.emit(Event::LostClaim { task: id, why: e.to_string() });
            Ok((TaskEnd::Gone, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Say that `id` landed as `code` (and which task was claimed with it); the next task held.
fn say_landed(
    r: &mut Runner<'_>,
    id: String,
    code: ObjectId,
    lost_races: u32,
    since: Instant,
    next: Option<Task>,
) -> Option<Held> {
    let next = next.and_then(Held::from);
    r.emit(Event::Landed {
        task: id,
        commit: code.to_string(),
        lost_races,
        exit_to_landed: since.elapsed(),
        next: next.as_ref().map(|n| n.task.id.clone()),
    });
    // Where main is protected: the request into it is kept current (`runner::propose`).
    r.after_landing();
    next
}

fn missing_target(r: &Runner<'_>, target: &str) -> RunError {
    RunError::Setup(format!(
        "{} has no branch {target} to work on: push it first (the target is set in swarm.toml)",
        r.swarm.remote_label
    ))
}

/// What the agent run came to.
enum AgentRun {
    /// `handoff`: what the agent (or its CLI's last message) left as its hand-off, read once, bounded.
    Exited {
        exit: Exit,
        tail: Vec<String>,
        at: Instant,
        handoff: Option<String>,
    },
    LostClaim(String),
    Interrupted,
}

/// The worker prompt of task `t` (the template on the state ref, or the built-in one), rendered.
fn worker_prompt(
    r: &mut Runner<'_>,
    settings: &RunSettings,
    snap: &Snapshot,
    t: &Task,
    config: &crate::model::Config,
) -> String {
    let (template, warn) = prompts::load(r.swarm.store(), snap.commit, "worker");
    if let Some(w) = warn {
        r.emit(Event::Warning(w));
    }
    let goal = super::goal(r.swarm.store(), snap.commit).unwrap_or_else(|| "(no goal recorded)".into());
    let failures = if t.failures.is_empty() {
        "none".to_string()
    } else {
        t.failures.iter().map(|f| format!("- {} ({}): {}", f.agent, f.at, f.reason)).collect::<Vec<_>>().join("\n")
    };
    let attempt = format!("{} of {}", t.attempts.saturating_add(1), config.max_attempts);
    let scope = if t.scope.is_empty() { "(not given)".to_string() } else { t.scope.join(", ") };
    let acceptance = if t.acceptance.is_empty() { "(not given)" } else { t.acceptance.as_str() };
    let check = settings.check.clone().unwrap_or_else(|| "none".into());
    prompts::render(
        &template,
        &[
            ("task_id", &t.id),
            ("task_title", &t.title),
            ("task_body", &t.body),
            ("acceptance", acceptance),
            ("scope", &scope),
            ("goal", &goal),
            ("target", &config.target),
            ("attempt", &attempt),
            ("previous_failures", &failures),
            ("check", &check),
        ],
    )
}

#[allow(clippy::too_many_arguments)]
fn run_worker_agent(
    r: &mut Runner<'_>,
    backend: &Prepared,
    settings: &RunSettings,
    snap: &Snapshot,
    h: &mut Held,
    slot: &super::slot::Slot,
    base: ObjectId,
    config: &crate::model::Config,
) -> Result<AgentRun, RunError> {
    let prompt = worker_prompt(r, settings, snap, &h.task, config);
    let t = &h.task;
    let handoff = slot.run.join("handoff.md");
    let mut env = r.base_env(Role::Worker);
    env.push(("GIT_SWARM_TASK_ID".into(), t.id.clone()));
    env.push(("GIT_SWARM_TASK_TITLE".into(), t.title.clone()));
    env.push(("GIT_SWARM_EPOCH".into(), h.epoch.to_string()));
    env.push(("GIT_SWARM_HANDOFF_FILE".into(), handoff.to_string_lossy().into_owned()));
    // The agent hooks (docs/hooks.md): settings files in the fresh work tree, ignored by what the runner takes.
    let hooks = if settings.agent_hooks { crate::hooks::agent::install(&slot.tree) } else { Default::default() };
    // Written after the tree was given to the agent's uid: theirs too, or the agent could not write beside them.
    if let Some((uid, gid)) = r.agent_owner() {
        hooks.hand_over(uid, gid);
    }
    for why in &hooks.skipped {
        r.emit(Event::Warning(format!("agent hooks: {why}")));
    }
    // What the hooks run (`${GIT_SWARM_BIN:-git-swarm}`): this binary, whatever the agent's PATH holds.
    if let Ok(exe) = std::env::current_exe() {
        env.push(("GIT_SWARM_BIN".into(), exe.to_string_lossy().into_owned()));
    }
    env.extend(backend.env.iter().cloned());
    let contained = r.contain_run(slot, Role::Worker, Some(backend), config, Some(base), None)?;
    env.extend(contained.env.iter().cloned());
    r.emit(Event::AgentStarted { task: t.id.clone(), what: "work" });
    r.phase(&t.id, h.epoch, super::status::Phase::Agent, Some(settings.task_timeout));
    let id = t.id.clone();
    let lease = config.lease;
    let epoch = h.epoch;
    let keeper = LeaseKeeper::new(&id, epoch, h.until, lease);
    let out = {
        // The poll below needs `r` mutably (to report renewals as they happen); the run itself only reads it:
        // split the borrow by moving what the run needs out first.
        let stop = std::sync::Arc::clone(&r.stop);
        let log = r.log_file();
        let (live, budget) = r.spent.watch(&id, epoch, h.task.usage);
        let inv = crate::agent::Invocation {
            cwd: &slot.tree,
            prompt: &prompt,
            prompt_file: slot.run.join("prompt.md"),
            env,
            log: Some(log),
            timeout: Some(settings.task_timeout),
            grace: Duration::from_secs(10),
            report: backend.report.clone(),
            live: Some(live),
            budget,
            contain: Some(contained.contain.clone()),
        };
        // What the agent may not leave changed in the git directory (uncontained: its config, attributes, cache).
        let guard = r.guard();
        let out = crate::agent::run(&backend.backend, &inv, &mut || {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            let alive = keeper.keep(r);
            for e in keeper.drain() {
                r.emit(e);
            }
            alive
        });
        r.spent.ended(&id, epoch, out.as_ref().ok().and_then(|o| o.usage));
        (out, guard.restore())
    };
    let (out, planted) = out;
    for p in planted {
        r.emit(Event::Warning(p));
    }
    for m in r.file_outbox() {
        r.emit(Event::Warning(m));
    }
    let out = out?;
    h.until = keeper.until();
    let at = Instant::now();
    r.emit(Event::AgentExited { task: h.task.id.clone(), exit: out.exit.to_string(), secs: out.elapsed.as_secs_f64() });
    if let Some(why) = keeper.lost() {
        return Ok(AgentRun::LostClaim(why));
    }
    if out.exit == Exit::Stopped {
        return Ok(AgentRun::Interrupted);
    }
    // A command that could not start did no work: the claim goes back with no attempt spent, the runner stops.
    super::cannot_start(Role::Worker, backend, &out)?;
    // The CLI's own record of its last message is the hand-off when neither the agent nor a hook wrote one.
    let mut handoff = read_handoff(r, &handoff);
    if handoff.is_none() {
        handoff = backend.last_message.read(&out.stdout_tail).filter(|t| !t.trim().is_empty());
    }
    Ok(AgentRun::Exited { exit: out.exit, tail: out.tail, at, handoff })
}

/// How much of a hand-off file is read (what is kept of it is less: 64 KiB).
const HANDOFF_READ: usize = 1 << 20;

/// The hand-off the agent left at `file`: a regular file, read bounded ([`crate::agent::files`]); anything else at
/// that path is said and ignored.
fn read_handoff(r: &mut Runner<'_>, file: &Path) -> Option<String> {
    match crate::agent::files::read(file, HANDOFF_READ) {
        Ok((t, _)) => Some(t).filter(|t| !t.trim().is_empty()),
        Err(e) if e.is_missing() => None,
        Err(e) => {
            r.emit(Event::Warning(format!("hand-off not read: {e}")));
            None
        }
    }
}

/// Where the work of a task that did not land is kept for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    No,
    /// On the remote, at `refs/swarm-work/<swarm>/<task>/<epoch>` ([`keep_aside`]).
    Aside,
    /// In this clone only ([`keep_held`]): it holds what looks like a secret, which a push would carry away, or
    /// trees git refuses.
    Here,
}

impl Keep {
    fn aside_if(mine: bool) -> Keep {
        if mine { Keep::Aside } else { Keep::No }
    }
}

/// How a finished agent run ends for its task, once decided: what [`conclude`] records.
enum End {
    /// Landed: the code on the target, `done` on the state ref, the next task claimed with it.
    Landed { code: ObjectId, lost_races: u32, next: Option<Box<Task>> },
    /// Nothing to land, and `[run] empty = "done"`: `done` on the state ref alone.
    Empty { note: Option<String> },
    /// The code is on the target already (a landing whose state half failed): finish it, never land it again.
    RollForward { code: ObjectId, note: Option<String> },
    /// An attempt of the task (for good: no attempt after it), with the agent's hand-off as its note.
    Fail { reason: String, note: Option<String>, for_good: bool },
    /// A signal: the claim goes back.
    Released,
    /// The claim was lost (taken over): nothing recorded by us.
    Gone(String),
    /// An error that ends the runner (the caller gives the claim back, no attempt spent).
    Stop(RunError),
}

impl End {
    fn fail(reason: impl Into<String>) -> End {
        End::Fail { reason: reason.into(), note: None, for_good: false }
    }
}

/// The task's end after its agent ran: the agent's run judged, what it left committed, then landed through the
/// desk or alone ([`Landing::land`]), and recorded ([`conclude`]).
#[allow(clippy::too_many_arguments)]
fn finish(
    r: &mut Runner<'_>,
    job: &Job<'_>,
    h: &mut Held,
    slot: &super::slot::Slot,
    checkout: &super::slot::Checkout,
    base: ObjectId,
    branch: &str,
    outcome: AgentRun,
    claim_next: bool,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let (settings, lease) = (job.settings, job.config.lease);
    let (exit, tail, exited_at, handoff) = match outcome {
        AgentRun::LostClaim(why) => {
            return conclude(r, h, None, Keep::No, End::Gone(why), claim_next, lease, Instant::now());
        }
        AgentRun::Interrupted => {
            return conclude(r, h, None, Keep::No, End::Released, claim_next, lease, Instant::now());
        }
        AgentRun::Exited { exit, tail, at, handoff } => (exit, tail, at, handoff),
    };
    let over_budget = match &exit {
        Exit::OverBudget(why) => Some(format!("the task spent its budget ({why}); the agent was stopped")),
        _ => None,
    };
    if !exit.success() && over_budget.is_none() {
        let what = match &exit {
            Exit::TimedOut => {
                format!("the agent ran past the time limit of {}", crate::time::format_duration(settings.task_timeout))
            }
            other => format!("the agent {other}"),
        };
        // What the agent said of its failure in its hand-off (`Status: failed: <reason>`) says more than its last
        // lines; the hand-off is kept as the task's note either way.
        let note = handoff.as_deref().map(|t| {
            let t = super::redact_secrets(t);
            t[..t.floor_char_boundary(64 * 1024 - 1)].to_string()
        });
        let reason = match note.as_deref().and_then(reported_failure) {
            Some(said) => format!("{what}; it reported: failed: {said}"),
            None => super::reason_from(&what, &tail),
        };
        let end = End::Fail { reason, note, for_good: false };
        return conclude(r, h, None, Keep::No, end, claim_next, lease, exited_at);
    }
    let work_tip = match commit_work(r, &h.task, h.epoch, slot, checkout, base)? {
        Ok(tip) => tip,
        // An agent that removed its work tree left nothing to land, and would do it again: an attempt of the task.
        Err(why) => return conclude(r, h, None, Keep::No, End::fail(why), claim_next, lease, exited_at),
    };
    // At most 64 KiB (bytes: what every reader of `notes/<id>.md` reads), cut at a character.
    let handoff = handoff.map(|t| {
        let t = super::redact_secrets(&t);
        t[..t.floor_char_boundary(64 * 1024 - 1)].to_string()
    });
    let mine = !own_commits(&r.swarm.local, base, work_tip).is_empty();
    let (keep, end) = if let Some(reason) = over_budget {
        // Another attempt would start past the budget: the task fails for good, what the agent did kept aside.
        (Keep::aside_if(mine), End::Fail { reason, note: handoff, for_good: true })
    } else if let Some(reason) = handoff.as_deref().and_then(reported_failure) {
        // The agent said it failed (`Status: failed: <reason>`, the line the worker prompt asks for), whatever its
        // exit status: what it did is kept aside, not landed.
        (
            Keep::aside_if(mine),
            End::Fail { reason: format!("the agent reported: failed: {reason}"), note: handoff, for_good: false },
        )
    } else if !mine && settings.empty == crate::config::Empty::Done {
        (Keep::No, End::Empty { note: handoff })
    } else if !mine {
        (Keep::No, End::fail("the agent exited 0 without changing anything"))
    } else {
        land_work(r, job, h, slot, base, work_tip, branch, handoff, claim_next)?
    };
    conclude(r, h, Some(work_tip), keep, end, claim_next, lease, exited_at)
}

/// What the agent did, as the runner takes it ([`super::slot`], [`super::snapshot`]): the objects of its commits
/// brought into the clone, its `HEAD` read as data, and what it left in its work tree committed on top (stamped as
/// the landing of this claim: `Swarm-Task` and `Swarm-Epoch`, `hooks::trailer`), with its tools' files taken out.
/// The work's tip; `Ok(Err(why))`: nothing can be taken (the agent removed its work tree).
fn commit_work(
    r: &mut Runner<'_>,
    task: &Task,
    epoch: u64,
    slot: &super::slot::Slot,
    checkout: &super::slot::Checkout,
    base: ObjectId,
) -> Result<Result<ObjectId, String>, RunError> {
    let Ok(tree) = crate::agent::files::Dir::open(&slot.tree) else {
        return Ok(Err("the agent removed its work tree: nothing to land".into()));
    };
    if let Err(why) = slot.bring_objects(&r.swarm.local.repo) {
        return Ok(Err(why));
    }
    // Its own commits, when its HEAD names one the clone now has; else only its files count.
    let head = slot.agent_head().filter(|id| r.swarm.local.repo.find_commit(*id).is_ok());
    let head = match head {
        Some(id) => id,
        None => {
            r.emit(Event::Warning(format!(
                "{}: the agent's git HEAD names no commit the runner can read: its commits are not taken, its files are",
                task.id
            )));
            base
        }
    };
    let repo = &r.swarm.local.repo;
    let tracked = repo
        .find_commit(head)
        .map_err(|e| e.to_string())
        .and_then(|c| c.tree_id().map_err(|e| e.to_string()))
        .map_err(|e| RunError::Setup(format!("cannot read the tree of {head}: {e}")))?
        .detach();
    let scope = &task.scope;
    // Agent files the task's scope names are the task's (`--scope .claude/commands/review.md`); the hook settings
    // the runner installed never are.
    let hook_file = |p: &str| crate::hooks::agent::FILES.iter().any(|f| f.path == p);
    let wanted =
        |p: &str| crate::hooks::agent::is_agent_artifact(p) && crate::hooks::agent::in_scope(p, scope) && !hook_file(p);
    let keep = crate::hooks::agent::scope_names_artifacts(scope).then_some(&wanted as &dyn Fn(&str) -> bool);
    let ignores = super::snapshot::Ignores {
        excludes: crate::hooks::agent::excludes_text(&r.common_dir()),
        info_exclude: crate::agent::files::read_text(&r.common_dir().join("info/exclude"), 1 << 20).unwrap_or_default(),
    };
    let taken = super::snapshot::take(repo, &tree, tracked, &ignores, keep, &checkout.known)
        .map_err(|e| RunError::Setup(format!("cannot take the work of {}: {e}", task.id)))?;
    let mut tip = head;
    if taken.tree != tracked {
        let message = crate::hooks::trailer::stamp(&one_line(&task.title), &task.id, epoch);
        let who = super::text::signature(&r.commit_ident, (r.clock)());
        let commit = gix::objs::Commit {
            tree: taken.tree,
            parents: vec![head].into(),
            author: who.clone(),
            committer: who,
            encoding: None,
            message: message.into(),
            extra_headers: vec![],
        };
        tip = repo.write_object(&commit).map_err(|e| RunError::Setup(format!("cannot write a commit: {e}")))?.detach();
    }
    for what in taken.left_out {
        r.emit(Event::Warning(format!("{}: {what}", task.id)));
    }
    // What the agent's own commits took of its tools' files (a `git add -f`) is taken out again: a task's commits
    // hold the work, not the agent's state.
    let is_artifact = |p: &str| crate::hooks::agent::is_agent_artifact(p) && !crate::hooks::agent::in_scope(p, scope);
    let stripped = super::rebase::strip_new_paths(&r.swarm.local, base, tip, &is_artifact)
        .map_err(|e| RunError::Setup(format!("cannot take agent files out of the work: {e}")))?;
    Ok(Ok(stripped.unwrap_or(tip)))
}

/// Land the agent's work (`base..work_tip`): rebase onto the newest target (stamping every commit on the
/// first pass), check, then one atomic update of the branch and the state (done + hand-off + the next claim),
/// published by the desk's next batch when other agents share this process, else alone. Whether to keep the work
/// aside, and the task's end.
#[allow(clippy::too_many_arguments)]
fn land_work(
    r: &mut Runner<'_>,
    job: &Job<'_>,
    h: &Held,
    slot: &super::slot::Slot,
    base: ObjectId,
    work_tip: ObjectId,
    branch: &str,
    handoff: Option<String>,
    claim_next: bool,
) -> Result<(Keep, End), RunError> {
    let (id, epoch) = (h.task.id.as_str(), h.epoch);
    // Only the agent's own work on the target lands: an unrelated history it merged in (a second root) fails the
    // task, its work kept aside (invariant 22).
    let foreign = super::rebase::foreign_history(&r.swarm.local, base, work_tip, base)
        .map_err(|e| RunError::Setup(format!("cannot read the work of {id}: {e}")))?;
    if let Some(why) = foreign {
        let why = format!("the work is not the agent's own history on {}: {why}", job.config.target);
        return Ok((Keep::Aside, End::fail(why)));
    }
    // Commits stamped already (the runner's own commit of what the agent left) need no rewrite; any other message
    // is stamped by the rebase, whatever `Swarm-*` lines the agent wrote.
    let stamped = super::rebase::unstamped(&r.swarm.local, base, work_tip, id, epoch)
        .map_err(|e| RunError::Setup(format!("cannot read the work of {id}: {e}")))?
        .is_none();
    // The lease is renewed while the check and conflict runs go on, as while the agent worked.
    let keeper = LeaseKeeper::new(id, epoch, h.until, job.config.lease);
    let rec = Recording {
        branch,
        note: handoff.as_deref(),
        claim_next,
        lease: job.config.lease,
        cycle_budget: r.spent.budgets().1,
    };
    let desk = r.desk.clone();
    let publisher: &dyn Publisher = match &desk {
        Some(desk) => desk.as_ref(),
        None => &Alone,
    };
    let (landed, events) = Landing::new(r, job, slot, &h.task, &keeper, base, work_tip, stamped).land(publisher, &rec);
    for e in events {
        r.emit(e);
    }
    Ok(match landed {
        Landed::Published { code, next, lost_races, alone } => {
            // What this clone saw of the target is what it landed (a batch of the desk records its own), so that
            // a force-push that drops it is noticed next time.
            if alone {
                r.swarm.landed_on_target(branch, code);
            }
            (Keep::No, End::Landed { code, lost_races, next })
        }
        Landed::Aborted(Abort::AlreadyLanded(code)) => (Keep::No, End::RollForward { code, note: handoff }),
        // The caller gives the claim back (no attempt spent) and the runner stops.
        Landed::Aborted(Abort::CannotStart(e) | Abort::Stop(e)) => (Keep::Aside, End::Stop(e)),
        Landed::Aborted(Abort::Interrupted) => (Keep::No, End::Released),
        Landed::Aborted(Abort::Fail(reason)) => (Keep::Aside, End::fail(reason)),
        Landed::Aborted(Abort::Held(reason)) => (Keep::Here, End::fail(reason)),
        // Only a batch's prepare says so, and its task then lands alone: never here.
        Landed::Aborted(Abort::Conflicted) => (Keep::Aside, End::fail("a rebase conflict left unresolved")),
        Landed::Aborted(Abort::Budget(reason)) => (Keep::Aside, End::Fail { reason, note: None, for_good: true }),
        Landed::Aborted(Abort::LostClaim(why)) => (Keep::Aside, End::Gone(why)),
        // Our claim is gone (taken over after our lease ran out): our code must not land.
        Landed::Failed(TxnError::Domain(e)) => (Keep::Aside, End::Gone(e.to_string())),
        Landed::Failed(TxnError::Remote(crate::remote::RemoteError::Refused { remote, refname, reason }))
            if !crate::remote::is_storage_refusal(&reason) =>
        {
            // A refusal that retrying will not change (a protected branch, a hook): an attempt of the task, and
            // the runner goes on. If the remote refuses the state ref too, recording the failure fails as well,
            // and that error ends the runner.
            (Keep::Aside, End::fail(format!("{remote} refused the landing: {refname}: {reason}")))
        }
        // The agent's work is not lost with the error: kept where a person (or a retry) finds it.
        Landed::Failed(e) => (Keep::Aside, End::Stop(e.into())),
    })
}

/// Record the task's end `end`, the one place where the work (`work`: the work's tip) is kept
/// aside (or held in this clone) as `keep` says, before the end is recorded (a roll-forward keeps it too when the code on the target
/// turns out to be a twin's). `since`: when the agent exited.
#[allow(clippy::too_many_arguments)]
fn conclude(
    r: &mut Runner<'_>,
    h: &Held,
    work: Option<ObjectId>,
    keep: Keep,
    end: End,
    claim_next: bool,
    lease: Duration,
    since: Instant,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    r.say_ridden_out();
    r.phase_over();
    let kept = match (keep, work) {
        (Keep::Aside, Some(tip)) => keep_aside(r, h, tip),
        (Keep::Here, Some(tip)) => keep_held(r, h, tip),
        _ => None,
    };
    let id = h.task.id.clone();
    match end {
        End::Landed { code, lost_races, next } => {
            // Recorded with the landing (other ends record it with their own op, or give the claim back with it).
            r.spent.forget(&id, h.epoch);
            let next = say_landed(r, id, code, lost_races, since, next.map(|t| *t));
            Ok((TaskEnd::Landed, next))
        }
        End::Empty { note } => done_empty(r, h, note, lease, since),
        End::RollForward { code, note } => roll_forward(r, h, code, note, work, claim_next, lease, since),
        End::Fail { reason, note, for_good } => {
            let failing = Failing { reason, note: note.as_deref(), for_good, kept: kept.as_deref() };
            fail_noted(r, h, failing, claim_next, lease)
        }
        End::Released => {
            r.release(&id, h.epoch);
            Ok((TaskEnd::Interrupted, None))
        }
        End::Gone(why) => {
            r.emit(Event::LostClaim { task: id, why });
            Ok((TaskEnd::Gone, None))
        }
        End::Stop(e) => Err(e),
    }
}

/// Nothing to land: the task is done on the state ref alone.
fn done_empty(
    r: &mut Runner<'_>,
    h: &Held,
    note: Option<String>,
    lease: Duration,
    since: Instant,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let (id, epoch) = (h.task.id.clone(), h.epoch);
    let usage = r.spent.of(&id, epoch);
    let c = r.transact(|snap, actor| {
        let f = Finish {
            id: &id,
            epoch,
            outcome: Outcome::Done { code: None },
            note: note.as_deref(),
            usage,
            claim_next: false,
            stopped: false,
            cycle_budget: Limit::default(),
            lease,
        };
        ops::land::finish(&snap.board, actor, &f).map(|(ch, _)| (ch, ()))
    });
    match c {
        Ok(_) => {
            r.spent.forget(&id, epoch);
            r.emit(Event::Landed {
                task: id,
                commit: "(no change)".into(),
                lost_races: 0,
                exit_to_landed: since.elapsed(),
                next: None,
            });
            Ok((TaskEnd::Landed, None))
        }
        Err(TxnError::Domain(e)) => {
            r.emit(Event::LostClaim { task: id, why: e.to_string() });
            Ok((TaskEnd::Gone, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// The messages of the commits `base..tip` (first-parent), newest first; empty when there are none (or they
/// cannot be read: then the work counts as empty only if `tip` is `base`).
fn own_commits(store: &crate::store::Store, base: ObjectId, tip: ObjectId) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = tip;
    while cur != base && out.len() < 10_000 {
        let Ok(c) = store.repo.find_commit(cur) else { break };
        out.push(c.message_raw_sloppy().to_string());
        match c.parent_ids().next() {
            Some(p) => cur = p.detach(),
            None => break,
        }
    }
    out
}

fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().trim().to_string()
}

/// The reason of a hand-off whose status line (its first line that says something) is `Status: failed[: reason]`
/// (any case, `**Status:**` too): `None` for any other status, or none.
pub(crate) fn reported_failure(handoff: &str) -> Option<String> {
    let line = handoff.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with("```"))?;
    let line = line.trim_start_matches(['*', '_', '#', ' ']);
    let (key, rest) = line.split_once(':')?;
    if !key.trim_matches(['*', '_', ' ']).eq_ignore_ascii_case("status") {
        return None;
    }
    let rest = rest.trim_start_matches(['*', '_', ' ']);
    let word: String = rest.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    if !word.eq_ignore_ascii_case("failed") {
        return None;
    }
    let reason = rest[word.len()..].trim_start_matches(['*', '_', ' ', ':', '-', '—']).trim();
    Some(if reason.is_empty() { "no reason given".to_string() } else { one_line(reason).chars().take(300).collect() })
}

/// An attempt's failure as [`fail_noted`] records it.
struct Failing<'a> {
    reason: String,
    /// The agent's hand-off, the task's note.
    note: Option<&'a str>,
    /// No further attempt.
    for_good: bool,
    /// Where its work was kept.
    kept: Option<&'a str>,
}

/// Record a failure of my claim (and claim the next task in the same push), with the agent's hand-off as the
/// task's note.
fn fail_noted(
    r: &mut Runner<'_>,
    h: &Held,
    failing: Failing<'_>,
    claim_next: bool,
    lease: Duration,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let Failing { reason, note, for_good, kept } = failing;
    let id = h.task.id.clone();
    let epoch = h.epoch;
    let store = r.swarm.store();
    let (usage, cycle_budget) = (r.spent.of(&id, epoch), r.spent.budgets().1);
    let res = r.transact(|snap, actor| {
        let f = Finish {
            id: &id,
            epoch,
            outcome: Outcome::Failed { reason: &reason, for_good, kept },
            note,
            usage,
            claim_next,
            stopped: claim_next && judge_stopped(store, snap),
            cycle_budget,
            lease,
        };
        let (ch, finished) = ops::land::finish(&snap.board, actor, &f)?;
        Ok((ch, (finished.task.status == crate::model::Status::Open, finished.next)))
    });
    match res {
        Ok(c) => {
            r.spent.forget(&id, epoch);
            let (attempts_left, next) = c.value;
            r.emit(Event::Failed { task: id, reason, attempts_left });
            Ok((TaskEnd::Failed, next.and_then(Held::from)))
        }
        Err(TxnError::Domain(e)) => {
            r.emit(Event::LostClaim { task: id, why: e.to_string() });
            Ok((TaskEnd::Gone, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Keep the agent's work in this clone only, at `refs/swarm-held/<swarm>/<task>/<epoch>`: a ref no runner pushes
/// (work kept here for an outage is pushed later; this never is), for a person to look at and clean — it holds
/// what looks like a secret, or trees git refuses.
/// Where it is kept, as the failure records it.
fn keep_held(r: &mut Runner<'_>, h: &Held, work_tip: ObjectId) -> Option<String> {
    let id = h.task.id.as_str();
    let refname = format!("refs/swarm-held/{}/{id}/{}", r.swarm.name, h.epoch);
    match r.swarm.local.set_ref(
        &refname,
        work_tip,
        "git swarm: work held in this clone (a secret, or trees git refuses)",
    ) {
        Ok(()) => {
            r.emit(Event::Warning(format!(
                "{id}: its work is kept in this clone only, at {refname} (never pushed): look with `git show \
                 {refname}`, and remove it with `git update-ref -d {refname}` when you are done with it"
            )));
            Some(format!("{refname} in the clone of runner {} only (never pushed)", r.agent))
        }
        Err(e) => {
            r.emit(Event::Warning(format!("{id}: could not keep its work at {refname}: {e}")));
            None
        }
    }
}

/// Push the agent's work to `refs/swarm-work/<swarm>/<task>/<epoch>` (one ref per attempt) for a person to look at.
/// Where it is kept, as the failure records it.
fn keep_aside(r: &mut Runner<'_>, h: &Held, work_tip: ObjectId) -> Option<String> {
    let id = h.task.id.as_str();
    let refname = r.swarm.kept_work_ref(id, h.epoch);
    match r.swarm.riding_out(&r.retry, || r.swarm.push_aside(&refname, work_tip)) {
        Ok(()) => {
            let kept = format!("{refname} on {}", r.swarm.remote_label);
            r.emit(Event::KeptAside { task: id.to_string(), refname });
            Some(kept)
        }
        // Past the outage window: kept in this clone, where the next runner finds it (and pushes it).
        Err(e) => match r.swarm.keep_here(&refname, work_tip) {
            Ok(()) => {
                r.emit(Event::Warning(format!(
                    "could not push the work of {id} to {}: {e}; it is kept in this clone at {refname}, and the \
                     next runner here pushes it",
                    r.swarm.remote_label
                )));
                Some(format!("{refname} in the clone of runner {} (pushed by its next runner)", r.agent))
            }
            Err(here) => {
                r.emit(Event::Warning(format!("could not keep the work of {id} at {refname}: {e}; {here}")));
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::reported_failure;

    #[test]
    fn the_status_line_of_a_hand_off_is_read_as_the_prompt_writes_it() {
        let failed = [
            ("Status: failed: the API is down\n\n## What was done\n- nothing", "the API is down"),
            ("\n  status: FAILED - tests do not build", "tests do not build"),
            ("**Status:** failed: no network", "no network"),
            ("Status: failed", "no reason given"),
            ("```markdown\nStatus: failed: x\n```", "x"),
        ];
        for (text, reason) in failed {
            assert_eq!(reported_failure(text).as_deref(), Some(reason), "{text:?}");
        }
        for text in [
            "Status: done",
            "Status: done (or: Status: failed: <one-line reason>)",
            "## What was done\nStatus: failed: later lines do not count",
            "I failed to find a bug, so: done",
            "Status: failedness",
            "",
        ] {
            assert_eq!(reported_failure(text), None, "{text:?}");
        }
    }
}
