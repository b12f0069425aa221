//! # git-swarm
//!
//! Many coding agents, one repository, no server. The coordination state of a swarm — its settings and its task
//! board — lives in one git ref, `refs/swarm/<name>`, on the shared remote, and changes only by compare-and-swap of
//! that ref. This crate is the engine; the `git-swarm` binary is a thin command line over it.
//!
//! Layers (arrows point down; nothing points up):
//!
//! * [`txn`] — the optimistic loop (read → op → commit → CAS → retry); the only writer of the state ref.
//! * [`ops`] — the operations as pure functions over a [`ops::Board`].
//! * [`store`] — the state tree in a git object database, with gix; [`remote`] — where the ref lives and how it
//!   is fetched and pushed.
//! * [`model`] — tasks and settings, and the validation of everything read from git.
//!
//! The engine does no terminal I/O and reads no user configuration on its own: the caller passes every choice.

pub mod agent;
pub mod board;
pub mod check;
pub(crate) mod child;
pub mod config;
pub mod doctor;
pub mod escape;
pub mod fleet;
pub mod forge;
pub(crate) mod fsck;
pub mod gitcmd;
pub mod github;
pub mod gitlab;
pub mod hooks;
pub(crate) mod leaks;
pub mod model;
pub mod ops;
pub mod remote;
pub mod runner;
pub mod secrets;
pub mod state;
pub mod store;
pub mod time;
pub mod trust;
pub mod txn;
pub mod usage;

use std::path::Path;

use crate::remote::FetchWith;
use crate::store::{Store, StoreError};
use crate::txn::{GitTransport, InProcess, StateRemote};
use crate::txn::{Swarm, TxnError};

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

/// Open the repository at or above `dir`, as git does (`GIT_DIR` and friends included).
pub fn discover(dir: &Path) -> Result<gix::Repository, StoreError> {
    use crate::store::GitContext;
    // `git -c k=v swarm …` reaches us in $GIT_CONFIG_PARAMETERS, which gix does not read.
    let params = crate::config::git_config_parameters();
    let trust = gix::sec::trust::Mapping {
        full: open_options(gix::sec::Trust::Full).cli_overrides(params.clone()),
        reduced: open_options(gix::sec::Trust::Reduced).cli_overrides(params),
    };
    // As git does, a `GIT_CEILING_DIRECTORIES` that names none of the folders above is no error (gix's default
    // refuses to discover anything then: a user with `GIT_CEILING_DIRECTORIES=/home` could not use a clone in /srv).
    let options = gix::discover::upwards::Options { match_ceiling_dir_or_error: false, ..Default::default() };
    let found = gix::ThreadSafeRepository::discover_with_environment_overrides_opts(dir, options, trust);
    match found {
        Ok(repo) => Ok(repo.into()),
        // Said as git says it: gix's text repeats the path and adds nothing.
        Err(e) if none_found(&e) => Err(StoreError::Git {
            context: "not a git repository (or any of the parent directories)".into(),
            message: dir.display().to_string(),
        }),
        Err(e) => Err(e).git(|| format!("not a git repository (or any parent up to the root): {}", dir.display())),
    }
}

/// Did discovery end for want of a repository (rather than meeting one it could not open)?
fn none_found(e: &gix::Error) -> bool {
    use gix::discover::upwards::Error as Upwards;
    matches!(
        e.downcast_any_ref::<Upwards>(),
        Some(
            Upwards::NoGitRepository { .. }
                | Upwards::NoGitRepositoryWithinCeiling { .. }
                | Upwards::NoGitRepositoryWithinFs { .. }
        )
    )
}

/// How we open repositories. gix sizes its table of pack indices when a repository is opened (by default 10%
/// more than the packs on disk, at least 32); every fetch adds a pack, and a process that loses a few races in a
/// busy swarm fetches several times, so the table would overflow ("too few index slots"). Room for 512 indices
/// costs little and `maybe_gc` keeps the number of packs far below it.
///
/// A machine with no git identity (a fresh container, a CI runner) must still work: gix refuses to write a reflog
/// without a committer, so a fallback is set for that case only (it never replaces an identity that is configured,
/// in git config or `GIT_COMMITTER_*`). The commits we write name their author themselves (`Ctx::identity`).
pub(crate) fn open_options(level: gix::sec::Trust) -> gix::open::Options {
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
pub(crate) fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
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
