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
use crate::txn::{TargetCheck, TxnError};
use crate::usage::Limit;

/// Keeps the lease of one claim alive while something long runs: [`LeaseKeeper::keep`] is its poll (renew when a
/// third of the lease is left). What it has to report is kept for the caller to emit ([`LeaseKeeper::drain`]), and
/// a claim that was lost is remembered ([`LeaseKeeper::lost`]).
pub(super) struct LeaseKeeper {
    task: String,
    epoch: u64,
    lease: Duration,
    until: Cell<Timestamp>,
    lost: RefCell<Option<String>>,
    events: RefCell<Vec<Event>>,
}

impl LeaseKeeper {
    pub(super) fn new(task: &str, epoch: u64, until: Timestamp, lease: Duration) -> LeaseKeeper {
        LeaseKeeper {
            task: task.to_string(),
            epoch,
            lease,
            until: Cell::new(until),
            lost: RefCell::default(),
            events: RefCell::default(),
        }
    }

    /// One poll: renew when due. `false` once the claim is lost (taken over, or finished by someone else).
    pub(super) fn keep(&self, r: &Runner<'_>) -> bool {
        if self.lost.borrow().is_some() {
            return false;
        }
        let mut until = self.until.get();
        let alive = match r.try_renew(&self.task, self.epoch, &mut until, self.lease) {
            Ok(e) => {
                self.events.borrow_mut().extend(e);
                true
            }
            Err(why) => {
                *self.lost.borrow_mut() = Some(why);
                false
            }
        };
        self.until.set(until);
        alive
    }

    /// Why the claim was lost, if it was.
    pub(super) fn lost(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// What the polls so far have to report (renewals, a remote away for a moment).
    pub(super) fn drain(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.borrow_mut())
    }

    /// Until when the claim is held, as far as this keeper knows.
    pub(super) fn until(&self) -> Timestamp {
        self.until.get()
    }

    /// The epoch of the claim kept.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Renew by `lease` from now on: a holder that keeps a claim across reads of the board (the planner) renews
    /// by the lease of the board it read last.
    pub(super) fn set_lease(&mut self, lease: Duration) {
        self.lease = lease;
    }
}

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
        if self.r.stopping() {
            return Err(Abort::Interrupted);
        }
        let (id, epoch) = (self.task.id.as_str(), self.keeper.epoch);
        // Nothing lands on a target that lost what this clone saw of it.
        let branch = format!("refs/heads/{}", self.job.config.target);
        match target_checked(self.r, &branch, tip) {
            Ok(warning) => self.events.extend(warning),
            Err(e) => return Err(Abort::Stop(e.into())),
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
        self.check()?;
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

    /// Rebase the work onto `tip`, in the runner's own state: in-process when nothing conflicts (most landings
    /// after a lost race touch other paths than what landed meanwhile), else commit by commit with `git
    /// merge-tree` in the clone's git directory, the agent run again on a conflict to resolve its files.
    fn rebase(&mut self, tip: ObjectId) -> Result<(), Abort> {
        let r = self.r;
        let (id, epoch) = (self.task.id.as_str(), self.keeper.epoch);
        let fast =
            super::rebase::rebase_in_process(&r.swarm.local, tip, self.base, self.head, id, epoch, &r.who, (r.clock)());
        match fast {
            Ok(Some(new)) => self.head = new,
            _ if self.batched => return Err(Abort::Conflicted),
            _ => {
                let replay =
                    Replay { store: &r.swarm.local, task: id, epoch, committer: &r.who, now: (r.clock)(), attrs: tip };
                let commits = super::rebase::commits(&r.swarm.local, self.base, self.head).map_err(Abort::Fail)?;
                let mut step = replay.replay(&commits, tip).map_err(Abort::Fail)?;
                let mut runs = 0;
                let new = loop {
                    match step {
                        Step::Done(new) => break new,
                        Step::Stopped(stop) => {
                            let keeper = self.keeper;
                            let tries = self.job.settings.conflict_tries.saturating_sub(runs);
                            r.phase(id, epoch, Phase::Conflict, None);
                            let res = resolve_conflict(
                                r,
                                self.job,
                                self.slot,
                                self.task,
                                &stop,
                                tries,
                                &mut self.events,
                                &|| keeper.keep(r),
                            );
                            self.events.extend(keeper.drain());
                            if let Some(why) = keeper.lost() {
                                return Err(Abort::LostClaim(why));
                            }
                            let (resolved, used) = res?;
                            runs += used;
                            r.phase(id, epoch, Phase::Rebase, None);
                            step = replay.resume(&stop, resolved).map_err(Abort::Fail)?;
                        }
                    }
                };
                self.head = new;
                // A conflict run's files are taken as the work's: what it added of the agents' own files goes, as
                // after the work.
                let scope = &self.task.scope;
                let artifact =
                    |p: &str| crate::hooks::agent::is_agent_artifact(p) && !crate::hooks::agent::in_scope(p, scope);
                if let Some(clean) =
                    super::rebase::strip_new_paths(&r.swarm.local, tip, self.head, &artifact).map_err(fail)?
                {
                    self.head = clean;
                }
                // Stamped by the replay already; a chain the strip rewrote is stamped again (same trees).
                if let Some(stamped) =
                    super::rebase::stamp_chain(&r.swarm.local, tip, self.head, id, epoch).map_err(fail)?
                {
                    self.head = stamped;
                }
            }
        }
        self.stamped = true;
        self.base = tip;
        Ok(())
    }

    /// Run the check on the rebased work, once per base: each lost race to a moving target runs it again, so a
    /// check slower than the gap between landings gives up after [`MAX_CHECK_RUNS`].
    fn check(&mut self) -> Result<(), Abort> {
        let Some(cmd) = &self.job.settings.check else { return Ok(()) };
        if self.checked_on == Some(self.base) {
            return Ok(());
        }
        self.checks_run += 1;
        self.r.phase(&self.task.id, self.keeper.epoch, Phase::Check, None);
        if self.checks_run > MAX_CHECK_RUNS {
            return Err(Abort::Fail(format!(
                "the target moved during each of {MAX_CHECK_RUNS} runs of the check; giving up this attempt"
            )));
        }
        let cmd = cmd.clone();
        let (run, tail, cannot_start) = self.run_check_on(&cmd, self.head)?;
        if cannot_start {
            // A program missing on this machine (tox not installed) fails every landing alike: the runner's set-up,
            // no attempt spent — unless it starts on the target and only the change broke it.
            let (_, base_tail, on_base_too) = self.run_check_on(&cmd, self.base)?;
            if on_base_too {
                return Err(Abort::CannotStart(RunError::Setup(format!(
                    "the check `{cmd}` cannot start here, on the target's tip {} too: {} — install what it runs \
                     where the runner runs (agents and checks run in a sandbox: `git swarm doctor` says what it \
                     sees), or change [run] check; no attempt was spent",
                    &self.base.to_string()[..12],
                    super::reason_from("", &base_tail).trim_start_matches(": ")
                ))));
            }
            return Err(Abort::Fail(super::reason_from(
                "the check cannot start with this change (it starts on the target)",
                &tail,
            )));
        }
        if !run.passed {
            // With a baseline, a red target is the yardstick: only what the change makes worse counts.
            let worse = match self.job.settings.check_baseline {
                false => Some(format!("the check failed{}", crate::check::failing_named(&run, &tail))),
                true => {
                    let base = self.base;
                    let on_base = match self.kept(&cmd).get(base) {
                        Some(b) => b,
                        // The target's tip, checked out afresh for its own run.
                        None => self.run_check_on(&cmd, base)?.0,
                    };
                    match crate::check::compare(&on_base, &run) {
                        crate::check::Compared::Passes => None,
                        crate::check::Compared::NotWorse { failing, fixed } => {
                            let counted =
                                failing.map(|n| format!(" ({n} failing test(s) on both)")).unwrap_or_default();
                            let fixed = match fixed.len() {
                                0 => String::new(),
                                n => format!(
                                    "; it fixes {n}: {}",
                                    fixed.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                                ),
                            };
                            self.events.push(Event::Warning(format!(
                                "{}: the check fails on the target {} too{counted} and this change makes nothing \
                                 worse{fixed}: landing it",
                                self.task.id,
                                &base.to_string()[..12]
                            )));
                            None
                        }
                        crate::check::Compared::Unknown => {
                            self.events.push(Event::Warning(format!(
                                "{}: the check fails on the target {} too, and whether this change makes it worse \
                                 cannot be told: no report ([run] check_report) and no count of failing tests in its \
                                 output. Landing it (docs/check.md)",
                                self.task.id,
                                &base.to_string()[..12]
                            )));
                            None
                        }
                        crate::check::Compared::Worse(why) => {
                            Some(format!("the check is worse than on the target {} ({why})", &base.to_string()[..12]))
                        }
                    }
                }
            };
            if let Some(what) = worse {
                // In a batch the check ran on the landings before this one too: whose code failed it is not known
                // (and one of them may leave the batch yet). Alone, on the target's own tip, it counts.
                if self.batched {
                    return Err(Abort::Conflicted);
                }
                return Err(Abort::Fail(super::reason_from(&what, &tail)));
            }
        }
        self.checked_on = Some(self.base);
        Ok(())
    }

    /// Where this check's runs are kept ([`super::baseline::Kept`]).
    fn kept(&self, cmd: &str) -> super::baseline::Kept {
        super::baseline::Kept::new(&self.r.places().base, cmd, self.job.settings.check_report.as_deref())
    }

    /// Run the check on `commit`, in a work tree made afresh for it, read its report, and keep the run for
    /// `commit`.
    fn run_check_on(
        &mut self,
        cmd: &str,
        commit: ObjectId,
    ) -> Result<(crate::check::CheckRun, Vec<String>, bool), Abort> {
        let (r, keeper) = (self.r, self.keeper);
        let report = self.job.settings.check_report.clone();
        self.slot.checkout(&r.swarm.local.repo, commit, r.agent_owner(), &[]).map_err(Abort::Fail)?;
        // The check runs the change's code (its tests, its Makefile): uncontained, what it plants in `.git` is put
        // back too.
        let guard = r.guard();
        let timeout = self.job.settings.task_timeout;
        let out = run_check(r, self.slot, commit, cmd, timeout, self.job.config, &|| keeper.keep(r));
        self.events.extend(guard.restore().into_iter().map(Event::Warning));
        self.events.extend(keeper.drain());
        if let Some(why) = keeper.lost() {
            return Err(Abort::LostClaim(why));
        }
        if let Some(why) = out.setup {
            return Err(Abort::CannotStart(RunError::Setup(format!("the check `{cmd}` could not be run: {why}"))));
        }
        let tests = match report.as_deref().map(|rep| super::baseline::read_report(&self.slot.tree, rep)) {
            None | Some(Ok(None)) => None,
            Some(Ok(Some(t))) => Some(t),
            Some(Err(why)) => {
                self.events.push(Event::Warning(format!(
                    "{}: the check's report cannot be used ({why}); only its exit status counts",
                    self.task.id
                )));
                None
            }
        };
        let failed = crate::check::failed_in_output(&out.tail);
        let run = crate::check::CheckRun { passed: out.passed, tests, failed };
        // A run that could not start is no result of this commit's.
        if !out.cannot_start {
            self.kept(cmd).put(commit, &run);
        }
        Ok((run, out.tail, out.cannot_start))
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
    let Some(tip) = r.swarm.riding_out(&r.retry, || r.swarm.fetch_branch(branch))? else { return Ok(None) };
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

/// Runs of the check for one landing before it gives up (each lost race to a moved target re-runs it).
pub(super) const MAX_CHECK_RUNS: u32 = 8;

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

/// Resolve the conflicts of a stopped replay with the agent, up to `tries` runs: each run gets a work tree made
/// afresh with the merge's tree (conflict markers in the conflicted files, their stages in the index, `HEAD` the
/// replayed tip so far, `REBASE_HEAD` the commit being replayed), and the runner takes what it left as data
/// ([`super::snapshot`]). A conflicted file counts as resolved when it no longer holds what git left in it nor
/// markers of its own, or is gone. The resolved tree, and how many runs it took.
#[allow(clippy::too_many_arguments)]
pub(super) fn resolve_conflict(
    r: &Runner<'_>,
    job: &Job<'_>,
    slot: &Slot,
    task: &Task,
    stop: &Stop,
    tries: u32,
    events: &mut Vec<Event>,
    keep_lease: &dyn Fn() -> bool,
) -> Result<(ObjectId, u32), Abort> {
    let (backend, timeout, target) = (job.backend, job.settings.task_timeout, &job.config.target);
    let template = prompts::load(r.swarm.store(), job.state, "conflict").0;
    let repo = &r.swarm.local.repo;
    // What git left in each conflicted file (the blob with markers), to tell which the agent changed.
    let at = |tree: ObjectId, path: &BString| -> Option<ObjectId> {
        let t = repo.find_tree(tree).ok()?;
        t.lookup_entry_by_path(path.to_path_lossy()).ok().flatten().map(|e| e.object_id())
    };
    let mut open: Vec<(BString, Option<ObjectId>)> =
        stop.conflicts.iter().map(|c| (c.path.clone(), at(stop.tree, &c.path))).collect();
    let mut current = stop.tree;
    for attempt in 1..=tries {
        let files: Vec<String> = open.iter().map(|(p, _)| p.to_string()).collect();
        events.push(Event::Conflict { task: task.id.clone(), files: files.clone(), attempt });
        let try_s = format!("{attempt} of {tries}");
        let replayed = short_commit(repo, stop.commit);
        let prompt = prompts::render(
            &template,
            &[
                ("task_id", &task.id),
                ("task_title", &task.title),
                ("task_body", &task.body),
                ("target", target),
                ("conflict_files", &files.join("\n")),
                ("replayed", &replayed),
                ("try", &try_s),
            ],
        );
        let left: Vec<super::slot::Conflicted> =
            stop.conflicts.iter().filter(|c| open.iter().any(|(p, _)| *p == c.path)).cloned().collect();
        let checkout = slot.checkout(&r.swarm.local.repo, current, r.agent_owner(), &left).map_err(Abort::Fail)?;
        let mut env = r.base_env(Role::Worker);
        env.push(("GIT_SWARM_TASK_ID".into(), task.id.clone()));
        env.push(("GIT_SWARM_TASK_TITLE".into(), task.title.clone()));
        env.push(("GIT_SWARM_CONFLICT".into(), "1".into()));
        env.push(("GIT_SWARM_HANDOFF_FILE".into(), slot.run.join("handoff.md").to_string_lossy().into_owned()));
        let epoch = task.claim.as_ref().map_or(task.epoch, |c| c.epoch);
        let run = (slot, Some(stop.onto), Some(stop.commit));
        let (out, planted) = r
            .run_agent(
                backend,
                run,
                &prompt,
                env,
                timeout,
                Some((task, epoch)),
                (Role::Worker, job.config),
                &mut || keep_lease(),
            )
            .map_err(|e| Abort::Fail(e.to_string()))?;
        events.extend(planted.into_iter().map(Event::Warning));
        if let Err(e) = super::cannot_start(Role::Worker, backend, &out) {
            return Err(Abort::CannotStart(e));
        }
        if let Exit::OverBudget(why) = &out.exit {
            return Err(Abort::Budget(format!("the task spent its budget ({why}) in a conflict run")));
        }
        if out.exit == Exit::Stopped {
            return Err(if r.stopping() {
                Abort::Interrupted
            } else {
                Abort::LostClaim("taken over during a conflict run".into())
            });
        }
        if !out.exit.success() {
            return Err(Abort::Fail(super::reason_from(
                &format!("a rebase conflict in {} was not resolved: the agent {}", files.join(", "), out.exit),
                &out.tail,
            )));
        }
        // What it left, taken over the tree it was given: its own commits in this run do not count, its files do.
        let tree = crate::agent::files::Dir::open(&slot.tree)
            .map_err(|e| Abort::Fail(format!("the conflict run left no work tree: {e}")))?;
        let ignores = super::snapshot::Ignores {
            excludes: crate::hooks::agent::excludes_text(&r.common_dir()),
            info_exclude: crate::agent::files::read_text(&r.common_dir().join("info/exclude"), 1 << 20)
                .unwrap_or_default(),
        };
        let taken = super::snapshot::take(repo, &tree, checkout.tree, &ignores, None, &checkout.known)
            .map_err(|e| Abort::Fail(format!("cannot take what the conflict run left: {e}")))?;
        events.extend(taken.left_out.iter().map(|w| Event::Warning(format!("{}: {w}", task.id))));
        current = taken.tree;
        let still = super::slot::unresolved(repo, current, &open);
        if still.is_empty() {
            return Ok((current, attempt));
        }
        open.retain(|(p, _)| still.contains(p));
    }
    Err(Abort::Fail(format!("a rebase conflict was still unresolved after {tries} agent runs")))
}

/// `<12 hex> <subject>` of `id`, for a prompt.
fn short_commit(repo: &gix::Repository, id: ObjectId) -> String {
    let subject = repo
        .find_commit(id)
        .ok()
        .and_then(|c| c.message_raw_sloppy().lines().next().map(|l| l.to_str_lossy().into_owned()))
        .unwrap_or_default();
    format!("{} {subject}", &id.to_string()[..12])
}

/// Run the check `cmd` in the slot's work tree (checked out at `commit`; contained as the worker's agent is: it
/// runs the change's code), for at most `timeout`: whether it passed, and the last lines it printed.
pub(crate) fn run_check(
    r: &Runner<'_>,
    slot: &Slot,
    commit: ObjectId,
    cmd: &str,
    timeout: Duration,
    config: &crate::model::Config,
    keep_going: &dyn Fn() -> bool,
) -> Checked {
    let setup = |why: String| Checked { passed: false, tail: vec![why.clone()], setup: Some(why), cannot_start: false };
    let contained = match r.contain_run(slot, Role::Worker, None, config, Some(commit), None) {
        Ok(c) => c,
        Err(e) => return setup(e.to_string()),
    };
    let mut env = r.commit_ident.clone();
    env.extend(contained.env.iter().cloned());
    let inv = crate::agent::Invocation {
        cwd: &slot.tree,
        prompt: "",
        prompt_file: slot.run.join("check-input.txt"),
        env,
        log: None,
        timeout: Some(timeout),
        grace: Duration::from_secs(5),
        report: crate::agent::report::Report::Nothing,
        live: None,
        budget: None,
        contain: Some(contained.contain),
    };
    match crate::agent::run(&Backend::Command { exec: cmd.to_string() }, &inv, &mut || keep_going()) {
        Ok(out) => {
            let cannot_start = crate::agent::could_not_start(&out);
            let mut tail = out.tail;
            if !out.exit.success() {
                tail.push(format!("(the check {})", out.exit));
            }
            Checked { passed: out.exit.success(), tail, setup: None, cannot_start }
        }
        Err(e) => setup(e.to_string()),
    }
}

/// What a run of the check came to.
pub(crate) struct Checked {
    pub(crate) passed: bool,
    /// Its last lines.
    pub(crate) tail: Vec<String>,
    /// It could not be run at all (a sandbox that could not be made, a process that could not be started): the
    /// runner's set-up, never the change's.
    pub(crate) setup: Option<String>,
    /// It exited 126 or 127 at once, saying a program is missing: the runner's set-up when it does so on the target
    /// too, the change's when only with it (the change deleted a script).
    pub(crate) cannot_start: bool,
}
