//! `git swarm up`: a local fleet — workers, planners and a judge, each its own `git swarm run …` process with its
//! own work tree — and a live board on stderr. Ctrl-C stops them all; each releases its claims.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::Swarm;
use crate::model::Status;
use crate::time::Timestamp;

use super::frame::MemberLine;
use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Worker agents, hosted by --worker-processes processes (`run worker --agents`).
    #[arg(long, default_value_t = 4, value_name = "N")]
    workers: u32,
    /// How many processes host the worker agents (each runs `run worker --agents <its share>`).
    #[arg(long, default_value_t = 1, value_name = "P", value_parser = clap::value_parser!(u32).range(1..))]
    worker_processes: u32,
    /// Planner processes.
    #[arg(long, default_value_t = 1, value_name = "N")]
    planners: u32,
    /// Also run a judge (then the fleet runs until the judge says stop).
    #[arg(long)]
    judge: bool,
    /// The goal: the first planner files it as the root plan when the swarm has none.
    #[arg(long, value_name = "TEXT", conflicts_with = "goal_file")]
    goal: Option<String>,
    /// Read the goal from a file.
    #[arg(long, value_name = "PATH")]
    goal_file: Option<PathBuf>,
    /// The agent command for every role [default: the roles in swarm.toml].
    #[arg(long, value_name = "CMD", value_parser = super::parse_command)]
    exec: Option<String>,
    /// The check command of the workers [default: [run] check in swarm.toml].
    #[arg(long, value_name = "CMD")]
    check: Option<String>,
}

/// What a fleet is made of.
pub(super) struct Fleet {
    /// `-C` for the members.
    pub dir: PathBuf,
    pub remote: Option<String>,
    pub swarm: String,
    /// Agent ids are `<base>-w1`, `<base>-p1`, `<base>-judge`.
    pub base: String,
    pub workers: u32,
    /// Processes that host the workers (at most one per worker).
    pub worker_processes: u32,
    pub planners: u32,
    pub judge: bool,
    pub goal: Option<String>,
    pub exec: Option<String>,
    pub check: Option<String>,
    /// Extra environment for every member.
    pub env: Vec<(String, String)>,
    pub logs: PathBuf,
}

/// How a fleet ended.
pub(super) struct FleetEnd {
    pub failed: Vec<String>,
    pub pushes: u64,
    pub lost_races: u64,
    pub elapsed: Duration,
    pub interrupted: bool,
    /// What the members warned of (a landing on a red suite, work held in the clone…), from their logs.
    pub warnings: Vec<String>,
}

struct Member {
    agent: String,
    child: Child,
    out: PathBuf,
    /// Its stderr: the runner's events, warnings among them.
    err: PathBuf,
    exit: Option<i32>,
}

pub(super) fn run(ctx: &mut Ctx, args: UpArgs) -> CliResult<()> {
    let goal = match (args.goal.clone(), &args.goal_file) {
        (Some(g), _) => Some(g),
        (None, Some(p)) => Some(super::read_text_arg(p, "--goal-file")?),
        (None, None) => None,
    };
    if args.workers == 0 && args.planners == 0 && !args.judge {
        return Err(CliError::usage("up: nothing to run (--workers 0 --planners 0 and no --judge)"));
    }
    if args.workers == 0 {
        // A planner waits for its tasks to be done, which no worker does: it ran for its whole time limit.
        return Err(CliError::usage("up: a fleet with no worker lands nothing (--workers 0)").hint(
            "to plan only: `git swarm run planner --once --goal <text>`; to judge only: `git swarm run judge --once`",
        ));
    }
    let remote = ctx.remote_cli();
    let dir = ctx.dir().to_path_buf();
    let local = ctx.git_config()?;
    let swarm = ctx.swarm()?;
    // The swarm must exist before the members start, or every one of them fails the same way.
    let snap = swarm.read(false)?;
    // A fleet of this clone with the same ids runs already: its members would refuse ours one by one (and our logs
    // would write over its own).
    let places = crate::runner::Places::of(swarm.local.repo.common_dir(), &ctx.env);
    let base = ctx.agent().to_string();
    let ids = [format!("{base}-p1"), format!("{base}-w1"), format!("{base}-w1-1"), format!("{base}-judge")];
    if let Some((id, pid)) = ids.iter().find_map(|id| crate::runner::live_runner(&places, id).map(|p| (id, p))) {
        return Err(CliError::io(format!(
            "a fleet of this clone runs already: its member {id} (pid {pid}) has the ids this one would take"
        ))
        .hint("stop it first (Ctrl-C where it runs, or `kill <pid>`), or start this one under another id: `git swarm --agent <name> up`"));
    }
    // So must every role's agent: one that cannot start here is said once, before anything is filed or started.
    preflight(&snap.board.config, &local, &swarm, &args, &ctx.env)?;
    // Nothing to do: no goal and no task that is not finished. Said after the set-up's mistakes, which the next
    // run would meet too.
    let unfinished = swarm
        .read(true)
        .map(|s| s.board.tasks.values().any(|t| matches!(t.task.status, Status::Open | Status::Claimed)))
        .unwrap_or(true);
    if goal.is_none() && !unfinished {
        ctx.out.note("nothing to do: the board has no open task and no goal was given");
        ctx.out
            .note("hint: give the fleet a goal (`git swarm up --goal <text>`) or add tasks (`git swarm add <title>`)");
        ctx.out.doc(&serde_json::json!({"done": 0, "failed": 0, "nothing_to_do": true}));
        return Ok(());
    }
    // The goal is filed before anyone starts: an `--until-idle` worker that came first would find an empty board.
    if let Some(g) = &goal {
        let agent = ctx.agent().to_string();
        let who = Ctx::identity(&swarm, &agent);
        let clock = ctx.clock();
        let filer =
            crate::runner::goal::Filer { swarm: &swarm, retry: &ctx.retry, who: &who, clock: &clock, agent: &agent };
        filer.first(g).map_err(|e| match e {
            crate::runner::RunError::Txn(t) => CliError::from(t),
            other => CliError::usage(other.to_string())
                .hint("`git swarm status` shows the goal; `git swarm goal <text>` sets a new one"),
        })?;
    }
    let fleet = Fleet {
        dir,
        remote,
        swarm: swarm.name.clone(),
        base: ctx.agent().to_string(),
        workers: args.workers,
        worker_processes: args.worker_processes,
        planners: args.planners,
        judge: args.judge,
        goal,
        exec: args.exec,
        check: args.check,
        env: vec![],
        logs: swarm.local.repo.common_dir().join("swarm").join("logs"),
    };
    let before = failed_ids(&swarm);
    let since = ctx.now();
    let end = run_fleet(&fleet, &swarm, &ctx.env)?;
    let failed_now = report_end(ctx, &swarm, &end, &before, since);
    if !end.failed.is_empty() {
        return Err(CliError::io(format!(
            "{} member(s) of the fleet failed: {}",
            end.failed.len(),
            end.failed.join(", ")
        ))
        .hint(format!("their logs are in {}", fleet.logs.display()))
        .documented());
    }
    // A fleet whose tasks failed did not do its work: a script must see it.
    if !failed_now.is_empty() && !end.interrupted {
        return Err(CliError::io(format!(
            "{} task(s) failed while the fleet ran: {}",
            failed_now.len(),
            failed_now.join(", ")
        ))
        .hint("`git swarm show <id>` says why; `git swarm retry <id>` gives one another go")
        .documented());
    }
    Ok(())
}

/// The tasks that are `failed` now (finished ones included).
fn failed_ids(swarm: &Swarm) -> std::collections::BTreeSet<String> {
    match swarm.read(true) {
        Ok(s) => {
            s.board.tasks.values().filter(|t| t.task.status == Status::Failed).map(|t| t.task.id.clone()).collect()
        }
        Err(_) => Default::default(),
    }
}

/// Can each role the fleet runs start its agent here ([`crate::agent::prepare`])?
fn preflight(
    config: &crate::model::Config,
    local: &crate::config::Local,
    swarm: &Swarm,
    args: &UpArgs,
    env: &crate::environment::Environment,
) -> CliResult<()> {
    use crate::runner::Role;
    // The members would stop one by one on settings this clone does not trust: say it once, before any starts.
    if args.exec.is_none() {
        let doc = super::trust::document(swarm)?;
        let digests = crate::trust::trusted_digests(&crate::trust::clone_digests(&swarm.local.repo), env);
        if !crate::trust::is_trusted(&doc, &digests) {
            return Err(CliError::io(format!(
                "the swarm's shared settings are not trusted in this clone (digest {})",
                doc.short()
            ))
            .hint("`git swarm trust` shows what the members would run; `git swarm trust --yes` trusts it")
            .hint("or give the members an agent of this clone's: --exec"));
        }
    }
    let config = local.apply(config);
    let probes = crate::agent::Probes::default();
    let run_dir = crate::runner::Places::of(swarm.local.repo.common_dir(), env).run_dir("up");
    let roles = [(Role::Worker, args.workers > 0), (Role::Planner, args.planners > 0), (Role::Judge, args.judge)];
    for (role, _) in roles.into_iter().filter(|(_, runs)| *runs) {
        let backend = match &args.exec {
            Some(exec) => crate::agent::Backend::Command { exec: exec.clone() },
            None => match crate::config::backend_for(&config, role) {
                Ok(Some(b)) => b,
                // No agent or broken settings: each member says so with its own error and hint.
                _ => continue,
            },
        };
        if let Err(e) = crate::agent::prepare(&backend, &run_dir, &probes, env) {
            let hint = e.hint.clone();
            return Err(CliError::io(format!("{role}: {e}")).hint(hint));
        }
    }
    Ok(())
}

/// The fleet's closing lines: counts, why tasks failed, the judge's verdict when it gave one while the fleet ran
/// (`since`). Returns the tasks that failed while it ran (not in `before`).
pub(super) fn report_end(
    ctx: &Ctx,
    swarm: &Swarm,
    end: &FleetEnd,
    before: &std::collections::BTreeSet<String>,
    since: Timestamp,
) -> Vec<String> {
    let (done, failed, reasons, failed_now, verdict, done_now) = match swarm.read(true) {
        Ok(s) => {
            let c = crate::runner::counts(&s.board);
            let failed: Vec<&crate::model::Task> =
                s.board.tasks.values().map(|t| &t.task).filter(|t| t.status == Status::Failed).collect();
            // Why tasks failed, so that a fleet that could not start its agents says so at once.
            let reasons: Vec<String> = failed
                .iter()
                .filter_map(|t| t.failures.last().map(|f| format!("{}: {}", t.id, f.reason)))
                .take(5)
                .collect();
            let failed_now: Vec<String> =
                failed.iter().filter(|t| !before.contains(&t.id)).map(|t| t.id.clone()).collect();
            let done_now = s
                .board
                .tasks
                .values()
                .filter(|t| {
                    t.task.status == Status::Done
                        && t.task.result.as_ref().and_then(|r| r.at).is_some_and(|at| at >= since)
                })
                .count();
            let verdict = crate::runner::last_cycle(swarm.store(), s.commit).filter(|c| c.at >= since);
            (count(&c, Status::Done), count(&c, Status::Failed), reasons, failed_now, verdict, done_now)
        }
        Err(_) => (0, 0, vec![], vec![], None, 0),
    };
    // What this fleet did, then the board as a whole (a board of earlier runs holds more).
    ctx.out.line(format!(
        "fleet {}: {done_now} task(s) done and {} failed while it ran, in {:.1}s; {} push(es) ({} lost race(s)); the \
         board: {done} done, {failed} failed",
        if end.interrupted { "stopped" } else { "finished" },
        failed_now.len(),
        end.elapsed.as_secs_f64(),
        end.pushes,
        end.lost_races
    ));
    for r in &reasons {
        ctx.out.line(format!("  failed {}", crate::escape::line(r)));
    }
    if !end.warnings.is_empty() {
        ctx.out.line(format!("warnings of the members ({}):", end.warnings.len()));
        for w in end.warnings.iter().take(10) {
            ctx.out.line(format!("  {w}"));
        }
    }
    if let Some(c) = &verdict {
        ctx.out.line(format!(
            "cycle {}: {} — {} (by {})",
            c.cycle,
            c.verdict,
            crate::escape::line(&c.reasons),
            crate::escape::line(&c.by)
        ));
    }
    let verdict_doc = verdict.as_ref().map(|c| {
        serde_json::json!({"cycle": c.cycle, "verdict": c.verdict.to_string(), "reasons": c.reasons, "by": c.by,
            "at": c.at.to_string()})
    });
    ctx.out.doc(&serde_json::json!({
        "done": done, "failed": failed, "secs": end.elapsed.as_secs_f64(), "pushes": end.pushes,
        "lost_races": end.lost_races, "interrupted": end.interrupted, "members_failed": end.failed,
        "failed_during": failed_now, "done_during": done_now, "warnings": end.warnings, "verdict": verdict_doc,
    }));
    failed_now
}

fn count(c: &[(Status, usize)], st: Status) -> usize {
    c.iter().find(|(s, _)| *s == st).map(|(_, n)| *n).unwrap_or(0)
}

/// Start the members, show the board until they have all exited (or Ctrl-C), and collect their figures. `env`: this
/// process's, which the members inherit (the clock offset of the board shown, where the clone's runners are).
pub(super) fn run_fleet(f: &Fleet, swarm: &Swarm, env: &crate::environment::Environment) -> CliResult<FleetEnd> {
    let stop = super::run::stop_flag();
    std::fs::create_dir_all(&f.logs).map_err(|e| CliError::io(format!("cannot create {}: {e}", f.logs.display())))?;
    let exe = std::env::current_exe().map_err(|e| CliError::io(format!("cannot find the git-swarm binary: {e}")))?;
    let started = Instant::now();
    let mut members = spawn_members(f, &exe)?;
    let tty = std::io::stderr().is_terminal();
    let mut last_line = String::new();
    let mut last_frame = String::new();
    if tty {
        let _ = write!(std::io::stderr(), "\x1b[H\x1b[2J");
    }
    let mut stopping_since: Option<Instant> = None;
    let mut warned = Warnings::default();
    loop {
        for m in members.iter_mut().filter(|m| m.exit.is_none()) {
            if let Ok(Some(st)) = m.child.try_wait() {
                m.exit = Some(st.code().unwrap_or(-1));
            }
        }
        if members.iter().all(|m| m.exit.is_some()) {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            match stopping_since {
                None => {
                    let _ = writeln!(std::io::stderr(), "stopping the fleet: each member releases its claims…");
                    for m in members.iter().filter(|m| m.exit.is_none()) {
                        signal(&m.child, nix::sys::signal::Signal::SIGTERM);
                    }
                    stopping_since = Some(Instant::now());
                }
                Some(t) if t.elapsed() > Duration::from_secs(60) => {
                    for m in members.iter().filter(|m| m.exit.is_none()) {
                        signal(&m.child, nix::sys::signal::Signal::SIGKILL);
                    }
                }
                Some(_) => {}
            }
        }
        warned.poll(&members);
        let board = render_board(swarm, &members, started, &warned.lines, env);
        if tty {
            // Redrawn in place, and only when it changed: no clear of the whole screen a second (it flickered).
            if board != last_frame {
                let _ = write!(std::io::stderr(), "\x1b[H{}\x1b[J", board.replace('\n', "\x1b[K\n"));
                last_frame = board;
            }
        } else {
            // Without a terminal, a line when the counts change.
            let counts = board.lines().nth(1).unwrap_or_default().to_string();
            let key = counts.split(" — ").next().unwrap_or_default().to_string();
            if key != last_line {
                let _ = writeln!(std::io::stderr(), "{counts}");
                last_line = key;
            }
        }
        std::thread::sleep(Duration::from_millis(if tty { 1000 } else { 500 }));
    }
    let mut end = FleetEnd {
        failed: vec![],
        pushes: 0,
        lost_races: 0,
        elapsed: started.elapsed(),
        interrupted: stop.load(Ordering::Relaxed),
        warnings: vec![],
    };
    warned.poll(&members);
    end.warnings = warned.lines;
    for m in &members {
        if let Ok(text) = std::fs::read_to_string(&m.out)
            && let Ok(doc) = serde_json::from_str::<serde_json::Value>(text.trim())
        {
            end.pushes += doc["pushes"].as_u64().unwrap_or(0);
            end.lost_races += doc["lost_races"].as_u64().unwrap_or(0);
        }
        if m.exit != Some(0) && !end.interrupted {
            end.failed.push(format!("{} (exit {})", m.agent, m.exit.unwrap_or(-1)));
        }
    }
    if tty {
        let _ =
            write!(std::io::stderr(), "\x1b[H\x1b[2J{}", render_board(swarm, &members, started, &end.warnings, env));
    }
    Ok(end)
}

/// Start every member of the fleet `f`, each a `git-swarm run <role>` of `exe` through the trampoline, with its
/// own log files.
fn spawn_members(f: &Fleet, exe: &Path) -> CliResult<Vec<Member>> {
    let forever = f.judge;
    let mut members = Vec::new();
    let mut spawn = |agent: String, role: &str, extra: Vec<String>| -> CliResult<()> {
        let out = f.logs.join(format!("{agent}.out"));
        let err = f.logs.join(format!("{agent}.runner.log"));
        let file = |p: &Path| {
            crate::secrets::private_file(p, false)
                .map_err(|e| CliError::io(format!("cannot create {}: {e}", p.display())))
        };
        // Through the trampoline (`agent::enter`): a member gets SIGTERM when `up` ends, however it ends (killed, its
        // terminal closed), gives its claims back and exits — never an orphan that goes on claiming and landing.
        let mut cmd = Command::new(exe);
        cmd.args(
            crate::agent::enter::Enter {
                term_with_parent: true,
                argv: vec![exe.to_path_buf().into()],
                ..Default::default()
            }
            .args(),
        );
        cmd.arg("-C").arg(&f.dir).args(["--swarm", &f.swarm, "--agent", &agent, "--json"]);
        // Through the environment, not the command line: a URL may carry credentials, and `ps` shows arguments.
        if let Some(r) = &f.remote {
            cmd.env("GIT_SWARM_REMOTE", r);
        }
        cmd.args(["run", role]);
        if !forever {
            cmd.arg("--until-idle");
        }
        if let Some(e) = &f.exec {
            cmd.arg("--exec").arg(e);
        }
        cmd.args(extra);
        cmd.envs(f.env.iter().map(|(k, v)| (k, v)))
            .env_remove("GIT_SWARM_AGENT")
            .stdin(Stdio::null())
            .stdout(file(&out)?)
            .stderr(file(&err)?);
        // A group of its own: the terminal's Ctrl-C reaches only us, and we stop the members in order.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().map_err(|e| CliError::io(format!("cannot start {}: {e}", exe.display())))?;
        members.push(Member { agent, child, out, err, exit: None });
        Ok(())
    };
    for i in 1..=f.planners {
        let mut extra = vec![];
        if i == 1
            && let Some(g) = &f.goal
        {
            extra = vec!["--goal".into(), g.clone()];
        }
        spawn(format!("{}-p{i}", f.base), "planner", extra)?;
    }
    // The workers, spread over their processes: process i hosts agents `<base>-w<i>-1…` (one agent: `<base>-w<i>`).
    let procs = f.worker_processes.clamp(1, f.workers.max(1));
    for i in 1..=procs.min(f.workers) {
        let agents = f.workers / procs + u32::from(i <= f.workers % procs);
        let mut extra: Vec<String> = f.check.iter().flat_map(|c| ["--check".to_string(), c.clone()]).collect();
        if agents > 1 {
            extra.extend(["--agents".to_string(), agents.to_string()]);
        }
        spawn(format!("{}-w{i}", f.base), "worker", extra)?;
    }
    if f.judge {
        spawn(format!("{}-judge", f.base), "judge", vec![])?;
    }
    Ok(members)
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
    }
}

/// The live board: counts, who holds what (per member of the fleet), the latest ops — the frame of `git swarm
/// watch` with the fleet's members.
fn render_board(
    swarm: &Swarm,
    members: &[Member],
    started: Instant,
    warnings: &[String],
    env: &crate::environment::Environment,
) -> String {
    let el = started.elapsed().as_secs();
    let head = format!(
        "git swarm up — swarm {} on {} — {:02}:{:02} — Ctrl-C stops the fleet",
        crate::escape::line(&swarm.name),
        crate::escape::line(&swarm.remote_label),
        el / 60,
        el % 60
    );
    // Live tasks only: this runs every second while the fleet works, and finished tasks do not move.
    // The whole board: its failed attempts are those of finished tasks too (as the page counts them); a read after
    // the first patches the one before (cheap).
    let loaded = match crate::board::Loaded::read(swarm, true, 1_000) {
        Ok(l) => l,
        Err(e) => {
            return format!("{head}\ncannot read the board: {}\n", crate::escape::line(&e.to_string()));
        }
    };
    // The clock the members use: they inherit `GIT_SWARM_CLOCK_OFFSET`.
    let offset = env.clock_offset();
    let local = super::board::local_runs(swarm, env);
    let view = loaded.view(swarm, Timestamp::now_with_offset(offset), &crate::board::Options::default(), &local);
    let lines: Vec<MemberLine<'_>> = members.iter().map(|m| MemberLine { agent: &m.agent, exit: m.exit }).collect();
    let mut frame = super::frame::render(&view, &head, Some(&lines));
    // What the members warned of (a landing on a red suite, work held in the clone…), on the screen as it happens.
    if !warnings.is_empty() {
        frame.push_str(&format!("\nwarnings of the members ({}, the newest last):\n", warnings.len()));
        for w in warnings.iter().rev().take(3).rev() {
            frame.push_str(&format!("  {}\n", super::frame::clip(w, super::frame::WIDTH)));
        }
    }
    frame
}

/// The `warning:` lines of the members' stderr, each once, in the order they came: read as the files grow (a
/// member's log is read from where the last look ended, whole lines only).
#[derive(Default)]
struct Warnings {
    read: std::collections::HashMap<PathBuf, u64>,
    lines: Vec<String>,
}

impl Warnings {
    /// At most this much of a member's log at a look.
    const LOOK: u64 = 1 << 20;

    fn poll(&mut self, members: &[Member]) {
        use std::io::{Read, Seek, SeekFrom};
        for m in members {
            let at = self.read.get(&m.err).copied().unwrap_or(0);
            let Ok(mut f) = std::fs::File::open(&m.err) else { continue };
            if f.seek(SeekFrom::Start(at)).is_err() {
                continue;
            }
            let mut bytes = Vec::new();
            if f.take(Self::LOOK).read_to_end(&mut bytes).is_err() {
                continue;
            }
            // Whole lines only; a line longer than a look is taken as it is.
            let end = match bytes.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None if bytes.len() as u64 == Self::LOOK => bytes.len(),
                None => 0,
            };
            self.read.insert(m.err.clone(), at + end as u64);
            for l in String::from_utf8_lossy(&bytes[..end]).lines().filter(|l| l.contains("warning:")) {
                let l = crate::escape::line(l.trim());
                if !self.lines.contains(&l) {
                    self.lines.push(l);
                }
            }
        }
    }
}
