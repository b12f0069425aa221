//! A store patches its last read of the board with what changed since (`src/store/patch.rs`): whatever the ops did
//! in between — tasks added, claimed, finished, failed, cancelled, an older commit read in between (`log`, a
//! replay) — the board it reads is the one a store that never read before reads, for the live tasks and for all.

use std::time::Duration;

use git_swarm::model::{Config, Kind};
use git_swarm::ops::{self, Actor, Board, NewTask};
use git_swarm::store::{Identity, Store};
use git_swarm::time::Timestamp;
use git_swarm::txn::{Retry, Swarm};
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
        let swarm = git_swarm::open_swarm(repo, None, "default", git_swarm::Transport::Auto).expect("open the swarm");
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
            return self.check(at).expect("an older commit reads the same");
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
                Step::Done(i) => ops::done(b, a, &id(*i)?, None, None, None)?.0,
                Step::Fail(i) => ops::fail(b, a, &id(*i)?, None, "no".into())?.0,
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

    /// The swarm's store's read of `commit` (patched from its last) against a store that never read.
    fn check(&self, commit: ObjectId) -> Result<(), TestCaseError> {
        for full in [false, true] {
            let patched = self.swarm.store().read(commit, full).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let fresh = Store::open(self.dir.path()).expect("open").read(commit, full).expect("read");
            prop_assert_eq!(&patched.board.tasks, &fresh.board.tasks, "full: {}", full);
            prop_assert_eq!(&patched.board.closed, &fresh.board.closed, "full: {}", full);
            prop_assert_eq!(&patched.board.twins, &fresh.board.twins);
            prop_assert_eq!(&patched.problems, &fresh.problems);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_patched_read_is_a_fresh_read(steps in proptest::collection::vec(step(), 1..40)) {
        let mut f = Fixture::new();
        for s in &steps {
            f.run(s);
            f.check(*f.history.last().expect("a history"))?;
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
