//! A landing: the code on the target and the state ref in one atomic update, through the same loop.

use super::*;

impl Swarm {
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
    pub(super) fn fetch_pair(&self, branch: &str) -> Result<(ObjectId, ObjectId), TxnError> {
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

    pub fn fetch_branch(&self, branch: &str) -> Result<Option<ObjectId>, TxnError> {
        let tip = self.remote.fetch(&self.local, &[(branch, &self.branch_mirror(branch))])?.pop().flatten();
        if let Some(tip) = tip {
            self.remote.bring(&self.local, tip)?;
        }
        Ok(tip)
    }

    /// This clone's private mirror of a branch of the remote (`refs/swarm-branches/<key>/<branch>`).
    pub(super) fn branch_mirror(&self, branch: &str) -> String {
        format!("refs/swarm-branches/{}/{}", self.remote.key(), branch.trim_start_matches("refs/heads/"))
    }
}
