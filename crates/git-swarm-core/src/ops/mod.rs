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

mod add;
pub mod claim;
pub mod cycle;
mod deps;
pub mod goal;
mod holder;
pub mod land;
mod pick;
pub mod plan;

pub(crate) use add::fresh_id;
pub use add::{NewTask, add, mint_id, retry};
pub use claim::claim;
pub(crate) use deps::dependency_cycle;
pub use deps::{blocked_by_failure, blocked_for_good, cancel, cancel_blocked, cancel_task};
pub use holder::{Failing, done, done_found, fail, release, renew, report, role_of, spent_briefly};
pub(crate) use holder::{check_holder, close_usage, done_landed, spend_after};
pub(crate) use pick::{Deps, Pickable, pick, rank, takeable};
pub use pick::{is_ready, ready, waiting_on};
// What the rooms of `ops` share among themselves.
use holder::*;
use pick::*;

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
        assert!(matches!(
            done(&b, &actor("a", 112), &ids[0], None, None, None, None),
            Err(DomainError::NotMine { .. })
        ));
        assert!(matches!(
            done(&b, &actor("b", 112), &ids[0], Some(1), None, None, None),
            Err(DomainError::StaleEpoch { .. })
        ));
        let (ch, t) = done(&b, &actor("b", 112), &ids[0], Some(2), None, Some("ok".into()), None).expect("done");
        assert_eq!(t.status, Status::Done);
        apply(&mut b, &ch);
        assert!(matches!(
            claim1(&b, &actor("c", 999), Some(&ids[0]), Kind::Work, lease),
            Err(DomainError::Final { .. })
        ));
        assert!(matches!(
            fail(&b, &actor("b", 113), &ids[0], None, Failing::because("x")),
            Err(DomainError::Final { .. })
        ));
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
            let (ch, t) = fail(&b, &actor("a", 100 + i), &ids[0], None, Failing::because("broke")).expect("fail");
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
