//! Warm work trees (docs/check.md, *Warm work trees*): what the repository ignores — build output, dependencies,
//! caches (`target/`, `node_modules/`, `.venv/`, `__pycache__/`) — is carried from a slot's last work tree into the
//! one [`super::slot::Slot::checkout`] makes next, so that a check or an agent's build starts where the last one
//! ended instead of cold.
//!
//! The new work tree is still made afresh (a new folder, the commit written by the runner's git): carrying only
//! *moves* entries of the old tree into it afterwards (`renameat2`, a link moved as a link, never followed), and
//! only those that
//!
//! * the new commit's own ignore rules hide (its `.gitignore` files as the runner just wrote them, and the clone's
//!   `info/exclude`: never rules an agent wrote), at a path the new commit does not have;
//! * are not a git directory (`.git` in any case, at any depth) nor an agent CLI's own folder at the top
//!   ([`crate::hooks::agent::ARTIFACT_DIRS`], `.aider*`): settings an agent planted there are never handed to the
//!   next run;
//! * belong to the uid the next run is for (a runner that now drops its agents to another uid starts cold).
//!
//! Everything else the old tree held (untracked files no rule hides, changed tracked files, the agent's `.git`)
//! is removed with it. What was carried is **held** ([`Carried`]): an `O_PATH` descriptor on each carried entry
//! keeps its inode from being given to another file while the checkout lives, so that the snapshot of the run
//! ([`super::snapshot`]) can leave out by inode everything carried, wherever the agent moved it and whatever
//! ignore rules it wrote since: no leftover of one task enters another's commit.
//!
//! The runner's git never runs in a carried entry (it writes the new commit before anything is carried), and the
//! runner reads nothing of one: it moves folders as wholes, and looks at names and `lstat`s only.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use gix::bstr::ByteSlice;

use crate::agent::files::{Dir, Kind, Stat};

/// The most entries carried into one checkout (each held by a descriptor); past it the rest is left behind.
pub(crate) const MAX_CARRIED: usize = 4096;

/// What was carried into a work tree: each entry held open, and known by its inode.
#[derive(Debug, Default, Clone)]
pub(crate) struct Carried {
    ids: HashSet<(u64, u64)>,
    /// Keeps the inodes of `ids` from being reused while the checkout lives.
    _held: Arc<Vec<OwnedFd>>,
}

impl Carried {
    /// Was the entry of this stat carried (or is it one that was, moved since)?
    pub(crate) fn contains(&self, stat: &Stat) -> bool {
        self.ids.contains(&(stat.dev, stat.ino))
    }

    /// How many entries were carried.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Move what `old` (the last work tree, renamed aside) holds that the new work tree `new` ignores into `new`:
/// entries owned by `uid` only. `info_exclude`: the clone's `info/exclude`, as text.
pub(crate) fn carry(old: &Dir, new: &Dir, info_exclude: &str, uid: u32) -> Result<Carried, String> {
    let mut search = gix::ignore::Search::default();
    let base = new.path().to_path_buf();
    search
        .add_patterns_buffer(
            info_exclude.as_bytes(),
            base.join(".git/info/exclude"),
            None,
            gix::ignore::search::Ignore::default(),
        )
        .map_err(|e| format!("cannot read info/exclude: {e}"))?;
    let mut walk = Walk { search, base, uid, ids: HashSet::new(), held: Vec::new() };
    walk.folder(old, new, &mut Vec::new())?;
    Ok(Carried { ids: walk.ids, _held: Arc::new(walk.held) })
}

struct Walk {
    search: gix::ignore::Search,
    base: std::path::PathBuf,
    uid: u32,
    ids: HashSet<(u64, u64)>,
    held: Vec<OwnedFd>,
}

impl Walk {
    fn folder(&mut self, old: &Dir, new: &Dir, rel: &mut Vec<u8>) -> Result<(), String> {
        // The new commit's rules for this folder, as the runner's git just wrote them.
        let pushed = push_gitignore(&mut self.search, new, &self.base, rel)?;
        let res = self.entries(old, new, rel);
        if pushed {
            self.search.patterns.pop();
        }
        res
    }

    fn entries(&mut self, old: &Dir, new: &Dir, rel: &mut Vec<u8>) -> Result<(), String> {
        let top = rel.is_empty();
        for e in old.entries().map_err(|e| e.to_string())? {
            if self.held.len() >= MAX_CARRIED {
                return Ok(());
            }
            let name = e.name.as_bytes();
            if name.eq_ignore_ascii_case(b".git") || (top && agent_own(name)) {
                continue;
            }
            let len = rel.len();
            if !top {
                rel.push(b'/');
            }
            rel.extend_from_slice(name);
            let res = self.entry(old, new, rel, &e);
            rel.truncate(len);
            res?;
        }
        Ok(())
    }

    fn entry(&mut self, old: &Dir, new: &Dir, rel: &mut Vec<u8>, e: &crate::agent::files::Entry) -> Result<(), String> {
        let name = OsStr::from_bytes(e.name.as_bytes());
        match new.kind(name) {
            // A folder the new commit has too: what it ignores inside is looked for.
            Some(Kind::Dir) if e.kind == Kind::Dir => {
                let (Ok(o), Ok(n)) = (old.dir(Path::new(name)), new.dir(Path::new(name))) else { return Ok(()) };
                self.folder(&o, &n, rel)
            }
            // The new commit's own file (or whatever it has there) wins.
            Some(_) => Ok(()),
            None => {
                let ignored = self
                    .search
                    .pattern_matching_relative_path(
                        rel.as_bstr(),
                        Some(e.kind == Kind::Dir),
                        gix::glob::pattern::Case::Sensitive,
                    )
                    .is_some_and(|m| !m.pattern.is_negative());
                if !ignored || e.stat.uid != self.uid {
                    return Ok(());
                }
                old.move_to(name, new).map_err(|err| format!("cannot carry {}: {err}", rel.as_bstr()))?;
                let (fd, stat) = new.hold(name).map_err(|err| format!("cannot carry {}: {err}", rel.as_bstr()))?;
                self.ids.insert((stat.dev, stat.ino));
                self.held.push(fd);
                Ok(())
            }
        }
    }
}

/// The largest `.gitignore` read (a bigger one is read this far).
const MAX_IGNORE_FILE: usize = 1 << 20;

/// Add the `.gitignore` of the folder `d` (at `rel` below the top `base`) to `search`, read as data (bounded,
/// never followed): whether there was one (the caller pops it when it leaves the folder).
pub(crate) fn push_gitignore(
    search: &mut gix::ignore::Search,
    d: &Dir,
    base: &Path,
    rel: &[u8],
) -> Result<bool, String> {
    let Ok((bytes, _)) = d.read(Path::new(".gitignore"), MAX_IGNORE_FILE) else { return Ok(false) };
    let source = base.join(rel.to_path_lossy()).join(".gitignore");
    search
        .add_patterns_buffer(&bytes, source, Some(base), gix::ignore::search::Ignore::default())
        .map_err(|e| format!("cannot read {}/.gitignore: {e}", rel.as_bstr()))?;
    Ok(true)
}

/// A top-level name an agent CLI keeps for itself ([`crate::hooks::agent::is_agent_artifact`]).
fn agent_own(name: &[u8]) -> bool {
    let name = name.to_str_lossy();
    crate::hooks::agent::is_agent_artifact(&format!("{name}/x"))
}

/// Remove the check's report `rel` (a path inside the work tree `root`: a file, or a folder of them) before a run
/// of the check, no component followed: what an earlier run left there is never read as this run's result.
pub(crate) fn remove_report(root: &Path, rel: &str) -> Result<(), String> {
    let rel: std::path::PathBuf =
        Path::new(rel).components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect();
    let (Some(name), parent) = (rel.file_name(), rel.parent().unwrap_or(Path::new(""))) else { return Ok(()) };
    let dir = match Dir::open(root).and_then(|d| d.dir(parent)) {
        Ok(d) => d,
        // No folder there (or a link in place of one): no report in it either.
        Err(_) => return Ok(()),
    };
    dir.remove(name).map_err(|e| format!("cannot remove the check's old report {}: {e}", rel.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    /// An old tree with build output, caches, an agent's own folder, a git file, untracked work and a link; a new
    /// tree (as a checkout writes it) whose `.gitignore` hides some of it.
    fn trees() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tmp");
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        for (rel, text) in [
            ("target/debug/app", "built"),
            ("build.log", "log"),
            ("src/__pycache__/m.pyc", "pyc"),
            ("src/lib.rs", "changed by the agent"),
            ("notes.txt", "untracked work"),
            (".claude/settings.local.json", "planted"),
            (".git", "gitdir: /elsewhere"),
            ("docs/site/index.html", "ignored in a folder the new tree lacks"),
            ("README.md", "old readme"),
        ] {
            write(&old, rel, text);
        }
        std::os::unix::fs::symlink("/etc", old.join("out")).expect("link");
        for (rel, text) in [
            (".gitignore", "target/\n*.log\n__pycache__/\n.claude/\nout\nsite/\nREADME.md\n"),
            ("src/lib.rs", "fn main() {}"),
            ("README.md", "new readme"),
        ] {
            write(&new, rel, text);
        }
        (dir, old, new)
    }

    #[test]
    fn only_what_the_new_tree_ignores_is_carried_and_never_an_agents_own_or_git_file() {
        let (_dir, old, new) = trees();
        let uid = nix::unistd::geteuid().as_raw();
        let carried = carry(&Dir::open(&old).expect("old"), &Dir::open(&new).expect("new"), "", uid).expect("carry");
        let read = |rel: &str| std::fs::read_to_string(new.join(rel)).ok();
        assert_eq!(read("target/debug/app").as_deref(), Some("built"));
        assert_eq!(read("build.log").as_deref(), Some("log"));
        assert_eq!(read("src/__pycache__/m.pyc").as_deref(), Some("pyc"), "found inside a folder both trees have");
        assert!(std::fs::symlink_metadata(new.join("out")).expect("link").file_type().is_symlink(), "moved as a link");
        // The new commit's files win; what nothing ignores, the agent's own and git's are left behind.
        assert_eq!(read("src/lib.rs").as_deref(), Some("fn main() {}"));
        assert_eq!(read("README.md").as_deref(), Some("new readme"), "ignored, but the new commit has it");
        for gone in ["notes.txt", ".claude", ".git", "docs"] {
            assert!(std::fs::symlink_metadata(new.join(gone)).is_err(), "{gone} was carried");
        }
        assert_eq!(carried.len(), 4, "target, build.log, src/__pycache__, out");
        for rel in ["target", "build.log", "src/__pycache__", "out"] {
            let st = Dir::open(&new).expect("new").dir(Path::new(rel).parent().expect("p")).expect("dir");
            let name = Path::new(rel).file_name().expect("name");
            let (_, stat) = st.hold(name).expect("hold");
            assert!(carried.contains(&stat), "{rel} is known as carried");
        }
        let (_, readme) = Dir::open(&new).expect("new").hold(OsStr::new("README.md")).expect("hold");
        assert!(!carried.contains(&readme));
    }

    #[test]
    fn entries_of_another_uid_are_not_carried_and_the_rules_of_the_old_tree_count_for_nothing() {
        let (_dir, old, new) = trees();
        // The agent un-ignored everything in its tree: the new tree's rules are the only ones read.
        write(&old, ".gitignore", "");
        let carried =
            carry(&Dir::open(&old).expect("old"), &Dir::open(&new).expect("new"), "", u32::MAX).expect("carry");
        assert!(carried.is_empty(), "nothing belongs to that uid");
        assert!(!new.join("target").exists());
        // info/exclude counts as the clone's own.
        let uid = nix::unistd::geteuid().as_raw();
        write(&old, "local.env", "x");
        let carried =
            carry(&Dir::open(&old).expect("old"), &Dir::open(&new).expect("new"), "local.env\n", uid).expect("carry");
        assert!(new.join("local.env").exists() && !carried.is_empty());
    }

    #[test]
    fn a_report_is_removed_without_following_a_link() {
        let dir = tempfile::tempdir().expect("tmp");
        let (tree, outside) = (dir.path().join("tree"), dir.path().join("outside"));
        write(&outside, "junit.xml", "the person's");
        write(&tree, "reports/old/a.xml", "stale");
        write(&tree, "junit.xml", "stale");
        std::os::unix::fs::symlink(&outside, tree.join("linked")).expect("link");
        remove_report(&tree, "./junit.xml").expect("file");
        remove_report(&tree, "reports").expect("folder");
        remove_report(&tree, "linked/junit.xml").expect("through a link: nothing");
        remove_report(&tree, "missing/x.xml").expect("nothing there");
        assert!(!tree.join("junit.xml").exists() && !tree.join("reports").exists());
        assert_eq!(std::fs::read_to_string(outside.join("junit.xml")).expect("kept"), "the person's");
    }
}
