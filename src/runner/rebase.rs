//! Rebase in-process, for the common case: a task's commits touch paths that the target branch did not change
//! meanwhile. Each commit is replayed onto the new tip as a path-level three-way merge (a path changed on one side
//! only takes that side); a path changed on both sides, a merge commit, or a file/folder clash returns `None` and
//! the caller falls back to `git rebase` (and, on a real conflict, to the agent). No work tree is touched: landing
//! after a lost race costs a few object writes instead of a `git rebase` process.

use std::collections::BTreeMap;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryMode;

use crate::store::{GitContext, Identity, Store, StoreError};
use crate::time::Timestamp;

/// A leaf of a tree: its mode and object.
type Leaf = (EntryMode, ObjectId);

/// Replay `base..head` (a first-parent chain without merges) onto `onto`. Every replayed commit gets the trailer
/// `Swarm-Task: <task>` if it lacks it. `Ok(None)`: not a case for this (see the module doc).
pub fn rebase_in_process(
    store: &Store,
    onto: ObjectId,
    base: ObjectId,
    head: ObjectId,
    task: &str,
    committer: &Identity,
    now: Timestamp,
) -> Result<Option<ObjectId>, StoreError> {
    let repo = &store.repo;
    // The commits to replay, oldest first.
    let Some(chain) = chain(store, base, head)? else { return Ok(None) };
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
        let message = with_trailer(&c.message_raw_sloppy().to_str_lossy(), task);
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
    let Some(chain) = chain(store, base, head)? else { return Ok(None) };
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
        let decoded = c.decode().git(|| format!("cannot decode commit {id}"))?;
        let commit = gix::objs::Commit {
            tree,
            parents: vec![tip].into(),
            author: decoded.author().git(|| format!("author of {id}"))?.to_owned().git(|| format!("author of {id}"))?,
            committer: decoded
                .committer()
                .git(|| format!("committer of {id}"))?
                .to_owned()
                .git(|| format!("committer of {id}"))?,
            encoding: None,
            message: c.message_raw_sloppy().to_owned(),
            extra_headers: vec![],
        };
        tip = repo.write_object(&commit).git(|| "cannot write a commit".into())?.detach();
        tip_tree = tree;
    }
    Ok(Some(tip))
}

/// The commits `base..head`, oldest first, when they are a first-parent chain without merges of at most 500;
/// `None` otherwise.
fn chain(store: &Store, base: ObjectId, head: ObjectId) -> Result<Option<Vec<ObjectId>>, StoreError> {
    let mut chain = Vec::new();
    let mut cur = head;
    while cur != base {
        let c = store.repo.find_commit(cur).git(|| format!("cannot read commit {cur}"))?;
        let parents: Vec<ObjectId> = c.parent_ids().map(|p| p.detach()).collect();
        match parents.as_slice() {
            [p] if chain.len() < 500 => {
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

/// `message` with the trailer `Swarm-Task: <task>` (added to a trailer block that ends the message, or as a new one).
pub(crate) fn with_trailer(message: &str, task: &str) -> String {
    let line = format!("Swarm-Task: {task}");
    let body = message.trim_end();
    if body.lines().any(|l| l.trim() == line) {
        return format!("{body}\n");
    }
    let last_para = body.rsplit("\n\n").next().unwrap_or_default();
    let is_trailers = body.contains("\n\n")
        && !last_para.is_empty()
        && last_para.lines().all(|l| l.split_once(": ").is_some_and(|(k, _)| !k.is_empty() && !k.contains(' ')));
    if is_trailers { format!("{body}\n{line}\n") } else { format!("{body}\n\n{line}\n") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_join_a_trailer_block_or_start_one_and_are_not_repeated() {
        assert_eq!(with_trailer("fix it\n", "t-1"), "fix it\n\nSwarm-Task: t-1\n");
        assert_eq!(with_trailer("fix it\n\nbody text", "t-1"), "fix it\n\nbody text\n\nSwarm-Task: t-1\n");
        assert_eq!(
            with_trailer("fix\n\nSigned-off-by: a <b>\n", "t-1"),
            "fix\n\nSigned-off-by: a <b>\nSwarm-Task: t-1\n"
        );
        assert_eq!(with_trailer("fix\n\nSwarm-Task: t-1\n", "t-1"), "fix\n\nSwarm-Task: t-1\n");
    }
}
