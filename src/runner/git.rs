//! The runner's git plumbing that runs in the clone's git directory (never in an agent's work tree: see
//! `runner::slot`): the work trees that older runners registered with `git worktree`, removed without git looking
//! into them; `rev-parse`, `merge-base`. Through the system `git`, never through a shell.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gix::ObjectId;

#[derive(Debug, thiserror::Error)]
#[error("git {args} failed{}: {message}", dir.as_ref().map(|d| format!(" in {}", d.display())).unwrap_or_default())]
pub(crate) struct GitError {
    pub args: String,
    pub dir: Option<PathBuf>,
    pub message: String,
}

/// `git` in `dir` as the crate builds it for local work ([`crate::gitcmd::local`]): hooks and fsmonitor off
/// (an agent can write `.git/hooks` or `core.fsmonitor` in the shared git directory, and the runner's own git
/// commands, outside the agent's process group and time limit, must not run them), no prompts, no pager, no
/// editor, no system config, C locale, a process group of its own.
pub(crate) fn git_in(dir: &Path) -> Command {
    crate::gitcmd::local(dir)
}

fn describe(args: &[&str]) -> String {
    args.iter().take(3).copied().collect::<Vec<_>>().join(" ")
}

/// Run git in `dir`; its stdout on success.
pub(crate) fn run(dir: &Path, args: &[&str]) -> Result<String, GitError> {
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

pub(crate) fn output(dir: &Path, args: &[&str]) -> Result<Output, GitError> {
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

/// Remove a work tree that an older runner registered with `git worktree`, and its registration (best effort): the
/// folder removed without following a link, the registration that names it removed, `git worktree prune` for
/// the rest. No git command looks into the tree itself (an agent left it).
pub(crate) fn remove_worktree(common_dir: &Path, path: &Path) {
    let want = same_file_key(&path.join(".git"));
    let _ = crate::agent::files::remove_all(path);
    for reg in registrations(common_dir) {
        if reg.gitdir.as_deref().map(same_file_key).as_ref() == Some(&want) {
            let _ = crate::agent::files::remove_all(&reg.admin);
        }
    }
    let _ = run(common_dir, &["worktree", "prune"]);
}

/// A linked work tree as git registers it: `<common dir>/worktrees/<id>/`.
#[derive(Debug)]
pub(crate) struct Registration {
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
pub(crate) fn registrations(common_dir: &Path) -> Vec<Registration> {
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

pub(crate) fn rev_parse(dir: &Path, rev: &str) -> Result<ObjectId, GitError> {
    let out = run(dir, &["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")])?;
    ObjectId::from_hex(out.trim().as_bytes()).map_err(|e| GitError {
        args: "rev-parse".into(),
        dir: Some(dir.to_path_buf()),
        message: e.to_string(),
    })
}

/// Is `commit` reachable from `tip` in the repository at `git_dir` (`git merge-base --is-ancestor`)?
pub(crate) fn is_ancestor(git_dir: &Path, commit: ObjectId, tip: ObjectId) -> bool {
    output(git_dir, &["merge-base", "--is-ancestor", &commit.to_string(), &tip.to_string()])
        .is_ok_and(|o| o.status.success())
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
