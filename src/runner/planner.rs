//! The planner: claim a plan task (the root goal or an area), run the agent with the planner prompt, the board and
//! the hand-offs, file the tasks it proposes in one commit, wait until they are finished, and plan again with the
//! new hand-offs; the plan is done when its agent proposes nothing.
//!
//! One planner process can hold several plans: while it waits on the children of one, it takes any ready plan
//! task (a sub-plan it or another planner filed), so that a single planner never waits on itself.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;

use super::landing::LeaseKeeper;
use super::{Event, Mode, Role, RunEnd, RunError, RunSettings, Runner, prompts};
use crate::Snapshot;
use crate::TxnError;
use crate::agent::Exit;
use crate::escape::squash;
use crate::model::{Kind, Status, Task};
use crate::ops::plan::{PlanRound, Proposal, Proposed, children};
use crate::ops::{self, Board, DomainError};

/// Options of `git swarm run planner`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlannerOptions {
    pub goal: Option<String>,
    /// `--replace-goal`: a goal other than the swarm's (or any goal on a stopped swarm) replaces it, as `git swarm
    /// goal` would, instead of being refused.
    pub replace_goal: bool,
    pub mode: Mode,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct PlannerStats {
    pub rounds: u64,
    pub proposed: u64,
    pub plans_done: u64,
}

/// A plan this planner holds.
struct HeldPlan {
    task: Task,
    /// Its claim's lease: renewed when due, between rounds by the loop and during a round by the agent's poll.
    keeper: LeaseKeeper,
    rounds: u32,
    /// Its children were filed and are not all finished yet.
    waiting: bool,
}

#[derive(Deserialize)]
struct Block {
    task: Vec<Proposal>,
}

/// The tasks of the planner's output: the **last** fenced ```toml block that holds `[[task]]` tables (an agent that
/// echoes its prompt repeats the prompt's example first), or an empty block, "nothing more to do" (`Some([])`).
/// Other toml blocks (a quoted `Cargo.toml`) are not proposals and are passed over. `Ok(None)`: no such block.
pub(crate) fn parse_proposals(output: &str) -> Result<Option<Vec<Proposal>>, String> {
    let mut found: Option<Vec<Proposal>> = None;
    let mut last_error = None;
    for block in fenced_blocks(output, "toml") {
        let table: toml::Table = match toml::from_str(block) {
            Ok(t) => t,
            Err(e) => {
                if block.contains("[[task]]") {
                    last_error = Some(squash(&e));
                }
                continue;
            }
        };
        if table.is_empty() {
            found = Some(Vec::new());
        } else if table.contains_key("task") {
            let parsed: Block = toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| format!("the planner's [[task]] block is not valid: {}", squash(&e)))?;
            found = Some(parsed.task);
            last_error = None;
        }
    }
    if found.is_none()
        && let Some(e) = last_error
    {
        return Err(format!("the planner's ```toml block is not valid TOML: {e}"));
    }
    if let Some(ps) = &found {
        let mut keys = BTreeSet::new();
        for (i, p) in ps.iter().enumerate() {
            let title = p.title.trim();
            if title.is_empty() || title.contains('\n') || title.len() > crate::model::MAX_TITLE_LEN {
                return Err(format!("proposed task {} has an empty, multi-line or too long title", i + 1));
            }
            if let Some(k) = &p.key
                && !keys.insert(k.clone())
            {
                return Err(format!("the key '{}' is used twice", crate::escape::line(k)));
            }
            for l in &p.labels {
                crate::model::validate_label(l)
                    .map_err(|e| format!("proposed task '{}': {e}", crate::escape::line(title)))?;
            }
        }
    }
    Ok(found)
}

/// The contents of fenced code blocks tagged `lang` (```` ```toml ````, any case). A fence line inside the block
/// (in a multi-line string) does not end it when the text up to there is not valid TOML yet but the text up to a
/// later fence is.
pub(crate) fn fenced_blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let lower = text.to_ascii_lowercase();
    let open = format!("```{lang}");
    let mut from = 0;
    while let Some(i) = lower[from..].find(&open).map(|i| i + from) {
        let after = i + open.len();
        let Some(nl) = text[after..].find('\n').map(|n| n + after) else { break };
        if !text[after..nl].trim().is_empty() {
            from = nl;
            continue;
        }
        let body_start = nl + 1;
        // Every line that starts with ``` after the opening is a candidate end.
        let mut ends = Vec::new();
        let mut pos = body_start;
        for line in text[body_start..].split_inclusive('\n') {
            if line.trim_start().starts_with("```") {
                ends.push(pos);
            }
            pos += line.len();
        }
        let Some(&first) = ends.first() else { break };
        let end = ends
            .iter()
            .copied()
            .find(|&e| toml::from_str::<toml::Table>(&text[body_start..e]).is_ok())
            .unwrap_or(first);
        out.push(&text[body_start..end]);
        from = text[end..].find('\n').map_or(text.len(), |n| end + n);
    }
    out
}

/// The depth of a plan task: 0 for a root, one more per plan parent.
fn depth(board: &Board, task: &Task) -> u32 {
    let mut d = 0;
    let mut cur = task.parent.clone();
    let mut seen = BTreeSet::new();
    while let Some(p) = cur {
        if !seen.insert(p.clone()) || d > 64 {
            break;
        }
        d += 1;
        cur = board.tasks.get(&p).and_then(|s| s.task.parent.clone());
    }
    d
}

pub(crate) fn run(r: &mut Runner<'_>, opts: &PlannerOptions) -> Result<(RunEnd, PlannerStats), RunError> {
    r.setup()?;
    let snap = r.read(false)?;
    r.check_trust(&snap, Role::Planner)?;
    let config = snap.board.config;
    r.ride_out(&config);
    r.settings(&config)?;
    r.backend(&config, Role::Planner)?;
    r.say_containment();
    let mut stats = PlannerStats::default();
    if let Some(goal) = &opts.goal {
        let filer =
            super::goal::Filer { swarm: r.swarm, retry: &r.retry, who: &r.who, clock: r.clock, agent: &r.agent };
        if opts.replace_goal {
            filer.first_or_replace(goal)?;
        } else {
            filer.first(goal)?;
        }
    }
    let mut held: Vec<HeldPlan> = Vec::new();
    let res = run_loop(r, opts, &mut held, &mut stats);
    // Every way out gives back what is still held (an error too: another planner takes over at once).
    for h in held.drain(..) {
        r.release(&h.task.id, h.keeper.epoch());
    }
    r.teardown();
    res.map(|end| (end, stats))
}

fn run_loop(
    r: &mut Runner<'_>,
    opts: &PlannerOptions,
    held: &mut Vec<HeldPlan>,
    stats: &mut PlannerStats,
) -> Result<RunEnd, RunError> {
    let mut backoff = super::MIN_POLL;
    loop {
        r.say_ridden_out();
        if r.stopping() {
            return Ok(RunEnd::Interrupted);
        }
        let snap = r.read(false)?;
        if let Some(cycle) = r.stopped_at(&snap) {
            return Ok(RunEnd::SwarmStopped { cycle });
        }
        // The cycle spent its budget: no new claim, no new round; the plans held go back for the next cycle.
        if let Some(why) = super::cycle_budget_spent(&snap.board, &r.spent.budgets().1) {
            for h in std::mem::take(held) {
                r.release(&h.task.id, h.keeper.epoch());
            }
            return Ok(RunEnd::BudgetSpent { why });
        }
        let lease = snap.board.config.lease;
        let mut progressed = false;
        keep_held(r, &snap, held, lease)?;
        // Plan every held plan that is not waiting.
        let mut j = 0;
        while j < held.len() {
            if held[j].waiting {
                j += 1;
                continue;
            }
            progressed = true;
            let (head, rest) = held.split_at_mut(j);
            let (this, tail) = rest.split_first_mut().ok_or_else(|| RunError::Setup("internal: plan index".into()))?;
            let others: Vec<&mut HeldPlan> = head.iter_mut().chain(tail.iter_mut()).collect();
            match plan_round(r, this, others, stats)? {
                RoundEnd::Waiting if opts.mode == Mode::Once => {
                    // One round: give the plan back (its round count is in the task), so that the next round is
                    // anyone's.
                    return Ok(RunEnd::Done);
                }
                RoundEnd::Waiting => {
                    held[j].waiting = true;
                    j += 1;
                }
                RoundEnd::Finished | RoundEnd::Gone => {
                    held.remove(j);
                    if opts.mode == Mode::Once {
                        return Ok(RunEnd::Done);
                    }
                }
                RoundEnd::Interrupted => {
                    // Released already.
                    held.remove(j);
                    return Ok(RunEnd::Interrupted);
                }
            }
        }
        // Take a ready plan task.
        let snap = r.read(false)?;
        if take_plan(r, held, lease)? {
            continue;
        }
        if held.is_empty() {
            match opts.mode {
                Mode::Once if stats.rounds > 0 => return Ok(RunEnd::Done),
                Mode::Once => return Ok(RunEnd::NothingReady),
                Mode::UntilIdle if crate::ops::claim::idle(&snap.board, (r.clock)()) => return Ok(RunEnd::Idle),
                _ => {}
            }
        }
        if !progressed {
            let why = if held.is_empty() {
                "no plan task ready".to_string()
            } else {
                format!("{} plan(s) wait for their tasks", held.len())
            };
            r.emit(Event::Waiting { why });
            // Wake up in time to renew what we hold.
            let max = Duration::from_secs(30).min(lease / 4).max(Duration::from_millis(500));
            r.wait_for_change(snap.commit, max, &mut backoff)?;
        }
    }
}

/// Claim a ready plan task and hold it (waiting for its tasks first when some of them still run); `false` when none
/// is ready.
fn take_plan(r: &mut Runner<'_>, held: &mut Vec<HeldPlan>, lease: Duration) -> Result<bool, RunError> {
    match r.transact(|snap, actor| ops::claim(&snap.board, actor, None, Kind::Plan, lease, None)) {
        Ok(c) => {
            if let Some(t) = c.value
                && let Some(cl) = t.claim.clone()
            {
                r.emit(Event::Claimed {
                    task: t.id.clone(),
                    title: t.title.clone(),
                    epoch: cl.epoch,
                    kind: Kind::Plan,
                });
                let rounds = t.plan_round;
                // A plan taken over (or given back after a round) whose tasks still run waits for them first.
                let snap = r.read(false)?;
                let waiting = children_running(&snap, &t.id);
                let keeper = LeaseKeeper::new(&t.id, cl.epoch, cl.lease_until, lease);
                held.push(HeldPlan { task: t, keeper, rounds, waiting });
            }
            Ok(true)
        }
        Err(TxnError::Domain(DomainError::NothingReady { .. })) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Keep the plans held: renew their leases when due (by the board's `lease`), let go of those whose claims were
/// lost, and note those whose children are all finished (or can never run).
fn keep_held(r: &mut Runner<'_>, snap: &Snapshot, held: &mut Vec<HeldPlan>, lease: Duration) -> Result<(), RunError> {
    let mut i = 0;
    while i < held.len() {
        let h = &mut held[i];
        h.keeper.set_lease(lease);
        keep_lease(r, &h.keeper);
        if let Some(why) = h.keeper.lost() {
            r.emit(Event::LostClaim { task: h.task.id.clone(), why });
            held.remove(i);
            continue;
        }
        if h.waiting && !children_running(snap, &h.task.id) {
            h.waiting = false;
            let id = h.task.id.clone();
            cancel_blocked_children(r, snap, &id)?;
        }
        i += 1;
    }
    Ok(())
}

/// One poll of a claim's lease: renew it when due and report what that did. `false` once the claim is lost.
fn keep_lease(r: &mut Runner<'_>, keeper: &LeaseKeeper) -> bool {
    let alive = keeper.keep(r);
    for e in keeper.drain() {
        r.emit(e);
    }
    alive
}

/// Does `plan` have a live child that can still run? (Children blocked for good by a failed dependency do not
/// count: waiting on them would wait for ever.)
fn children_running(snap: &Snapshot, plan: &str) -> bool {
    snap.board.tasks.values().any(|s| {
        s.task.parent.as_deref() == Some(plan)
            && (s.task.status == Status::Claimed || ops::blocked_for_good(&snap.board, &s.task).is_none())
    })
}

/// Cancel the children of `plan` that can never run, so that the board says so and the cycle can end.
fn cancel_blocked_children(r: &mut Runner<'_>, snap: &Snapshot, plan: &str) -> Result<(), RunError> {
    let ids: Vec<String> = children(&snap.board, plan).into_iter().collect();
    if ids.is_empty() {
        return Ok(());
    }
    let res = r.transact(|snap, actor| Ok((ops::cancel_blocked(&snap.board, actor, &ids), ())))?;
    if res.commit.is_some() {
        r.emit(Event::Warning(format!("cancelled tasks of plan {plan} whose dependencies failed")));
    }
    Ok(())
}

enum RoundEnd {
    /// Tasks were filed; wait for them.
    Waiting,
    /// The plan is done (or failed).
    Finished,
    /// The claim was lost.
    Gone,
    /// A signal; the claim was released.
    Interrupted,
}

/// What one round of a plan works from: the plan's claim, its depth, the board the round read and its settings.
struct Round<'a> {
    id: String,
    epoch: u64,
    depth: u32,
    full: &'a Snapshot,
    settings: &'a RunSettings,
}

fn plan_round(
    r: &mut Runner<'_>,
    h: &mut HeldPlan,
    mut others: Vec<&mut HeldPlan>,
    stats: &mut PlannerStats,
) -> Result<RoundEnd, RunError> {
    let full = r.read(true)?;
    r.check_trust(&full, Role::Planner)?;
    let config = full.board.config.clone();
    let settings = r.settings(&config)?;
    let backend = r.backend(&config, Role::Planner)?;
    h.rounds += 1;
    stats.rounds += 1;
    let round = Round {
        id: h.task.id.clone(),
        epoch: h.keeper.epoch(),
        depth: depth(&full.board, &h.task),
        full: &full,
        settings: &settings,
    };
    let prompt = round_prompt(r, &round, h);
    let children_before: BTreeSet<String> = ops::plan::children(&full.board, &round.id);
    // Every lease held is renewed by the lease of the board this round read.
    h.keeper.set_lease(config.lease);
    for o in others.iter_mut() {
        o.keeper.set_lease(config.lease);
    }
    let out = run_round_agent(r, &round, h, &others, &backend, &prompt)?;
    let (id, epoch) = (round.id.as_str(), round.epoch);
    r.emit(Event::AgentExited { task: id.to_string(), exit: out.exit.to_string(), secs: out.elapsed.as_secs_f64() });
    if let Some(why) = h.keeper.lost() {
        r.emit(Event::LostClaim { task: id.to_string(), why });
        return Ok(RoundEnd::Gone);
    }
    if out.exit == Exit::Stopped {
        r.release(id, epoch);
        return Ok(RoundEnd::Interrupted);
    }
    if crate::agent::could_not_start(&out) {
        // Nothing was planned: the plan goes back as it was, and the runner stops with the reason.
        r.release(id, epoch);
        super::cannot_start(Role::Planner, &backend, &out)?;
    }
    if !out.exit.success() {
        let for_good = matches!(out.exit, Exit::OverBudget(_));
        let reason = super::reason_from(&format!("the planner agent {}", out.exit), &out.tail_and_hint());
        return fail_round(r, id, epoch, for_good, reason);
    }
    match parse_proposals(&backend.answer(&out)) {
        Ok(proposals) => file_round(r, &round, h.rounds, stats, proposals.as_deref(), &children_before),
        Err(e) => fail_round(r, id, epoch, false, e),
    }
}

/// The prompt of one round: the planner's (a root plan) or the sub-planner's, with the goal, the plan, the board
/// and the hand-offs.
fn round_prompt(r: &mut Runner<'_>, round: &Round<'_>, h: &HeldPlan) -> String {
    let full = round.full;
    let goal = super::goal(r.swarm.store(), full.commit).unwrap_or_else(|| h.task.body.clone());
    let name = if round.depth == 0 { "planner" } else { "sub-planner" };
    let (template, warn) = prompts::load(r.swarm.store(), full.commit, name);
    if let Some(w) = warn {
        r.emit(Event::Warning(w));
    }
    prompts::render(
        &template,
        &[
            ("goal", &goal),
            ("plan_id", &round.id),
            ("plan_title", &h.task.title),
            ("plan_body", &h.task.body),
            ("depth", &round.depth.to_string()),
            ("max_depth", &round.settings.plan_depth.to_string()),
            ("round", &h.rounds.to_string()),
            ("board", &super::board_text(&full.board, 60_000)),
            ("handoffs", &super::handoffs(r.swarm.store(), full, None, 60_000)),
            ("target", &full.board.config.target),
        ],
    )
}

/// Run the planner agent of one round in a work tree at the target's tip, keeping the lease of every plan held
/// meanwhile (the round's through `h`, and the `others`, which wait on their tasks); what the agent filed itself
/// (`git swarm add`) is filed when it is over.
fn run_round_agent(
    r: &mut Runner<'_>,
    round: &Round<'_>,
    h: &HeldPlan,
    others: &[&mut HeldPlan],
    backend: &crate::agent::Prepared,
    prompt: &str,
) -> Result<crate::agent::Outcome, RunError> {
    let (id, epoch, config) = (round.id.as_str(), round.epoch, &round.full.board.config);
    // The planner explores a work tree at the target's tip, made afresh (read-only by its prompt; whatever it
    // changes is thrown away with the tree); with no target yet, an empty one.
    let slot = r.slot();
    let branch = format!("refs/heads/{}", config.target);
    let tip = r.swarm.riding_out(&r.retry, || r.swarm.fetch_branch(&branch))?;
    let empty = r.swarm.local.repo.empty_tree().id;
    slot.checkout(&r.swarm.local.repo, tip.unwrap_or(empty), r.agent_owner(), &[], true).map_err(RunError::Setup)?;
    let mut env = r.base_env(Role::Planner);
    env.push(("GIT_SWARM_PARENT".into(), id.to_string()));
    env.push(("GIT_SWARM_TASK_ID".into(), id.to_string()));
    env.push(("GIT_SWARM_TASK_TITLE".into(), h.task.title.clone()));
    env.push(("GIT_SWARM_ROUND".into(), h.rounds.to_string()));
    env.push(("GIT_SWARM_DEPTH".into(), round.depth.to_string()));
    r.emit(Event::AgentStarted { task: id.to_string(), what: "plan" });
    env.extend(backend.env.iter().cloned());
    let contained = r.contain_run(&slot, Role::Planner, Some(backend), config, tip, None)?;
    env.extend(contained.env.iter().cloned());
    let stop = std::sync::Arc::clone(&r.stop);
    let (live, budget) = r.spent.watch(id, epoch, h.task.usage);
    r.phase(id, epoch, super::status::Phase::Agent, Some(round.settings.plan_timeout));
    let inv = crate::agent::Invocation {
        cwd: &slot.tree,
        prompt,
        prompt_file: slot.run.join("prompt.md"),
        env,
        log: Some(r.log_file()),
        timeout: Some(round.settings.plan_timeout),
        grace: Duration::from_secs(10),
        report: backend.report.clone(),
        live: Some(live),
        budget,
        contain: Some(contained.contain.clone()),
    };
    let guard = r.guard();
    let res = crate::agent::run(&backend.backend, &inv, &mut || {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        // The other plans this planner holds wait on their tasks meanwhile: keep their leases too.
        for o in others {
            keep_lease(r, &o.keeper);
        }
        keep_lease(r, &h.keeper)
    });
    r.spent.ended(id, epoch, res.as_ref().ok().and_then(|o| o.usage));
    // Between rounds the planner waits on its tasks: only the ref has something to say of the plan.
    r.phase_over();
    let planted = guard.restore();
    for p in planted {
        r.emit(Event::Warning(p));
    }
    let out = res?;
    // What the agent filed itself (`git swarm add`) is filed now, before the round's own write counts the plan's
    // tasks.
    for m in r.file_outbox() {
        r.emit(Event::Warning(m));
    }
    Ok(out)
}

/// Fail the plan's attempt with `reason` (`for_good`: the run spent its budget): `Finished`, or `Gone` when the
/// claim is.
fn fail_round(r: &mut Runner<'_>, id: &str, epoch: u64, for_good: bool, reason: String) -> Result<RoundEnd, RunError> {
    let usage = r.spent.of(id, epoch);
    r.spent.forget(id, epoch);
    let res = r.transact(|snap, actor| {
        ops::fail(
            &snap.board,
            actor,
            id,
            Some(epoch),
            ops::Failing { reason: reason.clone(), usage, for_good, kept: None },
        )
    });
    match res {
        Ok(c) => {
            r.emit(Event::Failed { task: id.to_string(), reason, attempts_left: c.value.status == Status::Open });
            Ok(RoundEnd::Finished)
        }
        Err(e) => gone(r, id, e),
    }
}

/// A write about the plan that failed: a claim that is gone (the board refused it) is said, and the round is
/// `Gone`; anything else is the runner's error.
fn gone(r: &mut Runner<'_>, id: &str, e: TxnError) -> Result<RoundEnd, RunError> {
    match e {
        TxnError::Domain(e) => {
            r.emit(Event::LostClaim { task: id.to_string(), why: e.to_string() });
            Ok(RoundEnd::Gone)
        }
        e => Err(e.into()),
    }
}

/// File what round `rounds` of the plan proposed, in one commit with the round itself: `Waiting` on the tasks
/// filed, `Finished` (nothing more to do, only repeats, or the round limit), or the plan failed (no block, tasks
/// that cannot be filed) or gone. (A failure here is never for good: the agent exited 0, within its budget.)
fn file_round(
    r: &mut Runner<'_>,
    round: &Round<'_>,
    rounds: u32,
    stats: &mut PlannerStats,
    proposals: Option<&[Proposal]>,
    children_before: &BTreeSet<String>,
) -> Result<RoundEnd, RunError> {
    let (id, epoch, settings) = (round.id.as_str(), round.epoch, round.settings);
    let plans_allowed = round.depth < settings.plan_depth;
    let usage = r.spent.of(id, epoch);
    let res = r.transact(|snap, actor| {
        let filed = PlanRound {
            plan: id,
            epoch,
            round: rounds,
            proposals,
            plans_allowed,
            children_before,
            full: &round.full.board,
            usage,
        };
        ops::plan::plan_round(&snap.board, actor, &filed, &mut ops::mint_id)
    });
    match res {
        Ok(c) => match c.value {
            Proposed::NoBlock => fail_round(
                r,
                id,
                epoch,
                false,
                "the planner printed no ```toml block with [[task]] tables (an empty block means: nothing more to do)"
                    .into(),
            ),
            Proposed::Nothing => {
                stats.plans_done += 1;
                r.emit(Event::PlanDone { plan: id.to_string(), rounds });
                Ok(RoundEnd::Finished)
            }
            Proposed::Repeats(repeats) => {
                report_repeats(r, &repeats);
                stats.plans_done += 1;
                r.emit(Event::PlanDone { plan: id.to_string(), rounds });
                Ok(RoundEnd::Finished)
            }
            Proposed::Filed(n, demoted, repeats) => {
                report_repeats(r, &repeats);
                for t in demoted {
                    r.emit(Event::Warning(format!(
                        "'{}' was proposed as a plan beyond the depth limit ({}); filed as a work task",
                        crate::escape::line(&t),
                        settings.plan_depth
                    )));
                }
                stats.proposed += n as u64;
                r.emit(Event::Proposed { plan: id.to_string(), count: n });
                if rounds >= settings.plan_rounds {
                    return stop_at_round_limit(r, round, rounds, stats, usage);
                }
                Ok(RoundEnd::Waiting)
            }
        },
        Err(TxnError::Domain(e @ (DomainError::UnknownTask(_) | DomainError::DepsNotDone { .. }))) if !matches!(&e, DomainError::UnknownTask(u) if *u == id) => {
            fail_round(r, id, epoch, false, format!("the planner proposed tasks that cannot be filed: {e}"))
        }
        Err(e) => gone(r, id, e),
    }
}

/// The round limit: the plan has had its say and is done; what it filed runs without it.
fn stop_at_round_limit(
    r: &mut Runner<'_>,
    round: &Round<'_>,
    rounds: u32,
    stats: &mut PlannerStats,
    usage: Option<crate::usage::Usage>,
) -> Result<RoundEnd, RunError> {
    let (id, epoch) = (round.id.as_str(), round.epoch);
    let note = format!("stopped after {rounds} rounds (run.plan_rounds)");
    match r.transact(|snap, actor| ops::done(&snap.board, actor, id, Some(epoch), None, Some(note.clone()), usage)) {
        Ok(_) => {
            r.emit(Event::PlanDone { plan: id.to_string(), rounds });
            stats.plans_done += 1;
        }
        Err(TxnError::Domain(e)) => r.emit(Event::LostClaim { task: id.to_string(), why: e.to_string() }),
        Err(e) => return Err(e.into()),
    }
    Ok(RoundEnd::Finished)
}

fn report_repeats(r: &mut Runner<'_>, repeats: &[(String, String)]) {
    for (title, existing) in repeats {
        r.emit(Event::Warning(format!(
            "not filed again: '{}' repeats {existing} of the same plan",
            crate::escape::line(title)
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals_come_from_toml_blocks_and_an_empty_block_means_nothing() {
        let out = "thinking…\n```toml\n[[task]]\nkey = \"a\"\ntitle = \"A\"\n\n[[task]]\ntitle = \"B\"\ndeps = [\"a\"]\nkind = \"plan\"\n```\nbye";
        let p = parse_proposals(out).expect("ok").expect("some");
        assert_eq!(p.len(), 2);
        assert_eq!((p[1].kind, p[1].deps.clone()), (Kind::Plan, vec!["a".to_string()]));
        assert_eq!(parse_proposals("```toml\n```\n").expect("ok"), Some(vec![]));
        assert_eq!(parse_proposals("no block").expect("ok"), None);
        assert!(parse_proposals("```toml\n[[task]]\ntitel = \"x\"\n```").is_err(), "no title");
        // Other toml blocks are passed over; the last [[task]] block wins; unknown keys are ignored.
        let out = "```toml\n[package]\nname = \"x\"\n```\n```toml\n[[task]]\ntitle = \"example\"\n```\n```TOML\n[[task]]\ntitle = \"real\"\neffort = \"small\"\n```";
        assert_eq!(parse_proposals(out).expect("ok").expect("some")[0].title, "real");
        assert_eq!(parse_proposals("```toml\n[package]\nname = \"x\"\n```").expect("ok"), None);
        // A fence inside a multi-line string does not end the block.
        let out = "```toml\n[[task]]\ntitle = \"t\"\nbody = '''\nrun:\n```\nmake\n```\n'''\n```\n";
        assert_eq!(parse_proposals(out).expect("ok").expect("some")[0].body, "run:\n```\nmake\n```\n");
        assert!(
            parse_proposals("```toml\n[[task]]\nkey=\"k\"\ntitle=\"x\"\n[[task]]\nkey=\"k\"\ntitle=\"y\"\n```")
                .is_err()
        );
    }
}
