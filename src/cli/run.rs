//! `git swarm run worker|planner|judge`: one long-running agent loop of one role.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::runner::judge::JudgeOptions;
use crate::runner::planner::PlannerOptions;
use crate::runner::worker::WorkerOptions;
use crate::runner::{Event, Mode, RunEnd, RunError, Runner};
use serde_json::json;

use super::error::Exit;
use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(subcommand)]
    role: RoleCmd,
}

#[derive(Debug, clap::Subcommand)]
enum RoleCmd {
    /// Claim work tasks, run the agent in a fresh work tree, land its code and mark the task done in one push.
    Worker(WorkerArgs),
    /// Claim plan tasks, run the agent to break them into tasks, and plan again when they are finished.
    Planner(PlannerArgs),
    /// At the end of each cycle, run the agent for a verdict: continue (plan again) or stop (every runner exits).
    Judge(JudgeArgs),
}

#[derive(Debug, clap::Args)]
struct LoopArgs {
    /// The agent command, run through `sh -c` with the prompt on stdin [default: the role in swarm.toml].
    #[arg(long, value_name = "CMD", value_parser = super::parse_command)]
    exec: Option<String>,
    /// One task (or one plan, one verdict), then exit; exit 3 when there is none.
    #[arg(long, conflicts_with = "until_idle")]
    once: bool,
    /// Exit when no task is ready and no claim is live.
    #[arg(long)]
    until_idle: bool,
}

impl LoopArgs {
    fn mode(&self) -> Mode {
        if self.once {
            Mode::Once
        } else if self.until_idle {
            Mode::UntilIdle
        } else {
            Mode::Forever
        }
    }
}

#[derive(Debug, clap::Args)]
pub(super) struct WorkerArgs {
    #[command(flatten)]
    lp: LoopArgs,
    /// Run this in the work tree after the rebase; a failure fails the task [default: [run] check in swarm.toml].
    #[arg(long, value_name = "CMD")]
    check: Option<String>,
    /// Stop after this many tasks (each agent, with --agents).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_tasks: Option<u64>,
    /// Run this many agents in this process, `<agent>-1` to `<agent>-<n>`, each with its own work tree and claim:
    /// their landings and claims are published together, in batches (docs/scale.md).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=512))]
    agents: u32,
}

#[derive(Debug, clap::Args)]
pub(super) struct PlannerArgs {
    #[command(flatten)]
    lp: LoopArgs,
    /// The goal of the swarm: creates the root plan task when the swarm has none.
    #[arg(long, value_name = "TEXT", conflicts_with = "goal_file")]
    goal: Option<String>,
    /// Read the goal from a file (`-` for stdin).
    #[arg(long, value_name = "PATH")]
    goal_file: Option<PathBuf>,
    /// With --goal: when the swarm has another goal, or the judge stopped it, make this the goal and start the
    /// next cycle (as `git swarm goal` does) instead of refusing. The same goal on a running swarm changes nothing.
    #[arg(long)]
    replace_goal: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct JudgeArgs {
    #[command(flatten)]
    lp: LoopArgs,
}

/// Ctrl-C, SIGTERM and SIGHUP (the terminal closed) set the flag; a second one ends the process at once (exit 130)
/// — but not one that comes within a second of the first: through `git swarm`, one Ctrl-C arrives twice, from the
/// terminal (git and git-swarm share its process group) and again from git, which passes on to its child what it
/// gets. Taking that echo for a second Ctrl-C left a fleet's members running as orphans (issue 35).
pub(super) fn stop_flag() -> Arc<AtomicBool> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let flag = Arc::new(AtomicBool::new(false));
    match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(mut signals) => {
            let f = Arc::clone(&flag);
            std::thread::spawn(move || {
                let mut first: Option<std::time::Instant> = None;
                for _ in signals.forever() {
                    match first {
                        None => {
                            first = Some(std::time::Instant::now());
                            f.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        Some(t) if t.elapsed() < std::time::Duration::from_secs(1) => {}
                        Some(_) => std::process::exit(130),
                    }
                }
            });
        }
        Err(_) => {
            for sig in [SIGINT, SIGTERM, SIGHUP] {
                let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
            }
        }
    }
    // A push or fetch in flight ends with the stop too (a remote hook that hangs must not hold the runner).
    crate::set_stop_flag(Arc::clone(&flag));
    flag
}

pub(super) fn run(ctx: &mut Ctx, args: RunArgs) -> CliResult<()> {
    if let RoleCmd::Worker(w) = &args.role
        && w.agents > 1
    {
        return run_agents(ctx, w);
    }
    let stop = stop_flag();
    let agent = ctx.runner_agent();
    let remote_env = ctx.remote_arg();
    let swarm = ctx.swarm()?;
    let clock = ctx.clock();
    let mut events = printer(agent.clone());
    let (exec, check) = match &args.role {
        RoleCmd::Worker(w) => (w.lp.exec.clone(), w.check.clone()),
        RoleCmd::Planner(p) => (p.lp.exec.clone(), None),
        RoleCmd::Judge(j) => (j.lp.exec.clone(), None),
    };
    let start = crate::runner::Start {
        swarm: &swarm,
        agent: agent.clone(),
        who: Ctx::identity(&swarm, &agent),
        clock: &clock,
        retry: ctx.retry.clone(),
        stop,
        remote_env,
        exec,
        check,
        git_config: ctx.git_config()?,
        desk: None,
        env: Arc::clone(&ctx.env),
    };
    let mut r = Runner::new(start, &mut events);
    // `run worker --once`: did its one task land? (A failed or lost task is a failed run for a script.)
    let mut not_landed: Option<String> = None;
    let once = match &args.role {
        RoleCmd::Worker(w) => w.lp.once,
        RoleCmd::Planner(p) => p.lp.once,
        RoleCmd::Judge(j) => j.lp.once,
    };
    let (role, end, doc) = match args.role {
        RoleCmd::Worker(w) => {
            let opts = WorkerOptions { mode: w.lp.mode(), max_tasks: w.max_tasks };
            let (end, s) = crate::runner::worker::run(&mut r, &opts).map_err(run_error)?;
            if opts.mode == Mode::Once && end == RunEnd::Done && s.landed == 0 {
                not_landed = Some(if s.failed > 0 { "it failed".into() } else { "its claim was lost".into() });
            }
            let check_runs = r.check_runs.load(std::sync::atomic::Ordering::Relaxed);
            ("worker", end, json!({"landed": s.landed, "failed": s.failed, "lost": s.lost, "check_runs": check_runs}))
        }
        RoleCmd::Planner(p) => {
            let goal = match (p.goal, p.goal_file) {
                (Some(g), _) => Some(g),
                (None, Some(path)) => Some(super::read_text_arg(&path, "--goal-file")?),
                (None, None) => None,
            };
            let opts = PlannerOptions { goal, replace_goal: p.replace_goal, mode: p.lp.mode() };
            let (end, s) = crate::runner::planner::run(&mut r, &opts).map_err(run_error)?;
            ("planner", end, json!({"rounds": s.rounds, "proposed": s.proposed, "plans_done": s.plans_done}))
        }
        RoleCmd::Judge(j) => {
            let opts = JudgeOptions { mode: j.lp.mode() };
            let (end, n) = crate::runner::judge::run(&mut r, &opts).map_err(run_error)?;
            ("judge", end, json!({"verdicts": n}))
        }
    };
    let publishes = swarm.publishes.load(std::sync::atomic::Ordering::Relaxed);
    let lost = swarm.lost.load(std::sync::atomic::Ordering::Relaxed);
    let why = end_why(&end);
    ctx.out.note(format!("{agent}: {role} exits: {why}; {publishes} push(es), {lost} lost race(s)"));
    if let Some(h) = end_hint(&end) {
        ctx.out.note(format!("hint: {h}"));
    }
    let mut doc = doc;
    if let Some(o) = doc.as_object_mut() {
        o.insert("role".into(), json!(role));
        o.insert("agent".into(), json!(agent));
        o.insert("end".into(), json!(end_name(&end)));
        o.insert("pushes".into(), json!(publishes));
        o.insert("lost_races".into(), json!(lost));
    }
    ctx.out.doc(&doc);
    exit_of(role, &end, &doc, not_landed, once)
}

/// The exit a script sees of one runner: a task of `--once` that did not land is a failed run; nothing to claim
/// exits 3, and so does `--once` on a swarm the judge stopped when it did nothing (a judge that gave the stop did
/// something).
fn exit_of(role: &str, end: &RunEnd, doc: &serde_json::Value, not_landed: Option<String>, once: bool) -> CliResult<()> {
    if let Some(why) = not_landed {
        return Err(CliError::io(format!("the task did not land: {why}"))
            .hint("see why with `git swarm show <id>` and the agent's log under .git/swarm/logs/")
            .documented());
    }
    if *end == RunEnd::NothingReady {
        return Err(CliError::new(
            Exit::NothingReady,
            format!("no ready {} task", if role == "planner" { "plan" } else { "work" }),
        )
        .hint("see the board with `git swarm list`")
        .documented());
    }
    // `--once` on a stopped swarm that did nothing (a judge that gave the stop did something) found nothing to do:
    // exit 3, as the contract says.
    let did_nothing =
        ["landed", "failed", "lost", "rounds", "verdicts"].iter().all(|k| doc[*k].as_u64().unwrap_or(0) == 0);
    if let (true, true, RunEnd::SwarmStopped { cycle }) = (once, did_nothing, end) {
        return Err(stopped_once(*cycle));
    }
    Ok(())
}

/// `--once` on a swarm the judge stopped: nothing to claim (exit 3), and how to go on.
fn stopped_once(cycle: u64) -> CliError {
    CliError::new(Exit::NothingReady, format!("nothing to claim: the judge stopped the swarm after cycle {cycle}"))
        .hint("`git swarm goal \"<next goal>\"` starts the next cycle; `git swarm status` shows the judge's reasons")
        .documented()
}

/// How a runner's end is said in its last line.
fn end_why(end: &RunEnd) -> String {
    match end {
        RunEnd::NothingReady => "nothing to do".to_string(),
        RunEnd::Done => "done".to_string(),
        RunEnd::Idle => "idle: no task ready and no claim live".to_string(),
        RunEnd::SwarmStopped { cycle } => format!("the judge stopped the swarm after cycle {cycle}"),
        RunEnd::Interrupted => "interrupted; claims released".to_string(),
        RunEnd::BudgetSpent { why } => format!("no more claims: {why}"),
    }
}

/// How to go on after an end that a person must act on.
fn end_hint(end: &RunEnd) -> Option<&'static str> {
    match end {
        RunEnd::SwarmStopped { .. } => Some(
            "`git swarm goal \"<next goal>\"` starts the next cycle (then start the runners again); `git swarm status` \
             shows the judge's reasons",
        ),
        RunEnd::BudgetSpent { .. } => Some(
            "the next cycle starts with its budget whole (`git swarm goal`, or the judge's `continue`); `git swarm \
             config set run.budget.cycle_usd <n>` raises it",
        ),
        _ => None,
    }
}

/// `run worker --agents <n>`: n agents in one process, one thread each (a `Swarm` each: reads and the agent's own
/// git work stay its own), sharing a landing desk that publishes their landings and claims in batches.
fn run_agents(ctx: &mut Ctx, w: &WorkerArgs) -> CliResult<()> {
    let stop = stop_flag();
    let base = ctx.runner_agent();
    let ids: Vec<String> = (1..=w.agents).map(|i| format!("{base}-{i}")).collect();
    for id in &ids {
        crate::model::validate_agent(id)
            .map_err(|e| CliError::usage(format!("--agents: the agent id {id}: {e}")).hint("pass a shorter --agent"))?;
    }
    let remote_env = ctx.remote_arg();
    let git_config = ctx.git_config()?;
    let opener = ctx.opener();
    let desk = Arc::new(crate::runner::desk::Desk::default());
    // One share of a push budget for the process: its leaders publish for every agent of it.
    let pacer = Arc::new(crate::Pacer::hosting(ids.len()));
    // The end of one agent's run must not take its siblings' processes for its own orphans.
    crate::agent::contain::set_shared();
    let opts = WorkerOptions { mode: w.lp.mode(), max_tasks: w.max_tasks };
    let results: Vec<(String, CliResult<AgentEnd>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = ids
            .iter()
            .map(|id| {
                let (stop, desk, opener, git_config, pacer) =
                    (Arc::clone(&stop), Arc::clone(&desk), opener.clone(), git_config.clone(), Arc::clone(&pacer));
                let (retry, remote_env, clock, env) =
                    (ctx.retry.clone(), remote_env.clone(), ctx.clock(), Arc::clone(&ctx.env));
                let (exec, check, opts, writer) = (w.lp.exec.clone(), w.check.clone(), opts.clone(), base.clone());
                let handle = std::thread::Builder::new().name(id.clone()).spawn_scoped(scope, move || {
                    // One agent that cannot go on (an error, a panic) stops the others, as a signal would: each
                    // releases its claim and the process exits naming it.
                    let _stop_all = StopOnFailure(Arc::clone(&stop));
                    let res = (|| {
                        let mut swarm = opener.open()?;
                        swarm.pacer = pacer;
                        swarm.writer = Some(writer);
                        let mut events = printer(id.clone());
                        let who = Ctx::identity(&swarm, id);
                        let start = crate::runner::Start {
                            swarm: &swarm,
                            agent: id.clone(),
                            who,
                            clock: &clock,
                            retry,
                            stop,
                            remote_env,
                            exec,
                            check,
                            git_config,
                            desk: Some(desk),
                            env,
                        };
                        let mut r = Runner::new(start, &mut events);
                        let (end, stats) = crate::runner::worker::run(&mut r, &opts).map_err(run_error)?;
                        let pushes = swarm.publishes.load(std::sync::atomic::Ordering::Relaxed);
                        let lost = swarm.lost.load(std::sync::atomic::Ordering::Relaxed);
                        let check_runs = r.check_runs.load(std::sync::atomic::Ordering::Relaxed);
                        Ok(AgentEnd { end, stats, pushes, lost, check_runs })
                    })();
                    if res.is_ok() {
                        std::mem::forget(_stop_all);
                    }
                    res
                });
                (id.clone(), handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(id, h)| {
                let res = match h {
                    Ok(h) => h.join().unwrap_or_else(|_| Err(CliError::io("internal: the agent's thread panicked"))),
                    Err(e) => Err(CliError::io(format!("cannot start a thread for the agent: {e}"))),
                };
                (id, res)
            })
            .collect()
    });
    let figures = desk.figures.lock().map(|f| *f).unwrap_or_default();
    agents_end(ctx, w, &base, figures, results, &opts)
}

/// What the agents of `run worker --agents` came to: said once for all of them (why they ended, what they landed,
/// how many updates carried it), and the exit a script sees.
fn agents_end(
    ctx: &mut Ctx,
    w: &WorkerArgs,
    base: &str,
    figures: crate::runner::desk::Figures,
    results: Vec<(String, CliResult<AgentEnd>)>,
    opts: &WorkerOptions,
) -> CliResult<()> {
    let (mut landed, mut failed, mut lost_claims, mut pushes, mut lost_races, mut check_runs) = (0, 0, 0, 0, 0, 0);
    let mut agents = Vec::new();
    let mut ends = Vec::new();
    let mut first_error = None;
    for (id, res) in results {
        match res {
            Ok(a) => {
                ends.push(a.end.clone());
                landed += a.stats.landed;
                failed += a.stats.failed;
                lost_claims += a.stats.lost;
                pushes += a.pushes;
                lost_races += a.lost;
                check_runs += a.check_runs;
                agents.push(json!({"agent": id, "end": end_name(&a.end), "landed": a.stats.landed,
                    "failed": a.stats.failed, "lost": a.stats.lost}));
            }
            Err(e) => {
                agents.push(json!({"agent": id, "end": "error", "error": e.message}));
                first_error.get_or_insert((id, e));
            }
        }
    }
    // Why they ended: one reason when they share it (the judge's stop, a spent budget), else how many ended how.
    let mut whys: Vec<(String, usize)> = Vec::new();
    for e in &ends {
        let why = end_why(e);
        match whys.iter_mut().find(|(w, _)| *w == why) {
            Some((_, n)) => *n += 1,
            None => whys.push((why, 1)),
        }
    }
    let why = match whys.as_slice() {
        [(w, _)] => w.clone(),
        many => many.iter().map(|(w, n)| format!("{n} {w}")).collect::<Vec<_>>().join(", "),
    };
    let checks = match check_runs {
        0 => String::new(),
        n => format!(", {n} run(s) of the check"),
    };
    ctx.out.note(format!(
        "{base}: {} agents exit: {why}; {landed} landed, {failed} failed, {lost_claims} lost; {} update(s) of the \
         state ref for {} landing(s) and {} claim(s) (at most {} landings in one), {pushes} push(es), {lost_races} \
         lost race(s){checks}",
        w.agents, figures.batches, figures.landings, figures.claims, figures.widest
    ));
    let mut hints: Vec<&str> = ends.iter().filter_map(end_hint).collect();
    hints.dedup();
    for h in hints {
        ctx.out.note(format!("hint: {h}"));
    }
    ctx.out.doc(&json!({
        "role": "worker", "agent": base, "agents": agents, "landed": landed, "failed": failed, "lost": lost_claims,
        "pushes": pushes, "lost_races": lost_races, "check_runs": check_runs,
        "batches": figures.batches, "batched_landings": figures.landings, "batched_claims": figures.claims,
    }));
    if let Some((id, mut e)) = first_error {
        e.message = format!("{id}: {}", e.message);
        e.documented = true;
        return Err(e);
    }
    // `--once`, as for one agent: a task that did not land is a failed run for a script; none to claim, exit 3.
    if opts.mode == Mode::Once {
        if let Some(RunEnd::SwarmStopped { cycle }) = ends.first()
            && ends.iter().all(|e| matches!(e, RunEnd::SwarmStopped { .. }))
        {
            return Err(stopped_once(*cycle));
        }
        let names: Vec<&str> = agents.iter().filter_map(|a| a["end"].as_str()).collect();
        if names.iter().all(|e| *e == "nothing-ready" || *e == "stopped") {
            return Err(CliError::new(Exit::NothingReady, "no ready work task")
                .hint("see the board with `git swarm list`")
                .documented());
        }
        let short: Vec<&str> = agents
            .iter()
            .filter(|a| a["end"] == "done" && a["landed"] == 0)
            .filter_map(|a| a["agent"].as_str())
            .collect();
        if !short.is_empty() {
            return Err(CliError::io(format!("the task of {} did not land", short.join(", ")))
                .hint("see why with `git swarm show <id>` and the agents' logs under .git/swarm/logs/")
                .documented());
        }
    }
    Ok(())
}

/// Sets the stop flag when dropped: what an agent's thread holds until it ends well ([`std::mem::forget`] then).
struct StopOnFailure(Arc<AtomicBool>);

impl Drop for StopOnFailure {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How one agent of `run worker --agents` ended.
struct AgentEnd {
    end: RunEnd,
    stats: crate::runner::worker::WorkerStats,
    pushes: u64,
    /// Runs of the check the agent's runner made.
    check_runs: u64,
    lost: u64,
}

fn end_name(e: &RunEnd) -> &'static str {
    match e {
        RunEnd::NothingReady => "nothing-ready",
        RunEnd::Done => "done",
        RunEnd::Idle => "idle",
        RunEnd::SwarmStopped { .. } => "stopped",
        RunEnd::Interrupted => "interrupted",
        RunEnd::BudgetSpent { .. } => "budget",
    }
}

fn run_error(e: RunError) -> CliError {
    match e {
        RunError::Txn(t) => t.into(),
        RunError::NoAgent { .. } => CliError::usage(e.to_string())
            // A preset, not a command line: a preset knows what each CLI needs (as root, Claude Code refuses
            // `--dangerously-skip-permissions`).
            .hint("a preset knows what its CLI needs: `git swarm config set roles.default.preset claude` (or codex, gemini, opencode, aider)")
            .hint("or any command of this clone's: --exec '<command>' (docs/agents.md)"),
        RunError::CannotStart { ref error, .. } => {
            let hint = error.hint.clone();
            CliError::io(e.to_string()).hint(hint)
        }
        RunError::Usage(_) => CliError::usage(e.to_string())
            .hint("`git swarm status` shows the goal; `git swarm goal <text>` sets a new one"),
        RunError::Untrusted { .. } => CliError::io(e.to_string())
            .hint("`git swarm trust` shows what this clone's runners would run; `git swarm trust --yes` trusts it")
            .hint("or run your own agent and check here: --exec, --check, git config swarm.roles.<role>.*"),
        RunError::AlreadyRunning { .. } => CliError::io(e.to_string())
            .hint("each runner of a clone needs its own agent id: pass --agent <id> (or stop the other one)"),
        RunError::Settings(ref m) if m.starts_with("target") => {
            CliError::io(e.to_string()).hint("`git swarm config set target <branch>` names the branch tasks land on")
        }
        RunError::Settings(_) => {
            CliError::io(e.to_string()).hint("see docs/agents.md for the [run] and [roles] tables")
        }
        other => CliError::io(other.to_string()),
    }
}

/// What prints a runner's events as `tag`; a wait that repeats is said once.
fn printer(tag: String) -> impl FnMut(Event) {
    let mut last_wait = String::new();
    move |e: Event| {
        if let Event::Waiting { why } = &e {
            if *why == last_wait {
                return;
            }
            last_wait.clone_from(why);
        } else {
            last_wait.clear();
        }
        print_event(&tag, &e)
    }
}

/// One line on stderr per event: `<agent>: <what happened>` (task text escaped).
pub(super) fn print_event(agent: &str, e: &Event) {
    use crate::escape::line;
    use std::io::Write;
    let msg = match e {
        Event::Claimed { task, title, epoch, kind } => {
            format!("claimed {kind} task {task} (epoch {epoch}): {}", line(title))
        }
        Event::AgentStarted { task, what } => format!("agent started ({what}) on {task}"),
        Event::AgentExited { task, exit, secs } => format!("agent on {task} {exit} after {secs:.1}s"),
        Event::Renewed { task, until } => format!("renewed {task} until {until}"),
        Event::Landed { task, commit, lost_races, exit_to_landed, next } => format!(
            "landed {task} at {} ({lost_races} lost race(s), {:.2}s after the agent exited){}",
            &commit[..commit.len().min(12)],
            exit_to_landed.as_secs_f64(),
            next.as_ref().map(|n| format!("; claimed {n} in the same push")).unwrap_or_default()
        ),
        Event::Failed { task, reason, attempts_left } => format!(
            "failed {task}{}: {}",
            if *attempts_left { " (open again)" } else { " (no attempts left)" },
            line(reason)
        ),
        Event::Released { task } => format!("released {task}"),
        Event::LostClaim { task, why } => format!("lost the claim on {task}: {}", line(why)),
        Event::KeptAside { task, refname } => format!("kept the work of {task} at {refname}"),
        Event::Conflict { task, files, attempt } => {
            format!("rebase conflict on {task} in {} (agent run {attempt})", line(&files.join(", ")))
        }
        Event::Proposed { plan, count } => format!("plan {plan}: filed {count} task(s)"),
        Event::PlanDone { plan, rounds } => format!("plan {plan} done after {rounds} round(s)"),
        Event::Verdict { cycle, verdict, reasons } => format!("cycle {cycle}: {verdict} — {}", line(reasons)),
        Event::Waiting { why } => format!("waiting: {}", line(why)),
        Event::Warning(w) => format!("warning: {}", line(w)),
        Event::Forge(w) => format!("forge: {}", line(w)),
    };
    // What a runner says may quote an agent (a failure's last lines): scrubbed as its log is.
    let msg = crate::secrets::scrub(&msg);
    let _ = writeln!(std::io::stderr().lock(), "{agent}: {msg}");
}
