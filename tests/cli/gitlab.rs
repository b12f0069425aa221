//! git swarm on GitLab CI: `ci gitlab` (the file; GitLab's CI schema through check-jsonschema and gitlab-ci-local),
//! the generated pipeline run for real by gitlab-ci-local (its shell executor, a child pipeline of several worker
//! jobs, GitLab's cache) against a remote that needs a token to push, and `dispatch --gitlab` / `runs --gitlab`
//! against a loopback stand-in of GitLab's REST API that checks the documented request shapes
//! (`tests/fixtures/gitlab/`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common;
use crate::common::http::{Lighttpd, lighttpd_or_skip};
use crate::common::serve::{Answer, Seen, Served};
use crate::common::{Env, Out, tool_or_skip};
use serde_json::{Value, json};

const TOKEN: &str = "glpat-TestToken0123456789SECRET";

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitlab").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A clone of a bare remote of its own.
fn repo(env: &Env) -> PathBuf {
    let bare = env.bare_remote("origin");
    env.clone(bare.to_str().expect("utf-8"), "c")
}

/// `git swarm args…` in `dir` with `GITLAB_API_URL` (None: unset) and `GITLAB_TOKEN` (None: unset); the token
/// never appears in what it prints.
fn gl(env: &Env, dir: &Path, api: Option<&str>, token: Option<&str>, args: &[&str]) -> Out {
    let mut cmd: Command = env.cmd(dir);
    cmd.env_remove("GITLAB_TOKEN").env_remove("GITLAB_API_URL");
    if let Some(a) = api {
        cmd.env("GITLAB_API_URL", a);
    }
    if let Some(t) = token {
        cmd.env("GITLAB_TOKEN", t);
    }
    let out = Out::from(cmd.args(args).output().expect("run git-swarm"));
    if let Some(t) = token {
        assert!(!out.stdout.contains(t) && !out.stderr.contains(t), "the token leaked: {out:?}");
    }
    out
}

// ------------------------------------------------------------------------------------------------------------------
// The REST API: a stand-in that checks GitLab's documented request shapes.
// ------------------------------------------------------------------------------------------------------------------

/// What GitLab's `POST /projects/:id/pipeline` takes (docs: api/pipelines.md, *Create a new pipeline*): a JSON body
/// with `ref` (a string) and optional `variables`, an array of `{key, value[, variable_type]}` with string values
/// and a type of `env_var` or `file`. `None` when the body is right; else GitLab's 400 answer.
fn pipeline_body_error(s: &Seen) -> Option<Answer> {
    let refused = |msg: &str| Some((400, vec![], json!({"error": msg}).to_string()));
    if !s.header("content-type").is_some_and(|t| t.starts_with("application/json")) {
        return refused("the body is not JSON");
    }
    let Ok(body) = serde_json::from_str::<Value>(&s.body) else { return refused("the body is not JSON") };
    let Some(obj) = body.as_object() else { return refused("the body is not an object") };
    if !obj.get("ref").is_some_and(Value::is_string) {
        return refused("ref is missing");
    }
    if obj.keys().any(|k| !["ref", "variables", "inputs"].contains(&k.as_str())) {
        return refused("unknown parameter");
    }
    if let Some(vars) = obj.get("variables") {
        let Some(vars) = vars.as_array() else { return refused("variables is invalid") };
        for v in vars {
            let ok = v.as_object().is_some_and(|o| {
                o.get("key").is_some_and(Value::is_string)
                    && o.get("value").is_some_and(Value::is_string)
                    && o.keys().all(|k| ["key", "value", "variable_type"].contains(&k.as_str()))
                    && o.get("variable_type").is_none_or(|t| t == "env_var" || t == "file")
            });
            if !ok {
                return refused("variables[key], variables[value] are invalid");
            }
        }
    }
    None
}

/// GitLab's API on loopback at `<base>/api/v4`: the token must come in `PRIVATE-TOKEN` (else 401, as GitLab answers),
/// every request is recorded, `route` answers the rest.
fn api(route: impl Fn(&Seen, &str) -> Answer + Send + Sync + 'static) -> Served {
    Served::start(move |s| {
        if s.header("private-token") != Some(TOKEN) {
            return (401, vec![], fixture("unauthorized.json"));
        }
        let Some(path) = s.url.strip_prefix("/api/v4") else {
            return (404, vec![], r#"{"error":"404 Not Found"}"#.into());
        };
        if s.method == "POST"
            && path.ends_with("/pipeline")
            && let Some(bad) = pipeline_body_error(s)
        {
            return bad;
        }
        route(s, path)
    })
}

#[track_caller]
fn assert_gitlab_headers(s: &Seen) {
    assert_eq!(s.header("private-token"), Some(TOKEN), "{s:?}");
    assert!(s.header("authorization").is_none(), "the token in one header only: {s:?}");
    assert_eq!(s.header("accept"), Some("application/json"));
    assert_eq!(s.header("user-agent"), Some(concat!("git-swarm/", env!("CARGO_PKG_VERSION"))));
    assert!(!s.url.contains(TOKEN) && !s.body.contains(TOKEN), "the token only in its header: {s:?}");
}

#[test]
fn dispatch_gitlab_starts_a_pipeline_on_the_default_branch() {
    let env = Env::new();
    let c = repo(&env);
    let served = api(|s, path| match (s.method.as_str(), path) {
        ("GET", "/projects/acme%2Ftools%2Fwidgets") => (200, vec![], fixture("project.json")),
        ("POST", "/projects/acme%2Ftools%2Fwidgets/pipeline") => (201, vec![], fixture("pipeline_created.json")),
        _ => (404, vec![], fixture("project_not_found.json")),
    });
    let base = format!("{}/api/v4", served.base);
    let o = gl(
        &env,
        &c,
        Some(&base),
        Some(TOKEN),
        &["--swarm", "night", "dispatch", "--gitlab", "--project", "acme/tools/widgets", "--workers", "8"],
    )
    .ok();
    assert!(
        o.stdout.contains("started pipeline 1094 on acme/tools/widgets at trunk: 8 worker(s), swarm night"),
        "{o:?}"
    );
    assert!(o.stdout.contains("pipeline: https://gitlab.example.com/acme/tools/widgets/-/pipelines/1094"), "{o:?}");
    let seen = served.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].method.as_str(), seen[0].url.as_str()), ("GET", "/api/v4/projects/acme%2Ftools%2Fwidgets"));
    assert_eq!(seen[1].url, "/api/v4/projects/acme%2Ftools%2Fwidgets/pipeline");
    for s in &seen {
        assert_gitlab_headers(s);
    }
    assert_eq!(
        seen[1].json(),
        json!({"ref": "trunk", "variables": [
            {"key": "SWARM_FLEET", "value": "1"}, {"key": "SWARM_WORKERS", "value": "8"}]})
    );

    // --ref: no look-up; the goal as a variable, as typed; --json is one document.
    let goal = "ship $(rm -rf x) `y` \"z\"";
    let doc = gl(
        &env,
        &c,
        Some(&base),
        Some(TOKEN),
        &["--json", "dispatch", "--gitlab", "--project", "acme/tools/widgets", "--ref", "release", "--goal", goal],
    )
    .ok()
    .json();
    assert_eq!((doc["ref"].as_str(), doc["project"].as_str()), (Some("release"), Some("acme/tools/widgets")));
    assert_eq!(doc["pipeline"]["id"], 1094);
    assert_eq!(doc["pipeline"]["status"], "created");
    let seen = served.seen();
    assert_eq!(seen.len(), 3, "one more request, the pipeline: {seen:?}");
    assert_eq!(
        seen[2].json(),
        json!({"ref": "release", "variables": [{"key": "SWARM_FLEET", "value": "1"}, {"key": "SWARM_GOAL", "value": goal}]})
    );
}

/// The project and the API come from the swarm's remote: any GitLab server (the API beside its host), a numeric
/// `--project`, and `GITLAB_API_URL` over the derived API; a remote that names no project is refused before any
/// request.
#[test]
fn the_project_and_the_api_come_from_the_remote() {
    let env = Env::new();
    let c = repo(&env);
    let served = api(|s, path| match (s.method.as_str(), path) {
        ("POST", "/projects/group%2Fproject/pipeline" | "/projects/1217/pipeline") => {
            (201, vec![], fixture("pipeline_created.json"))
        }
        ("GET", p) if p.starts_with("/projects/group%2Fproject/pipelines?") => (200, vec![], fixture("pipelines.json")),
        _ => (404, vec![], fixture("project_not_found.json")),
    });
    // Not a GitLab project's URL: exit 2, nothing sent.
    let o = gl(&env, &c, None, Some(TOKEN), &["dispatch", "--gitlab", "--ref", "main"]).code(2);
    assert!(o.stderr.contains("cannot tell the GitLab project") && o.stderr.contains("--project"), "{}", o.stderr);
    // A self-managed server on this machine: the API is http://127.0.0.1:<port>/api/v4, from the remote alone.
    env.git(&c, &["remote", "set-url", "origin", &format!("{}/group/project.git", served.base)]);
    gl(&env, &c, None, Some(TOKEN), &["dispatch", "--gitlab", "--ref", "main"]).ok();
    gl(&env, &c, None, Some(TOKEN), &["runs", "--gitlab"]).ok();
    gl(&env, &c, None, Some(TOKEN), &["dispatch", "--gitlab", "--ref", "main", "--project", "1217"]).ok();
    // GITLAB_API_URL wins over the remote's server; an ssh remote derives https (refused here: no server there).
    env.git(&c, &["remote", "add", "gl", "git@gitlab.example.invalid:group/project.git"]);
    let api_url = format!("{}/api/v4", served.base);
    gl(&env, &c, Some(&api_url), Some(TOKEN), &["--remote", "gl", "dispatch", "--gitlab", "--ref", "main"]).ok();
    let o = gl(&env, &c, None, Some(TOKEN), &["--remote", "gl", "dispatch", "--gitlab", "--ref", "main"]).code(1);
    assert!(o.stderr.contains("https://gitlab.example.invalid/api/v4"), "{}", o.stderr);
    let urls: Vec<String> = served.seen().iter().map(|s| s.url.clone()).collect();
    assert_eq!(
        urls,
        [
            "/api/v4/projects/group%2Fproject/pipeline",
            "/api/v4/projects/group%2Fproject/pipelines?per_page=10&order_by=id&sort=desc",
            "/api/v4/projects/1217/pipeline",
            "/api/v4/projects/group%2Fproject/pipeline",
        ]
    );
    for bad in [
        &["dispatch", "--gitlab", "--project", "a b/c"][..],
        &["dispatch", "--gitlab", "--workers", "201", "--ref", "main"],
        &["dispatch", "--gitlab", "--repo", "a/b"],
        &["dispatch", "--project", "a/b"],
        &["runs", "--gitlab", "--source", "a&b"],
    ] {
        gl(&env, &c, None, Some(TOKEN), bad).code(2);
    }
    assert_eq!(served.seen().len(), 4, "bad flags make no request");
}

#[test]
fn runs_gitlab_lists_the_projects_pipelines() {
    let env = Env::new();
    let c = repo(&env);
    let served = api(|s, path| match (s.method.as_str(), path) {
        ("GET", "/projects/acme%2Fwidgets/pipelines?per_page=10&order_by=id&sort=desc") => {
            (200, vec![], fixture("pipelines.json"))
        }
        ("GET", "/projects/acme%2Fwidgets/pipelines?per_page=3&order_by=id&sort=desc&source=schedule") => {
            (200, vec![], "[]".into())
        }
        _ => (404, vec![], fixture("project_not_found.json")),
    });
    let base = format!("{}/api/v4", served.base);
    let o = gl(&env, &c, Some(&base), Some(TOKEN), &["runs", "--gitlab", "--project", "acme/widgets"]).ok();
    let lines: Vec<Vec<&str>> = o.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    for (got, want) in lines.iter().zip([
        ["1096", "running", "api", "2026-11-30T08:15:02.120Z"],
        ["1095", "success", "parent_pipeline", "2026-11-30T06:00:14.000Z"],
        ["1094", "failed", "schedule", "2026-11-30T06:00:11.000Z"],
    ]) {
        assert_eq!(&got[..4], &want[..], "{got:?}");
        assert!(got[4].ends_with(&format!("/-/pipelines/{}", want[0])), "{got:?}");
    }
    assert_gitlab_headers(&served.seen()[0]);
    let doc = gl(&env, &c, Some(&base), Some(TOKEN), &["--json", "runs", "--gitlab", "--project", "acme/widgets"])
        .ok()
        .json();
    assert_eq!(doc["pipelines"][0]["ref"], "main");
    assert_eq!(doc["pipelines"][2]["status"], "failed");
    let o = gl(
        &env,
        &c,
        Some(&base),
        Some(TOKEN),
        &["runs", "--gitlab", "--project", "acme/widgets", "--limit", "3", "--source", "schedule"],
    )
    .ok();
    assert!(o.stdout.is_empty() && o.stderr.contains("no pipelines of acme/widgets yet"), "{o:?}");
}

#[test]
fn gitlabs_errors_name_the_cause_and_the_wait() {
    let env = Env::new();
    let c = repo(&env);
    let served = api(move |_s, path| {
        let name = path.split('/').nth(2).unwrap_or_default().trim_start_matches("acme%2F").to_string();
        match name.as_str() {
            "forbidden" => (403, vec![], fixture("forbidden.json")),
            "missing" => (404, vec![], fixture("project_not_found.json")),
            "norules" => (400, vec![], fixture("no_jobs.json")),
            "noref" => (400, vec![], fixture("no_ref.json")),
            "unprocessable" => (422, vec![], r#"{"message":"Unprocessable Entity"}"#.into()),
            "toomany" => (
                429,
                vec![("retry-after", "17".into()), ("ratelimit-reset", "2000000000".into())],
                "Retry later\n".into(),
            ),
            "echo" => (500, vec![], format!("{{\"message\":\"internal error for {TOKEN}\"}}")),
            "moved" => (301, vec![("location", "https://elsewhere.example/api/v4/projects/9".into())], String::new()),
            _ => (418, vec![], String::new()),
        }
    });
    let base = format!("{}/api/v4", served.base);
    for (project, wants) in [
        ("forbidden", &["HTTP 403", "403 Forbidden", "Developer"][..]),
        ("missing", &["HTTP 404", "404 Project Not Found", "--project"]),
        ("norules", &["HTTP 400", "Pipeline will not run for the selected trigger", "committed there"]),
        ("noref", &["HTTP 400", "Reference not found"]),
        ("unprocessable", &["HTTP 422", "Unprocessable Entity"]),
        ("toomany", &["HTTP 429", "retry after 17 s", "2033-05-18T03:33:20Z", "again after that time"]),
        ("echo", &["HTTP 500", "internal error for [redacted]"]),
        ("moved", &["HTTP 301", "https://elsewhere.example/api/v4/projects/9", "not followed"]),
    ] {
        let p = format!("acme/{project}");
        let o =
            gl(&env, &c, Some(&base), Some(TOKEN), &["dispatch", "--gitlab", "--ref", "main", "--project", &p]).code(1);
        for w in wants {
            assert!(o.stderr.contains(w), "{project}: no '{w}' in:\n{}", o.stderr);
        }
        let o = gl(&env, &c, Some(&base), Some(TOKEN), &["--json", "runs", "--gitlab", "--project", &p]).code(1);
        assert_eq!(o.json()["error"]["code"], 1, "{project}");
    }
    // A wrong token: GitLab's 401 (the stand-in checks the header).
    let o = gl(&env, &c, Some(&base), Some("glpat-wrong"), &["runs", "--gitlab", "--project", "acme/x"]).code(1);
    assert!(
        o.stderr.contains("HTTP 401") && o.stderr.contains("401 Unauthorized") && o.stderr.contains("GITLAB_TOKEN"),
        "{}",
        o.stderr
    );
}

#[test]
fn no_token_and_plain_http_elsewhere_stop_before_any_request() {
    let env = Env::new();
    let c = repo(&env);
    let served = api(|_, _| (201, vec![], fixture("pipeline_created.json")));
    let base = format!("{}/api/v4", served.base);
    for args in [&["dispatch", "--gitlab", "--project", "a/b"][..], &["runs", "--gitlab", "--project", "a/b"]] {
        let o = gl(&env, &c, Some(&base), None, args).code(2);
        assert!(o.stderr.contains("GITLAB_TOKEN") && o.stderr.contains("hint:"), "{}", o.stderr);
    }
    let o =
        gl(&env, &c, Some("http://gitlab.example.com/api/v4"), Some(TOKEN), &["runs", "--gitlab", "--project", "a/b"])
            .code(2);
    assert!(o.stderr.contains("plain http"), "{}", o.stderr);
    // A remote on plain http elsewhere derives a plain-http API: refused the same way.
    env.git(&c, &["remote", "set-url", "origin", "http://gitlab.example.com/a/b.git"]);
    let o = gl(&env, &c, None, Some(TOKEN), &["dispatch", "--gitlab", "--ref", "main"]).code(2);
    assert!(o.stderr.contains("plain http"), "{}", o.stderr);
    assert!(served.seen().is_empty(), "nothing reached the server: {:?}", served.seen());
}

// ------------------------------------------------------------------------------------------------------------------
// The file.
// ------------------------------------------------------------------------------------------------------------------

/// The pipeline of `args` (after `ci gitlab`) on stdout.
fn pipeline_text(env: &Env, dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["ci", "gitlab", "--stdout"];
    all.extend_from_slice(args);
    env.sw(dir, &all).ok().stdout
}

#[test]
fn ci_gitlab_writes_the_pipeline_once_and_refuses_to_clobber() {
    let env = Env::new();
    let c = repo(&env);
    let path = c.join(".gitlab-ci.yml");
    let o = env.sw(&c, &["ci", "gitlab", "--workers", "3"]).ok();
    assert!(o.stdout.contains("wrote ") && o.stdout.contains(".gitlab-ci.yml"), "{}", o.stdout);
    assert!(o.stderr.contains("SWARM_PUSH_TOKEN") && o.stderr.contains("dispatch --gitlab"), "{}", o.stderr);
    let text = std::fs::read_to_string(&path).expect("written");
    assert!(
        text.starts_with("# Generated by `git swarm ci gitlab`")
            && text.contains("#   git swarm ci gitlab --workers 3 --force\n")
    );
    let y: Value = serde_yaml_ng::from_str(&text).expect("YAML");
    assert_eq!(y["worker"]["parallel"], 3);
    assert_eq!(text, pipeline_text(&env, &c, &["--workers", "3"]), "--stdout prints what is written");
    let o = env.sw(&c, &["ci", "gitlab", "--workers", "3"]).ok();
    assert!(o.stdout.contains("is up to date"), "{}", o.stdout);
    // A project's own CI file is never replaced by accident: the refusal points at --include.
    let o = env.sw(&c, &["ci", "gitlab", "--workers", "5", "--planner"]).code(2);
    assert!(
        o.stderr.contains(".gitlab-ci.yml exists") && o.stderr.contains("--force") && o.stderr.contains("--include")
    );
    assert_eq!(std::fs::read_to_string(&path).expect("read"), text, "not touched");
    let doc = env.sw(&c, &["--json", "ci", "gitlab", "--workers", "5", "--planner", "--judge", "--force"]).ok().json();
    assert_eq!(doc["jobs"], json!(["git-swarm", "prepare", "worker", "planner", "judge"]));
    assert_eq!((doc["written"].as_bool(), doc["include"].as_bool()), (Some(true), Some(false)));
    // --include: .gitlab/git-swarm.yml, which names itself as the child, and a note while .gitlab-ci.yml lacks it.
    let o = env.sw(&c, &["ci", "gitlab", "--include", "--workers", "2"]).ok();
    assert!(o.stderr.contains("include: [{local: .gitlab/git-swarm.yml}]"), "{}", o.stderr);
    let inc: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(c.join(".gitlab/git-swarm.yml")).expect("include"))
            .expect("YAML");
    assert_eq!(inc["git-swarm"]["trigger"]["include"][0]["local"], ".gitlab/git-swarm.yml");
    std::fs::write(&path, "include:\n  - local: .gitlab/git-swarm.yml\n").expect("write");
    let o = env.sw(&c, &["ci", "gitlab", "--include", "--workers", "2", "--force"]).ok();
    assert!(!o.stderr.contains("add it to your"), "{}", o.stderr);
    // Bad options name the flag; many workers warn about GitLab's push budget.
    for (args, flag) in [
        (&["--workers", "201"][..], "--workers"),
        (&["--secret", "CI_JOB_TOKEN"], "--secret"),
        (&["--tag", "a b"], "--tag"),
        (&["--image", "a b"], "--image"),
        (&["--sandbox", "off"], "--sandbox"),
        (&["--agent-cli", "nosuch"], "--agent-cli"),
    ] {
        let o = env.sw(&c, &[&["ci", "gitlab", "--stdout"][..], args].concat()).code(2);
        assert!(o.stderr.contains(flag) || o.stderr.contains("not a preset"), "{args:?}: {}", o.stderr);
    }
    let o = env.sw(&c, &["ci", "gitlab", "--stdout", "--workers", "150"]).ok();
    assert!(o.stderr.contains("warning: 150 workers") && o.stderr.contains("docs/gitlab-ci.md"), "{}", o.stderr);
    let o = env.sw(&c, &["ci", "gitlab", "--stdout", "--workers", "100"]).ok();
    assert!(!o.stderr.contains("push budget"), "{}", o.stderr);
    assert!(o.stderr.contains("pins no trust digest") && !o.stdout.contains("GIT_SWARM_TRUST"), "{}", o.stderr);
    // Settings that name this machine are refused as for GitHub.
    let cfg = env.path("local.toml");
    std::fs::write(&cfg, "[roles.worker]\nexec = \"sh '/tmp/xyz/agent.sh'\"\n").expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let o = env.sw(&c, &["ci", "gitlab", "--stdout"]).code(2);
    assert!(o.stderr.contains("this pipeline would pin") && o.stderr.contains("/tmp/xyz/agent.sh"), "{}", o.stderr);
    let o = env.sw(&c, &["ci", "gitlab", "--stdout", "--allow-local-paths"]).ok();
    assert!(o.stdout.contains("GIT_SWARM_TRUST: ") && o.stdout.contains("--allow-local-paths --force"), "{o:?}");
}

/// gitlab-ci-local, with Node 22: `$GITLAB_CI_LOCAL` (`.ci/run` sets it), else on the PATH; and a PATH whose first
/// `node` is the one installed beside it (the npm package `node@22`), for its `#!/usr/bin/env node`.
fn gitlab_ci_local(test: &str) -> Option<(PathBuf, String)> {
    let program = match std::env::var_os("GITLAB_CI_LOCAL").map(PathBuf::from).filter(|p| p.is_file()) {
        Some(p) => p,
        None => tool_or_skip(test, "gitlab-ci-local", "npm install gitlab-ci-local@4.75.1 node@22; see .ci/run")?,
    };
    let dir = program.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let v = Command::new(&program).arg("--version").env("PATH", &path).output().expect("gitlab-ci-local --version");
    assert!(
        v.status.success(),
        "gitlab-ci-local does not run (it needs Node 22): {}",
        String::from_utf8_lossy(&v.stderr)
    );
    println!("{test}: gitlab-ci-local {}", String::from_utf8_lossy(&v.stdout).trim());
    Some((program, path))
}

/// The generated pipelines of many option sets are GitLab CI as GitLab's own schema has it: check-jsonschema's
/// vendored copy of it, and gitlab-ci-local's (each `--list` validates the file first); a broken file is caught.
#[test]
fn the_generated_pipelines_pass_gitlabs_schema() {
    let test = "the_generated_pipelines_pass_gitlabs_schema";
    let schema = tool_or_skip(test, "check-jsonschema", "pip install check-jsonschema==0.39.0");
    let local = gitlab_ci_local(test);
    if schema.is_none() && local.is_none() {
        return;
    }
    let env = Env::new();
    let c = repo(&env);
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, "[roles.worker]\npreset = \"claude\"\n").expect("config");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let sets: &[(&str, &[&str])] = &[
        ("one", &["--workers", "1"]),
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
                "aider",
                "--setup",
                "npm ci",
                "--setup",
                "echo one\necho two",
                "--secret",
                "MY_KEY",
                "--environment",
                "agents",
                "--tag",
                "docker",
                "--tag",
                "linux",
            ],
        ),
        ("batched", &["--workers", "200", "--agents-per-job", "32", "--timeout", "600"]),
        (
            "shell",
            &[
                "--image",
                "none",
                "--build-image",
                "none",
                "--sandbox",
                "auto",
                "--agent-cli",
                "none",
                "--install",
                "make install-git-swarm",
            ],
        ),
        ("crates", &["--from-crates-io", "--include"]),
    ];
    let dir = env.path("pipelines");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut files = Vec::new();
    for (name, args) in sets {
        let f = dir.join(format!("{name}.yml"));
        std::fs::write(&f, pipeline_text(&env, &c, args)).expect("write");
        files.push(f);
    }
    let broken = dir.join("broken.yml");
    let one = std::fs::read_to_string(&files[0]).expect("read");
    std::fs::write(&broken, one.replace("strategy: depend", "strategy: sometimes")).expect("write");
    if let Some(schema) = &schema {
        let run = |f: &Path| {
            let o = Command::new(schema).args(["--builtin-schema", "vendor.gitlab-ci"]).arg(f).output().expect("run");
            (
                o.status.success(),
                format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
            )
        };
        for f in &files {
            let (ok, text) = run(f);
            assert!(ok && text.contains("ok -- validation done"), "{}:\n{text}", f.display());
        }
        let (ok, text) = run(&broken);
        assert!(!ok && text.contains("trigger"), "check-jsonschema missed a broken file:\n{text}");
    }
    if let Some((program, path)) = &local {
        // gitlab-ci-local reads .gitlab-ci.yml of a git work tree: one per file.
        for f in files.iter().chain([&broken]) {
            let w = dir.join(format!("repo-{}", f.file_stem().and_then(|s| s.to_str()).unwrap_or("x")));
            env.git(env.root.path(), &["init", "-q", w.to_str().expect("utf-8")]);
            std::fs::copy(f, w.join(".gitlab-ci.yml")).expect("copy");
            env.git(&w, &["add", "-A"]);
            env.git(&w, &["commit", "-qm", "ci"]);
            let o = Command::new(program)
                .current_dir(&w)
                .env("PATH", path)
                .env("HOME", &env.home)
                .args([
                    "--list-all",
                    "--variable",
                    "CI_PIPELINE_SOURCE=api",
                    "--ignore-predefined-vars",
                    "CI_PIPELINE_SOURCE",
                ])
                .output()
                .expect("gitlab-ci-local");
            let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            if f == &broken {
                assert!(!o.status.success(), "gitlab-ci-local missed a broken file:\n{text}");
            } else {
                assert!(o.status.success() && text.contains("json schema validated"), "{}:\n{text}", f.display());
                assert!(
                    text.lines().any(|l| l.starts_with("git-swarm ")),
                    "the trigger job runs for an API pipeline:\n{text}"
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------------------------
// The fleet, for real: gitlab-ci-local runs the generated file.
// ------------------------------------------------------------------------------------------------------------------

/// A worker that looks for the push credential where an agent could, and writes what it found into its task's
/// file (which the runner commits: what it saw lands on main): its environment, the clone's git configuration,
/// every process's environment it can read, and a push of its own to the URL its task names.
const PEEK_AGENT: &str = r#"#!/bin/sh
set -u
id="${GIT_SWARM_TASK_ID:-unknown}"
url=$(sed -n 's/^@push \([^ ]*\).*/\1/p' "${GIT_SWARM_PROMPT_FILE:-/dev/null}" | head -n 1)
mkdir -p seen
{
  echo "== env"; env | sort
  echo "== git config"; git config --list 2>&1
  echo "== /proc"; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done
  echo "== push"
  if [ -n "$url" ] && GIT_TERMINAL_PROMPT=0 git push "$url" HEAD:refs/heads/agent-was-here </dev/null >/dev/null 2>&1; then
    echo "pushed"
  else
    echo "push refused"
  fi
} > "seen/$id.txt" 2>&1
"#;

/// The fleet drains a board exactly once under gitlab-ci-local: an API pipeline's trigger job starts the child
/// pipeline of the same file; `prepare` misses the cache, installs git-swarm (the test's `--install` copies the binary
/// under test) and fills GitLab's cache; four worker jobs (`parallel: 4`, SWARM_WORKERS=3: the fourth ends at once)
/// restore it and drain six tasks against a smart-HTTP remote that takes pushes only with the token (as
/// `CI_JOB_TOKEN` cannot push), every agent in the sandbox. Then: every task done once with one `Swarm-Task:` commit
/// on main, every push of the fleet by the token's user with `ci.skip`, and no agent saw the token or could push.
/// A setup command that installs a tool in a folder of its own and says so through `$GIT_SWARM_PATH`, sets a
/// variable through `$GIT_SWARM_ENV`, and exports one that must not outlive its shell.
const SETUP_TOOL: &str = "mkdir -p \"$HOME/swarm-tools\"\n\
    printf '#!/bin/sh\\necho tool\\n' > \"$HOME/swarm-tools/swarm-setup-tool\"\n\
    chmod +x \"$HOME/swarm-tools/swarm-setup-tool\"\n\
    echo \"$HOME/swarm-tools\" >> \"$GIT_SWARM_PATH\"\n\
    echo 'SWARM_SETUP_SAID=hello from setup 1' >> \"$GIT_SWARM_ENV\"\n\
    export SWARM_SETUP_LOST=1";

#[test]
fn a_fleet_drains_a_board_exactly_once_under_gitlab_ci_local() {
    let test = "a_fleet_drains_a_board_exactly_once_under_gitlab_ci_local";
    let Some((program, path)) = gitlab_ci_local(test) else { return };
    let Some(lighttpd) = lighttpd_or_skip(test) else { return };
    if tool_or_skip(test, "rsync", "apt-get install rsync").is_none()
        || tool_or_skip(test, "bwrap", "apt-get install bubblewrap").is_none()
    {
        return;
    }
    let env = Env::new();
    // The remote: group/project.git under a web server whose pushes need oauth2:<token>.
    let root = env.path("srv");
    let bare = root.join("group/project.git");
    std::fs::create_dir_all(&bare).expect("mkdir");
    env.git(&bare, &["init", "-q", "--bare"]);
    for (k, v) in [("http.receivepack", "true"), ("receive.advertisePushOptions", "true")] {
        env.git(&bare, &["config", k, v]);
    }
    let log = env.path("pushes.log");
    std::fs::write(
        bare.join("hooks/pre-receive"),
        format!(
            "#!/bin/sh\necho \"user=${{REMOTE_USER:-}} options=${{GIT_PUSH_OPTION_COUNT:-0}}:${{GIT_PUSH_OPTION_0:-}}\" >> '{}'\ncat >/dev/null\n",
            log.display()
        ),
    )
    .expect("hook");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(bare.join("hooks/pre-receive"), mode).expect("chmod");
    let server =
        Lighttpd::start_with_push_auth(&env, &lighttpd, &root, &env.path("lighttpd"), &format!("oauth2:{TOKEN}"));
    let url = server.url("group/project.git");
    let with_token = url.replace("http://", &format!("http://oauth2:{TOKEN}@"));

    // The project: the agent by its relative path, a swarm whose worker runs it, six tasks, and the pipeline.
    let proj = env.clone(&url, "project");
    std::fs::write(proj.join("README.md"), "widgets\n").expect("write");
    std::fs::create_dir_all(proj.join("agents")).expect("mkdir");
    std::fs::write(proj.join("agents/peek.sh"), PEEK_AGENT).expect("agent");
    env.git(&proj, &["add", "-A"]);
    env.git(&proj, &["commit", "-qm", "the project and its agent"]);
    env.git(&proj, &["push", "-q", &with_token, "HEAD:refs/heads/main"]);
    let cfg = env.path("swarm.toml");
    std::fs::write(&cfg, "[roles.worker]\nexec = \"sh agents/peek.sh\"\n").expect("config");
    env.sw(&proj, &["--remote", &with_token, "init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let ids: Vec<String> = (1..=6)
        .map(|i| {
            env.sw(&proj, &["--remote", &with_token, "add", &format!("task {i}"), "--body", &format!("@push {url}")])
                .ok()
                .line()
        })
        .collect();
    let install = format!(
        "mkdir -p \"$CARGO_INSTALL_ROOT/bin\"\ncp '{}' \"$CARGO_INSTALL_ROOT/bin/git-swarm\"\necho \"installed git-swarm (the test's --install)\"",
        common::BIN
    );
    let o = env
        .sw(
            &proj,
            &[
                "ci",
                "gitlab",
                "--workers",
                "4",
                "--agent-cli",
                "none",
                "--image",
                "none",
                "--build-image",
                "none",
                "--install",
                &install,
                // A setup runs in a shell of its own: what it exports is lost, what it writes to $GIT_SWARM_PATH
                // and $GIT_SWARM_ENV reaches the next setup and the runner.
                "--setup",
                SETUP_TOOL,
                "--setup",
                "echo \"setup 2 runs $(command -v swarm-setup-tool || echo no-tool) with ${SWARM_SETUP_SAID:-nothing} \
                 and ${SWARM_SETUP_LOST:-unset}\"",
            ],
        )
        .ok();
    assert!(!o.stderr.contains("pins no trust digest"), "the digest is pinned: {}", o.stderr);
    env.git(&proj, &["add", ".gitlab-ci.yml"]);
    env.git(&proj, &["commit", "-qm", "the fleet's pipeline"]);
    env.git(&proj, &["push", "-q", &with_token, "HEAD:refs/heads/main"]);
    env.git(&proj, &["fetch", "-q", "origin"]);
    // The project's CI/CD variables (gitlab-ci-local reads them from this file; they are not in the repository).
    std::fs::write(
        proj.join(".gitlab-ci-local-variables.yml"),
        format!("SWARM_PUSH_TOKEN: {TOKEN}\nSWARM_WORKERS: \"3\"\n"),
    )
    .expect("variables");
    std::fs::write(proj.join(".git/info/exclude"), ".gitlab-ci-local/\n.gitlab-ci-local-variables.yml\n")
        .expect("exclude");
    std::fs::write(&log, "").expect("reset the push log");

    // A runner machine: a HOME of its own, no git identity, nothing of the suite's environment.
    let home = env.path("runner-home");
    std::fs::create_dir_all(&home).expect("mkdir");
    let glcl = |args: &[&str]| {
        let mut cmd = Command::new(&program);
        cmd.current_dir(&proj)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .env("LANG", "C.UTF-8")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    // A push pipeline runs nothing of the file.
    let o = glcl(&["--list"]).output().expect("list");
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && !listed.lines().any(|l| l.starts_with("git-swarm ") || l.starts_with("prepare ")),
        "{listed}"
    );

    let started = std::time::Instant::now();
    let child = glcl(&[
        "--shell-isolation",
        "--force-shell-executor",
        "--variable",
        "CI_PIPELINE_SOURCE=api",
        "--ignore-predefined-vars",
        "CI_PIPELINE_SOURCE",
        "--timestamps",
    ])
    .spawn()
    .expect("gitlab-ci-local");
    let run = common::finish(child, 600, "gitlab-ci-local");
    let took = started.elapsed().as_secs_f64();
    let transcript = format!("{}{}", run.stdout, run.stderr);
    std::fs::write(env.path("gitlab-ci-local.log"), &transcript).expect("log");
    println!("{test}: gitlab-ci-local ran the pipeline in {took:.1} s; its output:\n{transcript}");
    assert_eq!(run.code, 0, "the pipeline failed:\n{transcript}");
    assert!(!transcript.contains(TOKEN), "the token is in the job logs");
    for job in ["prepare", "worker: [1/4]", "worker: [2/4]", "worker: [3/4]", "worker: [4/4]"] {
        let passed = transcript
            .lines()
            .any(|l| l.trim_start().starts_with("PASS") && l.trim_end().ends_with(&format!("[git-swarm] -> {job}")));
        assert!(passed, "{job} passed:\n{transcript}");
    }
    let job_lines = |job: &str| {
        transcript.lines().filter(|l| l.contains(&format!("[git-swarm] -> {job} "))).collect::<Vec<_>>().join("\n")
    };
    assert!(job_lines("prepare").contains("installed git-swarm (the test's --install)"), "prepare missed the cache");
    assert!(transcript.contains("cache created in"), "prepare filled the cache");
    for w in 1..=3 {
        let lines = job_lines(&format!("worker: [{w}/4]"));
        assert!(
            lines.contains("setup 2 runs ") && lines.contains("/swarm-setup-tool with hello from setup 1 and unset"),
            "worker {w}: the setup's PATH and variable reached the job, its export did not:\n{lines}"
        );
    }
    for w in 1..=4 {
        let lines = job_lines(&format!("worker: [{w}/4]"));
        assert!(
            lines.contains("imported cache") && !lines.contains("installed git-swarm"),
            "worker {w} used the cache:\n{lines}"
        );
        assert_eq!(lines.contains("worker 4 is not needed"), w == 4, "worker {w}:\n{lines}");
    }

    // Every task done once, by the three working jobs, its code on main in one commit with its trailer.
    let check = env.clone(&url, "check");
    let list = env.sw(&check, &["list", "--json"]).ok().json();
    let tasks = list.as_array().expect("tasks");
    assert_eq!(tasks.len(), 6);
    assert!(tasks.iter().all(|t| t["status"] == "done"), "{list}");
    for t in tasks {
        let agent = t["result"]["agent"].as_str().unwrap_or_default();
        assert!(agent.starts_with("gl-") && ["-w1", "-w2", "-w3"].iter().any(|w| agent.ends_with(w)), "{agent}");
    }
    let trailers = env.git(&check, &["log", "origin/main", "--format=%(trailers:key=Swarm-Task,valueonly,separator=)"]);
    let mut landed: Vec<&str> = trailers.lines().filter(|l| !l.trim().is_empty()).collect();
    landed.sort();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(landed, want, "one Swarm-Task commit per task on main");
    // Every push of the fleet authenticated as the token's user and carried ci.skip.
    let pushes = std::fs::read_to_string(&log).expect("push log");
    assert!(pushes.lines().count() >= 6, "{pushes}");
    assert!(pushes.lines().all(|l| l == "user=oauth2 options=1:ci.skip"), "{pushes}");
    // No agent saw the token, anywhere it looked, nor could it push.
    assert!(
        env.git_out(&check, &["ls-remote", "--exit-code", &url, "refs/heads/agent-was-here"]).code != 0,
        "an agent pushed"
    );
    for id in &ids {
        let seen = std::fs::read_to_string(check.join(format!("seen/{id}.txt"))).expect("what the agent saw");
        assert!(seen.contains("== env") && seen.contains("== push\npush refused"), "{id}:\n{seen}");
        assert!(
            !seen.contains(TOKEN) && !seen.contains("pushurl") && !seen.contains("GIT_CONFIG_PARAMETERS"),
            "{id} saw the credential:\n{seen}"
        );
    }
    let grep = env.git_out(&check, &["grep", "-l", "TestToken", "origin/main", "--"]);
    assert_eq!(grep.code, 1, "the token landed: {}", grep.stdout);
}
