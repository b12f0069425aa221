//! Fetching refs from a remote into private mirrors: gix in-process (one connection for several refs), or `git
//! fetch` (smart HTTP, and `--transport git-fetch`).

use super::*;

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

pub(super) fn unreachable(url: &str, e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Unreachable { remote: redact(url), message: e.to_string().replace(url, &redact(url)) }
}

/// A gix error with its causes (the step that failed says little alone), the URL's credentials left out.
pub(super) fn gix_failed(url: &str, e: &(dyn std::error::Error + 'static)) -> String {
    crate::with_causes(e).replace(url, &redact(url))
}

/// Fetch by gix through `repo` (this clone, or a fresh handle on it); the mirrors are set in `local`.
pub(super) fn fetch_gix(
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
pub(super) fn packs_readable(dir: &std::path::Path) {
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

pub(super) fn fetch_git(
    local: &Store,
    remote: &str,
    refs: &[(&str, &str)],
) -> Result<Vec<Option<ObjectId>>, RemoteError> {
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
pub(crate) fn list(local: &Store, remote: &str, prefix: &str) -> Result<Vec<(String, ObjectId)>, RemoteError> {
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
