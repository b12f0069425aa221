//! The agent runner end to end: real clones, real `git`, real processes, the scripted agent of
//! `tests/agents/scripted.sh` doing real edits and commits; remotes on a bare path and behind `git daemon`; the
//! `http` backend against a real HTTP server on loopback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{Daemon, Env, file_url, finish, path_url, wait_until};
use serde_json::Value;

fn agent_exec() -> String {
    common::scripted_agent()
}

/// A bare remote `origin.git`, `n` clones `c0…`, the swarm initialised with `config` (a swarm.toml).
fn swarm(env: &Env, url_of: impl Fn(&Path) -> String, n: usize, config: &str) -> (PathBuf, Vec<PathBuf>) {
    env.swarm_with_config(url_of, n, config)
}

fn add(env: &Env, dir: &Path, title: &str, body: &str) -> String {
    env.sw(dir, &["add", title, "--body", body]).ok().line()
}

/// Start `git swarm args…` in `dir` as agent `agent`.
fn spawn(env: &Env, dir: &Path, agent: &str, extra_env: &[(&str, &str)], args: &[&str]) -> Child {
    env.spawn(dir, agent, extra_env, args)
}

fn tasks(env: &Env, dir: &Path) -> Vec<Value> {
    env.sw(dir, &["list", "--json"]).ok().json().as_array().cloned().unwrap_or_default()
}

fn by_title(list: &[Value]) -> BTreeMap<String, Value> {
    list.iter().map(|t| (t["title"].as_str().unwrap_or_default().to_string(), t.clone())).collect()
}

/// How many times each task was marked done in the audit log.
fn done_ops(env: &Env, dir: &Path) -> BTreeMap<String, usize> {
    let log = env.sw(dir, &["log", "--json"]).ok().json();
    let mut n = BTreeMap::new();
    for e in log.as_array().into_iter().flatten() {
        let mut ops = vec![(e["op"].clone(), e["task"].clone())];
        for a in e["also"].as_array().into_iter().flatten() {
            ops.push((a["op"].clone(), a["task"].clone()));
        }
        for (op, task) in ops {
            if op == "done" {
                *n.entry(task.as_str().unwrap_or_default().to_string()).or_default() += 1;
            }
        }
    }
    n
}

/// The user's clone is as it was: a clean work tree, no extra work trees, no runner's work tree left.
#[track_caller]
fn untouched(env: &Env, clone: &Path) {
    assert_eq!(env.git(clone, &["status", "--porcelain"]), "", "the user's work tree changed");
    let wts = env.git(clone, &["worktree", "list", "--porcelain"]);
    assert_eq!(wts.lines().filter(|l| l.starts_with("worktree ")).count(), 1, "stray work trees:\n{wts}");
    let dir = env.places(clone).trees();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "work tree folders left: {left:?}");
}

/// Every done work task's commit is on main, carries its trailer, and main has no merge.
#[track_caller]
fn landed_on_main(env: &Env, bare: &Path, list: &[Value]) {
    let trailers = env.git(bare, &["log", "--format=%(trailers:key=Swarm-Task,valueonly)", "main"]);
    for t in list.iter().filter(|t| t["kind"] == "work" && t["status"] == "done") {
        let id = t["id"].as_str().expect("id");
        let commit = t["result"]["commit"].as_str().unwrap_or_else(|| panic!("{id} has no result.commit: {t}"));
        let o = env.git_out(bare, &["merge-base", "--is-ancestor", commit, "main"]);
        assert_eq!(o.code, 0, "{id}'s commit {commit} is not on main");
        assert!(trailers.lines().any(|l| l.trim() == id), "no commit on main carries Swarm-Task: {id}\n{trailers}");
    }
    assert_eq!(env.git(bare, &["rev-list", "--min-parents=2", "--count", "main"]), "0", "main has merges");
}

const PLAN: &str = r#"
[[task]]
key = "a"
title = "write a"
body = "@write a.txt alpha"

[[task]]
key = "b"
title = "write b"
body = "@write b.txt beta\n@commit"

[[task]]
title = "after a and b"
body = "@write c.txt gamma"
deps = ["a", "b"]

[[task]]
title = "an area"
kind = "plan"
body = "split me"
"#;

const SUBPLAN: &str = r#"
[[task]]
title = "area part 1"
body = "@write area/one.txt 1"

[[task]]
title = "area part 2"
body = "@write area/two.txt 2"
"#;

#[test]
fn a_goal_runs_to_a_stopped_swarm_with_every_task_landed_exactly_once() {
    let env = Env::new();
    let config =
        format!("lease = \"1m\"\n[run]\ncheck = \"test -f README.md\"\n[roles.default]\nexec = {:?}\n", agent_exec());
    // c0: the planner's clone, c1–c4 the workers', c5 the judge's: separate clones against one bare remote.
    let (bare, clones) = swarm(&env, path_url, 6, &config);
    let plan = env.path("plan.toml");
    let subplan = env.path("subplan.toml");
    std::fs::write(&plan, PLAN).expect("plan");
    std::fs::write(&subplan, SUBPLAN).expect("subplan");
    let plan_env =
        [("SCRIPTED_PLAN", plan.to_str().expect("utf-8")), ("SCRIPTED_SUBPLAN", subplan.to_str().expect("utf-8"))];
    let planner = spawn(&env, &clones[0], "p1", &plan_env, &["run", "planner", "--goal", "build a, b, c and an area"]);
    let workers: Vec<Child> =
        (1..=4).map(|i| spawn(&env, &clones[i], &format!("w{i}"), &[], &["run", "worker"])).collect();
    let judge = spawn(&env, &clones[5], "judge", &[], &["run", "judge"]);
    let out = finish(judge, 120, "the judge");
    assert_eq!(out.code, 0, "judge: {}", out.stderr);
    assert!(out.stderr.contains("cycle 1: stop"), "{}", out.stderr);
    for (i, w) in workers.into_iter().enumerate() {
        let o = finish(w, 30, "a worker");
        assert_eq!(o.code, 0, "worker {i}: {}", o.stderr);
        assert!(o.stderr.contains("the judge stopped the swarm"), "{}", o.stderr);
    }
    let o = finish(planner, 30, "the planner");
    assert_eq!(o.code, 0, "planner: {}", o.stderr);

    let list = tasks(&env, &clones[0]);
    let titles = by_title(&list);
    for t in ["write a", "write b", "after a and b", "area part 1", "area part 2", "an area"] {
        assert_eq!(titles[t]["status"], "done", "{t}: {}", titles[t]);
    }
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}");
    // The area was planned by a sub-planner: its parts are its children.
    let area = titles["an area"]["id"].clone();
    assert_eq!(titles["area part 1"]["parent"], area);
    // Exactly once: one `done` per task in the audit log.
    let done = done_ops(&env, &clones[0]);
    for t in &list {
        let id = t["id"].as_str().expect("id");
        assert_eq!(done.get(id).copied().unwrap_or(0), 1, "{id} done {:?} times", done.get(id));
    }
    landed_on_main(&env, &bare, &list);
    // The code was copied into the remote in-process (a local path): nothing is missing there.
    assert_eq!(env.git(&bare, &["fsck", "--no-progress", "--no-dangling"]), "");
    // The dependency was respected: c.txt landed after a.txt and b.txt.
    let order = env.git(&bare, &["log", "--reverse", "--format=%s", "main"]);
    let pos = |s: &str| order.lines().position(|l| l == s).unwrap_or_else(|| panic!("{s} not on main:\n{order}"));
    assert!(pos("after a and b") > pos("write a") && pos("after a and b") > pos("write b"), "{order}");
    // Hand-offs are stored as notes; the verdict as cycles/1.toml.
    let state = env.rev(&bare, "refs/swarm/default").expect("state");
    let files = env.git(&bare, &["ls-tree", "-r", "--name-only", &state]);
    assert!(files.lines().any(|f| f.starts_with("notes/")), "{files}");
    assert!(env.git(&bare, &["show", &format!("{state}:cycles/1.toml")]).contains("verdict = \"stop\""));
    for c in &clones {
        untouched(&env, c);
    }
}

#[test]
fn two_tasks_on_the_same_lines_one_lands_the_other_resolves_its_conflict() {
    let env = Env::new();
    let config = format!("[roles.worker]\nexec = {:?}\n", agent_exec());
    let (bare, clones) = swarm(&env, file_url, 2, &config);
    // Both agents start from the same tip (they sleep before writing), so the second to land meets a conflict.
    add(&env, &clones[0], "left", "@sleep 1\n@set shared.txt from-left");
    add(&env, &clones[0], "right", "@sleep 1\n@set shared.txt from-right");
    let a = spawn(&env, &clones[0], "w1", &[], &["run", "worker", "--once"]);
    let b = spawn(&env, &clones[1], "w2", &[], &["run", "worker", "--once"]);
    let (a, b) = (finish(a, 60, "w1"), finish(b, 60, "w2"));
    assert_eq!((a.code, b.code), (0, 0), "{}\n{}", a.stderr, b.stderr);
    let both = format!("{}{}", a.stderr, b.stderr);
    assert!(both.contains("rebase conflict on"), "no conflict run:\n{both}");
    let list = tasks(&env, &clones[0]);
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}");
    let shared = env.git(&bare, &["show", "main:shared.txt"]);
    assert!(shared.contains("from-left") && shared.contains("from-right"), "one side was lost:\n{shared}");
    assert!(!shared.contains("<<<<<<<"), "{shared}");
    landed_on_main(&env, &bare, &list);
    untouched(&env, &clones[0]);
    untouched(&env, &clones[1]);
}

#[test]
fn a_failing_agent_a_hanging_one_and_one_that_changes_nothing_fail_with_a_reason() {
    let env = Env::new();
    let config = format!("max_attempts = 1\n[run]\ntask_timeout = \"2s\"\n[roles.worker]\nexec = {:?}\n", agent_exec());
    let (bare, clones) = swarm(&env, path_url, 1, &config);
    let c = &clones[0];
    let exit1 = add(&env, c, "exits 1", "@exit 1");
    let hang = add(&env, c, "hangs", "@hang");
    let nothing = add(&env, c, "does nothing", "@nothing");
    let started = Instant::now();
    let o = finish(spawn(&env, c, "w1", &[], &["run", "worker", "--until-idle"]), 60, "the worker");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(started.elapsed() < Duration::from_secs(30), "the hanging agent was not stopped in time");
    let show = |id: &str| env.sw(c, &["show", id, "--json"]).ok().json();
    let reason = |id: &str| show(id)["failures"][0]["reason"].as_str().unwrap_or_default().to_string();
    for id in [&exit1, &hang, &nothing] {
        assert_eq!(show(id)["status"], "failed", "{}", show(id));
    }
    assert!(
        reason(&exit1).contains("exited with 1") && reason(&exit1).contains("exiting with 1 as told"),
        "{}",
        reason(&exit1)
    );
    assert!(reason(&hang).contains("time limit"), "{}", reason(&hang));
    assert!(reason(&nothing).contains("without changing anything"), "{}", reason(&nothing));
    // Nothing reached main.
    assert_eq!(env.git(&bare, &["rev-list", "--count", "main"]), "1");
    untouched(&env, c);
}

#[test]
fn a_failing_check_fails_the_task_and_keeps_its_work_for_a_person() {
    let env = Env::new();
    let config = format!("max_attempts = 2\n[roles.worker]\nexec = {:?}\n", agent_exec());
    let (bare, clones) = swarm(&env, file_url, 1, &config);
    let c = &clones[0];
    let id = add(&env, c, "breaks the build", "@write broken.txt oops");
    let o = env
        .sw(
            c,
            &[
                "--agent",
                "w1",
                "run",
                "worker",
                "--once",
                "--check",
                "test ! -e broken.txt && echo fine || { echo 'broken.txt must not exist' >&2; exit 3; }",
            ],
        )
        .code(1);
    assert!(o.stderr.contains("failed"), "{}", o.stderr);
    let t = env.sw(c, &["show", &id, "--json"]).ok().json();
    assert_eq!(t["status"], "open", "one attempt left: {t}");
    assert!(t["failures"][0]["reason"].as_str().unwrap_or_default().contains("broken.txt must not exist"), "{t}");
    let kept = env.rev(&bare, &format!("refs/swarm-work/default/{id}/1")).expect("the work is kept on the remote");
    assert!(env.git(&bare, &["show", &format!("{kept}:broken.txt")]).contains("oops"));
    // `show` says where: the failure names the ref and the remote.
    assert_eq!(t["failures"][0]["kept"], format!("refs/swarm-work/default/{id}/1 on origin"), "{t}");
    let shown = env.sw(c, &["show", &id]).ok().stdout;
    assert!(shown.contains(&format!("its work refs/swarm-work/default/{id}/1 on origin")), "{shown}");
    assert_eq!(env.git(&bare, &["rev-list", "--count", "main"]), "1", "nothing landed");
    // --once with nothing ready: exit 3 (before that, the last attempt fails: exit 1).
    env.sw(c, &["--agent", "w1", "run", "worker", "--once", "--exec", "true"]).code(1);
    env.sw(c, &["--agent", "w1", "run", "worker", "--once", "--exec", "true"]).code(3);
}

#[test]
fn workers_in_separate_clones_over_git_daemon_land_every_task_once() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let daemon = Daemon::start(&env, env.root.path());
    let url = daemon.url("origin.git");
    let clones: Vec<PathBuf> = (0..3).map(|i| env.clone(&url, &format!("d{i}"))).collect();
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {:?}\n", agent_exec())).expect("config");
    env.sw(&clones[0], &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    for i in 0..9 {
        add(&env, &clones[0], &format!("file {i}"), &format!("@write f{i}.txt {i}\n@write all.txt line {i}"));
    }
    let workers: Vec<Child> = clones
        .iter()
        .enumerate()
        .map(|(i, c)| spawn(&env, c, &format!("w{i}"), &[], &["run", "worker", "--until-idle"]))
        .collect();
    for w in workers {
        let o = finish(w, 120, "a worker");
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let list = tasks(&env, &clones[0]);
    assert_eq!(list.len(), 9);
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}");
    assert!(done_ops(&env, &clones[0]).values().all(|n| *n == 1));
    landed_on_main(&env, &bare, &list);
    // Every task appended its line to all.txt: conflicts resolved, nothing lost.
    let all = env.git(&bare, &["show", "main:all.txt"]);
    for i in 0..9 {
        assert!(all.contains(&format!("line {i}")), "line {i} lost:\n{all}");
    }
    assert_eq!(env.git(&bare, &["fsck", "--no-progress", "--no-dangling"]), "");
}

/// A remote away for 5 seconds (its server killed, then started again on its port) while a runner works and lands
/// used to end the runner (exit 1, finished work dropped, claims left to run out). Its ops now ride an outage out
/// for a third of the lease: the landing that met it goes through when the remote is back, every task lands once,
/// and the runner ends as it would have.
fn rides_out_an_outage(env: &Env, bare: &Path, url: &str, down: impl FnMut(), up: impl FnMut()) {
    let c = env.clone(url, "d0");
    fleet_rides_out_an_outage(env, bare, &[c], down, up);
}

/// [`rides_out_an_outage`] with a runner in each of `clones` (of the remote at `url`), on 4 tasks a runner.
fn fleet_rides_out_an_outage(env: &Env, bare: &Path, clones: &[PathBuf], mut down: impl FnMut(), mut up: impl FnMut()) {
    let c = &clones[0];
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {:?}\n", agent_exec())).expect("config");
    env.sw(c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let n = if clones.len() == 1 { 6 } else { 4 * clones.len() };
    for i in 0..n {
        add(env, c, &format!("file {i}"), &format!("@sleep 1\n@write f{i}.txt {i}"));
    }
    let runners: Vec<_> = clones
        .iter()
        .enumerate()
        .map(|(i, c)| spawn(env, c, &format!("w{}", i + 1), &[], &["run", "worker", "--until-idle"]))
        .collect();
    // The remote goes away once a task landed, while the next one's agent works (its landing meets the outage).
    let landed = || env.git(bare, &["rev-list", "--count", "main"]).trim().parse::<u32>().unwrap_or(0) > 1;
    wait_until(60, "a task landed", landed);
    down();
    let away = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    up();
    let mut said = false;
    for (i, w) in runners.into_iter().enumerate() {
        let o = finish(w, 120, "a worker");
        assert_eq!(o.code, 0, "runner w{} ended on the outage:\n{}", i + 1, o.stderr);
        assert!(!o.stderr.contains("could not keep"), "{}", o.stderr);
        said |= o.stderr.contains("did not answer for") && o.stderr.contains("waited it out");
    }
    assert!(away.elapsed() >= Duration::from_secs(5));
    // And a runner says it waited.
    assert!(said, "no runner said it waited the outage out");
    let list = tasks(env, c);
    assert_eq!(list.len(), n);
    // Nothing redone: no attempt spent, every task's `done` once.
    assert!(list.iter().all(|t| t["status"] == "done" && t["attempts"] == 0), "{list:?}");
    assert!(done_ops(env, c).values().all(|n| *n == 1));
    landed_on_main(env, bare, &list);
}

#[test]
fn a_runner_rides_out_a_five_second_outage_of_git_daemon() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let daemon = std::cell::RefCell::new(Daemon::start(&env, env.root.path()));
    let url = daemon.borrow().url("origin.git");
    rides_out_an_outage(&env, &bare, &url, || daemon.borrow_mut().stop(), || daemon.borrow_mut().restart(&env));
}

/// A runner with nothing to claim while another holds the one task polls the remote for a change; an outage then
/// used to end it (its poll was the one read of a runner that did not ride an outage out: exit 1, and with
/// `--agents n` every agent of the process stopped with it). It waits the outage out and ends idle.
#[test]
fn an_idle_runner_rides_out_a_five_second_outage_while_it_waits() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let daemon = std::cell::RefCell::new(Daemon::start(&env, env.root.path()));
    let url = daemon.borrow().url("origin.git");
    let (busy, idle) = (env.clone(&url, "busy"), env.clone(&url, "idle"));
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {:?}\n", agent_exec())).expect("config");
    env.sw(&busy, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    add(&env, &busy, "long", "@sleep 9\n@write long.txt done");
    let holder = spawn(&env, &busy, "w1", &[], &["run", "worker", "--until-idle"]);
    wait_until(30, "the task claimed", || tasks(&env, &busy).iter().any(|t| t["status"] == "claimed"));
    // Two agents in one process, both idle: their polls are shared, and neither may end the process.
    let waiter = spawn(&env, &idle, "w2", &[], &["run", "worker", "--until-idle", "--agents", "2"]);
    std::thread::sleep(Duration::from_secs(1));
    daemon.borrow_mut().stop();
    std::thread::sleep(Duration::from_secs(5));
    daemon.borrow_mut().restart(&env);
    let (h, w) = (finish(holder, 60, "the holder"), finish(waiter, 60, "the idle runner"));
    assert_eq!(h.code, 0, "the holder ended on the outage:\n{}", h.stderr);
    assert_eq!(w.code, 0, "the idle runner ended on the outage:\n{}", w.stderr);
    let list = tasks(&env, &busy);
    assert!(list.iter().all(|t| t["status"] == "done" && t["attempts"] == 0), "{list:?}");
    landed_on_main(&env, &bare, &list);
}

/// An idle runner wakes for work, not for every update of the ref. Ten updates that leave it nothing to claim
/// (tasks that wait for one a person holds) cost it no claim and no read of the board: at the end of a drain,
/// 1,000 idle agents over 64 processes woke at every update, claimed nothing and read the board again, some 70
/// fetches a second that starved the landings still in flight (`bench/internet.py`). A task it can take still
/// wakes it, and it lands it.
#[test]
fn an_idle_runner_wakes_for_work_not_for_every_update_of_the_ref() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let daemon = Daemon::start(&env, env.root.path());
    let url = daemon.url("origin.git");
    let (hand, idle) = (env.clone(&url, "hand"), env.clone(&url, "idle"));
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {:?}\n", agent_exec())).expect("config");
    env.sw(&hand, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let held = add(&env, &hand, "held by a person", "@write held.txt x");
    env.sw(&hand, &["claim", &held, "--agent", "person"]).ok();
    let profile = env.path("profile.jsonl");
    let profile_s = profile.to_str().expect("utf-8");
    let child = spawn(&env, &idle, "w", &[("GIT_SWARM_PROFILE", profile_s)], &["run", "worker", "--agents", "2"]);
    std::thread::sleep(Duration::from_secs(2));
    for i in 0..10 {
        env.sw(&hand, &["add", &format!("after the held one {i}"), "--after", &held]).ok();
        std::thread::sleep(Duration::from_millis(300));
    }
    let free = add(&env, &hand, "free", "@write free.txt y");
    wait_until(40, "the free task landed", || {
        env.sw(&hand, &["show", &free, "--json"]).ok().json()["status"] == "done"
    });
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let o = finish(child, 30, "the idle runner");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line = std::fs::read_to_string(&profile).expect("the runner's profile");
    let p: Value = serde_json::from_str(line.lines().last().expect("a line")).expect("json");
    // Its claims and reads of the board: the first claim of each agent and the read after it, then the free
    // task's claim and landing — a handful. Woken by each of the ten updates, each agent claimed and read again:
    // three or more fetches an update.
    let fetches = p["fetch"]["n"].as_u64().expect("fetches counted");
    assert!(fetches <= 16, "{fetches} fetches of the board by an idle runner over ten updates not for it:\n{p}");
    let list = tasks(&env, &hand);
    assert_eq!(by_title(&list)["free"]["status"], "done");
    landed_on_main(&env, &bare, &list);
}

/// A fleet (two runners, two clones) over smart HTTP, lighttpd in front of `git http-backend` stopped for 5 s and
/// started again: no runner exits, nothing is redone.
#[test]
fn a_fleet_rides_out_a_five_second_outage_of_smart_http() {
    let Some(lighttpd) = common::http::lighttpd_or_skip("a_fleet_rides_out_a_five_second_outage_of_smart_http") else {
        return;
    };
    let env = Env::new();
    let bare = env.bare_remote("origin");
    env.git(&bare, &["config", "http.receivepack", "true"]);
    let server = common::http::Lighttpd::start(&env, &lighttpd, env.root.path(), &env.path("lighttpd"));
    let server = std::cell::RefCell::new(server);
    let url = server.borrow().url("origin.git");
    let clones = [env.clone(&url, "h0"), env.clone(&url, "h1")];
    fleet_rides_out_an_outage(
        &env,
        &bare,
        &clones,
        || server.borrow_mut().stop(),
        || server.borrow_mut().restart(&env),
    );
}

/// A fleet (two runners, two clones) over ssh, OpenSSH's sshd on loopback killed for 5 s and started again: no
/// runner exits, nothing is redone.
#[test]
fn a_fleet_rides_out_a_five_second_outage_of_sshd() {
    let Some(program) = common::sshd::sshd_or_skip("a_fleet_rides_out_a_five_second_outage_of_sshd") else {
        return;
    };
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let server = std::cell::RefCell::new(common::sshd::Sshd::start(&env, &program, &env.path("sshd")));
    let (url, ssh) = (server.borrow().url(&bare), server.borrow().ssh_command());
    let clones: Vec<PathBuf> = (0..2).map(|i| server.borrow().clone_with(&env, &url, &ssh, &format!("s{i}"))).collect();
    fleet_rides_out_an_outage(
        &env,
        &bare,
        &clones,
        || server.borrow_mut().stop(),
        || server.borrow_mut().restart(&env),
    );
}

/// Past the outage window the work is not lost with the work tree: work that could not be pushed aside is kept in
/// the clone (`refs/swarm-work/…` there), and the next runner of the clone pushes it once the remote is back.
#[test]
fn work_that_cannot_be_pushed_aside_is_kept_in_the_clone_and_pushed_by_the_next_runner() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let mut daemon = Daemon::start(&env, env.root.path());
    let c = env.clone(&daemon.url("origin.git"), "d0");
    let checking = env.path("checking");
    // A lease of 3 s: the outage window is 1 s. The check fails (the work is kept aside) after the test took the
    // remote away.
    let cfg = env.path("swarm.toml");
    let check = format!("touch {}; sleep 2; exit 1", checking.display());
    std::fs::write(
        &cfg,
        format!(
            "lease = \"3s\"\n[run]\nsandbox = \"off\"\ncheck = {check:?}\n[roles.worker]\nexec = {:?}\n",
            agent_exec()
        ),
    )
    .expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let id = add(&env, &c, "kept", "@write kept.txt the work");
    let w = spawn(&env, &c, "w1", &[], &["run", "worker", "--once"]);
    wait_until(60, "the check runs", || checking.exists());
    daemon.stop();
    let o = finish(w, 60, "the worker");
    assert_ne!(o.code, 0, "the remote stayed away: {}", o.stderr);
    let refname = format!("refs/swarm-work/default/{id}/1");
    assert!(o.stderr.contains(&format!("kept in this clone at {refname}")), "{}", o.stderr);
    let kept = env.rev(&c.join(".git"), &refname).expect("kept in the clone");
    assert!(env.git(&c, &["show", &format!("{kept}:kept.txt")]).contains("the work"));
    daemon.restart(&env);
    let _ = std::fs::remove_file(&checking);
    let o = finish(spawn(&env, &c, "w1", &[], &["run", "worker", "--once"]), 60, "the next worker");
    assert!(o.stderr.contains(&refname), "{}", o.stderr);
    assert_eq!(env.rev(&bare, &refname).as_deref(), Some(kept.as_str()), "pushed to the remote");
    assert_eq!(env.rev(&c.join(".git"), &refname), None, "and gone from the clone");
}

#[test]
fn sigterm_stops_the_agent_and_releases_the_claim() {
    let env = Env::new();
    let (_bare, clones) = swarm(&env, path_url, 1, &format!("[roles.worker]\nexec = {:?}\n", agent_exec()));
    let c = &clones[0];
    let id = add(&env, c, "slow", "@sleep 30");
    let child = spawn(&env, c, "w1", &[], &["run", "worker"]);
    wait_until(20, "the task is claimed", || env.sw(c, &["show", &id, "--json"]).ok().json()["status"] == "claimed");
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let o = finish(child, 30, "the stopped worker");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("released"), "{}", o.stderr);
    let t = env.sw(c, &["show", &id, "--json"]).ok().json();
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}");
    untouched(&env, c);
}

#[test]
fn a_killed_workers_task_is_taken_over_after_its_lease_and_its_work_tree_does_not_break_the_next_run() {
    let env = Env::new();
    let config = format!("lease = \"3s\"\n[roles.worker]\nexec = {:?}\n", agent_exec());
    let (bare, clones) = swarm(&env, path_url, 1, &config);
    let c = &clones[0];
    let id = add(&env, c, "takes a while", "@sleep 2\n@write slow.txt done");
    let mut child = spawn(&env, c, "w1", &[], &["run", "worker"]);
    wait_until(20, "the task is claimed", || env.sw(c, &["show", &id, "--json"]).ok().json()["status"] == "claimed");
    std::thread::sleep(Duration::from_millis(300));
    child.kill().expect("SIGKILL the runner");
    let _ = child.wait();
    // Another agent in the same clone takes it over once the lease has run out.
    common::work_once_when_ready(&env, c, "w2", 20);
    let t = env.sw(c, &["show", &id, "--json"]).ok().json();
    assert_eq!(t["status"], "done", "{t}");
    assert_eq!(t["epoch"], 2, "{t}");
    assert!(t["failures"][0]["reason"].as_str().unwrap_or_default().contains("lease expired"), "{t}");
    // The killed runner's id works again in the same clone; its stray work tree is cleaned up.
    let next = add(&env, c, "next", "@write next.txt ok");
    env.sw(c, &["--agent", "w1", "run", "worker", "--once"]).ok();
    assert_eq!(env.sw(c, &["show", &next, "--json"]).ok().json()["status"], "done");
    landed_on_main(&env, &bare, &tasks(&env, c));
    untouched(&env, c);
}

#[test]
fn a_lease_is_renewed_while_a_slow_agent_works() {
    // Also under the harshest push budget (every paced attempt waits its longest, a sixth of the lease): pacing
    // must never let a claim run out.
    for budget in ["", "[run]\npushes_per_minute = 0.01\n"] {
        let env = Env::new();
        let config = format!("lease = \"3s\"\n{budget}[roles.worker]\nexec = {:?}\n", agent_exec());
        let (_bare, clones) = swarm(&env, path_url, 1, &config);
        let c = &clones[0];
        let id = add(&env, c, "slow but alive", "@sleep 5\n@write alive.txt yes");
        let o = env.sw(c, &["--agent", "w1", "run", "worker", "--once"]).ok();
        assert!(o.stderr.contains("renewed"), "{budget}: {}", o.stderr);
        let t = env.sw(c, &["show", &id, "--json"]).ok().json();
        assert_eq!(
            (t["status"].as_str(), t["epoch"].as_u64(), t["attempts"].as_u64()),
            (Some("done"), Some(1), Some(0)),
            "{budget}: {t}"
        );
    }
}

#[test]
fn bad_runner_settings_are_clear_errors() {
    let env = Env::new();
    let (_bare, clones) = swarm(&env, path_url, 1, "");
    let c = &clones[0];
    add(&env, c, "x", "@nothing");
    let o = env.sw(c, &["run", "worker", "--once"]).code(2);
    assert!(
        o.stderr.contains("no agent is configured for the worker role")
            && o.stderr.contains("roles.default.preset")
            && !o.stderr.contains("--dangerously-skip-permissions"),
        "a preset, not a command line root's Claude Code refuses: {}",
        o.stderr
    );
    let bad = env.path("bad.toml");
    std::fs::write(&bad, "[roles.worker]\nbackend = \"http\"\napi = \"openai\"\nmodel = \"m\"\n").expect("write");
    let o = env.sw(c, &["init", "--config", bad.to_str().expect("utf-8")]).code(2);
    assert!(o.stderr.contains("cannot be a worker"), "{}", o.stderr);
    // The task is still open: nothing was lost.
    assert!(tasks(&env, c).iter().all(|t| t["status"] == "open"));
}

/// A minimal OpenAI-compatible server: answers every request with `reply` as the assistant's message.
fn chat_server(reply: String) -> common::serve::Served {
    common::serve::Served::start(move |_| {
        let answer = serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
        });
        (200, vec![], answer.to_string())
    })
}

#[test]
fn the_http_backend_plans_through_a_real_server_on_loopback() {
    let env = Env::new();
    let reply = "Here is the plan.\n```toml\n[[task]]\nkey = \"x\"\ntitle = \"from the model\"\nbody = \"do x\"\n\n[[task]]\ntitle = \"second\"\ndeps = [\"x\"]\n```\n".to_string();
    let server = chat_server(reply);
    let port = server.port;
    let config = format!(
        "[roles.planner]\nbackend = \"http\"\napi = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"test-model\"\napi_key_env = \"GIT_SWARM_TEST_KEY\"\n"
    );
    let (_bare, clones) = swarm(&env, path_url, 1, &config);
    let c = &clones[0];
    let o = env.sw_env(
        c,
        &[("GIT_SWARM_TEST_KEY", "sk-loopback")],
        &["--agent", "p1", "run", "planner", "--once", "--goal", "ship x"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let seen = server.seen();
    let first = seen.first().expect("a request reached the server");
    assert_eq!((first.method.as_str(), first.url.as_str()), ("POST", "/v1/chat/completions"), "{first:?}");
    assert_eq!(first.header("authorization"), Some("Bearer sk-loopback"), "{first:?}");
    let body = first.json();
    assert_eq!(body["model"], "test-model");
    let prompt = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect::<String>();
    assert!(prompt.contains("ship x"), "the goal is not in the prompt");
    let list = by_title(&tasks(&env, c));
    assert_eq!(list["from the model"]["status"], "open");
    assert_eq!(list["second"]["deps"][0], list["from the model"]["id"]);
    assert_eq!(list["second"]["parent"], list["Goal: ship x"]["id"]);
    // --once: one round, and the plan is given back for the next round.
    assert_eq!(list["Goal: ship x"]["status"], "open");
    // The key is never stored: not in the state, not in the logs.
    let logs = std::fs::read_dir(c.join(".git/swarm/logs"))
        .expect("logs")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert!(!logs.contains("sk-loopback"), "the key reached a log");
    let bare_state = env.git(&_bare, &["log", "-p", "refs/swarm/default"]);
    assert!(!bare_state.contains("sk-loopback"), "the key reached the state ref");
}

#[test]
fn up_runs_a_local_fleet_to_the_judges_stop_and_demo_shows_the_whole_system() {
    let env = Env::new();
    let config = format!("[roles.default]\nexec = {:?}\n", agent_exec());
    let (bare, clones) = swarm(&env, path_url, 1, &config);
    let c = &clones[0];
    let plan = env.path("plan.toml");
    std::fs::write(&plan, PLAN).expect("plan");
    let subplan = env.path("subplan.toml");
    std::fs::write(&subplan, SUBPLAN).expect("plan");
    let o = env.sw_env(
        c,
        &[("SCRIPTED_PLAN", plan.to_str().expect("utf-8")), ("SCRIPTED_SUBPLAN", subplan.to_str().expect("utf-8"))],
        &["up", "--workers", "3", "--judge", "--goal", "the fleet's goal"],
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("fleet finished"), "{}", o.stdout);
    let list = tasks(&env, c);
    assert!(list.len() >= 7 && list.iter().all(|t| t["status"] == "done"), "{list:?}");
    landed_on_main(&env, &bare, &list);
    for member in ["-w1.runner.log", "-p1.runner.log", "-judge.runner.log"] {
        let found = std::fs::read_dir(c.join(".git/swarm/logs"))
            .expect("logs")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(member));
        assert!(found, "no log *{member}");
    }
    untouched(&env, c);

    let o = env.sw(env.root.path(), &["demo", "--pace", "0"]).ok();
    assert!(o.stdout.contains("landings on main: 8 commit(s)"), "{}", o.stdout);
    assert!(o.stdout.contains("0 merge commit(s)") && o.stdout.contains("ended with `stop`"), "{}", o.stdout);
}

/// The rebase is the runner's, in its own state: a conflict run that tries to throw it away (`git rebase --abort`)
/// or to move branches back (`update-ref` of `main` and `HEAD`) and claims success finds no rebase to abort and
/// moves only refs of its own copy. Its files still hold the markers: the task fails as unresolved, and what
/// landed stays on main.
#[test]
fn a_conflict_run_that_aborts_the_rebase_cannot_rewind_the_branch() {
    let env = Env::new();
    let exec = format!(
        "if [ \"${{GIT_SWARM_CONFLICT:-}}\" = 1 ]; then git rebase --abort; git update-ref refs/heads/main HEAD~1; \
         git update-ref HEAD HEAD~1; exit 0; fi; {}",
        agent_exec()
    );
    let config = format!("max_attempts = 1\n[roles.worker]\nexec = {exec:?}\n");
    let (bare, clones) = swarm(&env, file_url, 2, &config);
    add(&env, &clones[0], "left", "@sleep 1\n@set shared.txt from-left");
    add(&env, &clones[0], "right", "@sleep 1\n@set shared.txt from-right");
    let a = spawn(&env, &clones[0], "w1", &[], &["run", "worker", "--once"]);
    let b = spawn(&env, &clones[1], "w2", &[], &["run", "worker", "--once"]);
    let (a, b) = (finish(a, 60, "w1"), finish(b, 60, "w2"));
    // One of them landed (exit 0), the other's task failed (exit 1: `--once` and nothing landed).
    let mut codes = [a.code, b.code];
    codes.sort();
    assert_eq!(codes, [0, 1], "{}\n{}", a.stderr, b.stderr);
    let list = tasks(&env, &clones[0]);
    let done: Vec<_> = list.iter().filter(|t| t["status"] == "done").collect();
    let failed: Vec<_> = list.iter().filter(|t| t["status"] == "failed").collect();
    assert_eq!((done.len(), failed.len()), (1, 1), "{list:?}");
    let reason = failed[0]["failures"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("still unresolved"), "{reason}");
    // The landed task's commit is still on main: nothing was rewound.
    landed_on_main(&env, &bare, &list);
    let id = failed[0]["id"].as_str().expect("id");
    assert!(env.rev(&bare, &format!("refs/swarm-work/default/{id}/1")).is_some(), "the failed work is kept");
}

#[test]
fn a_check_that_dirties_the_tree_does_not_break_the_rebase_after_a_lost_race() {
    let env = Env::new();
    let config = format!("[run]\ncheck = \"echo checked >> README.md\"\n[roles.worker]\nexec = {:?}\n", agent_exec());
    let (bare, clones) = swarm(&env, file_url, 3, &config);
    for i in 0..3 {
        add(&env, &clones[0], &format!("file {i}"), &format!("@sleep 1\n@write f{i}.txt {i}"));
    }
    let workers: Vec<Child> = clones
        .iter()
        .enumerate()
        .map(|(i, c)| spawn(&env, c, &format!("w{i}"), &[], &["run", "worker", "--once"]))
        .collect();
    for w in workers {
        let o = finish(w, 60, "a worker");
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let list = tasks(&env, &clones[0]);
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}");
    landed_on_main(&env, &bare, &list);
    assert_eq!(env.git(&bare, &["show", "main:README.md"]), "hello", "the check's edit landed");
}

#[test]
fn a_planner_stops_on_sigterm_mid_run_and_one_that_prints_no_block_fails_its_round() {
    let env = Env::new();
    let (_bare, clones) = swarm(&env, path_url, 1, "[roles.planner]\nexec = \"sleep 30\"\n");
    let c = &clones[0];
    let child = spawn(&env, c, "p1", &[], &["run", "planner", "--goal", "anything"]);
    wait_until(20, "a task is claimed", || tasks(&env, c).iter().any(|t| t["status"] == "claimed"));
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    assert!(
        std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success()
    );
    let o = finish(child, 30, "the stopped planner");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    assert_eq!(o.stderr.matches("agent started").count(), 1, "planned again after the signal:\n{}", o.stderr);
    let goal = &tasks(&env, c)[0];
    assert_eq!((goal["status"].as_str(), goal["attempts"].as_u64()), (Some("open"), Some(0)), "{goal}");
    // An agent that prints no ```toml block at all has not said "nothing more to do": the round fails.
    let o = env.sw(c, &["--agent", "p2", "run", "planner", "--once", "--exec", "echo I looked around."]).ok();
    assert!(o.stderr.contains("no ```toml block"), "{}", o.stderr);
    let goal = &tasks(&env, c)[0];
    assert_eq!((goal["status"].as_str(), goal["attempts"].as_u64()), (Some("open"), Some(1)), "{goal}");
}

#[test]
fn a_planner_keeps_the_lease_of_every_plan_it_holds_while_a_slow_sub_planner_runs() {
    // The root plan files an area (a plan) and waits on it; the same planner takes the area, whose agent outlives
    // the lease: both plans are renewed meanwhile, and neither is taken over.
    let env = Env::new();
    let exec = r#"if [ "$GIT_SWARM_DEPTH" = 1 ]; then sleep 5; printf '```toml\n```\n'; elif [ "$GIT_SWARM_ROUND" = 1 ]; then printf '```toml\n[[task]]\ntitle = "area"\nkind = "plan"\n```\n'; else printf '```toml\n```\n'; fi"#;
    let config = format!("lease = \"3s\"\n[roles.planner]\nexec = {exec:?}\n");
    let (_bare, clones) = swarm(&env, path_url, 1, &config);
    let c = &clones[0];
    let o = env.sw(c, &["--agent", "p1", "run", "planner", "--until-idle", "--goal", "plan an area"]).ok();
    let list = by_title(&tasks(&env, c));
    let area = &list["area"];
    let root = list.values().find(|t| t["kind"] == "plan" && t["title"] != "area").expect("the root plan");
    // What the planner said while the area's agent ran.
    let area_id = area["id"].as_str().unwrap_or_default();
    let during = o
        .stderr
        .split(&format!("agent started (plan) on {area_id}"))
        .nth(1)
        .and_then(|rest| rest.split(&format!("agent on {area_id} ")).next())
        .unwrap_or_default();
    for t in [root, area] {
        let id = t["id"].as_str().unwrap_or_default();
        assert_eq!((t["status"].as_str(), t["epoch"].as_u64()), (Some("done"), Some(1)), "{t}\n{}", o.stderr);
        assert!(during.contains(&format!("renewed {id} ")), "{id} was not renewed meanwhile:\n{}", o.stderr);
    }
    assert!(!o.stderr.contains("lost the claim"), "{}", o.stderr);
}

#[test]
fn the_judges_stop_ends_a_worker_that_chains_claims_and_failed_dependencies_do_not_hang_the_cycle() {
    let env = Env::new();
    // The cycle ends after one finished task; the scripted judge says stop.
    let config = format!("[run.cycle]\nmax_tasks = 1\n[roles.default]\nexec = {:?}\n", agent_exec());
    let (_bare, clones) = swarm(&env, path_url, 2, &config);
    for i in 0..5 {
        add(&env, &clones[0], &format!("slow {i}"), &format!("@sleep 1\n@write s{i}.txt {i}"));
    }
    let worker = spawn(&env, &clones[0], "w1", &[], &["run", "worker"]);
    let judge = spawn(&env, &clones[1], "judge", &[], &["run", "judge"]);
    let j = finish(judge, 60, "the judge");
    assert_eq!(j.code, 0, "{}", j.stderr);
    let w = finish(worker, 60, "the worker");
    assert_eq!(w.code, 0, "{}", w.stderr);
    assert!(w.stderr.contains("the judge stopped the swarm"), "{}", w.stderr);
    let list = tasks(&env, &clones[0]);
    assert!(list.iter().any(|t| t["status"] == "open"), "the worker went on after the stop: {list:?}");
    assert!(list.iter().all(|t| t["status"] != "claimed"), "a claim was left: {list:?}");

    // A plan whose first task fails for good: its dependent is cancelled, the plan and the cycle end.
    let env = Env::new();
    let config = format!("max_attempts = 1\n[roles.default]\nexec = {:?}\n", agent_exec());
    let (_bare, clones) = swarm(&env, path_url, 1, &config);
    let c = &clones[0];
    let plan = env.path("plan.toml");
    std::fs::write(&plan, "[[task]]\nkey = \"a\"\ntitle = \"breaks\"\nbody = \"@exit 1\"\n\n[[task]]\ntitle = \"needs a\"\ndeps = [\"a\"]\nbody = \"@write b.txt b\"\n").expect("plan");
    let o = env.sw_env(
        c,
        &[("SCRIPTED_PLAN", plan.to_str().expect("utf-8"))],
        &["up", "--workers", "1", "--judge", "--goal", "g"],
    );
    // The fleet ended at the judge's stop, and says a task failed (exit 1: its work was not done).
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("cycle 1: stop"), "the verdict: {}", o.stdout);
    assert!(o.stderr.contains("1 task(s) failed while the fleet ran"), "{}", o.stderr);
    let list = by_title(&tasks(&env, c));
    assert_eq!(list["breaks"]["status"], "failed");
    assert_eq!(list["needs a"]["status"], "cancelled", "{}", list["needs a"]);
}

#[test]
fn a_repository_that_is_its_own_remote_lands_in_process_unless_the_target_is_checked_out() {
    let env = Env::new();
    let repo = env.path("solo");
    env.git(env.root.path(), &["init", "-q", repo.to_str().expect("utf-8")]);
    std::fs::write(repo.join("README.md"), "solo\n").expect("write");
    env.git(&repo, &["add", "README.md"]);
    env.git(&repo, &["commit", "-q", "-m", "root"]);
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("target = \"main\"\n[roles.worker]\nexec = {:?}\n", agent_exec())).expect("config");
    env.sw(&repo, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let id = add(&env, &repo, "solo work", "@write solo.txt done");
    // main is checked out here: landing would move it under this work tree.
    let o = env.sw(&repo, &["--agent", "w1", "run", "worker", "--once"]).code(1);
    assert!(o.stderr.contains("checked out"), "{}", o.stderr);
    assert_eq!(tasks(&env, &repo)[0]["status"], "open", "nothing may be claimed and kept");
    // On another branch, the worker lands on main in-process (no remote, no push).
    env.git(&repo, &["switch", "-q", "-c", "mine"]);
    env.sw(&repo, &["--agent", "w1", "run", "worker", "--once"]).ok();
    let t = env.sw(&repo, &["show", &id, "--json"]).ok().json();
    assert_eq!(t["status"], "done", "{t}");
    assert_eq!(env.git(&repo, &["show", "main:solo.txt"]), "done");
    assert_eq!(env.git(&repo, &["rev-parse", "main"]), t["result"]["commit"].as_str().expect("commit"));
    assert_eq!(env.git(&repo, &["status", "--porcelain"]), "", "the user's work tree changed");
    assert!(!repo.join("solo.txt").exists(), "the landing reached the user's work tree");
}

/// The runner takes an agent's files as they are, whatever its index says: an index flag an agent set —
/// assume-unchanged, skip-worktree — hides nothing of its work from the runner, and outlives nothing (each task's
/// work tree and index are made afresh by the runner).
#[test]
fn index_flags_an_agent_sets_do_not_outlive_its_task() {
    let env = Env::new();
    let script = env.path("flags.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nset -e\ncase \"$GIT_SWARM_TASK_TITLE\" in\n\
         flag) git update-index --assume-unchanged README.md; git update-index --skip-worktree seed.txt\n\
         \x20     echo hidden > README.md; echo hidden > seed.txt; echo a > a.txt ;;\n\
         look) cat README.md seed.txt > seen.txt ;;\nesac\n",
    )
    .expect("script");
    let config = format!("[roles.worker]\nexec = \"sh {}\"\n", script.display());
    let (bare, clones) = swarm(&env, path_url, 1, &config);
    let c = &clones[0];
    std::fs::write(c.join("seed.txt"), "seed\n").expect("seed");
    env.git(c, &["add", "seed.txt"]);
    env.git(c, &["commit", "-q", "-m", "seed"]);
    env.git(c, &["push", "-q", "origin", "HEAD:main"]);
    add(&env, c, "flag", "set index flags");
    let look = add(&env, c, "look", "read the files");
    env.sw(c, &["trust", "--yes"]).ok();
    let o = finish(spawn(&env, c, "w1", &[], &["run", "worker", "--until-idle"]), 60, "the worker");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(env.sw(c, &["show", &look, "--json"]).ok().json()["status"], "done", "{}", o.stderr);
    // What the first agent wrote under its flags is its work, and landed; the second saw main as it is.
    assert_eq!(env.git(&bare, &["show", "main:README.md"]), "hidden");
    assert_eq!(env.git(&bare, &["show", "main:seed.txt"]), "hidden");
    assert_eq!(env.git(&bare, &["show", "main:seen.txt"]), "hidden\nhidden");
}
