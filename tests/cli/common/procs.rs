//! Processes as Linux shows them in /proc: who is whose child, what runs, and SIGKILL for the chaos tests.

use std::collections::BTreeMap;

/// One process: its id, its parent's id, its command name (`comm`, at most 15 bytes).
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
}

/// `/proc/<pid>/stat`: `pid (comm) state ppid …`; `comm` may hold spaces and parentheses, so split at the last `)`.
fn parse_stat(text: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let _state = rest.next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(Proc { pid, ppid, comm })
}

/// One process, if it still runs.
pub fn get(pid: u32) -> Option<Proc> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|t| parse_stat(&t))
}

/// Every process of the machine (those that vanish while we look are left out).
pub fn all() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())).filter_map(get).collect()
}

/// The descendants of `roots` (children, grandchildren, …), not the roots themselves.
pub fn descendants(roots: &[u32], procs: &[Proc]) -> Vec<Proc> {
    let mut children: BTreeMap<u32, Vec<&Proc>> = BTreeMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut todo: Vec<u32> = roots.to_vec();
    while let Some(pid) = todo.pop() {
        for c in children.get(&pid).into_iter().flatten() {
            out.push((*c).clone());
            todo.push(c.pid);
        }
    }
    out
}

/// The command line of a process, arguments joined by spaces (empty when it is gone or a zombie).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).split('\0').filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Is the process a zombie (exited, not yet reaped)?
pub fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| t.rfind(')').and_then(|i| t.get(i + 1..)).map(|r| r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// SIGKILL `pid` if it is still the process `expect` describes (same parent and name: a pid reused meanwhile by
/// another process is left alone). True when the signal was sent.
pub fn kill9(expect: &Proc) -> bool {
    match get(expect.pid) {
        Some(now) if now.ppid == expect.ppid && now.comm == expect.comm => i32::try_from(expect.pid).is_ok_and(|p| {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL).is_ok()
        }),
        _ => false,
    }
}

/// A signal to a process by id (no check of what it is).
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) -> bool {
    i32::try_from(pid).is_ok_and(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig).is_ok())
}

/// Processes whose working directory is `dir` or inside it (their ids).
pub fn working_in(dir: &std::path::Path) -> Vec<u32> {
    all()
        .into_iter()
        .filter(|p| std::fs::read_link(format!("/proc/{}/cwd", p.pid)).is_ok_and(|cwd| cwd.starts_with(dir)))
        .map(|p| p.pid)
        .collect()
}
