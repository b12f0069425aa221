//! A read of `tasks/` that starts from the last one. A runner reads the board after every change, and a change
//! touches a few of its folders: the folders whose tree id is the last read's are not walked again, and the board's
//! maps are the last read's, patched (an [`imbl::OrdMap`] shares its nodes with its clones, so handing the maps out
//! and patching them copies no task). Only a clean board is read this way — no problem, no twin: anything else, and
//! anything the patch meets that is not a plain change of task files, is read in full, so every rule of the full
//! walk holds. What is kept is keyed by the tree's id, never by a name (invariant 7).

use std::collections::BTreeMap;

use gix::ObjectId;
use gix::objs::tree::EntryKind;

use super::{Entry, Item, Store, Walk, in_tree_order, item};
use crate::model::Status;
use crate::state::{Closed, Stored};

/// The task maps of the last clean read of one scope (every task, or the live ones), and the `tasks/` tree read.
#[derive(Debug, Clone)]
pub(in crate::store) struct LastRead {
    pub tree: ObjectId,
    pub tasks: imbl::OrdMap<String, Stored>,
    pub closed: imbl::OrdMap<String, Closed>,
    /// Task files parsed by the patches since the read kept on disk ([`super::kept`]).
    pub unkept: usize,
}

/// A task file that went away or came, found by comparing two `tasks/` trees.
pub(super) enum Delta {
    Gone(String),
    Came { id: String, path: String, entry: Entry },
}

impl Store {
    /// The task maps of `tasks/` tree `tree`, from `last` patched with what changed since; `None` when that is not
    /// a plain change of task files (read in full then).
    pub(super) fn patched(&self, last: &LastRead, tree: ObjectId, walk: &Walk<'_>) -> Option<LastRead> {
        let mut deltas = Vec::new();
        self.diff_folder(Some(last.tree), tree, super::TASKS_DIR, 0, walk, &mut deltas)?;
        let (mut tasks, mut closed) = (last.tasks.clone(), last.closed.clone());
        let mut came = Vec::new();
        let unkept = last.unkept;
        for d in deltas {
            match d {
                Delta::Gone(id) => {
                    // One file per id on a clean board: it is in one of the maps.
                    if tasks.remove(&id).is_none() {
                        closed.remove(&id)?;
                    }
                }
                Delta::Came { id, path, entry } => came.push((id, path, entry)),
            }
        }
        let unkept = unkept + came.len();
        for (id, path, entry) in came {
            // A second file for an id (a twin) is for the full read to report.
            if tasks.contains_key(&id) || closed.contains_key(&id) {
                return None;
            }
            match entry {
                Entry::Live(task) | Entry::Finished(task) => {
                    tasks.insert(id, Stored { path, task: *task });
                }
                Entry::Closed(status) => {
                    closed.insert(id, Closed { status, path });
                }
                Entry::Unread(_) => return None,
            }
        }
        Some(LastRead { tree, tasks, closed, unkept })
    }

    /// Compare folder `dir` (`depth` below `tasks/`) at `old` (none: it is new) and `new`, into `out`.
    pub(super) fn diff_folder(
        &self,
        old: Option<ObjectId>,
        new: ObjectId,
        dir: &str,
        depth: usize,
        walk: &Walk<'_>,
        out: &mut Vec<Delta>,
    ) -> Option<()> {
        if old == Some(new) {
            return Some(());
        }
        let mut before = match old {
            Some(old) => by_name(self.entries(old)?)?,
            None => BTreeMap::new(),
        };
        for (name, (kind, id)) in by_name(self.entries(new)?)? {
            let was = before.remove(&name);
            if was == Some((kind, id)) {
                continue;
            }
            let path = format!("{dir}/{name}");
            match (item(&name, kind, depth, walk.closed), was) {
                (Item::Folder(closed), Some((EntryKind::Tree, was))) => {
                    self.diff_folder(Some(was), id, &path, depth + 1, &Walk { closed, ..*walk }, out)?;
                }
                (now_item, was) => {
                    if let Some((was_kind, was_id)) = was {
                        self.gone(&name, was_kind, was_id, depth, walk.closed, out)?;
                    }
                    match now_item {
                        Item::Skip => {}
                        Item::Bad(_) => return None,
                        Item::Folder(closed) => {
                            self.diff_folder(None, id, &path, depth + 1, &Walk { closed, ..*walk }, out)?;
                        }
                        Item::File(stem) => {
                            let entry = self.file_entry(walk, stem, id).ok()?;
                            out.push(Delta::Came { id: stem.to_string(), path, entry });
                        }
                    }
                }
            }
        }
        for (name, (kind, id)) in before {
            self.gone(&name, kind, id, depth, walk.closed, out)?;
        }
        Some(())
    }

    /// Entry `name` of a folder of the last read went away: the task files it was or held.
    fn gone(
        &self,
        name: &str,
        kind: EntryKind,
        id: ObjectId,
        depth: usize,
        closed: Option<Status>,
        out: &mut Vec<Delta>,
    ) -> Option<()> {
        match item(name, kind, depth, closed) {
            Item::Skip => Some(()),
            Item::Bad(_) => None,
            Item::File(stem) => {
                out.push(Delta::Gone(stem.to_string()));
                Some(())
            }
            Item::Folder(closed) => {
                for (n, k, i) in self.entries(id)? {
                    self.gone(&n, k, i, depth + 1, closed, out)?;
                }
                Some(())
            }
        }
    }
}

/// A folder's entries by name; `None` when they are out of git's order or a name is there twice (a file and a
/// folder of one name included): a patch compares entries by name, a walk reads every one.
fn by_name(entries: Vec<(String, EntryKind, ObjectId)>) -> Option<BTreeMap<String, (EntryKind, ObjectId)>> {
    if !in_tree_order(&entries) {
        return None;
    }
    let n = entries.len();
    let map: BTreeMap<_, _> = entries.into_iter().map(|(name, kind, id)| (name, (kind, id))).collect();
    (map.len() == n).then_some(map)
}
