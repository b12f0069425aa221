//! Many processes in many clones racing over one board, on every transport: an in-process CAS on a local path,
//! `file://` (gix fetch + `git push`), and a real network server (`git daemon` on loopback). Afterwards every task
//! is done exactly once and every claim was exclusive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common;
use crate::common::{Daemon, Env, file_url, path_url};

/// Drain the board from `clone` as `agent`: claim, done, until nothing is ready. Returns the ids it completed.
fn drain(env: &Env, clone: &Path, agent: &str) -> Vec<String> {
    let mut mine = Vec::new();
    loop {
        let out = env.sw(clone, &["--agent", agent, "claim"]);
        match out.code {
            3 => return mine,
            0 => {}
            code => panic!("{agent}: claim exited {code}: {}", out.stderr),
        }
        let id = out.line();
        env.sw(clone, &["--agent", agent, "done", &id]).ok();
        mine.push(id);
    }
}

/// Run `agents` drains in parallel, one clone each, and check exactly-once completion of `tasks`.
fn race(env: Arc<Env>, clones: Vec<PathBuf>, tasks: &[String]) {
    let handles: Vec<_> = clones
        .into_iter()
        .enumerate()
        .map(|(i, clone)| {
            let env = Arc::clone(&env);
            std::thread::spawn(move || drain(&env, &clone, &format!("racer{i}")))
        })
        .collect();
    let mut by_task: BTreeMap<String, usize> = BTreeMap::new();
    for h in handles {
        for id in h.join().expect("racer thread") {
            *by_task.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = by_task.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "tasks completed more than once: {twice:?}");
    let done: Vec<&String> = by_task.keys().collect();
    let mut want: Vec<&String> = tasks.iter().collect();
    want.sort();
    assert_eq!(done, want, "every task completed exactly once");
}

fn board(env: &Env, clone: &Path, n: usize) -> Vec<String> {
    (0..n).map(|i| env.sw(clone, &["--agent", "planner", "add", &format!("task {i}")]).ok().line()).collect()
}

fn check_final(env: &Env, clone: &Path, n: usize) {
    let list = env.sw(clone, &["list", "--json"]).ok().json();
    let tasks = list.as_array().expect("array");
    assert_eq!(tasks.len(), n);
    for t in tasks {
        assert_eq!(t["status"], "done", "{t}");
        assert_eq!(t["epoch"], 1, "each task was claimed once: {t}");
    }
    // Every op is one commit: init + n adds + n claims + n dones.
    let log = env.sw(clone, &["log", "--json"]).ok().json();
    assert_eq!(log.as_array().map(Vec::len), Some(1 + 3 * n));
}

#[test]
fn racing_clones_on_a_local_path_remote() {
    let env = Arc::new(Env::new());
    let (bare, clones) = env.swarm_with_clones(path_url, 6);
    let tasks = board(&env, &clones[0], 30);
    race(Arc::clone(&env), clones.clone(), &tasks);
    check_final(&env, &clones[0], 30);
    let fsck = env.git_out(&bare, &["fsck", "--no-progress"]);
    assert_eq!(fsck.code, 0, "{}", fsck.stderr);
}

#[test]
fn racing_clones_over_file_urls() {
    let env = Arc::new(Env::new());
    let (bare, clones) = env.swarm_with_clones(file_url, 6);
    let tasks = board(&env, &clones[0], 24);
    race(Arc::clone(&env), clones.clone(), &tasks);
    check_final(&env, &clones[1], 24);
    let fsck = env.git_out(&bare, &["fsck", "--no-progress"]);
    assert_eq!(fsck.code, 0, "{}", fsck.stderr);
    // Nothing but the state ref and main on the remote; no branch moved.
    let refs = env.git(&bare, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(refs, "refs/heads/main\nrefs/swarm/default");
}

#[test]
fn in_process_and_push_transports_share_one_ref() {
    let env = Arc::new(Env::new());
    let bare = env.bare_remote("origin");
    let mut clones = Vec::new();
    for i in 0..4 {
        let url = if i % 2 == 0 { path_url(&bare) } else { file_url(&bare) };
        clones.push(Env::clone(&env, &url, &format!("m{i}")));
    }
    env.sw(&clones[1], &["init"]).ok();
    let tasks = board(&env, &clones[0], 20);
    race(Arc::clone(&env), clones.clone(), &tasks);
    check_final(&env, &clones[3], 20);
}

#[test]
fn racing_clones_over_git_daemon() {
    let env = Arc::new(Env::new());
    let bare = env.bare_remote("net");
    let daemon = Daemon::start(&env, env.root.path());
    let url = daemon.url("net.git");
    let clones: Vec<PathBuf> = (0..4).map(|i| Env::clone(&env, &url, &format!("n{i}"))).collect();
    env.sw(&clones[0], &["init"]).ok();
    let tasks = board(&env, &clones[1], 16);
    race(Arc::clone(&env), clones.clone(), &tasks);
    check_final(&env, &clones[2], 16);
    assert!(env.rev(&bare, "refs/swarm/default").is_some());
}

#[test]
fn a_remote_that_is_gone_is_an_error_not_a_hang() {
    let env = Env::new();
    let bare = env.bare_remote("gone");
    let a = Env::clone(&env, &file_url(&bare), "a");
    env.sw(&a, &["init"]).ok();
    std::fs::rename(&bare, env.path("moved.git")).expect("move the remote away");
    let out = env.sw(&a, &["add", "x"]).code(1);
    assert!(out.stderr.contains("cannot reach"), "{}", out.stderr);
    std::fs::rename(env.path("moved.git"), &bare).expect("move it back");
    env.sw(&a, &["add", "x"]).ok();
}

#[test]
fn an_explicit_remote_url_and_swarm_remote_config_are_honoured() {
    let env = Env::new();
    let bare = env.bare_remote("r");
    let other = env.bare_remote("other");
    let a = Env::clone(&env, &path_url(&bare), "a");
    env.sw(&a, &["--remote", &file_url(&other), "init"]).ok();
    assert!(env.rev(&other, "refs/swarm/default").is_some());
    assert!(env.rev(&bare, "refs/swarm/default").is_none());
    env.git(&a, &["remote", "add", "shared", &path_url(&other)]);
    env.git(&a, &["config", "swarm.remote", "shared"]);
    env.sw(&a, &["add", "via config"]).ok();
    let n = env.git(&other, &["log", "--oneline", "refs/swarm/default"]).lines().count();
    assert_eq!(n, 2);
}

#[test]
fn a_dead_holder_is_taken_over_after_its_lease() {
    let env = Arc::new(Env::new());
    let (_bare, clones) = env.swarm_with_clones(file_url, 3);
    let tasks = board(&env, &clones[0], 6);
    // "ghost" claims one task and dies without a word. (Its lease is long enough that the drain, however slow the
    // machine, finishes first; the heir's clock is then a minute and a half later.)
    let ghost_task = env.sw(&clones[0], &["--agent", "ghost", "claim", "--lease", "1m"]).ok().line();
    let others: Vec<String> = tasks.iter().filter(|t| **t != ghost_task).cloned().collect();
    race(Arc::clone(&env), clones[1..].to_vec(), &others);
    let later = [("GIT_SWARM_CLOCK_OFFSET", "90")];
    let took = env.sw_env(&clones[2], &later, &["--agent", "heir", "claim", "--json"]).ok().json();
    assert_eq!(took["id"], serde_json::Value::String(ghost_task.clone()));
    assert_eq!(took["claim"]["epoch"], 2);
    env.sw_env(&clones[2], &later, &["--agent", "heir", "done", &ghost_task]).ok();
    env.sw(&clones[0], &["--agent", "ghost", "done", &ghost_task]).code(4);
}

#[test]
fn a_push_whose_answer_is_lost_is_not_applied_twice() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(file_url, 1);
    // The remote dies right after it moved the ref, before it can say so: the client sees a broken connection
    // although its commit landed. Re-applying `add` would create the task twice.
    let marker = env.path("killed-once");
    let hook = bare.join("hooks").join("reference-transaction");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nif [ \"$1\" = committed ] && [ ! -e '{m}' ]; then touch '{m}'; kill -9 $PPID; fi\n",
            m = marker.display()
        ),
    )
    .expect("hook");
    std::process::Command::new("chmod").arg("+x").arg(&hook).status().expect("chmod");
    let out = env.sw(&clones[0], &["add", "only once", "--json"]).ok();
    assert!(marker.exists(), "the hook did not fire; the test proves nothing");
    let id = out.json()["id"].as_str().unwrap_or_default().to_string();
    let list = env.sw(&clones[0], &["list", "--json"]).ok().json();
    let titles: Vec<&str> = list.as_array().expect("array").iter().filter_map(|t| t["title"].as_str()).collect();
    assert_eq!(titles, vec!["only once"], "the op was applied twice");
    assert_eq!(list[0]["id"], serde_json::Value::String(id));
}

#[test]
fn a_stale_lock_file_is_reported_not_spun_on() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(path_url, 1);
    // A git process killed between taking the ref's lock and renaming it leaves this behind.
    let lock = bare.join("refs").join("swarm").join("default.lock");
    std::fs::create_dir_all(lock.parent().expect("parent")).expect("dir");
    std::fs::write(&lock, "").expect("lock");
    let started = std::time::Instant::now();
    let out = env.sw(&clones[0], &["add", "blocked"]).code(1);
    assert!(out.stderr.contains("default.lock"), "{}", out.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "spun for {:?}", started.elapsed());
    std::fs::remove_file(&lock).expect("unlock");
    env.sw(&clones[0], &["add", "free again"]).ok();
}

/// Agents killed with SIGKILL at random moments (mid-claim, mid-push, mid-done) while they drain a board: every
/// task is still done exactly once, nothing stays stuck once the leases of the dead have run out, the remote stays
/// sound. The killer is bounded in time by the test.
#[test]
fn agents_killed_at_random_moments_lose_nothing() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    let env = Arc::new(Env::new());
    let bare = env.bare_remote("origin");
    let clones: Vec<PathBuf> = (0..4).map(|i| Env::clone(&env, &file_url(&bare), &format!("c{i}"))).collect();
    // Every killed claim that landed spends an attempt when its lease is taken over; an unlucky task may be hit
    // three times, and `failed` is then the right outcome. This test is about exactly-once and nothing stuck, so
    // attempts must not run out.
    env.sw(&clones[0], &["init", "--max-attempts", "1000"]).ok();
    let tasks = board(&env, &clones[0], 24);
    let running: Arc<Mutex<Vec<u32>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    // One step of an agent: run `git swarm args…` as a child the killer can see; None when it was killed.
    fn step(env: &Env, dir: &Path, running: &Mutex<Vec<u32>>, args: &[&str]) -> Option<common::Out> {
        let child = env
            .cmd(dir)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let pid = child.id();
        running.lock().expect("lock").push(pid);
        let out = child.wait_with_output().expect("wait");
        running.lock().expect("lock").retain(|p| *p != pid);
        let out = common::Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert_ne!(out.code, 101, "panicked: {}", out.stderr);
        (out.code != -1).then_some(out)
    }

    let killer = {
        let (running, stop) = (Arc::clone(&running), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut kills = 0;
            let until = Instant::now() + Duration::from_secs(8);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(fastrand::u64(50..250)));
                let victim = {
                    let r = running.lock().expect("lock");
                    (!r.is_empty()).then(|| r[fastrand::usize(..r.len())])
                };
                if let Some(pid) = victim {
                    let _ = std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status();
                    kills += 1;
                }
            }
            kills
        })
    };
    let agents: Vec<_> = clones
        .iter()
        .enumerate()
        .map(|(i, clone)| {
            let (env, running, clone) = (Arc::clone(&env), Arc::clone(&running), clone.clone());
            std::thread::spawn(move || {
                let agent = format!("k{i}");
                let deadline = Instant::now() + Duration::from_secs(120);
                let mut idle_rounds = 0;
                while Instant::now() < deadline {
                    let claim = ["--agent", &agent, "claim", "--lease", "3s"];
                    let Some(out) = step(&env, &clone, &running, &claim) else { continue };
                    if out.code == 3 {
                        // Nothing ready: maybe all done, maybe a dead agent's lease has yet to run out. A claim whose
                        // process was killed after its push went through stays live for its whole lease (3 s,
                        // rounded up to the second): wait well past that before calling the board drained.
                        idle_rounds += 1;
                        if idle_rounds > 20 {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(500));
                        continue;
                    }
                    idle_rounds = 0;
                    assert!(out.code == 0 || out.code == 1, "claim exited {}: {}", out.code, out.stderr);
                    if out.code != 0 {
                        continue;
                    }
                    let id = out.line();
                    // Finish it; if killed, try again: done is refused (4) only once it landed or was taken over.
                    loop {
                        match step(&env, &clone, &running, &["--agent", &agent, "done", &id]) {
                            Some(o) if o.code == 0 || o.code == 4 => break,
                            Some(o) => {
                                assert_eq!(o.code, 1, "done exited {}: {}", o.code, o.stderr);
                                assert!(Instant::now() < deadline, "done keeps failing: {}", o.stderr);
                            }
                            None => {}
                        }
                    }
                }
            })
        })
        .collect();
    for a in agents {
        a.join().expect("agent thread");
    }
    stop.store(true, Ordering::Relaxed);
    let kills = killer.join().expect("killer");
    assert!(kills > 0, "the killer never struck; the test proves nothing");

    let list = env.sw(&clones[0], &["list", "--json"]).ok().json();
    let list = list.as_array().expect("array");
    assert_eq!(list.len(), tasks.len());
    for t in list {
        assert_eq!(t["status"], "done", "not done after {kills} kills: {t}");
    }
    let log = env.sw(&clones[0], &["log", "--json"]).ok().json();
    for id in &tasks {
        let dones =
            log.as_array().expect("array").iter().filter(|e| e["op"] == "done" && e["task"] == id.as_str()).count();
        assert_eq!(dones, 1, "{id} was completed {dones} times");
    }
    let fsck = env.git_out(&bare, &["fsck", "--no-progress"]);
    assert_eq!(fsck.code, 0, "{}", fsck.stderr);
    assert!(!bare.join("refs/swarm/default.lock").exists(), "a stale lock was left on the remote");
}
