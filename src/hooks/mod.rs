//! Git hooks of a swarm (`commit-msg`: the `Swarm-Task:` trailer; `pre-push`: the claim guard) and the pieces
//! of the agent hooks ([`agent`]). No terminal I/O: the CLI (`cli/hooks.rs`) prints.
//!
//! Our part of a hook file is one block between marker lines, inserted right after the shebang line so that it
//! runs even when the user's hook ends early (`exit`, `exec`). The block never exits unless it blocks on purpose
//! (a strict `pre-push`). A second install changes nothing; uninstall takes the block out and leaves the user's
//! file byte for byte as it was (and removes the file when we created it). See `docs/hooks.md`.

pub(crate) mod agent;
pub(crate) use git_swarm_core::trailer;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::model::{Status, Task, validate_id};
use crate::time::Timestamp;

/// The first line of our block.
pub(crate) const BEGIN: &str = "# >>> git swarm >>>";
/// The last line of our block.
pub(crate) const END: &str = "# <<< git swarm <<<";
/// In the block when the file did not exist before: uninstall then removes the file.
const CREATED: &str = "# (this file was created by git swarm hooks install)";
/// The shebang of a hook file we create.
const SHEBANG: &str = "#!/bin/sh\n";

#[derive(Debug, thiserror::Error)]
pub(crate) enum HookError {
    /// A file we must not change (another language, binary, not executable).
    #[error("{}: {message}", path.display())]
    Refused { path: PathBuf, message: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("git {args}: {message}")]
    Git { args: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HookError + '_ {
    move |source| HookError::Io { path: path.to_path_buf(), source }
}

/// The git hooks we install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GitHook {
    CommitMsg,
    PrePush,
}

impl GitHook {
    pub(crate) const ALL: [GitHook; 2] = [GitHook::CommitMsg, GitHook::PrePush];

    pub(crate) fn name(self) -> &'static str {
        match self {
            GitHook::CommitMsg => "commit-msg",
            GitHook::PrePush => "pre-push",
        }
    }

    /// The whole hook as shipped in `hooks/` (a shebang line and our block).
    pub(crate) fn script(self) -> &'static str {
        match self {
            GitHook::CommitMsg => include_str!("../../hooks/commit-msg"),
            GitHook::PrePush => include_str!("../../hooks/pre-push"),
        }
    }

    /// Our block: the lines from [`BEGIN`] to [`END`], each ending in a newline.
    pub(crate) fn block(self) -> String {
        find_block(self.script()).map(|(s, e)| self.script()[s..e].to_string()).unwrap_or_default()
    }
}

/// Byte range of our block in `text` (from the start of the [`BEGIN`] line to the end of the [`END`] line).
fn find_block(text: &str) -> Option<(usize, usize)> {
    let mut start = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim_end_matches(['\n', '\r']).trim();
        if start.is_none() && t == BEGIN {
            start = Some(pos);
        } else if let Some(s) = start
            && t == END
        {
            return Some((s, pos + line.len()));
        }
        pos += line.len();
    }
    None
}

/// What an install did to a hook file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Installed {
    /// There was no hook: ours is the whole file.
    Created,
    /// Our block went into the user's hook.
    Added,
    /// An older block of ours was replaced.
    Updated,
    /// Our block was there as it is.
    Unchanged,
}

impl Installed {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Installed::Created => "created",
            Installed::Added => "added",
            Installed::Updated => "updated",
            Installed::Unchanged => "unchanged",
        }
    }
}

/// Is this interpreter line a POSIX-like shell (our block is `sh`)?
fn shell_shebang(first_line: &str) -> Result<(), String> {
    let Some(rest) = first_line.strip_prefix("#!") else { return Ok(()) };
    let mut words = rest.split_whitespace();
    let prog = words.next().unwrap_or_default();
    let base = prog.rsplit('/').next().unwrap_or_default();
    let interp = if base == "env" { words.find(|w| !w.starts_with('-')).unwrap_or_default() } else { base };
    if matches!(interp, "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash") {
        Ok(())
    } else {
        Err(format!(
            "a hook written for '{}', not for a shell: git swarm will not put shell lines into it. Call `git swarm \
             hooks run …` from it yourself (see docs/hooks.md), or remove it and install again",
            crate::escape::line(if interp.is_empty() { prog } else { interp })
        ))
    }
}

/// The text of a hook file with our `block` in it, and what that means. `existing` is the file's text, if any.
pub(crate) fn with_block(existing: Option<&str>, block: &str) -> Result<(String, Installed), String> {
    let Some(text) = existing else {
        return Ok((format!("{SHEBANG}{}", mark_created(block)), Installed::Created));
    };
    if text.contains('\0') {
        return Err("not a text file: git swarm will not change it".into());
    }
    let first = text.lines().next().unwrap_or_default();
    shell_shebang(first)?;
    if let Some((s, e)) = find_block(text) {
        let old = &text[s..e];
        let new = if old.lines().any(|l| l.trim() == CREATED) { mark_created(block) } else { block.to_string() };
        if old == new {
            return Ok((text.to_string(), Installed::Unchanged));
        }
        return Ok((format!("{}{new}{}", &text[..s], &text[e..]), Installed::Updated));
    }
    // Right after the shebang line: an `exit` or `exec` at the end of the user's hook cannot skip us.
    let at = if first.starts_with("#!") { text.find('\n').map(|i| i + 1).unwrap_or(text.len()) } else { 0 };
    let sep = if at == text.len() && !text.is_empty() && !text.ends_with('\n') { "\n" } else { "" };
    Ok((format!("{}{sep}{block}{}", &text[..at], &text[at..]), Installed::Added))
}

fn mark_created(block: &str) -> String {
    match block.split_once('\n') {
        Some((first, rest)) => format!("{first}\n{CREATED}\n{rest}"),
        None => block.to_string(),
    }
}

/// The text without our block: `None` when there is no block; `Some(None)` when the file should go (we created
/// it and nothing but its shebang is left).
pub(crate) fn without_block(text: &str) -> Option<Option<String>> {
    let (s, e) = find_block(text)?;
    let created = text[s..e].lines().any(|l| l.trim() == CREATED);
    let rest = format!("{}{}", &text[..s], &text[e..]);
    let only_shebang = rest.lines().all(|l| l.trim().is_empty() || (l.starts_with("#!") && rest.starts_with(l)));
    Some(if created && only_shebang { None } else { Some(rest) })
}

/// `git` as the user runs it here: their environment (a hook's `GIT_DIR` included), their config.
fn user_git(dir: &Path, args: &[&str]) -> Result<String, HookError> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| HookError::Git { args: args.join(" "), message: format!("cannot run git: {e}") })?;
    if !out.status.success() {
        return Err(HookError::Git {
            args: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n').to_string())
}

/// Where git looks for hooks from `dir`: `core.hooksPath` when set (relative to the work tree's top), else the
/// common git directory's `hooks/` (linked work trees share it).
pub(crate) fn hooks_dir(dir: &Path) -> Result<PathBuf, HookError> {
    // A relative core.hooksPath is relative to where hooks run: the top of the work tree (or the git dir if bare).
    let top = user_git(dir, &["rev-parse", "--show-toplevel"]).map(PathBuf::from).unwrap_or_else(|_| dir.into());
    let out = user_git(&top, &["rev-parse", "--path-format=absolute", "--git-path", "hooks"])?;
    let path = PathBuf::from(out);
    if path == Path::new("/dev/null") {
        return Err(HookError::Invalid(
            "core.hooksPath is /dev/null: hooks are turned off in this repository; unset it to install hooks".into(),
        ));
    }
    Ok(path)
}

/// Where a hook file really is, if that is inside the work tree (`core.hooksPath = .githooks`, or a hook that
/// is a symlink to a tracked script): our block then shows in `git status` and goes into the next `commit -a`,
/// and a relative `core.hooksPath` means each linked work tree (the worker's included) reads its own copy.
pub(crate) fn inside_work_tree(dir: &Path, hook_file: &Path) -> Option<PathBuf> {
    let top = user_git(dir, &["rev-parse", "--show-toplevel"]).ok().map(PathBuf::from)?;
    let top = std::fs::canonicalize(&top).unwrap_or(top);
    let real = std::fs::canonicalize(hook_file)
        .or_else(|_| hook_file.parent().map(std::fs::canonicalize).unwrap_or_else(|| Ok(hook_file.into())))
        .ok()?;
    let git_dir =
        user_git(dir, &["rev-parse", "--path-format=absolute", "--git-common-dir"]).ok().map(PathBuf::from)?;
    let git_dir = std::fs::canonicalize(&git_dir).unwrap_or(git_dir);
    (real.starts_with(&top) && !real.starts_with(&git_dir)).then_some(real)
}

/// One hook as it stands.
#[derive(Debug, Clone)]
pub(crate) struct HookState {
    pub hook: GitHook,
    pub path: PathBuf,
    /// The file exists.
    pub exists: bool,
    /// Our block is in it.
    pub installed: bool,
    /// Our block differs from this binary's (an older version).
    pub outdated: bool,
}

pub(crate) fn status(hooks_dir: &Path) -> Vec<HookState> {
    GitHook::ALL
        .iter()
        .map(|&hook| {
            let path = hooks_dir.join(hook.name());
            let text = std::fs::read_to_string(&path).ok();
            let block = text.as_deref().and_then(|t| find_block(t).map(|(s, e)| t[s..e].to_string()));
            let outdated = block.as_ref().is_some_and(|b| {
                let mine = hook.block();
                *b != mine && *b != mark_created(&mine)
            });
            HookState { hook, exists: path.exists(), installed: block.is_some(), outdated, path }
        })
        .collect()
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    true
}

/// Put our block into `<hooks_dir>/<hook>` (creating the file, mode 0755, when there is none).
pub(crate) fn install(hooks_dir: &Path, hook: GitHook) -> Result<(PathBuf, Installed), HookError> {
    let path = hooks_dir.join(hook.name());
    let existing = match std::fs::read(&path) {
        Ok(bytes) => {
            let meta = std::fs::metadata(&path).map_err(io(&path))?;
            if !is_executable(&meta) {
                return Err(HookError::Refused {
                    path,
                    message: "exists but is not executable, so git does not run it: make it executable (chmod +x) \
                              or remove it, then install again"
                        .into(),
                });
            }
            match String::from_utf8(bytes) {
                Ok(t) => Some(t),
                Err(_) => {
                    return Err(HookError::Refused {
                        path,
                        message: "not a text file: git swarm will not change it".into(),
                    });
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(HookError::Io { path, source: e }),
    };
    let (text, what) = with_block(existing.as_deref(), &hook.block())
        .map_err(|message| HookError::Refused { path: path.clone(), message })?;
    if what == Installed::Unchanged {
        return Ok((path, what));
    }
    std::fs::create_dir_all(hooks_dir).map_err(io(hooks_dir))?;
    // Written in place (a symbolic link stays one; the mode of the user's file stays as it is).
    std::fs::write(&path, text).map_err(io(&path))?;
    if what == Installed::Created {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(io(&path))?;
        }
    }
    Ok((path, what))
}

/// What an uninstall did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removed {
    /// Our block came out; the user's hook stays.
    Block,
    /// The file was ours alone and is gone.
    File,
    /// There was no block of ours.
    Absent,
}

pub(crate) fn uninstall(hooks_dir: &Path, hook: GitHook) -> Result<(PathBuf, Removed), HookError> {
    let path = hooks_dir.join(hook.name());
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((path, Removed::Absent)),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Ok((path, Removed::Absent)),
        Err(e) => return Err(HookError::Io { path, source: e }),
    };
    match without_block(&text) {
        None => Ok((path, Removed::Absent)),
        Some(None) => {
            std::fs::remove_file(&path).map_err(io(&path))?;
            Ok((path, Removed::File))
        }
        Some(Some(rest)) => {
            std::fs::write(&path, rest).map_err(io(&path))?;
            Ok((path, Removed::Block))
        }
    }
}

/// The comment character git uses in commit messages (`core.commentChar`; `auto` and unset are `#`, git's
/// first pick).
fn comment_char(dir: &Path) -> char {
    match user_git(dir, &["config", "--get", "core.commentChar"]) {
        Ok(v) if v != "auto" => v.chars().next().unwrap_or('#'),
        _ => '#',
    }
}

/// The message as git will read it: up to the scissors line of `git commit -v` (`<c> ---…--- >8 ---…---`), and
/// without comment lines.
fn message_lines(text: &str, comment: char) -> Vec<&str> {
    let scissors = |l: &str| {
        l.strip_prefix(comment).is_some_and(|r| {
            let r = r.trim();
            r.contains(">8") && r.chars().all(|c| c == '-' || c == '>' || c == '8' || c == ' ')
        })
    };
    text.lines().take_while(|l| !scissors(l)).filter(|l| !l.starts_with(comment)).collect()
}

/// Is this commit message empty (only blank lines and comments, before any scissors line)? Git aborts such a
/// commit; a trailer must not turn it into a commit.
fn message_is_empty(text: &str, comment: char) -> bool {
    message_lines(text, comment).iter().all(|l| l.trim().is_empty())
}

/// The `commit-msg` hook: add `Swarm-Task: <id>` to the message in `msg_file` unless a `Swarm-Task` trailer is
/// there already. `Ok(false)` when nothing was added (an empty message, or the trailer present).
pub(crate) fn add_trailer(dir: &Path, msg_file: &Path, id: &str) -> Result<bool, HookError> {
    validate_id(id).map_err(|e| HookError::Invalid(format!("GIT_SWARM_TASK_ID: {e}")))?;
    let text = std::fs::read_to_string(msg_file).map_err(io(msg_file))?;
    let comment = comment_char(dir);
    if message_is_empty(&text, comment) || trailers_of(&text, comment).iter().any(|(k, v)| k == "swarm-task" && v == id)
    {
        return Ok(false);
    }
    let trailer = format!("Swarm-Task: {id}");
    let file = msg_file.to_string_lossy();
    // An argument vector, never a shell line; the id is validated above.
    user_git(dir, &["interpret-trailers", "--in-place", "--if-exists", "doNothing", "--trailer", &trailer, &file])?;
    Ok(true)
}

/// `key: value` lines of the last paragraph (lower-case keys): enough to see our own trailer.
fn trailers_of(text: &str, comment: char) -> Vec<(String, String)> {
    let body = message_lines(text, comment);
    let last = body.split(|l| l.trim().is_empty()).rfind(|p| !p.is_empty()).unwrap_or_default();
    last.iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

/// One line of what `pre-push` gets on stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefUpdate {
    pub local_ref: String,
    pub local_sha: String,
    pub remote_ref: String,
    pub remote_sha: String,
}

fn is_zero(sha: &str) -> bool {
    sha.bytes().all(|b| b == b'0')
}

fn is_sha(s: &str) -> bool {
    (40..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<local ref> <local sha> <remote ref> <remote sha>` lines; malformed lines are skipped.
pub(crate) fn parse_push_lines(text: &str) -> Vec<RefUpdate> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [lr, ls, rr, rs] if is_sha(ls) && is_sha(rs) => Some(RefUpdate {
                    local_ref: lr.to_string(),
                    local_sha: ls.to_string(),
                    remote_ref: rr.to_string(),
                    remote_sha: rs.to_string(),
                }),
                _ => None,
            }
        })
        .collect()
}

/// A pushed commit that names a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskCommit {
    pub commit: String,
    pub task: String,
}

/// The commits a push sends that the remote does not have yet (`remote..local`, and never what a remote-tracking
/// branch holds), with their `Swarm-Task:` trailers. Trailer values that are not task
/// ids come back as `Err` lines for a warning.
pub(crate) fn pushed_tasks(dir: &Path, updates: &[RefUpdate]) -> Result<(Vec<TaskCommit>, Vec<String>), HookError> {
    let mut found = Vec::new();
    let mut bad = Vec::new();
    for u in updates.iter().filter(|u| !is_zero(&u.local_sha)) {
        let fmt = "--format=%H %(trailers:key=Swarm-Task,valueonly,unfold,separator=%x2C)";
        let exclude = format!("^{}", u.remote_sha);
        let mut args = vec!["log", "--max-count=10000", fmt, u.local_sha.as_str()];
        let known = !is_zero(&u.remote_sha) && user_git(dir, &["cat-file", "-e", &u.remote_sha]).is_ok();
        if known {
            args.push(&exclude);
        }
        // Whatever a remote-tracking branch holds is on the remote already: a branch rebased onto a target that
        // holds landed swarm commits does not push those again (and must not be warned, or refused, for them).
        args.extend(["--not", "--remotes"]);
        for line in user_git(dir, &args)?.lines() {
            let Some((sha, ids)) = line.split_once(' ') else { continue };
            for id in ids.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                match validate_id(id) {
                    Ok(()) => found.push(TaskCommit { commit: sha.to_string(), task: id.to_string() }),
                    Err(e) => {
                        bad.push(format!("commit {} has a Swarm-Task trailer that is not a task id: {e}", short(sha)))
                    }
                }
            }
        }
    }
    found.dedup();
    Ok((found, bad))
}

pub(crate) fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Why a pushed task is not this agent's, for a warning; `None` when `me` holds a live claim on it.
pub(crate) fn claim_problem(me: &str, id: &str, task: Option<&Task>, now: Timestamp) -> Option<String> {
    let Some(t) = task else { return Some(format!("the swarm has no task {id}")) };
    match (&t.status, &t.claim) {
        (Status::Claimed, Some(c)) if c.agent == me && c.lease_until > now => None,
        (Status::Claimed, Some(c)) if c.agent == me => {
            Some(format!("your claim on {id} expired at {}: another agent may take it over", c.lease_until))
        }
        (Status::Claimed, Some(c)) => Some(format!(
            "{id} is claimed by {} (epoch {}, until {}), not by you ({me})",
            crate::escape::line(&c.agent),
            c.epoch,
            c.lease_until
        )),
        (st, _) => Some(format!("{id} is {}, not claimed by you ({me})", st.as_str())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_goes_after_the_shebang_and_comes_out_byte_for_byte() {
        let block = GitHook::CommitMsg.block();
        assert!(block.starts_with(BEGIN) && block.trim_end().ends_with(END), "{block}");
        let user = "#!/bin/bash\necho user\nexit 0\n";
        let (with, what) = with_block(Some(user), &block).expect("shell");
        assert_eq!(what, Installed::Added);
        assert!(with.starts_with(&format!("#!/bin/bash\n{BEGIN}")), "{with}");
        assert!(with.ends_with("echo user\nexit 0\n"));
        assert_eq!(with_block(Some(&with), &block).expect("again").1, Installed::Unchanged);
        assert_eq!(without_block(&with), Some(Some(user.to_string())));
        let (created, _) = with_block(None, &block).expect("new");
        assert_eq!(without_block(&created), Some(None));
        assert_eq!(with_block(Some(&created), &block).expect("again").1, Installed::Unchanged);
        // An older block is replaced in place.
        let old = with.replace("could not add", "failed to add");
        let (updated, what) = with_block(Some(&old), &block).expect("update");
        assert_eq!((updated.as_str(), what), (with.as_str(), Installed::Updated));
        // No newline after the shebang.
        let (w, _) = with_block(Some("#!/bin/sh"), &block).expect("bare shebang");
        assert!(w.starts_with(&format!("#!/bin/sh\n{BEGIN}")));
    }

    #[test]
    fn other_languages_and_binaries_are_refused() {
        for text in ["#!/usr/bin/env python3\nprint(1)\n", "#!/usr/bin/perl\n", "#!/usr/bin/env -S node --x\n"] {
            let e = with_block(Some(text), "b\n").expect_err(text);
            assert!(e.contains("not for a shell"), "{e}");
        }
        assert!(with_block(Some("\0ELF"), "b\n").is_err());
        for ok in ["#!/usr/bin/env bash\n", "#!/bin/sh -e\n", "echo no shebang\n", ""] {
            assert!(with_block(Some(ok), "b\n").is_ok(), "{ok}");
        }
    }

    #[test]
    fn push_lines_and_claims() {
        let z = "0".repeat(40);
        let a = "a".repeat(40);
        let lines = format!("refs/heads/x {a} refs/heads/x {z}\ngarbage\nrefs/heads/y {z} refs/heads/y {a}\n");
        let u = parse_push_lines(&lines);
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].local_ref, "refs/heads/x");
        assert_eq!(claim_problem("me", "t-1", None, Timestamp(0)).as_deref(), Some("the swarm has no task t-1"));
    }

    #[test]
    fn empty_messages_and_present_trailers() {
        assert!(message_is_empty("\n# Please enter the commit message\n\n", '#'));
        assert!(!message_is_empty("fix\n", '#'));
        assert_eq!(trailers_of("x\n\nbody\n\nSwarm-Task: t-1\n# c\n", '#'), vec![("swarm-task".into(), "t-1".into())]);
        // `git commit -v`: the diff below the scissors is not the message.
        let verbose = "\n# Please enter\n# ------------------------ >8 ------------------------\n# Do not modify\ndiff --git a/x b/x\n+added\n";
        assert!(message_is_empty(verbose, '#'));
        assert!(!message_is_empty(&format!("real message\n{verbose}"), '#'));
        // Another comment character.
        assert!(message_is_empty("; nothing\n", ';'));
        assert!(!message_is_empty("# a heading is text when ; comments\n", ';'));
    }
}
