//! Hostile state: commits crafted with git plumbing on top of a real swarm (bad TOML, unknown statuses, ids that are
//! paths, symlinks, submodules, duplicates, huge files, deep trees, a `tasks` file), hostile task text (shell
//! metacharacters, terminal escapes) and bad command-line input, all through the built binary against a real bare
//! remote. Each bad file must be named on stderr with the commit it was read from, and the healthy tasks must go on
//! listing, claiming and finishing as usual. No command may panic (exit 101): every exit code is asserted.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common::{Env, Out, path_url};
use serde_json::Value;

const REF: &str = "refs/swarm/default";
const AGENT: &str = "worker-1";

/// A swarm on a bare remote, a clone to drive it from, and a few healthy tasks added with the CLI.
struct Fx {
    env: Env,
    bare: PathBuf,
    clone: PathBuf,
    /// Ids of the healthy tasks, in the order they were added.
    ids: Vec<String>,
}

/// Where a crafted commit starts from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Base {
    /// The tree of the current tip.
    Tip,
    /// An empty tree.
    Empty,
}

impl Fx {
    fn new() -> Fx {
        let env = Env::new();
        let bare = env.bare_remote("origin");
        let clone = env.clone(&path_url(&bare), "c0");
        let fx = Fx { env, bare, clone, ids: vec![] };
        fx.sw(&["init"], 0);
        let ids = ["alpha", "beta", "gamma"].iter().map(|t| fx.sw(&["add", t], 0).line()).collect();
        Fx { ids, ..fx }
    }

    /// Run `git swarm` in the clone and assert its exit code (and that it did not panic).
    #[track_caller]
    fn sw(&self, args: &[&str], code: i32) -> Out {
        self.sw_env(&[], args, code)
    }

    #[track_caller]
    fn sw_env(&self, env: &[(&str, &str)], args: &[&str], code: i32) -> Out {
        let out = self.env.sw_env(&self.clone, env, args);
        assert_no_panic(&out, args);
        out.code(code)
    }

    /// Run `git swarm --agent worker-1 …`.
    #[track_caller]
    fn agent(&self, args: &[&str], code: i32) -> Out {
        let mut all = vec!["--agent", AGENT];
        all.extend_from_slice(args);
        self.sw(&all, code)
    }

    fn tip(&self) -> String {
        self.env.rev(&self.bare, REF).expect("the state ref exists")
    }

    /// git in the bare remote with stdin and extra environment; panics on failure; stdout trimmed.
    fn git_in(&self, args: &[&str], stdin: &[u8], extra: &[(&str, &Path)]) -> String {
        String::from_utf8_lossy(&self.git_raw(args, stdin, extra)).trim_end().to_string()
    }

    /// git in the bare remote; stdout as bytes.
    fn git_raw(&self, args: &[&str], stdin: &[u8], extra: &[(&str, &Path)]) -> Vec<u8> {
        let mut cmd = self.env.command("git");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd
            .current_dir(&self.bare)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run git");
        {
            let mut si = child.stdin.take().expect("stdin");
            si.write_all(stdin).expect("write stdin");
        }
        let o = child.wait_with_output().expect("wait git");
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    }

    /// Write a blob into the remote (`git hash-object -w`).
    fn blob(&self, bytes: &[u8]) -> String {
        self.git_in(&["hash-object", "-w", "--stdin"], bytes, &[])
    }

    /// The blob at `path` in the tip.
    fn blob_at(&self, path: &str) -> String {
        self.env.git(&self.bare, &["rev-parse", &format!("{REF}:{path}")])
    }

    /// The path of task `id` in the tip.
    fn path_of(&self, id: &str) -> String {
        let files = self.env.git(&self.bare, &["ls-tree", "-r", "--name-only", REF, "--", "tasks"]);
        let suffix = format!("/{id}.toml");
        files.lines().find(|l| l.ends_with(&suffix)).unwrap_or_else(|| panic!("{id} not in {files}")).to_string()
    }

    /// The shard folder (`tasks/3f`) of healthy task `id`.
    fn folder_of(&self, id: &str) -> String {
        let p = self.path_of(id);
        p.rsplit_once('/').expect("a folder").0.to_string()
    }

    /// Commit a state on top of the tip whose tree is `base` with `entries` put in (mode, object id, path as raw
    /// bytes; mode `0` removes the path), and move the remote's state ref to it (a compare-and-swap, as a rogue
    /// writer with push access would). Returns the new commit.
    fn craft(&self, base: Base, entries: &[(&str, &str, &[u8])]) -> String {
        let tip = self.tip();
        let index = self.env.path("craft.index");
        let _ = std::fs::remove_file(&index);
        let idx: &[(&str, &Path)] = &[("GIT_INDEX_FILE", &index)];
        match base {
            Base::Tip => self.git_in(&["read-tree", &tip], b"", idx),
            Base::Empty => self.git_in(&["read-tree", "--empty"], b"", idx),
        };
        let mut info = Vec::new();
        for (mode, oid, path) in entries {
            let oid = if *mode == "0" { "0000000000000000000000000000000000000000" } else { oid };
            info.extend_from_slice(format!("{mode} {oid}\t").as_bytes());
            info.extend_from_slice(path);
            info.push(0);
        }
        self.git_in(&["update-index", "-z", "--index-info"], &info, idx);
        let tree = self.git_in(&["write-tree", "--missing-ok"], b"", idx);
        let commit = self.git_in(&["commit-tree", &tree, "-p", &tip, "-m", "rogue edit"], b"", &[]);
        self.git_in(&["update-ref", REF, &commit, &tip], b"", &[]);
        commit
    }

    /// Put one regular file at `path` on top of the tip.
    fn put(&self, path: &str, bytes: &[u8]) -> String {
        let oid = self.blob(bytes);
        self.craft(Base::Tip, &[("100644", &oid, path.as_bytes())])
    }

    /// The object id at `path` in the tip, if any.
    fn entry(&self, path: &[u8]) -> Option<String> {
        let out = self.git_raw(&["ls-tree", "-r", "-z", REF], b"", &[]);
        out.split(|b| *b == 0).find_map(|rec| {
            let tab = rec.iter().position(|b| *b == b'\t')?;
            (&rec[tab + 1..] == path)
                .then(|| String::from_utf8_lossy(&rec[..tab]).split(' ').nth(2).unwrap_or_default().to_string())
        })
    }

    /// `list --json` as id → task object, asserting each id is there once.
    #[track_caller]
    fn list(&self) -> (Out, BTreeMap<String, Value>) {
        let out = self.sw(&["list", "--json"], 0);
        let doc = out.json();
        let mut by_id = BTreeMap::new();
        for t in doc.as_array().expect("an array") {
            let id = t["id"].as_str().expect("an id").to_string();
            assert!(by_id.insert(id.clone(), t.clone()).is_none(), "{id} listed twice: {}", out.stdout);
        }
        (out, by_id)
    }

    /// The standard check after a hostile commit: every command on the healthy tasks works and names the bad
    /// files. `bad` are the paths (as printed) that must be warned about; `in_ops` says whether reads for an op
    /// (`ready`, `status`, `claim`, which skip finished tasks) see them too.
    #[track_caller]
    fn healthy_board_works(&self, bad: &[&str], in_ops: bool) {
        let warned = |out: &Out, tip: &str, expect: bool| {
            for p in bad {
                if expect {
                    assert_warned(out, p, tip);
                }
            }
        };
        let [first, second, third] = [&self.ids[0], &self.ids[1], &self.ids[2]];
        let tip = self.tip();
        let (out, tasks) = self.list();
        warned(&out, &tip, true);
        for id in &self.ids {
            assert_eq!(tasks.get(id).map(|t| t["status"].clone()), Some("open".into()), "{id}: {}", out.stdout);
        }
        let out = self.sw(&["list"], 0);
        warned(&out, &tip, true);
        for id in &self.ids {
            assert!(out.stdout.contains(id.as_str()), "{id} missing from list:\n{}", out.stdout);
        }
        let out = self.sw(&["show", first], 0);
        warned(&out, &tip, in_ops);
        assert!(out.stdout.contains("alpha"), "{}", out.stdout);
        let out = self.sw(&["ready", "--json"], 0);
        warned(&out, &tip, in_ops);
        let ready = out.json();
        for id in &self.ids {
            assert!(
                ready.as_array().expect("array").iter().any(|t| t["id"] == id.as_str()),
                "{id} not ready: {}",
                out.stdout
            );
        }
        let open: Vec<&String> = tasks.iter().filter(|(_, t)| t["status"] == "open").map(|(id, _)| id).collect();
        let out = self.sw(&["status", "--json"], 0);
        warned(&out, &tip, in_ops);
        assert_eq!(out.json()["counts"]["open"], open.len(), "{}", out.stdout);
        // Claim and finish the first task by id. An op by id parses its own task alone (invariant 31): what is
        // wrong inside other files is for the reads above to say, not for every `done`.
        let out = self.agent(&["claim", first], 0);
        assert_no_panic(&out, &["claim", first]);
        assert_eq!(out.line(), *first);
        let out = self.agent(&["done", first, "--note", "ok"], 0);
        assert_no_panic(&out, &["done", first]);
        // A claim without id takes one of the others.
        let tip = self.tip();
        let out = self.agent(&["claim"], 0);
        warned(&out, &tip, in_ops);
        let got = out.line();
        assert!(got != *first && open.contains(&&got), "claimed {got}, not an open task: {open:?}");
        self.agent(&["release", &got], 0);
        let tip = self.tip();
        let (out, tasks) = self.list();
        warned(&out, &tip, true);
        assert_eq!(tasks[first.as_str()]["status"], "done");
        assert_eq!(tasks[first.as_str()]["result"]["note"], "ok");
        assert_eq!(tasks[second.as_str()]["status"], "open");
        assert_eq!(tasks[third.as_str()]["status"], "open");
        // Finished means final, hostile files or not.
        self.agent(&["claim", first], 4);
    }
}

#[track_caller]
fn assert_no_panic(out: &Out, args: &[&str]) {
    assert_ne!(out.code, 101, "git swarm {args:?} panicked:\n{}", out.stderr);
    assert!(!out.stderr.contains("panicked at"), "git swarm {args:?} panicked:\n{}", out.stderr);
}

/// A `warning:` line on stderr names `path` and the commit (at least its first 7 hex digits).
#[track_caller]
fn assert_warned(out: &Out, path: &str, commit: &str) {
    let short = &commit[..7];
    let hit = out.stderr.lines().find(|l| l.starts_with("warning:") && l.contains(path) && l.contains(short));
    assert!(hit.is_some(), "no warning naming {path} in commit {short} on stderr:\n{}", out.stderr);
}

/// An error on stderr names `what` and the commit.
#[track_caller]
fn assert_error_names(out: &Out, what: &str, commit: &str) {
    let short = &commit[..7];
    let hit = out.stderr.lines().find(|l| l.starts_with("error:") && l.contains(what) && l.contains(short));
    assert!(hit.is_some(), "no error naming {what} in commit {short} on stderr:\n{}", out.stderr);
}

/// A task file as the tool writes it, for crafting healthy tasks with chosen ids.
fn task_toml(id: &str, title: &str, extra: &str) -> String {
    format!("id = \"{id}\"\ntitle = \"{title}\"\n{extra}")
}

// ---------------------------------------------------------------------------------------------------------------
// Unreadable task files

#[test]
fn bad_toml_is_reported_and_skipped() {
    let fx = Fx::new();
    let path = format!("{}/t-badbad.toml", fx.folder_of(&fx.ids[0]));
    fx.put(&path, b"id = \"t-badbad\"\ntitle = \"unterminated\n[[[ status = \n");
    fx.healthy_board_works(&[&path], true);
    assert!(fx.entry(path.as_bytes()).is_some(), "the bad file was kept as it was");
}

#[test]
fn unknown_status_is_reported_and_skipped() {
    let fx = Fx::new();
    let path = format!("{}/t-0bad01.toml", fx.folder_of(&fx.ids[1]));
    fx.put(&path, task_toml("t-0bad01", "finished?", "status = \"finished\"\n").as_bytes());
    fx.healthy_board_works(&[&path], true);
    fx.agent(&["claim", "t-0bad01"], 4);
}

#[test]
fn ids_that_are_paths_are_reported_and_never_used_as_paths() {
    let fx = Fx::new();
    let a = fx.blob(task_toml("../../../evil", "up", "").as_bytes());
    let b = fx.blob(task_toml("a/b", "slash", "").as_bytes());
    let c = fx.blob(task_toml("t-..", "dots", "").as_bytes());
    fx.craft(
        Base::Tip,
        &[
            ("100644", &a, b"tasks/xx/evil.toml"),
            ("100644", &b, b"tasks/xx/slash.toml"),
            ("100644", &c, b"tasks/xx/t-...toml"),
        ],
    );
    fx.healthy_board_works(&["tasks/xx/evil.toml", "tasks/xx/slash.toml", "tasks/xx/t-...toml"], true);
    // Nothing was written outside the repositories.
    assert!(!fx.env.root.path().join("evil").exists());
    assert!(!fx.env.root.path().join("evil.toml").exists());
    // And such ids are refused on the command line.
    for id in ["../../../evil", "a/b", "t-..", "..", "/etc/passwd"] {
        let out = fx.agent(&["claim", id], 2);
        assert!(out.stderr.contains(id), "the bad id is named: {}", out.stderr);
        fx.sw(&["show", id], 2);
    }
}

#[test]
fn a_file_name_that_disagrees_with_the_id_inside_is_reported() {
    let fx = Fx::new();
    // A copy of the first task under another name: not a second copy of it, an unreadable file.
    let folder = fx.folder_of(&fx.ids[0]);
    let impostor = format!("{folder}/t-0000aa.toml");
    let oid = fx.blob_at(&fx.path_of(&fx.ids[0]));
    fx.craft(Base::Tip, &[("100644", &oid, impostor.as_bytes())]);
    let out = fx.sw(&["list"], 0);
    assert!(out.stderr.contains(&fx.ids[0]), "the message names the id inside: {}", out.stderr);
    fx.healthy_board_works(&[&impostor], true);
    // After the real one is done, the impostor does not bring it back.
    let (_, tasks) = fx.list();
    assert_eq!(tasks[&fx.ids[0]]["status"], "done");
    fx.agent(&["claim", "t-0000aa"], 4);
}

#[test]
fn invalid_utf8_content_and_names_are_reported() {
    let fx = Fx::new();
    let folder = fx.folder_of(&fx.ids[2]);
    let content = fx.blob(b"id = \"t-0bad02\"\ntitle = \"caf\xff\xfe\"\n");
    let name_oid = fx.blob(task_toml("t-0bad03", "bad name", "").as_bytes());
    let content_path = format!("{folder}/t-0bad02.toml");
    let mut bad_name = format!("{folder}/").into_bytes();
    bad_name.extend_from_slice(b"\xff\xfe.toml");
    fx.craft(Base::Tip, &[("100644", &content, content_path.as_bytes()), ("100644", &name_oid, &bad_name)]);
    fx.healthy_board_works(&[&content_path, &format!("{folder}/\u{FFFD}\u{FFFD}.toml")], true);
}

#[test]
fn a_symlink_named_like_a_task_is_reported() {
    let fx = Fx::new();
    let folder = fx.folder_of(&fx.ids[0]);
    let target = fx.blob(b"/etc/passwd");
    let up = fx.blob(b"../../swarm.toml");
    let link = format!("{folder}/x.toml");
    fx.craft(
        Base::Tip,
        &[
            ("120000", &target, link.as_bytes()),
            ("120000", &up, b"tasks/t-111111.toml"),
            ("120000", &up, b"tasks/link"),
        ],
    );
    fx.healthy_board_works(&[&link, "tasks/t-111111.toml"], true);
    assert!(fx.entry(link.as_bytes()).is_some(), "the link was kept");
}

#[test]
fn a_submodule_entry_is_reported() {
    let fx = Fx::new();
    let folder = fx.folder_of(&fx.ids[1]);
    let sub = format!("{folder}/sub.toml");
    // A gitlink to a commit that exists nowhere, and one without the .toml suffix.
    let missing = "1234567890abcdef1234567890abcdef12345678";
    fx.craft(Base::Tip, &[("160000", missing, sub.as_bytes()), ("160000", missing, b"tasks/vendor")]);
    fx.healthy_board_works(&[&sub], true);
    assert_eq!(fx.entry(sub.as_bytes()).as_deref(), Some(missing), "the gitlink was kept");
}

#[test]
fn a_multi_megabyte_file_is_reported_not_loaded() {
    let fx = Fx::new();
    let path = format!("{}/t-b16b16.toml", fx.folder_of(&fx.ids[0]));
    let body = "x".repeat(3 * 1024 * 1024);
    fx.put(&path, task_toml("t-b16b16", "huge", &format!("body = \"{body}\"\n")).as_bytes());
    let started = std::time::Instant::now();
    fx.healthy_board_works(&[&path], true);
    assert!(started.elapsed().as_secs() < 60, "a huge file must not make the board crawl");
    fx.agent(&["claim", "t-b16b16"], 4);
}

#[test]
fn a_finished_folder_holding_an_open_task_is_reported() {
    let fx = Fx::new();
    let path = "tasks/done/d0/t-d0d0d0.toml";
    fx.put(path, task_toml("t-d0d0d0", "open in done", "status = \"open\"\n").as_bytes());
    // Ops read finished tasks by path only, so only full reads (list, show) see the disagreement.
    fx.healthy_board_works(&[path], false);
    let ready = fx.sw(&["ready", "--json"], 0).json();
    assert!(!ready.to_string().contains("t-d0d0d0"), "not ready: {ready}");
    fx.agent(&["claim", "t-d0d0d0"], 4);
}

/// A file under `tasks/done/` carrying the id of a live task must not take that task off the board. The live task
/// here sits in a folder that sorts after `done` (`tasks/e1/`), so the finished copy is met first.
#[test]
fn a_rogue_finished_copy_does_not_hide_a_live_task() {
    let fx = Fx::new();
    let live = task_toml("t-e1e1e1", "live one", "");
    let live_oid = fx.blob(live.as_bytes());
    let rogue = fx.blob(task_toml("t-e1e1e1", "live one", "status = \"open\"\n").as_bytes());
    fx.craft(
        Base::Tip,
        &[("100644", &live_oid, b"tasks/e1/t-e1e1e1.toml"), ("100644", &rogue, b"tasks/done/e1/t-e1e1e1.toml")],
    );
    let tip = fx.tip();
    let (out, tasks) = fx.list();
    assert_warned(&out, "tasks/done/e1/t-e1e1e1.toml", &tip);
    assert_eq!(tasks["t-e1e1e1"]["status"], "open");
    // What list shows as open, ready lists and claim takes.
    let ready = fx.sw(&["ready", "--json"], 0).json();
    assert!(ready.to_string().contains("t-e1e1e1"), "an open task that list shows is not ready: {ready}");
    let out = fx.agent(&["claim", "t-e1e1e1"], 0);
    assert_eq!(out.line(), "t-e1e1e1");
    fx.agent(&["done", "t-e1e1e1"], 0);
    let (_, tasks) = fx.list();
    assert_eq!(tasks["t-e1e1e1"]["status"], "done");
}

/// Two files carry one id, in two shard folders. One is used, the other reported; once the task is done it stays
/// done: the other copy must not bring it back (that would complete it twice).
fn twins_complete_once(copy_folder: &str, live_folder: &str) {
    let fx = Fx::new();
    let id = format!("t-{}{}{}", &live_folder[6..], &live_folder[6..], &live_folder[6..]);
    let oid = fx.blob(task_toml(&id, "twin", "").as_bytes());
    let live = format!("{live_folder}/{id}.toml");
    let copy = format!("{copy_folder}/{id}.toml");
    fx.craft(Base::Tip, &[("100644", &oid, live.as_bytes()), ("100644", &oid, copy.as_bytes())]);
    let tip = fx.tip();
    let (out, tasks) = fx.list();
    assert_eq!(tasks[&id]["status"], "open");
    let second = if copy_folder < live_folder { &live } else { &copy };
    assert_warned(&out, second, &tip);
    assert!(out.stderr.contains("second file"), "{}", out.stderr);
    // The twin is warned about until the task is first written; that write deletes the second file (so that it
    // cannot come back when the task moves), after which there is nothing left to warn about.
    for args in [&["ready", "--json"][..], &["status", "--json"], &["show", &id]] {
        assert_warned(&fx.sw(args, 0), second, &tip);
    }
    fx.healthy_board_works(&[], true);
    // The twin: claimed and done once…
    assert_eq!(fx.agent(&["claim", &id], 0).line(), id);
    fx.agent(&["done", &id], 0);
    // …and final afterwards, whichever copy is left.
    let (out, tasks) = fx.list();
    assert_eq!(tasks[&id]["status"], "done", "{copy} + {live}: the twin came back:\n{}", out.stdout);
    let ready = fx.sw(&["ready", "--json"], 0).json();
    assert!(!ready.to_string().contains(&id), "{copy} + {live}: the done twin is ready again: {ready}");
    fx.agent(&["claim", &id], 4);
    let files = fx.env.git(&fx.bare, &["ls-tree", "-r", "--name-only", "refs/swarm/default"]);
    assert_eq!(files.matches(&format!("{id}.toml")).count(), 1, "the twin file is still there:\n{files}");
    // Drain the board: the twin never comes up again.
    let mut taken = vec![];
    loop {
        let out = fx.env.sw(&fx.clone, &["--agent", "other", "claim"]);
        assert_no_panic(&out, &["claim"]);
        match out.code {
            3 => break,
            0 => {}
            code => panic!("claim exited {code}: {}", out.stderr),
        }
        let got = out.line();
        assert_ne!(got, id, "{copy} + {live}: the done twin was claimed again");
        assert!(!taken.contains(&got), "{got} claimed twice");
        fx.sw(&["--agent", "other", "done", &got], 0);
        taken.push(got);
    }
}

/// A twin where the ops would put one: a live task and a finished copy of it in `tasks/done/<shard>/`. The layout is
/// canonical, so an op by id looks the task up instead of walking every name (invariant 31): it must see the twin
/// as the walk does — the live file used, the other reported — and its write must delete the twin.
#[test]
fn a_finished_twin_at_its_canonical_place_is_seen_by_ops_that_look_up() {
    let fx = Fx::new();
    let id = fx.ids[1].clone();
    let shard = fx.folder_of(&id).trim_start_matches("tasks/").to_string();
    let done = task_toml(&id, "an old copy", "status = \"done\"\n");
    let oid = fx.blob(done.as_bytes());
    let twin = format!("tasks/done/{shard}/{id}.toml");
    fx.craft(Base::Tip, &[("100644", &oid, twin.as_bytes())]);
    // Both readers agree: the live copy is used and the finished one is a second file.
    let (out, tasks) = fx.list();
    assert_eq!(tasks[&id]["status"], "open", "{}", out.stdout);
    assert!(out.stderr.contains("second file") && out.stderr.contains(&twin), "{}", out.stderr);
    let tip = fx.tip();
    let out = fx.agent(&["claim", &id], 0);
    assert_eq!(out.line(), id);
    assert_warned(&out, &twin, &tip);
    // It looked the task up (the layout's verdict is kept in the clone), and its write deleted the twin.
    let kept = fx.clone.join(".git/swarm/cache/canonical-v1");
    assert!(std::fs::read_dir(&kept).is_ok_and(|d| d.count() > 0), "no verdict in {}", kept.display());
    assert!(fx.entry(twin.as_bytes()).is_none(), "the claim left the twin");
    fx.agent(&["done", &id, "--note", "the live one"], 0);
    let (out, tasks) = fx.list();
    assert_eq!(tasks[&id]["status"], "done");
    assert_eq!(tasks[&id]["result"]["note"], "the live one", "{}", out.stdout);
    assert!(!out.stderr.contains("second file"), "the twin is still there: {}", out.stderr);
    let files = fx.env.git(&fx.bare, &["ls-tree", "-r", "--name-only", REF]);
    assert_eq!(files.matches(&format!("{id}.toml")).count(), 1, "{files}");
    // The other tasks are untouched and still ready.
    for other in [&fx.ids[0], &fx.ids[2]] {
        assert_eq!(tasks[other.as_str()]["status"], "open");
    }
}

/// A dep as a full read sees it, whether the op looks it up (a canonical layout) or walks every name (a stray file
/// makes the layout not canonical): `set_up` gets the dep's id and live path and returns the entries that make it
/// done. The task that waits on it must then be claimable by id, as `claim` without id and `ready` say.
fn a_done_dep_lets_its_task_be_claimed_by_id(set_up: impl Fn(&Fx, &str, &str) -> Vec<(String, String)>) {
    for stray in [false, true] {
        let fx = Fx::new();
        let (dep, task) = (fx.ids[0].clone(), fx.ids[1].clone());
        let dep_path = fx.path_of(&dep);
        let mut files = set_up(&fx, &dep, &dep_path);
        let waits = task_toml(&task, "beta", &format!("deps = [\"{dep}\"]\n"));
        files.push((fx.blob(waits.as_bytes()), fx.path_of(&task)));
        if stray {
            // A task in a folder that is not its shard's: every read of this board walks every name.
            let lost = task_toml("t-0b0b0b", "lost", "");
            files.push((fx.blob(lost.as_bytes()), "tasks/zz/t-0b0b0b.toml".into()));
        }
        let entries: Vec<(&str, &str, &[u8])> =
            files.iter().map(|(oid, path)| ("100644", oid.as_str(), path.as_bytes())).collect();
        fx.craft(Base::Tip, &entries);
        let ready = fx.sw(&["ready", "--json"], 0).json();
        assert!(ready.to_string().contains(&task), "stray {stray}: a full read does not find {task} ready: {ready}");
        let out = fx.agent(&["claim", &task], 0);
        assert_eq!(out.line(), task, "stray {stray}");
    }
}

#[test]
fn a_dep_whose_live_file_says_done_counts_as_done() {
    a_done_dep_lets_its_task_be_claimed_by_id(|fx, dep, path| {
        let done = task_toml(dep, "alpha", "status = \"done\"\n");
        vec![(fx.blob(done.as_bytes()), path.to_string())]
    });
}

#[test]
fn an_unreadable_live_file_of_a_dep_leaves_it_to_its_finished_twin() {
    a_done_dep_lets_its_task_be_claimed_by_id(|fx, dep, path| {
        let shard = path.trim_start_matches("tasks/").split('/').next().expect("a shard").to_string();
        let done = task_toml(dep, "alpha", "status = \"done\"\n");
        vec![
            (fx.blob(b"= = = not toml"), path.to_string()),
            (fx.blob(done.as_bytes()), format!("tasks/done/{shard}/{dep}.toml")),
        ]
    });
}

#[test]
fn twin_files_complete_once_copy_sorting_first() {
    // The copy in tasks/00/ is used; when it moves to tasks/done/0a/ the original in tasks/0a/ (which sorts before
    // tasks/done/) is what is left.
    twins_complete_once("tasks/00", "tasks/0a");
}

#[test]
fn twin_files_complete_once_copy_sorting_last() {
    twins_complete_once("tasks/zz", "tasks/0a");
}

#[test]
fn twin_files_complete_once_original_after_done() {
    twins_complete_once("tasks/00", "tasks/e2");
}

/// Counters at the edge of their type in a task file: the board must not panic (exit 101) on them, and a task that
/// cannot take one more claim or attempt is refused or reported, not written back broken.
#[test]
fn counters_at_their_limits_do_not_crash_the_board() {
    let fx = Fx::new();
    // The largest epoch a file may carry is 2^53 - 1 (exact in JSON); beyond it the file is reported unreadable.
    let max_epoch = fx.blob(task_toml("t-aa0001", "max epoch", "epoch = 9007199254740991\n").as_bytes());
    let over_epoch = fx.blob(task_toml("t-aa0004", "over epoch", "epoch = 18446744073709551615\n").as_bytes());
    let max_attempts = fx.blob(
        task_toml(
            "t-aa0002",
            "max attempts",
            "status = \"claimed\"\nattempts = 4294967295\nepoch = 1\n\
             [claim]\nagent = \"ghost\"\nepoch = 1\nlease_until = \"2001-01-01T00:00:00Z\"\n",
        )
        .as_bytes(),
    );
    let min_priority = fx.blob(task_toml("t-aa0003", "min priority", "priority = -9223372036854775808\n").as_bytes());
    fx.craft(
        Base::Tip,
        &[
            ("100644", &max_epoch, b"tasks/aa/t-aa0001.toml"),
            ("100644", &max_attempts, b"tasks/aa/t-aa0002.toml"),
            ("100644", &min_priority, b"tasks/aa/t-aa0003.toml"),
            ("100644", &over_epoch, b"tasks/aa/t-aa0004.toml"),
        ],
    );
    let out = fx.sw(&["list"], 0);
    assert!(out.stderr.contains("tasks/aa/t-aa0004.toml") && out.stderr.contains("epoch"), "{}", out.stderr);
    fx.sw(&["list"], 0);
    fx.sw(&["ready"], 0);
    fx.sw(&["status", "--json"], 0);
    for id in ["t-aa0001", "t-aa0002"] {
        let out = fx.env.sw(&fx.clone, &["--agent", AGENT, "claim", id]);
        assert_no_panic(&out, &["claim", id]);
        assert!(out.code == 0 || out.code == 4, "claim {id} exited {}: {}", out.code, out.stderr);
        // Whatever happened, the task is still readable.
        let out = fx.sw(&["list"], 0);
        assert!(!out.stderr.contains(&format!("{id}.toml")), "claim {id} left it unreadable: {}", out.stderr);
    }
    // The healthy tasks are still claimed and finished as usual.
    for id in fx.ids.clone() {
        assert_eq!(fx.agent(&["claim", &id], 0).line(), id);
        fx.agent(&["done", &id], 0);
    }
    let out = fx.env.sw(&fx.clone, &["--agent", AGENT, "claim"]);
    assert_no_panic(&out, &["claim"]);
}

#[test]
fn deep_nesting_is_cut_off_and_reported() {
    let fx = Fx::new();
    let ok = fx.blob(task_toml("t-0c0c0c", "nested a little", "").as_bytes());
    let deep = fx.blob(task_toml("t-0d0d0d", "nested a lot", "").as_bytes());
    let deep_path: String = (0..120).map(|i| format!("d{i}/")).collect::<String>();
    let deep_path = format!("tasks/{deep_path}t-0d0d0d.toml");
    fx.craft(Base::Tip, &[("100644", &ok, b"tasks/x1/x2/x3/t-0c0c0c.toml"), ("100644", &deep, deep_path.as_bytes())]);
    fx.healthy_board_works(&["tasks/d0/d1/d2/d3/d4/d5"], true);
    // Any depth within reason is a task.
    let (_, tasks) = fx.list();
    assert_eq!(tasks.get("t-0c0c0c").map(|t| t["status"].clone()), Some("open".into()));
    assert!(!tasks.contains_key("t-0d0d0d"));
    assert_eq!(fx.agent(&["claim", "t-0c0c0c"], 0).line(), "t-0c0c0c");
    fx.agent(&["done", "t-0c0c0c"], 0);
    assert!(fx.entry(b"tasks/x1/x2/x3/t-0c0c0c.toml").is_none(), "the finished task moved out");
}

#[test]
fn a_tasks_file_instead_of_a_folder_is_reported() {
    let fx = Fx::new();
    let cfg = fx.blob_at("swarm.toml");
    let junk = fx.blob(b"not a folder\n");
    let bad = fx.craft(Base::Empty, &[("100644", &cfg, b"swarm.toml"), ("100644", &junk, b"tasks")]);
    for args in [&["list"][..], &["list", "--json"], &["ready"], &["status", "--json"]] {
        let out = fx.sw(args, 0);
        assert_warned(&out, "tasks", &bad);
    }
    fx.agent(&["claim"], 3);
    fx.agent(&["claim", &fx.ids[0]], 4);
    // Adding a task must not panic; if it goes through, the new task is on the board.
    let out = fx.env.sw(&fx.clone, &["add", "after the storm"]);
    assert_no_panic(&out, &["add"]);
    assert!(out.code == 0 || out.code == 1, "add exited {}: {}", out.code, out.stderr);
    if out.code == 0 {
        let id = out.line();
        let (_, tasks) = fx.list();
        assert!(tasks.contains_key(&id), "the added task {id} is listed");
    } else {
        assert!(out.stderr.contains("tasks"), "{}", out.stderr);
    }
}

/// An op that is refused (exit 3 or 4) on a board with unreadable files still names them: the refusal may well be
/// their doing ("no task t-badbad", "nothing to claim").
#[test]
fn a_refused_op_still_names_the_unreadable_files() {
    let fx = Fx::new();
    let path = format!("{}/t-badbad.toml", fx.folder_of(&fx.ids[0]));
    let bad = fx.put(&path, b"id = \"t-badbad\"\ntitle = [\n");
    let out = fx.agent(&["claim", "t-badbad"], 4);
    assert_warned(&out, &path, &bad);
    for id in fx.ids.clone() {
        fx.agent(&["claim", &id], 0);
    }
    let tip = fx.tip();
    let out = fx.sw(&["--agent", "other", "claim"], 3);
    assert_warned(&out, &path, &tip);
}

/// Every kind of bad entry in one commit, read through each transport: in-process, gix fetch + `git push`, and
/// `git fetch` + `git push`.
#[test]
fn every_hostile_entry_at_once_on_every_transport() {
    for transport in ["auto", "git", "git-fetch"] {
        let fx = Fx::new();
        let folder = fx.folder_of(&fx.ids[0]);
        let bad_toml = fx.blob(b"= = =\n");
        let link = fx.blob(b"../../../../etc/passwd");
        let huge = fx.blob(&vec![b'#'; 2 * 1024 * 1024]);
        let twin = fx.blob_at(&fx.path_of(&fx.ids[1]));
        let bad_utf8 = fx.blob(b"id = \"\xc3\x28\"\n");
        let paths = [
            format!("{folder}/a-bad.toml"),
            format!("{folder}/b-link.toml"),
            format!("{folder}/c-sub.toml"),
            format!("{folder}/d-huge.toml"),
            format!("tasks/zz/{}.toml", fx.ids[1]),
            format!("{folder}/e-utf8.toml"),
        ];
        let gitlink = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef";
        fx.craft(
            Base::Tip,
            &[
                ("100644", &bad_toml, paths[0].as_bytes()),
                ("120000", &link, paths[1].as_bytes()),
                ("160000", gitlink, paths[2].as_bytes()),
                ("100644", &huge, paths[3].as_bytes()),
                ("100644", &twin, paths[4].as_bytes()),
                ("100644", &bad_utf8, paths[5].as_bytes()),
            ],
        );
        let env = [("GIT_SWARM_TRANSPORT", transport)];
        let tip = fx.tip();
        let out = fx.sw_env(&env, &["list", "--json"], 0);
        for p in &paths {
            assert_warned(&out, p, &tip);
        }
        assert_eq!(out.json().as_array().map(Vec::len), Some(3), "{transport}: {}", out.stdout);
        let id = fx.sw_env(&env, &["--agent", AGENT, "claim"], 0).line();
        assert!(fx.ids.contains(&id), "{transport}: claimed {id}");
        // An op by id parses its own task alone (invariant 31), but walks every name: what is wrong with an entry
        // as such (a link, a submodule, a twin) it still reports; what is inside another task's file it does not.
        let out = fx.sw_env(&env, &["--agent", AGENT, "done", &id], 0);
        for p in &paths[1..=2] {
            assert_warned(&out, p, &fx.tip_before_last(&id));
        }
        let out = fx.sw_env(&env, &["show", &id, "--json"], 0);
        assert_eq!(out.json()["status"], "done", "{transport}");
        for p in &paths {
            assert!(fx.entry(p.as_bytes()).is_some(), "{transport}: {p} was kept");
        }
    }
}

impl Fx {
    /// The parent of the tip (the state a just-finished op read), checking that the tip is the op on `id`.
    fn tip_before_last(&self, id: &str) -> String {
        let msg = self.env.git(&self.bare, &["log", "-1", "--format=%B", REF]);
        assert!(msg.contains(id), "the last op is about {id}: {msg}");
        self.env.git(&self.bare, &["rev-parse", &format!("{REF}^")])
    }
}

// ---------------------------------------------------------------------------------------------------------------
// A broken swarm.toml: nothing can be judged without the settings

/// An entry to craft (mode, object id, path), owning its object id.
type OwnedEntry = (&'static str, String, &'static [u8]);

#[test]
fn a_broken_or_missing_swarm_toml_is_named_reads_go_on_and_ops_are_refused() {
    let fx = Fx::new();
    let good = fx.blob_at("swarm.toml");
    let id = fx.ids[0].clone();
    let cases: Vec<(&str, Vec<OwnedEntry>)> = vec![
        ("bad toml", vec![("100644", fx.blob(b"target = [[[\n"), b"swarm.toml")]),
        ("not utf-8", vec![("100644", fx.blob(b"target = \"\xff\"\n"), b"swarm.toml")]),
        ("newer version", vec![("100644", fx.blob(b"version = 99\n"), b"swarm.toml")]),
        ("zero lease", vec![("100644", fx.blob(b"lease = \"0s\"\n"), b"swarm.toml")]),
        ("zero attempts", vec![("100644", fx.blob(b"max_attempts = 0\n"), b"swarm.toml")]),
        ("wrong type", vec![("100644", fx.blob(b"max_attempts = \"many\"\n"), b"swarm.toml")]),
        ("huge", vec![("100644", fx.blob(&vec![b'#'; 300 * 1024]), b"swarm.toml")]),
        ("symlink", vec![("120000", fx.blob(b"/etc/passwd"), b"swarm.toml")]),
        ("submodule", vec![("160000", "1234567890abcdef1234567890abcdef12345678".into(), b"swarm.toml")]),
        ("folder", vec![("0", String::new(), b"swarm.toml"), ("100644", good.clone(), b"swarm.toml/inner")]),
        ("missing", vec![("0", String::new(), b"swarm.toml")]),
    ];
    for (what, entries) in cases {
        let entries: Vec<(&str, &str, &[u8])> = entries.iter().map(|(m, o, p)| (*m, o.as_str(), *p)).collect();
        let bad = fx.craft(Base::Tip, &entries);
        // Reads go on with the newest settings that read, and name the file and the commit on stderr.
        // (`log` reads commits, not the board: it works, and says nothing of the settings.)
        fx.sw(&["log"], 0);
        let reads: [&[&str]; 5] = [&["list"], &["list", "--json"], &["show", &id], &["ready"], &["status"]];
        for args in reads {
            let out = fx.sw(args, 0);
            let short = &bad[..7];
            assert!(
                out.stderr.lines().any(|l| l.starts_with("warning:") && l.contains("swarm.toml") && l.contains(short)),
                "{what}: {args:?}: no warning naming swarm.toml in commit {short}:\n{}",
                out.stderr
            );
        }
        // Ops are refused with an error naming them.
        let ops: [&[&str]; 4] =
            [&["--agent", AGENT, "claim"], &["--agent", AGENT, "claim", &id], &["add", "more"], &["init"]];
        for args in ops {
            let out = fx.sw(args, 1);
            assert_error_names(&out, "swarm.toml", &bad);
        }
        // Nothing was written on top of the broken state.
        assert_eq!(fx.tip(), bad, "{what}: the state ref moved");
        // Repair it for the next case.
        fx.craft(Base::Tip, &[("0", "", b"swarm.toml/inner"), ("100644", &good, b"swarm.toml")]);
        fx.sw(&["list"], 0);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Task text is data

#[test]
fn shell_metacharacters_in_task_text_run_nothing() {
    let fx = Fx::new();
    let victim = fx.clone.join("victim");
    std::fs::write(&victim, "still here\n").expect("victim");
    let outside = fx.env.root.path().join("victim");
    std::fs::write(&outside, "still here\n").expect("victim");
    let titles = [
        "$(touch pwned)",
        "`touch pwned2`",
        "x; rm -rf victim; touch pwned3",
        "y && rm -rf ../victim || touch pwned4",
        "| touch pwned5 > pwned6",
        "'\"; touch pwned7; echo \"'",
        "${IFS}touch${IFS}pwned8",
    ];
    let mut ids = vec![];
    for t in titles {
        let body = format!("body: {t}\n$(touch pwned9)\n`touch pwned10`");
        let out = fx.sw(&["add", t, "--body", &body, "--label", "safe", "--json"], 0);
        assert_eq!(out.json()["title"], t, "the title is kept verbatim");
        assert_eq!(out.json()["body"], body.as_str());
        ids.push(out.json()["id"].as_str().expect("id").to_string());
    }
    fx.sw(&["list"], 0);
    fx.sw(&["list", "--json"], 0);
    fx.sw(&["status"], 0);
    fx.sw(&["ready"], 0);
    fx.sw(&["log"], 0);
    for id in &ids {
        fx.sw(&["show", id], 0);
        fx.sw(&["show", id, "--json"], 0);
        fx.agent(&["claim", id], 0);
        fx.agent(&["renew", id], 0);
        fx.agent(&["done", id, "--note", "$(touch pwned11); `touch pwned12`"], 0);
    }
    let (_, tasks) = fx.list();
    for (id, t) in ids.iter().zip(titles) {
        assert_eq!(tasks[id]["title"], t);
        assert_eq!(tasks[id]["status"], "done");
    }
    let mut found = vec![];
    walk(fx.env.root.path(), &mut |p| {
        if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("pwned")) {
            found.push(p.to_path_buf());
        }
    });
    assert!(found.is_empty(), "task text was run by a shell: {found:?}");
    assert!(victim.exists() && outside.exists(), "task text removed a file");
    // The work tree is untouched (besides the victim we put there).
    assert_eq!(fx.env.git(&fx.clone, &["status", "--porcelain"]), "?? victim");
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        f(&p);
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&p, f);
        }
    }
}

const ESC: char = '\u{1b}';
const BIDI: [char; 4] = ['\u{202E}', '\u{202D}', '\u{2066}', '\u{200F}'];

#[track_caller]
fn assert_no_terminal_controls(what: &str, s: &str) {
    assert!(!s.contains(ESC), "raw ESC in {what}: {s:?}");
    assert!(!s.contains('\u{7}'), "raw BEL in {what}: {s:?}");
    assert!(!s.contains('\r'), "raw CR in {what}: {s:?}");
    for b in BIDI {
        assert!(!s.contains(b), "raw bidi control {b:?} in {what}: {s:?}");
    }
}

#[test]
fn terminal_escapes_in_task_text_are_escaped_for_humans_and_verbatim_in_json() {
    let fx = Fx::new();
    let title = "evil \u{1b}[2J\u{1b}[31mred\u{1b}]0;owned\u{7} \u{202E}fdp.exe\u{202C} \u{2066}x\u{2069} over";
    let body = "line one\n\u{1b}[2Jcleared \u{202E}reversed\u{7}";
    let out = fx.sw(&["add", title, "--body", body, "--json"], 0);
    let id = out.json()["id"].as_str().expect("id").to_string();
    let human: [&[&str]; 5] = [&["list"], &["show", &id], &["ready"], &["log"], &["status"]];
    for args in human {
        let out = fx.sw(args, 0);
        assert_no_terminal_controls(&format!("stdout of {args:?}"), &out.stdout);
        assert_no_terminal_controls(&format!("stderr of {args:?}"), &out.stderr);
    }
    let out = fx.sw(&["list"], 0);
    assert!(out.stdout.contains("\\u{1b}[2J"), "ESC is shown escaped: {}", out.stdout);
    assert!(out.stdout.contains("\\u{202e}"), "the bidi override is shown escaped: {}", out.stdout);
    assert_eq!(out.stdout.lines().count(), 4, "one line per task: {}", out.stdout);
    // Machine output carries the text exactly.
    let (_, tasks) = fx.list();
    assert_eq!(tasks[&id]["title"], title);
    assert_eq!(tasks[&id]["body"], body);
    let shown = fx.sw(&["show", &id, "--json"], 0).json();
    assert_eq!(shown["title"], title);
    assert_eq!(shown["body"], body);
    // Claiming and finishing print the title too.
    let out = fx.agent(&["claim", &id], 0);
    assert_no_terminal_controls("claim", &out.stdout);
    let out = fx.agent(&["done", &id, "--note", "\u{1b}[2Jnote \u{202E}x"], 0);
    assert_no_terminal_controls("done", &out.stdout);
    let out = fx.sw(&["show", &id], 0);
    assert_no_terminal_controls("show of a done task", &out.stdout);
    let out = fx.sw(&["log"], 0);
    assert_no_terminal_controls("log", &out.stdout);
    // The commit subjects in the state ref hold no control characters either (`git log` shows them raw).
    let subjects = fx.env.git(&fx.bare, &["log", "--format=%s", REF]);
    assert!(!subjects.contains(ESC) && !subjects.contains('\u{7}'), "{subjects:?}");
}

/// Text crafted straight into a state file (not through `add`): newlines that would forge output lines, escapes
/// in the title and in a file name.
#[test]
fn crafted_text_cannot_forge_output_lines() {
    let fx = Fx::new();
    let title = "innocent\nt-000000  done      p0   forged line\u{1b}[2J\r\u{202E}";
    let toml_title = title.replace('\n', "\\n").replace('\r', "\\r").replace('\u{1b}', "\\u001b");
    let oid = fx.blob(task_toml("t-0f0f0f", &toml_title, "").as_bytes());
    let bad = fx.blob(b"= = =\n");
    let name = b"tasks/0f/evil\x1b[2J\nwarning: forged.toml";
    fx.craft(Base::Tip, &[("100644", &oid, b"tasks/0f/t-0f0f0f.toml"), ("100644", &bad, name)]);
    let tip = fx.tip();
    for args in [&["list"][..], &["show", "t-0f0f0f"], &["ready"], &["status"]] {
        let out = fx.sw(args, 0);
        assert_no_terminal_controls(&format!("stdout of {args:?}"), &out.stdout);
        assert!(!out.stdout.lines().any(|l| l.starts_with("t-000000")), "a forged line: {}", out.stdout);
        // The hostile file name is quoted escaped: one warning line, nothing forged.
        assert_no_terminal_controls(&format!("stderr of {args:?}"), &out.stderr);
        assert_warned(&out, "tasks/0f/evil\\u{1b}[2J\\nwarning: forged.toml", &tip);
        assert!(!out.stderr.lines().any(|l| l.starts_with("warning: forged")), "{}", out.stderr);
    }
    let out = fx.sw(&["list"], 0);
    assert_eq!(out.stdout.lines().count(), 4, "one line per task: {}", out.stdout);
    let (_, tasks) = fx.list();
    assert_eq!(tasks["t-0f0f0f"]["title"], title);
    assert_eq!(fx.agent(&["claim", "t-0f0f0f"], 0).line(), "t-0f0f0f");
    let out = fx.agent(&["done", "t-0f0f0f"], 0);
    assert_no_terminal_controls("done", &out.stdout);
}

/// The warning about an unreadable file quotes the parse error, and the parse error quotes the file: a file whose
/// bad line holds terminal escapes must not get them onto the terminal through stderr.
#[test]
fn warnings_do_not_replay_escapes_from_a_bad_file() {
    let fx = Fx::new();
    // Raw control characters are not allowed in a TOML string: the parse error quotes this very line.
    let bad = fx.blob("id = \"t-0e\"\ntitle = \"x\u{1b}[2J\u{1b}]0;pwn\u{7} \u{202E}rev\"\n".as_bytes());
    fx.craft(Base::Tip, &[("100644", &bad, b"tasks/0e/t-0e.toml")]);
    let tip = fx.tip();
    for args in [&["list"][..], &["ready"], &["status"], &["--agent", AGENT, "claim"]] {
        let out = fx.sw(args, 0);
        assert_warned(&out, "tasks/0e/t-0e.toml", &tip);
        assert_no_terminal_controls(&format!("stderr of {args:?}"), &out.stderr);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Bad command-line input: exit 2, naming the culprit, changing nothing

#[test]
fn bad_command_line_input_exits_2_naming_the_culprit() {
    let fx = Fx::new();
    let id = fx.ids[0].clone();
    let before = fx.tip();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--agent", "a b", "claim"], "a b"),
        (vec!["claim", "--agent", "a b"], "a b"),
        (vec!["--agent", "a b", "add", "x"], "a b"),
        (vec!["--agent", "../x", "done", &id], "../x"),
        (vec!["--agent", "", "claim"], "agent"),
        (vec!["claim", "--lease", "soon"], "soon"),
        (vec!["claim", "--lease", "0s"], "0s"),
        (vec!["renew", "--lease=-5m"], "-5m"),
        (vec!["init", "--lease", "soon"], "soon"),
        (vec!["claim", "../x"], "../x"),
        (vec!["claim", "a/b"], "a/b"),
        (vec!["show", ".hidden"], ".hidden"),
        (vec!["done", "t-1;rm"], "t-1;rm"),
        (vec!["add", "x", "--after", "../x"], "../x"),
        (vec!["add", "x", "--label", "a b"], "a b"),
        (vec!["add", "x", "--kind", "banana"], "banana"),
        (vec!["add", "x", "--priority", "high"], "high"),
        (vec!["add", ""], "title"),
        (vec!["add", "two\nlines"], "line"),
        (vec!["claim", "--kind", "banana"], "banana"),
        (vec!["list", "--status", "finished"], "finished"),
        (vec!["list", "--frobnicate"], "--frobnicate"),
        (vec!["claim", "--frobnicate"], "--frobnicate"),
        (vec!["frobnicate"], "frobnicate"),
        (vec!["--swarm", "../x", "list"], "../x"),
        (vec!["--swarm", "x.lock", "list"], "x.lock"),
        (vec!["done", &id, "--commit", "abc; rm -rf /"], "abc; rm -rf /"),
        (vec!["done", &id, "--epoch", "first"], "first"),
        (vec!["fail", &id], "--reason"),
        (vec!["-C", "/nonexistent/dir", "list"], "/nonexistent/dir"),
    ];
    for (args, culprit) in cases {
        let out = fx.sw(&args, 2);
        assert!(out.stderr.contains(culprit), "git swarm {args:?}: the message names {culprit:?}:\n{}", out.stderr);
        assert!(out.stdout.is_empty(), "git swarm {args:?} printed on stdout: {}", out.stdout);
    }
    // With --json, a usage error is still exit 2.
    let out = fx.sw(&["--json", "claim", "--lease", "soon"], 2);
    assert!(out.stderr.contains("soon"), "{}", out.stderr);
    assert_eq!(fx.tip(), before, "a usage error changed the board");
    // Nothing was claimed by any of it.
    let (_, tasks) = fx.list();
    assert!(tasks.values().all(|t| t["status"] == "open"), "{tasks:?}");
}

/// A bad `--agent` is a bad value even for commands that do not need an agent.
#[test]
fn a_bad_agent_is_refused_by_every_command() {
    let fx = Fx::new();
    for args in [&["list"][..], &["status"], &["ready"], &["show", &fx.ids[0]], &["log"]] {
        let mut all = vec!["--agent", "a b"];
        all.extend_from_slice(args);
        let out = fx.sw(&all, 2);
        assert!(out.stderr.contains("a b"), "{all:?}: {}", out.stderr);
    }
}
