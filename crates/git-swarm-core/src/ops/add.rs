//! New tasks: `add` (one commit for a batch, ids minted so that two clones never mint the same), and `retry`,
//! which opens a failed or cancelled task again.

use super::*;

/// A task to add.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    pub title: String,
    pub body: String,
    pub kind: Kind,
    pub priority: i64,
    pub deps: Vec<String>,
    pub labels: Vec<String>,
    pub parent: Option<String>,
    pub acceptance: String,
    pub scope: Vec<String>,
}

/// A fresh id: `t-` and 6 random hex digits (collisions with the board are re-drawn by [`add`]). The one impure
/// helper here: it is passed to `add` as `mint`, never called by an op.
pub fn mint_id() -> String {
    format!("t-{:06x}", fastrand::u32(0..0x100_0000))
}

/// An id from `mint` that is neither on the board nor in `taken` (which gets it); re-drawn on a collision.
pub(crate) fn fresh_id(
    board: &Board,
    taken: &mut std::collections::BTreeSet<String>,
    mint: &mut dyn FnMut() -> String,
) -> Result<String, DomainError> {
    for tries in 1..=64 {
        let id = mint();
        if !board.contains(&id) && !taken.contains(&id) {
            taken.insert(id.clone());
            return Ok(id);
        }
        if tries == 64 {
            return Err(DomainError::IdSpaceExhausted(tries));
        }
    }
    Err(DomainError::IdSpaceExhausted(64))
}

/// Add tasks in one op. `mint` proposes ids; one already on the board is thrown away and another asked for.
pub fn add(
    board: &Board,
    actor: &Actor,
    new: Vec<NewTask>,
    mint: &mut dyn FnMut() -> String,
) -> Result<(Change, Vec<Task>), DomainError> {
    if new.iter().any(|n| !n.deps.is_empty()) {
        // Whether the deps can ever run is a walk through their deps.
        whole(board, "an add with deps")?;
    }
    if board.lookup {
        // A minted id must be one that no file has.
        return Err(DomainError::PartialBoard("an add (it must know every id)"));
    }
    let mut writes = Vec::with_capacity(new.len());
    let mut taken: std::collections::BTreeSet<String> = Default::default();
    for (i, n) in new.into_iter().enumerate() {
        for dep in n.deps.iter().chain(n.parent.iter()) {
            if !board.contains(dep) && !taken.contains(dep) {
                return Err(DomainError::UnknownTask(dep.clone()));
            }
        }
        // A new task itself closes no cycle (nothing can name it yet), but it must not wait on one.
        for dep in &n.deps {
            if let Some(t) = board.tasks.get(dep)
                && let Some(cycle) = dependency_cycle(board, &t.task)
            {
                return Err(DomainError::DependencyCycle { dep: dep.clone(), cycle });
            }
        }
        let id = fresh_id(board, &mut taken, mint)?;
        let task = Task {
            id: id.clone(),
            title: n.title,
            body: n.body,
            kind: n.kind,
            status: Status::Open,
            priority: n.priority,
            deps: n.deps,
            labels: n.labels,
            parent: n.parent,
            acceptance: n.acceptance,
            scope: n.scope,
            plan_round: 0,
            attempts: 0,
            epoch: 0,
            created_by: Some(actor.agent.clone()),
            // A millisecond apart, so that a batch keeps its order ("older first").
            created_at: Some(actor.now.plus_millis(i as u64)),
            claim: None,
            result: None,
            failures: vec![],
            usage: None,
            claim_usage: None,
        };
        // Write only what every reader reads back: a task that fails validation, or a file past the read limit,
        // would be skipped by every reader — filed, never worked on.
        let invalid = |why: String| DomainError::Invalid { title: crate::escape::line(&subject(&task.title)), why };
        task.validate().map_err(invalid)?;
        let size = toml::to_string(&task).map_err(|e| invalid(e.to_string()))?.len() as u64;
        if size > crate::model::MAX_TASK_FILE_BYTES {
            return Err(invalid(format!(
                "its file would take {size} bytes, past the limit of {}",
                crate::model::MAX_TASK_FILE_BYTES
            )));
        }
        writes.push(Stored { path: task_path(&id), task });
    }
    let tasks: Vec<Task> = writes.iter().map(|w| w.task.clone()).collect();
    let summary = match tasks.as_slice() {
        [one] => format!("add {}: {}", one.id, subject(&one.title)),
        many => format!("add {} tasks", many.len()),
    };
    let change = Change {
        op: "add",
        agent: actor.agent.clone(),
        task: tasks.first().map(|t| t.id.clone()),
        epoch: None,
        summary,
        writes,
        removes: vec![],
        ..Default::default()
    };
    Ok((change, tasks))
}

/// Open a failed or cancelled task again, its attempts reset (its failures stay on record, for the next agent to
/// read). `task` is the task as stored at `path` (a finished task may not be read into the board: the caller reads
/// it). The tasks that were cancelled because they waited on it are not reopened here.
pub fn retry(board: &Board, actor: &Actor, task: &Task, path: &str) -> Result<(Change, Task), DomainError> {
    if !matches!(task.status, Status::Failed | Status::Cancelled) {
        return Err(DomainError::NotRetryable { id: task.id.clone(), status: task.status });
    }
    let mut t = task.clone();
    t.status = Status::Open;
    t.attempts = 0;
    t.claim = None;
    t.claim_usage = None;
    let live = task_path(&t.id);
    let mut removes = vec![];
    if path != live {
        removes.push(path.to_string());
    }
    for twin in board.twins.get(&t.id).into_iter().flatten() {
        if *twin != live && !removes.contains(twin) {
            removes.push(twin.clone());
        }
    }
    let summary = format!("retry {}: {}", t.id, subject(&t.title));
    let ch = change("retry", actor, &t, summary, vec![Stored { path: live, task: t.clone() }], removes);
    Ok((ch, t))
}
