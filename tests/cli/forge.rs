//! Landing where main is protected (issue 27): the swarm lands on `swarm/main` of a real remote whose pre-receive
//! hook refuses every push to `main`, and keeps one pull request (GitHub) / merge request (GitLab) from it to `main`
//! open and current through a stand-in of the forge's REST API that checks the documented request shapes. "The
//! forge" merges it (the test, on the bare repository, past the hook): the swarm takes main back in and goes on; every
//! task reaches main exactly once, through one request at a time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::serve::{Answer, Seen, Served};
use crate::common::{Env, file_url, scripted_agent};
use serde_json::{Value, json};

/// A pull/merge request as the stand-in keeps it.
#[derive(Debug, Clone, Default)]
struct Pr {
    number: u64,
    head: String,
    base: String,
    title: String,
    body: String,
    draft: bool,
    /// open | merged
    state: String,
    /// The commit merged, once merged.
    merged_sha: Option<String>,
    /// The descriptions written to it after the forge merged it.
    written_after_merge: Vec<String>,
}

/// A forge's pull requests as the stand-in keeps them.
#[derive(Debug, Default)]
struct Forge {
    prs: Vec<Pr>,
    /// Every request that broke the forge's documented shape.
    faults: Vec<String>,
    graphql: Vec<String>,
}

type Shared = Arc<Mutex<Forge>>;

fn need(f: &mut Forge, ok: bool, what: String) {
    if !ok {
        f.faults.push(what);
    }
}

/// GitHub's REST API (v3, `2022-11-28`) for pulls, and GraphQL for the two mutations REST does not have.
fn github(state: Shared) -> impl Fn(&Seen) -> Answer + Send + Sync + 'static {
    move |s: &Seen| {
        let mut f = state.lock().expect("lock");
        let auth = s.header("authorization") == Some("Bearer ghs_forgetoken0000");
        need(&mut f, auth, format!("{} {}: no Bearer token", s.method, s.url));
        need(
            &mut f,
            s.header("accept") == Some("application/vnd.github+json")
                && s.header("x-github-api-version") == Some("2022-11-28"),
            format!("{} {}: Accept/X-GitHub-Api-Version", s.method, s.url),
        );
        let pr = |n: u64, f: &Forge| -> Value {
            let p = f.prs.iter().find(|p| p.number == n).expect("pr");
            json!({"number": p.number, "html_url": format!("https://github.com/o/r/pull/{}", p.number),
                   "node_id": format!("PR_{}", p.number),
                   "state": if p.state == "open" { "open" } else { "closed" }, "draft": p.draft, "merged": p.state == "merged",
                   "merged_at": if p.state == "merged" { json!("2026-12-03T00:00:00Z") } else { Value::Null },
                   "head": {"ref": p.head, "sha": p.merged_sha.clone().unwrap_or_else(|| "0".repeat(40))},
                   "base": {"ref": p.base}, "title": p.title, "body": p.body})
        };
        match (s.method.as_str(), s.url.split('?').next().unwrap_or("")) {
            ("GET", "/repos/o/r/pulls") => {
                need(
                    &mut f,
                    s.url.contains("head=o:swarm/main") && s.url.contains("base=main"),
                    format!("list: {}", s.url),
                );
                // Open or closed, the newest first: the runner's one look.
                need(
                    &mut f,
                    s.url.contains("state=all") && s.url.contains("sort=created") && s.url.contains("direction=desc"),
                    format!("list: {}", s.url),
                );
                let list: Vec<Value> = f.prs.iter().rev().map(|p| pr(p.number, &f)).collect();
                (200, vec![], Value::Array(list).to_string())
            }
            ("POST", "/repos/o/r/pulls") => {
                let b = s.json();
                for k in ["title", "head", "base", "body"] {
                    need(&mut f, b[k].is_string(), format!("create: {k} is not a string: {b}"));
                }
                need(&mut f, b["draft"].is_boolean(), format!("create: draft: {b}"));
                if f.prs.iter().any(|p| p.state == "open" && p.head == b["head"]) {
                    return (422, vec![], json!({"message": "Validation Failed", "errors": [{"message": "A pull request already exists for o:swarm/main."}]}).to_string());
                }
                let n = f.prs.len() as u64 + 1;
                let str_of = |k: &str| b[k].as_str().unwrap_or_default().to_string();
                let new = Pr {
                    number: n,
                    head: str_of("head"),
                    base: str_of("base"),
                    title: str_of("title"),
                    body: str_of("body"),
                    draft: b["draft"].as_bool().unwrap_or(false),
                    state: "open".into(),
                    ..Pr::default()
                };
                f.prs.push(new);
                (201, vec![], pr(n, &f).to_string())
            }
            ("PATCH", path) if path.starts_with("/repos/o/r/pulls/") => {
                let n: u64 = path.rsplit('/').next().and_then(|n| n.parse().ok()).unwrap_or(0);
                let b = s.json();
                need(&mut f, b["title"].is_string() && b["body"].is_string(), format!("update: {b}"));
                match f.prs.iter_mut().find(|p| p.number == n) {
                    Some(p) => {
                        p.title = b["title"].as_str().unwrap_or_default().to_string();
                        p.body = b["body"].as_str().unwrap_or_default().to_string();
                        if p.state == "merged" {
                            p.written_after_merge.push(p.body.clone());
                        }
                        (200, vec![], pr(n, &f).to_string())
                    }
                    None => (404, vec![], json!({"message": "Not Found"}).to_string()),
                }
            }
            ("POST", "/graphql") => {
                let b = s.json();
                let q = b["query"].as_str().unwrap_or_default().to_string();
                need(
                    &mut f,
                    b["variables"]["id"].as_str().is_some_and(|id| id.starts_with("PR_")),
                    format!("graphql: {b}"),
                );
                if q.contains("markPullRequestReadyForReview") {
                    let n: u64 = b["variables"]["id"].as_str().unwrap_or("PR_0")[3..].parse().unwrap_or(0);
                    if let Some(p) = f.prs.iter_mut().find(|p| p.number == n) {
                        p.draft = false;
                    }
                }
                f.graphql.push(q);
                (200, vec![], json!({"data": {}}).to_string())
            }
            (m, u) => {
                f.faults.push(format!("unexpected {m} {u}"));
                (404, vec![], json!({"message": "Not Found"}).to_string())
            }
        }
    }
}

/// GitLab's REST API (v4) for merge requests.
fn gitlab(state: Shared) -> impl Fn(&Seen) -> Answer + Send + Sync + 'static {
    move |s: &Seen| {
        let mut f = state.lock().expect("lock");
        need(
            &mut f,
            s.header("private-token") == Some("glpat-forgetoken0000"),
            format!("{} {}: PRIVATE-TOKEN", s.method, s.url),
        );
        let mr = |n: u64, f: &Forge| -> Value {
            let p = f.prs.iter().find(|p| p.number == n).expect("mr");
            json!({"iid": p.number, "web_url": format!("https://gitlab.example.com/o/r/-/merge_requests/{}", p.number),
                   "state": match p.state.as_str() { "open" => "opened", s => s }, "draft": p.title.starts_with("Draft:"),
                   "source_branch": p.head, "target_branch": p.base, "sha": p.merged_sha,
                   "title": p.title, "description": p.body})
        };
        match (s.method.as_str(), s.url.split('?').next().unwrap_or("")) {
            ("GET", "/api/v4/projects/o%2Fr/merge_requests") => {
                need(
                    &mut f,
                    s.url.contains("source_branch=swarm%2Fmain") && s.url.contains("target_branch=main"),
                    format!("list: {}", s.url),
                );
                need(
                    &mut f,
                    s.url.contains("state=all") && s.url.contains("order_by=created_at") && s.url.contains("sort=desc"),
                    format!("list: {}", s.url),
                );
                let list: Vec<Value> = f.prs.iter().rev().map(|p| mr(p.number, &f)).collect();
                (200, vec![], Value::Array(list).to_string())
            }
            ("POST", "/api/v4/projects/o%2Fr/merge_requests") => {
                let b = s.json();
                for k in ["source_branch", "target_branch", "title", "description"] {
                    need(&mut f, b[k].is_string(), format!("create: {k}: {b}"));
                }
                let n = f.prs.len() as u64 + 1;
                let str_of = |k: &str| b[k].as_str().unwrap_or_default().to_string();
                let new = Pr {
                    number: n,
                    head: str_of("source_branch"),
                    base: str_of("target_branch"),
                    title: str_of("title"),
                    body: str_of("description"),
                    draft: false,
                    state: "open".into(),
                    ..Pr::default()
                };
                f.prs.push(new);
                (201, vec![], mr(n, &f).to_string())
            }
            ("PUT", path) if path.starts_with("/api/v4/projects/o%2Fr/merge_requests/") => {
                let n: u64 = path.rsplit('/').next().and_then(|n| n.parse().ok()).unwrap_or(0);
                let b = s.json();
                need(&mut f, b["title"].is_string() && b["description"].is_string(), format!("update: {b}"));
                match f.prs.iter_mut().find(|p| p.number == n) {
                    Some(p) => {
                        p.title = b["title"].as_str().unwrap_or_default().to_string();
                        p.body = b["description"].as_str().unwrap_or_default().to_string();
                        if p.state == "merged" {
                            p.written_after_merge.push(p.body.clone());
                        }
                        (200, vec![], mr(n, &f).to_string())
                    }
                    None => (404, vec![], json!({"message": "404 Not found"}).to_string()),
                }
            }
            (m, u) => {
                f.faults.push(format!("unexpected {m} {u}"));
                (404, vec![], json!({"message": "404 Not found"}).to_string())
            }
        }
    }
}

/// A bare remote whose `main` only the forge may push (a pre-receive hook refuses the rest), a `swarm/main` branch
/// from it, and a clone whose swarm lands on `swarm/main` and proposes into `main`.
fn protected(env: &Env, forge: &str, api: &str) -> (PathBuf, PathBuf) {
    let bare = env.bare_remote("origin");
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\n[ -n \"$FORGE_MERGE\" ] && exit 0\nwhile read old new ref; do\n  if [ \"$ref\" = refs/heads/main ]; then echo \"main is protected: open a pull request\" >&2; exit 1; fi\ndone\nexit 0\n",
    )
    .expect("hook");
    std::process::Command::new("chmod").arg("+x").arg(&hook).status().expect("chmod");
    let url = file_url(&bare);
    let c = env.clone(&url, "c0");
    env.git(&c, &["push", "-q", "origin", "main:swarm/main"]);
    // Agents are scripted; the runner pushes over git's transport (the hook runs).
    let cfg = env.path("swarm.toml");
    std::fs::write(
        &cfg,
        format!(
            "target = \"swarm/main\"\n[forge]\npropose = \"{forge}\"\nbase = \"main\"\nrepo = \"o/r\"\napi_url = \"{api}\"\n\
             [roles.default]\nexec = {:?}\n",
            scripted_agent()
        ),
    )
    .expect("cfg");
    env.sw(&c, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    (bare, c)
}

/// How the forge merges a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    /// A merge commit: main holds the swarm's commits.
    Merge,
    /// One new commit with their content: main holds none of them.
    Squash,
}

/// The forge merges the request at the swarm's branch as it is now: made on the bare repository (past the hook, as
/// the forge's own push is). The commit merged.
fn forge_merges(env: &Env, bare: &Path, state: &Shared, number: u64, how: Strategy) -> String {
    let scratch = env.path(&format!("forge-{number}"));
    env.git(env.root.path(), &["clone", "-q", bare.to_str().expect("utf-8"), scratch.to_str().expect("utf-8")]);
    env.git(&scratch, &["fetch", "-q", "origin", "swarm/main"]);
    let head = env.git(&scratch, &["rev-parse", "FETCH_HEAD"]).trim().to_string();
    match how {
        Strategy::Merge => {
            env.git(
                &scratch,
                &["merge", "-q", "--no-ff", "-m", &format!("Merge pull request #{number}"), "FETCH_HEAD"],
            );
        }
        Strategy::Squash => {
            env.git(&scratch, &["merge", "-q", "--squash", "FETCH_HEAD"]);
            env.git(&scratch, &["commit", "-q", "-m", &format!("The swarm's work (#{number})")]);
        }
    }
    let o = env.git_env(&scratch, &[("FORGE_MERGE", "1")], &["push", "-q", "origin", "HEAD:main"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut f = state.lock().expect("lock");
    let p = f.prs.iter_mut().find(|p| p.number == number).expect("the request is there");
    assert_eq!(p.state, "open", "the forge merges an open request");
    p.state = "merged".into();
    p.merged_sha = Some(head.clone());
    head
}

/// A file of `branch` on the bare remote.
fn file_at(env: &Env, bare: &Path, branch: &str, name: &str) -> String {
    env.git(bare, &["show", &format!("{branch}:{name}")])
}

fn trailers(env: &Env, bare: &Path, branch: &str) -> Vec<String> {
    env.git(bare, &["log", "--format=%(trailers:key=Swarm-Task,valueonly)", branch])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A worker until nothing is ready; what it said is printed (`--nocapture` shows the transcript of docs/forge.md).
fn run_fleet(env: &Env, c: &Path, token: (&str, &str)) -> common::Out {
    let out =
        env.sw_env(c, &[token, ("GIT_SWARM_TRANSPORT", "git")], &["--agent", "w", "run", "worker", "--until-idle"]);
    eprint!("{}", out.stderr);
    out
}

/// A stand-in of `kind`'s API on loopback: what it keeps, the server, the API's base URL, and the runner's token.
fn stand_in(kind: &str) -> (Shared, Served, String, (&'static str, &'static str)) {
    let state: Shared = Arc::default();
    let served = match kind {
        "github" => Served::start(github(Arc::clone(&state))),
        _ => Served::start(gitlab(Arc::clone(&state))),
    };
    let api = if kind == "github" { served.base.clone() } else { format!("{}/api/v4", served.base) };
    let token = if kind == "github" {
        ("GITHUB_TOKEN", "ghs_forgetoken0000")
    } else {
        ("GITLAB_TOKEN", "glpat-forgetoken0000")
    };
    (state, served, api, token)
}

/// The ids of the tasks a description lists, sorted: its `` - `id` `` entries under its `### Tasks`.
fn listed(body: &str) -> Vec<String> {
    let tasks = body.rfind("\n### Tasks\n").map_or("", |at| &body[at..]);
    let mut ids: Vec<String> = tasks
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(id, _)| id.to_string())
        .collect();
    ids.sort();
    ids
}

fn protected_main_through_requests(kind: &str, how: Strategy) {
    let (state, served, api, token) = stand_in(kind);
    let env = Env::new();
    let (bare, c) = protected(&env, kind, &api);
    let main_before = env.rev(&bare, "refs/heads/main");
    let mut first = Vec::new();
    for i in 0..3 {
        first.push(env.sw(&c, &["add", &format!("first {i}"), "--body", &format!("@write f{i}.txt {i}")]).ok().line());
    }
    let out = run_fleet(&env, &c, token);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("forge: opened"), "{}", out.stderr);
    // Every task landed on the swarm's branch; main is as it was (the runner never pushed it).
    assert_eq!(env.rev(&bare, "refs/heads/main"), main_before);
    let on_swarm = trailers(&env, &bare, "swarm/main");
    for id in &first {
        assert_eq!(on_swarm.iter().filter(|t| *t == id).count(), 1, "{id}: {on_swarm:?}");
    }
    {
        let f = state.lock().expect("lock");
        assert!(f.faults.is_empty(), "requests the forge would refuse: {:?}", f.faults);
        assert_eq!(f.prs.len(), 1, "one request: {:?}", f.prs);
        let pr = &f.prs[0];
        assert_eq!((pr.head.as_str(), pr.base.as_str(), pr.state.as_str()), ("swarm/main", "main", "open"));
        for id in &first {
            assert!(pr.body.contains(id.as_str()), "the description lists {id}:\n{}", pr.body);
        }
        if kind == "github" {
            assert!(pr.draft, "opened as a draft");
        } else {
            assert!(pr.title.starts_with("Draft: "), "{}", pr.title);
        }
    }
    // The calls stayed few: one search, one opening, and at most one update per landing.
    let calls = served.seen().len();
    assert!(calls <= 2 + first.len(), "{calls} calls for {} landings", first.len());

    // The forge merges it; before any runner takes main back in, a person lands a change to a file the merged work
    // wrote (the race a squash makes a conflict of, were the merge naive).
    forge_merges(&env, &bare, &state, 1, how);
    let raced = env.sw(&c, &["add", "raced", "--body", "by hand"]).ok().line();
    env.sw(&c, &["--agent", "me", "claim", &raced]).ok();
    env.git(&c, &["fetch", "-q", "origin", "swarm/main"]);
    env.git(&c, &["checkout", "-q", "--detach", "FETCH_HEAD"]);
    std::fs::write(c.join("f0.txt"), "changed after the merge\n").expect("write");
    env.git(&c, &["commit", "-q", "-am", "f0 changed"]);
    env.git(&c, &["push", "-q", "origin", "HEAD:swarm/main"]);
    env.sw(&c, &["--agent", "me", "done", &raced, "--commit", "HEAD"]).ok();

    let mut second = vec![raced.clone()];
    for i in 0..2 {
        second
            .push(env.sw(&c, &["add", &format!("second {i}"), "--body", &format!("@write s{i}.txt {i}")]).ok().line());
    }
    let out = run_fleet(&env, &c, token);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("forge: took main into swarm/main"), "{}", out.stderr);
    assert!(!out.stderr.contains("cannot be taken"), "{}", out.stderr);
    {
        let f = state.lock().expect("lock");
        assert!(f.faults.is_empty(), "{:?}", f.faults);
        assert_eq!(f.prs.len(), 2, "a second request after the merge: {:?}", f.prs);
        let pr = &f.prs[1];
        for id in &second {
            assert!(pr.body.contains(id.as_str()), "{id}:\n{}", pr.body);
        }
        for id in &first {
            assert!(!pr.body.contains(id.as_str()), "merged work is not proposed again ({id}):\n{}", pr.body);
        }
    }
    forge_merges(&env, &bare, &state, 2, how);
    // Every task reached main, once: its content (a squash keeps no commit of the swarm's), and with a merge commit
    // its own commit exactly once.
    for i in 0..3 {
        let want = if i == 0 { "changed after the merge".to_string() } else { i.to_string() };
        assert_eq!(file_at(&env, &bare, "main", &format!("f{i}.txt")).trim(), want);
    }
    for i in 0..2 {
        assert_eq!(file_at(&env, &bare, "main", &format!("s{i}.txt")).trim(), i.to_string());
    }
    if how == Strategy::Merge {
        let on_main = trailers(&env, &bare, "main");
        for id in first.iter().chain(&second[1..]) {
            assert_eq!(on_main.iter().filter(|t| *t == id).count(), 1, "{id} on main: {on_main:?}");
        }
    }
    for id in first.iter().chain(&second) {
        assert_eq!(env.sw(&c, &["show", id, "--json"]).ok().json()["status"], "done");
    }
    // The judge's stop marks the open request ready (a third one, for one more task).
    let last = env.sw(&c, &["add", "last one", "--body", "@write l.txt l"]).ok().line();
    run_fleet(&env, &c, token).ok();
    let judge = env.sw_env(&c, &[token, ("GIT_SWARM_TRANSPORT", "git")], &["--agent", "j", "run", "judge", "--once"]);
    eprint!("{}", judge.stderr);
    assert_eq!(judge.code, 0, "{}", judge.stderr);
    assert!(judge.stderr.contains("forge: marked request 3 ready"), "{}", judge.stderr);
    let f = state.lock().expect("lock");
    assert!(f.faults.is_empty(), "{:?}", f.faults);
    let pr = &f.prs[2];
    assert!(pr.body.contains(last.as_str()), "{}", pr.body);
    for id in first.iter().chain(&second) {
        assert!(!pr.body.contains(id.as_str()), "merged work is not proposed again ({id}):\n{}", pr.body);
    }
    if kind == "github" {
        assert!(f.graphql.iter().any(|q| q.contains("markPullRequestReadyForReview")), "{:?}", f.graphql);
        assert!(!pr.draft, "no longer a draft");
    } else {
        assert!(!pr.title.starts_with("Draft:"), "{}", pr.title);
    }
    // The token never reached the board, the logs or the agents.
    let board = env.git(&bare, &["log", "-p", "refs/swarm/default"]);
    assert!(!board.contains(token.1));
    let grep = std::process::Command::new("grep").args(["-rlF", token.1]).arg(c.join(".git")).output().expect("grep");
    assert_eq!(grep.status.code(), Some(1), "the token is in {}", String::from_utf8_lossy(&grep.stdout));
}

#[test]
fn a_protected_main_takes_the_swarms_work_through_one_pull_request_at_a_time() {
    protected_main_through_requests("github", Strategy::Merge);
}

#[test]
fn a_squashed_pull_request_is_taken_back_without_conflicts_or_repeats() {
    protected_main_through_requests("github", Strategy::Squash);
}

#[test]
fn a_protected_main_takes_the_swarms_work_through_one_merge_request_at_a_time() {
    protected_main_through_requests("gitlab", Strategy::Merge);
}

#[test]
fn a_squashed_merge_request_is_taken_back_without_conflicts_or_repeats() {
    protected_main_through_requests("gitlab", Strategy::Squash);
}

/// The forge merges the request while tasks land: after the second of three landings, while the third task's agent
/// works. The merged request's description ends listing exactly the tasks whose code the merged commit holds (the
/// second too, though the description had not caught up with it when the forge merged; not the third, which landed
/// after the merge), it is never written but to say that, and the next request lists only the rest: each task in
/// exactly one request. (The runner used to write the merged request's description with the third task, the answer
/// telling it merged too late, and listed it again in the next request.)
fn merged_while_tasks_land(kind: &str, how: Strategy) {
    let (state, served, api, token) = stand_in(kind);
    let env = Env::new();
    let (bare, c) = protected(&env, kind, &api);
    let go = env.path("merged");
    let first = env.sw(&c, &["add", "one", "--body", "@write a.txt a"]).ok().line();
    let second = env.sw(&c, &["add", "two", "--body", "@write b.txt b", "--after", &first]).ok().line();
    let waits = format!("@wait-for {}\n@write c.txt c", go.display());
    let third = env.sw(&c, &["add", "three", "--body", &waits, "--after", &second]).ok().line();
    let (out, merged) = std::thread::scope(|scope| {
        let forge = scope.spawn(|| {
            wait_for("two landings and a request", || {
                trailers(&env, &bare, "swarm/main").len() >= 2 && !state.lock().expect("lock").prs.is_empty()
            });
            let head = forge_merges(&env, &bare, &state, 1, how);
            std::fs::write(&go, "go").expect("go");
            head
        });
        let out = run_fleet(&env, &c, token);
        // (Should the fleet end first, the forge's thread says why it did not merge.)
        std::fs::write(&go, "go").ok();
        (out, forge.join().expect("the forge merged"))
    });
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("request 1 was merged"), "{}", out.stderr);
    let mut carried = trailers(&env, &bare, &merged);
    carried.sort();
    let mut want = vec![first.clone(), second.clone()];
    want.sort();
    assert_eq!(carried, want, "the forge merged the first two tasks");
    let body_one = {
        let f = state.lock().expect("lock");
        assert!(f.faults.is_empty(), "requests the forge would refuse: {:?}", f.faults);
        let one = &f.prs[0];
        assert_eq!(one.state, "merged");
        assert_eq!(listed(&one.body), carried, "the merged request lists what it carried:\n{}", one.body);
        for w in &one.written_after_merge {
            assert_eq!(listed(w), carried, "a write after the merge says only what it carried:\n{w}");
        }
        assert_eq!(f.prs.len(), 2, "the third task is in a request of its own: {:?}", f.prs);
        assert_eq!(listed(&f.prs[1].body), vec![third.clone()], "{}", f.prs[1].body);
        one.body.clone()
    };
    // Two more landings go into the open request, though others' work reaches main between them (a move of the base
    // that is no merge of the swarm's request: the runner looks, and writes it); the merged one is left as it is.
    let go = env.path("others");
    let calls_before = served.seen().len();
    let fourth = env.sw(&c, &["add", "four", "--body", "@write d.txt d"]).ok().line();
    let waits = format!("@wait-for {}\n@write e.txt e", go.display());
    let fifth = env.sw(&c, &["add", "five", "--body", &waits, "--after", &fourth]).ok().line();
    let out = std::thread::scope(|scope| {
        scope.spawn(|| {
            wait_for("the fourth landing", || trailers(&env, &bare, "swarm/main").contains(&fourth));
            others_land_on_main(&env, &bare);
            std::fs::write(&go, "go").expect("go");
        });
        let out = run_fleet(&env, &c, token);
        std::fs::write(&go, "go").ok();
        out
    });
    assert_eq!(out.code, 0, "{}", out.stderr);
    let f = state.lock().expect("lock");
    assert!(f.faults.is_empty(), "{:?}", f.faults);
    assert_eq!(f.prs.len(), 2, "{:?}", f.prs);
    assert_eq!((f.prs[0].body.as_str(), f.prs[1].state.as_str()), (body_one.as_str(), "open"));
    let mut rest = vec![third.clone(), fourth.clone(), fifth.clone()];
    rest.sort();
    assert_eq!(listed(&f.prs[1].body), rest, "{}", f.prs[1].body);
    for id in [&first, &second, &third, &fourth, &fifth] {
        let n = f.prs.iter().filter(|p| listed(&p.body).contains(id)).count();
        assert_eq!(n, 1, "{id} is in exactly one request: {:?}", f.prs);
    }
    // The calls stayed few: a look when main moved (the sync's, the update reusing it), another when it moved again
    // (in place of the sync's), and one update per landing.
    let calls: Vec<String> = served.seen()[calls_before..].iter().map(|x| format!("{} {}", x.method, x.url)).collect();
    assert!(calls.len() <= 4, "{calls:#?}");
}

/// The forge merges the request with a merge commit at the last landing, before the runner's update caught up with
/// it, and nothing lands after (the next task fails): main then holds every landing, there is nothing left to propose,
/// and the runner still puts the merged request's description right (it lists the last landing too), and opens no
/// other request.
#[test]
fn a_merge_request_merged_at_its_last_landing_lists_it_too() {
    let (state, _served, api, token) = stand_in("gitlab");
    let env = Env::new();
    let (bare, c) = protected(&env, "gitlab", &api);
    env.sw(&c, &["config", "set", "max_attempts", "1"]).ok();
    let go = env.path("merged");
    let first = env.sw(&c, &["add", "one", "--body", "@write a.txt a"]).ok().line();
    let second = env.sw(&c, &["add", "two", "--body", "@write b.txt b", "--after", &first]).ok().line();
    let fails = format!("@wait-for {}\n@exit 1", go.display());
    env.sw(&c, &["add", "three", "--body", &fails, "--after", &second]).ok();
    let out = std::thread::scope(|scope| {
        scope.spawn(|| {
            wait_for("two landings and a request", || {
                trailers(&env, &bare, "swarm/main").len() >= 2 && !state.lock().expect("lock").prs.is_empty()
            });
            forge_merges(&env, &bare, &state, 1, Strategy::Merge);
            std::fs::write(&go, "go").expect("go");
        });
        let out = run_fleet(&env, &c, token);
        std::fs::write(&go, "go").ok();
        out
    });
    assert!(out.stderr.contains("request 1 was merged"), "{}", out.stderr);
    let f = state.lock().expect("lock");
    assert!(f.faults.is_empty(), "{:?}", f.faults);
    assert_eq!(f.prs.len(), 1, "nothing is left to propose: {:?}", f.prs);
    let mut want = vec![first, second];
    want.sort();
    assert_eq!(listed(&f.prs[0].body), want, "{}", f.prs[0].body);
}

/// Wait until `done` (at most 120 s).
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not in time");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Others' work reaches main (another request's merge), past the hook as the forge's own push.
fn others_land_on_main(env: &Env, bare: &Path) {
    let scratch = env.path("others-work");
    env.git(env.root.path(), &["clone", "-q", bare.to_str().expect("utf-8"), scratch.to_str().expect("utf-8")]);
    std::fs::write(scratch.join("others.txt"), "others' work\n").expect("write");
    env.git(&scratch, &["add", "others.txt"]);
    env.git(&scratch, &["commit", "-q", "-m", "others' work"]);
    let o = env.git_env(&scratch, &[("FORGE_MERGE", "1")], &["push", "-q", "origin", "HEAD:main"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

#[test]
fn a_pull_request_merged_while_tasks_land_lists_only_what_it_carried() {
    merged_while_tasks_land("github", Strategy::Squash);
}

#[test]
fn a_merge_request_merged_while_tasks_land_lists_only_what_it_carried() {
    merged_while_tasks_land("gitlab", Strategy::Merge);
}

/// Without a token the runner says so once, and the tasks still land on the swarm's branch.
#[test]
fn without_a_token_the_work_lands_and_the_runner_says_why_no_request() {
    let env = Env::new();
    let (bare, c) = protected(&env, "github", "http://127.0.0.1:9");
    env.sw(&c, &["add", "one", "--body", "@write a.txt a"]).ok();
    env.sw(&c, &["add", "two", "--body", "@write b.txt b"]).ok();
    let out = env.sw_env(&c, &[("GIT_SWARM_TRANSPORT", "git")], &["--agent", "w", "run", "worker", "--until-idle"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stderr.matches("no token for github").count(), 1, "{}", out.stderr);
    assert_eq!(trailers(&env, &bare, "swarm/main").len(), 2);
    // The doctor says what a runner here would miss.
    let doc = env.sw(&c, &["doctor"]);
    assert!(doc.stdout.contains("no GITHUB_TOKEN or GH_TOKEN here"), "{}", doc.stdout);
    let doc = env.sw_env(&c, &[("GH_TOKEN", "ghp_x")], &["doctor", "--json"]);
    let f = doc.json()["findings"].as_array().cloned().unwrap_or_default();
    assert!(f.iter().any(|f| f["check"] == "forge" && f["severity"] == "ok"), "{f:?}");
    // Where the token goes is part of what a clone trusts: another clone's runner stops when it changes.
    let c2 = env.clone(&file_url(&bare), "c2");
    let mut trust = env.cmd(&c2);
    trust.env_remove("GIT_SWARM_TRUST").args(["trust", "--yes"]);
    assert!(trust.output().expect("trust").status.success());
    env.sw(&c, &["config", "set", "forge.api_url", "https://forge.example.com/api/v3"]).ok();
    env.sw(&c, &["add", "three", "--body", "@write c.txt c"]).ok();
    let mut run = env.cmd(&c2);
    run.env_remove("GIT_SWARM_TRUST").env("GITHUB_TOKEN", "ghs_x").env("GIT_SWARM_TRANSPORT", "git");
    let o = common::Out::from(run.args(["run", "worker", "--once"]).output().expect("run"));
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("forge.api_url"), "{}", o.stderr);
    // And a base that is the target is refused by the settings' check.
    let o = env.sw(&c, &["config", "set", "forge.base", "swarm/main"]).code(2);
    assert!(o.stderr.contains("the swarm's target too"), "{}", o.stderr);
}
