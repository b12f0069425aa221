//! Where a clone's runners keep their work trees and run files ([`Places`]: outside the git directory, in the cache
//! folder), the pid file that holds a runner's agent id, and what dead runners left (their work trees, their
//! registrations).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{RunError, git};
use crate::agent;

/// Where a clone's runners keep their things. The clone-wide ones (`logs/`, claim records, hook stamps) are in
/// `home`, `<git dir>/swarm/`. The work trees and each runner's run files (prompt, hand-off, its agent's last
/// message) are in `base`, **outside the git directory**: agent CLIs guard whatever is under a `.git/` folder
/// (Claude Code denies writes there while its permission checks are on, Codex's sandbox makes it read-only), so an
/// agent in a work tree under `.git/swarm/` could not write its own files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Places {
    pub home: PathBuf,
    pub base: PathBuf,
}

impl Places {
    /// `$XDG_CACHE_HOME/git-swarm/worktrees/<repository>-<hash of the git directory>` (else under `~/.cache`);
    /// `<git dir>/swarm` when neither is set.
    ///
    /// The folder chosen is recorded in `<git dir>/swarm/worktree-base` the first time, and used from then on by
    /// every process of the clone whatever its environment (a runner under another `HOME`, `sudo`, a moved clone),
    /// so that each finds what the others left. Where it cannot be made (a `HOME` that is not writable), the git
    /// directory's `swarm/` is used instead.
    pub(crate) fn of(common_dir: &Path, env: &crate::environment::Environment) -> Places {
        let home = common_dir.join("swarm");
        let record = home.join("worktree-base");
        if let Ok(text) = std::fs::read_to_string(&record) {
            let base = PathBuf::from(text.trim_end_matches('\n'));
            if base.is_absolute() {
                return Places { home, base };
            }
        }
        let chosen = Places::under(common_dir, env.cache_home().as_deref());
        if std::fs::create_dir_all(&chosen.base).is_err() {
            return Places { base: home.clone(), home };
        }
        if std::fs::create_dir_all(&home).is_ok() {
            // Written whole, then moved into place: a reader sees no half-written path.
            let tmp = home.join(format!("worktree-base.{}.tmp", std::process::id()));
            if std::fs::write(&tmp, format!("{}\n", chosen.base.display())).is_ok() {
                let _ = std::fs::rename(&tmp, &record);
            }
        }
        chosen
    }

    /// [`Places::of`] with the cache folder given (`None`: none is known).
    pub(crate) fn under(common_dir: &Path, cache: Option<&Path>) -> Places {
        let home = common_dir.join("swarm");
        let base = match cache {
            Some(c) => c.join("git-swarm").join("worktrees").join(clone_key(common_dir)),
            None => home.clone(),
        };
        Places { home, base }
    }

    /// The work trees, and the pid file of each runner beside its tree.
    pub(crate) fn trees(&self) -> PathBuf {
        self.base.join("trees")
    }

    pub(crate) fn worktree(&self, agent: &str) -> PathBuf {
        self.trees().join(agent)
    }

    pub(crate) fn pid_file(&self, agent: &str) -> PathBuf {
        self.trees().join(format!("{agent}.pid"))
    }

    /// Warm work trees on their way: a slot's last tree while its next is made (`aside/<agent>`), and the trees of
    /// runners that exited, parked for the next runner of this clone (`parked/`; docs/check.md, *Warm work trees*).
    pub(crate) fn warm(&self) -> PathBuf {
        self.base.join("warm")
    }

    pub(crate) fn run_dir(&self, agent: &str) -> PathBuf {
        self.base.join("run").join(agent)
    }
}

/// A folder name for a clone: its repository's name and a hash of its git directory's path (FNV-1a, stable
/// across builds), so that two clones never share work trees.
fn clone_key(common_dir: &Path) -> String {
    let path = std::fs::canonicalize(common_dir).unwrap_or_else(|_| common_dir.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let top = if path.file_name().is_some_and(|n| n == ".git") { path.parent() } else { Some(path.as_path()) };
    let name: String = top
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().trim_end_matches(".git").to_string())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .take(40)
        .collect();
    format!("{}-{h:016x}", if name.is_empty() { "repo" } else { &name })
}

/// The runners' work trees: name (the runner's agent id), path, and whether the runner that owns it still runs
/// (its pid file names a live process other than this one).
pub(crate) fn worktrees(places: &Places) -> Vec<(String, PathBuf, bool)> {
    let dir = places.trees();
    let Ok(entries) = std::fs::read_dir(&dir) else { return vec![] };
    let mut out: Vec<_> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let alive = runner_alive(places, &name);
            (name, e.path(), alive)
        })
        .collect();
    out.sort();
    out
}

/// Take the lock on a runner's pid file (created if missing), or say which runner holds it. A lock, not the pid
/// alone: it ends with its process whatever way that dies, and a pid the system gave to another process since
/// does not count. The file is opened close-on-exec, so no agent (nor a daemon it leaves) holds it.
pub(super) fn lock_pid_file(path: &Path, agent: &str) -> Result<nix::fcntl::Flock<std::fs::File>, RunError> {
    use nix::fcntl::{Flock, FlockArg};
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| RunError::Setup(format!("cannot open {}: {e}", path.display())))
    };
    // The lock is also held for a moment by a reader that checks whether the runner is alive, and for as long as it
    // takes by a runner that clears what a killed runner of this id left (its work tree, its agent:
    // `remove_runner_worktree`) — with `--agents <n>` a sibling of this very process, whose tree removal waits on
    // the clone's other `git worktree` commands. While the file names a process that no longer runs (the killed
    // runner), that is such a clean-up: wait for it. Only a live holder refuses.
    let started = Instant::now();
    let mut tries = 0u32;
    loop {
        match Flock::lock(open()?, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
            Err((_, e)) => return Err(RunError::Setup(format!("cannot lock {}: {e}", path.display()))),
        }
        let pid = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<u32>().ok());
        let dead = pid.is_some_and(|p| p != std::process::id() && !process_alive(p));
        if tries >= 5 && (!dead || started.elapsed() > PID_LOCK_CLEAN_UP) {
            return Err(RunError::AlreadyRunning { agent: agent.to_string(), pid });
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(40));
    }
}

/// How long a starting runner waits for the clean-up of a killed runner with its id (see `lock_pid_file`).
const PID_LOCK_CLEAN_UP: Duration = Duration::from_secs(120);

/// The pid of the runner `name` of this clone, when one runs (another process holds its pid file locked; `0` when
/// the file does not say which). The CLI refuses its holder ops under such an id: they are the runner's to make.
pub(crate) fn live_runner(places: &Places, name: &str) -> Option<u32> {
    runner_alive(places, name)
        .then(|| std::fs::read_to_string(places.pid_file(name)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0))
}

/// Does the runner `name` of this clone run (another process holds its pid file locked)?
pub(super) fn runner_alive(places: &Places, name: &str) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let Ok(file) = std::fs::File::open(places.pid_file(name)) else { return false };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_unlocked_on_drop) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// Work trees that runners of an earlier version left under `<git dir>/swarm/worktrees/` (killed before they could
/// remove them): removed, with their registrations, once their runner is gone. Returns how many.
pub(crate) fn sweep_legacy_worktrees(home: &Path, common_dir: &Path) -> usize {
    let legacy = Places { home: home.to_path_buf(), base: home.to_path_buf() };
    let old = home.join("worktrees");
    let Ok(entries) = std::fs::read_dir(&old) else { return 0 };
    let mut n = 0;
    for e in entries.flatten().filter(|e| e.path().is_dir()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = old.join(format!("{name}.pid"));
        let alive = std::fs::read_to_string(&pid)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .is_some_and(|p| p != std::process::id() && process_alive(p));
        if !alive {
            agent::kill_leftover(&agent::pgid_file_of(&legacy.run_dir(&name).join("prompt.md")), &e.path());
            git::remove_worktree(common_dir, &e.path());
            let _ = std::fs::remove_file(pid);
            n += 1;
        }
    }
    n
}

/// Remove a runner's work tree: first stop an agent its killed runner could not stop, which may still work in it.
pub(crate) fn remove_runner_worktree(places: &Places, common_dir: &Path, name: &str, path: &Path) {
    use nix::fcntl::{Flock, FlockArg};
    // The id's lock, held through the removal: a runner that runs already is not touched, and one that starts
    // meanwhile is told the id is busy instead of getting a tree that is being deleted. The pid file stays (its
    // lock, not its presence, says who runs): unlinking it could leave a starting runner holding a lock on a file
    // nobody else sees.
    let pid_file = places.pid_file(name);
    let _lock = match std::fs::File::open(&pid_file) {
        Ok(f) => match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => Some(l),
            Err(_) => return,
        },
        Err(_) => None,
    };
    clear_own_worktree(places, common_dir, name, path);
}

/// [`remove_runner_worktree`] for the runner that calls it: its pid file stays (it holds the lock on it).
pub(super) fn clear_own_worktree(places: &Places, common_dir: &Path, name: &str, path: &Path) {
    agent::kill_leftover(&agent::pgid_file_of(&places.run_dir(name).join("prompt.md")), path);
    git::remove_worktree(common_dir, path);
    // Its run folder and its own index too (`runner::slot`): nothing of a dead runner's is read again.
    let _ = agent::files::remove_all(&places.run_dir(name));
    let _ = agent::files::remove_all(&common_dir.join("swarm").join("slots").join(name));
}

/// Does a process with this id run? (Signal 0: no signal is sent, only the check.)
fn process_alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|p| {
        matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None), Ok(()) | Err(nix::errno::Errno::EPERM))
    })
}
