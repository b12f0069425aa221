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
    /// The swarm had no goal and no cycle: this one is filed, with its root plan.
    New { plan: String },
    /// The swarm has this goal already (and goes on with it).
    Same,
    /// A new goal (or the same one again) replaced the old one; cycle `ended` was closed and the next one opened
    /// with a root plan. `stopped`: the judge had stopped cycle `ended` already, and its record now says that the
    /// swarm went on (no cycle in between that never ran).
    Replaced { ended: u64, plan: String, stopped: bool },
}

/// Who files a goal, where: the swarm, the retry limits, the identity of its commits, the clock, the agent.
pub struct Filer<'a> {
    pub swarm: &'a Swarm,
    pub retry: &'a Retry,
    pub who: &'a Identity,
    pub clock: &'a dyn Fn() -> Timestamp,
    pub agent: &'a str,
}

impl Filer<'_> {
    /// `up --goal`, `run planner --goal`: file `goal` when the swarm has none. The same goal again is fine; a
    /// different one is refused (a usage error): it is `git swarm goal`'s to change, never a side effect of starting
    /// a fleet. So is a swarm the judge stopped: a fleet started on it would stop at once.
    pub fn first(&self, goal: &str) -> Result<Filed, RunError> {
        let goal = clean(goal)?;
        let swarm = self.swarm;
        let res = swarm.transact(self.retry, self.who, self.clock, |snap, now| {
            let store = swarm.store();
            if let Some(c) = super::last_cycle(store, snap.commit).filter(|c| c.verdict == Verdict::Stop) {
                return Ok((Change::default(), Err(format!("the judge stopped the swarm (cycle {})", c.cycle))));
            }
            match super::goal(store, snap.commit) {
                Some(g) if g.trim() == goal => Ok((Change::default(), Ok(Filed::Same))),
                Some(g) => Ok((
                    Change::default(),
                    Err(format!("the swarm has another goal already: \"{}\"", crate::escape::line(first_line(&g)))),
                )),
                None => {
                    let actor = Actor { agent: self.agent.to_string(), now };
                    let (ch, plan) = first_goal(&snap.board, &actor, &goal, None)?;
                    Ok((ch, Ok(Filed::New { plan })))
                }
            }
        })?;
        res.value.map_err(|why| {
            RunError::Usage(format!("{why}; `git swarm goal <text>` sets the goal and starts the next cycle"))
        })
    }

    /// `run planner --goal <text> --replace-goal` (a dispatched fleet): make the swarm work on `goal` now. The same
    /// goal on a running swarm changes nothing; a different goal, or any goal on a stopped swarm, is
    /// [`Filer::replace`]d.
    pub(crate) fn first_or_replace(&self, goal: &str) -> Result<Filed, RunError> {
        match self.first(goal) {
            Err(RunError::Usage(_)) => self.replace(goal),
            other => other,
        }
    }

    /// `git swarm goal`: make `goal` the swarm's goal and open the next cycle with a fresh root plan — also after
    /// the judge's `stop`, and with the same goal (to go on with it). The cycle that runs, or the stopped one, is
    /// ended by a `continue` record of this op; the old goal's root plans and their sub-plans that are not done are
    /// cancelled (their holders are fenced off; the work tasks they filed are not touched).
    pub fn replace(&self, goal: &str) -> Result<Filed, RunError> {
        let goal = clean(goal)?;
        let swarm = self.swarm;
        let res = swarm.transact(self.retry, self.who, self.clock, |snap, now| {
            let actor = Actor { agent: self.agent.to_string(), now };
            let store = swarm.store();
            let last = super::last_cycle(store, snap.commit);
            // No goal and no cycle yet: the first goal. A swarm with a cycle record (a stop, say) always gets a
            // record of its own, or the judge's verdict would stand.
            if last.is_none() && super::goal(store, snap.commit).is_none() {
                let (ch, plan) = first_goal(&snap.board, &actor, &goal, None)?;
                return Ok((ch, Filed::New { plan }));
            }
            // Finished tasks are counted for the record of the cycle that ends: every task, as of this very state.
            let full = match store.read(snap.commit, true) {
                Ok(f) => f.board,
                Err(_) => snap.board.clone(),
            };
            let stopped = last.as_ref().is_some_and(|c| c.verdict == Verdict::Stop);
            let (change, ended, plan) = next_cycle(&snap.board, &full, &actor, &goal, last.as_ref())?;
            Ok((change, Filed::Replaced { ended, plan, stopped }))
        })?;
        Ok(res.value)
    }
}

/// The change that files `goal` with its root plan task (labels: `goal`, and the cycle when there is one).
fn first_goal(board: &Board, actor: &Actor, goal: &str, cycle: Option<u64>) -> Result<(Change, String), DomainError> {
    let title: String = format!("Goal: {}", first_line(goal)).chars().take(200).collect();
    let mut labels = vec!["goal".to_string()];
    labels.extend(cycle.map(|c| format!("cycle-{c}")));
    let new = NewTask { title, body: goal.to_string(), kind: Kind::Plan, priority: 100, labels, ..NewTask::default() };
    let (mut ch, tasks) = ops::add(board, actor, vec![new], &mut ops::mint_id)?;
    ch.files.insert(crate::state::GOAL_PATH.into(), format!("{goal}\n"));
    ch.summary = format!("goal: {}", ch.summary);
    let id = tasks.first().map(|t| t.id.clone()).unwrap_or_default();
    Ok((ch, id))
}

/// End the cycle after `last` with a `continue` record of this op, cancel the old goal's root plans and their
/// sub-plans that are open or claimed, and file the new goal's root plan for the cycle after. When `last` is the
/// judge's `stop`, the stopped cycle is the one that ended: its record is rewritten as `continue` by this op (the
/// judge's reasons kept in it, the old record in the ref's history), so the next cycle is the one after it, not an
/// empty one in between. `full` has every task (the record counts what finished). Pure: the model check and the
/// property tests may call it.
pub(crate) fn next_cycle(
    board: &Board,
    full: &Board,
    actor: &Actor,
    goal: &str,
    last: Option<&CycleRecord>,
) -> Result<(Change, u64, String), DomainError> {
    let (record, summary) = match last {
        Some(stop) if stop.verdict == Verdict::Stop => {
            let record = CycleRecord {
                verdict: Verdict::Continue,
                reasons: format!(
                    "{} stopped it ({}); {} set a goal with `git swarm goal`: {}",
                    if stop.by.is_empty() { "the judge" } else { stop.by.as_str() },
                    first_line(&stop.reasons),
                    actor.agent,
                    first_line(goal)
                ),
                by: actor.agent.clone(),
                ..stop.clone()
            };
            (record, format!("cycle {}: go on after the stop with a new goal", stop.cycle))
        }
        _ => {
            let ended = last.map_or(1, |c| c.cycle.saturating_add(1));
            let since = last.map_or(Timestamp::from_secs(0), |c| c.at);
            let finished = |st: Status| ops::cycle::finished_since(full, st, since);
            let record = CycleRecord {
                cycle: ended,
                verdict: Verdict::Continue,
                reasons: format!("a goal was set with `git swarm goal` by {}: {}", actor.agent, first_line(goal)),
                by: actor.agent.clone(),
                at: actor.now,
                tasks_done: finished(Status::Done),
                tasks_failed: finished(Status::Failed),
                usage: None,
                spent: Some(board.spend.cycle_total(board.cycle)).filter(|u| !u.is_zero()),
            };
            (record, format!("cycle {ended}: continue with a new goal"))
        }
    };
    let ended = record.cycle;
    let text =
        toml::to_string(&record).map_err(|e| DomainError::BadSetting(format!("cannot write the record: {e}")))?;
    let record = Change {
        op: "goal",
        agent: actor.agent.clone(),
        summary,
        files: [(crate::state::cycle_path(ended), text)].into(),
        ..Default::default()
    };
    // Nothing should plan the old goal again: its root plans (a planner holds one all cycle long) and the plans
    // under them. A cancelled plan's holder is fenced off; the work tasks they filed go on.
    let old_plans = plans_under_old_goals(board);
    let cancel = ops::cancel(board, actor, &old_plans, "the goal was replaced (git swarm goal)");
    let mut after = board.clone();
    ops::apply(&mut after, &cancel);
    let (add, plan) = first_goal(&after, actor, goal, Some(ended.saturating_add(1)))?;
    let ch = if cancel.writes.is_empty() { record.then(add) } else { record.then(cancel).then(add) };
    Ok((ch, ended, plan))
}

/// The root plans of a goal (label `goal`, no parent) and every plan task under them, open or claimed.
fn plans_under_old_goals(board: &Board) -> Vec<String> {
    let live = |t: &crate::model::Task| t.kind == Kind::Plan && matches!(t.status, Status::Open | Status::Claimed);
    let mut found: Vec<String> = board
        .tasks
        .values()
        .map(|s| &s.task)
        .filter(|t| live(t) && t.parent.is_none() && t.labels.iter().any(|l| l == "goal"))
        .map(|t| t.id.clone())
        .collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i].clone();
        for s in board.tasks.values() {
            if live(&s.task) && s.task.parent.as_deref() == Some(parent.as_str()) && !found.contains(&s.task.id) {
                found.push(s.task.id.clone());
            }
        }
        i += 1;
    }
    found
}

/// The most a goal may hold: what every reader reads of `goal.md`.
pub(crate) const MAX_GOAL_BYTES: usize = 256 * 1024 - 1;

fn clean(goal: &str) -> Result<String, RunError> {
    let goal = goal.trim().to_string();
    if goal.is_empty() {
        return Err(RunError::Usage("the goal is empty".into()));
    }
    if goal.len() > MAX_GOAL_BYTES {
        return Err(RunError::Usage(format!(
            "the goal has {} bytes, more than the {MAX_GOAL_BYTES} a reader takes: shorten it, or put the details in \
             tasks",
            goal.len()
        )));
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
