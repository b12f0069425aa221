//! Where a process's ops spend their time, phase by phase: the fetch of the state ref, the read of the board, the
//! op itself, the new commit, the push, and the waits between attempts (backoff after a lost race, the pacer).
//! Counted for the whole process (every thread) with atomics, so that timing costs nothing worth measuring; the
//! CLI writes the totals out when `GIT_SWARM_PROFILE` names a file (`bench/`'s breakdown of a lost race).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One phase of an op's attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Asking the remote where the state ref is, and fetching what is new.
    Fetch,
    /// Reading the board (or the part an op needs) from a commit.
    Read,
    /// The op on the board.
    Apply,
    /// Writing the op's commit.
    Write,
    /// The compare-and-swap of the ref (a push over a transport).
    Push,
    /// Sleeping after a lost race.
    Backoff,
    /// Waiting for this process's share of a push budget.
    Pace,
}

impl Phase {
    pub const ALL: [Phase; 7] =
        [Phase::Fetch, Phase::Read, Phase::Apply, Phase::Write, Phase::Push, Phase::Backoff, Phase::Pace];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Fetch => "fetch",
            Phase::Read => "read",
            Phase::Apply => "apply",
            Phase::Write => "write",
            Phase::Push => "push",
            Phase::Backoff => "backoff",
            Phase::Pace => "pace",
        }
    }
}

static MICROS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
static TIMES: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
static LOST: AtomicU64 = AtomicU64::new(0);
static PUBLISHED: AtomicU64 = AtomicU64::new(0);
static CONTENDERS: AtomicU64 = AtomicU64::new(0);

/// Run `f`, its time counted to `phase`.
pub(crate) fn time<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    add(phase, started.elapsed());
    out
}

/// Count `spent` to `phase` (a wait measured by its caller).
pub(crate) fn add(phase: Phase, spent: Duration) {
    let i = phase as usize;
    MICROS[i].fetch_add(spent.as_micros().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    TIMES[i].fetch_add(1, Ordering::Relaxed);
}

/// Count one attempt that lost its race, or one that was published.
pub(crate) fn attempt(lost: bool) {
    if lost { &LOST } else { &PUBLISHED }.fetch_add(1, Ordering::Relaxed);
}

/// Count the writers an op saw racing for the ref (the most seen is kept).
pub(crate) fn contenders(n: u32) {
    CONTENDERS.fetch_max(u64::from(n), Ordering::Relaxed);
}

/// What this process spent so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// Per phase (in [`Phase::ALL`] order): the time spent in it and how many times it ran.
    pub phases: Vec<(Phase, Duration, u64)>,
    /// Attempts that lost their race, and attempts published.
    pub lost: u64,
    pub published: u64,
    /// The most writers an op of this process saw racing for the ref after a lost race.
    pub contenders: u64,
}

/// The totals of this process.
pub fn totals() -> Profile {
    Profile {
        phases: Phase::ALL
            .iter()
            .map(|&p| {
                let i = p as usize;
                (p, Duration::from_micros(MICROS[i].load(Ordering::Relaxed)), TIMES[i].load(Ordering::Relaxed))
            })
            .collect(),
        lost: LOST.load(Ordering::Relaxed),
        published: PUBLISHED.load(Ordering::Relaxed),
        contenders: CONTENDERS.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_across_threads() {
        let before = totals();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| time(Phase::Apply, || std::thread::sleep(Duration::from_millis(5))));
            }
        });
        attempt(true);
        let after = totals();
        let of = |p: &Profile| p.phases.iter().find(|x| x.0 == Phase::Apply).map(|x| (x.1, x.2)).unwrap_or_default();
        let (spent, n) = (of(&after).0 - of(&before).0, of(&after).1 - of(&before).1);
        assert!(n >= 4 && spent >= Duration::from_millis(20), "{n} times, {spent:?}");
        assert!(after.lost > before.lost);
    }
}
