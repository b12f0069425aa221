//! Cycles: the judge's verdict that ends one (`cycles/<n>.toml`), a pure op like the others, and what a cycle
//! record counts.

use super::{Actor, Board, Change, DomainError, NewTask};
use crate::model::{CycleRecord, Kind, Status, Verdict};
use crate::time::Timestamp;
use crate::usage::{Limit, Usage};

/// What a judge said at the end of cycle `cycle`, and what the cycle it judged came to.
#[derive(Debug, Clone, Copy)]
pub struct Said<'a> {
    pub cycle: u64,
    pub verdict: Verdict,
    pub reasons: &'a str,
    pub tasks_done: u64,
    pub tasks_failed: u64,
    /// What the judge's runs for this verdict spent, as reported.
    pub usage: Option<Usage>,
}

/// The judge's verdict on `board` (the newest state), whose last cycle record is `last` and goal `goal`:
/// `cycles/<n>.toml` with the verdict and what the whole cycle spent, and on `continue` a fresh root plan of the
/// goal for the next cycle (ids by `mint`, [`super::mint_id`] outside tests). When another judge recorded this
/// cycle first (`last` is at `n` or past it), only what this judge's runs spent is recorded, and the value is
/// `false`: its verdict does not stand.
pub fn verdict(
    board: &Board,
    actor: &Actor,
    said: &Said<'_>,
    last: Option<&CycleRecord>,
    goal: Option<&str>,
    mint: &mut dyn FnMut() -> String,
) -> Result<(Change, bool), DomainError> {
    let n = said.cycle;
    let spend = said.usage.and_then(|u| super::spend_after(board, "judge", &u));
    if last.is_some_and(|c| c.cycle >= n) {
        // Another judge spoke first. What this one's runs spent is still counted (a push of its own).
        let ch = match (spend, said.usage) {
            (Some(spend), Some(u)) => Change {
                op: "spend",
                agent: actor.agent.clone(),
                summary: format!("spend of a judge's runs for cycle {n} ({})", super::spent_briefly(&u)),
                spend: Some(spend),
                ..Default::default()
            },
            _ => Change { agent: actor.agent.clone(), ..Default::default() },
        };
        return Ok((ch, false));
    }
    // The judge's run is the cycle's last spend: the record says what the whole cycle spent.
    let in_cycle = spend.as_ref().unwrap_or(&board.spend).cycle_total(board.cycle);
    let rec = CycleRecord {
        cycle: n,
        verdict: said.verdict,
        reasons: said.reasons.to_string(),
        by: actor.agent.clone(),
        at: actor.now,
        tasks_done: said.tasks_done,
        tasks_failed: said.tasks_failed,
        usage: said.usage,
        spent: (!in_cycle.is_zero()).then_some(in_cycle),
    };
    let text = toml::to_string(&rec).map_err(|e| DomainError::BadSetting(e.to_string()))?;
    let mut ch = Change {
        op: "judge",
        agent: actor.agent.clone(),
        summary: format!("cycle {n}: {}", said.verdict),
        files: [(crate::state::cycle_path(n), text)].into(),
        spend,
        ..Default::default()
    };
    if said.verdict == Verdict::Continue {
        let next = n.saturating_add(1);
        let new = NewTask {
            title: format!("Cycle {next}: plan the goal again"),
            body: format!(
                "{}\n\nThe judge ended cycle {n} with `continue`:\n\n{}\n",
                goal.unwrap_or_default(),
                said.reasons
            ),
            kind: Kind::Plan,
            priority: 100,
            labels: vec!["goal".into(), format!("cycle-{next}")],
            ..NewTask::default()
        };
        let (add, _) = super::add(board, actor, vec![new], mint)?;
        ch = ch.then(add);
    }
    Ok((ch, true))
}

/// Has the running cycle spent its budget (`[run.budget] cycle`)? Why, if so.
pub fn budget_spent(board: &Board, limit: &Limit) -> Option<String> {
    budget_spent_after(board, &Change::default(), limit)
}

/// [`budget_spent`] once `ch` (computed on `board`) is applied: what a landing asks before it claims the next task in
/// the same commit, without a copy of the board.
pub(crate) fn budget_spent_after(board: &Board, ch: &Change, limit: &Limit) -> Option<String> {
    let spend = ch.spend.as_ref().unwrap_or(&board.spend);
    let why = limit.reached(&spend.cycle_total(board.cycle))?;
    Some(format!("cycle {} spent its budget: {why}", board.cycle))
}

/// How many tasks of `board` (read in full) reached `status` at or after `since`: what a cycle record counts.
pub fn finished_since(board: &Board, status: Status, since: Timestamp) -> u64 {
    board
        .tasks
        .values()
        .filter(|s| s.task.status == status)
        .filter(|s| {
            let t = &s.task;
            t.result.as_ref().and_then(|r| r.at).or(t.failures.last().map(|f| f.at)).is_some_and(|at| at >= since)
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(cycle: u64, verdict: Verdict, usage: Option<Usage>) -> Said<'static> {
        Said { cycle, verdict, reasons: "all green", tasks_done: 3, tasks_failed: 1, usage }
    }

    fn record(cycle: u64) -> CycleRecord {
        CycleRecord {
            cycle,
            verdict: Verdict::Continue,
            reasons: String::new(),
            by: "judge-0".into(),
            at: Timestamp::from_secs(1),
            tasks_done: 0,
            tasks_failed: 0,
            usage: None,
            spent: None,
        }
    }

    fn ids() -> impl FnMut() -> String {
        let mut n = 0u32;
        move || {
            n += 1;
            format!("t-{n:06x}")
        }
    }

    #[test]
    fn a_verdict_records_the_cycle_and_continue_files_the_goal_again() {
        let board = Board { cycle: 2, ..Board::default() };
        let actor = Actor { agent: "judge-1".into(), now: Timestamp::from_secs(1_800_000_000) };
        let usage = Usage { input_tokens: 40, output_tokens: 2, runs: 1, ..Usage::default() };
        let (ch, stands) = verdict(
            &board,
            &actor,
            &said(2, Verdict::Continue, Some(usage)),
            Some(&record(1)),
            Some("Ship it"),
            &mut ids(),
        )
        .expect("ok");
        assert!(stands);
        let rec: CycleRecord = toml::from_str(&ch.files["cycles/2.toml"]).expect("a record");
        assert_eq!((rec.cycle, rec.verdict, rec.by.as_str(), rec.at), (2, Verdict::Continue, "judge-1", actor.now));
        assert_eq!((rec.tasks_done, rec.tasks_failed, rec.reasons.as_str()), (3, 1, "all green"));
        // What the whole cycle spent includes the judge's own runs.
        assert_eq!(rec.spent.map(|u| u.input_tokens), Some(40));
        assert_eq!(ch.spend.as_ref().map(|s| s.cycle_total(2).input_tokens), Some(40));
        let plan = &ch.writes.iter().find(|w| w.task.kind == Kind::Plan).expect("a new root plan").task;
        assert_eq!(plan.title, "Cycle 3: plan the goal again");
        assert!(plan.body.starts_with("Ship it\n") && plan.body.contains("all green"), "{}", plan.body);
        assert_eq!(plan.labels, ["goal", "cycle-3"]);

        let (ch, stands) = verdict(&board, &actor, &said(2, Verdict::Stop, None), None, None, &mut ids()).expect("ok");
        assert!(stands);
        assert!(ch.writes.is_empty(), "stop files nothing");
        assert_eq!(ch.summary, "cycle 2: stop");
    }

    #[test]
    fn a_second_verdict_on_a_recorded_cycle_only_counts_what_it_spent() {
        let board = Board { cycle: 3, ..Board::default() };
        let actor = Actor { agent: "judge-2".into(), now: Timestamp::from_secs(1_800_000_000) };
        let usage = Usage { input_tokens: 7, runs: 1, ..Usage::default() };
        for last in [2, 3] {
            let (ch, stands) =
                verdict(&board, &actor, &said(2, Verdict::Stop, Some(usage)), Some(&record(last)), None, &mut ids())
                    .expect("ok");
            assert!(!stands, "cycle 2 was recorded already (last record {last})");
            assert!(ch.files.is_empty() && ch.writes.is_empty());
            assert_eq!(ch.op, "spend");
            assert_eq!(ch.spend.map(|s| s.grand_total().input_tokens), Some(7));
        }
        let (ch, stands) =
            verdict(&board, &actor, &said(2, Verdict::Stop, None), Some(&record(2)), None, &mut ids()).expect("ok");
        assert!(!stands && ch.is_empty(), "nothing to record: {ch:?}");
    }
}
