//! A store patches its last read of the board with what changed since (`src/store/patch.rs`): whatever the ops did
//! in between — tasks added, claimed, finished, failed, cancelled, an older commit read in between (`log`, a
//! replay) — the board it reads is the one a store that never read before reads, for the live tasks and for all.
//! So is the read of a new process's store, which patches the read kept on disk (`src/store/kept.rs`).

use std::time::Duration;

use git_swarm_core::model::{Config, Kind};
use git_swarm_core::ops::{self, Actor, Board, NewTask};
use git_swarm_core::time::Timestamp;
use git_swarm_core::{Identity, Store};
use git_swarm_core::{Retry, Swarm};
use gix::ObjectId;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    /// Add tasks, the n-th waiting on the task `dep` steps back (if any).
    Add {
        n: usize,
        dep: Option<usize>,
    },
    Claim(usize),
    Done(usize),
    Fail(usize),
    Cancel(usize),
    /// Read the commit `n` steps back (the next read patches from there).
    Back(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1..40usize, proptest::option::of(0..20usize)).prop_map(|(n, dep)| Step::Add { n, dep }),
        3 => (0..200usize).prop_map(Step::Claim),
        3 => (0..200usize).prop_map(Step::Done),
        1 => (0..200usize).prop_map(Step::Fail),
        1 => (0..200usize).prop_map(Step::Cancel),
        1 => (1..6usize).prop_map(Step::Back),
    ]
}

fn now() -> Timestamp {
    Timestamp::from_secs(1_800_000_000)
}

fn who() -> Identity {
    Identity { name: "tester".into(), email: "tester@git-swarm.invalid".into() }
}

struct Fixture {
    dir: tempfile::TempDir,
    swarm: Swarm,
    retry: Retry,
    history: Vec<ObjectId>,
    minted: usize,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new().prefix("git-swarm-patch").tempdir().expect("temp dir");
        gix::init_bare(dir.path()).expect("git init --bare");
        let repo = gix::open(dir.path()).expect("open");
        let swarm =
            git_swarm_core::open_swarm(repo, None, "default", git_swarm_core::Transport::Auto).expect("open the swarm");
        let retry = Retry { max_attempts: 3, max_elapsed: Duration::from_secs(10), ..Retry::default() };
        swarm.init(&retry, &who(), &now, &Config::default(), "tester").expect("init");
        let tip = swarm.tip().expect("tip").expect("initialised");
        Fixture { dir, swarm, retry, history: vec![tip], minted: 0 }
    }

    /// The `i`-th live-or-finished task id, modulo how many there are.
    fn pick(board: &Board, i: usize) -> Option<String> {
        let ids: Vec<&String> = board.tasks.keys().chain(board.closed.keys()).collect();
        (!ids.is_empty()).then(|| ids[i % ids.len()].clone())
    }

    fn run(&mut self, s: &Step) {
        if let Step::Back(n) = s {
            let at = self.history[self.history.len().saturating_sub(1 + n)];
            self.check(at).expect("an older commit reads the same");
            return self.check_next(at).expect("an older commit picks the same");
        }
        let minted = &mut self.minted;
        let res = self.swarm.transact(&self.retry, &who(), &now, |snap, now| {
            let (b, a) = (&snap.board, &Actor { agent: "worker-1".into(), now });
            let id = |i| Self::pick(b, i).ok_or(ops::DomainError::NothingReady { kind: Kind::Work });
            let ch = match s {
                Step::Add { n, dep } => {
                    let dep = dep.and_then(|d| Self::pick(b, d));
                    let new = (0..*n)
                        .map(|k| NewTask {
                            title: format!("task {k}"),
                            // A few priorities, so that the next ready task is not always the first id.
                            priority: (k % 3) as i64 - 1,
                            // Plans too: a claim chooses among its kind.
                            kind: if k % 5 == 4 { Kind::Plan } else { Kind::Work },
                            deps: dep.iter().filter(|_| k == 0).cloned().collect(),
                            ..NewTask::default()
                        })
                        .collect();
                    ops::add(b, a, new, &mut || {
                        *minted += 1;
                        format!("t-{:06x}", *minted * 7919)
                    })?
                    .0
                }
                Step::Claim(i) => ops::claim(b, a, Some(&id(*i)?), Kind::Work, Duration::from_secs(600), None)?.0,
                Step::Done(i) => ops::done(b, a, &id(*i)?, None, None, None, None)?.0,
                Step::Fail(i) => ops::fail(b, a, &id(*i)?, None, ops::Failing::because("no"))?.0,
                Step::Cancel(i) => ops::cancel(b, a, &[id(*i)?], "not needed"),
                Step::Back(_) => unreachable!(),
            };
            Ok((ch, ()))
        });
        // Most steps on a random id are refused by the ops; those that go through are a new commit.
        if res.is_ok() {
            self.history.push(self.swarm.tip().expect("tip").expect("initialised"));
        }
    }

    /// The swarm's store's read of `commit` (patched from its last), and a new swarm's (patched from the read kept
    /// on disk), against a store that never read and keeps nothing.
    fn check(&self, commit: ObjectId) -> Result<(), TestCaseError> {
        for full in [false, true] {
            let fresh = Store::open(self.dir.path()).expect("open").read(commit, full).expect("read");
            let again = reopen(self.dir.path());
            for (what, store) in [("patched", self.swarm.store()), ("kept", again.store())] {
                let read = store.read(commit, full).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&read.board.tasks, &fresh.board.tasks, "{} full: {}", what, full);
                prop_assert_eq!(&read.board.closed, &fresh.board.closed, "{} full: {}", what, full);
                prop_assert_eq!(&read.board.twins, &fresh.board.twins, "{}", what);
                prop_assert_eq!(&read.problems, &fresh.problems, "{}", what);
            }
        }
        Ok(())
    }

    /// A claim of the next ready task by a new process (`Store::read_next`: the tasks it touches, chosen by the
    /// index on disk) changes what the claim on the whole live board changes, now and once leases ran out.
    fn check_next(&self, commit: ObjectId) -> Result<(), TestCaseError> {
        let full = Store::open(self.dir.path()).expect("open").read(commit, false).expect("read");
        let has_tasks = !full.board.tasks.is_empty() || !full.board.closed.is_empty();
        // (read at, claim at), seconds after the fixture's clock: leases run out at +600; the op's clock is a
        // moment after the read's.
        let clocks = [(0, 0), (601, 601), (1803, 1803), (590, 620)];
        for (i, ((read, later), kind)) in
            clocks.into_iter().flat_map(|c| [(c, Kind::Work), (c, Kind::Plan)]).enumerate()
        {
            let at = |s: u64| Timestamp::from_secs(1_800_000_000 + s);
            let (now, read_at) = (at(later), at(read));
            let picked = reopen(self.dir.path())
                .store()
                .read_next(commit, kind, read_at)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            // The first read writes the index; a clean board is read through it after that.
            prop_assert!(i == 0 || !has_tasks || picked.board.picked == Some((kind, read_at)), "the index was used");
            let actor = Actor { agent: "worker-2".into(), now };
            let lease = Duration::from_secs(600);
            let want = ops::claim(&full.board, &actor, None, kind, lease, None);
            let got = ops::claim(&picked.board, &actor, None, kind, lease, None);
            prop_assert_eq!(format!("{got:?}"), format!("{want:?}"), "{} at +{}s", kind, later);
        }
        Ok(())
    }

    /// The files of the reads kept on disk.
    fn kept_files(&self) -> Vec<std::path::PathBuf> {
        let dir = self.dir.path().join("swarm").join("cache");
        let files: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.is_file()).collect())
            .unwrap_or_default();
        files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "json")).collect()
    }
}

/// A swarm opened anew on `dir`: its stores have read nothing, as in a new process.
fn reopen(dir: &std::path::Path) -> Swarm {
    let repo = gix::open(dir).expect("open");
    git_swarm_core::open_swarm(repo, None, "default", git_swarm_core::Transport::Auto).expect("open the swarm")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_patched_read_is_a_fresh_read(steps in proptest::collection::vec(step(), 1..40)) {
        let mut f = Fixture::new();
        for s in &steps {
            f.run(s);
            f.check(*f.history.last().expect("a history"))?;
            f.check_next(*f.history.last().expect("a history"))?;
        }
    }
}

/// A folder with a file and a folder of one name (`t.toml` and `t.toml/`, which git's order allows): a full read
/// takes both; a later tree without the file must not keep the file's task (a patch by name would have).
#[test]
fn a_file_and_a_folder_of_one_name_then_the_file_gone() {
    use gix::objs::tree::{Entry, EntryKind, EntryMode};
    let mut f = Fixture::new();
    f.run(&Step::Add { n: 2, dep: None });
    let tip = *f.history.last().expect("a history");
    let repo = &f.swarm.store().repo;
    let snap = f.swarm.store().read(tip, false).expect("read");
    let blob_of = |id: &str| {
        let path = &snap.board.tasks[id].path;
        let tree = repo.find_commit(tip).and_then(|c| c.tree()).expect("tree");
        tree.lookup_entry_by_path(path).expect("lookup").expect("the file").object_id()
    };
    let ids: Vec<String> = snap.board.tasks.keys().cloned().collect();
    let (a, b) = (&ids[0], &ids[1]);
    let entry =
        |kind: EntryKind, name: &str, oid: ObjectId| Entry { mode: EntryMode::from(kind), filename: name.into(), oid };
    let write_tree = |entries: Vec<Entry>| repo.write_object(&gix::objs::Tree { entries }).expect("write").detach();
    let inner = write_tree(vec![entry(EntryKind::Blob, &format!("{b}.toml"), blob_of(b))]);
    let name = format!("{a}.toml");
    let both = write_tree(vec![entry(EntryKind::Blob, &name, blob_of(a)), entry(EntryKind::Tree, &name, inner)]);
    let folder_only = write_tree(vec![entry(EntryKind::Tree, &name, inner)]);
    let commit_with = |tasks: ObjectId| {
        let root = repo.find_commit(tip).and_then(|c| c.tree()).expect("root");
        let entries = root
            .decode()
            .expect("decode")
            .entries
            .iter()
            .map(|e| Entry {
                mode: e.mode,
                filename: e.filename.to_owned(),
                oid: if e.filename == "tasks" { tasks } else { e.oid.to_owned() },
            })
            .collect();
        let tree = write_tree(entries);
        let sig = gix::actor::Signature { name: "t".into(), email: "t@t".into(), time: gix::date::Time::new(0, 0) };
        let c = gix::objs::Commit {
            tree,
            parents: [tip].into_iter().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: "by hand".into(),
            extra_headers: vec![],
        };
        repo.write_object(&c).expect("commit").detach()
    };
    let (c1, c2) = (commit_with(both), commit_with(folder_only));
    f.check(c1).expect("both read as a fresh store reads them");
    f.check(c2).expect("the file's task is gone");
    let fresh = Store::open(f.dir.path()).expect("open").read(c2, false).expect("read");
    assert!(!fresh.board.tasks.contains_key(a.as_str()) && fresh.board.tasks.contains_key(b.as_str()));
}

/// A read kept on disk that this store cannot use — damaged, or of another repository's board (a tree its object
/// database lacks) — is not used: the board read is a fresh read's, and the next full read keeps its own.
#[test]
fn a_kept_read_that_cannot_be_used_is_not_used() {
    let mut a = Fixture::new();
    a.run(&Step::Add { n: 30, dep: None });
    let mut b = Fixture::new();
    b.run(&Step::Add { n: 5, dep: None });
    b.run(&Step::Claim(2));
    let tip = *b.history.last().expect("a history");
    a.check(*a.history.last().expect("a history")).expect("a reads");
    b.check(tip).expect("b reads");
    let files = a.kept_files();
    assert!(!files.is_empty(), "a full read was kept on disk");
    let b_files = b.kept_files();
    assert!(!b_files.is_empty());
    let fresh = Store::open(b.dir.path()).expect("open").read(tip, false).expect("read");
    let damaged = |bytes: &[u8]| {
        let mut bytes = bytes.to_vec();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x20;
        bytes
    };
    for (what, bytes) in [
        ("another repository's", std::fs::read(&files[0]).expect("kept")),
        ("damaged", damaged(&std::fs::read(&b_files[0]).expect("kept"))),
        ("empty", Vec::new()),
    ] {
        for file in &b_files {
            std::fs::write(file, &bytes).expect("write");
        }
        let read = reopen(b.dir.path()).store().read(tip, false).expect("read");
        assert_eq!(read.board.tasks, fresh.board.tasks, "{what}");
        assert_eq!(read.board.closed, fresh.board.closed, "{what}");
        assert!(read.problems.is_empty(), "{what}: {:?}", read.problems);
        let live = b_files.iter().find(|f| f.to_string_lossy().contains("live")).expect("the live read's file");
        assert!(std::fs::read(live).expect("kept again") != bytes, "{what}: the full read was kept instead");
    }
}

/// A claim whose lease ran out with its attempts spent is recorded as failed by the next claim without id: the
/// index's choice reads it too, so the claim by a new process writes both, as on the whole board.
#[test]
fn a_new_process_records_a_spent_claim_with_its_claim() {
    let mut f = Fixture::new();
    f.run(&Step::Add { n: 3, dep: None });
    for s in [Step::Claim(0), Step::Fail(0), Step::Claim(0), Step::Fail(0), Step::Claim(0)] {
        f.run(&s);
    }
    let tip = *f.history.last().expect("a history");
    let full = Store::open(f.dir.path()).expect("open").read(tip, false).expect("read");
    let now = Timestamp::from_secs(1_800_000_000 + 601);
    let actor = Actor { agent: "worker-2".into(), now };
    let (change, _) =
        ops::claim(&full.board, &actor, None, Kind::Work, Duration::from_secs(600), None).expect("a claim");
    assert_eq!(change.writes.len(), 2, "the spent claim recorded as failed, and the claim: {change:?}");
    // Once to write the index from a full read, once from the index.
    f.check_next(tip).expect("the first read");
    f.check_next(tip).expect("a read through the index");
}

/// The choice's board holds the claims that run out within a minute of its clock. A claim whose own clock is later
/// than that (a slow fetch, a settle) reads the whole live board instead: here a claim that ran out in between,
/// and ranks first, is the one taken.
#[test]
fn a_claim_later_than_its_choice_reads_the_whole_board() {
    let mut f = Fixture::new();
    f.run(&Step::Add { n: 1, dep: None });
    f.run(&Step::Claim(0));
    f.run(&Step::Add { n: 1, dep: None });
    let tip = *f.history.last().expect("a history");
    let full = Store::open(f.dir.path()).expect("open").read(tip, false).expect("read");
    let held = full.board.tasks.values().find(|s| s.task.claim.is_some()).expect("the claimed task").task.id.clone();
    // An index to choose from.
    let read_at = Timestamp::from_secs(1_800_000_000 + 500);
    reopen(f.dir.path()).store().read_next(tip, Kind::Work, read_at).expect("the first read");
    let picked = reopen(f.dir.path()).store().read_next(tip, Kind::Work, read_at).expect("read");
    assert!(picked.board.picked.is_some() && !picked.board.tasks.contains_key(&held), "chosen without the claim");
    let calls = std::cell::Cell::new(0);
    let clock = || {
        calls.set(calls.get() + 1);
        Timestamp::from_secs(1_800_000_000 + if calls.get() == 1 { 500 } else { 700 })
    };
    let c = reopen(f.dir.path())
        .transact_on(git_swarm_core::Reads::Next(Kind::Work), &f.retry, &who(), &clock, |snap, now| {
            let actor = Actor { agent: "worker-2".into(), now };
            ops::claim(&snap.board, &actor, None, Kind::Work, Duration::from_secs(600), None)
        })
        .expect("a claim");
    assert_eq!(c.value.expect("a task").id, held, "the claim that ran out ranks first and is taken over");
}

/// A pick index that is damaged, or of another repository's board, is not used: the claim is the whole board's,
/// and the index is written again.
#[test]
fn a_pick_index_that_cannot_be_used_is_not_used() {
    let mut a = Fixture::new();
    a.run(&Step::Add { n: 30, dep: None });
    a.check_next(*a.history.last().expect("a history")).expect("a picks");
    let mut b = Fixture::new();
    b.run(&Step::Add { n: 5, dep: None });
    let tip = *b.history.last().expect("a history");
    b.check_next(tip).expect("b picks");
    let index = |f: &Fixture| f.dir.path().join("swarm").join("cache").join("pick-index-live.txt");
    let theirs = std::fs::read(index(&a)).expect("a's index");
    let mut damaged = std::fs::read(index(&b)).expect("b's index");
    let at = damaged.len() - 10;
    damaged[at] ^= 0x01;
    for (what, bytes) in [("another repository's", theirs), ("damaged", damaged), ("empty", Vec::new())] {
        std::fs::write(index(&b), &bytes).expect("write");
        let now = Timestamp::from_secs(1_800_000_000);
        let read = reopen(b.dir.path()).store().read_next(tip, Kind::Work, now).expect("read");
        assert_eq!(read.board.picked, None, "{what}: read in full");
        b.check_next(tip).expect(what);
        assert!(std::fs::read(index(&b)).expect("written again") != bytes, "{what}: written again");
    }
}
