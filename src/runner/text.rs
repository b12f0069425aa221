//! What a runner reads of the state for its prompts and messages: the last cycle, the goal, the hand-offs, the board
//! as text; and what it writes there scrubbed of its secrets ([`scrub`]).

use gix::ObjectId;

use super::CycleRecord;
use crate::environment::{Environment, Var};
use crate::model::{Status, Task};
use crate::ops::{Board, Change};
use crate::state::GOAL_PATH;
use crate::time::Timestamp;
use crate::{Snapshot, Store};

/// The record of the last cycle, if any judge has spoken: the highest-numbered `cycles/<n>.toml` that reads (a
/// broken newer file must not hide a `stop` before it; the judge's next record replaces it).
pub(crate) fn last_cycle(store: &Store, commit: ObjectId) -> Option<CycleRecord> {
    let files = store.list_dir(commit, crate::state::CYCLES_DIR).ok()?;
    let mut numbered: Vec<(u64, bool, ObjectId)> = files
        .iter()
        .filter_map(|(name, id)| {
            let n = name.strip_suffix(".toml").and_then(|n| n.parse::<u64>().ok())?;
            // `cycles/01.toml` parses as 1 too: the canonical `1.toml` comes first.
            Some((n, *name != format!("{n}.toml"), *id))
        })
        .collect();
    numbered.sort_by_key(|&(n, odd, _)| (std::cmp::Reverse(n), odd));
    numbered.into_iter().find_map(|(n, _, id)| {
        let text = store.blob_text(id, 64 * 1024).ok()?;
        let mut rec: CycleRecord = toml::from_str(&text).ok()?;
        rec.cycle = n;
        Some(rec)
    })
}

/// The goal of the swarm (`goal.md`), if one was set.
pub(crate) fn goal(store: &Store, commit: ObjectId) -> Option<String> {
    match store.read_text(commit, GOAL_PATH, 256 * 1024) {
        Ok(Some(Ok(t))) => Some(t),
        _ => None,
    }
}

/// `notes/<id>.md` of the state at `commit`: the hand-offs, newest task first, at most `budget` bytes in all.
pub(crate) fn handoffs(store: &Store, snap: &Snapshot, only_parent: Option<&str>, budget: usize) -> String {
    let Ok(files) = store.list_dir(snap.commit, crate::state::NOTES_DIR) else { return String::new() };
    let mut notes: Vec<(Timestamp, String, String)> = Vec::new();
    for (name, id) in files {
        let Some(task_id) = name.strip_suffix(".md") else { continue };
        let task = snap.board.tasks.get(task_id).map(|s| &s.task);
        if let Some(p) = only_parent
            && task.and_then(|t| t.parent.as_deref()) != Some(p)
        {
            continue;
        }
        let at = task.and_then(|t| t.result.as_ref()).and_then(|r| r.at).unwrap_or(Timestamp::from_secs(0));
        let title = task.map(|t| t.title.clone()).unwrap_or_default();
        if let Ok(text) = store.blob_text(id, 64 * 1024) {
            notes.push((at, format!("## {task_id}: {title}"), text));
        }
    }
    notes.sort_by_key(|n| std::cmp::Reverse(n.0));
    let mut out = String::new();
    for (_, head, text) in notes {
        let piece = format!("{head}\n{}\n\n", text.trim());
        if out.len() + piece.len() > budget {
            out.push_str("(older hand-offs left out)\n");
            break;
        }
        out.push_str(&piece);
    }
    if out.is_empty() { "(none yet)".into() } else { out }
}

/// The board as text for prompts: one line a task.
pub(crate) fn board_text(board: &Board, budget: usize) -> String {
    task_lines(board, budget, |t| t.parent.as_deref().map(|p| format!(" (parent {p})")).unwrap_or_default())
}

/// One line a task, oldest first: `id [kind status] title<extra>`, within `budget` bytes (task text escaped).
pub(crate) fn task_lines(board: &Board, budget: usize, extra: impl Fn(&Task) -> String) -> String {
    let mut tasks: Vec<&Task> = board.tasks.values().map(|s| &s.task).collect();
    tasks.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let mut out = String::new();
    for t in tasks {
        let line = format!(
            "{} [{} {}] {}{}\n",
            t.id,
            t.kind,
            t.status,
            crate::escape::line(&t.title),
            crate::escape::line(&extra(t))
        );
        if out.len() + line.len() > budget {
            out.push_str("(more tasks left out)\n");
            break;
        }
        out.push_str(&line);
    }
    if out.is_empty() { "(no tasks yet)".into() } else { out }
}

/// Counts of tasks by status.
pub(crate) fn counts(board: &Board) -> [(Status, usize); 5] {
    let mut c = Status::ALL.map(|s| (s, 0usize));
    for st in board.tasks.values().map(|s| s.task.status).chain(board.closed.values().map(|c| c.status)) {
        if let Some(e) = c.iter_mut().find(|(s, _)| *s == st) {
            e.1 += 1;
        }
    }
    c
}

/// The identity of every commit a runner and its agents make, in the environment (`GIT_AUTHOR_*`,
/// `GIT_COMMITTER_*`): the clone's `user.name`/`user.email` when it has them, else the agent id. In the environment
/// and not in git config, because agent CLIs run their shell tools with a git config of their own (Gemini CLI sets
/// `GIT_CONFIG_GLOBAL=/dev/null`), and on a fresh machine there is none at all: the agent's own commit must work.
///
/// A variable the runner's own environment `env` sets already (a CI job that exports an identity) is left as it is.
pub(crate) fn commit_ident(repo: &gix::Repository, agent: &str, env: &Environment) -> Vec<(String, String)> {
    let cfg = repo.config_snapshot();
    let get = |k: &str| cfg.string(k).map(|v| v.to_string()).filter(|v| !v.trim().is_empty());
    let name = get("user.name").unwrap_or_else(|| agent.to_string());
    let email = get("user.email").unwrap_or_else(|| format!("{agent}@git-swarm.invalid"));
    [
        (Var::GitAuthorName, &name),
        (Var::GitCommitterName, &name),
        (Var::GitAuthorEmail, &email),
        (Var::GitCommitterEmail, &email),
    ]
    .into_iter()
    .filter(|(k, _)| !env.git_identity_set(*k))
    .map(|(k, v)| (k.name().to_string(), v.clone()))
    .collect()
}

/// The author and committer of a commit the runner makes itself at `now`: the identity [`commit_ident`] chose, or
/// the one the runner's environment `env` sets (a CI job that exports `GIT_AUTHOR_NAME`).
pub(crate) fn signature(
    ident: &[(String, String)],
    now: crate::time::Timestamp,
    env: &Environment,
) -> gix::actor::Signature {
    let get = |k: Var| {
        ident
            .iter()
            .find(|(n, _)| n == k.name())
            .map(|(_, v)| v.clone())
            .or_else(|| env.git_identity(k).map(String::from))
            .unwrap_or_else(|| "git-swarm".to_string())
    };
    gix::actor::Signature {
        name: get(Var::GitAuthorName).into(),
        email: get(Var::GitAuthorEmail).into(),
        time: gix::date::Time { seconds: now.secs() as i64, offset: 0 },
    }
}

/// The last lines of an agent's output, one line, for a failure reason.
pub(crate) fn reason_from(what: &str, tail: &[String]) -> String {
    let lines: Vec<&str> =
        tail.iter().rev().take(8).map(String::as_str).collect::<Vec<_>>().into_iter().rev().collect();
    let text = redact_secrets(&lines.join(" | "));
    let text = crate::escape::line(&text);
    let cut: String = text.chars().take(600).collect();
    if cut.is_empty() { what.to_string() } else { format!("{what}: {cut}") }
}

/// Text that goes from an agent into the state ref (failure reasons, hand-offs) with what looks like a secret
/// replaced by `[redacted]` ([`crate::secrets`]: this process's secrets by name and by value, and secret shapes).
/// Best effort: the state ref is readable by everyone who can fetch the repository.
pub(crate) fn redact_secrets(text: &str) -> String {
    crate::secrets::scrub(text)
}

/// Redact secrets from everything a runner writes into the state ref: files (hand-offs, verdicts), the summary,
/// results and failure reasons, and the text of tasks the change files (a planner's proposals, the judge's next
/// cycle). Text people wrote into tasks that exist already is left as it is.
pub(crate) fn scrub(mut ch: Change) -> Change {
    for text in ch.files.values_mut() {
        *text = redact_secrets(text);
    }
    ch.summary = redact_secrets(&ch.summary);
    for w in &mut ch.writes {
        let t = &mut w.task;
        if let Some(note) = t.result.as_mut().and_then(|r| r.note.as_mut()) {
            *note = redact_secrets(note);
        }
        for f in &mut t.failures {
            f.reason = redact_secrets(&f.reason);
        }
        if t.epoch == 0 && t.status == crate::model::Status::Open {
            t.title = redact_secrets(&t.title);
            t.body = redact_secrets(&t.body);
            t.acceptance = redact_secrets(&t.acceptance);
        }
    }
    ch
}
