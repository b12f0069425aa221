//! Git's transports for the state remote ([`crate::txn::Transport`]), and what every kind of remote needs: how a
//! remote is named and resolved, and a local path opened.
//!
//! * The repository itself, or a remote that is a plain local path, is read and written in-process
//!   ([`crate::txn::InProcess`]): nothing here but [`open_local`].
//! * Any URL (`file://`, `git://`, `ssh://`, `https://`): fetched with gix into a private mirror ref
//!   `refs/swarm-remotes/<remote>/<name>` of the local repository, and pushed with the system `git` as
//!   `git push --porcelain --force-with-lease=<ref>:<base>`, whose porcelain output is parsed (never human text).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use gix::ObjectId;
use gix::bstr::ByteSlice;

use crate::secrets::redact;
use crate::store::{GitContext, Store, StoreError};

mod bounded;
mod fetch;
mod push;

pub use bounded::set_stop_flag;
pub(crate) use bounded::stopping;
pub(crate) use fetch::fetch_many;
pub(crate) use fetch::list;
pub use fetch::{clear_dead_scratch, fetch};
pub(crate) use push::push;
pub use push::{PushLine, classify, is_storage_refusal, parse_porcelain};
pub(crate) use push::{push_delete, push_forced};
// What the rooms of `remote` share among themselves.
use bounded::*;
use fetch::unreachable;

/// How a URL remote is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchWith {
    /// In-process with gix (the default).
    Gix,
    /// `git fetch` subprocess (transports this build of gix lacks, like https, and for comparison).
    Git,
}

/// How git reaches a remote: what to fetch from, what to push to, the key of its mirror refs, and how to fetch.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub url: String,
    pub push_to: String,
    pub mirror_key: String,
    pub fetch_with: FetchWith,
}

/// The result of one CAS attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    Done,
    /// The ref was not at the base we read (or moved while we pushed): re-read and re-apply.
    LostRace(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Could not talk to the remote: network, permissions, a missing repository. May pass.
    #[error("cannot reach {remote}: {message}")]
    Unreachable { remote: String, message: String },
    /// Connected, but receiving what the remote sent failed (negotiation, writing the pack into this clone).
    #[error("fetching from {remote} failed: {message}")]
    Fetch { remote: String, message: String },
    /// The remote refused the push for a reason other than a lost race (a hook, permissions, protection rules).
    #[error("{remote} refused the update of {refname}: {reason}")]
    Refused { remote: String, refname: String, reason: String },
    /// The remote would not take a push from this clone at all (no write access: a read-only token or deploy key,
    /// a server that serves fetches only), though it may answer fetches. Waiting does not change it.
    #[error("{remote} refuses this clone's pushes: {message}")]
    PushDenied { remote: String, message: String },
    #[error("cannot run git: {0}")]
    Spawn(String),
}

/// Is this remote URL a plain local path (as opposed to `file://` or a network URL)?
pub(crate) fn is_local_path(url: &str) -> bool {
    if url.contains("://") {
        return false;
    }
    // scp-like `host:path` (but not a Windows drive `C:\`): a ':' before any '/'.
    match (url.find(':'), url.find('/')) {
        (Some(c), Some(s)) => c > s || (c == 1 && url.len() > 2 && url.as_bytes()[2] == b'\\'),
        (Some(c), None) => c == 1 && url.len() > 2 && url.as_bytes()[2] == b'\\',
        (None, _) => true,
    }
}

/// Resolve a local-path remote against the repository it is configured in (as git does: relative to the work
/// tree's top, or to the git dir of a bare repository).
pub(crate) fn resolve_path(repo: &gix::Repository, url: &str) -> PathBuf {
    let p = Path::new(url);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    let base = repo.workdir().map(Path::to_path_buf).unwrap_or_else(|| repo.git_dir().to_path_buf());
    base.join(p)
}

/// A name for the mirror ref of a remote: the remote's name, or for a bare URL a digest of it.
pub(crate) fn mirror_key(name: Option<&str>, url: &str) -> String {
    match name {
        Some(n) => {
            n.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
        }
        None => {
            // FNV-1a: stable across runs and platforms, short, no dependency.
            let mut h: u64 = 0xcbf29ce484222325;
            for b in url.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x100000001b3);
            }
            format!("url-{h:016x}")
        }
    }
}

/// `git` run against `local`'s repository, whatever the environment says (`GIT_DIR` of a caller included), never
/// asking for a password on a terminal.
fn git(local: &Store) -> Command {
    // No hooks of this repository (`crate::gitcmd`): agents can write its hooks folder (a push also updates
    // remote-tracking refs, which runs `reference-transaction`); `--no-verify` covers only `pre-push`.
    let mut cmd = crate::gitcmd::base();
    // Absolute paths: `-C some/relative/dir` makes gix's paths relative, and git resolves GIT_DIR after it has
    // changed into the work tree.
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    // From the top of the work tree, as a relative remote path is meant (see `resolve_path`).
    cmd.current_dir(abs(local.repo.workdir().unwrap_or_else(|| local.repo.git_dir())))
        .env("GIT_DIR", abs(local.repo.git_dir()));
    cmd
}

/// What to name the remote on git's command line. A URL with credentials in it (`https://user:token@host/…`) would
/// be readable in the process list: it goes to git through its environment as the URL of a remote named
/// `git-swarm-url`, which the command line names instead.
fn remote_arg(cmd: &mut Command, remote: &str) -> String {
    if redact(remote) == remote {
        return remote.to_string();
    }
    // After whatever the caller's environment configures this way already.
    let n = crate::process().git_config_count;
    cmd.env("GIT_CONFIG_COUNT", (n + 1).to_string())
        .env(format!("GIT_CONFIG_KEY_{n}"), "remote.git-swarm-url.url")
        .env(format!("GIT_CONFIG_VALUE_{n}"), remote);
    "git-swarm-url".to_string()
}

/// Check that a local path is a git repository we can use as a remote.
pub(crate) fn open_local(path: &Path) -> Result<Store, RemoteError> {
    let repo = gix::open_opts(path, crate::open_options(gix::sec::Trust::Full))
        .git(|| format!("the remote {} is not a git repository", path.display()))?;
    Ok(Store::from_repo(repo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_lines_parse() {
        let out = "To /tmp/r.git\n!\tabc:refs/swarm/default\t[rejected] (stale info)\n \tdef:refs/heads/main\tabc..def\nDone\n";
        let lines = parse_porcelain(out);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].flag, '!');
        assert_eq!(lines[0].to, "refs/swarm/default");
        assert_eq!(lines[0].summary, "[rejected]");
        assert_eq!(lines[0].reason.as_deref(), Some("stale info"));
        assert_eq!(lines[1].reason, None);
    }

    #[test]
    fn a_remote_without_push_options_is_a_refusal_not_an_outage() {
        let got = classify(
            "o",
            ["refs/heads/main"].into_iter(),
            &[],
            false,
            "fatal: the receiving end does not support push options\nfatal: the remote end hung up unexpectedly",
        );
        assert!(
            matches!(got, Err(RemoteError::Refused { ref reason, .. }) if reason.contains("push.pushOption")),
            "{got:?}"
        );
    }

    #[test]
    fn a_remote_that_takes_no_push_from_this_clone_is_told_from_an_outage() {
        for stderr in [
            "fatal: remote error: access denied or repository not exported: /origin.git",
            "fatal: unable to access 'https://h/o/r.git/': The requested URL returned error: 403",
            "remote: You are not allowed to push code to this project.\nfatal: unable to access 'x': 403",
            "FATAL: W any r u DENIED by fallthru\n(or you mis-spelled the reponame)",
        ] {
            let got = classify("o", ["refs/swarm/x"].into_iter(), &[], false, stderr);
            assert!(matches!(got, Err(RemoteError::PushDenied { .. })), "{stderr}: {got:?}");
        }
        let unpack = parse_porcelain("!\ta:refs/swarm/x\t[remote rejected] (unpacker error)\n");
        let stderr = "error: insufficient permission for adding an object to repository database ./objects";
        let got = classify("o", ["refs/swarm/x"].into_iter(), &unpack, false, stderr);
        assert!(matches!(got, Err(RemoteError::PushDenied { .. })), "{got:?}");
        // An outage stays an outage.
        let down = "fatal: unable to connect to 127.0.0.1:9418: Connection refused";
        let got = classify("o", ["refs/swarm/x"].into_iter(), &[], false, down);
        assert!(matches!(got, Err(RemoteError::Unreachable { .. })), "{got:?}");
    }

    #[test]
    fn races_and_refusals_are_told_apart() {
        let race = parse_porcelain("!\ta:refs/swarm/x\t[remote rejected] (incorrect old value provided)\n");
        assert!(matches!(
            classify("o", ["refs/swarm/x"].into_iter(), &race, false, ""),
            Ok(Publish::LostRace(r)) if r == "[remote rejected] incorrect old value provided"
        ));
        let hook = parse_porcelain("!\ta:refs/swarm/x\t[remote rejected] (pre-receive hook declined)\n");
        assert!(matches!(
            classify("o", ["refs/swarm/x"].into_iter(), &hook, false, ""),
            Err(RemoteError::Refused { .. })
        ));
        // Both refs of an atomic push declined by a hook that says why: both named, the hook's words kept.
        let both = parse_porcelain(
            "!\tb:refs/heads/main\t[remote rejected] (pre-receive hook declined)\n\
             !\ta:refs/swarm/x\t[remote rejected] (pre-receive hook declined)\n",
        );
        let stderr = "remote: GH006: Protected branch update failed for refs/heads/main.\nremote: \nTo x\n";
        match classify("o", ["refs/swarm/x", "refs/heads/main"].into_iter(), &both, false, stderr) {
            Err(RemoteError::Refused { refname, reason, .. }) => {
                assert_eq!(refname, "refs/swarm/x and refs/heads/main");
                assert_eq!(
                    reason,
                    "[remote rejected] pre-receive hook declined: GH006: Protected branch update failed for refs/heads/main."
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify("o", ["refs/swarm/x"].into_iter(), &[], false, "fatal: could not read from remote"),
            Err(RemoteError::Unreachable { .. })
        ));
        let ok = parse_porcelain("*\ta:refs/swarm/x\t[new reference]\n");
        assert!(matches!(classify("o", ["refs/swarm/x"].into_iter(), &ok, true, ""), Ok(Publish::Done)));
    }

    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(redact("https://x-access-token:s3cr3t@github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("https://github.com/o/r.git"), "https://github.com/o/r.git");
        // An ssh URL keeps its user (the account to check), never a password.
        assert_eq!(redact("ssh://git@host:22/r.git"), "ssh://git@host:22/r.git");
        assert_eq!(redact("ssh://git:pw@host/r.git"), "ssh://git@host/r.git");
        assert_eq!(redact("https://ghp_token@github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("git@github.com:o/r.git"), "git@github.com:o/r.git");
        let e = unreachable("https://u:pw@h/r", "failed to reach https://u:pw@h/r");
        assert!(!e.to_string().contains("pw"), "{e}");
    }

    #[test]
    fn local_paths_are_told_from_urls() {
        assert!(is_local_path("/tmp/r.git"));
        assert!(is_local_path("../r.git"));
        assert!(is_local_path("./a:b"));
        assert!(!is_local_path("file:///tmp/r.git"));
        assert!(!is_local_path("git://127.0.0.1/r.git"));
        assert!(!is_local_path("git@github.com:o/r.git"));
    }
}
