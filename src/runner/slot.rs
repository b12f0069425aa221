//! A runner's slot: the work tree its agents and checks run in, the run folder of each run, and the runner's own
//! git state for them, which no agent can reach (docs/security.md, *Containment*; invariant 39).
//!
//! * `<cache>/trees/<agent>` — the **work tree**. Made afresh for each use ([`Slot::checkout`]): whatever was there
//!   is removed (no link followed), a new folder made, and the runner's git writes the commit into it with an index
//!   of the runner's own — so git reads nothing an agent left (it is a new folder), and never the tree's `.git`.
//! * `<cache>/run/<agent>` — the **run folder**: made afresh for each run ([`Slot::fresh_run`]), holding what the
//!   runner writes for the run before it starts (the prompt, the excludes, a fresh home, the agent's own git
//!   directory) and what the agent leaves (the hand-off, its CLI's last message). After the run the runner reads it
//!   only through `agent::files`.
//! * `<git dir>/swarm/slots/<agent>` — **the runner's**: the index of the checkout. No sandbox shows it.
//!
//! The agent's git directory (`<run>/git`, named by the tree's `.git` file) is a repository of its own: `HEAD` at
//! the commit checked out, a copy of the runner's index, of the clone's refs and of its repository format; its
//! objects go to its own folder, the clone's objects are its alternates (read-only in the sandbox). The runner
//! takes what the agent did as data: its `HEAD` read as text ([`Slot::agent_head`]), its objects copied out of the
//! run folder and each written again into the clone ([`Slot::bring_objects`], so that an object whose content is
//! not its name is never taken), its files through `runner::snapshot`. No git command of the runner ever runs in
//! the agent's git directory or its work tree.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};

use super::snapshot::Known;

mod park;
use crate::agent::files::{self, Dir};

/// One agent's places ([`super::Places`]) and the runner's index for them.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// The work tree.
    pub(crate) tree: PathBuf,
    /// The run folder.
    pub(crate) run: PathBuf,
    /// The runner's own: `index`, the objects an agent's run brought (on their way in).
    private: PathBuf,
    /// Where the last work tree waits while the next is made (`<cache>/warm/aside/<agent>`), and where the trees
    /// of runners that exited are parked for the next (`<cache>/warm/parked`): [`super::warm`].
    aside: PathBuf,
    parked: PathBuf,
    /// The clone's git directory.
    common: PathBuf,
    /// Where git's user excludes file is unless `core.excludesFile` says ([`crate::hooks::agent::excludes_text`]).
    config_home: Option<PathBuf>,
}

/// What [`Slot::checkout`] put into the work tree.
#[derive(Debug, Clone)]
pub(crate) struct Checkout {
    /// The tree checked out.
    pub(crate) tree: ObjectId,
    /// Each file as the runner wrote it (the stat cache of a snapshot).
    pub(crate) known: Known,
}

/// A path with conflicts, as `git merge-tree` reports it: its stages (1 the base, 2 ours, 3 theirs), each a mode
/// and an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflicted {
    pub(crate) path: BString,
    pub(crate) stages: Vec<(u8, u32, ObjectId)>,
}

/// The most bytes of objects one run may leave for the runner to bring in, as copied and again as inflated (more
/// fails the run's work).
const MAX_RUN_OBJECTS: u64 = 4 << 30;

impl Slot {
    pub(crate) fn new(places: &super::Places, common: &Path, agent: &str, config_home: Option<PathBuf>) -> Slot {
        Slot {
            tree: places.worktree(agent),
            run: places.run_dir(agent),
            private: common.join("swarm").join("slots").join(agent),
            aside: places.warm().join("aside").join(agent),
            parked: places.warm().join("parked"),
            common: common.to_path_buf(),
            config_home,
        }
    }

    /// What the slot's last `[run] setup` was run for ([`super::setup`]).
    pub(crate) fn setup_key(&self) -> PathBuf {
        self.private.join("setup-key")
    }

    fn index(&self) -> PathBuf {
        self.private.join("index")
    }

    /// The runner's git for this slot: in the clone's git directory (never in the work tree), with its own index.
    fn git(&self) -> std::process::Command {
        let mut cmd = crate::gitcmd::local(&self.common);
        cmd.env("GIT_DIR", &self.common).env("GIT_INDEX_FILE", self.index());
        cmd
    }

    /// Make the work tree afresh at `what` (a commit or a tree): the old one set aside, a new folder made, `what`
    /// written into it by the runner's git (no sparse checkout) and given to `owner` (a root runner's agents run
    /// as nobody). `conflicts`: paths whose index entry becomes their stages, so that the agent's `git status`
    /// shows them unmerged. `warm`: what the repository ignores is then carried from the old tree (or, for a
    /// slot's first tree, from one a runner that exited parked) into the new one ([`super::warm`]); what is left
    /// of the old tree is removed.
    pub(crate) fn checkout(
        &self,
        repo: &gix::Repository,
        what: ObjectId,
        owner: Option<(u32, u32)>,
        conflicts: &[Conflicted],
        warm: bool,
    ) -> Result<Checkout, String> {
        crate::agent::contain::kill_working_in(&self.tree);
        let aside = warm.then(|| self.set_aside()).flatten();
        // What the last checkout wrote, and when it was done: files of it nobody changed since keep their times.
        let before = aside.as_ref().and_then(|_| self.last_checkout());
        files::remove_all(&self.tree)
            .map_err(|e| format!("cannot remove the work tree {}: {e}", self.tree.display()))?;
        let parent = self.tree.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        std::fs::create_dir(&self.tree).map_err(|e| format!("cannot create {}: {e}", self.tree.display()))?;
        std::fs::create_dir_all(&self.private).map_err(|e| format!("cannot create {}: {e}", self.private.display()))?;
        let _ = files::remove_all(&self.index());
        // Attributes (smudge filters, end of lines) come from `what` itself: git reads them from the index it writes,
        // and the folder it writes into is new.
        let work_tree = format!("--work-tree={}", self.tree.display());
        let out = self
            .git()
            .args([&work_tree, "-c", "core.sparseCheckout=false", "read-tree", "--reset", "-u"])
            .arg(what.to_string())
            .output()
            .map_err(|e| format!("cannot run git read-tree: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "git read-tree of {what} into {} failed: {}",
                self.tree.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dir = Dir::open(&self.tree).map_err(|e| e.to_string())?;
        if let (Some(aside), Some(before)) = (&aside, &before) {
            self.keep_times(aside, &dir, before);
        }
        let mut known = Known::record(&dir, &self.index(), owner)?;
        let _ = files::remove_all(&self.stamp());
        let _ = files::create(&self.stamp(), b"");
        if !conflicts.is_empty() {
            self.stage(conflicts)?;
        }
        if let Some(aside) = aside {
            known.carried = self.carry(&aside, &dir, owner);
        }
        let tree = tree_of(repo, what)?;
        Ok(Checkout { tree, known })
    }

    /// Replace the index entries of `conflicts` by their stages (`git update-index --index-info`).
    fn stage(&self, conflicts: &[Conflicted]) -> Result<(), String> {
        let mut input: Vec<u8> = Vec::new();
        let zero = ObjectId::null(gix::hash::Kind::Sha1);
        for c in conflicts {
            input.extend_from_slice(format!("0 {zero}\t").as_bytes());
            input.extend_from_slice(&c.path);
            input.push(0);
            for (stage, mode, id) in &c.stages {
                input.extend_from_slice(format!("{mode:o} {id} {stage}\t").as_bytes());
                input.extend_from_slice(&c.path);
                input.push(0);
            }
        }
        let mut child = self
            .git()
            .args(["update-index", "-z", "--index-info"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run git update-index: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&input);
        }
        let out = child.wait_with_output().map_err(|e| format!("git update-index: {e}"))?;
        if !out.status.success() {
            return Err(format!("git update-index failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(())
    }

    /// Make the run folder afresh: whatever an earlier run left there removed (no link followed), an empty folder
    /// of this user's alone.
    pub(crate) fn fresh_run(&self) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        files::remove_all(&self.run)
            .map_err(|e| format!("cannot remove the run folder {}: {e}", self.run.display()))?;
        if let Some(parent) = self.run.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&self.run)
            .map_err(|e| format!("cannot create the run folder {}: {e}", self.run.display()))
    }

    /// The agent's own git directory (`<run>/git`), for a run in the work tree as [`Slot::checkout`] left it:
    /// `HEAD` at `head` (none: a branch yet to be born), `REBASE_HEAD` at `replayed` (a conflict run: the commit being replayed), a copy of the
    /// runner's index, of the clone's refs, `info/exclude`, `shallow` and repository format; objects of its own,
    /// the clone's as alternates. The work tree's `.git` names it. `owner`: the uid the agent runs as, which the
    /// tree was given to (its files' change times are not the index's: git is told not to trust them); the run
    /// folder is given to it when the runner has written everything in it (`agent::run`).
    pub(crate) fn agent_git(
        &self,
        head: Option<ObjectId>,
        replayed: Option<ObjectId>,
        owner: Option<(u32, u32)>,
    ) -> Result<PathBuf, String> {
        let git = self.run.join("git");
        let err = |e: std::io::Error, p: &Path| format!("cannot prepare {}: {e}", p.display());
        for d in ["objects/info", "objects/pack", "refs/heads", "refs/tags", "info"] {
            std::fs::create_dir_all(git.join(d)).map_err(|e| err(e, &git.join(d)))?;
        }
        let put = |rel: &str, bytes: &[u8]| files::create(&git.join(rel), bytes).map_err(|e| err(e, &git.join(rel)));
        // No commit yet (a planner before the target exists): a branch to be born.
        let head = head.map_or_else(|| "ref: refs/heads/main\n".to_string(), |h| format!("{h}\n"));
        put("HEAD", head.as_bytes())?;
        if let Some(r) = replayed {
            put("REBASE_HEAD", format!("{r}\n").as_bytes())?;
        }
        let mut config = repository_config(&self.common.join("config"));
        // The agents' own files and the user's global excludes stay out of the agent's `git add -A` (the runner
        // leaves them out of what it takes anyway: `runner::snapshot`).
        let excludes = crate::hooks::agent::write_excludes(&self.common, &self.run, self.config_home.as_deref())
            .ok_or_else(|| format!("cannot write the excludes of {}", self.run.display()))?;
        config.push_str(&format!("[core]\n\texcludesFile = {}\n", quote_config(&excludes.to_string_lossy())));
        if owner.is_some() {
            config.push_str("\ttrustctime = false\n");
        }
        put("config", config.as_bytes())?;
        let mut alternates = vec![self.common.join("objects").to_string_lossy().into_owned()];
        // The clone's own alternates (a clone made with --reference), absolute: they are read from their place.
        if let Some(text) = files::read_text(&self.common.join("objects/info/alternates"), 64 * 1024) {
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                let p = Path::new(line);
                let abs = if p.is_absolute() { p.to_path_buf() } else { self.common.join("objects").join(p) };
                alternates.push(abs.to_string_lossy().into_owned());
            }
        }
        put("objects/info/alternates", (alternates.join("\n") + "\n").as_bytes())?;
        for f in ["packed-refs", "shallow", "info/exclude", "index"] {
            let from = if f == "index" { self.index() } else { self.common.join(f) };
            copy_file(&from, &git.join(f))?;
        }
        copy_refs(&self.common.join("refs"), &git.join("refs"))?;
        let link = self.tree.join(".git");
        // What a run before this one in the same tree left there (`[run] setup` before the agent): replaced.
        Dir::open(&self.tree).and_then(|d| d.remove(OsStr::new(".git"))).map_err(|e| e.to_string())?;
        files::create(&link, format!("gitdir: {}\n", git.display())).map_err(|e| err(e, &link))?;
        if let Some((uid, gid)) = owner {
            Dir::open(&self.tree).and_then(|d| d.chown(OsStr::new(".git"), uid, gid)).map_err(|e| e.to_string())?;
        }
        Ok(git)
    }

    /// The commit the agent's `HEAD` names after its run, read as data: a commit id, or `ref: refs/…` looked up in
    /// its loose refs and `packed-refs` (never through a link, each file bounded). `None`: it names nothing
    /// readable (the agent removed or broke its git directory).
    pub(crate) fn agent_head(&self) -> Option<ObjectId> {
        let git = Dir::open(&self.run.join("git")).ok()?;
        let head = git.read_text(Path::new("HEAD"), 4096)?;
        let head = head.trim();
        if let Ok(id) = ObjectId::from_hex(head.as_bytes()) {
            return Some(id);
        }
        let name = head.strip_prefix("ref:")?.trim();
        if !name.starts_with("refs/") || name.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
            return None;
        }
        let loose = git.read_text(Path::new(name), 4096).and_then(|t| ObjectId::from_hex(t.trim().as_bytes()).ok());
        loose.or_else(|| {
            let packed = git.read_text(Path::new("packed-refs"), 64 << 20)?;
            packed.lines().find_map(|l| {
                let (id, r) = l.split_once(' ')?;
                (r == name).then(|| ObjectId::from_hex(id.as_bytes()).ok()).flatten()
            })
        })
    }

    /// Bring the objects the agent's run wrote into the clone: its object folder copied out of the run folder
    /// first (regular files only, bounded: no link, FIFO or device reaches a reader of objects), then each object
    /// written again through the clone's object database, which takes it only when its content is its name. How
    /// many came in.
    pub(crate) fn bring_objects(&self, repo: &gix::Repository) -> Result<usize, String> {
        let Ok(objects) = Dir::open(&self.run.join("git").join("objects")) else { return Ok(0) };
        let staging = self.private.join("objects-in");
        files::remove_all(&staging).map_err(|e| format!("cannot clear {}: {e}", staging.display()))?;
        let mut budget = MAX_RUN_OBJECTS;
        for e in objects.entries().map_err(|e| e.to_string())? {
            // `info/` holds the alternates (the clone's own objects, or anything the agent named): never read.
            let name = e.name.to_string_lossy();
            let wanted = name == "pack" || (name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()));
            if e.kind == files::Kind::Dir && wanted {
                let sub = objects.dir(Path::new(&e.name)).map_err(|e| e.to_string())?;
                sub.copy_files(&staging.join(&e.name), &mut budget)
                    .map_err(|e| format!("the objects of the agent's run cannot be taken: {e}"))?;
            }
        }
        let n = if staging.is_dir() { bring_objects(repo, &staging)? } else { 0 };
        let _ = files::remove_all(&staging);
        Ok(n)
    }

    /// Remove the run folder and the runner's index, and park the work tree for the next runner of this clone
    /// (when the runner is done): [`park::MAX_PARKED`] trees at most, the oldest removed.
    pub(crate) fn remove(&self) {
        crate::agent::contain::kill_working_in(&self.tree);
        if !self.park() {
            let _ = files::remove_all(&self.tree);
        }
        let _ = files::remove_all(&self.run);
        let _ = files::remove_all(&self.private);
        let _ = files::remove_all(&self.aside);
    }
}

/// `value` as a git config value: quoted, its backslashes and quotes escaped.
fn quote_config(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// What an agent's copy of the git directory keeps of its `config`: the repository's format (`[core]`'s
/// `repositoryformatversion`, `bare`, `filemode`, `symlinks`, `ignorecase`, `precomposeunicode`, `logallrefupdates`)
/// and every `[extensions]` key; nothing else (remotes, credentials, includes, filters, hooks).
fn repository_config(path: &Path) -> String {
    const CORE: &[&str] = &[
        "repositoryformatversion",
        "bare",
        "filemode",
        "symlinks",
        "ignorecase",
        "precomposeunicode",
        "logallrefupdates",
    ];
    let mut out = String::new();
    let Some(text) = files::read_text(path, 1 << 20) else {
        return "[core]\n\trepositoryformatversion = 0\n[gc]\n\tauto = 0\n".into();
    };
    let Ok(file) = gix::config::File::try_from(text.as_str()) else {
        return "[core]\n\trepositoryformatversion = 0\n[gc]\n\tauto = 0\n".into();
    };
    let simple = |v: &str| v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    for (section, keep) in [("core", Some(CORE)), ("extensions", None)] {
        let mut lines = Vec::new();
        for sec in
            file.sections_by_name(section).into_iter().flatten().filter(|s| s.header().subsection_name().is_none())
        {
            for name in sec.body().value_names() {
                let key = name.to_string().to_ascii_lowercase();
                if keep.is_some_and(|k| !k.contains(&key.as_str())) {
                    continue;
                }
                if let Some(v) = sec.body().value(&name).map(|v| v.to_string()).filter(|v| simple(v)) {
                    lines.push(format!("\t{key} = {v}\n"));
                }
            }
        }
        if !lines.is_empty() {
            out.push_str(&format!("[{section}]\n"));
            out.extend(lines);
        }
    }
    // No background maintenance of a copy that is thrown away.
    out.push_str("[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n");
    out
}

/// Write every object of the object directory `dir` into `repo`, checking that each is what its id says. Each is
/// sized by its header before it is read: a few kilobytes of zlib can claim gigabytes, so an object past
/// [`super::snapshot::MAX_FILE`] (what a file of the work may be), or objects that come to more than
/// [`MAX_RUN_OBJECTS`] in all, fail the run's work instead of being inflated into the runner's memory.
fn bring_objects(repo: &gix::Repository, dir: &Path) -> Result<usize, String> {
    use gix::objs::Find;
    use gix::objs::Write;
    use gix::odb::Header;
    let odb = gix::odb::at(dir, gix::hash::Kind::Sha1).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    let ids: Vec<ObjectId> = odb
        .iter()
        .map_err(|e| format!("cannot list the objects of {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .collect();
    let mut buf = Vec::new();
    let mut brought = 0;
    let mut inflated: u64 = 0;
    let max = super::snapshot::MAX_FILE as u64;
    for id in ids {
        if repo.has_object(id) {
            continue;
        }
        let Ok(Some(header)) = odb.try_header(&id) else { continue };
        if header.size() > max {
            return Err(format!(
                "the agent's run left object {id} of {} bytes, past the {} MiB a file of the work may be: not taken",
                header.size(),
                max >> 20
            ));
        }
        inflated += header.size();
        if inflated > MAX_RUN_OBJECTS {
            return Err(format!(
                "the objects of the agent's run come to more than {} MiB: not taken",
                MAX_RUN_OBJECTS >> 20
            ));
        }
        let Ok(Some(data)) = odb.try_find(&id, &mut buf) else { continue };
        match repo.write_buf(data.kind, data.data) {
            Ok(written) if written == id => brought += 1,
            // Not what its name says: the clone never takes it (a commit naming it then has a missing object).
            Ok(_) => {}
            Err(e) => return Err(format!("cannot write object {id}: {e}")),
        }
    }
    Ok(brought)
}

/// The tree of `what` (a commit, or a tree already).
fn tree_of(repo: &gix::Repository, what: ObjectId) -> Result<ObjectId, String> {
    if what == repo.empty_tree().id {
        return Ok(what);
    }
    let obj = repo.find_object(what).map_err(|e| format!("cannot read {what}: {e}"))?;
    match obj.kind {
        gix::object::Kind::Tree => Ok(what),
        _ => Ok(obj.peel_to_tree().map_err(|e| format!("{what} has no tree: {e}"))?.id),
    }
}

/// Copy the runner's file `from` (missing is fine) to the new file `to` in a run folder.
fn copy_file(from: &Path, to: &Path) -> Result<(), String> {
    match std::fs::read(from) {
        Ok(bytes) => files::create(to, bytes).map_err(|e| format!("cannot write {}: {e}", to.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot read {}: {e}", from.display())),
    }
}

/// Copy the clone's loose refs (`from`, its `refs/`) into the agent's git directory: regular files only.
fn copy_refs(from: &Path, to: &Path) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(from) else { return Ok(()) };
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let dest = to.join(e.file_name());
        if ft.is_dir() {
            copy_refs(&e.path(), &dest)?;
        } else if ft.is_file() {
            copy_file(&e.path(), &dest)?;
        }
    }
    Ok(())
}

/// Does any conflicted path of `conflicts` still hold what git left in it (`markers`: the blob with conflict
/// markers) or markers of its own in `tree`? The paths still unresolved.
pub(crate) fn unresolved(
    repo: &gix::Repository,
    tree: ObjectId,
    conflicts: &[(BString, Option<ObjectId>)],
) -> Vec<BString> {
    let Ok(t) = repo.find_tree(tree) else { return conflicts.iter().map(|(p, _)| p.clone()).collect() };
    conflicts
        .iter()
        .filter(|(path, with_markers)| {
            let Ok(Some(e)) = t.lookup_entry_by_path(path.to_path_lossy()) else {
                // Gone: resolved by its deletion.
                return false;
            };
            let id = e.object_id();
            if Some(id) == *with_markers {
                return true;
            }
            let Ok(blob) = repo.find_blob(id) else { return true };
            let data: &[u8] = &blob.data;
            if data.contains(&0) {
                // Binary: no markers to tell by; changed, so the agent's.
                return false;
            }
            let has = |m: &[u8]| data.lines().any(|l| l == m || (l.starts_with(m) && l.get(m.len()) == Some(&b' ')));
            has(b"<<<<<<<") && has(b">>>>>>>")
        })
        .map(|(p, _)| p.clone())
        .collect()
}
