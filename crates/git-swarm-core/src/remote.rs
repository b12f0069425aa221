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
pub struct Endpoint {
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

/// Fetch `refname` from `url` into `mirror` in `local`, and say where the remote's ref is (None: it does not exist).
pub fn fetch(
    local: &Store,
    url: &str,
    push_to: &str,
    refname: &str,
    mirror: &str,
    with: FetchWith,
) -> Result<Option<ObjectId>, RemoteError> {
    Ok(fetch_many(local, url, push_to, &[(refname, mirror)], with)?.into_iter().next().flatten())
}

/// Fetch several refs (`(remote ref, local mirror)`) in one connection; where each one is on the remote.
pub(crate) fn fetch_many(
    local: &Store,
    url: &str,
    push_to: &str,
    refs: &[(&str, &str)],
    with: FetchWith,
) -> Result<Vec<Option<ObjectId>>, RemoteError> {
    match with {
        FetchWith::Gix => {
            // A fetch reads this clone's objects (the negotiation walks local commits, a thin pack's bases are
            // resolved from them) while something may repack them: another runner of the same clone, or this
            // process's own `git gc --auto` after an earlier op, which leaves this handle's view of the packs stale
            // ("Failed to prepare fetch negotiation", "Failed to consume the pack sent by the remote"). Tried again
            // on a freshly opened repository (its own view of the object store), twice; then once by the system
            // `git fetch`, which copes with a concurrent repack. A remote that is down fails every try, as before.
            let mut tries = 0u64;
            loop {
                let fresh = (tries > 0)
                    .then(|| gix::open_opts(local.repo.git_dir(), local.repo.open_options().clone()).ok())
                    .flatten();
                let repo = fresh.as_ref().unwrap_or(&local.repo);
                match fetch_gix(local, repo, url, refs) {
                    Err(RemoteError::Fetch { .. }) if tries < 2 && !stopping() => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(200 * tries));
                    }
                    // What gix said stays in the message if git fails too: it is the better diagnosis.
                    Err(RemoteError::Fetch { remote, message }) if !stopping() => {
                        return fetch_git(local, push_to, refs).map_err(|e| match e {
                            RemoteError::Unreachable { message: git, .. } | RemoteError::Fetch { message: git, .. } => {
                                RemoteError::Fetch { remote, message: format!("{message}; then `git fetch`: {git}") }
                            }
                            other => other,
                        });
                    }
                    other => return other,
                }
            }
        }
        FetchWith::Git => fetch_git(local, push_to, refs),
    }
}

fn unreachable(url: &str, e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Unreachable { remote: redact(url), message: e.to_string().replace(url, &redact(url)) }
}

/// A gix error with its causes (the step that failed says little alone), the URL's credentials left out.
fn gix_failed(url: &str, e: &(dyn std::error::Error + 'static)) -> String {
    crate::with_causes(e).replace(url, &redact(url))
}

/// Fetch by gix through `repo` (this clone, or a fresh handle on it); the mirrors are set in `local`.
fn fetch_gix(
    local: &Store,
    repo: &gix::Repository,
    url: &str,
    refs: &[(&str, &str)],
) -> Result<Vec<Option<ObjectId>>, RemoteError> {
    use gix::remote::Direction;
    // No destination: gix must not fail the fetch over the mirror ref (a process killed while it held the mirror's
    // lock would otherwise break every later fetch of this clone). The mirror is set below, best effort.
    let remote = repo
        .remote_at(url)
        .map_err(|e| unreachable(url, gix_failed(url, &e)))?
        .with_fetch_tags(gix::remote::fetch::Tags::None)
        .with_refspecs(refs.iter().map(|r| r.0), Direction::Fetch)
        .map_err(|e| unreachable(url, gix_failed(url, &e)))?;
    let conn = remote.connect(Direction::Fetch).map_err(|e| unreachable(url, gix_failed(url, &e)))?;
    let prepared = conn
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| unreachable(url, gix_failed(url, &e)))?;
    let tips: Vec<Option<ObjectId>> = refs
        .iter()
        .map(|(refname, _)| {
            prepared.ref_map().remote_refs.iter().find_map(|r| {
                let (name, target, _) = r.unpack();
                (name == refname.as_bytes().as_bstr()).then(|| target.map(|t| t.to_owned())).flatten()
            })
        })
        .collect();
    if tips.iter().all(Option::is_none) {
        // Nothing to fetch; don't let gix complain about an empty mapping.
        drop(prepared);
        return Ok(tips);
    }
    // gix stops a fetch when `interrupt` is set: a watchdog sets it past the time limit, or [`STOP_GRACE`] after
    // the process was told to stop (not at once: the release that follows a stop must still read the state).
    let interrupt = std::sync::Arc::new(AtomicBool::new(false));
    let _watchdog = Watchdog::start(std::sync::Arc::clone(&interrupt));
    prepared
        .receive(gix::progress::Discard, &interrupt)
        .map_err(|e| RemoteError::Fetch { remote: redact(url), message: gix_failed(url, &e) })?;
    packs_readable(&repo.objects.store_ref().path().join("pack"));
    for ((_, mirror), tip) in refs.iter().zip(&tips) {
        if let Some(tip) = tip {
            local.set_mirror(mirror, *tip);
        }
    }
    Ok(tips)
}

/// The packs a fetch wrote, readable by everyone as git makes them (`0444`): gix leaves them private to their owner
/// (`0600`), and the agents of a root runner, which run as nobody, read the clone's objects as their alternates.
fn packs_readable(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.ends_with(".pack") || name.ends_with(".idx") || name.ends_with(".rev")) {
            continue;
        }
        if let Ok(m) = e.metadata()
            && m.is_file()
            && m.permissions().mode() & 0o044 != 0o044
        {
            let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o444));
        }
    }
}

/// How long one `git` command against a remote may run ([`crate::Process::git_timeout`]).
pub(crate) fn git_timeout() -> Duration {
    crate::process().git_timeout
}

/// Once the process is stopping (SIGTERM, Ctrl-C), a `git` command against the remote gets this much more (from
/// the stop, or from its own start if later): enough for a release to go through, never a hang.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

static STOP: std::sync::OnceLock<std::sync::Arc<AtomicBool>> = std::sync::OnceLock::new();

/// The flag a signal handler sets when the process is to stop: `git` commands against the remote (and gix
/// fetches) end by it, after [`STOP_GRACE`]. Set once per process; later calls are ignored.
pub fn set_stop_flag(flag: std::sync::Arc<AtomicBool>) {
    let _ = STOP.set(flag);
}

pub(crate) fn stopping() -> bool {
    STOP.get().is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
}

/// Run `cmd` (a `git` against the remote) to its end, within [`git_timeout`] and [`STOP_GRACE`] after a stop; past
/// that, its whole process group (the `git` and what it started: `ssh`, a local `receive-pack` and its hooks) is
/// killed and the command counts as unreachable — for a push, one whose outcome the caller does not know.
fn output_bounded(cmd: &mut Command) -> Result<std::process::Output, RemoteError> {
    let what = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .find(|a| matches!(a.as_str(), "push" | "fetch" | "ls-remote"));
    let what = format!("git {}", what.unwrap_or_else(|| "command".into()));
    let opts = crate::child::Options {
        // A group of its own, so that a kill reaches what it started (a local `receive-pack`, its hooks, `ssh`) —
        // but not at a terminal: a background group cannot ask for an ssh passphrase there (SIGTTIN), and a person
        // at a terminal ends a hang with Ctrl-C, which reaches the foreground group.
        own_group: !std::io::IsTerminal::is_terminal(&std::io::stdin()),
        tick: Duration::from_millis(10),
        ..crate::child::Options::default()
    };
    let mut deadline = Deadline::new();
    let done = crate::child::run(cmd, opts, &mut || deadline.passed().then_some(()))
        .map_err(|e| RemoteError::Spawn(e.to_string()))?;
    if done.cut.is_some() {
        let why = if deadline.stopped_at.is_some() {
            format!("{what} was stopped with the runner ({}s after the stop)", STOP_GRACE.as_secs())
        } else {
            let limit = crate::time::format_duration(deadline.limit);
            format!("{what} did not finish within {limit} (GIT_SWARM_GIT_TIMEOUT)")
        };
        return Err(RemoteError::Unreachable { remote: String::new(), message: why });
    }
    let status = done.status.map_err(|e| RemoteError::Spawn(e.to_string()))?;
    Ok(std::process::Output { status, stdout: done.stdout, stderr: done.stderr })
}

/// When a command against the remote has run long enough: [`git_timeout`] after its start, or [`STOP_GRACE`] after
/// the process was told to stop.
struct Deadline {
    started: Instant,
    limit: Duration,
    stopped_at: Option<Instant>,
}

impl Deadline {
    fn new() -> Deadline {
        Deadline { started: Instant::now(), limit: git_timeout(), stopped_at: None }
    }

    fn passed(&mut self) -> bool {
        if self.stopped_at.is_none() && stopping() {
            self.stopped_at = Some(Instant::now());
        }
        self.started.elapsed() >= self.limit || self.stopped_at.is_some_and(|t| t.elapsed() >= STOP_GRACE)
    }
}

/// Sets a flag once a fetch has run past [`git_timeout`], or [`STOP_GRACE`] past a stop; ends when dropped.
struct Watchdog {
    done: std::sync::Arc<AtomicBool>,
}

impl Watchdog {
    fn start(interrupt: std::sync::Arc<AtomicBool>) -> Watchdog {
        use std::sync::atomic::Ordering::Relaxed;
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let finished = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            let mut deadline = Deadline::new();
            while !finished.load(Relaxed) {
                if deadline.passed() {
                    interrupt.store(true, Relaxed);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Watchdog { done }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// [`output_bounded`], its error naming `remote`.
fn run_bounded(cmd: &mut Command, remote: &str) -> Result<std::process::Output, RemoteError> {
    output_bounded(cmd).map_err(|e| match e {
        RemoteError::Unreachable { message, .. } => unreachable(remote, message),
        other => other,
    })
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

fn fetch_git(local: &Store, remote: &str, refs: &[(&str, &str)]) -> Result<Vec<Option<ObjectId>>, RemoteError> {
    // ls-remote first would cost a second connection; instead fetch and tell "no such ref" apart from the rest.
    let mut cmd = git(local);
    let target = remote_arg(&mut cmd, remote);
    // `--refmap=`: only the refspecs given here; fetching `main` from a named remote would otherwise also update its
    // remote-tracking ref (`refs/remotes/origin/main`), on which runners sharing a clone race as on the mirror.
    cmd.args(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules"])
        .arg("--refmap=")
        // `--`: whatever the remote's name, it is never taken for an option.
        .arg("--")
        .arg(target);
    // Into refs of this call alone, then the mirror best effort (as `fetch_gix` does): processes sharing a clone
    // would otherwise race on the mirror's lock inside git fetch ("cannot lock ref … is at X but expected Y").
    let scratch = format!("refs/swarm-fetch/{}-{:016x}", std::process::id(), fastrand::u64(..));
    clear_dead_scratch(local);
    for (i, (refname, _)) in refs.iter().enumerate() {
        cmd.arg(format!("+{refname}:{scratch}/{i}"));
    }
    // A git fetch that failed or was killed leaves its refs and their lock files: they are this call's alone.
    let drop_scratch = || {
        let _ = std::fs::remove_dir_all(local.repo.common_dir().join(&scratch));
    };
    let out = run_bounded(&mut cmd, remote).inspect_err(|_| drop_scratch())?;
    if !out.status.success() {
        drop_scratch();
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("couldn't find remote ref") {
            if refs.len() == 1 {
                return Ok(vec![None]);
            }
            // One of several is missing: fetch them one by one to say which.
            return refs
                .iter()
                .map(|r| fetch_git(local, remote, &[*r]).map(|v| v.into_iter().next().flatten()))
                .collect();
        }
        return Err(unreachable(remote, err.trim()));
    }
    let mut tips = Vec::with_capacity(refs.len());
    for (i, (_, mirror)) in refs.iter().enumerate() {
        let name = format!("{scratch}/{i}");
        let tip = local.read_ref(&name)?;
        if let Some(tip) = tip {
            local.set_mirror(mirror, tip);
            let _ = local.delete_ref(&name);
        }
        tips.push(tip);
    }
    drop_scratch();
    Ok(tips)
}

/// The refs of `remote` under `prefix` (`refs/swarm-work/x/`), by `git ls-remote`: name and commit.
pub fn list(local: &Store, remote: &str, prefix: &str) -> Result<Vec<(String, ObjectId)>, RemoteError> {
    let mut cmd = git(local);
    let target = remote_arg(&mut cmd, remote);
    cmd.args(["ls-remote", "--refs", "--"]).arg(target).arg(format!("{prefix}*"));
    let out = run_bounded(&mut cmd, remote)?;
    if !out.status.success() {
        return Err(unreachable(remote, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, name) = l.split_once('\t')?;
            Some((name.to_string(), ObjectId::from_hex(id.as_bytes()).ok()?))
        })
        .filter(|(name, _)| name.starts_with(prefix))
        .collect())
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

/// Remove what fetches of processes that are gone left under `refs/swarm-fetch/` (a killed `git fetch` leaves its
/// refs and their lock files): the folders are named after the fetching process.
pub fn clear_dead_scratch(local: &Store) {
    let Ok(entries) = std::fs::read_dir(local.repo.common_dir().join("refs").join("swarm-fetch")) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        let gone = pid != std::process::id() as i32
            && matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH));
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `git push --porcelain --force-with-lease=<ref>:<base> <remote> <new>:<ref>`, classified.
pub fn push(
    local: &Store,
    remote: &str,
    updates: &[(&str, Option<ObjectId>, ObjectId)],
) -> Result<Publish, RemoteError> {
    let mut cmd = git(local);
    if NO_PUSH_OPTIONS.load(std::sync::atomic::Ordering::Relaxed) {
        // An empty value clears git's list of push options.
        cmd.args(["-c", "push.pushOption="]);
    }
    // Not `--quiet`: it drops the porcelain lines of refs that were updated.
    cmd.args(["push", "--porcelain", "--no-verify"]);
    if updates.len() > 1 {
        cmd.arg("--atomic");
    }
    for (refname, base, _) in updates {
        let base = base.map(|b| b.to_hex().to_string()).unwrap_or_default();
        cmd.arg(format!("--force-with-lease={refname}:{base}"));
    }
    // `--`: whatever the remote's name, it is never taken for an option.
    let target = remote_arg(&mut cmd, remote);
    cmd.arg("--").arg(target);
    for (refname, _, new) in updates {
        cmd.arg(format!("{new}:{refname}"));
    }
    let out = run_bounded(&mut cmd, remote)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success()
        && stderr.contains(PUSH_OPTIONS_REFUSED)
        && !NO_PUSH_OPTIONS.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        // A server that takes no push options cannot honour them either (`ci.skip`, which `ci gitlab` sets through
        // `push.pushOption`): the same push again without them, and so every push of this process.
        return push(local, remote, updates);
    }
    let lines = parse_porcelain(&stdout);
    classify(remote, updates.iter().map(|u| u.0), &lines, out.status.success(), &stderr)
}

/// What git says when the remote takes no push options and the push carries some.
const PUSH_OPTIONS_REFUSED: &str = "does not support push options";

/// This process pushes without push options: the remote took none ([`push`]).
static NO_PUSH_OPTIONS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Push `new` to `refname`, whatever is there, for refs that are not part of the protocol (a work branch kept for
/// inspection).
pub(crate) fn push_forced(local: &Store, remote: &str, refname: &str, new: ObjectId) -> Result<Publish, RemoteError> {
    let mut cmd = git(local);
    cmd.args(["push", "--porcelain", "--no-verify", "--force"]);
    let target = remote_arg(&mut cmd, remote);
    cmd.arg("--").arg(target).arg(format!("{new}:{refname}"));
    let out = run_bounded(&mut cmd, remote)?;
    let lines = parse_porcelain(&String::from_utf8_lossy(&out.stdout));
    classify(remote, std::iter::once(refname), &lines, out.status.success(), &String::from_utf8_lossy(&out.stderr))
}

/// Delete `refnames` on the remote (refs outside the protocol: kept work of landed tasks), in one push.
pub(crate) fn push_delete(local: &Store, remote: &str, refnames: &[String]) -> Result<(), RemoteError> {
    if refnames.is_empty() {
        return Ok(());
    }
    let mut cmd = git(local);
    cmd.args(["push", "--porcelain", "--no-verify"]);
    let target = remote_arg(&mut cmd, remote);
    cmd.arg("--").arg(target).args(refnames.iter().map(|r| format!(":{r}")));
    let out = run_bounded(&mut cmd, remote)?;
    let lines = parse_porcelain(&String::from_utf8_lossy(&out.stdout));
    // Each ref deleted (`-`), or not there in the first place (git then says so and exits non-zero).
    let stderr = String::from_utf8_lossy(&out.stderr);
    let gone = |r: &str| {
        stderr.lines().any(|l| l.contains("remote ref does not exist") && l.contains(r))
            || lines.iter().any(|l| l.to == r && l.reason.as_deref().is_some_and(|x| x.contains("does not exist")))
    };
    let left: Vec<&String> =
        refnames.iter().filter(|r| !lines.iter().any(|l| l.to == **r && l.flag == '-') && !gone(r)).collect();
    if left.is_empty() {
        return Ok(());
    }
    Err(RemoteError::Refused {
        remote: redact(remote),
        refname: left.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(" and "),
        reason: crate::escape::line(&stderr.lines().filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("; "))
            .chars()
            .take(300)
            .collect(),
    })
}

/// One ref's line of `git push --porcelain`: `<flag>\t<from>:<to>\t<summary> (<reason>)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushLine {
    pub flag: char,
    pub from: String,
    pub to: String,
    pub summary: String,
    pub reason: Option<String>,
}

/// Parse the porcelain output of `git push`; lines that are not ref lines (`To …`, `Done`) are skipped.
pub fn parse_porcelain(out: &str) -> Vec<PushLine> {
    out.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, '\t');
            let flag = parts.next()?;
            let refs = parts.next()?;
            let rest = parts.next().unwrap_or_default();
            let mut fc = flag.chars();
            let flag = fc.next()?;
            if fc.next().is_some() || !matches!(flag, ' ' | '+' | '-' | '*' | '!' | '=') {
                return None;
            }
            let (from, to) = refs.split_once(':')?;
            let (summary, reason) = match rest.find(" (") {
                Some(i) if rest.ends_with(')') => (&rest[..i], Some(rest[i + 2..rest.len() - 1].to_string())),
                _ => (rest, None),
            };
            Some(PushLine { flag, from: from.into(), to: to.into(), summary: summary.into(), reason })
        })
        .collect()
}

/// Reasons that mean "somebody else moved the ref first".
fn is_race(line: &PushLine) -> bool {
    let reason = line.reason.as_deref().unwrap_or_default();
    if line.summary == "[rejected]" {
        return ["stale info", "fetch first", "non-fast-forward", "atomic push failed", "already exists"]
            .iter()
            .any(|r| reason.contains(r));
    }
    if line.summary == "[remote rejected]" {
        return [
            "incorrect old value",
            "failed to update ref",
            "failed to lock",
            "cannot lock",
            "atomic",
            "transaction failed",
        ]
        .iter()
        .any(|r| reason.contains(r));
    }
    false
}

/// A refusal that says the remote could not store what was sent (a full disk, an I/O error): it changed nothing,
/// and may pass once there is room — not a rule that refuses the ref for good.
pub fn is_storage_refusal(reason: &str) -> bool {
    ["unpacker error", "No space left", "unable to write", "Input/output error", "Disk quota exceeded"]
        .iter()
        .any(|w| reason.contains(w))
}

/// What a server says when it will not take a push from these credentials (git daemon without receive-pack, an
/// HTTP 403, gitolite's `W … DENIED`, GitLab's "not allowed to push", a path remote this user may not write). A
/// push comes after the op's fetch, so the remote answered: this is about rights, not an outage.
fn is_push_denied(stderr: &str) -> bool {
    let m = stderr.to_ascii_lowercase();
    [
        "access denied",
        "permission denied",
        "denied by",
        "error: 403",
        "returned error: 403",
        "not allowed to push",
        "insufficient permission",
        "service not enabled",
        "read-only",
        "read only",
        "write access",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// What the remote itself printed (git's `remote: ` lines: a hook's message, a protection rule), one line, at most
/// a few hundred characters.
fn remote_says(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("remote:"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '-' || c == '=' || c == '*'))
        .take(4)
        .collect();
    crate::escape::line(&lines.join("; ")).chars().take(400).collect()
}

/// What a push did to our refs.
pub fn classify<'a>(
    remote: &str,
    refs: impl Iterator<Item = &'a str>,
    lines: &[PushLine],
    success: bool,
    stderr: &str,
) -> Result<Publish, RemoteError> {
    let mut race = None;
    let mut seen = 0;
    let mut refused: Vec<(String, String)> = Vec::new();
    for refname in refs {
        let Some(line) = lines.iter().find(|l| l.to == refname) else {
            continue;
        };
        seen += 1;
        match line.flag {
            ' ' | '+' | '*' | '=' => {}
            _ if is_race(line) => {
                race.get_or_insert_with(|| format!("{} {}", line.summary, line.reason.as_deref().unwrap_or("")));
            }
            _ => {
                let reason = format!("{} {}", line.summary, line.reason.as_deref().unwrap_or("")).trim().to_string();
                if !refused.iter().any(|(r, _)| r == refname) {
                    refused.push((refname.to_string(), reason));
                }
            }
        }
    }
    if !refused.is_empty() && stderr.contains("insufficient permission") {
        // A path remote this user may not write: its unpacker fails, which reads like a full disk.
        let msg = stderr.lines().find(|l| l.contains("insufficient permission")).unwrap_or_default().trim();
        return Err(RemoteError::PushDenied { remote: redact(remote), message: crate::escape::line(msg) });
    }
    if !refused.is_empty() {
        // Every ref the remote refused is named (a pre-receive hook declines a whole atomic push: which of its refs
        // it minded only its own message tells), with what the remote said about it.
        let mut reason = refused[0].1.clone();
        let said = remote_says(stderr);
        if !said.is_empty() {
            reason = format!("{reason}: {said}");
        }
        let refname = refused.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>().join(" and ");
        return Err(RemoteError::Refused { remote: redact(remote), refname, reason });
    }
    if let Some(r) = race {
        return Ok(Publish::LostRace(r.trim().to_string()));
    }
    if !success && stderr.contains(PUSH_OPTIONS_REFUSED) {
        // A refusal, not an outage: waiting does not change what the server supports.
        let refname = lines.iter().map(|l| l.to.as_str()).collect::<Vec<_>>().join(" and ");
        return Err(RemoteError::Refused {
            remote: redact(remote),
            refname: if refname.is_empty() { "the push".into() } else { refname },
            reason: "the remote takes no push options, and this push carries some (`push.pushOption` in git's \
                     config: `ci.skip` from `git swarm ci gitlab`); unset it for this remote"
                .into(),
        });
    }
    if seen == 0 || !success {
        let msg = stderr.lines().filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("; ");
        if is_push_denied(&msg) {
            return Err(RemoteError::PushDenied {
                remote: redact(remote),
                message: msg.replace(remote, &redact(remote)),
            });
        }
        return Err(RemoteError::Unreachable {
            remote: redact(remote),
            message: if msg.is_empty() {
                "git push failed without saying why".into()
            } else {
                msg.replace(remote, &redact(remote))
            },
        });
    }
    Ok(Publish::Done)
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
