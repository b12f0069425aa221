//! Presets: the agent CLIs we keep working unattended, so a user names one instead of looking up its flags.
//!
//! A preset is not a fixed string: the flags a CLI needs depend on its version (flags come and go monthly), on
//! whether the runner is root (Claude Code refuses to skip its permission checks as root outside a declared
//! sandbox), and on where the runner keeps its files (Codex writes its last message to a file we name). So a preset
//! is turned into a [`Launch`] — the command line for `sh -c`, extra environment, and where the CLI leaves its
//! last message — from [`Facts`] found once per runner ([`Facts::probe`]).
//!
//! What each preset needs, and why, is in `docs/agents.md`; the versions tested in CI are [`Preset::tested`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::report::Report;
use crate::environment::Environment;

/// A CLI agent we ship flags for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Preset {
    /// What `preset = "…"` names.
    pub name: &'static str,
    /// The executable the command starts.
    pub program: &'static str,
    /// Where it comes from, for hints (`npm install -g …`, `pipx install …`).
    pub install: &'static str,
    /// The release our CI drives end to end (`.ci/agents.sh` pins it).
    pub tested: &'static str,
    /// No published package to test against (Cursor's CLI is not on any registry).
    pub untested: bool,
    /// A help page that tells which flags this release has (`opencode run --help`), read once by [`Facts::probe`].
    pub help: &'static [&'static str],
    /// The runner's environment variables the CLI reads (a name, or `PREFIX_*`): its API keys, base URLs and
    /// switches. An agent gets only these of the runner's environment, besides the base set (`agent::sandbox`).
    pub env: &'static [&'static str],
    /// Its config and login under the home (files or folders, relative to it), copied into the fresh home of a
    /// sandboxed run; nothing else of the user's home is there.
    pub home: &'static [&'static str],
}

pub(crate) const PRESETS: &[Preset] = &[
    Preset {
        name: "claude",
        program: "claude",
        install: "npm install -g @anthropic-ai/claude-code",
        tested: "2.1.332",
        untested: false,
        help: &[],
        env: &[
            "ANTHROPIC_*",
            "CLAUDE_*",
            "DISABLE_AUTOUPDATER",
            "DISABLE_TELEMETRY",
            "DISABLE_ERROR_REPORTING",
            "DISABLE_COST_WARNINGS",
            "MAX_THINKING_TOKENS",
            "BASH_DEFAULT_TIMEOUT_MS",
            "BASH_MAX_TIMEOUT_MS",
        ],
        home: &[".claude.json", ".claude/settings.json", ".claude/.credentials.json"],
    },
    Preset {
        name: "codex",
        program: "codex",
        install: "npm install -g @openai/codex",
        tested: "0.171.0",
        untested: false,
        help: &[],
        env: &["OPENAI_*", "CODEX_*", "AZURE_OPENAI_*"],
        home: &[".codex/config.toml", ".codex/auth.json"],
    },
    Preset {
        name: "gemini",
        program: "gemini",
        install: "npm install -g @google/gemini-cli",
        tested: "0.61.0",
        untested: false,
        help: &[],
        env: &["GEMINI_*", "GOOGLE_*"],
        home: &[".gemini/settings.json", ".gemini/oauth_creds.json", ".gemini/google_accounts.json", ".gemini/.env"],
    },
    Preset {
        name: "opencode",
        program: "opencode",
        install: "npm install -g opencode-ai",
        tested: "1.18.33",
        untested: false,
        help: &["run", "--help"],
        env: &[
            "OPENCODE_*",
            "ANTHROPIC_*",
            "OPENAI_*",
            "GEMINI_*",
            "GOOGLE_*",
            "OPENROUTER_*",
            "GROQ_*",
            "XAI_*",
            "DEEPSEEK_*",
            "MISTRAL_*",
        ],
        home: &[".config/opencode", ".local/share/opencode/auth.json"],
    },
    Preset {
        name: "aider",
        program: "aider",
        install: "python3 -m pip install aider-chat (or pipx install aider-chat)",
        tested: "0.86.2",
        untested: false,
        help: &[],
        env: &["AIDER_*", "OPENAI_*", "ANTHROPIC_*", "GEMINI_*", "OPENROUTER_*", "DEEPSEEK_*", "LITELLM_*", "OLLAMA_*"],
        home: &[".aider.conf.yml", ".aider.model.settings.yml", ".aider.model.metadata.json"],
    },
    Preset {
        name: "cursor",
        program: "cursor-agent",
        install: "curl https://cursor.com/install -fsS | bash",
        tested: "",
        untested: true,
        help: &[],
        env: &["CURSOR_*"],
        home: &[".cursor/cli-config.json"],
    },
];

/// The preset of this name.
pub(crate) fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The names, for error messages.
pub(crate) fn names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// A version as the CLIs print it (`2.1.332 (Claude Code)`, `codex-cli 0.171.0`, `aider 0.86.2`): the first run of
/// dot-separated numbers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version(pub Vec<u64>);

impl Version {
    pub(crate) fn parse(text: &str) -> Option<Version> {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let starts = bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric());
            if starts {
                let end = text[i..].find(|c: char| !(c.is_ascii_digit() || c == '.')).map_or(text.len(), |n| i + n);
                let parts: Vec<u64> =
                    text[i..end].split('.').filter(|p| !p.is_empty()).map_while(|p| p.parse().ok()).collect();
                if parts.len() >= 2 {
                    return Some(Version(parts));
                }
                i = end;
            }
            i += 1;
        }
        None
    }

    /// At least `min` (`"2.1.85"`)?
    pub(crate) fn at_least(&self, min: &str) -> bool {
        Version::parse(min).is_none_or(|m| *self >= m)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

/// What a launch depends on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// The CLI's version, when it answered `--version` with one.
    pub version: Option<Version>,
    /// Does the runner run as root (uid 0)?
    pub root: bool,
    /// `IS_SANDBOX=1`: the user declares this machine a sandbox (Claude Code's own escape hatch for root).
    pub sandbox_declared: bool,
    /// This binary, for the hooks a CLI calls back (`git swarm hooks agent …`).
    pub bin: PathBuf,
    /// The runner's folder for this agent's files (prompt, hand-off, the CLI's last message).
    pub run_dir: PathBuf,
    /// What [`Preset::help`] printed (empty when the preset has none or it failed).
    pub help: String,
}

impl Facts {
    /// The facts of this process, for `preset`: its CLI's version (`--version`, bounded), uid, `IS_SANDBOX`.
    pub(crate) fn probe(preset: &Preset, run_dir: &Path, env: &Environment) -> Result<Facts, ProbeError> {
        let answer = version_of(preset.program, Duration::from_secs(60), env)?;
        let help = if preset.help.is_empty() {
            String::new()
        } else {
            run_bounded(preset.program, preset.help, Duration::from_secs(60), env).unwrap_or_default()
        };
        Ok(Facts {
            help,
            version: Version::parse(&answer),
            root: nix::unistd::geteuid().is_root(),
            sandbox_declared: env.sandbox_declared(),
            bin: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("git-swarm")),
            run_dir: run_dir.to_path_buf(),
        })
    }
}

/// How one run of a preset is started.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Launch {
    /// The command line, run with `sh -c` in the work tree; the prompt is on stdin and in `$GIT_SWARM_PROMPT_FILE`.
    pub exec: String,
    /// Environment the CLI needs besides the runner's.
    pub env: Vec<(String, String)>,
    /// Where the CLI leaves its last message, for a hand-off that neither the agent nor a hook wrote.
    pub last_message: LastMessage,
    /// Where it reports what the run spent.
    pub report: Report,
}

/// Where a CLI leaves the text of its last message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LastMessage {
    /// Nowhere we read (its hooks record it).
    Hooks,
    /// A file it writes (Codex `--output-last-message`).
    File(PathBuf),
    /// aider's chat history (Markdown: the user's lines start `#### `, the rest is the model's).
    AiderHistory(PathBuf),
    /// opencode's `--format json` events on stdout: the last `text` part.
    OpencodeEvents,
}

/// The tools Claude Code may use without asking when its permission checks stay on (root without `IS_SANDBOX=1`).
const CLAUDE_TOOLS: &str = "Bash,Edit,MultiEdit,Write,NotebookEdit,Read,Glob,Grep,LS,WebFetch,WebSearch,TodoWrite";

impl Preset {
    /// The launch for these facts.
    pub(crate) fn launch(&self, f: &Facts) -> Launch {
        let run = |file: &str| f.run_dir.join(file);
        let q = |p: &Path| sh_quote(&p.to_string_lossy());
        match self.name {
            "claude" => claude_launch(f),
            "codex" => {
                // `--full-auto` is gone from current releases; `workspace-write` keeps `.git` (and a linked work
                // tree's git directory) read-only by design, so an agent could never commit: the sandbox is off,
                // as Codex documents for machines that are sandboxed outside (run the swarm in a container).
                let notify = format!(
                    "notify=[{},\"hooks\",\"agent\",\"codex\",\"notify\"]",
                    toml::Value::String(f.bin.to_string_lossy().into_owned())
                );
                let last = run("last-message.md");
                Launch {
                    exec: format!(
                        "codex exec --json --sandbox danger-full-access --skip-git-repo-check --output-last-message {} -c {} -",
                        q(&last),
                        sh_quote(&notify)
                    ),
                    env: vec![],
                    last_message: LastMessage::File(last),
                    report: Report::CodexEvents,
                }
            }
            "gemini" => Launch {
                // Every fresh work tree is a folder Gemini CLI has never seen: without trust it turns --yolo off
                // (and refuses project settings, our hooks among them). The prompt is on stdin; `--prompt` makes
                // the run non-interactive and is appended to it.
                // `--output-format json`: the answer and every model's tokens (thoughts too) in one document at the end.
                exec: "gemini --yolo --output-format json --prompt 'Do the task above. Work unattended: nobody will \
                       answer questions.'"
                    .into(),
                env: vec![("GEMINI_CLI_TRUST_WORKSPACE".into(), "true".into())],
                last_message: LastMessage::Hooks,
                report: Report::GeminiJson,
            },
            "opencode" => {
                // `run` reads the prompt on stdin. A permission that would ask (a folder outside the work tree, a
                // repeated call) is refused in a run nobody watches: allowed through OPENCODE_PERMISSION in every
                // release that reads it, and --auto where `run --help` shows it. The JSON events carry the final text.
                let auto = if f.help.split(|c: char| c.is_whitespace() || c == ',').any(|w| w == "--auto") {
                    " --auto"
                } else {
                    ""
                };
                Launch {
                    exec: format!("opencode run{auto} --format json"),
                    env: vec![("OPENCODE_PERMISSION".into(), r#"{"*":"allow"}"#.into())],
                    last_message: LastMessage::OpencodeEvents,
                    report: Report::OpencodeEvents,
                }
            }
            "aider" => aider_launch(f),
            _ => Launch {
                exec: "cursor-agent -p --force --output-format text \"$(cat \"$GIT_SWARM_PROMPT_FILE\")\"".into(),
                env: vec![],
                last_message: LastMessage::Hooks,
                report: Report::Nothing,
            },
        }
    }
}

/// Claude Code's launch.
fn claude_launch(f: &Facts) -> Launch {
    let q = |p: &Path| sh_quote(&p.to_string_lossy());
    // As root, Claude Code refuses --dangerously-skip-permissions unless IS_SANDBOX=1 declares a sandbox.
    // Without it, the permission checks stay on and the tools a coding agent needs are allowed by name:
    // `dontAsk` denies anything else instead of waiting for an answer nobody gives (2.1.85 and later;
    // before, `acceptEdits`, which auto-approves edits in the work tree).
    let perms = if !f.root || f.sandbox_declared {
        "--dangerously-skip-permissions".to_string()
    } else {
        let mode = if f.version.as_ref().is_none_or(|v| v.at_least("2.1.85")) { "dontAsk" } else { "acceptEdits" };
        format!("--permission-mode {mode} --allowedTools {CLAUDE_TOOLS}")
    };
    // stream-json (which needs --verbose with -p): usage per message as the run goes, every model's and
    // the price at the end.
    Launch {
        exec: format!("claude -p {perms} --add-dir {} --output-format stream-json --verbose", q(&f.run_dir)),
        env: vec![],
        last_message: LastMessage::Hooks,
        report: Report::ClaudeStream,
    }
}

/// aider's launch.
fn aider_launch(f: &Facts) -> Launch {
    let run = |file: &str| f.run_dir.join(file);
    let q = |p: &Path| sh_quote(&p.to_string_lossy());
    // --no-gitignore: aider would add `.aider*` to .gitignore, a change nobody asked for. Its history
    // files go to the runner's folder, not into the work tree. Its token counts are the API's only
    // without streaming (streamed, it counts with its own tokenizer); the analytics log (written
    // locally, nothing sent with --analytics-disable) has them as numbers.
    let history = run("aider.chat.md");
    let analytics = run("aider.analytics.jsonl");
    Launch {
        exec: format!(
            "aider --yes-always --no-check-update --no-show-model-warnings --no-gitignore \
             --analytics-disable --analytics-log {} --no-stream --chat-history-file {} \
             --input-history-file {} --message-file \"$GIT_SWARM_PROMPT_FILE\"",
            q(&analytics),
            q(&history),
            q(&run("aider.input.history"))
        ),
        env: vec![],
        last_message: LastMessage::AiderHistory(history),
        report: Report::AiderAnalytics(analytics),
    }
}

impl LastMessage {
    /// The CLI's last message, if it left one. `stdout_tail` is the end of what it printed.
    pub(crate) fn read(&self, stdout_tail: &str) -> Option<String> {
        let text = match self {
            LastMessage::Hooks => None,
            // Files the CLI (and so the agent) writes: read as [`super::files`] reads an agent's file.
            LastMessage::File(p) => super::files::read_text(p, 1 << 20),
            LastMessage::AiderHistory(p) => super::files::read_tail(p, 4 << 20).ok().and_then(|h| last_aider_reply(&h)),
            LastMessage::OpencodeEvents => last_opencode_text(stdout_tail),
        };
        text.filter(|t| !t.trim().is_empty())
    }
}

/// The model's last reply in aider's chat history: after the last block of `#### ` (user) lines, what is not one of
/// aider's own `> ` notes, without the file listings (a file's path, then its whole text in a fence: the commits
/// hold them; a hand-off says what was done).
fn last_aider_reply(history: &str) -> Option<String> {
    let lines: Vec<&str> = history.lines().collect();
    let last_user = lines.iter().rposition(|l| l.starts_with("#### "))?;
    let mut reply: Vec<&str> = Vec::new();
    let mut in_fence = false;
    for l in lines[last_user + 1..].iter().copied().filter(|l| !l.starts_with("> ")) {
        if l.trim_start().starts_with("```") {
            let path_like = |p: &str| {
                let p = p.trim();
                !p.is_empty() && !p.contains(' ') && !p.ends_with(':') && (p.contains('.') || p.contains('/'))
            };
            if !in_fence && reply.last().is_some_and(|p| path_like(p)) {
                reply.pop(); // the listing's path
            }
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            reply.push(l);
        }
    }
    let text = reply.join("\n").trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The last `text` part of opencode's JSON events (`{"type": "text", "part": {"text": …}}`).
fn last_opencode_text(stdout: &str) -> Option<String> {
    stdout.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l.trim()).ok()?;
        (v["type"] == "text").then(|| v["part"]["text"].as_str().map(String::from)).flatten()
    })
}

/// `'…'` for `sh`.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Why a CLI cannot be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("`{program}` is not installed here (not found on PATH)")]
    NotFound { program: String },
    #[error("`{command}` {how}")]
    Failed { command: String, how: String },
}

/// Run `<program> --version` (bounded by `limit`): what it printed.
pub(crate) fn version_of(program: &str, limit: Duration, env: &Environment) -> Result<String, ProbeError> {
    run_bounded(program, &["--version"], limit, env)
}

/// Run `<program> <args>` with no input, for at most `limit`: what it printed (stdout, then stderr), or why not.
pub(crate) fn run_bounded(
    program: &str,
    args: &[&str],
    limit: Duration,
    env: &Environment,
) -> Result<String, ProbeError> {
    let Some(path) = which(program, env) else { return Err(ProbeError::NotFound { program: program.to_string() }) };
    let what = format!("{program} {}", args.join(" "));
    let failed = |how: String| ProbeError::Failed { command: what.clone(), how };
    let mut cmd = Command::new(&path);
    cmd.args(args).stdin(Stdio::null());
    let opts = crate::child::Options {
        // Both pipes read while it runs (a long help page must not fill a pipe and stall the child), for at most
        // the rest of the limit once it ended: a helper it started that keeps a pipe open must not hold us past it.
        stdout: crate::child::Pipe::Keep(256 * 1024),
        stderr: crate::child::Pipe::Keep(256 * 1024),
        limit: Some(limit),
        drain: Some(Duration::from_secs(1)),
        // Whatever it left running goes with it.
        end_group: true,
        ..crate::child::Options::default()
    };
    let done =
        crate::child::run(&mut cmd, opts, &mut || None::<()>).map_err(|e| failed(format!("cannot start: {e}")))?;
    if done.cut.is_some() {
        return Err(failed(format!("gave no answer within {}s", limit.as_secs())));
    }
    let status = done.status.map_err(|e| failed(e.to_string()))?;
    let (out, err) = (String::from_utf8_lossy(&done.stdout), String::from_utf8_lossy(&done.stderr));
    if !status.success() {
        let last = err.lines().chain(out.lines()).map(str::trim).rfind(|l| !l.is_empty()).unwrap_or_default();
        return Err(failed(format!("failed ({status}): {}", crate::escape::line(last))));
    }
    Ok(format!("{out}{err}").trim().to_string())
}

/// The first `program` on `env`'s `PATH` that is an executable file (or `program` itself when it has a `/`).
pub(crate) fn which(program: &str, env: &Environment) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    let path = env.path()?;
    std::env::split_paths(path).map(|d| d.join(program)).find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(version: &str, root: bool, sandbox: bool) -> Facts {
        Facts {
            version: Version::parse(version),
            root,
            sandbox_declared: sandbox,
            bin: PathBuf::from("/opt/bin/git-swarm"),
            run_dir: PathBuf::from("/r/run/w-1"),
            help: String::new(),
        }
    }

    #[test]
    fn versions_parse_as_the_clis_print_them() {
        assert_eq!(Version::parse("2.1.332 (Claude Code)"), Some(Version(vec![2, 1, 332])));
        assert_eq!(Version::parse("codex-cli 0.171.0"), Some(Version(vec![0, 171, 0])));
        assert_eq!(Version::parse("aider 0.86.2\n"), Some(Version(vec![0, 86, 2])));
        assert_eq!(Version::parse("v20"), None);
        assert!(Version(vec![2, 1, 332]).at_least("2.1.85"));
        assert!(!Version(vec![2, 1, 9]).at_least("2.1.85"));
    }

    #[test]
    fn claude_keeps_its_permission_checks_as_root_unless_a_sandbox_is_declared() {
        let claude = find("claude").expect("claude");
        assert!(claude.launch(&facts("2.1.332", false, false)).exec.contains("--dangerously-skip-permissions"));
        let root = claude.launch(&facts("2.1.332", true, false)).exec;
        assert!(
            !root.contains("--dangerously-skip-permissions") && root.contains("--permission-mode dontAsk"),
            "{root}"
        );
        assert!(claude.launch(&facts("2.1.20", true, false)).exec.contains("--permission-mode acceptEdits"));
        assert!(claude.launch(&facts("2.1.332", true, true)).exec.contains("--dangerously-skip-permissions"));
    }

    #[test]
    fn codex_gets_a_notify_hook_and_a_last_message_file_quoted_for_sh_and_toml() {
        let mut f = facts("0.171.0", false, false);
        f.bin = PathBuf::from("/it's here/git-swarm");
        let l = find("codex").expect("codex").launch(&f);
        assert!(!l.exec.contains("--full-auto"), "{}", l.exec);
        assert_eq!(l.last_message, LastMessage::File(PathBuf::from("/r/run/w-1/last-message.md")));
        // The shell gives codex one -c argument that is valid TOML.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "printf '%s\\n' {}",
                l.exec.split(" -c ").nth(1).and_then(|r| r.strip_suffix(" -")).expect("-c")
            ))
            .output()
            .expect("sh");
        let arg = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let v: toml::Table = toml::from_str(&arg).expect("toml");
        assert_eq!(v["notify"][0].as_str(), Some("/it's here/git-swarm"));
    }

    #[test]
    fn last_messages_are_read_from_each_clis_own_record() {
        let history = "# aider chat started\n\n#### do it\n\n> Tokens: 1k\n\nsrc/a.txt\n```\nhello\n```\n\n\
                       Status: done\n\nWrote it.\n> Applied edit\n";
        assert_eq!(last_aider_reply(history).as_deref(), Some("Status: done\n\nWrote it."));
        let events = "{\"type\":\"text\",\"part\":{\"text\":\"first\"}}\n{\"type\":\"tool_use\"}\n\
                      {\"type\":\"text\",\"part\":{\"text\":\"Status: done\"}}\n{\"type\":\"step_finish\"}\n";
        assert_eq!(LastMessage::OpencodeEvents.read(events).as_deref(), Some("Status: done"));
        assert_eq!(LastMessage::Hooks.read(events), None);
    }

    #[test]
    fn a_missing_program_is_not_found() {
        assert_eq!(
            version_of("git-swarm-no-such-cli", Duration::from_secs(1), &Environment::of_this_process()),
            Err(ProbeError::NotFound { program: "git-swarm-no-such-cli".into() })
        );
        assert!(version_of("false", Duration::from_secs(5), &Environment::of_this_process()).is_err());
    }
}
