//! Warm work trees, `[run] setup` and `[run] check_clean` (issue 37), through the real binary: what the repository
//! ignores is carried from one run's tree to the next (unchanged files keep their times), setup runs when the tree
//! is cold or its files changed, and nothing carried ever lands.

use std::path::{Path, PathBuf};

use crate::common::Env;
use serde_json::Value;

fn show(env: &Env, dir: &Path, id: &str) -> Value {
    env.sw(dir, &["show", id, "--json"]).ok().json()
}

/// A worker agent that says what its tree held when it started (the check's build count in the ignored
/// `target/`, how often setup ran by the ignored `node_modules/.runs`, an agent file planted by an earlier run),
/// appends that to `seen.txt`, and plants files of its own in `target/` and `.claude/`. A title with `lock`
/// changes `deps.lock`; one with `unignore` empties `.gitignore`.
fn agent(env: &Env) -> PathBuf {
    let path = env.path("warm-agent.sh");
    std::fs::write(
        &path,
        r#"b=$(cat target/builds 2>/dev/null || echo none)
if [ -f node_modules/.runs ]; then r=$(wc -l < node_modules/.runs | tr -d ' '); else r=none; fi
c=no; [ -e .claude/planted.txt ] && c=yes
echo "builds=$b runs=$r claude=$c readme=$(stat -c %y README.md)" >> seen.txt
mkdir -p .claude target
echo planted > .claude/planted.txt
echo planted > target/planted
case "$GIT_SWARM_TASK_TITLE" in *lock*) echo v2 > deps.lock;; *unignore*) : > .gitignore;; esac
"#,
    )
    .expect("write");
    path
}

/// A remote whose `main` ignores `target/` and `node_modules/`, and a clone of it with a swarm whose settings are
/// `run` (lines of `[run]`) and the agent above.
fn swarm(env: &Env, run: &str) -> PathBuf {
    let bare = env.bare_remote("origin");
    let seed = env.path("origin-seed");
    std::fs::write(seed.join(".gitignore"), "target/\nnode_modules/\n").expect("write");
    std::fs::write(seed.join("deps.lock"), "v1\n").expect("write");
    std::fs::write(seed.join("README.md"), "warm\n").expect("write");
    env.git(&seed, &["add", "-A"]);
    env.git(&seed, &["commit", "-q", "-m", "a project that builds into target/"]);
    env.git(&seed, &["push", "-q", bare.to_str().expect("utf-8"), "HEAD:refs/heads/main"]);
    let c = env.clone(bare.to_str().expect("utf-8"), "c0");
    let cfg = env.path("swarm.toml");
    let agent = agent(env);
    std::fs::write(
        &cfg,
        format!("max_attempts = 1\n[run]\n{run}\n[roles.worker]\nexec = \"sh {}\"\n", agent.display()),
    )
    .expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    c
}

fn landed_files(env: &Env, c: &Path) -> Vec<String> {
    env.git(c, &["fetch", "-q", "origin"]);
    let out = env.git(c, &["ls-tree", "-r", "--name-only", "origin/main"]);
    out.lines().map(str::to_string).collect()
}

/// One agent, three tasks: the second starts with the first's build and setup, the third with the build of the
/// second's check and the setup its changed lock file re-ran; an agent's own files never reach the next run, and
/// nothing carried lands — not even when the agent un-ignores it.
#[test]
fn what_the_repository_ignores_is_carried_and_never_lands() {
    let env = Env::new();
    let check = "mkdir -p target && n=$(cat target/builds 2>/dev/null || echo 0) && echo $((n+1)) > target/builds";
    let run = format!(
        "check = {check:?}\nsetup = \"mkdir -p node_modules && echo ran >> node_modules/.runs\"\nsetup_when = [\"deps.lock\"]"
    );
    let c = swarm(&env, &run);
    let ids: Vec<String> =
        ["first", "changes the lock", "unignore"].iter().map(|t| env.sw(&c, &["add", t]).ok().line()).collect();
    for id in &ids {
        env.sw(&c, &["--agent", "w", "run", "worker", "--once"]).ok();
        assert_eq!(show(&env, &c, id)["status"], "done", "{id}");
    }
    env.git(&c, &["fetch", "-q", "origin"]);
    let seen = env.git(&c, &["show", "origin/main:seen.txt"]);
    let (seen, readme): (Vec<&str>, Vec<&str>) =
        seen.lines().map(|l| l.split_once(" readme=").expect("a line of the agent's")).unzip();
    assert_eq!(
        seen,
        [
            // Cold: nothing built yet, setup ran for the new tree.
            "builds=none runs=1 claude=no",
            // The first task's check built once; setup did not run again (same lock file).
            "builds=1 runs=1 claude=no",
            // The second's check built again, after setup re-ran for its new lock file.
            "builds=2 runs=2 claude=no",
        ],
        "what each agent found in its tree"
    );
    // README.md never changed: each new tree gave it the time the first checkout wrote it with (builds that compare
    // times see it unchanged).
    assert!(readme.iter().all(|m| *m == readme[0]), "{readme:?}");
    let files = landed_files(&env, &c);
    assert!(
        !files.iter().any(|f| f.starts_with("target/") || f.starts_with("node_modules/") || f.starts_with(".claude/")),
        "carried or agent files landed: {files:?}"
    );
    assert!(files.contains(&"seen.txt".to_string()), "{files:?}");
}

/// A check that fails when an earlier run's build is there: warm, the second task's check sees the first's and
/// fails; with `check_clean = true` both land.
#[test]
fn check_clean_runs_the_check_in_a_tree_made_from_nothing() {
    for clean in [false, true] {
        let env = Env::new();
        let check = "test ! -e target/built && mkdir -p target && touch target/built";
        let c = swarm(&env, &format!("check = {check:?}\ncheck_clean = {clean}"));
        let a = env.sw(&c, &["add", "a"]).ok().line();
        let b = env.sw(&c, &["add", "b"]).ok().line();
        env.sw(&c, &["--agent", "w", "run", "worker", "--once"]).ok();
        let second = env.sw(&c, &["--agent", "w", "run", "worker", "--once"]);
        assert_eq!(show(&env, &c, &a)["status"], "done", "clean = {clean}");
        let want = if clean { "done" } else { "failed" };
        assert_eq!(show(&env, &c, &b)["status"], want, "clean = {clean}: {}", second.stderr);
    }
}

/// A target that fails its setup: the runner stops before the agent with the setup's reason, and the task is
/// given back with no attempt spent.
#[test]
fn a_setup_that_fails_on_the_target_spends_no_attempt() {
    let env = Env::new();
    let c = swarm(&env, "setup = \"echo the registry is down; exit 3\"");
    let id = env.sw(&c, &["add", "x"]).ok().line();
    let out = env.sw(&c, &["--agent", "w", "run", "worker", "--once"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("[run] setup") && out.stderr.contains("the registry is down"),
        "the reason names the setup and quotes it: {}",
        out.stderr
    );
    assert!(out.stderr.contains("no attempt was spent"), "{}", out.stderr);
    let t = show(&env, &c, &id);
    assert_eq!(t["status"], "open", "{t}");
    assert_eq!(t["attempts"], 0, "{t}");
}

/// A rustup `cargo` inside the sandbox: the fresh home has no `.rustup` and the person's `~/.cargo` is read-only,
/// so the run gets `RUSTUP_HOME` where the toolchain is and a `CARGO_HOME` of the swarm's, writable (before issue
/// 37: "rustup could not choose a version of cargo to run").
#[test]
fn cargo_runs_in_the_sandbox_with_a_cargo_home_of_the_swarms() {
    if !crate::common::sandbox_or_skip("cargo_runs_in_the_sandbox_with_a_cargo_home_of_the_swarms") {
        return;
    }
    let cargo = std::process::Command::new("cargo").arg("--version").output();
    if !cargo.is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("GIT_SWARM_REQUIRE_ALL").is_none(), "cargo is not on PATH");
        return;
    }
    let env = Env::new();
    let check =
        "cargo --version && touch \"$CARGO_HOME/written\" && case $CARGO_HOME in */caches/cargo) ;; *) exit 9;; esac";
    let c = swarm(&env, &format!("check = {check:?}\nsandbox = \"required\""));
    let id = env.sw(&c, &["add", "x"]).ok().line();
    let out = env.sw(&c, &["--agent", "w", "run", "worker", "--once"]);
    assert_eq!(show(&env, &c, &id)["status"], "done", "{}", out.stderr);
}
