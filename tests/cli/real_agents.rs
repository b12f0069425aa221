//! The published agent CLIs, driven by `git swarm run worker` with each preset **as shipped**, against the
//! stand-in model API of `tests/common/model_api.rs` on loopback — as root and as an unprivileged user.
//!
//! The CLIs come from `.ci/agents.sh` (pinned versions, in `$GIT_SWARM_AGENTS_DIR`, default
//! `/opt/git-swarm-agents`; `GIT_SWARM_AGENTS_LATEST=1` points CI at the newest releases instead). A CLI that is
//! not installed skips its test, unless `GIT_SWARM_REQUIRE_ALL=1` (CI), where it fails. The unprivileged runs use
//! the user `swarm-tester` (`.ci/run` creates it) and need root to switch to it.
//!
//! What each test checks, per preset: both tasks land with their `Swarm-Task:` trailer; the commit that lands is
//! the **agent's own** (the stand-in commits through the CLI's shell tool); the hand-off of every task is recorded
//! (by the CLI's hook, or from the CLI's own record of its last message); the hooks that renew leases fired; no
//! file of the agent's own (`.aider*`, `.claude/`, `.gemini/`, …) is in the commits; the clone's git config is as
//! it was.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common;
use crate::common::model_api::{ModelApi, Strict};
use crate::common::{Env, path_url};

/// Serve the stand-in by hand, for exploring a CLI: `STANDIN_ADDR=127.0.0.1:18010 cargo test --test real_agents
/// serve_the_stand_in -- --ignored --nocapture` (stops after `STANDIN_SECS`, default 600; `STANDIN_DUMP=<dir>`
/// writes each request body there).
#[test]
#[ignore = "a tool for people: serves the stand-in model API until STANDIN_SECS pass"]
fn serve_the_stand_in() {
    let addr = std::env::var("STANDIN_ADDR").unwrap_or_else(|_| "127.0.0.1:18010".into());
    let secs: u64 = std::env::var("STANDIN_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    let api = ModelApi::start_on(&addr, Strict::Lenient);
    println!("stand-in model API at {}", api.url());
    let mut seen = 0;
    for _ in 0..secs * 4 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let reqs = api.requests();
        for r in &reqs[seen..] {
            let tools = r.body["tools"].as_array().map_or(0, Vec::len);
            println!("{:?} {} -> {} {} (tools in request: {tools})", r.wire, r.path, r.status, r.reply);
            if let Ok(dir) = std::env::var("STANDIN_DUMP") {
                let n = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
                let _ = std::fs::write(
                    format!("{dir}/{n:03}.json"),
                    serde_json::to_string_pretty(&r.body).unwrap_or_default(),
                );
            }
        }
        seen = reqs.len();
    }
}

/// The folder of the installed CLIs (`bin/<cli>`).
fn agents_dir() -> PathBuf {
    std::env::var_os("GIT_SWARM_AGENTS_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let latest = std::env::var("GIT_SWARM_AGENTS_LATEST").is_ok_and(|v| v == "1");
        PathBuf::from(if latest { "/opt/git-swarm-agents-latest" } else { "/opt/git-swarm-agents" })
    })
}

fn require_all() -> bool {
    std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1")
}

/// The CLI's `bin/` folder, or `None` (skipped, with a line saying so) when it is not installed.
fn cli_or_skip(test: &str, program: &str) -> Option<PathBuf> {
    let bin = agents_dir().join("bin");
    if bin.join(program).exists() {
        return Some(bin);
    }
    let why = format!("{program} is not installed in {} (run .ci/agents.sh)", bin.display());
    assert!(!require_all(), "{test}: {why} and GIT_SWARM_REQUIRE_ALL=1");
    println!("{test}: skipped: {why}");
    None
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Who runs the worker.
#[derive(Debug, Clone, Copy, PartialEq)]
enum As {
    Root,
    /// `swarm-tester`, when this test runs as root; otherwise the user running the tests.
    User,
}

/// The unprivileged user's uid and gid, when we are root and it exists (`useradd swarm-tester`).
fn tester() -> Option<(u32, u32)> {
    let u = nix::unistd::User::from_name("swarm-tester").ok().flatten()?;
    Some((u.uid.as_raw(), u.gid.as_raw()))
}

/// How a CLI is pointed at the stand-in: what a user's login or API key would be (files in `home`, variables).
fn configure(preset: &str, home: &Path, api: &ModelApi) -> Vec<(String, String)> {
    let url = api.url();
    let w = |rel: &str, text: String| {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("config dir");
        std::fs::write(p, text).expect("config file");
    };
    let v = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    match preset {
        "claude" => v(&[
            ("ANTHROPIC_BASE_URL", &url),
            ("ANTHROPIC_API_KEY", "sk-ant-standin-0000"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ]),
        "codex" => {
            w(
                ".codex/config.toml",
                format!(
                    "model = \"gpt-5.2\"\nmodel_provider = \"standin\"\n[model_providers.standin]\nname = \"standin\"\n\
                     base_url = \"{url}/v1\"\nenv_key = \"STANDIN_KEY\"\nwire_api = \"responses\"\n\
                     supports_websockets = false\nrequest_max_retries = 0\nstream_max_retries = 0\n"
                ),
            );
            v(&[("STANDIN_KEY", "sk-standin-0000")])
        }
        "gemini" => {
            w(".gemini/settings.json", r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#.into());
            v(&[("GEMINI_API_KEY", "standin-0000"), ("GOOGLE_GEMINI_BASE_URL", &url)])
        }
        "opencode" => {
            w(
                ".config/opencode/opencode.json",
                format!(
                    r#"{{"$schema":"https://opencode.ai/config.json","model":"anthropic/claude-sonnet-4-5","autoupdate":false,"provider":{{"anthropic":{{"options":{{"baseURL":"{url}/v1","apiKey":"sk-ant-standin-0000"}}}}}}}}"#
                ),
            );
            v(&[])
        }
        "aider" => v(&[
            ("OPENAI_API_BASE", &format!("{url}/v1")),
            ("OPENAI_API_KEY", "sk-standin-0000"),
            ("AIDER_MODEL", "openai/standin"),
            // litellm would fetch its price list from GitHub: not on this network.
            ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        ]),
        other => panic!("no stand-in configuration for {other}"),
    }
}

/// One preset, end to end: two tasks through `git swarm run worker --until-idle`.
fn lands_real_work(preset: &str, program: &str, who: As) {
    let test = format!("{preset}_as_{who:?}").to_lowercase();
    let Some(bin) = cli_or_skip(&test, program) else { return };
    let drop_to = match who {
        As::Root if !is_root() => {
            assert!(!require_all(), "{test}: needs root and GIT_SWARM_REQUIRE_ALL=1");
            println!("{test}: skipped: not root");
            return;
        }
        As::Root => None,
        As::User if is_root() => match tester() {
            Some(ids) => Some(ids),
            None => {
                assert!(!require_all(), "{test}: no user swarm-tester (useradd -m swarm-tester)");
                println!("{test}: skipped: no user swarm-tester");
                return;
            }
        },
        As::User => None,
    };
    let api = ModelApi::start(Strict::Lenient);
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    env.sw(c, &["config", "set", "roles.worker.preset", preset]).ok();
    let mut ids = Vec::new();
    for n in 1..=2 {
        let body = format!("Write the greeting.\nstandin: write notes/{preset}-{n}.txt hello {n} from {preset}");
        let id = env.sw(c, &["add", &format!("Greeting {n} by {preset}"), "--body", &body]).ok().line();
        ids.push(id);
    }
    let config_before = std::fs::read_to_string(c.join(".git/config")).expect("config");
    let home = env.home.clone();
    let mut extra = configure(preset, &home, &api);
    if let Some((uid, gid)) = drop_to {
        common::chown_all(env.root.path(), uid, gid);
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    extra.push(("PATH".into(), path));
    extra.push(("GIT_SWARM_HOOK_RENEW_SECS".into(), "0".into()));
    let mut cmd = env.cmd(c);
    cmd.args(["run", "worker", "--until-idle"]).envs(extra).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some((uid, gid)) = drop_to {
        // std drops root's supplementary groups when it sets the uid.
        cmd.uid(uid).gid(gid);
    }
    let out = common::finish(cmd.spawn().expect("start the worker"), 600, &test);
    let log = logs_of(c);
    assert_eq!(
        out.code,
        0,
        "{test}: the worker failed\n{}\n{}\n--- agent log\n{log}\n--- stand-in\n{}",
        out.stdout,
        out.stderr,
        api.summary()
    );

    // Every task is done, with the agent's own commit on main carrying the trailer.
    let main = env.git(&bare, &["rev-parse", "main"]);
    for (n, id) in ids.iter().enumerate() {
        let task = env.sw(c, &["show", id, "--json"]).ok().json();
        assert_eq!(task["status"], "done", "{test}: {task}\n{}\n{log}", out.stderr);
        let commit = task["result"]["commit"].as_str().expect("commit").to_string();
        let msg = env.git(&bare, &["log", "-1", "--format=%B", &commit]);
        assert!(
            msg.starts_with(&format!("standin: notes/{preset}-{}.txt", n + 1)),
            "{test}: not the agent's commit:\n{msg}"
        );
        assert!(msg.contains(&format!("Swarm-Task: {id}")), "{test}: no trailer:\n{msg}");
        assert!(env.git_out(&bare, &["merge-base", "--is-ancestor", &commit, &main]).code == 0, "{test}: not on main");
        let text = env.git(&bare, &["show", &format!("main:notes/{preset}-{}.txt", n + 1)]);
        assert_eq!(text, format!("hello {} from {preset}", n + 1));
        // The hand-off of every task, as the CLI reported the agent's last message.
        let handoff = env.git(&bare, &["show", &format!("refs/swarm/default:notes/{id}.md")]);
        assert!(
            handoff.starts_with("Status: done") && handoff.contains("The stand-in model wrote"),
            "{test}: {handoff}"
        );
    }
    // Nothing but the work: no file of the agent's own in what landed.
    let root = env.git(&bare, &["rev-list", "--max-parents=0", "main"]);
    let files = env.git(&bare, &["diff", "--name-only", &root, "main"]);
    let want: Vec<String> = (1..=2).map(|n| format!("notes/{preset}-{n}.txt")).collect();
    assert_eq!(files.lines().collect::<Vec<_>>(), want, "{test}: the commits hold more than the work");
    // The hooks that renew leases ran (Claude Code's PostToolUse, Gemini CLI's AfterTool, Codex's notify).
    // The hooks that renew leases ran (Claude Code's PostToolUse, Gemini CLI's AfterTool, Codex's notify): inside a
    // runner's run the runner keeps the lease, and says in the agent's log that they fired.
    if matches!(preset, "claude" | "gemini" | "codex") {
        for id in &ids {
            assert!(log.contains(&format!("hook-renew-{id}")), "{test}: no renewal hook ran for {id}\n{log}");
        }
    }
    // The agent planted nothing in the clone's git config (an identity, a filter).
    assert_eq!(std::fs::read_to_string(c.join(".git/config")).expect("config"), config_before, "{test}: .git/config");
    // What each run spent, as the CLI reported it, is on the board: together, exactly what the stand-in billed —
    // but for the side requests that opencode (a session title) and aider (a commit message from its weak model)
    // make and leave out of their own reports (docs/spend.md).
    let unreported_side = matches!(preset, "opencode" | "aider");
    let billed = api
        .requests()
        .iter()
        .filter(|r| r.status == 200 && !(unreported_side && r.reply == "side"))
        .fold((0, 0), |(i, o), r| (i + r.input_tokens, o + r.output_tokens));
    let mut recorded = (0, 0);
    for id in &ids {
        let task = env.sw(c, &["show", id, "--json"]).ok().json();
        let u = &task["usage"];
        assert_eq!(u["runs"], 1, "{test}: {id} has no usage of its run: {task}\n{log}");
        recorded.0 += u["input_tokens"].as_u64().unwrap_or(0);
        recorded.1 += u["output_tokens"].as_u64().unwrap_or(0);
        // Claude Code and opencode price their runs; the others report tokens only.
        let priced = matches!(preset, "claude" | "opencode");
        assert_eq!(u["cost_usd"].as_f64().is_some_and(|c| c > 0.0), priced, "{test}: cost of {id}: {u}");
    }
    assert_eq!(recorded, billed, "{test}: recorded usage is not what the stand-in billed\n{}", api.summary());
    // The model's turns went through the CLI (aider has no tools: its edits are file listings in the answer).
    let turn = if preset == "aider" { "text" } else { "tool" };
    assert!(api.requests().iter().any(|r| r.reply.starts_with(turn)), "{test}: no {turn} turn\n{}", api.summary());
}

/// Every agent log of the clone, for failure messages.
fn logs_of(clone: &Path) -> String {
    let mut s = String::new();
    for e in std::fs::read_dir(clone.join(".git/swarm/logs")).into_iter().flatten().flatten() {
        s.push_str(&format!("== {}\n{}\n", e.path().display(), std::fs::read_to_string(e.path()).unwrap_or_default()));
    }
    s
}

macro_rules! preset_tests {
    ($($name:ident: $preset:literal, $program:literal;)*) => {
        mod as_root {
            $(#[test]
            fn $name() {
                super::lands_real_work($preset, $program, super::As::Root);
            })*
        }
        mod as_user {
            $(#[test]
            fn $name() {
                super::lands_real_work($preset, $program, super::As::User);
            })*
        }
    };
}

preset_tests! {
    claude: "claude", "claude";
    codex: "codex", "codex";
    gemini: "gemini", "gemini";
    opencode: "opencode", "opencode";
    aider: "aider", "aider";
}

/// A published CLI in a conflict run: two tasks write the same new file from the same tip, the second to land meets
/// a conflict; the runner replays it itself, gives the CLI a fresh work tree with the merge (markers in the file,
/// its stages in the index), and takes the file the CLI resolved. As root (the agent as nobody).
fn resolves_a_conflict(preset: &str, program: &str) {
    let test = format!("{preset}_resolves_a_conflict");
    let Some(bin) = cli_or_skip(&test, program) else { return };
    let api = ModelApi::start(Strict::Lenient);
    let env = Env::new();
    let (bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    env.sw(c, &["config", "set", "roles.worker.preset", preset]).ok();
    let ids: Vec<String> = ["left", "right"]
        .iter()
        .map(|side| {
            let body = format!("Write the side.\nstandin: write notes/shared.txt from the {side}");
            env.sw(c, &["add", &format!("The {side} side"), "--body", &body]).ok().line()
        })
        .collect();
    let mut extra = configure(preset, &env.home.clone(), &api);
    extra.push(("PATH".into(), format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())));
    // Both agents start from the same tip: the one that lands second meets the other's file.
    let mut cmd = env.cmd(c);
    cmd.args(["run", "worker", "--agents", "2", "--until-idle"])
        .envs(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = common::finish(cmd.spawn().expect("start the worker"), 600, &test);
    let log = logs_of(c);
    assert_eq!(out.code, 0, "{test}: {}\n--- agent log\n{log}\n--- stand-in\n{}", out.stderr, api.summary());
    assert!(out.stderr.contains("rebase conflict on"), "{test}: no conflict run:\n{}", out.stderr);
    for id in &ids {
        let task = env.sw(c, &["show", id, "--json"]).ok().json();
        assert_eq!(task["status"], "done", "{test}: {task}\n{}\n{log}", out.stderr);
    }
    let shared = env.git(&bare, &["show", "main:notes/shared.txt"]);
    assert!(
        shared.contains("from the left") && shared.contains("from the right"),
        "{test}: a side was lost:\n{shared}"
    );
    assert!(!shared.contains("<<<<<<<") && !shared.contains(">>>>>>>"), "{test}: {shared}");
}

#[test]
fn claude_resolves_a_conflict() {
    resolves_a_conflict("claude", "claude");
}

#[test]
fn codex_resolves_a_conflict() {
    resolves_a_conflict("codex", "codex");
}

#[test]
fn gemini_resolves_a_conflict() {
    resolves_a_conflict("gemini", "gemini");
}

#[test]
fn opencode_resolves_a_conflict() {
    resolves_a_conflict("opencode", "opencode");
}

/// `git swarm doctor` names each role's agent and its CLI's version.
#[test]
fn doctor_reports_the_version_of_each_roles_cli() {
    let Some(bin) = cli_or_skip("doctor_reports_the_version_of_each_roles_cli", "claude") else { return };
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    env.sw(c, &["config", "set", "roles.worker.preset", "claude"]).ok();
    env.sw(c, &["config", "set", "roles.judge.exec", "no-such-agent --go"]).ok();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = env.sw_env(c, &[("PATH", &path)], &["doctor", "--json"]);
    let doc = out.json();
    let agents: Vec<&serde_json::Value> =
        doc["findings"].as_array().expect("findings").iter().filter(|f| f["check"] == "agents").collect();
    let msg = |role: &str| {
        agents.iter().find(|f| f["message"].as_str().is_some_and(|m| m.starts_with(role))).cloned().cloned()
    };
    let worker = msg("worker").expect("worker");
    assert_eq!(worker["severity"], "ok", "{worker}");
    assert!(worker["message"].as_str().is_some_and(|m| m.contains("claude 2.") && m.contains("will run")), "{worker}");
    let judge = msg("judge").expect("judge");
    assert_eq!(judge["severity"], "error", "{judge}");
    assert_eq!(out.code, 1, "a role whose agent cannot start fails doctor: {}", out.stderr);
    assert!(judge["message"].as_str().is_some_and(|m| m.contains("`no-such-agent` is not installed")), "{judge}");
}

/// A real Claude Code whose model never stops calling tools (`standin: loop`) is stopped at the task's budget: its
/// usage is read from its stream as it goes (per message), and the task fails for good with the reason.
#[test]
fn a_task_budget_stops_a_real_agent_that_loops() {
    let test = "a_task_budget_stops_a_real_agent_that_loops";
    let Some(bin) = cli_or_skip(test, "claude") else { return };
    let api = ModelApi::start(Strict::Lenient);
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_clones(path_url, 1);
    let c = &clones[0];
    env.sw(c, &["config", "set", "roles.worker.preset", "claude"]).ok();
    env.sw(c, &["config", "set", "run.budget.task_tokens", "5000"]).ok();
    let id = env.sw(c, &["add", "Loop", "--body", "standin: write notes/loop.txt x\nstandin: loop"]).ok().line();
    let mut extra = configure("claude", &env.home, &api);
    extra.push(("PATH".into(), format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())));
    let start = std::time::Instant::now();
    let mut cmd = env.cmd(c);
    cmd.args(["run", "worker", "--once"]).envs(extra).stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = common::finish(cmd.spawn().expect("start the worker"), 300, test);
    assert_eq!(out.code, 1, "the task failed: {}", out.stderr);
    let task = env.sw(c, &["show", &id, "--json"]).ok().json();
    assert_eq!(task["status"], "failed", "for good, whatever attempts are left: {task}\n{}", out.stderr);
    let reason = task["failures"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("spent its budget") && reason.contains("of a budget of 5000"), "{reason}");
    // What the stream said so far: every message's input (1,000 a turn at the stand-in), stopped near the budget.
    let input = task["usage"]["input_tokens"].as_u64().unwrap_or(0);
    let turns = api.requests().iter().filter(|r| r.reply.starts_with("tool")).count();
    assert!(input >= 5000 && turns < 40, "{input} input tokens over {turns} turns in {:?}", start.elapsed());
    println!("{test}: stopped at {input} input tokens after {turns} tool turns, {:?}", start.elapsed());
}

/// Three runners of a real agent CLI (Codex, three requests a task at the stand-in) in three clones, with a cycle
/// budget of two tasks' requests: the fleet stops claiming, every runner exits 0 saying why, and the tasks nobody
/// claimed are untouched.
#[test]
fn a_cycle_budget_of_a_few_requests_stops_a_fleet_of_real_agents() {
    let test = "a_cycle_budget_of_a_few_requests_stops_a_fleet_of_real_agents";
    let Some(bin) = cli_or_skip(test, "codex") else { return };
    let api = ModelApi::start(Strict::Lenient);
    let env = Env::new();
    let (_bare, clones) = env.swarm_with_clones(path_url, 3);
    env.sw(&clones[0], &["config", "set", "roles.worker.preset", "codex"]).ok();
    // Each task: two tool turns and a final one, 1,100 tokens each.
    env.sw(&clones[0], &["config", "set", "run.budget.cycle_tokens", "6600"]).ok();
    let ids: Vec<String> = (1..=9)
        .map(|n| {
            let body = format!("standin: write notes/fleet-{n}.txt hello {n}");
            env.sw(&clones[0], &["add", &format!("Fleet {n}"), "--body", &body]).ok().line()
        })
        .collect();
    let mut extra = configure("codex", &env.home, &api);
    extra.push(("PATH".into(), format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())));
    let runners: Vec<_> = clones
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut cmd = env.cmd(c);
            cmd.args(["--agent", &format!("w{i}"), "--json", "run", "worker", "--until-idle"])
                .envs(extra.clone())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().expect("start a worker")
        })
        .collect();
    for (i, r) in runners.into_iter().enumerate() {
        let out = common::finish(r, 300, test);
        assert_eq!(out.code, 0, "w{i}: {}", out.stderr);
        let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
        assert_eq!(doc["end"], "budget", "w{i}: {doc}\n{}", out.stderr);
    }
    let tasks: Vec<serde_json::Value> =
        ids.iter().map(|id| env.sw(&clones[0], &["show", id, "--json"]).ok().json()).collect();
    let done = tasks.iter().filter(|t| t["status"] == "done").count();
    let untouched = tasks.iter().filter(|t| t["status"] == "open" && t["epoch"] == 0).count();
    assert!((2..=4).contains(&done), "{done} done (two reach the budget, at most one more per other runner)");
    assert_eq!(done + untouched, 9, "{tasks:?}");
    println!("{test}: {done} of 9 done, {untouched} untouched, {} requests billed", api.requests().len());
    // The board's spend is what the stand-in billed, request for request.
    let st = env.sw(&clones[1], &["status", "--json"]).ok().json();
    let billed = api.billed();
    let total = &st["spend"]["cycle"]["total"];
    assert_eq!((total["input_tokens"].as_u64(), total["output_tokens"].as_u64()), (Some(billed.0), Some(billed.1)));
    assert_eq!(st["spend"]["budget"]["cycle"]["spent"], true, "{st}");
}
