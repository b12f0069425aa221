//! The open world: remotes that fail half of an update, refuse a branch, hang; agents that misbehave. Real git,
//! real remotes, real processes, real faults (an immutable reflog through `chattr`, pre-receive hooks).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common;
use crate::common::{Env, file_url, finish, path_url, scripted_agent, wait_until};
use serde_json::Value;

fn require_all() -> bool {
    std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1")
}

fn show(env: &Env, dir: &Path, id: &str) -> Value {
    env.sw(dir, &["show", id, "--json"]).ok().json()
}

/// Make a file immutable (`chattr +i`): every write to it fails, as on a full disk or a broken one. `None` when
/// this machine cannot (not root, or a filesystem without the flag): the test is skipped, unless CI requires it.
fn immutable(test: &str, file: &Path) -> Option<Immutable> {
    let ok = std::process::Command::new("chattr").arg("+i").arg(file).status().is_ok_and(|s| s.success());
    if ok {
        return Some(Immutable(file.to_path_buf()));
    }
    assert!(!require_all(), "{test}: chattr +i failed on {} and GIT_SWARM_REQUIRE_ALL=1", file.display());
    println!("{test}: skipped: chattr +i is not possible here (needs root and a filesystem that keeps the flag)");
    None
}

/// Undoes `chattr +i` when dropped (and on demand).
struct Immutable(PathBuf);

impl Immutable {
    fn lift(&self) {
        let _ = std::process::Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        self.lift();
    }
}

/// The commits on `main` of the bare remote that carry `Swarm-Task: <id>`.
fn landed_commits(env: &Env, bare: &Path, id: &str) -> Vec<String> {
    let log = env.git(bare, &["log", "--format=%H %(trailers:key=Swarm-Task,valueonly,separator=%x2C)", "main"]);
    log.lines().filter(|l| l.split_whitespace().nth(1) == Some(id)).map(|l| l[..40].to_string()).collect()
}

/// A swarm whose remote keeps a reflog of the state ref (so that a broken reflog fails the state ref's update at
/// commit time, after the branch's): the landing publishes half.
fn half_landing_swarm(
    env: &Env,
    url_of: impl Fn(&Path) -> String,
    exec: &str,
    max_attempts: u32,
) -> (PathBuf, PathBuf, String) {
    let bare = env.bare_remote("origin");
    env.git(&bare, &["config", "core.logAllRefUpdates", "always"]);
    let c = env.clone(&url_of(&bare), "c0");
    let cfg = env.path("swarm.toml");
    let toml = format!("lease = \"1m\"\nmax_attempts = {max_attempts}\n[roles.worker]\nexec = {exec:?}\n");
    std::fs::write(&cfg, toml).expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let id = env.sw(&c, &["add", "the task", "--body", "@write landed.txt once"]).ok().line();
    assert!(bare.join("logs/refs/swarm/default").is_file(), "the remote keeps no reflog of the state ref");
    (bare, c, id)
}

/// The worker's agent waits at a gate (a file) the test opens: the fault is put in place while it works.
fn gated(gate: &Path) -> String {
    format!("while [ ! -e '{}' ]; do sleep 0.05; done; {}", gate.display(), scripted_agent())
}

/// A worker (`w1`, `run worker --once`) whose landing has just published half: main holds the task's code, the
/// state ref's update failed (its reflog is immutable until `fault` is lifted or dropped). `None`: skipped.
struct HalfLanded {
    bare: PathBuf,
    c: PathBuf,
    id: String,
    worker: std::process::Child,
    fault: Immutable,
}

fn half_land(
    env: &Env,
    test: &str,
    url_of: fn(&Path) -> String,
    max_attempts: u32,
    stdio: fn() -> Stdio,
) -> Option<HalfLanded> {
    let gate = env.path("gate");
    let (bare, c, id) = half_landing_swarm(env, url_of, &gated(&gate), max_attempts);
    let before = env.git(&bare, &["rev-parse", "main"]);
    let mut cmd = env.cmd(&c);
    cmd.env("GIT_SWARM_MAX_RETRY_SECS", "60").args(["--agent", "w1", "run", "worker", "--once"]);
    let mut worker = cmd.stdout(stdio()).stderr(stdio()).spawn().expect("worker");
    wait_until(60, "the claim", || show(env, &c, &id)["status"] == "claimed");
    let Some(fault) = immutable(test, &bare.join("logs/refs/swarm/default")) else {
        let _ = worker.kill();
        let _ = worker.wait();
        return None;
    };
    std::fs::write(&gate, "").expect("open the gate");
    wait_until(60, "main to move", || env.git(&bare, &["rev-parse", "main"]) != before);
    Some(HalfLanded { bare, c, id, worker, fault })
}

/// A landing whose state half fails — the branch moved, the state ref did not (seen on a full disk: the remote's
/// reflog write failed after main's update) — is finished by the worker's own retry with `done`, never landed a
/// second time. Over `git push --atomic` (file://) and the in-process transaction (a path).
#[test]
fn a_half_published_landing_rolls_forward_on_the_workers_retry() {
    for (name, url_of) in [("file", file_url as fn(&Path) -> String), ("path", path_url as fn(&Path) -> String)] {
        let test = format!("a_half_published_landing_rolls_forward_on_the_workers_retry ({name})");
        let env = Env::new();
        let Some(HalfLanded { bare, c, id, worker, fault }) = half_land(&env, &test, url_of, 3, Stdio::piped) else {
            return;
        };
        // The state half failed: the task is still claimed while its code is on main.
        assert_eq!(show(&env, &c, &id)["status"], "claimed", "{test}: the fault did not bite");
        std::thread::sleep(Duration::from_millis(500));
        fault.lift();
        let out = finish(worker, 120, "the worker");
        assert_eq!(out.code, 0, "{test}: {}", out.stderr);
        assert!(out.stderr.contains("rolled"), "{test}: {}", out.stderr);
        let t = show(&env, &c, &id);
        assert_eq!(t["status"], "done", "{test}: {t}");
        let landed = landed_commits(&env, &bare, &id);
        assert_eq!(landed.len(), 1, "{test}: the code landed {} times", landed.len());
        assert_eq!(t["result"]["commit"].as_str(), Some(landed[0].as_str()), "{test}");
        assert_eq!(t["attempts"], 0, "{test}: no attempt spent");
    }
}

/// The same fault, and the worker dies before it can finish: the next worker to claim the task finds its code on
/// main and finishes it with `done` instead of running an agent again (the code would land twice).
#[test]
fn the_next_claimant_rolls_a_half_published_landing_forward() {
    holder_dies_after_half_landing("the_next_claimant_rolls_a_half_published_landing_forward", 3);
}

/// The same, with no attempt left after the dead holder's: the next worker's claim sweeps the expired claim — as
/// done, with the commit on main, not as failed (the model check found this one).
#[test]
fn a_sweep_finishes_a_half_published_landing_whose_attempts_are_spent() {
    holder_dies_after_half_landing("a_sweep_finishes_a_half_published_landing_whose_attempts_are_spent", 1);
}

fn holder_dies_after_half_landing(name: &str, max_attempts: u32) {
    for (remote, url_of) in [("file", file_url as fn(&Path) -> String), ("path", path_url as fn(&Path) -> String)] {
        let test = format!("{name} ({remote})");
        let env = Env::new();
        let Some(HalfLanded { bare, c, id, mut worker, fault }) =
            half_land(&env, &test, url_of, max_attempts, Stdio::null)
        else {
            return;
        };
        // The holder dies while it retries, with every process it started (an orphaned `git push` of its retry
        // could still finish the task), as when its machine dies: frozen first, so that it starts no more.
        use nix::sys::signal::Signal;
        common::procs::signal(worker.id(), Signal::SIGSTOP);
        for p in common::procs::descendants(&[worker.id()], &common::procs::all()) {
            common::procs::signal(p.pid, Signal::SIGKILL);
        }
        let _ = worker.kill();
        let _ = worker.wait();
        // Killed in the middle of an in-process update, it may leave the remote's ref lock behind: what a person
        // removes after a machine died (`doctor` names it); not what this test is about.
        let _ = std::fs::remove_file(bare.join("refs/swarm/default.lock"));
        fault.lift();
        assert_eq!(show(&env, &c, &id)["status"], "claimed", "{test}");
        // Another worker, later than the lease: it takes the task over (or sweeps it); its agent would land a
        // second copy.
        let out = env.sw_env(
            &c,
            &[("GIT_SWARM_CLOCK_OFFSET", "120")],
            &["--agent", "w2", "run", "worker", "--once", "--exec", "echo again >> landed.txt"],
        );
        if max_attempts > 1 {
            assert_eq!(out.code, 0, "{test}: {}", out.stderr);
        }
        assert!(!out.stderr.contains("agent started"), "{test}: the agent ran again:\n{}", out.stderr);
        let t = show(&env, &c, &id);
        assert_eq!(t["status"], "done", "{test}: {t}");
        let landed = landed_commits(&env, &bare, &id);
        assert_eq!(landed.len(), 1, "{test}: the code landed {} times", landed.len());
        assert_eq!(t["result"]["commit"].as_str(), Some(landed[0].as_str()), "{test}");
        assert_eq!(env.git(&bare, &["show", "main:landed.txt"]), "once", "{test}");
    }
}

/// `run worker --once` as `agent` in `clone`, started, its output piped.
fn once(env: &Env, clone: &Path, agent: &str) -> std::process::Child {
    env.cmd(clone)
        .args(["--agent", agent, "run", "worker", "--once"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker")
}

/// A clone of a fresh swarm (a plain-path remote) whose workers run `exec`, and one task for them.
fn one_task_swarm(env: &Env, exec: &str, max_attempts: u32) -> (PathBuf, PathBuf, String) {
    task_swarm(env, exec, max_attempts, "")
}

/// [`one_task_swarm`] whose agents run uncontained (`[run] sandbox = "off"`): the nets for a machine without a
/// sandbox (the git directory's guard, a work tree deleted under the runner), or an agent that keeps state in its
/// home between runs.
fn uncontained_task_swarm(env: &Env, exec: &str, max_attempts: u32) -> (PathBuf, PathBuf, String) {
    task_swarm(env, exec, max_attempts, "[run]\nsandbox = \"off\"\n")
}

fn task_swarm(env: &Env, exec: &str, max_attempts: u32, more: &str) -> (PathBuf, PathBuf, String) {
    let config = format!("lease = \"1m\"\nmax_attempts = {max_attempts}\n{more}[roles.worker]\nexec = {exec:?}\n");
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = clones.into_iter().next().expect("a clone");
    let id = env.sw(&c, &["add", "the task"]).ok().line();
    (bare, c, id)
}

/// `config set target` with a name git would refuse is refused before any push, and a target of that kind that
/// reached the ref another way (a hand-made commit) stops a runner before it claims, naming the setting.
#[test]
fn a_target_that_is_not_a_branch_is_refused_when_set_and_when_met() {
    let env = Env::new();
    let (bare, c, id) = one_task_swarm(&env, "echo x > f.txt", 3);
    let before = env.rev(&bare, "refs/swarm/default");
    for bad in ["swarm/../x", "-x", "a..b", "HEAD", "x.lock", "refs/heads/main", "a b"] {
        let o = env.sw(&c, &["config", "set", "--", "target", bad]).code(2);
        assert!(o.stderr.contains("target") && o.stderr.contains("not a branch name"), "{bad}: {}", o.stderr);
    }
    assert_eq!(env.rev(&bare, "refs/swarm/default"), before, "nothing was pushed");
    env.sw(&c, &["config", "set", "target", "swarm/release-1.2"]).ok();
    env.sw(&c, &["config", "set", "target", "main"]).ok();
    // A collaborator pushes a board whose target is `swarm/../x`, with plain git.
    edit_state_by_hand(&env, &c, |side| {
        let toml = std::fs::read_to_string(side.join("swarm.toml")).expect("swarm.toml");
        let edited = toml.replace("target = \"main\"", "target = \"swarm/../x\"");
        assert_ne!(edited, toml, "{toml}");
        std::fs::write(side.join("swarm.toml"), edited).expect("write");
    });
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("swarm/../x") && o.stderr.contains("config set target"), "{}", o.stderr);
    assert!(!o.stderr.contains("claimed"), "{}", o.stderr);
    assert_eq!(show(&env, &c, &id)["status"], "open");
    // And it can be mended from the CLI.
    env.sw(&c, &["config", "set", "target", "main"]).ok();
}

/// A hand-off "file" that is a symlink to `/dev/zero`, a FIFO nobody writes, or a symlink to a secret of the
/// user's is not read: the runner neither blocks nor fills its memory, and the secret does not reach the board.
#[test]
fn a_hand_off_that_is_not_a_regular_file_is_not_read() {
    for (what, plant) in [
        ("/dev/zero", "ln -sf /dev/zero \"$GIT_SWARM_HANDOFF_FILE\""),
        ("a FIFO", "rm -f \"$GIT_SWARM_HANDOFF_FILE\"; mkfifo \"$GIT_SWARM_HANDOFF_FILE\""),
        ("a secret", "ln -sf \"$HOME/secret-key\" \"$GIT_SWARM_HANDOFF_FILE\""),
    ] {
        let env = Env::new();
        std::fs::write(env.home.join("secret-key"), "PRIVATE-KEY-MATERIAL\n").expect("secret");
        let exec = format!("echo work > work.txt; {plant}");
        let (bare, c, id) = one_task_swarm(&env, &exec, 3);
        let out = finish(once(&env, &c, "w1"), 60, what);
        assert_eq!(out.code, 0, "{what}: {}", out.stderr);
        assert!(out.stderr.contains("hand-off not read"), "{what}: {}", out.stderr);
        let t = show(&env, &c, &id);
        assert_eq!(t["status"], "done", "{what}: {t}");
        assert_eq!(landed_commits(&env, &bare, &id).len(), 1, "{what}");
        let board = env.git(&bare, &["log", "-p", "refs/swarm/default"]);
        assert!(!board.contains("PRIVATE-KEY-MATERIAL"), "{what}: the secret reached the state ref");
    }
}

/// An agent that exits 0 but says `Status: failed: <reason>` in its hand-off (the status line the worker prompt
/// asks for) fails its task with that reason: an attempt is spent, its change is kept aside, nothing lands.
#[test]
fn a_hand_off_that_says_failed_fails_the_task_and_keeps_the_work() {
    let env = Env::new();
    let exec = "echo half > half.txt; git add half.txt; git commit -qm half; \
                printf 'Status: failed: the API is down\\n\\n## What was done\\n- half of it\\n' > \"$GIT_SWARM_HANDOFF_FILE\"";
    let (bare, c, id) = one_task_swarm(&env, exec, 3);
    let before = env.git(&bare, &["rev-parse", "main"]);
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 1, "--once exits 1 when its task did not land: {}", o.stderr);
    let t = show(&env, &c, &id);
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(1)), "{t}");
    let reason = t["failures"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("the API is down"), "{t}");
    assert_eq!(env.git(&bare, &["rev-parse", "main"]), before, "nothing landed");
    let kept = env.git(&bare, &["for-each-ref", "--format=%(refname)", "refs/swarm-work/"]);
    assert!(kept.lines().any(|r| r.contains(&id)), "the work is kept aside: {kept:?}");
    let kept_ref = kept.lines().find(|r| r.contains(&id)).expect("kept");
    assert_eq!(env.git(&bare, &["show", &format!("{kept_ref}:half.txt")]), "half");
    assert!(t["handoff"].as_str().unwrap_or_default().contains("half of it"), "the hand-off is the note: {t}");
}

/// A second `run worker` with the agent id of a live runner of the same clone refuses to start, and leaves the
/// first runner's agent and work tree alone; once the first has ended, the id is free again.
#[test]
fn a_second_runner_with_a_live_runners_agent_id_is_refused() {
    let env = Env::new();
    let gate = env.path("gate");
    let exec = format!("while [ ! -e '{}' ]; do sleep 0.05; done; echo one > one.txt", gate.display());
    let (bare, c, id) = one_task_swarm(&env, &exec, 3);
    env.sw(&c, &["add", "a second task"]).ok();
    let first = once(&env, &c, "w1");
    wait_until(60, "the claim", || show(&env, &c, &id)["status"] == "claimed");
    let tree = env.places(&c).worktree("w1");
    wait_until(60, "the work tree", || tree.is_dir());
    let second = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(second.code, 1, "{}", second.stderr);
    assert!(second.stderr.contains("already runs"), "{}", second.stderr);
    assert!(second.stderr.contains("--agent"), "the hint names the way out: {}", second.stderr);
    assert!(tree.is_dir(), "the live runner's work tree was removed");
    std::fs::write(&gate, "").expect("open the gate");
    let out = finish(first, 60, "the first runner");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(landed_commits(&env, &bare, &id).len(), 1);
    // The id is free once its runner has ended (however it ended: the lock goes with the process).
    env.sw(&c, &["--agent", "w1", "run", "worker", "--once", "--exec", "echo two > two.txt"]).ok();
}

/// The values of the runner's secrets — by name (`MYSQL_PWD`, `DB_PASS`, an API key) and by value (a webhook URL
/// with its secret in the path, under an innocent name) — never reach the agent's log (0600), the runner's
/// messages, the state ref or the HTML board, however the agent prints them.
#[test]
fn secrets_an_agent_echoes_are_scrubbed_from_logs_the_ref_and_the_board() {
    let env = Env::new();
    let secrets = [
        ("MYSQL_PWD", "my-sql-pw-8f3k2"),
        ("DB_PASS", "db-pass-77x1q"),
        ("MODEL_API_KEY", "mk-abcdef0123456789"),
        ("ALERTS", "https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/q1w2e3r4t5y6u7i8o9p0asdf"),
    ];
    // It prints them on stdout and stderr (split across writes), in its hand-off and in its last lines (the
    // failure reason), then fails.
    let exec = "printf 'pw=%s' \"$MYSQL_PWD\"; printf ' and %s\\n' \"$DB_PASS\"; echo \"key $MODEL_API_KEY\" >&2; \
                echo \"hook $ALERTS\"; printf 'Status: done\\n%s %s %s\\n' \"$MYSQL_PWD\" \"$MODEL_API_KEY\" \"$ALERTS\" \
                > \"$GIT_SWARM_HANDOFF_FILE\"; echo \"bye $DB_PASS $ALERTS\"; exit 3";
    let (bare, c, id) = one_task_swarm(&env, exec, 1);
    // An agent gets only the variables a role names: these are named, on purpose (and still scrubbed).
    env.sw(&c, &["config", "set", "roles.worker.env", "[\"MYSQL_PWD\", \"DB_PASS\", \"MODEL_API_KEY\", \"ALERTS\"]"])
        .ok();
    let o = env.sw_env(&c, &secrets, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(show(&env, &c, &id)["status"], "failed");
    let log = c.join(".git/swarm/logs/w1.log");
    let text = std::fs::read_to_string(&log).expect("the agent's log");
    assert!(text.contains("pw=[redacted] and [redacted]"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&log).expect("log").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the log is its owner's alone");
    let board = env.git(&bare, &["log", "-p", "refs/swarm/default"]);
    let html = env.sw(&c, &["board", "--html", "-"]).ok().stdout;
    for (name, value) in secrets {
        let secret_part = value.rsplit('/').next().unwrap_or(value);
        for (place, haystack) in [("log", &text), ("runner", &o.stderr), ("state ref", &board), ("board", &html)] {
            assert!(!haystack.contains(secret_part), "{name} reached the {place}:\n{haystack}");
        }
    }
    assert!(board.contains("[redacted]"), "the failure reason kept its shape");
}

/// A remote that refuses every push to the target (a protected branch: here a pre-receive hook with a message of
/// its own): each landing counts as an attempt, its reason names the branch and the remote's message, the work is
/// kept aside, and the runner goes on with the other tasks until they have all run out of attempts — it never
/// loops on one, and ends (exit 0, idle).
#[test]
fn a_branch_the_remote_refuses_spends_attempts_and_the_runner_goes_on() {
    let env = Env::new();
    let config =
        "lease = \"1m\"\nmax_attempts = 2\n[roles.worker]\nexec = \"echo work >> \\\"w-$GIT_SWARM_TASK_ID\\\"\"\n";
    let (bare, clones) = env.swarm_with_config(file_url, 1, config);
    let c = &clones[0];
    let a = env.sw(c, &["add", "task a"]).ok().line();
    let b = env.sw(c, &["add", "task b"]).ok().line();
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do\n  if [ \"$ref\" = refs/heads/main ]; then\n    \
         echo \"GH006: Protected branch update failed for $ref.\" >&2; exit 1\n  fi\ndone\nexit 0\n",
    )
    .expect("hook");
    std::process::Command::new("chmod").arg("+x").arg(&hook).status().expect("chmod");
    let before = env.git(&bare, &["rev-parse", "main"]);
    let worker = env
        .cmd(c)
        .args(["--agent", "w1", "run", "worker", "--until-idle"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker");
    let out = finish(worker, 120, "the worker");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(env.git(&bare, &["rev-parse", "main"]), before, "nothing landed");
    for id in [&a, &b] {
        let t = show(&env, c, id);
        assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("failed"), Some(2)), "{t}");
        let reason = t["failures"][0]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("refs/heads/main") && reason.contains("GH006"), "{reason}");
    }
    let kept = env.git(&bare, &["for-each-ref", "--format=%(refname)", "refs/swarm-work/"]);
    assert!(kept.contains(&a) && kept.contains(&b), "the work is kept aside: {kept}");
}

/// An agent that deletes its own work tree's `.git` (or the whole tree) fails its task — an attempt — and the
/// runner makes a fresh work tree for the next task instead of exiting and leaving the task to the next runner,
/// which would meet the same agent.
#[test]
fn an_agent_that_deletes_its_work_tree_fails_its_task_and_the_runner_goes_on() {
    for (what, exec) in [
        (".git", "case \"$GIT_SWARM_TASK_TITLE\" in wreck*) rm -rf .git ;; *) echo ok > ok.txt ;; esac"),
        ("the tree", "case \"$GIT_SWARM_TASK_TITLE\" in wreck*) rm -rf \"$PWD\" ;; *) echo ok > ok.txt ;; esac"),
    ] {
        let env = Env::new();
        // Uncontained: in a sandbox the work tree is a mount point the agent cannot remove.
        let config =
            format!("lease = \"1m\"\nmax_attempts = 1\n[run]\nsandbox = \"off\"\n[roles.worker]\nexec = {exec:?}\n");
        let (bare, clones) = env.swarm_with_config(path_url, 1, &config);
        let c = clones.into_iter().next().expect("a clone");
        let wreck = env.sw(&c, &["add", "wreck it"]).ok().line();
        let fine = env.sw(&c, &["add", "fine task"]).ok().line();
        let out = env.sw(&c, &["--agent", "w1", "run", "worker", "--until-idle"]);
        assert_eq!(out.code, 0, "{what}: {}", out.stderr);
        let t = show(&env, &c, &wreck);
        assert_eq!(t["status"], "failed", "{what}: {t}");
        let reason = t["failures"][0]["reason"].as_str().unwrap_or_default();
        // A deleted `.git` link costs the agent its commits, not the runner its work (it reads the agent's git
        // directory, not the link): nothing to land; a deleted tree is said as such.
        let why = if what == ".git" { "without changing anything" } else { "work tree" };
        assert!(reason.contains(why), "{what}: {reason}");
        assert_eq!(show(&env, &c, &fine)["status"], "done", "{what}");
        assert_eq!(landed_commits(&env, &bare, &fine).len(), 1, "{what}");
    }
}

/// Check out the state ref of `clone`'s remote in a side work tree, let `edit` change its files, and push the result
/// with plain git: what a collaborator with push access can do to `refs/swarm/default`.
fn edit_state_by_hand(env: &Env, clone: &Path, edit: impl FnOnce(&Path)) {
    let side = env.path(&format!("side-{}", unique()));
    env.git(clone, &["fetch", "-q", "origin", "refs/swarm/default"]);
    env.git(clone, &["worktree", "add", "-q", "--detach", side.to_str().expect("utf-8"), "FETCH_HEAD"]);
    edit(&side);
    env.git(&side, &["commit", "-qam", "edited by hand"]);
    env.git(&side, &["push", "-q", "origin", "HEAD:refs/swarm/default"]);
}

fn unique() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// A dependency cycle made by hand on the state ref: `doctor` names it, `add` refuses a task that would wait on it,
/// and the cycle's end counts its tasks as blocked — the judge speaks at once instead of waiting for `max_time`.
#[test]
fn a_dependency_cycle_made_by_hand_is_found_and_does_not_hold_the_cycle_open() {
    let env = Env::new();
    let (_bare, c, x) = one_task_swarm(&env, "echo x >> x.txt", 3);
    let a = env.sw(&c, &["add", "task a"]).ok().line();
    let b = env.sw(&c, &["add", "task b", "--after", &a]).ok().line();
    env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]).ok();
    assert_eq!(show(&env, &c, &x)["status"], "done");
    // A's file is made to wait on B: a → b → a.
    edit_state_by_hand(&env, &c, |side| {
        let files = env.git(side, &["ls-files", "tasks"]);
        let file = files.lines().find(|f| f.ends_with(&format!("{a}.toml"))).expect("a's file");
        let text = std::fs::read_to_string(side.join(file)).expect("read");
        let edited = if text.contains("deps = []") {
            text.replace("deps = []", &format!("deps = [\"{b}\"]"))
        } else {
            format!("deps = [\"{b}\"]\n{text}")
        };
        std::fs::write(side.join(file), edited).expect("write");
    });
    assert_eq!(show(&env, &c, &a)["deps"][0], b.as_str(), "the hand edit took");
    let doctor = env.sw(&c, &["doctor"]);
    assert!(doctor.stdout.contains("cycle") || doctor.stderr.contains("cycle"), "{}{}", doctor.stdout, doctor.stderr);
    let o = env.sw(&c, &["add", "task c", "--after", &a]).code(4);
    assert!(o.stderr.contains("cycle") && o.stderr.contains(&b), "{}", o.stderr);
    // The judge: x is done, a and b can never run — the cycle is over.
    let judge = env.sw(&c, &["--agent", "j1", "run", "judge", "--once", "--exec", "echo 'verdict: stop'"]);
    assert_eq!(judge.code, 0, "{}", judge.stderr);
    let status = env.sw(&c, &["status", "--json"]).ok().json();
    assert_eq!(status["stopped"]["by"], "j1", "the judge stopped the swarm: {status}");
}

/// Work kept aside is kept per attempt (`…/<id>/<epoch>`: a later attempt does not overwrite an earlier one's), and
/// once the task lands, `doctor --fix` and `compact` delete what was kept of it.
#[test]
fn kept_work_is_kept_per_attempt_and_pruned_once_the_task_lands() {
    let env = Env::new();
    // Each task fails twice (saying so in its hand-off), then lands.
    let exec = "f=\"$HOME/tries-$GIT_SWARM_TASK_ID\"; n=$(cat \"$f\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$f\"; \
                echo \"try $n\" > \"$GIT_SWARM_TASK_ID.txt\"; \
                if [ $n -lt 3 ]; then printf 'Status: failed: try %s\\n' $n > \"$GIT_SWARM_HANDOFF_FILE\"; fi";
    let (bare, c, a) = uncontained_task_swarm(&env, exec, 3);
    let kept = |env: &Env| env.git(&bare, &["for-each-ref", "--format=%(refname)", "refs/swarm-work/"]);
    let run = |env: &Env| env.sw(&c, &["--agent", "w1", "run", "worker", "--until-idle"]).ok();
    run(&env);
    assert_eq!(show(&env, &c, &a)["status"], "done");
    let refs = kept(&env);
    assert_eq!(
        refs.lines().collect::<Vec<_>>(),
        [format!("refs/swarm-work/default/{a}/1"), format!("refs/swarm-work/default/{a}/2")]
    );
    for (n, r) in refs.lines().enumerate() {
        assert_eq!(env.git(&bare, &["show", &format!("{r}:{a}.txt")]), format!("try {}", n + 1), "{r}");
    }
    let doctor = env.sw(&c, &["doctor"]);
    assert!(doctor.stdout.contains("done since"), "{}", doctor.stdout);
    env.sw(&c, &["doctor", "--fix"]);
    assert_eq!(kept(&env), "", "doctor --fix deleted the kept work of the task that landed");
    // And compact does the same.
    let b = env.sw(&c, &["add", "task b"]).ok().line();
    run(&env);
    assert_eq!(show(&env, &c, &b)["status"], "done");
    assert_eq!(kept(&env).lines().count(), 2);
    let o = env.sw(&c, &["compact", "--json"]).ok().json();
    assert_eq!(o["pruned"].as_array().map(Vec::len), Some(2), "{o}");
    assert_eq!(kept(&env), "");
}

/// An agent that runs `git swarm done` (or `release`, `fail`, `claim`) under its runner's id is refused (exit 4):
/// the task is not done without its code, the runner lands it as ever.
#[test]
fn an_agent_cannot_finish_or_give_back_its_runners_claim() {
    let env = Env::new();
    let exec = "for op in done release fail claim; do \
                  case $op in claim) \"$GIT_SWARM_BIN\" claim ;; fail) \"$GIT_SWARM_BIN\" fail \"$GIT_SWARM_TASK_ID\" --reason x ;; \
                  *) \"$GIT_SWARM_BIN\" $op \"$GIT_SWARM_TASK_ID\" ;; esac; \
                  echo \"rc=$?\"; done > ops.out 2>&1; echo work > w.txt";
    let (bare, c, id) = one_task_swarm(&env, exec, 3);
    env.sw(&c, &["add", "another task"]).ok();
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // (What the agent tried lands with its work: its home is its own, in a sandbox.)
    let ops = env.git(&bare, &["show", "main:ops.out"]);
    assert_eq!(ops.matches("rc=4").count(), 4, "{ops}");
    assert!(ops.contains("is the agent id of a runner"), "{ops}");
    let t = show(&env, &c, &id);
    assert_eq!(t["status"], "done", "{t}");
    let landed = landed_commits(&env, &bare, &id);
    assert_eq!(landed.len(), 1);
    assert_eq!(t["result"]["commit"].as_str(), Some(landed[0].as_str()), "done with its code: {t}");
    // Once the runner is gone, the id is anybody's again.
    let next = env.sw(&c, &["--agent", "w1", "claim", "--json"]).ok().json();
    assert_eq!(next["title"], "another task");
}

/// A remote whose pre-receive hook hangs when main is pushed: writes `marker` first, then sleeps `secs`.
fn hanging_hook(env: &Env, marker: &Path, secs: u32) -> (PathBuf, PathBuf, String) {
    let config = "lease = \"1m\"\nmax_attempts = 3\n[roles.worker]\nexec = \"echo work > w.txt\"\n";
    let (bare, clones) = env.swarm_with_config(file_url, 1, config);
    let c = clones.into_iter().next().expect("a clone");
    let id = env.sw(&c, &["add", "the task"]).ok().line();
    let hook = bare.join("hooks/pre-receive");
    let script = format!(
        "#!/bin/sh\nif grep -q ' refs/heads/main$'; then touch '{}'; exec sleep {secs}; fi\nexit 0\n",
        marker.display()
    );
    std::fs::write(&hook, script).expect("hook");
    std::process::Command::new("chmod").arg("+x").arg(&hook).status().expect("chmod");
    (bare, c, id)
}

fn sleeping(secs: u32) -> usize {
    common::procs::all().iter().filter(|p| common::procs::cmdline(p.pid) == format!("sleep {secs}")).count()
}

/// SIGTERM while a landing's push hangs in the remote's hook: the runner ends within seconds (the push, with the
/// hook it started, is killed after a short grace), instead of waiting on the hook for ever.
#[test]
fn sigterm_ends_a_runner_whose_push_hangs_in_a_remote_hook() {
    let env = Env::new();
    let marker = env.path("hook-started");
    let (_bare, c, _id) = hanging_hook(&env, &marker, 3917);
    let left_before = sleeping(3917);
    let worker = once(&env, &c, "w1");
    wait_until(60, "the hook to hang", || marker.exists());
    let sent = std::time::Instant::now();
    common::procs::signal(worker.id(), nix::sys::signal::Signal::SIGTERM);
    let out = finish(worker, 60, "the stopped runner");
    assert!(sent.elapsed() < Duration::from_secs(30), "took {:?} after SIGTERM:\n{}", sent.elapsed(), out.stderr);
    assert_ne!(out.code, 0, "{}", out.stderr);
    wait_until(10, "the hook's sleep to end with the push", || sleeping(3917) <= left_before);
}

/// A push that hangs in the remote's hook ends at the time limit (`GIT_SWARM_GIT_TIMEOUT`): an error that names
/// it, the work kept aside, the hook's processes gone — not a runner blocked for ever.
#[test]
fn a_push_that_hangs_in_a_remote_hook_ends_at_the_time_limit() {
    let env = Env::new();
    let marker = env.path("hook-started");
    let (_bare, c, id) = hanging_hook(&env, &marker, 3918);
    let left_before = sleeping(3918);
    let started = std::time::Instant::now();
    let out = env.sw_env(&c, &[("GIT_SWARM_GIT_TIMEOUT", "1")], &["--agent", "w1", "run", "worker", "--once"]);
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("did not finish within"), "{}", out.stderr);
    assert!(marker.exists());
    assert!(sleeping(3918) <= left_before, "the hook's processes outlived the push");
    // Nothing landed, the claim was given back.
    assert_eq!(show(&env, &c, &id)["status"], "open");
}

/// An agent that plants a clean filter in the shared `.git/config` (and hooks it to every path): the runner's own
/// `git add` after the agent exits does not run it, and the clone's config is put back as it was (the agent's
/// version kept for a person to look at).
#[test]
fn config_an_agent_plants_in_the_git_directory_never_runs_in_the_runners_git() {
    let env = Env::new();
    let pwned = env.home.join("pwned");
    // Uncontained, the agent reaches the clone's git directory by its path (its own git directory is a copy in its
    // run folder). In a sandbox it cannot see the clone's at all: tests/contained.rs.
    let clone_git = env.path("c0/.git");
    let exec = format!(
        "g={g}; git config --file \"$g/config\" filter.evil.clean 'touch {p} ; cat' && \
         git config --file \"$g/config\" filter.evil.required false && mkdir -p \"$g/info\" && \
         echo '* filter=evil' > \"$g/info/attributes\" && echo work > w.txt",
        g = clone_git.display(),
        p = pwned.display()
    );
    let (bare, c, id) = uncontained_task_swarm(&env, &exec, 3);
    assert_eq!(c.join(".git"), clone_git, "the clone the agent writes into");
    let config_before = std::fs::read_to_string(c.join(".git/config")).expect("config");
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!pwned.exists(), "the runner's git ran the filter the agent planted");
    assert!(o.stderr.contains("the agent changed"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(c.join(".git/config")).expect("config"), config_before);
    assert!(!c.join(".git/info/attributes").exists());
    let kept = std::fs::read_dir(c.join(".git/swarm/planted")).expect("kept").count();
    assert_eq!(kept, 2, "the agent's config and attributes are kept");
    assert_eq!(show(&env, &c, &id)["status"], "done");
    assert_eq!(landed_commits(&env, &bare, &id).len(), 1);
}

/// An agent that leaves a `setsid` daemon behind (out of its process group, writing into the work tree): the
/// daemon ends with the agent's run, and nothing it writes reaches the next task's commit.
#[test]
fn a_daemon_an_agent_leaves_behind_ends_with_its_run() {
    let env = Env::new();
    // The first task's agent starts a daemon (known by its sleep of 0.3931 s) that leaves the work tree for `/`
    // (so that only its run's mark finds it) and appends to the work tree's leak.txt.
    // The second task's agent takes a second: time for a daemon that survived to write into its work.
    let exec = "case \"$GIT_SWARM_TASK_TITLE\" in \
                first*) setsid sh -c 'cd /; while :; do sleep 0.3931; echo leak >> \"$0/leak.txt\"; done' \"$PWD\" \
                        </dev/null >/dev/null 2>&1 & ;; \
                *) sleep 1 ;; esac; echo \"$GIT_SWARM_TASK_TITLE\" > \"$GIT_SWARM_TASK_ID.txt\"";
    let config = format!("lease = \"1m\"\nmax_attempts = 3\n[roles.worker]\nexec = {exec:?}\n");
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = clones.into_iter().next().expect("a clone");
    let first = env.sw(&c, &["add", "first task"]).ok().line();
    let second = env.sw(&c, &["add", "second task", "--after", &first]).ok().line();
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--until-idle"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for id in [&first, &second] {
        assert_eq!(show(&env, &c, id)["status"], "done", "{id}");
        let landed = landed_commits(&env, &bare, id);
        let files = env.git(&bare, &["show", "--name-only", "--format=", &landed[0]]);
        assert!(!files.contains("leak.txt"), "{id}'s commit holds the daemon's file: {files}");
    }
    let alive = common::procs::all().iter().filter(|p| common::procs::cmdline(p.pid).contains("0.3931")).count();
    assert_eq!(alive, 0, "the daemon outlived the agent's run");
}

/// `doctor --fix` on a deleted state ref, from a clone that saw an older board (a task still open that has landed
/// since): the board is put back, and the task whose code is on main is finished as done — a worker then has
/// nothing to redo, the code lands once.
#[test]
fn doctor_restoring_an_older_board_finishes_what_landed_since() {
    let env = Env::new();
    let config = "lease = \"1m\"\nmax_attempts = 3\n[roles.worker]\nexec = \"echo once >> landed.txt\"\n";
    let (bare, clones) = env.swarm_with_config(file_url, 2, config);
    let (old, new) = (&clones[0], &clones[1]);
    let id = env.sw(old, &["add", "the task"]).ok().line();
    assert_eq!(show(&env, old, &id)["status"], "open", "the old clone saw it open");
    // The other clone lands it; the old clone does not look.
    env.sw(new, &["--agent", "w2", "run", "worker", "--once"]).ok();
    assert_eq!(landed_commits(&env, &bare, &id).len(), 1);
    // The state ref is deleted on the remote.
    env.git(&bare, &["update-ref", "-d", "refs/swarm/default"]);
    let o = env.sw(old, &["doctor", "--fix"]);
    assert!(o.stdout.contains("put refs/swarm/default back"), "{}", o.stdout);
    assert!(o.stdout.contains("their code is on the target"), "{}", o.stdout);
    let t = show(&env, old, &id);
    assert_eq!(t["status"], "done", "{t}");
    let landed = landed_commits(&env, &bare, &id);
    assert_eq!(t["result"]["commit"].as_str(), Some(landed[0].as_str()), "{t}");
    // Nothing to redo.
    let w = env.sw(old, &["--agent", "w1", "run", "worker", "--once"]);
    assert_eq!(w.code, 3, "{}", w.stderr);
    assert_eq!(landed_commits(&env, &bare, &id).len(), 1, "the code landed once");
    assert_eq!(env.git(&bare, &["show", "main:landed.txt"]), "once");
}

/// A root commit whose trailers claim a compaction of the tip (`Swarm-Compacted-From: <tip>`) but whose tree is an
/// older board is refused by every clone that saw the tip — without its archive ref, with an archive ref that holds
/// the tip but a tree that is not the tip's, and with a trailer naming a ref that is no archive of this swarm (never
/// fetched or read). A real compaction's root (same tree, archive in place) is taken.
#[test]
fn a_forged_compaction_is_refused_and_a_real_one_taken() {
    for (name, url_of) in [("file", file_url as fn(&Path) -> String), ("path", path_url as fn(&Path) -> String)] {
        let env = Env::new();
        let (bare, clones) = env.swarm_with_clones(url_of, 1);
        let c = &clones[0];
        let id = env.sw(c, &["add", "the task"]).ok().line();
        env.sw(c, &["--agent", "a1", "claim", &id]).ok();
        env.sw(c, &["list"]).ok();
        let tip = env.git(&bare, &["rev-parse", "refs/swarm/default"]);
        let forge = |tree: &str, from: &str, archive: &str| {
            let msg = format!(
                "compact\n\nSwarm-Op: compact\nSwarm-Agent: mallory\nSwarm-Compacted-From: {from}\n\
                 Swarm-Archive: {archive}\n"
            );
            env.git(&bare, &["commit-tree", tree, "-m", &msg])
        };
        let root_of = |tree: &str| forge(tree, &tip, "refs/swarm-archive/default/1");
        // The board before the claim, dressed as a compaction of the tip.
        let forged = root_of(&format!("{tip}~1^{{tree}}"));
        env.git(&bare, &["update-ref", "refs/swarm/default", &forged]);
        for archive in [false, true] {
            if archive {
                env.git(&bare, &["update-ref", "refs/swarm-archive/default/1", &tip]);
            }
            let o = env.sw(c, &["list"]);
            assert_eq!(o.code, 1, "{name}, archive {archive}: the forged root was taken:\n{}{}", o.stdout, o.stderr);
            assert!(o.stderr.contains("replaced"), "{name}: {}", o.stderr);
        }
        // A trailer naming a ref that is no archive of this swarm (not even a valid ref name) is not followed,
        // fetched or read: the same refusal.
        // It claims to compact a commit nobody has, so that only its archive could show that history.
        let nowhere = "1".repeat(40);
        for archive in ["refs/swarm-archive/default/x/../1", "refs/heads/1"] {
            let odd = forge(&format!("{tip}~1^{{tree}}"), &nowhere, archive);
            env.git(&bare, &["update-ref", "refs/swarm/default", &odd]);
            let o = env.sw(c, &["list"]);
            assert_eq!(o.code, 1, "{name}, {archive}: the forged root was taken:\n{}{}", o.stdout, o.stderr);
            assert!(o.stderr.contains("replaced"), "{name}, {archive}: {}", o.stderr);
        }
        // A real compaction: the tip's own tree, its archive in place.
        let real = root_of(&format!("{tip}^{{tree}}"));
        env.git(&bare, &["update-ref", "refs/swarm/default", &real]);
        let t = show(&env, c, &id);
        assert_eq!(t["status"], "claimed", "{name}: {t}");
    }
}

/// `git swarm` in `dir` as a clone without the harness's blanket trust (`GIT_SWARM_TRUST=any`).
fn sw_strict(env: &Env, dir: &Path, args: &[&str]) -> common::Out {
    common::Out::from(env.cmd(dir).env_remove("GIT_SWARM_TRUST").args(args).output().expect("git-swarm"))
}

/// The trust boundary: a runner runs only shared settings its clone trusts. The clone that wrote them (`init
/// --config`, `config set`) trusts them; another clone's runner stops before it claims (exit 1, no attempt spent)
/// until `git swarm trust --yes`; a check pushed to the ref by hand is refused — named — and never run; what is
/// local (`--exec`, `--check`) needs no trust.
#[test]
fn shared_settings_a_clone_does_not_trust_are_never_run() {
    let env = Env::new();
    let pwned = env.home.join("pwned");
    let config = "lease = \"1m\"\nmax_attempts = 3\n[roles.worker]\nexec = \"echo \\\"$GIT_SWARM_TASK_ID\\\" > \\\"$GIT_SWARM_TASK_ID.txt\\\"\"\n";
    let bare = env.bare_remote("origin");
    let (a, b) = (env.clone(&file_url(&bare), "a"), env.clone(&file_url(&bare), "b"));
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, config).expect("config");
    sw_strict(&env, &a, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let t1 = env.sw(&a, &["add", "one"]).ok().line();
    // The clone that wrote the settings runs them.
    sw_strict(&env, &a, &["--agent", "wa", "run", "worker", "--once"]).ok();
    assert_eq!(show(&env, &a, &t1)["status"], "done");
    // Another clone does not, before it trusts them: nothing claimed, no attempt.
    let t2 = env.sw(&a, &["add", "two"]).ok().line();
    let o = sw_strict(&env, &b, &["--agent", "wb", "run", "worker", "--once"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("not trusted") && o.stderr.contains("git swarm trust"), "{}", o.stderr);
    assert!(o.stderr.contains("roles.worker.exec"), "it names what it would run: {}", o.stderr);
    let t = show(&env, &b, &t2);
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}");
    let shown = sw_strict(&env, &b, &["trust", "--json"]);
    assert_eq!(shown.code, 2, "no terminal, no --yes: {}", shown.stderr);
    let trusted = sw_strict(&env, &b, &["trust", "--yes", "--json"]).ok().json();
    assert_eq!(trusted["recorded"], true, "{trusted}");
    sw_strict(&env, &b, &["--agent", "wb", "run", "worker", "--once"]).ok();
    assert_eq!(show(&env, &b, &t2)["status"], "done");
    // A collaborator pushes a check of their own, by hand: refused by both clones, named, never run.
    edit_state_by_hand(&env, &a, |side| {
        let toml = std::fs::read_to_string(side.join("swarm.toml")).expect("swarm.toml");
        let evil = format!("{toml}\n[run]\ncheck = \"touch {}\"\n", pwned.display());
        std::fs::write(side.join("swarm.toml"), evil).expect("write");
    });
    let t3 = env.sw(&a, &["add", "three"]).ok().line();
    for (clone, agent) in [(&a, "wa"), (&b, "wb")] {
        let o = sw_strict(&env, clone, &["--agent", agent, "run", "worker", "--once"]);
        assert_eq!(o.code, 1, "{agent}: {}", o.stderr);
        assert!(o.stderr.contains("+ run.check"), "{agent}: what changed is named: {}", o.stderr);
    }
    assert!(!pwned.exists(), "the untrusted check ran");
    assert_eq!(show(&env, &a, &t3)["attempts"], 0);
    // What is local needs no trust: this clone's own agent and check (a runner that runs any shared setting needs
    // the whole document trusted).
    let own = ["--agent", "wa", "run", "worker", "--once", "--check", "true", "--exec", "echo 3 > three.txt"];
    sw_strict(&env, &a, &own).ok();
    assert_eq!(show(&env, &a, &t3)["status"], "done");
    assert!(!pwned.exists());
    // `config set` over settings this clone did not trust (the hand-made check) does not trust the result…
    let set = sw_strict(&env, &b, &["config", "set", "run.check", "exit 0"]).ok();
    assert!(set.stderr.contains("were not trusted here"), "{}", set.stderr);
    let o = sw_strict(&env, &b, &["--agent", "wb", "run", "worker", "--once"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    sw_strict(&env, &b, &["trust", "--yes"]).ok();
    // …and over trusted ones it does: a change of this clone's own is trusted here at once.
    sw_strict(&env, &b, &["config", "set", "run.check", "exit 0 # again"]).ok();
    let t4 = env.sw(&a, &["add", "four"]).ok().line();
    sw_strict(&env, &b, &["--agent", "wb", "run", "worker", "--once"]).ok();
    assert_eq!(show(&env, &b, &t4)["status"], "done");
    // The generated workflow pins the digest of the settings as they are.
    let digest = sw_strict(&env, &b, &["trust", "--digest"]).ok().line();
    let wf = sw_strict(&env, &b, &["ci", "github", "--stdout"]).ok().stdout;
    assert!(wf.contains(&format!("GIT_SWARM_TRUST: {digest}")), "{wf}");
    // `up` in a clone that trusts nothing says so once, before any member starts.
    let c = env.clone(&file_url(&bare), "c");
    let o = sw_strict(&env, &c, &["up", "--workers", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("not trusted") && o.stderr.contains("git swarm trust"), "{}", o.stderr);
}

/// A small tmpfs mounted at `dir` for the test (unmounted when dropped); `None` when this machine cannot (not
/// root): the test is skipped, unless CI requires it.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(test: &str, dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).expect("mount point");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(Tmpfs(dir.to_path_buf()));
        }
        assert!(!require_all(), "{test}: cannot mount a tmpfs and GIT_SWARM_REQUIRE_ALL=1");
        println!("{test}: skipped: mounting a tmpfs needs root");
        None
    }

    /// Fill it up to `left` bytes of free space.
    fn fill(&self, left: u64) {
        let free = nix::sys::statvfs::statvfs(&self.0).map(|s| s.blocks_available() * s.fragment_size()).unwrap_or(0);
        let size = free.saturating_sub(left);
        let f = std::fs::File::create(self.0.join("ballast")).expect("ballast");
        let _ = f.set_len(0);
        use std::io::Write;
        let mut w = std::io::BufWriter::new(f);
        let chunk = vec![0u8; 64 * 1024];
        let mut written = 0;
        while written < size {
            let n = chunk.len().min((size - written) as usize);
            if w.write_all(&chunk[..n]).is_err() {
                break;
            }
            written += n as u64;
        }
        let _ = w.flush();
    }

    fn empty(&self) {
        let _ = std::fs::remove_file(self.0.join("ballast"));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A remote on a small tmpfs that fills up while a worker lands: whatever write fails (the pack, the branch, the
/// state ref or its reflog), once there is room again the task ends done with its code on main exactly once.
#[test]
fn a_full_disk_on_the_remote_never_lands_a_task_twice() {
    let test = "a_full_disk_on_the_remote_never_lands_a_task_twice";
    // Room for nothing, for part of the pack, for about all of it (the step from "unpacker error" to landed lies
    // near 84 KiB here; the window in which the pack fits and a ref file does not is narrower than a tmpfs page,
    // so the half landing itself is forced with `chattr` above), and for everything.
    let levels = [0u64, 8, 32, 64, 80, 82, 84, 86, 128].map(|k| k << 10);
    for left in levels {
        let env = Env::new();
        let Some(disk) = Tmpfs::mount(test, &env.path("disk"), "8m") else { return };
        let bare = disk.0.join("origin.git");
        env.git(env.root.path(), &["init", "-q", "--bare", "-b", "main", bare.to_str().expect("utf-8")]);
        env.git(&bare, &["config", "core.logAllRefUpdates", "always"]);
        let seed = env.clone(&file_url(&bare), "seed");
        std::fs::write(seed.join("README"), "seed\n").expect("seed");
        env.git(&seed, &["add", "README"]);
        env.git(&seed, &["commit", "-qm", "seed"]);
        env.git(&seed, &["push", "-q", "origin", "HEAD:main"]);
        let c = env.clone(&file_url(&bare), "c0");
        let cfg = env.path("swarm.toml");
        let exec = "head -c 20000 /dev/urandom | base64 > \"$GIT_SWARM_TASK_ID.txt\"";
        std::fs::write(&cfg, format!("lease = \"1m\"\nmax_attempts = 5\n[roles.worker]\nexec = {exec:?}\n"))
            .expect("cfg");
        env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
        let id = env.sw(&c, &["add", "the task"]).ok().line();
        disk.fill(left);
        let full = env.sw_env(&c, &[("GIT_SWARM_MAX_RETRY_SECS", "5")], &["--agent", "w1", "run", "worker", "--once"]);
        disk.empty();
        let said: Vec<&str> = full.stderr.lines().rev().take(3).collect();
        println!("{left} bytes left: exit {}; {}", full.code, said.join(" | "));
        // Later (a lease on), with room again: a worker finishes what is left.
        for _ in 0..3 {
            if show(&env, &c, &id)["status"] == "done" {
                break;
            }
            env.sw_env(&c, &[("GIT_SWARM_CLOCK_OFFSET", "120")], &["--agent", "w2", "run", "worker", "--once"]);
        }
        let t = show(&env, &c, &id);
        assert_eq!(t["status"], "done", "{left} bytes left: {t}\nthe first run:\n{}", full.stderr);
        let landed = landed_commits(&env, &bare, &id);
        assert_eq!(landed.len(), 1, "{left} bytes left: the code landed {} times\n{}", landed.len(), full.stderr);
        assert_eq!(t["result"]["commit"].as_str(), Some(landed[0].as_str()));
    }
}

/// A remote that answers fetches and refuses every push (git daemon without receive-pack): said as such — not as
/// refused credentials, not as an outage ridden out —, at once, and a runner stops before it spends an attempt.
#[test]
fn a_read_only_remote_is_named_as_one_at_once() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let seed = env.clone(&path_url(&bare), "seed");
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {:?}\n", scripted_agent())).expect("config");
    env.sw(&seed, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let id = env.sw(&seed, &["add", "a task", "--body", "@write w.txt w"]).ok().line();
    let daemon = common::Daemon::start_read_only(&env, bare.parent().expect("parent"));
    let c = env.clone(&daemon.url("origin.git"), "reader");
    env.sw(&c, &["list"]).ok();
    let started = std::time::Instant::now();
    for args in [&["add", "another"][..], &["--agent", "w1", "run", "worker", "--once"]] {
        let o = env.sw(&c, args);
        assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains("refuses this clone's pushes"), "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains("--enable=receive-pack") && !o.stderr.contains("refused the credentials"),
            "{}",
            o.stderr
        );
    }
    assert!(started.elapsed() < Duration::from_secs(30), "not ridden out as an outage: {:?}", started.elapsed());
    let t = show(&env, &seed, &id);
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}");
}

/// A remote that takes no push options, and a runner whose git config sets one (`ci.skip`, as the pipeline of `ci
/// gitlab` does): the push goes again without them (issue 35: it was taken for an outage, retried for minutes, then
/// "cannot reach origin"). The remote cannot honour them anyway.
#[test]
fn a_remote_without_push_options_takes_the_landing_without_them() {
    let env = Env::new();
    let config = format!("[roles.worker]\nexec = {:?}\n", scripted_agent());
    let (bare, clones) = env.swarm_with_config(file_url, 1, &config);
    let c = &clones[0];
    let id = env.sw(c, &["add", "the task", "--body", "@write w.txt work"]).ok().line();
    let started = std::time::Instant::now();
    let o = env.sw_env(
        c,
        &[("GIT_CONFIG_PARAMETERS", "'push.pushoption'='ci.skip'")],
        &["--agent", "w1", "run", "worker", "--once"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    assert_eq!(show(&env, c, &id)["status"], "done");
    assert_eq!(env.git(&bare, &["show", "main:w.txt"]), "work");
}
