//! Findings of the security review (docs/security.md) that are fixed in code, each with a test that fails if the
//! fix goes away.

use std::process::Stdio;

use crate::common::{Env, file_url};

/// S7: hooks an agent (or anyone) planted in the shared git directory do not run in the runner's own git commands.
#[test]
fn the_runner_never_runs_hooks_planted_in_the_git_directory() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let c = env.clone(&file_url(&bare), "c");
    let cfg = env.path("swarm.toml");
    let exec = format!("sh '{}/tests/agents/scripted.sh'", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(&cfg, format!("[roles.worker]\nexec = {exec:?}\n")).expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    env.sw(&c, &["add", "one", "--body", "@write one.txt hello"]).ok();
    let marker = env.path("hook-ran");
    let hooks = c.join(".git/hooks");
    std::fs::create_dir_all(&hooks).expect("hooks");
    for name in ["pre-commit", "commit-msg", "post-commit", "post-checkout", "post-rewrite", "reference-transaction"] {
        let hook = hooks.join(name);
        let script =
            format!("#!/bin/sh\necho {name} $(tr '\\0' ' ' < /proc/$PPID/cmdline) >> '{}'\n", marker.display());
        std::fs::write(&hook, script).expect("hook");
        std::process::Command::new("chmod").arg("+x").arg(&hook).status().expect("chmod");
    }
    let out = env
        .cmd(&c)
        .args(["--agent", "w1", "run", "worker", "--until-idle"])
        .stdin(Stdio::null())
        .output()
        .expect("run worker");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(env.sw(&c, &["status", "--json"]).ok().json()["counts"]["done"], 1);
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(ran.is_empty(), "hooks ran in the runner's git commands: {ran}");
    // The hooks work for the user's own git (the test would prove nothing otherwise).
    env.git(&c, &["commit", "-q", "--allow-empty", "-m", "mine"]);
    assert!(std::fs::read_to_string(&marker).unwrap_or_default().contains("pre-commit"));
}

/// S6: what a planner proposes reaches the state ref without the secrets of the runner's environment or
/// credentials in URLs; the worker's hand-off and failure reasons likewise (they are scrubbed at the same place).
#[test]
fn secrets_in_agent_output_never_reach_the_state_ref() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let c = env.clone(&file_url(&bare), "c");
    let cfg = env.path("swarm.toml");
    let exec = format!("sh '{}/tests/agents/scripted.sh'", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(&cfg, format!("max_attempts = 1\n[roles.default]\nexec = {exec:?}\n")).expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let secret = "s3cr3t-value-of-the-runner";
    let plan = env.path("plan.toml");
    std::fs::write(
        &plan,
        format!(
            "[[task]]\ntitle = \"connect to postgres://app:{secret}@db.internal/x\"\n\
             body = \"@exit 1\\nthe token is {secret}; the URL https://bot:{secret}@git.example.com/r.git\"\n"
        ),
    )
    .expect("plan");
    let run = |args: &[&str], extra: &[(&str, &str)], code: i32| {
        let mut cmd = env.cmd(&c);
        cmd.env("MY_SERVICE_TOKEN", secret).args(args).stdin(Stdio::null());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run");
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(
        &["--agent", "p1", "run", "planner", "--goal", "connect", "--once"],
        &[("SCRIPTED_PLAN", plan.to_str().expect("utf-8"))],
        0,
    );
    // The worker's agent exits 1 with the body in its output: the failure reason quotes it (and the task did not
    // land: exit 1).
    run(&["--agent", "w1", "run", "worker", "--once"], &[], 1);
    let list = env.sw(&c, &["list", "--json"]).ok().json();
    let task = list.as_array().expect("array").iter().find(|t| t["kind"] == "work").expect("the planned task").clone();
    assert_eq!(task["status"], "failed", "{task}");
    assert!(task["title"].as_str().unwrap_or_default().contains("postgres://[redacted]@db.internal"), "{task}");
    // Every blob of every commit of the state ref, and every commit message.
    let all = env.git(&bare, &["log", "-p", "--format=%B", "refs/swarm/default"]);
    let blobs = env.git(&bare, &["grep", "-c", "redacted", "refs/swarm/default", "--", "tasks"]);
    assert!(!blobs.is_empty(), "nothing was redacted: the test proves nothing");
    for commit in env.git(&bare, &["rev-list", "refs/swarm/default"]).lines() {
        let found = env.git_out(&bare, &["grep", "-l", secret, commit]);
        assert_ne!(found.code, 0, "{commit} holds the secret in {}", found.stdout);
    }
    assert!(!all.contains(secret), "a commit message holds the secret");
}

/// A swarm on a bare remote whose worker runs `script` (written into the test's folder), with `settings` before its
/// `[roles.worker]` table and `role` in it; the clone.
fn scripted_swarm(env: &Env, script: &str, settings: &str, role: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let bare = env.bare_remote("origin");
    let c = env.clone(&file_url(&bare), "c");
    let agent = env.path("agent.sh");
    std::fs::write(&agent, script).expect("script");
    let cfg = env.path("swarm.toml");
    let toml = format!("max_attempts = 1\n{settings}[roles.worker]\nexec = \"sh {}\"\n{role}", agent.display());
    std::fs::write(&cfg, toml).expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    (bare, c)
}

/// S21: the agent's own API key (a variable its role is given), written into a source file, never lands — and is
/// not carried to the remote aside either: the landing is refused with the file and line (never the value), the
/// work kept in this clone only. A token shape lands only where `[run] secret_allow` says it is no secret; a value
/// of the runner's own never does, allowed or not.
#[test]
fn a_secret_the_runner_knows_never_lands_and_never_leaves_the_clone() {
    let env = Env::new();
    let (bare, c) = scripted_swarm(
        &env,
        "case \"$GIT_SWARM_TASK_TITLE\" in\n\
         key*) mkdir -p src && printf 'client = Client(\\n    key=\"%s\",\\n)\\n' \"$MY_MODEL_API_KEY\" > src/client.py ;;\n\
         fixture*) mkdir -p tests/fixtures && echo 'token: ghp_0123456789abcdefghijABCDEFGHIJ0123' > tests/fixtures/gh.yml ;;\n\
         allowed-key*) mkdir -p tests/fixtures && echo \"$MY_MODEL_API_KEY\" > tests/fixtures/key.txt ;;\n\
         esac\n",
        "[run]\nsecret_allow = [\"tests/fixtures/**\"]\n",
        "env = [\"MY_MODEL_API_KEY\"]\n",
    );
    let key = env.sw(&c, &["add", "key in the source"]).ok().line();
    let fixture = env.sw(&c, &["add", "fixture with a token shape"]).ok().line();
    let allowed_key = env.sw(&c, &["add", "allowed-key in a fixture"]).ok().line();
    let secret = "mk-live-5f1a9c0e77b24d6e8a3b";
    let o = env.sw_env(&c, &[("MY_MODEL_API_KEY", secret)], &["--agent", "w1", "run", "worker", "--until-idle"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let show = |id: &str| env.sw(&c, &["show", id, "--json"]).ok().json();
    // The key: refused, named by file and line, the value nowhere on the board or in what the runner said.
    let t = show(&key);
    assert_eq!(t["status"], "failed", "{t}");
    let reason = t["failures"][0]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("src/client.py:2") && reason.contains("MY_MODEL_API_KEY"), "{reason}");
    assert!(!reason.contains(secret) && !o.stderr.contains(secret), "{reason}\n{}", o.stderr);
    // Kept in the clone only: nothing of it on the remote, aside or on main.
    let held = format!("refs/swarm-held/default/{key}/1");
    let tip = env.rev(&c.join(".git"), &held).expect("the work is held in the clone");
    assert!(env.git(&c, &["show", &format!("{tip}:src/client.py")]).contains(secret));
    assert!(env.rev(&bare, &format!("refs/swarm-work/default/{key}/1")).is_none(), "pushed aside");
    let everything = env.git(&bare, &["log", "--all", "-p", "--format=%B"]);
    assert!(!everything.contains(secret), "the secret reached the remote");
    // A token shape in a fixture the settings allow lands; the runner's own value there does not.
    assert_eq!(show(&fixture)["status"], "done", "{}", o.stderr);
    assert!(env.git(&bare, &["show", "main:tests/fixtures/gh.yml"]).contains("ghp_"));
    let t = show(&allowed_key);
    assert_eq!(t["status"], "failed", "{t}");
    assert!(t["failures"][0]["reason"].as_str().unwrap_or_default().contains("tests/fixtures/key.txt:1"), "{t}");
}

/// S22: what lands is a tree git itself would accept. An agent's commit that adds a `.GIT` folder (made with git's
/// plumbing: its porcelain refuses the name) or a `.gitmodules` whose `update` runs a command is refused with the
/// rule and kept in the clone only (a forge that checks pushes would refuse it aside too): nothing of it reaches the
/// remote, whose fsck stays clean; an honest task after it lands.
#[test]
fn a_tree_git_refuses_never_lands() {
    let env = Env::new();
    let (bare, c) = scripted_swarm(
        &env,
        "set -e\ncase \"$GIT_SWARM_TASK_TITLE\" in\n\
         dotgit*) blob=$(echo '[core]' | git hash-object -w --stdin)\n\
         \x20 inner=$(printf '100644 blob %s\\tconfig\\n' \"$blob\" | git mktree)\n\
         \x20 top=$( (git ls-tree HEAD; printf '040000 tree %s\\t.GIT\\n' \"$inner\") | git mktree)\n\
         \x20 git update-ref HEAD \"$(git commit-tree \"$top\" -p HEAD -m 'add .GIT')\" ;;\n\
         modules*) printf '[submodule \"x\"]\\n\\tpath = x\\n\\turl = https://example.com/x.git\\n\\tupdate = !touch /tmp/pwned\\n' > .gitmodules ;;\n\
         *) echo fine > fine.txt ;;\n\
         esac\n",
        "",
        "",
    );
    let dotgit = env.sw(&c, &["add", "dotgit in a tree"]).ok().line();
    let modules = env.sw(&c, &["add", "modules that run a command"]).ok().line();
    let fine = env.sw(&c, &["add", "an honest task"]).ok().line();
    let o = env.sw(&c, &["--agent", "w1", "run", "worker", "--until-idle"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let show = |id: &str| env.sw(&c, &["show", id, "--json"]).ok().json();
    for (id, rule) in [(&dotgit, "hasDotgit"), (&modules, "update")] {
        let t = show(id);
        assert_eq!(t["status"], "failed", "{t}\n{}", o.stderr);
        let reason = t["failures"][0]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("git refuses") && reason.contains(rule), "{reason}");
        assert!(env.rev(&c.join(".git"), &format!("refs/swarm-held/default/{id}/1")).is_some(), "held in the clone");
        let kept = t["failures"][0]["kept"].as_str().unwrap_or_default();
        assert!(kept.starts_with(&format!("refs/swarm-held/default/{id}/1 in the clone of runner w1")), "{t}");
    }
    assert_eq!(show(&fine)["status"], "done");
    let files = env.git(&bare, &["ls-tree", "-r", "--name-only", "main"]);
    assert!(!files.contains(".GIT") && !files.contains(".gitmodules"), "{files}");
    assert_eq!(env.git(&bare, &["fsck", "--strict", "--no-dangling"]), "");
}
