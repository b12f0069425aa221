//! # git-swarm-core
//!
//! Many coding agents, one repository, no server. The coordination state of a swarm — its settings and its task
//! board — lives in one git ref, `refs/swarm/<name>`, on the shared remote, and changes only by compare-and-swap of
//! that ref. This crate is the engine of that protocol; the `git-swarm` binary (its runner, agents and command
//! line) is built on it.
//!
//! Layers (arrows point down; nothing points up):
//!
//! * `txn` — the optimistic loop (read → op → commit → CAS → retry); the only writer of the state ref. Seen from
//!   outside as a [`Swarm`] and its [`Committed`] results.
//! * [`ops`] — the operations as pure functions over a [`ops::Board`].
//! * `store` — the state tree in a git object database, with gix, seen from outside as a [`Store`]; `remote` —
//!   where the ref lives and how it is fetched ([`fetch`]) and pushed.
//! * [`model`] — tasks and settings, and the validation of everything read from git.
//!
//! `txn`, `store` and `remote` are private rooms: what callers use of them is re-exported at the root, so a
//! change inside them cannot break the binary unless it changes one of those names.
//!
//! The engine does no terminal I/O and reads no user configuration on its own: the caller passes every choice.

#![warn(unreachable_pub)]

pub mod child;
pub mod escape;
pub mod gitcmd;
pub mod model;
pub mod ops;
mod remote;
pub mod secrets;
pub mod state;
mod store;
pub mod time;
pub mod trailer;
mod txn;
pub mod usage;

// The engine's private rooms, and what the binary (and tests) use of them: the state tree in a git object database
// (`store`), the optimistic loop and its transports (`txn`), git's transports (`remote`).
pub use remote::{
    FetchWith, Publish, PushLine, RemoteError, classify, clear_dead_scratch, fetch, is_storage_refusal,
    parse_porcelain, set_stop_flag,
};
pub use store::{
    AlsoOp, GitContext, Identity, Landed, Landings, LogEntry, Problem, Refused, Snapshot, Store, StoreError, short,
};
pub use txn::{
    Committed, Compacted, Pacer, Reach, Reads, Relation, Retry, Swarm, TargetCheck, TxnError, profile, take_ridden_out,
};

use std::sync::OnceLock;

use crate::txn::{GitTransport, InProcess, StateRemote};
use std::time::Duration;

/// How to reach the state ref.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// In-process for the repository itself and local paths; gix fetch and `git push` for URLs.
    #[default]
    Auto,
    /// Always through git's transport (gix fetch, `git push`), local paths too.
    Git,
    /// `git fetch` and `git push` subprocesses for every remote but the repository itself.
    GitFetch,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "git" => Ok(Transport::Git),
            "git-fetch" => Ok(Transport::GitFetch),
            other => Err(format!("unknown transport '{other}' (auto, git or git-fetch)")),
        }
    }
}

/// Open the swarm `name` as seen from the repository `repo`.
///
/// `remote` is a configured remote's name, a URL, or a path; `None` means `origin` when it is configured, else the
/// repository itself.
pub fn open_swarm(
    repo: gix::Repository,
    remote: Option<&str>,
    name: &str,
    transport: Transport,
) -> Result<Swarm, TxnError> {
    model::validate_swarm_name(name)
        .map_err(|message| StoreError::Git { context: "bad swarm name".into(), message })?;
    let config = repo.config_snapshot();
    let url_of = |remote_name: &str| config.string(format!("remote.{remote_name}.url").as_str()).map(|u| u.to_string());
    let (label, remote_name, url) = match remote {
        None => match url_of("origin") {
            Some(url) => ("origin".to_string(), Some("origin".to_string()), Some(url)),
            None => ("this repository".to_string(), None, None),
        },
        Some(spec) => match url_of(spec) {
            Some(url) => (spec.to_string(), Some(spec.to_string()), Some(url)),
            None => (crate::secrets::redact(spec), None, Some(spec.to_string())),
        },
    };
    // What a read learns about trees is kept in this clone, whichever store it reads (store.rs, *layout*).
    let cache = repo.common_dir().join("swarm").join("cache");
    let remote: Box<dyn StateRemote> = match url {
        None => Box::new(InProcess::itself(Store::open(repo.git_dir())?.with_cache(cache.clone()))),
        Some(url)
            if remote::is_local_path(&url) && remote_name.is_none() && !remote::resolve_path(&repo, &url).exists() =>
        {
            return Err(StoreError::Git {
                context: format!("--remote {url}"),
                message: "no remote of that name, and no repository at that path".into(),
            }
            .into());
        }
        Some(url) if remote::is_local_path(&url) && transport == Transport::Auto => {
            let path = remote::resolve_path(&repo, &url);
            let key = remote::mirror_key(remote_name.as_deref(), &url);
            Box::new(InProcess::path(remote::open_local(&path)?.with_cache(cache.clone()), key))
        }
        Some(url) => {
            // A configured remote is pushed by name (git applies pushurl and insteadOf); a bare URL as it is.
            let push_to = remote_name.clone().unwrap_or_else(|| url.clone());
            let fetch_url = if remote::is_local_path(&url) {
                remote::resolve_path(&repo, &url).to_string_lossy().into_owned()
            } else {
                url.clone()
            };
            let is_http = url.starts_with("http://") || url.starts_with("https://");
            let fetch_with = if transport == Transport::GitFetch || is_http { FetchWith::Git } else { FetchWith::Gix };
            let mirror_key = remote::mirror_key(remote_name.as_deref(), &url);
            Box::new(GitTransport::new(remote::Endpoint { url: fetch_url, push_to, mirror_key, fetch_with }))
        }
    };
    Ok(Swarm {
        local: Store::from_repo(repo).with_cache(cache),
        remote,
        name: name.to_string(),
        remote_label: label,
        publishes: Default::default(),
        lost: Default::default(),
        pacer: Default::default(),
        writer: None,
    })
}

/// How we open repositories. gix sizes its table of pack indices when a repository is opened (by default 10%
/// more than the packs on disk, at least 32); every fetch adds a pack, and a process that loses a few races in a
/// busy swarm fetches several times, so the table would overflow ("too few index slots"). Room for 512 indices
/// costs little and `maybe_gc` keeps the number of packs far below it.
///
/// A machine with no git identity (a fresh container, a CI runner) must still work: gix refuses to write a reflog
/// without a committer, so a fallback is set for that case only (it never replaces an identity that is configured,
/// in git config or `GIT_COMMITTER_*`). The commits we write name their author themselves (`Ctx::identity`).
pub fn open_options(level: gix::sec::Trust) -> gix::open::Options {
    use gix::sec::trust::DefaultForLevel;
    gix::open::Options::default_for_level(level)
        .object_store_slots(gix::odb::store::init::Slots::AsNeededByDiskState { multiplier: 2.0, minimum: 512 })
        .config_overrides([
            format!("gitoxide.committer.nameFallback={FALLBACK_NAME}"),
            format!("gitoxide.committer.emailFallback={FALLBACK_EMAIL}"),
        ])
}

/// The identity of reflog lines written where no git identity is configured.
pub(crate) const FALLBACK_NAME: &str = "git-swarm";
pub(crate) const FALLBACK_EMAIL: &str = "git-swarm@git-swarm.invalid";

/// An error with its causes, `error: cause: cause's cause`, each one left out that the text so far already says
/// (gix's errors name the step that failed and keep what went wrong in their sources).
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // `{:#}`: without the source location gix's chained errors add otherwise. A classification marker of gix
        // (`NotFound`, `PermissionDenied`) is for programs, not a cause to tell.
        let text = format!("{cause:#}");
        if !cause.is::<gix::error::ClassificationMarker>() && !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

// --- What the engine knows of its process ------------------------------------------------------------------
/// What the engine knows of the process it runs in: the binary reads its environment once, at its start, and hands
/// the engine what it needs here ([`install`]) — the engine itself reads no environment variable. Set once; a
/// process that never sets it (a test of the engine, a tool built on it) gets [`Process::default`].
#[derive(Debug, Clone)]
pub struct Process {
    /// How long one `git` command against a remote may run (`GIT_SWARM_GIT_TIMEOUT`; 10 minutes by default: a large
    /// push over a slow link fits, a hook or a server that hangs does not hold a runner for ever).
    pub git_timeout: Duration,
    /// How many `GIT_CONFIG_KEY_<n>` entries the environment that git inherits holds already (`GIT_CONFIG_COUNT`):
    /// the engine's own go after them.
    pub git_config_count: usize,
    /// The secrets of the environment (by name and by value, [`crate::secrets::is_secret`]), scrubbed from every
    /// message, log line and state file the engine writes.
    pub secrets: secrets::Scrubber,
}

impl Default for Process {
    fn default() -> Self {
        Process { git_timeout: Duration::from_secs(600), git_config_count: 0, secrets: secrets::Scrubber::default() }
    }
}

impl Process {
    /// The engine's share of the environment `vars` (name, value), or what is wrong with it, naming the variable.
    pub fn from_vars(vars: &[(String, String)]) -> Result<Process, String> {
        let get = |k: &str| vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let git_timeout = match get("GIT_SWARM_GIT_TIMEOUT").map(str::trim).filter(|v| !v.is_empty()) {
            None => Duration::from_secs(600),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0 && s.is_finite() && *s < 1e9)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| format!("GIT_SWARM_GIT_TIMEOUT={v}: not a number of seconds above 0 (e.g. 600)"))?,
        };
        let git_config_count = match get("GIT_CONFIG_COUNT").map(str::trim).filter(|v| !v.is_empty()) {
            None => 0,
            Some(v) => v.parse().map_err(|_| format!("GIT_CONFIG_COUNT={v}: not a whole number"))?,
        };
        Ok(Process { git_timeout, git_config_count, secrets: secrets::Scrubber::from_vars(vars.iter().cloned()) })
    }
}

static PROCESS: OnceLock<Process> = OnceLock::new();

/// Set what the engine knows of this process; the first call wins (`false` after it).
pub fn install(p: Process) -> bool {
    PROCESS.set(p).is_ok()
}

/// What was installed, else the defaults.
pub(crate) fn process() -> &'static Process {
    static DEFAULT: OnceLock<Process> = OnceLock::new();
    PROCESS.get().unwrap_or_else(|| DEFAULT.get_or_init(Process::default))
}

#[cfg(test)]
mod process_tests {
    use super::*;

    #[test]
    fn a_bad_value_names_its_variable_and_a_missing_one_is_the_default() {
        let vars = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert_eq!(Process::from_vars(&[]).expect("none").git_timeout, Duration::from_secs(600));
        assert_eq!(
            Process::from_vars(&vars("GIT_SWARM_GIT_TIMEOUT", "2.5")).expect("ok").git_timeout.as_millis(),
            2500
        );
        for bad in ["ten", "0", "-3", "inf"] {
            let e = Process::from_vars(&vars("GIT_SWARM_GIT_TIMEOUT", bad)).expect_err(bad);
            assert!(e.starts_with(&format!("GIT_SWARM_GIT_TIMEOUT={bad}:")), "{e}");
        }
        assert_eq!(Process::from_vars(&vars("GIT_CONFIG_COUNT", "3")).expect("ok").git_config_count, 3);
        assert!(Process::from_vars(&vars("GIT_CONFIG_COUNT", "x")).is_err());
    }
}
