//! `git swarm demo`: a whole swarm on a throwaway repository and bare remote in a temporary folder — a goal, a
//! planner (and a sub-planner), 4 workers and a judge, all scripted agents (no API key, no network) — with the live
//! board and a closing summary. A newcomer sees the system work in under a minute.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::environment::Environment;
use crate::model::{Config, Status};

use super::output::Printer;
use super::up::{Fleet, FleetEnd, run_fleet};
use super::{CliError, CliResult};

#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Worker processes (at least 1: a fleet with no worker lands nothing).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    workers: u32,
    /// Keep the temporary folder (its path is printed) to look around afterwards.
    #[arg(long)]
    keep: bool,
    /// Seconds each scripted agent takes per task (so that the board has something to show).
    #[arg(long, default_value_t = 1, value_name = "SECS")]
    pace: u32,
}

/// The scripted agent of the tests, built in.
const AGENT: &str = include_str!("../../tests/agents/scripted.sh");

const GOAL: &str = "Build wc-lite: shell scripts that count the lines, words and bytes of their input, with a \
README, usage notes and tests.";

const CHECK: &str = "#!/bin/sh\n# The demo's check: every script under src/ is non-empty.\nfor f in src/*.sh; do\n    \
[ -e \"$f\" ] || continue\n    [ -s \"$f\" ] || { echo \"$f is empty\"; exit 1; }\ndone\necho ok\n";

fn git(dir: &Path, args: &[&str]) -> CliResult<String> {
    let out = crate::gitcmd::local(dir)
        .args(args)
        .output()
        .map_err(|e| CliError::io(format!("cannot run git: {e}")).hint("git swarm needs git on the PATH"))?;
    if !out.status.success() {
        return Err(CliError::io(format!(
            "demo: git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn write(path: &Path, text: &str) -> CliResult<()> {
    std::fs::write(path, text).map_err(|e| CliError::io(format!("demo: cannot write {}: {e}", path.display())))
}

pub(super) fn run(out: &Printer, args: DemoArgs, env: &Environment) -> CliResult<()> {
    let tmp = tempfile::Builder::new()
        .prefix("git-swarm-demo-")
        .tempdir()
        .map_err(|e| CliError::io(format!("demo: cannot make a temporary folder: {e}")))?;
    let root = tmp.path().to_path_buf();
    let res = demo_in(out, &root, &args, env);
    if args.keep {
        let kept = tmp.keep();
        out.note(format!("the demo's folder is kept: {}", kept.display()));
    }
    res
}

fn demo_in(out: &Printer, root: &Path, args: &DemoArgs, env: &Environment) -> CliResult<()> {
    let started = Instant::now();
    let (remote, work) = (root.join("remote.git"), root.join("work"));
    demo_project(out, root, &remote, &work)?;
    let swarm = demo_swarm(root, &work, env)?;
    let (end, logs) = demo_fleet(out, root, &work, &swarm, args, env)?;
    demo_summary(out, &swarm, &remote, &work, &end, &logs, started, args)?;
    if !end.failed.is_empty() {
        return Err(CliError::io(format!("demo: {} member(s) failed: {}", end.failed.len(), end.failed.join(", ")))
            .hint("run `git swarm demo --keep` and read the logs"));
    }
    Ok(())
}

/// A bare remote and a clone of it holding the demo's project, pushed.
fn demo_project(out: &Printer, root: &Path, remote: &Path, work: &Path) -> CliResult<()> {
    out.note(format!("demo: a bare remote and a clone in {}", root.display()));
    git(root, &["init", "--quiet", "--bare", "--initial-branch=main", "remote.git"])?;
    git(remote, &["config", "core.logAllRefUpdates", "always"])?;
    git(root, &["clone", "--quiet", "remote.git", "work"])?;
    for (k, v) in
        [("user.name", "git swarm demo"), ("user.email", "demo@git-swarm.invalid"), ("commit.gpgsign", "false")]
    {
        git(work, &["config", k, v])?;
    }
    write(&work.join("README.md"), "# wc-lite\n")?;
    write(&work.join("check.sh"), CHECK)?;
    git(work, &["add", "."])?;
    git(work, &["commit", "--quiet", "-m", "wc-lite: an empty project"])?;
    git(work, &["push", "--quiet", "origin", "HEAD:refs/heads/main"])?;
    Ok(())
}

/// The demo's swarm in its clone: the scripted agent beside it, the settings written and trusted there.
fn demo_swarm(root: &Path, work: &Path, env: &Environment) -> CliResult<crate::Swarm> {
    let agent = root.join("agent.sh");
    write(&agent, AGENT)?;
    let exec = format!("sh {}", shell_quote(&agent.to_string_lossy()));
    // The scripted agent lives in the demo's folder (a temporary one, which a sandboxed agent does not see): it is
    // named readable; its pace comes through the environment (the agent's is an allow-list).
    let config_text = format!(
        "target = \"main\"\nlease = \"2m\"\nmax_attempts = 3\n\n[run]\ncheck = \"sh check.sh\"\ntask_timeout = \"2m\"\n\
         sandbox_read = [{}]\n\n[roles.default]\nexec = {}\nenv = [\"SCRIPTED_*\"]\n",
        toml_string(&agent.to_string_lossy()),
        toml_string(&exec)
    );
    let config: Config = toml::from_str(&config_text).map_err(|e| CliError::io(format!("demo: {e}")))?;
    let repo = crate::repo::discover(work, env).map_err(|e| CliError::io(e.to_string()))?;
    let swarm = crate::open_swarm(repo, None, "default", crate::Transport::Auto)?;
    let who = crate::Identity { name: "git swarm demo".into(), email: "demo@git-swarm.invalid".into() };
    let clock = || crate::time::Timestamp::now_with_offset(0);
    let (commit, _) = swarm.init(&crate::Retry::default(), &who, &clock, &config, "demo")?;
    // The demo wrote these settings in its own clone: its runners trust them, as after `init --config`.
    let doc = super::trust::document_at(&swarm, commit)?;
    crate::trust::record(swarm.local.repo.common_dir(), &doc).map_err(CliError::io)?;
    Ok(swarm)
}

/// The fleet on the demo's swarm, to the judge's stop: how it ended, and where its logs are.
fn demo_fleet(
    out: &Printer,
    root: &Path,
    work: &Path,
    swarm: &crate::Swarm,
    args: &DemoArgs,
    env: &Environment,
) -> CliResult<(FleetEnd, std::path::PathBuf)> {
    out.note(format!("demo: goal: {GOAL}"));
    out.note(format!(
        "demo: 1 planner, {} workers and a judge start now (scripted agents, {}s a task)",
        args.workers, args.pace
    ));
    std::thread::sleep(Duration::from_millis(300));
    let fleet = Fleet {
        dir: work.to_path_buf(),
        remote: None,
        swarm: "default".into(),
        base: "demo".into(),
        workers: args.workers,
        worker_processes: 1,
        planners: 1,
        judge: true,
        goal: Some(GOAL.into()),
        exec: None,
        check: None,
        // The runners' work trees go under the demo's folder too (they are kept outside a git directory, in the
        // cache folder by default): nothing of the demo outlives it.
        env: vec![
            ("SCRIPTED_DELAY".into(), args.pace.to_string()),
            ("XDG_CACHE_HOME".into(), root.join("cache").to_string_lossy().into_owned()),
        ],
        logs: work.join(".git").join("swarm").join("logs"),
    };
    let end = run_fleet(&fleet, swarm, env)?;
    Ok((end, fleet.logs))
}

/// The closing summary: what landed, how many pushes it took, the verdict, main's history.
#[allow(clippy::too_many_arguments)]
fn demo_summary(
    out: &Printer,
    swarm: &crate::Swarm,
    remote: &Path,
    work: &Path,
    end: &FleetEnd,
    logs: &Path,
    started: Instant,
    args: &DemoArgs,
) -> CliResult<()> {
    // The closing summary.
    let snap = swarm.read(true)?;
    let c = crate::runner::counts(&snap.board);
    let n = |st: Status| c.iter().find(|(s, _)| *s == st).map(|(_, n)| *n).unwrap_or(0);
    git(work, &["fetch", "--quiet", "origin", "main"])?;
    let landed = git(work, &["log", "--format=%(trailers:key=Swarm-Task,valueonly)", "FETCH_HEAD"])?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    let merges = git(work, &["rev-list", "--min-parents=2", "--count", "FETCH_HEAD"])?;
    let history = git(work, &["log", "--oneline", "-n", "12", "FETCH_HEAD"])?;
    let state_pushes =
        std::fs::read_to_string(remote.join("logs/refs/swarm/default")).map(|t| t.lines().count()).unwrap_or(0);
    let work_done = snap
        .board
        .tasks
        .values()
        .filter(|s| s.task.status == Status::Done && s.task.kind == crate::model::Kind::Work)
        .count();
    let verdict = crate::runner::last_cycle(swarm.store(), snap.commit);
    // Conflicts the workers met and their agents resolved, from the runners' own logs.
    let conflicts = std::fs::read_dir(logs)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".runner.log"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default().matches("rebase conflict on").count())
                .sum::<usize>()
        })
        .unwrap_or(0);
    out.line(String::new());
    out.line(format!("git swarm demo — done in {:.1}s", started.elapsed().as_secs_f64()));
    out.line(format!(
        "  tasks: {} done ({work_done} work, the rest plans), {} failed, {} open",
        n(Status::Done),
        n(Status::Failed),
        n(Status::Open) + n(Status::Claimed)
    ));
    out.line(format!(
        "  landings on main: {landed} commit(s) with a Swarm-Task trailer; {} merge commit(s) (history is linear)",
        merges.trim()
    ));
    if work_done > 0 {
        out.line(format!(
            "  pushes: {state_pushes} to the remote in all, {:.2} per completed work task (the goal, plans, the verdict and \
             each worker's first claim included; each landing carries its task's done and the next claim); {} lost \
             race(s) retried",
            state_pushes as f64 / work_done as f64,
            end.lost_races
        ));
    }
    if let Some(v) = verdict {
        out.line(format!(
            "  judge: cycle {} ended with `{}` — {}",
            v.cycle,
            v.verdict,
            crate::escape::line(&v.reasons)
        ));
    }
    out.line("  main now:");
    for l in history.lines() {
        out.line(format!("    {}", crate::escape::line(l)));
    }
    if conflicts > 0 {
        out.line(format!("  rebase conflicts met and resolved by the worker's agent: {conflicts}"));
    }
    if args.keep {
        out.line(format!("  logs of every agent: {}", logs.display()));
    } else {
        out.line("  (git swarm demo --keep keeps the folder: the repositories and every agent's log)");
    }
    out.line("  next: read the README's quick start to point a swarm at your own repository and agents");
    out.doc(&serde_json::json!({
        "secs": started.elapsed().as_secs_f64(), "done": n(Status::Done), "failed": n(Status::Failed),
        "work_done": work_done, "landed": landed, "pushes": state_pushes, "lost_races": end.lost_races,
    }));
    Ok(())
}

/// `'…'` for sh.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
