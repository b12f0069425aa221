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
mod pace;
pub mod profile;
mod state_remote;
mod target;
pub use history::Compacted;
pub use history::Relation;
pub use pace::Pacer;
pub use state_remote::{GitTransport, InProcess, Reach, StateRemote, Update};
pub use target::{TargetCheck, TargetLoss};

/// A swarm: a state ref at a location, seen from a local repository.
pub struct Swarm {
    /// The user's repository (objects for pushes, the mirror ref).
    pub local: Store,
    /// Where the state ref is ([`StateRemote`]).
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
    /// the processes that race for it, not the agents behind them ([`Swarm::contenders`]).
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

/// How many of the state ref's newest ops [`Swarm::contenders`] reads.
const CONTENDERS_WINDOW: usize = 128;

/// Limits of the retry loop.
#[derive(Debug, Clone)]
pub struct Retry {
    /// Give up after this many lost races…
    pub max_attempts: u32,
    /// …or after this long, whichever comes first.
    pub max_elapsed: Duration,
    /// The shortest backoff unit, and the least cap of the backoff (see [`Retry::backoff`]).
    pub base: Duration,
    pub cap: Duration,
    /// Network errors tried again before giving up (a remote briefly unreachable)…
    pub transient_retries: u32,
    /// …or, whichever is longer, for as long as this since the first of them in a row: a runner rides out an
    /// outage of the remote for a third of its lease (`runner::Runner::ride_out`), with backoff from 250 ms to 5 s.
    pub outage: Duration,
    /// How many round trips the ceiling of the backoff spans (at most 2 s; see [`Retry::backoff`]).
    pub spread: u32,
    /// Wait for this process's share of a push budget before each attempt ([`Pacer`]). Lease renewals do not:
    /// a claim must never run out because the fleet is busy.
    pub paced: bool,
    /// The longest single pause after a lost race, however contended the ref ([`Retry::ceiling`]).
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
    fn backoff_ceiling(&self, n: u32, unit: Duration) -> Duration {
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
const SHARE_WINDOW: usize = 32;

/// The longest pause of agent `me` before its first attempt, from the ref's newest ops (`(time in ms, the agent
/// that published it)`, newest first): with `c` writers among the `n` ops of the newest [`SHARE_WINDOW`] within
/// the minute before the newest, and `m` of them `me`'s, `m·c/n − 1` times the mean interval between those updates
/// (at most `c − 1` of them) when `me` has more than its share `n/c`; nothing when it has not, when one writer is
/// alone, or when they hold fewer than two ops a writer (too little to judge a share by).
pub(crate) fn share_window(ops: &[(u64, &str)], me: &str) -> Duration {
    let since = ops.first().map_or(0, |o| o.0.saturating_sub(60_000));
    let recent: Vec<&(u64, &str)> = ops.iter().take(SHARE_WINDOW).filter(|o| o.0 >= since).collect();
    let writers: std::collections::BTreeSet<&str> = recent.iter().map(|o| o.1).collect();
    let (n, c) = (recent.len(), writers.len());
    if c < 2 || n < 2 * c {
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
struct Away {
    errors: u32,
    since: Option<Instant>,
}

thread_local! {
    /// The outages this thread's ops rode out since [`take_ridden_out`] last looked: how long the longest lasted, and
    /// the tries they took.
    static RIDDEN_OUT: std::cell::Cell<Option<(Duration, u32)>> = const { std::cell::Cell::new(None) };
}

/// The outages of the remote this thread's ops waited out (a second or more before the remote answered again)
/// since the last call: the longest, and the tries in all. For the runner to say so; taken.
pub fn take_ridden_out() -> Option<(Duration, u32)> {
    RIDDEN_OUT.with(std::cell::Cell::take)
}

impl Away {
    fn answered(&mut self) {
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
    fn again(&mut self, retry: &Retry, e: &TxnError) -> bool {
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
fn sleep_unless_stopped(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !crate::remote::stopping() {
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
}

/// The wait before try `n` against a remote that does not answer: 250 ms doubling to 5 s, with jitter (half to the
/// whole of it), so that the runners of a fleet do not all knock again at once when it comes back.
fn outage_wait(n: u32) -> Duration {
    let full = Duration::from_millis(250).saturating_mul(1u32 << n.min(5)).min(Duration::from_secs(5));
    let half = full / 2;
    half + Duration::from_micros(fastrand::u64(0..=half.as_micros() as u64))
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

/// One attempt of the optimistic loop.
enum Attempt<T, E> {
    Published(Committed<T>),
    Lost {
        base: ObjectId,
        reason: String,
    },
    Aborted(E),
    /// Not tried: the op gave way to the ref's other writers ([`Swarm::share_pause`]); attempt again.
    GaveWay,
}

/// What the optimistic loop remembers across attempts.
struct Guard<T> {
    /// Commits whose push ended in a network error may have landed all the same: before applying the op again,
    /// every attempt looks for them on the ref, so that an op is never applied twice.
    in_doubt: Vec<(ObjectId, T)>,
    /// A lost race means the ref moved. When it keeps being refused while it does not move, something else is
    /// wrong (a stale lock file, a server that refuses without saying why): stop instead of spinning.
    last_lost: Option<(ObjectId, String)>,
    unmoved: u32,
    lost: u32,
    /// Time spent outside the race (a landing's rebase and check), not counted against `Retry::max_elapsed`.
    excluded: Duration,
    /// Writers seen racing for the ref ([`Swarm::contenders`]), looked up at the first lost race and every eighth.
    contenders: u32,
    /// How long the last attempt that lost took: its race window.
    round_trip: Duration,
    /// Whether the op has looked at its share of the ref's recent updates ([`Swarm::share_pause`]).
    shared: bool,
}

/// No op is judged by settings that are not the board's own (invariant 7).
fn refuse_broken(snap: &Snapshot) -> Result<(), TxnError> {
    match &snap.board.broken_settings {
        None => Ok(()),
        Some(b) => Err(TxnError::BrokenSettings { problem: b.problem.clone(), fallback: b.fallback.clone() }),
    }
}

/// Could a push that failed this way have landed all the same? Only when the connection broke: a refusal, or git
/// not starting at all, changed nothing.
fn in_doubt(e: &RemoteError) -> bool {
    matches!(e, RemoteError::Unreachable { .. } | RemoteError::Fetch { .. })
}

impl<T> Guard<T> {
    /// Before an attempt applies its op to `snap`: an earlier push in doubt that did land ends the loop; a ref
    /// refused too often while it stood still is an error.
    fn settle(
        &mut self,
        contains: &dyn Fn(ObjectId, ObjectId) -> Result<bool, TxnError>,
        tip: ObjectId,
        refname: &str,
        problems: Vec<Problem>,
    ) -> Result<Option<Committed<T>>, TxnError> {
        for i in 0..self.in_doubt.len() {
            if contains(tip, self.in_doubt[i].0)? {
                let (commit, value) = self.in_doubt.swap_remove(i);
                return Ok(Some(self.committed(value, Some(commit), problems)));
            }
        }
        match &self.last_lost {
            Some((base, reason)) if *base == tip => {
                self.unmoved += 1;
                if self.unmoved >= UNMOVED_LIMIT {
                    return Err(TxnError::Stuck {
                        refname: refname.to_string(),
                        reason: reason.clone(),
                        attempts: self.unmoved,
                    });
                }
            }
            _ => self.unmoved = 0,
        }
        Ok(None)
    }

    fn committed(&self, value: T, commit: Option<ObjectId>, problems: Vec<Problem>) -> Committed<T> {
        Committed { value, commit, lost_races: self.lost, problems }
    }
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
    pub fn read_for(&self, reads: Reads<'_>, clock: &dyn Fn() -> Timestamp) -> Result<Snapshot, TxnError> {
        let (ids, every_name) = match reads {
            Reads::Live => return self.read(false),
            Reads::Tasks(ids) => (ids, false),
            Reads::TasksAndNames(ids) => (ids, true),
            Reads::Next(kind) => {
                let tip = profile::time(Phase::Fetch, || self.tip())?.ok_or_else(|| self.not_initialized())?;
                // The clock of the choice is read after the fetch.
                return Ok(profile::time(Phase::Read, || self.store().read_next(tip, kind, clock()))?);
            }
        };
        let tip = profile::time(Phase::Fetch, || self.tip())?.ok_or_else(|| self.not_initialized())?;
        Ok(profile::time(Phase::Read, || self.store().read_tasks(tip, ids, every_name))?)
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

    /// Run `op` on the newest state until its change is published or it is refused.
    pub fn transact<T>(
        &self,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        op: impl FnMut(&Snapshot, Timestamp) -> Result<(Change, T), DomainError>,
    ) -> Result<Committed<T>, TxnError> {
        self.transact_on(Reads::Live, retry, who, clock, op)
    }

    /// [`Swarm::transact`] for an op that reads only part of the board: each attempt reads it with
    /// [`Swarm::read_for`].
    pub fn transact_on<T>(
        &self,
        reads: Reads<'_>,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        op: impl FnMut(&Snapshot, Timestamp) -> Result<(Change, T), DomainError>,
    ) -> Result<Committed<T>, TxnError> {
        self.transact_inner(reads, retry, who, clock, false, op)
    }

    /// [`Swarm::transact`] for an op that writes the settings (`config set`, `init --config --force`, `doctor --fix`):
    /// it may run on a board whose `swarm.toml` cannot be read ([`crate::ops::Board::broken_settings`]), which it
    /// then replaces. Any other op is refused there.
    pub fn transact_settings<T>(
        &self,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        op: impl FnMut(&Snapshot, Timestamp) -> Result<(Change, T), DomainError>,
    ) -> Result<Committed<T>, TxnError> {
        self.transact_inner(Reads::Live, retry, who, clock, true, op)
    }

    fn transact_inner<T>(
        &self,
        reads: Reads<'_>,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        repairs_settings: bool,
        mut op: impl FnMut(&Snapshot, Timestamp) -> Result<(Change, T), DomainError>,
    ) -> Result<Committed<T>, TxnError> {
        let res = self.optimistic::<T, std::convert::Infallible>(retry, |guard| {
            // Waiting for our share of a push budget is not time spent racing.
            if retry.paced {
                let waited = self.pacer.wait();
                profile::add(Phase::Pace, waited);
                guard.excluded += waited;
            }
            let snap = self.read_for(reads, clock)?;
            self.pacer.observe(&snap.board, clock());
            if let Some(done) = guard.settle(
                &|t, c| self.descends(t, c, IN_DOUBT_DEPTH),
                snap.commit,
                &self.ref_name(),
                snap.problems.clone(),
            )? {
                return Ok(Attempt::Published(done));
            }
            let now = clock();
            // A board picked for a claim holds what the claim touches within a window after its clock (a slow
            // settle, a clock set back): outside it, the claim reads the whole live board of the same commit.
            let snap = match snap.board.picked {
                Some((_, at)) if now < at || now >= at.plus(crate::store::PICK_WINDOW) => {
                    self.store().read(snap.commit, false)?
                }
                _ => snap,
            };
            if !repairs_settings {
                refuse_broken(&snap)?;
            }
            // Nothing ready on a board picked by the index of `.git/swarm/cache` is checked on the tree itself: a
            // damaged or planted index must never send a runner idle while a task is open.
            let (snap, res) = match profile::time(Phase::Apply, || op(&snap, now)) {
                Err(DomainError::NothingReady { .. }) if snap.board.picked.is_some() => {
                    let whole = self.store().read(snap.commit, false)?;
                    let res = profile::time(Phase::Apply, || op(&whole, now));
                    (whole, res)
                }
                res => (snap, res),
            };
            let (mut change, value) = res?;
            change.writer.clone_from(&self.writer);
            if repairs_settings
                && snap.board.broken_settings.is_some()
                && !change.files.contains_key(crate::state::CONFIG_PATH)
            {
                refuse_broken(&snap)?;
            }
            if change.is_empty() {
                return Ok(Attempt::Published(guard.committed(value, None, snap.problems)));
            }
            // Before its first attempt, a writer that took more than its share of the ref's recent updates gives
            // way to the others for a moment, then reads again.
            if !guard.shared {
                guard.shared = true;
                let me = change.writer.as_deref().unwrap_or(&change.agent);
                let pause = self.share_pause(snap.commit, me, retry.max_pause);
                if !pause.is_zero() {
                    sleep_unless_stopped(pause);
                    profile::add(Phase::Backoff, pause);
                    return Ok(Attempt::GaveWay);
                }
            }
            let commit = profile::time(Phase::Write, || self.store().write(Some(&snap), None, &change, who, now))?;
            match self.publish(Some(snap.commit), commit, &change.summary) {
                Ok(Publish::Done) => {
                    self.store().maybe_gc();
                    Ok(Attempt::Published(guard.committed(value, Some(commit), snap.problems)))
                }
                Ok(Publish::LostRace(reason)) => Ok(Attempt::Lost { base: snap.commit, reason }),
                Err(e) => {
                    if matches!(&e, TxnError::Remote(r) if in_doubt(r)) {
                        guard.in_doubt.push((commit, value));
                    }
                    Err(e)
                }
            }
        })?;
        match res {
            Ok(c) => Ok(c),
            Err(never) => match never {},
        }
    }

    /// Land code and state together: move `branch` (`refs/heads/<target>`) to the commit `prepare` makes from the
    /// branch's newest tip, and the state ref by `op` (which is told that commit), in **one atomic push** with a
    /// lease on each ref. A lost race on either ref fetches both again, calls `prepare` again (rebase) and re-runs
    /// `op` on the new state. `prepare` may give up (`Ok(Err(e))`): nothing was published.
    pub fn land<T, E>(
        &self,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        branch: &str,
        prepare: &mut dyn FnMut(ObjectId) -> Result<ObjectId, E>,
        mut op: impl FnMut(&Snapshot, Timestamp, ObjectId) -> Result<(Change, T), DomainError>,
    ) -> Result<Result<Committed<T>, E>, TxnError> {
        let state_ref = self.ref_name();
        // In-process, a lost landing costs milliseconds and the writers are runners on one machine: a short
        // ceiling serves them better (measured: 32 workers 0.39–0.48 → 0.55–0.59 of the ideal).
        let in_process = Retry { spread: 8, ..retry.clone() };
        let retry = if matches!(self.remote.reach(), Reach::Transport) { retry } else { &in_process };
        self.optimistic(retry, |guard| {
            if retry.paced {
                guard.excluded += self.pacer.wait();
            }
            let (state_tip, branch_tip) = self.fetch_pair(branch)?;
            // Where the state's objects are: the remote's repository for a local path, else this clone.
            let store = self.store();
            let snap = store.read(state_tip, false)?;
            self.pacer.observe(&snap.board, clock());
            if let Some(done) = guard.settle(
                &|t, c| self.descends(t, c, IN_DOUBT_DEPTH),
                snap.commit,
                &state_ref,
                snap.problems.clone(),
            )? {
                return Ok(Attempt::Published(done));
            }
            refuse_broken(&snap)?;
            // Rebasing, conflict runs and the check take their own time: it is not time spent racing.
            let prepare_started = Instant::now();
            let prepared = prepare(branch_tip);
            guard.excluded += prepare_started.elapsed();
            let code = match prepared {
                Ok(c) => c,
                Err(e) => return Ok(Attempt::Aborted(e)),
            };
            // Never rewind the branch: what lands must hold its tip (a push with a lease would allow anything).
            if code == branch_tip || !self.local.has_ancestor(code, branch_tip, 100_000)? {
                return Err(TxnError::Store(StoreError::Git {
                    context: format!("landing on {branch}"),
                    message: format!("{code} does not build on the branch's tip {branch_tip}; refusing to rewind it"),
                }));
            }
            let now = clock();
            let (mut change, value) = op(&snap, now, code)?;
            change.writer.clone_from(&self.writer);
            // In-process, look again before writing anything: under contention most attempts have lost by now,
            // and objects written for a lost attempt are garbage (each one a file on the remote's disk).
            if self.remote.moved(&[(state_ref.as_str(), state_tip), (branch, branch_tip)])? {
                self.lost.fetch_add(1, Ordering::Relaxed);
                return Ok(Attempt::Lost { base: snap.commit, reason: "a ref moved".into() });
            }
            let commit = store.write(Some(&snap), None, &change, who, now)?;
            let updates = [(branch, Some(branch_tip), code), (state_ref.as_str(), Some(state_tip), commit)];
            // Code and state in one atomic update; the new code's objects go along.
            match self.publish_refs(&updates, Some(code), &change.summary) {
                Ok(Publish::Done) => {
                    self.set_seen(commit);
                    self.remote.remember(&self.local, &self.branch_mirror(branch), code);
                    store.maybe_gc();
                    Ok(Attempt::Published(guard.committed(value, Some(commit), snap.problems)))
                }
                Ok(Publish::LostRace(reason)) => Ok(Attempt::Lost { base: snap.commit, reason }),
                Err(e) => {
                    if matches!(&e, TxnError::Remote(r) if in_doubt(r)) {
                        guard.in_doubt.push((commit, value));
                    }
                    Err(e)
                }
            }
        })
    }

    /// Where the state ref and `branch` are on the remote, with their objects in the local repository.
    fn fetch_pair(&self, branch: &str) -> Result<(ObjectId, ObjectId), TxnError> {
        let state_ref = self.ref_name();
        let missing_branch = || {
            TxnError::Store(StoreError::Git {
                context: format!("cannot land on {branch}"),
                message: format!("{} has no {branch}", self.remote_label),
            })
        };
        let seen = self.seen()?;
        let tips = profile::time(Phase::Fetch, || {
            self.remote.fetch(&self.local, &[(&state_ref, &self.mirror_ref()), (branch, &self.branch_mirror(branch))])
        })?;
        let (state, code) =
            (tips.first().copied().flatten(), tips.get(1).copied().flatten().ok_or_else(missing_branch)?);
        // The rebase happens in this clone: bring the branch's new commits over.
        self.remote.bring(&self.local, code)?;
        self.check_seen(seen, state)?;
        Ok((state.ok_or_else(|| self.not_initialized())?, code))
    }

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

    pub fn fetch_branch(&self, branch: &str) -> Result<Option<ObjectId>, TxnError> {
        let tip = self.remote.fetch(&self.local, &[(branch, &self.branch_mirror(branch))])?.pop().flatten();
        if let Some(tip) = tip {
            self.remote.bring(&self.local, tip)?;
        }
        Ok(tip)
    }

    /// Push `new` to `refname` on the remote, whatever is there (a work branch kept for a person to look at; never
    /// the state ref or the target branch).
    pub fn push_aside(&self, refname: &str, new: ObjectId) -> Result<(), TxnError> {
        match self.remote.force(&self.local, refname, new, "git swarm: work kept")? {
            Publish::Done => Ok(()),
            Publish::LostRace(reason) => Err(TxnError::Remote(RemoteError::Refused {
                remote: self.remote_label.clone(),
                refname: refname.into(),
                reason,
            })),
        }
    }

    /// Keep `new` at `refname` in this clone: work that could not be pushed aside (the remote away past the
    /// outage window), so that it outlives the work tree; the next runner of the clone pushes it
    /// ([`Swarm::kept_here`]).
    pub fn keep_here(&self, refname: &str, new: ObjectId) -> Result<(), TxnError> {
        Ok(self.local.set_ref(refname, new, "git swarm: work kept here (the remote could not be reached)")?)
    }

    /// The work kept in this clone by [`Swarm::keep_here`] (none when the clone is the remote itself).
    pub(crate) fn kept_here(&self) -> Vec<(String, ObjectId)> {
        if !matches!(self.remote.reach(), Reach::Transport) {
            return vec![];
        }
        let prefix = self.kept_work_prefix();
        let Ok(platform) = self.local.repo.references() else { return vec![] };
        let Ok(iter) = platform.prefixed(prefix.as_str()) else { return vec![] };
        iter.flatten().map(|r| (r.name().as_bstr().to_string(), r.id().detach())).collect()
    }

    /// Push the work kept in this clone ([`Swarm::kept_here`]) to the remote, each ref deleted here once it is
    /// there: what was pushed, and what could not be (with why).
    pub fn push_kept_here(&self) -> (Vec<String>, Vec<(String, TxnError)>) {
        let (mut pushed, mut failed) = (vec![], vec![]);
        for (refname, tip) in self.kept_here() {
            match self.push_aside(&refname, tip) {
                Ok(()) => {
                    let _ = self.local.delete_ref(&refname);
                    pushed.push(refname);
                }
                Err(e) => failed.push((refname, e)),
            }
        }
        (pushed, failed)
    }

    /// Where the work of attempt `epoch` of task `id` is kept when it cannot land: one ref per attempt, so that a
    /// later attempt never overwrites an earlier one's work.
    pub fn kept_work_ref(&self, id: &str, epoch: u64) -> String {
        format!("{}{id}/{epoch}", self.kept_work_prefix())
    }

    /// `refs/swarm-work/<name>/`.
    pub fn kept_work_prefix(&self) -> String {
        format!("refs/swarm-work/{}/", self.name)
    }

    /// The kept work of tasks that are done on `board` (their code landed: what was kept of their failed attempts
    /// is history), deleted on the remote. Returns the refs deleted.
    pub fn prune_kept_work(&self, board: &crate::ops::Board) -> Result<Vec<String>, TxnError> {
        let prefix = self.kept_work_prefix();
        let done = |id: &str| {
            board.closed.get(id).is_some_and(|c| c.status == crate::model::Status::Done)
                || board.tasks.get(id).is_some_and(|t| t.task.status == crate::model::Status::Done)
        };
        let stale: Vec<String> = self
            .remote_refs(&prefix)?
            .into_iter()
            .map(|(r, _)| r)
            .filter(|r| r.strip_prefix(prefix.as_str()).and_then(|rest| rest.split('/').next()).is_some_and(done))
            .collect();
        self.remote.delete(&self.local, &stale)?;
        Ok(stale)
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
    pub(crate) fn share_pause(&self, tip: ObjectId, me: &str, max: Duration) -> Duration {
        let Ok(ops) = self.store().log(tip, SHARE_WINDOW) else { return Duration::ZERO };
        let ops: Vec<(u64, &str)> = ops.iter().map(|e| (e.time.0, e.publisher().unwrap_or_default())).collect();
        let ceiling = share_window(&ops, me).min(max / 4);
        Duration::from_micros(fastrand::u64(0..=ceiling.as_micros() as u64))
    }

    /// This clone's private mirror of a branch of the remote (`refs/swarm-branches/<key>/<branch>`).
    fn branch_mirror(&self, branch: &str) -> String {
        format!("refs/swarm-branches/{}/{}", self.remote.key(), branch.trim_start_matches("refs/heads/"))
    }

    /// The retry loop shared by [`Swarm::transact`] and [`Swarm::land`]: backoff in round trips on lost races,
    /// a few tries on network errors, and the in-doubt bookkeeping that makes a retried op never apply twice.
    fn optimistic<T, E>(
        &self,
        retry: &Retry,
        mut attempt: impl FnMut(&mut Guard<T>) -> Result<Attempt<T, E>, TxnError>,
    ) -> Result<Result<Committed<T>, E>, TxnError> {
        let mut guard = Guard {
            in_doubt: Vec::new(),
            last_lost: None,
            unmoved: 0,
            lost: 0,
            excluded: Duration::ZERO,
            contenders: 1,
            round_trip: Duration::ZERO,
            shared: false,
        };
        let started = Instant::now();
        let mut away = Away::default();
        loop {
            let attempt_started = Instant::now();
            let excluded_before = guard.excluded;
            let outcome = attempt(&mut guard);
            if outcome.is_ok() {
                away.answered();
            }
            let err = match outcome {
                Ok(Attempt::Published(done)) => return Ok(Ok(done)),
                Ok(Attempt::GaveWay) => continue,
                Ok(Attempt::Aborted(e)) if guard.in_doubt.is_empty() => return Ok(Err(e)),
                Ok(Attempt::Aborted(_)) => TxnError::OutcomeUnknown {
                    remote: self.remote_label.clone(),
                    message: "gave up after a push whose answer was lost".into(),
                },
                Ok(Attempt::Lost { base, reason }) => {
                    guard.lost += 1;
                    guard.last_lost = Some((base, reason));
                    // The round trip is the race window: a landing's rebase and check are not part of it.
                    guard.round_trip =
                        attempt_started.elapsed().saturating_sub(guard.excluded.saturating_sub(excluded_before));
                    if guard.lost >= retry.max_attempts
                        || started.elapsed().saturating_sub(guard.excluded) >= retry.max_elapsed
                    {
                        TxnError::Contention {
                            swarm: self.name.clone(),
                            attempts: guard.lost,
                            secs: started.elapsed().as_secs_f64(),
                        }
                    } else {
                        if guard.lost == 1 || guard.lost % 8 == 0 {
                            guard.contenders = guard.contenders.max(self.contenders(base));
                            profile::contenders(guard.contenders);
                        }
                        let race = Race { lost: guard.lost - 1, unit: guard.round_trip, contenders: guard.contenders };
                        let pause = retry.pause(&race);
                        sleep_unless_stopped(pause);
                        profile::add(Phase::Backoff, pause);
                        continue;
                    }
                }
                Err(e) if away.again(retry, &e) => continue,
                Err(e) => e,
            };
            // Giving up while a push of ours may have landed: say so, so that nobody blindly runs the op again.
            return Err(if guard.in_doubt.is_empty() {
                err
            } else {
                TxnError::OutcomeUnknown { remote: self.remote_label.clone(), message: err.to_string() }
            });
        }
    }

    /// Create the state ref with `config` unless it exists. Returns the tip and whether this call created it.
    pub fn init(
        &self,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        config: &Config,
        agent: &str,
    ) -> Result<(ObjectId, bool), TxnError> {
        let started = Instant::now();
        let mut lost = 0u32;
        loop {
            if let Some(tip) = self.tip()? {
                // Make sure what is there is a swarm we can read before calling it done.
                refuse_broken(&self.store().read(tip, false)?)?;
                return Ok((tip, false));
            }
            let change = Change {
                op: "init",
                agent: agent.to_string(),
                task: None,
                epoch: None,
                summary: format!("init swarm {} (target {})", self.name, config.target),
                writes: vec![],
                removes: vec![],
                ..Default::default()
            };
            let now = clock();
            let commit = self.store().write(None, Some(config), &change, who, now)?;
            match self.publish(None, commit, &change.summary)? {
                Publish::Done => return Ok((commit, true)),
                Publish::LostRace(_) => {
                    lost += 1;
                    if lost >= retry.max_attempts {
                        let secs = started.elapsed().as_secs_f64();
                        return Err(TxnError::Contention { swarm: self.name.clone(), attempts: lost, secs });
                    }
                    std::thread::sleep(retry.backoff(lost, retry.base));
                }
            }
        }
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
        // 4 writers, an update every 100 ms (newest first), 40 ops: `a` took 20, the others 20 between them.
        let others = ["b", "c", "d"];
        let ops: Vec<(u64, &str)> = (0..40u64)
            .map(|i| (100_000 - i * 100, if i % 2 == 0 { "a" } else { others[(i as usize / 2) % 3] }))
            .collect();
        // `a`: 20 of 40 with a share of 10, twice its share: one interval (100 ms) of giving way.
        assert_eq!(share_window(&ops, "a"), Duration::from_millis(100));
        // The others are below their share, and a writer not seen at all is too: no pause.
        for me in ["b", "c", "d", "e"] {
            assert_eq!(share_window(&ops, me), Duration::ZERO, "{me}");
        }
        // One writer alone never waits, however many its ops.
        let alone: Vec<(u64, &str)> = (0..40u64).map(|i| (100_000 - i * 100, "a")).collect();
        assert_eq!(share_window(&alone, "a"), Duration::ZERO);
        // Too few ops to judge a share by (fewer than two a writer): no pause.
        assert_eq!(share_window(&ops[..7], "a"), Duration::ZERO);
        // Ops older than the minute before the newest do not count: `a`'s old streak is forgotten.
        let mut old = ops.clone();
        old.extend((0..100u64).map(|i| (30_000 - i * 10, "a")));
        assert_eq!(share_window(&old, "a"), share_window(&ops, "a"));
        // A writer that took 17 of the newest 32 ops beside 15 others with one each: 17·16/32 − 1 = 7.5 intervals
        // of 10 ms; older ops, however many of them its own, do not count.
        let names: Vec<String> = (0..15).map(|i| format!("o{i}")).collect();
        let mut hog: Vec<(u64, &str)> = (0..32u64)
            .map(|i| (100_000 - i * 10, if i % 2 == 0 || i == 31 { "h" } else { names[(i as usize - 1) / 2].as_str() }))
            .collect();
        let w = share_window(&hog, "h");
        hog.extend((0..500u64).map(|i| (99_000 - i, "h")));
        assert_eq!(share_window(&hog, "h"), w);
        assert!((w.as_secs_f64() - 0.075).abs() < 1e-9, "{w:?}");
        // A planner's burst of adds before one worker went on alone: the worker does not wait for it.
        let mut after_burst: Vec<(u64, &str)> = (0..40u64).map(|i| (100_000 - i * 50, "worker")).collect();
        after_burst.extend((0..200u64).map(|i| (98_000 - i, "planner")));
        assert_eq!(share_window(&after_burst, "worker"), Duration::ZERO);
        // A runner's desk publishing for its agents in turn: no agent of it is above its share.
        let desk: Vec<(u64, &str)> =
            (0..64u64).map(|i| (100_000 - i * 100, ["p-1", "p-2", "p-3", "p-4"][i as usize % 4])).collect();
        assert!(["p-1", "p-2", "p-3", "p-4"].iter().all(|me| share_window(&desk, me).is_zero()));
    }
}
