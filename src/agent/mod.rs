//! Agent backends: what runs an agent for a role.
//!
//! * `command` — any CLI agent, run through `sh -c` in a work tree, with the prompt on stdin and in a file, in a
//!   process group of its own (so that a time limit or a stop ends the agent and whatever it started).
//! * `http` — an OpenAI-compatible chat-completions or Anthropic messages API (text-only roles: planner, judge).
//!
//! The command line comes from configuration only; task text reaches the agent through stdin, the prompt file and
//! environment variables, never through the command line.

mod command;
pub(crate) mod contain;
pub(crate) mod enter;
pub(crate) mod files;
pub(crate) mod http;
#[cfg(test)]
mod http_tests;
mod prepare;
pub(crate) mod preset;
pub(crate) mod report;
pub(crate) mod sandbox;
pub(crate) mod visible;

use command::*;
pub(crate) use command::{kill_leftover, pgid_file_of};
#[cfg(test)]
use prepare::*;
pub(crate) use prepare::{CannotStart, Prepared, Probes, prepare};
pub(crate) use prepare::{could_not_start, missing_program, prepare_in};

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
pub(crate) enum Backend {
    /// `sh -c <exec>` in the work tree.
    Command { exec: String },
    /// A CLI we ship flags for; [`prepare`] turns it into a command for this machine.
    Preset(&'static preset::Preset),
    /// A model API; text in, text out.
    Http(http::HttpAgent),
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
            sandbox_hint: None,
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

/// One run of an agent.
#[derive(Debug, Clone)]
pub(crate) struct Invocation<'a> {
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
pub(crate) struct Contain {
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
pub(crate) enum Exit {
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
    pub(crate) fn success(&self) -> bool {
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
pub(crate) struct Outcome {
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
    /// A sandboxed run that failed saying something was missing, when the sandbox hides a path its command needs:
    /// the hint naming it and the setting that shows it ([`visible::after_run`]).
    pub sandbox_hint: Option<String>,
}

impl Outcome {
    /// The last lines it printed, and the hint of what the sandbox hid of it when there is one (a line of the
    /// runner's, in parentheses): what a failure reason is made from.
    pub(crate) fn tail_and_hint(&self) -> Vec<String> {
        let mut tail = self.tail.clone();
        tail.extend(self.sandbox_hint.as_ref().map(|h| format!("(hint: {h})")));
        tail
    }
}

/// Most stdout kept in memory (planner blocks and verdicts are far smaller).
pub(crate) const MAX_OUTPUT: usize = 4 << 20;
/// The end of stdout kept apart.
pub(crate) const MAX_STDOUT_TAIL: usize = 1 << 20;
/// Lines kept for [`Outcome::tail`].
pub(crate) const TAIL_LINES: usize = 20;

#[derive(Debug, thiserror::Error)]
pub(crate) enum AgentError {
    #[error("cannot start the agent `{exec}`: {message}")]
    Spawn { exec: String, message: String },
    #[error("cannot write the prompt to {path}: {message}")]
    PromptFile { path: String, message: String },
    #[error(transparent)]
    Http(#[from] http::HttpError),
}

/// Run the agent. `poll` is called about once a second while it runs; returning `false` stops the agent (a lost
/// claim, a stop request).
pub(crate) fn run(
    backend: &Backend,
    inv: &Invocation<'_>,
    poll: &mut dyn FnMut() -> bool,
) -> Result<Outcome, AgentError> {
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
            sandbox_hint: None,
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
            let elapsed = started.elapsed();
            Ok(Outcome { exit: Exit::Code(0), stdout: text, tail, stdout_tail, elapsed, usage, sandbox_hint: None })
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
