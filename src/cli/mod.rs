//! The command line: parsing (clap derive), the context every subcommand gets, and dispatch.
//! One file per subcommand; each has an `XArgs` struct and `run(ctx, args)`.

mod add;
mod board;
mod cancel;
mod ci;
mod claim;
mod compact;
mod completions;
mod config;
mod ctx;
mod demo;
mod dispatch;
mod doctor;
mod done;
mod error;
mod fail;
mod frame;
mod goal;
mod hooks;
mod init;
mod list;
mod log;
mod man;
mod output;
mod ready;
mod release;
mod renew;
mod retry;
mod run;
mod runs;
mod setup;
mod show;
mod status;
mod trust;
mod up;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::environment::Environment;
use crate::model::{Kind, validate_agent};
use crate::ops::DomainError;
use crate::time::Timestamp;
use crate::{Identity, Snapshot};
use crate::{Retry, Swarm, TxnError};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub(crate) use ctx::Ctx;
pub(crate) use error::{CliError, CliResult};
use output::Printer;

/// Coordinate many coding agents on one repository, with no server: a task board in a git ref, changed only by
/// compare-and-swap.
#[derive(Debug, Parser)]
#[command(name = "git-swarm", version, about, max_term_width = 100)]
#[command(propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes, before or after its name.
#[derive(Debug, clap::Args)]
pub(crate) struct GlobalArgs {
    /// Run as if started in <DIR>, like `git -C` (several combine: each is relative to the one before; an empty
    /// one changes nothing).
    #[arg(short = 'C', global = true, value_name = "DIR", action = clap::ArgAction::Append,
          value_parser = clap::builder::OsStringValueParser::new())]
    pub dir: Vec<std::ffi::OsString>,
    /// The shared remote holding the swarm: a remote's name, a URL or a path
    /// [default: $GIT_SWARM_REMOTE, else git config swarm.remote, else origin, else this repository].
    #[arg(long, global = true, value_name = "NAME-OR-URL")]
    pub remote: Option<String>,
    /// Which swarm: the ref refs/swarm/<NAME> [default: $GIT_SWARM_SWARM, else git config swarm.name, else default].
    #[arg(long, global = true, value_name = "NAME")]
    pub swarm: Option<String>,
    /// This agent's identity (letters, digits, '-', '_', '.') [default: $GIT_SWARM_AGENT, else git config swarm.agent,
    /// else user-host].
    #[arg(long, global = true, value_name = "ID")]
    pub agent: Option<String>,
    /// Machine output on stdout: one JSON document.
    #[arg(long, global = true)]
    pub json: bool,
}

impl GlobalArgs {
    /// Where the command runs: the current directory moved by every `-C` in turn, as git does (each relative to
    /// the one before; an empty one changes nothing).
    pub(crate) fn start_dir(&self) -> CliResult<PathBuf> {
        let mut dir = PathBuf::new();
        for d in self.dir.iter().filter(|d| !d.is_empty()) {
            dir = dir.join(d);
            if !dir.is_dir() {
                return Err(CliError::usage(format!("-C {}: not a directory", dir.display())));
            }
        }
        if dir.as_os_str().is_empty() {
            dir =
                std::env::current_dir().map_err(|e| CliError::io(format!("cannot read the current directory: {e}")))?;
        }
        Ok(std::path::absolute(&dir).unwrap_or(dir))
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the swarm's state ref on the remote (a second run changes nothing).
    Init(init::InitArgs),
    /// Add an open task; prints its id.
    Add(add::AddArgs),
    /// List every task.
    List(list::ListArgs),
    /// Show one task.
    Show(show::ShowArgs),
    /// The tasks a claim without id could take now, best first.
    Ready(ready::ReadyArgs),
    /// Claim a task (or the best ready one); prints its id.
    Claim(claim::ClaimArgs),
    /// Extend the lease of my claim (all my claims without id).
    Renew(renew::RenewArgs),
    /// Give my claim back: the task is open again.
    Release(release::ReleaseArgs),
    /// Mark my claimed task done.
    Done(done::DoneArgs),
    /// Mark my claimed task failed (open again while attempts remain).
    Fail(fail::FailArgs),
    /// Open a failed or cancelled task again, its attempts reset.
    Retry(retry::RetryArgs),
    /// Cancel an open or claimed task: it will not be done (a holder is fenced off; `retry` opens it again).
    Cancel(cancel::CancelArgs),
    /// Set the swarm's goal and start the next cycle with a fresh root plan (also after the judge's stop).
    Goal(goal::GoalArgs),
    /// Counts by status, agents and what they hold, expired leases.
    Status(status::StatusArgs),
    /// The audit log of the swarm, newest first.
    Log(log::LogArgs),
    /// Replace the state ref's history by one root commit; the old history is kept under refs/swarm-archive/.
    Compact(compact::CompactArgs),
    /// The swarm's shared settings (swarm.toml on the state ref): show them, get, set or unset one.
    Config(config::ConfigArgs),
    /// Show what this clone's runners would run of the shared settings, and trust it (--yes).
    Trust(trust::TrustArgs),
    /// Check the swarm and this clone (a state ref rewound or deleted, stale locks, stray work trees); --fix repairs.
    Doctor(doctor::DoctorArgs),
    /// Run an agent loop: a worker, a planner or a judge.
    Run(run::RunArgs),
    /// A whole swarm on a throwaway repository with scripted agents, in under a minute.
    Demo(demo::DemoArgs),
    /// Start a local fleet (workers, planners, a judge) with a live board; Ctrl-C stops it.
    Up(up::UpArgs),
    /// Install the manual page (git swarm --help) and the bash, zsh and fish completions for this user.
    Setup(setup::SetupArgs),
    /// Print the shell completion script for bash, zsh or fish.
    Completions(completions::CompletionsArgs),
    /// Print the manual page git-swarm(1) (roff).
    #[command(hide = true)]
    Man(man::ManArgs),
    /// Where this clone's runners keep their work trees and run files, as JSON (`{"home", "base"}`): for the tests,
    /// which look into them from outside.
    #[command(name = "__places", hide = true)]
    Places,
    /// Git hooks (the Swarm-Task trailer, a claim check before push): install, uninstall, status.
    Hooks(hooks::HooksArgs),
    /// A live board in the terminal, redrawn when the state ref moves (--once: one frame).
    Watch(watch::WatchArgs),
    /// The board as one self-contained HTML page (--html <file>) or JSON (--json).
    Board(board::BoardArgs),
    /// Write the CI file of a fleet of runners: `ci github` (GitHub Actions) or `ci gitlab` (GitLab CI).
    Ci(ci::CiArgs),
    /// Start the fleet's GitHub Actions workflow (token GITHUB_TOKEN or GH_TOKEN), or with --gitlab its GitLab CI
    /// pipeline (token GITLAB_TOKEN).
    Dispatch(dispatch::DispatchArgs),
    /// The runs of the fleet's GitHub Actions workflow (or with --gitlab its GitLab pipelines), newest first.
    Runs(runs::RunsArgs),
}

/// Read a text argument from a file (`-`: stdin), naming the flag in errors.
pub(crate) fn read_text_arg(path: &std::path::Path, flag: &str) -> CliResult<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| CliError::io(format!("{flag} -: cannot read stdin: {e}")))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| CliError::io(format!("{flag} {}: {e}", path.display())))
}

/// Parse a `--kind`.
pub(crate) fn parse_kind(s: &str) -> Result<Kind, String> {
    match s {
        "work" => Ok(Kind::Work),
        "plan" => Ok(Kind::Plan),
        _ => Err(format!("unknown kind '{s}' (work or plan)")),
    }
}

/// Parse a `--lease` or other duration flag.
pub(crate) fn parse_lease(s: &str) -> Result<Duration, String> {
    crate::time::parse_duration(s)
}

/// Parse a command flag (`--exec`): a command that is only blanks would run nothing (and fail every task).
pub(crate) fn parse_command(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("the command is empty: give the agent's command line, e.g. --exec 'claude -p'".into());
    }
    Ok(s.to_string())
}

/// Parse a task id argument.
pub(crate) fn parse_id(s: &str) -> Result<String, String> {
    crate::model::validate_id(s)?;
    Ok(s.to_string())
}

/// The entry point of the binary.
pub(crate) fn main() -> ExitCode {
    // The trampoline an agent starts through (`agent::enter`): no command line to parse, no output but why not.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == crate::agent::enter::ARG) {
        let why = match crate::agent::enter::Enter::parse(&args[2..]) {
            Ok(e) => e.exec(),
            Err(why) => why,
        };
        eprintln!("git-swarm: cannot start the agent: {why}");
        // What a command that could not start exits with: the runner gives the claim back and stops.
        return ExitCode::from(126);
    }
    // Shown as `git swarm` in usage lines; set here, not on the type, so that completions are generated for the
    // binary's own name (`git-swarm`).
    let matches = Cli::command().bin_name("git swarm").try_get_matches();
    let subcommand = matches.as_ref().ok().and_then(|m| m.subcommand_name()).map(str::to_string);
    let parsed = matches.and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            // Scripts that asked for JSON get one document, even when the command line is wrong.
            if code == 2 && std::env::args_os().any(|a| a == "--json") {
                let message = e.kind().to_string();
                CliError::usage(message).report_json_only();
            }
            return ExitCode::from(code);
        }
    };
    // The process environment, read once, here (`environment`): the engine's part of it installed, a bad value
    // of a knob stops the command before anything runs.
    let (env, bad) = Environment::from_vars(std::env::vars_os());
    let engine = git_swarm_core::Process::from_vars(&env.utf8_vars()).map(git_swarm_core::install).err();
    let mut bad: Vec<(String, String)> = bad.iter().map(|b| (b.to_string(), b.fix())).collect();
    bad.extend(engine.map(|why| (why, "unset it, or give it a valid value".into())));
    if let Some((why, fix)) = bad.first() {
        if !matches!(cli.command, Command::Hooks(_)) {
            CliError::usage(why).hint(fix).report(cli.global.json);
            return ExitCode::from(2);
        }
        // A hook's handler never fails a commit or an agent for it: said, and the defaults then.
        bad.iter().for_each(|(why, _)| Printer::new(false).warn(format!("git swarm: {why} (taken as unset)")));
    }
    let (json, profile) = (cli.global.json, env.profile().map(PathBuf::from));
    let started = std::time::Instant::now();
    let code = match run(cli, Arc::new(env)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.report(json);
            ExitCode::from(e.code())
        }
    };
    if let Some(file) = profile {
        write_profile(&file, subcommand.as_deref(), started.elapsed());
    }
    code
}

/// Append where this process's ops spent their time (`crate::profile`) to `file`, one JSON line: the
/// subcommand (nothing else of the command line: it may hold task text), the wall time, per phase the milliseconds and how many times, the attempts lost and
/// published. Best effort: a profile that cannot be written changes nothing of the command's outcome.
fn write_profile(file: &std::path::Path, command: Option<&str>, wall: std::time::Duration) {
    use std::io::Write;
    let p = crate::profile::totals();
    let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
    let mut line = serde_json::json!({
        "command": command,
        "wall_ms": ms(wall),
        "lost": p.lost,
        "published": p.published,
        "contenders": p.contenders,
    });
    for (phase, spent, times) in p.phases {
        line[phase.name()] = serde_json::json!({ "ms": ms(spent), "n": times });
    }
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        // One write of the whole line: processes appending at once do not interleave.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn run(cli: Cli, env: Arc<Environment>) -> CliResult<()> {
    // The demo makes its own repositories: it runs anywhere, in a repository or not.
    // These need no repository: the demo makes its own, the others write or print files about the tool itself.
    match cli.command {
        Command::Demo(a) => return demo::run(&Printer::new(cli.global.json), a, &env),
        Command::Setup(a) => return setup::run(&Printer::new(cli.global.json), a, &env),
        Command::Completions(a) => return completions::run(a),
        Command::Man(a) => return man::run(a),
        Command::Places => {
            let repo =
                crate::repo::discover(&cli.global.start_dir()?, &env).map_err(|e| CliError::io(e.to_string()))?;
            let places = crate::runner::Places::of(repo.common_dir(), &env);
            println!("{}", serde_json::json!({"home": places.home, "base": places.base}));
            return Ok(());
        }
        _ => {}
    }
    // The hooks' handlers make their own context: a broken setup must not fail a commit or an agent.
    if let Command::Hooks(a) = cli.command {
        return hooks::run(cli.global, a, env);
    }
    let mut ctx = Ctx::new(cli.global, env)?;
    match cli.command {
        Command::Init(a) => init::run(&mut ctx, a),
        Command::Add(a) => add::run(&mut ctx, a),
        Command::List(a) => list::run(&mut ctx, a),
        Command::Show(a) => show::run(&mut ctx, a),
        Command::Ready(a) => ready::run(&mut ctx, a),
        Command::Claim(a) => claim::run(&mut ctx, a),
        Command::Renew(a) => renew::run(&mut ctx, a),
        Command::Release(a) => release::run(&mut ctx, a),
        Command::Done(a) => done::run(&mut ctx, a),
        Command::Fail(a) => fail::run(&mut ctx, a),
        Command::Retry(a) => retry::run(&mut ctx, a),
        Command::Cancel(a) => cancel::run(&mut ctx, a),
        Command::Goal(a) => goal::run(&mut ctx, a),
        Command::Status(a) => status::run(&mut ctx, a),
        Command::Log(a) => log::run(&mut ctx, a),
        Command::Compact(a) => compact::run(&mut ctx, a),
        Command::Doctor(a) => doctor::run(&mut ctx, a),
        Command::Config(a) => config::run(&mut ctx, a),
        Command::Trust(a) => trust::run(&mut ctx, a),
        Command::Run(a) => run::run(&mut ctx, a),
        Command::Up(a) => up::run(&mut ctx, a),
        Command::Watch(a) => watch::run(&mut ctx, a),
        Command::Board(a) => board::run(&mut ctx, a),
        Command::Ci(a) => ci::run(&mut ctx, a),
        Command::Dispatch(a) => dispatch::run(&mut ctx, a),
        Command::Runs(a) => runs::run(&mut ctx, a),
        Command::Demo(_)
        | Command::Setup(_)
        | Command::Completions(_)
        | Command::Man(_)
        | Command::Places
        | Command::Hooks(_) => Ok(()),
    }
}
