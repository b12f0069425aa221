//! Tasks that can never run: dependency cycles (`dependency_cycle`, from a state ref edited by hand), tasks
//! blocked by a failed or cancelled dep (`blocked_for_good`), and `cancel`.

use super::*;

/// A cycle of dependencies that `task` is on or waits on, through tasks that are open or claimed (done ones are
/// no longer waited on): the ids along it, its first id again at the end. Only a state ref edited by hand holds
/// one (`add` and the planner refuse them), and no task on or behind it can ever run.
pub(crate) fn dependency_cycle(board: &Board, task: &Task) -> Option<Vec<String>> {
    use std::collections::HashMap;
    #[derive(PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    let waits = |t: &Task| matches!(t.status, Status::Open | Status::Claimed);
    if !waits(task) {
        return None;
    }
    let mut marks: HashMap<&str, Mark> = HashMap::new();
    // The depth-first path: a task and how many of its deps were looked at (no recursion: boards are large).
    let mut path: Vec<(&str, &[String], usize)> = vec![(task.id.as_str(), task.deps.as_slice(), 0)];
    marks.insert(task.id.as_str(), Mark::OnPath);
    while let Some(top) = path.last_mut() {
        let (node, deps, next) = (top.0, top.1, top.2);
        let Some(dep) = deps.get(next) else {
            marks.insert(node, Mark::Done);
            path.pop();
            continue;
        };
        top.2 += 1;
        match marks.get(dep.as_str()) {
            Some(Mark::OnPath) => {
                let at = path.iter().position(|(n, _, _)| *n == dep.as_str()).unwrap_or(0);
                let mut cycle: Vec<String> = path[at..].iter().map(|(n, _, _)| n.to_string()).collect();
                cycle.push(dep.clone());
                return Some(cycle);
            }
            Some(Mark::Done) => continue,
            None => {}
        }
        match board.tasks.get(dep.as_str()).map(|s| &s.task).filter(|t| waits(t)) {
            Some(t) => {
                marks.insert(t.id.as_str(), Mark::OnPath);
                path.push((t.id.as_str(), t.deps.as_slice(), 0));
            }
            None => {
                marks.insert(dep.as_str(), Mark::Done);
            }
        }
    }
    None
}

/// Why `task` can never become ready: a dependency (or a dependency's dependency, through open tasks) failed or
/// was cancelled, or its dependencies form a cycle. `None` while it can still run.
pub fn blocked_for_good(board: &Board, task: &Task) -> Option<String> {
    if let Some((d, st)) = blocked_by_failure(board, task) {
        return Some(format!("{d} is {st}"));
    }
    dependency_cycle(board, task).map(|c| format!("its dependencies form a cycle {}", c.join(" → ")))
}

/// The failed or cancelled task (a dependency, or a dependency's, through open tasks) that `task` waits on for
/// ever, if any, and its status.
pub fn blocked_by_failure<'a>(board: &'a Board, task: &'a Task) -> Option<(&'a str, Status)> {
    let mut stack: Vec<&str> = task.deps.iter().map(String::as_str).collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(d) = stack.pop() {
        if !seen.insert(d) {
            continue;
        }
        match board.status_of(d) {
            Some(st @ (Status::Failed | Status::Cancelled)) => return Some((d, st)),
            Some(Status::Open | Status::Claimed) => {
                if let Some(s) = board.tasks.get(d) {
                    stack.extend(s.task.deps.iter().map(String::as_str));
                }
            }
            _ => {}
        }
    }
    None
}

/// Cancel the open tasks among `ids` that can never run (see [`blocked_for_good`]), with the reason recorded as a
/// failure. Others are left alone.
pub fn cancel_blocked(board: &Board, actor: &Actor, ids: &[String]) -> Change {
    let why = |t: &Task| {
        if t.status != Status::Open {
            return None;
        }
        blocked_for_good(board, t).map(|w| format!("cancelled: {w}"))
    };
    let mut ch = cancel_where(board, actor, ids, why);
    ch.summary = format!("cancel {} task(s) whose dependencies failed", ch.writes.len());
    ch
}

/// Cancel the tasks among `ids` that are open or claimed (a claim ends with it: its holder is fenced off, its next
/// op is refused), `reason` recorded as a failure. Finished tasks are left alone.
pub fn cancel(board: &Board, actor: &Actor, ids: &[String], reason: &str) -> Change {
    let why = |t: &Task| matches!(t.status, Status::Open | Status::Claimed).then(|| format!("cancelled: {reason}"));
    let mut ch = cancel_where(board, actor, ids, why);
    ch.summary = format!("cancel {} task(s): {}", ch.writes.len(), subject(reason));
    ch
}

/// `git swarm cancel <id>`: one open or claimed task will not be done (its holder is fenced off), `reason` recorded
/// as a failure. Cancelling a cancelled task changes nothing (`None`: the task is not read, it is stored apart);
/// a done or failed task is final (`retry` opens a failed one again). With the task as written and the ids of the
/// tasks that wait on it, which can then never run.
pub fn cancel_task(
    board: &Board,
    actor: &Actor,
    id: &str,
    reason: &str,
) -> Result<(Change, Option<Task>, Vec<String>), DomainError> {
    let s = match get(board, id) {
        Err(DomainError::Final { status: Status::Cancelled, .. }) => return Ok((Change::default(), None, vec![])),
        other => other?,
    };
    match s.task.status {
        Status::Open | Status::Claimed => {}
        Status::Cancelled => return Ok((Change::default(), Some(s.task.clone()), vec![])),
        status => return Err(DomainError::Final { id: id.to_string(), status }),
    }
    let mut ch = cancel(board, actor, &[id.to_string()], reason);
    ch.summary = format!("cancel {id}: {}", subject(reason));
    let task = ch.writes.first().map(|w| w.task.clone());
    let waiting = board
        .tasks
        .values()
        .filter(|w| matches!(w.task.status, Status::Open | Status::Claimed) && w.task.deps.iter().any(|d| d == id))
        .map(|w| w.task.id.clone())
        .collect();
    Ok((ch, task, waiting))
}

pub(crate) fn cancel_where(
    board: &Board,
    actor: &Actor,
    ids: &[String],
    why: impl Fn(&Task) -> Option<String>,
) -> Change {
    let mut writes = Vec::new();
    let mut removes = Vec::new();
    for id in ids {
        let Some(s) = board.tasks.get(id) else { continue };
        let Some(reason) = why(&s.task) else { continue };
        let mut t = s.task.clone();
        t.status = Status::Cancelled;
        t.claim = None;
        let usage = close_usage(&mut t);
        t.failures.push(Failure {
            agent: actor.agent.clone(),
            epoch: t.epoch,
            at: actor.now,
            reason,
            usage,
            kept: None,
        });
        writes.push(place(board, t, &s.path, &mut removes));
    }
    Change {
        op: "cancel",
        agent: actor.agent.clone(),
        task: writes.first().map(|w| w.task.id.clone()),
        writes,
        removes,
        ..Default::default()
    }
}
