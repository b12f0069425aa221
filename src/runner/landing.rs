//! The code half of a worker's landing: a type that owns what the attempts of one landing share ([`Landing`]:
//! rebase the work onto the target's newest tip, run the check, say which commit to land), and the keeper of a
//! claim's lease while something long runs ([`LeaseKeeper`]: the agent, a conflict run, the check). The state half
//! is a pure op (`ops::land::finish`); `txn::Swarm::land` puts both in one atomic update.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::time::Duration;

use gix::ObjectId;

use super::worker::{Abort, Job, MAX_CHECK_RUNS, ROLL_FORWARD_DEPTH, resolve_conflict, run_check};
use super::{Event, RunError, Runner, git};
use crate::model::Task;
use crate::time::Timestamp;
use crate::txn::{TargetCheck, TxnError};

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
    wt: &'a Path,
    task: &'a Task,
    keeper: &'a LeaseKeeper,
    /// The target commit the work is built on now (it moves with each rebase).
    base: ObjectId,
    /// Every commit of the work is stamped as this claim's landing already (`hooks::trailer`).
    stamped: bool,
    /// The work's tip as the runner knows it, and whether the work tree shows it (an in-process rebase moves the
    /// one and not the other; a check may dirty the tree).
    head: ObjectId,
    synced: bool,
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
    /// `head`: the work's tip in `wt`; `stamped`: all its commits are stamped as this claim's landing already.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        r: &'a Runner<'r>,
        job: &'a Job<'a>,
        wt: &'a Path,
        task: &'a Task,
        keeper: &'a LeaseKeeper,
        base: ObjectId,
        head: ObjectId,
        stamped: bool,
    ) -> Self {
        Landing {
            r,
            job,
            wt,
            task,
            keeper,
            base,
            stamped,
            head,
            synced: true,
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
                self.events.extend(refused_warnings(id, &self.job.config.target, &found.refused));
                if let Some((code, _)) = found.code {
                    return Err(Abort::AlreadyLanded(code));
                }
            }
        }
        if tip != self.base || !self.stamped {
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
        self.check()?;
        Ok(self.head)
    }

    /// What is left to report, once the landing is over.
    pub(super) fn into_events(self) -> Vec<Event> {
        self.events
    }

    /// Put the work tree at the work's tip (after an in-process rebase moved it, or a check dirtied it).
    fn sync(&mut self) -> Result<(), Abort> {
        if !self.synced {
            git::run(self.wt, &["reset", "--hard", "--quiet", &self.head.to_string()]).map_err(fail)?;
            git::run(self.wt, &["clean", "-fdq"]).map_err(fail)?;
            self.synced = true;
        }
        Ok(())
    }

    /// Rebase the work onto `tip`: in-process when nothing conflicts (most landings after a lost race touch other
    /// paths than what landed meanwhile), else with git in the work tree, the agent run again on a conflict.
    fn rebase(&mut self, tip: ObjectId) -> Result<(), Abort> {
        let r = self.r;
        let (id, epoch) = (self.task.id.as_str(), self.keeper.epoch);
        let fast =
            super::rebase::rebase_in_process(&r.swarm.local, tip, self.base, self.head, id, epoch, &r.who, (r.clock)());
        match fast {
            Ok(Some(new)) => {
                self.head = new;
                self.synced = false;
            }
            _ if self.batched => return Err(Abort::Conflicted),
            _ => {
                self.sync()?;
                match git::rebase(self.wt, tip, self.base, &r.commit_ident).map_err(fail)? {
                    git::Rebased::Clean => {}
                    git::Rebased::Conflict(files) => {
                        let keeper = self.keeper;
                        let tries = self.job.settings.conflict_tries;
                        let res =
                            resolve_conflict(r, self.job, self.wt, self.task, files, tries, &mut self.events, &|| {
                                keeper.keep(r)
                            });
                        self.events.extend(keeper.drain());
                        if let Some(why) = keeper.lost() {
                            return Err(Abort::LostClaim(why));
                        }
                        res?;
                    }
                }
                self.head = git::head_fast(self.wt).map_err(fail)?;
                // A conflict run commits too: what it took of the agents' own files goes, as after the work.
                let scope = &self.task.scope;
                let artifact =
                    |p: &str| crate::hooks::agent::is_agent_artifact(p) && !crate::hooks::agent::in_scope(p, scope);
                if let Some(clean) =
                    super::rebase::strip_new_paths(&r.swarm.local, tip, self.head, &artifact).map_err(fail)?
                {
                    git::run(self.wt, &["reset", "--hard", "--quiet", &clean.to_string()]).map_err(fail)?;
                    self.head = clean;
                }
                self.synced = true;
                // Whatever `Swarm-*` lines the agent's commits (or a conflict run's) carry go; the runner's own
                // are written (the tree is the same: the work tree shows it, only HEAD differs).
                // No such chain (an agent that threw the rebase away, a merge of a conflict run): `prepare` says
                // why it does not land.
                if let Some(stamped) =
                    super::rebase::stamp_chain(&r.swarm.local, tip, self.head, id, epoch).map_err(fail)?
                    && stamped != self.head
                {
                    self.head = stamped;
                    self.synced = false;
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
        if self.checks_run > MAX_CHECK_RUNS {
            return Err(Abort::Fail(format!(
                "the target moved during each of {MAX_CHECK_RUNS} runs of the check; giving up this attempt"
            )));
        }
        self.sync()?;
        let cmd = cmd.clone();
        let (run, tail) = self.run_check_on(&cmd, self.head)?;
        if !run.passed {
            // With a baseline, a red target is the yardstick: only what the change makes worse counts.
            let worse = match self.job.settings.check_baseline {
                false => Some("the check failed".to_string()),
                true => {
                    let base = self.base;
                    let on_base = match self.kept(&cmd).get(base) {
                        Some(b) => b,
                        None => {
                            // The target's tip, checked out in this work tree for its own run (the work is
                            // committed; `sync` puts it back).
                            git::run(self.wt, &["reset", "--hard", "--quiet", &base.to_string()]).map_err(fail)?;
                            git::run(self.wt, &["clean", "-fdq"]).map_err(fail)?;
                            self.synced = false;
                            self.run_check_on(&cmd, base)?.0
                        }
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

    /// Run the check in the work tree as it is (showing `commit`), read its report, and keep the run for `commit`.
    fn run_check_on(&mut self, cmd: &str, commit: ObjectId) -> Result<(crate::check::CheckRun, Vec<String>), Abort> {
        let (r, keeper) = (self.r, self.keeper);
        let report = self.job.settings.check_report.clone();
        if let Some(rep) = &report {
            super::baseline::clear_report(self.wt, rep);
        }
        // The check runs the agent's code (its tests, its Makefile): what it plants in `.git` is put back too.
        let guard = r.guard(self.wt);
        let timeout = self.job.settings.task_timeout;
        let out = run_check(r, self.wt, cmd, timeout, self.job.config, &|| keeper.keep(r));
        self.events.extend(guard.restore().into_iter().map(Event::Warning));
        self.events.extend(keeper.drain());
        // Whatever the check changed in the tree is not part of the work.
        self.synced = false;
        if let Some(why) = keeper.lost() {
            return Err(Abort::LostClaim(why));
        }
        let tests = match report.as_deref().map(|rep| super::baseline::read_report(self.wt, rep)) {
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
        let run = crate::check::CheckRun { passed: out.0, tests };
        self.kept(cmd).put(commit, &run);
        Ok((run, out.1))
    }
}

fn fail(e: impl std::fmt::Display) -> Abort {
    Abort::Fail(e.to_string())
}

/// `branch` of the target fetched, and checked against what this clone saw of it ([`target_checked`]).
pub(super) fn fetch_target(r: &mut Runner<'_>, branch: &str) -> Result<Option<ObjectId>, RunError> {
    let Some(tip) = r.swarm.fetch_branch(branch)? else { return Ok(None) };
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
