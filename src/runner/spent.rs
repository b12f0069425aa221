//! What this runner's attempts spent, as their agents reported it ([`Spent`]): read when a landing, a failure or a
//! release records it, and the budgets it is held to.

use std::sync::Arc;

use crate::agent;
use crate::usage::Usage;

/// What a runner's claims have spent so far, attempt by attempt (agent runs and conflict runs), and the budgets of
/// the settings it read last.
#[derive(Debug, Default)]
pub(crate) struct Spent {
    attempts: std::sync::Mutex<std::collections::BTreeMap<(String, u64), Attempt>>,
    pub(super) budgets: std::sync::Mutex<(crate::usage::Limit, crate::usage::Limit)>,
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
    pub(crate) fn of(&self, task: &str, epoch: u64) -> Option<Usage> {
        let map = self.attempts.lock().ok()?;
        let a = map.get(&(task.to_string(), epoch))?;
        let live = a.live.as_ref().and_then(|l| l.lock().ok().and_then(|u| *u));
        crate::usage::plus(a.ended, live)
    }

    /// A run of the attempt starts: what it spends is watched, and it stops at the task's budget (what the task's
    /// ended attempts spent, `prior`, counts).
    pub(crate) fn watch(
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
    pub(crate) fn ended(&self, task: &str, epoch: u64, usage: Option<Usage>) {
        if let Ok(mut map) = self.attempts.lock()
            && let Some(a) = map.get_mut(&(task.to_string(), epoch))
        {
            a.live = None;
            a.ended = crate::usage::plus(a.ended, usage);
        }
    }

    /// The attempt is over (recorded on the board, or lost).
    pub(crate) fn forget(&self, task: &str, epoch: u64) {
        if let Ok(mut map) = self.attempts.lock() {
            map.remove(&(task.to_string(), epoch));
        }
    }

    /// The task budget and the cycle budget of the settings read last.
    pub(crate) fn budgets(&self) -> (crate::usage::Limit, crate::usage::Limit) {
        self.budgets.lock().map(|b| *b).unwrap_or_default()
    }
}
