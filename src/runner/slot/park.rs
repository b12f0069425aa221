//! A slot's warm trees ([`super::super::warm`]): the last tree set aside while the next is made, what is carried
//! from it, the times of files nobody changed, and the trees of runners that exited, parked for the next.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};

use super::Slot;
use crate::agent::files::{self, Dir};

/// The largest file whose content is compared with its blob to tell whether it changed.
const MAX_COMPARED: u64 = 8 << 20;

impl Slot {
    /// The files the last checkout wrote (path → blob), and the change time of its stamp (made when it was done).
    pub(super) fn last_checkout(&self) -> Option<(HashMap<BString, ObjectId>, (i64, i64))> {
        let stamp = Dir::open(&self.private).ok()?.hold(OsStr::new("stamp")).ok()?.1.ctime;
        let opts = gix::index::decode::Options::default();
        let file = gix::index::File::at(self.index(), gix::hash::Kind::Sha1, false, opts).ok()?;
        let ids =
            file.entries().iter().filter(|e| e.stage_raw() == 0).map(|e| (e.path(&file).to_owned(), e.id)).collect();
        Some((ids, stamp))
    }

    /// Give each file of the new tree `new` that is the same blob as the last checkout wrote at its path, and that
    /// is that blob still in the old tree `aside`, the old file's modification time: a build that compares times
    /// (cargo, make) then sees it unchanged. (A file changed and changed back has a newer time than any build that
    /// saw the change: the copy is as correct as the old tree was.) The runner's index is refreshed for the new
    /// times.
    pub(super) fn keep_times(
        &self,
        aside: &Path,
        new: &Dir,
        (before, stamp): &(HashMap<BString, ObjectId>, (i64, i64)),
    ) {
        let Ok(old) = Dir::open(aside) else { return };
        let opts = gix::index::decode::Options::default();
        let Ok(file) = gix::index::File::at(self.index(), gix::hash::Kind::Sha1, false, opts) else { return };
        let mut kept = 0usize;
        for e in file.entries() {
            let path = e.path(&file);
            if before.get(path) != Some(&e.id)
                || !matches!(e.mode, gix::index::entry::Mode::FILE | gix::index::entry::Mode::FILE_EXECUTABLE)
            {
                continue;
            }
            let p = path.to_path_lossy();
            let (Some(name), parent) = (p.file_name(), p.parent().unwrap_or(Path::new(""))) else { continue };
            let (Ok(od), Ok(nd)) = (old.dir(parent), new.dir(parent)) else { continue };
            let Ok((_, was)) = od.hold(name) else { continue };
            // A regular file, unchanged: its change time before the stamp (no write since the checkout), else — a
            // write in the same clock tick cannot be told by its times — its content still the blob.
            if was.mode & 0o170000 != 0o100000 || (was.ctime >= *stamp && !same_blob(&od, name, was.size, e.id)) {
                continue;
            }
            if nd.set_mtime(name, was.mtime).is_ok() {
                kept += 1;
            }
        }
        if kept > 0 {
            let work_tree = format!("--work-tree={}", self.tree.display());
            let _ = self.git().args([&work_tree, "update-index", "-q", "--refresh"]).output();
        }
    }

    pub(super) fn stamp(&self) -> PathBuf {
        self.private.join("stamp")
    }

    /// Move the last work tree aside (`None`: there is none to carry from): this slot's own, or the newest one
    /// parked by a runner that exited (with what that runner's slot knew of it: its index, the stamp of its last
    /// checkout and its last setup). Never a link: a tree that is not a folder is removed.
    pub(super) fn set_aside(&self) -> Option<PathBuf> {
        let _ = files::remove_all(&self.aside);
        let warm = self.aside.parent()?;
        std::fs::create_dir_all(warm).ok()?;
        if std::fs::symlink_metadata(&self.tree).is_ok_and(|m| m.is_dir()) {
            return std::fs::rename(&self.tree, &self.aside).ok().map(|()| self.aside.clone());
        }
        let mut parked: Vec<PathBuf> = std::fs::read_dir(&self.parked).ok()?.flatten().map(|e| e.path()).collect();
        // Named by when they were parked: the newest first; one another runner took first is no loss.
        parked.sort();
        let taking = warm.join(format!("{}.taking", self.tree.file_name()?.to_string_lossy()));
        let _ = files::remove_all(&taking);
        parked.into_iter().rev().find(|p| std::fs::rename(p, &taking).is_ok())?;
        let _ = std::fs::create_dir_all(&self.private);
        for f in SLOT_FILES {
            let _ = std::fs::rename(taking.join(f), self.private.join(f));
        }
        let moved = std::fs::rename(taking.join("tree"), &self.aside).is_ok();
        let _ = files::remove_all(&taking);
        moved.then(|| self.aside.clone())
    }

    /// Carry what `new` ignores from the tree at `aside` into it, then remove what is left there. A tree that
    /// cannot be carried from is only removed: the checkout is then cold, never failed.
    pub(super) fn carry(&self, aside: &Path, new: &Dir, owner: Option<(u32, u32)>) -> crate::runner::warm::Carried {
        let uid = owner.map_or_else(|| nix::unistd::geteuid().as_raw(), |(uid, _)| uid);
        let info_exclude = files::read_text(&self.common.join("info/exclude"), 1 << 20).unwrap_or_default();
        let carried = Dir::open(aside)
            .map_err(|e| e.to_string())
            .and_then(|old| crate::runner::warm::carry(&old, new, &info_exclude, uid))
            .unwrap_or_default();
        let _ = files::remove_all(aside);
        carried
    }

    /// Move the work tree to the parked ones, with what this slot knows of it ([`SLOT_FILES`]); `false` when it is
    /// not a folder or cannot be moved.
    pub(super) fn park(&self) -> bool {
        if !std::fs::symlink_metadata(&self.tree).is_ok_and(|m| m.is_dir()) {
            return false;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let agent = self.tree.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let name = format!("{:020}-{}-{agent}", now.as_nanos(), std::process::id());
        // Made aside and renamed into the parked ones whole: a runner never takes half of one.
        let making = self.aside.with_file_name(format!("{name}.parking"));
        if std::fs::create_dir_all(&making).is_err() || std::fs::rename(&self.tree, making.join("tree")).is_err() {
            let _ = files::remove_all(&making);
            return false;
        }
        for f in SLOT_FILES {
            let _ = std::fs::rename(self.private.join(f), making.join(f));
        }
        if std::fs::create_dir_all(&self.parked).is_err() || std::fs::rename(&making, self.parked.join(&name)).is_err()
        {
            let _ = files::remove_all(&making);
            return true;
        }
        let mut all: Vec<PathBuf> =
            std::fs::read_dir(&self.parked).into_iter().flatten().flatten().map(|e| e.path()).collect();
        all.sort();
        let extra = all.len().saturating_sub(MAX_PARKED);
        for old in all.into_iter().take(extra) {
            let _ = files::remove_all(&old);
        }
        true
    }
}

/// What a slot keeps of its last checkout (in the runner's own folder), parked with its tree.
const SLOT_FILES: [&str; 3] = ["index", "stamp", "setup-key"];

/// The most work trees parked for the runners to come (each as big as a build).
pub(crate) const MAX_PARKED: usize = 8;

/// Is the regular file `name` of `dir` (`size` bytes) the blob `id`? Read bounded, never followed.
fn same_blob(dir: &Dir, name: &OsStr, size: u64, id: ObjectId) -> bool {
    if size > MAX_COMPARED {
        return false;
    }
    let Ok((bytes, more)) = dir.read(Path::new(name), MAX_COMPARED as usize) else { return false };
    !more && gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, &bytes).is_ok_and(|h| h == id)
}
