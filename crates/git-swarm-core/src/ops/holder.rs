//! The ops of a claim's holder: `renew`, `release`, `done`, `fail` — each refused unless the actor holds the
//! task under the epoch it names (fencing) — and what an attempt spent, reported with them (`usage`). Also the
//! finishing of a task whose code is on the target already (`done_landed`, `done_found`).

use super::*;

/// The role whose spend a task's runs are: planners work on plans, workers on the rest.
pub fn role_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Work => "worker",
        Kind::Plan => "planner",
    }
}

/// The swarm's spend with `delta` of `role` added in the running cycle; `None` when there is nothing to add.
pub(crate) fn spend_after(board: &Board, role: &str, delta: &Usage) -> Option<Spend> {
    (!delta.is_zero()).then(|| board.spend.add(role, delta, board.cycle))
}

/// `t`'s claim reports `usage` for its attempt (the whole attempt so far: a newer report replaces an older one):
/// what it adds to the swarm's spend.
pub(crate) fn report_usage(t: &mut Task, usage: Option<Usage>) -> Usage {
    let Some(u) = usage else { return Usage::default() };
    let before = t.claim_usage.unwrap_or_default();
    // Reports of an attempt only grow; one that went down takes nothing back (and counts nothing twice later).
    let merged = before.max_each(&u);
    t.claim_usage = Some(merged);
    merged.since(&before)
}

/// A holder's write of its claimed `t` (a planner's round) that reports `usage` for the attempt so far: the
/// swarm's spend after it, when it adds anything.
pub fn report(board: &Board, t: &mut Task, usage: Option<Usage>) -> Option<Spend> {
    let delta = report_usage(t, usage);
    spend_after(board, role_of(t.kind), &delta)
}

/// The claim of `t` ends: its attempt's usage goes to the task's, and is returned.
pub(crate) fn close_usage(t: &mut Task) -> Option<Usage> {
    let u = t.claim_usage.take();
    t.usage = crate::usage::plus(t.usage, u);
    u
}

/// Check that `t` is claimed by `agent` (under `epoch` when given). The lease may have run out: the holder may
/// still finish as long as nobody has claimed the task since.
pub(crate) fn check_holder<'a>(t: &'a Task, agent: &str, epoch: Option<u64>) -> Result<&'a Claim, DomainError> {
    if t.status.is_final() {
        return Err(DomainError::Final { id: t.id.clone(), status: t.status });
    }
    let c =
        t.claim.as_ref().ok_or(DomainError::NotClaimed { id: t.id.clone(), status: t.status, ever: t.epoch > 0 })?;
    if c.agent != agent {
        return Err(DomainError::NotMine { id: t.id.clone(), holder: c.agent.clone(), agent: agent.to_string() });
    }
    if let Some(e) = epoch
        && e != c.epoch
    {
        return Err(DomainError::StaleEpoch { id: t.id.clone(), mine: e, current: c.epoch });
    }
    Ok(c)
}

pub(crate) fn renew_one(
    board: &Board,
    s: &Stored,
    actor: &Actor,
    epoch: Option<u64>,
    lease: Duration,
    removes: &mut Vec<String>,
) -> Result<(Stored, Task), DomainError> {
    check_holder(&s.task, &actor.agent, epoch)?;
    let mut t = s.task.clone();
    if let Some(c) = t.claim.as_mut() {
        c.lease_until = actor.now.plus(lease).ceil_secs();
    }
    Ok((place(board, t.clone(), &s.path, removes), t))
}

/// Extend the lease of my claim on `id`, or of every claim I hold. With `id`, `usage` reports what its attempt
/// has spent so far (the whole attempt's): the runner's lease keeper, so that the board knows what a run spends
/// while it runs, without a push of its own.
pub fn renew(
    board: &Board,
    actor: &Actor,
    id: Option<&str>,
    epoch: Option<u64>,
    lease: Duration,
    usage: Option<Usage>,
) -> Result<(Change, Vec<Task>), DomainError> {
    let mut writes = Vec::new();
    let mut tasks = Vec::new();
    let mut removes = Vec::new();
    match id {
        Some(id) => {
            let (w, t) = renew_one(board, get(board, id)?, actor, epoch, lease, &mut removes)?;
            writes.push(w);
            tasks.push(t);
        }
        None => {
            whole(board, "a renewal of every claim")?;
            for s in board.tasks.values() {
                if s.task.status == Status::Claimed && s.task.claim.as_ref().is_some_and(|c| c.agent == actor.agent) {
                    let (w, t) = renew_one(board, s, actor, None, lease, &mut removes)?;
                    writes.push(w);
                    tasks.push(t);
                }
            }
        }
    }
    let summary = match tasks.as_slice() {
        [one] => format!("renew {}: until {}", one.id, actor.now.plus(lease).ceil_secs()),
        many => format!("renew {} claims of {}", many.len(), actor.agent),
    };
    let mut ch = Change {
        op: "renew",
        agent: actor.agent.clone(),
        task: tasks.first().map(|t| t.id.clone()),
        epoch: None,
        summary,
        writes,
        removes,
        ..Default::default()
    };
    if let [one] = tasks.as_slice() {
        ch.epoch = one.claim.as_ref().map(|c| c.epoch);
    }
    if id.is_some()
        && usage.is_some()
        && let Some(w) = ch.writes.first_mut()
    {
        let delta = report_usage(&mut w.task, usage);
        ch.spend = spend_after(board, role_of(w.task.kind), &delta);
        tasks = vec![w.task.clone()];
    }
    Ok((ch, tasks))
}

/// The shape of the holder's ops that end a claim: check that `id` is mine (under `epoch`), drop the claim, let
/// `end` set the outcome, and write the task where its new status belongs.
pub(crate) fn end_claim(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    op: &'static str,
    usage: Option<Usage>,
    end: impl FnOnce(&mut Task, u64, Option<Usage>),
) -> Result<(Change, Task), DomainError> {
    let s = get(board, id)?;
    let ep = check_holder(&s.task, &actor.agent, epoch)?.epoch;
    let mut t = s.task.clone();
    t.claim = None;
    let delta = report_usage(&mut t, usage);
    let attempt = close_usage(&mut t);
    end(&mut t, ep, attempt);
    let mut summary = format!("{op} {}: {}", t.id, subject(&t.title));
    if let Some(u) = attempt {
        summary.push_str(&format!(" ({})", spent_briefly(&u)));
    }
    let mut removes = vec![];
    let w = place(board, t.clone(), &s.path, &mut removes);
    let mut ch = change(op, actor, &t, summary, vec![w], removes);
    ch.epoch = Some(ep);
    ch.spend = spend_after(board, role_of(t.kind), &delta);
    Ok((ch, t))
}

/// `12.3k tokens, $0.04`: what an attempt spent, for a commit subject.
pub fn spent_briefly(u: &Usage) -> String {
    let tokens = format!("{} tokens", crate::usage::short_count(u.tokens()));
    match u.cost_usd {
        Some(c) => format!("{tokens}, {c}"),
        None => tokens,
    }
}

/// Give my claim back: the task is open again, no attempt spent; `usage`: what the attempt spent (the whole
/// attempt's).
pub fn release(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    usage: Option<Usage>,
) -> Result<(Change, Task), DomainError> {
    end_claim(board, actor, id, epoch, "release", usage, |t, _, _| t.status = Status::Open)
}

/// My claimed task is done. Final. `usage`: what the attempt spent (the whole attempt's, agent and conflict runs).
pub fn done(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    commit: Option<String>,
    note: Option<String>,
    usage: Option<Usage>,
) -> Result<(Change, Task), DomainError> {
    end_claim(board, actor, id, epoch, "done", usage, |t, ep, _| {
        t.status = Status::Done;
        t.result =
            Some(TaskResult { commit, note, agent: Some(actor.agent.clone()), epoch: Some(ep), at: Some(actor.now) });
    })
}

/// Finish a task whose claim ran out and whose code is on the target already (`commit`, found by its `Swarm-Task:`
/// trailer): a landing whose state half failed, its holder gone. Anyone may do it; the claim's epoch is recorded
/// as the result's. A live claim is its holder's to finish.
pub(crate) fn done_landed(
    board: &Board,
    actor: &Actor,
    id: &str,
    commit: String,
) -> Result<(Change, Task), DomainError> {
    let s = get(board, id)?;
    let c = s.task.claim.as_ref().ok_or(DomainError::NotClaimed {
        id: id.to_string(),
        status: s.task.status,
        ever: s.task.epoch > 0,
    })?;
    if s.task.expired_claim(actor.now).is_none() {
        return Err(DomainError::ClaimedByOther { id: id.to_string(), agent: c.agent.clone(), until: c.lease_until });
    }
    let note = format!("rolled forward by {}: the code was on the target, the claim had run out", actor.agent);
    Ok(finish_found(board, actor, s, c.epoch, commit, note, "rolled forward"))
}

/// Finish an open or claimed task whose code is on the target already (`commit`, found by its trailer), whoever
/// holds it: what `doctor` does after it restored a state ref from an older tip, on which tasks that had landed
/// are open again (their code would land twice). A live holder's next op is refused (done is final).
pub fn done_found(
    board: &Board,
    actor: &Actor,
    id: &str,
    commit: String,
    why: &str,
) -> Result<(Change, Task), DomainError> {
    let s = get(board, id)?;
    if s.task.status.is_final() {
        return Err(DomainError::Final { id: id.to_string(), status: s.task.status });
    }
    let ep = s.task.claim.as_ref().map(|c| c.epoch).unwrap_or(s.task.epoch);
    Ok(finish_found(board, actor, s, ep, commit, why.to_string(), "its code is on the target"))
}

/// `s` done with `commit` as its result, under `epoch`, with `note`.
pub(crate) fn finish_found(
    board: &Board,
    actor: &Actor,
    s: &Stored,
    epoch: u64,
    commit: String,
    note: String,
    how: &str,
) -> (Change, Task) {
    let mut t = s.task.clone();
    t.claim = None;
    close_usage(&mut t);
    t.status = Status::Done;
    t.result = Some(TaskResult {
        commit: Some(commit),
        note: Some(note),
        agent: Some(actor.agent.clone()),
        epoch: Some(epoch),
        at: Some(actor.now),
    });
    let summary = format!("done {}: {} ({how})", t.id, subject(&t.title));
    let mut removes = vec![];
    let w = place(board, t.clone(), &s.path, &mut removes);
    let mut ch = change("done", actor, &t, summary, vec![w], removes);
    ch.epoch = Some(epoch);
    (ch, t)
}

/// How an attempt failed, as [`fail`] records it.
#[derive(Debug, Clone, Default)]
pub struct Failing {
    pub reason: String,
    /// What the attempt spent (the whole attempt's).
    pub usage: Option<Usage>,
    /// The task is `failed` whatever attempts are left (it spent its budget: another attempt would start past it).
    pub for_good: bool,
    /// Where the attempt's work was kept for a person.
    pub kept: Option<String>,
}

impl Failing {
    /// A failure for `reason` and nothing else.
    pub fn because(reason: impl Into<String>) -> Failing {
        Failing { reason: reason.into(), ..Failing::default() }
    }
}

/// My claimed task failed: one attempt spent; open again while attempts remain (unless `for_good`), else `failed`.
pub fn fail(
    board: &Board,
    actor: &Actor,
    id: &str,
    epoch: Option<u64>,
    failing: Failing,
) -> Result<(Change, Task), DomainError> {
    let Failing { reason, usage, for_good, kept } = failing;
    end_claim(board, actor, id, epoch, "fail", usage, |t, ep, usage| {
        t.attempts = t.attempts.saturating_add(1);
        t.failures.push(Failure { agent: actor.agent.clone(), epoch: ep, at: actor.now, reason, usage, kept });
        t.status = if for_good || t.attempts >= board.config.max_attempts { Status::Failed } else { Status::Open };
    })
}
