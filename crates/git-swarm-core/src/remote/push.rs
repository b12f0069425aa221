//! `git push --porcelain [--atomic] --force-with-lease`, and what its output says: every ref it refused, named with
//! the remote's own words, told apart from a lost race and from an outage.

use super::*;

/// `git push --porcelain --force-with-lease=<ref>:<base> <remote> <new>:<ref>`, classified.
pub(crate) fn push(
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
pub(super) const PUSH_OPTIONS_REFUSED: &str = "does not support push options";

/// This process pushes without push options: the remote took none ([`push`]).
pub(super) static NO_PUSH_OPTIONS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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
pub(super) fn is_race(line: &PushLine) -> bool {
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
pub(super) fn is_push_denied(stderr: &str) -> bool {
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
pub(super) fn remote_says(stderr: &str) -> String {
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
