//! The read for a claim of the next ready task by a new process (`git swarm claim` without id, an agent's hook):
//! which task that is depends on every live task, but only a few fields of each, so the store keeps an index of
//! those fields on disk — one line a task — and reads in full only the tasks the claim touches.
//!
//! The index says "the `tasks/` tree with this id holds live tasks with these fields, and finished ones with these
//! statuses", written from a clean read and keyed by that tree's id (invariant 7). A read compares that tree with the
//! newest one as a patch does ([`super::patch`]: every file that changed is parsed by the full walk's rules, anything
//! unusual gives up), chooses with the ops' own rule ([`ops::pick`]: the best ready task and the spent claims the
//! claim records as failed), and reads those tasks, their deps, and the claims of that kind that run out within
//! [`EXPIRING`] (the op's clock is a moment later than the read's) by id ([`Store::read_tasks`]). The board says
//! [`Board::picked`](crate::state::Board::picked): the claim may run on it although it is partial, and it computes
//! what it would on the whole board (invariant 34). Without a usable index the board is read as usual and an index
//! is written from it; after a read that parsed [`REWRITE_AFTER`] changed files it is written anew.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use gix::ObjectId;

use super::patch::Delta;
use super::{Entry, Snapshot, Store, StoreError, TASKS_DIR, Walk, kept};
use crate::model::{Kind, Status, Task};
use crate::ops::{self, Deps, Pickable};
use crate::time::Timestamp;

/// What the index must say it is: another format or version of git swarm is not trusted.
const FORMAT: &str = concat!("git-swarm pick index 1, ", env!("CARGO_PKG_VERSION"));
const FILE: &str = "pick-index-live.txt";
/// Task files a read through the index may parse before the index is written anew: a line a task is cheap to
/// write (~5 ms for 20,000), and every file that changed since the index is parsed by every claim.
const REWRITE_AFTER: usize = 16;
/// Claims that run out this soon after the read are read too, as candidates of the op's later clock.
pub(crate) const EXPIRING: Duration = Duration::from_secs(60);

/// An index read back: lines borrowed from the file's bytes, both lists in id order.
struct Index<'a> {
    tree: ObjectId,
    live: Vec<Pickable<'a>>,
    closed: Vec<(&'a str, Status)>,
}

impl Index<'_> {
    fn status(&self, id: &str) -> Option<Status> {
        if let Ok(i) = self.live.binary_search_by(|p| p.id.cmp(id)) {
            return Some(self.live[i].status);
        }
        self.closed.binary_search_by(|(c, _)| (*c).cmp(id)).ok().map(|i| self.closed[i].1)
    }
}

/// The newest tasks against the index's: what came (parsed), and the ids of the files that went away.
struct Changes {
    gone: HashSet<String>,
    live: Vec<Task>,
    closed: Vec<(String, Status)>,
}

impl Store {
    fn index_path(&self) -> Option<PathBuf> {
        Some(self.cache_dir.as_ref()?.join(FILE))
    }

    /// The board at `commit` for a claim of the next ready task of `kind` at `now`: partial and
    /// [`Board::picked`](crate::state::Board::picked) when the index could be used, else the live board as [`Store::read`] reads it.
    pub fn read_next(&self, commit: ObjectId, kind: Kind, now: Timestamp) -> Result<Snapshot, StoreError> {
        // A store that read before patches its own last read, which is cheaper still.
        let has_last = self.last.borrow()[0].is_some();
        let tree = self.tasks_tree(commit);
        if let (false, Some(tree)) = (has_last, tree)
            && let Some(snap) = self.pick_from_index(commit, tree, kind, now)?
        {
            return Ok(snap);
        }
        let snap = self.read(commit, false)?;
        if let Some(tree) = tree
            && !has_last
        {
            if snap.problems.is_empty() && snap.board.twins.is_empty() {
                let live = snap.board.tasks.values().map(|s| Pickable::of(&s.task)).collect();
                let closed = snap.board.closed.iter().map(|(id, c)| (id.as_str(), c.status)).collect();
                self.write_index(tree, live, closed);
            } else {
                self.forget_index();
            }
        }
        Ok(snap)
    }

    fn pick_from_index(
        &self,
        commit: ObjectId,
        tree: ObjectId,
        kind: Kind,
        now: Timestamp,
    ) -> Result<Option<Snapshot>, StoreError> {
        let Some(bytes) = self.index_path().and_then(|p| std::fs::read(p).ok()) else { return Ok(None) };
        let Some(index) = decode(&bytes) else { return Ok(None) };
        let commit_hex = commit.to_hex().to_string();
        let Some(changes) = self.changes_since(&index, tree, &commit_hex) else { return Ok(None) };
        // The settings (`max_attempts`) and the layout, before choosing.
        let base = self.read_tasks(commit, &[], false)?;
        let max_attempts = base.board.config.max_attempts;
        let came: std::collections::HashMap<&str, Status> = (changes.live.iter().map(|t| (t.id.as_str(), t.status)))
            .chain(changes.closed.iter().map(|(c, st)| (c.as_str(), *st)))
            .collect();
        let status_of = |id: &str| match came.get(id) {
            Some(st) => Some(*st),
            None if changes.gone.contains(id) => None,
            None => index.status(id),
        };
        let unchanged = |p: &Pickable<'_>| changes.gone.is_empty() || !changes.gone.contains(p.id);
        let every = || index.live.iter().copied().filter(unchanged).chain(changes.live.iter().map(Pickable::of));
        let (best, swept) = ops::pick(every(), status_of, kind, now, max_attempts);
        let soon = now.plus(EXPIRING);
        let expiring =
            every().filter(|p| p.kind == kind && p.status == Status::Claimed && !p.expired(now) && p.expired(soon));
        let mut want: Vec<&str> = best.into_iter().chain(swept).collect();
        want.extend(expiring.map(|p| p.id));
        want.sort_unstable();
        want.dedup();
        let mut snap = self.read_tasks(commit, &want, false)?;
        snap.board.picked = Some((kind, now));
        if changes.live.len() + changes.closed.len() >= REWRITE_AFTER {
            let mut live: Vec<Pickable<'_>> = every().collect();
            live.sort_unstable_by(|a, b| a.id.cmp(b.id));
            let mut closed: Vec<(&str, Status)> =
                index.closed.iter().copied().filter(|(c, _)| !changes.gone.contains(*c)).collect();
            closed.extend(changes.closed.iter().map(|(c, st)| (c.as_str(), *st)));
            closed.sort_unstable_by(|a, b| a.0.cmp(b.0));
            self.write_index(tree, live, closed);
        }
        Ok(Some(snap))
    }

    /// What changed from the index's `tasks/` tree to `tree`; `None` when that is not a plain change of task files
    /// (as for a patch), or a file came for an id the index still has (a twin).
    fn changes_since(&self, index: &Index<'_>, tree: ObjectId, commit: &str) -> Option<Changes> {
        let mut changes = Changes { gone: HashSet::new(), live: Vec::new(), closed: Vec::new() };
        if index.tree == tree {
            return Some(changes);
        }
        let mut deltas = Vec::new();
        let walk = Walk { commit, full: false, closed: None, want: None };
        self.diff_folder(Some(index.tree), tree, TASKS_DIR, 0, &walk, &mut deltas)?;
        let mut came = Vec::new();
        for d in deltas {
            match d {
                Delta::Gone(id) => {
                    changes.gone.insert(id);
                }
                Delta::Came { id, entry, .. } => came.push((id, entry)),
            }
        }
        let mut ids = HashSet::new();
        for (id, entry) in came {
            if !ids.insert(id.clone()) || (index.status(&id).is_some() && !changes.gone.contains(&id)) {
                return None;
            }
            match entry {
                Entry::Live(task) | Entry::Finished(task) => changes.live.push(*task),
                Entry::Closed(status) => changes.closed.push((id, status)),
                Entry::Unread(_) => return None,
            }
        }
        Some(changes)
    }

    /// Write the index of `tree` (best effort: an index not written is one full read later). An id or a dep that
    /// a line cannot hold (a space, a tab, a line break: only a hand-made file has one) writes none.
    fn write_index(&self, tree: ObjectId, live: Vec<Pickable<'_>>, closed: Vec<(&str, Status)>) {
        let Some(path) = self.index_path() else { return };
        match encode(tree, &live, &closed) {
            Some(body) => {
                let _ = kept::write_whole(&path, body.as_bytes());
            }
            None => self.forget_index(),
        }
    }

    pub(super) fn forget_index(&self) {
        if let Some(path) = self.index_path() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A field a line can hold: not empty, no space, tab or line break.
fn plain(s: &str) -> bool {
    !s.is_empty() && !s.contains([' ', '\t', '\n', '\r'])
}

fn time(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_string(), |t| t.0.to_string())
}

fn encode(tree: ObjectId, live: &[Pickable<'_>], closed: &[(&str, Status)]) -> Option<String> {
    let mut out = format!("{FORMAT}\t{}\n", tree.to_hex());
    for p in live {
        if !plain(p.id) || !p.deps.iter().all(plain) {
            return None;
        }
        let deps: Vec<&str> = p.deps.iter().collect();
        let kind = match p.kind {
            Kind::Work => 'w',
            Kind::Plan => 'p',
        };
        let _ = writeln!(
            out,
            "L\t{}\t{kind}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            p.id,
            p.status.as_str(),
            p.priority,
            time(p.created_at),
            p.attempts,
            p.epoch,
            time(p.lease_until),
            deps.join(" ")
        );
    }
    for (id, status) in closed {
        if !plain(id) {
            return None;
        }
        let _ = writeln!(out, "C\t{id}\t{}", status.as_str());
    }
    Some(out)
}

/// An index from the bytes of its file; `None` for anything but a whole file of this format, both lists in id
/// order with no id twice.
fn decode(bytes: &[u8]) -> Option<Index<'_>> {
    let text = std::str::from_utf8(kept::whole_body(bytes)?).ok()?;
    let mut lines = text.lines();
    let (format, tree) = lines.next()?.split_once('\t')?;
    if format != FORMAT {
        return None;
    }
    // A line of a live task is about 40 bytes.
    let live = Vec::with_capacity(text.len() / 40);
    let mut index = Index { tree: ObjectId::from_hex(tree.as_bytes()).ok()?, live, closed: Vec::new() };
    let time = |s: &str| if s == "-" { Some(None) } else { s.parse().ok().map(|ms| Some(Timestamp(ms))) };
    for line in lines {
        let mut f = line.split('\t');
        match f.next()? {
            "L" => {
                let id = f.next().filter(|id| plain(id))?;
                let kind = match f.next()? {
                    "w" => Kind::Work,
                    "p" => Kind::Plan,
                    _ => return None,
                };
                let p = Pickable {
                    id,
                    kind,
                    status: f.next()?.parse().ok()?,
                    priority: f.next()?.parse().ok()?,
                    created_at: time(f.next()?)?,
                    attempts: f.next()?.parse().ok()?,
                    epoch: f.next()?.parse().ok()?,
                    lease_until: time(f.next()?)?,
                    deps: Deps::Spaced(f.next()?),
                };
                if f.next().is_some() || index.live.last().is_some_and(|q| q.id >= id) {
                    return None;
                }
                index.live.push(p);
            }
            "C" => {
                let id = f.next().filter(|id| plain(id))?;
                let status: Status = f.next()?.parse().ok()?;
                if f.next().is_some() || index.closed.last().is_some_and(|(q, _)| *q >= id) {
                    return None;
                }
                index.closed.push((id, status));
            }
            _ => return None,
        }
    }
    // One list per id: a live task is not also finished.
    if index.live.iter().any(|p| index.closed.binary_search_by(|(c, _)| (*c).cmp(p.id)).is_ok()) {
        return None;
    }
    Some(index)
}

/// The index of `board`'s live tasks, for tests: what [`Store::read_next`] writes after a full read.
#[cfg(test)]
fn encode_board(tree: ObjectId, board: &crate::state::Board) -> Option<String> {
    let live: Vec<Pickable<'_>> = board.tasks.values().map(|s| Pickable::of(&s.task)).collect();
    let closed: Vec<(&str, Status)> = board.closed.iter().map(|(id, c)| (id.as_str(), c.status)).collect();
    encode(tree, &live, &closed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Board;

    fn board() -> Board {
        let mut board = Board::default();
        for (id, status, deps, lease) in [
            ("t-1", "open", "[\"t-0\"]", None),
            ("t-2", "claimed", "[]", Some("2026-11-29T14:15:00Z")),
            ("t-3", "open", "[\"t-1\", \"t-0\"]", None),
        ] {
            let claim = lease
                .map_or(String::new(), |l| format!("[claim]\nagent = \"w-1\"\nepoch = 1\nlease_until = \"{l}\"\n"));
            let text = format!(
                "id = \"{id}\"\ntitle = \"x\"\nstatus = \"{status}\"\npriority = -2\ndeps = {deps}\n\
                 created_at = \"2026-11-29T14:05:00.250Z\"\nepoch = 1\n{claim}"
            );
            let task: Task = toml::from_str(&text).expect("a task");
            board.tasks.insert(id.into(), crate::state::Stored { path: format!("tasks/ab/{id}.toml"), task });
        }
        board
            .closed
            .insert("t-0".into(), crate::state::Closed { status: Status::Done, path: "tasks/done/t-0.toml".into() });
        board
    }

    fn tree() -> ObjectId {
        ObjectId::from_hex(b"4b825dc642cb6eb9a060e54bf8d69288fbee4904").expect("an id")
    }

    fn framed(body: &str) -> Vec<u8> {
        format!("{:08x}\n{body}", crc32fast::hash(body.as_bytes())).into_bytes()
    }

    #[test]
    fn an_index_reads_back_as_the_board_it_was_written_from() {
        let board = board();
        let bytes = framed(&encode_board(tree(), &board).expect("encoded"));
        let index = decode(&bytes).expect("decoded");
        assert_eq!(index.tree, tree());
        assert_eq!(index.live.len(), 3);
        for (p, s) in index.live.iter().zip(board.tasks.values()) {
            let q = Pickable::of(&s.task);
            assert_eq!(
                (p.id, p.kind, p.status, p.priority, p.created_at, p.attempts, p.epoch, p.lease_until),
                (q.id, q.kind, q.status, q.priority, q.created_at, q.attempts, q.epoch, q.lease_until)
            );
            assert_eq!(p.deps.iter().collect::<Vec<_>>(), q.deps.iter().collect::<Vec<_>>());
        }
        assert_eq!(index.closed, vec![("t-0", Status::Done)]);
        assert_eq!(index.status("t-0"), Some(Status::Done));
        assert_eq!(index.status("t-2"), Some(Status::Claimed));
        assert_eq!(index.status("t-9"), None);
    }

    #[test]
    fn an_index_that_is_not_whole_or_not_in_order_is_not_used() {
        let body = encode_board(tree(), &board()).expect("encoded");
        assert!(decode(&framed(&body)).is_some());
        let bytes = framed(&body);
        assert!(decode(&bytes[..bytes.len() - 3]).is_none(), "cut short");
        assert!(decode(&framed(&body.replace(FORMAT, "git-swarm pick index 0, 0.0.0"))).is_none(), "another version");
        let swapped = body.replacen("L\tt-1\t", "L\tt-x\t", 1).replacen("L\tt-2\t", "L\tt-1\t", 1);
        assert!(decode(&framed(&swapped.replacen("L\tt-x\t", "L\tt-2\t", 1))).is_none(), "out of order");
        assert!(decode(&framed(&body.replacen("C\tt-0\t", "C\tt-1\t", 1))).is_none(), "live and finished");
        assert!(decode(&framed(&body.replacen("\tclaimed\t", "\tclaimd\t", 1))).is_none(), "a bad status");
        assert!(decode(&framed(&format!("{body}L\tt-9\tw\topen\n"))).is_none(), "a line cut short");
    }

    #[test]
    fn an_id_a_line_cannot_hold_writes_no_index() {
        let mut board = board();
        let mut s = board.tasks["t-1"].clone();
        s.task.id = "t 4".into();
        board.tasks.insert("t 4".into(), s);
        assert!(encode_board(tree(), &board).is_none());
        let mut board = self::board();
        board.tasks.get_mut("t-1").expect("t-1").task.deps.push("a\tb".into());
        assert!(encode_board(tree(), &board).is_none());
    }
}
