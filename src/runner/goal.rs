//! The goal of a swarm (`goal.md`) and the cycles it is worked in.
//!
//! The first goal is filed with the root plan task (`up --goal`, `run planner --goal`). A different goal is never
//! taken silently from those flags: `git swarm goal` sets it, ends the cycle that runs (or the judge's `stop`) with a
//! record of its own, and files a fresh root plan — so a swarm can always go on.

use crate::model::{Kind, Status};
use crate::ops::{self, Actor, Board, Change, DomainError, NewTask};
use crate::store::{Identity, Store};
use crate::time::Timestamp;
use crate::txn::{Retry, Swarm};

use super::{CycleRecord, RunError, Verdict};

/// What filing a goal came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filed {
    /// The swarm had no goal: this one is filed, with its root plan.
    New,
    /// The swarm has this goal already.
    Same,
    /// A new goal replaced the old one; cycle `ended` was closed and the next one opened with a root plan.
    Replaced { ended: u64, plan: String },
}

/// `up --goal`, `run planner --goal`: file `goal` when the swarm has none. The same goal again is fine; a different
/// one is refused (a usage error): it is `git swarm goal`'s to change, never a side effect of starting a fleet.
pub fn file_first(
    swarm: &Swarm,
    retry: &Retry,
    who: &Identity,
    clock: &dyn Fn() -> Timestamp,
    agent: &str,
    goal: &str,
) -> Result<Filed, RunError> {
    let goal = clean(goal)?;
    let res = swarm.transact(retry, who, clock, |snap, now| match super::goal(swarm.store(), snap.commit) {
        Some(g) if g.trim() == goal => Ok((Change::default(), Ok(Filed::Same))),
        Some(g) => Ok((Change::default(), Err(g))),
        None => {
            let actor = Actor { agent: agent.to_string(), now };
            Ok((first_goal(&snap.board, &actor, &goal, None)?.0, Ok(Filed::New)))
        }
    })?;
    res.value.map_err(|old| {
        RunError::Usage(format!(
            "the swarm has another goal already: \"{}\"; `git swarm goal <text>` changes it (and starts the next cycle)",
            crate::escape::line(first_line(&old))
        ))
    })
}

/// `git swarm goal`: make `goal` the swarm's goal and open the next cycle with a fresh root plan — also after the
/// judge's `stop`, and with the same goal (to go on with it). The cycle that runs, or the stopped one, is ended by a
/// `continue` record of this op; the open root plans of the old goal are cancelled (their work tasks are not).
pub fn replace(
    swarm: &Swarm,
    retry: &Retry,
    who: &Identity,
    clock: &dyn Fn() -> Timestamp,
    agent: &str,
    goal: &str,
) -> Result<Filed, RunError> {
    let goal = clean(goal)?;
    // Finished tasks are counted for the record of the cycle that ends: that needs every task.
    let full = swarm.read(true)?;
    let res = swarm.transact(retry, who, clock, |snap, now| {
        let actor = Actor { agent: agent.to_string(), now };
        let store = swarm.store();
        if super::goal(store, snap.commit).is_none() {
            return Ok((first_goal(&snap.board, &actor, &goal, None)?.0, Filed::New));
        }
        let last = super::last_cycle(store, snap.commit);
        let (change, ended, plan) = next_cycle(&snap.board, &full.board, &actor, &goal, last.as_ref())?;
        Ok((change, Filed::Replaced { ended, plan }))
    })?;
    Ok(res.value)
}

/// The change that files `goal` with its root plan task (labels: `goal`, and the cycle when there is one).
fn first_goal(board: &Board, actor: &Actor, goal: &str, cycle: Option<u64>) -> Result<(Change, String), DomainError> {
    let title: String = format!("Goal: {}", first_line(goal)).chars().take(200).collect();
    let mut labels = vec!["goal".to_string()];
    labels.extend(cycle.map(|c| format!("cycle-{c}")));
    let new = NewTask { title, body: goal.to_string(), kind: Kind::Plan, priority: 100, labels, ..NewTask::default() };
    let (mut ch, tasks) = ops::add(board, actor, vec![new], &mut ops::mint_id)?;
    ch.files.insert(super::GOAL_PATH.into(), format!("{goal}\n"));
    ch.summary = format!("goal: {}", ch.summary);
    let id = tasks.first().map(|t| t.id.clone()).unwrap_or_default();
    Ok((ch, id))
}

/// End the cycle after `last` with a `continue` record of this op, cancel the open root plans of the old goal, and
/// file the new goal's root plan for the cycle after. `full` has every task (the record counts what finished).
/// Pure: the model check and the property tests call it.
pub fn next_cycle(
    board: &Board,
    full: &Board,
    actor: &Actor,
    goal: &str,
    last: Option<&CycleRecord>,
) -> Result<(Change, u64, String), DomainError> {
    let ended = last.map_or(1, |c| c.cycle.saturating_add(1));
    let since = last.map_or(Timestamp::from_secs(0), |c| c.at);
    let finished = |st: Status| super::judge::finished_since(full, st, since);
    let record = CycleRecord {
        cycle: ended,
        verdict: Verdict::Continue,
        reasons: format!("a goal was set with `git swarm goal` by {}: {}", actor.agent, first_line(goal)),
        by: actor.agent.clone(),
        at: actor.now,
        tasks_done: finished(Status::Done),
        tasks_failed: finished(Status::Failed),
    };
    let text =
        toml::to_string(&record).map_err(|e| DomainError::BadSetting(format!("cannot write the record: {e}")))?;
    let mut ch = Change {
        op: "goal",
        agent: actor.agent.clone(),
        summary: format!("cycle {ended}: continue with a new goal"),
        files: [(format!("cycles/{ended}.toml"), text)].into(),
        ..Default::default()
    };
    // The old goal's root plans that nobody works on any more: nothing should plan the old goal again.
    let mut removes = Vec::new();
    for s in board.tasks.values() {
        let t = &s.task;
        if t.kind == Kind::Plan
            && t.parent.is_none()
            && t.status == Status::Open
            && t.labels.iter().any(|l| l == "goal")
        {
            let mut c = t.clone();
            c.status = Status::Cancelled;
            c.failures.push(crate::model::Failure {
                agent: actor.agent.clone(),
                epoch: c.epoch,
                at: actor.now,
                reason: "cancelled: the goal was replaced (git swarm goal)".into(),
            });
            let path = ops::closed_path(Status::Cancelled, &c.id);
            removes.push(s.path.clone());
            ch.writes.push(ops::Stored { path, task: c });
        }
    }
    ch.removes = removes;
    let (add, plan) = first_goal(board, actor, goal, Some(ended.saturating_add(1)))?;
    Ok((ch.then(add), ended, plan))
}

fn clean(goal: &str) -> Result<String, RunError> {
    let goal = goal.trim().to_string();
    if goal.is_empty() {
        return Err(RunError::Usage("the goal is empty".into()));
    }
    Ok(goal)
}

fn first_line(text: &str) -> &str {
    text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default()
}

/// The swarm's goal and whether (and by which cycle's verdict) the judge stopped it, for `status`.
pub fn state(store: &Store, commit: gix::ObjectId) -> (Option<String>, Option<CycleRecord>) {
    (super::goal(store, commit), super::last_cycle(store, commit))
}
