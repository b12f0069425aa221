//! Before a role's first run: the backend prepared for this machine (a preset's launch for the CLI's version, found
//! on PATH), or why it cannot start here (`CannotStart`: a missing program, Claude Code as root refusing
//! `--dangerously-skip-permissions`, a missing key), said before anything is claimed.

use super::*;

/// An agent ready to run on this machine: what [`prepare`] found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prepared {
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
    pub(crate) fn answer(&self, out: &Outcome) -> String {
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
pub(crate) struct CannotStart {
    /// The command or preset, as configured.
    pub what: String,
    pub why: String,
    /// What to do about it.
    pub hint: String,
}

/// What [`prepare`] found out about presets once (a CLI's `--version` costs a process start; a runner asks once).
#[derive(Debug, Default)]
pub(crate) struct Probes(Mutex<std::collections::HashMap<&'static str, preset::Facts>>);

/// Make `backend` ready to run on this machine: a preset's CLI must answer `--version` (its flags are chosen for
/// that version, the uid and `IS_SANDBOX`), a command's program must be installed, known refusals are caught
/// (Claude Code skipping its permission checks as root), an `http` agent's key must be set. `run_dir` holds the
/// files a preset's CLI writes for us; `env` the runner's environment (its `PATH`, `IS_SANDBOX`, the key).
pub(crate) fn prepare(
    backend: &Backend,
    run_dir: &Path,
    probes: &Probes,
    env: &Environment,
) -> Result<Prepared, CannotStart> {
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
pub(crate) fn program_of(exec: &str) -> Option<&str> {
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
pub(crate) fn check_command(exec: &str, env: &Environment) -> Result<(), CannotStart> {
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
