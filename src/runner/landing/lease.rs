//! `LeaseKeeper`: the one keeper of a claim's lease while something long runs — the agent, a conflict run, the
//! check — and of each plan a planner holds, between rounds too: it renews when a third of the lease is left, keeps
//! what it has to report for its caller, and remembers a claim that was lost.

use super::*;

/// Keeps the lease of one claim alive while something long runs: [`LeaseKeeper::keep`] is its poll (renew when a
/// third of the lease is left). What it has to report is kept for the caller to emit ([`LeaseKeeper::drain`]), and
/// a claim that was lost is remembered ([`LeaseKeeper::lost`]).
pub(crate) struct LeaseKeeper {
    pub(crate) task: String,
    pub(crate) epoch: u64,
    pub(crate) lease: Duration,
    pub(crate) until: Cell<Timestamp>,
    pub(crate) lost: RefCell<Option<String>>,
    pub(crate) events: RefCell<Vec<Event>>,
}

impl LeaseKeeper {
    pub(crate) fn new(task: &str, epoch: u64, until: Timestamp, lease: Duration) -> LeaseKeeper {
        LeaseKeeper {
            task: task.to_string(),
            epoch,
            lease,
            until: Cell::new(until),
            lost: RefCell::default(),
            events: RefCell::default(),
        }
    }

    /// One poll: renew when due. `false` once the claim is lost (taken over, or finished by someone else).
    pub(crate) fn keep(&self, r: &Runner<'_>) -> bool {
        if self.lost.borrow().is_some() {
            return false;
        }
        let mut until = self.until.get();
        let alive = match r.try_renew(&self.task, self.epoch, &mut until, self.lease) {
            Ok(e) => {
                self.events.borrow_mut().extend(e);
                true
            }
            Err(why) => {
                *self.lost.borrow_mut() = Some(why);
                false
            }
        };
        self.until.set(until);
        alive
    }

    /// Why the claim was lost, if it was.
    pub(crate) fn lost(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// What the polls so far have to report (renewals, a remote away for a moment).
    pub(crate) fn drain(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.borrow_mut())
    }

    /// Until when the claim is held, as far as this keeper knows.
    pub(crate) fn until(&self) -> Timestamp {
        self.until.get()
    }

    /// The epoch of the claim kept.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Renew by `lease` from now on: a holder that keeps a claim across reads of the board (the planner) renews
    /// by the lease of the board it read last.
    pub(crate) fn set_lease(&mut self, lease: Duration) {
        self.lease = lease;
    }
}
