//! The git work a runner does in work trees: create and remove them, commit what an agent left, rebase, and ask
//! what state a rebase is in. Through the system `git` (gix does not rebase), never through a shell.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use gix::ObjectId;

#[derive(Debug, thiserror::Error)]
#[error("git {args} failed{}: {message}", dir.as_ref().map(|d| format!(" in {}", d.display())).unwrap_or_default())]
pub struct GitError {
    pub args: String,
    pub dir: Option<PathBuf>,
    pub message: String,
}

/// `git` in `dir` as the crate builds it for local work ([`crate::gitcmd::local`]): hooks and fsmonitor off
/// (an agent can write `.git/hooks` or `core.fsmonitor` in the shared git directory, and the runner's own git
/// commands, outside the agent's process group and time limit, must not run them), no prompts, no pager, no
/// editor, no system config, C locale, a process group of its own.
pub fn git_in(dir: &Path) -> Command {
    crate::gitcmd::local(dir)
}

fn describe(args: &[&str]) -> String {
    args.iter().take(3).copied().collect::<Vec<_>>().join(" ")
}

/// Run git in `dir`; its stdout on success.
pub fn run(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    let out = output(dir, args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(GitError {
            args: describe(args),
            dir: Some(dir.to_path_buf()),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

pub fn output(dir: &Path, args: &[&str]) -> Result<Output, GitError> {
    let _lock = worktree_lock(dir, args);
    git_in(dir).args(args).output().map_err(|e| GitError {
        args: describe(args),
        dir: Some(dir.to_path_buf()),
        message: format!("cannot run git: {e}"),
    })
}

/// `git worktree` commands of one clone run one at a time (`dir` is its common dir). `git worktree add` makes
/// `worktrees/<id>/` and writes its `locked` file only afterwards: a `git worktree prune` of another runner in
/// between removed the folder under it ("could not open 'worktrees/<id>/locked'", "failed to read
/// worktrees/<id>/commondir") and that runner died. An advisory `flock` on `<common dir>/swarm/worktree.flock`
/// (not `*.lock`: the file being there means nothing, the `flock` is the lock), released by the kernel when its
/// holder dies, so never stale. Best effort: without it the command runs anyway.
fn worktree_lock(dir: &Path, args: &[&str]) -> Option<std::fs::File> {
    if args.first() != Some(&"worktree") {
        return None;
    }
    let path = dir.join("swarm").join("worktree.flock");
    let _ = std::fs::create_dir_all(path.parent()?);
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).ok()?;
    file.lock().ok()?;
    Some(file)
}

/// A new detached work tree of the repository at `common_dir`, at `commit`. Whatever was at `path` goes first.
pub fn add_worktree(common_dir: &Path, path: &Path, commit: ObjectId) -> Result<(), GitError> {
    remove_worktree(common_dir, path);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let p = path.to_string_lossy();
    let c = commit.to_string();
    run(common_dir, &["worktree", "add", "--quiet", "--force", "--detach", &p, &c])?;
    Ok(())
}

/// Remove a work tree and its administrative files, whatever state it is in (best effort).
pub fn remove_worktree(common_dir: &Path, path: &Path) {
    if path.exists() {
        let p = path.to_string_lossy();
        let _ = run(common_dir, &["worktree", "remove", "--force", "--force", &p]);
        let _ = std::fs::remove_dir_all(path);
    }
    // A registration that still names the path is one `git worktree add` left locked ("initializing") when it was
    // killed: `prune` never removes a locked one, and `add` refuses the path while it is there.
    let want = same_file_key(&path.join(".git"));
    for reg in registrations(common_dir) {
        if reg.gitdir.as_deref().map(same_file_key).as_ref() == Some(&want) {
            let _ = std::fs::remove_dir_all(&reg.admin);
        }
    }
    let _ = run(common_dir, &["worktree", "prune"]);
}

/// A linked work tree as git registers it: `<common dir>/worktrees/<id>/`.
#[derive(Debug)]
pub struct Registration {
    pub id: String,
    /// The folder `<common dir>/worktrees/<id>`.
    pub admin: PathBuf,
    /// What its `gitdir` file names (the work tree's `.git` file); `None` when it is missing or empty.
    pub gitdir: Option<PathBuf>,
    /// `commondir` or `HEAD` is missing or empty: what a `git worktree add` killed half-way leaves. git then fails
    /// every command that looks at all work trees (`worktree add`/`list`, `branch -D`, `gc`).
    pub broken: bool,
}

/// Every registration of a linked work tree of the repository at `common_dir`.
pub fn registrations(common_dir: &Path) -> Vec<Registration> {
    let Ok(entries) = std::fs::read_dir(common_dir.join("worktrees")) else { return vec![] };
    let filled = |p: PathBuf| std::fs::read_to_string(p).is_ok_and(|t| !t.trim().is_empty());
    entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let admin = e.path();
            let gitdir = std::fs::read_to_string(admin.join("gitdir"))
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .map(|t| {
                    let p = PathBuf::from(t);
                    if p.is_absolute() { p } else { admin.join(p) }
                });
            let broken = !filled(admin.join("commondir")) || !filled(admin.join("HEAD"));
            Registration { id: e.file_name().to_string_lossy().into_owned(), admin, gitdir, broken }
        })
        .collect()
}

/// A path to compare with what git wrote (git writes real paths): the real path of its parent joined with its
/// name, which works when the path itself is gone.
fn same_file_key(p: &Path) -> PathBuf {
    match (p.parent().and_then(|d| std::fs::canonicalize(d).ok()), p.file_name()) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => p.to_path_buf(),
    }
}

/// Remove the registrations of runners' work trees (folders `<home>/<agent>`) that git will not clean up itself,
/// for the runners `gone(agent)` says are not running: those whose work tree is gone but that are locked (a killed
/// `git worktree add` leaves its lock, "initializing"), and half-made ones (see [`Registration::broken`]), which
/// would make every later `git worktree add` of every runner in this clone fail. A registration whose `gitdir`
/// was never written is known by its id: git names it after the folder, `<agent>` or `<agent><n>`; it is removed
/// only when every runner it could belong to is gone. Registrations of the user's own work trees are left alone.
pub(crate) fn clear_stale_registrations(common_dir: &Path, home: &Path, gone: &dyn Fn(&str) -> bool) {
    let home_real = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let mut names: Vec<String> = std::fs::read_dir(home)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .map(|n| n.strip_suffix(".pid").map(str::to_string).unwrap_or(n))
        .collect();
    names.sort();
    names.dedup();
    for reg in registrations(common_dir) {
        let stale = match &reg.gitdir {
            Some(gitdir) => {
                let wt = gitdir.parent().unwrap_or(gitdir);
                let owner = wt
                    .strip_prefix(&home_real)
                    .or_else(|_| wt.strip_prefix(home))
                    .ok()
                    .and_then(|rel| rel.components().next())
                    .map(|c| c.as_os_str().to_string_lossy().into_owned());
                owner.is_some_and(|o| gone(&o)) && (reg.broken || !wt.join(".git").is_file())
            }
            None => {
                let owners: Vec<&String> = names
                    .iter()
                    .filter(|n| {
                        reg.id == **n
                            || reg
                                .id
                                .strip_prefix(n.as_str())
                                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
                    })
                    .collect();
                !owners.is_empty() && owners.iter().all(|o| gone(o))
            }
        };
        if stale {
            let _ = std::fs::remove_dir_all(&reg.admin);
        }
    }
}

/// The git dir of the work tree at `wt` (what its `.git` file names).
pub(crate) fn worktree_git_dir(wt: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(wt.join(".git")).ok()?;
    let dir = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
    Some(if dir.is_absolute() { dir } else { wt.join(dir) })
}

/// A work tree at `commit`, as if new: the existing one of this runner reset and cleaned (ignored files too), or a
/// new one. Two `git` processes instead of the four of removing and adding one for every task.
pub(crate) fn fresh_worktree(common_dir: &Path, path: &Path, commit: ObjectId) -> Result<(), GitError> {
    // Submodules, sparse checkouts and per-work-tree config outlive a reset: such a tree is made anew.
    let plain = !path.join(".gitmodules").exists();
    if plain
        && let Some(gd) = worktree_git_dir(path)
        && gd.is_dir()
        && !gd.join("info").join("sparse-checkout").exists()
        && !gd.join("config.worktree").exists()
    {
        if gd.join("rebase-merge").exists() || gd.join("rebase-apply").exists() {
            let _ = run(path, &["rebase", "--abort"]);
        }
        // No skip-worktree, assume-unchanged or intent-to-add bit of the last task survives: an index that has one
        // goes (then the checkout writes every file). Else it stays, and the checkout writes only what differs —
        // without it, every file of the tree is written again for every task (a thousand files a task is a
        // thousand inodes freed and allocated).
        if !plain_index(&gd.join("index")) {
            let _ = std::fs::remove_file(gd.join("index"));
        }
        let c = commit.to_string();
        // `checkout --detach`, never `reset`: an agent may have left HEAD on a branch, which a reset would move.
        if run(path, &["checkout", "--quiet", "--force", "--detach", &c]).is_ok()
            && run(path, &["clean", "-ffdxq"]).is_ok()
        {
            return Ok(());
        }
    }
    add_worktree(common_dir, path, commit)
}

/// Does the index at `path` have no entry flagged skip-worktree, assume-unchanged or intent-to-add (and can it be
/// read)?
fn plain_index(path: &Path) -> bool {
    use gix::index::entry::Flags;
    let opts = gix::index::decode::Options::default();
    match gix::index::File::at(path, gix::hash::Kind::Sha1, true, opts) {
        Ok(index) => index
            .entries()
            .iter()
            .all(|e| !e.flags.intersects(Flags::SKIP_WORKTREE | Flags::ASSUME_VALID | Flags::INTENT_TO_ADD)),
        Err(_) => false,
    }
}

/// `HEAD` of a work tree, read from its files when it is detached (no `git` process), else by `git rev-parse`.
pub(crate) fn head_fast(wt: &Path) -> Result<ObjectId, GitError> {
    if let Some(gd) = worktree_git_dir(wt)
        && let Ok(text) = std::fs::read_to_string(gd.join("HEAD"))
        && let Ok(id) = ObjectId::from_hex(text.trim().as_bytes())
    {
        return Ok(id);
    }
    head(wt)
}

pub fn head(dir: &Path) -> Result<ObjectId, GitError> {
    rev_parse(dir, "HEAD")
}

pub fn rev_parse(dir: &Path, rev: &str) -> Result<ObjectId, GitError> {
    let out = run(dir, &["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")])?;
    ObjectId::from_hex(out.trim().as_bytes()).map_err(|e| GitError {
        args: "rev-parse".into(),
        dir: Some(dir.to_path_buf()),
        message: e.to_string(),
    })
}

/// Is `commit` reachable from `tip` in the repository at `git_dir` (`git merge-base --is-ancestor`)?
pub fn is_ancestor(git_dir: &Path, commit: ObjectId, tip: ObjectId) -> bool {
    output(git_dir, &["merge-base", "--is-ancestor", &commit.to_string(), &tip.to_string()])
        .is_ok_and(|o| o.status.success())
}

/// Commit whatever the agent left in the work tree (new files too). Returns whether there was anything.
/// With `excludes` (an excludes file), files it hides stay out — but those of them `keep` says the task wants (a
/// scope under `.claude/`) are added all the same: only files git itself lists as ignored and untracked, each by
/// its literal name, so no path from a task can reach outside the work tree or pull in anything else. `keep`:
/// `None` when nothing hidden can be wanted (no `git ls-files` then).
pub(crate) fn commit_all(
    dir: &Path,
    message: &str,
    ident: &[(String, String)],
    excludes: Option<&Path>,
    keep: Option<&dyn Fn(&str) -> bool>,
) -> Result<bool, GitError> {
    match (excludes, keep) {
        (Some(f), None) => {
            let setting = format!("core.excludesFile={}", f.display());
            run(dir, &["-c", &setting, "add", "--all"])?;
        }
        (Some(f), Some(keep)) => {
            let setting = format!("core.excludesFile={}", f.display());
            run(dir, &["-c", &setting, "add", "--all"])?;
            let hidden = run(dir, &["-c", &setting, "ls-files", "-z", "--others", "--ignored", "--exclude-standard"])?;
            let wanted: Vec<&str> = hidden.split('\0').filter(|p| !p.is_empty() && keep(p)).collect();
            if !wanted.is_empty() {
                literal(dir, &["add", "--force", "--"], &wanted)?;
            }
        }
        (None, _) => {
            run(dir, &["add", "--all"])?;
        }
    }
    let mut cmd = git_in(dir);
    cmd.args(["commit", "--quiet", "--no-verify", "--file", "-"]).stdin(Stdio::piped());
    for (k, v) in ident {
        cmd.env(k, v);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| GitError {
        args: "commit".into(),
        dir: Some(dir.to_path_buf()),
        message: e.to_string(),
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(message.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| GitError {
        args: "commit".into(),
        dir: Some(dir.to_path_buf()),
        message: e.to_string(),
    })?;
    if !out.status.success() {
        // Nothing staged: `git commit` says so and exits 1 ("nothing to commit", or "nothing added to commit but
        // untracked files present" when only excluded files are left). Asking first would cost a process per task.
        let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if said.contains("nothing to commit") || said.contains("nothing added to commit") {
            return Ok(false);
        }
        return Err(GitError { args: "commit".into(), dir: Some(dir.to_path_buf()), message: said.trim().to_string() });
    }
    Ok(true)
}

/// `git <args> <paths>` with the paths taken as they are (`GIT_LITERAL_PATHSPECS`: no glob, no `:` magic).
fn literal(dir: &Path, args: &[&str], paths: &[&str]) -> Result<(), GitError> {
    let what = describe(args);
    let fail = |message: String| GitError { args: what.clone(), dir: Some(dir.to_path_buf()), message };
    let out = git_in(dir)
        .env("GIT_LITERAL_PATHSPECS", "1")
        .args(args)
        .args(paths)
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if out.status.success() { Ok(()) } else { Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_string())) }
}

/// Is a rebase stopped in this work tree?
pub(crate) fn rebase_in_progress(dir: &Path) -> bool {
    // A runner's work tree names its git dir in its `.git` file: no `git` process (two a task, which count with
    // a hundred agents on one machine).
    if let Some(gd) = worktree_git_dir(dir).filter(|gd| gd.is_dir()) {
        return ["rebase-merge", "rebase-apply"].iter().any(|p| gd.join(p).exists());
    }
    ["rebase-merge", "rebase-apply"]
        .iter()
        .any(|p| run(dir, &["rev-parse", "--git-path", p]).map(|out| dir.join(out.trim()).exists()).unwrap_or(false))
}

/// Files with unresolved conflicts.
pub fn conflicted(dir: &Path) -> Vec<String> {
    // NUL-separated and unquoted: a name with a non-ASCII byte must come back as the name it is.
    run(dir, &["-c", "core.quotePath=false", "diff", "-z", "--name-only", "--diff-filter=U"])
        .map(|o| o.split('\0').map(str::to_string).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default()
}

/// What the conflicted files hold now (a hash of their content; `None`: no such file), to tell afterwards which a
/// conflict run changed.
pub fn contents(dir: &Path, files: &[String]) -> Vec<(String, Option<u64>)> {
    files.iter().map(|f| (f.clone(), content_hash(&dir.join(f)))).collect()
}

fn content_hash(path: &Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    std::fs::symlink_metadata(path).ok()?;
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

/// How a rebase went.
#[derive(Debug, PartialEq, Eq)]
pub enum Rebased {
    Clean,
    /// Stopped on conflicts in these files (the rebase is in progress).
    Conflict(Vec<String>),
}

/// Rebase the commits `old_base..HEAD` onto `onto`. Their messages stay as they are: the runner stamps the
/// rebased commits itself (`runner::rebase::stamp_chain`), in-process, and no `Swarm-*` line of the agent's
/// survives it — there is no `--exec` line, no shell.
pub fn rebase(dir: &Path, onto: ObjectId, old_base: ObjectId, ident: &[(String, String)]) -> Result<Rebased, GitError> {
    let onto_s = onto.to_string();
    let base_s = old_base.to_string();
    let mut cmd = git_in(dir);
    cmd.args(["-c", "rebase.autoStash=false", "-c", "rebase.updateRefs=false", "rebase", "--quiet", "--no-autosquash"]);
    cmd.args(["--onto", &onto_s, &base_s]);
    for (k, v) in ident {
        cmd.env(k, v);
    }
    rebase_outcome(dir, &mut cmd)
}

/// Go on with a rebase that stopped on conflicts once the agent resolved them but did not stage them or run
/// `git rebase --continue`: a file still unmerged counts as resolved only when the conflict run changed it
/// (`before`, from [`contents`]) and it is text without a conflict (`<<<<<<<` … `>>>>>>>`) left in it; such files
/// are staged (a deleted one is resolved by its deletion), then `git rebase --continue` runs. It may stop again on
/// the next commit's conflicts.
pub(crate) fn continue_rebase(
    dir: &Path,
    ident: &[(String, String)],
    before: &[(String, Option<u64>)],
) -> Result<Rebased, GitError> {
    let left = conflicted(dir);
    let resolved = |f: &str| {
        let path = dir.join(f);
        let now = content_hash(&path);
        let then = before.iter().find(|(b, _)| b == f).and_then(|(_, h)| *h);
        if now.is_none() || now == then {
            // Gone (and it was there), or changed: the agent's; untouched: still the conflict git left.
            return now.is_none() && then.is_some();
        }
        let Ok(bytes) = std::fs::read(&path) else { return false };
        if bytes.contains(&0) {
            return false; // a binary file: no markers to tell by
        }
        let text = String::from_utf8_lossy(&bytes);
        let opens = text.lines().any(|l| l.starts_with("<<<<<<< ") || l == "<<<<<<<");
        let closes = text.lines().any(|l| l.starts_with(">>>>>>> ") || l == ">>>>>>>");
        !(opens && closes)
    };
    let (fixed, still): (Vec<String>, Vec<String>) = left.into_iter().partition(|f| resolved(f));
    if !still.is_empty() {
        return Ok(Rebased::Conflict(still));
    }
    for f in &fixed {
        if std::fs::symlink_metadata(dir.join(f)).is_ok() {
            literal(dir, &["add", "--"], &[f.as_str()])?;
        } else {
            literal(dir, &["rm", "--quiet", "--cached", "--ignore-unmatch", "--"], &[f.as_str()])?;
        }
    }
    let mut cmd = git_in(dir);
    cmd.args(["-c", "core.editor=true", "rebase", "--continue"]);
    for (k, v) in ident {
        cmd.env(k, v);
    }
    rebase_outcome(dir, &mut cmd)
}

/// Run a `git rebase` command and read where it left the work tree.
fn rebase_outcome(dir: &Path, cmd: &mut Command) -> Result<Rebased, GitError> {
    let out = cmd.output().map_err(|e| GitError {
        args: "rebase".into(),
        dir: Some(dir.to_path_buf()),
        message: e.to_string(),
    })?;
    if out.status.success() && !rebase_in_progress(dir) {
        return Ok(Rebased::Clean);
    }
    let files = conflicted(dir);
    if rebase_in_progress(dir) && !files.is_empty() {
        return Ok(Rebased::Conflict(files));
    }
    let message = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr).trim(),
        if rebase_in_progress(dir) { " (the rebase stopped)" } else { "" }
    );
    if rebase_in_progress(dir) {
        let _ = run(dir, &["rebase", "--abort"]);
    }
    Err(GitError { args: "rebase".into(), dir: Some(dir.to_path_buf()), message })
}

pub(crate) fn abort_rebase(dir: &Path) {
    if rebase_in_progress(dir) {
        let _ = run(dir, &["rebase", "--abort"]);
    }
}

/// The branches checked out in any work tree of the repository at `common_dir` (`refs/heads/...`).
pub(crate) fn checked_out_branches(common_dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(out) = run(common_dir, &["worktree", "list", "--porcelain"]) else { return vec![] };
    let mut res = Vec::new();
    let mut path = PathBuf::new();
    for line in out.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            path = PathBuf::from(p);
        } else if let Some(b) = line.strip_prefix("branch ") {
            res.push((b.to_string(), path.clone()));
        }
    }
    res
}
