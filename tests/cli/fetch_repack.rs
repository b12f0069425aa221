//! A fetch into a clone whose objects are repacked — by another runner of the clone, or by this process's own
//! `git gc --auto` after an earlier op — still fetches through the handle it holds, as a runner keeps one; and a
//! fetch that cannot be done says why, not only which step failed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{Env, file_url};
use git_swarm_core::{FetchWith, RemoteError, Store};

/// A remote with a history on `refs/swarm/default`, the work clone that grows it, and an empty clone to fetch into.
struct World {
    env: Env,
    bare: PathBuf,
    work: PathBuf,
    into: PathBuf,
    versions: usize,
}

impl World {
    fn new() -> World {
        let env = Env::new();
        let bare = env.bare_remote("r");
        let work = Env::clone(&env, &file_url(&bare), "w");
        let into = env.path("c");
        env.git(&env.path(""), &["init", "-q", into.to_str().expect("utf-8")]);
        let mut w = World { env, bare, work, into, versions: 0 };
        w.grow(30);
        w
    }

    /// `n` more versions of a file of 400 lines (one line changed each time: deltas against what `into` has).
    fn grow(&mut self, n: usize) {
        for _ in 0..n {
            let i = self.versions;
            self.versions += 1;
            let body: String =
                (0..400).map(|k| format!("line {k} of {}\n", if k == i % 400 { i } else { 0 })).collect();
            std::fs::write(self.work.join("f.txt"), body).expect("write");
            self.env.git(&self.work, &["add", "f.txt"]);
            self.env.git(&self.work, &["commit", "-q", "-m", &format!("v{i}")]);
        }
        self.env.git(&self.work, &["push", "-q", "origin", "HEAD:refs/swarm/default"]);
    }

    fn fetch(&self, store: &Store) -> Result<Option<gix::ObjectId>, RemoteError> {
        let url = file_url(&self.bare);
        git_swarm_core::fetch(store, &url, &url, "refs/swarm/default", "refs/swarm-mirror/x", FetchWith::Gix)
    }

    /// Fetch through `store` and read the tip through it, as an op does next.
    fn fetch_and_read(&self, store: &Store, round: usize) {
        let tip = self.fetch(store).unwrap_or_else(|e| panic!("round {round}: {e}")).expect("the ref is there");
        assert_eq!(tip.to_string(), self.env.git(&self.bare, &["rev-parse", "refs/swarm/default"]));
        store.repo.find_commit(tip).unwrap_or_else(|e| panic!("round {round}: read {tip}: {e}"));
    }
}

/// Everything in one new pack, the old packs and the loose objects gone, as `git gc` leaves a clone.
fn repack(git: impl Fn(&Path, &[&str]), dir: &Path) {
    git(dir, &["repack", "-a", "-d", "-f", "-q"]);
    git(dir, &["prune-packed"]);
}

#[test]
fn a_fetch_after_this_clone_was_repacked_under_its_handle() {
    let mut w = World::new();
    let store = Store::open(&w.into).expect("open");
    for round in 0..6 {
        w.fetch_and_read(&store, round);
        repack(|d, a| drop(w.env.git(d, a)), &w.into);
        w.grow(5);
    }
}

#[test]
fn fetches_while_another_process_repacks_this_clone() {
    let mut w = World::new();
    let store = Store::open(&w.into).expect("open");
    let stop = Arc::new(AtomicBool::new(false));
    let repacker = {
        let (into, stop) = (w.into.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // Whatever a repack meets (it may race the fetch's own writes), the next one goes on.
                repack(|d, a| drop(Command::new("git").current_dir(d).args(a).status()), &into);
            }
        })
    };
    for round in 0..25 {
        w.fetch_and_read(&store, round);
        w.grow(3);
    }
    stop.store(true, Ordering::Relaxed);
    repacker.join().expect("repacker");
}

/// A clone with a branch that points at a commit it does not have (left by a crash) cannot be fetched into, by gix
/// or by git; the error says which ref is broken.
#[test]
fn a_ref_to_a_missing_commit_is_named_in_the_fetch_error() {
    let w = World::new();
    std::fs::write(w.into.join(".git/refs/heads/broken"), "1234567890123456789012345678901234567890\n").expect("write");
    let store = Store::open(&w.into).expect("open");
    let err = w.fetch(&store).expect_err("a broken ref fails the fetch");
    assert!(err.to_string().contains("refs/heads/broken"), "{err}");
}
