//! Agent backends: what runs an agent for a role.
//!
//! * `command` — any CLI agent, run through `sh -c` in a work tree, with the prompt on stdin and in a file, in a
//!   process group of its own (so that a time limit or a stop ends the agent and whatever it started).
//! * `http` — an OpenAI-compatible chat-completions or Anthropic messages API (text-only roles: planner, judge).
//!
//! The command line comes from configuration only; task text reaches the agent through stdin, the prompt file and
//! environment variables, never through the command line.

pub mod contain;
pub mod enter;
pub mod files;
pub mod http;
#[cfg(test)]
mod http_tests;
pub mod preset;
pub mod report;
pub mod sandbox;

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::child;
use crate::environment::Environment;

/// How an agent of a role is run.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    /// `sh -c <exec>` in the work tree.
    Command { exec: String },
    /// A CLI we ship flags for; [`prepare`] turns it into a command for this machine.
    Preset(&'static preset::Preset),
    /// A model API; text in, text out.
    Http(http::HttpAgent),
}

/// An agent ready to run on this machine: what [`prepare`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// [`Backend::Command`] or [`Backend::Http`].
    pub backend: Backend,
    /// Environment its preset needs.
    pub env: Vec<(String, String)>,
    /// Where it leaves its last message.
    pub last_message: preset::LastMessage,
    /// Where it reports what a run spent.
    pub report: report::Report,
    /// What it is, for people: `claude 2.1.332 (preset claude)`, `my-agent --x`, `http openai gpt-5.2`.
    pub label: String,
    /// The preset it was made from: what of the runner's environment and home its CLI needs.
    pub preset: Option<&'static preset::Preset>,
}

impl Prepared {
    /// What a planner or judge answered: the last message where the CLI keeps it apart from its progress output
    /// (opencode's JSON events, Codex's last-message file), else everything it printed on stdout.
    pub fn answer(&self, out: &Outcome) -> String {
        if let Some(text) = self.report.answer(&out.stdout_tail) {
            return text;
        }
        match &self.last_message {
            preset::LastMessage::OpencodeEvents | preset::LastMessage::File(_) => {
                self.last_message.read(&out.stdout_tail).unwrap_or_else(|| out.stdout.clone())
            }
            _ => out.stdout.clone(),
        }
    }
}

/// Why an agent cannot start here: found before anything is claimed (and when an agent exits 126 or 127).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the agent {what} cannot start: {why}")]
pub struct CannotStart {
    /// The command or preset, as configured.
    pub what: String,
    pub why: String,
    /// What to do about it.
    pub hint: String,
}

/// What [`prepare`] found out about presets once (a CLI's `--version` costs a process start; a runner asks once).
#[derive(Debug, Default)]
pub struct Probes(Mutex<std::collections::HashMap<&'static str, preset::Facts>>);

/// Make `backend` ready to run on this machine: a preset's CLI must answer `--version` (its flags are chosen for
/// that version, the uid and `IS_SANDBOX`), a command's program must be installed, known refusals are caught
/// (Claude Code skipping its permission checks as root), an `http` agent's key must be set. `run_dir` holds the
/// files a preset's CLI writes for us; `env` the runner's environment (its `PATH`, `IS_SANDBOX`, the key).
pub fn prepare(backend: &Backend, run_dir: &Path, probes: &Probes, env: &Environment) -> Result<Prepared, CannotStart> {
    prepare_in(backend, run_dir, probes, false, env)
}

/// [`prepare`] for runs in a sandbox (`contained`): a preset's CLI is told so where it asks (Claude Code as root
/// takes `--dangerously-skip-permissions` only in a declared sandbox).
pub(crate) fn prepare_in(
    backend: &Backend,
    run_dir: &Path,
    probes: &Probes,
    contained: bool,
    env: &Environment,
) -> Result<Prepared, CannotStart> {
    match backend {
        Backend::Preset(p) => {
            let what = format!("preset `{}`", p.name);
            let cached = probes.0.lock().ok().and_then(|m| m.get(p.name).cloned());
            let mut facts = match cached {
                Some(f) => f,
                None => {
                    let f = preset::Facts::probe(p, run_dir, env).map_err(|e| CannotStart {
                        what: what.clone(),
                        why: e.to_string(),
                        hint: match e {
                            preset::ProbeError::NotFound { .. } => format!(
                                "install it ({}) on every machine that runs this role, or choose another agent",
                                p.install
                            ),
                            preset::ProbeError::Failed { .. } => {
                                format!("check that `{} --version` works here", p.program)
                            }
                        },
                    })?;
                    if let Ok(mut m) = probes.0.lock() {
                        m.insert(p.name, f.clone());
                    }
                    f
                }
            };
            facts.run_dir = run_dir.to_path_buf();
            facts.sandbox_declared |= contained;
            let launch = p.launch(&facts);
            let version = facts.version.as_ref().map(|v| v.to_string()).unwrap_or_else(|| "version unknown".into());
            Ok(Prepared {
                backend: Backend::Command { exec: launch.exec },
                env: launch.env,
                last_message: launch.last_message,
                report: launch.report,
                label: format!("{} {version} (preset {})", p.program, p.name),
                preset: Some(p),
            })
        }
        Backend::Command { exec } => {
            check_command(exec, env)?;
            Ok(Prepared {
                backend: backend.clone(),
                env: vec![],
                last_message: preset::LastMessage::Hooks,
                report: report::Report::UsageFile(run_dir.join("usage.json")),
                label: crate::escape::line(exec),
                preset: None,
            })
        }
        Backend::Http(h) => {
            if let Some(key) = &h.api_key_env
                && env.text(key).is_none()
            {
                return Err(CannotStart {
                    what: format!("http {}", h.model),
                    why: format!("the API key variable {key} is not set (or is empty)"),
                    hint: format!("export {key}=… in the environment of every runner of this role"),
                });
            }
            let api = if h.api == http::Api::Openai { "openai" } else { "anthropic" };
            Ok(Prepared {
                backend: backend.clone(),
                env: vec![],
                last_message: preset::LastMessage::Hooks,
                report: report::Report::Nothing,
                label: format!("http {api} {}", h.model),
                preset: None,
            })
        }
    }
}

/// The program a command line starts, when it can be told without running a shell: the first word after
/// variable assignments and `exec`/`env`/`command`, if it is a plain word.
fn program_of(exec: &str) -> Option<&str> {
    let plain = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "_-./+@:".contains(c));
    for word in exec.split_whitespace() {
        if let Some((name, _)) = word.split_once('=')
            && plain(name)
        {
            continue;
        }
        if matches!(word, "exec" | "env" | "command" | "nice" | "nohup") {
            continue;
        }
        // A shell keyword or builtin: the command is a script, and only running it tells what it starts.
        const SHELL: &[&str] = &[
            "if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done", "in",
            "function", "select", "time", "{", "}", "!", "[", "[[", "test", "true", "false", ":", ".", "source",
            "echo", "printf", "read", "cd", "export", "set", "unset", "eval", "trap", "wait", "sleep", "exit",
        ];
        // An option of `nice`, `env`… (what it takes is unknown), or a path relative to where the agent runs (its
        // work tree, not ours): only running it tells.
        if SHELL.contains(&word) || word.starts_with('-') || (word.contains('/') && !word.starts_with('/')) {
            return None;
        }
        return plain(word).then_some(word);
    }
    None
}

/// The program a command line starts, when it can be told and is not on `PATH`: what `doctor` says of `[run]
/// check` without running the suite.
pub(crate) fn missing_program(exec: &str, env: &Environment) -> Option<String> {
    program_of(exec).filter(|p| preset::which(p, env).is_none()).map(str::to_string)
}

/// Catch what would stop a command agent at once: its program missing, Claude Code refusing to skip its
/// permission checks as root.
fn check_command(exec: &str, env: &Environment) -> Result<(), CannotStart> {
    let what = format!("`{}`", crate::escape::line(exec));
    let Some(program) = program_of(exec) else { return Ok(()) };
    if preset::which(program, env).is_none() {
        let installs = preset::PRESETS.iter().find(|p| p.program == program).map(|p| format!(" ({})", p.install));
        return Err(CannotStart {
            what,
            why: format!("`{program}` is not installed here (not found on PATH)"),
            hint: format!(
                "install it{} on every machine that runs this role, or fix the command",
                installs.unwrap_or_default()
            ),
        });
    }
    let bypass = exec.contains("--dangerously-skip-permissions") || exec.contains("bypassPermissions");
    if program.ends_with("claude") && bypass && nix::unistd::geteuid().is_root() && !env.sandbox_declared() {
        return Err(CannotStart {
            what,
            why: "Claude Code refuses --dangerously-skip-permissions as root (\"cannot be used with root/sudo \
                  privileges\")"
                .into(),
            hint: "use preset = \"claude\" (as root it keeps the permission checks and allows the tools by name), \
                   run the swarm as a normal user, or set IS_SANDBOX=1 if this machine is a disposable sandbox"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod prepare_tests {
    use super::*;

    #[test]
    fn the_program_of_a_command_line_is_its_first_plain_word() {
        assert_eq!(program_of("claude -p --x"), Some("claude"));
        assert_eq!(program_of("FOO=1 BAR=x exec env my-agent --go"), Some("my-agent"));
        assert_eq!(program_of("/opt/bin/judge --x"), Some("/opt/bin/judge"));
        assert_eq!(program_of("./scripts/judge.sh"), None, "relative to the work tree, not to us");
        assert_eq!(program_of("nice -n 10 claude"), None);
        for script in
            ["while [ ! -e x ]; do sleep 1; done; agent", "if true; then a; fi", "\"$AGENT\" run", "(cd x && a)"]
        {
            assert_eq!(program_of(script), None, "{script}");
        }
    }

    #[test]
    fn only_a_quick_126_or_127_that_the_shell_explains_is_a_command_that_could_not_start() {
        let out = |code: i32, secs: u64, line: &str| Outcome {
            exit: Exit::Code(code),
            stdout: String::new(),
            tail: vec![line.to_string()],
            stdout_tail: String::new(),
            elapsed: Duration::from_secs(secs),
            usage: None,
        };
        assert!(could_not_start(&out(127, 0, "sh: 1: claud: not found")));
        assert!(could_not_start(&out(126, 1, "sh: 1: ./agent.sh: Permission denied")));
        assert!(!could_not_start(&out(127, 300, "sh: 1: make: not found")), "it worked for a while first");
        assert!(!could_not_start(&out(126, 0, "sh: 1: cursor-agent: Argument list too long")), "this task's prompt");
        assert!(!could_not_start(&out(127, 0, "exiting with 127 as told")), "the agent's own exit code");
        assert!(!could_not_start(&out(1, 0, "sh: 1: x: not found")));
    }

    #[test]
    fn a_missing_program_cannot_start_and_names_itself() {
        let env = Environment::of_this_process();
        let e = check_command("git-swarm-no-such-agent --yes", &env).expect_err("missing");
        assert!(e.why.contains("`git-swarm-no-such-agent` is not installed"), "{e}");
        assert!(check_command("sh -c 'exit 0'", &env).is_ok());
    }
}

/// Did the agent's command not start at all? `sh -c` exits 126 (found, not executable) or 127 (not found) and says
/// so (`not found`, `Permission denied`, …). Only a run that ended quickly counts: an agent that worked for a while
/// and then met a missing program did a run of the task (it fails the task, not the runner). A prompt too long
/// for an argument (`Argument list too long`) is this task's, not the machine's: a failure too.
pub(crate) fn could_not_start(out: &Outcome) -> bool {
    // A sandbox that could not be set up (bubblewrap says why and exits 1): nothing of the agent ran.
    if out.exit == Exit::Code(1)
        && out.elapsed < Duration::from_secs(20)
        && out.tail.iter().any(|l| l.starts_with("bwrap: "))
        && out.tail.len() <= 3
    {
        return true;
    }
    if !matches!(out.exit, Exit::Code(126) | Exit::Code(127)) || out.elapsed > Duration::from_secs(20) {
        return false;
    }
    let said = |p: &str| out.tail.iter().any(|l| l.contains(p));
    !said("Argument list too long")
        && [
            "not found",
            "Permission denied",
            "cannot execute",
            "No such file or directory",
            "Is a directory",
            "cannot start the agent",
        ]
        .iter()
        .any(|p| said(p))
}

/// One run of an agent.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    /// Where it runs (a work tree; any folder for text-only roles).
    pub cwd: &'a Path,
    /// The rendered prompt (a system part for HTTP backends is the first paragraph up to a line `---`).
    pub prompt: &'a str,
    /// Where the prompt is also written, named by `$GIT_SWARM_PROMPT_FILE`.
    pub prompt_file: PathBuf,
    /// Environment variables for the agent (task id, title, role…).
    pub env: Vec<(String, String)>,
    /// Appends everything the agent prints (stdout and stderr) to this file.
    pub log: Option<PathBuf>,
    /// Stop the agent after this long.
    pub timeout: Option<Duration>,
    /// How long a stopped agent gets between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Where the run reports what it spent ([`Prepared::report`]).
    pub report: report::Report,
    /// What the run has spent so far, for whoever watches it (the lease keeper reports it with each renewal).
    pub live: Option<LiveUsage>,
    /// Stop the run when what it spent, added to `budget.1`, reaches the limit `budget.0`.
    pub budget: Option<(crate::usage::Limit, crate::usage::Usage)>,
    /// What the run may reach: its environment an allow-list, and with a sandbox its files too. `None`: the
    /// runner's whole environment (a runner's own commands that are not the agent's).
    pub contain: Option<Contain>,
}

/// How an agent run is contained ([`sandbox`]).
#[derive(Debug, Clone)]
pub struct Contain {
    /// The runner's environment, as it started: what the run's allow-list is cut from, where an `http` agent's key
    /// is read.
    pub runner_env: Arc<Environment>,
    /// The names (or `PREFIX_*`) of the runner's environment the agent gets, besides [`sandbox::BASE_ENV`].
    pub pass_env: Vec<String>,
    /// The bubblewrap program and what the run may see; `None`: no sandbox (the environment is still cut down).
    pub sandbox: Option<(PathBuf, sandbox::Spec)>,
    /// The home the agent gets (a fresh one, in a sandbox).
    pub home: Option<PathBuf>,
    /// The uid and gid the agent runs as when not the runner's (a root runner's sandboxed agent): the run folder
    /// (the prompt's) is given to them before it starts.
    pub owner: Option<(u32, u32)>,
}

/// A run's usage so far, shared with whoever watches the run.
pub(crate) type LiveUsage = Arc<Mutex<Option<crate::usage::Usage>>>;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal (not by us).
    Signal(i32),
    /// Ran past its time limit; stopped.
    TimedOut,
    /// Stopped because the runner was told to stop (or lost its claim).
    Stopped,
    /// Stopped because it spent its budget (why, in words).
    OverBudget(String),
}

impl Exit {
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exited with {c}"),
            Exit::Signal(s) => write!(f, "was killed by signal {s}"),
            Exit::TimedOut => write!(f, "ran past its time limit and was stopped"),
            Exit::Stopped => write!(f, "was stopped"),
            Exit::OverBudget(why) => write!(f, "was stopped at its budget ({why})"),
        }
    }
}

/// What a run gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub exit: Exit,
    /// What it printed on stdout (at most [`MAX_OUTPUT`] bytes; the start is kept).
    pub stdout: String,
    /// The last lines it printed on stdout and stderr, for failure reasons.
    pub tail: Vec<String>,
    /// The end of what it printed on stdout (at most [`MAX_STDOUT_TAIL`] bytes), where a CLI's final message is.
    pub stdout_tail: String,
    pub elapsed: Duration,
    /// What the run reported it spent (`None`: it reported nothing).
    pub usage: Option<crate::usage::Usage>,
}

/// Most stdout kept in memory (planner blocks and verdicts are far smaller).
pub(crate) const MAX_OUTPUT: usize = 4 << 20;
/// The end of stdout kept apart.
pub(crate) const MAX_STDOUT_TAIL: usize = 1 << 20;
/// Lines kept for [`Outcome::tail`].
pub(crate) const TAIL_LINES: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot start the agent `{exec}`: {message}")]
    Spawn { exec: String, message: String },
    #[error("cannot write the prompt to {path}: {message}")]
    PromptFile { path: String, message: String },
    #[error(transparent)]
    Http(#[from] http::HttpError),
}

/// Run the agent. `poll` is called about once a second while it runs; returning `false` stops the agent (a lost
/// claim, a stop request).
pub fn run(backend: &Backend, inv: &Invocation<'_>, poll: &mut dyn FnMut() -> bool) -> Result<Outcome, AgentError> {
    // A run is never started past its budget (what a CLI reports only at its end is checked here, before the next).
    if let Some((limit, base)) = &inv.budget
        && let Some(why) = limit.reached(base)
    {
        let (stdout, stdout_tail, tail) = (String::new(), String::new(), vec![format!("not started: {why}")]);
        return Ok(Outcome {
            exit: Exit::OverBudget(why),
            stdout,
            tail,
            stdout_tail,
            elapsed: Duration::ZERO,
            usage: None,
        });
    }
    // Into the run's fresh folder, where nothing can be yet: never through what an agent left at the path.
    let prompt_error = |e: String| AgentError::PromptFile { path: inv.prompt_file.display().to_string(), message: e };
    files::create(&inv.prompt_file, inv.prompt).map_err(|e| prompt_error(e.to_string()))?;
    if let Some((uid, gid)) = inv.contain.as_ref().and_then(|c| c.owner)
        && let Some(run) = inv.prompt_file.parent()
    {
        files::Dir::open(run).and_then(|d| d.chown_all(uid, gid)).map_err(|e| prompt_error(e.to_string()))?;
    }
    match backend {
        Backend::Command { exec } => run_command(exec, inv, poll),
        Backend::Preset(p) => Err(AgentError::Spawn {
            exec: format!("preset {}", p.name),
            message: "internal: a preset must be prepared first (agent::prepare)".into(),
        }),
        Backend::Http(h) => {
            let started = Instant::now();
            let (system, user) = split_system(inv.prompt);
            let timeout = inv.timeout.unwrap_or(Duration::from_secs(600));
            // The key is the runner's to read (a run of the runner's own, uncontained, is a command, never `http`).
            let none = Environment::from_vars([]).0;
            let env = inv.contain.as_ref().map_or(&none, |c| &*c.runner_env);
            let (text, usage) = http::complete_reporting(h, system, user, timeout, env)?;
            if let Some(log) = &inv.log {
                append(log, crate::secrets::scrub(&text).as_bytes());
            }
            if let (Some(live), Some(u)) = (&inv.live, usage)
                && let Ok(mut l) = live.lock()
            {
                *l = Some(u);
            }
            let tail = last_lines(&text, TAIL_LINES);
            let stdout_tail = text.clone();
            Ok(Outcome { exit: Exit::Code(0), stdout: text, tail, stdout_tail, elapsed: started.elapsed(), usage })
        }
    }
}

/// A prompt's system part: everything before a line `---` (when there is one near the top), else nothing.
pub(crate) fn split_system(prompt: &str) -> (&str, &str) {
    match prompt.find("\n---\n") {
        Some(i) => (prompt[..i].trim(), prompt[i + 5..].trim_start()),
        None => ("", prompt),
    }
}

fn last_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| l.to_string()).collect()
}

fn append(path: &Path, bytes: &[u8]) {
    if let Ok(mut f) = crate::secrets::private_file(path, true) {
        let _ = f.write_all(bytes);
    }
}

fn run_command(exec: &str, inv: &Invocation<'_>, poll: &mut dyn FnMut() -> bool) -> Result<Outcome, AgentError> {
    let started = Instant::now();
    let sandboxed = inv.contain.as_ref().and_then(|c| c.sandbox.as_ref());
    // The agent starts in a session of its own, without the person's terminal, and dies with the runner
    // ([`enter`]); in a sandbox as the uid it is to run as, after bubblewrap made its mounts. (Not `git-swarm`
    // itself — a test of the library — it starts as `sh` in a process group of its own.)
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
        own_session: exe.is_some(),
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
    let stopping = ended.cut.map(|cut| match cut {
        child::Cut::TimedOut => Exit::TimedOut,
        child::Cut::Stopped(why) => why,
    });
    let status = ended.status.ok();
    let exit = match (stopping, status) {
        (Some(why), _) => why,
        (None, Some(st)) => {
            use std::os::unix::process::ExitStatusExt;
            match (st.code(), st.signal()) {
                (Some(c), _) => Exit::Code(c),
                (None, Some(s)) => Exit::Signal(s),
                (None, None) => Exit::Code(-1),
            }
        }
        (None, None) => Exit::Code(-1),
    };
    let tail = shared.tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
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
    Ok(Outcome { exit, stdout, tail, stdout_tail, elapsed: started.elapsed(), usage })
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
struct Shared {
    log: Mutex<Option<std::fs::File>>,
    tail: Mutex<VecDeque<String>>,
    stdout: Mutex<Vec<u8>>,
    stdout_tail: Mutex<VecDeque<u8>>,
    /// Reads what the run reports it spent from its stdout.
    meter: Mutex<report::Meter>,
}

/// Where a command agent may report what it spent (`docs/spend.md`).
pub(crate) const USAGE_FILE_VAR: &str = "GIT_SWARM_USAGE_FILE";

/// Longest line kept in the tail.
const MAX_TAIL_LINE: usize = 1000;

/// One pipe's reader: its chunks into the log, the tail (whole lines, cut to [`MAX_TAIL_LINE`]) and, for stdout,
/// the captured output (at most [`MAX_OUTPUT`]). Memory stays bounded however much the agent prints.
struct Reader {
    is_stdout: bool,
    shared: Arc<Shared>,
    line: Vec<u8>,
    /// Whole lines of stdout for the meter (a longer one is skipped: progress with files in it).
    full: Vec<u8>,
    full_overflow: bool,
    /// What reaches the log is scrubbed of this process's secrets (an API key a server echoes back).
    scrubber: crate::secrets::LogScrubber,
}

impl Reader {
    fn new(is_stdout: bool, shared: Arc<Shared>) -> Reader {
        Reader {
            is_stdout,
            shared,
            line: Vec::new(),
            full: Vec::new(),
            full_overflow: false,
            scrubber: crate::secrets::LogScrubber::new(),
        }
    }

    fn write_log(&self, bytes: &[u8]) {
        if !bytes.is_empty()
            && let Ok(mut g) = self.shared.log.lock()
            && let Some(f) = g.as_mut()
        {
            let _ = f.write_all(bytes);
        }
    }

    fn push_line(&mut self) {
        if let Ok(mut t) = self.shared.tail.lock() {
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(String::from_utf8_lossy(&self.line).trim_end().to_string());
        }
        self.line.clear();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn inv<'a>(dir: &'a Path, prompt: &'a str, timeout: Option<Duration>) -> Invocation<'a> {
        Invocation {
            cwd: dir,
            prompt,
            prompt_file: dir.join("prompt.md"),
            env: vec![("GIT_SWARM_TASK_TITLE".into(), "a; rm -rf / $(x)".into())],
            log: Some(dir.join("log")),
            timeout,
            grace: Duration::from_millis(200),
            report: report::Report::UsageFile(dir.join("usage.json")),
            live: None,
            budget: None,
            contain: None,
        }
    }

    #[test]
    fn a_command_gets_the_prompt_on_stdin_and_in_a_file_and_text_only_through_env() {
        let dir = tempfile::tempdir().expect("tempdir");
        let exec = r#"read first; echo "stdin:$first"; cat "$GIT_SWARM_PROMPT_FILE" | wc -l; printf '%s\n' "$GIT_SWARM_TASK_TITLE"; echo oops >&2; exit 7"#;
        let out = run(&Backend::Command { exec: exec.into() }, &inv(dir.path(), "hello\nworld\n", None), &mut || true)
            .expect("run");
        assert_eq!(out.exit, Exit::Code(7));
        assert!(out.stdout.contains("stdin:hello"), "{}", out.stdout);
        assert!(out.stdout.contains("a; rm -rf / $(x)"), "{}", out.stdout);
        assert!(out.tail.iter().any(|l| l == "oops"), "{:?}", out.tail);
        let log = std::fs::read_to_string(dir.path().join("log")).expect("log");
        assert!(log.contains("oops") && log.contains("stdin:hello"), "{log}");
    }

    #[test]
    fn a_hanging_command_is_stopped_at_its_time_limit_with_its_children() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("child-alive");
        let exec = format!("(sleep 3; touch '{}') & sleep 30", marker.display());
        let t = Instant::now();
        let out = run(&Backend::Command { exec }, &inv(dir.path(), "", Some(Duration::from_millis(300))), &mut || true)
            .expect("run");
        assert_eq!(out.exit, Exit::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(3500));
        assert!(!marker.exists(), "a child of the agent outlived it");
    }

    #[test]
    fn poll_false_stops_the_agent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out =
            run(&Backend::Command { exec: "trap '' TERM; sleep 20".into() }, &inv(dir.path(), "", None), &mut || false)
                .expect("run");
        assert_eq!(out.exit, Exit::Stopped);
        assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);
    }

    #[test]
    fn system_part_splits_at_the_first_rule() {
        assert_eq!(split_system("sys\n---\nuser"), ("sys", "user"));
        assert_eq!(split_system("just user"), ("", "just user"));
    }
}
