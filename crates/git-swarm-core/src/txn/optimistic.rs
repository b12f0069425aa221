//! The optimistic loop itself: read the base, apply the op, commit, compare-and-swap, and on a lost race read the
//! new state and apply the op again — with a push whose answer was lost looked for before anything is re-applied
//! (`Guard`). `transact` and its variants, `init` and `compact` run through it.

use super::*;

impl Swarm {
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
    /// [`Swarm::read_for_tip`].
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

    pub(super) fn transact_inner<T>(
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
                let pause = self.share_pause(snap.commit, me, now, retry.max_pause);
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

    /// The retry loop shared by [`Swarm::transact`] and [`Swarm::land`]: backoff in round trips on lost races,
    /// a few tries on network errors, and the in-doubt bookkeeping that makes a retried op never apply twice.
    pub(super) fn optimistic<T, E>(
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

/// One attempt of the optimistic loop.
pub(super) enum Attempt<T, E> {
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
pub(super) struct Guard<T> {
    /// Commits whose push ended in a network error may have landed all the same: before applying the op again,
    /// every attempt looks for them on the ref, so that an op is never applied twice.
    pub(super) in_doubt: Vec<(ObjectId, T)>,
    /// A lost race means the ref moved. When it keeps being refused while it does not move, something else is
    /// wrong (a stale lock file, a server that refuses without saying why): stop instead of spinning.
    pub(super) last_lost: Option<(ObjectId, String)>,
    pub(super) unmoved: u32,
    pub(super) lost: u32,
    /// Time spent outside the race (a landing's rebase and check), not counted against `Retry::max_elapsed`.
    pub(super) excluded: Duration,
    /// Writers seen racing for the ref ([`Swarm::contenders`]), looked up at the first lost race and every eighth.
    pub(super) contenders: u32,
    /// How long the last attempt that lost took: its race window.
    pub(super) round_trip: Duration,
    /// Whether the op has looked at its share of the ref's recent updates ([`Swarm::share_pause`]).
    pub(super) shared: bool,
}

/// No op is judged by settings that are not the board's own (invariant 7).
pub(super) fn refuse_broken(snap: &Snapshot) -> Result<(), TxnError> {
    match &snap.board.broken_settings {
        None => Ok(()),
        Some(b) => Err(TxnError::BrokenSettings { problem: b.problem.clone(), fallback: b.fallback.clone() }),
    }
}

/// Could a push that failed this way have landed all the same? Only when the connection broke: a refusal, or git
/// not starting at all, changed nothing.
pub(super) fn in_doubt(e: &RemoteError) -> bool {
    matches!(e, RemoteError::Unreachable { .. } | RemoteError::Fetch { .. })
}

impl<T> Guard<T> {
    /// Before an attempt applies its op to `snap`: an earlier push in doubt that did land ends the loop; a ref
    /// refused too often while it stood still is an error.
    pub(super) fn settle(
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

    pub(super) fn committed(&self, value: T, commit: Option<ObjectId>, problems: Vec<Problem>) -> Committed<T> {
        Committed { value, commit, lost_races: self.lost, problems }
    }
}
