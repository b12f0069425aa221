//! The end of a worker's attempt on the board: `done` with the landed commit (or `fail` with the reason), the
//! agent's hand-off as the task's note, and the claim of the worker's next task in the same commit — one pure op,
//! [`finish`], whichever way the attempt ended. The code half of a landing (rebase, check, the atomic push of the
//! branch with this change) is the runner's (`runner::landing`).

use std::time::Duration;

use super::{Actor, Board, Change, DomainError};
use crate::model::{Kind, Task};
use crate::time::Timestamp;
use crate::usage::{Limit, Usage};

/// How an attempt ended.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// Its code is on the target as `code` (`None`: it changed nothing, and that counts as done).
    Done { code: Option<&'a str> },
    /// It failed for `reason`; `for_good`: no further attempt (its budget is spent); `kept`: where its work was
    /// kept for a person.
    Failed { reason: &'a str, for_good: bool, kept: Option<&'a str> },
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
            let (ch, t) = super::done(board, actor, f.id, Some(f.epoch), code, note, f.usage)?;
            (ch, t, None)
        }
        Outcome::Failed { reason, for_good, kept } => {
            let (reason, kept) = (reason.to_string(), kept.map(str::to_string));
            let (ch, t) = super::fail(
                board,
                actor,
                f.id,
                Some(f.epoch),
                super::Failing { reason, usage: f.usage, for_good, kept },
            )?;
            (ch, t, Some(f.id))
        }
    };
    let ch = with_note(ch, f.id, f.note);
    let go_on = f.claim_next && !f.stopped && super::cycle::budget_spent_after(board, &ch, &f.cycle_budget).is_none();
    let (ch, next) = then_claim(board, actor, ch, go_on, f.lease, except);
    Ok((ch, Finished { task, next }))
}

/// What one landing records on the board: the task whose code is on the target as `code`, its claim, its hand-off,
/// and whether to claim the next task with it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub id: &'a str,
    pub epoch: u64,
    /// The commit its code landed as.
    pub code: &'a str,
    /// The agent's hand-off.
    pub note: Option<&'a str>,
    pub claim_next: bool,
    pub lease: Duration,
    /// What the attempt spent (its conflict runs included).
    pub usage: Option<Usage>,
    pub cycle_budget: Limit,
}

/// A landing on `board` ([`finish`]): `done` with the landed commit and the hand-off, and the next claim in the same
/// commit (unless `stopped`: the judge said stop); the next task claimed.
pub fn record(
    board: &Board,
    actor: &Actor,
    stopped: bool,
    l: &Record<'_>,
) -> Result<(Change, Option<Task>), DomainError> {
    let f = Finish {
        id: l.id,
        epoch: l.epoch,
        outcome: Outcome::Done { code: Some(l.code) },
        note: l.note,
        usage: l.usage,
        claim_next: l.claim_next,
        stopped,
        cycle_budget: l.cycle_budget,
        lease: l.lease,
    };
    let (ch, finished) = finish(board, actor, &f)?;
    Ok((ch, finished.next))
}

/// What [`land_batch`] made: the change, the board after it, each landing's next task.
pub type Batched = (Change, Board, Vec<Option<Task>>);

/// The state half of a batch of landings (a runner process that hosts several agents publishes what they finished
/// together): each landing's [`record`], as its agent's, applied in order to `board` (each sees the claims of those
/// before it), in one change; the board after it, and each landing's next task. `stopped`: the judge said stop (no
/// next claims). `Err((k, e))`: landing `k` is refused (its claim is gone) — it leaves the batch, and nothing is
/// published.
pub fn land_batch(
    board: &Board,
    now: Timestamp,
    stopped: bool,
    landings: &[(&str, Record<'_>)],
) -> Result<Batched, (usize, DomainError)> {
    let mut after = board.clone();
    let mut ch = Change::default();
    let mut nexts = Vec::with_capacity(landings.len());
    for (k, (agent, l)) in landings.iter().enumerate() {
        let actor = Actor { agent: agent.to_string(), now };
        let (c, next) = record(&after, &actor, l.claim_next && stopped, l).map_err(|e| (k, e))?;
        super::apply(&mut after, &c);
        ch = ch.then(c);
        nexts.push(next);
    }
    Ok((ch, after, nexts))
}

/// Fold "claim the next ready work task" into `ch` when wanted and possible; never `except` (the task this worker
/// just failed: another agent should have the next try).
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
