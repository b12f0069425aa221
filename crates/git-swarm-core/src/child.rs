//! The one bounded child runner: a prepared [`Command`] run in a process group of its own, its stdin written from a
//! thread, stdout and stderr piped and read at once by threads of their own (kept up to a cap, or streamed to a [`Sink`]), a
//! time limit and the caller's stop check enforced, and on either the whole group ended — at once, or by `SIGTERM`
//! and `SIGKILL` after a grace — and reaped. An agent run (`agent::run`), a CLI's `--version` (`agent::preset`) and
//! every `git` against a remote (`remote`) run through it.
//!
//! A pipe is always read to its end, whatever is kept: a child that prints more than the cap never stalls on a full
//! pipe. Reading it is bounded too ([`Running::drain`]): a helper that left the group may hold a pipe open for ever.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

/// What the runner does with one of the child's output pipes.
pub enum Pipe {
    /// Read to its end; the first this many bytes are kept, the rest are read and dropped.
    Keep(usize),
    /// Read to its end, each chunk given to the sink as it comes.
    Stream(Box<dyn Sink>),
}

/// Where a [`Pipe::Stream`] goes: it is fed on the pipe's reader thread.
pub trait Sink: Send {
    /// The next bytes of the pipe.
    fn feed(&mut self, chunk: &[u8]);
    /// The pipe was closed (or could not be read further); nothing more comes.
    fn finish(&mut self) {}
}

/// How a child is run.
pub struct Options {
    /// A process group of its own, so that an end reaches everything it started; else only the child is signalled.
    pub own_group: bool,
    /// The child makes a session of its own first thing (`git-swarm __exec --setsid`): it must not be made a group
    /// leader here (`setsid` refuses a group leader); its session's group has its pid all the same.
    pub own_session: bool,
    /// Written to its stdin (from a thread, then closed); `None` leaves stdin as the command has it.
    pub stdin: Option<Vec<u8>>,
    pub stdout: Pipe,
    pub stderr: Pipe,
    /// How long it may run, from its start.
    pub limit: Option<Duration>,
    /// On an end (the limit, a stop): `None` kills at once; else `SIGTERM` first and `SIGKILL` this long after.
    pub grace: Option<Duration>,
    /// How often it is looked at while it runs (and the stop check asked).
    pub tick: Duration,
    /// For [`run`]: how long the pipes are read after the child's end — at least this, else to the end of
    /// [`Options::limit`]; `None`: to their end, however long.
    pub drain: Option<Duration>,
    /// For [`run`]: kill what is left in its group once it has ended and its pipes are drained.
    pub end_group: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            own_group: true,
            own_session: false,
            stdin: None,
            stdout: Pipe::Keep(usize::MAX),
            stderr: Pipe::Keep(usize::MAX),
            limit: None,
            grace: None,
            tick: Duration::from_millis(20),
            drain: None,
            end_group: false,
        }
    }
}

/// Why the runner ended a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut<R> {
    /// It ran past [`Options::limit`].
    TimedOut,
    /// The caller's stop check said so, with its reason.
    Stopped(R),
}

/// How a child's wait ended.
#[derive(Debug)]
pub struct Ended<R> {
    /// Why the runner ended it, if it did (its group was signalled, and it was reaped).
    pub cut: Option<Cut<R>>,
    /// Its exit status; `Err` when waiting for it failed.
    pub status: std::io::Result<ExitStatus>,
}

/// What [`run`] gave: the end, and what was kept of each pipe (empty for a pipe streamed, one still open
/// when the drain ran out, or a child the runner ended).
#[derive(Debug)]
pub struct Finished<R> {
    pub cut: Option<Cut<R>>,
    pub status: std::io::Result<ExitStatus>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// A child started by [`Running::spawn`].
pub struct Running {
    child: Child,
    started: Instant,
    own_group: bool,
    limit: Option<Duration>,
    grace: Option<Duration>,
    tick: Duration,
    stdout: Option<mpsc::Receiver<Vec<u8>>>,
    stderr: Option<mpsc::Receiver<Vec<u8>>>,
}

impl Running {
    /// Start `cmd` as `opts` say: its group, its pipes and their readers, its stdin.
    pub fn spawn(cmd: &mut Command, opts: Options) -> std::io::Result<Running> {
        if opts.own_group && !opts.own_session {
            cmd.process_group(0);
        }
        if opts.stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let started = Instant::now();
        // From a thread: a child that does not read its stdin must not block us.
        if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), opts.stdin) {
            std::thread::spawn(move || {
                let _ = stdin.write_all(&bytes);
            });
        }
        let stdout = child.stdout.take().map(|p| reader(p, opts.stdout));
        let stderr = child.stderr.take().map(|p| reader(p, opts.stderr));
        Ok(Running {
            child,
            started,
            own_group: opts.own_group,
            limit: opts.limit,
            grace: opts.grace,
            tick: opts.tick,
            stdout,
            stderr,
        })
    }

    /// The child's process id (with [`Options::own_group`], its group's too).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the child's end. Each tick past the limit, or when `stop` gives a reason (asked each tick until
    /// then), it is ended as [`Options::grace`] says, and reaped.
    pub fn wait<R>(&mut self, stop: &mut dyn FnMut() -> Option<R>) -> Ended<R> {
        let mut cut: Option<(Instant, Cut<R>)> = None;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break Ok(st),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            match (&cut, self.grace) {
                (None, grace) => {
                    let why = if self.limit.is_some_and(|l| self.started.elapsed() >= l) {
                        Some(Cut::TimedOut)
                    } else {
                        stop().map(Cut::Stopped)
                    };
                    if let Some(why) = why {
                        if grace.is_none() {
                            self.signal(Signal::SIGKILL);
                            return Ended { cut: Some(why), status: self.child.wait() };
                        }
                        self.signal(Signal::SIGTERM);
                        cut = Some((Instant::now(), why));
                    }
                }
                (Some((since, _)), Some(grace)) if since.elapsed() >= grace => self.signal(Signal::SIGKILL),
                (Some(_), _) => {}
            }
            std::thread::sleep(self.tick);
        };
        Ended { cut: cut.map(|(_, why)| why), status }
    }

    /// Kill whatever is left in the child's group (nothing without [`Options::own_group`]); a group that is gone
    /// already is fine.
    pub fn end_group(&self) {
        if self.own_group
            && let Ok(pid) = i32::try_from(self.child.id())
        {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
    }

    /// What was kept of stdout and stderr, once their readers are done, for at most `wait` (`None`: however long
    /// it takes). A pipe still open by then gives nothing.
    pub fn drain(&mut self, wait: Option<Duration>) -> (Vec<u8>, Vec<u8>) {
        let until = wait.map(|w| Instant::now() + w);
        let take = |rx: Option<mpsc::Receiver<Vec<u8>>>| {
            let rx = rx?;
            match until {
                None => rx.recv().ok(),
                Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())).ok(),
            }
        };
        let out = take(self.stdout.take()).unwrap_or_default();
        let err = take(self.stderr.take()).unwrap_or_default();
        (out, err)
    }

    fn signal(&mut self, sig: Signal) {
        if self.own_group {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
            }
        } else if sig == Signal::SIGKILL {
            let _ = self.child.kill();
        } else if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
}

/// Run `cmd` to its end as `opts` say ([`Running::spawn`], [`Running::wait`], [`Running::drain`],
/// [`Options::end_group`]).
pub fn run<R>(cmd: &mut Command, opts: Options, stop: &mut dyn FnMut() -> Option<R>) -> std::io::Result<Finished<R>> {
    let (end_group, drain, limit) = (opts.end_group, opts.drain, opts.limit);
    let mut child = Running::spawn(cmd, opts)?;
    let Ended { cut, status } = child.wait(stop);
    // An ended child's output is not waited for: what it started outside its group may hold a pipe open.
    let (stdout, stderr) = if cut.is_some() {
        (Vec::new(), Vec::new())
    } else {
        let left = limit.map(|l| l.saturating_sub(child.started.elapsed())).unwrap_or_default();
        child.drain(drain.map(|d| d.max(left)))
    };
    if end_group {
        child.end_group();
    }
    Ok(Finished { cut, status, stdout, stderr })
}

/// Read `pipe` to its end on a thread of its own, as `into` says; what was kept comes on the channel at the end.
fn reader(mut pipe: impl Read + Send + 'static, into: Pipe) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (cap, mut sink) = match into {
            Pipe::Keep(cap) => (cap, None),
            Pipe::Stream(sink) => (0, Some(sink)),
        };
        let mut kept = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = &buf[..n];
            let room = cap.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..n.min(room)]);
            if let Some(s) = sink.as_mut() {
                s.feed(chunk);
            }
        }
        if let Some(s) = sink.as_mut() {
            s.finish();
        }
        let _ = tx.send(kept);
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script).stdin(Stdio::null());
        c
    }

    /// Whether process `pid` still exists (a zombie counts as gone).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
    }

    #[test]
    fn the_limit_kills_the_whole_group_grandchildren_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let script = format!("sleep 100 & echo $! > '{}'; sleep 100", pids.display());
        let opts = Options { limit: Some(Duration::from_millis(300)), ..Options::default() };
        let started = Instant::now();
        let done = run(&mut sh(&script), opts, &mut || None::<()>).expect("run");
        assert_eq!(done.cut, Some(Cut::TimedOut));
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        let grandchild: i32 = std::fs::read_to_string(&pids).expect("pid").trim().parse().expect("a pid");
        // Killed at once; gone (reaped by init) within a moment.
        let gone = Instant::now() + Duration::from_secs(5);
        while alive(grandchild) && Instant::now() < gone {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(grandchild), "the grandchild {grandchild} outlived the limit");
    }

    #[test]
    fn a_stop_ends_it_by_sigterm_then_sigkill_after_the_grace() {
        // It ignores SIGTERM: only the SIGKILL after the grace ends it.
        let opts = Options { grace: Some(Duration::from_millis(200)), ..Options::default() };
        let started = Instant::now();
        let mut asked = 0;
        let done = run(&mut sh("trap '' TERM; sleep 100 & wait; sleep 100"), opts, &mut || {
            asked += 1;
            (asked > 3).then_some("lost the claim")
        })
        .expect("run");
        assert_eq!(done.cut, Some(Cut::Stopped("lost the claim")));
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    }

    #[test]
    fn large_output_on_both_pipes_is_drained_and_capped_without_a_stall() {
        // 1 MiB on stderr and on stdout, written before it exits: far more than a pipe holds.
        let script = "head -c 1048576 /dev/zero >&2; head -c 1048576 /dev/zero; exit 3";
        let opts = Options {
            stdout: Pipe::Keep(1000),
            limit: Some(Duration::from_secs(30)),
            stdin: Some(b"unread".to_vec()),
            ..Options::default()
        };
        let done = run(&mut sh(script), opts, &mut || None::<()>).expect("run");
        assert_eq!(done.cut, None);
        assert_eq!(done.status.expect("status").code(), Some(3));
        assert_eq!(done.stderr.len(), 1 << 20);
        assert_eq!(done.stdout.len(), 1000);
    }

    #[test]
    fn stdin_is_written_and_a_stream_sees_every_chunk() {
        struct Count(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Sink for Count {
            fn feed(&mut self, chunk: &[u8]) {
                self.0.lock().expect("lock").extend_from_slice(chunk);
            }
            fn finish(&mut self) {
                self.0.lock().expect("lock").extend_from_slice(b"|end");
            }
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let opts = Options {
            stdin: Some(b"hello\n".to_vec()),
            stdout: Pipe::Stream(Box::new(Count(std::sync::Arc::clone(&seen)))),
            ..Options::default()
        };
        let mut cmd = Command::new("cat");
        let done = run(&mut cmd, opts, &mut || None::<()>).expect("run");
        assert!(done.status.expect("status").success());
        assert!(done.stdout.is_empty());
        assert_eq!(seen.lock().expect("lock").as_slice(), b"hello\n|end");
    }
}
