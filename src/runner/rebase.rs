//! The runner's rebase of a task's work onto the target's newest tip, in the runner's own state: no work tree, no
//! index, no rebase state anywhere an agent could write (docs/security.md, *Containment*).
//!
//! * In-process, for the common case ([`rebase_in_process`]): a task's commits touch paths that the target branch
//!   did not change meanwhile. Each commit is replayed onto the new tip as a path-level three-way merge (a path
//!   changed on one side only takes that side); a path changed on both sides, a merge commit, or a file/folder
//!   clash returns `None`. Landing after a lost race costs a few object writes.
//! * Else with `git merge-tree --write-tree` in the clone's git directory ([`replay`]), one commit at a time, with
//!   the attributes of the target's tip: a real three-way merge with git's own rename detection and merge drivers,
//!   whose result is a tree. A conflict stops the replay ([`Stop`]): the runner checks the tree with conflict
//!   markers out for the agent, takes the files it resolved as data, and goes on ([`resume`]).

use std::collections::BTreeMap;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryMode;

use crate::hooks::trailer::{Mark, stamp};
use crate::time::Timestamp;
use crate::{GitContext, Identity, Store, StoreError};

/// A leaf of a tree: its mode and object.
type Leaf = (EntryMode, ObjectId);

/// Replay `base..head` (a first-parent chain without merges) onto `onto`, each replayed commit stamped as the
/// landing of claim `epoch` of `task` (`hooks::trailer::stamp`: every `Swarm-*` line of its own goes). `Ok(None)`:
/// not a case for this (see the module doc).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rebase_in_process(
    store: &Store,
    onto: ObjectId,
    base: ObjectId,
    head: ObjectId,
    task: &str,
    epoch: u64,
    committer: &Identity,
    now: Timestamp,
) -> Result<Option<ObjectId>, StoreError> {
    let repo = &store.repo;
    // The commits to replay, oldest first.
    let Some(chain) = chain(store, base, head, REPLAY_LIMIT)? else { return Ok(None) };
    let mut new_tip = onto;
    let mut tree = tree_of(store, onto)?;
    for id in chain {
        let c = repo.find_commit(id).git(|| format!("cannot read commit {id}"))?;
        let parent = c
            .parent_ids()
            .next()
            .map(|p| p.detach())
            .ok_or_else(|| StoreError::Git { context: format!("commit {id}"), message: "has no parent".into() })?;
        let (before, after) = (tree_of(store, parent)?, c.tree_id().git(|| format!("tree of {id}"))?.detach());
        let mut changes = BTreeMap::new();
        if !diff(store, Some(before), Some(after), "", &mut changes)? {
            // A name that is not UTF-8: not for this path (git keeps the bytes; so must we).
            return Ok(None);
        }
        let mut ours = BTreeMap::new();
        // What the other side has at the same paths (and their folders): it must still be what this commit's parent
        // had, else the merge is not trivial.
        for path in changes.keys() {
            ours.insert(path.clone(), lookup(store, tree, path)?);
        }
        let mut editor = repo.edit_tree(tree).git(|| "cannot edit a tree".into())?;
        for (path, (old, new)) in &changes {
            if ours.get(path).copied().flatten() != *old {
                return Ok(None);
            }
            // A file where the other side has a file in a parent folder's place (or the reverse) is a clash.
            if folder_clash(store, tree, path)? {
                return Ok(None);
            }
            // A file added to a folder that the other side removed (or renamed away): git stops there, so do we.
            if old.is_none()
                && let Some((folder, _)) = path.rsplit_once('/')
                && folder_exists(store, before, folder)?
                && !folder_exists(store, tree, folder)?
            {
                return Ok(None);
            }
            match new {
                Some((mode, oid)) => {
                    editor.upsert(path.as_str(), mode.kind(), *oid).git(|| format!("cannot place {path}"))?;
                }
                None => {
                    editor.remove(path.as_str()).git(|| format!("cannot remove {path}"))?;
                }
            }
        }
        tree = editor.write().git(|| "cannot write a tree".into())?.detach();
        let message = stamp(&c.message_raw_sloppy().to_str_lossy(), task, epoch);
        let author = c.author().git(|| format!("author of {id}"))?.to_owned().git(|| format!("author of {id}"))?;
        let committer = gix::actor::Signature {
            name: committer.name.as_str().into(),
            email: committer.email.as_str().into(),
            time: gix::date::Time { seconds: now.secs() as i64, offset: 0 },
        };
        let commit = gix::objs::Commit {
            tree,
            parents: vec![new_tip].into(),
            author,
            committer,
            encoding: None,
            message: message.into(),
            extra_headers: vec![],
        };
        new_tip = repo.write_object(&commit).git(|| "cannot write a commit".into())?.detach();
    }
    Ok(Some(new_tip))
}

/// Rewrite `base..head` (a first-parent chain without merges) without the files `drop` names that `base` does not
/// have: what an agent's own commits added of its tools' files (`.aider.chat.history.md`, `.gemini/settings.json`,
/// …). A commit left empty is dropped; authors, committers and messages are kept. `Ok(None)`: nothing to drop (or
/// merges in the chain, which are left as they are).
pub(crate) fn strip_new_paths(
    store: &Store,
    base: ObjectId,
    head: ObjectId,
    drop: &dyn Fn(&str) -> bool,
) -> Result<Option<ObjectId>, StoreError> {
    let repo = &store.repo;
    let Some(chain) = chain(store, base, head, REPLAY_LIMIT)? else { return Ok(None) };
    let base_tree = tree_of(store, base)?;
    // Per commit, the files it has that base does not and that are to go.
    let mut strips = Vec::with_capacity(chain.len());
    for id in &chain {
        let mut changes = BTreeMap::new();
        if !diff(store, Some(base_tree), Some(tree_of(store, *id)?), "", &mut changes)? {
            return Ok(None);
        }
        let gone: Vec<String> = changes
            .into_iter()
            .filter(|(p, (old, new))| old.is_none() && new.is_some() && drop(p))
            .map(|(p, _)| p)
            .collect();
        strips.push(gone);
    }
    if strips.iter().all(Vec::is_empty) {
        return Ok(None);
    }
    let mut tip = base;
    let mut tip_tree = base_tree;
    for (id, gone) in chain.iter().zip(strips) {
        let c = repo.find_commit(*id).git(|| format!("cannot read commit {id}"))?;
        let mut tree = c.tree_id().git(|| format!("tree of {id}"))?.detach();
        if !gone.is_empty() {
            let mut editor = repo.edit_tree(tree).git(|| "cannot edit a tree".into())?;
            for p in &gone {
                editor.remove(p.as_str()).git(|| format!("cannot remove {p}"))?;
            }
            tree = editor.write().git(|| "cannot write a tree".into())?.detach();
        }
        if tree == tip_tree {
            continue;
        }
        tip = rewrite(store, &c, tree, tip, c.message_raw_sloppy().to_owned())?;
        tip_tree = tree;
    }
    Ok(Some(tip))
}

/// Commit `c` again with `tree`, on `parent`, saying `message`: its author and committer kept.
fn rewrite(
    store: &Store,
    c: &gix::Commit<'_>,
    tree: ObjectId,
    parent: ObjectId,
    message: gix::bstr::BString,
) -> Result<ObjectId, StoreError> {
    let id = c.id;
    let decoded = c.decode().git(|| format!("cannot decode commit {id}"))?;
    let commit = gix::objs::Commit {
        tree,
        parents: vec![parent].into(),
        author: decoded.author().git(|| format!("author of {id}"))?.to_owned().git(|| format!("author of {id}"))?,
        committer: decoded
            .committer()
            .git(|| format!("committer of {id}"))?
            .to_owned()
            .git(|| format!("committer of {id}"))?,
        encoding: None,
        message,
        extra_headers: vec![],
    };
    Ok(store.repo.write_object(&commit).git(|| "cannot write a commit".into())?.detach())
}

/// How a [`replay`] went.
#[derive(Debug)]
pub(crate) enum Step {
    /// Every commit replayed: the new tip.
    Done(ObjectId),
    /// A commit conflicts.
    Stopped(Stop),
}

/// A replay stopped on a commit's conflicts: what to show the agent, and what is left to replay once they are
/// resolved.
#[derive(Debug, Clone)]
pub(crate) struct Stop {
    /// The replayed tip so far: the conflicted commit goes on top of it.
    pub(crate) onto: ObjectId,
    /// The commit being replayed.
    pub(crate) commit: ObjectId,
    /// The commits after it, oldest first.
    pub(crate) rest: Vec<ObjectId>,
    /// The merge's tree, with conflict markers in the conflicted files.
    pub(crate) tree: ObjectId,
    pub(crate) conflicts: Vec<super::slot::Conflicted>,
}

/// Who replays, for which claim: every replayed commit is stamped as the landing of claim `epoch` of `task`, and
/// committed by `committer` at `now`; attributes come from the target's tip `attrs`.
pub(crate) struct Replay<'a> {
    pub(crate) store: &'a Store,
    pub(crate) task: &'a str,
    pub(crate) epoch: u64,
    pub(crate) committer: &'a Identity,
    pub(crate) now: Timestamp,
    pub(crate) attrs: ObjectId,
}

impl Replay<'_> {
    /// Replay `commits` (oldest first, no merges) onto `onto` with `git merge-tree`; a commit that becomes empty
    /// (its change is on the target already) is dropped, as `git rebase` drops it.
    pub(crate) fn replay(&self, commits: &[ObjectId], onto: ObjectId) -> Result<Step, String> {
        let mut tip = onto;
        if !crate::gitcmd::has_merge_base() && commits.len() > 1 {
            // An older git merges with the merge base it finds itself: the work's own base, right for the work as a
            // whole only. Its commits land as one, which says what they were.
            let (Some(first), Some(last)) = (commits.first(), commits.last()) else { return Ok(Step::Done(tip)) };
            let squashed = self.squash(*first, *last, commits)?;
            return self.replay(&[squashed], onto);
        }
        for (i, &c) in commits.iter().enumerate() {
            let commit = self.store.repo.find_commit(c).map_err(|e| format!("cannot read commit {c}: {e}"))?;
            let parent =
                commit.parent_ids().next().map(|p| p.detach()).ok_or_else(|| format!("commit {c} has no parent"))?;
            let (tree, conflicts) = self.merge_tree(parent, tip, c)?;
            if !conflicts.is_empty() {
                return Ok(Step::Stopped(Stop {
                    onto: tip,
                    commit: c,
                    rest: commits[i + 1..].to_vec(),
                    tree,
                    conflicts,
                }));
            }
            tip = self.commit_onto(c, tree, tip)?;
        }
        Ok(Step::Done(tip))
    }

    /// Go on after a stop: the conflicted commit with the agent's `resolved` tree, then the rest.
    pub(crate) fn resume(&self, stop: &Stop, resolved: ObjectId) -> Result<Step, String> {
        let tip = self.commit_onto(stop.commit, resolved, stop.onto)?;
        self.replay(&stop.rest, tip)
    }

    /// `commit` again with `tree` on `parent` (stamped, its author kept); `parent` itself when that changes nothing.
    fn commit_onto(&self, commit: ObjectId, tree: ObjectId, parent: ObjectId) -> Result<ObjectId, String> {
        let repo = &self.store.repo;
        let parent_tree = tree_of(self.store, parent).map_err(|e| e.to_string())?;
        if tree == parent_tree {
            return Ok(parent);
        }
        let c = repo.find_commit(commit).map_err(|e| format!("cannot read commit {commit}: {e}"))?;
        let message = stamp(&c.message_raw_sloppy().to_str_lossy(), self.task, self.epoch);
        let author = c
            .author()
            .map_err(|e| format!("author of {commit}: {e}"))?
            .to_owned()
            .map_err(|e| format!("author of {commit}: {e}"))?;
        let committer = gix::actor::Signature {
            name: self.committer.name.as_str().into(),
            email: self.committer.email.as_str().into(),
            time: gix::date::Time { seconds: self.now.secs() as i64, offset: 0 },
        };
        let new = gix::objs::Commit {
            tree,
            parents: vec![parent].into(),
            author,
            committer,
            encoding: None,
            message: message.into(),
            extra_headers: vec![],
        };
        Ok(repo.write_object(&new).map_err(|e| format!("cannot write a commit: {e}"))?.detach())
    }

    /// The commits `first..=last` as one commit on `first`'s parent, holding `last`'s tree, by `first`'s author,
    /// its message the subjects of them all.
    fn squash(&self, first: ObjectId, last: ObjectId, all: &[ObjectId]) -> Result<ObjectId, String> {
        let repo = &self.store.repo;
        let read = |id: ObjectId| repo.find_commit(id).map_err(|e| format!("cannot read commit {id}: {e}"));
        let (f, l) = (read(first)?, read(last)?);
        let parent =
            f.parent_ids().next().map(|p| p.detach()).ok_or_else(|| format!("commit {first} has no parent"))?;
        let mut message = String::new();
        for id in all {
            let c = read(*id)?;
            let subject =
                c.message_raw_sloppy().lines().next().map(|l| l.to_str_lossy().into_owned()).unwrap_or_default();
            message.push_str(&format!("{subject}\n"));
        }
        let author = f.author().map_err(|e| e.to_string())?.to_owned().map_err(|e| e.to_string())?;
        let committer = l.committer().map_err(|e| e.to_string())?.to_owned().map_err(|e| e.to_string())?;
        let new = gix::objs::Commit {
            tree: l.tree_id().map_err(|e| e.to_string())?.detach(),
            parents: vec![parent].into(),
            author,
            committer,
            encoding: None,
            message: message.into(),
            extra_headers: vec![],
        };
        Ok(repo.write_object(&new).map_err(|e| format!("cannot write a commit: {e}"))?.detach())
    }

    /// `git merge-tree --write-tree` of `commit` onto `onto` with `base` as the merge base, in the clone's git
    /// directory: the tree, and the conflicted paths with their stages. A git older than 2.40 finds the merge base
    /// itself and reads attributes from `info/attributes` alone.
    fn merge_tree(
        &self,
        base: ObjectId,
        onto: ObjectId,
        commit: ObjectId,
    ) -> Result<(ObjectId, Vec<super::slot::Conflicted>), String> {
        let dir = self.store.repo.common_dir();
        let mut cmd = crate::gitcmd::local(dir);
        cmd.env("GIT_DIR", dir);
        let exact = crate::gitcmd::has_merge_base();
        if exact {
            cmd.arg(format!("--attr-source={}", self.attrs));
        }
        cmd.args(["merge-tree", "--write-tree", "--no-messages", "-z"]);
        if exact {
            cmd.arg(format!("--merge-base={base}"));
        }
        let out = cmd
            .args([onto.to_string(), commit.to_string()])
            .output()
            .map_err(|e| format!("cannot run git merge-tree: {e}"))?;
        // 0: merged; 1: conflicts (the tree holds their markers); anything else: an error.
        if !matches!(out.status.code(), Some(0 | 1)) {
            return Err(format!(
                "git merge-tree of {} onto {} failed: {}",
                short(commit),
                short(onto),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let mut parts = out.stdout.split(|b| *b == 0);
        let tree = parts
            .next()
            .and_then(|t| ObjectId::from_hex(t.trim_ascii()).ok())
            .ok_or_else(|| "git merge-tree gave no tree".to_string())?;
        let mut conflicts: Vec<super::slot::Conflicted> = Vec::new();
        for entry in parts.take_while(|p| !p.is_empty()) {
            // `<mode> <object> <stage>\t<path>`
            let Some(tab) = entry.iter().position(|b| *b == b'\t') else { continue };
            let (head, path) = (&entry[..tab], &entry[tab + 1..]);
            let fields: Vec<&[u8]> = head.split(|b| *b == b' ').collect();
            let [mode, id, stage] = fields.as_slice() else { continue };
            let mode = u32::from_str_radix(&String::from_utf8_lossy(mode), 8).map_err(|e| e.to_string())?;
            let id = ObjectId::from_hex(id).map_err(|e| e.to_string())?;
            let stage: u8 = String::from_utf8_lossy(stage).parse().map_err(|_| "a bad stage".to_string())?;
            match conflicts.last_mut().filter(|c| c.path == path) {
                Some(c) => c.stages.push((stage, mode, id)),
                None => conflicts.push(super::slot::Conflicted { path: path.into(), stages: vec![(stage, mode, id)] }),
            }
        }
        Ok((tree, conflicts))
    }
}

/// The commits of the work `base..head` to replay, oldest first: its chain, or — with merges in it — every commit
/// that is not a merge, in the order `git rebase` takes them (`git rev-list --reverse --no-merges --topo-order`).
pub(crate) fn commits(store: &Store, base: ObjectId, head: ObjectId) -> Result<Vec<ObjectId>, String> {
    if let Some(chain) = chain(store, base, head, LANDING_LIMIT).map_err(|e| e.to_string())? {
        return Ok(chain);
    }
    let dir = store.repo.common_dir();
    let out = crate::gitcmd::local(dir)
        .env("GIT_DIR", dir)
        .args(["rev-list", "--reverse", "--no-merges", "--topo-order"])
        .arg(format!("--max-count={LANDING_LIMIT}"))
        .args([head.to_string(), format!("^{base}")])
        .output()
        .map_err(|e| format!("cannot run git rev-list: {e}"))?;
    if !out.status.success() {
        return Err(format!("git rev-list of the work failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| ObjectId::from_hex(l.trim().as_bytes()).map_err(|e| e.to_string()))
        .collect()
}

/// The most commits replayed in-process (more go to `git merge-tree`).
const REPLAY_LIMIT: usize = 500;
/// The most commits of one landing (its stamp and its check).
const LANDING_LIMIT: usize = 10_000;

/// Rewrite `base..head` (a first-parent chain without merges) so that every commit is stamped as the landing of
/// claim `epoch` of `task` (`hooks::trailer::stamp`): after `git rebase` and conflict runs, whose commits keep
/// what the agent wrote. Trees, authors and committers are kept; a commit stamped already (and all before it) is
/// kept as it is. `Ok(None)`: not such a chain (a merge, a root, more than 10,000 commits).
pub(crate) fn stamp_chain(
    store: &Store,
    base: ObjectId,
    head: ObjectId,
    task: &str,
    epoch: u64,
) -> Result<Option<ObjectId>, StoreError> {
    let repo = &store.repo;
    let Some(chain) = chain(store, base, head, LANDING_LIMIT)? else { return Ok(None) };
    let mut tip = base;
    let mut rewritten = false;
    for id in chain {
        let c = repo.find_commit(id).git(|| format!("cannot read commit {id}"))?;
        let message = c.message_raw_sloppy().to_str_lossy().into_owned();
        let stamped = stamp(&message, task, epoch);
        if !rewritten && stamped == message {
            tip = id;
            continue;
        }
        rewritten = true;
        let tree = c.tree_id().git(|| format!("tree of {id}"))?.detach();
        tip = rewrite(store, &c, tree, tip, stamped.into())?;
    }
    Ok(Some(tip))
}

/// Why `base..head` is not what a landing of claim `epoch` of `task` lands, if it is not: every commit of it on a
/// first-parent chain from `base` without merges, each stamped by the runner (`hooks::trailer`), nothing else.
pub(crate) fn unstamped(
    store: &Store,
    base: ObjectId,
    head: ObjectId,
    task: &str,
    epoch: u64,
) -> Result<Option<String>, StoreError> {
    let Some(chain) = chain(store, base, head, LANDING_LIMIT)? else {
        return Ok(Some(format!(
            "the work is not a chain of commits on the target's tip {} (a merge, a second root, or more than \
             {LANDING_LIMIT} commits)",
            short(base)
        )));
    };
    for id in chain {
        let c = store.repo.find_commit(id).git(|| format!("cannot read commit {id}"))?;
        let mark = crate::hooks::trailer::read(&c.message_raw_sloppy().to_str_lossy());
        if mark != (Mark::Landing { task: task.to_string(), epoch }) {
            return Ok(Some(format!(
                "commit {} of the work does not carry the trailers the runner writes for {task} (Swarm-Task: {task}, \
                 Swarm-Epoch: {epoch}) and no other Swarm-* line",
                short(id)
            )));
        }
    }
    Ok(None)
}

/// History in `base..head` that is not the agent's own work on the target, if there is any: a commit without a
/// parent (a second root: an unrelated history the agent merged in), or one with a parent that is neither in
/// `base..head` nor on the target at `tip`. A chain from `base` (the common case) is known to be none of these
/// from the walk alone; a work with merges costs one `git rev-list`.
pub(crate) fn foreign_history(
    store: &Store,
    base: ObjectId,
    head: ObjectId,
    tip: ObjectId,
) -> Result<Option<String>, StoreError> {
    if chain(store, base, head, LANDING_LIMIT)?.is_some() {
        return Ok(None);
    }
    let dir = store.repo.common_dir();
    let max = format!("--max-count={}", LANDING_LIMIT + 1);
    let range = [head.to_string(), format!("^{base}")];
    let out = crate::gitcmd::local(dir)
        .args(["rev-list", "--parents", &max])
        .args(&range)
        .output()
        .map_err(|e| StoreError::Git { context: "git rev-list of the work".into(), message: e.to_string() })?;
    if !out.status.success() {
        let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(StoreError::Git { context: "git rev-list of the work".into(), message });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    if rows.len() > LANDING_LIMIT {
        return Ok(Some(format!("the work has more than {LANDING_LIMIT} commits")));
    }
    let ours: std::collections::BTreeSet<&str> = rows.iter().filter_map(|r| r.first().copied()).collect();
    let base_hex = base.to_string();
    let mut outside = std::collections::BTreeSet::new();
    for row in &rows {
        let Some((commit, parents)) = row.split_first() else { continue };
        if parents.is_empty() {
            return Ok(Some(format!(
                "commit {} of the work has no parent: a second root, an unrelated history merged into the work",
                &commit[..12.min(commit.len())]
            )));
        }
        outside.extend(parents.iter().copied().filter(|p| !ours.contains(p) && *p != base_hex));
    }
    for p in outside {
        let on_target = crate::gitcmd::local(dir)
            .args(["merge-base", "--is-ancestor", p, &tip.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !on_target {
            return Ok(Some(format!(
                "a commit of the work has the parent {}, which is neither the work's nor on the target",
                &p[..12.min(p.len())]
            )));
        }
    }
    Ok(None)
}

fn short(id: ObjectId) -> String {
    id.to_string()[..12].to_string()
}

/// The commits `base..head`, oldest first, when they are a first-parent chain without merges of at most `limit`;
/// `None` otherwise.
fn chain(store: &Store, base: ObjectId, head: ObjectId, limit: usize) -> Result<Option<Vec<ObjectId>>, StoreError> {
    let mut chain = Vec::new();
    let mut cur = head;
    while cur != base {
        let c = store.repo.find_commit(cur).git(|| format!("cannot read commit {cur}"))?;
        let parents: Vec<ObjectId> = c.parent_ids().map(|p| p.detach()).collect();
        match parents.as_slice() {
            [p] if chain.len() < limit => {
                chain.push(cur);
                cur = *p;
            }
            _ => return Ok(None),
        }
    }
    chain.reverse();
    Ok(Some(chain))
}

fn tree_of(store: &Store, commit: ObjectId) -> Result<ObjectId, StoreError> {
    Ok(store
        .repo
        .find_commit(commit)
        .git(|| format!("cannot read commit {commit}"))?
        .tree_id()
        .git(|| format!("tree of {commit}"))?
        .detach())
}

/// The leaf at `path` in `tree`.
fn lookup(store: &Store, tree: ObjectId, path: &str) -> Result<Option<Leaf>, StoreError> {
    let t = store.repo.find_tree(tree).git(|| format!("cannot read tree {tree}"))?;
    let e = t.lookup_entry_by_path(path).git(|| format!("cannot look up {path}"))?;
    Ok(e.filter(|e| !e.mode().is_tree()).map(|e| (e.mode(), e.object_id())))
}

/// Is a parent folder of `path` a file in `tree`?
fn folder_clash(store: &Store, tree: ObjectId, path: &str) -> Result<bool, StoreError> {
    let t = store.repo.find_tree(tree).git(|| format!("cannot read tree {tree}"))?;
    let mut prefix = String::new();
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        if let Some(e) = t.lookup_entry_by_path(&prefix).git(|| format!("cannot look up {prefix}"))? {
            if !e.mode().is_tree() {
                return Ok(true);
            }
        } else {
            return Ok(false);
        }
    }
    // And `path` itself must not be a folder there.
    Ok(t.lookup_entry_by_path(path).git(|| format!("cannot look up {path}"))?.is_some_and(|e| e.mode().is_tree()))
}

/// Is there a folder at `path` in `tree`?
fn folder_exists(store: &Store, tree: ObjectId, path: &str) -> Result<bool, StoreError> {
    let t = store.repo.find_tree(tree).git(|| format!("cannot read tree {tree}"))?;
    Ok(t.lookup_entry_by_path(path).git(|| format!("cannot look up {path}"))?.is_some_and(|e| e.mode().is_tree()))
}

/// The leaves that differ between two trees: path → (before, after). `false` when a name on the way is not UTF-8.
fn diff(
    store: &Store,
    a: Option<ObjectId>,
    b: Option<ObjectId>,
    prefix: &str,
    out: &mut BTreeMap<String, (Option<Leaf>, Option<Leaf>)>,
) -> Result<bool, StoreError> {
    if a == b {
        return Ok(true);
    }
    let entries = |id: Option<ObjectId>| -> Result<BTreeMap<Vec<u8>, (EntryMode, ObjectId)>, StoreError> {
        let mut m = BTreeMap::new();
        if let Some(id) = id {
            let t = store.repo.find_tree(id).git(|| format!("cannot read tree {id}"))?;
            for e in t.iter() {
                let e = e.git(|| format!("cannot decode tree {id}"))?;
                m.insert(e.filename().to_vec(), (e.mode(), e.object_id()));
            }
        }
        Ok(m)
    };
    let (ea, eb) = (entries(a)?, entries(b)?);
    let names: std::collections::BTreeSet<&Vec<u8>> = ea.keys().chain(eb.keys()).collect();
    for name in names {
        let (x, y) = (ea.get(name).copied(), eb.get(name).copied());
        if x == y {
            continue;
        }
        let Ok(name_str) = name.to_str() else { return Ok(false) };
        let path = if prefix.is_empty() { name_str.to_string() } else { format!("{prefix}/{name_str}") };
        let sub = |e: Option<(EntryMode, ObjectId)>| e.filter(|(m, _)| m.is_tree()).map(|(_, id)| id);
        let leaf = |e: Option<(EntryMode, ObjectId)>| e.filter(|(m, _)| !m.is_tree());
        // Folders on either side are walked; leaves are compared.
        if (sub(x).is_some() || sub(y).is_some()) && !diff(store, sub(x), sub(y), &path, out)? {
            return Ok(false);
        }
        if leaf(x).is_some() || leaf(y).is_some() {
            out.insert(path, (leaf(x), leaf(y)));
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::rebase_in_process;

    /// git in `dir`, hermetic: no user or system config, a fixed identity and date; its stdout, trimmed.
    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = crate::gitcmd::base()
            .current_dir(dir)
            .args(["-c", "init.defaultBranch=main", "-c", "user.name=Tester", "-c", "user.email=t@example.com"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn the_in_process_rebase_gives_the_tree_git_rebase_gives_and_declines_overlaps() {
        use crate::{Identity, Store};
        let root = tempfile::tempdir().expect("tmp");
        let repo = root.path().join("r");
        git(root.path(), &["init", "-q", repo.to_str().expect("utf-8")]);
        let write = |p: &str, text: &str| {
            let f = repo.join(p);
            std::fs::create_dir_all(f.parent().expect("parent")).expect("mkdir");
            std::fs::write(f, text).expect("write");
        };
        write("x.txt", "x\n");
        write("w.txt", "w\n");
        write("d/keep.txt", "k\n");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "base"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);
        // The target moved: z added, w deleted, d/keep changed.
        write("z.txt", "z\n");
        std::fs::remove_file(repo.join("w.txt")).expect("rm");
        write("d/keep.txt", "k2\n");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "theirs"]);
        let onto = git(&repo, &["rev-parse", "HEAD"]);
        // The task's two commits, from base: x changed, d/new added; then a new folder.
        git(&repo, &["checkout", "-q", "--detach", &base]);
        write("x.txt", "x2\n");
        write("d/new.txt", "n\n");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "mine 1"]);
        write("e/f/g.txt", "g\n");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "mine 2\n\nSigned-off-by: T <t@t>"]);
        let head = git(&repo, &["rev-parse", "HEAD"]);
        let oid = |s: &str| gix::ObjectId::from_hex(s.as_bytes()).expect("oid");
        let store = Store::open(&repo.join(".git")).expect("open");
        let who = Identity { name: "R".into(), email: "r@r".into() };
        let now = crate::time::Timestamp::from_secs(1_800_000_000);
        let new = rebase_in_process(&store, oid(&onto), oid(&base), oid(&head), "t-1", 1, &who, now)
            .expect("ok")
            .expect("trivial");
        let new = new.to_string();
        // git's own rebase of the same commits.
        git(&repo, &["rebase", "-q", "--onto", &onto, &base]);
        let by_git = git(&repo, &["rev-parse", "HEAD^{tree}"]);
        assert_eq!(git(&repo, &["rev-parse", &format!("{new}^{{tree}}")]), by_git, "trees differ");
        assert_eq!(git(&repo, &["rev-list", "--count", &format!("{onto}..{new}")]), "2");
        let msgs = git(&repo, &["log", "--format=%B%x00", &format!("{onto}..{new}")]);
        assert_eq!(msgs.matches("Swarm-Task: t-1\nSwarm-Epoch: 1\n").count(), 2, "{msgs}");
        assert!(msgs.contains("Signed-off-by: T <t@t>\nSwarm-Task: t-1\nSwarm-Epoch: 1"), "{msgs}");
        assert_eq!(git(&repo, &["fsck", "--no-progress", "--no-dangling"]), "");
        // A path changed on both sides is not for the fast path.
        git(&repo, &["checkout", "-q", "--detach", &base]);
        write("d/keep.txt", "mine\n");
        git(&repo, &["commit", "-q", "-am", "overlap"]);
        let overlap = git(&repo, &["rev-parse", "HEAD"]);
        let store = Store::open(&repo.join(".git")).expect("open");
        assert_eq!(
            rebase_in_process(&store, oid(&onto), oid(&base), oid(&overlap), "t-2", 1, &who, now).expect("ok"),
            None
        );
        // A file added to a folder that the other side renamed away: git stops there, so does the fast path.
        git(&repo, &["checkout", "-q", "--detach", &onto]);
        git(&repo, &["mv", "d", "e"]);
        git(&repo, &["commit", "-q", "-m", "rename d"]);
        let renamed = git(&repo, &["rev-parse", "HEAD"]);
        git(&repo, &["checkout", "-q", "--detach", &onto]);
        write("d/added.txt", "a\n");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "add to d"]);
        let added = git(&repo, &["rev-parse", "HEAD"]);
        let store = Store::open(&repo.join(".git")).expect("open");
        assert_eq!(
            rebase_in_process(&store, oid(&renamed), oid(&onto), oid(&added), "t-3", 1, &who, now).expect("ok"),
            None
        );
        // A file name that is not UTF-8 is left to git (which keeps its bytes).
        git(&repo, &["checkout", "-q", "--detach", &onto]);
        let odd = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"caf\xe9.txt");
        std::fs::write(repo.join(odd), "x").expect("write");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "odd name"]);
        let odd_commit = git(&repo, &["rev-parse", "HEAD"]);
        let store = Store::open(&repo.join(".git")).expect("open");
        assert_eq!(
            rebase_in_process(&store, oid(&renamed), oid(&onto), oid(&odd_commit), "t-4", 1, &who, now).expect("ok"),
            None
        );
    }
}
