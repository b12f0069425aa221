//! A new user's first hour, as tests: a machine with no git identity, two clones on one machine, an agent that
//! cannot start, a swarm the judge stopped, a failed task to try again, `done --commit` with a revision, what
//! `show` tells, a planner that repeats itself, a conflict run that forgets `git rebase --continue`.

use std::path::Path;

use crate::common;
use crate::common::{Env, path_url, scripted_agent};
use serde_json::Value;

fn show(env: &Env, dir: &Path, id: &str) -> Value {
    env.sw(dir, &["show", id, "--json"]).ok().json()
}

/// A fresh machine: no `user.name`, no `user.email`, no global config at all.
fn no_identity(env: &Env, cmd: &mut std::process::Command) {
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", &env.home)
        .env_remove("USER")
        .env_remove("EMAIL")
        .env_remove("GIT_AUTHOR_NAME")
        .env_remove("GIT_AUTHOR_EMAIL")
        .env_remove("GIT_COMMITTER_NAME")
        .env_remove("GIT_COMMITTER_EMAIL")
        // Nor has a new user trusted anything: what they run must be trusted by what they did themselves.
        .env_remove("GIT_SWARM_TRUST");
}

/// The README's first command ends in `git swarm demo`: on a machine with no git identity it used to fail at once
/// ("Could not update reflog"), gix refusing a reflog line without a committer.
#[test]
fn the_demo_runs_on_a_machine_with_no_git_identity() {
    let env = Env::new();
    let mut cmd = env.cmd(env.root.path());
    no_identity(&env, &mut cmd);
    let out = common::Out::from(cmd.args(["demo", "--workers", "2", "--pace", "0"]).output().expect("demo"));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(!out.stderr.contains("reflog"), "{}", out.stderr);
    assert!(out.stderr.contains("landed") || out.stdout.contains("landed"), "{}\n{}", out.stdout, out.stderr);
}

/// The plain ops on a clone with no identity: init, add, claim, done, and the runner's own commits.
#[test]
fn a_clone_with_no_identity_can_run_the_whole_board() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let c = env.clone(&path_url(&bare), "c0");
    let run = |args: &[&str]| {
        let mut cmd = env.cmd(&c);
        no_identity(&env, &mut cmd);
        common::Out::from(cmd.args(args).output().expect("run"))
    };
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {:?}\n", scripted_agent())).expect("config");
    run(&["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let id = run(&["add", "write it", "--body", "@write out.txt hello"]).ok().line();
    run(&["run", "worker", "--once"]).ok();
    assert_eq!(show(&env, &c, &id)["status"], "done");
    // The commit is the agent's, in the runner's identity (the agent id), as no other is configured.
    let author = env.git(&bare, &["log", "-1", "--format=%ae", "main"]);
    assert!(author.ends_with("@git-swarm.invalid"), "{author}");
}

/// Two clones on one machine used to get the same default agent id: the second could `claim` the first's task
/// ("claim again") and finish it.
#[test]
fn two_clones_on_one_machine_are_two_agents() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_clones(path_url, 2);
    let (a, b) = (&clones[0], &clones[1]);
    let id = env.sw(a, &["add", "one task"]).ok().line();
    env.sw(a, &["claim", &id]).ok();
    let holder = show(&env, a, &id)["claim"]["agent"].as_str().expect("agent").to_string();
    let out = env.sw(b, &["claim", &id]).code(4);
    assert!(out.stderr.contains(&format!("claimed by {holder}")), "{}", out.stderr);
    env.sw(b, &["done", &id]).code(4);
    // Each clone keeps its own id from one command to the next, and a linked work tree of a clone is the clone.
    assert_eq!(env.sw(a, &["claim", &id]).code, 0, "the holder claims again: its id is stable");
    let wt = env.path("a-linked");
    env.git(a, &["worktree", "add", "-q", "--detach", wt.to_str().expect("utf-8")]);
    env.sw(&wt, &["done", &id]).ok();
    assert_eq!(show(&env, a, &id)["status"], "done");
}

/// An agent command that cannot start (a typo, a CLI not installed) used to burn every attempt of every task in a
/// second. Now it is found before anything is claimed; one that dies with 127 mid-run gives its claim back unspent.
#[test]
fn an_agent_that_cannot_start_spends_no_attempt() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_config(path_url, 1, "[roles.worker]\nexec = \"claud -p\"\n");
    let c = &clones[0];
    let id = env.sw(c, &["add", "work"]).ok().line();
    let out = env.sw(c, &["run", "worker", "--until-idle"]).code(1);
    assert!(out.stderr.contains("`claud` is not installed here"), "{}", out.stderr);
    assert!(out.stderr.contains("hint:"), "{}", out.stderr);
    let t = show(&env, c, &id);
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64(), t["epoch"].as_u64()), (Some("open"), Some(0), Some(0)));
    // A command the preflight cannot see into (a shell line) that then exits 127: released, no attempt spent.
    let out =
        env.sw(c, &["run", "worker", "--until-idle", "--exec", "if true; then no-such-agent-cli --go; fi"]).code(1);
    assert!(out.stderr.contains("cannot start") && out.stderr.contains("127"), "{}", out.stderr);
    let t = show(&env, c, &id);
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}");
    assert!(t["failures"].as_array().is_some_and(Vec::is_empty), "{t}");
    // `up` says so once, before it starts a member.
    let epoch = show(&env, c, &id)["epoch"].clone();
    let out = env.sw(c, &["up", "--workers", "2"]).code(1);
    assert!(out.stderr.contains("worker:") && out.stderr.contains("`claud` is not installed here"), "{}", out.stderr);
    assert_eq!(show(&env, c, &id)["epoch"], epoch, "nothing was claimed");
    // doctor says so too.
    let out = env.sw(c, &["doctor", "--json"]).code(1);
    let doc = out.json();
    let agents: Vec<&Value> =
        doc["findings"].as_array().expect("findings").iter().filter(|f| f["check"] == "agents").collect();
    assert!(
        agents.iter().any(|f| f["severity"] == "error" && f["message"].as_str().is_some_and(|m| m.contains("claud"))),
        "{doc}"
    );
}

/// A swarm the judge stopped used to be stuck for good: `up --goal` silently planned the old goal, `status` said
/// nothing. Now status says it is stopped and how to go on; a different goal through `up`/`run planner` is refused;
/// `git swarm goal` opens the next cycle with a fresh root plan.
#[test]
fn a_stopped_swarm_goes_on_with_a_new_goal() {
    let env = Env::new();
    let config = format!("[roles.default]\nexec = {:?}\n", scripted_agent());
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    let plan = env.path("plan.toml");
    // Round 1 files the task, the worker does it, round 2 has nothing more: the plan is done, the cycle ends.
    let plan_env = common::cycle_to_stop(&env, c, &plan);
    let plan_env: Vec<(&str, &str)> = plan_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let status = env.sw(c, &["status", "--json"]).ok().json();
    assert_eq!(status["stopped"]["cycle"], 1, "{status}");
    let human = env.sw(c, &["status"]).ok().stdout;
    assert!(human.contains("STOPPED") && human.contains("git swarm goal"), "{human}");
    // A runner exits at once, saying why.
    let w = env.sw(c, &["--agent", "w", "run", "worker", "--until-idle"]).ok();
    assert!(
        w.stderr.contains("stopped the swarm after cycle 1") && w.stderr.contains("git swarm goal"),
        "{}",
        w.stderr
    );
    // Nor is the same goal on a stopped swarm (the runners would stop at once): both point to `git swarm goal`.
    let out = env.sw(c, &["--agent", "p", "run", "planner", "--once", "--goal", "first goal"]).code(2);
    assert!(out.stderr.contains("stopped the swarm") && out.stderr.contains("git swarm goal"), "{}", out.stderr);
    // A different goal is not taken from a flag.
    let out = env.sw(c, &["--agent", "p", "run", "planner", "--once", "--goal", "another goal"]).code(2);
    assert!(out.stderr.contains("git swarm goal"), "{}", out.stderr);
    let out = env.sw(c, &["up", "--workers", "1", "--goal", "another goal"]).code(2);
    assert!(out.stderr.contains("another goal already") || out.stderr.contains("git swarm goal"), "{}", out.stderr);
    // `git swarm goal` lifts cycle 1's stop (its record now says the swarm went on) and files the new root plan
    // for cycle 2: no cycle in between that never ran.
    let g = env.sw(c, &["goal", "another goal", "--json"]).ok().json();
    assert_eq!((g["ended_cycle"].as_u64(), g["after_stop"].as_bool()), (Some(1), Some(true)), "{g}");
    let status = env.sw(c, &["status", "--json"]).ok().json();
    assert!(status["stopped"].is_null(), "{status}");
    assert_eq!(status["cycle"], 2, "{status}");
    assert_eq!(status["goal"], "another goal");
    let roots: Vec<Value> = env
        .sw(c, &["list", "--json"])
        .ok()
        .json()
        .as_array()
        .expect("list")
        .iter()
        .filter(|t| t["kind"] == "plan" && t["parent"].is_null())
        .cloned()
        .collect();
    let open: Vec<&Value> = roots.iter().filter(|t| t["status"] == "open").collect();
    assert_eq!(open.len(), 1, "{roots:?}");
    assert_eq!(open[0]["body"], "another goal");
    // And the swarm works again: a planner plans the new goal.
    std::fs::write(&plan, "[[task]]\ntitle = \"the second goal's task\"\nbody = \"@write b.txt b\"\n").expect("plan");
    env.sw_env(c, &plan_env, &["--agent", "p", "run", "planner", "--once"]).ok();
    env.sw(c, &["--agent", "w", "run", "worker", "--once"]).ok();
    let titles = env.sw(c, &["list", "--status", "done", "--json"]).ok().stdout;
    assert!(titles.contains("the second goal's task"), "{titles}");
}

/// `git swarm retry` reopens a failed task with its attempts reset; an open one is refused.
#[test]
fn a_failed_task_can_be_tried_again() {
    let env = Env::new();
    let config = format!("max_attempts = 1\n[roles.worker]\nexec = {:?}\n", scripted_agent());
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    let id = env.sw(c, &["add", "flaky", "--body", "@exit 1"]).ok().line();
    env.sw(c, &["--agent", "w", "run", "worker", "--once"]).code(1);
    assert_eq!(show(&env, c, &id)["status"], "failed");
    let t = env.sw(c, &["retry", &id, "--json"]).ok().json();
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}");
    assert_eq!(t["failures"].as_array().map(Vec::len), Some(1), "the failure stays on record: {t}");
    env.sw(c, &["retry", &id]).code(4);
    // It runs again: the next worker claims it.
    env.sw(c, &["--agent", "w", "run", "worker", "--once", "--exec", "echo fixed > fixed.txt"]).ok();
    assert_eq!(show(&env, c, &id)["status"], "done");
    // Several at once, in one op: all open again, or none when one of them cannot be.
    let (a, b) = (env.sw(c, &["add", "a", "--body", "@exit 1"]).ok().line(), env.sw(c, &["add", "b"]).ok().line());
    env.sw(c, &["--agent", "w", "run", "worker", "--once"]).code(1);
    env.sw(c, &["--agent", "w", "claim", &b]).ok();
    env.sw(c, &["--agent", "w", "fail", &b, "--reason", "no"]).ok();
    assert_eq!(
        (show(&env, c, &a)["status"].as_str(), show(&env, c, &b)["status"].as_str()),
        (Some("failed"), Some("failed"))
    );
    let tip = env.sw(c, &["log", "--json"]).ok().json()[0]["commit"].clone();
    let o = env.sw(c, &["retry", &a, &b, &id]).code(4);
    assert!(o.stderr.contains(&id), "the one that cannot be is named: {}", o.stderr);
    assert_eq!(env.sw(c, &["log", "--json"]).ok().json()[0]["commit"], tip, "nothing was written");
    let both = env.sw(c, &["retry", "--failed", "--json"]).ok().json();
    let mut ids: Vec<&str> = both.as_array().expect("an array").iter().filter_map(|t| t["id"].as_str()).collect();
    ids.sort_unstable();
    let mut want = vec![a.as_str(), b.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want, "{both}");
    assert_eq!(env.sw(c, &["log", "--json"]).ok().json()[0]["op"], "retry", "one op for both");
    assert!(env.sw(c, &["retry", "--failed"]).ok().stderr.contains("nothing to retry"));
}

/// `done --commit` takes a revision (it refused `HEAD`) and refuses one that names nothing (it took any hex).
#[test]
fn done_commit_resolves_a_revision_and_refuses_one_that_does_not_exist() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    let id = env.sw(c, &["add", "a"]).ok().line();
    env.sw(c, &["claim", &id]).ok();
    let out = env.sw(c, &["done", &id, "--commit", "deadbeefdeadbeef"]).code(2);
    assert!(out.stderr.contains("no such commit"), "{}", out.stderr);
    assert_eq!(show(&env, c, &id)["status"], "claimed", "nothing was recorded");
    // A commit of this clone that is not on the remote's main yet: recorded, with a warning.
    std::fs::write(c.join("x.txt"), "x").expect("write");
    env.git(c, &["add", "x.txt"]);
    env.git(c, &["commit", "-q", "-m", "x"]);
    let head = env.git(c, &["rev-parse", "HEAD"]);
    let out = env.sw(c, &["done", &id, "--commit", "HEAD"]).ok();
    assert!(out.stderr.contains("is not on origin's main"), "{}", out.stderr);
    assert_eq!(show(&env, c, &id)["result"]["commit"], head.as_str());
    // Pushed first: no warning.
    let id2 = env.sw(c, &["add", "b"]).ok().line();
    env.sw(c, &["claim", &id2]).ok();
    env.git(c, &["push", "-q", "origin", "HEAD:main"]);
    let out = env.sw(c, &["done", &id2, "--commit", "HEAD"]).ok();
    assert!(!out.stderr.contains("not on"), "{}", out.stderr);
}

/// `show` printed neither acceptance nor scope nor the worker's hand-off.
#[test]
fn show_tells_acceptance_scope_and_the_hand_off() {
    let env = Env::new();
    let config = format!("[roles.worker]\nexec = {:?}\n", scripted_agent());
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    let id = env
        .sw(c, &["add", "documented", "--body", "@write d.txt d", "--acceptance", "d.txt says d", "--scope", "d.txt"])
        .ok()
        .line();
    env.sw(c, &["--agent", "w", "run", "worker", "--once"]).ok();
    let human = env.sw(c, &["show", &id]).ok().stdout;
    assert!(human.contains("acceptance:") && human.contains("d.txt says d"), "{human}");
    assert!(human.contains("scope      d.txt"), "{human}");
    assert!(human.contains("hand-off:"), "{human}");
    let t = show(&env, c, &id);
    assert_eq!((t["acceptance"].as_str(), t["scope"][0].as_str()), (Some("d.txt says d"), Some("d.txt")));
    assert!(t["handoff"].as_str().is_some_and(|h| !h.is_empty()), "{t}");
}

/// A planner that proposes the same task every round filed it every round.
#[test]
fn a_planner_that_repeats_itself_files_a_task_once() {
    let env = Env::new();
    let worker = format!("[roles.worker]\nexec = {:?}\n", scripted_agent());
    let (_bare, clones) = env.swarm_with_config(path_url, 1, &worker);
    let c = &clones[0];
    // Every round, the same block.
    let planner =
        "printf '%s\\n' '```toml' '[[task]]' 'title = \"Write the parser\"' 'body = \"@write p.txt p\"' '```'";
    let run_planner = |args: &[&str]| {
        let mut all = vec!["--agent", "p", "run", "planner", "--exec", planner];
        all.extend_from_slice(args);
        env.sw(c, &all)
    };
    run_planner(&["--once", "--goal", "parse things"]).ok();
    env.sw(c, &["--agent", "w", "run", "worker", "--once"]).ok();
    let out = run_planner(&["--once"]).ok();
    assert!(out.stderr.contains("not filed again"), "{}", out.stderr);
    let list = env.sw(c, &["list", "--json"]).ok().json();
    let parsers = list.as_array().expect("list").iter().filter(|t| t["title"] == "Write the parser").count();
    assert_eq!(parsers, 1, "{list}");
    // The plan is done: its agent had nothing new to say.
    let root = list.as_array().expect("list").iter().find(|t| t["kind"] == "plan").expect("root").clone();
    assert_eq!(root["status"], "done", "{root}");
}

/// A conflict run whose agent resolved every file and left the rebase stopped was reported as a conflict in ""
/// and failed. The runner now goes on with the rebase itself.
#[test]
fn a_conflict_run_that_forgets_rebase_continue_still_lands() {
    let env = Env::new();
    // On a conflict: keep both sides of every conflicted file, stage it, and stop there (no --continue).
    let exec = format!(
        "if [ \"${{GIT_SWARM_CONFLICT:-}}\" = 1 ]; then for f in $(git diff --name-only --diff-filter=U); do \
         grep -v '^[<=>]\\{{7\\}}' \"$f\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\" && git add \"$f\"; done; exit 0; fi; {}",
        scripted_agent()
    );
    let (bare, clones) = env.swarm_with_config(path_url, 1, &format!("[roles.worker]\nexec = {exec:?}\n"));
    let c = &clones[0];
    let id = env.sw(c, &["add", "mine", "--body", "@set shared.txt mine"]).ok().line();
    // Another change to the same line lands while the agent works: its rebase stops on a conflict.
    let other = env.clone(&path_url(&bare), "other");
    let gate = env.path("gate");
    let agent_env = [("SCRIPTED_DELAY", "2")];
    let mut w = env.cmd(c);
    w.envs(agent_env)
        .args(["--agent", "w", "run", "worker", "--once"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = w.spawn().expect("worker");
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(other.join("shared.txt"), "theirs\n").expect("write");
    env.git(&other, &["add", "shared.txt"]);
    env.git(&other, &["commit", "-q", "-m", "theirs"]);
    env.git(&other, &["push", "-q", "origin", "HEAD:main"]);
    let out = common::finish(child, 120, "the worker");
    let _ = gate;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("rebase conflict"), "no conflict happened, the test proves nothing:\n{}", out.stderr);
    assert_eq!(show(&env, c, &id)["status"], "done");
    let text = env.git(&bare, &["show", "main:shared.txt"]);
    assert!(text.contains("mine") && text.contains("theirs"), "{text}");
}

/// What agent CLIs keep for themselves never lands — unless the task's scope names it; and a scope that climbs out
/// (`.claude/..`) names nothing: it cannot pull ignored files (a `.env`) into the commit.
#[test]
fn agent_files_stay_out_of_commits_and_a_scope_cannot_pull_in_ignored_files() {
    let env = Env::new();
    let config = format!("[roles.worker]\nexec = {:?}\n", scripted_agent());
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    // The repository ignores `.env`; an agent run leaves one, and its tools' files, and the wanted command file.
    let seed = env.clone(&path_url(&bare), "seed2");
    std::fs::write(seed.join(".gitignore"), ".env\n").expect("write");
    env.git(&seed, &["add", ".gitignore"]);
    env.git(&seed, &["commit", "-q", "-m", "ignore .env"]);
    env.git(&seed, &["push", "-q", "origin", "HEAD:main"]);
    let body = "@write work.txt w\n@write .env SECRET=1\n@write .aider.chat.history.md chat\n@write .claude/settings.json {}\n\
                @write .claude/commands/review.md review\n@write .gemini/tmp/x y\n@commit";
    let id = env
        .sw(c, &["add", "the work", "--body", body, "--scope", ".claude/commands/review.md", "--scope", ".claude/.."])
        .ok()
        .line();
    env.sw(c, &["--agent", "w", "run", "worker", "--once"]).ok();
    assert_eq!(show(&env, c, &id)["status"], "done");
    let files = env.git(&bare, &["ls-tree", "-r", "--name-only", "main"]);
    let files: Vec<&str> = files.lines().collect();
    assert_eq!(files, [".claude/commands/review.md", ".gitignore", "README.md", "work.txt"], "what landed");
    // And no commit of the task held them on the way (the agent committed with `git add -A` itself).
    let all = env.git(&bare, &["log", "--name-only", "--format=", "main"]);
    assert!(!all.contains(".aider") && !all.contains(".gemini") && !all.contains(".env"), "{all}");
}

/// `git swarm goal` on a running swarm: the old goal's root plan — held by its planner all cycle long — is
/// cancelled with the plans under it, so nothing plans the old goal again; a swarm the judge stopped before any
/// goal was set goes on too.
#[test]
fn a_new_goal_cancels_the_held_root_plan_and_a_stop_without_a_goal_is_lifted() {
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    env.sw(c, &["goal", "the old goal"]).ok();
    let root = env.sw(c, &["--agent", "planner-1", "claim", "--kind", "plan"]).ok().line();
    let sub = env.sw(c, &["add", "an area", "--kind", "plan", "--parent", &root]).ok().line();
    let work = env.sw(c, &["add", "some work", "--parent", &sub]).ok().line();
    let set = env.sw(c, &["goal", "the new goal"]).ok();
    // The swarm never stopped: no runner exited, and none is said to have.
    assert!(!set.stderr.contains("exited"), "{}", set.stderr);
    for id in [&root, &sub] {
        let t = show(&env, c, id);
        assert_eq!(t["status"], "cancelled", "{t}");
    }
    assert_eq!(show(&env, c, &work)["status"], "open", "work tasks go on");
    // The old holder is fenced off.
    env.sw(c, &["--agent", "planner-1", "renew", &root]).code(4);

    // A swarm with no goal, judged and stopped: `goal` lifts the stop.
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    let id = env.sw(c, &["add", "one"]).ok().line();
    env.sw(c, &["claim", &id]).ok();
    env.sw(c, &["done", &id]).ok();
    env.sw(c, &["--agent", "j", "run", "judge", "--once", "--exec", "printf 'verdict: stop\\n'"]).ok();
    assert!(!env.sw(c, &["status", "--json"]).ok().json()["stopped"].is_null());
    let set = env.sw(c, &["goal", "now a goal"]).ok();
    assert!(set.stdout.contains("the judge had stopped the swarm after cycle 1"), "{}", set.stdout);
    assert!(set.stderr.contains("must be started again"), "the runners ended with the stop: {}", set.stderr);
    assert!(env.sw(c, &["status", "--json"]).ok().json()["stopped"].is_null());
}
