//! Git hooks and agent hooks (`docs/hooks.md`) with real git: installs next to a user's hooks, `core.hooksPath`
//! and linked work trees, the `Swarm-Task:` trailer on real commits, the pre-push claim check on real pushes to a
//! bare remote, and a real worker whose agent finds its hooks, stops through the Claude Code Stop handler and
//! lands a commit without them.

use std::path::{Path, PathBuf};

use crate::common::{BIN, Env, Out};
use serde_json::Value;

/// `PATH` with the built `git-swarm` first, as an installed one would be.
fn path_with_bin() -> String {
    let bin_dir = Path::new(BIN).parent().expect("bin dir");
    format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// A clone of a fresh bare remote with the swarm initialised.
fn repo(env: &Env) -> (PathBuf, PathBuf) {
    let bare = env.bare_remote("origin");
    let c = env.clone(bare.to_str().expect("utf-8"), "c");
    env.sw(&c, &["init"]).ok();
    (bare, c)
}

fn git(env: &Env, dir: &Path, extra: &[(&str, &str)], args: &[&str]) -> Out {
    let path = path_with_bin();
    let mut all = vec![("PATH", path.as_str())];
    all.extend_from_slice(extra);
    env.git_env(dir, &all, args)
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).expect("meta").permissions().mode() & 0o777
}

#[cfg(unix)]
fn write_hook(p: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p.parent().expect("dir")).expect("mkdir");
    std::fs::write(p, text).expect("write hook");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn message(env: &Env, dir: &Path, rev: &str) -> String {
    env.git(dir, &["log", "-1", "--format=%B", rev])
}

fn trailers(msg: &str) -> usize {
    msg.lines().filter(|l| l.starts_with("Swarm-Task:")).count()
}

#[test]
fn install_keeps_a_users_hook_both_run_and_uninstall_restores_it_byte_for_byte() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let hook = c.join(".git/hooks/commit-msg");
    // A user's hook that ends with `exit 0`: our block must still run (it goes before).
    let user = "#!/bin/sh\necho ran >> \"$(git rev-parse --git-dir)/user-hook.log\"\nexit 0\n";
    write_hook(&hook, user, 0o750);
    let o = env.sw(&c, &["hooks", "install"]).ok();
    assert!(o.stdout.contains("added our block to") && o.stdout.contains("created"), "{}", o.stdout);
    let installed = std::fs::read_to_string(&hook).expect("read");
    assert!(installed.starts_with("#!/bin/sh\n# >>> git swarm >>>\n"), "{installed}");
    assert!(installed.ends_with("echo ran >> \"$(git rev-parse --git-dir)/user-hook.log\"\nexit 0\n"), "{installed}");
    assert_eq!(mode(&hook), 0o750, "the user's mode stays");
    assert_eq!(mode(&c.join(".git/hooks/pre-push")), 0o755);

    // A second install changes nothing.
    let o = env.sw(&c, &["hooks", "install"]).ok();
    assert_eq!(o.stdout.matches("already installed").count(), 2, "{}", o.stdout);
    assert_eq!(std::fs::read_to_string(&hook).expect("read"), installed);

    // Both run: the user's hook logs, ours adds the trailer.
    git(&env, &c, &[("GIT_SWARM_TASK_ID", "t-abc123")], &["commit", "-q", "--allow-empty", "-m", "work"]).ok();
    assert_eq!(message(&env, &c, "HEAD"), "work\n\nSwarm-Task: t-abc123");
    assert_eq!(std::fs::read_to_string(c.join(".git/user-hook.log")).expect("log"), "ran\n");

    let st = env.sw(&c, &["hooks", "status", "--json"]).ok().json();
    assert!(st["hooks"].as_array().expect("list").iter().all(|h| h["installed"] == true), "{st}");

    let o = env.sw(&c, &["hooks", "uninstall"]).ok();
    let gone = format!("removed {}", c.join(".git/hooks/pre-push").display());
    assert!(o.stdout.contains("removed our block from") && o.stdout.contains(&gone), "{}", o.stdout);
    assert_eq!(std::fs::read(&hook).expect("read"), user.as_bytes(), "restored byte for byte");
    assert_eq!(mode(&hook), 0o750);
    assert!(!c.join(".git/hooks/pre-push").exists(), "the hook file we created is gone");
    let st = env.sw(&c, &["hooks", "status", "--json"]).ok().json();
    let list = st["hooks"].as_array().expect("list");
    assert_eq!(list.iter().map(|h| (h["hook"].clone(), h["installed"].clone())).collect::<Vec<_>>().len(), 2);
    assert!(list.iter().all(|h| h["installed"] == false), "{st}");
    assert_eq!(list[0]["exists"], true, "{st}");
    env.sw(&c, &["hooks", "uninstall"]).ok();
}

#[test]
fn commit_msg_adds_the_trailer_only_for_a_workers_agent_once_and_keeps_git_commit_working() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    env.sw(&c, &["hooks", "install", "--commit-msg"]).ok();
    assert!(!c.join(".git/hooks/pre-push").exists(), "--commit-msg installs only that one");
    let id = [("GIT_SWARM_TASK_ID", "t-77aa01")];

    git(&env, &c, &[], &["commit", "-q", "--allow-empty", "-m", "plain"]).ok();
    assert_eq!(message(&env, &c, "HEAD"), "plain", "no task, no trailer");

    git(&env, &c, &id, &["commit", "-q", "--allow-empty", "-m", "one\n\nbody"]).ok();
    assert_eq!(message(&env, &c, "HEAD"), "one\n\nbody\n\nSwarm-Task: t-77aa01");
    git(&env, &c, &id, &["commit", "-q", "--amend", "--no-edit", "--allow-empty"]).ok();
    assert_eq!(trailers(&message(&env, &c, "HEAD")), 1, "not twice on --amend");

    git(&env, &c, &id, &["commit", "-q", "--allow-empty", "--no-verify", "-m", "skipped"]).ok();
    assert_eq!(trailers(&message(&env, &c, "HEAD")), 0, "--no-verify skips hooks");

    // An empty message still aborts the commit (the trailer does not make it a message).
    let before = env.git(&c, &["rev-parse", "HEAD"]);
    let o = git(&env, &c, &id, &["commit", "-q", "--allow-empty", "-m", ""]);
    assert_ne!(o.code, 0, "{}", o.stderr);
    assert_eq!(env.git(&c, &["rev-parse", "HEAD"]), before);

    // `git commit -v` with nothing written: the diff below the scissors is not a message; still aborted.
    let verbose = git(
        &env,
        &c,
        &[("GIT_EDITOR", "true"), ("GIT_SWARM_TASK_ID", "t-77aa01")],
        &["-c", "commit.verbose=true", "commit", "--allow-empty"],
    );
    assert_ne!(verbose.code, 0, "an empty message aborts, trailer or not: {}", verbose.stderr);
    assert_eq!(env.git(&c, &["rev-parse", "HEAD"]), before);

    // A merge commit gets it too.
    env.git(&c, &["switch", "-q", "-c", "side"]);
    std::fs::write(c.join("side.txt"), "x\n").expect("write");
    env.git(&c, &["add", "side.txt"]);
    git(&env, &c, &[], &["commit", "-q", "-m", "side"]).ok();
    env.git(&c, &["switch", "-q", "main"]);
    git(&env, &c, &id, &["merge", "-q", "--no-ff", "-m", "merge side", "side"]).ok();
    assert_eq!(env.git(&c, &["rev-list", "--count", "--parents", "-1", "--merges", "HEAD"]), "1");
    assert_eq!(trailers(&message(&env, &c, "HEAD")), 1);

    // A value that is not a task id is data: a warning, the commit goes through untouched.
    let o = git(&env, &c, &[("GIT_SWARM_TASK_ID", "x; touch pwned")], &["commit", "-q", "--allow-empty", "-m", "odd"]);
    let o = o.ok();
    assert!(o.stderr.contains("GIT_SWARM_TASK_ID"), "{}", o.stderr);
    assert_eq!(message(&env, &c, "HEAD"), "odd");
    assert!(!c.join("pwned").exists());
}

#[test]
fn hooks_go_where_git_looks_core_hooks_path_and_linked_work_trees() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    // A relative core.hooksPath is relative to the top of the work tree, wherever install runs.
    env.git(&c, &["config", "core.hooksPath", ".githooks"]);
    std::fs::create_dir_all(c.join("sub")).expect("mkdir");
    let o = env.sw(&c.join("sub"), &["hooks", "install", "--json"]).ok();
    let st = o.json();
    assert!(st["hooks_dir"].as_str().expect("dir").ends_with("/c/.githooks"), "{st}");
    assert!(o.stderr.contains("inside the work tree"), "a hooks folder in the work tree is said: {}", o.stderr);
    assert!(c.join(".githooks/commit-msg").exists() && !c.join(".git/hooks/commit-msg").exists());
    git(&env, &c, &[("GIT_SWARM_TASK_ID", "t-1")], &["commit", "-q", "--allow-empty", "-m", "via hooksPath"]).ok();
    assert_eq!(trailers(&message(&env, &c, "HEAD")), 1);

    env.git(&c, &["config", "core.hooksPath", "/dev/null"]);
    let o = env.sw(&c, &["hooks", "install"]).code(1);
    assert!(o.stderr.contains("core.hooksPath is /dev/null"), "{}", o.stderr);

    // A linked work tree shares the common git dir's hooks.
    env.git(&c, &["config", "--unset", "core.hooksPath"]);
    let wt = env.path("wt");
    env.git(&c, &["worktree", "add", "-q", wt.to_str().expect("utf-8"), "-b", "other"]);
    env.sw(&wt, &["hooks", "install"]).ok();
    assert!(c.join(".git/hooks/commit-msg").exists() && c.join(".git/hooks/pre-push").exists());
    git(&env, &wt, &[("GIT_SWARM_TASK_ID", "t-2")], &["commit", "-q", "--allow-empty", "-m", "in wt"]).ok();
    assert_eq!(trailers(&message(&env, &wt, "HEAD")), 1);
}

#[test]
fn a_hook_in_another_language_or_not_executable_is_refused_and_left_alone() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let py = "#!/usr/bin/env python3\nimport sys\n";
    let pre_push = c.join(".git/hooks/pre-push");
    write_hook(&pre_push, py, 0o755);
    env.sw(&c, &["hooks", "install", "--commit-msg"]).ok();
    let o = env.sw(&c, &["hooks", "install"]).code(4);
    assert!(o.stderr.contains("pre-push") && o.stderr.contains("python3"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&pre_push).expect("read"), py);

    let cm = c.join(".git/hooks/commit-msg");
    std::fs::remove_file(&cm).expect("rm");
    write_hook(&cm, "#!/bin/sh\necho disabled\n", 0o644);
    let o = env.sw(&c, &["hooks", "install", "--commit-msg"]).code(4);
    assert!(o.stderr.contains("not executable"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&cm).expect("read"), "#!/bin/sh\necho disabled\n");
    assert_eq!(mode(&cm), 0o644);
}

/// Commit an empty change naming `task` and push it as `agent`.
fn commit_and_push(env: &Env, c: &Path, agent: &str, task: &str, extra: &[&str]) -> (String, Out) {
    git(env, c, &[], &["commit", "-q", "--allow-empty", "-m", &format!("work\n\nSwarm-Task: {task}")]).ok();
    let sha = env.git(c, &["rev-parse", "HEAD"]);
    let mut args = vec!["push", "-q", "origin", "HEAD:refs/heads/main"];
    args.extend_from_slice(extra);
    (sha, git(env, c, &[("GIT_SWARM_AGENT", agent)], &args))
}

#[test]
fn pre_push_warns_for_tasks_held_by_others_or_unclaimed_is_silent_for_mine_and_strict_blocks() {
    let env = Env::new();
    let (bare, c) = repo(&env);
    let mine = env.sw(&c, &["add", "mine"]).ok().line();
    let theirs = env.sw(&c, &["add", "theirs"]).ok().line();
    let open = env.sw(&c, &["add", "nobody's"]).ok().line();
    env.sw(&c, &["--agent", "alice", "claim", &mine]).ok();
    env.sw(&c, &["--agent", "bob", "claim", &theirs]).ok();
    // The user's own pre-push hook still reads the ref lines after our block.
    write_hook(&c.join(".git/hooks/pre-push"), "#!/bin/sh\ncat > \"$(git rev-parse --git-dir)/user-stdin\"\n", 0o755);
    env.sw(&c, &["hooks", "install"]).ok();

    let (sha, o) = commit_and_push(&env, &c, "alice", &mine, &[]);
    let o = o.ok();
    assert!(!o.stderr.contains("git swarm"), "silent when the task is mine: {}", o.stderr);
    let seen = std::fs::read_to_string(c.join(".git/user-stdin")).expect("user hook ran");
    assert!(seen.contains(" refs/heads/main ") && seen.contains(&sha), "{seen}");

    let (sha, o) = commit_and_push(&env, &c, "alice", &theirs, &[]);
    let o = o.ok();
    assert!(o.stderr.contains(&theirs) && o.stderr.contains("claimed by bob"), "{}", o.stderr);
    assert!(o.stderr.contains(&sha[..12]), "names the commit: {}", o.stderr);
    assert_eq!(env.rev(&bare, "refs/heads/main").as_deref(), Some(sha.as_str()), "a warning lets it through");

    let before = env.rev(&bare, "refs/heads/main");
    env.git(&c, &["config", "swarm.prePushStrict", "true"]);
    let (sha, o) = commit_and_push(&env, &c, "alice", &open, &[]);
    assert_ne!(o.code, 0, "strict mode blocks: {}", o.stderr);
    assert!(o.stderr.contains(&open) && o.stderr.contains("is open"), "{}", o.stderr);
    assert!(o.stderr.contains("push refused"), "{}", o.stderr);
    assert_eq!(env.rev(&bare, "refs/heads/main"), before, "nothing was pushed");
    // --no-verify is the way around it.
    git(&env, &c, &[("GIT_SWARM_AGENT", "alice")], &["push", "-q", "--no-verify", "origin", "HEAD:refs/heads/main"])
        .ok();
    assert_eq!(env.rev(&bare, "refs/heads/main").as_deref(), Some(sha.as_str()));

    // A new branch: only the commits no remote-tracking branch has are looked at.
    env.git(&c, &["fetch", "-q", "origin"]);
    git(&env, &c, &[], &["commit", "-q", "--allow-empty", "-m", "new\n\nSwarm-Task: t-unknown1"]).ok();
    let o = git(&env, &c, &[("GIT_SWARM_AGENT", "alice")], &["push", "-q", "origin", "HEAD:refs/heads/feature"]);
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("no task t-unknown1") && !o.stderr.contains(&open), "{}", o.stderr);

    // A branch the remote has, rebased onto a main that holds landed swarm commits (of tasks not mine): those
    // commits are on the remote already, so strict mode neither warns about them nor refuses the push.
    let first = env.git(&c, &["rev-list", "--max-parents=0", "HEAD"]);
    env.git(&c, &["switch", "-q", "-c", "topic", &first]);
    git(&env, &c, &[], &["commit", "-q", "--allow-empty", "-m", "topic work"]).ok();
    git(&env, &c, &[("GIT_SWARM_AGENT", "alice")], &["push", "-q", "origin", "topic"]).ok();
    env.git(&c, &["fetch", "-q", "origin"]);
    env.git(&c, &["rebase", "-q", "origin/main"]);
    let o = git(&env, &c, &[("GIT_SWARM_AGENT", "alice")], &["push", "-q", "--force", "origin", "topic"]).ok();
    assert!(!o.stderr.contains("git swarm"), "nothing new names a task: {}", o.stderr);

    // A git-swarm that fails for another reason than a strict refusal (missing, crashed, too old) never blocks.
    git(&env, &c, &[], &["commit", "-q", "--allow-empty", "-m", "more\n\nSwarm-Task: t-unknown2"]).ok();
    let o = git(&env, &c, &[("GIT_SWARM_BIN", "false")], &["push", "-q", "origin", "topic"]).ok();
    assert!(o.stderr.contains("the claim check failed; pushing anyway"), "{}", o.stderr);
}

#[test]
fn pre_push_without_a_board_or_without_git_swarm_warns_once_and_lets_the_push_through() {
    let env = Env::new();
    let (bare, c) = repo(&env);
    env.sw(&c, &["hooks", "install", "--pre-push"]).ok();
    env.git(&c, &["config", "swarm.prePushStrict", "true"]);
    env.git(&c, &["config", "swarm.remote", env.path("nowhere").to_str().expect("utf-8")]);
    let (sha, o) = commit_and_push(&env, &c, "alice", "t-123456", &[]);
    let o = o.ok();
    assert_eq!(o.stderr.matches("warning: git swarm").count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("could not read the swarm's board") || o.stderr.contains("check is skipped"));
    assert_eq!(env.rev(&bare, "refs/heads/main").as_deref(), Some(sha.as_str()));

    // A remote that accepts the connection and never answers: the check gives up after the time limit.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for conn in listener.incoming().take(4) {
            open.push(conn);
            std::thread::sleep(std::time::Duration::from_secs(20));
        }
    });
    env.git(&c, &["config", "swarm.remote", &format!("git://127.0.0.1:{port}/silent.git")]);
    git(&env, &c, &[], &["commit", "-q", "--allow-empty", "-m", "w\n\nSwarm-Task: t-123456"]).ok();
    let started = std::time::Instant::now();
    let o = git(&env, &c, &[("GIT_SWARM_HOOK_TIMEOUT", "2")], &["push", "-q", "origin", "HEAD:refs/heads/main"]).ok();
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "took {:?}", started.elapsed());
    assert!(o.stderr.contains("no answer within 2s"), "{}", o.stderr);
    drop(held);

    // No git-swarm on PATH: one warning, the push goes through.
    git(&env, &c, &[], &["commit", "-q", "--allow-empty", "-m", "w\n\nSwarm-Task: t-123456"]).ok();
    let o = env.git_env(&c, &[("PATH", "/usr/bin:/bin")], &["push", "-q", "origin", "HEAD:refs/heads/main"]).ok();
    assert!(o.stderr.contains("git-swarm is not on PATH"), "{}", o.stderr);
}

fn template_command(path: &str, pointer: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).expect("template");
    let v: Value = serde_json::from_str(&text).expect("json");
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("{path}: no {pointer}")).to_string()
}

#[test]
fn a_worker_installs_agent_hooks_the_stop_hook_records_the_handoff_and_nothing_of_them_lands() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let c = env.clone(bare.to_str().expect("utf-8"), "c");
    let out = env.path("out");
    std::fs::create_dir_all(&out).expect("out");
    // Written by the agent, which runs as nobody under a root runner: open to it.
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o777)).expect("chmod");
    let script = env.path("agent.sh");
    std::fs::write(
        &script,
        r#"set -e
test -f .claude/settings.local.json
test -f .cursor/hooks.json
cp .claude/settings.local.json "$OUT/claude.json"
cp .cursor/hooks.json "$OUT/cursor.json"
echo "work of $GIT_SWARM_TASK_ID" > work.txt
git add -A
git commit -q -m "agent work"
git status --porcelain --ignored=no > "$OUT/status.txt"
printf '%s\n' '{"type":"user","message":{"role":"user","content":"go"}}' \
  '{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"HANDOFF: the work is in work.txt\nnext: tests"}]}}' \
  '{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"x","name":"Bash","input":{}}]}}' \
  > "$OUT/transcript.jsonl"
printf '{"session_id":"s1","transcript_path":"%s","hook_event_name":"Stop","stop_hook_active":false}' \
  "$OUT/transcript.jsonl" | sh -c "$STOP_CMD"
"#,
    )
    .expect("script");
    let cfg = env.path("swarm.toml");
    // The agent writes what it saw into `out`, a folder of the test's: named writable for it (its sandbox).
    std::fs::write(
        &cfg,
        format!(
            "[run]\nsandbox_write = [{:?}]\n[roles.worker]\nexec = \"sh '{}'\"\n",
            out.display().to_string(),
            script.display()
        ),
    )
    .expect("cfg");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let id = env.sw(&c, &["add", "do the work"]).ok().line();
    let stop_cmd = template_command("hooks/claude/settings.local.json", "/hooks/Stop/0/hooks/0/command");
    let o = env.sw_env(
        &c,
        &[("OUT", out.to_str().expect("utf-8")), ("STOP_CMD", &stop_cmd)],
        &["--agent", "w1", "run", "worker", "--once"],
    );
    let o = o.ok();
    assert!(!o.stderr.contains("agent hooks:"), "{}", o.stderr);

    // The agent saw the files, and its own `git add -A` left them out.
    assert_eq!(std::fs::read_to_string(out.join("status.txt")).expect("status"), "");
    let claude: Value = serde_json::from_str(&std::fs::read_to_string(out.join("claude.json")).expect("c")).expect("j");
    let post = claude.pointer("/hooks/PostToolUse/0/hooks/0/command").and_then(Value::as_str).expect("post");
    assert!(post.contains("hooks agent claude post-tool-use"), "{claude}");
    assert_eq!(claude.pointer("/hooks/Stop/0/hooks/0/type"), Some(&Value::from("command")));
    let cursor: Value = serde_json::from_str(&std::fs::read_to_string(out.join("cursor.json")).expect("c")).expect("j");
    assert_eq!(cursor["version"], 1);
    assert!(cursor.pointer("/hooks/stop/0/command").is_some(), "{cursor}");

    // The hand-off of the Stop hook is the task's note.
    let t = env.sw(&c, &["show", &id, "--json"]).ok().json();
    assert_eq!(t["status"], "done", "{t}");
    assert_eq!(t["result"]["note"], "HANDOFF: the work is in work.txt", "{t}");
    let note = env.git(&bare, &["show", &format!("refs/swarm/default:notes/{id}.md")]);
    assert_eq!(note, "HANDOFF: the work is in work.txt\nnext: tests");

    // The landed commits hold the work and nothing of the hooks.
    let files = env.git(&bare, &["ls-tree", "-r", "--name-only", "main"]);
    assert_eq!(files.lines().collect::<Vec<_>>(), ["README.md", "work.txt"], "{files}");
    let all = env.git(&bare, &["log", "--format=%H", "--name-only", "main"]);
    assert!(!all.contains(".claude") && !all.contains(".cursor"), "{all}");
    // And the user's clone is as it was: no settings files, no change to its excludes.
    assert!(!c.join(".claude").exists() && !c.join(".cursor").exists());
    assert_eq!(env.git(&c, &["status", "--porcelain"]), "");
}

#[test]
fn a_tracked_settings_file_is_not_clobbered_and_agent_hooks_can_be_turned_off() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let c = env.clone(bare.to_str().expect("utf-8"), "c");
    std::fs::create_dir_all(c.join(".claude")).expect("mkdir");
    std::fs::write(c.join(".claude/settings.local.json"), "{\"mine\": true}\n").expect("write");
    env.git(&c, &["add", "."]);
    env.git(&c, &["commit", "-q", "-m", "tracked settings"]);
    env.git(&c, &["push", "-q", "origin", "HEAD:main"]);
    let out = env.path("out");
    std::fs::create_dir_all(&out).expect("out");
    // Written by the agent, which runs as nobody under a root runner: open to it.
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o777)).expect("chmod");
    let exec = "cp .claude/settings.local.json \"$OUT/seen-$GIT_SWARM_SWARM.json\"; \
                if test -e .cursor/hooks.json; then touch \"$OUT/cursor-$GIT_SWARM_SWARM\"; fi; \
                echo x >> work.txt";
    for (name, extra) in [("on", ""), ("off", "agent_hooks = false\n")] {
        let cfg = env.path(&format!("{name}.toml"));
        let write = format!("sandbox_write = [{:?}]\n", out.display().to_string());
        std::fs::write(&cfg, format!("[run]\n{write}{extra}[roles.worker]\nexec = {exec:?}\n")).expect("cfg");
        env.sw(&c, &["--swarm", name, "init", "--config", cfg.to_str().expect("utf-8")]).ok();
        env.sw(&c, &["--swarm", name, "add", "work"]).ok();
        let o = env.sw_env(
            &c,
            &[("OUT", out.to_str().expect("utf-8"))],
            &["--swarm", name, "--agent", "w1", "run", "worker", "--once"],
        );
        let o = o.ok();
        assert_eq!(
            o.stderr.contains("agent hooks: .claude/settings.local.json: the repository has this file"),
            name == "on",
            "{}",
            o.stderr
        );
        let seen = std::fs::read_to_string(out.join(format!("seen-{name}.json"))).expect("seen");
        assert_eq!(seen, "{\"mine\": true}\n", "the tracked file is the repository's");
        assert_eq!(out.join(format!("cursor-{name}")).exists(), name == "on", "{name}");
    }
    env.git(&c, &["fetch", "-q", "origin"]);
    assert_eq!(env.git(&c, &["show", "origin/main:.claude/settings.local.json"]), "{\"mine\": true}");
    let files = env.git(&bare, &["ls-tree", "-r", "--name-only", "main"]);
    assert!(!files.contains(".cursor"), "{files}");
}

/// Run `cmd` with `input` on its stdin, as an agent runs its hooks.
fn with_stdin(mut cmd: std::process::Command, input: &str) -> Out {
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    if let Some(mut s) = child.stdin.take() {
        let _ = std::io::Write::write_all(&mut s, input.as_bytes());
    }
    let o = child.wait_with_output().expect("wait");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

fn until_ms(env: &Env, c: &Path, id: &str) -> i64 {
    let t = env.sw(c, &["show", id, "--json"]).ok().json();
    let s = t["claim"]["lease_until"].as_str().expect("claimed").to_string();
    humantime::parse_rfc3339(&s).expect("time").duration_since(std::time::UNIX_EPOCH).expect("epoch").as_millis() as i64
}

fn ops_count(env: &Env, c: &Path) -> usize {
    env.sw(c, &["log", "--json"]).ok().json().as_array().map(Vec::len).unwrap_or(0)
}

#[test]
fn the_post_tool_use_hook_renews_a_claim_running_out_and_is_rate_limited() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let id = env.sw(&c, &["add", "long job"]).ok().line();
    env.sw(&c, &["--agent", "w1", "claim", &id, "--lease", "30s"]).ok();
    let short = until_ms(&env, &c, &id);
    let hook = |secs: &str| {
        let mut cmd = env.cmd(&c);
        cmd.args(["hooks", "agent", "claude", "post-tool-use"])
            .env("GIT_SWARM_AGENT", "w1")
            .env("GIT_SWARM_TASK_ID", &id)
            .env("GIT_SWARM_HOOK_RENEW_SECS", secs);
        with_stdin(cmd, r#"{"hook_event_name":"PostToolUse","tool_name":"Bash"}"#).ok().stderr
    };
    // 30 s left of a 10 m lease: due. The claim's lease grows to the swarm's.
    let err = hook("3600");
    let renewed = until_ms(&env, &c, &id);
    assert!(renewed > short + 60_000, "until {short} → {renewed}: {err}");

    // Shortened again by hand, but the hook looked at the board a moment ago: it does not again.
    env.sw(&c, &["--agent", "w1", "renew", &id, "--lease", "30s"]).ok();
    let short = until_ms(&env, &c, &id);
    let n = ops_count(&env, &c);
    hook("3600");
    assert_eq!((until_ms(&env, &c, &id), ops_count(&env, &c)), (short, n), "rate limited: no read, no renew");

    // Without the limit it renews; and a claim with most of its lease left is not renewed (no push).
    hook("0");
    assert!(until_ms(&env, &c, &id) > short + 60_000);
    let n = ops_count(&env, &c);
    hook("0");
    assert_eq!(ops_count(&env, &c), n, "not due: no op");
}

#[test]
fn cursor_and_codex_handlers_write_the_handoff_but_never_over_the_agents_own() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let id = env.sw(&c, &["add", "x"]).ok().line();
    env.sw(&c, &["--agent", "w1", "claim", &id]).ok();
    let handoff = env.path("run/handoff.md");
    let run = |args: &[&str], stdin: &str, task: Option<&str>| -> Out {
        let mut cmd = env.cmd(&c);
        cmd.args(args).env("GIT_SWARM_AGENT", "w1").env("GIT_SWARM_HANDOFF_FILE", &handoff).env("GIT_SWARM_BIN", BIN);
        if let Some(t) = task {
            cmd.env("GIT_SWARM_TASK_ID", t);
        }
        with_stdin(cmd, stdin)
    };
    let read = || std::fs::read_to_string(&handoff).unwrap_or_default();

    // Outside a worker: nothing.
    let o = run(&["hooks", "agent", "cursor", "after-agent-response"], r#"{"text":"hi"}"#, None).ok();
    assert_eq!((o.stdout.trim(), read().as_str()), ("{}", ""));

    let o = run(&["hooks", "agent", "cursor", "after-agent-response"], r#"{"text":"cursor says"}"#, Some(&id)).ok();
    assert_eq!(o.stdout.trim(), "{}", "Cursor gets a JSON answer");
    assert_eq!(read(), "cursor says\n");

    // The Codex template, as Codex runs it: the program and its arguments, the JSON appended.
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/codex/config.toml")).expect("t");
    let cfg: toml::Value = toml::from_str(&text).expect("toml");
    let argv: Vec<String> =
        cfg["notify"].as_array().expect("notify").iter().map(|v| v.as_str().expect("str").to_string()).collect();
    let payload =
        r#"{"type":"agent-turn-complete","turn-id":"1","input-messages":["go"],"last-assistant-message":"codex says"}"#;
    let mut all: Vec<&str> = argv.iter().map(String::as_str).collect();
    all.push(payload);
    let mut cmd = env.command(all[0]);
    cmd.args(&all[1..])
        .current_dir(&c)
        .env("GIT_SWARM_AGENT", "w1")
        .env("GIT_SWARM_TASK_ID", &id)
        .env("GIT_SWARM_HANDOFF_FILE", &handoff)
        .env("GIT_SWARM_BIN", BIN);
    let o = cmd.output().expect("codex notify");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(), "codex says\n", "replaces our own earlier hand-off");

    // Written by the agent itself: left alone by every handler.
    std::fs::write(&handoff, "the agent's own\n").expect("write");
    run(&["hooks", "agent", "codex", "notify", payload], "", Some(&id)).ok();
    run(&["hooks", "agent", "cursor", "after-agent-response"], r#"{"text":"later"}"#, Some(&id)).ok();
    assert_eq!(read(), "the agent's own\n");

    // Broken input never fails the agent.
    let o = run(&["hooks", "agent", "claude", "stop"], r#"{"transcript_path":"/nonexistent.jsonl"}"#, Some(&id)).ok();
    assert!(o.stderr.contains("transcript"), "{}", o.stderr);
    run(&["hooks", "agent", "claude", "stop"], "not json", Some(&id)).ok();
    run(&["hooks", "agent", "claude", "no-such-event"], "", Some(&id)).ok();
}

/// Claude Code runs `Stop` before it has written the transcript: the hand-off was lost in most runs while it was
/// read from there alone. The payload's `last_assistant_message` is used first. Gemini CLI's `AfterAgent` carries
/// `prompt_response`; an agent or event the handler does not know is a warning and exit 0 (Gemini CLI would take a
/// usage error's exit 2 as "block the agent").
#[test]
fn stop_and_after_agent_hooks_take_the_message_from_their_payload() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let id = env.sw(&c, &["add", "x"]).ok().line();
    env.sw(&c, &["--agent", "w1", "claim", &id]).ok();
    let handoff = env.path("run/handoff.md");
    let run = |args: &[&str], stdin: &str| -> Out {
        let mut cmd = env.cmd(&c);
        cmd.args(args)
            .env("GIT_SWARM_AGENT", "w1")
            .env("GIT_SWARM_HANDOFF_FILE", &handoff)
            .env("GIT_SWARM_TASK_ID", &id);
        with_stdin(cmd, stdin)
    };
    let read = || std::fs::read_to_string(&handoff).unwrap_or_default();
    let payload = r#"{"hook_event_name":"Stop","transcript_path":"/no/such/transcript.jsonl","last_assistant_message":"Status: done\n\nclaude says"}"#;
    let o = run(&["hooks", "agent", "claude", "stop"], payload).ok();
    assert_eq!(read(), "Status: done\n\nclaude says\n", "{}", o.stderr);
    run(
        &["hooks", "agent", "gemini", "after-agent"],
        r#"{"hook_event_name":"AfterAgent","prompt_response":"gemini says"}"#,
    )
    .ok();
    assert_eq!(read(), "gemini says\n");
    run(&["hooks", "agent", "gemini", "after-tool"], r#"{"hook_event_name":"AfterTool","tool_name":"x"}"#).ok();
    let o = run(&["hooks", "agent", "some-new-cli", "stop"], "{}").ok();
    assert!(o.stderr.contains("warning"), "{}", o.stderr);
}
