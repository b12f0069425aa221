//! A worker's claim of its next task, as one pure op: nothing when the judge stopped the swarm or the running cycle
//! spent its budget; else the expired claims whose attempts are spent are looked up on the target first (their code
//! may have landed with its `done` lost); then those whose code is there are finished as done, the rest swept as
//! failed, and the best ready work task claimed — in one change ([`next_work`]).

use std::collections::BTreeMap;
use std::time::Duration;

use gix::ObjectId;

use super::{Actor, Board, Change, DomainError};
use crate::model::{Kind, Task};
use crate::time::Timestamp;
use crate::usage::Limit;

/// What a worker's claim found.
#[derive(Debug, Clone)]
pub enum Claimed {
    /// The judge stopped the swarm in this cycle.
    Stopped(u64),
    /// The running cycle spent its budget.
    Budget(String),
    /// These expired claims with no attempts left (task, epoch of the claim) are to be looked up on the target
    /// first.
    LookUp(Vec<(String, u64)>),
    /// A claim (or a sweep alone: `None`).
    Task(Option<Box<Task>>),
}

/// The worker's claim on `board`: nothing when the judge stopped the swarm (`stopped`: the cycle whose verdict was
/// `stop`) or the cycle spent `cycle_budget`; else the expired claims with no attempts left to look up first (those
/// not in `looked_up`: task → its code on the target, if any); else [`claim_work`].
pub fn next_work(
    board: &Board,
    actor: &Actor,
    stopped: Option<u64>,
    looked_up: &BTreeMap<String, Option<ObjectId>>,
    cycle_budget: &Limit,
) -> Result<(Change, Claimed), DomainError> {
    if let Some(cycle) = stopped {
        return Ok((Change::default(), Claimed::Stopped(cycle)));
    }
    if let Some(why) = super::cycle::budget_spent(board, cycle_budget) {
        return Ok((Change::default(), Claimed::Budget(why)));
    }
    let epoch = |id: &String| board.tasks.get(id).and_then(|s| s.task.claim.as_ref()).map_or(0, |c| c.epoch);
    let unknown: Vec<(String, u64)> = sweep_candidates(board, actor.now)
        .into_iter()
        .filter(|id| !looked_up.contains_key(id))
        .map(|id| {
            let e = epoch(&id);
            (id, e)
        })
        .collect();
    if !unknown.is_empty() {
        return Ok((Change::default(), Claimed::LookUp(unknown)));
    }
    let landed = looked_up.iter().filter_map(|(id, c)| Some((id.clone(), (*c)?.to_string()))).collect();
    claim_work(board, actor, board.config.lease, &landed).map(|(ch, t)| (ch, Claimed::Task(t.map(Box::new))))
}

/// The expired work claims whose attempts are spent: a claim without id sweeps them (as failed, unless their code
/// is on the target).
pub fn sweep_candidates(board: &Board, now: Timestamp) -> Vec<String> {
    board
        .tasks
        .values()
        .map(|s| &s.task)
        .filter(|t| {
            t.kind == Kind::Work
                && t.expired_claim(now).is_some()
                && t.attempts.saturating_add(1) >= board.config.max_attempts
        })
        .map(|t| t.id.clone())
        .collect()
}

/// First finish the expired claims whose code is on the target (`landed`: task → commit, a landing whose state half
/// failed and whose holder is gone), then claim the best ready work task, sweeping the other exhausted claims as
/// failed.
pub(crate) fn claim_work(
    board: &Board,
    actor: &Actor,
    lease: Duration,
    landed: &BTreeMap<String, String>,
) -> Result<(Change, Option<Task>), DomainError> {
    let mut after = board.clone();
    let mut ch = Change::default();
    for (id, commit) in landed {
        if let Ok((done, _)) = super::done_landed(&after, actor, id, commit.clone()) {
            super::apply(&mut after, &done);
            ch = ch.then(done);
        }
    }
    match super::claim(&after, actor, None, Kind::Work, lease, None) {
        Ok((next, task)) => Ok((ch.then(next), task)),
        Err(DomainError::NothingReady { .. }) if !ch.is_empty() => Ok((ch, None)),
        Err(e) => Err(e),
    }
}

/// Is there nothing to do: no ready task of any kind and no claim, live or expired? An expired claim whose
/// attempts are spent is not ready, yet not over either: the next claim records it as failed (found by the model
/// check, `tests/model.rs`: counting only live claims let every worker exit with such a task still claimed).
pub fn idle(board: &Board, now: Timestamp) -> bool {
    board
        .tasks
        .values()
        .all(|s| s.task.status != crate::model::Status::Claimed && !super::is_ready(board, &s.task, now))
}
