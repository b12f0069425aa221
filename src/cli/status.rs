//! `git swarm status`: counts by status, agents and what they hold, expired leases.

use std::collections::BTreeMap;

use crate::model::{Kind, Status};
use crate::ops;
use serde_json::json;

use super::{CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {}

pub(super) fn run(ctx: &mut Ctx, _args: StatusArgs) -> CliResult<()> {
    let swarm = ctx.swarm()?;
    let snap = swarm.read(false)?;
    ctx.out.problems(&snap.problems);
    let now = ctx.now();
    let board = &snap.board;
    let mut counts: BTreeMap<&str, usize> = Status::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    let mut agents: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    let mut expired = Vec::new();
    for c in board.closed.values() {
        *counts.entry(c.status.as_str()).or_default() += 1;
    }
    for s in board.tasks.values() {
        let t = &s.task;
        *counts.entry(t.status.as_str()).or_default() += 1;
        if let Some(c) = t.live_claim(now) {
            agents.entry(&c.agent).or_default().push(json!({
                "id": t.id, "title": t.title, "epoch": c.epoch, "lease_until": c.lease_until.to_string()
            }));
        }
        if let Some(c) = t.expired_claim(now) {
            expired.push(json!({
                "id": t.id, "title": t.title, "agent": c.agent, "epoch": c.epoch,
                "lease_until": c.lease_until.to_string(), "attempts": t.attempts
            }));
        }
    }
    let ready_work = ops::ready(board, Kind::Work, now).len();
    let ready_plan = ops::ready(board, Kind::Plan, now).len();
    let problems: Vec<_> =
        snap.problems.iter().map(|p| json!({"path": p.path, "commit": p.commit, "message": p.message})).collect();

    let total: usize = counts.values().sum();
    let summary: Vec<String> = counts.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{n} {k}")).collect();
    ctx.out.line(format!(
        "swarm {} at {} · target {} · lease {}",
        ctx.swarm_name,
        &snap.commit.to_hex_with_len(12),
        board.config.target,
        crate::time::format_duration(board.config.lease)
    ));
    ctx.out.line(format!(
        "{total} tasks{}{} · ready: {ready_work} work, {ready_plan} plan",
        if summary.is_empty() { "" } else { ": " },
        summary.join(", ")
    ));
    if !agents.is_empty() {
        ctx.out.line("agents:");
        for (a, held) in &agents {
            let ids: Vec<String> = held
                .iter()
                .map(|h| format!("{} (until {})", h["id"].as_str().unwrap_or("?"), short_clock(&h["lease_until"])))
                .collect();
            ctx.out.line(format!("  {a}: {}", ids.join(", ")));
        }
    }
    if !expired.is_empty() {
        ctx.out.line("expired leases (claimable by anyone):");
        for e in &expired {
            ctx.out.line(format!(
                "  {} held by {} until {}",
                e["id"].as_str().unwrap_or("?"),
                e["agent"].as_str().unwrap_or("?"),
                e["lease_until"].as_str().unwrap_or("?")
            ));
        }
    }
    if !problems.is_empty() {
        ctx.out.line(format!("unreadable files: {} (see the warnings above)", problems.len()));
    }
    let (goal, stopped, current) = goal_lines(ctx, swarm.store(), snap.commit);
    // What was spent, by role, and what is left of the budgets (this clone's settings over the shared ones).
    let settings = ctx
        .git_config()
        .ok()
        .and_then(|local| crate::runner::RunSettings::from_config(&local.apply(&board.config)).ok())
        .unwrap_or_default();
    let spend = spend_json(board, &settings);
    spend_lines(ctx, board, &settings);
    let sandbox = sandbox_lines(ctx, &settings);
    ctx.out.doc(&json!({
        "sandbox": sandbox,
        "spend": spend,
        "commit": snap.commit.to_string(),
        "target": board.config.target,
        "lease": crate::time::format_duration(board.config.lease),
        "total": total,
        "counts": counts,
        "ready": {"work": ready_work, "plan": ready_plan},
        "agents": agents.iter().map(|(a, h)| json!({"agent": a, "tasks": h})).collect::<Vec<_>>(),
        "expired": expired,
        "problems": problems,
        "goal": goal.as_deref().map(str::trim_end),
        "cycle": current,
        "stopped": stopped.as_ref().map(|c| json!({"cycle": c.cycle, "at": c.at.to_string(), "reasons": c.reasons, "by": c.by})),
    }));
    Ok(())
}

/// The goal and the cycle: a swarm the judge stopped says so, and how to go on. The goal, the record of the stop
/// (if the judge stopped the swarm) and the cycle that runs.
fn goal_lines(
    ctx: &Ctx,
    store: &crate::Store,
    commit: gix::ObjectId,
) -> (Option<String>, Option<crate::runner::CycleRecord>, u64) {
    let (goal, last) = crate::runner::goal::state(store, commit);
    let current = last.as_ref().map_or(1, |c| c.cycle.saturating_add(1));
    let stopped = last.filter(|c| c.verdict == crate::runner::Verdict::Stop);
    if let Some(g) = &goal {
        let first = g.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default();
        let when = if stopped.is_some() { String::new() } else { format!(" · cycle {current} running") };
        ctx.out.line(format!("goal: {}{when}", crate::escape::line(first)));
    }
    if let Some(c) = &stopped {
        let why = c.reasons.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no reasons given");
        ctx.out.line(format!(
            "STOPPED: the judge's verdict on cycle {} ({}) was stop: {}",
            c.cycle,
            c.at,
            crate::escape::line(why)
        ));
        ctx.out.line(
            "  to go on: git swarm goal \"<text>\" (a new goal, or the same one again), then start the runners again",
        );
    }
    (goal, stopped, current)
}

/// What was spent, by role, and what is left of the budgets (this clone's settings over the shared ones).
fn spend_lines(ctx: &Ctx, board: &ops::Board, settings: &crate::runner::RunSettings) {
    let in_cycle = board.spend.cycle_total(board.cycle);
    let all = board.spend.grand_total();
    if !all.is_zero() || settings.budget.cycle().is_set() {
        ctx.out.line(format!("spent: {all} in all; cycle {}: {in_cycle}", board.cycle));
        for role in crate::usage::ROLES {
            if let Some(u) = board.spend.of_cycle(board.cycle).get(role) {
                ctx.out.line(format!("  {role}: {u}"));
            }
        }
    }
    if let Some(left) = budget_line("cycle budget", &settings.budget.cycle(), &in_cycle) {
        ctx.out.line(left);
    }
    if settings.budget.task().is_set() {
        ctx.out.line(format!("task budget: {}", limit_text(&settings.budget.task())));
    }
}

/// Whether this clone's agents run contained: said when they do not. `status --json`'s `sandbox`.
fn sandbox_lines(ctx: &Ctx, settings: &crate::runner::RunSettings) -> serde_json::Value {
    let support = crate::agent::sandbox::support(&ctx.env);
    let contained = settings.sandbox != crate::agent::sandbox::Mode::Off && support.is_ready();
    let uncontained_why = match (settings.sandbox, support) {
        (crate::agent::sandbox::Mode::Off, _) => Some("[run] sandbox = \"off\"".to_string()),
        (_, crate::agent::sandbox::Support::Missing { why, .. }) => Some(why.clone()),
        _ => None,
    };
    if let Some(why) = &uncontained_why {
        ctx.out.line(format!("sandbox: agents of this clone run UNCONTAINED ({why}); see `git swarm doctor`"));
    }
    let open_door = if contained { support.open_door() } else { None };
    if let Some(door) = &open_door {
        ctx.out.line(format!("sandbox: {door}; see `git swarm doctor`"));
    }
    json!({"mode": settings.sandbox.as_str(), "contained": contained, "why": uncontained_why, "open": open_door})
}

fn short_clock(v: &serde_json::Value) -> String {
    v.as_str().and_then(|s| s.get(11..19)).unwrap_or("?").to_string()
}

/// `status --json`'s `spend` (docs/json.md).
fn spend_json(board: &ops::Board, settings: &crate::runner::RunSettings) -> serde_json::Value {
    use super::output::usage_json;
    let by_role = |m: &BTreeMap<String, crate::usage::Usage>| {
        let mut o = serde_json::Map::new();
        for (role, u) in m {
            o.insert(role.clone(), usage_json(u));
        }
        serde_json::Value::Object(o)
    };
    let in_cycle = board.spend.cycle_total(board.cycle);
    let limit = |l: &crate::usage::Limit, spent: Option<&crate::usage::Usage>| {
        if !l.is_set() {
            return serde_json::Value::Null;
        }
        let mut v = json!({"tokens": l.tokens, "usd": l.usd.map(|u| u.dollars())});
        if let Some(u) = spent {
            let (t, d) = l.left(u);
            v["left_tokens"] = json!(t);
            v["left_usd"] = json!(d.map(|d| d.dollars()));
            v["spent"] = json!(l.reached(u).is_some());
        }
        v
    };
    json!({
        "total": usage_json(&board.spend.grand_total()),
        "by_role": by_role(&board.spend.total),
        "cycle": {
            "cycle": board.cycle,
            "total": usage_json(&in_cycle),
            "by_role": by_role(&board.spend.of_cycle(board.cycle)),
        },
        "budget": {
            "cycle": limit(&settings.budget.cycle(), Some(&in_cycle)),
            "task": limit(&settings.budget.task(), None),
        },
    })
}

/// `10000 tokens, $5.00`.
fn limit_text(l: &crate::usage::Limit) -> String {
    let mut parts = Vec::new();
    if let Some(t) = l.tokens {
        parts.push(format!("{t} tokens"));
    }
    if let Some(d) = l.usd {
        parts.push(d.to_string());
    }
    parts.join(", ")
}

/// `cycle budget: 10000 tokens, $5.00 · left: 1200 tokens, $0.4100` (or `SPENT`).
fn budget_line(what: &str, l: &crate::usage::Limit, spent: &crate::usage::Usage) -> Option<String> {
    if !l.is_set() {
        return None;
    }
    let (t, d) = l.left(spent);
    let mut left = Vec::new();
    if let Some(t) = t {
        left.push(format!("{t} tokens"));
    }
    if let Some(d) = d {
        left.push(d.to_string());
    }
    let state = match l.reached(spent) {
        Some(why) => format!("SPENT ({why}): runners claim nothing more in this cycle"),
        None => format!("left: {}", left.join(", ")),
    };
    Some(format!("{what}: {} · {state}", limit_text(l)))
}
