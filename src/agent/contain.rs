//! Every process an agent starts ends with its run. The agent runs in a process group of its own, which a stop
//! reaches; but a `setsid` daemon leaves the group, outlives the run, its time limit and the runner, and — a
//! runner reuses its work tree — writes into the next task's work. Two nets catch it:
//!
//! * **A mark in the environment**: every agent gets `GIT_SWARM_RUN=<mark>`, unique to the run; whatever still
//!   runs with that mark once the run is over is killed (`/proc/<pid>/environ`, the user's own processes).
//! * **A child subreaper** (`prctl(PR_SET_CHILD_SUBREAPER)`, set by a runner): an orphan of the agent becomes the
//!   runner's child instead of init's, so one that cleared its environment is found too — and reaped.
//!
//! A runner process that hosts several agents (`run worker --agents <n>`, [`set_shared`]) has the other agents'
//! runs, checks and git commands among its children too: there the subreaper net takes only the children still in
//! the ended run's session or process group (each run's first process makes a session of its own,
//! `agent::enter`), never a sibling's work; a daemon that left them is found by its mark.
//!
//! Linux (`/proc`, `prctl`); elsewhere both are no-ops. A cgroup would hold even a process that does both (clears
//! its environment and outlives a killed runner); not done here.

use std::path::Path;

/// The variable that marks an agent's processes.
pub(crate) const MARK_VAR: &str = "GIT_SWARM_RUN";

/// A mark for one agent run.
pub(crate) fn new_mark() -> String {
    format!("{}-{:016x}", std::process::id(), fastrand::u64(..))
}

/// Other agents' runs share this process ([`end_run`] spares the children they started).
static SHARED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process hosts several agents: each run's end spares the children of the others.
pub(crate) fn set_shared() {
    SHARED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Make this process the reaper of its orphaned descendants (what a runner does once, at its start). `false`
/// where the system does not allow it.
pub(crate) fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Is this process a child subreaper?
fn is_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::get_child_subreaper().unwrap_or(false)
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Every process of `/proc`, as its `stat` describes it (its environment is read only when it matters: reading
/// another process's environment is the dear part of a scan, and a runner of a hundred agents scans often).
fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(|pid| {
            let [ppid, pgrp, session, start] = stat_of(pid)?;
            Some(Proc { pid, ppid: ppid as i32, pgrp: pgrp as i32, session: session as i32, start })
        })
        .collect()
}

struct Proc {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    session: i32,
    /// When it started, in clock ticks since boot.
    start: u64,
}

/// The mark of the run `pid` belongs to (`None`: no mark), from its environment.
fn mark_of(pid: i32) -> Option<Vec<u8>> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find(|kv| kv.starts_with(MARK_VAR.as_bytes()) && kv.get(MARK_VAR.len()) == Some(&b'='))
        .map(|kv| kv[MARK_VAR.len() + 1..].to_vec())
}

/// The parent, process group, session and start time of `pid`, from `/proc/<pid>/stat` (fields 4, 5, 6 and 22:
/// counted after the command's closing parenthesis, which is field 2).
fn stat_of(pid: i32) -> Option<[u64; 4]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok()).map(|v| v.max(0) as u64);
    Some([n(1)?, n(2)?, n(3)?, n(19)?])
}

/// When `pid` started (clock ticks since boot): what [`end_run`] is told of a run's first process, so that no
/// process older than the run has its environment read.
pub(crate) fn start_of(pid: u32) -> Option<u64> {
    stat_of(i32::try_from(pid).ok()?).map(|s| s[3])
}

/// End what is left of the agent run marked `mark`, whose process group was `group`: every process with the mark,
/// and — in a subreaper — every child of this process but those in `keep` (pids it still waits on itself); when the
/// process hosts other agents ([`set_shared`]), only the children in the session or group `group` (a run's first
/// process makes a session of its own, `agent::enter`).
/// Killed with SIGKILL, the children reaped. Returns how many were killed.
pub(crate) fn end_run(mark: &str, keep: &[u32], group: i32, since: Option<u64>) -> usize {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let reaper = is_subreaper();
    let shared = SHARED.load(std::sync::atomic::Ordering::Relaxed);
    let mut killed = 0;
    // Twice: a daemon may fork in the moment between the scan and the kill.
    for _ in 0..2 {
        let found: Vec<(i32, i32)> = processes()
            .into_iter()
            .filter(|p| p.pid != me && !keep.iter().any(|k| i32::try_from(*k).ok() == Some(p.pid)))
            .filter(|p| {
                // A process older than the run cannot carry its mark (a mark is fresh, and an environment is set
                // when a process starts).
                let young = since.is_none_or(|t| p.start >= t);
                let child = reaper && p.ppid == me;
                // With other agents in this process, a child is this run's when it is in the run's group or session
                // (every run's first process makes a session of its own: `agent::enter`), or carries its mark; a
                // sibling run's process — a zombie whose mark can no longer be read among them — is never taken.
                let left_it = !shared || p.pgrp == group || p.session == group;
                if !(young || child && left_it) {
                    return false;
                }
                let its = mark_of(p.pid);
                let marked = its.as_deref() == Some(mark.as_bytes());
                // In a process of several agents, another run's process is that run's to end.
                marked || (child && left_it && (!shared || its.is_none()))
            })
            .map(|p| (p.pid, p.ppid))
            .collect();
        if found.is_empty() {
            break;
        }
        let mut ours = Vec::new();
        for (pid, ppid) in &found {
            let p = nix::unistd::Pid::from_raw(*pid);
            if nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL).is_ok() {
                killed += 1;
                if *ppid == me {
                    ours.push(p);
                }
            }
        }
        // Our children among them (orphans this subreaper adopted) would stay zombies: reaped, never waited on
        // for long (a process in uninterruptible sleep dies when it can; a later run reaps it).
        let until = std::time::Instant::now() + std::time::Duration::from_millis(500);
        while !ours.is_empty() && std::time::Instant::now() < until {
            ours.retain(|p| {
                !matches!(
                    nix::sys::wait::waitpid(*p, Some(nix::sys::wait::WaitPidFlag::WNOHANG)),
                    Ok(nix::sys::wait::WaitStatus::Exited(..) | nix::sys::wait::WaitStatus::Signaled(..)) | Err(_)
                )
            });
            if !ours.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    killed
}

/// Kill every process of an agent run (one that carries a [`MARK_VAR`], whichever) whose working directory is `dir`
/// or inside it: what a killed runner's agent left working in a work tree, before the tree is used again. A
/// person's shell in the tree carries no mark and is left alone. Returns how many.
pub(crate) fn kill_working_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let me = std::process::id();
    let mut n = 0;
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let marked = || {
            let needle = format!("{MARK_VAR}=");
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv.starts_with(needle.as_bytes())))
        };
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c.starts_with(dir))
            && marked()
            && let Ok(p) = i32::try_from(pid)
        {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
            n += 1;
        }
    }
    n
}
