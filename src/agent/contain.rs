//! Every process an agent starts ends with its run. The agent runs in a process group of its own, which a stop
//! reaches; but a `setsid` daemon leaves the group, outlives the run, its time limit and the runner, and — a
//! runner reuses its work tree — writes into the next task's work. Two nets catch it:
//!
//! * **A mark in the environment**: every agent gets `GIT_SWARM_RUN=<mark>`, unique to the run; whatever still
//!   runs with that mark once the run is over is killed (`/proc/<pid>/environ`, the user's own processes).
//! * **A child subreaper** (`prctl(PR_SET_CHILD_SUBREAPER)`, set by a runner): an orphan of the agent becomes the
//!   runner's child instead of init's, so one that cleared its environment is found too — and reaped.
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

/// One process of `/proc`: its id, its parent's, and whether its environment holds `mark`.
fn processes(mark: &str) -> Vec<(i32, i32, bool)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    let needle = format!("{MARK_VAR}={mark}");
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Some(ppid) = parent_of(pid) else { continue };
        let marked = std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()));
        out.push((pid, ppid, marked));
    }
    out
}

/// The parent of `pid`, from `/proc/<pid>/stat` (the field after the command's closing parenthesis).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// End what is left of the agent run marked `mark`: every process with the mark, and — in a subreaper — every
/// child of this process but those in `keep` (pids it still waits on itself). Killed with SIGKILL, the children
/// reaped. Returns how many were killed.
pub(crate) fn end_run(mark: &str, keep: &[u32]) -> usize {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let reaper = is_subreaper();
    let mut killed = 0;
    // Twice: a daemon may fork in the moment between the scan and the kill.
    for _ in 0..2 {
        let found: Vec<(i32, i32)> = processes(mark)
            .into_iter()
            .filter(|(pid, ppid, marked)| {
                *pid != me
                    && !keep.iter().any(|k| i32::try_from(*k).ok() == Some(*pid))
                    && (*marked || (reaper && *ppid == me))
            })
            .map(|(pid, ppid, _)| (pid, ppid))
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
