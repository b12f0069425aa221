//! Every row of the command-line contract (CONTRACT.md), run as a user would: the built binary, real clones of a
//! real bare remote, hermetic git.

use crate::common;
use crate::common::{Env, path_url};
use serde_json::Value;

fn setup() -> (Env, std::path::PathBuf, Vec<std::path::PathBuf>) {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(path_url, 2);
    (env, bare, clones)
}

#[test]
fn init_creates_the_ref_once_and_names_the_target() {
    let env = Env::new();
    let bare = env.bare_remote("r");
    let a = env.clone(&path_url(&bare), "a");
    let b = env.clone(&path_url(&bare), "b");
    let out = env.sw(&a, &["init", "--json", "--lease", "5m"]).ok();
    let doc = out.json();
    assert_eq!(doc["ref"], "refs/swarm/default");
    assert_eq!(doc["created"], true);
    let tip = env.rev(&bare, "refs/swarm/default").expect("state ref on the remote");
    assert_eq!(doc["commit"], Value::String(tip.clone()));
    let again = env.sw(&b, &["init", "--json"]).ok().json();
    assert_eq!(again["created"], false);
    assert_eq!(again["ignored"], serde_json::json!([]), "{again}");
    assert_eq!(env.rev(&bare, "refs/swarm/default"), Some(tip.clone()));
    // Flags an existing swarm does not take are named, each with the way to change it; nothing changes.
    let o = env.sw(&b, &["init", "--json", "--target", "other", "--lease", "5m", "--max-attempts", "7"]).ok();
    assert!(o.stderr.contains("--target other was not applied") && o.stderr.contains("config set target other"));
    assert!(o.stderr.contains("--max-attempts 7") && !o.stderr.contains("--lease"), "the same lease: {}", o.stderr);
    assert_eq!(o.json()["ignored"], serde_json::json!(["--target", "--max-attempts"]));
    assert_eq!(env.rev(&bare, "refs/swarm/default"), Some(tip.clone()));
    let cfg = env.git(&bare, &["show", "refs/swarm/default:swarm.toml"]);
    assert!(cfg.contains("target = \"main\""), "{cfg}");
    assert!(cfg.contains("lease = \"5m\""), "{cfg}");
    // The work trees and branches are untouched.
    assert_eq!(env.git(&a, &["status", "--porcelain"]), "");
    assert_eq!(env.git(&bare, &["for-each-ref", "--format=%(refname)", "refs/heads"]), "refs/heads/main");
}

/// A variable of the environment the engine takes that holds nonsense stops the command, naming it (a bad
/// `GIT_SWARM_GIT_TIMEOUT` silently became 600 s).
#[test]
fn a_bad_value_in_the_environment_is_named_before_anything_runs() {
    let env = Env::new();
    let bare = env.bare_remote("r");
    let a = env.clone(&path_url(&bare), "a");
    let o = env.sw_env(&a, &[("GIT_SWARM_GIT_TIMEOUT", "ten")], &["init"]).code(2);
    assert!(o.stderr.contains("GIT_SWARM_GIT_TIMEOUT=ten: not a number of seconds"), "{}", o.stderr);
    assert!(env.rev(&bare, "refs/swarm/default").is_none(), "nothing ran");
    // The binary's knobs too, each named with what it takes (some were silently their default: a hook's time
    // limit, its renewal rate, the http agent's back-off, the trusted digests).
    for (name, value) in [
        ("GIT_SWARM_CLOCK_OFFSET", "soon"),
        ("GIT_SWARM_HOOK_TIMEOUT", "ten"),
        ("GIT_SWARM_HTTP_RETRY_BASE_MS", "1s"),
        ("GIT_SWARM_TRUST", "abc123"),
        ("GIT_SWARM_TRANSPORT", "ssh"),
        ("GIT_SWARM_SWARM", "a b"),
    ] {
        let o = env.sw_env(&a, &[(name, value)], &["init", "--json"]).code(2);
        assert!(
            o.stderr.contains(&format!("{name}={value}: ")) && o.stderr.contains(&format!("unset {name}")),
            "{}",
            o.stderr
        );
        assert_eq!(o.json()["error"]["code"], 2, "{}", o.stdout);
        assert!(env.rev(&bare, "refs/swarm/default").is_none(), "nothing ran");
    }
    // Set to nothing, a knob is unset.
    env.sw_env(&a, &[("GIT_SWARM_GIT_TIMEOUT", "30"), ("GIT_SWARM_CLOCK_OFFSET", "")], &["init"]).ok();
}

#[test]
fn a_repository_without_remote_is_its_own_swarm() {
    let env = Env::new();
    let solo = env.path("solo");
    env.git(env.root.path(), &["init", "-q", solo.to_str().expect("utf-8")]);
    env.git(&solo, &["commit", "-q", "--allow-empty", "-m", "root"]);
    env.sw(&solo, &["init"]).ok();
    let id = env.sw(&solo, &["add", "local task"]).ok().line();
    assert!(env.rev(&solo, "refs/swarm/default").is_some());
    assert_eq!(env.sw(&solo, &["--agent", "me", "claim"]).ok().line(), id);
    // -C works like git -C, from anywhere.
    let shown = env.sw(env.root.path(), &["-C", solo.to_str().expect("utf-8"), "show", &id, "--json"]).ok().json();
    assert_eq!(shown["status"], "claimed");
}

#[test]
fn a_relative_dash_c_reaches_a_url_remote() {
    let env = Env::new();
    let bare = env.bare_remote("r");
    env.clone(&common::file_url(&bare), "deep/a");
    // Relative -C, from the parent folder: fetch and push must run in the right repository.
    env.sw(env.root.path(), &["-C", "deep/a", "init"]).ok();
    let id = env.sw(env.root.path(), &["-C", "deep/a", "add", "relative"]).ok().line();
    env.sw(env.root.path(), &["-C", "deep/a", "--agent", "r", "claim", &id]).ok();
    env.sw(env.root.path(), &["-C", "deep/a", "--agent", "r", "done", &id]).ok();
    assert_eq!(env.git(&bare, &["log", "--format=%s", "-1", "refs/swarm/default"]), format!("done {id}: relative"));
}

#[test]
fn usage_errors_exit_2() {
    let (env, _bare, c) = setup();
    env.sw(&c[0], &["frobnicate"]).code(2);
    env.sw(&c[0], &["list", "--no-such-flag"]).code(2);
    let out = env.sw(&c[0], &["--agent", "bad agent", "claim"]).code(2);
    assert!(out.stderr.contains("agent"), "{}", out.stderr);
    let out = env.sw(&c[0], &["claim", "--lease", "soon"]).code(2);
    assert!(out.stderr.contains("soon"), "{}", out.stderr);
    env.sw(&c[0], &["show", "../etc"]).code(2);
    env.sw(&c[0], &["add", "   "]).code(2);
    env.sw(&c[0], &["add", "x", "--kind", "epic"]).code(2);
    env.sw(&c[0], &["list", "--status", "finished"]).code(2);
    env.sw(&c[0], &["--swarm", "a/b", "list"]).code(2);
    env.sw(&c[0], &["fail", "t-1", "--reason", " "]).code(2);
    env.sw(&c[0], &["renew", "--epoch", "3"]).code(2);
    let out = env.sw(&c[0], &["--remote=--upload-pack=touch pwned", "list"]).code(2);
    assert!(out.stderr.contains("--remote"), "{}", out.stderr);
    assert!(!c[0].join("pwned").exists());
    // Under --json, even a usage error is one JSON document on stdout.
    let out = env.sw(&c[0], &["list", "--json", "--no-such-flag"]).code(2);
    assert_eq!(out.json()["error"]["code"], 2);
    // --help and --version are not errors.
    env.sw(&c[0], &["--help"]).ok();
    env.sw(&c[0], &["--version"]).ok();
}

#[test]
fn global_flags_go_before_or_after_the_command() {
    let (env, _bare, c) = setup();
    let a = env.sw(&c[0], &["--agent", "alice", "add", "t1"]).ok().line();
    let before = env.sw(&c[0], &["--json", "show", &a]).ok().json();
    let after = env.sw(&c[0], &["show", &a, "--json"]).ok().json();
    assert_eq!(before, after);
    assert_eq!(after["created_by"], "alice");
    let b = env.sw(&c[0], &["add", "t2", "--agent", "bob"]).ok().line();
    assert_eq!(env.sw(&c[0], &["show", &b, "--json"]).ok().json()["created_by"], "bob");
}

#[test]
fn not_initialised_is_a_clear_error() {
    let env = Env::new();
    let bare = env.bare_remote("r");
    let a = env.clone(&path_url(&bare), "a");
    let out = env.sw(&a, &["list"]).code(1);
    assert!(out.stderr.contains("no swarm 'default'"), "{}", out.stderr);
    assert!(out.stderr.contains("git swarm init"), "{}", out.stderr);
    let out = env.sw(&a, &["--swarm", "other", "add", "x"]).code(1);
    assert!(out.stderr.contains("other"), "{}", out.stderr);
    let out = env.sw(&a, &["--remote", "upstrem", "list"]).code(1);
    assert!(out.stderr.contains("upstrem") && out.stderr.contains("no remote"), "{}", out.stderr);
}

#[test]
fn add_list_show_with_every_field() {
    let (env, _bare, c) = setup();
    let body = env.path("body.md");
    std::fs::write(&body, "line one\nline two\n").expect("write");
    let a = env.sw(&c[0], &["--agent", "alice", "add", "first", "--body-file", body.to_str().expect("utf-8")]).ok();
    let a = a.line();
    let b = env
        .sw(
            &c[1],
            &[
                "--agent",
                "bob",
                "add",
                "second",
                "--after",
                &a,
                "--priority",
                "-3",
                "--label",
                "x",
                "--label",
                "y",
                "--json",
            ],
        )
        .ok()
        .json();
    assert_eq!(b["deps"], serde_json::json!([a]));
    assert_eq!(b["priority"], -3);
    assert_eq!(b["labels"], serde_json::json!(["x", "y"]));
    assert_eq!(b["kind"], "work");
    assert_eq!(b["status"], "open");
    assert_eq!(b["attempts"], 0);
    assert_eq!(b["claim"], Value::Null);
    assert_eq!(b["result"], Value::Null);
    let p = env.sw(&c[0], &["add", "an area", "--kind", "plan", "--json"]).ok().json();
    assert_eq!(p["kind"], "plan");
    let shown = env.sw(&c[1], &["show", &a, "--json"]).ok().json();
    assert_eq!(shown["body"], "line one\nline two\n");
    let human = env.sw(&c[1], &["show", &a]).ok().stdout;
    assert!(human.contains("line two") && human.contains("first"), "{human}");
    let list = env.sw(&c[0], &["list", "--json"]).ok().json();
    assert_eq!(list.as_array().map(Vec::len), Some(3));
    let open = env.sw(&c[0], &["list", "--status", "open", "--json"]).ok().json();
    assert_eq!(open.as_array().map(Vec::len), Some(3));
    let human = env.sw(&c[0], &["list"]).ok().stdout;
    assert_eq!(human.lines().count(), 3, "{human}");
    // An unknown dependency is refused.
    env.sw(&c[0], &["add", "x", "--after", "t-000000"]).code(4);
    // Every added task is a file in the state ref, readable with plain git.
    let files = env.git(&c[0], &["ls-tree", "-r", "--name-only", "origin/main"]);
    assert!(!files.contains("tasks"), "state must never reach a branch: {files}");
}

#[test]
fn ready_orders_by_priority_then_age_and_skips_waiting_tasks() {
    let (env, _bare, c) = setup();
    let a = env.sw(&c[0], &["add", "a"]).ok().line();
    let b = env.sw(&c[0], &["add", "b", "--after", &a]).ok().line();
    let hi = env.sw(&c[0], &["add", "hi", "--priority", "5"]).ok().line();
    let d = env.sw(&c[0], &["add", "d"]).ok().line();
    let plan = env.sw(&c[0], &["add", "p", "--kind", "plan"]).ok().line();
    let ready: Vec<String> = env
        .sw(&c[1], &["ready", "--json"])
        .ok()
        .json()
        .as_array()
        .expect("array")
        .iter()
        .map(|t| t["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ready, vec![hi.clone(), a.clone(), d.clone()]);
    let plans = env.sw(&c[1], &["ready", "--kind", "plan", "--json"]).ok().json();
    assert_eq!(plans[0]["id"], Value::String(plan.clone()));
    env.sw(&c[1], &["--agent", "w", "claim", &b]).code(4);
    assert_eq!(env.sw(&c[1], &["--agent", "w", "claim", "--kind", "plan"]).ok().line(), plan);
    assert_eq!(env.sw(&c[1], &["--agent", "w", "claim"]).ok().line(), hi);
}

#[test]
fn claim_done_release_fail_and_their_refusals() {
    let (env, bare, c) = setup();
    let (a, b) = (&c[0], &c[1]);
    let t = env.sw(a, &["add", "the task"]).ok().line();
    let claimed = env.sw(a, &["--agent", "alice", "claim", &t, "--json"]).ok().json();
    assert_eq!(claimed["claim"]["agent"], "alice");
    assert_eq!(claimed["claim"]["epoch"], 1);
    assert!(claimed["claim"]["lease_until"].as_str().is_some_and(|s| s.ends_with('Z')));
    // Others are refused with exit 4 and told who holds it.
    let out = env.sw(b, &["--agent", "bob", "claim", &t]).code(4);
    assert!(out.stderr.contains("alice"), "{}", out.stderr);
    env.sw(b, &["--agent", "bob", "done", &t]).code(4);
    env.sw(b, &["--agent", "bob", "release", &t]).code(4);
    env.sw(b, &["--agent", "bob", "fail", &t, "--reason", "x"]).code(4);
    env.sw(b, &["--agent", "bob", "renew", &t]).code(4);
    // Claiming my own live claim again renews it, same epoch.
    let again = env.sw(b, &["--agent", "alice", "claim", &t, "--json"]).ok().json();
    assert_eq!(again["claim"]["epoch"], 1);
    // Renew extends; renew without id renews all of mine.
    let renewed = env.sw(a, &["--agent", "alice", "renew", "--lease", "2h", "--json"]).ok().json();
    assert_eq!(renewed.as_array().map(Vec::len), Some(1));
    env.sw(a, &["--agent", "nobody", "renew", "--json"]).ok();
    // Release: open again, no attempt spent.
    env.sw(a, &["--agent", "alice", "release", &t]).ok();
    let s = env.sw(b, &["show", &t, "--json"]).ok().json();
    assert_eq!((s["status"].as_str(), s["attempts"].as_u64(), &s["claim"]), (Some("open"), Some(0), &Value::Null));
    // Fail: an attempt spent, the reason kept, open again.
    env.sw(b, &["--agent", "bob", "claim", &t]).ok();
    let out = env.sw(b, &["--agent", "bob", "fail", &t, "--reason", "tests broke"]).ok();
    assert!(out.stdout.contains("open again"), "{}", out.stdout);
    let s = env.sw(a, &["show", &t, "--json"]).ok().json();
    assert_eq!((s["status"].as_str(), s["attempts"].as_u64()), (Some("open"), Some(1)));
    assert_eq!(s["failures"][0]["reason"], "tests broke");
    assert_eq!(s["epoch"], 2);
    // Done: final, with commit and note.
    env.sw(a, &["--agent", "alice", "claim", &t]).ok();
    let sha = env.git(a, &["rev-parse", "HEAD"]);
    let done =
        env.sw(a, &["--agent", "alice", "done", &t, "--commit", &sha, "--note", "all good", "--json"]).ok().json();
    assert_eq!(done["status"], "done");
    assert_eq!(done["result"]["commit"], Value::String(sha));
    assert_eq!(done["result"]["note"], "all good");
    assert_eq!(done["claim"], Value::Null);
    env.sw(b, &["--agent", "bob", "claim", &t]).code(4);
    env.sw(a, &["--agent", "alice", "done", &t]).code(4);
    env.sw(a, &["--agent", "alice", "claim"]).code(3);
    env.sw(a, &["--agent", "alice", "done", "t-ffffff"]).code(4);
    env.sw(a, &["--agent", "alice", "done", &t, "--commit", "not-a-sha"]).code(2);
    // Finished tasks live under tasks/done/ in the state tree.
    let files = env.git(&bare, &["ls-tree", "-r", "--name-only", "refs/swarm/default"]);
    assert!(files.contains(&format!("tasks/done/{}/{t}.toml", &t[2..4])), "{files}");
}

#[test]
fn attempts_run_out_into_failed() {
    let env = Env::new();
    let bare = env.bare_remote("r");
    let a = env.clone(&path_url(&bare), "a");
    env.sw(&a, &["init", "--max-attempts", "2"]).ok();
    let t = env.sw(&a, &["add", "flaky"]).ok().line();
    for round in 0..2 {
        env.sw(&a, &["--agent", "w", "claim", &t]).ok();
        let s = env.sw(&a, &["--agent", "w", "fail", &t, "--reason", &format!("round {round}"), "--json"]).ok().json();
        assert_eq!(s["status"], if round == 0 { "open" } else { "failed" });
    }
    env.sw(&a, &["--agent", "w", "claim", &t]).code(4);
    env.sw(&a, &["--agent", "w", "claim"]).code(3);
}

#[test]
fn leases_expire_and_stale_holders_are_fenced() {
    let (env, _bare, c) = setup();
    let (a, b) = (&c[0], &c[1]);
    let t = env.sw(a, &["add", "leased"]).ok().line();
    env.sw(a, &["--agent", "alice", "claim", &t, "--lease", "10m"]).ok();
    // Bob's clock is 11 minutes later: the lease has run out for him.
    let later = [("GIT_SWARM_CLOCK_OFFSET", "660")];
    let status = env.sw_env(b, &later, &["status", "--json"]).ok().json();
    assert_eq!(status["expired"][0]["id"], Value::String(t.clone()));
    let ready = env.sw_env(b, &later, &["ready", "--json"]).ok().json();
    assert_eq!(ready[0]["id"], Value::String(t.clone()));
    let took = env.sw_env(b, &later, &["--agent", "bob", "claim", "--json"]).ok().json();
    assert_eq!(took["id"], Value::String(t.clone()));
    assert_eq!(took["claim"]["epoch"], 2);
    assert_eq!(took["attempts"], 1, "the expired attempt is counted");
    assert!(took["failures"][0]["reason"].as_str().is_some_and(|r| r.contains("lease expired")));
    // Alice wakes up: fenced off on every op.
    let t = t.as_str();
    for op in [vec!["done", t], vec!["renew", t], vec!["release", t], vec!["fail", t, "--reason", "late"]] {
        let mut args = vec!["--agent", "alice"];
        args.extend(op);
        let out = env.sw(a, &args).code(4);
        assert!(out.stderr.contains("bob"), "{}", out.stderr);
    }
    env.sw_env(b, &later, &["--agent", "bob", "done", t]).ok();
}

#[test]
fn the_old_holder_may_finish_while_nobody_took_over() {
    let (env, _bare, c) = setup();
    let t = env.sw(&c[0], &["add", "slow"]).ok().line();
    env.sw(&c[0], &["--agent", "alice", "claim", &t, "--lease", "1m"]).ok();
    let later = [("GIT_SWARM_CLOCK_OFFSET", "600")];
    env.sw_env(&c[0], &later, &["--agent", "alice", "done", &t]).ok();
}

#[test]
fn the_same_agent_id_in_a_stale_process_is_fenced_by_epoch() {
    let (env, _bare, c) = setup();
    let t = env.sw(&c[0], &["add", "twice"]).ok().line();
    // Process 1 of agent "w" claims in clone 0 (epoch 1 recorded there), then stalls past its lease.
    env.sw(&c[0], &["--agent", "w", "claim", &t, "--lease", "1m"]).ok();
    // Process 2 of the same agent id, in clone 1, takes it over after expiry: epoch 2.
    let later = [("GIT_SWARM_CLOCK_OFFSET", "120")];
    let took = env.sw_env(&c[1], &later, &["--agent", "w", "claim", &t, "--json"]).ok().json();
    assert_eq!(took["claim"]["epoch"], 2);
    // Process 1 wakes: its recorded epoch 1 is stale.
    let out = env.sw(&c[0], &["--agent", "w", "done", &t]).code(4);
    assert!(out.stderr.contains("epoch"), "{}", out.stderr);
    // An explicit stale --epoch is refused too; the right one passes.
    env.sw(&c[1], &["--agent", "w", "done", &t, "--epoch", "1"]).code(4);
    env.sw(&c[1], &["--agent", "w", "done", &t, "--epoch", "2"]).ok();
}

#[test]
fn status_and_log_report_the_board_and_every_op() {
    let (env, _bare, c) = setup();
    let a = env.sw(&c[0], &["--agent", "p", "add", "one"]).ok().line();
    let b = env.sw(&c[0], &["--agent", "p", "add", "two"]).ok().line();
    env.sw(&c[0], &["--agent", "alice", "claim", &a]).ok();
    env.sw(&c[1], &["--agent", "bob", "claim", &b]).ok();
    env.sw(&c[1], &["--agent", "bob", "done", &b]).ok();
    let st = env.sw(&c[0], &["status", "--json"]).ok().json();
    assert_eq!(st["counts"]["claimed"], 1);
    assert_eq!(st["counts"]["done"], 1);
    assert_eq!(st["total"], 2);
    assert_eq!(st["agents"][0]["agent"], "alice");
    assert_eq!(st["agents"][0]["tasks"][0]["id"], Value::String(a.clone()));
    let human = env.sw(&c[0], &["status"]).ok().stdout;
    assert!(human.contains("alice") && human.contains("1 done"), "{human}");
    let log = env.sw(&c[1], &["log", "--json"]).ok().json();
    let ops: Vec<&str> = log.as_array().expect("array").iter().map(|e| e["op"].as_str().unwrap_or("?")).collect();
    assert_eq!(ops, vec!["done", "claim", "claim", "add", "add", "init"]);
    assert_eq!(log[0]["agent"], "bob");
    assert_eq!(log[0]["task"], Value::String(b.clone()));
    assert_eq!(log[0]["epoch"], 1);
    let short = env.sw(&c[1], &["log", "-n", "2", "--json"]).ok().json();
    assert_eq!(short.as_array().map(Vec::len), Some(2));
    // The audit log is plain git history of the ref on the remote, with trailers.
    let bare = env.path("origin.git");
    let msg = env.git(&bare, &["log", "-1", "--format=%B", "refs/swarm/default"]);
    assert!(msg.contains("Swarm-Op: done") && msg.contains("Swarm-Agent: bob"), "{msg}");
}

#[test]
fn named_swarms_are_separate_refs() {
    let (env, bare, c) = setup();
    env.sw(&c[0], &["--swarm", "docs", "init"]).ok();
    env.sw(&c[0], &["--swarm", "docs", "add", "write docs"]).ok();
    assert_eq!(env.sw(&c[0], &["list", "--json"]).ok().json().as_array().map(Vec::len), Some(0));
    assert_eq!(env.sw(&c[1], &["--swarm", "docs", "list", "--json"]).ok().json().as_array().map(Vec::len), Some(1));
    env.git(&c[1], &["config", "swarm.name", "docs"]);
    assert_eq!(env.sw(&c[1], &["list", "--json"]).ok().json().as_array().map(Vec::len), Some(1));
    assert!(env.rev(&bare, "refs/swarm/docs").is_some());
}

#[test]
fn json_errors_are_one_document_too() {
    let (env, _bare, c) = setup();
    let out = env.sw(&c[0], &["show", "t-abcdef", "--json"]).code(4);
    let doc = out.json();
    assert_eq!(doc["error"]["code"], 4);
    assert!(doc["error"]["message"].as_str().is_some_and(|m| m.contains("t-abcdef")));
}

#[test]
fn a_closed_stdout_is_not_a_crash() {
    let (env, _bare, c) = setup();
    for i in 0..30 {
        env.sw(&c[0], &["add", &format!("task {i}")]).ok();
    }
    let mut child = env
        .cmd(&c[0])
        .args(["list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let status = child.wait().expect("wait");
    assert_ne!(status.code(), Some(101), "panicked on a closed pipe");
}

/// `add --file`: the planner's `[[task]]` format from a file or stdin, every task in one commit, all or none, each
/// error naming its table.
#[test]
fn add_file_files_every_task_in_one_commit_or_none() {
    let (env, bare, clones) = setup();
    let c = &clones[0];
    let plan = env.sw(c, &["add", "The parser", "--kind", "plan"]).ok().line();
    let before = env.git(&bare, &["rev-list", "--count", "refs/swarm/default"]);
    let file = env.path("tasks.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[[task]]
key = "lexer"
title = "Write the lexer"
body = "Tokens for the grammar in docs/grammar.md."
acceptance = "cargo test lexer passes"
scope = ["src/lexer.rs"]
priority = 2
labels = ["parser"]

[[task]]
title = "Write the parser"
deps = ["lexer", "{plan}"]
kind = "plan"

[[task]]
key = "docs"
title = "Document the grammar"
parent = "{plan}"
"#
        ),
    )
    .expect("file");
    let out = env.sw(c, &["add", "--file", file.to_str().expect("utf-8"), "--json"]).ok().json();
    let tasks = out.as_array().expect("an array of the new tasks");
    assert_eq!(tasks.len(), 3, "{out}");
    let by_title = |t: &str| tasks.iter().find(|x| x["title"] == t).cloned().expect(t);
    let (lexer, parser, docs) =
        (by_title("Write the lexer"), by_title("Write the parser"), by_title("Document the grammar"));
    assert_eq!(parser["deps"], serde_json::json!([lexer["id"], plan]), "deps by key and by id: {parser}");
    assert_eq!((parser["kind"].as_str(), lexer["priority"].as_i64()), (Some("plan"), Some(2)));
    assert_eq!(
        (lexer["acceptance"].as_str(), lexer["scope"][0].as_str()),
        (Some("cargo test lexer passes"), Some("src/lexer.rs"))
    );
    assert_eq!(lexer["labels"], serde_json::json!(["parser"]));
    assert_eq!(docs["parent"], plan.as_str());
    // One commit, one op.
    let after = env.git(&bare, &["rev-list", "--count", "refs/swarm/default"]);
    assert_eq!(after.trim().parse::<u64>().expect("n"), before.trim().parse::<u64>().expect("n") + 1);
    // From stdin, with a default parent; the new tasks on stdout, one a line.
    let mut cmd = env.cmd(c);
    cmd.args(["add", "--file", "-", "--parent", &plan])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"[[task]]\ntitle = \"From stdin\"\n")
        .expect("write");
    drop(child.stdin.take());
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success());
    // A line a task: its id first, then its key (`-`: none) and its title.
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(line.ends_with("  -  From stdin"), "{line}");
    let id = line.split_whitespace().next().unwrap_or_default().to_string();
    assert_eq!(env.sw(c, &["show", &id, "--json"]).ok().json()["parent"], plan.as_str());

    // All or none: a bad table anywhere adds nothing, and the error names it.
    let count = || env.sw(c, &["list", "--json"]).ok().json().as_array().map(Vec::len).unwrap_or(0);
    let n = count();
    let cases: [(&str, i32, &str); 5] = [
        (
            "[[task]]\ntitle = \"A\"\n[[task]]\ntitle = \"B\"\ndpes = [\"a\"]\n",
            2,
            "[[task]] 2 ('B'): unknown key 'dpes'",
        ),
        (
            "[[task]]\ntitle = \"A\"\n[[task]]\ntitle = \"B\"\ndeps = [\"t-nowhere\"]\n",
            4,
            "[[task]] 2 ('B'): deps: 't-nowhere' is neither a key",
        ),
        (
            "[[task]]\nkey = \"k\"\ntitle = \"A\"\n[[task]]\nkey = \"k\"\ntitle = \"B\"\n",
            2,
            "[[task]] 2 ('B'): the key 'k' is used twice",
        ),
        ("[[task]]\ntitle = \"A\"\npriority = \"high\"\n", 2, "[[task]] 1 ('A'):"),
        ("[[task]]\ntitle = \"A\"\n[[tsak]]\ntitle = \"B\"\n", 2, "unknown key 'tsak' at the top"),
    ];
    for (text, code, says) in cases {
        std::fs::write(&file, text).expect("file");
        let o = env.sw(c, &["add", "--file", file.to_str().expect("utf-8")]);
        assert_eq!(o.code, code, "{text}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{text}: {}", o.stderr);
        assert_eq!(count(), n, "{text}: something was added");
    }
    // A title and --file together is a usage error.
    assert_eq!(env.sw(c, &["add", "x", "--file", file.to_str().expect("utf-8")]).code, 2);
}
