//! The code half of a worker's landing: a type that owns what the attempts of one landing share ([`Landing`]:
//! rebase the work onto the target's newest tip, run the check, say which commit to land), and the keeper of a
//! claim's lease while something long runs ([`LeaseKeeper`]: the agent, a conflict run, the check). The state half
//! is a pure op (`ops::land::finish`); `txn::Swarm::land` puts both in one atomic update.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};

use super::rebase::{Replay, Step, Stop};
use super::slot::Slot;
use super::status::Phase;
use super::{Event, Role, RunError, RunSettings, Runner, prompts};
use crate::agent::{Backend, Exit, Prepared};
use crate::model::Task;
use crate::ops::{self, Actor, Board, Change, DomainError};
use crate::time::Timestamp;
use crate::usage::Limit;
use crate::{TargetCheck, TxnError};

mod check;
mod conflict;
mod lease;

pub(crate) use check::{run_check, run_contained};
pub(crate) use lease::LeaseKeeper;

/// One landing of a worker's attempt: its work in `wt`, built on `base`, and what its tries share. `txn` calls
/// [`Landing::prepare`] with the target's newest tip on every try (after each lost race).
pub(super) struct Landing<'a, 'r> {
    r: &'a Runner<'r>,
    job: &'a Job<'a>,
    slot: &'a Slot,
    task: &'a Task,
    keeper: &'a LeaseKeeper,
    /// The target commit the work is built on now (it moves with each rebase).
    base: ObjectId,
    /// Every commit of the work is stamped as this claim's landing already (`hooks::trailer`).
    stamped: bool,
    /// The work's tip (objects in the clone; no work tree shows it until a check checks it out).
    head: ObjectId,
    /// The base the check passed on last, and how often it ran.
    checked_on: Option<ObjectId>,
    checks_run: u32,
    /// What to report once the landing is over (conflict runs, renewals, files the check planted).
    events: Vec<Event>,
    /// Prepared for a batch of the landing desk: a rebase that needs git and perhaps the agent is not done here
    /// ([`Abort::Conflicted`]: the task leaves the batch and lands alone).
    pub(super) batched: bool,
}

impl<'a, 'r> Landing<'a, 'r> {
    /// `head`: the work's tip; `stamped`: all its commits are stamped as this claim's landing already; `slot`: where
    /// its checks and conflict runs run.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        r: &'a Runner<'r>,
        job: &'a Job<'a>,
        slot: &'a Slot,
        task: &'a Task,
        keeper: &'a LeaseKeeper,
        base: ObjectId,
        head: ObjectId,
        stamped: bool,
    ) -> Self {
        Landing {
            r,
            job,
            slot,
            task,
            keeper,
            base,
            stamped,
            head,
            checked_on: None,
            checks_run: 0,
            events: vec![],
            batched: false,
        }
    }

    /// The commit to land on the target's tip `tip`: the work rebased onto it (stamped on the first pass), checked.
    /// Gives up ([`Abort`]) on a signal, a lost claim, a conflict nobody resolved, a failing check, work that is not
    /// the runner's landing of this claim, when the target holds this task's code already, or when the target lost
    /// done tasks' code since this clone saw it.
    pub(super) fn prepare(&mut self, tip: ObjectId) -> Result<ObjectId, Abort> {
        self.prepare_as(tip, true, true)
    }

    /// [`Landing::prepare`] for a batch of the landing desk: with the check left to the batch when `check` is false
    /// (`[run] check_policy = "tip"`: the batch's checker checks the tip of what lands together,
    /// [`Landing::check_tip`]), and `tip` checked against what this clone saw of the target only when `on_target`
    /// (else it is the landing before this one in the batch, which the target has not seen, and may never).
    pub(super) fn prepare_as(&mut self, tip: ObjectId, check: bool, on_target: bool) -> Result<ObjectId, Abort> {
        if self.r.stopping() {
            return Err(Abort::Interrupted);
        }
        let (id, epoch) = (self.task.id.as_str(), self.keeper.epoch);
        // Nothing lands on a target that lost what this clone saw of it.
        let branch = format!("refs/heads/{}", self.job.config.target);
        if on_target {
            match target_checked(self.r, &branch, tip) {
                Ok(warning) => self.events.extend(warning),
                Err(e) => return Err(Abort::Stop(e.into())),
            }
        }
        // The target moved since the work's base: if what moved it is this very task's code (our own landing
        // whose state half failed, or a twin's of an earlier claim), there is nothing to land — finish it.
        if tip != self.base {
            let store = &self.r.swarm.local;
            if let Ok(found) = store.landed_commit(tip, id, Some(self.base), 1..=epoch, ROLL_FORWARD_DEPTH) {
                // A landing of a later claim: this one was taken over (its lease ran out while the remote was away
                // or this runner stalled), and the board read at the claim is older than the target. Not a forgery
                // then, and nothing to rebase onto (each try would conflict with the task's own code). The board says.
                if let Some((commit, later)) = found.later
                    && !self.holds_claim()
                {
                    return Err(Abort::LostClaim(format!(
                        "commit {} on {} is the landing of a later claim (epoch {later}) of {id}",
                        &commit.to_string()[..12],
                        self.job.config.target
                    )));
                }
                self.events.extend(refused_warnings(id, &self.job.config.target, &found.refused));
                if let Some((code, _)) = found.code {
                    return Err(Abort::AlreadyLanded(code));
                }
            }
        }
        if tip != self.base || !self.stamped {
            self.r.phase(id, epoch, Phase::Rebase, None);
            self.rebase(tip)?;
        }
        // The rebased work must hold the branch's tip and add to it: an agent that aborted the rebase or reset the
        // tree would otherwise rewind the branch and drop work that has landed.
        let holds_tip = self.r.swarm.local.has_ancestor(self.head, tip, 100_000).unwrap_or(false);
        if self.head == tip || !holds_tip {
            return Err(Abort::Fail(format!(
                "after the rebase the work no longer builds on the target's tip {}: landing it would drop landed work",
                &tip.to_string()[..12]
            )));
        }
        // What lands is the runner's landing of this claim, commit by commit, and nothing else.
        if let Some(why) = super::rebase::unstamped(&self.r.swarm.local, tip, self.head, id, epoch).map_err(fail)? {
            return Err(Abort::Fail(why));
        }
        // It is a tree git itself would accept (S22: no `.git` in any spelling, no `..`, no `.gitmodules` that runs
        // a command): else checkouts abort and forges that check pushes refuse the landing.
        if let Some(why) = crate::fsck::refusal(&self.r.swarm.local.repo, tip, self.head).map_err(Abort::Fail)? {
            return Err(Abort::Held(format!(
                "the work holds what git refuses, so it did not land and is kept in this clone only: {why}"
            )));
        }
        // And it carries no secret the runner knows, nor a well-known token's shape (S21).
        if let Some(why) = self.secrets(tip)? {
            return Err(Abort::Held(why));
        }
        if check {
            self.check()?;
        }
        Ok(self.head)
    }

    /// Land the work through `publisher`: how it ended, and what is left to report (conflict runs, renewals —
    /// those of the lease keeper while the landing waited in a batch too —, files the check planted).
    pub(super) fn land(mut self, publisher: &dyn Publisher, rec: &Recording<'_>) -> (Landed, Vec<Event>) {
        self.r.phase(&self.task.id, self.keeper.epoch, Phase::Landing, None);
        let landed = publisher.publish(&mut self, rec);
        let mut events = self.events;
        events.extend(self.keeper.drain());
        (landed, events)
    }

    /// What a batch of the landing desk needs of this landing: the runner, the task's claim and its lease keeper.
    pub(super) fn parts(&self) -> (&'a Runner<'r>, &'a Task, u64, &'a LeaseKeeper) {
        (self.r, self.task, self.keeper.epoch, self.keeper)
    }

    /// The work as the landing started: its base, its tip, whether it is stamped; and the settings it runs with.
    pub(super) fn work(&self) -> (ObjectId, ObjectId, bool, &'a RunSettings) {
        (self.base, self.head, self.stamped, self.job.settings)
    }

    /// Why the work (what `self.head` adds over `tip`) must not land because of what looks like a secret, if it
    /// must not: the runner's own secrets by value ([`Runner::known_secrets`]) anywhere, token shapes outside
    /// `[run] secret_allow`. The reason names files and lines, never a value.
    fn secrets(&self, tip: ObjectId) -> Result<Option<String>, Abort> {
        let repo = &self.r.swarm.local.repo;
        let tree = |c: ObjectId| -> Result<ObjectId, Abort> {
            let commit = repo.find_commit(c).map_err(fail)?;
            Ok(commit.tree_id().map_err(fail)?.detach())
        };
        let known = self.r.known_secrets(self.job.backend);
        let globs = &self.job.settings.secret_allow;
        let allow = |p: &str| {
            globs.iter().any(|g| {
                gix::glob::wildmatch(g.as_bytes().into(), p.as_bytes().into(), gix::glob::wildmatch::Mode::empty())
            })
        };
        let found = crate::leaks::scan(repo, tree(tip)?, tree(self.head)?, &known, &allow).map_err(Abort::Fail)?;
        if found.is_empty() {
            return Ok(None);
        }
        let list: Vec<String> = found.iter().take(10).map(|f| f.to_string()).collect();
        let more = if found.len() > 10 { format!(" and {} more", found.len() - 10) } else { String::new() };
        let shapes_only = found.iter().all(|f| !f.known);
        Ok(Some(format!(
            "the work holds what looks like a secret, so it did not land and is kept in this clone only: {}{more}{}",
            list.join("; "),
            if shapes_only {
                " (not a secret, a test fixture? `[run] secret_allow = [\"<path glob>\"]` lets token shapes land there)"
            } else {
                ""
            }
        )))
    }

    /// Does the newest board still show this landing's claim live (`true` when it cannot be read: the publish
    /// then decides)?
    fn holds_claim(&self) -> bool {
        let Ok(snap) = self.r.read(false) else { return true };
        snap.board.tasks.get(self.task.id.as_str()).is_some_and(|t| {
            t.task.status == crate::model::Status::Claimed
                && t.task.claim.as_ref().is_some_and(|c| c.epoch == self.keeper.epoch)
        })
    }
}

/// What the state half of a landing records with the code: the `done` (with the agent's hand-off as its note) and
/// the claim of the next task in the same update, unless the judge stopped the swarm or the cycle spent its budget.
pub(super) struct Recording<'a> {
    /// The target branch (`refs/heads/…`).
    pub(super) branch: &'a str,
    pub(super) note: Option<&'a str>,
    pub(super) claim_next: bool,
    pub(super) lease: Duration,
    pub(super) cycle_budget: Limit,
}

/// How a landing ended.
pub(super) enum Landed {
    /// The code is on the target and the `done` on the state ref, in one atomic update; `next` the task claimed
    /// with it. `alone`: this runner's own update (a batch of the desk records what it saw of the target itself).
    Published { code: ObjectId, next: Option<Box<Task>>, lost_races: u32, alone: bool },
    /// Nothing was published: why.
    Aborted(Abort),
    /// The update failed: the claim is gone (`TxnError::Domain`), the remote refused it or could not be reached.
    Failed(TxnError),
}

/// Who publishes a landing, chosen once per landing: the runner alone ([`Alone`]: one atomic push of the branch
/// and the state) or the landing desk's next batch (`desk::Desk`, with the other agents of this process).
pub(super) trait Publisher {
    fn publish(&self, landing: &mut Landing<'_, '_>, rec: &Recording<'_>) -> Landed;
}

/// The runner publishes the landing itself (`txn::Swarm::land`).
pub(super) struct Alone;

impl Publisher for Alone {
    fn publish(&self, landing: &mut Landing<'_, '_>, rec: &Recording<'_>) -> Landed {
        let r = landing.r;
        let (id, epoch) = (landing.task.id.clone(), landing.keeper.epoch);
        let store = r.swarm.store();
        let published =
            r.swarm.land(&r.retry, &r.who, r.clock, rec.branch, &mut |tip| landing.prepare(tip), |snap, now, code| {
                let actor = Actor { agent: r.agent.clone(), now };
                let stopped = rec.claim_next && super::claim::judge_stopped(store, snap);
                let code_s = code.to_string();
                let l = ops::land::Record {
                    id: &id,
                    epoch,
                    code: &code_s,
                    note: rec.note,
                    claim_next: rec.claim_next,
                    lease: rec.lease,
                    // What the attempt spent, its conflict runs included: read when the landing is made.
                    usage: r.spent.of(&id, epoch),
                    cycle_budget: rec.cycle_budget,
                };
                let (ch, next) = landing_op(&snap.board, &actor, stopped, &l)?;
                Ok((ch, (next, code)))
            });
        match published {
            Ok(Ok(c)) => Landed::Published {
                code: c.value.1,
                next: c.value.0.map(Box::new),
                lost_races: c.lost_races,
                alone: c.commit.is_some(),
            },
            Ok(Err(a)) => Landed::Aborted(a),
            Err(e) => Landed::Failed(e),
        }
    }
}

fn fail(e: impl std::fmt::Display) -> Abort {
    Abort::Fail(e.to_string())
}

/// `branch` of the target fetched, and checked against what this clone saw of it ([`target_checked`]).
pub(super) fn fetch_target(r: &mut Runner<'_>, branch: &str) -> Result<Option<ObjectId>, RunError> {
    let Some(tip) = r.branch_tip(branch)? else { return Ok(None) };
    if let Some(w) = target_checked(r, branch, tip)? {
        r.emit(w);
    }
    Ok(Some(tip))
}

/// `tip` of `branch` against what this clone saw of it (`Swarm::check_target`): a rewind that took the code of done
/// tasks is an error (`TxnError::TargetRewound`: the runner stops before it lands or works on it, until a person
/// puts the code back or takes the target as it is); a rewind that took none (a rewrite, commits of nobody's task)
/// is said, and taken.
pub(super) fn target_checked(r: &Runner<'_>, branch: &str, tip: ObjectId) -> Result<Option<Event>, TxnError> {
    match r.swarm.check_target(branch, tip)? {
        TargetCheck::First | TargetCheck::Holds => Ok(None),
        TargetCheck::Rewound(loss) if loss.gone.is_empty() => {
            Ok(Some(Event::Warning(loss.describe(&r.swarm.remote_label))))
        }
        TargetCheck::Rewound(loss) => {
            Err(TxnError::TargetRewound { remote: r.swarm.remote_label.clone(), loss: Box::new(loss) })
        }
    }
}

/// What a runner says of commits on the target that name task `id` without being a landing of one of its claims
/// (a forged or a hand-written `Swarm-Task:`): never taken as its code.
pub(super) fn refused_warnings(id: &str, target: &str, refused: &[(ObjectId, String)]) -> Vec<Event> {
    refused
        .iter()
        .map(|(commit, why)| {
            Event::Warning(format!(
                "{id}: commit {} on {target} names {id} but is no runner's landing of a claim of it ({why}): not \
                 taken as its code",
                &commit.to_string()[..12]
            ))
        })
        .collect()
}

/// Why landing gave up before publishing anything.
pub(super) enum Abort {
    /// A rebase conflict the agent could not resolve, a failing check, a broken work tree…: fail the task.
    Fail(String),
    /// A conflict run stopped at the task's budget: fail the task for good.
    Budget(String),
    /// A signal arrived.
    Interrupted,
    /// In a batch of the landing desk: the task leaves the batch and lands alone — its rebase needs a conflict run,
    /// or its check failed on top of the batch's other landings.
    Conflicted,
    /// The claim was taken over while the check or a conflict run went on.
    LostClaim(String),
    /// The conflict run's agent could not start (exit 126/127): a runner error, no attempt spent.
    CannotStart(RunError),
    /// The target lost the code of done tasks since this clone saw it (`TxnError::TargetRewound`): nothing lands on
    /// it; the runner stops, the claim given back unspent, the work kept aside.
    Stop(RunError),
    /// The target holds this task's code already (`Swarm-Task:` on a commit since the work's base): a landing whose
    /// state half failed (the remote took the branch and not the state ref). It is finished, never landed again.
    AlreadyLanded(ObjectId),
    /// The work must not leave this clone — it carries what looks like a secret (`leaks::scan`: pushed aside, it
    /// would carry it to the remote), or trees git refuses (`fsck::refusal`: a forge that checks pushes refuses
    /// them): fail the task, the work kept in this clone only.
    Held(String),
}

/// How far back (first-parent commits of the target) a takeover looks for the task's code before it runs an agent.
pub(super) const ROLL_FORWARD_DEPTH: usize = 10_000;

/// The state half of a landing on `board` ([`ops::land::record`]), scrubbed of the runner's secrets.
pub(super) fn landing_op(
    board: &Board,
    actor: &Actor,
    stopped: bool,
    l: &ops::land::Record<'_>,
) -> Result<(Change, Option<Task>), DomainError> {
    let (ch, next) = ops::land::record(board, actor, stopped, l)?;
    Ok((super::scrub(ch), next))
}

/// What `finish` needs of the task's start: settings, config and the state it was read from (no second read).
pub(super) struct Job<'a> {
    pub(super) settings: &'a RunSettings,
    pub(super) config: &'a crate::model::Config,
    pub(super) state: ObjectId,
    pub(super) backend: &'a Prepared,
}
