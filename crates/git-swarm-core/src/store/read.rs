//! Reading a board from a state commit: the full walk of `tasks/` (the reference every other read is checked
//! against), the read of a few tasks by id on a canonical layout (`probe`), the settings, the spend, single files.
//! The other readers are fenced under this module: `patch` (a read that patches the last clean one), `kept` (that read
//! kept on disk), `pick` (the index of the next claim).

use super::*;

pub(super) mod kept;
pub(super) mod patch;
pub(crate) mod pick;

impl Store {
    /// The settings a tree's `swarm.toml` entry holds (`None`: there is none), or what is wrong with them.
    pub(super) fn config_entry(&self, entry: Option<(EntryKind, ObjectId)>) -> Result<Config, String> {
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

    pub(super) fn read_scoped(&self, commit: ObjectId, scope: Scope<'_>, patch: bool) -> Result<Snapshot, StoreError> {
        let full = matches!(scope, Scope::Full);
        let (want, look_up) = match scope {
            Scope::Tasks { want, every_name } => (Some(want), !every_name),
            Scope::Full | Scope::Live => (None, false),
        };
        let commit_hex = commit.to_hex().to_string();
        let root = self.root_of(commit, &commit_hex)?;
        let mut problems = Vec::new();
        let mut board = self.settings_board(commit, &commit_hex, root.config, &mut problems);
        if root.cycles.is_some() {
            // The cycle that runs follows the highest record's number (the name is enough: no blob is read).
            let names = self.list_dir(commit, CYCLES_DIR).unwrap_or_default();
            let last = names.iter().filter_map(|(n, _)| n.strip_suffix(".toml")?.parse::<u64>().ok()).max();
            board.cycle = last.map_or(1, |n| n.saturating_add(1));
        }
        self.read_spend(root.spend, &commit_hex, &mut board, &mut problems);
        let at = Walk { commit: &commit_hex, full, closed: None, want };
        match root.tasks {
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
            Some((EntryKind::Tree, id)) => self.walk_tasks(id, &at, &mut board, &mut problems)?,
            Some((kind, _)) => problems.push(Problem {
                path: TASKS_DIR.into(),
                commit: commit_hex.clone(),
                message: format!("is a {kind:?}, not a folder; no task can be read"),
            }),
        }
        Ok(Snapshot { commit, board, problems })
    }

    /// The entries of the state tree at `commit` that a read looks at.
    pub(super) fn root_of(&self, commit: ObjectId, commit_hex: &str) -> Result<Root, StoreError> {
        let c = self.repo.find_commit(commit).git(|| format!("cannot read state commit {commit_hex}"))?;
        let tree_id = c.tree_id().git(|| format!("state commit {commit_hex} has no tree"))?.detach();
        let tree = self.repo.find_tree(tree_id).git(|| format!("cannot read the tree of {commit_hex}"))?;
        let mut root = Root::default();
        for entry in tree.iter() {
            let entry = entry.git(|| format!("cannot decode the tree of {commit_hex}"))?;
            match entry.filename().to_str() {
                Ok(CONFIG_PATH) => root.config = Some((entry.mode().kind(), entry.object_id())),
                Ok(TASKS_DIR) => root.tasks = Some((entry.mode().kind(), entry.object_id())),
                Ok(SPEND_PATH) => root.spend = Some((entry.mode().kind(), entry.object_id())),
                Ok(CYCLES_DIR) if entry.mode().kind() == EntryKind::Tree => root.cycles = Some(entry.object_id()),
                _ => {}
            }
        }
        Ok(root)
    }

    /// An empty board with the settings of `swarm.toml` (`config`). Broken settings do not end the read: the board
    /// is shown with the newest settings that read, and every op but a repair is refused on it
    /// (`Board::broken_settings`).
    pub(super) fn settings_board(
        &self,
        commit: ObjectId,
        commit_hex: &str,
        config: Option<(EntryKind, ObjectId)>,
        problems: &mut Vec<Problem>,
    ) -> Board {
        let (config, broken_settings) = match self.config_entry(config) {
            Ok(cfg) => (cfg, None),
            Err(message) => {
                let problem = Problem { path: CONFIG_PATH.into(), commit: commit_hex.to_string(), message };
                problems.push(problem.clone());
                let (cfg, fallback) = match self.last_good_config(commit) {
                    Some((cfg, at)) => (cfg, Some(at.to_hex().to_string())),
                    None => (Config::default(), None),
                };
                (cfg, Some(crate::state::BrokenSettings { problem, fallback }))
            }
        };
        Board { config, cycle: 1, broken_settings, ..Board::default() }
    }

    /// `spend.toml` into `board.spend`. What was spent is still on every task when it cannot be read; the next op
    /// that records usage starts it again.
    pub(super) fn read_spend(
        &self,
        spend: Option<(EntryKind, ObjectId)>,
        commit_hex: &str,
        board: &mut Board,
        problems: &mut Vec<Problem>,
    ) {
        match spend {
            None => {}
            Some((kind, id)) if kind == EntryKind::Blob || kind == EntryKind::BlobExecutable => {
                let read = self
                    .blob_text(id, crate::usage::MAX_SPEND_BYTES)
                    .and_then(|t| toml::from_str(&t).map_err(|e| format!("invalid TOML: {}", squash(&e))));
                match read {
                    Ok(sp) => board.spend = sp,
                    Err(message) => {
                        problems.push(Problem { path: SPEND_PATH.into(), commit: commit_hex.to_string(), message })
                    }
                }
            }
            Some((kind, _)) => problems.push(Problem {
                path: SPEND_PATH.into(),
                commit: commit_hex.to_string(),
                message: format!("is a {kind:?}, not a file"),
            }),
        }
    }

    /// The full walk of `tasks/` tree `id` (the reference every other read is checked against): every file, or those
    /// of `at.want` and their deps; a clean full or live read is kept for the next read to patch.
    pub(super) fn walk_tasks(
        &self,
        id: ObjectId,
        at: &Walk<'_>,
        board: &mut Board,
        problems: &mut Vec<Problem>,
    ) -> Result<(), StoreError> {
        let problems_before = problems.len();
        let mut found = Vec::new();
        self.read_tasks_dir(id, TASKS_DIR, 0, at, &mut found, problems)?;
        if at.want.is_some() {
            // The deps of the tasks read are parsed too, as a full read parses them: a file in a live place may say
            // `done`, and one that cannot be read leaves its id to a finished twin.
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
                        problems.push(Problem { path: f.path.clone(), commit: at.commit.to_string(), message });
                        false
                    }
                }
            });
        }
        let unread = resolve(found, at.commit, board, problems);
        if at.want.is_some() {
            board.partial = true;
            board.unread = unread;
            return Ok(());
        }
        let clean = problems.len() == problems_before && board.twins.is_empty();
        let read = clean.then(|| patch::LastRead {
            tree: id,
            tasks: board.tasks.clone(),
            closed: board.closed.clone(),
            unkept: 0,
        });
        match &read {
            Some(read) => self.keep(at.full, read),
            None => self.forget_kept(at.full),
        }
        self.last.borrow_mut()[usize::from(at.full)] = read;
        Ok(())
    }

    /// The task maps of `tasks/` tree `tree` patched from the last clean read of the same scope (this store's, else
    /// the one kept on disk), if there is one and what changed since is a plain change of task files; the patched
    /// read is kept for the next, and on disk when the patches since the kept one have parsed enough files.
    pub(super) fn patch_last(&self, tree: ObjectId, full: bool, commit: &str) -> Option<patch::LastRead> {
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

    pub(super) fn read_tasks_dir(
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
    pub(super) fn file_entry(&self, walk: &Walk<'_>, stem: &str, blob: ObjectId) -> Result<Entry, String> {
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

    pub(super) fn blob_limited(&self, id: ObjectId, limit: u64) -> Result<Vec<u8>, String> {
        let header = self.repo.find_header(id).map_err(|e| format!("cannot read blob {id}: {e}"))?;
        if header.size() > limit {
            return Err(format!("{} bytes, more than the limit of {limit}; not read", header.size()));
        }
        let blob = self.repo.find_blob(id).map_err(|e| format!("cannot read blob {id}: {e}"))?;
        Ok(blob.detach().data)
    }

    pub(super) fn read_task(&self, id: ObjectId, stem: &str) -> Result<Task, String> {
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

    pub(super) fn parse_task(&self, id: ObjectId, stem: &str) -> Result<Task, String> {
        let bytes = self.blob_limited(id, model::MAX_TASK_FILE_BYTES)?;
        let text = std::str::from_utf8(&bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        let task: Task = toml::from_str(text).map_err(|e| format!("invalid task: {}", squash(&e)))?;
        task.validate()?;
        if task.id != stem {
            return Err(format!("the file name says {} but the id inside is {}", crate::escape::line(stem), task.id));
        }
        Ok(task)
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

    pub(super) fn lookup(&self, commit: ObjectId, path: &str) -> Result<Option<(EntryKind, ObjectId)>, StoreError> {
        let c = self.repo.find_commit(commit).git(|| format!("cannot read state commit {commit}"))?;
        let tree = c.tree().git(|| format!("cannot read the tree of {commit}"))?;
        let entry = tree.lookup_entry_by_path(path).git(|| format!("cannot look up {path} in {commit}"))?;
        Ok(entry.map(|e| (e.mode().kind(), e.object_id())))
    }

    /// The files of `want` and of their deps (live ones parsed, as a full read parses them) in a canonical `tasks/`
    /// tree, in the order a walk finds them; `None` when the tree is not canonical or cannot be read (the caller
    /// walks it then).
    pub(super) fn probe(
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

/// How many parsed tasks a store keeps by blob id: a runner re-reads the board after every op, and a board of 20,000
/// live tasks must not be parsed again each time (a parsed task is about a kilobyte; the cache starts over when full).
pub(super) const PARSED_CACHE_TASKS: usize = 32_768;

/// How far back a board with broken settings looks for the newest settings that read.
pub(super) const SETTINGS_LOOKBACK: usize = 1_000;

/// Task files nested deeper than this under `tasks/` are reported, not read.
pub(super) const MAX_DEPTH: usize = 8;

/// The deps of the live tasks parsed so far (an op by id reads them too).
pub(super) fn deps_of_parsed(found: &[Found]) -> std::collections::BTreeSet<String> {
    found
        .iter()
        .filter_map(|f| match &f.entry {
            Entry::Live(t) => Some(t.deps.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// A readable task file found by a walk of `tasks/`.
pub(super) struct Found {
    id: String,
    path: String,
    entry: Entry,
}

pub(super) enum Entry {
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
pub(super) enum Item<'n> {
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
pub(super) fn item(name: &str, kind: EntryKind, depth: usize, closed: Option<Status>) -> Item<'_> {
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
pub(super) enum Scope<'a> {
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
pub(super) fn resolve(
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
pub(super) fn fill<V: Clone>(map: &mut imbl::OrdMap<String, V>, sorted: Vec<(String, V)>) {
    if map.is_empty() {
        *map = sorted.into_iter().collect();
    } else {
        map.extend(sorted);
    }
}

/// The entries of a state tree that a read looks at: `swarm.toml`, `tasks/`, `spend.toml` (kind and id), `cycles/`.
#[derive(Default)]
pub(super) struct Root {
    config: Option<(EntryKind, ObjectId)>,
    tasks: Option<(EntryKind, ObjectId)>,
    spend: Option<(EntryKind, ObjectId)>,
    cycles: Option<ObjectId>,
}

/// Where a walk of `tasks/` is.
#[derive(Clone, Copy)]
pub(super) struct Walk<'a> {
    commit: &'a str,
    full: bool,
    /// Under `tasks/<status>/` of a finished status.
    closed: Option<Status>,
    /// The live tasks to parse, when not all.
    want: Option<&'a std::collections::BTreeSet<String>>,
}
