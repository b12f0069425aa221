//! The worker: claim the best ready work task, run the agent in a fresh work tree at the tip of the target branch,
//! then land its commits and mark the task done in one atomic push (and claim the next task in the same push).

use std::path::Path;
use std::time::{Duration, Instant};

use gix::ObjectId;

use super::claim::{claim_op, judge_stopped};
use super::landing::{
    Abort, Alone, Job, Landed, Landing, LeaseKeeper, Publisher, ROLL_FORWARD_DEPTH, Recording, landing_op,
};
use super::{Event, Mode, Role, RunEnd, RunError, RunSettings, Runner, git, prompts};
use crate::Snapshot;
use crate::agent::{Exit, Prepared};
use crate::model::{Kind, Task};
use crate::ops::claim::Claimed;
use crate::ops::land::{Finish, Outcome};
use crate::ops::{self, DomainError};
use crate::time::Timestamp;
use crate::usage::Limit;
use crate::{Reach, TxnError};

mod agent;
mod claim;
mod finish;

pub(crate) use agent::reported_failure;
use agent::*;
use claim::*;
use finish::*;

/// Options of `git swarm run worker`.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerOptions {
    pub mode: Mode,
    pub max_tasks: Option<u64>,
}

/// What a worker did.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerStats {
    pub landed: u64,
    pub failed: u64,
    pub lost: u64,
}

/// A claim this runner holds.
#[derive(Debug, Clone)]
struct Held {
    task: Task,
    epoch: u64,
    until: Timestamp,
}

impl Held {
    fn from(task: Task) -> Option<Held> {
        let c = task.claim.clone()?;
        Some(Held { task, epoch: c.epoch, until: c.lease_until })
    }
}

/// How one task ended.
enum TaskEnd {
    Landed,
    Failed,
    /// The claim was lost (taken over) or given back; nothing recorded by us.
    Gone,
    /// A signal: the claim was released.
    Interrupted,
}

pub(crate) fn run(r: &mut Runner<'_>, opts: &WorkerOptions) -> Result<(RunEnd, WorkerStats), RunError> {
    // While it runs, the desk's leaders may wait for this agent's requests.
    let _member = r.desk.as_ref().map(super::desk::Desk::enter);
    r.setup()?;
    let res = run_loop(r, opts);
    r.phase_over();
    r.teardown();
    res
}

fn run_loop(r: &mut Runner<'_>, opts: &WorkerOptions) -> Result<(RunEnd, WorkerStats), RunError> {
    // A missing agent or broken settings are found before anything is claimed.
    let snap = r.read_settings()?;
    guard_checked_out_target(r, &snap.board.config.target)?;
    r.check_trust(&snap, Role::Worker)?;
    let config = snap.board.config;
    r.ride_out(&config);
    let window = r.settings(&config)?.batch_window;
    r.backend(&config, Role::Worker)?;
    r.say_containment();
    if super::landing::fetch_target(r, &format!("refs/heads/{}", config.target))?.is_none() {
        return Err(missing_target(r, &config.target));
    }
    let mut stats = WorkerStats::default();
    let mut held: Option<Held> = None;
    let mut done_tasks = 0u64;
    let mut backoff = super::MIN_POLL;
    // Expired claims with no attempts left, looked up on the target (their code, when it landed): a sweep finishes
    // those as done rather than failing them.
    let mut looked_up: std::collections::BTreeMap<String, Option<ObjectId>> = Default::default();
    loop {
        r.say_ridden_out();
        if r.stopping() {
            if let Some(h) = held.take() {
                r.release(&h.task.id, h.epoch);
            }
            return Ok((RunEnd::Interrupted, stats));
        }
        let want_more = |n: u64| opts.mode != Mode::Once && opts.max_tasks.is_none_or(|m| n < m);
        let h = match held.take() {
            Some(h) => h,
            None => match claim_next_task(r, &config, window, opts.mode, &mut looked_up, &mut backoff)? {
                Next::Task(h) => *h,
                Next::Again => continue,
                Next::End(end) => return Ok((end, stats)),
            },
        };
        r.emit(Event::Claimed {
            task: h.task.id.clone(),
            title: h.task.title.clone(),
            epoch: h.epoch,
            kind: Kind::Work,
        });
        let (id, epoch) = (h.task.id.clone(), h.epoch);
        let (end, next) = match work_on(r, h, want_more(done_tasks + 1)) {
            Ok(x) => x,
            Err(e) => {
                // Whatever went wrong, the task is given back for another agent rather than left to its lease.
                r.release(&id, epoch);
                return Err(e);
            }
        };
        done_tasks += 1;
        match end {
            TaskEnd::Landed => stats.landed += 1,
            TaskEnd::Failed => stats.failed += 1,
            TaskEnd::Gone => stats.lost += 1,
            TaskEnd::Interrupted => return Ok((RunEnd::Interrupted, stats)),
        }
        held = next;
        if !want_more(done_tasks) {
            if let Some(h) = held.take() {
                r.release(&h.task.id, h.epoch);
            }
            r.propose(true);
            return Ok((RunEnd::Done, stats));
        }
    }
}

/// Work on one claimed task, from a fresh work tree to landed (or failed). Returns the next task when it was
/// claimed in the same push.
fn work_on(r: &mut Runner<'_>, mut h: Held, claim_next: bool) -> Result<(TaskEnd, Option<Held>), RunError> {
    let snap = r.read(false)?;
    // Settings changed on the ref since the claim, and not trusted here: the claim goes back unspent.
    r.check_trust(&snap, Role::Worker)?;
    let config = snap.board.config.clone();
    let settings = r.settings(&config)?;
    let backend = r.backend(&config, Role::Worker)?;
    let branch = format!("refs/heads/{}", config.target);
    let slot = r.slot();
    let base = match super::landing::fetch_target(r, &branch)? {
        Some(b) => b,
        None => return Err(missing_target(r, &config.target)),
    };
    // A task claimed before (a takeover) may have landed its code already, its `done` lost with half a landing
    // (the remote took the branch and failed the state ref, then the holder died): finish it, never redo it.
    if h.task.epoch > 1 {
        // No cut-off by date: committer clocks are whatever the machines that landed said. Only a landing of an
        // earlier claim counts: this one has landed nothing yet.
        let landed = landed_code(r, base, &h.task.id, None, 1..=h.epoch - 1, &config.target)?;
        if let Some(code) = landed {
            return roll_forward(r, &h, code, None, None, claim_next, config.lease, Instant::now());
        }
    }
    // A work tree made afresh by the runner at the target's tip (nothing of an earlier task but what the repository
    // ignores, carried: `runner::warm`; no process of an earlier run still working in it).
    let checkout = slot.checkout(&r.swarm.local.repo, base, r.agent_owner(), &[], true).map_err(RunError::Setup)?;
    // The target itself fails its setup: no task can be worked on here; the claim goes back unspent.
    let mut said = Vec::new();
    let setup = r.set_up(&slot, &checkout, base, &settings, &config, &h.task.id, &mut said);
    for e in said {
        r.emit(e);
    }
    if let Err(f) = setup {
        let hint = if f.cannot_run { "fix the runner's set-up" } else { "fix the setup command, or the target" };
        return Err(RunError::Setup(format!(
            "{} on {}'s tip {base} ({hint}, then start the runner again; no attempt was spent)",
            f.reason, config.target
        )));
    }
    let outcome = run_worker_agent(r, &backend, &settings, &snap, &mut h, &slot, base, &config)?;
    let job = Job { settings: &settings, config: &config, state: snap.commit, backend: &backend };
    finish(r, &job, &mut h, &slot, &checkout, base, &branch, outcome, claim_next)
}

fn missing_target(r: &Runner<'_>, target: &str) -> RunError {
    RunError::Setup(format!(
        "{} has no branch {target} to work on: push it first (the target is set in swarm.toml)",
        r.swarm.remote_label
    ))
}

#[cfg(test)]
mod tests {
    use super::reported_failure;

    #[test]
    fn the_status_line_of_a_hand_off_is_read_as_the_prompt_writes_it() {
        let failed = [
            ("Status: failed: the API is down\n\n## What was done\n- nothing", "the API is down"),
            ("\n  status: FAILED - tests do not build", "tests do not build"),
            ("**Status:** failed: no network", "no network"),
            ("Status: failed", "no reason given"),
            ("```markdown\nStatus: failed: x\n```", "x"),
        ];
        for (text, reason) in failed {
            assert_eq!(reported_failure(text).as_deref(), Some(reason), "{text:?}");
        }
        for text in [
            "Status: done",
            "Status: done (or: Status: failed: <one-line reason>)",
            "## What was done\nStatus: failed: later lines do not count",
            "I failed to find a bug, so: done",
            "Status: failedness",
            "",
        ] {
            assert_eq!(reported_failure(text), None, "{text:?}");
        }
    }
}
