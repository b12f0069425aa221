//! What a finished agent run comes to: the run judged, what it left committed, its landing (the publisher chosen
//! once, `Landing::land`), and the one place the task's end is recorded (`conclude`) — landed, done with no change,
//! rolled forward, failed, released, gone, stop — with its work kept aside (or held in the clone) where `End` says.

use super::*;

/// The code of task `id` on the target at `tip` (since `stop`): a runner's landing of one of its claims whose epoch
/// is in `epochs` ([`crate::Store::landed_commit`]). Commits that only name the task are said, never taken.
pub(super) fn landed_code(
    r: &mut Runner<'_>,
    tip: ObjectId,
    id: &str,
    stop: Option<ObjectId>,
    epochs: std::ops::RangeInclusive<u64>,
    target: &str,
) -> Result<Option<ObjectId>, RunError> {
    let found = r
        .swarm
        .local
        .landed_commit(tip, id, stop, epochs, ROLL_FORWARD_DEPTH)
        .map_err(|e| RunError::Setup(format!("cannot read {target}: {e}")))?;
    for w in super::super::landing::refused_warnings(id, target, &found.refused) {
        r.emit(w);
    }
    Ok(found.code.map(|(code, _)| code))
}

/// Finish a task whose code is on the target already (`code`): `done` alone, in one update of the state ref.
/// `handoff`: the agent's, when this runner ran it; else a note saying what happened.
#[allow(clippy::too_many_arguments)]
pub(super) fn roll_forward(
    r: &mut Runner<'_>,
    h: &Held,
    code: ObjectId,
    handoff: Option<String>,
    work: Option<ObjectId>,
    claim_next: bool,
    lease: Duration,
    since: Instant,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let (id, epoch) = (h.task.id.clone(), h.epoch);
    let note = handoff.unwrap_or_else(|| {
        format!(
            "Status: done\n\nRolled forward by {}: the code of this task was on the target already ({code}), its \
             `done` was not (a landing whose state half failed).\n",
            r.agent
        )
    });
    let store = r.swarm.store();
    let (usage, cycle_budget) = (r.spent.of(&id, epoch), r.spent.budgets().1);
    let res = r.transact(|snap, actor| {
        let stopped = claim_next && judge_stopped(store, snap);
        let code = code.to_string();
        let l = ops::land::Record {
            id: &id,
            epoch,
            code: &code,
            note: Some(&note),
            claim_next,
            lease,
            usage,
            cycle_budget,
        };
        landing_op(&snap.board, actor, stopped, &l)
    });
    match res {
        Ok(c) => {
            r.spent.forget(&id, epoch);
            let next = say_landed(r, id, code, c.lost_races, since, c.value);
            r.emit(Event::Warning(format!("rolled {} forward: its code was on the target already", h.task.id)));
            Ok((TaskEnd::Landed, next))
        }
        Err(TxnError::Domain(e)) => {
            // The code on the target is a twin's (whoever took the task over from us landed it): ours is kept
            // aside, as any fenced holder's is.
            if let Some(tip) = work {
                keep_aside(r, h, tip);
            }
            r.emit(Event::LostClaim { task: id, why: e.to_string() });
            Ok((TaskEnd::Gone, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Say that `id` landed as `code` (and which task was claimed with it); the next task held.
pub(super) fn say_landed(
    r: &mut Runner<'_>,
    id: String,
    code: ObjectId,
    lost_races: u32,
    since: Instant,
    next: Option<Task>,
) -> Option<Held> {
    let next = next.and_then(Held::from);
    r.emit(Event::Landed {
        task: id,
        commit: code.to_string(),
        lost_races,
        exit_to_landed: since.elapsed(),
        next: next.as_ref().map(|n| n.task.id.clone()),
    });
    // Where main is protected: the request into it is kept current (`runner::propose`).
    r.after_landing();
    next
}

/// Where the work of a task that did not land is kept for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    No,
    /// On the remote, at `refs/swarm-work/<swarm>/<task>/<epoch>` ([`keep_aside`]).
    Aside,
    /// In this clone only ([`keep_held`]): it holds what looks like a secret, which a push would carry away, or
    /// trees git refuses.
    Here,
}

impl Keep {
    pub(super) fn aside_if(mine: bool) -> Keep {
        if mine { Keep::Aside } else { Keep::No }
    }
}

/// How a finished agent run ends for its task, once decided: what [`conclude`] records.
pub(super) enum End {
    /// Landed: the code on the target, `done` on the state ref, the next task claimed with it.
    Landed { code: ObjectId, lost_races: u32, next: Option<Box<Task>> },
    /// Nothing to land, and `[run] empty = "done"`: `done` on the state ref alone.
    Empty { note: Option<String> },
    /// The code is on the target already (a landing whose state half failed): finish it, never land it again.
    RollForward { code: ObjectId, note: Option<String> },
    /// An attempt of the task (for good: no attempt after it), with the agent's hand-off as its note.
    Fail { reason: String, note: Option<String>, for_good: bool, keep: Keep },
    /// A signal: the claim goes back.
    Released,
    /// The claim was lost (taken over): nothing recorded by us.
    Gone { why: String, keep: Keep },
    /// An error that ends the runner (the caller gives the claim back, no attempt spent).
    Stop { error: RunError, keep: Keep },
}

impl End {
    /// An attempt spent for `reason`, nothing kept.
    pub(super) fn fail(reason: impl Into<String>) -> End {
        End::Fail { reason: reason.into(), note: None, for_good: false, keep: Keep::No }
    }

    /// This end, with the work kept as `keep` says (an end that records nothing of the work keeps none).
    pub(super) fn kept(mut self, to: Keep) -> End {
        if let End::Fail { keep, .. } | End::Gone { keep, .. } | End::Stop { keep, .. } = &mut self {
            *keep = to;
        }
        self
    }

    /// Where the work is kept for a person.
    fn keep(&self) -> Keep {
        match self {
            End::Fail { keep, .. } | End::Gone { keep, .. } | End::Stop { keep, .. } => *keep,
            _ => Keep::No,
        }
    }
}

/// The task's end after its agent ran: the agent's run judged, what it left committed, then landed through the
/// desk or alone ([`Landing::land`]), and recorded ([`conclude`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    r: &mut Runner<'_>,
    job: &Job<'_>,
    h: &mut Held,
    slot: &super::super::slot::Slot,
    checkout: &super::super::slot::Checkout,
    base: ObjectId,
    branch: &str,
    outcome: AgentRun,
    claim_next: bool,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let (settings, lease) = (job.settings, job.config.lease);
    let (exit, tail, exited_at, handoff) = match outcome {
        AgentRun::LostClaim(why) => {
            return conclude(r, h, None, End::Gone { why, keep: Keep::No }, claim_next, lease, Instant::now());
        }
        AgentRun::Interrupted => {
            return conclude(r, h, None, End::Released, claim_next, lease, Instant::now());
        }
        AgentRun::Exited { exit, tail, at, handoff } => (exit, tail, at, handoff),
    };
    let over_budget = match &exit {
        Exit::OverBudget(why) => Some(format!("the task spent its budget ({why}); the agent was stopped")),
        _ => None,
    };
    if !exit.success() && over_budget.is_none() {
        let what = match &exit {
            Exit::TimedOut => {
                format!("the agent ran past the time limit of {}", crate::time::format_duration(settings.task_timeout))
            }
            other => format!("the agent {other}"),
        };
        // What the agent said of its failure in its hand-off (`Status: failed: <reason>`) says more than its last
        // lines; the hand-off is kept as the task's note either way.
        let note = handoff.as_deref().map(|t| {
            let t = super::super::redact_secrets(t);
            t[..t.floor_char_boundary(64 * 1024 - 1)].to_string()
        });
        let reason = match note.as_deref().and_then(reported_failure) {
            Some(said) => format!("{what}; it reported: failed: {said}"),
            None => super::super::reason_from(&what, &tail),
        };
        let end = End::Fail { reason, note, for_good: false, keep: Keep::No };
        return conclude(r, h, None, end, claim_next, lease, exited_at);
    }
    let work_tip = match commit_work(r, &h.task, h.epoch, slot, checkout, base)? {
        Ok(tip) => tip,
        // An agent that removed its work tree left nothing to land, and would do it again: an attempt of the task.
        Err(why) => return conclude(r, h, None, End::fail(why), claim_next, lease, exited_at),
    };
    // At most 64 KiB (bytes: what every reader of `notes/<id>.md` reads), cut at a character.
    let handoff = handoff.map(|t| {
        let t = super::super::redact_secrets(&t);
        t[..t.floor_char_boundary(64 * 1024 - 1)].to_string()
    });
    let mine = !own_commits(&r.swarm.local, base, work_tip).is_empty();
    let end = if let Some(reason) = over_budget {
        // Another attempt would start past the budget: the task fails for good, what the agent did kept aside.
        End::Fail { reason, note: handoff, for_good: true, keep: Keep::aside_if(mine) }
    } else if let Some(reason) = handoff.as_deref().and_then(reported_failure) {
        // The agent said it failed (`Status: failed: <reason>`, the line the worker prompt asks for), whatever its
        // exit status: what it did is kept aside, not landed.
        let reason = format!("the agent reported: failed: {reason}");
        End::Fail { reason, note: handoff, for_good: false, keep: Keep::aside_if(mine) }
    } else if !mine && settings.empty == crate::config::Empty::Done {
        End::Empty { note: handoff }
    } else if !mine {
        End::fail("the agent exited 0 without changing anything")
    } else {
        land_work(r, job, h, slot, base, work_tip, branch, handoff, claim_next)?
    };
    conclude(r, h, Some(work_tip), end, claim_next, lease, exited_at)
}

/// What the agent did, as the runner takes it ([`super::super::slot`], [`super::super::snapshot`]): the objects of its commits
/// brought into the clone, its `HEAD` read as data, and what it left in its work tree committed on top (stamped as
/// the landing of this claim: `Swarm-Task` and `Swarm-Epoch`, `hooks::trailer`), with its tools' files taken out.
/// The work's tip; `Ok(Err(why))`: nothing can be taken (the agent removed its work tree).
pub(super) fn commit_work(
    r: &mut Runner<'_>,
    task: &Task,
    epoch: u64,
    slot: &super::super::slot::Slot,
    checkout: &super::super::slot::Checkout,
    base: ObjectId,
) -> Result<Result<ObjectId, String>, RunError> {
    let Ok(tree) = crate::agent::files::Dir::open(&slot.tree) else {
        return Ok(Err("the agent removed its work tree: nothing to land".into()));
    };
    if let Err(why) = slot.bring_objects(&r.swarm.local.repo) {
        return Ok(Err(why));
    }
    // Its own commits, when its HEAD names one the clone now has; else only its files count.
    let head = slot.agent_head().filter(|id| r.swarm.local.repo.find_commit(*id).is_ok());
    let head = match head {
        Some(id) => id,
        None => {
            r.emit(Event::Warning(format!(
                "{}: the agent's git HEAD names no commit the runner can read: its commits are not taken, its files are",
                task.id
            )));
            base
        }
    };
    let repo = &r.swarm.local.repo;
    let tracked = repo
        .find_commit(head)
        .map_err(|e| e.to_string())
        .and_then(|c| c.tree_id().map_err(|e| e.to_string()))
        .map_err(|e| RunError::Setup(format!("cannot read the tree of {head}: {e}")))?
        .detach();
    let scope = &task.scope;
    // Agent files the task's scope names are the task's (`--scope .claude/commands/review.md`); the hook settings
    // the runner installed never are.
    let hook_file = |p: &str| crate::hooks::agent::FILES.iter().any(|f| f.path == p);
    let wanted =
        |p: &str| crate::hooks::agent::is_agent_artifact(p) && crate::hooks::agent::in_scope(p, scope) && !hook_file(p);
    let keep = crate::hooks::agent::scope_names_artifacts(scope).then_some(&wanted as &dyn Fn(&str) -> bool);
    let ignores = super::super::snapshot::Ignores {
        excludes: crate::hooks::agent::excludes_text(&r.common_dir(), r.env.config_home().as_deref()),
        info_exclude: crate::agent::files::read_text(&r.common_dir().join("info/exclude"), 1 << 20).unwrap_or_default(),
    };
    let taken = super::super::snapshot::take(repo, &tree, tracked, &ignores, keep, &checkout.known)
        .map_err(|e| RunError::Setup(format!("cannot take the work of {}: {e}", task.id)))?;
    let mut tip = head;
    if taken.tree != tracked {
        let message = crate::hooks::trailer::stamp(&one_line(&task.title), &task.id, epoch);
        let who = super::super::text::signature(&r.commit_ident, (r.clock)(), &r.env);
        let commit = gix::objs::Commit {
            tree: taken.tree,
            parents: vec![head].into(),
            author: who.clone(),
            committer: who,
            encoding: None,
            message: message.into(),
            extra_headers: vec![],
        };
        tip = repo.write_object(&commit).map_err(|e| RunError::Setup(format!("cannot write a commit: {e}")))?.detach();
    }
    for what in taken.left_out {
        r.emit(Event::Warning(format!("{}: {what}", task.id)));
    }
    // What the agent's own commits took of its tools' files (a `git add -f`) is taken out again: a task's commits
    // hold the work, not the agent's state.
    let is_artifact = |p: &str| crate::hooks::agent::is_agent_artifact(p) && !crate::hooks::agent::in_scope(p, scope);
    let stripped = super::super::rebase::strip_new_paths(&r.swarm.local, base, tip, &is_artifact)
        .map_err(|e| RunError::Setup(format!("cannot take agent files out of the work: {e}")))?;
    Ok(Ok(stripped.unwrap_or(tip)))
}

/// Land the agent's work (`base..work_tip`): rebase onto the newest target (stamping every commit on the
/// first pass), check, then one atomic update of the branch and the state (done + hand-off + the next claim),
/// published by the desk's next batch when other agents share this process, else alone. Whether to keep the work
/// aside, and the task's end.
#[allow(clippy::too_many_arguments)]
pub(super) fn land_work(
    r: &mut Runner<'_>,
    job: &Job<'_>,
    h: &Held,
    slot: &super::super::slot::Slot,
    base: ObjectId,
    work_tip: ObjectId,
    branch: &str,
    handoff: Option<String>,
    claim_next: bool,
) -> Result<End, RunError> {
    let (id, epoch) = (h.task.id.as_str(), h.epoch);
    // Only the agent's own work on the target lands: an unrelated history it merged in (a second root) fails the
    // task, its work kept aside (invariant 22).
    let foreign = super::super::rebase::foreign_history(&r.swarm.local, base, work_tip, base)
        .map_err(|e| RunError::Setup(format!("cannot read the work of {id}: {e}")))?;
    if let Some(why) = foreign {
        let why = format!("the work is not the agent's own history on {}: {why}", job.config.target);
        return Ok(End::fail(why).kept(Keep::Aside));
    }
    // Commits stamped already (the runner's own commit of what the agent left) need no rewrite; any other message
    // is stamped by the rebase, whatever `Swarm-*` lines the agent wrote.
    let stamped = super::super::rebase::unstamped(&r.swarm.local, base, work_tip, id, epoch)
        .map_err(|e| RunError::Setup(format!("cannot read the work of {id}: {e}")))?
        .is_none();
    // The lease is renewed while the check and conflict runs go on, as while the agent worked.
    let keeper = LeaseKeeper::new(id, epoch, h.until, job.config.lease);
    let rec = Recording {
        branch,
        note: handoff.as_deref(),
        claim_next,
        lease: job.config.lease,
        cycle_budget: r.spent.budgets().1,
    };
    let desk = r.desk.clone();
    let publisher: &dyn Publisher = match &desk {
        Some(desk) => desk.as_ref(),
        None => &Alone,
    };
    let (landed, events) = Landing::new(r, job, slot, &h.task, &keeper, base, work_tip, stamped).land(publisher, &rec);
    for e in events {
        r.emit(e);
    }
    Ok(match landed {
        Landed::Published { code, next, lost_races, alone } => {
            // What this clone saw of the target is what it landed (a batch of the desk records its own), so that
            // a force-push that drops it is noticed next time.
            if alone {
                r.swarm.landed_on_target(branch, code);
            }
            End::Landed { code, lost_races, next }
        }
        Landed::Aborted(Abort::AlreadyLanded(code)) => End::RollForward { code, note: handoff },
        // The caller gives the claim back (no attempt spent) and the runner stops.
        Landed::Aborted(Abort::CannotStart(e) | Abort::Stop(e)) => End::Stop { error: e, keep: Keep::Aside },
        Landed::Aborted(Abort::Interrupted) => End::Released,
        Landed::Aborted(Abort::Fail(reason)) => End::fail(reason).kept(Keep::Aside),
        Landed::Aborted(Abort::Held(reason)) => End::fail(reason).kept(Keep::Here),
        // Only a batch's prepare says so, and its task then lands alone: never here.
        Landed::Aborted(Abort::Conflicted) => End::fail("a rebase conflict left unresolved").kept(Keep::Aside),
        Landed::Aborted(Abort::Budget(reason)) => End::Fail { reason, note: None, for_good: true, keep: Keep::Aside },
        Landed::Aborted(Abort::LostClaim(why)) => End::Gone { why, keep: Keep::Aside },
        // Our claim is gone (taken over after our lease ran out): our code must not land.
        Landed::Failed(TxnError::Domain(e)) => End::Gone { why: e.to_string(), keep: Keep::Aside },
        Landed::Failed(TxnError::Remote(crate::RemoteError::Refused { remote, refname, reason }))
            if !crate::is_storage_refusal(&reason) =>
        {
            // A refusal that retrying will not change (a protected branch, a hook): an attempt of the task, and
            // the runner goes on. If the remote refuses the state ref too, recording the failure fails as well,
            // and that error ends the runner.
            End::fail(format!("{remote} refused the landing: {refname}: {reason}")).kept(Keep::Aside)
        }
        // The agent's work is not lost with the error: kept where a person (or a retry) finds it.
        Landed::Failed(e) => End::Stop { error: e.into(), keep: Keep::Aside },
    })
}

/// Record the task's end `end`, the one place where the work (`work`: the work's tip) is kept aside (or held in
/// this clone) as the end says, before the end is recorded (a roll-forward keeps it too when the code on the target
/// turns out to be a twin's). `since`: when the agent exited.
pub(super) fn conclude(
    r: &mut Runner<'_>,
    h: &Held,
    work: Option<ObjectId>,
    end: End,
    claim_next: bool,
    lease: Duration,
    since: Instant,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    r.say_ridden_out();
    r.phase_over();
    let kept = match (end.keep(), work) {
        (Keep::Aside, Some(tip)) => keep_aside(r, h, tip),
        (Keep::Here, Some(tip)) => keep_held(r, h, tip),
        _ => None,
    };
    let id = h.task.id.clone();
    match end {
        End::Landed { code, lost_races, next } => {
            // Recorded with the landing (other ends record it with their own op, or give the claim back with it).
            r.spent.forget(&id, h.epoch);
            let next = say_landed(r, id, code, lost_races, since, next.map(|t| *t));
            Ok((TaskEnd::Landed, next))
        }
        End::Empty { note } => done_empty(r, h, note, lease, since),
        End::RollForward { code, note } => roll_forward(r, h, code, note, work, claim_next, lease, since),
        End::Fail { reason, note, for_good, .. } => {
            let failing = Failing { reason, note: note.as_deref(), for_good, kept: kept.as_deref() };
            fail_noted(r, h, failing, claim_next, lease)
        }
        End::Released => {
            r.release(&id, h.epoch);
            Ok((TaskEnd::Interrupted, None))
        }
        End::Gone { why, .. } => {
            r.emit(Event::LostClaim { task: id, why });
            Ok((TaskEnd::Gone, None))
        }
        End::Stop { error, .. } => Err(error),
    }
}

/// Nothing to land: the task is done on the state ref alone.
pub(super) fn done_empty(
    r: &mut Runner<'_>,
    h: &Held,
    note: Option<String>,
    lease: Duration,
    since: Instant,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let (id, epoch) = (h.task.id.clone(), h.epoch);
    let usage = r.spent.of(&id, epoch);
    let c = r.transact(|snap, actor| {
        let f = Finish {
            id: &id,
            epoch,
            outcome: Outcome::Done { code: None },
            note: note.as_deref(),
            usage,
            claim_next: false,
            stopped: false,
            cycle_budget: Limit::default(),
            lease,
        };
        ops::land::finish(&snap.board, actor, &f).map(|(ch, _)| (ch, ()))
    });
    match c {
        Ok(_) => {
            r.spent.forget(&id, epoch);
            r.emit(Event::Landed {
                task: id,
                commit: "(no change)".into(),
                lost_races: 0,
                exit_to_landed: since.elapsed(),
                next: None,
            });
            Ok((TaskEnd::Landed, None))
        }
        Err(TxnError::Domain(e)) => {
            r.emit(Event::LostClaim { task: id, why: e.to_string() });
            Ok((TaskEnd::Gone, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// The messages of the commits `base..tip` (first-parent), newest first; empty when there are none (or they
/// cannot be read: then the work counts as empty only if `tip` is `base`).
pub(super) fn own_commits(store: &crate::Store, base: ObjectId, tip: ObjectId) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = tip;
    while cur != base && out.len() < 10_000 {
        let Ok(c) = store.repo.find_commit(cur) else { break };
        out.push(c.message_raw_sloppy().to_string());
        match c.parent_ids().next() {
            Some(p) => cur = p.detach(),
            None => break,
        }
    }
    out
}

pub(super) fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().trim().to_string()
}

/// An attempt's failure as [`fail_noted`] records it.
pub(super) struct Failing<'a> {
    pub(super) reason: String,
    /// The agent's hand-off, the task's note.
    pub(super) note: Option<&'a str>,
    /// No further attempt.
    pub(super) for_good: bool,
    /// Where its work was kept.
    pub(super) kept: Option<&'a str>,
}

/// Record a failure of my claim (and claim the next task in the same push), with the agent's hand-off as the
/// task's note.
pub(super) fn fail_noted(
    r: &mut Runner<'_>,
    h: &Held,
    failing: Failing<'_>,
    claim_next: bool,
    lease: Duration,
) -> Result<(TaskEnd, Option<Held>), RunError> {
    let Failing { reason, note, for_good, kept } = failing;
    let id = h.task.id.clone();
    let epoch = h.epoch;
    let store = r.swarm.store();
    let (usage, cycle_budget) = (r.spent.of(&id, epoch), r.spent.budgets().1);
    let res = r.transact(|snap, actor| {
        let f = Finish {
            id: &id,
            epoch,
            outcome: Outcome::Failed { reason: &reason, for_good, kept },
            note,
            usage,
            claim_next,
            stopped: claim_next && judge_stopped(store, snap),
            cycle_budget,
            lease,
        };
        let (ch, finished) = ops::land::finish(&snap.board, actor, &f)?;
        Ok((ch, (finished.task.status == crate::model::Status::Open, finished.next)))
    });
    match res {
        Ok(c) => {
            r.spent.forget(&id, epoch);
            let (attempts_left, next) = c.value;
            r.emit(Event::Failed { task: id, reason, attempts_left });
            Ok((TaskEnd::Failed, next.and_then(Held::from)))
        }
        Err(TxnError::Domain(e)) => {
            r.emit(Event::LostClaim { task: id, why: e.to_string() });
            Ok((TaskEnd::Gone, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Keep the agent's work in this clone only, at `refs/swarm-held/<swarm>/<task>/<epoch>`: a ref no runner pushes
/// (work kept here for an outage is pushed later; this never is), for a person to look at and clean — it holds
/// what looks like a secret, or trees git refuses.
/// Where it is kept, as the failure records it.
pub(super) fn keep_held(r: &mut Runner<'_>, h: &Held, work_tip: ObjectId) -> Option<String> {
    let id = h.task.id.as_str();
    let refname = format!("refs/swarm-held/{}/{id}/{}", r.swarm.name, h.epoch);
    match r.swarm.local.set_ref(
        &refname,
        work_tip,
        "git swarm: work held in this clone (a secret, or trees git refuses)",
    ) {
        Ok(()) => {
            r.emit(Event::Warning(format!(
                "{id}: its work is kept in this clone only, at {refname} (never pushed): look with `git show \
                 {refname}`, and remove it with `git update-ref -d {refname}` when you are done with it"
            )));
            Some(format!("{refname} in the clone of runner {} only (never pushed)", r.agent))
        }
        Err(e) => {
            r.emit(Event::Warning(format!("{id}: could not keep its work at {refname}: {e}")));
            None
        }
    }
}

/// Push the agent's work to `refs/swarm-work/<swarm>/<task>/<epoch>` (one ref per attempt) for a person to look at.
/// Where it is kept, as the failure records it.
pub(super) fn keep_aside(r: &mut Runner<'_>, h: &Held, work_tip: ObjectId) -> Option<String> {
    let id = h.task.id.as_str();
    let refname = r.swarm.kept_work_ref(id, h.epoch);
    match r.swarm.riding_out(&r.retry, || r.swarm.push_aside(&refname, work_tip)) {
        Ok(()) => {
            let kept = format!("{refname} on {}", r.swarm.remote_label);
            r.emit(Event::KeptAside { task: id.to_string(), refname });
            Some(kept)
        }
        // Past the outage window: kept in this clone, where the next runner finds it (and pushes it).
        Err(e) => match r.swarm.keep_here(&refname, work_tip) {
            Ok(()) => {
                r.emit(Event::Warning(format!(
                    "could not push the work of {id} to {}: {e}; it is kept in this clone at {refname}, and the \
                     next runner here pushes it",
                    r.swarm.remote_label
                )));
                Some(format!("{refname} in the clone of runner {} (pushed by its next runner)", r.agent))
            }
            Err(here) => {
                r.emit(Event::Warning(format!("could not keep the work of {id} at {refname}: {e}; {here}")));
                None
            }
        },
    }
}
