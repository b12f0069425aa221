//! A worker's claim of its next task, as one pure op: nothing when the judge stopped the swarm or the running cycle
//! spent its budget; else the expired claims whose attempts are spent are looked up on the target first (their code
//! may have landed with its `done` lost); then those whose code is there are finished as done, the rest swept as
//! failed, and the best ready work task claimed — in one change ([`next_work`]).

use std::collections::BTreeMap;
use std::time::Duration;

use gix::ObjectId;

use super::*;
use crate::model::{Kind, Task};
use crate::time::Timestamp;
use crate::usage::Limit;

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
pub(crate) fn next_epoch(t: &Task) -> Result<u64, DomainError> {
    t.epoch.checked_add(1).filter(|e| *e <= MAX_EPOCH).ok_or(DomainError::EpochExhausted { id: t.id.clone() })
}

/// Record that the claim of `t` ran out without a result: one attempt spent.
pub(crate) fn expire(t: &mut Task, now: Timestamp) {
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
/// not in `looked_up`: task → its code on the target, if any); else `claim_work`.
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
