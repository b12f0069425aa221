//! Every `git` against a remote bounded: in time (`GIT_SWARM_GIT_TIMEOUT`, [`crate::Process`]) and by the stop flag
//! (SIGTERM, Ctrl-C), killed with its process group.

use super::*;

/// How long one `git` command against a remote may run ([`crate::Process::git_timeout`]).
pub(crate) fn git_timeout() -> Duration {
    crate::process().git_timeout
}

/// Once the process is stopping (SIGTERM, Ctrl-C), a `git` command against the remote gets this much more (from
/// the stop, or from its own start if later): enough for a release to go through, never a hang.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

pub(super) static STOP: std::sync::OnceLock<std::sync::Arc<AtomicBool>> = std::sync::OnceLock::new();

/// The flag a signal handler sets when the process is to stop: `git` commands against the remote (and gix
/// fetches) end by it, after `STOP_GRACE`. Set once per process; later calls are ignored.
pub fn set_stop_flag(flag: std::sync::Arc<AtomicBool>) {
    let _ = STOP.set(flag);
}

pub(crate) fn stopping() -> bool {
    STOP.get().is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
}

/// Run `cmd` (a `git` against the remote) to its end, within [`git_timeout`] and [`STOP_GRACE`] after a stop; past
/// that, its whole process group (the `git` and what it started: `ssh`, a local `receive-pack` and its hooks) is
/// killed and the command counts as unreachable — for a push, one whose outcome the caller does not know.
pub(super) fn output_bounded(cmd: &mut Command) -> Result<std::process::Output, RemoteError> {
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
pub(super) struct Deadline {
    pub(super) started: Instant,
    pub(super) limit: Duration,
    pub(super) stopped_at: Option<Instant>,
}

impl Deadline {
    pub(super) fn new() -> Deadline {
        Deadline { started: Instant::now(), limit: git_timeout(), stopped_at: None }
    }

    pub(super) fn passed(&mut self) -> bool {
        if self.stopped_at.is_none() && stopping() {
            self.stopped_at = Some(Instant::now());
        }
        self.started.elapsed() >= self.limit || self.stopped_at.is_some_and(|t| t.elapsed() >= STOP_GRACE)
    }
}

/// Sets a flag once a fetch has run past [`git_timeout`], or [`STOP_GRACE`] past a stop; ends when dropped.
pub(super) struct Watchdog {
    pub(super) done: std::sync::Arc<AtomicBool>,
}

impl Watchdog {
    pub(super) fn start(interrupt: std::sync::Arc<AtomicBool>) -> Watchdog {
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

/// [`output_bounded`], its error naming `remote`.
pub(super) fn run_bounded(cmd: &mut Command, remote: &str) -> Result<std::process::Output, RemoteError> {
    output_bounded(cmd).map_err(|e| match e {
        RemoteError::Unreachable { message, .. } => unreachable(remote, message),
        other => other,
    })
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
