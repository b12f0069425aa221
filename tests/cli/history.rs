//! The history of the state ref: compaction (a new root by compare-and-swap, the audit log kept under
//! refs/swarm-archive/), a state ref rewound by a force-push, replaced or deleted (a clear error instead of a board
//! on which finished work is open again), and `git swarm doctor`, which repairs what can be repaired.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::common::{Env, file_url, path_url};

fn ids(env: &Env, clone: &Path) -> Vec<serde_json::Value> {
    env.sw(clone, &["list", "--json"]).ok().json().as_array().expect("array").clone()
}

fn log(env: &Env, clone: &Path, archived: bool) -> Vec<serde_json::Value> {
    let mut args = vec!["log", "--json"];
    if archived {
        args.push("--archived");
    }
    env.sw(clone, &args).ok().json().as_array().expect("array").clone()
}

/// Add, claim and finish `n` tasks from `clone`; returns their ids.
fn work(env: &Env, clone: &Path, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let id = env.sw(clone, &["add", &format!("task {i}")]).ok().line();
            env.sw(clone, &["claim", &id]).ok();
            env.sw(clone, &["done", &id]).ok();
            id
        })
        .collect()
}

fn compaction_keeps_board_and_audit_log(url_of: fn(&Path) -> String) {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(url_of, 2);
    let done = work(&env, &clones[0], 3);
    let open = env.sw(&clones[0], &["add", "still open"]).ok().line();
    // The second clone sees the history before the compaction.
    let board = ids(&env, &clones[1]);
    let before = log(&env, &clones[0], false);
    assert_eq!(before.len(), 11, "init + 3 × (add, claim, done) + add");
    let old_tip = env.rev(&bare, "refs/swarm/default").expect("state ref");

    let out = env.sw(&clones[0], &["compact", "--json"]).ok().json();
    assert_eq!(out["compacted"], true);
    assert_eq!(out["ops"], 11);
    assert_eq!(out["archive"], "refs/swarm-archive/default/1");
    assert_eq!(out["archived"], old_tip.as_str());
    // The new tip is a root commit with the same tree; the old history is under the archive ref.
    let new_tip = env.rev(&bare, "refs/swarm/default").expect("state ref");
    assert_eq!(env.rev(&bare, "refs/swarm-archive/default/1").as_deref(), Some(old_tip.as_str()));
    assert_eq!(env.git(&bare, &["rev-list", "--count", &new_tip]), "1");
    assert_eq!(
        env.git(&bare, &["rev-parse", &format!("{new_tip}^{{tree}}")]),
        env.git(&bare, &["rev-parse", &format!("{old_tip}^{{tree}}")])
    );

    // Both clones read the same board; the one that saw the old history goes on without complaint.
    assert_eq!(ids(&env, &clones[0]), board);
    assert_eq!(ids(&env, &clones[1]), board);
    env.sw(&clones[1], &["claim", &open]).ok();
    env.sw(&clones[1], &["done", &open]).ok();
    for id in &done {
        env.sw(&clones[1], &["claim", id]).code(4);
    }
    // The log stops at the compaction; --archived goes on through the archive: every op is still there.
    let short = log(&env, &clones[1], false);
    assert_eq!(short.len(), 3, "claim, done, compact: {short:?}");
    assert_eq!(short[2]["op"], "compact");
    let full = log(&env, &clones[1], true);
    assert_eq!(full.len(), 14);
    assert_eq!(&full[3..], &before[..]);
    // A second compaction gets the next archive number; with nothing since, there is nothing to do.
    let out = env.sw(&clones[1], &["compact", "--json"]).ok().json();
    assert_eq!(out["archive"], "refs/swarm-archive/default/2");
    assert_eq!(env.sw(&clones[0], &["compact", "--json"]).ok().json()["compacted"], false);
    assert_eq!(log(&env, &clones[0], true).len(), 15);
    assert_eq!(env.sw(&clones[0], &["compact", "--if-longer-than", "5", "--json"]).ok().json()["compacted"], false);
    env.git(&bare, &["fsck", "--strict", "--no-progress"]);
    // doctor lists the archives, and work kept beside the state ref.
    let main = env.rev(&bare, "main").expect("main");
    env.git(&bare, &["update-ref", &format!("refs/swarm-work/default/{}", done[0]), &main]);
    let doc = env.sw(&clones[0], &["doctor", "--json"]).ok().json();
    let refs: Vec<String> = doc["findings"]
        .as_array()
        .expect("array")
        .iter()
        .filter(|f| f["check"] == "refs")
        .filter_map(|f| f["message"].as_str().map(String::from))
        .collect();
    assert!(refs.iter().any(|m| m.starts_with("2 archive(s)") && m.contains(": 1, 2")), "{refs:?}");
    assert!(
        refs.iter().any(|m| m.starts_with("1 kept work branch(es)")
            && m.contains(&done[0])
            && m.contains("1 of them for tasks done")),
        "{refs:?}"
    );
}

#[test]
fn compaction_keeps_board_and_audit_log_over_file_urls() {
    compaction_keeps_board_and_audit_log(file_url);
}

#[test]
fn compaction_keeps_board_and_audit_log_on_a_local_path() {
    compaction_keeps_board_and_audit_log(path_url);
}

/// Agents claim and finish tasks while others compact again and again: every task is done exactly once, no op is
/// lost (the audit log through the archives has every one of them), and the board is whole.
#[test]
fn compaction_racing_with_agents_loses_nothing() {
    let env = Arc::new(Env::new());
    let (bare, clones) = env.swarm_with_clones(file_url, 4);
    let n = 24;
    let tasks: Vec<String> = (0..n).map(|i| env.sw(&clones[0], &["add", &format!("t{i}")]).ok().line()).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done_so_far = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let compactor = {
        let (env, clone, stop, count) =
            (Arc::clone(&env), clones[3].clone(), Arc::clone(&stop), Arc::clone(&done_so_far));
        std::thread::spawn(move || {
            let mut compactions = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let out = env.sw(&clone, &["--agent", "compactor", "compact", "--json"]).ok().json();
                compactions += usize::from(out["compacted"] == true);
                count.store(compactions, std::sync::atomic::Ordering::Relaxed);
            }
            compactions
        })
    };
    let workers: Vec<_> = clones[..3]
        .iter()
        .enumerate()
        .map(|(i, clone)| {
            let (env, clone, count) = (Arc::clone(&env), clone.clone(), Arc::clone(&done_so_far));
            std::thread::spawn(move || {
                let agent = format!("w{i}");
                let mut mine = Vec::new();
                loop {
                    // However fast the machine, compactions land in the middle of the work: after a few tasks,
                    // wait (bounded) until one more compaction went through, then go on while it keeps going.
                    if mine.len() % 3 == 2 {
                        let want = count.load(std::sync::atomic::Ordering::Relaxed) + 1;
                        let since = std::time::Instant::now();
                        while count.load(std::sync::atomic::Ordering::Relaxed) < want
                            && since.elapsed() < std::time::Duration::from_secs(5)
                        {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                    }
                    let out = env.sw(&clone, &["--agent", &agent, "claim"]);
                    if out.code == 3 {
                        return mine;
                    }
                    let id = out.ok().line();
                    env.sw(&clone, &["--agent", &agent, "done", &id]).ok();
                    mine.push(id);
                }
            })
        })
        .collect();
    let mut by_task: BTreeMap<String, usize> = BTreeMap::new();
    for w in workers {
        for id in w.join().expect("worker") {
            *by_task.entry(id).or_default() += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let compactions = compactor.join().expect("compactor");
    assert!(compactions >= 3, "only {compactions} compactions ran: the test raced little");
    assert_eq!(by_task.len(), n);
    assert!(by_task.values().all(|&c| c == 1), "{by_task:?}");
    let full = log(&env, &clones[0], true);
    for id in &tasks {
        let dones = full.iter().filter(|e| e["op"] == "done" && e["task"] == id.as_str()).count();
        let claims = full.iter().filter(|e| e["op"] == "claim" && e["task"] == id.as_str()).count();
        assert_eq!((claims, dones), (1, 1), "{id}");
    }
    let compacts = full.iter().filter(|e| e["op"] == "compact").count();
    assert_eq!(compacts, compactions);
    assert_eq!(full.len(), 1 + n + 2 * n + compactions, "init, adds, claims, dones, compactions");
    let status = env.sw(&clones[1], &["status", "--json"]).ok().json();
    assert_eq!(status["counts"]["done"], n);
    env.git(&bare, &["fsck", "--strict", "--no-progress"]);
}

/// A new clone of a compacted swarm fetches the board, not its history.
#[test]
fn a_new_clone_of_a_compacted_swarm_fetches_one_commit() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(file_url, 1);
    work(&env, &clones[0], 5);
    env.sw(&clones[0], &["compact"]).ok();
    let fresh = env.clone(&file_url(&bare), "fresh");
    env.sw(&fresh, &["status"]).ok();
    let mirror = env.git(&fresh, &["for-each-ref", "--format=%(refname)", "refs/swarm-remotes/"]);
    assert_eq!(env.git(&fresh, &["rev-list", "--count", &mirror]), "1");
    // Its objects: the root commit and its trees and blobs, none of the 16 commits before it.
    let archived = env.git(&bare, &["rev-list", "refs/swarm-archive/default/1"]);
    assert_eq!(archived.lines().count(), 16);
    for c in archived.lines() {
        assert_ne!(env.git_out(&fresh, &["cat-file", "-e", c]).code, 0, "archived commit {c} was fetched");
    }
}

fn rewind_is_an_error_and_doctor_puts_it_back(url_of: fn(&Path) -> String) {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(url_of, 2);
    let done = work(&env, &clones[0], 2);
    ids(&env, &clones[1]);
    let tip = env.rev(&bare, "refs/swarm/default").expect("tip");
    // Somebody pushes an old state over it: the second task's claim and done are gone, it looks open again.
    let old = env.git(&bare, &["rev-parse", "refs/swarm/default~2"]);
    env.git(&bare, &["update-ref", "refs/swarm/default", &old]);
    for clone in &clones {
        let out = env.sw(clone, &["claim"]).code(1);
        assert!(out.stderr.contains("went back by 2 op(s)"), "{}", out.stderr);
        assert!(out.stderr.contains(&tip), "names what was seen: {}", out.stderr);
        assert!(out.stderr.contains("git swarm doctor"), "{}", out.stderr);
        // Refused again: the error does not go away by itself.
        env.sw(clone, &["list"]).code(1);
    }
    assert_eq!(env.rev(&bare, "refs/swarm/default").as_deref(), Some(old.as_str()), "nothing was written");
    let out = env.sw(&clones[1], &["doctor", "--json"]).code(1);
    let doc = out.json();
    assert_eq!(doc["ok"], false);
    let f = &doc["findings"][0];
    assert_eq!((f["check"].as_str(), f["severity"].as_str()), (Some("state-ref"), Some("error")));
    assert!(f["message"].as_str().unwrap_or_default().contains(&format!("done {}", done[1])), "{f}");
    let out = env.sw(&clones[1], &["doctor", "--fix", "--json"]).ok();
    assert_eq!(
        out.json()["findings"][0]["fixed"].as_str().map(|s| s.contains("put refs/swarm/default back")),
        Some(true)
    );
    assert_eq!(env.rev(&bare, "refs/swarm/default").as_deref(), Some(tip.as_str()));
    // Everyone goes on; the finished tasks stay finished.
    for clone in &clones {
        env.sw(clone, &["claim", &done[1]]).code(4);
    }
    env.sw(&clones[0], &["doctor"]).ok();
}

#[test]
fn a_rewound_state_ref_is_an_error_and_doctor_puts_it_back_over_file_urls() {
    rewind_is_an_error_and_doctor_puts_it_back(file_url);
}

#[test]
fn a_rewound_state_ref_is_an_error_and_doctor_puts_it_back_on_a_local_path() {
    rewind_is_an_error_and_doctor_puts_it_back(path_url);
}

#[test]
fn a_deleted_state_ref_is_an_error_and_doctor_recreates_it() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(file_url, 2);
    work(&env, &clones[0], 2);
    ids(&env, &clones[1]);
    let tip = env.rev(&bare, "refs/swarm/default").expect("tip");
    env.git(&bare, &["update-ref", "-d", "refs/swarm/default"]);
    // `init` would start an empty board over the finished one: refused, like every op.
    let out = env.sw(&clones[0], &["init"]).code(1);
    assert!(out.stderr.contains("was deleted"), "{}", out.stderr);
    assert!(env.rev(&bare, "refs/swarm/default").is_none());
    // A clone that never saw it cannot know: it just finds no swarm.
    let fresh = env.clone(&file_url(&bare), "fresh");
    let out = env.sw(&fresh, &["list"]).code(1);
    assert!(out.stderr.contains("no swarm"), "{}", out.stderr);
    env.sw(&clones[1], &["doctor", "--fix"]).ok();
    assert_eq!(env.rev(&bare, "refs/swarm/default").as_deref(), Some(tip.as_str()));
    assert_eq!(env.sw(&fresh, &["status", "--json"]).ok().json()["counts"]["done"], 2);
    env.sw(&clones[0], &["status"]).ok();
}

#[test]
fn a_replaced_state_ref_can_be_accepted_keeping_what_was_seen() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(file_url, 2);
    work(&env, &clones[0], 1);
    ids(&env, &clones[1]);
    let seen = env.rev(&bare, "refs/swarm/default").expect("tip");
    // Somebody deletes the swarm and starts another one on purpose.
    env.git(&bare, &["update-ref", "-d", "refs/swarm/default"]);
    let fresh = env.clone(&file_url(&bare), "fresh");
    env.sw(&fresh, &["init"]).ok();
    env.sw(&fresh, &["add", "a new start"]).ok();
    let out = env.sw(&clones[1], &["list"]).code(1);
    assert!(out.stderr.contains("was replaced"), "{}", out.stderr);
    // --fix cannot merge two histories and says so.
    let out = env.sw(&clones[1], &["doctor", "--fix"]).code(1);
    assert!(out.stdout.contains("--accept-remote"), "{}", out.stdout);
    env.sw(&clones[1], &["doctor", "--accept-remote"]).ok();
    let kept = format!("refs/swarm-archive/default/lost-{}", &seen[..12]);
    assert_eq!(env.rev(&bare, &kept).as_deref(), Some(seen.as_str()), "what this clone saw is kept on the remote");
    let titles: Vec<String> =
        ids(&env, &clones[1]).iter().filter_map(|t| t["title"].as_str().map(String::from)).collect();
    assert_eq!(titles, vec!["a new start".to_string()]);
}

#[test]
fn doctor_finds_and_removes_stale_locks_stray_worktrees_and_records() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    let id = env.sw(c, &["--agent", "ghost", "add", "held"]).ok().line();
    env.sw(c, &["--agent", "ghost", "claim", &id]).ok();
    env.sw(c, &["--agent", "ghost", "release", &id]).ok();
    // A record of a claim that has ended, as a killed process leaves it.
    let held = c.join(".git/swarm/held/default/ghost").join(&id);
    std::fs::create_dir_all(held.parent().expect("parent")).expect("mkdir");
    std::fs::write(&held, "1").expect("record");
    // A lock left by a killed git process, old enough to be stale, on the remote's state ref.
    let lock = bare.join("refs/swarm/default.lock");
    std::fs::write(&lock, "").expect("lock");
    std::process::Command::new("touch").args(["-d", "2 hours ago"]).arg(&lock).status().expect("touch");
    // A runner's work tree whose runner is gone (its pid file names no process).
    let places = env.places(c);
    let wt = places.worktree("dead-runner");
    std::fs::create_dir_all(places.trees()).expect("trees");
    env.git(c, &["worktree", "add", "-q", "--detach", wt.to_str().expect("utf-8")]);
    std::fs::write(places.pid_file("dead-runner"), "999999999").expect("pid");

    let out = env.sw(c, &["doctor", "--json"]).ok();
    let doc = out.json();
    let by_check = |check: &str| -> Vec<serde_json::Value> {
        doc["findings"].as_array().expect("array").iter().filter(|f| f["check"] == check).cloned().collect()
    };
    assert_eq!(by_check("locks")[0]["severity"], "warn", "{doc}");
    assert!(by_check("locks")[0]["message"].as_str().unwrap_or_default().contains("default.lock"));
    assert_eq!(by_check("worktrees")[0]["severity"], "warn");
    assert_eq!(by_check("held")[0]["severity"], "info");
    // Ops are refused while the lock is there (it is reported, not spun on).
    env.sw(c, &["add", "blocked"]).code(1);
    env.sw(c, &["doctor", "--fix"]).ok();
    assert!(!lock.exists() && !wt.exists() && !held.exists());
    assert!(!env.git(c, &["worktree", "list"]).contains("dead-runner"));
    env.sw(c, &["add", "works again"]).ok();
    let doc = env.sw(c, &["doctor", "--json"]).ok().json();
    // Nothing wrong is left (what is only worth knowing stays: no agent configured for a role, say).
    let worst = doc["findings"]
        .as_array()
        .expect("array")
        .iter()
        .filter(|f| f["severity"] == "warn" || f["severity"] == "error")
        .count();
    assert_eq!(worst, 0, "{doc}");
}
