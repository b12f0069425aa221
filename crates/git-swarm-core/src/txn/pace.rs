//! A fleet's share of a push budget: a hosted remote asks for at most so many pushes a minute per repository
//! (GitHub: 6), and no server counts them, so each runner spaces its own pushes by its share of the budget. With
//! `k` agents holding live claims on the last board it read, a runner waits `k · 60 s / budget` between the starts
//! of its update attempts; the fleet as a whole then stays near the budget however many runners there are, with no
//! coordination beyond the board everyone reads anyway. No single wait exceeds a sixth of the lease, and lease
//! renewals are not paced at all (`Retry::paced`): a claim must stay alive whatever the budget says.
//!
//! A process that hosts `n` agents (`run worker --agents <n>`) publishes for all of them, in batches, through one
//! pacer ([`Pacer::hosting`]): its share is `n` agents' worth, a wait of `k · 60 s / (budget · n)`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::ops::Board;
use crate::time::Timestamp;

#[derive(Debug, Default)]
pub struct Pacer {
    state: Mutex<PaceState>,
}

#[derive(Debug, Default)]
struct PaceState {
    /// Pushes a minute for the whole fleet; `None`: no pacing.
    per_minute: Option<f64>,
    /// Agents holding live claims on the last board read (at least 1).
    active: usize,
    /// Agents this process publishes for (0 or 1: itself).
    hosted: usize,
    lease: Duration,
    /// When this process last started an update attempt.
    last: Option<Instant>,
    stop: Option<std::sync::Arc<AtomicBool>>,
}

impl Pacer {
    /// The pacer of a process that publishes for `agents` agents (their share of the budget together).
    pub fn hosting(agents: usize) -> Pacer {
        Pacer { state: Mutex::new(PaceState { hosted: agents, ..Default::default() }) }
    }

    /// Pace at `per_minute` pushes a minute for the fleet (`None` or a non-positive number: no pacing). `stop` ends
    /// a wait early (a runner told to stop still releases its claims at once).
    pub fn configure(&self, per_minute: Option<f64>, lease: Duration, stop: Option<std::sync::Arc<AtomicBool>>) {
        if let Ok(mut s) = self.state.lock() {
            s.per_minute = per_minute.filter(|p| p.is_finite() && *p > 0.0);
            s.lease = lease;
            s.stop = stop;
        }
    }

    /// Learn the fleet's size and the lease from a board just read.
    pub(crate) fn observe(&self, board: &Board, now: Timestamp) {
        let Ok(mut s) = self.state.lock() else { return };
        if s.per_minute.is_none() {
            return;
        }
        let holders: std::collections::BTreeSet<&str> =
            board.tasks.values().filter_map(|t| t.task.live_claim(now).map(|c| c.agent.as_str())).collect();
        s.active = holders.len().max(1);
        s.lease = board.config.lease;
    }

    /// The spacing between this process's attempts now.
    pub fn interval(&self) -> Duration {
        let Ok(s) = self.state.lock() else { return Duration::ZERO };
        interval(&s)
    }

    /// Wait until the spacing has passed since the last attempt (or `stop` is set), then count this attempt.
    /// Returns how long it waited.
    pub fn wait(&self) -> Duration {
        let (due, stop) = {
            let Ok(mut s) = self.state.lock() else { return Duration::ZERO };
            let now = Instant::now();
            // Jittered (0.5–1.5 × the share, the same on average): runners started together would otherwise wake
            // together and lose races to each other at every turn; the first attempt waits 0–1 share for the same
            // reason.
            let gap = interval(&s);
            let ceiling = ceiling(&s);
            let due = match s.last {
                _ if gap.is_zero() => now,
                Some(last) => (last + gap.mul_f64(0.5 + fastrand::f64()).min(ceiling)).max(now),
                None => now + gap.mul_f64(fastrand::f64()),
            };
            // Whatever the jitter and the queue, no single wait is longer than the ceiling.
            let due = due.min(now + ceiling);
            // Count the attempt at the moment it is allowed to start: a second caller queues behind it.
            s.last = Some(due);
            (due, s.stop.clone())
        };
        let started = Instant::now();
        while Instant::now() < due {
            if stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                break;
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(100)));
        }
        started.elapsed()
    }
}

fn interval(s: &PaceState) -> Duration {
    let Some(per_minute) = s.per_minute else { return Duration::ZERO };
    // A budget too small to express (1e-300 a minute) is "as slow as allowed", not a panic.
    let share = Duration::try_from_secs_f64(60.0 * s.active.max(1) as f64 / (per_minute * s.hosted.max(1) as f64))
        .unwrap_or(Duration::MAX);
    share.min(ceiling(s))
}

/// The longest one wait may last: a sixth of the lease (10 s for a lease not known yet).
fn ceiling(s: &PaceState) -> Duration {
    if s.lease.is_zero() { Duration::from_secs(10) } else { s.lease / 6 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_grows_with_the_fleet_and_stops_at_a_sixth_of_the_lease() {
        let s = |per_minute: Option<f64>, active: usize, lease: u64| PaceState {
            per_minute,
            active,
            lease: Duration::from_secs(lease),
            ..Default::default()
        };
        assert_eq!(interval(&s(None, 10, 600)), Duration::ZERO);
        assert_eq!(interval(&s(Some(6.0), 1, 600)), Duration::from_secs(10));
        assert_eq!(interval(&s(Some(6.0), 8, 600)), Duration::from_secs(80));
        assert_eq!(interval(&s(Some(6.0), 32, 600)), Duration::from_secs(100), "a sixth of a 10 min lease");
        assert_eq!(interval(&s(Some(60.0), 0, 600)), Duration::from_secs(1), "at least one agent");
        assert_eq!(interval(&s(Some(1e-300), 1, 600)), Duration::from_secs(100), "no overflow");
        // A process of 8 agents among 32 holders pushes for a quarter of the fleet: 32 · 60 s / (6 · 8).
        let hosting = PaceState { hosted: 8, ..s(Some(6.0), 32, 1800) };
        assert_eq!(interval(&hosting), Duration::from_secs(40));
    }

    #[test]
    fn waits_space_attempts_and_stop_cuts_a_wait_short() {
        let p = Pacer::default();
        p.configure(Some(600.0), Duration::from_secs(600), None); // 100 ms each with one agent
        let t = Instant::now();
        for _ in 0..8 {
            p.wait();
        }
        // 7 gaps of 50–150 ms (and a first wait of 0–100 ms).
        assert!(t.elapsed() >= Duration::from_millis(350), "{:?}", t.elapsed());
        let stop = std::sync::Arc::new(AtomicBool::new(true));
        p.configure(Some(0.01), Duration::from_secs(600), Some(stop)); // 100 s apart (the ceiling), but stopping
        let t = Instant::now();
        p.wait();
        p.wait();
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
