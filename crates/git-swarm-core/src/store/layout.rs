//! The layout the ops write, checked so that an op by id can look its task up instead of walking every name: under
//! `tasks/`, shard folders (`state::shard`) holding `<id>.toml` files of ids of that shard, and `done/`, `failed/`,
//! `cancelled/` holding such shard folders. Files that are not `.toml` (which every read skips) may sit anywhere;
//! anything else — a flat task file, another folder, a misplaced id, a link, a name that is no id — is not
//! canonical, and reads of that board walk every name. Verdicts are kept by tree id (content: invariant 7), so a
//! tree is checked once, and a new one against the last checked ancestor: only the folders that changed.

use super::*;

impl Store {
    /// Is the `tasks/` tree `tasks` of `commit` canonical?
    pub(super) fn canonical(&self, commit: ObjectId, tasks: ObjectId) -> bool {
        if self.canonical_known(tasks) {
            return true;
        }
        // The nearest ancestor whose tree was checked: only what changed since needs a look.
        let mut base = None;
        let mut at = commit;
        for _ in 0..CANONICAL_ANCESTORS {
            let Some(parent) = self.repo.find_commit(at).ok().and_then(|c| c.parent_ids().next().map(|p| p.detach()))
            else {
                break;
            };
            at = parent;
            if let Some(t) = self.tasks_tree(parent)
                && self.canonical_known(t)
            {
                base = Some(t);
                break;
            }
        }
        let ok = self.check_root(tasks, base).unwrap_or(false);
        if ok {
            self.remember_canonical(tasks);
        }
        ok
    }

    pub(super) fn tasks_tree(&self, commit: ObjectId) -> Option<ObjectId> {
        let tree = self.repo.find_commit(commit).ok()?.tree().ok()?;
        let entry = tree.find_entry(TASKS_DIR)?;
        (entry.mode().kind() == EntryKind::Tree).then(|| entry.object_id())
    }

    pub(super) fn canonical_marker(&self, tree: ObjectId) -> Option<std::path::PathBuf> {
        // The rule's version in the folder's name: a changed rule never trusts an old verdict.
        Some(self.cache_dir.as_ref()?.join(CANONICAL_DIR).join(tree.to_hex().to_string()))
    }

    pub(super) fn canonical_known(&self, tree: ObjectId) -> bool {
        self.canonical.borrow().contains(&tree) || self.canonical_marker(tree).is_some_and(|p| p.exists())
    }

    pub(super) fn remember_canonical(&self, tree: ObjectId) {
        self.canonical.borrow_mut().insert(tree);
        let Some(marker) = self.canonical_marker(tree) else { return };
        let Some(dir) = marker.parent() else { return };
        // Best effort, and bounded: a verdict lost is one more check.
        if std::fs::read_dir(dir).map(|d| d.count() >= CANONICAL_KEPT).unwrap_or(false) {
            let _ = std::fs::remove_dir_all(dir);
        }
        if std::fs::create_dir_all(dir).is_ok() {
            let _ = std::fs::write(&marker, b"");
        }
    }

    /// The entries of a tree: name, kind, id; `None` when a name is not UTF-8 or the tree cannot be read.
    pub(super) fn entries(&self, tree: ObjectId) -> Option<Vec<(String, EntryKind, ObjectId)>> {
        let tree = self.repo.find_tree(tree).ok()?;
        let mut out = Vec::new();
        for e in tree.iter() {
            let e = e.ok()?;
            out.push((e.filename().to_str().ok()?.to_string(), e.mode().kind(), e.object_id()));
        }
        Some(out)
    }

    /// `tasks/` against `base` (a canonical `tasks/` tree, or none: everything is checked).
    pub(super) fn check_root(&self, tree: ObjectId, base: Option<ObjectId>) -> Option<bool> {
        self.check_folder(tree, base, true)
    }

    /// A folder of shard folders (`tasks/` itself when `top`, which also holds the finished ones' folders), against
    /// the same folder of a canonical tree: what did not change is not looked at again.
    pub(super) fn check_folder(&self, tree: ObjectId, base: Option<ObjectId>, top: bool) -> Option<bool> {
        let before: BTreeMap<String, (EntryKind, ObjectId)> = match base {
            None => BTreeMap::new(),
            Some(t) => self.entries(t)?.into_iter().map(|(n, k, id)| (n, (k, id))).collect(),
        };
        let entries = self.entries(tree)?;
        if !in_tree_order(&entries) {
            return Some(false);
        }
        for (name, kind, id) in entries {
            if before.get(&name) == Some(&(kind, id)) {
                continue;
            }
            let ok = match kind {
                EntryKind::Tree if top && name.parse::<Status>().is_ok_and(|s| s.is_final()) => {
                    let old = before.get(&name).filter(|(k, _)| *k == EntryKind::Tree).map(|(_, id)| *id);
                    self.check_folder(id, old, false)?
                }
                EntryKind::Tree => is_shard_name(&name) && self.check_shard(id, &name)?,
                _ => !name.ends_with(".toml"),
            };
            if !ok {
                return Some(false);
            }
        }
        Some(true)
    }

    pub(super) fn check_shard(&self, tree: ObjectId, shard: &str) -> Option<bool> {
        let entries = self.entries(tree)?;
        if !in_tree_order(&entries) {
            return Some(false);
        }
        for (name, kind, _) in entries {
            let ok = match (kind, name.strip_suffix(".toml")) {
                (EntryKind::Tree, _) => false,
                (_, None) => true,
                (EntryKind::Blob | EntryKind::BlobExecutable, Some(stem)) => {
                    model::validate_id(stem).is_ok() && crate::state::shard(stem) == shard
                }
                (EntryKind::Link | EntryKind::Commit, Some(_)) => false,
            };
            if !ok {
                return Some(false);
            }
        }
        Some(true)
    }
}

/// Are the entries strictly in git's tree order (a name of a tree compares as if it ended in `/`)? A tree made by
/// hand may repeat a name or be out of order; a walk reads every entry, a lookup only the first it meets.
pub(super) fn in_tree_order(entries: &[(String, EntryKind, ObjectId)]) -> bool {
    let key = |(name, kind, _): &(String, EntryKind, ObjectId)| {
        let mut k = name.as_bytes().to_vec();
        if *kind == EntryKind::Tree {
            k.push(b'/');
        }
        k
    };
    entries.windows(2).all(|w| key(&w[0]) < key(&w[1]))
}

/// What `state::shard` can name: two lowercase hex digits, or `xx`.
pub(super) fn is_shard_name(name: &str) -> bool {
    name == "xx" || (name.len() == 2 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Where the verdicts are kept under the cache folder (the version of the rule they follow).
pub(super) const CANONICAL_DIR: &str = "canonical-v1";

/// How many commits back a new `tasks/` tree looks for one already checked.
pub(super) const CANONICAL_ANCESTORS: usize = 8;

/// How many verdicts a clone keeps on disk (the folder starts over when full).
pub(super) const CANONICAL_KEPT: usize = 4096;
