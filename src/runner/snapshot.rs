//! What an agent left in its work tree, taken by the runner as data (docs/security.md, *Containment*): the tree is
//! walked through [`agent::files::Dir`] (no link followed, no FIFO opened, every read bounded), files are hashed
//! into the clone's object database in-process, and the result is a git tree — what `git add --all` would have
//! staged over the agent's own last commit, without a `git` process ever looking at a path the agent could have
//! replaced, at its `.git` file, at a nested repository's config (whose filters `git add` ran for a dirty
//! "submodule") or at attributes.
//!
//! What counts, as `git add --all` counts it over the agent's commit (`tracked`): every file of `tracked` as it is
//! now (deleted when gone), and every untracked file that no ignore rule hides — the repository's `.gitignore`
//! files (read as data, each bounded), the clone's `info/exclude`, the user's excludes file and the agents' own
//! files ([`crate::hooks::agent`]); `keep` names hidden files a task wants all the same. Left out, and said: a
//! nested repository (a folder holding `.git`: git would record a gitlink to a commit nobody can fetch), a name
//! git refuses (`.git` in any case, `..`), a FIFO, socket or device, a file past [`MAX_FILE`]. A gitlink of
//! `tracked` (a real submodule) is kept as it is: nothing below it is read. Bytes are stored as they are: no clean
//! filter and no end-of-line conversion runs on what an agent wrote (docs/security.md says what that means for
//! `git-lfs`).
//!
//! A file the runner checked out and nobody changed since is not read again: [`Known`] holds what the runner saw
//! of each (inode, size, modification and change time), and a write changes the change time, which no process
//! can set back.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};
use gix::objs::tree::{EntryKind, EntryMode};

use crate::agent::files::{Dir, Kind, Stat};

/// The largest file taken into a task's work (a bigger one is left out and said).
pub(crate) const MAX_FILE: usize = 1 << 30;

/// What the runner put into a work tree: by path, the file's stat then and its blob; and what it carried into the
/// tree from the last one ([`super::warm`]), which is never taken.
#[derive(Debug, Default, Clone)]
pub(crate) struct Known {
    files: HashMap<BString, (Stat, ObjectId)>,
    pub(crate) carried: super::warm::Carried,
}

impl Known {
    /// Record every file of the index at `index` (the runner's own, of the checkout it just made into `tree`) as
    /// it is in `tree` now; with `owner`, each entry of the tree is given to that uid and gid first (a runner that
    /// is root, for an agent that runs as nobody).
    pub(crate) fn record(tree: &Dir, index: &Path, owner: Option<(u32, u32)>) -> Result<Known, String> {
        let opts = gix::index::decode::Options::default();
        let file = gix::index::File::at(index, gix::hash::Kind::Sha1, false, opts)
            .map_err(|e| format!("cannot read the index {}: {e}", index.display()))?;
        let mut ids: HashMap<BString, ObjectId> = HashMap::new();
        for e in file.entries() {
            ids.insert(e.path(&file).to_owned(), e.id);
        }
        let mut known = HashMap::with_capacity(ids.len());
        walk_record(tree, &mut Vec::new(), &ids, owner, &mut known)?;
        Ok(Known { files: known, carried: Default::default() })
    }

    fn blob(&self, path: &[u8], now: &Stat) -> Option<ObjectId> {
        self.files.get(path.as_bstr()).filter(|(then, _)| then == now).map(|(_, id)| *id)
    }
}

fn walk_record(
    d: &Dir,
    prefix: &mut Vec<u8>,
    ids: &HashMap<BString, ObjectId>,
    owner: Option<(u32, u32)>,
    out: &mut HashMap<BString, (Stat, ObjectId)>,
) -> Result<(), String> {
    if let Some((uid, gid)) = owner {
        d.chown_self(uid, gid).map_err(|e| e.to_string())?;
    }
    for e in d.entries().map_err(|e| e.to_string())? {
        let len = prefix.len();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(e.name.as_bytes());
        let stat = match owner {
            Some((uid, gid)) => d.chown(&e.name, uid, gid).map_err(|err| err.to_string())?,
            None => e.stat,
        };
        match e.kind {
            Kind::Dir => walk_record(&d.dir(Path::new(&e.name)).map_err(|e| e.to_string())?, prefix, ids, owner, out)?,
            Kind::File | Kind::Link => {
                if let Some(id) = ids.get(prefix.as_bstr()) {
                    out.insert(BString::from(prefix.clone()), (stat, *id));
                }
            }
            Kind::Other(_) => {}
        }
        prefix.truncate(len);
    }
    Ok(())
}

/// The ignore rules of a snapshot besides the tree's own `.gitignore` files: the clone's `info/exclude` and the
/// excludes of the agents' run (the user's excludes file with the agents' own files), as text.
#[derive(Debug, Default, Clone)]
pub(crate) struct Ignores {
    pub(crate) excludes: String,
    pub(crate) info_exclude: String,
}

/// A snapshot's outcome: the tree, and what was left out that a person should hear of.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) tree: ObjectId,
    pub(crate) left_out: Vec<String>,
}

/// Take the work tree `root` as a git tree over `tracked` (the tree of the agent's last commit).
pub(crate) fn take(
    repo: &gix::Repository,
    root: &Dir,
    tracked: ObjectId,
    ignores: &Ignores,
    keep: Option<&dyn Fn(&str) -> bool>,
    known: &Known,
) -> Result<Taken, String> {
    let mut search = gix::ignore::Search::default();
    let parse = gix::ignore::search::Ignore::default();
    let base = root.path();
    // Lowest precedence first: the excludes file, then `info/exclude`, then each folder's `.gitignore`.
    for (text, name) in [(&ignores.excludes, "excludes"), (&ignores.info_exclude, "info/exclude")] {
        search
            .add_patterns_buffer(text.as_bytes(), base.join(".git").join(name), None, parse)
            .map_err(|e| format!("cannot read the ignore rules: {e}"))?;
    }
    let mut walk = Walk { repo, search, keep, known, left_out: Vec::new(), base: base.to_path_buf() };
    let tree = walk.dir(root, &mut Vec::new(), Some(tracked), false)?.unwrap_or_else(|| repo.empty_tree().id);
    Ok(Taken { tree, left_out: walk.left_out })
}

struct Walk<'a> {
    repo: &'a gix::Repository,
    search: gix::ignore::Search,
    keep: Option<&'a dyn Fn(&str) -> bool>,
    known: &'a Known,
    left_out: Vec<String>,
    base: PathBuf,
}

/// What a folder of the work tree came to.
enum Folder {
    Tree(ObjectId),
    /// Nothing to record (empty, or all of it ignored).
    Empty,
    /// A nested repository: it has a `.git` of its own.
    Nested,
}

impl Walk<'_> {
    /// The tree of the folder `d` at `rel` (its path from the top, `/`-separated), over `tracked` (what the agent's
    /// commit has there). `hidden`: the folder is ignored, only files `keep` wants are taken.
    fn dir(
        &mut self,
        d: &Dir,
        rel: &mut Vec<u8>,
        tracked: Option<ObjectId>,
        hidden: bool,
    ) -> Result<Option<ObjectId>, String> {
        match self.folder(d, rel, tracked, hidden)? {
            Folder::Tree(id) => Ok(Some(id)),
            Folder::Empty | Folder::Nested => Ok(None),
        }
    }

    fn folder(
        &mut self,
        d: &Dir,
        rel: &mut Vec<u8>,
        tracked: Option<ObjectId>,
        hidden: bool,
    ) -> Result<Folder, String> {
        let top = rel.is_empty();
        let entries = d.entries().map_err(|e| e.to_string())?;
        if !top && entries.iter().any(|e| e.name.as_bytes().eq_ignore_ascii_case(b".git")) {
            return Ok(Folder::Nested);
        }
        let old = self.tracked_entries(tracked)?;
        // This folder's `.gitignore` rules, for what is below it (data: read bounded, never followed).
        let pushed = super::warm::push_gitignore(&mut self.search, d, &self.base, rel)?;
        let mut out: Vec<gix::objs::tree::Entry> = Vec::new();
        for e in entries {
            let name = e.name.as_bytes();
            let len = rel.len();
            if !top {
                rel.push(b'/');
            }
            rel.extend_from_slice(name);
            let res = self.entry(d, rel, &e, &old, hidden);
            let path = rel.to_str_lossy().into_owned();
            rel.truncate(len);
            if let Some((mode, oid)) = res.map_err(|err| format!("{path}: {err}"))? {
                out.push(gix::objs::tree::Entry { mode, filename: name.into(), oid });
            }
        }
        // A gitlink of the agent's commit stays as it is (a real submodule: nothing of it is in this tree's files).
        for (name, (mode, oid)) in &old {
            if mode.is_commit() && !out.iter().any(|e| e.filename == *name) {
                out.push(gix::objs::tree::Entry { mode: *mode, filename: name.clone(), oid: *oid });
            }
        }
        if pushed {
            self.search.patterns.pop();
        }
        if out.is_empty() {
            return Ok(Folder::Empty);
        }
        out.sort();
        let tree = gix::objs::Tree { entries: out };
        let id = self.repo.write_object(&tree).map_err(|e| format!("cannot write a tree: {e}"))?.detach();
        Ok(Folder::Tree(id))
    }

    /// The entries of the agent's commit in one folder, by name.
    fn tracked_entries(&self, tree: Option<ObjectId>) -> Result<BTreeMap<BString, (EntryMode, ObjectId)>, String> {
        let mut m = BTreeMap::new();
        if let Some(id) = tree {
            let t = self.repo.find_tree(id).map_err(|e| format!("cannot read tree {id}: {e}"))?;
            for e in t.iter() {
                let e = e.map_err(|e| format!("cannot decode tree {id}: {e}"))?;
                m.insert(e.filename().to_owned(), (e.mode(), e.object_id()));
            }
        }
        Ok(m)
    }

    /// One entry at `rel`: its mode and object, or `None` when it is not part of the work.
    fn entry(
        &mut self,
        d: &Dir,
        rel: &[u8],
        e: &crate::agent::files::Entry,
        old: &BTreeMap<BString, (EntryMode, ObjectId)>,
        hidden: bool,
    ) -> Result<Option<(EntryMode, ObjectId)>, String> {
        let name = e.name.as_bytes();
        let path = rel.to_str_lossy();
        if rel == b".git" {
            // The work tree's link to the agent's git directory (or whatever the agent left there): never the work.
            return Ok(None);
        }
        let was = old.get(name.as_bstr()).copied();
        if was.is_none() && self.known.carried.contains(&e.stat) {
            // Carried from an earlier run's tree (build output, dependencies): never part of this one's work,
            // whatever the agent un-ignored or moved since.
            return Ok(None);
        }
        if was.is_some_and(|(m, _)| m.is_commit()) {
            // A submodule: kept as the commit records it (added after the loop).
            return Ok(None);
        }
        if !valid_name(name) {
            self.left_out.push(format!("{path}: a name git refuses in a tree"));
            return Ok(None);
        }
        let is_dir = e.kind == Kind::Dir;
        // Excluded by a rule, or below an excluded folder (git never takes a file back from one): untracked, it is
        // ignored; tracked, it stays.
        let excluded = hidden || self.ignored(rel, is_dir);
        let ignored = was.is_none() && excluded;
        match e.kind {
            Kind::Dir => {
                let sub_tracked = was.filter(|(m, _)| m.is_tree()).map(|(_, id)| id);
                if ignored && sub_tracked.is_none() && !self.keep_below(&path) {
                    return Ok(None);
                }
                let sub = d.dir(Path::new(OsStr::from_bytes(name))).map_err(|e| e.to_string())?;
                let mut rel = rel.to_vec();
                match self.folder(&sub, &mut rel, sub_tracked, excluded)? {
                    Folder::Tree(id) => Ok(Some((EntryKind::Tree.into(), id))),
                    Folder::Empty => Ok(None),
                    Folder::Nested => {
                        self.left_out.push(format!(
                            "{path}/: a nested git repository (it has a .git of its own): not taken; commit its files, \
                             not the repository"
                        ));
                        Ok(None)
                    }
                }
            }
            Kind::File | Kind::Link if ignored && !self.keep.is_some_and(|k| k(&path)) => Ok(None),
            Kind::Link => {
                let target = d.link_target(&e.name).map_err(|e| e.to_string())?;
                let id = match self.known.blob(rel, &e.stat) {
                    Some(id) => id,
                    None => self.blob(&target)?,
                };
                Ok(Some((EntryKind::Link.into(), id)))
            }
            Kind::File => {
                let mode: EntryMode =
                    if e.stat.executable() { EntryKind::BlobExecutable.into() } else { EntryKind::Blob.into() };
                if let Some(id) = self.known.blob(rel, &e.stat) {
                    return Ok(Some((mode, id)));
                }
                if e.stat.size > MAX_FILE as u64 {
                    self.left_out.push(format!("{path}: larger than {} MiB: not taken", MAX_FILE >> 20));
                    return Ok(None);
                }
                let (bytes, more) = d.read(Path::new(OsStr::from_bytes(name)), MAX_FILE).map_err(|e| e.to_string())?;
                if more {
                    self.left_out.push(format!("{path}: larger than {} MiB: not taken", MAX_FILE >> 20));
                    return Ok(None);
                }
                Ok(Some((mode, self.blob(&bytes)?)))
            }
            Kind::Other(kind) => {
                if !ignored {
                    self.left_out.push(format!("{path}: a {kind}, which git cannot hold: not taken"));
                }
                Ok(None)
            }
        }
    }

    fn blob(&self, bytes: &[u8]) -> Result<ObjectId, String> {
        self.repo.write_blob(bytes).map(|id| id.detach()).map_err(|e| format!("cannot write a blob: {e}"))
    }

    /// Do the ignore rules hide the untracked `rel`?
    fn ignored(&self, rel: &[u8], is_dir: bool) -> bool {
        self.search
            .pattern_matching_relative_path(rel.as_bstr(), Some(is_dir), gix::glob::pattern::Case::Sensitive)
            .is_some_and(|m| !m.pattern.is_negative())
    }

    /// Could `keep` want something below the ignored folder `path`?
    fn keep_below(&self, path: &str) -> bool {
        self.keep.is_some() && crate::hooks::agent::is_agent_artifact(&format!("{path}/x"))
    }
}

/// A name git accepts for a tree entry (`fsck::name_refused`: not empty, `.` or `..`, no `/`, not `.git` in any case
/// nor its NTFS and HFS spellings): what its fsck would refuse in a landing is left out of the work.
pub(crate) fn valid_name(name: &[u8]) -> bool {
    crate::fsck::name_refused(name).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct World {
        _dir: tempfile::TempDir,
        repo: gix::Repository,
        tree: PathBuf,
    }

    fn world() -> World {
        let dir = tempfile::tempdir().expect("tmp");
        let repo = gix::init_bare(dir.path().join("repo.git")).expect("init");
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(&tree).expect("tree");
        World { _dir: dir, repo, tree }
    }

    fn files(repo: &gix::Repository, tree: ObjectId) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut rec = gix::traverse::tree::Recorder::default();
        repo.find_tree(tree).expect("tree").traverse().breadthfirst(&mut rec).expect("walk");
        for e in rec.records {
            if e.mode.is_tree() || e.mode.is_commit() {
                continue;
            }
            let data = repo.find_object(e.oid).expect("object").data.to_str_lossy().into_owned();
            out.push((e.filepath.to_string(), format!("{:o}:{data}", e.mode.value())));
        }
        out.sort();
        out
    }

    fn take_all(w: &World, tracked: ObjectId, ignores: &Ignores) -> Taken {
        let root = Dir::open(&w.tree).expect("open");
        take(&w.repo, &root, tracked, ignores, None, &Known::default()).expect("take")
    }

    #[test]
    fn what_git_add_all_would_stage_without_following_anything() {
        let w = world();
        let t = &w.tree;
        std::fs::create_dir_all(t.join("src")).expect("dir");
        std::fs::write(t.join("src/main.rs"), "fn main() {}\n").expect("w");
        std::fs::write(t.join("run.sh"), "#!/bin/sh\n").expect("w");
        std::fs::set_permissions(t.join("run.sh"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("x");
        std::fs::write(t.join(".gitignore"), "target/\n*.log\n!keep.log\n").expect("w");
        std::fs::create_dir_all(t.join("target/debug")).expect("dir");
        std::fs::write(t.join("target/debug/app"), "binary").expect("w");
        std::fs::write(t.join("a.log"), "noise").expect("w");
        std::fs::write(t.join("keep.log"), "kept").expect("w");
        std::os::unix::fs::symlink("/etc/shadow", t.join("link")).expect("link");
        // The agent's `.git` link, a nested repository, a FIFO, an empty folder and an agent's own folder.
        std::fs::write(t.join(".git"), "gitdir: /somewhere\n").expect("w");
        std::fs::create_dir_all(t.join("vendor/dep/.git")).expect("dir");
        std::fs::write(t.join("vendor/dep/.git/config"), "[filter \"x\"]\n\tclean = touch /tmp/pwned\n").expect("w");
        std::fs::write(t.join("vendor/dep/lib.rs"), "x").expect("w");
        nix::unistd::mkfifo(&t.join("pipe"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        std::fs::create_dir_all(t.join("empty")).expect("dir");
        std::fs::create_dir_all(t.join(".claude")).expect("dir");
        std::fs::write(t.join(".claude/session.json"), "{}").expect("w");
        let ignores = Ignores { excludes: "/.claude/\n".into(), info_exclude: String::new() };
        let taken = take_all(&w, w.repo.empty_tree().id, &ignores);
        assert_eq!(
            files(&w.repo, taken.tree),
            [
                (".gitignore".to_string(), "100644:target/\n*.log\n!keep.log\n".to_string()),
                ("keep.log".into(), "100644:kept".into()),
                ("link".into(), "120000:/etc/shadow".into()),
                ("run.sh".into(), "100755:#!/bin/sh\n".into()),
                ("src/main.rs".into(), "100644:fn main() {}\n".into()),
            ]
        );
        let said = taken.left_out.join("\n");
        assert!(said.contains("vendor/dep/: a nested git repository"), "{said}");
        assert!(said.contains("pipe: a FIFO"), "{said}");
        assert!(!said.contains(".claude") && !said.contains("target"), "ignored files are not said: {said}");
    }

    #[test]
    fn tracked_files_stay_even_when_ignored_and_go_when_deleted() {
        let w = world();
        let t = &w.tree;
        // The agent's commit tracks `build/out.txt` (ignored) and `gone.txt`; a gitlink `sub`.
        let blob = |s: &str| w.repo.write_blob(s.as_bytes()).expect("blob").detach();
        let sub_commit = ObjectId::from_hex(b"1111111111111111111111111111111111111111").expect("hex");
        let mut ed = w.repo.edit_tree(w.repo.empty_tree().id).expect("edit");
        ed.upsert("build/out.txt", EntryKind::Blob, blob("old")).expect("up");
        ed.upsert("gone.txt", EntryKind::Blob, blob("bye")).expect("up");
        ed.upsert("sub", EntryKind::Commit, sub_commit).expect("up");
        let tracked = ed.write().expect("write").detach();
        std::fs::write(t.join(".gitignore"), "build/\n").expect("w");
        std::fs::create_dir_all(t.join("build")).expect("dir");
        std::fs::write(t.join("build/out.txt"), "new").expect("w");
        std::fs::write(t.join("build/other.txt"), "ignored").expect("w");
        std::fs::create_dir_all(t.join("sub")).expect("dir");
        std::fs::write(t.join("sub/inside.txt"), "not read").expect("w");
        let taken = take_all(&w, tracked, &Ignores::default());
        // The deleted file is gone, the ignored new file out, the tracked one taken although ignored.
        assert_eq!(
            files(&w.repo, taken.tree),
            [(".gitignore".to_string(), "100644:build/\n".to_string()), ("build/out.txt".into(), "100644:new".into())]
        );
        let root = w.repo.find_tree(taken.tree).expect("tree");
        let sub = root.find_entry("sub").expect("gitlink kept");
        assert!(sub.mode().is_commit() && sub.object_id() == sub_commit);
    }

    #[test]
    fn a_file_the_runner_saw_is_not_read_again_unless_it_changed() {
        let w = world();
        std::fs::write(w.tree.join("a.txt"), "as checked out").expect("w");
        let root = Dir::open(&w.tree).expect("open");
        let stat = root.entries().expect("entries")[0].stat;
        // What the runner recorded for it: a blob id that is not its content's (so a read would show).
        let recorded = w.repo.write_blob(b"recorded").expect("blob").detach();
        let known = Known {
            files: [(BString::from("a.txt"), (stat, recorded))].into_iter().collect(),
            carried: Default::default(),
        };
        let taken = take(&w.repo, &root, w.repo.empty_tree().id, &Ignores::default(), None, &known).expect("take");
        assert_eq!(files(&w.repo, taken.tree), [("a.txt".to_string(), "100644:recorded".to_string())]);
        // A write changes the change time: read again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(w.tree.join("a.txt"), "as checked out").expect("w");
        let taken = take(&w.repo, &root, w.repo.empty_tree().id, &Ignores::default(), None, &known).expect("take");
        assert_eq!(files(&w.repo, taken.tree), [("a.txt".to_string(), "100644:as checked out".to_string())]);
    }

    #[test]
    fn names_git_refuses_are_left_out() {
        for bad in [".git", ".GIT", ".Git", "git~1", ".git.", "..", ".", ""] {
            assert!(!valid_name(bad.as_bytes()), "{bad}");
        }
        for ok in ["src", ".gitignore", "git", ".github", "a.git", "con.txt", "a:b"] {
            assert!(valid_name(ok.as_bytes()), "{ok}");
        }
        let w = world();
        std::fs::create_dir_all(w.tree.join("d/.GIT")).expect("dir");
        std::fs::write(w.tree.join("d/.GIT/config"), "x").expect("w");
        std::fs::write(w.tree.join("ok.txt"), "x").expect("w");
        let taken = take_all(&w, w.repo.empty_tree().id, &Ignores::default());
        assert_eq!(files(&w.repo, taken.tree), [("ok.txt".to_string(), "100644:x".to_string())]);
    }

    #[test]
    fn what_was_carried_is_never_taken_wherever_it_is_moved_and_however_it_is_unignored() {
        let w = world();
        let old = w.tree.with_file_name("old");
        std::fs::create_dir_all(old.join("target")).expect("dir");
        std::fs::write(old.join("target/planted.rs"), "from an earlier task").expect("w");
        std::fs::write(w.tree.join(".gitignore"), "target/\n").expect("w");
        let uid = nix::unistd::geteuid().as_raw();
        let carried =
            super::super::warm::carry(&Dir::open(&old).expect("old"), &Dir::open(&w.tree).expect("new"), "", uid)
                .expect("carry");
        let known = Known { files: HashMap::new(), carried };
        // The agent un-ignores it, moves it, and adds a file of its own beside it.
        std::fs::write(w.tree.join(".gitignore"), "").expect("w");
        std::fs::rename(w.tree.join("target"), w.tree.join("moved")).expect("mv");
        std::fs::write(w.tree.join("mine.rs"), "the agent's").expect("w");
        let root = Dir::open(&w.tree).expect("open");
        let taken = take(&w.repo, &root, w.repo.empty_tree().id, &Ignores::default(), None, &known).expect("take");
        let names: Vec<String> = files(&w.repo, taken.tree).into_iter().map(|(p, _)| p).collect();
        assert_eq!(names, [".gitignore", "mine.rs"], "the carried folder is never the work");
        // Without the record of what was carried it would have been taken: the test can fail.
        let taken =
            take(&w.repo, &root, w.repo.empty_tree().id, &Ignores::default(), None, &Known::default()).expect("take");
        assert!(files(&w.repo, taken.tree).iter().any(|(p, _)| p == "moved/planted.rs"));
    }
}
