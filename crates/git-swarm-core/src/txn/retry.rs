//! How long to wait: the retry policy of the optimistic loop (`Retry`: jittered backoff sized by the contention the
//! ref's own history shows, a writer above its share giving way), and riding out an outage of the remote.

use super::*;

impl Swarm {
    /// Where `branch` (`refs/heads/<target>`) is on the remote, fetched into the local repository.
    /// `f` (a read of the remote, a push aside) tried again through an outage of the remote, as the ops of
    /// [`Swarm::transact`] are: for `retry.outage` since the remote last answered.
    pub fn riding_out<T>(&self, retry: &Retry, mut f: impl FnMut() -> Result<T, TxnError>) -> Result<T, TxnError> {
        let mut away = Away::default();
        loop {
            match f() {
                Err(e) if away.again(retry, &e) => continue,
                Ok(v) => {
                    away.answered();
                    return Ok(v);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// How many writers race for the state ref now, as the ref's own history tells: the distinct publishers of the
    /// ops of the minute before the newest among the newest [`CONTENDERS_WINDOW`] before `tip` (at least 1). No
    /// server counts them; every op's commit names its agent, or the runner process that published it for its
    /// agents (`Swarm-Writer`: a desk of 32 agents is one writer, not 32), and a lost race is the moment to look
    /// (the walk costs a few hundred µs).
    pub(crate) fn contenders(&self, tip: ObjectId) -> u32 {
        let Ok(ops) = self.store().log(tip, CONTENDERS_WINDOW) else { return 1 };
        // The minute before the newest op, by the commits' own times: no clock of this machine is trusted here.
        let since = ops.first().map_or(0, |e| e.time.0.saturating_sub(60_000));
        let writers: std::collections::BTreeSet<&str> =
            ops.iter().filter(|e| e.time.0 >= since).filter_map(LogEntry::publisher).collect();
        (writers.len() as u32).max(1)
    }

    /// How long an op of agent `me` gives way before its first attempt: a random pause up to [`share_window`] of
    /// the ref's newest ops (at most a quarter of `max`). A writer that has just won keeps attempting at once while
    /// the losers pause (the capture effect: at 16 racing CLI agents, one took 73 of 200 tasks and another waited
    /// 22 s for a claim); the ref's history says who took how many of the last minute's updates, so the writers
    /// above their share stand back, in proportion, and nobody else pays. No server, no clock of this machine.
    pub(crate) fn share_pause(&self, tip: ObjectId, me: &str, now: Timestamp, max: Duration) -> Duration {
        let Ok(ops) = self.store().log(tip, SHARE_WINDOW) else { return Duration::ZERO };
        let ops: Vec<(u64, &str)> = ops.iter().map(|e| (e.time.0, e.publisher().unwrap_or_default())).collect();
        let ceiling = share_window(&ops, me, now.0).min(max / 4);
        Duration::from_micros(fastrand::u64(0..=ceiling.as_micros() as u64))
    }
}

/// How many of the state ref's newest ops [`Swarm::contenders`] reads.
pub(super) const CONTENDERS_WINDOW: usize = 128;

/// Limits of the retry loop.
#[derive(Debug, Clone)]
pub struct Retry {
    /// Give up after this many lost races…
    pub max_attempts: u32,
    /// …or after this long, whichever comes first.
    pub max_elapsed: Duration,
    /// The shortest backoff unit, and the least cap of the backoff (see `Retry::backoff`).
    pub base: Duration,
    pub cap: Duration,
    /// Network errors tried again before giving up (a remote briefly unreachable)…
    pub transient_retries: u32,
    /// …or, whichever is longer, for as long as this since the first of them in a row: a runner rides out an
    /// outage of the remote for a third of its lease (`runner::Runner::ride_out`), with backoff from 250 ms to 5 s.
    pub outage: Duration,
    /// How many round trips the ceiling of the backoff spans (at most 2 s; see `Retry::backoff`).
    pub spread: u32,
    /// Wait for this process's share of a push budget before each attempt ([`Pacer`]). Lease renewals do not:
    /// a claim must never run out because the fleet is busy.
    pub paced: bool,
    /// The longest single pause after a lost race, however contended the ref (`Retry::ceiling`).
    pub max_pause: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 200,
            max_elapsed: Duration::from_secs(300),
            base: Duration::from_millis(20),
            cap: Duration::from_millis(250),
            transient_retries: 3,
            outage: Duration::ZERO,
            spread: 32,
            paced: true,
            max_pause: Duration::from_secs(20),
        }
    }
}

impl Retry {
    /// Exponential backoff with full jitter, counted in round trips: a random sleep in `[0, min(ceiling, unit·2^n)]`,
    /// where `unit` is how long the race window of the attempt that just lost took (at least `base`, at most 5 s)
    /// and the ceiling is `max(cap, min(spread·unit, 2 s), 8·unit)`. A lost race means another writer published
    /// within about one round trip, so the waits that spread writers apart scale with the remote's latency:
    /// milliseconds on a local path, seconds on a hosted remote across the world.
    pub(crate) fn backoff(&self, n: u32, unit: Duration) -> Duration {
        Duration::from_micros(fastrand::u64(0..=self.backoff_ceiling(n, unit).as_micros() as u64))
    }

    /// The pause of an op before its next attempt, drawn from [`Retry::ceiling`].
    pub(crate) fn pause(&self, race: &Race) -> Duration {
        Duration::from_micros(fastrand::u64(0..=self.ceiling(race).as_micros() as u64))
    }

    /// The longest pause of an op after `race.lost + 1` lost races in a row: [`Retry::backoff`]'s, and at least
    /// a window sized by the contention. A compare-and-swap race is not a radio collision: of the attempts that
    /// read one tip, the first to arrive wins, so the ref moves once a round trip `T` as long as some attempt
    /// starts soon after each update. With attempts starting at a rate `λ` in all, an update comes every
    /// `T + 1/λ` and costs `λ·T + 1` pushes: `k = λ·T` buys `k/(k+1)` of the ref's rate for `k` lost pushes an
    /// update. With `c` writers racing, a loser that draws its pause from `c` round trips gives `k ≈ 2` (two
    /// thirds of the rate, three pushes an update) however many processes race; the exponential backoff alone
    /// stops at a few seconds whatever the crowd, and 64 writers then make a dozen pushes an update.
    ///
    /// A loser that has lost more draws from a shorter window, down to half of it (`c·(1 + 1/(1+n))/2` round
    /// trips): some precedence for long waiters while others are fresh, and `k ≈ 4` (four fifths of the rate, five
    /// pushes an update) when every writer is a long waiter. It never shrinks further: a window that kept
    /// shrinking with the losses (`c/(1 + n/2)`, before) made every writer of a crowd a long waiter that attempts
    /// every few round trips, and 1,000 agents over 64 processes collapsed to 12.6 pushes an update and a landing
    /// or two a minute (docs/performance.md). Never more than `max_pause`.
    pub(crate) fn ceiling(&self, race: &Race) -> Duration {
        let exponential = self.backoff_ceiling(race.lost, race.unit);
        let unit = race.unit.clamp(self.base, Duration::from_secs(5));
        let precedence = (1.0 + 1.0 / (1.0 + f64::from(race.lost))) / 2.0;
        let fair = unit.saturating_mul(race.contenders.max(1)).mul_f64(precedence);
        exponential.max(fair).min(self.max_pause)
    }

    /// [`Retry::backoff`]'s ceiling after `n` lost races with round trip `unit`.
    pub(super) fn backoff_ceiling(&self, n: u32, unit: Duration) -> Duration {
        let unit = unit.clamp(self.base, Duration::from_secs(5));
        // The ceiling grows with the round trip: about 2 s for a push over the network (as many writers as fit
        // in 32 round trips), a few hundred ms in-process, 8 round trips for a slow remote.
        let cap =
            self.cap.max(unit.saturating_mul(self.spread).min(Duration::from_secs(2))).max(unit.saturating_mul(8));
        unit.saturating_mul(1u32 << n.min(16)).min(cap)
    }
}

/// How many of the ref's newest ops [`share_window`] judges a share by: few enough that a writer that has stopped
/// (a planner's burst of `add`s a minute ago) no longer counts, so that one writer left alone never waits.
pub(super) const SHARE_WINDOW: usize = 32;

/// How recent another writer's op must be for [`share_window`] to count it as racing now: a few round trips of a
/// push over the network.
pub(super) const RACING_NOW: Duration = Duration::from_secs(2);

/// The longest pause of agent `me` before its first attempt, from the ref's newest ops (`(time in ms, the agent
/// that published it)`, newest first): with `c` writers among the `n` ops of the newest [`SHARE_WINDOW`] within
/// the minute before the newest, and `m` of them `me`'s, `m·c/n − 1` times the mean interval between those updates
/// (at most `c − 1` of them) when `me` has more than its share `n/c`; nothing when it has not, when one writer is
/// alone, or when they hold fewer than two ops a writer (too little to judge a share by) — and nothing unless
/// another writer races `me` **now** (issue 38): one of the newest `c` ops is another writer's, at most
/// [`RACING_NOW`] before `now` (ms; a clock ahead of ours counts as now). The history of the last minute alone is
/// no contention: a writer whose rivals went quiet never waits.
pub(crate) fn share_window(ops: &[(u64, &str)], me: &str, now: u64) -> Duration {
    let since = ops.first().map_or(0, |o| o.0.saturating_sub(60_000));
    let recent: Vec<&(u64, &str)> = ops.iter().take(SHARE_WINDOW).filter(|o| o.0 >= since).collect();
    let writers: std::collections::BTreeSet<&str> = recent.iter().map(|o| o.1).collect();
    let (n, c) = (recent.len(), writers.len());
    if c < 2 || n < 2 * c {
        return Duration::ZERO;
    }
    let racing = recent.iter().take(c).any(|o| o.1 != me && now.saturating_sub(o.0) <= RACING_NOW.as_millis() as u64);
    if !racing {
        return Duration::ZERO;
    }
    let mine = recent.iter().filter(|o| o.1 == me).count();
    let excess = mine as f64 * c as f64 / n as f64 - 1.0;
    if excess <= 0.0 {
        return Duration::ZERO;
    }
    let newest = recent.iter().map(|o| o.0).max().unwrap_or(0);
    let oldest = recent.iter().map(|o| o.0).min().unwrap_or(0);
    let interval = (newest - oldest) as f64 / (n - 1) as f64;
    Duration::from_secs_f64(excess * interval / 1000.0)
}

/// What an op knows of its race for the ref when it pauses ([`Retry::ceiling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Race {
    /// Races lost in a row before this one.
    pub lost: u32,
    /// Its race window (the round trip of the attempt that just lost).
    pub unit: Duration,
    /// Writers seen racing for the ref ([`Swarm::contenders`]; 1 when not known).
    pub contenders: u32,
}

/// A remote that stopped answering, as one op (or one read) meets it: the network errors in a row since it last
/// answered, and since when.
#[derive(Default)]
pub(super) struct Away {
    pub(super) errors: u32,
    pub(super) since: Option<Instant>,
}

/// The outages of the remote this thread's ops waited out (a second or more before the remote answered again)
/// since the last call: the longest, and the tries in all. For the runner to say so; taken.
pub fn take_ridden_out() -> Option<(Duration, u32)> {
    RIDDEN_OUT.with(std::cell::Cell::take)
}

impl Away {
    pub(super) fn answered(&mut self) {
        if let Some(since) = self.since
            && since.elapsed() >= Duration::from_secs(1)
        {
            let (away, tries) = (since.elapsed(), self.errors);
            RIDDEN_OUT.with(|c| c.set(Some(c.get().map_or((away, tries), |(d, n)| (d.max(away), n + tries)))));
        }
        *self = Away::default();
    }

    /// After `e`: wait and try again (`true`), or give up. A network error (unreachable, a failed fetch) is tried
    /// again `Retry::transient_retries` times at once-ish, then for as long as `Retry::outage` since the first of
    /// them, with [`outage_wait`]s; any other error is an answer, and ends the outage.
    pub(super) fn again(&mut self, retry: &Retry, e: &TxnError) -> bool {
        if !matches!(e, TxnError::Remote(RemoteError::Unreachable { .. } | RemoteError::Fetch { .. })) {
            self.answered();
            return false;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        self.errors += 1;
        if self.errors <= retry.transient_retries {
            std::thread::sleep(retry.backoff(self.errors + 3, retry.base));
            return true;
        }
        // A runner that is told to stop does not wait for the remote to come back.
        if since.elapsed() >= retry.outage || crate::remote::stopping() {
            return false;
        }
        let wait = outage_wait(self.errors - retry.transient_retries).min(retry.outage.saturating_sub(since.elapsed()));
        sleep_unless_stopped(wait);
        true
    }
}

/// Sleep for `d`, or until the process is told to stop (a runner's signal): a long pause must not hold up a stop.
pub(super) fn sleep_unless_stopped(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !crate::remote::stopping() {
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
}

/// The wait before try `n` against a remote that does not answer: 250 ms doubling to 5 s, with jitter (half to the
/// whole of it), so that the runners of a fleet do not all knock again at once when it comes back.
pub(super) fn outage_wait(n: u32) -> Duration {
    let full = Duration::from_millis(250).saturating_mul(1u32 << n.min(5)).min(Duration::from_secs(5));
    let half = full / 2;
    half + Duration::from_micros(fastrand::u64(0..=half.as_micros() as u64))
}
