//! The history of the state ref: what this clone saw of it last (so that a ref rewound, replaced or deleted behind
//! everyone's back is an error instead of a board on which finished work is open again), compaction (a new root
//! commit holding the current tree, the old history kept under `refs/swarm-archive/<name>/<n>`), and the repairs of
//! `git swarm doctor`.
//!
//! The record of what was seen is the mirror ref `refs/swarm-remotes/<remote>/<name>` for URL remotes (it also
//! keeps the objects, so a deleted or rewound state can be restored from any clone that saw it), and the file
//! `.git/swarm/seen/<remote>/<name>` for the in-process locations (the repository itself, a local path).

use gix::ObjectId;
use gix::bstr::ByteSlice;

use super::{Attempt, IN_DOUBT_DEPTH, Retry, Swarm, TxnError};
use crate::remote::Publish;
use crate::store::{GitContext, Identity, LogEntry, Store, StoreError};
use crate::time::Timestamp;

/// The trailer of a compaction's root commit naming the commit whose history it replaced.
pub(crate) const COMPACTED_FROM: &str = "Swarm-Compacted-From";
/// The trailer of a compaction's root commit naming the ref that keeps the old history.
pub(crate) const ARCHIVE: &str = "Swarm-Archive";

/// How the state ref on the remote relates to what this clone saw of it last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Relation {
    /// This clone saw nothing yet.
    Fresh,
    /// Where it was.
    Same,
    /// Moved on from what was seen (across compactions too).
    Ahead,
    /// Gone.
    Deleted,
    /// Moved back: it is an ancestor of what was seen, and the last `lost` ops are gone.
    Rewound { lost: usize },
    /// Neither holds the other, and it is no compaction of what was seen (or that compaction's archive is gone).
    Replaced,
}

impl Relation {
    /// Should ops refuse to run on it?
    pub(crate) fn is_broken(self) -> bool {
        matches!(self, Relation::Deleted | Relation::Rewound { .. } | Relation::Replaced)
    }

    fn describe(self) -> String {
        match self {
            Relation::Deleted => "was deleted".into(),
            Relation::Rewound { lost } => format!("went back by {lost} op(s) (somebody pushed an old state over it)"),
            Relation::Replaced => "was replaced by a history that does not hold what this clone saw".into(),
            Relation::Fresh | Relation::Same | Relation::Ahead => "is fine".into(),
        }
    }
}

/// The archive a compaction's root commit points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArchiveLink {
    pub refname: String,
    pub number: u64,
    pub tip: ObjectId,
}

impl ArchiveLink {
    /// Read from a commit message; `None` unless both trailers are there and well formed.
    pub(crate) fn parse(msg: &str) -> Option<ArchiveLink> {
        let trailer =
            |key: &str| msg.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(": ")).map(str::trim));
        let tip = ObjectId::from_hex(trailer(COMPACTED_FROM)?.as_bytes()).ok()?;
        let refname = trailer(ARCHIVE)?.to_string();
        let number = refname.rsplit('/').next()?.parse().ok()?;
        Some(ArchiveLink { refname, number, tip })
    }
}

/// Where a first-parent walk of the state history ended.
struct Walked {
    /// Commits looked at.
    steps: usize,
    found: bool,
    /// The root reached, with its archive link if it is a compaction's root (`None` when the limit stopped it).
    root: Option<(ObjectId, Option<ArchiveLink>)>,
}

/// Walk from `tip` along first parents until `wanted`, the root, or `limit` commits.
fn walk(store: &Store, tip: ObjectId, wanted: Option<ObjectId>, limit: usize) -> Result<Walked, StoreError> {
    let mut at = tip;
    let mut steps = 0;
    while steps < limit {
        steps += 1;
        if Some(at) == wanted {
            return Ok(Walked { steps, found: true, root: None });
        }
        let c = store.repo.find_commit(at).git(|| format!("cannot read state commit {at}"))?;
        match c.parent_ids().next() {
            Some(p) => at = p.detach(),
            None => {
                let link = ArchiveLink::parse(&c.message_raw_sloppy().to_str_lossy());
                return Ok(Walked { steps, found: false, root: Some((at, link)) });
            }
        }
    }
    Ok(Walked { steps, found: false, root: None })
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Compacted {
    /// The ref that keeps the old history.
    pub archive: String,
    /// The commit it points at: the state ref's tip before the compaction.
    pub archived: String,
    /// Ops (commits) in the archived history since the previous root.
    pub ops: usize,
    /// The new root commit of the state ref.
    pub root: String,
}

impl Swarm {
    /// The tip of the state ref this clone saw last.
    pub fn seen(&self) -> Result<Option<ObjectId>, TxnError> {
        self.remote.seen(&self.local, &self.mirror_ref(), &self.name)
    }

    /// Record `id` as seen (best effort: the record only makes the check possible).
    pub(crate) fn set_seen(&self, id: ObjectId) {
        self.remote.set_seen(&self.local, &self.mirror_ref(), &self.name, id)
    }

    /// Forget what was seen (the swarm is gone and that is accepted).
    fn forget_seen(&self) -> Result<(), TxnError> {
        self.remote.forget_seen(&self.local, &self.mirror_ref(), &self.name)
    }

    /// Where the state ref is now, without comparing it with what was seen (fetching it from a URL remote).
    pub fn tip_unchecked(&self) -> Result<Option<ObjectId>, TxnError> {
        Ok(self.remote.fetch(&self.local, &[(&self.ref_name(), &self.mirror_ref())])?.pop().flatten())
    }

    /// Is `wanted` in the history of `tip`, following compactions into their archives (fetched when needed)?
    pub(crate) fn descends(&self, tip: ObjectId, wanted: ObjectId, limit: usize) -> Result<bool, TxnError> {
        let mut at = tip;
        let mut left = limit;
        loop {
            let w = walk(self.store(), at, Some(wanted), left)?;
            if w.found {
                return Ok(true);
            }
            left = left.saturating_sub(w.steps);
            match w.root {
                Some((root, Some(link))) if left > 0 => {
                    // A root that says it is a compaction of `link.tip` is taken at its word only when it is one
                    // (security.md S8): anyone who can push the ref could write those trailers over an old board.
                    if !self.fetch_archive(&link)? || !self.compaction_holds(root, &link)? {
                        return Ok(false);
                    }
                    if link.tip == wanted {
                        return Ok(true);
                    }
                    at = link.tip;
                }
                _ => return Ok(false),
            }
        }
    }

    /// Is the root commit `root` what a compaction makes of `link.tip`: its archive ref is one of this swarm's
    /// (`refs/swarm-archive/<name>/<n>`), it exists on the remote and holds that tip, and the root's tree is the
    /// tip's tree (a compaction keeps the board as it is)?
    pub(crate) fn compaction_holds(&self, root: ObjectId, link: &ArchiveLink) -> Result<bool, TxnError> {
        if !self.is_own_archive(&link.refname) {
            return Ok(false);
        }
        if self.remote_ref(&link.refname)? != Some(link.tip) {
            return Ok(false);
        }
        let tree = |id: ObjectId| {
            [self.store(), &self.local]
                .into_iter()
                .find_map(|s| s.repo.find_commit(id).ok().and_then(|c| c.tree_id().ok()).map(|t| t.detach()))
        };
        Ok(matches!((tree(root), tree(link.tip)), (Some(a), Some(b)) if a == b))
    }

    /// Is `refname` one of this swarm's archive refs (`refs/swarm-archive/<name>/<n>`)? A root commit's trailers
    /// are anyone's to write: no other ref is fetched or followed because one names it.
    fn is_own_archive(&self, refname: &str) -> bool {
        let prefix = format!("refs/swarm-archive/{}/", self.name);
        refname.strip_prefix(&prefix).is_some_and(|n| !n.contains('/'))
    }

    /// Make the history of an archive readable in [`Swarm::store`]; false when it cannot be had (or the link names
    /// a ref that is no archive of this swarm).
    fn fetch_archive(&self, link: &ArchiveLink) -> Result<bool, TxnError> {
        if self.store().repo.has_object(link.tip) {
            return Ok(true);
        }
        if !self.is_own_archive(&link.refname) {
            return Ok(false);
        }
        let mirror = format!("refs/swarm-archives/{}/{}/{}", self.remote.key(), self.name, link.number);
        self.remote.fetch(&self.local, &[(&link.refname, &mirror)])?;
        Ok(self.store().repo.has_object(link.tip))
    }

    /// How `now` (the remote's tip) relates to `seen` (what this clone saw last).
    pub fn relation(&self, seen: Option<ObjectId>, now: Option<ObjectId>) -> Result<Relation, TxnError> {
        Ok(match (seen, now) {
            (None, _) => Relation::Fresh,
            (Some(_), None) => Relation::Deleted,
            (Some(s), Some(n)) if s == n => Relation::Same,
            (Some(s), Some(n)) => {
                if self.descends(n, s, usize::MAX)? {
                    Relation::Ahead
                } else if self.store().repo.has_object(s) && self.store().repo.has_object(n) {
                    let back = walk(self.store(), s, Some(n), usize::MAX)?;
                    if back.found { Relation::Rewound { lost: back.steps - 1 } } else { Relation::Replaced }
                } else {
                    Relation::Replaced
                }
            }
        })
    }

    /// Refuse a state ref that went back or away since this clone saw it; otherwise remember where it is.
    pub fn check_seen(&self, seen: Option<ObjectId>, now: Option<ObjectId>) -> Result<(), TxnError> {
        let rel = self.relation(seen, now)?;
        match (seen, now) {
            (Some(seen), _) if rel.is_broken() => {
                // A fetch moved the mirror: put it back, so that the next command sees the same break.
                self.set_seen(seen);
                Err(TxnError::Lineage {
                    refname: self.ref_name(),
                    remote: self.remote_label.clone(),
                    what: rel.describe(),
                    seen: seen.to_string(),
                    now: now.map(|n| n.to_string()),
                })
            }
            (_, Some(now)) => {
                self.set_seen(now);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Replace the history of the state ref by a new root commit holding the same tree, by compare-and-swap, and
    /// keep the old history under `refs/swarm-archive/<name>/<n>` (created in the same atomic update). Ops racing
    /// with it lose their race and replay on the new root, as on any other op. `None`: the history since the last
    /// root holds no more than `min_ops` ops (or none at all).
    pub fn compact(
        &self,
        retry: &Retry,
        who: &Identity,
        clock: &dyn Fn() -> Timestamp,
        agent: &str,
        min_ops: usize,
    ) -> Result<Option<Compacted>, TxnError> {
        let state_ref = self.ref_name();
        let res = self.optimistic::<Option<Compacted>, std::convert::Infallible>(retry, |guard| {
            let tip = self.tip()?.ok_or_else(|| self.not_initialized())?;
            if let Some(done) = guard.settle(&|t, c| self.descends(t, c, IN_DOUBT_DEPTH), tip, &state_ref, vec![])? {
                return Ok(Attempt::Published(done));
            }
            let w = walk(self.store(), tip, None, usize::MAX)?;
            let Some((_, link)) = w.root else {
                return Err(StoreError::Git { context: "compact".into(), message: "no root found".into() }.into());
            };
            if w.steps <= min_ops.max(1) {
                return Ok(Attempt::Published(guard.committed(None, None, vec![])));
            }
            // The next free archive number: one more than the last compaction's, past any that exist already.
            let mut number = link.map_or(1, |l| l.number.saturating_add(1));
            while self.remote_ref(&format!("refs/swarm-archive/{}/{number}", self.name))?.is_some() {
                number = number.checked_add(1).ok_or_else(|| StoreError::Git {
                    context: "compact".into(),
                    message: "no free archive number".into(),
                })?;
            }
            let archive = format!("refs/swarm-archive/{}/{number}", self.name);
            let summary = format!("compact: {} op(s) archived at {archive}", w.steps);
            let message = format!(
                "{summary}\n\nSwarm-Op: compact\nSwarm-Agent: {agent}\n{COMPACTED_FROM}: {tip}\n{ARCHIVE}: {archive}\n"
            );
            let root = write_root(self.store(), tip, &message, who, clock())?;
            let value =
                Compacted { archive: archive.clone(), archived: tip.to_string(), ops: w.steps, root: root.to_string() };
            let updates = [(state_ref.as_str(), Some(tip), root), (archive.as_str(), None, tip)];
            match self.publish_refs(&updates, None, &summary) {
                Ok(Publish::Done) => {
                    self.set_seen(root);
                    Ok(Attempt::Published(guard.committed(Some(value), Some(root), vec![])))
                }
                Ok(Publish::LostRace(reason)) => Ok(Attempt::Lost { base: tip, reason }),
                Err(e) => {
                    if matches!(&e, TxnError::Remote(r) if super::in_doubt(r)) {
                        guard.in_doubt.push((root, Some(value)));
                    }
                    Err(e)
                }
            }
        })?;
        match res {
            Ok(c) => Ok(c.value),
            Err(never) => match never {},
        }
    }

    /// Where a ref is on the remote (fetched into a private mirror over a transport).
    pub(crate) fn remote_ref(&self, refname: &str) -> Result<Option<ObjectId>, TxnError> {
        let mirror = format!("refs/swarm-archives/{}/{}", self.remote.key(), refname.trim_start_matches("refs/"));
        Ok(self.remote.fetch(&self.local, &[(refname, &mirror)])?.pop().flatten())
    }

    /// The refs of the remote under `prefix` (`refs/swarm-work/<name>/`), name and commit, sorted by name.
    pub fn remote_refs(&self, prefix: &str) -> Result<Vec<(String, ObjectId)>, TxnError> {
        let mut out = self.remote.list(&self.local, prefix)?;
        out.sort();
        Ok(out)
    }

    /// The newest state this clone knows in the lineage of `seen`: `seen`, or a descendant of it that another ref
    /// holds — this clone's mirror of the state ref on another remote, or a `lost-…` archive on the remote (what a
    /// clone kept with `doctor --accept-remote`). What a restore should put back: never an older board than a
    /// reachable ref holds.
    pub fn newest_known(&self, seen: ObjectId) -> Result<ObjectId, TxnError> {
        let mut candidates: Vec<ObjectId> = Vec::new();
        if let Ok(platform) = self.local.repo.references()
            && let Ok(iter) = platform.prefixed("refs/swarm-remotes/")
        {
            let suffix = format!("/{}", self.name);
            for r in iter.flatten() {
                if r.name().as_bstr().to_string().ends_with(&suffix) {
                    candidates.push(r.id().detach());
                }
            }
        }
        let archive = format!("refs/swarm-archive/{}/lost-", self.name);
        if let Ok(lost) = self.remote_refs(&archive) {
            candidates.extend(lost.into_iter().map(|(_, id)| id));
        }
        let mut best = seen;
        for c in candidates {
            let have = self.store().repo.has_object(c) || self.local.repo.has_object(c);
            if c != best && have && self.descends(c, best, usize::MAX).unwrap_or(false) {
                best = c;
            }
        }
        Ok(best)
    }

    /// Put the state ref back at `to`, by compare-and-swap from `from` (`None`: it must not exist): the repair of a
    /// rewound or deleted state ref. Refused unless `to`'s objects are at hand.
    pub fn restore(&self, from: Option<ObjectId>, to: ObjectId) -> Result<Publish, TxnError> {
        let why = format!("git swarm doctor: restore {} to {to}", self.ref_name());
        let have = self.store().repo.has_object(to);
        if !have {
            return Err(StoreError::Git {
                context: format!("cannot restore {}", self.ref_name()),
                message: format!("the objects of {to} are gone (pruned)"),
            }
            .into());
        }
        let r = self.publish_refs(&[(self.ref_name().as_str(), from, to)], None, &why)?;
        if r == Publish::Done {
            self.set_seen(to);
        }
        Ok(r)
    }

    /// Take the remote's state ref as it is: keep what this clone saw under `refs/swarm-archive/<name>/lost-<id>`
    /// (when its objects are at hand) and remember the remote's tip as seen.
    pub fn accept_remote(&self, seen: ObjectId, now: Option<ObjectId>) -> Result<Option<String>, TxnError> {
        let kept = format!("refs/swarm-archive/{}/lost-{}", self.name, &seen.to_string()[..12]);
        let have = self.store().repo.has_object(seen);
        let kept = if have && self.remote_ref(&kept)?.is_none() {
            let why = "git swarm doctor: keep the history this clone saw";
            (self.publish_refs(&[(kept.as_str(), None, seen)], None, why)? == Publish::Done).then_some(kept)
        } else {
            None
        };
        match now {
            Some(now) => self.set_seen(now),
            None => self.forget_seen()?,
        }
        Ok(kept)
    }

    /// The audit log from `tip`, newest first, at most `limit` ops; with `archived`, on through the histories that
    /// compactions archived.
    pub fn history(&self, tip: ObjectId, limit: usize, archived: bool) -> Result<Vec<LogEntry>, TxnError> {
        let mut out = self.store().log(tip, limit)?;
        while archived && out.len() < limit {
            let Some(last) = out.last() else { break };
            let Ok(id) = ObjectId::from_hex(last.commit.as_bytes()) else { break };
            let msg = self.store().repo.find_commit(id).git(|| format!("cannot read state commit {id}"))?;
            let Some(link) = ArchiveLink::parse(&msg.message_raw_sloppy().to_str_lossy()) else { break };
            if !self.fetch_archive(&link)? {
                break;
            }
            let more = self.store().log(link.tip, limit - out.len())?;
            out.extend(more);
        }
        Ok(out)
    }
}

/// A root commit with the tree of `of`.
fn write_root(
    store: &Store,
    of: ObjectId,
    message: &str,
    who: &Identity,
    now: Timestamp,
) -> Result<ObjectId, StoreError> {
    let tree = store.repo.find_commit(of).and_then(|c| c.tree_id()).git(|| format!("cannot read {of}"))?.detach();
    store.write_commit(tree, &[], message, who, now)
}
