//! History an agent cannot forge (issue 26), end to end with real clones, real `git` and agents that are shell
//! scripts written by each test: a `Swarm-Task:` trailer for another task in an agent's commit, the same pushed to
//! the target by someone who holds the runner's credentials, an agent's merge of an unrelated history, a force-push
//! of the target that drops done tasks' code, and `run worker --agents 8` SIGKILLed mid-batch and restarted. Each
//! test says which door held.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common;
use crate::common::{Env, finish, path_url};
use serde_json::Value;

fn show(env: &Env, dir: &Path, id: &str) -> Value {
    env.sw(dir, &["show", id, "--json"]).ok().json()
}

fn tasks(env: &Env, dir: &Path) -> Vec<Value> {
    env.sw(dir, &["list", "--json"]).ok().json().as_array().cloned().unwrap_or_default()
}

/// An agent script at `<env>/<name>.sh`; the command that runs it.
fn agent(env: &Env, name: &str, body: &str) -> String {
    let path = env.path(&format!("{name}.sh"));
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).expect("agent script");
    format!("sh '{}'", path.display())
}

/// A swarm on a bare remote (a plain path) whose workers run `exec`, and a clone.
fn swarm(env: &Env, exec: &str, max_attempts: u32) -> (PathBuf, PathBuf) {
    let config = format!("lease = \"1m\"\nmax_attempts = {max_attempts}\n[roles.worker]\nexec = {exec:?}\n");
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config);
    (bare, clones[0].clone())
}

/// The `Swarm-*` trailer lines of every commit on main of the bare remote, newest first: (commit, lines).
fn swarm_trailers(env: &Env, bare: &Path) -> Vec<(String, Vec<String>)> {
    let log = env.git(bare, &["log", "-z", "--format=%H%n%(trailers:only,unfold)", "main"]);
    log.split('\0')
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut lines = e.trim_start_matches('\n').lines();
            let commit = lines.next().unwrap_or_default().to_string();
            let trailers = lines.filter(|l| l.to_ascii_lowercase().starts_with("swarm-")).map(str::to_string).collect();
            (commit, trailers)
        })
        .collect()
}

/// Commits of main whose trailers name `id` in any way.
fn naming(env: &Env, bare: &Path, id: &str) -> Vec<String> {
    swarm_trailers(env, bare).into_iter().filter(|(_, t)| t.iter().any(|l| l.ends_with(id))).map(|(c, _)| c).collect()
}

/// Put a commit on main of the bare remote as someone who holds push access would (an agent with the runner's
/// credentials, without a sandbox): main's tree again, with `message`.
fn push_forged(env: &Env, bare: &Path, message: &str) -> String {
    let c = env.git(bare, &["commit-tree", "main^{tree}", "-p", "main", "-m", message]);
    env.git(bare, &["update-ref", "refs/heads/main", &c]);
    c
}

/// Door: the runner's stamp. An agent's own commit carries `Swarm-Task:` and `Swarm-Epoch:` for another task (and a
/// `Swarm-Op:`, and a lower-case spelling in its body): the runner strips every `Swarm-*` line of it when it lands,
/// and writes its task's own. The honest task lands its honest work; the other task is not rolled forward — not by
/// a worker that takes it after the lease of its claim ran out, not by `doctor --fix` — and its own work lands.
#[test]
fn an_agents_forged_trailer_for_another_task_is_stripped_and_finishes_nothing() {
    let env = Env::new();
    let (bare, c) = swarm(&env, "true", 3);
    let x = env.sw(&c, &["add", "the honest task", "--priority", "2"]).ok().line();
    let y = env.sw(&c, &["add", "the victim"]).ok().line();
    let forger = agent(
        &env,
        "forger",
        &format!(
            "if [ \"$GIT_SWARM_TASK_ID\" = {x} ]; then\n  echo honest > x.txt\n  git add x.txt\n  \
             printf 'honest work\\n\\nswarm-task : {y}\\n\\n' > \"${{TMPDIR:-/tmp}}/msg\"\n  \
             printf 'Swarm-Op: done\\nSwarm-Task: {y}\\nSwarm-Epoch: 1\\n' >> \"${{TMPDIR:-/tmp}}/msg\"\n  \
             git commit -q -F \"${{TMPDIR:-/tmp}}/msg\"\nelse\n  echo mine > y.txt\nfi"
        ),
    );
    // The victim is claimed by an agent that then disappears: its claim runs out while x's forged code lands.
    env.sw(&c, &["--agent", "ghost", "claim", &y, "--lease", "1m"]).ok();
    env.sw(&c, &["--agent", "w1", "run", "worker", "--once", "--exec", &forger]).ok();
    let tx = show(&env, &c, &x);
    assert_eq!(tx["status"], "done", "{tx}");
    assert_eq!(env.git(&bare, &["show", "main:x.txt"]), "honest");
    // What landed says x, under x's claim, and nothing else of the swarm's.
    let landed = tx["result"]["commit"].as_str().expect("result.commit").to_string();
    let trailers = swarm_trailers(&env, &bare);
    let (_, mine) = trailers.iter().find(|(c, _)| *c == landed).expect("the landed commit on main");
    assert_eq!(mine, &[format!("Swarm-Task: {x}"), "Swarm-Epoch: 1".to_string()], "{trailers:?}");
    let body = env.git(&bare, &["log", "-1", "--format=%B", &landed]);
    assert!(!body.to_ascii_lowercase().contains(&y), "the forged lines survived:\n{body}");
    assert!(naming(&env, &bare, &y).is_empty(), "a commit on main names {y}: {trailers:?}");
    // doctor finishes nothing: nothing on main is y's code.
    let d = env.sw(&c, &["doctor", "--fix"]);
    assert!(!d.stdout.contains("as done"), "doctor finished something:\n{}", d.stdout);
    assert_eq!(show(&env, &c, &y)["status"], "claimed", "doctor --fix finished the victim");
    // A worker after the victim's lease takes it over and runs its agent: its own work lands.
    let o = env.sw_env(
        &c,
        &[("GIT_SWARM_CLOCK_OFFSET", "120")],
        &["--agent", "w2", "run", "worker", "--once", "--exec", &forger],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains(&format!("agent started (work) on {y}")), "{y} was rolled forward:\n{}", o.stderr);
    let ty = show(&env, &c, &y);
    assert_eq!(ty["status"], "done", "{ty}");
    assert_eq!(env.git(&bare, &["show", "main:y.txt"]), "mine", "the victim's own work did not land");
    let landed_y = ty["result"]["commit"].as_str().expect("result.commit");
    assert_ne!(landed_y, landed, "the victim was finished with the forger's commit");
    assert_eq!(naming(&env, &bare, &y), [landed_y.to_string()]);
}

/// Door: the landing's trailers, read back. Someone who can push the target (an agent holding the runner's
/// credentials, without a sandbox) puts commits on main that name a claimed task: the `commit-msg` hook's trailer
/// alone, one under an epoch no claim of the task had, one naming two tasks. A worker that takes the task over
/// after its lease ran out runs the agent (nothing is rolled forward) and says which commits it did not take; a
/// sweep of the same claim with no attempts left fails the task instead of finishing it.
#[test]
fn forged_trailers_pushed_to_the_target_roll_no_task_forward() {
    for max_attempts in [3, 1] {
        let env = Env::new();
        let (bare, c) = swarm(&env, "echo own > own.txt", max_attempts);
        let id = env.sw(&c, &["add", "the victim"]).ok().line();
        let other = env.sw(&c, &["add", "another task", "--after", &id]).ok().line();
        env.sw(&c, &["--agent", "ghost", "claim", &id]).ok();
        let forged = [
            push_forged(&env, &bare, &format!("hook style\n\nSwarm-Task: {id}")),
            push_forged(&env, &bare, &format!("no such claim\n\nSwarm-Task: {id}\nSwarm-Epoch: 7")),
            push_forged(&env, &bare, &format!("two tasks\n\nSwarm-Task: {id}\nSwarm-Task: {other}\nSwarm-Epoch: 1")),
        ];
        let o = env.sw_env(&c, &[("GIT_SWARM_CLOCK_OFFSET", "120")], &["--agent", "w2", "run", "worker", "--once"]);
        for f in &forged {
            assert!(
                o.stderr.contains(&f[..12]) && o.stderr.contains("not taken as its code"),
                "max_attempts {max_attempts}: {f} not said:\n{}",
                o.stderr
            );
        }
        assert!(!o.stderr.contains("rolled"), "max_attempts {max_attempts}: rolled forward:\n{}", o.stderr);
        let t = show(&env, &c, &id);
        if max_attempts > 1 {
            assert_eq!(o.code, 0, "{}", o.stderr);
            assert!(o.stderr.contains(&format!("agent started (work) on {id}")), "{}", o.stderr);
            assert_eq!(t["status"], "done", "{t}");
            assert!(!forged.iter().any(|f| t["result"]["commit"] == *f), "finished with a forged commit: {t}");
            assert_eq!(env.git(&bare, &["show", "main:own.txt"]), "own");
        } else {
            // The sweep looked the claim up, found no landing of it, and failed it (its last attempt ran out).
            assert_eq!(t["status"], "failed", "{t}");
        }
        // doctor takes none of them either.
        let d = env.sw(&c, &["doctor", "--fix"]);
        assert!(!d.stdout.contains("as done"), "{}", d.stdout);
    }
}

/// Door: doctor's look-up of landed tasks. Commits on the target name a task nobody has claimed, as a landing of
/// an epoch it never had and as the hook writes: `doctor --fix` does not finish it, and says which commits it did
/// not take.
#[test]
fn doctor_fix_finishes_no_task_with_a_forged_trailer() {
    let env = Env::new();
    let (bare, c) = swarm(&env, "true", 3);
    let id = env.sw(&c, &["add", "nobody claimed it"]).ok().line();
    let a = push_forged(&env, &bare, &format!("forged landing\n\nSwarm-Task: {id}\nSwarm-Epoch: 1"));
    let b = push_forged(&env, &bare, &format!("hook style\n\nSwarm-Task: {id}"));
    let d = env.sw(&c, &["doctor", "--fix"]);
    assert!(!d.stdout.contains("as done"), "{}", d.stdout);
    for f in [&a, &b] {
        assert!(d.stdout.contains(&f[..12]) && d.stdout.contains("not taken as its code"), "{f}:\n{}", d.stdout);
    }
    let t = show(&env, &c, &id);
    assert_eq!(t["status"], "open", "doctor finished a task nobody claimed: {t}");
    assert_eq!(t["epoch"], 0, "{t}");
}

/// Door: the landing's history check. The agent merges an unrelated history (a second root) into its work: the
/// task fails with the reason, its work kept aside, and main still has one root and none of the foreign files.
#[test]
fn an_agents_merge_of_an_unrelated_history_is_refused() {
    let env = Env::new();
    let merger = agent(
        &env,
        "merger",
        "echo own > own.txt\ngit add own.txt\ngit commit -q -m 'own work'\n\
         blob=$(echo foreign | git hash-object -w --stdin)\n\
         tree=$(printf '100644 blob %s\\tforeign.txt\\n' \"$blob\" | git mktree)\n\
         root=$(git commit-tree \"$tree\" -m 'another project')\n\
         git merge -q --allow-unrelated-histories -m 'merge it in' \"$root\"",
    );
    let (bare, c) = swarm(&env, &merger, 3);
    let id = env.sw(&c, &["add", "the task"]).ok().line();
    let before = env.git(&bare, &["rev-parse", "main"]);
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 1, "the landing was not refused:\n{}", o.stderr);
    assert!(o.stderr.contains("second root"), "{}", o.stderr);
    let t = show(&env, &c, &id);
    assert_eq!(t["status"], "open", "{t}");
    assert_eq!(t["attempts"], 1, "{t}");
    let reason = t["failures"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not the agent's own history"), "{t}");
    assert_eq!(env.git(&bare, &["rev-parse", "main"]), before, "main moved");
    assert_eq!(env.git(&bare, &["rev-list", "--max-parents=0", "--count", "main"]), "1");
    // The work is kept for a person, merge and all.
    let kept = env.rev(&bare, &format!("refs/swarm-work/default/{id}/1")).expect("kept work");
    assert_eq!(env.git(&bare, &["show", &format!("{kept}:foreign.txt")]), "foreign");
}

/// Door: the target's history, checked by the runner and by doctor against what the clone saw. Two tasks land;
/// someone force-pushes main back to before them. The runner refuses to work on (or land on) it, naming both tasks
/// and how to put them back, its claim given back unspent; `doctor` names them and exits 1, in the runner's clone
/// and in a person's clone that only fetched with git. Put back as the hint says, everything goes on.
#[test]
fn a_force_push_that_drops_done_tasks_code_is_named_by_the_runner_and_doctor() {
    let env = Env::new();
    let (bare, c) = swarm(&env, "echo \"$GIT_SWARM_TASK_TITLE\" > \"$GIT_SWARM_TASK_ID.txt\"", 3);
    let person = env.clone(&bare.display().to_string(), "person");
    let root = env.git(&bare, &["rev-parse", "main"]);
    let ids: Vec<String> =
        ["parse the input", "print the report"].iter().map(|t| env.sw(&c, &["add", t]).ok().line()).collect();
    env.sw(&c, &["--agent", "w1", "run", "worker", "--until-idle"]).ok();
    let tip = env.git(&bare, &["rev-parse", "main"]);
    env.git(&person, &["fetch", "-q", "origin"]);
    // The force-push (as an agent with the runner's credentials could).
    env.git(&bare, &["update-ref", "refs/heads/main", &root]);
    let next = env.sw(&c, &["add", "a third task"]).ok().line();
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 1, "the runner went on:\n{}", o.stderr);
    for (id, title) in ids.iter().zip(["parse the input", "print the report"]) {
        assert!(o.stderr.contains(&format!("{id} ({title})")), "{id} not named:\n{}", o.stderr);
    }
    assert!(o.stderr.contains("--force-with-lease"), "no way back named:\n{}", o.stderr);
    assert!(!o.stderr.contains("agent started"), "it worked on a rewound target:\n{}", o.stderr);
    let t = show(&env, &c, &next);
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}");
    assert_eq!(env.git(&bare, &["rev-parse", "main"]), root, "something landed on it");
    // doctor: in the runner's clone, by what it saw; in the person's clone, by the done tasks' landed commits.
    for clone in [&c, &person] {
        let d = env.sw(clone, &["doctor"]);
        assert_eq!(d.code, 1, "{}", d.stdout);
        for id in &ids {
            assert!(d.stdout.contains(id.as_str()), "{} did not name {id}:\n{}", clone.display(), d.stdout);
        }
    }
    // Put back as the hint says (from the runner's clone, which still has the commits).
    let hint = o.stderr.lines().find(|l| l.contains("--force-with-lease")).expect("hint");
    let push = hint.split('`').nth(1).expect("a command in the hint");
    let args: Vec<&str> = push.split_whitespace().skip(1).collect();
    env.git(&c, &args);
    assert_eq!(env.git(&bare, &["rev-parse", "main"]), tip);
    env.sw(&c, &["doctor"]).ok();
    env.sw(&person, &["doctor"]).ok();
    env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]).ok();
    assert_eq!(show(&env, &c, &next)["status"], "done");
}

/// The same force-push, meant: `doctor --accept-remote` takes the target as it is (the finding fixed, exit 0) and
/// the runner works on it again; nothing of the tasks whose code went is redone by itself.
#[test]
fn doctor_accept_remote_takes_a_rewound_target_and_the_runner_goes_on() {
    let env = Env::new();
    let (bare, c) = swarm(&env, "echo \"$GIT_SWARM_TASK_ID\" > \"$GIT_SWARM_TASK_ID.txt\"", 3);
    let root = env.git(&bare, &["rev-parse", "main"]);
    let gone = env.sw(&c, &["add", "reverted on purpose"]).ok().line();
    env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]).ok();
    env.git(&bare, &["update-ref", "refs/heads/main", &root]);
    env.sw(&c, &["doctor"]).code(1);
    let d = env.sw(&c, &["doctor", "--accept-remote"]);
    assert_eq!(d.code, 0, "{}", d.stdout);
    assert!(d.stdout.contains("took main as it is"), "{}", d.stdout);
    env.sw(&c, &["doctor"]).ok();
    let next = env.sw(&c, &["add", "after the rewind"]).ok().line();
    env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]).ok();
    assert_eq!(show(&env, &c, &next)["status"], "done");
    assert_eq!(show(&env, &c, &gone)["status"], "done", "done is final");
    assert!(env.git_out(&bare, &["cat-file", "-e", &format!("main:{gone}.txt")]).code != 0, "its code came back");
}

/// A force-push that only rewrites (every landing is still there under a new commit) costs nobody's code: the runner
/// says so and goes on.
#[test]
fn a_rewrite_of_the_target_that_keeps_every_landing_is_said_and_taken() {
    let env = Env::new();
    let (bare, c) = swarm(&env, "echo \"$GIT_SWARM_TASK_ID\" > \"$GIT_SWARM_TASK_ID.txt\"", 3);
    let a = env.sw(&c, &["add", "one"]).ok().line();
    env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]).ok();
    // The same commit, rewritten (a new committer date): the landing's trailers are kept.
    let work = env.clone(&bare.display().to_string(), "rewriter");
    env.git_env(&work, &[("GIT_COMMITTER_DATE", "2026-02-02T00:00:00Z")], &["commit", "--amend", "--no-edit", "-q"]);
    env.git(&work, &["push", "-q", "--force", "origin", "HEAD:main"]);
    let b = env.sw(&c, &["add", "two"]).ok().line();
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("a rewrite"), "{}", o.stderr);
    assert_eq!(show(&env, &c, &b)["status"], "done");
    assert_eq!(show(&env, &c, &a)["status"], "done");
    env.sw(&c, &["doctor"]).ok();
}

/// `run worker --agents 8` SIGKILLed mid-batch, again and again: every restart starts (none is refused for a lock or
/// a pid file the killed process left), and in the end every task is done exactly once, its code on main once,
/// and `git fsck` is clean.
#[test]
fn sigkill_of_eight_agents_mid_batch_and_restart_always_starts_and_loses_nothing() {
    let env = Env::new();
    let config = format!(
        "lease = \"4s\"\nmax_attempts = 50\n[run]\nbatch_window = \"300ms\"\n[roles.worker]\nexec = {:?}\n",
        common::scripted_agent()
    );
    let (bare, clones) = env.swarm_with_config(common::file_url, 1, &config);
    let c = &clones[0];
    // Every push takes a moment on the remote: a kill finds a batch in flight.
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\ncat > /dev/null\nsleep 0.5\n").expect("hook");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let ids: Vec<String> = (0..32)
        .map(|i| {
            env.sw(c, &["add", &format!("file {i}"), "--body", &format!("@sleep 1\n@write f{i}.txt {i}")]).ok().line()
        })
        .collect();
    let run = ["run", "worker", "--agents", "8", "--until-idle"];
    for round in 0..8u64 {
        let mut child = env.spawn(c, "w", &[], &run);
        std::thread::sleep(Duration::from_millis(900 + 350 * (round % 5)));
        if let Ok(Some(status)) = child.try_wait() {
            let o = finish(child, 10, "an early exit");
            assert_eq!(status.code(), Some(0), "round {round}: the restart was refused:\n{}", o.stderr);
            continue;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let o = finish(env.spawn(c, "w", &[], &run), 300, "the last runner");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let list = tasks(&env, c);
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}\n{}", o.stderr);
    let log = env.sw(c, &["log", "--json"]).ok().json();
    let mut dones = std::collections::BTreeMap::<String, usize>::new();
    for e in log.as_array().into_iter().flatten() {
        let also = e["also"].as_array().cloned().unwrap_or_default();
        for (op, task) in std::iter::once((&e["op"], &e["task"])).chain(also.iter().map(|a| (&a["op"], &a["task"]))) {
            if op == "done" {
                *dones.entry(task.as_str().unwrap_or_default().to_string()).or_default() += 1;
            }
        }
    }
    for id in &ids {
        assert_eq!(dones.get(id), Some(&1), "{id} was done {:?} times", dones.get(id));
        assert_eq!(naming(&env, &bare, id).len(), 1, "{id}'s code is not on main once");
    }
    assert_eq!(env.git(&bare, &["rev-list", "--min-parents=2", "--count", "main"]), "0", "main has merges");
    for repo in [&bare, c] {
        let fsck = env.git_out(repo, &["fsck", "--no-dangling"]);
        assert_eq!(fsck.code, 0, "{}: {}", repo.display(), fsck.stderr);
    }
}
