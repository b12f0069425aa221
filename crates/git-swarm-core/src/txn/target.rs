//! What a clone saw of the target branch, and what a force-push of it took away (issue 26). The swarm's runners
//! never rewind the target (`Swarm::land` refuses it), but anyone who can push it can: a person, a script, an
//! agent that holds the runner's credentials. Such a push drops the code of tasks the board calls done.
//!
//! Each clone records the last tip of the target it accepted in a private ref (`refs/swarm-seen/<remote>/<branch>`,
//! which also keeps that tip's objects in the clone). A runner checks every tip it fetches against it — one walk
//! from the new tip to the recorded one in the steady state — and moves the record on; a tip that does not hold
//! the recorded one is a rewind: which commits went (one `git log`), which tasks they were landings of, and which
//! of those tasks are done and have no landing on the new tip any more. Only `doctor --accept-remote` (or putting
//! the old tip back) moves the record past a rewind that lost done tasks' code.

use gix::ObjectId;

use super::{Swarm, TxnError};
use crate::store::StoreError;
use crate::trailer::{self, Mark};

/// How far back a first-parent walk looks for the recorded tip before asking git (a merge on the way).
const FIRST_PARENT_WALK: usize = 1_000;
/// How far a walk looks first, where only a few commits are between in the steady state (a new tip and the record,
/// a landing and the tip it was built on, a tip older than the record).
const SHORT_WALK: usize = 32;
/// How many lost commits a rewind reads at most.
const LOST_LIMIT: usize = 100_000;

/// What a fetched tip of the target is, against what this clone saw of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetCheck {
    /// The first tip this clone sees of it (now recorded).
    First,
    /// It holds the recorded tip (now recorded in its place).
    Holds,
    /// It does not: a rewind (or a rewrite). See `TargetLoss`.
    Rewound(TargetLoss),
}

/// A rewind of the target since this clone saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetLoss {
    /// `refs/heads/<target>`.
    pub branch: String,
    /// The tip this clone saw last, and the one the remote has now.
    pub seen: ObjectId,
    pub now: ObjectId,
    /// Commits the new tip no longer holds.
    pub lost: usize,
    /// Done tasks whose code went with them (no landing of theirs is on the new tip): id and title.
    pub gone: Vec<(String, String)>,
}

impl TargetLoss {
    /// One line: what went, and which tasks' code.
    pub fn describe(&self, remote: &str) -> String {
        let target = self.branch.trim_start_matches("refs/heads/");
        let (seen, now) = (self.seen.to_string(), self.now.to_string());
        let (seen, now) = (crate::store::short(&seen), crate::store::short(&now));
        let head = format!(
            "{target} on {remote} no longer holds {seen}, which this clone saw: it is at {now}, {} commit(s) gone",
            self.lost
        );
        if self.gone.is_empty() {
            return format!("{head}; every done task's code is still on it (a rewrite)");
        }
        let list: Vec<String> =
            self.gone.iter().take(10).map(|(id, title)| format!("{id} ({})", crate::escape::line(title))).collect();
        let more = if self.gone.len() > 10 { format!(" and {} more", self.gone.len() - 10) } else { String::new() };
        format!("{head}, with the code of {} done task(s): {}{more}", self.gone.len(), list.join(", "))
    }

    /// How to put it back, or go on without it.
    pub fn hint(&self, remote: &str) -> String {
        let (b, now, seen) = (&self.branch, self.now, self.seen);
        let target = b.trim_start_matches("refs/heads/");
        let put_back = if remote == "this repository" {
            format!("`git update-ref {b} {seen} {now}`")
        } else {
            format!("`git push --force-with-lease={b}:{now} {remote} {seen}:{b}` (from this clone)")
        };
        format!(
            "the lost commits are still in this clone: put them back with {put_back}, or merge {seen} into \
             {target}; if the rewind was meant, `git swarm doctor --accept-remote` takes {target} as it is (a \
             done task's work is then redone only if it is filed again: `git swarm add`)"
        )
    }
}

impl Swarm {
    /// This clone's record of what it accepted of `branch` (`refs/heads/<target>`).
    fn target_record(&self, branch: &str) -> String {
        format!("refs/swarm-seen/{}/{}", self.remote.key(), branch.trim_start_matches("refs/heads/"))
    }

    /// The tip of `branch` this clone accepted last, if any.
    pub fn target_seen(&self, branch: &str) -> Result<Option<ObjectId>, TxnError> {
        Ok(self.local.read_ref(&self.target_record(branch))?)
    }

    /// Check `tip`, just fetched (its objects in this clone), against the tip of `branch` this clone saw, and record
    /// it when it holds that one (or is the first): [`TargetCheck`]. A rewind is recorded only when no done task's
    /// code went with it (a rewrite, or commits of nobody's task); else the record stays, and every later check
    /// finds the same loss until a person acts.
    pub fn check_target(&self, branch: &str, tip: ObjectId) -> Result<TargetCheck, TxnError> {
        let record = self.target_record(branch);
        let mut tip = tip;
        for _ in 0..3 {
            let seen = self.local.read_ref(&record)?;
            let check = match seen {
                None => TargetCheck::First,
                // The steady state: the record is a few commits back (it moves with every tip checked, and with
                // each landing of this clone's, `landed_on_target`).
                Some(s) if s == tip || self.local.has_ancestor(tip, s, SHORT_WALK)? => TargetCheck::Holds,
                // Further back, or past merges (not when the tip is only older than the record: see below).
                Some(s) if !self.local.has_ancestor(s, tip, SHORT_WALK)? && self.holds(tip, s)? => TargetCheck::Holds,
                Some(s) => {
                    // Another runner of this clone (an agent of this process) may have recorded a newer tip since
                    // this one was fetched: a view that is only older is no rewind. The remote says which.
                    let now = self.fetch_branch(branch)?.unwrap_or(tip);
                    if now != tip && (now == s || self.holds(now, s)?) {
                        return Ok(TargetCheck::Holds);
                    }
                    tip = now;
                    TargetCheck::Rewound(self.target_loss(branch, s, tip)?)
                }
            };
            if seen == Some(tip) {
                return Ok(check);
            }
            if let TargetCheck::Rewound(loss) = &check
                && !loss.gone.is_empty()
            {
                return Ok(check);
            }
            // Compare-and-swap: another runner of this clone that moved it meanwhile is checked against.
            if self.local.cas_refs(&[(record.as_str(), seen, tip)], "git swarm: target seen")? {
                return Ok(check);
            }
            // A lock a killed runner left on the record must not keep it where it is for good.
            self.local.clear_stale_lock(&record);
        }
        Ok(TargetCheck::Holds)
    }

    /// After a landing of `code` on `branch`: what this clone saw of it is `code`, when `code` holds the recorded tip
    /// a few commits back (else another runner of this clone recorded a newer one, or the next check moves it on).
    /// No fetch: a walk of the landing's commits, and one compare-and-swap. A force-push that drops this very
    /// landing is then noticed by the next check, also after a restart.
    pub fn landed_on_target(&self, branch: &str, code: ObjectId) {
        let record = self.target_record(branch);
        if let Ok(Some(seen)) = self.local.read_ref(&record)
            && seen != code
            && self.local.has_ancestor(code, seen, SHORT_WALK).unwrap_or(false)
        {
            let _ = self.local.cas_refs(&[(record.as_str(), Some(seen), code)], "git swarm: target seen");
        }
    }

    /// Take `tip` as what this clone saw of `branch`, whatever it saw before (`doctor --accept-remote`).
    pub fn accept_target(&self, branch: &str, tip: ObjectId) -> Result<(), TxnError> {
        Ok(self.local.set_ref(&self.target_record(branch), tip, "git swarm: target accepted")?)
    }

    /// Does `tip` hold `seen`? A first-parent walk, then git for history with merges.
    fn holds(&self, tip: ObjectId, seen: ObjectId) -> Result<bool, TxnError> {
        if self.local.has_ancestor(tip, seen, FIRST_PARENT_WALK)? {
            return Ok(true);
        }
        let dir = self.local.repo.common_dir();
        let out = crate::gitcmd::local(dir)
            .args(["merge-base", "--is-ancestor", &seen.to_string(), &tip.to_string()])
            .output()
            .map_err(|e| git_error("merge-base", e.to_string()))?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(git_error("merge-base", String::from_utf8_lossy(&out.stderr).trim().to_string())),
        }
    }

    /// What a rewind from `seen` to `tip` took: the commits, and the done tasks whose code went with them.
    fn target_loss(&self, branch: &str, seen: ObjectId, tip: ObjectId) -> Result<TargetLoss, TxnError> {
        let dir = self.local.repo.common_dir();
        let max = format!("--max-count={LOST_LIMIT}");
        let out = crate::gitcmd::local(dir)
            .args(["log", "-z", "--format=%H%n%B", &max, &seen.to_string(), "--not", &tip.to_string(), "--"])
            .output()
            .map_err(|e| git_error("log", e.to_string()))?;
        if !out.status.success() {
            return Err(git_error("log", String::from_utf8_lossy(&out.stderr).trim().to_string()));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lost = 0;
        let mut named = std::collections::BTreeMap::new();
        for entry in text.split('\0').filter(|e| !e.trim().is_empty()) {
            lost += 1;
            let message = entry.split_once('\n').map(|(_, m)| m).unwrap_or_default();
            if let Mark::Landing { task, .. } = trailer::read(message) {
                named.insert(task, 1..=u64::MAX);
            }
        }
        // A rewrite keeps the landings (new commits, the same trailers): their code is still there.
        let (still, _) = self.local.landed_commits(tip, &named, LOST_LIMIT)?;
        let missing: Vec<&str> = named.keys().map(String::as_str).filter(|id| !still.contains_key(*id)).collect();
        let mut gone = Vec::new();
        if !missing.is_empty() {
            // Done tasks are finished ones: the live read knows them by path, and reads the few it is asked for.
            let snap = self.read(false)?;
            for id in missing {
                if snap.board.closed.get(id).is_some_and(|c| c.status == crate::model::Status::Done) {
                    let title = match self.store().read_closed(&snap, id)? {
                        Some(Ok(t)) => t.title,
                        _ => "(its file cannot be read)".to_string(),
                    };
                    gone.push((id.to_string(), title));
                }
            }
        }
        Ok(TargetLoss { branch: branch.to_string(), seen, now: tip, lost, gone })
    }
}

fn git_error(what: &str, message: String) -> TxnError {
    TxnError::Store(StoreError::Git { context: format!("git {what} of the target"), message })
}
