//! The `command` backend's run: `sh -c` through the trampoline (and bubblewrap), the prompt on stdin and in a
//! file, the output read as it comes (scrubbed into the log, metered for usage, its tail kept), the time limit, the
//! budget, and every process the run started ended with it.

use super::*;

pub(crate) fn append(path: &Path, bytes: &[u8]) {
    if let Ok(mut f) = crate::secrets::private_file(path, true) {
        let _ = f.write_all(bytes);
    }
}

/// The command that starts the agent `exec` for `inv`: through the trampoline ([`enter`]: a session of its own,
/// without the person's terminal, dying with the runner), in a sandbox as the uid it is to run as after bubblewrap
/// made its mounts, with the environment its containment allows. (Not `git-swarm` itself — a test of the library —
/// it starts as `sh` in a process group of its own.)
pub(crate) fn command_of(exec: &str, inv: &Invocation<'_>) -> Result<Command, AgentError> {
    let sandboxed = inv.contain.as_ref().and_then(|c| c.sandbox.as_ref());
    let exe = sandbox::trampoline();
    let shell: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), exec.into()];
    let argv: Vec<std::ffi::OsString> = match sandboxed {
        Some((bwrap, spec)) => {
            let mut a: Vec<std::ffi::OsString> = vec![bwrap.into()];
            a.extend(spec.args());
            a.push("--".into());
            match (spec.user, &exe) {
                (Some(user), Some(exe)) => {
                    a.push(exe.clone().into());
                    a.extend(enter::Enter { user: Some(user), argv: shell, ..Default::default() }.args());
                }
                (Some(_), None) => {
                    return Err(AgentError::Spawn {
                        exec: exec.to_string(),
                        message: "this program cannot find its own binary to start the agent under another uid".into(),
                    });
                }
                (None, _) => a.extend(shell),
            }
            a
        }
        None => shell,
    };
    let mut cmd = match &exe {
        Some(exe) => {
            let mut c = Command::new(exe);
            c.args(enter::Enter { setsid: true, die_with_parent: true, argv, ..Default::default() }.args());
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    if let Some(c) = &inv.contain {
        // Not the runner's environment minus a deny-list: an allow-list (credentials stay with the runner).
        cmd.env_clear();
        cmd.envs(sandbox::environment(c.runner_env.vars_os(), &c.pass_env, c.home.as_deref()));
        if sandboxed.is_some() {
            // Declared for the CLIs that ask (Claude Code as root): this run is contained.
            cmd.env("IS_SANDBOX", "1");
        }
    }
    cmd.current_dir(inv.cwd)
        .env("GIT_SWARM_PROMPT_FILE", &inv.prompt_file)
        // The agent runs in a work tree of its own: git must find that one, not a caller's GIT_DIR.
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE");
    for (k, v) in &inv.env {
        cmd.env(k, v);
    }
    Ok(cmd)
}

pub(crate) fn run_command(
    exec: &str,
    inv: &Invocation<'_>,
    poll: &mut dyn FnMut() -> bool,
) -> Result<Outcome, AgentError> {
    let started = Instant::now();
    let mut cmd = command_of(exec, inv)?;
    // The mark of this run's processes: what still runs with it when the run is over is ended with it.
    let mark = contain::new_mark();
    cmd.env(contain::MARK_VAR, &mark);
    if let report::Report::UsageFile(f) = &inv.report {
        cmd.env(USAGE_FILE_VAR, f);
    }
    let log = inv.log.as_ref().and_then(|p| crate::secrets::private_file(p, true).ok());
    let shared = Arc::new(Shared {
        log: Mutex::new(log),
        tail: Mutex::new(VecDeque::with_capacity(TAIL_LINES)),
        stdout: Mutex::new(Vec::new()),
        stdout_tail: Mutex::new(VecDeque::new()),
        meter: Mutex::new(report::Meter::new(inv.report.clone())),
    });
    let opts = child::Options {
        // Its own process group (the session the trampoline starts): a stop reaches everything the agent started.
        own_group: true,
        own_session: sandbox::trampoline().is_some(),
        // The prompt on stdin too.
        stdin: Some(inv.prompt.as_bytes().to_vec()),
        stdout: child::Pipe::Stream(Box::new(Reader::new(true, Arc::clone(&shared)))),
        stderr: child::Pipe::Stream(Box::new(Reader::new(false, Arc::clone(&shared)))),
        limit: inv.timeout,
        // A time limit, a stop or a budget: SIGTERM to the group, SIGKILL after the grace.
        grace: Some(inv.grace),
        ..child::Options::default()
    };
    let mut run = child::Running::spawn(&mut cmd, opts)
        .map_err(|e| AgentError::Spawn { exec: exec.to_string(), message: e.to_string() })?;
    let pid = run.id();
    let born = contain::start_of(pid);
    // Where a later runner finds the group, should this runner be killed before it could stop the agent.
    let pgid_file = pgid_file_of(&inv.prompt_file);
    let _ = files::write(&pgid_file, pid.to_string());
    let mut last_poll = Instant::now();
    let ended = run.wait(&mut || {
        let now = Instant::now();
        if now.duration_since(last_poll) < Duration::from_millis(500) {
            return None;
        }
        last_poll = now;
        let spent = shared.meter.lock().ok().and_then(|mut m| {
            m.poll();
            m.current()
        });
        if let (Some(live), Some(u)) = (&inv.live, spent)
            && let Ok(mut l) = live.lock()
        {
            *l = Some(u);
        }
        let over = inv.budget.as_ref().zip(spent).and_then(|((limit, base), u)| limit.reached(&base.plus(&u)));
        match over {
            Some(why) => Some(Exit::OverBudget(why)),
            None => (!poll()).then_some(Exit::Stopped),
        }
    });
    // Whatever the agent left running in its group goes with it, and so does what left the group (`setsid`).
    run.end_group();
    contain::end_run(&mark, &[], i32::try_from(pid).unwrap_or(-1), born);
    let _ = std::fs::remove_file(&pgid_file);
    // Let the readers drain the pipes; a grandchild that escaped the group may hold one open, so not for ever.
    run.drain(Some(Duration::from_secs(2)));
    let exit = exit_of(ended);
    let tail: Vec<String> = shared.tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
    let stdout = shared.stdout.lock().map(|s| String::from_utf8_lossy(&s).into_owned()).unwrap_or_default();
    let stdout_tail = shared
        .stdout_tail
        .lock()
        .map(|t| String::from_utf8_lossy(&t.iter().copied().collect::<Vec<u8>>()).into_owned())
        .unwrap_or_default();
    let usage = shared.meter.lock().ok().and_then(|mut m| m.finish(&stdout_tail));
    if let (Some(live), Some(u)) = (&inv.live, usage)
        && let Ok(mut l) = live.lock()
    {
        *l = Some(u);
    }
    let sandbox_hint = sandbox_hint(exec, inv, &exit, &tail);
    Ok(Outcome { exit, stdout, tail, stdout_tail, elapsed: started.elapsed(), usage, sandbox_hint })
}

/// After a sandboxed run that failed: what the sandbox hid of its command, when its output says something was
/// missing ([`visible::after_run`]; with the runner's environment, which the agent's `PATH` is taken from).
fn sandbox_hint(exec: &str, inv: &Invocation<'_>, exit: &Exit, tail: &[String]) -> Option<String> {
    let c = inv.contain.as_ref()?;
    let (_, spec) = c.sandbox.as_ref()?;
    if exit.success() || matches!(exit, Exit::Stopped) {
        return None;
    }
    let env = |k: &str| -> Option<std::ffi::OsString> {
        inv.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.into()).or_else(|| c.runner_env.get(k).map(Into::into))
    };
    visible::after_run(spec, c.runner_env.home(), exec, inv.cwd, &env, tail)
}

/// Where a run's process group is written (`<run dir>.pgid`, beside the run's folder, which the agent may write):
/// a later runner of the clone ends it, should this one be killed first.
pub(crate) fn pgid_file_of(prompt_file: &Path) -> PathBuf {
    let dir = prompt_file.parent().unwrap_or(Path::new("."));
    let mut name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "run".into());
    name.push(".pgid");
    dir.with_file_name(name)
}

/// What the pipe readers fill: the log, the tail, stdout (capped).
pub(crate) struct Shared {
    pub(crate) log: Mutex<Option<std::fs::File>>,
    pub(crate) tail: Mutex<VecDeque<String>>,
    pub(crate) stdout: Mutex<Vec<u8>>,
    pub(crate) stdout_tail: Mutex<VecDeque<u8>>,
    /// Reads what the run reports it spent from its stdout.
    pub(crate) meter: Mutex<report::Meter>,
}

/// Where a command agent may report what it spent (`docs/spend.md`).
pub(crate) const USAGE_FILE_VAR: &str = "GIT_SWARM_USAGE_FILE";

/// Longest line kept in the tail.
pub(crate) const MAX_TAIL_LINE: usize = 1000;

/// One pipe's reader: its chunks into the log, the tail (whole lines, cut to [`MAX_TAIL_LINE`]) and, for stdout,
/// the captured output (at most [`MAX_OUTPUT`]). Memory stays bounded however much the agent prints.
pub(crate) struct Reader {
    pub(crate) is_stdout: bool,
    pub(crate) shared: Arc<Shared>,
    pub(crate) line: Vec<u8>,
    /// Whole lines of stdout for the meter (a longer one is skipped: progress with files in it).
    pub(crate) full: Vec<u8>,
    pub(crate) full_overflow: bool,
    /// What reaches the log is scrubbed of this process's secrets (an API key a server echoes back).
    pub(crate) scrubber: crate::secrets::LogScrubber,
}

impl Reader {
    pub(crate) fn new(is_stdout: bool, shared: Arc<Shared>) -> Reader {
        Reader {
            is_stdout,
            shared,
            line: Vec::new(),
            full: Vec::new(),
            full_overflow: false,
            scrubber: crate::secrets::LogScrubber::new(),
        }
    }

    pub(crate) fn write_log(&self, bytes: &[u8]) {
        if !bytes.is_empty()
            && let Ok(mut g) = self.shared.log.lock()
            && let Some(f) = g.as_mut()
        {
            let _ = f.write_all(bytes);
        }
    }

    pub(crate) fn push_line(&mut self) {
        if let Ok(mut t) = self.shared.tail.lock() {
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(String::from_utf8_lossy(&self.line).trim_end().to_string());
        }
        self.line.clear();
    }
}

/// Kill the process group of an agent that a killed runner left behind: its pid is in `pgid_file`, and it still runs
/// in `worktree` (so that a recycled id of some other process is never hit). Linux only (`/proc`); elsewhere a no-op.
pub(crate) fn kill_leftover(pgid_file: &Path, worktree: &Path) {
    let Some(pgid) = std::fs::read_to_string(pgid_file).ok().and_then(|s| s.trim().parse::<i32>().ok()) else {
        return;
    };
    let cwd = std::fs::read_link(format!("/proc/{pgid}/cwd"));
    if cwd.is_ok_and(|c| c.starts_with(worktree)) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
    }
    let _ = std::fs::remove_file(pgid_file);
}

impl child::Sink for Reader {
    fn feed(&mut self, chunk: &[u8]) {
        let scrubbed = self.scrubber.feed(chunk);
        self.write_log(&scrubbed);
        let shared = Arc::clone(&self.shared);
        if self.is_stdout
            && let Ok(mut out) = shared.stdout.lock()
        {
            let room = MAX_OUTPUT.saturating_sub(out.len());
            out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        if self.is_stdout
            && let Ok(mut t) = shared.stdout_tail.lock()
        {
            t.extend(chunk);
            let over = t.len().saturating_sub(MAX_STDOUT_TAIL);
            t.drain(..over);
        }
        if self.is_stdout {
            for piece in chunk.split_inclusive(|b| *b == b'\n') {
                if self.full.len() + piece.len() > report::MAX_LINE {
                    self.full_overflow = true;
                    self.full.clear();
                } else {
                    self.full.extend_from_slice(piece);
                }
                if piece.ends_with(b"\n") {
                    if !self.full_overflow
                        && let Ok(mut m) = shared.meter.lock()
                    {
                        m.line(&String::from_utf8_lossy(&self.full));
                    }
                    self.full.clear();
                    self.full_overflow = false;
                }
            }
        }
        for piece in chunk.split_inclusive(|b| *b == b'\n') {
            let room = MAX_TAIL_LINE.saturating_sub(self.line.len());
            self.line.extend_from_slice(&piece[..piece.len().min(room)]);
            if piece.ends_with(b"\n") {
                self.push_line();
            }
        }
    }

    fn finish(&mut self) {
        if !self.line.is_empty() {
            self.push_line();
        }
        if self.is_stdout
            && !self.full.is_empty()
            && !self.full_overflow
            && let Ok(mut m) = self.shared.meter.lock()
        {
            m.line(&String::from_utf8_lossy(&self.full));
        }
        let rest = self.scrubber.finish();
        self.write_log(&rest);
    }
}

/// How a run ended: the runner's cut (a time limit, a stop, a budget), else its exit status.
fn exit_of(ended: child::Ended<Exit>) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    let stopping = ended.cut.map(|cut| match cut {
        child::Cut::TimedOut => Exit::TimedOut,
        child::Cut::Stopped(why) => why,
    });
    match (stopping, ended.status.ok()) {
        (Some(why), _) => why,
        (None, Some(st)) => match (st.code(), st.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            (None, None) => Exit::Code(-1),
        },
        (None, None) => Exit::Code(-1),
    }
}
