//! The goal of a swarm (`goal.md`) and the cycles it is worked in.
//!
//! The first goal is filed with the root plan task (`up --goal`, `run planner --goal`). A different goal is never
//! taken silently from those flags: `git swarm goal` sets it, ends the cycle that runs (or the judge's `stop`) with a
//! record of its own, and files a fresh root plan — so a swarm can always go on.

use crate::ops::goal::{first_goal, first_line, next_cycle};
use crate::ops::{Actor, Change};
use crate::time::Timestamp;
use crate::{Identity, Store};
use crate::{Retry, Swarm};

use super::{CycleRecord, RunError, Verdict};

/// What filing a goal came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Filed {
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
pub(crate) struct Filer<'a> {
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
    pub(crate) fn first(&self, goal: &str) -> Result<Filed, RunError> {
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
    pub(crate) fn replace(&self, goal: &str) -> Result<Filed, RunError> {
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

/// The swarm's goal and whether (and by which cycle's verdict) the judge stopped it, for `status`.
pub(crate) fn state(store: &Store, commit: gix::ObjectId) -> (Option<String>, Option<CycleRecord>) {
    (super::goal(store, commit), super::last_cycle(store, commit))
}
