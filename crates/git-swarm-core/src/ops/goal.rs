//! The goal's ops (`goal.md` and the cycles it is worked in), pure: file the first goal with its root plan
//! ([`first_goal`]), and replace it — ending the cycle that runs, or the judge's `stop`, with a record of this op,
//! cancelling the old goal's plans, filing the next root plan ([`next_cycle`]). The runner's part (when to call
//! which, on which state) is `runner::goal`.

use super::{Actor, Board, Change, DomainError, NewTask};
use crate::model::{CycleRecord, Kind, Status, Verdict};
use crate::time::Timestamp;

/// The change that files `goal` with its root plan task (labels: `goal`, and the cycle when there is one).
pub fn first_goal(
    board: &Board,
    actor: &Actor,
    goal: &str,
    cycle: Option<u64>,
) -> Result<(Change, String), DomainError> {
    let title: String = format!("Goal: {}", first_line(goal)).chars().take(200).collect();
    let mut labels = vec!["goal".to_string()];
    labels.extend(cycle.map(|c| format!("cycle-{c}")));
    let new = NewTask { title, body: goal.to_string(), kind: Kind::Plan, priority: 100, labels, ..NewTask::default() };
    let (mut ch, tasks) = super::add(board, actor, vec![new], &mut super::mint_id)?;
    ch.files.insert(crate::state::GOAL_PATH.into(), format!("{goal}\n"));
    ch.summary = format!("goal: {}", ch.summary);
    let id = tasks.first().map(|t| t.id.clone()).unwrap_or_default();
    Ok((ch, id))
}

/// End the cycle after `last` with a `continue` record of this op, cancel the old goal's root plans and their
/// sub-plans that are open or claimed, and file the new goal's root plan for the cycle after. When `last` is the
/// judge's `stop`, the stopped cycle is the one that ended: its record is rewritten as `continue` by this op (the
/// judge's reasons kept in it, the old record in the ref's history), so the next cycle is the one after it, not an
/// empty one in between. `full` has every task (the record counts what finished). Pure: the model check and the
/// property tests may call it.
pub fn next_cycle(
    board: &Board,
    full: &Board,
    actor: &Actor,
    goal: &str,
    last: Option<&CycleRecord>,
) -> Result<(Change, u64, String), DomainError> {
    let (record, summary) = match last {
        Some(stop) if stop.verdict == Verdict::Stop => {
            let record = CycleRecord {
                verdict: Verdict::Continue,
                reasons: format!(
                    "{} stopped it ({}); {} set a goal with `git swarm goal`: {}",
                    if stop.by.is_empty() { "the judge" } else { stop.by.as_str() },
                    first_line(&stop.reasons),
                    actor.agent,
                    first_line(goal)
                ),
                by: actor.agent.clone(),
                ..stop.clone()
            };
            (record, format!("cycle {}: go on after the stop with a new goal", stop.cycle))
        }
        _ => {
            let ended = last.map_or(1, |c| c.cycle.saturating_add(1));
            let since = last.map_or(Timestamp::from_secs(0), |c| c.at);
            let finished = |st: Status| super::cycle::finished_since(full, st, since);
            let record = CycleRecord {
                cycle: ended,
                verdict: Verdict::Continue,
                reasons: format!("a goal was set with `git swarm goal` by {}: {}", actor.agent, first_line(goal)),
                by: actor.agent.clone(),
                at: actor.now,
                tasks_done: finished(Status::Done),
                tasks_failed: finished(Status::Failed),
                usage: None,
                spent: Some(board.spend.cycle_total(board.cycle)).filter(|u| !u.is_zero()),
            };
            (record, format!("cycle {ended}: continue with a new goal"))
        }
    };
    let ended = record.cycle;
    let text =
        toml::to_string(&record).map_err(|e| DomainError::BadSetting(format!("cannot write the record: {e}")))?;
    let record = Change {
        op: "goal",
        agent: actor.agent.clone(),
        summary,
        files: [(crate::state::cycle_path(ended), text)].into(),
        ..Default::default()
    };
    // Nothing should plan the old goal again: its root plans (a planner holds one all cycle long) and the plans
    // under them. A cancelled plan's holder is fenced off; the work tasks they filed go on.
    let old_plans = plans_under_old_goals(board);
    let cancel = super::cancel(board, actor, &old_plans, "the goal was replaced (git swarm goal)");
    let mut after = board.clone();
    super::apply(&mut after, &cancel);
    let (add, plan) = first_goal(&after, actor, goal, Some(ended.saturating_add(1)))?;
    let ch = if cancel.writes.is_empty() { record.then(add) } else { record.then(cancel).then(add) };
    Ok((ch, ended, plan))
}

/// The root plans of a goal (label `goal`, no parent) and every plan task under them, open or claimed.
fn plans_under_old_goals(board: &Board) -> Vec<String> {
    let live = |t: &crate::model::Task| t.kind == Kind::Plan && matches!(t.status, Status::Open | Status::Claimed);
    let mut found: Vec<String> = board
        .tasks
        .values()
        .map(|s| &s.task)
        .filter(|t| live(t) && t.parent.is_none() && t.labels.iter().any(|l| l == "goal"))
        .map(|t| t.id.clone())
        .collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i].clone();
        for s in board.tasks.values() {
            if live(&s.task) && s.task.parent.as_deref() == Some(parent.as_str()) && !found.contains(&s.task.id) {
                found.push(s.task.id.clone());
            }
        }
        i += 1;
    }
    found
}

/// The first line of `text` that says something.
pub fn first_line(text: &str) -> &str {
    text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default()
}
