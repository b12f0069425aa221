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
const FORMAT: &str = concat!("git-swarm pick index 2, ", env!("CARGO_PKG_VERSION"));
const FILE: &str = "pick-index-live.txt";
/// Task files a read through the index may parse before the index is written anew ([`patched`]: the lines of the
/// tasks that did not change copied as they are, about 7 ms for 20,000 on a 2-core machine, against 0.1–0.5 ms a
/// changed file that every claim parses; measured best of 4, 8 and 16).
const REWRITE_AFTER: usize = 16;
/// Claims that run out this soon after the read are read too, as candidates of the op's later clock.
pub(crate) const EXPIRING: Duration = Duration::from_secs(60);

/// An index read back, lazily: a claim on a board of 20,000 open tasks reads the lines of the few that are not
/// open, the open ones best first only as far as the first ready one, and finds a dep's status by bisection.
///
/// The file: a header line (the format, the `tasks/` tree, the byte lengths of the first two sections), then
/// 1. a line for each live task that is not open (claims: as many as there are agents), in id order;
/// 2. a line for each open task, by kind, then in the order a claim chooses ([`ops::rank`]);
/// 3. `<id>\t<status>\t<l|c>` for every task, live (`l`) or finished (`c`), in id order.
struct Index<'a> {
    tree: ObjectId,
    /// Section 1, decoded.
    held: Vec<Pickable<'a>>,
    /// Section 2, decoded by [`live_line`] as a claim reads on.
    open: &'a str,
    /// Section 3.
    ids: &'a str,
}

impl<'a> Index<'a> {
    fn status(&self, id: &str) -> Option<Status> {
        let line = find_line(self.ids, id)?;
        line.split('\t').nth(1)?.parse().ok()
    }

    /// Every live task, decoded; `None` when a line is not one.
    #[cfg(test)]
    fn live(&self) -> Option<Vec<Pickable<'a>>> {
        let mut all = self.held.clone();
        for line in self.open.lines() {
            all.push(live_line(line)?);
        }
        Some(all)
    }

    /// Every finished task; `None` when a line is not one.
    #[cfg(test)]
    fn closed(&self) -> Option<Vec<(&'a str, Status)>> {
        let mut all = Vec::new();
        for line in self.ids.lines() {
            let mut f = line.split('\t');
            let (id, status, place) = (f.next()?, f.next()?, f.next()?);
            if place == "c" {
                all.push((id, status.parse().ok()?));
            }
        }
        Some(all)
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
        // The claims and the changed tasks, every one: the spent claims, the expiring ones, and the best of them.
        let few = || index.held.iter().copied().filter(unchanged).chain(changes.live.iter().map(Pickable::of));
        let (mut best, swept) = ops::pick(few(), status_of, kind, now, max_attempts);
        // Then the open tasks, best first: the first ready one is chosen if it ranks before those.
        let beat = best.and_then(|id| few().find(|p| p.id == id));
        let mut last: Option<Pickable<'_>> = None;
        for line in index.open.lines() {
            let Some(p) = live_line(line) else { return Ok(None) };
            // Out of order, or not open: not an index this store wrote.
            if p.status != Status::Open || last.is_some_and(|q| open_order(&q, &p).is_gt()) {
                return Ok(None);
            }
            last = Some(p);
            if p.kind != kind || !unchanged(&p) {
                if kind_key(p.kind) > kind_key(kind) {
                    break;
                }
                continue;
            }
            if beat.is_some_and(|b| ops::rank(&p, &b).is_gt()) {
                break;
            }
            if ops::takeable(&p, max_attempts, now) && p.deps.iter().all(|d| status_of(d) == Some(Status::Done)) {
                best = Some(p.id);
                break;
            }
        }
        let soon = now.plus(EXPIRING);
        let expiring =
            few().filter(|p| p.kind == kind && p.status == Status::Claimed && !p.expired(now) && p.expired(soon));
        let mut want: Vec<&str> = best.into_iter().chain(swept).collect();
        want.extend(expiring.map(|p| p.id));
        want.sort_unstable();
        want.dedup();
        let mut snap = self.read_tasks(commit, &want, false)?;
        snap.board.picked = Some((kind, now));
        if changes.live.len() + changes.closed.len() >= REWRITE_AFTER
            && let Some(path) = self.index_path()
        {
            match patched(&index, tree, &changes) {
                Some(body) => {
                    let _ = kept::write_whole(&path, body.as_bytes());
                }
                None => self.forget_index(),
            }
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
        match encode(tree, live, closed) {
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

fn kind_key(kind: Kind) -> u8 {
    match kind {
        Kind::Work => 0,
        Kind::Plan => 1,
    }
}

/// The order of section 2: by kind, then as a claim chooses.
fn open_order(a: &Pickable<'_>, b: &Pickable<'_>) -> std::cmp::Ordering {
    kind_key(a.kind).cmp(&kind_key(b.kind)).then_with(|| ops::rank(a, b))
}

fn encode(tree: ObjectId, mut live: Vec<Pickable<'_>>, closed: Vec<(&str, Status)>) -> Option<String> {
    let mut ids: Vec<(&str, Status, char)> = live.iter().map(|p| (p.id, p.status, 'l')).collect();
    ids.extend(closed.iter().map(|&(id, st)| (id, st, 'c')));
    ids.sort_unstable_by(|a, b| a.0.cmp(b.0));
    // One line an id: a twin is read in full.
    if ids.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let (mut open, mut held): (Vec<_>, Vec<_>) = live.drain(..).partition(|p| p.status == Status::Open);
    held.sort_unstable_by(|a, b| a.id.cmp(b.id));
    open.sort_unstable_by(open_order);
    let mut sections = [String::new(), String::new(), String::new()];
    for (out, list) in sections.iter_mut().zip([&held, &open]) {
        for p in list {
            live_text(out, p)?;
        }
    }
    for (id, status, place) in ids {
        id_text(&mut sections[2], id, status, place)?;
    }
    let [held, open, ids] = sections;
    Some(whole(tree, &held, &open, &ids))
}

/// The index of `tree` from `index` (of an older tree) and what changed since: the lines of the tasks that did not
/// change copied as they are, those of the changed ones merged in where their order puts them. A few milliseconds
/// for 20,000 tasks, where decoding and writing every line again takes tens.
fn patched(index: &Index<'_>, tree: ObjectId, changes: &Changes) -> Option<String> {
    let gone = |id: &str| changes.gone.contains(id);
    let came: Vec<Pickable<'_>> = changes.live.iter().map(Pickable::of).collect();
    // Section 1: a few lines, written anew.
    let mut held: Vec<Pickable<'_>> = index.held.iter().copied().filter(|p| !gone(p.id)).collect();
    held.extend(came.iter().copied().filter(|p| p.status != Status::Open));
    held.sort_unstable_by(|a, b| a.id.cmp(b.id));
    let mut held_text = String::new();
    for p in &held {
        live_text(&mut held_text, p)?;
    }
    // Section 2: the index's lines but those of the tasks that changed, with the open ones that came merged in.
    let mut opens: Vec<Pickable<'_>> = came.iter().copied().filter(|p| p.status == Status::Open).collect();
    opens.sort_unstable_by(open_order);
    let mut open_text = String::with_capacity(index.open.len() + 160 * opens.len());
    let mut next = opens.iter().peekable();
    for line in index.open.lines() {
        let id = line.get(2..)?.split_once('\t')?.0;
        if gone(id) {
            continue;
        }
        if next.peek().is_some() {
            let p = live_line(line)?;
            while let Some(q) = next.next_if(|q| open_order(q, &p).is_lt()) {
                live_text(&mut open_text, q)?;
            }
        }
        open_text.push_str(line);
        open_text.push('\n');
    }
    for q in next {
        live_text(&mut open_text, q)?;
    }
    // Section 3: the same by id (an id that came is not one the index keeps: `changes_since` gives up on a twin).
    let mut ids: Vec<(&str, Status, char)> = came.iter().map(|p| (p.id, p.status, 'l')).collect();
    ids.extend(changes.closed.iter().map(|(c, st)| (c.as_str(), *st, 'c')));
    ids.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut ids_text = String::with_capacity(index.ids.len() + 64 * ids.len());
    let mut next = ids.iter().peekable();
    for line in index.ids.lines() {
        let id = line.split_once('\t')?.0;
        while let Some(&(q, status, place)) = next.next_if(|(q, ..)| *q < id) {
            id_text(&mut ids_text, q, status, place)?;
        }
        if !gone(id) {
            ids_text.push_str(line);
            ids_text.push('\n');
        }
    }
    for &(q, status, place) in next {
        id_text(&mut ids_text, q, status, place)?;
    }
    Some(whole(tree, &held_text, &open_text, &ids_text))
}

/// The whole body of an index: its header and its three sections.
fn whole(tree: ObjectId, held: &str, open: &str, ids: &str) -> String {
    format!("{FORMAT}\t{}\t{}\t{}\n{held}{open}{ids}", tree.to_hex(), held.len(), open.len())
}

/// The line of a live task (sections 1 and 2); `None` for an id or a dep a line cannot hold.
fn live_text(out: &mut String, p: &Pickable<'_>) -> Option<()> {
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
    Some(())
}

/// The line of section 3.
fn id_text(out: &mut String, id: &str, status: Status, place: char) -> Option<()> {
    if !plain(id) {
        return None;
    }
    let _ = writeln!(out, "{id}\t{}\t{place}", status.as_str());
    Some(())
}

/// A line of section 1 or 2; `None` for anything else.
fn live_line(line: &str) -> Option<Pickable<'_>> {
    let time = |s: &str| if s == "-" { Some(None) } else { s.parse().ok().map(|ms| Some(Timestamp(ms))) };
    let mut f = line.split('\t');
    if f.next()? != "L" {
        return None;
    }
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
    f.next().is_none().then_some(p)
}

/// The line of `ids` (lines that start `<id>\t`, in id order) for `id`, found by bisection over its bytes.
fn find_line<'a>(ids: &'a str, id: &str) -> Option<&'a str> {
    let b = ids.as_bytes();
    let key = |at: usize| {
        let line = &b[at..];
        let end = line.iter().position(|&c| c == b'\t' || c == b'\n').unwrap_or(line.len());
        &line[..end]
    };
    // Both ends are the starts of lines (or the end).
    let (mut lo, mut hi) = (0, b.len());
    while hi - lo > 256 {
        let mid = lo + (hi - lo) / 2;
        let Some(k) = b[mid..hi].iter().position(|&c| c == b'\n') else { break };
        let at = mid + k + 1;
        if at >= hi {
            break;
        }
        match key(at).cmp(id.as_bytes()) {
            std::cmp::Ordering::Less => lo = at,
            std::cmp::Ordering::Greater => hi = at,
            std::cmp::Ordering::Equal => return ids[at..].lines().next(),
        }
    }
    ids.get(lo..hi)?.lines().find(|l| l.split('\t').next() == Some(id))
}

/// An index from the bytes of its file; `None` for anything but a whole file of this format whose sections are
/// where its header says, and whose first section is in id order and holds no open task. The rest is checked as it
/// is read ([`Store::pick_from_index`]).
fn decode(bytes: &[u8]) -> Option<Index<'_>> {
    let text = std::str::from_utf8(kept::whole_body(bytes)?).ok()?;
    let (header, body) = text.split_once('\n')?;
    let mut h = header.split('\t');
    let (format, tree) = (h.next()?, h.next()?);
    let (held_len, open_len): (usize, usize) = (h.next()?.parse().ok()?, h.next()?.parse().ok()?);
    if format != FORMAT || h.next().is_some() {
        return None;
    }
    let held_text = body.get(..held_len)?;
    let open = body.get(held_len..held_len.checked_add(open_len)?)?;
    let ids = body.get(held_len + open_len..)?;
    if [held_text, open, ids].iter().any(|s| !s.is_empty() && !s.ends_with('\n')) {
        return None;
    }
    let mut held: Vec<Pickable<'_>> = Vec::new();
    for line in held_text.lines() {
        let p = live_line(line)?;
        if p.status == Status::Open || held.last().is_some_and(|q| q.id >= p.id) {
            return None;
        }
        held.push(p);
    }
    Some(Index { tree: ObjectId::from_hex(tree.as_bytes()).ok()?, held, open, ids })
}

/// The index of `board`'s live tasks, for tests: what [`Store::read_next`] writes after a full read.
#[cfg(test)]
fn encode_board(tree: ObjectId, board: &crate::state::Board) -> Option<String> {
    let live: Vec<Pickable<'_>> = board.tasks.values().map(|s| Pickable::of(&s.task)).collect();
    let closed: Vec<(&str, Status)> = board.closed.iter().map(|(id, c)| (id.as_str(), c.status)).collect();
    encode(tree, live, closed)
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
        assert_eq!(index.held.iter().map(|p| p.id).collect::<Vec<_>>(), ["t-2"], "the claims, decoded");
        let open: Vec<&str> = index.open.lines().map(|l| live_line(l).expect("a line").id).collect();
        assert_eq!(open, ["t-1", "t-3"], "the open tasks, best first");
        let mut live = index.live().expect("every live task");
        live.sort_by(|a, b| a.id.cmp(b.id));
        assert_eq!(live.len(), 3);
        for (p, s) in live.iter().zip(board.tasks.values()) {
            let q = Pickable::of(&s.task);
            assert_eq!(
                (p.id, p.kind, p.status, p.priority, p.created_at, p.attempts, p.epoch, p.lease_until),
                (q.id, q.kind, q.status, q.priority, q.created_at, q.attempts, q.epoch, q.lease_until)
            );
            assert_eq!(p.deps.iter().collect::<Vec<_>>(), q.deps.iter().collect::<Vec<_>>());
        }
        assert_eq!(index.closed().expect("the finished tasks"), vec![("t-0", Status::Done)]);
        assert_eq!(index.status("t-0"), Some(Status::Done));
        assert_eq!(index.status("t-2"), Some(Status::Claimed));
        assert_eq!(index.status("t-3"), Some(Status::Open));
        assert_eq!(index.status("t-9"), None);
    }

    #[test]
    fn the_open_tasks_are_in_the_order_a_claim_chooses() {
        let mut board = board();
        for (id, priority, kind) in [("t-4", 5, Kind::Work), ("t-5", 0, Kind::Plan), ("t-6", -2, Kind::Work)] {
            let mut s = board.tasks["t-1"].clone();
            (s.task.id, s.task.priority, s.task.kind) = (id.into(), priority, kind);
            s.task.created_at = s.task.created_at.map(|t| t.plus(Duration::from_secs(priority.unsigned_abs())));
            board.tasks.insert(id.into(), s);
        }
        let bytes = framed(&encode_board(tree(), &board).expect("encoded"));
        let index = decode(&bytes).expect("decoded");
        let open: Vec<&str> = index.open.lines().map(|l| live_line(l).expect("a line").id).collect();
        // Work first (higher priority first, then older, then by id), then plans.
        assert_eq!(open, ["t-4", "t-1", "t-3", "t-6", "t-5"]);
    }

    #[test]
    fn an_index_that_is_not_whole_or_not_where_its_header_says_is_not_used() {
        let mut board = board();
        let mut s = board.tasks["t-2"].clone();
        s.task.id = "t-7".into();
        board.tasks.insert("t-7".into(), s);
        let body = encode_board(tree(), &board).expect("encoded");
        assert!(decode(&framed(&body)).is_some());
        let bytes = framed(&body);
        assert!(decode(&bytes[..bytes.len() - 3]).is_none(), "cut short");
        assert!(decode(&framed(&body.replace(FORMAT, "git-swarm pick index 1, 0.0.0"))).is_none(), "another version");
        let swapped = body.replacen("L\tt-2\t", "L\tt-x\t", 1).replacen("L\tt-7\t", "L\tt-2\t", 1);
        assert!(decode(&framed(&swapped.replacen("L\tt-x\t", "L\tt-7\t", 1))).is_none(), "claims out of order");
        assert!(decode(&framed(&body.replacen("\tclaimed\t", "\tclaimd\t", 1))).is_none(), "a bad status");
        let (header, rest) = body.split_once('\n').expect("a header");
        let (head, open_len) = header.rsplit_once('\t').expect("lengths");
        let (head, held_len) = head.rsplit_once('\t').expect("lengths");
        let held_len: usize = held_len.parse().expect("a length");
        for (what, held, open) in [
            ("a section that ends inside a line", held_len - 1, open_len.to_string()),
            ("an open task among the claims", held_len + rest[held_len..].find('\n').expect("a line") + 1, "0".into()),
            ("a length past the end", held_len, format!("{}", rest.len())),
        ] {
            let moved = format!("{head}\t{held}\t{open}\n{rest}");
            assert!(decode(&framed(&moved)).is_none(), "{what}");
        }
    }

    /// The index patched with what changed is the index written afresh from the new board, byte for byte.
    #[test]
    fn a_patched_index_is_the_index_of_the_new_board() {
        let old = board();
        let bytes = framed(&encode_board(tree(), &old).expect("encoded"));
        let index = decode(&bytes).expect("decoded");
        let mut new = old.clone();
        // t-1 claimed, t-2 done, t-8 filed (ranking first), t-9 filed and cancelled at once.
        let mut t1 = new.tasks["t-1"].clone();
        t1.task.status = Status::Claimed;
        t1.task.claim = new.tasks["t-2"].task.claim.clone();
        new.tasks.insert("t-1".into(), t1.clone());
        new.tasks.remove("t-2");
        new.closed
            .insert("t-2".into(), crate::state::Closed { status: Status::Done, path: "tasks/done/t-2.toml".into() });
        let mut t8 = new.tasks["t-3"].clone();
        (t8.task.id, t8.task.priority) = ("t-8".into(), 3);
        new.tasks.insert("t-8".into(), t8.clone());
        new.closed.insert(
            "t-9".into(),
            crate::state::Closed { status: Status::Cancelled, path: "tasks/cancelled/t-9.toml".into() },
        );
        let changes = Changes {
            gone: ["t-1".to_string(), "t-2".to_string()].into_iter().collect(),
            live: vec![t1.task, t8.task],
            closed: vec![("t-2".into(), Status::Done), ("t-9".into(), Status::Cancelled)],
        };
        let patched = patched(&index, tree(), &changes).expect("patched");
        assert_eq!(patched, encode_board(tree(), &new).expect("encoded"));
    }

    #[test]
    fn bisection_finds_every_id_and_no_other() {
        // Ids of many lengths with shared prefixes, as `t-1`, `t-10`, `t-100`.
        let mut ids: Vec<String> = (0..3000).map(|i| format!("t-{}", i * 7)).collect();
        ids.sort();
        let text: String = ids.iter().map(|id| format!("{id}\topen\tl\n")).collect();
        for id in &ids {
            assert_eq!(find_line(&text, id), Some(format!("{id}\topen\tl").as_str()), "{id}");
        }
        for absent in ["t-1", "t-", "t-20999", "a", "u", "t-7x", ""] {
            assert_eq!(find_line(&text, absent), None, "{absent}");
        }
        assert_eq!(find_line("", "t-1"), None);
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
        // A twin (live and finished under one id) is read in full.
        let mut board = self::board();
        board
            .closed
            .insert("t-1".into(), crate::state::Closed { status: Status::Done, path: "tasks/done/t-1.toml".into() });
        assert!(encode_board(tree(), &board).is_none());
    }
}
