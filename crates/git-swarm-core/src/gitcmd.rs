//! The one place a `git` process is built. Every `git` the crate runs — in a runner's work tree, against a
//! remote, to pack this clone — starts from [`base`]: nothing of the caller's `GIT_DIR`/`GIT_WORK_TREE`, no
//! prompt, C locale, stdin closed, and none of the settings through which the repository's own config (which an
//! agent can write: `.git` is shared with its work tree) would have git run a program of its choosing: hooks,
//! fsmonitor, commit signing. The one exception is `hooks::user_git`: installing a person's git hooks asks git
//! as that person runs it (their `core.hooksPath`, their `GIT_DIR` inside a hook), never for the runner.
//!
//! [`local`] adds what commands that never talk to a remote can do without: the system config
//! (`GIT_CONFIG_NOSYSTEM`), editors and pagers, and a process group of their own. Commands against a remote keep
//! the system config (credential helpers, proxies live there).

use std::path::Path;
use std::process::{Command, Stdio};

/// Settings every `git` of ours runs with, over whatever the repository's config says.
pub(crate) const OVERRIDES: &[&str] = &[
    // An agent can write `.git/hooks` and `core.hooksPath`; `--no-verify` covers only some hooks.
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    // `commit.gpgSign` with a `gpg.program` of the agent's would run that program at every runner commit.
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    // No `git gc --auto` in the middle of a runner's command (it would run in the background, past the command).
    "gc.autoDetach=false",
];

/// `git` with `OVERRIDES` and a clean environment.
pub fn base() -> Command {
    let mut cmd = Command::new("git");
    for o in OVERRIDES {
        cmd.arg("-c").arg(o);
    }
    cmd.env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_NAMESPACE")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    cmd
}

/// [`base`] for a command in `dir` that talks to no remote: no system config, no editor or pager, and a process
/// group of its own (the terminal's Ctrl-C is for the runner, which finishes or stops its git work in order).
pub fn local(dir: &Path) -> Command {
    let mut cmd = base();
    cmd.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_EDITOR", "true")
        .env("GIT_SEQUENCE_EDITOR", "true")
        .env("GIT_PAGER", "cat");
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd
}

/// The version of the `git` on `PATH` (`(major, minor)`), asked once per process; `None` when it cannot be told.
pub fn version() -> Option<(u32, u32)> {
    static VERSION: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = base().arg("--version").output().ok()?;
        parse_version(&String::from_utf8_lossy(&out.stdout))
    })
}

/// `git version 2.47.3` (or `2.39.5.windows.1`, `2.40.0-rc1`) as `(2, 47)`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.trim().strip_prefix("git version ")?;
    let mut parts = v.split(['.', '-', ' ']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Does this machine's git have `merge-tree --merge-base` and `--attr-source` (2.40)? The runner's own rebase
/// replays commit by commit with them; an older git merges a conflicting work in one piece.
pub fn has_merge_base() -> bool {
    version().is_some_and(|v| v >= (2, 40))
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_read_as_git_prints_them() {
        assert_eq!(super::parse_version("git version 2.47.3\n"), Some((2, 47)));
        assert_eq!(super::parse_version("git version 2.39.5.windows.1"), Some((2, 39)));
        assert_eq!(super::parse_version("git version 2.40.0-rc1"), Some((2, 40)));
        assert_eq!(super::parse_version("nope"), None);
    }
}
