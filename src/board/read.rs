//! Reading a board to show: the snapshot, the log and the last cycle (`Loaded`, which a live board advances by the
//! ops since its last state), and waiting for the state ref to move (`RefWatch`).

use super::*;

/// A board read from a swarm: the snapshot, the log and the last cycle, ready to be turned into a [`BoardView`]
/// at any `now` (a live board redraws its clocks without reading again).
pub(crate) struct Loaded {
    pub snapshot: Snapshot,
    pub log: Vec<LogEntry>,
    pub log_truncated: bool,
    pub cycle: Option<CycleRecord>,
}

impl Loaded {
    /// Read the newest state of `swarm` (fetching it from a URL remote), every task (`full`) or the live ones, and
    /// at most `log_limit` ops of the log.
    pub(crate) fn read(swarm: &Swarm, full: bool, log_limit: usize) -> Result<Loaded, TxnError> {
        let snapshot = swarm.read(full)?;
        Loaded::at(swarm, snapshot, log_limit)
    }

    /// As [`Loaded::read`], from a snapshot already read.
    pub(crate) fn at(swarm: &Swarm, snapshot: Snapshot, log_limit: usize) -> Result<Loaded, TxnError> {
        // One more than asked tells whether the log goes further back.
        let mut log = swarm.store().log(snapshot.commit, log_limit.saturating_add(1))?;
        let log_truncated = log.len() > log_limit;
        log.truncate(log_limit);
        let cycle = crate::runner::last_cycle(swarm.store(), snapshot.commit);
        Ok(Loaded { snapshot, log, log_truncated, cycle })
    }

    /// Move to a newer `snapshot` as [`Loaded::at`] would read it, reading only the ops of the log since this
    /// one's (a live board that follows the ref: a few commits, not `log_limit`). A history that does not lead
    /// back to this one's commit within `log_limit` (compacted, replaced) is read again up to `log_limit`. On an
    /// error this stays as it was.
    pub(crate) fn advance(&mut self, swarm: &Swarm, snapshot: Snapshot, log_limit: usize) -> Result<(), TxnError> {
        let (mut log, met) =
            swarm.store().log_until(snapshot.commit, Some(self.snapshot.commit), log_limit.saturating_add(1))?;
        let mut log_truncated = log.len() > log_limit;
        if met {
            log_truncated |= self.log_truncated || log.len() + self.log.len() > log_limit;
            log.append(&mut self.log);
        }
        log.truncate(log_limit);
        self.cycle = crate::runner::last_cycle(swarm.store(), snapshot.commit);
        self.snapshot = snapshot;
        self.log = log;
        self.log_truncated = log_truncated;
        Ok(())
    }

    pub(crate) fn view(
        &self,
        swarm: &Swarm,
        now: Timestamp,
        opts: &Options,
        local: &[crate::runner::status::LocalRun],
    ) -> BoardView {
        let input = Input {
            local,
            swarm: &swarm.name,
            remote: &swarm.remote_label,
            snapshot: &self.snapshot,
            log: &self.log,
            log_truncated: self.log_truncated,
            cycle: self.cycle.clone(),
            now,
        };
        BoardView::build(&input, opts)
    }
}

/// Waits for the state ref of a swarm to move: file events on the remote's refs (loose ref files and
/// `packed-refs`) when the remote is a local path reached in-process, else nothing to listen to (the caller
/// polls: a fetch per interval).
pub(crate) struct RefWatch {
    pub(super) _watcher: Option<notify::RecommendedWatcher>,
    pub(super) rx: Option<std::sync::mpsc::Receiver<()>>,
}

impl RefWatch {
    pub(crate) fn new(swarm: &Swarm) -> RefWatch {
        let (w, rx) = match swarm.remote.reach() {
            Reach::Itself(store) | Reach::Path(store) => crate::runner::watch_refs(store.repo.common_dir()),
            Reach::Transport => (None, None),
        };
        RefWatch { _watcher: w, rx }
    }

    /// Sleep until a file event or `max`; `true` when an event came. Without events this only sleeps.
    pub(crate) fn wait(&self, max: Duration) -> bool {
        match &self.rx {
            Some(rx) => {
                let got = rx.recv_timeout(max).is_ok();
                // One change writes several files: take them all as one event.
                while rx.try_recv().is_ok() {}
                got
            }
            None => {
                std::thread::sleep(max);
                false
            }
        }
    }
}
