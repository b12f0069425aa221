//! The end of a worker's attempt on the board: `done` with the landed commit (or `fail` with the reason), the
//! agent's hand-off as the task's note, and the claim of the worker's next task in the same commit — one pure op,
//! [`finish`], whichever way the attempt ended. The code half of a landing (rebase, check, the atomic push of the
//! branch with this change) is the runner's (`runner::landing`).

use std::time::Duration;

use super::{Actor, Board, Change, DomainError};
use crate::model::{Kind, Task};
use crate::usage::{Limit, Usage};

/// How an attempt ended.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// Its code is on the target as `code` (`None`: it changed nothing, and that counts as done).
    Done { code: Option<&'a str> },
    /// It failed for `reason`; `for_good`: no further attempt (its budget is spent).
    Failed { reason: &'a str, for_good: bool },
}

/// The end of attempt `epoch` of task `id`, held by the actor.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    pub id: &'a str,
    pub epoch: u64,
    pub outcome: Outcome<'a>,
    /// The agent's hand-off: `notes/<id>.md`, and its first line the result's note.
    pub note: Option<&'a str>,
    /// What the attempt spent, as reported (conflict runs included).
    pub usage: Option<Usage>,
    /// Claim the next ready work task in the same commit (not the one that failed, which another agent should try)…
    pub claim_next: bool,
    /// …unless the judge stopped the swarm…
    pub stopped: bool,
    /// …or this change spends the running cycle's budget.
    pub cycle_budget: Limit,
    pub lease: Duration,
}

/// What [`finish`] wrote: the task as it ended, and the next task claimed with it.
#[derive(Debug, Clone)]
pub struct Finished {
    pub task: Task,
    pub next: Option<Task>,
}

/// The change that ends an attempt ([`Finish`]); refused unless the actor holds the task under `epoch`.
pub fn finish(board: &Board, actor: &Actor, f: &Finish<'_>) -> Result<(Change, Finished), DomainError> {
    let (ch, task, except) = match f.outcome {
        Outcome::Done { code } => {
            let code = code.map(str::to_string);
            let note = f.note.map(first_line);
            let (ch, t) = super::done_reporting(board, actor, f.id, Some(f.epoch), code, note, f.usage)?;
            (ch, t, None)
        }
        Outcome::Failed { reason, for_good } => {
            let (ch, t) =
                super::fail_reporting(board, actor, f.id, Some(f.epoch), reason.to_string(), f.usage, for_good)?;
            (ch, t, Some(f.id))
        }
    };
    let ch = with_note(ch, f.id, f.note);
    let go_on = f.claim_next && !f.stopped && super::cycle::budget_spent_after(board, &ch, &f.cycle_budget).is_none();
    let (ch, next) = then_claim(board, actor, ch, go_on, f.lease, except);
    Ok((ch, Finished { task, next }))
}

/// Fold "claim the next ready work task" into `ch` when wanted and possible; never `except` (the task this worker
/// just failed: another agent should have the next try). Public for the model check (`tests/model.rs`).
pub fn then_claim(
    board: &Board,
    actor: &Actor,
    ch: Change,
    claim_next: bool,
    lease: Duration,
    except: Option<&str>,
) -> (Change, Option<Task>) {
    if !claim_next {
        return (ch, None);
    }
    let mut after = board.clone();
    super::apply(&mut after, &ch);
    let best = super::ready(&after, Kind::Work, actor.now)
        .into_iter()
        .map(|t| t.id.clone())
        .find(|id| Some(id.as_str()) != except);
    let Some(best) = best else { return (ch, None) };
    match super::claim(&after, actor, Some(&best), Kind::Work, lease, None) {
        Ok((next, task)) => (ch.then(next), task),
        Err(_) => (ch, None),
    }
}

/// `ch` with the hand-off `note` of task `id` (`notes/<id>.md`).
fn with_note(mut ch: Change, id: &str, note: Option<&str>) -> Change {
    if let Some(n) = note {
        ch.files.insert(crate::state::note_path(id), n.to_string());
    }
    ch
}

/// The first line of a hand-off that says something (no heading), at most 200 characters: the result's note.
fn first_line(s: &str) -> String {
    let l = s.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or_default();
    l.chars().take(200).collect()
}
