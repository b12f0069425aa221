//! Contained agents (issue 26): a hostile agent, each door it tries in a test of its own, and which door held. The
//! agent is a shell script that tries, writes what it got into a file of its work tree (which lands with the task,
//! so the test reads it on the target), and exits 0. With the sandbox (the default, where bubblewrap works) every
//! attempt fails; the same agent with `[run] sandbox = "off"` shows what is then open (and that the environment is
//! an allow-list all the same).

use std::path::PathBuf;

use crate::common;
use crate::common::{Env, Out, door, path_url, sandbox_or_skip};

struct World {
    env: Env,
    bare: PathBuf,
    c: PathBuf,
}

/// A swarm whose worker runs `script` (written into the test's folder), with `settings` added to `[run]`; the
/// runner's home holds an ssh key, a git config with a credential, a credential store.
fn world(script: &str, run: &str) -> World {
    let env = Env::new();
    let agent = env.path("agent.sh");
    std::fs::write(&agent, script).expect("agent");
    let config = format!("[run]\n{run}\n[roles.worker]\nexec = \"sh {}\"\n", agent.display());
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let home = &env.home;
    std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
    std::fs::write(home.join(".ssh/id_ed25519"), "-----BEGIN OPENSSH PRIVATE KEY----- secret-key-bytes\n")
        .expect("key");
    std::fs::write(home.join(".git-credentials"), "https://bot:ghp_credentialstore0000@example.com\n").expect("cred");
    let mut gitconfig = std::fs::read_to_string(&env.gitconfig).expect("gitconfig");
    gitconfig.push_str(
        "[credential]\n\thelper = store\n[url \"https://bot:ghp_inconfig0000@example.com/\"]\n\tinsteadOf = x:\n",
    );
    std::fs::write(&env.gitconfig, gitconfig).expect("gitconfig");
    // The clone's own config holds a credential too (what actions/checkout leaves there).
    env.git(
        &clones[0],
        &["config", "http.https://example.com/.extraheader", "AUTHORIZATION: basic ghp_extraheader0000"],
    );
    World { env, bare, c: clones[0].clone() }
}

impl World {
    /// Run one worker on one task; what the agent wrote into `report.txt` of its work tree, from the target.
    fn attempt(&self, extra_env: &[(&str, &str)]) -> (Out, String) {
        self.env.sw(&self.c, &["add", "do the task"]).ok();
        let out = self.env.sw_env(&self.c, extra_env, &["--agent", "w", "run", "worker", "--once"]);
        let report = self.env.git_out(&self.bare, &["show", "main:report.txt"]).stdout;
        (out, report)
    }
}

const SPY: &str = r#"
r=report.txt
say() { printf '%s: %s\n' "$1" "$2" >> "$r"; }
h="$RUNNER_HOME"
say ssh-key "$(cat "$h/.ssh/id_ed25519" 2>&1 | head -c 80)"
say git-config "$(cat "$h/.gitconfig" 2>&1 | grep -c ghp_inconfig)"
say cred-store "$(cat "$h/.git-credentials" 2>&1 | grep -c ghp_credentialstore)"
say token "${GITHUB_TOKEN:-none}/${AWS_SECRET_ACCESS_KEY:-none}/${SSH_AUTH_SOCK:-none}"
# The clone's own git directory (the agent's git directory is a copy of its own in the run folder).
common="$CLONE/.git"
say clone-config "$(cat "$common/config" 2>&1 | grep -c ghp_extraheader)/$(git config --get-regexp 'http\..*' 2>&1 | grep -c ghp_extraheader)"
(echo '[filter "x"]' >> "$common/config") 2>/dev/null && say config written || say config refused
(echo 'echo hooked >> /tmp/hooked' > "$common/hooks/post-checkout" && chmod +x "$common/hooks/post-checkout") 2>/dev/null && say hooks written || say hooks refused
(echo '{}' > "$common/swarm/cache/pick-index-live.txt") 2>/dev/null && [ -s "$common/swarm/cache/pick-index-live.txt" ] && say cache written || say cache refused
(echo x > "$RUNNER_HOME/outside.txt") 2>/dev/null && say outside written || say outside refused
(echo x > "$CLONE/user-file.txt") 2>/dev/null && say checkout written || say checkout refused
procs="$(ls /proc | grep -c '^[0-9]')"
say processes "$procs"
# The doors that would do harm if they opened are tried only in a sandbox (its own pid namespace: few processes).
if [ -n "${HOSTILE:-}" ] && [ "$procs" -lt 20 ]; then
  forged=$(git commit-tree "HEAD^{tree}" -m 'pushed by the agent')
  say remote-main "$(git push -q "$REMOTE" "+$forged:refs/heads/main" 2>&1 >/dev/null | head -c 60 | tr '\n' ' ')"
  say remote-state "$(git push -q "$REMOTE" :refs/swarm/default 2>&1 >/dev/null | head -c 60 | tr '\n' ' ')"
  say remote-tag "$(git push -q "$REMOTE" HEAD:refs/tags/pwned 2>&1 >/dev/null | head -c 60 | tr '\n' ' ')"
fi
(setsid sh -c 'sleep 30; echo late > "$RUNNER_HOME/daemon-was-here"' &) 2>/dev/null
say daemon started
exit 0
"#;

/// Everything the hostile agent tried, through the sandbox: each door held, and the task's honest work landed.
#[test]
fn a_hostile_agent_in_the_sandbox_finds_every_door_shut() {
    if !sandbox_or_skip("a_hostile_agent_in_the_sandbox_finds_every_door_shut") {
        return;
    }
    let w = world(SPY, "");
    let home = w.env.home.to_string_lossy().into_owned();
    let (clone, remote) = (w.c.to_string_lossy().into_owned(), w.bare.to_string_lossy().into_owned());
    let extra = [
        ("RUNNER_HOME", home.as_str()),
        ("CLONE", clone.as_str()),
        ("REMOTE", remote.as_str()),
        ("GITHUB_TOKEN", "ghs_runnertoken0000"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-0000"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock"),
        ("HOSTILE", "1"),
    ];
    // The agent gets RUNNER_HOME, CLONE and REMOTE because the test names them (a role's `env`), as a user would.
    w.env
        .sw(&w.c, &["config", "set", "roles.worker.env", "[\"RUNNER_HOME\", \"CLONE\", \"REMOTE\", \"HOSTILE\"]"])
        .ok();
    let (out, report) = w.attempt(&extra);
    assert_eq!(out.code, 0, "the honest part of the task lands: {}", out.stderr);
    // The runner's home is hidden: no ssh key, no git config, no credential store.
    assert!(!door(&report, "ssh-key").contains("secret-key-bytes"), "{report}");
    assert_eq!(door(&report, "git-config"), "0", "{report}");
    assert_eq!(door(&report, "cred-store"), "0", "{report}");
    // The clone's git directory is out of sight; the agent's own git directory keeps nothing of the clone's config
    // but the repository's format.
    assert_eq!(door(&report, "clone-config"), "0/0", "{report}");
    // The environment is an allow-list: no token, no cloud key, no ssh agent.
    assert_eq!(door(&report, "token"), "none/none/none", "{report}");
    // The clone's git directory (config, hooks, the cache) out of sight, the user's checkout and the rest of the
    // file system read-only.
    for d in ["config", "hooks", "cache", "outside", "checkout"] {
        assert_eq!(door(&report, d), "refused", "{d}: {report}");
    }
    assert!(!w.c.join("user-file.txt").exists() && !w.env.home.join("outside.txt").exists());
    assert!(!std::fs::read_to_string(w.c.join(".git/config")).expect("config").contains("filter \"x\""));
    assert!(!w.c.join(".git/hooks/post-checkout").exists());
    // Pushes to the remote fail (a read-only file system for a path remote; no credential for others).
    for d in ["remote-main", "remote-state", "remote-tag"] {
        assert!(!door(&report, d).is_empty(), "{d}: the push said nothing, so it went through? {report}");
    }
    assert!(w.env.rev(&w.bare, "refs/tags/pwned").is_none());
    let main_log = w.env.git(&w.bare, &["log", "--format=%s", "main"]);
    assert!(!main_log.contains("pushed by the agent"), "{main_log}");
    assert!(w.env.rev(&w.bare, "refs/swarm/default").is_some(), "the state ref is still there");
    // Its own pid namespace: it sees a handful of processes, `kill -9 -1` killed none of the runner's, and the
    // daemon it started ended with the run.
    let seen: u32 = door(&report, "processes").trim().parse().expect("a count");
    assert!(seen < 10, "it saw {seen} processes: {report}");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let daemons = std::fs::read_dir("/proc")
        .expect("proc")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("cmdline")).ok())
        .filter(|c| c.contains("daemon-was-here"))
        .count();
    assert_eq!(daemons, 0, "a daemon of the agent outlived its run");
}

/// An agent that kills everything it can (`kill -9 -1`) ends its own run and nothing else: its sibling agent of the
/// same runner process lands its task, and the runner goes on (the killer's task fails as a run killed by a signal).
#[test]
fn an_agent_that_kills_everything_kills_only_itself() {
    if !sandbox_or_skip("an_agent_that_kills_everything_kills_only_itself") {
        return;
    }
    let script = "case \"$GIT_SWARM_TASK_TITLE\" in\n  killer) procs=$(ls /proc | grep -c '^[0-9]'); [ \"$procs\" -lt 20 ] && kill -9 -1 ;;\n  *) sleep 2; echo honest > \"honest-$GIT_SWARM_TASK_ID.txt\" ;;\nesac\n";
    let w = world(script, "");
    let honest = w.env.sw(&w.c, &["add", "honest"]).ok().line();
    let killer = w.env.sw(&w.c, &["add", "killer"]).ok().line();
    let out = w.env.sw(&w.c, &["--agent", "pair", "run", "worker", "--agents", "2", "--until-idle"]);
    assert_eq!(out.code, 0, "the runner survived and went on: {}", out.stderr);
    let show = |id: &str| w.env.sw(&w.c, &["show", id, "--json"]).ok().json();
    assert_eq!(show(&honest)["status"], "done", "the sibling's work landed: {}", out.stderr);
    let k = show(&killer);
    assert!(k["failures"].to_string().contains("signal 9") || k["failures"].to_string().contains("137"), "{k}");
}

/// The same agent with `[run] sandbox = "off"`: what is then open (the runner's home, the git directory, the
/// remote), put down here so that the docs say the truth — and that the environment is an allow-list even then.
#[test]
fn without_the_sandbox_the_home_and_the_git_directory_are_open_but_the_environment_is_not() {
    let w = world(SPY, "sandbox = \"off\"");
    let home = w.env.home.to_string_lossy().into_owned();
    let (clone, remote) = (w.c.to_string_lossy().into_owned(), w.bare.to_string_lossy().into_owned());
    w.env.sw(&w.c, &["config", "set", "roles.worker.env", "[\"RUNNER_HOME\", \"CLONE\", \"REMOTE\"]"]).ok();
    let (out, report) = w.attempt(&[
        ("RUNNER_HOME", home.as_str()),
        ("CLONE", clone.as_str()),
        ("REMOTE", remote.as_str()),
        ("GITHUB_TOKEN", "ghs_runnertoken0000"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock"),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(door(&report, "token"), "none/none/none", "the environment is an allow-list: {report}");
    // Open without a sandbox: the home, the git directory (put back after the run), the checkout.
    assert!(door(&report, "ssh-key").contains("secret-key-bytes"), "{report}");
    assert_eq!(door(&report, "config"), "written", "{report}");
    assert!(out.stderr.contains("during its run: put back"), "the guard put the config back: {}", out.stderr);
    assert!(!std::fs::read_to_string(w.c.join(".git/config")).expect("config").contains("filter \"x\""));
    // The cache the agent wrote is dropped, not read.
    assert!(
        !w.c.join(".git/swarm/cache/pick-index-live.txt").exists() || {
            std::fs::read_to_string(w.c.join(".git/swarm/cache/pick-index-live.txt")).unwrap_or_default() != "{}\n"
        }
    );
}

/// `[run] sandbox = "required"` on a machine without one: the runner refuses before it claims; `auto` warns at
/// start, `doctor` and `status` say it.
#[test]
fn a_required_sandbox_that_cannot_start_refuses_and_auto_warns() {
    let w = world("echo work > work.txt\n", "sandbox = \"required\"");
    let none = [("GIT_SWARM_BWRAP", "/nonexistent/bwrap")];
    let id = w.env.sw(&w.c, &["add", "work"]).ok().line();
    let out = w.env.sw_env(&w.c, &none, &["run", "worker", "--once"]).code(1);
    assert!(
        out.stderr.contains("sandbox = \"required\"") && out.stderr.contains("cannot start a sandbox"),
        "{}",
        out.stderr
    );
    let t = w.env.sw(&w.c, &["show", &id, "--json"]).ok().json();
    assert_eq!((t["status"].as_str(), t["epoch"].as_u64()), (Some("open"), Some(0)), "nothing was claimed: {t}");
    let doc = w.env.sw_env(&w.c, &none, &["doctor", "--json"]).code(1).json();
    assert!(doc["findings"].to_string().contains("runners refuse to start"), "{doc}");
    // auto: a warning at the start, and the task lands uncontained.
    w.env.sw(&w.c, &["config", "set", "run.sandbox", "auto"]).ok();
    let out = w.env.sw_env(&w.c, &none, &["run", "worker", "--once"]).ok();
    assert!(out.stderr.contains("agents run uncontained"), "{}", out.stderr);
    let status = w.env.sw_env(&w.c, &none, &["status", "--json"]).ok().json();
    assert_eq!(status["sandbox"]["contained"], false, "{status}");
    assert!(w.env.sw_env(&w.c, &none, &["status"]).ok().stdout.contains("UNCONTAINED"));
}

/// The agent's own `git swarm add` (a follow-up task) goes through the runner, scrubbed of the runner's secrets;
/// its hooks' renewals are the runner's.
#[test]
fn what_an_agent_files_goes_through_the_runner_and_is_scrubbed() {
    let script = "echo work > work.txt\n\"$GIT_SWARM_BIN\" add 'follow up' --body \"the key is $MY_SERVICE_TOKEN\" > added.txt\n";
    let w = world(script, "");
    w.env.sw(&w.c, &["config", "set", "roles.worker.env", "[\"MY_SERVICE_TOKEN\"]"]).ok();
    let (out, _) = w.attempt(&[("MY_SERVICE_TOKEN", "svc-0123456789abcdef")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("filed 1 task(s) the agent added"), "{}", out.stderr);
    let list = w.env.sw(&w.c, &["list", "--json"]).ok().json();
    let follow = list.as_array().expect("list").iter().find(|t| t["title"] == "follow up").cloned().expect("filed");
    assert!(!follow["body"].as_str().unwrap_or_default().contains("svc-0123456789abcdef"), "{follow}");
    assert!(follow["body"].as_str().unwrap_or_default().contains("[redacted]"), "{follow}");
    // The id the agent was told is the id it was filed under.
    let told = w.env.git_out(&w.bare, &["show", "main:added.txt"]).stdout;
    assert_eq!(told.trim(), follow["id"].as_str().unwrap_or_default(), "{told}");
}

/// Many agents in one clone, sandboxed: what a person changes in the clone's git config while they run (a setting,
/// trusting the settings) stays as they made it — nothing of the agents' can reach it, so nothing is put back.
#[test]
fn a_persons_git_config_survives_a_fleet_in_the_sandbox() {
    if !sandbox_or_skip("a_persons_git_config_survives_a_fleet_in_the_sandbox") {
        return;
    }
    let w = world("sleep 1; echo \"$GIT_SWARM_TASK_ID\" > \"done-$GIT_SWARM_TASK_ID.txt\"\n", "");
    for i in 0..16 {
        w.env.sw(&w.c, &["add", &format!("t{i}")]).ok();
    }
    let runner = w.env.spawn(&w.c, "fleet", &[], &["run", "worker", "--agents", "8", "--until-idle"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    w.env.git(&w.c, &["config", "alias.lg", "log --oneline"]);
    w.env.git(&w.c, &["config", "swarm.run.taskTimeout", "45m"]);
    w.env.sw(&w.c, &["trust", "--yes"]).ok();
    let out = common::finish(runner, 240, "the fleet");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("put back"), "a person's change was put back: {}", out.stderr);
    assert_eq!(w.env.git(&w.c, &["config", "alias.lg"]), "log --oneline");
    assert_eq!(w.env.git(&w.c, &["config", "swarm.run.taskTimeout"]), "45m");
    let done = w.env.sw(&w.c, &["list", "--status", "done", "--json"]).ok().json();
    assert_eq!(done.as_array().map(Vec::len), Some(16), "{done}");
}

/// Derived state an agent (or anything) planted in `.git/swarm/cache` never changes what a claim finds: a pick
/// index that says every task is gone, with a good checksum, for the very tree of the board, is checked on the tree
/// when it finds nothing ready — the open task is claimed.
#[test]
fn a_planted_pick_index_never_sends_a_claim_idle() {
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    let id = env.sw(c, &["add", "the only task"]).ok().line();
    // A claim of the next ready task writes the index; give the task back, so that it is open again.
    assert_eq!(env.sw(c, &["claim"]).ok().line(), id);
    env.sw(c, &["release", &id]).ok();
    let index = c.join(".git/swarm/cache/pick-index-live.txt");
    let text = std::fs::read_to_string(&index).expect("the index");
    // Planted for the board's very tree (nothing to patch), with no live task at all, and a good checksum.
    let tree = env.git(&bare, &["rev-parse", "refs/swarm/default:tasks"]);
    let body = text.split_once('\n').map(|(_, b)| b).unwrap_or_default();
    let mut lines = body.lines();
    let head = lines.next().unwrap_or_default();
    let format = head.split('\t').next().unwrap_or_default();
    // No claims, no open tasks (both sections empty), only the finished tasks of the last section.
    let mut planted = format!("{format}\t{tree}\t0\t0\n");
    planted.extend(lines.filter(|l| !l.starts_with("L\t") && l.ends_with("\tc")).map(|l| format!("{l}\n")));
    std::fs::write(&index, format!("{:08x}\n{planted}", crc32fast::hash(planted.as_bytes()))).expect("plant");
    let claimed = env.sw(c, &["--agent", "w2", "claim"]).ok().line();
    assert_eq!(claimed, id, "the planted index sent the claim idle");
}

/// The agent's git takes its own settings (the excludes that keep the CLIs' files out of its commits), whatever
/// `GIT_CONFIG_*` the runner's environment holds, in the sandbox and without it: numbered after the runner's count
/// (which the agent never gets), every git command of the agent refused ("missing config key GIT_CONFIG_KEY_0"); in
/// the sandbox, the copy's settings overwrote the excludes.
#[test]
fn the_agents_git_keeps_its_excludes_whatever_the_runners_git_config_environment() {
    let script = "git status --porcelain > /dev/null 2> git-err.txt; echo $? > git-status.txt\n\
                  git config --get core.excludesFile > /dev/null && echo set > excludes.txt || echo unset > excludes.txt\n\
                  mkdir -p .claude && echo mine > .claude/settings.local.json\n\
                  git add -A && git commit -qm work\n";
    for run in ["sandbox = \"off\"", "sandbox = \"auto\""] {
        if run.contains("auto") && !sandbox_or_skip("the_agents_git_keeps_its_excludes") {
            continue;
        }
        let w = world(script, run);
        let runner_env =
            [("GIT_CONFIG_COUNT", "1"), ("GIT_CONFIG_KEY_0", "user.useConfigOnly"), ("GIT_CONFIG_VALUE_0", "false")];
        let (out, _) = w.attempt(&runner_env);
        assert_eq!(out.code, 0, "{run}: {}", out.stderr);
        let show = |f: &str| w.env.git_out(&w.bare, &["show", &format!("main:{f}")]).stdout.trim().to_string();
        assert_eq!(show("git-status.txt"), "0", "{run}: the agent's git refused: {}", show("git-err.txt"));
        assert_eq!(show("excludes.txt"), "set", "{run}");
        // The agent's `git add -A` left the CLI's file out: its commit, and so the landing, holds the work alone.
        let tree = w.env.git(&w.bare, &["ls-tree", "-r", "--name-only", "main"]);
        assert!(!tree.contains(".claude/"), "{run}: {tree}");
    }
}

/// A folder under `/tmp`, which every sandbox hides (its own `/tmp` is private): where a person might have put an
/// agent's script or a check's venv (issue 37), and what no sandboxed run can start.
fn under_tmp() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("git-swarm-hidden").tempdir_in("/tmp").expect("a folder under /tmp")
}

fn executable(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
}

/// `doctor` judges each role's agent and the check by what the sandbox shows (issue 37): an agent script and a check
/// under `/tmp` are errors that name the folder and the setting that shows it ("will run here" before), one finding
/// lists what the sandbox shows and hides, and with the folder in `[run] sandbox_read` both pass.
#[test]
fn doctor_names_an_agent_script_and_a_check_the_sandbox_hides() {
    if !sandbox_or_skip("doctor_names_an_agent_script_and_a_check_the_sandbox_hides") {
        return;
    }
    let hidden = under_tmp();
    let dir = hidden.path();
    executable(&dir.join("agent.sh"), "#!/bin/sh\necho work > work.txt\n");
    executable(&dir.join("check.sh"), "#!/bin/sh\nexit 0\n");
    let env = Env::new();
    let config = format!(
        "[run]\ncheck = \"{}/check.sh\"\n[roles.worker]\nexec = \"sh {}/agent.sh\"\n",
        dir.display(),
        dir.display()
    );
    let (_, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    let out = env.sw(c, &["doctor", "--json"]).code(1);
    let findings = out.json()["findings"].as_array().cloned().unwrap_or_default();
    let errors: Vec<&serde_json::Value> = findings.iter().filter(|f| f["severity"] == "error").collect();
    let script = dir.join("agent.sh").display().to_string();
    let named = |who: &str, path: &str| {
        errors.iter().find(|f| {
            let m = f["message"].as_str().unwrap_or_default();
            m.starts_with(who) && m.contains("cannot start in the sandbox") && m.contains(path)
        })
    };
    let worker = named("worker:", &script).unwrap_or_else(|| panic!("no error for the worker: {findings:?}"));
    assert!(worker["message"].as_str().unwrap_or_default().contains("/tmp is private in the sandbox"), "{worker}");
    let hint = worker["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains(&format!("git swarm config set run.sandbox_read {}", dir.display()))
            && hint.contains("where the sandbox shows it"),
        "{hint}"
    );
    named("[run] check", &dir.join("check.sh").display().to_string())
        .unwrap_or_else(|| panic!("no error for the check: {findings:?}"));
    // What the sandbox shows and hides: one finding, its lines in `details`, and under it in the human output.
    let seen = findings
        .iter()
        .find(|f| f["check"] == "sandbox" && f["severity"] == "info")
        .unwrap_or_else(|| panic!("no finding of what the sandbox shows: {findings:?}"));
    let details: Vec<&str> = seen["details"].as_array().into_iter().flatten().filter_map(|d| d.as_str()).collect();
    assert!(details.iter().any(|d| d.starts_with("hides: ") && d.contains("/tmp (private)") && d.contains('~')));
    assert!(
        details.iter().any(|d| d.starts_with("read-only: ")) && details.iter().any(|d| d.starts_with("writable: "))
    );
    let human = env.sw(c, &["doctor"]).code(1).stdout;
    assert!(human.contains("      hides: ") && human.contains("/tmp (private)"), "{human}");
    // Shown again by [run] sandbox_read: both start in the sandbox.
    env.sw(c, &["config", "set", "run.sandbox_read", &dir.display().to_string()]).ok();
    let out = env.sw(c, &["doctor", "--json"]);
    assert!(!out.stdout.contains("cannot start in the sandbox"), "{}", out.stdout);
    assert!(out.stdout.contains("will run here"), "{}", out.stdout);
}

/// An agent and a check under a folder the sandbox hides cannot start in any run (issue 37): the runner's hint names
/// the hidden path, the rule that hides it and `[run] sandbox_read` — not a program missing on this machine — and
/// no attempt is spent.
#[test]
fn an_agent_or_a_check_the_sandbox_hides_gets_a_hint_naming_it() {
    if !sandbox_or_skip("an_agent_or_a_check_the_sandbox_hides_gets_a_hint_naming_it") {
        return;
    }
    let hidden = under_tmp();
    let dir = hidden.path();
    executable(&dir.join("agent.sh"), "#!/bin/sh\necho work > work.txt\n");
    executable(&dir.join("check.sh"), "#!/bin/sh\nexit 0\n");
    let env = Env::new();
    let config = format!("[roles.worker]\nexec = \"{}/agent.sh\"\n", dir.display());
    let (_, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    let id = env.sw(c, &["add", "some work"]).ok().line();
    let says = |stderr: &str, path: &str| {
        stderr.contains(&format!("the sandbox hides {path}"))
            && stderr.contains("/tmp is private in the sandbox")
            && stderr.contains("[run] sandbox_read")
    };
    let agent = env.sw(c, &["--agent", "w", "run", "worker", "--once"]).code(1);
    assert!(says(&agent.stderr, &dir.join("agent.sh").display().to_string()), "{}", agent.stderr);
    // The agent moved where the sandbox shows it; the check stays under /tmp.
    let script = env.path("agent.sh");
    executable(&script, "#!/bin/sh\necho work > work.txt\n");
    env.sw(c, &["config", "set", "roles.worker.exec", &format!("sh {}", script.display())]).ok();
    env.sw(c, &["config", "set", "run.check", &format!("{}/check.sh", dir.display())]).ok();
    let check = env.sw(c, &["--agent", "w", "run", "worker", "--once"]).code(1);
    assert!(check.stderr.contains("cannot start here"), "{}", check.stderr);
    assert!(says(&check.stderr, &dir.join("check.sh").display().to_string()), "{}", check.stderr);
    let t = env.sw(c, &["show", &id, "--json"]).ok().json();
    assert_eq!((t["status"].as_str(), t["attempts"].as_u64()), (Some("open"), Some(0)), "{t}");
}
