//! What the swarm spends (`docs/spend.md`): usage reported by agent runs lands on the board with the op that ends
//! the attempt (and with renewals while it runs), through conflict runs, races and takeovers; budgets stop a task
//! and a whole fleet. Real clones, real remotes, the scripted agent of `tests/agents/scripted.sh` reporting through
//! `$GIT_SWARM_USAGE_FILE`. The published CLIs' own reports are checked in `tests/real_agents.rs`.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{Env, file_url, finish, path_url, wait_until};
use serde_json::Value;

fn config(extra: &str) -> String {
    format!("{extra}\n[roles.default]\nexec = {:?}\n", common::scripted_agent())
}

fn add(env: &Env, dir: &Path, title: &str, body: &str) -> String {
    env.sw(dir, &["add", title, "--body", body]).ok().line()
}

fn show(env: &Env, dir: &Path, id: &str) -> Value {
    env.sw(dir, &["show", id, "--json"]).ok().json()
}

/// Start `git swarm args…` in `dir` as agent `agent`.
fn spawn(env: &Env, dir: &Path, agent: &str, extra_env: &[(&str, &str)], args: &[&str]) -> Child {
    env.spawn(dir, agent, extra_env, args)
}

/// `(input, output, runs)` of a usage object.
fn tokens(u: &Value) -> (u64, u64, u64) {
    (u["input_tokens"].as_u64().unwrap_or(0), u["output_tokens"].as_u64().unwrap_or(0), u["runs"].as_u64().unwrap_or(0))
}

#[test]
fn what_an_agent_reports_lands_on_the_board_and_shows_everywhere() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &config(""));
    let c = &clones[0];
    let a = add(&env, c, "priced", "@write a.txt a\n@usage 1200 345 0.0125");
    let b = add(&env, c, "unpriced", "@write b.txt b\n@usage 10 20");
    let silent = add(&env, c, "silent", "@write c.txt c");
    env.sw(c, &["--agent", "w1", "run", "worker", "--until-idle"]).ok();

    let t = show(&env, c, &a);
    assert_eq!(t["status"], "done", "{t}");
    assert_eq!(tokens(&t["usage"]), (1200, 345, 1), "{t}");
    assert_eq!(t["usage"]["cost_usd"], 0.0125, "{t}");
    assert_eq!(t["result"]["usage"], t["usage"], "result.usage is the task's: {t}");
    let t = show(&env, c, &b);
    assert_eq!(tokens(&t["usage"]), (10, 20, 1));
    assert!(t["usage"]["cost_usd"].is_null(), "no cost reported, none recorded: {t}");
    // An agent that reports nothing records nothing: never a guess.
    let t = show(&env, c, &silent);
    assert!(t["usage"].is_null() && t["result"]["usage"].is_null(), "{t}");
    // `list --json` carries it too.
    let list = env.sw(c, &["list", "--json"]).ok().json();
    assert!(
        list.as_array().expect("list").iter().any(|t| t["id"] == a.as_str() && tokens(&t["usage"]) == (1200, 345, 1))
    );

    // The swarm's totals, by role and for the running cycle.
    let st = env.sw(c, &["status", "--json"]).ok().json();
    assert_eq!(tokens(&st["spend"]["total"]), (1210, 365, 2), "{st}");
    assert_eq!(tokens(&st["spend"]["by_role"]["worker"]), (1210, 365, 2), "{st}");
    assert_eq!(st["spend"]["cycle"]["cycle"], 1);
    assert_eq!(tokens(&st["spend"]["cycle"]["total"]), (1210, 365, 2), "{st}");
    assert_eq!(st["spend"]["total"]["cost_usd"], 0.0125);
    let human = env.sw(c, &["status"]).ok().stdout;
    assert!(human.contains("spent: 1.6k tokens") && human.contains("worker:"), "{human}");
    let shown = env.sw(c, &["show", &a]).ok().stdout;
    assert!(shown.contains("spent") && shown.contains("$0.0125"), "{shown}");
    // The log says what each landing spent; the board and watch show it.
    let log = env.sw(c, &["log"]).ok().stdout;
    assert!(log.contains("1.5k tokens, $0.0125"), "{log}");
    let board = env.sw(c, &["board", "--json"]).ok().json();
    assert_eq!(tokens(&board["spend"]["total"]), (1210, 365, 2), "{board}");
    assert_eq!(tokens(&board["spend"]["by_agent"]["w1"]), (1210, 365, 2), "{}", board["spend"]);
    assert_eq!(board["spend"]["over_time"].as_array().map(Vec::len), Some(2), "{}", board["spend"]);
    let html = env.path("board.html");
    env.sw(c, &["board", "--html", html.to_str().expect("utf-8")]).ok();
    let page = std::fs::read_to_string(&html).expect("page");
    assert!(
        page.contains("id=\"spend-agents\"") && page.contains("id=\"spend-svg\"") && page.contains("1200"),
        "no spend"
    );
    // `doctor` checks the derived totals against the tasks.
    let doc = env.sw(c, &["doctor", "--json"]).json();
    let spend = doc["findings"].as_array().expect("findings").iter().find(|f| f["check"] == "spend").cloned();
    assert_eq!(spend.as_ref().map(|f| f["severity"].clone()), Some("ok".into()), "{doc}");
    let frame = env.sw(c, &["watch", "--once"]).ok().stdout;
    assert!(frame.contains("spent: 1.6k tokens, $0.0125 in all"), "{frame}");
}

#[test]
fn a_task_budget_stops_a_runaway_agent_and_fails_the_task_for_good() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config("[run.budget]\ntask_tokens = 5000"));
    let c = &clones[0];
    // 1000 more input tokens every 0.2 s, for ever.
    let id = add(&env, c, "runaway", "@write a.txt a\n@loop 1000");
    let other = add(&env, c, "fine", "@write b.txt b\n@usage 100 10");
    let start = Instant::now();
    let out = finish(spawn(&env, c, "w1", &[], &["run", "worker", "--until-idle"]), 120, "worker");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(start.elapsed() < Duration::from_secs(60), "the budget did not stop it: {:?}", start.elapsed());
    let t = show(&env, c, &id);
    assert_eq!(t["status"], "failed", "spent its budget: failed for good, no attempt after it: {t}");
    assert_eq!(t["attempts"], 1, "{t}");
    let reason = t["failures"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("spent its budget") && reason.contains("5000"), "{reason}");
    let (input, _, runs) = tokens(&t["usage"]);
    assert!((5000..=8000).contains(&input) && runs == 1, "stopped near its budget: {t}");
    assert_eq!(t["failures"][0]["usage"], t["usage"], "{t}");
    // What it did (left uncommitted) is committed and kept aside, never landed; the other task was not held up.
    let kept = env.git(&bare, &["show", &format!("refs/swarm-work/default/{id}/1:a.txt")]);
    assert_eq!(kept, "a");
    assert!(env.git_out(&bare, &["cat-file", "-e", "main:a.txt"]).code != 0, "landed");
    assert_eq!(show(&env, c, &other)["status"], "done");
    // `retry` does not reset what it spent: the next attempt is not even started.
    env.sw(c, &["retry", &id]).ok();
    let again = env.sw(c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(again.code, 1, "{}", again.stderr);
    let t2 = show(&env, c, &id);
    assert_eq!(t2["status"], "failed", "{t2}");
    assert_eq!(t2["usage"], t["usage"], "no run, nothing spent: {t2}");
    let reason = t2["failures"][1]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("spent its budget"), "{reason}");
}

/// Several runners in several clones against one remote: once the cycle's spend passes the budget, every runner
/// stops claiming and exits 0 saying why; the tasks nobody claimed are untouched.
#[test]
fn a_cycle_budget_stops_a_fleet_of_runners_in_several_clones() {
    let env = Env::new();
    // Each task costs 1000 + 100 tokens; the budget is three tasks' worth.
    let (bare, clones) = env.swarm_with_config(file_url, 3, &config("[run.budget]\ncycle_tokens = 3300"));
    let ids: Vec<String> = (0..12)
        .map(|i| add(&env, &clones[0], &format!("task {i}"), &format!("@sleep 1\n@write f{i}.txt x\n@usage 1000 100")))
        .collect();
    let runners: Vec<Child> = clones
        .iter()
        .enumerate()
        .map(|(i, c)| spawn(&env, c, &format!("w{i}"), &[], &["run", "worker", "--json", "--until-idle"]))
        .collect();
    for (i, r) in runners.into_iter().enumerate() {
        let out = finish(r, 180, &format!("w{i}"));
        assert_eq!(out.code, 0, "w{i}: {}", out.stderr);
        let doc: Value = serde_json::from_str(&out.stdout).expect("json");
        assert_eq!(doc["end"], "budget", "w{i} did not stop for the budget: {doc}\n{}", out.stderr);
    }
    let tasks: Vec<Value> = ids.iter().map(|id| show(&env, &clones[0], id)).collect();
    let done = tasks.iter().filter(|t| t["status"] == "done").count();
    let untouched = tasks.iter().filter(|t| t["status"] == "open" && t["epoch"] == 0).count();
    // Three tasks reach the budget; a runner that claimed before it was reached finishes its task (at most one
    // more each for the other two).
    assert!((3..=5).contains(&done), "{done} done: {tasks:?}");
    assert_eq!(done + untouched, 12, "a task was claimed and left: {tasks:?}");
    // A runner started now claims nothing, and says why.
    let late = env.sw(&clones[1], &["--agent", "late", "run", "worker", "--once"]);
    assert_eq!(late.code, 0, "{}", late.stderr);
    let said = format!("no more claims: cycle 1 spent its budget: {} tokens of a budget of 3300", 1100 * done);
    assert!(late.stderr.contains(&said), "{}", late.stderr);
    // Planners too: no plan is claimed in a cycle that spent its budget.
    let plan = env.sw(&clones[2], &["add", "plan more", "--kind", "plan"]).ok().line();
    let planner = env.sw(&clones[2], &["--agent", "p1", "run", "planner", "--once"]);
    assert_eq!(planner.code, 0, "{}", planner.stderr);
    assert!(planner.stderr.contains("no more claims: cycle 1 spent its budget"), "{}", planner.stderr);
    assert_eq!(show(&env, &clones[2], &plan)["epoch"], 0);
    let st = env.sw(&clones[1], &["status", "--json"]).ok().json();
    assert_eq!(st["spend"]["budget"]["cycle"]["spent"], true, "{st}");
    assert_eq!(st["spend"]["budget"]["cycle"]["left_tokens"], 0, "{st}");
    assert_eq!(tokens(&st["spend"]["cycle"]["total"]), (1000 * done as u64, 100 * done as u64, done as u64));
    let human = env.sw(&clones[2], &["status"]).ok().stdout;
    assert!(human.contains("cycle budget: 3300 tokens · SPENT"), "{human}");
    // The judge sees the cycle ended by its budget, and its verdict starts the next cycle with the count at zero.
    // (The judge writes its prompt where the test reads it: a folder this clone lets its agents write.)
    let out = env.path("out");
    std::fs::create_dir_all(&out).expect("out");
    // Open to the agent, which runs as nobody under a root runner.
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o777)).expect("chmod");
    env.git(&clones[0], &["config", "swarm.run.sandboxWrite", out.to_str().expect("utf-8")]);
    let seen = out.join("judge-prompt.md");
    let judge_exec = format!(
        "cp \"$GIT_SWARM_PROMPT_FILE\" '{}'; printf '{{\"input_tokens\": 50, \"output_tokens\": 5}}' > \"$GIT_SWARM_USAGE_FILE\"; \
         echo 'verdict: continue'",
        seen.display()
    );
    let judge = env.sw(&clones[0], &["--agent", "j1", "run", "judge", "--once", "--exec", &judge_exec]);
    assert_eq!(judge.code, 0, "{}", judge.stderr);
    let prompt = std::fs::read_to_string(&seen).expect("the judge's prompt");
    assert!(prompt.contains("The cycle ended early: cycle 1 spent its budget"), "{prompt}");
    let st = env.sw(&clones[0], &["status", "--json"]).ok().json();
    assert_eq!(st["spend"]["cycle"]["cycle"], 2, "{st}");
    assert_eq!(tokens(&st["spend"]["cycle"]["total"]), (0, 0, 0), "{st}");
    assert_eq!(tokens(&st["spend"]["by_role"]["judge"]), (50, 5, 1), "{st}");
    let record = env.git(&bare, &["show", "refs/swarm/default:cycles/1.toml"]);
    assert!(record.contains("[usage]") && record.contains("input_tokens = 50"), "{record}");
    assert!(record.contains("[spent]") && record.contains(&format!("input_tokens = {}", 1000 * done + 50)), "{record}");
}

/// The conflict run's usage joins the attempt's; a landing that loses races lands its usage once; a SIGKILLed
/// holder's usage, reported with its renewals, is kept by the takeover.
#[test]
fn usage_survives_a_conflict_run_lost_races_and_a_takeover_after_sigkill() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_config(file_url, 2, &config(""));
    let left = add(&env, &clones[0], "left", "@sleep 1\n@set shared.txt from-left\n@usage 100 1");
    let right = add(&env, &clones[0], "right", "@sleep 1\n@set shared.txt from-right\n@usage 100 1");
    let conflict = [("SCRIPTED_CONFLICT_USAGE", "7000 70")];
    let a = spawn(&env, &clones[0], "w1", &conflict, &["run", "worker", "--once"]);
    let b = spawn(&env, &clones[1], "w2", &conflict, &["run", "worker", "--once"]);
    let (a, b) = (finish(a, 60, "w1"), finish(b, 60, "w2"));
    assert_eq!((a.code, b.code), (0, 0), "{}\n{}", a.stderr, b.stderr);
    assert!(format!("{}{}", a.stderr, b.stderr).contains("rebase conflict on"), "no conflict run");
    let mut got: Vec<(u64, u64, u64)> =
        [&left, &right].iter().map(|id| tokens(&show(&env, &clones[0], id)["usage"])).collect();
    got.sort();
    assert_eq!(got, vec![(100, 1, 1), (7100, 71, 2)], "the agent run, and the agent run plus its conflict run");

    // Races: four runners, eight tasks, each task reporting its own amount; each lands exactly what it reported.
    let ids: Vec<String> = (1..=8)
        .map(|i| add(&env, &clones[0], &format!("race {i}"), &format!("@write r{i}.txt x\n@usage {i} {i}")))
        .collect();
    let runners: Vec<Child> = (0..4)
        .map(|i| spawn(&env, &clones[i % 2], &format!("r{i}"), &[], &["run", "worker", "--json", "--until-idle"]))
        .collect();
    let mut lost = 0;
    for (i, r) in runners.into_iter().enumerate() {
        let out = finish(r, 120, &format!("r{i}"));
        assert_eq!(out.code, 0, "{}", out.stderr);
        let doc: Value = serde_json::from_str(&out.stdout).expect("json");
        lost += doc["lost_races"].as_u64().unwrap_or(0);
    }
    for (i, id) in ids.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(tokens(&show(&env, &clones[0], id)["usage"]), (n, n, 1), "{id} ({lost} lost races in all)");
    }
    let st = env.sw(&clones[0], &["status", "--json"]).ok().json();
    assert_eq!(tokens(&st["spend"]["total"]), (200 + 7000 + 36, 2 + 70 + 36, 11), "spend.toml is the tasks' sum: {st}");

    // Takeover: the first holder reports 4000 tokens and sleeps; its renewal carries the report to the board; it is
    // SIGKILLed; the next holder reports as much and lands. The task keeps both, the failure record the first's.
    let c = &clones[1];
    env.sw(c, &["config", "set", "lease", "3s"]).ok();
    let id = add(&env, c, "slow", "@usage 4000 40\n@first-sleep 8\n@write slow.txt done");
    let mut first = spawn(&env, c, "k1", &[], &["run", "worker"]);
    wait_until(30, "the renewal that reports the first holder's usage", || {
        tokens(&show(&env, c, &id)["claim"]["usage"]) == (4000, 40, 1)
    });
    first.kill().expect("SIGKILL the runner");
    let _ = first.wait();
    common::work_once_when_ready(&env, c, "k2", 30);
    let t = show(&env, c, &id);
    assert_eq!((t["status"].as_str(), t["epoch"].as_u64()), (Some("done"), Some(2)), "{t}");
    assert_eq!(tokens(&t["usage"]), (8000, 80, 2), "both attempts: {t}");
    assert_eq!(tokens(&t["failures"][0]["usage"]), (4000, 40, 1), "the killed attempt, as it reported: {t}");
    let st = env.sw(c, &["status", "--json"]).ok().json();
    assert_eq!(tokens(&st["spend"]["total"]).0, 200 + 7000 + 36 + 8000, "{st}");
}
