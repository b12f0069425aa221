//! The state tree in a git object database, read and written in-process with gix.
//!
//! Reading is forgiving: a task file that cannot be read becomes a [`Problem`] (path, commit, reason) and the rest of
//! the board is read as usual. A broken `swarm.toml` is an error: without settings no op can be judged.
//! Writing turns a [`Change`] into blobs, an edited tree and one commit whose parent is the base that was read.

use std::collections::BTreeMap;
use std::path::Path;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;
use gix::refs::transaction::{Change as RefChange, LogChange, PreviousValue, RefEdit, RefLog};

use crate::escape::squash;
use crate::model::{self, Config, Status, Task};
use crate::state::{Board, Change, Closed, Stored};
pub(crate) use crate::state::{CONFIG_PATH, CYCLES_DIR, README_PATH, SPEND_PATH, TASKS_DIR};
use crate::time::Timestamp;
use crate::trailer::Mark;

mod kept;
mod patch;
mod pick;
pub(crate) use pick::EXPIRING as PICK_WINDOW;

/// How many parsed tasks a store keeps by blob id: a runner re-reads the board after every op, and a board of 20,000
/// live tasks must not be parsed again each time (a parsed task is about a kilobyte; the cache starts over when full).
const PARSED_CACHE_TASKS: usize = 32_768;
/// How far back a board with broken settings looks for the newest settings that read.
const SETTINGS_LOOKBACK: usize = 1_000;
/// Task files nested deeper than this under `tasks/` are reported, not read.
const MAX_DEPTH: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{context}: {message}")]
    Git { context: String, message: String },
}

/// Attach a context to any gix error, with its whole chain of causes.
pub trait GitContext<T> {
    fn git(self, context: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T, E: std::error::Error + 'static> GitContext<T> for Result<T, E> {
    fn git(self, context: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Git { context: context(), message: crate::with_causes(&e) })
    }
}

pub use crate::state::{Problem, short};

/// The board at one commit of the state ref.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub commit: ObjectId,
    pub board: Board,
    pub problems: Vec<Problem>,
}

/// Who writes the commits.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

/// An object database plus refs: the user's repository, or the remote's when it is a local path.
#[derive(Debug)]
pub struct Store {
    pub repo: gix::Repository,
    /// Tasks parsed from blobs, by blob id: a blob never changes, and an op re-reads a board in which almost every
    /// task is as it was (a busy runner re-reads after every lost race).
    parsed: std::cell::RefCell<std::collections::HashMap<ObjectId, Task>>,
    /// `tasks/` trees known to be laid out as the ops write them ([`Store::canonical`]), by tree id.
    canonical: std::cell::RefCell<std::collections::HashSet<ObjectId>>,
    /// Where those verdicts are kept between processes (`.git/swarm/cache/` of the clone that reads).
    cache_dir: Option<std::path::PathBuf>,
    /// The last clean read of the live tasks (`[0]`) and of every task (`[1]`): the next one patches it.
    last: std::cell::RefCell<[Option<patch::LastRead>; 2]>,
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let repo = gix::open_opts(path, crate::open_options(gix::sec::Trust::Full))
            .git(|| format!("cannot open the repository at {}", path.display()))?;
        Ok(Store::from_repo(repo))
    }

    pub fn from_repo(repo: gix::Repository) -> Store {
        Store {
            repo,
            parsed: Default::default(),
            canonical: Default::default(),
            cache_dir: None,
            last: Default::default(),
        }
    }

    /// Keep what this store learns about trees (content-keyed, so any clone's verdict is right for any reader) in
    /// `dir` between processes.
    pub(crate) fn with_cache(mut self, dir: std::path::PathBuf) -> Store {
        self.cache_dir = Some(dir);
        self
    }

    /// The commit a ref points at, if the ref exists.
    pub fn read_ref(&self, name: &str) -> Result<Option<ObjectId>, StoreError> {
        let r = self.repo.try_find_reference(name).git(|| format!("cannot read {name}"))?;
        match r {
            None => Ok(None),
            Some(mut r) => {
                let id = r.peel_to_id().git(|| format!("cannot resolve {name}"))?;
                Ok(Some(id.detach()))
            }
        }
    }

    /// The settings a tree's `swarm.toml` entry holds (`None`: there is none), or what is wrong with them.
    fn config_entry(&self, entry: Option<(EntryKind, ObjectId)>) -> Result<Config, String> {
        match entry {
            None => Err(format!("is missing: the state ref needs its {CONFIG_PATH}")),
            Some((kind, _)) if kind != EntryKind::Blob && kind != EntryKind::BlobExecutable => {
                Err(format!("is a {kind:?}, not a file"))
            }
            Some((_, id)) => {
                let bytes = self.blob_limited(id, model::MAX_CONFIG_BYTES)?;
                let text = std::str::from_utf8(&bytes).map_err(|e| format!("not UTF-8: {e}"))?;
                let cfg: Config = toml::from_str(text).map_err(|e| format!("invalid TOML: {}", squash(&e)))?;
                cfg.validate()?;
                Ok(cfg)
            }
        }
    }

    /// The newest settings before `commit` on its first-parent history (at most [`SETTINGS_LOOKBACK`] commits back)
    /// that read, and the commit that holds them: what a board with broken settings shows, and what `doctor --fix`
    /// puts back.
    pub(crate) fn last_good_config(&self, commit: ObjectId) -> Option<(Config, ObjectId)> {
        let mut at = self.repo.find_commit(commit).ok()?.parent_ids().next()?.detach();
        for _ in 0..SETTINGS_LOOKBACK {
            let c = self.repo.find_commit(at).ok()?;
            let tree = c.tree().ok()?;
            let entry = tree.find_entry(CONFIG_PATH).map(|e| (e.mode().kind(), e.object_id()));
            if let Ok(cfg) = self.config_entry(entry) {
                return Some((cfg, at));
            }
            at = c.parent_ids().next()?.detach();
        }
        None
    }

    /// Read the board at `commit`: every task when `full`, else the live ones with the finished ones known by path.
    pub fn read(&self, commit: ObjectId, full: bool) -> Result<Snapshot, StoreError> {
        self.read_scoped(commit, if full { Scope::Full } else { Scope::Live }, true)
    }

    /// [`Store::read`] by a walk of every folder, never a patch of a read kept in memory or on disk: `doctor`, which
    /// must see an object that went missing in a folder no change touched (invariant 32).
    pub fn read_walked(&self, commit: ObjectId, full: bool) -> Result<Snapshot, StoreError> {
        self.read_scoped(commit, if full { Scope::Full } else { Scope::Live }, false)
    }

    /// Read the board at `commit` for an op about `ids` alone (invariant 31): only those tasks and their deps are
    /// parsed, and the board says it is [`Board::partial`]. On a canonical layout ([`Store::canonical`]) their files
    /// are looked up, unless `every_name` (an op that mints an id must know every id: [`Board::lookup`]); otherwise
    /// every name of `tasks/` is walked, as for any read, and the live tasks not parsed are [`Board::unread`].
    /// Either way the same files are found for those ids as by a full read. On 20,000 live tasks this is what
    /// keeps a by-id op as cheap as on 100 (see docs/performance.md).
    pub(crate) fn read_tasks(&self, commit: ObjectId, ids: &[&str], every_name: bool) -> Result<Snapshot, StoreError> {
        let want: std::collections::BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();
        self.read_scoped(commit, Scope::Tasks { want: &want, every_name }, false)
    }

    fn read_scoped(&self, commit: ObjectId, scope: Scope<'_>, patch: bool) -> Result<Snapshot, StoreError> {
        let full = matches!(scope, Scope::Full);
        let (want, look_up) = match scope {
            Scope::Tasks { want, every_name } => (Some(want), !every_name),
            Scope::Full | Scope::Live => (None, false),
        };
        let commit_hex = commit.to_hex().to_string();
        let c = self.repo.find_commit(commit).git(|| format!("cannot read state commit {commit_hex}"))?;
        let tree_id = c.tree_id().git(|| format!("state commit {commit_hex} has no tree"))?.detach();
        let tree = self.repo.find_tree(tree_id).git(|| format!("cannot read the tree of {commit_hex}"))?;
        let mut config = None;
        let mut tasks_tree = None;
        let mut spend = None;
        let mut cycles: Option<ObjectId> = None;
        for entry in tree.iter() {
            let entry = entry.git(|| format!("cannot decode the tree of {commit_hex}"))?;
            match entry.filename().to_str() {
                Ok(CONFIG_PATH) => config = Some((entry.mode().kind(), entry.object_id())),
                Ok(TASKS_DIR) => tasks_tree = Some((entry.mode().kind(), entry.object_id())),
                Ok(SPEND_PATH) => spend = Some((entry.mode().kind(), entry.object_id())),
                Ok(CYCLES_DIR) if entry.mode().kind() == EntryKind::Tree => cycles = Some(entry.object_id()),
                _ => {}
            }
        }
        let mut problems = Vec::new();
        // Broken settings do not end the read: the board is shown with the newest settings that read, and every op
        // but a repair is refused on it (`Board::broken_settings`).
        let (config, broken_settings) = match self.config_entry(config) {
            Ok(cfg) => (cfg, None),
            Err(message) => {
                let problem = Problem { path: CONFIG_PATH.into(), commit: commit_hex.clone(), message };
                problems.push(problem.clone());
                let (cfg, fallback) = match self.last_good_config(commit) {
                    Some((cfg, at)) => (cfg, Some(at.to_hex().to_string())),
                    None => (Config::default(), None),
                };
                (cfg, Some(crate::state::BrokenSettings { problem, fallback }))
            }
        };
        let mut board = Board { config, cycle: 1, broken_settings, ..Board::default() };
        if cycles.is_some() {
            // The cycle that runs follows the highest record's number (the name is enough: no blob is read).
            let names = self.list_dir(commit, CYCLES_DIR).unwrap_or_default();
            let last = names.iter().filter_map(|(n, _)| n.strip_suffix(".toml")?.parse::<u64>().ok()).max();
            board.cycle = last.map_or(1, |n| n.saturating_add(1));
        }
        match spend {
            None => {}
            Some((kind, id)) if kind == EntryKind::Blob || kind == EntryKind::BlobExecutable => {
                let read = self
                    .blob_text(id, crate::usage::MAX_SPEND_BYTES)
                    .and_then(|t| toml::from_str(&t).map_err(|e| format!("invalid TOML: {}", squash(&e))));
                match read {
                    Ok(sp) => board.spend = sp,
                    // What was spent is still on every task; the next op that records usage starts it again.
                    Err(message) => {
                        problems.push(Problem { path: SPEND_PATH.into(), commit: commit_hex.clone(), message })
                    }
                }
            }
            Some((kind, _)) => problems.push(Problem {
                path: SPEND_PATH.into(),
                commit: commit_hex.clone(),
                message: format!("is a {kind:?}, not a file"),
            }),
        }
        match tasks_tree {
            None => {}
            Some((EntryKind::Tree, id))
                if look_up
                    && let Some(want) = want
                    && let Some(found) = self.probe(commit, id, want, &commit_hex, &mut problems) =>
            {
                // A canonical layout: every file of these ids is where the ops put it, so looking there is reading
                // what a walk would find (invariant 31).
                board.unread = resolve(found, &commit_hex, &mut board, &mut problems);
                board.partial = true;
                board.lookup = true;
            }
            Some((EntryKind::Tree, id))
                if want.is_none()
                    && patch
                    && let Some(read) = self.patch_last(id, full, &commit_hex) =>
            {
                board.tasks = read.tasks;
                board.closed = read.closed;
            }
            Some((EntryKind::Tree, id)) => {
                let walk = Walk { commit: &commit_hex, full, closed: None, want };
                let problems_before = problems.len();
                let mut found = Vec::new();
                self.read_tasks_dir(id, TASKS_DIR, 0, &walk, &mut found, &mut problems)?;
                if want.is_some() {
                    // The deps of the tasks read are parsed too, as a full read parses them: a file in a live place
                    // may say `done`, and one that cannot be read leaves its id to a finished twin.
                    let deps = deps_of_parsed(&found);
                    found.retain_mut(|f| {
                        let Entry::Unread(blob) = f.entry else { return true };
                        if !deps.contains(&f.id) {
                            return true;
                        }
                        match self.read_task(blob, &f.id) {
                            Ok(task) => {
                                f.entry = Entry::Live(Box::new(task));
                                true
                            }
                            Err(message) => {
                                problems.push(Problem { path: f.path.clone(), commit: commit_hex.clone(), message });
                                false
                            }
                        }
                    });
                }
                let unread = resolve(found, &commit_hex, &mut board, &mut problems);
                if want.is_some() {
                    board.partial = true;
                    board.unread = unread;
                } else {
                    let clean = problems.len() == problems_before && board.twins.is_empty();
                    let read = clean.then(|| patch::LastRead {
                        tree: id,
                        tasks: board.tasks.clone(),
                        closed: board.closed.clone(),
                        unkept: 0,
                    });
                    match &read {
                        Some(read) => self.keep(full, read),
                        None => self.forget_kept(full),
                    }
                    self.last.borrow_mut()[usize::from(full)] = read;
                }
            }
            Some((kind, _)) => problems.push(Problem {
                path: TASKS_DIR.into(),
                commit: commit_hex.clone(),
                message: format!("is a {kind:?}, not a folder; no task can be read"),
            }),
        }
        Ok(Snapshot { commit, board, problems })
    }

    /// The task maps of `tasks/` tree `tree` patched from the last clean read of the same scope (this store's, else
    /// the one kept on disk), if there is one and what changed since is a plain change of task files; the patched
    /// read is kept for the next, and on disk when the patches since the kept one have parsed enough files.
    fn patch_last(&self, tree: ObjectId, full: bool, commit: &str) -> Option<patch::LastRead> {
        let last = self.last.borrow_mut()[usize::from(full)].take().or_else(|| self.load_kept(full))?;
        let walk = Walk { commit, full, closed: None, want: None };
        let mut read = if last.tree == tree { last } else { self.patched(&last, tree, &walk)? };
        if read.unkept >= kept::REWRITE_AFTER {
            self.keep(full, &read);
            read.unkept = 0;
        }
        self.last.borrow_mut()[usize::from(full)] = Some(read.clone());
        Some(read)
    }

    fn read_tasks_dir(
        &self,
        tree_id: ObjectId,
        dir: &str,
        depth: usize,
        walk: &Walk<'_>,
        found: &mut Vec<Found>,
        problems: &mut Vec<Problem>,
    ) -> Result<(), StoreError> {
        let commit = walk.commit;
        let tree = self.repo.find_tree(tree_id).git(|| format!("cannot read tree {dir} of {commit}"))?;
        let problem = |path: String, message: String| Problem { path, commit: commit.to_string(), message };
        for entry in tree.iter() {
            let entry = entry.git(|| format!("cannot decode tree {dir} of {commit}"))?;
            let name = entry.filename();
            let path = format!("{dir}/{}", name.to_str_lossy());
            let Ok(name) = name.to_str() else {
                problems.push(problem(path, "the file name is not UTF-8".into()));
                continue;
            };
            match item(name, entry.mode().kind(), depth, walk.closed) {
                Item::Skip => {}
                Item::Bad(message) => problems.push(problem(path, message)),
                Item::Folder(closed) => {
                    let sub = Walk { closed, ..*walk };
                    // A folder entry that is no folder (a blob, a missing object) is one problem, not the end of
                    // the board.
                    if let Err(e) = self.read_tasks_dir(entry.object_id(), &path, depth + 1, &sub, found, problems) {
                        problems.push(problem(path, format!("cannot be read as a folder: {}", squash(&e))));
                    }
                }
                Item::File(stem) => match self.file_entry(walk, stem, entry.object_id()) {
                    Err(message) => problems.push(problem(path, message)),
                    Ok(entry) => found.push(Found { id: stem.to_string(), path, entry }),
                },
            }
        }
        Ok(())
    }

    /// What the task file `stem` (blob `blob`) of a walk is: read, or known by its path.
    fn file_entry(&self, walk: &Walk<'_>, stem: &str, blob: ObjectId) -> Result<Entry, String> {
        match walk.closed {
            // A finished task is known by its path alone unless the whole board is wanted.
            Some(status) if !walk.full => model::validate_id(stem).map(|()| Entry::Closed(status)),
            // A live task that the op is not about is known by its name and blob.
            None if walk.want.is_some_and(|w| !w.contains(stem)) => {
                model::validate_id(stem).map(|()| Entry::Unread(blob))
            }
            closed => self.read_task(blob, stem).and_then(|task| match closed {
                Some(st) if task.status != st => Err(format!("is under tasks/{st}/ but its status is {}", task.status)),
                Some(_) => Ok(Entry::Finished(Box::new(task))),
                None => Ok(Entry::Live(Box::new(task))),
            }),
        }
    }

    /// Read one task file of `snap` that the board knows by path only (a finished task of a lazy read).
    pub fn read_closed(&self, snap: &Snapshot, id: &str) -> Result<Option<Result<Task, Problem>>, StoreError> {
        let Some(closed) = snap.board.closed.get(id) else { return Ok(None) };
        let commit = snap.commit;
        let tree =
            self.repo.find_commit(commit).and_then(|c| c.tree()).git(|| format!("cannot read the tree of {commit}"))?;
        let entry = tree.lookup_entry_by_path(&closed.path).git(|| format!("cannot look up {}", closed.path))?;
        let problem = |message: String| Problem { path: closed.path.clone(), commit: commit.to_string(), message };
        let Some(entry) = entry else { return Ok(Some(Err(problem("vanished".into())))) };
        let read = self.read_task(entry.object_id(), id).and_then(|t| {
            if t.status == closed.status {
                Ok(t)
            } else {
                Err(format!("is under tasks/{}/ but its status is {}", closed.status, t.status))
            }
        });
        Ok(Some(read.map_err(problem)))
    }

    fn blob_limited(&self, id: ObjectId, limit: u64) -> Result<Vec<u8>, String> {
        let header = self.repo.find_header(id).map_err(|e| format!("cannot read blob {id}: {e}"))?;
        if header.size() > limit {
            return Err(format!("{} bytes, more than the limit of {limit}; not read", header.size()));
        }
        let blob = self.repo.find_blob(id).map_err(|e| format!("cannot read blob {id}: {e}"))?;
        Ok(blob.detach().data)
    }

    fn read_task(&self, id: ObjectId, stem: &str) -> Result<Task, String> {
        if let Some(t) = self.parsed.borrow().get(&id)
            && t.id == stem
        {
            return Ok(t.clone());
        }
        let task = self.parse_task(id, stem)?;
        let mut cache = self.parsed.borrow_mut();
        if cache.len() >= PARSED_CACHE_TASKS {
            cache.clear();
        }
        cache.insert(id, task.clone());
        Ok(task)
    }

    fn parse_task(&self, id: ObjectId, stem: &str) -> Result<Task, String> {
        let bytes = self.blob_limited(id, model::MAX_TASK_FILE_BYTES)?;
        let text = std::str::from_utf8(&bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        let task: Task = toml::from_str(text).map_err(|e| format!("invalid task: {}", squash(&e)))?;
        task.validate()?;
        if task.id != stem {
            return Err(format!("the file name says {} but the id inside is {}", crate::escape::line(stem), task.id));
        }
        Ok(task)
    }

    /// Write `change` on top of `base` (or a new root with `config` when there is no base). Returns the commit.
    pub fn write(
        &self,
        base: Option<&Snapshot>,
        config: Option<&Config>,
        change: &Change,
        who: &Identity,
        now: Timestamp,
    ) -> Result<ObjectId, StoreError> {
        let base_tree = match base {
            Some(s) => self
                .repo
                .find_commit(s.commit)
                .and_then(|c| c.tree_id())
                .git(|| format!("cannot read the tree of {}", s.commit))?
                .detach(),
            None => ObjectId::empty_tree(self.repo.object_hash()),
        };
        // gix's own editor checks the name of every entry of every tree it rewrites, so one hostile entry (`.git`,
        // `..`) in `tasks/` would stop every op. The paths we write are built from validated ids; what others put
        // there is carried along untouched (and reported by reads).
        let mut editor = self.repo.edit_tree(base_tree).git(|| "cannot edit the state tree".into())?.detach();
        if let Some(cfg) = config {
            let text = toml::to_string(cfg).git(|| "cannot write swarm.toml".into())?;
            let id = self.repo.write_blob(text.as_bytes()).git(|| "cannot write a blob".into())?;
            editor
                .upsert(CONFIG_PATH.split('/'), EntryKind::Blob, id.detach())
                .git(|| "cannot edit the state tree".into())?;
            if base.is_none() {
                let id = self.repo.write_blob(STATE_README.as_bytes()).git(|| "cannot write a blob".into())?;
                editor
                    .upsert(README_PATH.split('/'), EntryKind::Blob, id.detach())
                    .git(|| "cannot edit the state tree".into())?;
            }
        }
        for path in &change.removes {
            editor.remove(path.split('/')).git(|| format!("cannot remove {path}"))?;
        }
        if let Some(spend) = &change.spend {
            let text = toml::to_string(spend).git(|| "cannot write spend.toml".into())?;
            let id = self.repo.write_blob(text.as_bytes()).git(|| "cannot write a blob".into())?;
            editor
                .upsert(SPEND_PATH.split('/'), EntryKind::Blob, id.detach())
                .git(|| "cannot edit the state tree".into())?;
        }
        for (path, text) in &change.files {
            let id = self.repo.write_blob(text.as_bytes()).git(|| "cannot write a blob".into())?;
            editor.upsert(path.split('/'), EntryKind::Blob, id.detach()).git(|| format!("cannot place {path}"))?;
        }
        for w in &change.writes {
            let text = toml::to_string(&w.task).git(|| format!("cannot serialize task {}", w.task.id))?;
            let id = self.repo.write_blob(text.as_bytes()).git(|| "cannot write a blob".into())?;
            editor
                .upsert(w.path.split('/'), EntryKind::Blob, id.detach())
                .git(|| format!("cannot place {}", w.path))?;
        }
        let tree = editor
            .write(|tree| self.repo.write_object(tree).map(gix::Id::detach))
            .git(|| "cannot write the state tree".into())?;
        let parents: Vec<ObjectId> = base.map(|s| s.commit).into_iter().collect();
        self.write_commit(tree, &parents, &commit_message(change), who, now)
    }

    /// A commit of `tree` on `parents` by `who` at `now`.
    pub fn write_commit(
        &self,
        tree: ObjectId,
        parents: &[ObjectId],
        message: &str,
        who: &Identity,
        now: Timestamp,
    ) -> Result<ObjectId, StoreError> {
        let sig = gix::actor::Signature {
            name: who.name.as_str().into(),
            email: who.email.as_str().into(),
            time: gix::date::Time { seconds: now.secs() as i64, offset: 0 },
        };
        let commit = gix::objs::Commit {
            tree,
            parents: parents.iter().copied().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: message.into(),
            extra_headers: vec![],
        };
        Ok(self.repo.write_object(&commit).git(|| "cannot write the state commit".into())?.detach())
    }

    /// The text of the file at `path` (`a/b/c`) in the state tree of `commit`; `None` when there is no such file.
    /// A file that is not UTF-8 or bigger than `limit` is an `Err` with the reason (callers report it and go on).
    pub fn read_text(
        &self,
        commit: ObjectId,
        path: &str,
        limit: u64,
    ) -> Result<Option<Result<String, String>>, StoreError> {
        let Some(entry) = self.lookup(commit, path)? else { return Ok(None) };
        if !matches!(entry.0, EntryKind::Blob | EntryKind::BlobExecutable) {
            return Ok(Some(Err(format!("is a {:?}, not a file", entry.0))));
        }
        Ok(Some(
            self.blob_limited(entry.1, limit).and_then(|b| String::from_utf8(b).map_err(|e| format!("not UTF-8: {e}"))),
        ))
    }

    /// The files directly in the folder `dir` of the state tree of `commit`: (name, blob id), sorted by name.
    pub fn list_dir(&self, commit: ObjectId, dir: &str) -> Result<Vec<(String, ObjectId)>, StoreError> {
        let Some((EntryKind::Tree, id)) = self.lookup(commit, dir)? else { return Ok(vec![]) };
        let tree = self.repo.find_tree(id).git(|| format!("cannot read {dir} of {commit}"))?;
        let mut out = Vec::new();
        for entry in tree.iter() {
            let entry = entry.git(|| format!("cannot decode {dir} of {commit}"))?;
            if matches!(entry.mode().kind(), EntryKind::Blob | EntryKind::BlobExecutable)
                && let Ok(name) = entry.filename().to_str()
            {
                out.push((name.to_string(), entry.object_id()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The text of a blob, as [`Store::read_text`] gives it.
    pub fn blob_text(&self, id: ObjectId, limit: u64) -> Result<String, String> {
        self.blob_limited(id, limit).and_then(|b| String::from_utf8(b).map_err(|e| format!("not UTF-8: {e}")))
    }

    fn lookup(&self, commit: ObjectId, path: &str) -> Result<Option<(EntryKind, ObjectId)>, StoreError> {
        let c = self.repo.find_commit(commit).git(|| format!("cannot read state commit {commit}"))?;
        let tree = c.tree().git(|| format!("cannot read the tree of {commit}"))?;
        let entry = tree.lookup_entry_by_path(path).git(|| format!("cannot look up {path} in {commit}"))?;
        Ok(entry.map(|e| (e.mode().kind(), e.object_id())))
    }

    /// Move each ref from its expected value (None: must not exist) to its new one, all or none (a gix transaction
    /// locks them all before it changes any). `Ok(false)` when a ref was not where expected (a lost race) or its
    /// lock was held by another writer at that moment.
    pub(crate) fn cas_refs(
        &self,
        updates: &[(&str, Option<ObjectId>, ObjectId)],
        why: &str,
    ) -> Result<bool, StoreError> {
        let edits = updates
            .iter()
            .map(|(name, expected, new)| {
                Ok(RefEdit {
                    change: RefChange::Update {
                        log: LogChange { mode: RefLog::AndReference, force_create_reflog: false, message: why.into() },
                        expected: match expected {
                            Some(id) => PreviousValue::MustExistAndMatch(gix::refs::Target::Object(*id)),
                            None => PreviousValue::MustNotExist,
                        },
                        new: gix::refs::Target::Object(*new),
                    },
                    name: (*name).try_into().git(|| format!("bad ref name {name}"))?,
                    deref: false,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        match self.repo.edit_references(edits) {
            Ok(_) => Ok(true),
            Err(e) => {
                // A mismatch or a held lock is a lost race; anything else is a real error. Tell them apart by
                // looking again: a ref moved, or its lock file is there.
                for (name, expected, _) in updates {
                    let now = self.read_ref(name)?;
                    let lock = self.repo.common_dir().join(format!("{name}.lock"));
                    if now != *expected || lock.exists() || is_lock_error(&e.to_string()) {
                        return Ok(false);
                    }
                }
                // A write that failed on the way (a reflog on a full or broken disk) may pass on the next try, as a
                // remote's "failed to update ref" does: a refusal, which the loop retries (and gives up on, as
                // stuck, when it keeps coming while the ref stands still).
                if is_write_error(&e.to_string()) {
                    return Ok(false);
                }
                let names: Vec<&str> = updates.iter().map(|u| u.0).collect();
                Err(StoreError::Git {
                    context: format!("cannot update {}", names.join(" and ")),
                    message: e.to_string(),
                })
            }
        }
    }

    /// Copy `tip` and every object it reaches that `to` lacks (commits, trees, blobs) from this object database into
    /// `to`, in-process: how code moves between a clone and a remote on a local path without `git fetch`/`git push`.
    /// Stops at every object `to` has already (a repository that has a commit has its history). Returns how many
    /// objects were copied.
    pub(crate) fn copy_reachable(&self, to: &Store, tip: ObjectId) -> Result<usize, StoreError> {
        use gix::objs::Write as _;
        let hash = self.repo.object_hash();
        // Depth first, each object written only after everything it points to: a copy cut short leaves no object
        // in `to` whose children are missing (a later copy stops at objects `to` has, and would trust it).
        let mut stack = vec![(tip, false)];
        let mut seen = std::collections::HashSet::new();
        let mut copied = 0;
        while let Some((id, children_done)) = stack.pop() {
            if children_done {
                let obj = self.repo.find_object(id).git(|| format!("cannot read object {id}"))?;
                let written =
                    to.repo.objects.write_buf(obj.kind, &obj.data).git(|| format!("cannot write object {id}"))?;
                if written != id {
                    return Err(StoreError::Git {
                        context: format!("copying object {id}"),
                        message: format!("it was written as {written}"),
                    });
                }
                copied += 1;
                continue;
            }
            if !seen.insert(id) || to.repo.has_object(id) {
                continue;
            }
            stack.push((id, true));
            let obj = self.repo.find_object(id).git(|| format!("cannot read object {id}"))?;
            match obj.kind {
                gix::objs::Kind::Commit => {
                    let c = gix::objs::CommitRef::from_bytes(&obj.data, hash)
                        .git(|| format!("cannot decode commit {id}"))?;
                    stack.push((c.tree(), false));
                    stack.extend(c.parents().map(|p| (p, false)));
                }
                gix::objs::Kind::Tree => {
                    let t =
                        gix::objs::TreeRef::from_bytes(&obj.data, hash).git(|| format!("cannot decode tree {id}"))?;
                    // Submodule entries name commits of another repository: not ours to copy.
                    stack.extend(t.entries.iter().filter(|e| !e.mode.is_commit()).map(|e| (e.oid.to_owned(), false)));
                }
                gix::objs::Kind::Tag => {
                    let t = gix::objs::TagRef::from_bytes(&obj.data, hash).git(|| format!("cannot decode tag {id}"))?;
                    stack.push((t.target(), false));
                }
                gix::objs::Kind::Blob => {}
            }
        }
        Ok(copied)
    }

    /// Point `name` at `new` whatever it was (for the local mirror of a remote's state ref).
    pub fn set_ref(&self, name: &str, new: ObjectId, why: &str) -> Result<(), StoreError> {
        let edit = RefEdit {
            change: RefChange::Update {
                log: LogChange { mode: RefLog::AndReference, force_create_reflog: false, message: why.into() },
                expected: PreviousValue::Any,
                new: gix::refs::Target::Object(new),
            },
            name: name.try_into().git(|| format!("bad ref name {name}"))?,
            deref: false,
        };
        self.repo.edit_reference(edit).git(|| format!("cannot update {name}"))?;
        Ok(())
    }

    /// Delete the ref `name` (a private mirror of this clone).
    pub(crate) fn delete_ref(&self, name: &str) -> Result<(), StoreError> {
        let edit = RefEdit {
            change: RefChange::Delete { expected: PreviousValue::Any, log: RefLog::AndReference },
            name: name.try_into().git(|| format!("bad ref name {name}"))?,
            deref: false,
        };
        self.repo.edit_reference(edit).git(|| format!("cannot delete {name}"))?;
        Ok(())
    }

    /// Every op adds a few loose objects (and every fetch a small pack); reading thousands of them costs far more
    /// than reading one pack. When git's own thresholds are passed (about 6,700 loose objects, estimated from
    /// `objects/17` as git does, or 50 packs), run `git gc --auto`, which packs in the background. `git push` to a
    /// remote does the same through `receive.autogc`; this covers the objects we write in-process.
    pub(crate) fn maybe_gc(&self) {
        let objects = self.repo.common_dir().join("objects");
        let count = |dir: std::path::PathBuf, ext: Option<&str>| -> usize {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.filter_map(Result::ok)
                        .filter(|e| ext.is_none_or(|x| e.path().extension().is_some_and(|got| got == x)))
                        .count()
                })
                .unwrap_or(0)
        };
        let loose_estimate = count(objects.join("17"), None) * 256;
        let packs = count(objects.join("pack"), Some("pack"));
        if loose_estimate > 6700 || packs > 50 {
            // Through the crate's git builder: no hooks (`pre-auto-gc` is one an agent could plant).
            let _ = crate::gitcmd::local(self.repo.common_dir())
                .arg("--git-dir")
                .arg(self.repo.common_dir())
                .args(["gc", "--auto", "--quiet"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    /// Is `wanted` the commit `tip` or one of its first `depth` first-parent ancestors?
    pub fn has_ancestor(&self, tip: ObjectId, wanted: ObjectId, depth: usize) -> Result<bool, StoreError> {
        let mut at = tip;
        for _ in 0..depth {
            if at == wanted {
                return Ok(true);
            }
            let c = self.repo.find_commit(at).git(|| format!("cannot read state commit {at}"))?;
            match c.parent_ids().next() {
                Some(p) => at = p.detach(),
                None => return Ok(false),
            }
        }
        Ok(false)
    }

    /// Visit the first-parent line from `tip`, newest first, at most `limit` commits, until `visit` says stop.
    fn first_parents(
        &self,
        tip: ObjectId,
        limit: usize,
        mut visit: impl FnMut(ObjectId, &gix::Commit<'_>) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let mut at = tip;
        for _ in 0..limit {
            let c = self.repo.find_commit(at).git(|| format!("cannot read commit {at}"))?;
            if visit(at, &c)? {
                return Ok(());
            }
            match c.parent_ids().next() {
                Some(p) => at = p.detach(),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// The newest commit on the first-parent line from `tip` that a runner's landing wrote for `task` under a claim
    /// whose epoch is in `epochs`: the code of a task that landed. Its trailers say so (`Swarm-Task: <task>` alone
    /// and `Swarm-Epoch: <n>`, [`crate::trailer::read`]); a commit that names the task otherwise — the
    /// `commit-msg` hook's trailer, a person's, a forger's, an epoch no claim of the task had — is never its code,
    /// and is reported in [`Landed::refused`]. The walk stops at `stop` (a commit known not to hold it), or after
    /// `limit` commits.
    pub fn landed_commit(
        &self,
        tip: ObjectId,
        task: &str,
        stop: Option<ObjectId>,
        epochs: std::ops::RangeInclusive<u64>,
        limit: usize,
    ) -> Result<Landed, StoreError> {
        let mut found = Landed::default();
        self.first_parents(tip, limit, |at, c| {
            if Some(at) == stop {
                return Ok(true);
            }
            let msg = c.message_raw_sloppy();
            // Only a message that holds the id can name it: most are not parsed at all.
            if msg.find(task.as_bytes()).is_none() {
                return Ok(false);
            }
            match crate::trailer::read(&msg.to_str_lossy()) {
                Mark::Landing { task: t, epoch } if t == task && epochs.contains(&epoch) => {
                    found.code = Some((at, epoch));
                    return Ok(true);
                }
                Mark::Landing { task: t, epoch } if t == task => {
                    if epoch > *epochs.end() && found.later.is_none() {
                        found.later = Some((at, epoch));
                    }
                    found.refuse(at, no_such_claim(task, epoch, &epochs));
                }
                Mark::Claims { tasks, why } if tasks.iter().any(|t| t == task) => found.refuse(at, why),
                _ => {}
            }
            Ok(false)
        })?;
        Ok(found)
    }

    /// [`Store::landed_commit`] for many tasks in one walk: for each of `tasks` (with the epochs of its claims) that
    /// a commit of the first-parent line from `tip` (within `limit` commits) is a runner's landing of, the newest
    /// such commit and its epoch; and the commits that name one of them without being its landing.
    pub fn landed_commits(
        &self,
        tip: ObjectId,
        tasks: &BTreeMap<String, std::ops::RangeInclusive<u64>>,
        limit: usize,
    ) -> Result<(Landings, Refused), StoreError> {
        let mut found = BTreeMap::new();
        let mut refused = Vec::new();
        self.first_parents(tip, limit, |at, c| {
            let msg = c.message_raw_sloppy();
            if !msg.windows(6).any(|w| w.eq_ignore_ascii_case(b"swarm-")) {
                return Ok(false);
            }
            match crate::trailer::read(&msg.to_str_lossy()) {
                Mark::Landing { task, epoch } => match tasks.get(&task) {
                    Some(epochs) if epochs.contains(&epoch) => {
                        found.entry(task).or_insert((at, epoch));
                    }
                    Some(epochs) if !found.contains_key(&task) && refused.len() < MAX_REFUSED => {
                        let why = no_such_claim(&task, epoch, epochs);
                        refused.push((task, at, why));
                    }
                    _ => {}
                },
                Mark::Claims { tasks: named, why } => {
                    for t in named.into_iter().filter(|t| tasks.contains_key(t) && !found.contains_key(t)) {
                        if refused.len() < MAX_REFUSED {
                            refused.push((t, at, why.clone()));
                        }
                    }
                }
                Mark::None => {}
            }
            Ok(found.len() == tasks.len())
        })?;
        Ok((found, refused))
    }

    /// Point the private mirror ref at `new`, best effort: it is a cache (objects anchor, negotiation hint). A lock
    /// left on it by a killed process is cleared once it is clearly stale.
    pub(crate) fn set_mirror(&self, name: &str, new: ObjectId) {
        // Mostly it is there already (our own push set it, or nothing changed): no write, no reflog line.
        if self.read_ref(name).ok().flatten() == Some(new) {
            return;
        }
        self.clear_stale_lock(name);
        let _ = self.set_ref(name, new, "git swarm: mirror");
    }

    /// Remove `<name>.lock` if it is older than a live writer ever holds one. Only for refs that nothing but
    /// git-swarm writes and that are caches (the mirror), never for the state ref itself.
    pub(crate) fn clear_stale_lock(&self, name: &str) {
        remove_if_stale(&self.repo.common_dir().join(format!("{name}.lock")));
    }

    /// [`Store::clear_stale_lock`] for every ref of this clone's private records (`PRIVATE_REFS`: the mirrors and
    /// what the clone saw of the target), whether or not anything writes that ref again: a runner SIGKILLed while it
    /// set one leaves the lock, and git never removes it. Returns how many were removed.
    pub fn clear_stale_private_locks(&self) -> usize {
        fn walk(dir: &std::path::Path, removed: &mut usize) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries.flatten() {
                let path = e.path();
                match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&path, removed),
                    Ok(t) if t.is_file() && path.extension().is_some_and(|x| x == "lock") => {
                        *removed += usize::from(remove_if_stale(&path));
                    }
                    _ => {}
                }
            }
        }
        let mut removed = 0;
        for prefix in PRIVATE_REFS {
            walk(&self.repo.common_dir().join(prefix), &mut removed);
        }
        removed
    }

    /// The ops on the state ref from `tip`, newest first, at most `limit`.
    pub fn log(&self, tip: ObjectId, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        Ok(self.log_until(tip, None, limit)?.0)
    }

    /// [`Store::log`] that stops before `stop` (a tip read before: what a live board has already); `true` when it
    /// met it, so that the ops returned are all those since.
    pub fn log_until(
        &self,
        tip: ObjectId,
        stop: Option<ObjectId>,
        limit: usize,
    ) -> Result<(Vec<LogEntry>, bool), StoreError> {
        let walk = self.repo.rev_walk([tip]).all().git(|| "cannot walk the state ref".into())?;
        let mut out = Vec::new();
        for info in walk.take(limit) {
            let info = info.git(|| "cannot walk the state ref".into())?;
            if Some(info.id) == stop {
                return Ok((out, true));
            }
            let c = info.object().git(|| "cannot read a state commit".into())?;
            let msg = c.message_raw_sloppy().to_str_lossy().into_owned();
            let time = c.time().map(|t| Timestamp::from_secs(t.seconds.max(0) as u64)).unwrap_or_default();
            out.push(LogEntry::parse(info.id.to_hex().to_string(), time, &msg));
        }
        Ok((out, false))
    }
}

/// The layout the ops write, checked so that an op by id can look its task up instead of walking every name: under
/// `tasks/`, shard folders (`state::shard`) holding `<id>.toml` files of ids of that shard, and `done/`, `failed/`,
/// `cancelled/` holding such shard folders. Files that are not `.toml` (which every read skips) may sit anywhere;
/// anything else — a flat task file, another folder, a misplaced id, a link, a name that is no id — is not
/// canonical, and reads of that board walk every name. Verdicts are kept by tree id (content: invariant 7), so a
/// tree is checked once, and a new one against the last checked ancestor: only the folders that changed.
impl Store {
    /// Is the `tasks/` tree `tasks` of `commit` canonical?
    fn canonical(&self, commit: ObjectId, tasks: ObjectId) -> bool {
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

    fn tasks_tree(&self, commit: ObjectId) -> Option<ObjectId> {
        let tree = self.repo.find_commit(commit).ok()?.tree().ok()?;
        let entry = tree.find_entry(TASKS_DIR)?;
        (entry.mode().kind() == EntryKind::Tree).then(|| entry.object_id())
    }

    fn canonical_marker(&self, tree: ObjectId) -> Option<std::path::PathBuf> {
        // The rule's version in the folder's name: a changed rule never trusts an old verdict.
        Some(self.cache_dir.as_ref()?.join(CANONICAL_DIR).join(tree.to_hex().to_string()))
    }

    fn canonical_known(&self, tree: ObjectId) -> bool {
        self.canonical.borrow().contains(&tree) || self.canonical_marker(tree).is_some_and(|p| p.exists())
    }

    fn remember_canonical(&self, tree: ObjectId) {
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
    fn entries(&self, tree: ObjectId) -> Option<Vec<(String, EntryKind, ObjectId)>> {
        let tree = self.repo.find_tree(tree).ok()?;
        let mut out = Vec::new();
        for e in tree.iter() {
            let e = e.ok()?;
            out.push((e.filename().to_str().ok()?.to_string(), e.mode().kind(), e.object_id()));
        }
        Some(out)
    }

    /// `tasks/` against `base` (a canonical `tasks/` tree, or none: everything is checked).
    fn check_root(&self, tree: ObjectId, base: Option<ObjectId>) -> Option<bool> {
        self.check_folder(tree, base, true)
    }

    /// A folder of shard folders (`tasks/` itself when `top`, which also holds the finished ones' folders), against
    /// the same folder of a canonical tree: what did not change is not looked at again.
    fn check_folder(&self, tree: ObjectId, base: Option<ObjectId>, top: bool) -> Option<bool> {
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

    fn check_shard(&self, tree: ObjectId, shard: &str) -> Option<bool> {
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

    /// The files of `want` and of their deps (live ones parsed, as a full read parses them) in a canonical `tasks/`
    /// tree, in the order a walk finds them; `None` when the tree is not canonical or cannot be read (the caller
    /// walks it then).
    fn probe(
        &self,
        commit: ObjectId,
        tasks: ObjectId,
        want: &std::collections::BTreeSet<String>,
        commit_hex: &str,
        problems: &mut Vec<Problem>,
    ) -> Option<Vec<Found>> {
        if !self.canonical(commit, tasks) {
            return None;
        }
        let root = self.entries(tasks)?;
        let mut found = Vec::new();
        // Kept aside until the lookup is known to hold: a walk would report them again.
        let mut seen = Vec::new();
        let mut look = |id: &str, found: &mut Vec<Found>| -> Option<()> {
            let shard = crate::state::shard(id);
            let file = format!("{id}.toml");
            for (name, kind, oid) in &root {
                if *kind != EntryKind::Tree {
                    continue;
                }
                let closed = name.parse::<Status>().ok().filter(|s| s.is_final());
                let (dir, at) = match closed {
                    Some(_) => {
                        let Some((_, _, sub)) =
                            self.entries(*oid)?.into_iter().find(|(n, k, _)| *n == shard && *k == EntryKind::Tree)
                        else {
                            continue;
                        };
                        (format!("{TASKS_DIR}/{name}/{shard}"), sub)
                    }
                    None if *name == shard => (format!("{TASKS_DIR}/{name}"), *oid),
                    None => continue,
                };
                let Some((_, _, blob)) = self.entries(at)?.into_iter().find(|(n, _, _)| *n == file) else { continue };
                let path = format!("{dir}/{file}");
                let entry = match closed {
                    Some(status) => Entry::Closed(status),
                    // A dep is parsed too, as a full read parses it: a file in a live place may say `done`.
                    None => match self.read_task(blob, id) {
                        Ok(task) => Entry::Live(Box::new(task)),
                        Err(message) => {
                            seen.push(Problem { path, commit: commit_hex.to_string(), message });
                            continue;
                        }
                    },
                };
                found.push(Found { id: id.to_string(), path, entry });
            }
            Some(())
        };
        for id in want {
            look(id, &mut found)?;
        }
        for dep in deps_of_parsed(&found).difference(want) {
            look(dep, &mut found)?;
        }
        problems.append(&mut seen);
        Some(found)
    }
}

/// The deps of the live tasks parsed so far (an op by id reads them too).
fn deps_of_parsed(found: &[Found]) -> std::collections::BTreeSet<String> {
    found
        .iter()
        .filter_map(|f| match &f.entry {
            Entry::Live(t) => Some(t.deps.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Are the entries strictly in git's tree order (a name of a tree compares as if it ended in `/`)? A tree made by
/// hand may repeat a name or be out of order; a walk reads every entry, a lookup only the first it meets.
fn in_tree_order(entries: &[(String, EntryKind, ObjectId)]) -> bool {
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
fn is_shard_name(name: &str) -> bool {
    name == "xx" || (name.len() == 2 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Where the verdicts are kept under the cache folder (the version of the rule they follow).
const CANONICAL_DIR: &str = "canonical-v1";
/// How many commits back a new `tasks/` tree looks for one already checked.
const CANONICAL_ANCESTORS: usize = 8;
/// How many verdicts a clone keeps on disk (the folder starts over when full).
const CANONICAL_KEPT: usize = 4096;

/// A readable task file found by a walk of `tasks/`.
struct Found {
    id: String,
    path: String,
    entry: Entry,
}

enum Entry {
    /// A live task, read (boxed: a walk holds one entry per file).
    Live(Box<Task>),
    /// A finished task, read (full reads).
    Finished(Box<Task>),
    /// A finished task known by its path (lazy reads).
    Closed(Status),
    /// A live task known by its path and blob (reads for an op about other tasks).
    Unread(ObjectId),
}

/// What an entry of a folder of `tasks/` is to a walk.
enum Item<'n> {
    /// A folder to walk; `Some` under `tasks/<status>/` of a finished status.
    Folder(Option<Status>),
    /// A task file, by its name without `.toml`.
    File(&'n str),
    /// Not a task file (another extension): not read.
    Skip,
    /// A problem with the entry itself.
    Bad(String),
}

/// `name` of kind `kind`, in a folder `depth` below `tasks/` (under a finished status's folder when `closed`).
fn item(name: &str, kind: EntryKind, depth: usize, closed: Option<Status>) -> Item<'_> {
    match kind {
        EntryKind::Tree if depth + 1 >= MAX_DEPTH => {
            Item::Bad(format!("nested deeper than {MAX_DEPTH} folders; not read"))
        }
        // `tasks/done/`, `tasks/failed/`, `tasks/cancelled/` hold the finished tasks.
        EntryKind::Tree => Item::Folder(match (depth, name.parse::<Status>()) {
            (0, Ok(st)) if st.is_final() => Some(st),
            _ => closed,
        }),
        _ if !name.ends_with(".toml") => Item::Skip,
        EntryKind::Link => Item::Bad("is a symbolic link, not a task file".into()),
        EntryKind::Commit => Item::Bad("is a submodule entry, not a task file".into()),
        EntryKind::Blob | EntryKind::BlobExecutable => match name.strip_suffix(".toml") {
            Some(stem) => Item::File(stem),
            None => Item::Skip,
        },
    }
}

/// Which tasks a read parses.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// Every task.
    Full,
    /// The live tasks; finished ones by path.
    Live,
    /// These live tasks and their deps; the others by id (or not at all when looked up).
    Tasks { want: &'a std::collections::BTreeSet<String>, every_name: bool },
}

/// Put the files found into the board. One file per id is used: the first live one in tree order, else the first
/// finished one. Every other file with that id is a problem, and a twin that writing the task will delete.
/// Returns the ids of the live tasks that were not parsed.
fn resolve(
    found: Vec<Found>,
    commit: &str,
    board: &mut Board,
    problems: &mut Vec<Problem>,
) -> std::collections::BTreeSet<String> {
    let mut unread = Vec::new();
    // In id order, one per id: the maps are built in one go (a bulk build, not an insert per task).
    let (mut live, mut closed) = (Vec::new(), Vec::new());
    // Grouped by id, tree order kept within a group (a stable sort; a walk of the fan-out is nearly sorted already).
    let mut found = found;
    found.sort_by(|a, b| a.id.cmp(&b.id));
    let mut rest = found.into_iter().peekable();
    while let Some(first) = rest.next() {
        // One file per id is the rule: no group is built for it.
        let chosen = if rest.peek().is_some_and(|n| n.id == first.id) {
            let mut files = vec![first];
            while let Some(next) = rest.next_if(|f| f.id == files[0].id) {
                files.push(next);
            }
            let pick = files.iter().position(|f| matches!(f.entry, Entry::Live(_) | Entry::Unread(_))).unwrap_or(0);
            let chosen = files.remove(pick);
            for f in &files {
                problems.push(Problem {
                    path: f.path.clone(),
                    commit: commit.to_string(),
                    message: format!("a second file for task {}; {} is used", chosen.id, chosen.path),
                });
            }
            board.twins.insert(chosen.id.clone(), files.into_iter().map(|f| f.path).collect());
            chosen
        } else {
            first
        };
        let Found { id, path, entry } = chosen;
        match entry {
            Entry::Live(task) | Entry::Finished(task) => live.push((id, Stored { path, task: *task })),
            Entry::Closed(status) => closed.push((id, Closed { status, path })),
            Entry::Unread(_) => unread.push(id),
        }
    }
    fill(&mut board.tasks, live);
    fill(&mut board.closed, closed);
    unread.into_iter().collect()
}

/// Add `sorted` (in key order, no key twice) to `map`: built in one go when `map` is empty.
fn fill<V: Clone>(map: &mut imbl::OrdMap<String, V>, sorted: Vec<(String, V)>) {
    if map.is_empty() {
        *map = sorted.into_iter().collect();
    } else {
        map.extend(sorted);
    }
}

/// Where a walk of `tasks/` is.
#[derive(Clone, Copy)]
struct Walk<'a> {
    commit: &'a str,
    full: bool,
    /// Under `tasks/<status>/` of a finished status.
    closed: Option<Status>,
    /// The live tasks to parse, when not all.
    want: Option<&'a std::collections::BTreeSet<String>>,
}

/// An update that failed writing (not a mismatch, not a lock): a reflog, a full disk.
fn is_write_error(message: &str) -> bool {
    ["reflog", "No space left", "Operation not permitted", "Read-only file system", "Input/output error"]
        .iter()
        .any(|m| message.contains(m))
}

/// What a walk of the target found of one task's code ([`Store::landed_commit`]).
#[derive(Debug, Default)]
pub struct Landed {
    /// The newest commit a runner's landing wrote for one of the task's claims, and that claim's epoch.
    pub code: Option<(ObjectId, u64)>,
    /// Commits on the way that name the task but are no landing of a claim of it, and why (at most
    /// [`MAX_REFUSED`]).
    pub refused: Vec<(ObjectId, String)>,
    /// The newest of those that is a landing of an epoch later than any in `epochs`: to a holder of the claim of
    /// the last epoch asked for, a sign that a later claim took the task over and landed it (also in `refused`).
    pub later: Option<(ObjectId, u64)>,
}

/// Per task, the commit a runner's landing of one of its claims put on the target, and that claim's epoch.
pub type Landings = BTreeMap<String, (ObjectId, u64)>;

/// Commits that name a task without being a landing of a claim of it: task, commit, why.
pub type Refused = Vec<(String, ObjectId, String)>;

/// How many commits that only name a task a walk reports.
const MAX_REFUSED: usize = 10;

impl Landed {
    fn refuse(&mut self, at: ObjectId, why: String) {
        if self.refused.len() < MAX_REFUSED {
            self.refused.push((at, why));
        }
    }
}

/// Why a landing's trailers under `epoch` are not a claim of `task` that `epochs` allows.
fn no_such_claim(task: &str, epoch: u64, epochs: &std::ops::RangeInclusive<u64>) -> String {
    match epochs.end() {
        0 => format!("Swarm-Epoch: {epoch}, but {task} was never claimed"),
        end if epoch > *end => format!("Swarm-Epoch: {epoch}, but no claim of {task} had it (its epoch is {end})"),
        _ => format!("Swarm-Epoch: {epoch} is not the epoch of a claim whose code this can be"),
    }
}

fn is_lock_error(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("lock") || m.contains("must exist") || m.contains("did not match") || m.contains("already exist")
}

/// One op of the audit log, parsed from its commit message trailers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogEntry {
    pub commit: String,
    pub time: Timestamp,
    pub op: Option<String>,
    pub task: Option<String>,
    pub agent: Option<String>,
    pub epoch: Option<u64>,
    pub summary: String,
    /// The process that published it when that is not `agent` (a runner's desk: `Swarm-Writer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    /// Further ops of the same commit (a landing that also claimed the next task; a batch of several agents'
    /// landings): op, task, epoch, and the op's agent when it is not the commit's.
    pub also: Vec<AlsoOp>,
}

/// A further op of a commit ([`LogEntry::also`]): op, task, epoch, agent (when not the commit's).
pub type AlsoOp = (String, Option<String>, Option<u64>, Option<String>);

impl LogEntry {
    /// Who published the op: its writer when the commit names one (a runner's desk), else its agent.
    pub(crate) fn publisher(&self) -> Option<&str> {
        self.writer.as_deref().or(self.agent.as_deref())
    }

    pub fn parse(commit: String, time: Timestamp, msg: &str) -> LogEntry {
        let summary = msg.lines().next().unwrap_or_default().to_string();
        let mut e = LogEntry {
            commit,
            time,
            op: None,
            task: None,
            agent: None,
            epoch: None,
            summary,
            writer: None,
            also: vec![],
        };
        // Each `Swarm-Op` starts a group; the first group is the commit's op, later ones go to `also`.
        let mut groups = 0usize;
        for line in msg.lines().skip(1) {
            let Some((k, v)) = line.split_once(": ") else {
                continue;
            };
            let v = v.trim().to_string();
            match (k, groups) {
                ("Swarm-Op", 0) => {
                    e.op = Some(v);
                    groups = 1;
                }
                ("Swarm-Op", _) => {
                    e.also.push((v, None, None, None));
                    groups += 1;
                }
                ("Swarm-Agent", 0 | 1) => e.agent = Some(v),
                ("Swarm-Agent", _) => {
                    if let Some(last) = e.also.last_mut() {
                        last.3 = Some(v);
                    }
                }
                ("Swarm-Writer", _) => e.writer = Some(v),
                ("Swarm-Task", 0 | 1) => e.task = Some(v),
                ("Swarm-Epoch", 0 | 1) => e.epoch = v.parse().ok(),
                ("Swarm-Task", _) => {
                    if let Some(last) = e.also.last_mut() {
                        last.1 = Some(v);
                    }
                }
                ("Swarm-Epoch", _) => {
                    if let Some(last) = e.also.last_mut() {
                        last.2 = v.parse().ok();
                    }
                }
                _ => {}
            }
        }
        e
    }
}

/// The commit message of an op: a subject and trailers that `git log` and `git swarm log` read back.
pub(crate) fn commit_message(change: &Change) -> String {
    let mut m = format!("{}\n\nSwarm-Op: {}\n", change.summary, change.op);
    if let Some(t) = &change.task {
        m.push_str(&format!("Swarm-Task: {t}\n"));
    }
    m.push_str(&format!("Swarm-Agent: {}\n", change.agent));
    if let Some(w) = change.writer.as_ref().filter(|w| **w != change.agent) {
        m.push_str(&format!("Swarm-Writer: {w}\n"));
    }
    if let Some(e) = change.epoch {
        m.push_str(&format!("Swarm-Epoch: {e}\n"));
    }
    for more in &change.also {
        m.push_str(&format!("Swarm-Op: {}\n", more.op));
        if let Some(t) = &more.task {
            m.push_str(&format!("Swarm-Task: {t}\n"));
        }
        if let Some(a) = &more.agent {
            m.push_str(&format!("Swarm-Agent: {a}\n"));
        }
        if let Some(e) = more.epoch {
            m.push_str(&format!("Swarm-Epoch: {e}\n"));
        }
    }
    m
}

const STATE_README: &str = "\
This tree is the task board of a git swarm (https://crates.io/crates/git-swarm).
It lives in a ref under refs/swarm/ and is never checked out: edit it with `git swarm`, which changes it only by
compare-and-swap. swarm.toml holds the settings; every tasks/**/<id>.toml is one task; each commit is one op.
";

/// The refs of a clone that only git-swarm writes and whose locks a live writer holds for milliseconds: the mirrors
/// of the state ref and of branches, and the record of the target's tip the clone accepted.
const PRIVATE_REFS: [&str; 3] = ["refs/swarm-remotes", "refs/swarm-branches", "refs/swarm-seen"];

/// Remove the lock file `lock` if it is older than a live writer ever holds one (10 s); `true` when removed.
fn remove_if_stale(lock: &std::path::Path) -> bool {
    let stale = std::fs::metadata(lock)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > std::time::Duration::from_secs(10)));
    stale && std::fs::remove_file(lock).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_with_a_repeated_or_unsorted_name_is_not_in_tree_order() {
        let id = ObjectId::empty_tree(gix::hash::Kind::Sha1);
        let e = |n: &str, k: EntryKind| (n.to_string(), k, id);
        assert!(in_tree_order(&[e("ab", EntryKind::Tree), e("done", EntryKind::Tree), e("e0", EntryKind::Tree)]));
        // `done/` sorts after `done.toml`, as git sorts it.
        assert!(in_tree_order(&[e("done.toml", EntryKind::Blob), e("done", EntryKind::Tree)]));
        assert!(!in_tree_order(&[e("ab", EntryKind::Tree), e("ab", EntryKind::Tree)]));
        assert!(!in_tree_order(&[e("t-ab1.toml", EntryKind::Blob), e("t-ab1.toml", EntryKind::Blob)]));
        assert!(!in_tree_order(&[e("e0", EntryKind::Tree), e("ab", EntryKind::Tree)]));
    }

    #[test]
    fn log_entries_read_their_trailers() {
        let change = Change {
            op: "claim",
            agent: "alice".into(),
            task: Some("t-1".into()),
            epoch: Some(3),
            summary: "claim t-1: x".into(),
            writes: vec![],
            removes: vec![],
            ..Default::default()
        };
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&change));
        assert_eq!(
            (e.op.as_deref(), e.task.as_deref(), e.agent.as_deref(), e.epoch, e.summary.as_str()),
            (Some("claim"), Some("t-1"), Some("alice"), Some(3), "claim t-1: x")
        );
        let two = Change {
            op: "done",
            task: Some("t-1".into()),
            epoch: Some(3),
            summary: "done t-1".into(),
            files: [("notes/t-0.md".to_string(), "y".to_string())].into(),
            ..change
        }
        .then(Change {
            op: "claim",
            agent: "alice".into(),
            task: Some("t-2".into()),
            epoch: Some(1),
            summary: "claim t-2".into(),
            files: [("notes/t-1.md".to_string(), "x".to_string())].into(),
            ..Default::default()
        });
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&two));
        assert_eq!((e.op.as_deref(), e.task.as_deref(), e.epoch), (Some("done"), Some("t-1"), Some(3)));
        assert_eq!(e.also, vec![("claim".to_string(), Some("t-2".to_string()), Some(1), None)]);
        assert_eq!(e.summary, "done t-1; claim t-2");
        // A batch: another agent's landing (and its own next claim) in the leader's commit keep their agent.
        let other = |op, task: &str| Change {
            op,
            agent: "bob".into(),
            task: Some(task.into()),
            epoch: Some(2),
            summary: format!("{op} {task}"),
            files: [(format!("notes/{task}.md"), "z".to_string())].into(),
            ..Default::default()
        };
        let batch = two.then(other("done", "t-3").then(other("claim", "t-4")));
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&batch));
        assert_eq!(e.agent.as_deref(), Some("alice"));
        let agents: Vec<_> = e.also.iter().map(|a| (a.1.as_deref(), a.3.as_deref())).collect();
        assert_eq!(agents, [(Some("t-2"), None), (Some("t-3"), Some("bob")), (Some("t-4"), Some("bob"))]);
        // No writer named: the agent published it.
        assert_eq!((e.writer.as_deref(), e.publisher()), (None, Some("alice")));
        // A runner's desk names the process that published the batch; a writer that is the agent is not written.
        let mut published = batch.clone();
        published.writer = Some("p0".into());
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&published));
        assert_eq!((e.agent.as_deref(), e.publisher()), (Some("alice"), Some("p0")));
        assert_eq!(e.also.len(), 3);
        published.writer = Some("alice".into());
        assert!(!commit_message(&published).contains("Swarm-Writer"));
    }
}
