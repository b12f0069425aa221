//! The optimistic transaction: read the newest state → apply a pure op → commit → compare-and-swap the ref → on a
//! lost race, back off (exponential, full jitter) and do it all again on the new state. The only writer of the
//! state ref.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gix::ObjectId;

use crate::model::{Config, Kind};
use crate::ops::{Change, DomainError};
use crate::remote::{Publish, RemoteError};
use crate::store::{Identity, LogEntry, Problem, Snapshot, Store, StoreError};
use crate::time::Timestamp;
use profile::Phase;

mod history;
mod kept;
mod land;
mod optimistic;
mod pace;
pub mod profile;
mod retry;
mod state_remote;
mod target;
pub use history::Compacted;
pub use history::Relation;
pub use pace::Pacer;
pub(crate) use retry::Race;
pub use retry::{Retry, take_ridden_out};
// What the rooms of `txn` share among themselves.
use optimistic::{Attempt, in_doubt, refuse_broken};
use retry::*;
pub use state_remote::Reach;
pub(crate) use state_remote::{GitTransport, InProcess, StateRemote, Update};
pub use target::TargetCheck;
pub(crate) use target::TargetLoss;

/// A swarm: a state ref at a location, seen from a local repository.
pub struct Swarm {
    /// The user's repository (objects for pushes, the mirror ref).
    pub local: Store,
    /// Where the state ref is (`StateRemote`).
    pub remote: Box<dyn StateRemote>,
    /// `default`, or the `--swarm` name.
    pub name: String,
    /// What users call the remote in messages (`origin`, a URL, `this repository`).
    pub remote_label: String,
    /// Updates of the remote's refs tried by this process (pushes, or in-process swaps), and how many of them lost a
    /// race: the figures behind "pushes per task".
    pub publishes: AtomicU64,
    pub lost: AtomicU64,
    /// This process's share of a push budget (`[run] pushes_per_minute`); off unless a runner configures it. The
    /// agents of one runner process share one ([`Pacer::hosting`]).
    pub pacer: std::sync::Arc<Pacer>,
    /// The process this swarm's ops are published by, when it publishes for several agents (`run worker
    /// --agents n`: the runner's own id): written as `Swarm-Writer`, so that readers of the ref's history count
    /// the processes that race for it, not the agents behind them (`Swarm::contenders`).
    pub writer: Option<String>,
}

/// How far back from the tip a commit whose push answer was lost is looked for (following compactions): an op is
/// never applied twice unless this many ops landed between its push and the next read.
const IN_DOUBT_DEPTH: usize = 100_000;

/// Refusals of an update while the ref stays where it was, before the loop stops (see [`TxnError::Stuck`]).
const UNMOVED_LIMIT: u32 = 8;

/// What an op reads of the board (invariant 31).
#[derive(Debug, Clone, Copy)]
pub enum Reads<'a> {
    /// Every live task (the finished ones by path): an op that chooses among them.
    Live,
    /// These tasks and their deps alone, looked up on a canonical board: an op about them.
    Tasks(&'a [&'a str]),
    /// These tasks and their deps, and the name of every file: an op that mints an id (`add`).
    TasksAndNames(&'a [&'a str]),
    /// What a claim of the next ready task of this kind touches ([`Store::read_next`]).
    Next(Kind),
}

thread_local! {
    /// The outages this thread's ops rode out since [`take_ridden_out`] last looked: how long the longest lasted, and
    /// the tries they took.
    static RIDDEN_OUT: std::cell::Cell<Option<(Duration, u32)>> = const { std::cell::Cell::new(None) };
}

#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("there is no swarm '{swarm}' on {remote}")]
    NotInitialized { swarm: String, remote: String },
    #[error("gave up after {attempts} lost races in {secs:.1}s: the state ref of '{swarm}' keeps changing")]
    Contention { swarm: String, attempts: u32, secs: f64 },
    #[error("{refname} did not move, yet the update was refused {attempts} times: {reason}")]
    Stuck { refname: String, reason: String, attempts: u32 },
    #[error("the op may or may not have been published to {remote}: {message}")]
    OutcomeUnknown { remote: String, message: String },
    /// `swarm.toml` of the newest state cannot be read: no op but one that replaces it is applied (without the
    /// settings no op can be judged).
    #[error("the swarm's settings cannot be read: {}", problem)]
    BrokenSettings { problem: Problem, fallback: Option<String> },
    /// The state ref went back or away since this clone saw it: acting on it could redo finished work.
    #[error("{refname} on {remote} {what}: this clone last saw it at {seen}{}", now.as_ref().map(|n| format!(", it is at {n} now")).unwrap_or_default())]
    Lineage { refname: String, remote: String, what: String, seen: String, now: Option<String> },
    /// The target branch lost the code of done tasks since this clone saw it (a force-push): work landed on it
    /// would build on what is not there. Nothing lands until a person puts it back or takes it as it is.
    #[error("{}", loss.describe(remote))]
    TargetRewound { remote: String, loss: Box<TargetLoss> },
}

/// What a transaction did.
#[derive(Debug)]
pub struct Committed<T> {
    pub value: T,
    /// The new tip of the state ref; `None` when the op changed nothing.
    pub commit: Option<ObjectId>,
    /// Lost races before it went through.
    pub lost_races: u32,
    /// Unreadable files seen in the state it was applied to.
    pub problems: Vec<Problem>,
}

impl Swarm {
    pub fn ref_name(&self) -> String {
        format!("refs/swarm/{}", self.name)
    }

    /// This clone's private mirror of the state ref (`refs/swarm-remotes/<key>/<name>`; set over a transport only).
    fn mirror_ref(&self) -> String {
        format!("refs/swarm-remotes/{}/{}", self.remote.key(), self.name)
    }

    /// The store that holds the objects of the state ref after a read.
    pub fn store(&self) -> &Store {
        self.remote.objects(&self.local)
    }

    /// Where the state ref is now (fetching it first from a URL remote). A ref that went back or away since this
    /// clone saw it is an error ([`TxnError::Lineage`]; `git swarm doctor` repairs it).
    pub fn tip(&self) -> Result<Option<ObjectId>, TxnError> {
        let seen = self.seen()?;
        let now = self.tip_unchecked()?;
        self.check_seen(seen, now)?;
        Ok(now)
    }

    /// The newest state, or `None` when the swarm does not exist. `full`: every task, finished ones too.
    pub fn try_read(&self, full: bool) -> Result<Option<Snapshot>, TxnError> {
        match profile::time(Phase::Fetch, || self.tip())? {
            None => Ok(None),
            Some(tip) => Ok(Some(profile::time(Phase::Read, || self.store().read(tip, full))?)),
        }
    }

    /// The newest state; a missing swarm is an error.
    pub fn read(&self, full: bool) -> Result<Snapshot, TxnError> {
        self.try_read(full)?.ok_or_else(|| self.not_initialized())
    }

    /// The newest state as an op reads it ([`Reads`]).
    pub(crate) fn read_for(&self, reads: Reads<'_>, clock: &dyn Fn() -> Timestamp) -> Result<Snapshot, TxnError> {
        let tip = profile::time(Phase::Fetch, || self.tip())?;
        self.read_for_tip(reads, tip, clock)
    }

    /// The state as an op reads it ([`Reads`]) at a tip fetched by [`Swarm::tip`] a moment ago (the agents of one
    /// process share one fetch); `None`, a swarm that does not exist, is an error.
    pub fn read_for_tip(
        &self,
        reads: Reads<'_>,
        tip: Option<ObjectId>,
        clock: &dyn Fn() -> Timestamp,
    ) -> Result<Snapshot, TxnError> {
        let tip = tip.ok_or_else(|| self.not_initialized())?;
        let store = self.store();
        Ok(profile::time(Phase::Read, || match reads {
            Reads::Live => store.read(tip, false),
            Reads::Tasks(ids) => store.read_tasks(tip, ids, false),
            Reads::TasksAndNames(ids) => store.read_tasks(tip, ids, true),
            // The clock of the choice is read after the fetch.
            Reads::Next(kind) => store.read_next(tip, kind, clock()),
        })?)
    }

    fn not_initialized(&self) -> TxnError {
        TxnError::NotInitialized { swarm: self.name.clone(), remote: self.remote_label.clone() }
    }

    /// One compare-and-swap of the state ref from `base` to `new`.
    fn publish(&self, base: Option<ObjectId>, new: ObjectId, why: &str) -> Result<Publish, TxnError> {
        let r = self.publish_refs(&[(self.ref_name().as_str(), base, new)], None, why)?;
        if r == Publish::Done {
            // Keep the record current (over a transport, the mirror the next fetch negotiates from). Best effort:
            // failing to write it (a concurrent fetch holds its lock) must not turn a published op into an error.
            self.set_seen(new);
        }
        Ok(r)
    }

    /// One atomic compare-and-swap of several refs of the remote (`None` as the base: must not exist), the objects
    /// of `carry` brought along; counted in the figures behind "pushes per task".
    fn publish_refs(&self, updates: &[Update<'_>], carry: Option<ObjectId>, why: &str) -> Result<Publish, TxnError> {
        self.publishes.fetch_add(1, Ordering::Relaxed);
        let r = profile::time(Phase::Push, || self.remote.update(&self.local, updates, carry, why))?;
        if r != Publish::Done {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        profile::attempt(r != Publish::Done);
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_scales_with_the_round_trip() {
        let r = Retry::default();
        for n in 0..40 {
            for unit in [Duration::ZERO, Duration::from_millis(40), Duration::from_secs(1), Duration::from_secs(60)] {
                let d = r.backoff(n, unit);
                let unit = unit.clamp(r.base, Duration::from_secs(5));
                let cap = r.cap.max((unit * r.spread).min(Duration::from_secs(2))).max(unit * 8);
                assert!(d <= cap, "n={n} unit={unit:?}: {d:?}");
                assert!(d <= unit * (1 << n.min(16)), "n={n} unit={unit:?}: {d:?}");
            }
        }
        // A slow remote waits longer than a fast one (on average over many draws).
        let mean = |unit| (0..400).map(|_| r.backoff(3, unit).as_micros()).sum::<u128>() / 400;
        assert!(mean(Duration::from_millis(800)) > 4 * mean(Duration::from_millis(30)));
    }

    #[test]
    fn the_pause_after_a_lost_race_is_sized_by_the_contention_and_shrinks_as_the_op_waits() {
        let r = Retry::default();
        let unit = Duration::from_millis(50);
        let race = |lost, contenders| Race { lost, unit, contenders };
        // One writer seen, or none: the exponential backoff, as before.
        for n in 0..20 {
            assert_eq!(r.ceiling(&race(n, 1)), r.backoff_ceiling(n, unit));
        }
        // 64 writers: a window of 64 round trips at the first loss (past the exponential's 2 s stop), where
        // 8 writers leave the exponential's.
        assert_eq!(r.ceiling(&race(0, 64)), unit * 64);
        assert_eq!(r.ceiling(&race(0, 8)), r.backoff_ceiling(0, unit).max(unit * 8));
        // The longer an op has lost, the shorter its window (never below the exponential's): precedence…
        let windows: Vec<Duration> = (0..200).map(|n| r.ceiling(&race(n, 64))).collect();
        for n in 1..200 {
            let exponential = r.backoff_ceiling(n as u32, unit);
            assert!(windows[n] >= exponential, "{windows:?}");
            assert!(windows[n] <= windows[n - 1] || windows[n] == exponential, "{windows:?}");
        }
        assert_eq!(windows[1], unit * 48);
        // …but never below half the crowd's window, however long it has lost: when every writer of a crowd is a
        // long waiter, their attempts stay at about four a round trip (the collapse at 1,000 agents was here).
        assert!(windows.iter().all(|w| *w >= unit * 32), "{windows:?}");
        assert!(windows[199] < unit * 33, "{windows:?}");
        // However many writers and however slow the remote: bounded.
        let huge = Race { lost: 0, unit: Duration::from_secs(60), contenders: u32::MAX };
        assert_eq!(r.ceiling(&huge), r.max_pause);
        for _ in 0..200 {
            assert!(r.pause(&race(0, 64)) <= unit * 64);
        }
    }

    #[test]
    fn a_writer_above_its_share_of_the_last_minute_gives_way_in_proportion_and_nobody_else_does() {
        // Now is the newest op: the others race it.
        const NOW: u64 = 100_000;
        // 4 writers, an update every 100 ms (newest first), 40 ops: `a` took 20, the others 20 between them.
        let others = ["b", "c", "d"];
        let ops: Vec<(u64, &str)> = (0..40u64)
            .map(|i| (100_000 - i * 100, if i % 2 == 0 { "a" } else { others[(i as usize / 2) % 3] }))
            .collect();
        // `a`: 20 of 40 with a share of 10, twice its share: one interval (100 ms) of giving way.
        assert_eq!(share_window(&ops, "a", NOW), Duration::from_millis(100));
        // The others are below their share, and a writer not seen at all is too: no pause.
        for me in ["b", "c", "d", "e"] {
            assert_eq!(share_window(&ops, me, NOW), Duration::ZERO, "{me}");
        }
        // One writer alone never waits, however many its ops.
        let alone: Vec<(u64, &str)> = (0..40u64).map(|i| (100_000 - i * 100, "a")).collect();
        assert_eq!(share_window(&alone, "a", NOW), Duration::ZERO);
        // Too few ops to judge a share by (fewer than two a writer): no pause.
        assert_eq!(share_window(&ops[..7], "a", NOW), Duration::ZERO);
        // Ops older than the minute before the newest do not count: `a`'s old streak is forgotten.
        let mut old = ops.clone();
        old.extend((0..100u64).map(|i| (30_000 - i * 10, "a")));
        assert_eq!(share_window(&old, "a", NOW), share_window(&ops, "a", NOW));
        // A writer that took 17 of the newest 32 ops beside 15 others with one each: 17·16/32 − 1 = 7.5 intervals
        // of 10 ms; older ops, however many of them its own, do not count.
        let names: Vec<String> = (0..15).map(|i| format!("o{i}")).collect();
        let mut hog: Vec<(u64, &str)> = (0..32u64)
            .map(|i| (100_000 - i * 10, if i % 2 == 0 || i == 31 { "h" } else { names[(i as usize - 1) / 2].as_str() }))
            .collect();
        let w = share_window(&hog, "h", NOW);
        hog.extend((0..500u64).map(|i| (99_000 - i, "h")));
        assert_eq!(share_window(&hog, "h", NOW), w);
        assert!((w.as_secs_f64() - 0.075).abs() < 1e-9, "{w:?}");
        // A planner's burst of adds before one worker went on alone: the worker does not wait for it.
        let mut after_burst: Vec<(u64, &str)> = (0..40u64).map(|i| (100_000 - i * 50, "worker")).collect();
        after_burst.extend((0..200u64).map(|i| (98_000 - i, "planner")));
        assert_eq!(share_window(&after_burst, "worker", NOW), Duration::ZERO);
        // A runner's desk publishing for its agents in turn: no agent of it is above its share.
        let desk: Vec<(u64, &str)> =
            (0..64u64).map(|i| (100_000 - i * 100, ["p-1", "p-2", "p-3", "p-4"][i as usize % 4])).collect();
        assert!(["p-1", "p-2", "p-3", "p-4"].iter().all(|me| share_window(&desk, me, NOW).is_zero()));
    }
    proptest::proptest! {
        /// Whatever the history, a writer none of whose rivals wrote within the last few round trips (or none of
        /// whose rivals' ops is among the newest) never waits before its first attempt.
        #[test]
        fn no_pause_without_a_rival_racing_now(
            ops in proptest::collection::vec((0u64..120_000, 0usize..4), 0..64),
            now in 0u64..130_000,
        ) {
            let names = ["me", "b", "c", "d"];
            let mut ops: Vec<(u64, &str)> = ops.into_iter().map(|(t, w)| (t, names[w])).collect();
            ops.sort_by_key(|o| std::cmp::Reverse(o.0));
            let quiet = ops.iter().all(|o| o.1 == "me" || now.saturating_sub(o.0) > RACING_NOW.as_millis() as u64);
            if quiet {
                proptest::prop_assert_eq!(share_window(&ops, "me", now), Duration::ZERO);
            }
        }
    }

    /// Issue 38: a lone writer after others wrote — the history of the minute is no contention.
    #[test]
    fn a_writer_whose_rivals_went_quiet_never_waits() {
        // 20 ops of `a`, two people's adds a second apart, then `a` again: the measured case.
        let mut ops: Vec<(u64, &str)> = (0..20u64).map(|i| (100_000 - i * 20, "a")).collect();
        ops.insert(0, (101_000, "person-2"));
        ops.insert(1, (100_500, "person-1"));
        ops.insert(0, (101_050, "a"));
        ops.insert(0, (101_070, "a"));
        // Seconds after the adds, with `a`'s own ops the newest: no pause, however many the adds.
        assert_eq!(share_window(&ops, "a", 104_000), Duration::ZERO);
        // A rival that wrote just now, among the newest: a real race, the share rule holds.
        let mut racing = ops.clone();
        racing.insert(0, (101_090, "b"));
        racing.insert(0, (101_095, "a"));
        assert!(share_window(&racing, "a", 101_100) > Duration::ZERO);
        // The same history, the rival quiet for longer than a few round trips: no pause.
        assert_eq!(share_window(&racing, "a", 101_095 + 2_500), Duration::ZERO);
    }
}
