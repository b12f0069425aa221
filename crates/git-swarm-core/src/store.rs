//! The state tree in a git object database, read and written in-process with gix.
//!
//! Reading is forgiving: a task file that cannot be read becomes a [`Problem`] (path, commit, reason) and the rest of
//! the board is read as usual. A broken `swarm.toml` is an error: without settings no op can be judged.
//! Writing turns a [`Change`] into blobs, an edited tree and one commit whose parent is the base that was read.

use std::collections::BTreeMap;
use std::path::Path;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;
use gix::refs::transaction::{Change as RefChange, LogChange, PreviousValue, RefEdit, RefLog};

use crate::escape::squash;
use crate::model::{self, Config, Status, Task};
use crate::state::{Board, Change, Closed, Stored};
pub(crate) use crate::state::{CONFIG_PATH, CYCLES_DIR, README_PATH, SPEND_PATH, TASKS_DIR};
use crate::time::Timestamp;
use crate::trailer::Mark;

mod batch;
mod layout;
mod log;
mod read;
mod refs;
mod write;

use layout::in_tree_order;
pub use log::{AlsoOp, Landed, Landings, LogEntry, Refused};
pub(crate) use read::pick::EXPIRING as PICK_WINDOW;
#[cfg(test)]
use write::commit_message;
use write::is_write_error;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{context}: {message}")]
    Git { context: String, message: String },
}

/// Attach a context to any gix error, with its whole chain of causes.
pub trait GitContext<T> {
    fn git(self, context: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T, E: std::error::Error + 'static> GitContext<T> for Result<T, E> {
    fn git(self, context: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Git { context: context(), message: crate::with_causes(&e) })
    }
}

pub use crate::state::{Problem, short};

/// The board at one commit of the state ref.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub commit: ObjectId,
    pub board: Board,
    pub problems: Vec<Problem>,
}

/// Who writes the commits.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

/// An object database plus refs: the user's repository, or the remote's when it is a local path.
#[derive(Debug)]
pub struct Store {
    pub repo: gix::Repository,
    /// Tasks parsed from blobs, by blob id: a blob never changes, and an op re-reads a board in which almost every
    /// task is as it was (a busy runner re-reads after every lost race).
    parsed: std::cell::RefCell<std::collections::HashMap<ObjectId, Task>>,
    /// `tasks/` trees known to be laid out as the ops write them ([`Store::canonical`]), by tree id.
    canonical: std::cell::RefCell<std::collections::HashSet<ObjectId>>,
    /// Where those verdicts are kept between processes (`.git/swarm/cache/` of the clone that reads).
    cache_dir: Option<std::path::PathBuf>,
    /// The last clean read of the live tasks (`[0]`) and of every task (`[1]`): the next one patches it.
    last: std::cell::RefCell<[Option<read::patch::LastRead>; 2]>,
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let repo = gix::open_opts(path, crate::open_options(gix::sec::Trust::Full))
            .git(|| format!("cannot open the repository at {}", path.display()))?;
        Ok(Store::from_repo(repo))
    }

    pub fn from_repo(repo: gix::Repository) -> Store {
        Store {
            repo,
            parsed: Default::default(),
            canonical: Default::default(),
            cache_dir: None,
            last: Default::default(),
        }
    }

    /// Keep what this store learns about trees (content-keyed, so any clone's verdict is right for any reader) in
    /// `dir` between processes.
    pub(crate) fn with_cache(mut self, dir: std::path::PathBuf) -> Store {
        self.cache_dir = Some(dir);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_with_a_repeated_or_unsorted_name_is_not_in_tree_order() {
        let id = ObjectId::empty_tree(gix::hash::Kind::Sha1);
        let e = |n: &str, k: EntryKind| (n.to_string(), k, id);
        assert!(in_tree_order(&[e("ab", EntryKind::Tree), e("done", EntryKind::Tree), e("e0", EntryKind::Tree)]));
        // `done/` sorts after `done.toml`, as git sorts it.
        assert!(in_tree_order(&[e("done.toml", EntryKind::Blob), e("done", EntryKind::Tree)]));
        assert!(!in_tree_order(&[e("ab", EntryKind::Tree), e("ab", EntryKind::Tree)]));
        assert!(!in_tree_order(&[e("t-ab1.toml", EntryKind::Blob), e("t-ab1.toml", EntryKind::Blob)]));
        assert!(!in_tree_order(&[e("e0", EntryKind::Tree), e("ab", EntryKind::Tree)]));
    }

    #[test]
    fn log_entries_read_their_trailers() {
        let change = Change {
            op: "claim",
            agent: "alice".into(),
            task: Some("t-1".into()),
            epoch: Some(3),
            summary: "claim t-1: x".into(),
            writes: vec![],
            removes: vec![],
            ..Default::default()
        };
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&change));
        assert_eq!(
            (e.op.as_deref(), e.task.as_deref(), e.agent.as_deref(), e.epoch, e.summary.as_str()),
            (Some("claim"), Some("t-1"), Some("alice"), Some(3), "claim t-1: x")
        );
        let two = Change {
            op: "done",
            task: Some("t-1".into()),
            epoch: Some(3),
            summary: "done t-1".into(),
            files: [("notes/t-0.md".to_string(), "y".to_string())].into(),
            ..change
        }
        .then(Change {
            op: "claim",
            agent: "alice".into(),
            task: Some("t-2".into()),
            epoch: Some(1),
            summary: "claim t-2".into(),
            files: [("notes/t-1.md".to_string(), "x".to_string())].into(),
            ..Default::default()
        });
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&two));
        assert_eq!((e.op.as_deref(), e.task.as_deref(), e.epoch), (Some("done"), Some("t-1"), Some(3)));
        assert_eq!(e.also, vec![("claim".to_string(), Some("t-2".to_string()), Some(1), None)]);
        assert_eq!(e.summary, "done t-1; claim t-2");
        // A batch: another agent's landing (and its own next claim) in the leader's commit keep their agent.
        let other = |op, task: &str| Change {
            op,
            agent: "bob".into(),
            task: Some(task.into()),
            epoch: Some(2),
            summary: format!("{op} {task}"),
            files: [(format!("notes/{task}.md"), "z".to_string())].into(),
            ..Default::default()
        };
        let batch = two.then(other("done", "t-3").then(other("claim", "t-4")));
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&batch));
        assert_eq!(e.agent.as_deref(), Some("alice"));
        let agents: Vec<_> = e.also.iter().map(|a| (a.1.as_deref(), a.3.as_deref())).collect();
        assert_eq!(agents, [(Some("t-2"), None), (Some("t-3"), Some("bob")), (Some("t-4"), Some("bob"))]);
        // No writer named: the agent published it.
        assert_eq!((e.writer.as_deref(), e.publisher()), (None, Some("alice")));
        // A runner's desk names the process that published the batch; a writer that is the agent is not written.
        let mut published = batch.clone();
        published.writer = Some("p0".into());
        let e = LogEntry::parse("c".into(), Timestamp::from_secs(1), &commit_message(&published));
        assert_eq!((e.agent.as_deref(), e.publisher()), (Some("alice"), Some("p0")));
        assert_eq!(e.also.len(), 3);
        published.writer = Some("alice".into());
        assert!(!commit_message(&published).contains("Swarm-Writer"));
    }
}
