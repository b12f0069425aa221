//! `git swarm run worker --agents <n>`: one runner process hosting many agents, end to end — real clones, real
//! `git`, the scripted agent doing real edits; their landings published in batches by the landing desk
//! (`src/runner/desk.rs`). Every task lands exactly once with its code, a batch takes fewer updates of the state
//! ref than it has landings, a conflict leaves the batch and is resolved alone, and SIGTERM and SIGKILL lose
//! nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common;
use crate::common::{Env, finish, path_url, wait_until};
use serde_json::Value;

fn config(extra: &str) -> String {
    format!("{extra}\n[roles.worker]\nexec = {:?}\n", common::scripted_agent())
}

fn add(env: &Env, dir: &Path, title: &str, body: &str) -> String {
    env.sw(dir, &["add", title, "--body", body]).ok().line()
}

fn tasks(env: &Env, dir: &Path) -> Vec<Value> {
    env.sw(dir, &["list", "--json"]).ok().json().as_array().cloned().unwrap_or_default()
}

fn show(env: &Env, dir: &Path, id: &str) -> Value {
    env.sw(dir, &["show", id, "--json"]).ok().json()
}

/// Each task's `done`s in the audit log, and the agents of those `done`s (a batch's commit is its leader's; each
/// op in it names its own agent).
fn done_ops(env: &Env, dir: &Path) -> (BTreeMap<String, usize>, Vec<String>) {
    let log = env.sw(dir, &["log", "--json"]).ok().json();
    let (mut n, mut agents) = (BTreeMap::new(), Vec::new());
    for e in log.as_array().into_iter().flatten() {
        let mut ops = vec![(e["op"].clone(), e["task"].clone(), e["agent"].clone())];
        for a in e["also"].as_array().into_iter().flatten() {
            let agent = if a["agent"].is_string() { a["agent"].clone() } else { e["agent"].clone() };
            ops.push((a["op"].clone(), a["task"].clone(), agent));
        }
        for (op, task, agent) in ops {
            if op == "done" {
                *n.entry(task.as_str().unwrap_or_default().to_string()).or_default() += 1;
                agents.push(agent.as_str().unwrap_or_default().to_string());
            }
        }
    }
    (n, agents)
}

/// Every done task's code is on main exactly once (one commit carries its trailer), and main has no merge.
#[track_caller]
fn landed_once(env: &Env, bare: &Path, list: &[Value]) {
    let trailers = env.git(bare, &["log", "--format=%(trailers:key=Swarm-Task,valueonly)", "main"]);
    for t in list.iter().filter(|t| t["status"] == "done") {
        let id = t["id"].as_str().expect("id");
        let commit = t["result"]["commit"].as_str().unwrap_or_else(|| panic!("{id} has no result.commit: {t}"));
        assert_eq!(env.git_out(bare, &["merge-base", "--is-ancestor", commit, "main"]).code, 0, "{id}: not on main");
        let n = trailers.lines().filter(|l| l.trim() == id).count();
        assert_eq!(n, 1, "{id}'s code is on main {n} times:\n{trailers}");
    }
    assert_eq!(env.git(bare, &["rev-list", "--min-parents=2", "--count", "main"]), "0", "main has merges");
}

/// Commits of the state ref on the remote.
fn state_commits(env: &Env, bare: &Path) -> usize {
    env.git(bare, &["rev-list", "--count", "refs/swarm/default"]).parse().expect("count")
}

#[test]
fn agents_of_one_process_land_every_task_once_in_fewer_updates_than_landings() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config(""));
    let c = &clones[0];
    env.sw(c, &["trust", "--yes"]).ok();
    let ids: Vec<String> =
        (0..16).map(|i| add(&env, c, &format!("file {i}"), &format!("@sleep 1\n@write f{i}.txt {i}"))).collect();
    let before = state_commits(&env, &bare);
    let o = env.sw(c, &["--json", "--agent", "w", "run", "worker", "--agents", "4", "--until-idle"]).ok();
    let doc = o.json();
    let list = tasks(&env, c);
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}\n{}", o.stderr);
    landed_once(&env, &bare, &list);
    let (dones, writers) = done_ops(&env, c);
    for id in &ids {
        assert_eq!(dones.get(id), Some(&1), "{id} was done {:?} times", dones.get(id));
    }
    // Four agents, each its own id and claims.
    for i in 1..=4 {
        assert!(writers.iter().any(|a| *a == format!("w-{i}")), "no done by w-{i}: {writers:?}");
        assert!(o.stderr.contains(&format!("w-{i}: landed")), "w-{i} landed nothing:\n{}", o.stderr);
    }
    // The agents finish together: their landings (and next claims) share updates of the state ref.
    let updates = state_commits(&env, &bare) - before;
    assert_eq!(doc["landed"], 16, "{doc}");
    assert_eq!(doc["batched_landings"], 16, "{doc}");
    assert!(updates <= 10, "{updates} updates of the state ref for 16 landings: no batching\n{doc}");
    assert_eq!(doc["batches"].as_u64(), Some(updates as u64), "{doc}");
    assert_eq!(doc["agents"].as_array().map(Vec::len), Some(4), "{doc}");
    // The process's work trees are gone; the user's clone is as it was.
    assert_eq!(env.git(c, &["status", "--porcelain"]), "");
    let wts = env.git(c, &["worktree", "list", "--porcelain"]);
    assert_eq!(wts.lines().filter(|l| l.starts_with("worktree ")).count(), 1, "{wts}");
}

#[test]
fn mixed_outcomes_land_fail_and_time_out_each_on_its_own_and_a_conflict_leaves_the_batch() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config("max_attempts = 1\n[run]\ntask_timeout = \"3s\""));
    let c = &clones[0];
    env.sw(c, &["trust", "--yes"]).ok();
    // All start together and end about together: the desk's batches carry landings beside failures.
    let lands = add(&env, c, "lands", "@sleep 1\n@write a.txt alpha");
    let left = add(&env, c, "left", "@sleep 1\n@set shared.txt from-left");
    let right = add(&env, c, "right", "@sleep 1\n@set shared.txt from-right");
    let fails = add(&env, c, "exits 1", "@sleep 1\n@exit 1");
    let nothing = add(&env, c, "does nothing", "@sleep 1\n@nothing");
    let hangs = add(&env, c, "hangs", "@hang");
    let o = finish(
        env.spawn(c, "w", &[], &["run", "worker", "--agents", "6", "--until-idle"]),
        120,
        "the runner of six agents",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let status = |id: &str| show(&env, c, id)["status"].as_str().unwrap_or_default().to_string();
    let reason = |id: &str| show(&env, c, id)["failures"][0]["reason"].as_str().unwrap_or_default().to_string();
    for id in [&lands, &left, &right] {
        assert_eq!(status(id), "done", "{id}: {}\n{}", show(&env, c, id), o.stderr);
    }
    for id in [&fails, &nothing, &hangs] {
        assert_eq!(status(id), "failed", "{id}: {}", show(&env, c, id));
    }
    assert!(reason(&fails).contains("exited with 1"), "{}", reason(&fails));
    assert!(reason(&nothing).contains("without changing anything"), "{}", reason(&nothing));
    assert!(reason(&hangs).contains("time limit"), "{}", reason(&hangs));
    // The second of left/right met the first on the same line: out of the batch, its conflict resolved alone.
    assert!(o.stderr.contains("rebase conflict on"), "no conflict run:\n{}", o.stderr);
    let shared = env.git(&bare, &["show", "main:shared.txt"]);
    assert!(shared.contains("from-left") && shared.contains("from-right"), "one side was lost:\n{shared}");
    landed_once(&env, &bare, &tasks(&env, c));
    // Nothing of the failed tasks reached main; each one's work is kept aside only if it made any.
    let files = env.git(&bare, &["ls-tree", "--name-only", "main"]);
    assert_eq!(files.lines().filter(|f| *f != "README.md").collect::<Vec<_>>(), ["a.txt", "shared.txt"], "{files}");
}

#[test]
fn sigterm_releases_the_claim_of_every_agent_of_the_process() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &config(""));
    let c = &clones[0];
    env.sw(c, &["trust", "--yes"]).ok();
    let ids: Vec<String> = (0..3).map(|i| add(&env, c, &format!("slow {i}"), "@sleep 60")).collect();
    let child = env.spawn(c, "w", &[], &["run", "worker", "--agents", "3"]);
    wait_until(30, "every task claimed", || ids.iter().all(|id| show(&env, c, id)["status"] == "claimed"));
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let o = finish(child, 40, "the stopped runner");
    assert_eq!(o.code, 0, "{}", o.stderr);
    for id in &ids {
        let t = show(&env, c, id);
        assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}\n{}", o.stderr);
    }
    assert_eq!(o.stderr.matches(": released ").count(), 3, "{}", o.stderr);
    // No agent of the process is left running.
    let left = common::procs::working_in(&env.places(c).trees());
    assert!(left.is_empty(), "processes left in the work trees: {left:?}");
}

#[test]
fn a_runner_killed_mid_batch_loses_nothing_and_lands_nothing_twice() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config("lease = \"5s\"\nmax_attempts = 10"));
    let c = &clones[0];
    env.sw(c, &["trust", "--yes"]).ok();
    // Every push takes a second on the remote: a kill finds a batch in flight.
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\ncat > /dev/null\nsleep 1\n").expect("hook");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let ids: Vec<String> =
        (0..12).map(|i| add(&env, c, &format!("file {i}"), &format!("@sleep 0.5\n@write f{i}.txt {i}"))).collect();
    for round in 0..3 {
        let mut child = env.spawn(c, "w", &[], &["run", "worker", "--agents", "4", "--until-idle"]);
        std::thread::sleep(Duration::from_millis(1800 + 700 * round));
        let _ = child.kill();
        let _ = child.wait();
    }
    let o = finish(env.spawn(c, "w", &[], &["run", "worker", "--agents", "4", "--until-idle"]), 180, "the last runner");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let list = tasks(&env, c);
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}\n{}", o.stderr);
    landed_once(&env, &bare, &list);
    let (dones, _) = done_ops(&env, c);
    for id in &ids {
        assert_eq!(dones.get(id), Some(&1), "{id} was done {:?} times", dones.get(id));
    }
    // The kills found live claims: some task was taken over after its lease ran out.
    assert!(list.iter().any(|t| t["epoch"].as_u64() > Some(1)), "no kill hit a claim: {list:?}");
    let fsck = env.git_out(&bare, &["fsck", "--no-dangling"]);
    assert_eq!(fsck.code, 0, "{}", fsck.stderr);
}

#[test]
fn agents_bad_counts_and_ids_are_usage_errors() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &config(""));
    let c = &clones[0];
    for n in ["0", "513", "x"] {
        let o = env.sw(c, &["run", "worker", "--agents", n]);
        assert_eq!(o.code, 2, "--agents {n}: {o:?}");
        assert!(o.stderr.contains("--agents"), "{}", o.stderr);
    }
    let long = "a".repeat(62);
    let o = env.sw(c, &["--agent", &long, "run", "worker", "--agents", "12"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(o.stderr.contains(&format!("{long}-10")), "{}", o.stderr);
}

/// In a process of several agents, the end of one agent's run ends the daemon it left (one that cleared its
/// environment and left the session, so only the subreaper finds it), and nothing of a sibling that still works.
#[test]
fn one_agents_daemon_ends_with_its_run_and_its_siblings_work_goes_on() {
    let env = Env::new();
    let exec = "case \"$GIT_SWARM_TASK_TITLE\" in \
                first*) env -i /usr/bin/setsid sh -c 'cd /; while :; do sleep 0.3932; done' </dev/null >/dev/null 2>&1 & ;; \
                *) sleep 3 ;; esac; echo \"$GIT_SWARM_TASK_TITLE\" > \"$GIT_SWARM_TASK_ID.txt\"";
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &format!("[roles.worker]\nexec = {exec:?}\n"));
    let c = &clones[0];
    env.sw(c, &["trust", "--yes"]).ok();
    let second = add(&env, c, "second task", "works for three seconds");
    let first = add(&env, c, "first task", "leaves a daemon");
    let o = finish(env.spawn(c, "w", &[], &["run", "worker", "--agents", "2", "--until-idle"]), 60, "the runner");
    assert_eq!(o.code, 0, "{}", o.stderr);
    for id in [&first, &second] {
        let t = show(&env, c, id);
        assert_eq!(t["status"], "done", "{id}: {t}\n{}", o.stderr);
    }
    let alive = common::procs::all().iter().filter(|p| common::procs::cmdline(p.pid).contains("0.3932")).count();
    assert_eq!(alive, 0, "the daemon outlived its run");
}

/// `--once` as for one agent: exit 3 when there is nothing to claim, 1 when an agent's task did not land; and one
/// agent that cannot go on (its work tree cannot be made: a file stands where its index goes) stops its siblings, whose
/// claims go back unspent.
#[test]
fn once_exit_codes_and_one_failing_agent_stops_the_others() {
    let env = Env::new();
    let exec = "case \"$GIT_SWARM_TASK_TITLE\" in fails*) exit 1 ;; slow*) sleep 30 ;; esac; \
                echo \"$GIT_SWARM_TASK_TITLE\" > \"$GIT_SWARM_TASK_ID.txt\"";
    let config = format!("max_attempts = 1\n[roles.worker]\nexec = {exec:?}\n");
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    env.sw(c, &["trust", "--yes"]).ok();
    let o = env.sw(c, &["--agent", "w", "run", "worker", "--once", "--agents", "2"]);
    assert_eq!(o.code, 3, "an empty board: {o:?}");
    add(&env, c, "lands", "ok");
    add(&env, c, "fails", "exits 1");
    let o = env.sw(c, &["--agent", "w", "run", "worker", "--once", "--agents", "2"]);
    assert_eq!(o.code, 1, "one task failed: {o:?}");
    assert!(o.stderr.contains("did not land"), "{}", o.stderr);
    let slow = [add(&env, c, "slow 1", "sleeps"), add(&env, c, "slow 2", "sleeps")];
    // w-2's own folder of the runner's (its index) cannot be made: a file stands at its path.
    let slots = c.join(".git/swarm/slots");
    std::fs::create_dir_all(&slots).expect("slots");
    std::fs::write(slots.join("w-2"), "not a folder").expect("block w-2");
    let started = std::time::Instant::now();
    let o = finish(env.spawn(c, "w", &[], &["run", "worker", "--agents", "2"]), 60, "the runner");
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("w-2"), "{}", o.stderr);
    assert!(started.elapsed() < Duration::from_secs(25), "the sibling was not stopped: {:?}", started.elapsed());
    for id in &slow {
        let t = show(&env, c, id);
        assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}\n{}", o.stderr);
    }
}

/// The check of a batch (issue 39): with `[run] check_policy = "tip"` (the default) a batch of four landings runs
/// the check once, on its tip, where `"strict"` runs it on each landing in turn (four times).
#[test]
fn a_batch_runs_the_check_once_on_its_tip_where_strict_runs_it_on_each_landing() {
    for (policy, most) in [("tip", 2), ("strict", 4)] {
        let env = Env::new();
        let runs = env.path("check-runs");
        let check = format!("echo run >> '{}'", runs.display());
        let cfg = config(&format!(
            "[run]\nsandbox = \"off\"\ncheck = {check:?}\ncheck_policy = \"{policy}\"\nbatch_window = \"10s\""
        ));
        let (bare, clones) = env.swarm_with_config(path_url, 1, &cfg);
        let c = &clones[0];
        env.sw(c, &["trust", "--yes"]).ok();
        for i in 0..4 {
            add(&env, c, &format!("file {i}"), &format!("@sleep 1\n@write f{i}.txt {i}"));
        }
        let o = env.sw(c, &["--json", "--agent", "w", "run", "worker", "--agents", "4", "--until-idle"]).ok();
        let list = tasks(&env, c);
        assert!(list.iter().all(|t| t["status"] == "done"), "{policy}: {list:?}\n{}", o.stderr);
        landed_once(&env, &bare, &list);
        let n = std::fs::read_to_string(&runs).unwrap_or_default().lines().count();
        assert_eq!(o.json()["check_runs"].as_u64(), Some(n as u64), "{policy}: the runner counts every run");
        match policy {
            "tip" => assert!((1..=most).contains(&n), "{policy}: the check ran {n} times for 4 landings\n{}", o.stderr),
            _ => assert_eq!(n, most, "{policy}: the check ran {n} times for 4 landings\n{}", o.stderr),
        }
    }
}

/// A batch whose tip fails the check is bisected (issue 39): only the landing that breaks it fails — checked again
/// alone on the target's own tip, its reason quoting the check — and every other landing of the batch lands; the
/// target's tip passes the check.
#[test]
fn a_batch_whose_tip_fails_the_check_is_bisected_and_only_the_breaking_landing_fails() {
    let env = Env::new();
    let runs = env.path("check-runs");
    let check = format!(
        "echo run >> '{}'; if [ -e broken.txt ]; then echo 'FAILED tests/test_it.py::test_broken'; exit 1; fi",
        runs.display()
    );
    let cfg = config(&format!("max_attempts = 1\n[run]\nsandbox = \"off\"\ncheck = {check:?}\nbatch_window = \"10s\""));
    let (bare, clones) = env.swarm_with_config(path_url, 1, &cfg);
    let c = &clones[0];
    env.sw(c, &["trust", "--yes"]).ok();
    let ids: Vec<String> = (0..4)
        .map(|i| {
            // The breaking one finishes first and leads the batch: a bisection that blamed the tip would land none
            // of the others together.
            let body = if i == 2 {
                "@sleep 0.3\n@write broken.txt x".to_string()
            } else {
                format!("@sleep 2\n@write f{i}.txt {i}")
            };
            add(&env, c, &format!("file {i}"), &body)
        })
        .collect();
    let o = env.sw(c, &["--json", "--agent", "w", "run", "worker", "--agents", "4", "--until-idle"]).ok();
    for (i, id) in ids.iter().enumerate() {
        let t = show(&env, c, id);
        let want = if i == 2 { "failed" } else { "done" };
        assert_eq!(t["status"], want, "{id}: {t}\n{}", o.stderr);
    }
    let reason = show(&env, c, &ids[2])["failures"][0]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("test_broken"), "the reason quotes the check: {reason}");
    landed_once(&env, &bare, &tasks(&env, c));
    let files = env.git(&bare, &["ls-tree", "--name-only", "main"]);
    assert_eq!(
        files.lines().filter(|f| *f != "README.md").collect::<Vec<_>>(),
        ["f0.txt", "f1.txt", "f3.txt"],
        "{files}"
    );
    // The four in one batch: its tip, the three prefixes before it at once, the tip without the culprit, the culprit
    // alone (five when a loaded machine made the culprit finish last: no tip without it) — and the three others
    // landed together.
    let n = std::fs::read_to_string(&runs).unwrap_or_default().lines().count();
    assert!(n == 6 || n == 5, "the check ran {n} times\n{}", o.stderr);
    let log = env.sw(c, &["log", "--json"]).ok().json();
    let together = log.as_array().into_iter().flatten().any(|e| {
        let mut dones: Vec<&Value> = if e["op"] == "done" { vec![&e["task"]] } else { vec![] };
        dones.extend(e["also"].as_array().into_iter().flatten().filter(|a| a["op"] == "done").map(|a| &a["task"]));
        [0, 1, 3].iter().all(|&k| dones.iter().any(|t| **t == ids[k].as_str()))
    });
    assert!(together, "the others did not land as one batch:\n{log}\n{}", o.stderr);
}
