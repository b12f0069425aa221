//! The optimistic transaction: read the newest state → apply a pure op → commit → compare-and-swap the ref → on a
//! lost race, back off (exponential, full jitter) and do it all again on the new state. The only writer of the
//! state ref.

use std::time::{Duration, Instant};

use gix::ObjectId;

use crate::model::Config;
use crate::ops::{Change, DomainError};
use crate::remote::{self, Location, Publish, RemoteError};
use crate::store::{Identity, Problem, Snapshot, Store, StoreError};
use crate::time::Timestamp;

/// A swarm: a state ref at a location, seen from a local repository.
pub struct Swarm {
    /// The user's repository (objects for pushes, the mirror ref).
    pub local: Store,
    pub location: Location,
    /// `default`, or the `--swarm` name.
    pub name: String,
    /// What users call the remote in messages (`origin`, a URL, `this repository`).
    pub remote_label: String,
}

/// Refusals of an update while the ref stays where it was, before the loop stops (see [`TxnError::Stuck`]).
const UNMOVED_LIMIT: u32 = 8;

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
    /// Network errors tried again before giving up (a remote briefly unreachable).
    pub transient_retries: u32,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 200,
            max_elapsed: Duration::from_secs(300),
            base: Duration::from_millis(20),
            cap: Duration::from_millis(2000),
            transient_retries: 3,
        }
    }
}

impl Retry {
    /// Exponential backoff with full jitter, counted in round trips: a random sleep in `[0, min(cap, unit·2^n)]`,
    /// where `unit` is how long the attempt that just lost took (at least `base`, at most 5 s) and the cap is
    /// `max(cap, 8·unit)`. A lost race means another writer published within about one round trip, so the waits
    /// that spread writers apart scale with the remote's latency: milliseconds on a local path, seconds on a
    /// hosted remote across the world.
    pub fn backoff(&self, n: u32, unit: Duration) -> Duration {
        let unit = unit.clamp(self.base, Duration::from_secs(5));
        let cap = self.cap.max(unit.saturating_mul(8));
        let ceiling = unit.saturating_mul(1u32 << n.min(16)).min(cap);
        Duration::from_micros(fastrand::u64(0..=ceiling.as_micros() as u64))
    }
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

    fn mirror_ref(&self, key: &str) -> String {
        format!("refs/swarm-remotes/{key}/{}", self.name)
    }

    /// The store that holds the objects of the state ref after a read.
    pub fn store(&self) -> &Store {
        match &self.location {
            Location::InProcess { store, .. } => store,
            Location::Url { .. } => &self.local,
        }
    }

    /// Where the state ref is now (fetching it first from a URL remote).
    pub fn tip(&self) -> Result<Option<ObjectId>, TxnError> {
        let refname = self.ref_name();
        Ok(match &self.location {
            Location::InProcess { store, .. } => store.read_ref(&refname)?,
            Location::Url { url, push_to, mirror_key, fetch_with } => {
                let tip =
                    remote::fetch(&self.local, url, push_to, &refname, &self.mirror_ref(mirror_key), *fetch_with)?;
                // Each fetch that brings something adds a pack.
                self.local.maybe_gc();
                tip
            }
        })
    }

    /// The newest state, or `None` when the swarm does not exist. `full`: every task, finished ones too.
    pub fn try_read(&self, full: bool) -> Result<Option<Snapshot>, TxnError> {
        match self.tip()? {
            None => Ok(None),
            Some(tip) => Ok(Some(self.store().read(tip, full)?)),
        }
    }

    /// The newest state; a missing swarm is an error.
    pub fn read(&self, full: bool) -> Result<Snapshot, TxnError> {
        self.try_read(full)?.ok_or_else(|| self.not_initialized())
    }

    fn not_initialized(&self) -> TxnError {
        TxnError::NotInitialized { swarm: self.name.clone(), remote: self.remote_label.clone() }
    }

    /// One compare-and-swap of the state ref from `base` to `new`.
    fn publish(&self, base: Option<ObjectId>, new: ObjectId, why: &str) -> Result<Publish, TxnError> {
        let refname = self.ref_name();
        match &self.location {
            Location::InProcess { store, .. } => Ok(if store.cas_ref(&refname, base, new, why)? {
                Publish::Done
            } else {
                let lock = store.repo.common_dir().join(format!("{refname}.lock"));
                Publish::LostRace(if lock.exists() {
                    format!(
                        "{} exists (another writer, or one that died; remove it if no git process runs)",
                        lock.display()
                    )
                } else {
                    "the ref moved".into()
                })
            }),
            Location::Url { push_to, mirror_key, .. } => {
                let r = remote::push(&self.local, push_to, &[(&refname, base, new)])?;
                if r == Publish::Done {
                    // Keep the mirror current: the next fetch negotiates from it and may find nothing to do. It is
                    // only a cache: failing to update it (a concurrent fetch holds its lock) must not turn a
                    // published op into an error.
                    self.local.set_mirror(&self.mirror_ref(mirror_key), new);
                }
                Ok(r)
            }
        }
    }

    /// Run `op` on the newest state until its change is published or it is refused.
    pub fn transact<T>(
        &self,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        mut op: impl FnMut(&Snapshot, Timestamp) -> Result<(Change, T), DomainError>,
    ) -> Result<Committed<T>, TxnError> {
        let started = Instant::now();
        let mut lost = 0u32;
        let mut transient = 0u32;
        // Commits whose push ended in a network error may have landed all the same: before applying the op again,
        // every attempt looks for them on the ref, so that an op is never applied twice.
        let mut in_doubt: Vec<(ObjectId, T)> = Vec::new();
        // A lost race means the ref moved. When it keeps being refused while it does not move, something else is
        // wrong (a stale lock file, a server that refuses without saying why): stop instead of spinning.
        let mut last_lost: Option<(ObjectId, String)> = None;
        let mut unmoved = 0u32;
        loop {
            let attempt_started = Instant::now();
            let attempt = (|| -> Result<Result<Committed<T>, (ObjectId, Publish)>, TxnError> {
                let snap = self.read(false)?;
                for i in 0..in_doubt.len() {
                    if self.store().has_ancestor(snap.commit, in_doubt[i].0, 1000)? {
                        let (commit, value) = in_doubt.swap_remove(i);
                        return Ok(Ok(Committed {
                            value,
                            commit: Some(commit),
                            lost_races: lost,
                            problems: snap.problems,
                        }));
                    }
                }
                match &last_lost {
                    Some((base, reason)) if *base == snap.commit => {
                        unmoved += 1;
                        if unmoved >= UNMOVED_LIMIT {
                            return Err(TxnError::Stuck {
                                refname: self.ref_name(),
                                reason: reason.clone(),
                                attempts: unmoved,
                            });
                        }
                    }
                    _ => unmoved = 0,
                }
                let now = clock();
                let (change, value) = op(&snap, now)?;
                if change.is_empty() {
                    return Ok(Ok(Committed { value, commit: None, lost_races: lost, problems: snap.problems }));
                }
                let commit = self.store().write(Some(&snap), None, &change, who, now)?;
                match self.publish(Some(snap.commit), commit, &change.summary) {
                    Ok(Publish::Done) => {
                        self.store().maybe_gc();
                        Ok(Ok(Committed { value, commit: Some(commit), lost_races: lost, problems: snap.problems }))
                    }
                    Ok(race) => Ok(Err((snap.commit, race))),
                    Err(e) => {
                        in_doubt.push((commit, value));
                        Err(e)
                    }
                }
            })();
            let err = match attempt {
                Ok(Ok(done)) => return Ok(done),
                Ok(Err((base, race))) => {
                    lost += 1;
                    let reason = match race {
                        Publish::LostRace(r) => r,
                        Publish::Done => String::new(),
                    };
                    last_lost = Some((base, reason));
                    if lost >= retry.max_attempts || started.elapsed() >= retry.max_elapsed {
                        TxnError::Contention {
                            swarm: self.name.clone(),
                            attempts: lost,
                            secs: started.elapsed().as_secs_f64(),
                        }
                    } else {
                        std::thread::sleep(retry.backoff(lost - 1, attempt_started.elapsed()));
                        continue;
                    }
                }
                Err(TxnError::Remote(RemoteError::Unreachable { .. } | RemoteError::Fetch { .. }))
                    if transient < retry.transient_retries =>
                {
                    transient += 1;
                    std::thread::sleep(retry.backoff(transient + 3, retry.base));
                    continue;
                }
                Err(e) => e,
            };
            // Giving up while a push of ours may have landed: say so, so that nobody blindly runs the op again.
            return Err(if in_doubt.is_empty() {
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
                self.store().read(tip, false)?;
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
                assert!(d <= r.cap.max(unit * 8), "n={n} unit={unit:?}: {d:?}");
                assert!(d <= unit * (1 << n.min(16)), "n={n} unit={unit:?}: {d:?}");
            }
        }
        // A slow remote waits longer than a fast one (on average over many draws).
        let mean = |unit| (0..400).map(|_| r.backoff(3, unit).as_micros()).sum::<u128>() / 400;
        assert!(mean(Duration::from_millis(800)) > 4 * mean(Duration::from_millis(30)));
    }
}
