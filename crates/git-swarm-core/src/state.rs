//! The state tree: where everything is in it (the paths below, which nothing else spells out) and what a read of it
//! gives and a write takes ([`Board`], [`Change`]). `ops` decides changes on boards, `store` reads boards from and
//! writes changes to git; both depend on this module and not on each other.
//!
//! ```text
//! swarm.toml                      the settings (Config)
//! spend.toml                      what the swarm spent (Spend)
//! goal.md                         the goal
//! tasks/<shard>/<id>.toml         live tasks (open, claimed); <shard>: the id's first two hex digits, else `xx`
//! tasks/<status>/<shard>/<id>.toml  finished tasks (done, failed, cancelled)
//! cycles/<n>.toml                 the judge's records (CycleRecord)
//! notes/<id>.md                   hand-offs of finished tasks
//! prompts/<role>.md               prompts that replace the built-in ones
//! README.md                       what the ref is, for whoever finds it
//! ```

use std::collections::BTreeMap;

use crate::model::{Config, Status, Task};
use crate::usage::Spend;

pub(crate) const CONFIG_PATH: &str = "swarm.toml";
/// What the swarm has spent ([`crate::usage::Spend`]).
pub(crate) const SPEND_PATH: &str = "spend.toml";
pub const GOAL_PATH: &str = "goal.md";
pub(crate) const TASKS_DIR: &str = "tasks";
/// The judge's records, `cycles/<n>.toml`.
pub const CYCLES_DIR: &str = "cycles";
/// Hand-offs, `notes/<id>.md`.
pub const NOTES_DIR: &str = "notes";
/// Prompts that replace the built-in ones, `prompts/<name>.md`.
pub const PROMPTS_DIR: &str = "prompts";
pub(crate) const README_PATH: &str = "README.md";

/// The board as read from one commit of the state ref: the settings and the readable tasks.
///
/// A board read for an op holds every live task (open or claimed) in `tasks` and knows the finished ones only by
/// their paths (`closed`): their files sit under `tasks/done/`, `tasks/failed/`, `tasks/cancelled/`, so an op costs
/// the same with 2,000 finished tasks as with none. A board read in full (for `list`, `show`) has every task in
/// `tasks` and nothing in `closed`.
#[derive(Debug, Clone, Default)]
pub struct Board {
    pub config: Config,
    pub tasks: imbl::OrdMap<String, Stored>,
    pub closed: imbl::OrdMap<String, Closed>,
    /// Other files that carry the id of a task in `tasks` (reported as problems). Writing the task deletes them,
    /// so that a stale twin can never come back to life when the task moves.
    pub twins: BTreeMap<String, Vec<String>>,
    /// What the swarm has spent (`spend.toml`).
    pub spend: Spend,
    /// The cycle that runs: one more than the last record in `cycles/` (1 before any).
    pub cycle: u64,
    /// Read for an op about a few tasks (`crate::store::Store::read_tasks`): `tasks` holds those, `unread` the
    /// ids of the other live tasks. An op that looks at every task refuses to run on it ([`crate::ops::DomainError::PartialBoard`]).
    pub partial: bool,
    pub unread: std::collections::BTreeSet<String>,
    /// A partial board read for a claim of the next ready task of this kind at this clock
    /// ([`crate::store::Store::read_next`]): it holds every task that claim touches then, so the claim may run on it.
    pub picked: Option<(crate::model::Kind, crate::time::Timestamp)>,
    /// A partial board whose files were looked up: only those tasks and their deps are known, no other id (an op
    /// that mints ids refuses it).
    pub lookup: bool,
    /// `swarm.toml` of this commit cannot be read: `config` is then the newest settings of the ref's history that
    /// can (or the defaults), so that the board can be shown and repaired. Every op but one that replaces the
    /// settings is refused on it (`txn`: [`crate::txn::TxnError::BrokenSettings`]).
    pub broken_settings: Option<BrokenSettings>,
}

/// Why the settings of a board are not its own ([`Board::broken_settings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenSettings {
    /// `swarm.toml` (path and commit) and what is wrong with it.
    pub problem: Problem,
    /// The commit whose settings the board shows instead: the newest of the ref's first-parent history whose
    /// `swarm.toml` reads; `None` when none does (the defaults).
    pub fallback: Option<String>,
}

/// A finished task known by its path alone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Closed {
    pub status: Status,
    pub path: String,
}

impl Board {
    /// Is there a task with this id, read or not?
    pub fn contains(&self, id: &str) -> bool {
        self.tasks.contains_key(id) || self.closed.contains_key(id) || self.unread.contains(id)
    }

    /// The status of a task, read or not.
    pub fn status_of(&self, id: &str) -> Option<Status> {
        self.tasks.get(id).map(|s| s.task.status).or_else(|| self.closed.get(id).map(|c| c.status))
    }
}

/// A task with the path it was read from (writes go back to the same path).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stored {
    pub path: String,
    pub task: Task,
}

/// The effect of one operation: the task files to write and what the commit says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Change {
    pub op: &'static str,
    pub agent: String,
    /// The task the op is about (first task for a batch).
    pub task: Option<String>,
    pub epoch: Option<u64>,
    /// One line for the commit subject (already free of control characters).
    pub summary: String,
    pub writes: Vec<Stored>,
    /// Paths to delete (a task that moved when it finished).
    pub removes: Vec<String>,
    /// Other files of the state tree to write (`notes/<id>.md`, `cycles/<n>.toml`, `goal.md`), path → text.
    pub files: BTreeMap<String, String>,
    /// The ops that [`Change::then`] folded into this one, after it (each one more group of trailers).
    pub also: Vec<OpRecord>,
    /// The swarm's spend after this change, when it records usage (`spend.toml`).
    pub spend: Option<Spend>,
    /// Who publishes it when that is not `agent`: the runner process whose desk publishes for its agents
    /// ([`crate::txn::Swarm::writer`]; the `Swarm-Writer` trailer).
    pub writer: Option<String>,
}

/// One op of a commit that holds several (a landing that also claims the next task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    pub op: &'static str,
    pub task: Option<String>,
    pub epoch: Option<u64>,
    /// The op's agent when it is not the commit's (a batch of the landing desk folds several agents' ops).
    pub agent: Option<String>,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.removes.is_empty() && self.files.is_empty() && self.spend.is_none()
    }

    /// Fold `next` — an op computed on the board with `self` applied (see [`crate::ops::apply`]) — into this change, so that
    /// both go out in one commit and one push.
    pub fn then(mut self, next: Change) -> Change {
        if next.is_empty() {
            return self;
        }
        if self.is_empty() {
            return next;
        }
        for w in next.writes {
            // A later write of the same task replaces the earlier one; its old path is not removed twice.
            self.writes.retain(|x| x.task.id != w.task.id);
            self.removes.retain(|r| *r != w.path);
            self.writes.push(w);
        }
        for r in next.removes {
            if !self.removes.contains(&r) && !self.writes.iter().any(|w| w.path == r) {
                self.removes.push(r);
            }
        }
        self.files.extend(next.files);
        if next.spend.is_some() {
            self.spend = next.spend;
        }
        self.summary = format!("{}; {}", self.summary, next.summary);
        let own = |a: String| (a != self.agent).then_some(a);
        let also = next.also.into_iter().map(|r| OpRecord { agent: r.agent.or_else(|| own(next.agent.clone())), ..r });
        let also: Vec<OpRecord> = also.collect();
        self.also.push(OpRecord { op: next.op, task: next.task, epoch: next.epoch, agent: own(next.agent) });
        self.also.extend(also);
        self
    }
}

/// Where a live task with this id is stored when we create it: `tasks/<2 hex>/<id>.toml`, a fan-out that keeps
/// every tree an op rewrites small however large the board grows.
pub fn task_path(id: &str) -> String {
    format!("{TASKS_DIR}/{}/{id}.toml", shard(id))
}

/// Where a finished task is stored: `tasks/<status>/<2 hex>/<id>.toml`.
pub fn closed_path(status: Status, id: &str) -> String {
    format!("{TASKS_DIR}/{status}/{}/{id}.toml", shard(id))
}

/// The shard folder of an id: its first two hex digits (lowercase), else `xx`.
pub fn shard(id: &str) -> String {
    let hex: String = id.chars().filter(|c| c.is_ascii_hexdigit()).take(2).collect();
    if hex.len() == 2 { hex.to_ascii_lowercase() } else { "xx".to_string() }
}

/// The record of cycle `n`: `cycles/<n>.toml`.
pub(crate) fn cycle_path(n: u64) -> String {
    format!("{CYCLES_DIR}/{n}.toml")
}

/// The hand-off of task `id`: `notes/<id>.md`.
pub fn note_path(id: &str) -> String {
    format!("{NOTES_DIR}/{id}.md")
}

/// A prompt of the swarm's own: `prompts/<name>.md`.
pub fn prompt_path(name: &str) -> String {
    format!("{PROMPTS_DIR}/{name}.md")
}

/// A file of the state ref that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub path: String,
    pub commit: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The message may quote the file (a TOML error does): escape it like the path.
        write!(
            f,
            "{} in commit {}: {}",
            crate::escape::line(&self.path),
            short(&self.commit),
            crate::escape::line(&self.message)
        )
    }
}

pub fn short(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}
