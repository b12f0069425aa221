//! The history of the state ref: what this clone saw of it last (so that a ref rewound, replaced or deleted behind
//! everyone's back is an error instead of a board on which finished work is open again), compaction (a new root
//! commit holding the current tree, the old history kept under `refs/swarm-archive/<name>/<n>`), and the repairs of
//! `git swarm doctor`.
//!
//! The record of what was seen is the mirror ref `refs/swarm-remotes/<remote>/<name>` for URL remotes (it also
//! keeps the objects, so a deleted or rewound state can be restored from any clone that saw it), and the file
//! `.git/swarm/seen/<remote>/<name>` for the in-process locations (the repository itself, a local path).

use std::path::PathBuf;

use gix::ObjectId;
use gix::bstr::ByteSlice;

use super::{Attempt, IN_DOUBT_DEPTH, Retry, Swarm, TxnError};
use crate::remote::{self, Location, Publish};
use crate::store::{GitContext, Identity, LogEntry, Store, StoreError};
use crate::time::Timestamp;

/// The trailer of a compaction's root commit naming the commit whose history it replaced.
pub const COMPACTED_FROM: &str = "Swarm-Compacted-From";
/// The trailer of a compaction's root commit naming the ref that keeps the old history.
pub const ARCHIVE: &str = "Swarm-Archive";

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
    pub fn is_broken(self) -> bool {
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
pub struct ArchiveLink {
    pub refname: String,
    pub number: u64,
    pub tip: ObjectId,
}

impl ArchiveLink {
    /// Read from a commit message; `None` unless both trailers are there and well formed.
    pub fn parse(msg: &str) -> Option<ArchiveLink> {
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
    /// The mirror ref of an URL remote, or the file of an in-process location, that records what was seen.
    fn seen_file(&self) -> Option<PathBuf> {
        match &self.location {
            Location::InProcess { endpoint, .. } => {
                let key = endpoint.as_ref().map(|e| e.mirror_key.as_str()).unwrap_or("self");
                Some(self.local.repo.common_dir().join("swarm").join("seen").join(key).join(&self.name))
            }
            Location::Url { .. } => None,
        }
    }

    /// The tip of the state ref this clone saw last.
    pub fn seen(&self) -> Result<Option<ObjectId>, TxnError> {
        match &self.location {
            Location::Url { endpoint } => Ok(self.local.read_ref(&self.mirror_ref(&endpoint.mirror_key))?),
            Location::InProcess { .. } => Ok(self
                .seen_file()
                .and_then(|f| std::fs::read_to_string(f).ok())
                .and_then(|s| ObjectId::from_hex(s.trim().as_bytes()).ok())),
        }
    }

    /// Record `id` as seen (best effort: the record only makes the check possible).
    pub(crate) fn set_seen(&self, id: ObjectId) {
        match &self.location {
            Location::Url { endpoint } => self.local.set_mirror(&self.mirror_ref(&endpoint.mirror_key), id),
            Location::InProcess { .. } => {
                let Some(file) = self.seen_file() else { return };
                if std::fs::read_to_string(&file).is_ok_and(|s| id.to_hex() == s.trim()) {
                    return;
                }
                let Some(dir) = file.parent() else { return };
                // Written aside and renamed: a reader never sees half a record.
                let _ = std::fs::create_dir_all(dir).and_then(|()| {
                    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
                    std::io::Write::write_all(&mut tmp, format!("{id}\n").as_bytes())?;
                    tmp.persist(&file).map(drop).map_err(|e| e.error)
                });
            }
        }
    }

    /// Forget what was seen (the swarm is gone and that is accepted).
    fn forget_seen(&self) -> Result<(), TxnError> {
        match &self.location {
            Location::Url { endpoint } => {
                let name = self.mirror_ref(&endpoint.mirror_key);
                if self.local.read_ref(&name)?.is_some() {
                    self.local.delete_ref(&name)?;
                }
            }
            Location::InProcess { .. } => {
                if let Some(f) = self.seen_file() {
                    let _ = std::fs::remove_file(f);
                }
            }
        }
        Ok(())
    }

    /// Where the state ref is now, without comparing it with what was seen (fetching it from a URL remote).
    pub(crate) fn tip_unchecked(&self) -> Result<Option<ObjectId>, TxnError> {
        let refname = self.ref_name();
        Ok(match &self.location {
            Location::InProcess { store, .. } => store.read_ref(&refname)?,
            Location::Url { endpoint: remote::Endpoint { url, push_to, mirror_key, fetch_with } } => {
                let tip =
                    remote::fetch(&self.local, url, push_to, &refname, &self.mirror_ref(mirror_key), *fetch_with)?;
                // Each fetch that brings something adds a pack.
                self.local.maybe_gc();
                tip
            }
        })
    }

    /// Is `wanted` in the history of `tip`, following compactions into their archives (fetched when needed)?
    pub fn descends(&self, tip: ObjectId, wanted: ObjectId, limit: usize) -> Result<bool, TxnError> {
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
    pub fn compaction_holds(&self, root: ObjectId, link: &ArchiveLink) -> Result<bool, TxnError> {
        let prefix = format!("refs/swarm-archive/{}/", self.name);
        if !link.refname.starts_with(&prefix) || link.refname[prefix.len()..].contains('/') {
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

    /// Make the history of an archive readable in [`Swarm::store`]; false when it cannot be had.
    fn fetch_archive(&self, link: &ArchiveLink) -> Result<bool, TxnError> {
        if self.store().repo.has_object(link.tip) {
            return Ok(true);
        }
        match &self.location {
            Location::InProcess { .. } => Ok(false),
            Location::Url { endpoint: ep } => {
                let mirror = format!("refs/swarm-archives/{}/{}/{}", ep.mirror_key, self.name, link.number);
                match remote::fetch(&self.local, &ep.url, &ep.push_to, &link.refname, &mirror, ep.fetch_with) {
                    Ok(_) => Ok(self.local.repo.has_object(link.tip)),
                    Err(e) => Err(e.into()),
                }
            }
        }
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
    pub(crate) fn check_seen(&self, seen: Option<ObjectId>, now: Option<ObjectId>) -> Result<(), TxnError> {
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
            match self.publish_refs(&updates, &summary) {
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

    /// One atomic compare-and-swap of several refs of the remote (`None` as the base: must not exist).
    fn publish_refs(&self, updates: &[(&str, Option<ObjectId>, ObjectId)], why: &str) -> Result<Publish, TxnError> {
        self.publishes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = match &self.location {
            Location::InProcess { store, .. } => {
                if store.cas_refs(updates, why)? {
                    Publish::Done
                } else {
                    Publish::LostRace("a ref moved".into())
                }
            }
            Location::Url { endpoint } => remote::push(&self.local, &endpoint.push_to, updates)?,
        };
        if r != Publish::Done {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(r)
    }

    /// Where a ref is on the remote (fetched into a private mirror for a URL remote).
    pub fn remote_ref(&self, refname: &str) -> Result<Option<ObjectId>, TxnError> {
        Ok(match &self.location {
            Location::InProcess { store, .. } => store.read_ref(refname)?,
            Location::Url { endpoint: ep } => {
                let mirror = format!("refs/swarm-archives/{}/{}", ep.mirror_key, refname.trim_start_matches("refs/"));
                remote::fetch(&self.local, &ep.url, &ep.push_to, refname, &mirror, ep.fetch_with)?
            }
        })
    }

    /// The refs of the remote under `prefix` (`refs/swarm-work/<name>/`), name and commit, sorted by name.
    pub fn remote_refs(&self, prefix: &str) -> Result<Vec<(String, ObjectId)>, TxnError> {
        let mut out = match &self.location {
            Location::InProcess { store, .. } => {
                let platform = store.repo.references().git(|| "cannot list refs".into())?;
                let iter = platform.prefixed(prefix).git(|| format!("cannot list {prefix}"))?;
                let mut v = Vec::new();
                for r in iter {
                    let Ok(mut r) = r else { continue };
                    if let Ok(id) = r.peel_to_id() {
                        v.push((r.name().as_bstr().to_string(), id.detach()));
                    }
                }
                v
            }
            Location::Url { endpoint } => remote::list(&self.local, &endpoint.push_to, prefix)?,
        };
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
            let have = match &self.location {
                Location::InProcess { store, .. } => store.repo.has_object(c) || self.local.repo.has_object(c),
                Location::Url { .. } => self.local.repo.has_object(c),
            };
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
        let have = match &self.location {
            Location::InProcess { store, .. } => store.repo.has_object(to),
            Location::Url { .. } => self.local.repo.has_object(to),
        };
        if !have {
            return Err(StoreError::Git {
                context: format!("cannot restore {}", self.ref_name()),
                message: format!("the objects of {to} are gone (pruned)"),
            }
            .into());
        }
        let r = self.publish_refs(&[(self.ref_name().as_str(), from, to)], &why)?;
        if r == Publish::Done {
            self.set_seen(to);
        }
        Ok(r)
    }

    /// Take the remote's state ref as it is: keep what this clone saw under `refs/swarm-archive/<name>/lost-<id>`
    /// (when its objects are at hand) and remember the remote's tip as seen.
    pub fn accept_remote(&self, seen: ObjectId, now: Option<ObjectId>) -> Result<Option<String>, TxnError> {
        let kept = format!("refs/swarm-archive/{}/lost-{}", self.name, &seen.to_string()[..12]);
        let have = match &self.location {
            Location::InProcess { store, .. } => store.repo.has_object(seen),
            Location::Url { .. } => self.local.repo.has_object(seen),
        };
        let kept = if have && self.remote_ref(&kept)?.is_none() {
            let why = "git swarm doctor: keep the history this clone saw";
            (self.publish_refs(&[(kept.as_str(), None, seen)], why)? == Publish::Done).then_some(kept)
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
