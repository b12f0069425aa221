//! `git swarm hooks install|uninstall|status`: the git hooks of a swarm, between marker lines in the hook files;
//! and the hidden handlers the hooks call: `hooks run commit-msg|pre-push` (git hooks) and
//! `hooks agent <claude|cursor|gemini|codex> <event>` (agent hooks). See `docs/hooks.md`.
//!
//! The handlers never stand in the way by accident: whatever goes wrong is a warning on stderr and exit 0. The
//! one exit that is not 0 is a strict `pre-push` refusing a push on purpose.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::environment::Environment;
use crate::hooks::{self, GitHook, Installed, Removed, agent};
use crate::model::{Status, Task};
use crate::ops::{self, Actor, Change};
use serde_json::{Value, json};

use super::error::Exit;
use super::output::Printer;
use super::{CliError, CliResult, Ctx, GlobalArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct HooksArgs {
    #[command(subcommand)]
    cmd: HooksCmd,
}

#[derive(Debug, clap::Subcommand)]
enum HooksCmd {
    /// Put our block into the commit-msg and pre-push hooks (the user's hooks keep their content).
    Install(Which),
    /// Take our block out of the hooks again (a hook file we created is removed).
    Uninstall(Which),
    /// Which hooks hold our block, and where git looks for hooks here.
    Status,
    /// Called by the git hooks.
    #[command(hide = true, subcommand)]
    Run(RunHook),
    /// Called by an agent's hooks: `claude post-tool-use|stop`, `cursor after-file-edit|after-agent-response|stop`,
    /// `gemini after-tool|after-agent`, `codex notify <json>`. An agent or event it does not know is a warning and
    /// exit 0, like every other problem here (a hook must never fail its agent: Gemini CLI takes exit 2 as "block").
    #[command(hide = true)]
    Agent {
        // Not `agent` nor `remote` below: those ids belong to the global flags, which clap would overwrite.
        #[arg(value_name = "AGENT")]
        tool: String,
        event: String,
        /// The payload, for agents that pass it as an argument (Codex); others write it to stdin.
        payload: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
struct Which {
    /// The commit-msg hook (adds `Swarm-Task: <id>` in a worker's work tree).
    #[arg(long)]
    commit_msg: bool,
    /// The pre-push hook (warns when pushed commits name a task that is not mine).
    #[arg(long)]
    pre_push: bool,
}

impl Which {
    fn hooks(&self) -> Vec<GitHook> {
        if !self.commit_msg && !self.pre_push {
            return GitHook::ALL.to_vec();
        }
        GitHook::ALL
            .into_iter()
            .filter(|h| match h {
                GitHook::CommitMsg => self.commit_msg,
                GitHook::PrePush => self.pre_push,
            })
            .collect()
    }
}

#[derive(Debug, clap::Subcommand)]
enum RunHook {
    CommitMsg {
        file: PathBuf,
    },
    PrePush {
        #[arg(value_name = "REMOTE")]
        push_remote: Option<String>,
        #[arg(value_name = "URL")]
        push_url: Option<String>,
    },
}

impl From<hooks::HookError> for CliError {
    fn from(e: hooks::HookError) -> Self {
        match e {
            hooks::HookError::Refused { .. } => CliError::new(Exit::Refused, e.to_string())
                .hint("`git swarm hooks status` shows where git looks for hooks; docs/hooks.md how to chain them"),
            _ => CliError::io(e.to_string()),
        }
    }
}

/// The entry point: the handlers make their own context, so that even a broken setup never fails a commit.
pub(super) fn run(global: GlobalArgs, args: HooksArgs, env: Arc<Environment>) -> CliResult<()> {
    match args.cmd {
        HooksCmd::Run(hook) => run_git_hook(global, hook, env),
        HooksCmd::Agent { tool, event, payload } => {
            let res = Ctx::new(global, env).and_then(|mut ctx| agent_hook(&mut ctx, &tool, &event, payload));
            if let Err(e) = res {
                Printer::new(false).warn(format!("git swarm: the {tool} {event} hook: {}", e.message));
            }
            if tool == "cursor" {
                // Cursor reads a JSON answer on stdout from every hook.
                println!("{{}}");
            }
            Ok(())
        }
        cmd => {
            let mut ctx = Ctx::new(global, env)?;
            manage(&mut ctx, cmd)
        }
    }
}

fn manage(ctx: &mut Ctx, cmd: HooksCmd) -> CliResult<()> {
    let dir = hooks::hooks_dir(ctx.dir())?;
    match cmd {
        HooksCmd::Install(which) => {
            let mut done = Vec::new();
            for hook in which.hooks() {
                let (path, what) = hooks::install(&dir, hook)?;
                let verb = match what {
                    Installed::Created => "created",
                    Installed::Added => "added our block to",
                    Installed::Updated => "updated our block in",
                    Installed::Unchanged => "already installed:",
                };
                ctx.out.line(format!("{verb} {}", path.display()));
                if let Some(real) = hooks::inside_work_tree(ctx.dir(), &path) {
                    ctx.out.warn(format!(
                        "{} is inside the work tree: `git status` shows our block and `commit -a` would commit it; \
                         with a relative core.hooksPath, other work trees (the worker's) read their own copy",
                        real.display()
                    ));
                }
                done.push(json!({"hook": hook.name(), "path": path, "result": what.as_str()}));
            }
            ctx.out.doc(&json!({"hooks_dir": dir, "hooks": done}));
        }
        HooksCmd::Uninstall(which) => {
            let mut done = Vec::new();
            for hook in which.hooks() {
                let (path, what) = hooks::uninstall(&dir, hook)?;
                let (verb, result) = match what {
                    Removed::Block => ("removed our block from", "block_removed"),
                    Removed::File => ("removed", "file_removed"),
                    Removed::Absent => ("not installed:", "absent"),
                };
                ctx.out.line(format!("{verb} {}", path.display()));
                done.push(json!({"hook": hook.name(), "path": path, "result": result}));
            }
            ctx.out.doc(&json!({"hooks_dir": dir, "hooks": done}));
        }
        _ => {
            let states = hooks::status(&dir);
            for s in &states {
                let what = match (s.installed, s.outdated, s.exists) {
                    (true, false, _) => "installed",
                    (true, true, _) => "installed (an older version: run `git swarm hooks install`)",
                    (false, _, true) => "not installed (the file holds another hook)",
                    (false, _, false) => "not installed",
                };
                ctx.out.line(format!("{:<11} {what}  {}", s.hook.name(), s.path.display()));
            }
            let list: Vec<Value> = states
                .iter()
                .map(|s| {
                    json!({"hook": s.hook.name(), "path": s.path, "installed": s.installed, "exists": s.exists,
                           "outdated": s.outdated})
                })
                .collect();
            ctx.out.doc(&json!({"hooks_dir": dir, "hooks": list}));
        }
    }
    Ok(())
}

fn run_git_hook(global: GlobalArgs, hook: RunHook, env: Arc<Environment>) -> CliResult<()> {
    let warn = |m: String| Printer::new(false).warn(format!("git swarm: {m}"));
    match hook {
        RunHook::CommitMsg { file } => {
            let Some(id) = env.task_id() else { return Ok(()) };
            let dir = global.start_dir().unwrap_or_else(|_| PathBuf::from("."));
            if let Err(e) = hooks::add_trailer(&dir, &file, id) {
                warn(format!("commit-msg: the Swarm-Task trailer was not added: {e}"));
            }
            Ok(())
        }
        RunHook::PrePush { push_remote, push_url } => {
            // Where the code goes does not matter: the board is the swarm's remote (--remote, swarm.remote…).
            let _ = (push_remote, push_url);
            match Ctx::new(global, env) {
                Ok(mut ctx) => pre_push(&mut ctx),
                Err(e) => {
                    warn(format!("pre-push: the claim check is skipped: {}", e.message));
                    Ok(())
                }
            }
        }
    }
}

fn pre_push(ctx: &mut Ctx) -> CliResult<()> {
    let warn = |m: &str| Printer::new(false).warn(format!("git swarm: {m}"));
    let mut input = String::new();
    let _ = std::io::stdin().lock().take(1 << 20).read_to_string(&mut input);
    let updates = hooks::parse_push_lines(&input);
    let (pushed, bad) = match hooks::pushed_tasks(ctx.dir(), &updates) {
        Ok(x) => x,
        Err(e) => {
            warn(&format!("pre-push: cannot list the pushed commits ({e}); the claim check is skipped"));
            return Ok(());
        }
    };
    for b in &bad {
        warn(b);
    }
    if pushed.is_empty() {
        return Ok(());
    }
    let strict = ctx.repo().and_then(|r| r.config_snapshot().boolean("swarm.prePushStrict")).unwrap_or(false);
    let me = ctx.agent().to_string();
    let now = ctx.now();
    let mut ids: Vec<String> = pushed.iter().map(|p| p.task.clone()).collect();
    ids.sort();
    ids.dedup();
    let tasks = match board_tasks(ctx, ids.clone()) {
        Ok(t) => t,
        Err(why) => {
            warn(&format!("pre-push: could not read the swarm's board ({why}); pushing without the claim check"));
            return Ok(());
        }
    };
    let mut problems = 0;
    for (id, task) in ids.iter().zip(&tasks) {
        if let Some(why) = hooks::claim_problem(&me, id, task.as_ref(), now) {
            let commits: Vec<&str> =
                pushed.iter().filter(|p| &p.task == id).map(|p| hooks::short(&p.commit)).take(5).collect();
            warn(&format!("pre-push: commit {} is for task {id}: {why}", commits.join(", ")));
            problems += 1;
        }
    }
    if problems > 0 && strict {
        return Err(CliError::new(
            Exit::Refused,
            format!("push refused: {problems} task(s) pushed without a claim of yours"),
        )
        .hint("claim the task first (`git swarm claim <id>`), or push with --no-verify")
        .hint("swarm.prePushStrict is set; `git config swarm.prePushStrict false` makes this a warning"));
    }
    Ok(())
}

/// The tasks `ids` as the board has them (finished ones too), read in a thread so that a remote that does not
/// answer costs at most `$GIT_SWARM_HOOK_TIMEOUT`.
fn board_tasks(ctx: &mut Ctx, ids: Vec<String>) -> Result<Vec<Option<Task>>, String> {
    // A repository handle cannot move between threads: the thread opens its own.
    let (dir, remote, name, transport) =
        (ctx.dir().to_path_buf(), ctx.remote.clone(), ctx.swarm_name.clone(), ctx.transport);
    let env = Arc::clone(&ctx.env);
    let limit = env.hook_timeout();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let res = (|| -> Result<Vec<Option<Task>>, String> {
            let repo = crate::repo::discover(&dir, &env).map_err(|e| e.to_string())?;
            let swarm = crate::open_swarm(repo, remote.as_deref(), &name, transport).map_err(|e| e.to_string())?;
            let snap = swarm.read(false).map_err(|e| e.to_string())?;
            ids.iter()
                .map(|id| match snap.board.tasks.get(id) {
                    Some(s) => Ok(Some(s.task.clone())),
                    None => match swarm.store().read_closed(&snap, id).map_err(|e| e.to_string())? {
                        Some(Ok(t)) => Ok(Some(t)),
                        _ => Ok(None),
                    },
                })
                .collect()
        })();
        let _ = tx.send(res);
    });
    rx.recv_timeout(limit).map_err(|_| format!("no answer within {}s", limit.as_secs()))?
}

/// The agent hooks' handler: renew the lease (rate limited) while the agent works, record the hand-off when it
/// stops. Does nothing outside a swarm worker (no `$GIT_SWARM_TASK_ID`).
fn agent_hook(ctx: &mut Ctx, agent: &str, event: &str, payload: Option<String>) -> CliResult<()> {
    // Checked as a task id when the environment was read.
    let Some(id) = ctx.env.task_id().map(String::from) else { return Ok(()) };
    // A hook that retries for minutes would hold the agent up (Claude Code gives it 30 s): give up sooner.
    ctx.retry.max_elapsed = ctx.retry.max_elapsed.min(Duration::from_secs(20));
    let stdin_payload = || -> Value {
        let mut s = String::new();
        if !std::io::stdin().is_terminal() {
            let _ = std::io::stdin().lock().take(4 << 20).read_to_string(&mut s);
        }
        serde_json::from_str(&s).unwrap_or(Value::Null)
    };
    match (agent, event) {
        ("claude", "post-tool-use") | ("cursor", "after-file-edit") | ("gemini", "after-tool") => {
            let _ = stdin_payload();
            renew(ctx, &id)
        }
        ("claude", "stop") | ("cursor", "stop") => {
            let p = stdin_payload();
            // Claude Code hands the text over in the payload; the transcript is only a fallback (it may not be
            // written yet when Stop runs: the hand-off was lost in most runs while it was read from there alone).
            if let Some(text) = p["last_assistant_message"].as_str().filter(|t| !t.trim().is_empty()) {
                return handoff(ctx, Some(text));
            }
            let text = match p["transcript_path"].as_str() {
                Some(t) => agent::last_assistant_text_of(Path::new(t), Duration::from_secs(3))
                    .map_err(|e| CliError::io(format!("transcript {t}: {e}")))?,
                None => None,
            };
            handoff(ctx, text.as_deref())
        }
        ("gemini", "after-agent") => {
            let p = stdin_payload();
            handoff(ctx, p["prompt_response"].as_str())
        }
        ("cursor", "after-agent-response") => {
            let p = stdin_payload();
            handoff(ctx, p["text"].as_str())
        }
        ("codex", "notify") => {
            let p: Value = payload.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or(Value::Null);
            if p["type"] != "agent-turn-complete" {
                return Ok(());
            }
            handoff(ctx, p["last-assistant-message"].as_str())?;
            renew(ctx, &id)
        }
        _ => Err(CliError::usage(format!("unknown event '{}' for {agent}", crate::escape::line(event)))),
    }
}

fn handoff(ctx: &Ctx, text: Option<&str>) -> CliResult<()> {
    let (Some(text), Some(file)) = (text, ctx.env.handoff_file()) else { return Ok(()) };
    agent::record_handoff(file, text).map_err(|e| CliError::io(format!("{}: {e}", file.display())))?;
    Ok(())
}

/// Renew my claim on `id` when less than a third of the lease is left, looking at the board at most once every
/// `$GIT_SWARM_HOOK_RENEW_SECS` (60) seconds in this clone.
fn renew(ctx: &mut Ctx, id: &str) -> CliResult<()> {
    // Inside a runner's agent run the runner keeps the lease itself (the agent holds no credential to push with,
    // and in a sandbox cannot write the clone): nothing to do.
    if let Some(outbox) = ctx.env.outbox() {
        // Said in the run's folder (that the agent's hooks fire is worth knowing: `docs/hooks.md`).
        if let Some(dir) = outbox.parent() {
            let _ = std::fs::write(dir.join(format!("hook-renew-{id}")), b"");
        }
        return Ok(());
    }
    let agent = ctx.agent().to_string();
    let stamp = ctx.common_dir.join("swarm").join("hooks").join(format!("renew-{agent}-{id}"));
    if agent::rate_limited(&stamp, ctx.env.hook_renew()) {
        return Ok(());
    }
    let epoch = ctx.env.epoch().or_else(|| ctx.recalled_epoch(&agent, id));
    ctx.transact(|snap, now, agent| {
        let board = &snap.board;
        let lease = board.config.lease;
        let due = board.tasks.get(id).map(|s| &s.task).is_some_and(|t| {
            t.status == Status::Claimed
                && t.claim.as_ref().is_some_and(|c| {
                    c.agent == agent && Duration::from_millis(c.lease_until.0.saturating_sub(now.0)) < lease / 3
                })
        });
        if !due {
            return Ok((Change::default(), ()));
        }
        let actor = Actor { agent: agent.to_string(), now };
        ops::renew(board, &actor, Some(id), epoch, lease, None).map(|(ch, _)| (ch, ()))
    })?;
    Ok(())
}
