//! Which task a claim without id takes: readiness (`is_ready`, `waiting_on`, `ready`) and the choice (`pick`:
//! priority, then scopes no live claim touches, then age), one rule for a parsed board and for the store's index of
//! it (`Pickable`).

use super::*;

/// Is `task` claimable by a claim without id at `now`? (open, or claimed with an expired lease and attempts left;
/// every dep done).
pub fn is_ready(board: &Board, task: &Task, now: Timestamp) -> bool {
    takeable(&Pickable::of(task), board.config.max_attempts, now) && waiting_on(board, task).is_empty()
}

/// The deps of `task` that are not done (unknown ids count as not done).
pub fn waiting_on(board: &Board, task: &Task) -> Vec<String> {
    task.deps.iter().filter(|d| board.status_of(d) != Some(Status::Done)).cloned().collect()
}

/// The ready tasks of `kind`, best first: higher priority, then older, then by id.
pub fn ready(board: &Board, kind: Kind, now: Timestamp) -> Vec<&Task> {
    let mut v: Vec<&Task> =
        board.tasks.values().map(|s| &s.task).filter(|t| t.kind == kind && is_ready(board, t, now)).collect();
    v.sort_by(|a, b| rank(&Pickable::of(a), &Pickable::of(b)));
    v
}

/// What choosing the next task to claim reads of a task: the rule of [`ready`] and of the sweep of a claim
/// without id, kept in one place for a board of parsed tasks and for the store's index of them
/// ([`crate::store::Store::read_next`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pickable<'a> {
    pub id: &'a str,
    pub kind: Kind,
    pub status: Status,
    pub priority: i64,
    pub created_at: Option<Timestamp>,
    pub attempts: u32,
    pub epoch: u64,
    /// The claim's lease, if the task has a claim.
    pub lease_until: Option<Timestamp>,
    pub deps: Deps<'a>,
}

/// The deps of a [`Pickable`]: a task's list, or the index's space-separated field.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deps<'a> {
    List(&'a [String]),
    Spaced(&'a str),
}

impl<'a> Deps<'a> {
    pub(crate) fn iter(self) -> impl Iterator<Item = &'a str> {
        let (list, spaced) = match self {
            Deps::List(l) => (Some(l.iter().map(String::as_str)), None),
            Deps::Spaced(s) => (None, Some(s.split(' ').filter(|d| !d.is_empty()))),
        };
        list.into_iter().flatten().chain(spaced.into_iter().flatten())
    }
}

impl Pickable<'_> {
    pub(crate) fn of(t: &Task) -> Pickable<'_> {
        Pickable {
            id: &t.id,
            kind: t.kind,
            status: t.status,
            priority: t.priority,
            created_at: t.created_at,
            attempts: t.attempts,
            epoch: t.epoch,
            lease_until: t.claim.as_ref().map(|c| c.lease_until),
            deps: Deps::List(&t.deps),
        }
    }

    /// A claim whose lease ran out at `now`.
    pub(crate) fn expired(&self, now: Timestamp) -> bool {
        self.status == Status::Claimed && self.lease_until.is_some_and(|l| l <= now)
    }
}

/// Can the task be claimed at `now`, its deps aside: open, or an expired claim with attempts left; epochs left.
pub(crate) fn takeable(p: &Pickable<'_>, max_attempts: u32, now: Timestamp) -> bool {
    let takeable = match p.status {
        Status::Open => true,
        Status::Claimed => p.expired(now) && p.attempts.saturating_add(1) < max_attempts,
        _ => false,
    };
    takeable && p.epoch.checked_add(1).is_some_and(|e| e <= MAX_EPOCH)
}

/// An expired claim whose attempts are spent: the next claim without id records it as failed.
pub(crate) fn spent(p: &Pickable<'_>, max_attempts: u32, now: Timestamp) -> bool {
    p.expired(now) && p.attempts.saturating_add(1) >= max_attempts
}

/// The order of ready tasks: higher priority, then older, then by id.
pub(crate) fn rank(a: &Pickable<'_>, b: &Pickable<'_>) -> std::cmp::Ordering {
    b.priority.cmp(&a.priority).then_with(|| a.created_at.cmp(&b.created_at)).then_with(|| a.id.cmp(b.id))
}

/// Which tasks a claim of the next ready task of `kind` at `now` touches, chosen from `tasks` (every live task)
/// with `status_of` (any task's status): the best ready one and the spent claims it records as failed.
pub(crate) fn pick<'a>(
    tasks: impl Iterator<Item = Pickable<'a>>,
    status_of: impl Fn(&str) -> Option<Status>,
    kind: Kind,
    now: Timestamp,
    max_attempts: u32,
) -> (Option<&'a str>, Vec<&'a str>) {
    let mut best: Option<Pickable<'a>> = None;
    let mut swept = Vec::new();
    for p in tasks.filter(|p| p.kind == kind) {
        if spent(&p, max_attempts, now) {
            swept.push(p.id);
        }
        let better = best.as_ref().is_none_or(|b| rank(&p, b).is_lt());
        if better && takeable(&p, max_attempts, now) && p.deps.iter().all(|d| status_of(d) == Some(Status::Done)) {
            best = Some(p);
        }
    }
    (best.map(|b| b.id), swept)
}
