//! The operations of the protocol as pure functions: `fn(&Board, args) -> Result<Change, DomainError>`.
//!
//! Nothing in here does I/O or reads a clock: the caller passes `now` and the agent. `txn` runs these against the
//! newest state and re-runs them when it loses a race, so an op must be a function of its inputs alone.
//! Property tests (`tests` below and `tests/ops_props.rs`) hammer these with random interleavings.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::{Claim, Config, Failure, Kind, MAX_EPOCH, Status, Task, TaskResult};
use crate::time::Timestamp;
use crate::usage::{Spend, Usage};

pub mod claim;
pub mod cycle;
pub mod goal;
pub mod land;
pub mod plan;

pub use crate::state::{Board, BrokenSettings, Change, Closed, Stored, closed_path, task_path};

/// Who is acting, and when.
#[derive(Debug, Clone)]
pub struct Actor {
    pub agent: String,
    pub now: Timestamp,
}

/// Why the swarm's state refuses an op: exit 4 in the CLI (3 for `NothingReady`, 1 for `IdSpaceExhausted`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    #[error("no task {0}")]
    UnknownTask(String),
    #[error("no ready {kind} task to claim")]
    NothingReady { kind: Kind },
    #[error("task {id} is claimed by {agent} until {until}")]
    ClaimedByOther { id: String, agent: String, until: Timestamp },
    /// `ever`: whether anyone ever claimed it (its epoch is not 0): "your claim has ended" or "claim it first".
    #[error("task {id} is {status}, not claimed{}", if *ever { "" } else { " (nobody has claimed it yet)" })]
    NotClaimed { id: String, status: Status, ever: bool },
    #[error("task {id} is claimed by {holder}, not by {agent}")]
    NotMine { id: String, holder: String, agent: String },
    #[error("task {id} was claimed again since epoch {mine} (now epoch {current})")]
    StaleEpoch { id: String, mine: u64, current: u64 },
    #[error("task {id} waits for {}", waiting.join(", "))]
    DepsNotDone { id: String, waiting: Vec<String> },
    #[error("task {id} is {status}; that is final")]
    Final { id: String, status: Status },
    #[error("task {id} has used all {attempts} attempts")]
    AttemptsExhausted { id: String, attempts: u32 },
    #[error("task {id} has been claimed as often as an epoch can count")]
    EpochExhausted { id: String },
    #[error("could not mint a fresh task id after {0} tries")]
    IdSpaceExhausted(u32),
    /// A new task that no reader could read back (a NUL in its title, a file past the size limit, …).
    #[error("cannot add '{title}': {why}")]
    Invalid { title: String, why: String },
    /// A change of `swarm.toml` that no reader could use.
    #[error("swarm.toml: {0}")]
    BadSetting(String),
    /// A task of a task file (`add --file`) names what the board does not have (a dependency, a parent).
    #[error("{file}: {why}")]
    NotOnBoard { file: String, why: String },
    #[error("task {id} is {status}: only a failed or cancelled task can be retried")]
    NotRetryable { id: String, status: Status },
    /// A dependency of a new task can never run: its dependencies form a cycle (made by hand on the ref).
    #[error("dependency {dep} can never run: its dependencies form a cycle {}", cycle.join(" → "))]
    DependencyCycle { dep: String, cycle: Vec<String> },
    /// The judge said `stop` after this cycle: nothing is claimed until a goal starts the next one.
    #[error("the judge stopped the swarm after cycle {cycle}: nothing is claimed until the next cycle starts")]
    Stopped { cycle: u64 },
    /// A programming error: an op that looks at every task ran on a board read for a few.
    #[error("internal: {0} needs a read of every task")]
    PartialBoard(&'static str),
}

/// A task to add.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    pub title: String,
    pub body: String,
    pub kind: Kind,
    pub priority: i64,
    pub deps: Vec<String>,
    pub labels: Vec<String>,
    pub parent: Option<String>,
    pub acceptance: String,
    pub scope: Vec<String>,
}

/// The write of `t`, read from `from`: finished tasks move under `tasks/<status>/`, live ones stay where they are;
/// twins of the task are deleted.
fn place(board: &Board, t: Task, from: &str, removes: &mut Vec<String>) -> Stored {
    let path = if t.status.is_final() { closed_path(t.status, &t.id) } else { from.to_string() };
    if path != from {
        removes.push(from.to_string());
    }
    for twin in board.twins.get(&t.id).into_iter().flatten() {
        if *twin != path && !removes.contains(twin) {
            removes.push(twin.clone());
        }
    }
    Stored { path, task: t }
}

/// A fresh id: `t-` and 6 random hex digits (collisions with the board are re-drawn by [`add`]). The one impure
/// helper here: it is passed to `add` as `mint`, never called by an op.
pub fn mint_id() -> String {
    format!("t-{:06x}", fastrand::u32(0..0x100_0000))
}

/// An id from `mint` that is neither on the board nor in `taken` (which gets it); re-drawn on a collision.
pub(crate) fn fresh_id(
    board: &Board,
    taken: &mut std::collections::BTreeSet<String>,
    mint: &mut dyn FnMut() -> String,
) -> Result<String, DomainError> {
    for tries in 1..=64 {
        let id = mint();
        if !board.contains(&id) && !taken.contains(&id) {
            taken.insert(id.clone());
            return Ok(id);
        }
        if tries == 64 {
            return Err(DomainError::IdSpaceExhausted(tries));
        }
    }
    Err(DomainError::IdSpaceExhausted(64))
}

/// Add tasks in one op. `mint` proposes ids; one already on the board is thrown away and another asked for.
pub fn add(
    board: &Board,
    actor: &Actor,
    new: Vec<NewTask>,
    mint: &mut dyn FnMut() -> String,
) -> Result<(Change, Vec<Task>), DomainError> {
    if new.iter().any(|n| !n.deps.is_empty()) {
        // Whether the deps can ever run is a walk through their deps.
        whole(board, "an add with deps")?;
    }
    if board.lookup {
        // A minted id must be one that no file has.
        return Err(DomainError::PartialBoard("an add (it must know every id)"));
    }
    let mut writes = Vec::with_capacity(new.len());
    let mut taken: std::collections::BTreeSet<String> = Default::default();
    for (i, n) in new.into_iter().enumerate() {
        for dep in n.deps.iter().chain(n.parent.iter()) {
            if !board.contains(dep) && !taken.contains(dep) {
                return Err(DomainError::UnknownTask(dep.clone()));
            }
        }
        // A new task itself closes no cycle (nothing can name it yet), but it must not wait on one.
        for dep in &n.deps {
            if let Some(t) = board.tasks.get(dep)
                && let Some(cycle) = dependency_cycle(board, &t.task)
            {
                return Err(DomainError::DependencyCycle { dep: dep.clone(), cycle });
            }
        }
        let id = fresh_id(board, &mut taken, mint)?;
        let task = Task {
            id: id.clone(),
            title: n.title,
            body: n.body,
            kind: n.kind,
            status: Status::Open,
            priority: n.priority,
            deps: n.deps,
            labels: n.labels,
            parent: n.parent,
            acceptance: n.acceptance,
            scope: n.scope,
            plan_round: 0,
            attempts: 0,
            epoch: 0,
            created_by: Some(actor.agent.clone()),
            // A millisecond apart, so that a batch keeps its order ("older first").
            created_at: Some(actor.now.plus_millis(i as u64)),
            claim: None,
            result: None,
            failures: vec![],
            usage: None,
            claim_usage: None,
        };
        // Write only what every reader reads back: a task that fails validation, or a file past the read limit,
        // would be skipped by every reader — filed, never worked on.
        let invalid = |why: String| DomainError::Invalid { title: crate::escape::line(&subject(&task.title)), why };
        task.validate().map_err(invalid)?;
        let size = toml::to_string(&task).map_err(|e| invalid(e.to_string()))?.len() as u64;
        if size > crate::model::MAX_TASK_FILE_BYTES {
            return Err(invalid(format!(
                "its file would take {size} bytes, past the limit of {}",
                crate::model::MAX_TASK_FILE_BYTES
            )));
        }
        writes.push(Stored { path: task_path(&id), task });
    }
    let tasks: Vec<Task> = writes.iter().map(|w| w.task.clone()).collect();
    let summary = match tasks.as_slice() {
        [one] => format!("add {}: {}", one.id, subject(&one.title)),
        many => format!("add {} tasks", many.len()),
    };
    let change = Change {
        op: "add",
        agent: actor.agent.clone(),
        task: tasks.first().map(|t| t.id.clone()),
        epoch: None,
        summary,
        writes,
        removes: vec![],
        ..Default::default()
    };
    Ok((change, tasks))
}

/// Is `task` claimable by a claim without id at `now`? (open, or claimed with an expired lease and attempts left;
/// every dep done).
pub fn is_ready(board: &Board, task: &Task, now: Timestamp) -> bool {
    takeable(&Pickable::of(task), board.config.max_attempts, now) && waiting_on(board, task).is_empty()
}

/// The deps of `task` that are not done (unknown ids count as not done).
pub fn waiting_on(board: &Board, task: &Task) -> Vec<String> {
    task.deps.iter().filter(|d| board.status_of(d) != Some(Status::Done)).cloned().collect()
}

/// The ready tasks of `kind`, best first: higher priority, then older, then by id.
pub fn ready(board: &Board, kind: Kind, now: Timestamp) -> Vec<&Task> {
    let mut v: Vec<&Task> =
        board.tasks.values().map(|s| &s.task).filter(|t| t.kind == kind && is_ready(board, t, now)).collect();
    v.sort_by(|a, b| rank(&Pickable::of(a), &Pickable::of(b)));
    v
}

/// What choosing the next task to claim reads of a task: the rule of [`ready`] and of the sweep of a claim
/// without id, kept in one place for a board of parsed tasks and for the store's index of them
/// ([`crate::store::Store::read_next`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pickable<'a> {
    pub id: &'a str,
    pub kind: Kind,
    pub status: Status,
    pub priority: i64,
    pub created_at: Option<Timestamp>,
    pub attempts: u32,
    pub epoch: u64,
    /// The claim's lease, if the task has a claim.
    pub lease_until: Option<Timestamp>,
    pub deps: Deps<'a>,
}

/// The deps of a [`Pickable`]: a task's list, or the index's space-separated field.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deps<'a> {
    List(&'a [String]),
    Spaced(&'a str),
}

impl<'a> Deps<'a> {
    pub(crate) fn iter(self) -> impl Iterator<Item = &'a str> {
        let (list, spaced) = match self {
            Deps::List(l) => (Some(l.iter().map(String::as_str)), None),
            Deps::Spaced(s) => (None, Some(s.split(' ').filter(|d| !d.is_empty()))),
        };
        list.into_iter().flatten().chain(spaced.into_iter().flatten())
    }
}

impl Pickable<'_> {
    pub(crate) fn of(t: &Task) -> Pickable<'_> {
        Pickable {
            id: &t.id,
            kind: t.kind,
            status: t.status,
            priority: t.priority,
            created_at: t.created_at,
            attempts: t.attempts,
            epoch: t.epoch,
            lease_until: t.claim.as_ref().map(|c| c.lease_until),
            deps: Deps::List(&t.deps),
        }
    }

    /// A claim whose lease ran out at `now`.
    pub(crate) fn expired(&self, now: Timestamp) -> bool {
        self.status == Status::Claimed && self.lease_until.is_some_and(|l| l <= now)
    }
}

/// Can the task be claimed at `now`, its deps aside: open, or an expired claim with attempts left; epochs left.
fn takeable(p: &Pickable<'_>, max_attempts: u32, now: Timestamp) -> bool {
    let takeable = match p.status {
        Status::Open => true,
        Status::Claimed => p.expired(now) && p.attempts.saturating_add(1) < max_attempts,
        _ => false,
    };
    takeable && p.epoch.checked_add(1).is_some_and(|e| e <= MAX_EPOCH)
}

/// An expired claim whose attempts are spent: the next claim without id records it as failed.
fn spent(p: &Pickable<'_>, max_attempts: u32, now: Timestamp) -> bool {
    p.expired(now) && p.attempts.saturating_add(1) >= max_attempts
}

/// The order of ready tasks: higher priority, then older, then by id.
fn rank(a: &Pickable<'_>, b: &Pickable<'_>) -> std::cmp::Ordering {
    b.priority.cmp(&a.priority).then_with(|| a.created_at.cmp(&b.created_at)).then_with(|| a.id.cmp(b.id))
}

/// Which tasks a claim of the next ready task of `kind` at `now` touches, chosen from `tasks` (every live task)
/// with `status_of` (any task's status): the best ready one and the spent claims it records as failed.
pub(crate) fn pick<'a>(
    tasks: impl Iterator<Item = Pickable<'a>>,
    status_of: impl Fn(&str) -> Option<Status>,
    kind: Kind,
    now: Timestamp,
    max_attempts: u32,
) -> (Option<&'a str>, Vec<&'a str>) {
    let mut best: Option<Pickable<'a>> = None;
    let mut swept = Vec::new();
    for p in tasks.filter(|p| p.kind == kind) {
        if spent(&p, max_attempts, now) {
            swept.push(p.id);
        }
        let better = best.as_ref().is_none_or(|b| rank(&p, b).is_lt());
        if better && takeable(&p, max_attempts, now) && p.deps.iter().all(|d| status_of(d) == Some(Status::Done)) {
            best = Some(p);
        }
    }
    (best.map(|b| b.id), swept)
}

/// Refuse to run an op that looks at every task on a board read for a few ([`Board::partial`]).
fn whole(board: &Board, op: &'static str) -> Result<(), DomainError> {
    if board.partial { Err(DomainError::PartialBoard(op)) } else { Ok(()) }
}

fn get<'a>(board: &'a Board, id: &str) -> Result<&'a Stored, DomainError> {
    match (board.tasks.get(id), board.closed.get(id)) {
        (Some(s), _) => Ok(s),
        (None, Some(c)) => Err(DomainError::Final { id: id.to_string(), status: c.status }),
        (None, None) if board.unread.contains(id) => Err(DomainError::PartialBoard("an op about another task")),
        (None, None) => Err(DomainError::UnknownTask(id.to_string())),
    }
}

/// Claim `id`, or the best ready task of `kind`. Claiming a task I already hold (live) renews it, if `epoch` (the
/// epoch I believe I hold, when known) agrees.
///
/// A claim without id first records expired claims whose attempts are spent as failed; when nothing is ready
/// after that, the change holds just those (and the task is `None`), so that nothing stays stuck.
pub fn claim(
    board: &Board,
    actor: &Actor,
    id: Option<&str>,
    kind: Kind,
    lease: Duration,
    epoch: Option<u64>,
) -> Result<(Change, Option<Task>), DomainError> {
    let now = actor.now;
    let mut writes = Vec::new();
    let mut removes = Vec::new();
    let stored = match id {
        Some(id) => {
            let s = get(board, id)?;
            let t = &s.task;
            if t.status.is_final() {
                return Err(DomainError::Final { id: t.id.clone(), status: t.status });
            }
            if let Some(c) = &t.claim {
                // My own live claim: claiming again is a renewal (same epoch). My own expired claim is taken over
                // like anyone's, with a new epoch, so that a stale process of mine is fenced off too.
                if c.agent == actor.agent && c.lease_until > now {
                    let mut removes = vec![];
                    return renew_one(board, s, actor, epoch, lease, &mut removes).map(|(w, t)| {
                        (change("claim", actor, &t, format!("claim {} again", t.id), vec![w], removes), Some(t))
                    });
                }
                if c.lease_until > now {
                    return Err(DomainError::ClaimedByOther {
                        id: t.id.clone(),
                        agent: c.agent.clone(),
                        until: c.lease_until,
                    });
                }
                if t.attempts.saturating_add(1) >= board.config.max_attempts {
                    return Err(DomainError::AttemptsExhausted {
                        id: t.id.clone(),
                        attempts: t.attempts.saturating_add(1),
                    });
                }
            }
            let waiting = waiting_on(board, t);
            if !waiting.is_empty() {
                return Err(DomainError::DepsNotDone { id: t.id.clone(), waiting });
            }
            s
        }
        None => {
            // A board read for this very choice holds every task it touches (`Store::read_next`).
            if board.picked.map(|(k, _)| k) != Some(kind) {
                whole(board, "a claim of the next ready task")?;
            }
            // Expired claims whose attempts are spent cannot be taken; the first claim that passes them by records
            // them as failed so that nothing stays stuck.
            for s in board.tasks.values() {
                let t = &s.task;
                if t.kind == kind && spent(&Pickable::of(t), board.config.max_attempts, now) {
                    let mut t = t.clone();
                    expire(&mut t, now);
                    t.status = Status::Failed;
                    writes.push(place(board, t, &s.path, &mut removes));
                }
            }
            match ready(board, kind, now).into_iter().next() {
                Some(best) => get(board, &best.id)?,
                None if writes.is_empty() => return Err(DomainError::NothingReady { kind }),
                None => {
                    let summary = format!("fail {} expired claims with no attempts left", writes.len());
                    let ch = Change {
                        op: "sweep",
                        agent: actor.agent.clone(),
                        task: writes.first().map(|w| w.task.id.clone()),
                        epoch: None,
                        summary,
                        writes,
                        removes,
                        ..Default::default()
                    };
                    return Ok((ch, None));
                }
            }
        }
    };
    let mut t = stored.task.clone();
    if t.expired_claim(now).is_some() {
        expire(&mut t, now);
    }
    t.epoch = next_epoch(&t)?;
    t.status = Status::Claimed;
    t.claim = Some(Claim { agent: actor.agent.clone(), epoch: t.epoch, lease_until: now.plus(lease).ceil_secs() });
    writes.push(place(board, t.clone(), &stored.path, &mut removes));
    let summary = format!("claim {}: {}", t.id, subject(&t.title));
    Ok((change("claim", actor, &t, summary, writes, removes), Some(t)))
}

/// The epoch of the next claim of `t`, unless epochs have run out (only a hand-made file gets there).
fn next_epoch(t: &Task) -> Result<u64, DomainError> {
    t.epoch.checked_add(1).filter(|e| *e <= MAX_EPOCH).ok_or(DomainError::EpochExhausted { id: t.id.clone() })
}

/// Record that the claim of `t` ran out without a result: one attempt spent.
fn expire(t: &mut Task, now: Timestamp) {
    if let Some(c) = t.claim.take() {
        t.attempts = t.attempts.saturating_add(1);
        // What the attempt reported before its holder went away is kept; what it never reported is lost.
        let usage = t.claim_usage.take();
        t.usage = crate::usage::plus(t.usage, usage);
        t.failures.push(Failure {
            agent: c.agent,
            epoch: c.epoch,
            at: now,
            reason: format!("lease expired at {}", c.lease_until),
            usage,
            kept: None,
        });
    }
    t.claim_usage = None;
    t.status = Status::Open;
}

/// The role whose spend a task's runs are: planners work on plans, workers on the rest.
pub fn role_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Work => "worker",
        Kind::Plan => "planner",
    }
}

/// The swarm's spend with `delta` of `role` added in the running cycle; `None` when there is nothing to add.
pub(crate) fn spend_after(board: &Board, role: &str, delta: &Usage) -> Option<Spend> {
    (!delta.is_zero()).then(|| board.spend.add(role, delta, board.cycle))
}

/// `t`'s claim reports `usage` for its attempt (the whole attempt so far: a newer report replaces an older one):
/// what it adds to the swarm's spend.
fn report_usage(t: &mut Task, usage: Option<Usage>) -> Usage {
    let Some(u) = usage else { return Usage::default() };
    let before = t.claim_usage.unwrap_or_default();
    // Reports of an attempt only grow; one that went down takes nothing back (and counts nothing twice later).
    let merged = before.max_each(&u);
    t.claim_usage = Some(merged);
    merged.since(&before)
}

/// A holder's write of its claimed `t` (a planner's round) that reports `usage` for the attempt so far: the
/// swarm's spend after it, when it adds anything.
pub fn report(board: &Board, t: &mut Task, usage: Option<Usage>) -> Option<Spend> {
    let delta = report_usage(t, usage);
    spend_after(board, role_of(t.kind), &delta)
}

/// The claim of `t` ends: its attempt's usage goes to the task's, and is returned.
fn close_usage(t: &mut Task) -> Option<Usage> {
    let u = t.claim_usage.take();
    t.usage = crate::usage::plus(t.usage, u);
    u
}

/// Check that `t` is claimed by `agent` (under `epoch` when given). The lease may have run out: the holder may
/// still finish as long as nobody has claimed the task since.
pub(crate) fn check_holder<'a>(t: &'a Task, agent: &str, epoch: Option<u64>) -> Result<&'a Claim, DomainError> {
    if t.status.is_final() {
        return Err(DomainError::Final { id: t.id.clone(), status: t.status });
    }
    let c =
        t.claim.as_ref().ok_or(DomainError::NotClaimed { id: t.id.clone(), status: t.status, ever: t.epoch > 0 })?;
    if c.agent != agent {
        return Err(DomainError::NotMine { id: t.id.clone(), holder: c.agent.clone(), agent: agent.to_string() });
    }
    if let Some(e) = epoch
        && e != c.epoch
    {
        return Err(DomainError::StaleEpoch { id: t.id.clone(), mine: e, current: c.epoch });
    }
    Ok(c)
}

fn renew_one(
    board: &Board,
    s: &Stored,
    actor: &Actor,
    epoch: Option<u64>,
    lease: Duration,
    removes: &mut Vec<String>,
) -> Result<(Stored, Task), DomainError> {
    check_holder(&s.task, &actor.agent, epoch)?;
    let mut t = s.task.clone();
    if let Some(c) = t.claim.as_mut() {
        c.lease_until = actor.now.plus(lease).ceil_secs();
    }
    Ok((place(board, t.clone(), &s.path, removes), t))
}

/// [`renew`] of one claim that also reports what its attempt has spent so far (`usage`, the whole attempt's):
/// the runner's lease keeper, so that the board knows what a run spends while it runs, without a push of its own.
pub fn renew_reporting(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    lease: Duration,
    usage: Option<Usage>,
) -> Result<(Change, Vec<Task>), DomainError> {
    let (mut ch, _) = renew(board, actor, Some(id), epoch, lease)?;
    let Some(w) = ch.writes.first_mut() else { return Ok((ch, vec![])) };
    let delta = report_usage(&mut w.task, usage);
    ch.spend = spend_after(board, role_of(w.task.kind), &delta);
    let tasks = vec![w.task.clone()];
    Ok((ch, tasks))
}

/// Extend the lease of my claim on `id`, or of every claim I hold.
pub fn renew(
    board: &Board,
    actor: &Actor,
    id: Option<&str>,
    epoch: Option<u64>,
    lease: Duration,
) -> Result<(Change, Vec<Task>), DomainError> {
    let mut writes = Vec::new();
    let mut tasks = Vec::new();
    let mut removes = Vec::new();
    match id {
        Some(id) => {
            let (w, t) = renew_one(board, get(board, id)?, actor, epoch, lease, &mut removes)?;
            writes.push(w);
            tasks.push(t);
        }
        None => {
            whole(board, "a renewal of every claim")?;
            for s in board.tasks.values() {
                if s.task.status == Status::Claimed && s.task.claim.as_ref().is_some_and(|c| c.agent == actor.agent) {
                    let (w, t) = renew_one(board, s, actor, None, lease, &mut removes)?;
                    writes.push(w);
                    tasks.push(t);
                }
            }
        }
    }
    let summary = match tasks.as_slice() {
        [one] => format!("renew {}: until {}", one.id, actor.now.plus(lease).ceil_secs()),
        many => format!("renew {} claims of {}", many.len(), actor.agent),
    };
    let mut ch = Change {
        op: "renew",
        agent: actor.agent.clone(),
        task: tasks.first().map(|t| t.id.clone()),
        epoch: None,
        summary,
        writes,
        removes,
        ..Default::default()
    };
    if let [one] = tasks.as_slice() {
        ch.epoch = one.claim.as_ref().map(|c| c.epoch);
    }
    Ok((ch, tasks))
}

/// The shape of the holder's ops that end a claim: check that `id` is mine (under `epoch`), drop the claim, let
/// `end` set the outcome, and write the task where its new status belongs.
fn end_claim(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    op: &'static str,
    usage: Option<Usage>,
    end: impl FnOnce(&mut Task, u64, Option<Usage>),
) -> Result<(Change, Task), DomainError> {
    let s = get(board, id)?;
    let ep = check_holder(&s.task, &actor.agent, epoch)?.epoch;
    let mut t = s.task.clone();
    t.claim = None;
    let delta = report_usage(&mut t, usage);
    let attempt = close_usage(&mut t);
    end(&mut t, ep, attempt);
    let mut summary = format!("{op} {}: {}", t.id, subject(&t.title));
    if let Some(u) = attempt {
        summary.push_str(&format!(" ({})", spent_briefly(&u)));
    }
    let mut removes = vec![];
    let w = place(board, t.clone(), &s.path, &mut removes);
    let mut ch = change(op, actor, &t, summary, vec![w], removes);
    ch.epoch = Some(ep);
    ch.spend = spend_after(board, role_of(t.kind), &delta);
    Ok((ch, t))
}

/// `12.3k tokens, $0.04`: what an attempt spent, for a commit subject.
pub fn spent_briefly(u: &Usage) -> String {
    let tokens = format!("{} tokens", crate::usage::short_count(u.tokens()));
    match u.cost_usd {
        Some(c) => format!("{tokens}, {c}"),
        None => tokens,
    }
}

/// Give my claim back: the task is open again, no attempt spent.
pub fn release(board: &Board, actor: &Actor, id: &str, epoch: Option<u64>) -> Result<(Change, Task), DomainError> {
    release_reporting(board, actor, id, epoch, None)
}

/// [`release`], reporting what the attempt spent (`usage`: the whole attempt's).
pub fn release_reporting(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    usage: Option<Usage>,
) -> Result<(Change, Task), DomainError> {
    end_claim(board, actor, id, epoch, "release", usage, |t, _, _| t.status = Status::Open)
}

/// My claimed task is done. Final.
pub fn done(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    commit: Option<String>,
    note: Option<String>,
) -> Result<(Change, Task), DomainError> {
    done_reporting(board, actor, id, epoch, commit, note, None)
}

/// [`done`], reporting what the attempt spent (`usage`: the whole attempt's, agent and conflict runs).
pub fn done_reporting(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    commit: Option<String>,
    note: Option<String>,
    usage: Option<Usage>,
) -> Result<(Change, Task), DomainError> {
    end_claim(board, actor, id, epoch, "done", usage, |t, ep, _| {
        t.status = Status::Done;
        t.result =
            Some(TaskResult { commit, note, agent: Some(actor.agent.clone()), epoch: Some(ep), at: Some(actor.now) });
    })
}

/// Finish a task whose claim ran out and whose code is on the target already (`commit`, found by its `Swarm-Task:`
/// trailer): a landing whose state half failed, its holder gone. Anyone may do it; the claim's epoch is recorded
/// as the result's. A live claim is its holder's to finish.
pub(crate) fn done_landed(
    board: &Board,
    actor: &Actor,
    id: &str,
    commit: String,
) -> Result<(Change, Task), DomainError> {
    let s = get(board, id)?;
    let c = s.task.claim.as_ref().ok_or(DomainError::NotClaimed {
        id: id.to_string(),
        status: s.task.status,
        ever: s.task.epoch > 0,
    })?;
    if s.task.expired_claim(actor.now).is_none() {
        return Err(DomainError::ClaimedByOther { id: id.to_string(), agent: c.agent.clone(), until: c.lease_until });
    }
    let note = format!("rolled forward by {}: the code was on the target, the claim had run out", actor.agent);
    Ok(finish_found(board, actor, s, c.epoch, commit, note, "rolled forward"))
}

/// Finish an open or claimed task whose code is on the target already (`commit`, found by its trailer), whoever
/// holds it: what `doctor` does after it restored a state ref from an older tip, on which tasks that had landed
/// are open again (their code would land twice). A live holder's next op is refused (done is final).
pub fn done_found(
    board: &Board,
    actor: &Actor,
    id: &str,
    commit: String,
    why: &str,
) -> Result<(Change, Task), DomainError> {
    let s = get(board, id)?;
    if s.task.status.is_final() {
        return Err(DomainError::Final { id: id.to_string(), status: s.task.status });
    }
    let ep = s.task.claim.as_ref().map(|c| c.epoch).unwrap_or(s.task.epoch);
    Ok(finish_found(board, actor, s, ep, commit, why.to_string(), "its code is on the target"))
}

/// `s` done with `commit` as its result, under `epoch`, with `note`.
fn finish_found(
    board: &Board,
    actor: &Actor,
    s: &Stored,
    epoch: u64,
    commit: String,
    note: String,
    how: &str,
) -> (Change, Task) {
    let mut t = s.task.clone();
    t.claim = None;
    close_usage(&mut t);
    t.status = Status::Done;
    t.result = Some(TaskResult {
        commit: Some(commit),
        note: Some(note),
        agent: Some(actor.agent.clone()),
        epoch: Some(epoch),
        at: Some(actor.now),
    });
    let summary = format!("done {}: {} ({how})", t.id, subject(&t.title));
    let mut removes = vec![];
    let w = place(board, t.clone(), &s.path, &mut removes);
    let mut ch = change("done", actor, &t, summary, vec![w], removes);
    ch.epoch = Some(epoch);
    (ch, t)
}

/// My claimed task failed: one attempt spent; open again while attempts remain, else `failed`.
pub fn fail(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    reason: String,
) -> Result<(Change, Task), DomainError> {
    fail_reporting(board, actor, id, epoch, reason, None, false, None)
}

/// [`fail`], reporting what the attempt spent (`usage`: the whole attempt's). `for_good`: the task is `failed`
/// whatever attempts are left (it spent its budget: another attempt would start past it). `kept`: where the
/// attempt's work was kept.
#[allow(clippy::too_many_arguments)]
pub fn fail_reporting(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    reason: String,
    usage: Option<Usage>,
    for_good: bool,
    kept: Option<String>,
) -> Result<(Change, Task), DomainError> {
    end_claim(board, actor, id, epoch, "fail", usage, |t, ep, usage| {
        t.attempts = t.attempts.saturating_add(1);
        t.failures.push(Failure { agent: actor.agent.clone(), epoch: ep, at: actor.now, reason, usage, kept });
        t.status = if for_good || t.attempts >= board.config.max_attempts { Status::Failed } else { Status::Open };
    })
}

fn change(
    op: &'static str,
    actor: &Actor,
    t: &Task,
    summary: String,
    writes: Vec<Stored>,
    removes: Vec<String>,
) -> Change {
    Change {
        op,
        agent: actor.agent.clone(),
        task: Some(t.id.clone()),
        epoch: t.claim.as_ref().map(|c| c.epoch),
        summary,
        writes,
        removes,
        ..Default::default()
    }
}

/// A title fit for a commit subject: one line, no control characters, at most 72 characters.
fn subject(title: &str) -> String {
    let one: String = title.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let one = one.trim();
    if one.chars().count() > 72 {
        let cut: String = one.chars().take(71).collect();
        format!("{cut}…")
    } else {
        one.to_string()
    }
}

/// Open a failed or cancelled task again, its attempts reset (its failures stay on record, for the next agent to
/// read). `task` is the task as stored at `path` (a finished task may not be read into the board: the caller reads
/// it). The tasks that were cancelled because they waited on it are not reopened here.
pub fn retry(board: &Board, actor: &Actor, task: &Task, path: &str) -> Result<(Change, Task), DomainError> {
    if !matches!(task.status, Status::Failed | Status::Cancelled) {
        return Err(DomainError::NotRetryable { id: task.id.clone(), status: task.status });
    }
    let mut t = task.clone();
    t.status = Status::Open;
    t.attempts = 0;
    t.claim = None;
    t.claim_usage = None;
    let live = task_path(&t.id);
    let mut removes = vec![];
    if path != live {
        removes.push(path.to_string());
    }
    for twin in board.twins.get(&t.id).into_iter().flatten() {
        if *twin != live && !removes.contains(twin) {
            removes.push(twin.clone());
        }
    }
    let summary = format!("retry {}: {}", t.id, subject(&t.title));
    let ch = change("retry", actor, &t, summary, vec![Stored { path: live, task: t.clone() }], removes);
    Ok((ch, t))
}

/// A cycle of dependencies that `task` is on or waits on, through tasks that are open or claimed (done ones are
/// no longer waited on): the ids along it, its first id again at the end. Only a state ref edited by hand holds
/// one (`add` and the planner refuse them), and no task on or behind it can ever run.
pub(crate) fn dependency_cycle(board: &Board, task: &Task) -> Option<Vec<String>> {
    use std::collections::HashMap;
    #[derive(PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    let waits = |t: &Task| matches!(t.status, Status::Open | Status::Claimed);
    if !waits(task) {
        return None;
    }
    let mut marks: HashMap<&str, Mark> = HashMap::new();
    // The depth-first path: a task and how many of its deps were looked at (no recursion: boards are large).
    let mut path: Vec<(&str, &[String], usize)> = vec![(task.id.as_str(), task.deps.as_slice(), 0)];
    marks.insert(task.id.as_str(), Mark::OnPath);
    while let Some(top) = path.last_mut() {
        let (node, deps, next) = (top.0, top.1, top.2);
        let Some(dep) = deps.get(next) else {
            marks.insert(node, Mark::Done);
            path.pop();
            continue;
        };
        top.2 += 1;
        match marks.get(dep.as_str()) {
            Some(Mark::OnPath) => {
                let at = path.iter().position(|(n, _, _)| *n == dep.as_str()).unwrap_or(0);
                let mut cycle: Vec<String> = path[at..].iter().map(|(n, _, _)| n.to_string()).collect();
                cycle.push(dep.clone());
                return Some(cycle);
            }
            Some(Mark::Done) => continue,
            None => {}
        }
        match board.tasks.get(dep.as_str()).map(|s| &s.task).filter(|t| waits(t)) {
            Some(t) => {
                marks.insert(t.id.as_str(), Mark::OnPath);
                path.push((t.id.as_str(), t.deps.as_slice(), 0));
            }
            None => {
                marks.insert(dep.as_str(), Mark::Done);
            }
        }
    }
    None
}

/// Why `task` can never become ready: a dependency (or a dependency's dependency, through open tasks) failed or
/// was cancelled, or its dependencies form a cycle. `None` while it can still run.
pub fn blocked_for_good(board: &Board, task: &Task) -> Option<String> {
    if let Some((d, st)) = blocked_by_failure(board, task) {
        return Some(format!("{d} is {st}"));
    }
    dependency_cycle(board, task).map(|c| format!("its dependencies form a cycle {}", c.join(" → ")))
}

/// The failed or cancelled task (a dependency, or a dependency's, through open tasks) that `task` waits on for
/// ever, if any, and its status.
pub fn blocked_by_failure<'a>(board: &'a Board, task: &'a Task) -> Option<(&'a str, Status)> {
    let mut stack: Vec<&str> = task.deps.iter().map(String::as_str).collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(d) = stack.pop() {
        if !seen.insert(d) {
            continue;
        }
        match board.status_of(d) {
            Some(st @ (Status::Failed | Status::Cancelled)) => return Some((d, st)),
            Some(Status::Open | Status::Claimed) => {
                if let Some(s) = board.tasks.get(d) {
                    stack.extend(s.task.deps.iter().map(String::as_str));
                }
            }
            _ => {}
        }
    }
    None
}

/// Cancel the open tasks among `ids` that can never run (see [`blocked_for_good`]), with the reason recorded as a
/// failure. Others are left alone.
pub fn cancel_blocked(board: &Board, actor: &Actor, ids: &[String]) -> Change {
    let why = |t: &Task| {
        if t.status != Status::Open {
            return None;
        }
        blocked_for_good(board, t).map(|w| format!("cancelled: {w}"))
    };
    let mut ch = cancel_where(board, actor, ids, why);
    ch.summary = format!("cancel {} task(s) whose dependencies failed", ch.writes.len());
    ch
}

/// Cancel the tasks among `ids` that are open or claimed (a claim ends with it: its holder is fenced off, its next
/// op is refused), `reason` recorded as a failure. Finished tasks are left alone.
pub fn cancel(board: &Board, actor: &Actor, ids: &[String], reason: &str) -> Change {
    let why = |t: &Task| matches!(t.status, Status::Open | Status::Claimed).then(|| format!("cancelled: {reason}"));
    let mut ch = cancel_where(board, actor, ids, why);
    ch.summary = format!("cancel {} task(s): {}", ch.writes.len(), subject(reason));
    ch
}

/// `git swarm cancel <id>`: one open or claimed task will not be done (its holder is fenced off), `reason` recorded
/// as a failure. Cancelling a cancelled task changes nothing (`None`: the task is not read, it is stored apart);
/// a done or failed task is final (`retry` opens a failed one again). With the task as written and the ids of the
/// tasks that wait on it, which can then never run.
pub fn cancel_task(
    board: &Board,
    actor: &Actor,
    id: &str,
    reason: &str,
) -> Result<(Change, Option<Task>, Vec<String>), DomainError> {
    let s = match get(board, id) {
        Err(DomainError::Final { status: Status::Cancelled, .. }) => return Ok((Change::default(), None, vec![])),
        other => other?,
    };
    match s.task.status {
        Status::Open | Status::Claimed => {}
        Status::Cancelled => return Ok((Change::default(), Some(s.task.clone()), vec![])),
        status => return Err(DomainError::Final { id: id.to_string(), status }),
    }
    let mut ch = cancel(board, actor, &[id.to_string()], reason);
    ch.summary = format!("cancel {id}: {}", subject(reason));
    let task = ch.writes.first().map(|w| w.task.clone());
    let waiting = board
        .tasks
        .values()
        .filter(|w| matches!(w.task.status, Status::Open | Status::Claimed) && w.task.deps.iter().any(|d| d == id))
        .map(|w| w.task.id.clone())
        .collect();
    Ok((ch, task, waiting))
}

fn cancel_where(board: &Board, actor: &Actor, ids: &[String], why: impl Fn(&Task) -> Option<String>) -> Change {
    let mut writes = Vec::new();
    let mut removes = Vec::new();
    for id in ids {
        let Some(s) = board.tasks.get(id) else { continue };
        let Some(reason) = why(&s.task) else { continue };
        let mut t = s.task.clone();
        t.status = Status::Cancelled;
        t.claim = None;
        let usage = close_usage(&mut t);
        t.failures.push(Failure {
            agent: actor.agent.clone(),
            epoch: t.epoch,
            at: actor.now,
            reason,
            usage,
            kept: None,
        });
        writes.push(place(board, t, &s.path, &mut removes));
    }
    Change {
        op: "cancel",
        agent: actor.agent.clone(),
        task: writes.first().map(|w| w.task.id.clone()),
        writes,
        removes,
        ..Default::default()
    }
}

/// Replace the swarm's settings (`swarm.toml`) by `config` — computed from this board's, so that a lost race
/// re-applies the edit to the newest settings. The same settings are no change (and no push). `what` names the
/// edit in the log (`config lease`). On a board whose `swarm.toml` cannot be read ([`Board::broken_settings`]) it is
/// always a change: it replaces the broken file.
pub fn configure(board: &Board, actor: &Actor, config: &Config, what: &str) -> Result<Change, DomainError> {
    // Broken settings are shown as the newest good ones: writing those back is a change.
    if *config == board.config && board.broken_settings.is_none() {
        return Ok(Change::default());
    }
    let text = toml::to_string(config).map_err(|e| DomainError::BadSetting(format!("cannot write it: {e}")))?;
    Ok(Change {
        op: "config",
        agent: actor.agent.clone(),
        summary: crate::escape::line(&format!("config {what}")),
        files: BTreeMap::from([(crate::state::CONFIG_PATH.to_string(), text)]),
        ..Default::default()
    })
}

/// Apply a change to a board in memory (what committing it would give), for tests and for chaining ops.
pub fn apply(board: &mut Board, change: &Change) {
    for r in &change.removes {
        board.twins.values_mut().for_each(|v| v.retain(|p| p != r));
    }
    for w in &change.writes {
        board.twins.remove(&w.task.id);
        board.closed.remove(&w.task.id);
        board.tasks.insert(w.task.id.clone(), w.clone());
    }
    if let Some(s) = &change.spend {
        board.spend = s.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim that must come back with a task.
    fn claim1(
        b: &Board,
        a: &Actor,
        id: Option<&str>,
        kind: Kind,
        lease: Duration,
    ) -> Result<(Change, Task), DomainError> {
        claim(b, a, id, kind, lease, None).map(|(c, t)| (c, t.expect("a claimed task")))
    }

    fn actor(a: &str, now: u64) -> Actor {
        Actor { agent: a.into(), now: Timestamp::from_secs(now) }
    }

    fn board_with(n: usize) -> (Board, Vec<String>) {
        let mut b = Board::default();
        let mut k = 0;
        let mut mint = || {
            k += 1;
            format!("t-{k:06x}")
        };
        let new = (0..n).map(|i| NewTask { title: format!("task {i}"), ..Default::default() }).collect();
        let (ch, tasks) = add(&b, &actor("p", 100), new, &mut mint).expect("add");
        apply(&mut b, &ch);
        (b, tasks.into_iter().map(|t| t.id).collect())
    }

    #[test]
    fn add_files_only_what_readers_read_back() {
        let b = Board::default();
        let mut mint = || "t-00000a".to_string();
        let add1 = |new: NewTask, mint: &mut dyn FnMut() -> String| add(&b, &actor("p", 100), vec![new], mint);
        // A NUL in the title would stop every runner that claims it (it cannot go into an environment variable).
        let nul = NewTask { title: "a\0b".into(), ..Default::default() };
        assert!(matches!(add1(nul, &mut mint), Err(DomainError::Invalid { why, .. }) if why.contains("NUL")));
        // A file past the read limit would be skipped by every reader.
        let huge = NewTask { title: "big".into(), body: "x".repeat(1024 * 1024), ..Default::default() };
        assert!(matches!(add1(huge, &mut mint), Err(DomainError::Invalid { why, .. }) if why.contains("limit")));
        let empty = NewTask { title: "  ".into(), ..Default::default() };
        assert!(matches!(add1(empty, &mut mint), Err(DomainError::Invalid { .. })));
        let fine = NewTask { title: "fine \x1b[2J escapes are data".into(), ..Default::default() };
        assert!(add1(fine, &mut mint).is_ok());
    }

    #[test]
    fn claim_done_is_final_and_fenced() {
        let (mut b, ids) = board_with(1);
        let lease = Duration::from_secs(10);
        let (ch, t) = claim1(&b, &actor("a", 100), None, Kind::Work, lease).expect("claim");
        assert_eq!(t.epoch, 1);
        apply(&mut b, &ch);
        // b cannot claim while the lease is live.
        assert!(matches!(
            claim1(&b, &actor("b", 105), Some(&ids[0]), Kind::Work, lease),
            Err(DomainError::ClaimedByOther { .. })
        ));
        // after expiry b takes over with a higher epoch; a is fenced.
        let (ch, t) = claim1(&b, &actor("b", 111), Some(&ids[0]), Kind::Work, lease).expect("takeover");
        assert_eq!((t.epoch, t.attempts), (2, 1));
        apply(&mut b, &ch);
        assert!(matches!(done(&b, &actor("a", 112), &ids[0], None, None, None), Err(DomainError::NotMine { .. })));
        assert!(matches!(
            done(&b, &actor("b", 112), &ids[0], Some(1), None, None),
            Err(DomainError::StaleEpoch { .. })
        ));
        let (ch, t) = done(&b, &actor("b", 112), &ids[0], Some(2), None, Some("ok".into())).expect("done");
        assert_eq!(t.status, Status::Done);
        apply(&mut b, &ch);
        assert!(matches!(
            claim1(&b, &actor("c", 999), Some(&ids[0]), Kind::Work, lease),
            Err(DomainError::Final { .. })
        ));
        assert!(matches!(fail(&b, &actor("b", 113), &ids[0], None, "x".into()), Err(DomainError::Final { .. })));
    }

    #[test]
    fn deps_and_priority_order_ready() {
        let (mut b, ids) = board_with(3);
        let mut t = b.tasks[&ids[1]].task.clone();
        t.deps = vec![ids[0].clone()];
        b.tasks.get_mut(&ids[1]).expect("present").task = t;
        b.tasks.get_mut(&ids[2]).expect("present").task.priority = 5;
        let r: Vec<&str> = ready(&b, Kind::Work, Timestamp::from_secs(100)).iter().map(|t| t.id.as_str()).collect();
        assert_eq!(r, vec![ids[2].as_str(), ids[0].as_str()]);
        assert!(matches!(
            claim1(&b, &actor("a", 100), Some(&ids[1]), Kind::Work, Duration::from_secs(5)),
            Err(DomainError::DepsNotDone { .. })
        ));
    }

    #[test]
    fn dependency_cycles_are_found_and_diamonds_are_not_cycles() {
        let (mut b, ids) = board_with(5);
        let set = |b: &mut Board, i: usize, deps: &[usize]| {
            b.tasks.get_mut(&ids[i]).expect("present").task.deps = deps.iter().map(|d| ids[*d].clone()).collect();
        };
        // A diamond: 3 → {1, 2} → 0.
        set(&mut b, 1, &[0]);
        set(&mut b, 2, &[0]);
        set(&mut b, 3, &[1, 2]);
        for id in &ids {
            assert_eq!(dependency_cycle(&b, &b.tasks[id].task), None, "{id}");
        }
        // 0 → 1 closes a cycle 0 → 1 → 0; 3 and 4 (4 → 3) wait on it, and can never run either.
        set(&mut b, 0, &[1]);
        set(&mut b, 4, &[3]);
        let c = dependency_cycle(&b, &b.tasks[&ids[4]].task).expect("a cycle behind 4");
        assert_eq!((c.first(), c.last()), (c.last(), c.first()), "{c:?}");
        assert!(c.contains(&ids[0]) && c.contains(&ids[1]) && !c.contains(&ids[4]), "{c:?}");
        let why = blocked_for_good(&b, &b.tasks[&ids[3]].task).expect("blocked");
        assert!(why.contains("cycle"), "{why}");
        // A task that is done ends the wait: no cycle through it.
        b.tasks.get_mut(&ids[1]).expect("present").task.status = Status::Done;
        assert_eq!(dependency_cycle(&b, &b.tasks[&ids[4]].task), None);
        // `add` refuses a task that would wait on a cycle, naming it.
        b.tasks.get_mut(&ids[1]).expect("present").task.status = Status::Open;
        let new = NewTask { title: "x".into(), deps: vec![ids[3].clone()], ..NewTask::default() };
        let mut n = 0;
        let mut mint = || {
            n += 1;
            format!("t-new{n}")
        };
        assert!(matches!(
            add(&b, &actor("a", 1), vec![new], &mut mint),
            Err(DomainError::DependencyCycle { dep, .. }) if dep == ids[3]
        ));
    }

    #[test]
    fn fail_spends_attempts_until_failed() {
        let (mut b, ids) = board_with(1);
        b.config.max_attempts = 2;
        let lease = Duration::from_secs(10);
        for (i, want) in [(0, Status::Open), (1, Status::Failed)] {
            let (ch, _) = claim1(&b, &actor("a", 100 + i), Some(&ids[0]), Kind::Work, lease).expect("claim");
            apply(&mut b, &ch);
            let (ch, t) = fail(&b, &actor("a", 100 + i), &ids[0], None, "broke".into()).expect("fail");
            assert_eq!(t.status, want);
            apply(&mut b, &ch);
        }
        assert_eq!(b.tasks[&ids[0]].task.failures.len(), 2);
    }

    #[test]
    fn expired_claims_with_no_attempts_left_are_swept() {
        let (mut b, ids) = board_with(2);
        b.config.max_attempts = 1;
        let lease = Duration::from_secs(10);
        let (ch, _) = claim1(&b, &actor("a", 100), Some(&ids[0]), Kind::Work, lease).expect("claim");
        apply(&mut b, &ch);
        let (ch, t) = claim1(&b, &actor("b", 200), None, Kind::Work, lease).expect("claim other");
        assert_eq!(t.id, ids[1]);
        apply(&mut b, &ch);
        assert_eq!(b.tasks[&ids[0]].task.status, Status::Failed);
    }

    #[test]
    fn a_lone_exhausted_claim_is_swept_even_when_nothing_is_ready() {
        let (mut b, ids) = board_with(1);
        b.config.max_attempts = 1;
        let (ch, _) = claim1(&b, &actor("a", 100), Some(&ids[0]), Kind::Work, Duration::from_secs(10)).expect("claim");
        apply(&mut b, &ch);
        let (ch, t) = claim(&b, &actor("b", 200), None, Kind::Work, Duration::from_secs(10), None).expect("sweep");
        assert_eq!(t, None);
        assert_eq!(ch.writes[0].task.status, Status::Failed);
        assert_eq!(ch.writes[0].path, closed_path(Status::Failed, &ids[0]));
        apply(&mut b, &ch);
        assert!(matches!(
            claim(&b, &actor("b", 300), None, Kind::Work, Duration::from_secs(10), None),
            Err(DomainError::NothingReady { .. })
        ));
    }

    #[test]
    fn a_stale_twin_of_my_agent_cannot_renew_by_claiming() {
        let (mut b, ids) = board_with(1);
        let lease = Duration::from_secs(60);
        let (ch, _) = claim1(&b, &actor("w", 100), Some(&ids[0]), Kind::Work, lease).expect("claim");
        apply(&mut b, &ch);
        assert!(matches!(
            claim(&b, &actor("w", 110), Some(&ids[0]), Kind::Work, lease, Some(7)),
            Err(DomainError::StaleEpoch { .. })
        ));
        assert!(claim(&b, &actor("w", 110), Some(&ids[0]), Kind::Work, lease, Some(1)).is_ok());
    }

    #[test]
    fn ids_never_collide() {
        let (b, _) = board_with(1);
        let mut calls = 0;
        let mut mint = || {
            calls += 1;
            if calls < 3 { "t-000001".to_string() } else { "t-000002".to_string() }
        };
        let (_, tasks) =
            add(&b, &actor("p", 1), vec![NewTask { title: "x".into(), ..Default::default() }], &mut mint).expect("add");
        assert_eq!(tasks[0].id, "t-000002");
    }

    #[test]
    fn paths_fan_out_by_hex() {
        assert_eq!(task_path("t-3f9a2c"), "tasks/3f/t-3f9a2c.toml");
        assert_eq!(task_path("zz"), "tasks/xx/zz.toml");
        assert_eq!(closed_path(Status::Done, "t-3f9a2c"), "tasks/done/3f/t-3f9a2c.toml");
    }
}
