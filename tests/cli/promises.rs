//! DESIGN.md section 5's cost promise, as tests that fail when it breaks: one claim or completion costs one push
//! (counted on the remote, from its reflog), a refused op and a read cost none, and a worker lands its code, marks
//! its task done and claims its next task in one push.

use std::path::Path;
use std::process::Stdio;

use crate::common::{Env, file_url};

/// Updates of `refname` the remote has recorded (its reflog; `core.logAllRefUpdates = always`).
fn updates(env: &Env, bare: &Path, refname: &str) -> usize {
    let o = env.git_out(bare, &["reflog", "show", "--format=%H", refname, "--"]);
    if o.code != 0 {
        return 0;
    }
    o.stdout.lines().count()
}

fn remote_with_reflog(env: &Env) -> std::path::PathBuf {
    let bare = env.bare_remote("origin");
    env.git(&bare, &["config", "core.logAllRefUpdates", "always"]);
    bare
}

#[test]
fn every_op_is_one_push_and_refusals_and_reads_are_none() {
    let env = Env::new();
    let bare = remote_with_reflog(&env);
    let a = env.clone(&file_url(&bare), "a");
    let b = env.clone(&file_url(&bare), "b");
    let state = "refs/swarm/default";
    let main_before = env.rev(&bare, "main");
    let mut n = 0;
    let mut step = |dir: &Path, args: &[&str], code: i32, pushes: usize| {
        let out = env.sw(dir, args).code(code);
        let now = updates(&env, &bare, state);
        assert_eq!(now - n, pushes, "`git swarm {}` updated the state ref {} time(s)", args.join(" "), now - n);
        n = now;
        out.line()
    };
    step(&a, &["init"], 0, 1);
    step(&a, &["init"], 0, 0);
    let id = step(&a, &["add", "one"], 0, 1);
    step(&a, &["add", "two", "--after", &id], 0, 1);
    step(&a, &["--agent", "al", "claim", &id], 0, 1);
    step(&b, &["--agent", "bo", "claim", &id], 4, 0);
    step(&b, &["--agent", "bo", "claim"], 3, 0);
    step(&a, &["--agent", "al", "renew", &id], 0, 1);
    step(&b, &["--agent", "bo", "done", &id], 4, 0);
    step(&a, &["--agent", "al", "release", &id], 0, 1);
    step(&b, &["--agent", "bo", "claim", &id], 0, 1);
    step(&b, &["--agent", "bo", "fail", &id, "--reason", "tried"], 0, 1);
    step(&a, &["--agent", "al", "claim", &id], 0, 1);
    step(&a, &["--agent", "al", "done", &id], 0, 1);
    for read in [&["list"][..], &["status"], &["log"], &["ready"], &["show", &id], &["doctor"]] {
        step(&b, read, 0, 0);
    }
    // None of it touched the code.
    assert_eq!(env.rev(&bare, "main"), main_before);
}

#[test]
fn a_worker_lands_marks_done_and_claims_next_in_one_push() {
    let env = Env::new();
    let bare = remote_with_reflog(&env);
    let c = env.clone(&file_url(&bare), "c");
    let cfg = env.path("swarm.toml");
    let exec = format!("sh '{}/tests/agents/scripted.sh'", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {exec:?}\n")).expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let tasks = 6;
    for i in 0..tasks {
        env.sw(&c, &["add", &format!("task {i}"), "--body", &format!("@write file{i}.txt line {i}")]).ok();
    }
    let state_before = updates(&env, &bare, "refs/swarm/default");
    let main_before = updates(&env, &bare, "refs/heads/main");
    let out = env
        .cmd(&c)
        .args(["--agent", "w1", "run", "worker", "--until-idle", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("run worker");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let state = updates(&env, &bare, "refs/swarm/default") - state_before;
    let main = updates(&env, &bare, "refs/heads/main") - main_before;
    assert_eq!(main, tasks, "one landing per task");
    // The first claim is a push of its own; every later claim rides in the previous task's landing.
    assert_eq!(state, tasks + 1, "state ref updates for {tasks} tasks");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["pushes"], tasks + 1, "{doc}");
    assert_eq!(env.sw(&c, &["status", "--json"]).ok().json()["counts"]["done"], tasks);
}

/// `[run] pushes_per_minute`: a runner spaces its update attempts by its share of the fleet's budget (one agent
/// here: 60 / budget seconds apart), and the cost in pushes stays what it was. Measured side by side with the
/// same work unpaced, in one run.
#[test]
fn a_push_budget_spaces_a_workers_pushes_and_costs_no_extra_push() {
    let run = |budget: Option<u32>| -> (std::time::Duration, usize, usize) {
        let env = Env::new();
        let bare = remote_with_reflog(&env);
        let c = env.clone(&file_url(&bare), "c");
        let cfg = env.path("swarm.toml");
        let exec = format!("sh '{}/tests/agents/scripted.sh'", env!("CARGO_MANIFEST_DIR"));
        let run = budget.map(|b| format!("[run]\npushes_per_minute = {b}\n")).unwrap_or_default();
        std::fs::write(&cfg, format!("{run}[roles.worker]\nexec = {exec:?}\n")).expect("config");
        env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
        for i in 0..3 {
            env.sw(&c, &["add", &format!("task {i}"), "--body", &format!("@write f{i}.txt {i}")]).ok();
        }
        let before = updates(&env, &bare, "refs/swarm/default");
        let t = std::time::Instant::now();
        let out = env.cmd(&c).args(["--agent", "w1", "run", "worker", "--until-idle", "--json"]).output().expect("run");
        let took = t.elapsed();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(env.sw(&c, &["status", "--json"]).ok().json()["counts"]["done"], 3);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let pushes = doc["pushes"].as_u64().unwrap_or(0) as usize;
        (took, updates(&env, &bare, "refs/swarm/default") - before, pushes)
    };
    let (fast, fast_updates, fast_pushes) = run(None);
    // 40 pushes a minute for a fleet of one: 1.5 s between attempts.
    let (paced, paced_updates, paced_pushes) = run(Some(40));
    assert_eq!(paced_updates, fast_updates, "the same updates of the state ref");
    assert_eq!(paced_pushes, fast_pushes, "the same pushes");
    // Gaps are jittered (0.5–1.5 × 1.5 s): the floor is half the mean.
    let floor = std::time::Duration::from_secs_f64(0.75 * (paced_pushes.saturating_sub(1)) as f64);
    assert!(paced >= floor, "{paced_pushes} pushes in {paced:?}: at least {floor:?} with the budget");
    eprintln!(
        "unpaced {fast:?}, paced {paced:?} for {paced_pushes} pushes ({:.1}x)",
        paced.as_secs_f64() / fast.as_secs_f64()
    );
}
