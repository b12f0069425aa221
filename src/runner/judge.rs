//! The judge: when a cycle ends (nothing open or claimed, or its budget of tasks or time is spent), run the agent
//! with the judge prompt and a summary, and record its verdict in `cycles/<n>.toml`. `continue` opens the next
//! cycle with a fresh root plan; `stop` makes every runner of the swarm exit at its next step.

use std::time::Duration;

use serde::Deserialize;

use super::{CycleRecord, Event, Mode, Role, RunEnd, RunError, Runner, Verdict, prompts};
use crate::Snapshot;
use crate::agent::Exit;
use crate::model::Status;
use crate::ops::{self, Board};
use crate::time::Timestamp;

#[derive(Debug, Clone, Default)]
pub(crate) struct JudgeOptions {
    pub mode: Mode,
}

/// Read a verdict from the agent's output: the last `verdict: continue|stop` line (with the `reasons:` text
/// before it), or a ```toml block with `verdict` and `reasons`.
pub(crate) fn parse_verdict(output: &str) -> Option<(Verdict, String)> {
    #[derive(Deserialize)]
    struct Block {
        verdict: Verdict,
        #[serde(default)]
        reasons: String,
    }
    let mut found = None;
    for block in super::planner::fenced_blocks(output, "toml") {
        if let Ok(b) = toml::from_str::<Block>(block) {
            found = Some((b.verdict, b.reasons));
        }
    }
    let lines: Vec<&str> = output.lines().collect();
    for (i, line) in lines.iter().enumerate().rev() {
        let l = line.trim().trim_matches('*').trim();
        let Some(v) = l.strip_prefix("verdict:").or_else(|| l.strip_prefix("Verdict:")) else { continue };
        let v = match v.trim().trim_matches(|c: char| !c.is_ascii_alphabetic()).to_ascii_lowercase().as_str() {
            "continue" => Verdict::Continue,
            "stop" => Verdict::Stop,
            _ => continue,
        };
        // The reasons: from a `reasons:` line above up to the verdict.
        let start = lines[..i].iter().rposition(|l| l.trim_start().to_ascii_lowercase().starts_with("reasons:"));
        let reasons = match start {
            Some(s) => {
                let text = lines[s..i].join("\n");
                text.trim_start().get("reasons:".len()..).unwrap_or_default().trim().to_string()
            }
            None => String::new(),
        };
        return Some((v, reasons));
    }
    found
}

/// Where the current cycle stands.
struct CycleView {
    n: u64,
    started: Timestamp,
    done: u64,
    failed: u64,
    live: usize,
}

/// The number of the cycle after `last` (a record's number comes from a file name anyone can write: no overflow).
fn next_cycle(last: Option<&CycleRecord>) -> u64 {
    last.map_or(1, |c| c.cycle.saturating_add(1))
}

fn cycle_view(r: &Runner<'_>, full: &Snapshot) -> CycleView {
    let last = super::last_cycle(r.swarm.store(), full.commit);
    let n = next_cycle(last.as_ref());
    let started = last.as_ref().map(|c| c.at).unwrap_or(Timestamp::from_secs(0));
    let finished_since = |st: Status| ops::cycle::finished_since(&full.board, st, started);
    // A task that waits on a failed one can never run: it does not keep the cycle open.
    let live = full
        .board
        .tasks
        .values()
        .filter(|s| {
            !s.task.status.is_final()
                && (s.task.status == Status::Claimed || ops::blocked_for_good(&full.board, &s.task).is_none())
        })
        .count();
    CycleView { n, started, done: finished_since(Status::Done), failed: finished_since(Status::Failed), live }
}

pub(crate) fn run(r: &mut Runner<'_>, opts: &JudgeOptions) -> Result<(RunEnd, u64), RunError> {
    r.setup()?;
    let res = run_loop(r, opts);
    r.teardown();
    res
}

fn run_loop(r: &mut Runner<'_>, opts: &JudgeOptions) -> Result<(RunEnd, u64), RunError> {
    let snap = r.read(false)?;
    r.check_trust(&snap, Role::Judge)?;
    let config = snap.board.config;
    r.ride_out(&config);
    r.settings(&config)?;
    r.backend(&config, Role::Judge)?;
    r.say_containment();
    let mut verdicts = 0u64;
    let mut backoff = super::MIN_POLL;
    let mut no_verdict = 0u32;
    // What the judge's runs for the coming verdict spent (runs that gave no verdict included).
    let mut spent: Option<crate::usage::Usage> = None;
    loop {
        r.say_ridden_out();
        if r.stopping() {
            return Ok((RunEnd::Interrupted, verdicts));
        }
        let full = r.read(true)?;
        if let Some(cycle) = r.stopped_at(&full) {
            return Ok((RunEnd::SwarmStopped { cycle }, verdicts));
        }
        r.check_trust(&full, Role::Judge)?;
        let settings = r.settings(&full.board.config)?;
        let view = cycle_view(r, &full);
        let now = (r.clock)();
        let any = view.done + view.failed > 0;
        let over_budget = super::cycle_budget_spent(&full.board, &settings.budget.cycle());
        let ended = (view.live == 0 && any)
            || settings.cycle.max_tasks.is_some_and(|m| view.done + view.failed >= m)
            || settings.cycle.max_time.is_some_and(|t| view.started.0 > 0 && now.0 >= view.started.plus(t).0)
            || over_budget.is_some();
        if !ended {
            if opts.mode == Mode::Once {
                return Ok((RunEnd::NothingReady, verdicts));
            }
            if opts.mode == Mode::UntilIdle && crate::ops::claim::idle(&full.board, now) && !any {
                return Ok((RunEnd::Idle, verdicts));
            }
            r.emit(Event::Waiting { why: format!("cycle {} is running ({} open or claimed)", view.n, view.live) });
            r.wait_for_change(full.commit, Duration::from_secs(30), &mut backoff)?;
            continue;
        }
        let (said, usage) = judge_once(r, &full, &view, &settings, over_budget.as_deref())?;
        spent = crate::usage::plus(spent, usage);
        let (verdict, reasons) = match said {
            Some(v) => v,
            None if r.stopping() => continue,
            None => {
                no_verdict += 1;
                if no_verdict < 3 {
                    r.emit(Event::Warning("the judge gave no verdict; asking again".into()));
                    continue;
                }
                (Verdict::Stop, "the judge agent gave no readable verdict three times; stopping to be safe".into())
            }
        };
        no_verdict = 0;
        let n = view.n;
        let said = ops::cycle::Said {
            cycle: n,
            verdict,
            reasons: &reasons,
            tasks_done: view.done,
            tasks_failed: view.failed,
            usage: spent.take(),
        };
        let res = r.transact(|snap, actor| {
            // What the op needs besides the board: the newest record and the goal, of the very state it runs on.
            let last = super::last_cycle(r.swarm.store(), snap.commit);
            let goal = super::goal(r.swarm.store(), snap.commit);
            ops::cycle::verdict(&snap.board, actor, &said, last.as_ref(), goal.as_deref(), &mut ops::mint_id)
        })?;
        if res.value {
            verdicts += 1;
            r.emit(Event::Verdict { cycle: n, verdict, reasons });
        }
        if !res.value {
            // Another judge's verdict stands; the loop reads it.
            continue;
        }
        if verdict == Verdict::Stop {
            // Where main is protected: the request is ready for review now.
            r.propose_ready();
            return Ok((RunEnd::SwarmStopped { cycle: n }, verdicts));
        }
        if opts.mode == Mode::Once {
            return Ok((RunEnd::Done, verdicts));
        }
    }
}

fn summary(board: &Board, view: &CycleView, over_budget: Option<&str>) -> String {
    let mut head = format!(
        "Cycle {}: {} task(s) done and {} failed in this cycle; {} open or claimed.\n",
        view.n, view.done, view.failed, view.live
    );
    let spent = board.spend.cycle_total(board.cycle);
    if !spent.is_zero() {
        head.push_str(&format!("The cycle spent {spent}.\n"));
    }
    if let Some(why) = over_budget {
        head.push_str(&format!("The cycle ended early: {why}. No agent claims more in it.\n"));
    }
    head.push('\n');
    let lines = super::task_lines(board, 60_000, |t| match t.status {
        Status::Done => t
            .result
            .as_ref()
            .and_then(|r| r.commit.clone())
            // Not a byte slice: the commit comes from a task file and need not be hex.
            .map(|c| format!(" (commit {})", c.chars().take(12).collect::<String>()))
            .unwrap_or_default(),
        Status::Failed => t.failures.last().map(|f| format!(" — {}", f.reason)).unwrap_or_default(),
        _ => String::new(),
    });
    head + &lines
}

/// A verdict (when the judge gave one) and what the run spent.
type Judged = (Option<(Verdict, String)>, Option<crate::usage::Usage>);

/// Ask the judge once: its verdict (if it gave one) and what the run spent. `over_budget`: why the cycle ended early.
fn judge_once(
    r: &mut Runner<'_>,
    full: &Snapshot,
    view: &CycleView,
    settings: &super::RunSettings,
    over_budget: Option<&str>,
) -> Result<Judged, RunError> {
    let config = &full.board.config;
    let backend = r.backend(config, Role::Judge)?;
    let slot = r.slot();
    let branch = format!("refs/heads/{}", config.target);
    let tip = r.swarm.riding_out(&r.retry, || r.swarm.fetch_branch(&branch))?;
    let check = match (&settings.check, tip) {
        (Some(cmd), Some(t)) => {
            let checkout = slot
                .checkout(&r.swarm.local.repo, t, r.agent_owner(), &[], !settings.check_clean)
                .map_err(RunError::Setup)?;
            let mut said = Vec::new();
            let setup = r.set_up(&slot, &checkout, t, settings, config, &format!("cycle-{}", view.n), &mut said);
            for e in said {
                r.emit(e);
            }
            let guard = r.guard();
            let (ok, tail) = match setup {
                Ok(_) => {
                    let out = super::landing::run_check(r, &slot, t, cmd, settings.task_timeout, config, &|| true);
                    (out.passed, out.tail)
                }
                Err(f) => (false, [f.tail, vec![f.reason]].concat()),
            };
            for p in guard.restore() {
                r.emit(Event::Warning(p));
            }
            format!(
                "`{cmd}` on {} ({}): {}\n{}",
                &t.to_string()[..12],
                config.target,
                if ok { "passed" } else { "FAILED" },
                tail.join("\n")
            )
        }
        (Some(cmd), None) => format!("`{cmd}`: not run, there is no {} branch", config.target),
        (None, _) => "no check command is configured ([run] check in swarm.toml)".into(),
    };
    let goal = super::goal(r.swarm.store(), full.commit).unwrap_or_else(|| "(no goal recorded)".into());
    let (template, warn) = prompts::load(r.swarm.store(), full.commit, "judge");
    if let Some(w) = warn {
        r.emit(Event::Warning(w));
    }
    let prompt = prompts::render(
        &template,
        &[
            ("goal", &goal),
            ("cycle", &view.n.to_string()),
            ("summary", &summary(&full.board, view, over_budget)),
            ("handoffs", &super::handoffs(r.swarm.store(), full, None, 60_000)),
            ("check", &check),
        ],
    );
    let mut env = r.base_env(Role::Judge);
    env.push(("GIT_SWARM_CYCLE".into(), view.n.to_string()));
    r.emit(Event::AgentStarted { task: format!("cycle-{}", view.n), what: "judge" });
    // The judge reads a work tree at the target's tip, made afresh (an empty one with no target yet).
    slot.checkout(&r.swarm.local.repo, tip.unwrap_or(r.swarm.local.repo.empty_tree().id), r.agent_owner(), &[], true)
        .map_err(RunError::Setup)?;
    let out = r.run_agent(
        &backend,
        (&slot, tip, None),
        &prompt,
        env,
        settings.plan_timeout,
        None,
        (Role::Judge, config),
        &mut || true,
    );
    let (out, planted) = out?;
    for p in planted {
        r.emit(Event::Warning(p));
    }
    // A judge that cannot start gives no verdict three times and stops the swarm: a runner error instead.
    super::cannot_start(Role::Judge, &backend, &out)?;
    r.emit(Event::AgentExited {
        task: format!("cycle-{}", view.n),
        exit: out.exit.to_string(),
        secs: out.elapsed.as_secs_f64(),
    });
    if out.exit == Exit::Stopped || !out.exit.success() {
        return Ok((None, out.usage));
    }
    Ok((parse_verdict(&backend.answer(&out)), out.usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_read_from_the_last_line_or_a_toml_block() {
        assert_eq!(
            parse_verdict("blah\nreasons: all good,\nreally.\nverdict: stop\n"),
            Some((Verdict::Stop, "all good,\nreally.".into()))
        );
        assert_eq!(parse_verdict("verdict: continue"), Some((Verdict::Continue, String::new())));
        assert_eq!(
            parse_verdict("```toml\nverdict = \"continue\"\nreasons = \"more\"\n```"),
            Some((Verdict::Continue, "more".into()))
        );
        assert_eq!(parse_verdict("verdict: maybe"), None);
        assert_eq!(parse_verdict("nothing"), None);
    }

    /// Task files and cycle records are written by anyone who can push: odd values in them must not crash the judge.
    #[test]
    fn hostile_records_do_not_crash_the_summary_or_the_cycle_count() {
        let mut board = Board::default();
        let task = crate::model::Task {
            id: "t-1".into(),
            title: "t".into(),
            body: String::new(),
            kind: crate::model::Kind::Work,
            status: Status::Done,
            priority: 0,
            deps: vec![],
            labels: vec![],
            parent: None,
            acceptance: String::new(),
            scope: vec![],
            plan_round: 0,
            attempts: 0,
            epoch: 1,
            created_by: None,
            created_at: None,
            claim: None,
            // A multi-byte character across the 12th byte.
            result: Some(crate::model::TaskResult { commit: Some("aaaaaaaaaaa€€".into()), ..Default::default() }),
            failures: vec![],
            usage: None,
            claim_usage: None,
        };
        board.tasks.insert("t-1".into(), ops::Stored { path: ops::task_path("t-1"), task });
        let view = CycleView { n: 1, started: Timestamp::from_secs(0), done: 1, failed: 0, live: 0 };
        assert!(summary(&board, &view, None).contains("(commit aaaaaaaaaaa€)"));
        let rec = |cycle| CycleRecord {
            cycle,
            verdict: Verdict::Continue,
            reasons: String::new(),
            by: String::new(),
            at: Timestamp::from_secs(0),
            tasks_done: 0,
            tasks_failed: 0,
            usage: None,
            spent: None,
        };
        assert_eq!(next_cycle(None), 1);
        assert_eq!(next_cycle(Some(&rec(4))), 5);
        assert_eq!(next_cycle(Some(&rec(u64::MAX))), u64::MAX);
    }
}
