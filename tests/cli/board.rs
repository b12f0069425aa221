//! The board to look at: `git swarm watch` (a live text board), `git swarm board` (`--html`, `--json`) and `git
//! swarm board --serve` (the live page), on a real swarm with a plan tree, dependencies, several agents, done /
//! failed / claimed / released tasks, a judge's verdict and a hostile title; the page is rendered by a real headless
//! browser (Debian's `chromium`), its DOM checked and its screenshot decoded and checked for structure; the live
//! page is driven in that browser over its DevTools protocol while another clone changes the board.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{Env, file_url, path_url};

/// A title that is markup, quotes, an ampersand and a terminal escape at once.
const HOSTILE: &str = "A <script>alert(1)</script> \"q\" & 'co' \x1b[2J";

/// A status's colour, as the page says it (its `--status-<status>` property: every status has one).
fn colour(page: &str, status: &str) -> [u8; 3] {
    let key = format!("--status-{status}:#");
    let at = page.find(&key).unwrap_or_else(|| panic!("the page names no colour of {status}")) + key.len();
    let v = u32::from_str_radix(&page[at..at + 6], 16).expect("hex colour");
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

/// A swarm on a bare remote with, under a root plan: A (done), B (after A, failed twice: failed for good), C (after
/// A, held by w3, hostile title), a sub-plan Q with F (claimed and released by w1: open); D (after B and C, no
/// parent: open); and the judge's verdict of cycle 1.
struct Fixture {
    env: Env,
    bare: PathBuf,
    clone: PathBuf,
    ids: std::collections::BTreeMap<&'static str, String>,
}

fn fixture(url_of: fn(&Path) -> String) -> Fixture {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let clone = env.clone(&url_of(&bare), "c0");
    env.sw(&clone, &["init", "--max-attempts", "2"]).ok();
    let sw = |agent: &str, args: &[&str]| env.sw(&clone, &[&["--agent", agent], args].concat()).ok().line();
    let mut ids = std::collections::BTreeMap::new();
    let p = sw("planner", &["add", "Root plan", "--kind", "plan"]);
    let a = sw("planner", &["add", "A comes first", "--parent", &p]);
    let b = sw("planner", &["add", "B builds on A", "--parent", &p, "--after", &a]);
    let c = sw("planner", &["add", HOSTILE, "--parent", &p, "--after", &a]);
    let q = sw("planner", &["add", "Sub-plan Q", "--kind", "plan", "--parent", &p]);
    let f = sw("planner", &["add", "F under Q", "--parent", &q]);
    let d = sw("planner", &["add", "D after B and C", "--after", &b, "--after", &c]);
    sw("w1", &["claim", &a]);
    sw("w1", &["done", &a]);
    sw("w2", &["claim", &b]);
    sw("w2", &["fail", &b, "--reason", "tests broke <b>"]);
    sw("w2", &["claim", &b]);
    sw("w2", &["fail", &b, "--reason", "still broken"]);
    sw("w3", &["claim", &c]);
    sw("w1", &["claim", &f]);
    sw("w1", &["release", &f]);
    for (k, v) in [("P", p), ("A", a), ("B", b), ("C", c), ("Q", q), ("F", f), ("D", d)] {
        ids.insert(k, v);
    }
    write_cycle(
        &env,
        &bare,
        "cycle = 1\nverdict = \"continue\"\nreasons = \"keep <going> & on\"\nby = \"judge-1\"\nat = \"2026-01-01T00:00:00Z\"\n",
    );
    Fixture { env, bare, clone, ids }
}

/// Write `cycles/1.toml` into the state ref of the bare remote with git plumbing, as a judge's commit would.
fn write_cycle(env: &Env, bare: &Path, text: &str) {
    let git = |args: &[&str], stdin: Option<&str>, index: Option<&Path>| -> String {
        let mut cmd = env.command("git");
        // Dated now, as a judge's commit is: the board takes the swarm's age from its commits.
        cmd.env_remove("GIT_AUTHOR_DATE")
            .env_remove("GIT_COMMITTER_DATE")
            .arg("--git-dir")
            .arg(bare)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(i) = index {
            cmd.env("GIT_INDEX_FILE", i);
        }
        let mut child = cmd.spawn().expect("git");
        let mut input = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut input, stdin.unwrap_or("").as_bytes()).expect("write stdin");
        drop(input);
        let out = child.wait_with_output().expect("git");
        assert!(out.status.success(), "git {args:?} failed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let index = env.path("cycle.index");
    let old = git(&["rev-parse", "refs/swarm/default"], None, None);
    git(&["read-tree", &old], None, Some(&index));
    let blob = git(&["hash-object", "-w", "--stdin"], Some(text), None);
    git(&["update-index", "--add", "--cacheinfo", &format!("100644,{blob},cycles/1.toml")], None, Some(&index));
    let tree = git(&["write-tree"], None, Some(&index));
    let msg = "judge cycle 1: continue\n\nSwarm-Op: judge\nSwarm-Agent: judge-1\n";
    let new = git(&["commit-tree", &tree, "-p", &old], Some(msg), None);
    git(&["update-ref", "refs/swarm/default", &new, &old], None, None);
}

#[test]
fn watch_once_shows_counts_holders_failures_and_the_verdict() {
    let fx = fixture(path_url);
    let out = fx.env.sw(&fx.clone, &["watch", "--once"]).ok();
    let s = &out.stdout;
    assert!(!s.contains('\x1b'), "no escape codes off a terminal, and titles escaped:\n{s}");
    assert!(s.contains("tasks: 4 open · 1 claimed · 1 done · 1 failed · 0 cancelled"), "{s}");
    assert!(s.contains("landings per minute: "), "{s}");
    assert!(s.contains("cycle 1: continue (judge-1 at 00:00:00) — keep <going> & on"), "{s}");
    assert!(s.contains("failures: 1 task(s) failed, 2 failed attempt(s)"), "{s}");
    assert!(s.contains(&format!("{} w2: still broken", fx.ids["B"])), "{s}");
    assert!(s.contains(&format!("{} w2: tests broke <b>", fx.ids["B"])), "{s}");
    let holder = s.lines().find(|l| l.trim_start().starts_with("w3 ")).unwrap_or_else(|| panic!("w3 holds C:\n{s}"));
    // The hostile title is shown escaped, never as a raw escape.
    assert!(holder.contains(&fx.ids["C"]) && holder.contains("\\u{1b}[2J (until "), "{holder}");
    // One landing in the newest minute (the test ran within it); the swarm is seconds old, so its rate is taken
    // over its age, not over 10 minutes.
    assert!(s.contains("landed/min (last ") && s.contains(" s)\n"), "{s}");

    let j = fx.env.sw(&fx.clone, &["--json", "watch", "--once"]).ok();
    let v: serde_json::Value = serde_json::from_str(j.stdout.trim()).expect("one JSON document");
    assert_eq!(v["counts"]["failed"], 1);
    assert_eq!(v["landings_per_minute"].as_array().map(|a| a.iter().filter_map(|n| n.as_u64()).sum::<u64>()), Some(1));
}

#[test]
fn board_json_has_the_timeline_and_throughput_of_the_log() {
    let fx = fixture(path_url);
    let v = fx.env.sw(&fx.clone, &["--json", "board"]).ok().json();
    assert_eq!(v["version"], 1);
    assert_eq!(v["total"], 7);
    assert_eq!(v["cycle"]["verdict"], "continue");
    let seg = |task: &str| -> Vec<(String, String)> {
        v["timeline"]
            .as_array()
            .expect("timeline")
            .iter()
            .filter(|s| s["task"] == fx.ids[task].as_str())
            .map(|s| (s["agent"].as_str().unwrap_or("").to_string(), s["outcome"].as_str().unwrap_or("").to_string()))
            .collect()
    };
    let pair = |a: &str, o: &str| (a.to_string(), o.to_string());
    assert_eq!(seg("A"), vec![pair("w1", "done")]);
    assert_eq!(seg("B"), vec![pair("w2", "failed"), pair("w2", "failed")]);
    assert_eq!(seg("C"), vec![pair("w3", "held")]);
    assert_eq!(seg("F"), vec![pair("w1", "released")]);
    assert_eq!(seg("D"), vec![]);
    let held =
        &v["timeline"].as_array().expect("timeline").iter().find(|s| s["outcome"] == "held").expect("held")["end"];
    assert!(held.is_null(), "a held claim has no end yet");
    let sum = |k: &str| {
        v["throughput"]["buckets"].as_array().expect("buckets").iter().filter_map(|b| b[k].as_u64()).sum::<u64>()
    };
    assert_eq!((sum("done"), sum("failed")), (1, 2));
    let holders = v["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0]["agent"], "w3");
    assert!(holders[0]["since"].is_string(), "the claim's time comes from the log");
    assert_eq!(v["failures"]["recent"][0]["reason"], "still broken");
    let tasks = v["tasks"].as_array().expect("tasks");
    let t = |id: &str| tasks.iter().find(|t| t["id"] == id).expect("task");
    assert_eq!(t(&fx.ids["F"])["parent"], fx.ids["Q"].as_str());
    assert_eq!(t(&fx.ids["C"])["title"], HOSTILE);
    // The log cut short says so.
    let v = fx.env.sw(&fx.clone, &["--json", "board", "--log-limit", "3"]).ok().json();
    assert_eq!((v["log_ops"].as_u64(), v["log_truncated"].as_bool()), (Some(3), Some(true)));
}

/// Everything of the page that could reach out: it must have none.
fn assert_self_contained(page: &str) {
    let lower = page.to_ascii_lowercase();
    for bad in ["http://", "https://", "src=", "href=", "url(", "@import", "<script", "<link", "<iframe", "<img"] {
        assert!(!lower.contains(bad), "the page holds {bad:?}");
    }
}

#[test]
fn board_html_is_one_escaped_self_contained_page_with_every_section() {
    let fx = fixture(path_url);
    let file = fx.env.path("board.html");
    let out = fx.env.sw(&fx.clone, &["board", "--html", file.to_str().expect("utf-8")]).ok();
    assert!(out.stderr.contains("wrote "), "{}", out.stderr);
    let page = std::fs::read_to_string(&file).expect("page");
    let stdout = fx.env.sw(&fx.clone, &["board", "--html", "-"]).ok().stdout;
    assert!(stdout.starts_with("<!DOCTYPE html>") && stdout.contains("id=\"depgraph\""), "{stdout}");
    assert_self_contained(&page);
    // The hostile title: escaped everywhere, never markup.
    assert!(page.contains("A &lt;script&gt;alert(1)&lt;/script&gt; &quot;q&quot; &amp; &#39;co&#39; \\u{1b}[2J"));
    assert!(!page.contains('\x1b'));
    assert!(page.contains("tests broke &lt;b&gt;") && page.contains("keep &lt;going&gt; &amp; on"));
    for section in ["summary", "holders", "failures", "plan", "graph", "timeline", "throughput"] {
        assert!(page.contains(&format!("<section id=\"{section}\">")), "section {section}");
    }
    let status = |id: &str| -> String {
        let at = page
            .find(&format!("<g class=\"node\" id=\"node-{id}\" data-status=\""))
            .unwrap_or_else(|| panic!("node {id}"));
        let rest = &page[at..];
        let s = rest.split("data-status=\"").nth(1).and_then(|r| r.split('"').next()).expect("status");
        s.to_string()
    };
    let want =
        [("P", "open"), ("A", "done"), ("B", "failed"), ("C", "claimed"), ("Q", "open"), ("F", "open"), ("D", "open")];
    for (k, st) in want {
        assert_eq!(status(&fx.ids[k]), st, "node of {k}");
    }
    // One edge per dependency.
    assert_eq!(page.matches("<path class=\"edge\"").count(), 4);
    assert!(page.contains(&format!("data-from=\"{}\" data-to=\"{}\"", fx.ids["B"], fx.ids["D"])));
    // The plan tree nests: F inside Q inside P; D at the top.
    let li = |k: &str| page.find(&format!("<li id=\"task-{}\"", fx.ids[k])).unwrap_or_else(|| panic!("li {k}"));
    let tree_end = page.find("</section>\n<section id=\"graph\">").expect("tree end");
    assert!(li("P") < li("Q") && li("Q") < li("F") && li("F") < tree_end);
    let p_block = &page[li("P")..tree_end];
    assert!(p_block.contains(&format!("task-{}", fx.ids["F"])));
    // The legend: exactly the statuses on the board.
    let legend = page.split("<div id=\"legend\">").nth(1).and_then(|r| r.split("</div>").next()).expect("legend");
    for st in ["open", "claimed", "done", "failed"] {
        assert!(legend.contains(&format!("data-status=\"{st}\"")), "legend {st}");
    }
    assert!(!legend.contains("cancelled"));
    // Timeline lanes per agent, bars per claim.
    for a in ["w1", "w2", "w3"] {
        assert!(page.contains(&format!("<g class=\"lane\" data-agent=\"{a}\">")), "lane {a}");
    }
    assert_eq!(page.matches("<rect class=\"seg\"").count(), 5);
    assert!(page.contains(&format!("data-task=\"{}\" data-outcome=\"held\"", fx.ids["C"])));
    assert!(page.contains("<p id=\"cycle\" data-verdict=\"continue\">"));
    // A bad target is a clear error naming it.
    let bad = fx.env.sw(&fx.clone, &["board", "--html", "/nonexistent/dir/x.html"]).code(1);
    assert!(bad.stderr.contains("/nonexistent/dir/x.html"), "{}", bad.stderr);
}

/// `--html` onto something that is not a plain file: a symbolic link keeps pointing where it did (its file gets the
/// page), and a FIFO — as `/dev/stdout` or `/dev/null` are, devices — is written to and stays what it is (renaming
/// over it, as root, once turned `/dev/null` into a plain file on a test machine).
#[test]
fn board_html_writes_through_links_and_into_special_files() {
    use std::os::unix::fs::FileTypeExt;
    let fx = fixture(path_url);
    let real = fx.env.path("real.html");
    std::fs::write(&real, "old").expect("real");
    let link = fx.env.path("link.html");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    fx.env.sw(&fx.clone, &["board", "--html", link.to_str().expect("utf-8")]).ok();
    assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink(), "the link was replaced");
    assert!(std::fs::read_to_string(&real).expect("page").starts_with("<!DOCTYPE html>"));
    let fifo = fx.env.path("board.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).expect("read the fifo"))
    };
    fx.env.sw(&fx.clone, &["board", "--html", fifo.to_str().expect("utf-8")]).ok();
    // Checked before the reader is joined: a FIFO renamed over would leave it waiting for a writer for ever.
    assert!(std::fs::symlink_metadata(&fifo).expect("fifo").file_type().is_fifo(), "the FIFO was replaced");
    let page = reader.join().expect("reader");
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("id=\"depgraph\""), "{page}");
}

// ---------------------------------------------------------------------------------------------------------------
// The live board

/// A child's stdout (and stderr, apart), collected as it comes.
struct Collected {
    child: Child,
    text: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

/// Collect what `from` writes into `into`, on a thread of its own.
fn drain(mut from: impl Read + Send + 'static, into: &Arc<Mutex<String>>) {
    let t = Arc::clone(into);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            t.lock().expect("lock").push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
}

impl Collected {
    fn start(mut cmd: Command) -> Collected {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start");
        let (text, err) = (Arc::new(Mutex::new(String::new())), Arc::new(Mutex::new(String::new())));
        drain(child.stdout.take().expect("stdout"), &text);
        drain(child.stderr.take().expect("stderr"), &err);
        Collected { child, text, err }
    }

    fn text(&self) -> String {
        self.text.lock().expect("lock").clone()
    }

    fn err(&self) -> String {
        self.err.lock().expect("lock").clone()
    }

    /// Wait until the output holds `what`; how long it took.
    fn wait_for(&mut self, what: &str, within: Duration) -> Duration {
        let start = Instant::now();
        while start.elapsed() < within {
            if self.text().contains(what) {
                return start.elapsed();
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("it exited ({st}) before showing {what:?}:\n{}\n{}", self.text(), self.err());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!("it did not show {what:?} within {within:?}:\n{}\n{}", self.text(), self.err());
    }
}

impl Drop for Collected {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `watch` redraws when another clone changes the state ref; Ctrl-C ends it cleanly. `interval` is the poll; a
/// path remote is watched for file events, so there the poll is long and the new frame must come anyway.
fn watch_redraws(url_of: fn(&Path) -> String, interval: &str) {
    let fx = fixture(url_of);
    let other = fx.env.clone(&url_of(&fx.bare), "c1");
    let mut cmd = fx.env.cmd(&fx.clone);
    cmd.args(["watch", "--interval", interval]);
    let mut w = Collected::start(cmd);
    w.wait_for("latest:", Duration::from_secs(10));
    let frames_before = w.text().matches("git swarm watch — ").count();
    fx.env.sw(&other, &["--agent", "w9", "add", "a fresh task from another clone"]).ok();
    let took = w.wait_for("a fresh task from another clone", Duration::from_secs(5));
    println!("watch ({interval} poll) showed another clone's op after {took:?}");
    let t = fx.env.sw(&other, &["--agent", "w9", "claim"]).ok().line();
    w.wait_for(&format!("  {:<16} {t} ", "w9"), Duration::from_secs(5));
    let text = w.text();
    assert!(!text.contains('\x1b'), "no escape codes on a pipe");
    assert!(text.matches("git swarm watch — ").count() >= frames_before + 2, "a frame per change:\n{text}");
    // No frame without a change: wait a poll or two, the count stays.
    let n = text.matches("git swarm watch — ").count();
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(w.text().matches("git swarm watch — ").count(), n, "redrawn without a change");
    // Ctrl-C: a clean exit.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(w.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = w.child.try_wait().expect("wait") {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "watch did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "Ctrl-C ends watch cleanly");
}

#[test]
fn watch_redraws_on_file_events_of_a_path_remote() {
    // A 60 s poll: only the file events can bring the new frame within the 5 s the check waits.
    watch_redraws(path_url, "60s");
}

/// CPU time (user + system, in clock ticks) a process has used so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3 of stat, utime 14 and stime 15.
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

#[test]
fn an_idle_watch_sleeps_while_others_read_the_ref() {
    // File events of reads (inotify reports every open) must not wake the watch: it would read the ref, which is
    // an open too, and spin.
    let fx = fixture(path_url);
    let other = fx.env.clone(&path_url(&fx.bare), "c1");
    let mut cmd = fx.env.cmd(&fx.clone);
    cmd.args(["watch", "--interval", "60s"]);
    let mut w = Collected::start(cmd);
    w.wait_for("latest:", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(w.child.id());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        fx.env.sw(&other, &["status"]).ok();
    }
    let used = cpu_ticks(w.child.id()) - before;
    println!("an idle watch used {used} tick(s) of CPU in 3 s while another clone read the ref");
    assert!(used <= 20, "an idle watch used {used} ticks of CPU in 3 s");
    assert_eq!(w.text().matches("git swarm watch — ").count(), 1, "no frame without a change");
}

#[test]
fn watch_polls_a_url_remote() {
    watch_redraws(file_url, "300ms");
}

/// On a terminal (a pty from util-linux `script`): the cursor is hidden, each frame clears the screen, Ctrl-C
/// (SIGINT from `timeout`) ends it with exit 0 and the cursor shown again; the only escape codes are ours.
#[test]
fn watch_on_a_terminal_redraws_in_place_and_restores_the_cursor() {
    let have = |p: &str| Path::new(p).is_file();
    if !(have("/usr/bin/script") && have("/usr/bin/timeout")) {
        assert!(
            !std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1"),
            "script (util-linux) or timeout (coreutils) missing and GIT_SWARM_REQUIRE_ALL=1"
        );
        println!("skipped: util-linux script or coreutils timeout not installed");
        return;
    }
    let fx = fixture(path_url);
    let line = format!(
        "/usr/bin/timeout --preserve-status --foreground -s INT 3 '{}' watch --interval 1s; echo \"exit=$?\"",
        common::BIN
    );
    let mut cmd = Command::new("/usr/bin/script");
    cmd.args(["-q", "-e", "-c", &line, "/dev/null"]).current_dir(&fx.clone);
    // The same hermetic environment as every other command of the test.
    let probe = fx.env.cmd(&fx.clone);
    for (k, v) in probe.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = common::finish(
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("script"),
        30,
        "script",
    );
    let s = out.stdout;
    assert!(s.contains("exit=0"), "Ctrl-C ends watch with exit 0:\n{s}");
    let hide = s.find("\x1b[?25l").unwrap_or_else(|| panic!("the cursor is hidden:\n{s:?}"));
    let show = s.rfind("\x1b[?25h").unwrap_or_else(|| panic!("the cursor is shown again:\n{s:?}"));
    assert!(hide < show);
    // The clock ticks: more than one frame in 3 s, each drawn from the top (the screen cleared once), each line
    // cleared to its end and what is below the frame cleared.
    let frames = s.matches("\x1b[H").count();
    assert!(frames >= 2, "{frames} frame(s):\n{s:?}");
    assert_eq!(s.matches("git swarm watch — ").count(), frames);
    assert_eq!(s.matches("\x1b[2J").count(), 1, "the screen is cleared once");
    assert_eq!(s.matches("\x1b[J").count(), frames);
    // Every escape code is one of ours: the hostile title's is shown escaped.
    let mut rest = s.clone();
    for ours in ["\x1b[?25l", "\x1b[?25h", "\x1b[H", "\x1b[2J", "\x1b[K", "\x1b[J"] {
        rest = rest.replace(ours, "");
    }
    assert!(!rest.contains('\x1b'), "an escape code that is not ours: {rest:?}");
    assert!(s.contains("\\u{1b}[2J (until "));
}

#[test]
fn watch_and_board_refuse_bad_arguments() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let clone = env.clone(&path_url(&bare), "c0");
    let out = env.sw(&clone, &["watch", "--once"]).code(1);
    assert!(out.stderr.contains("init"), "no swarm yet: {}", out.stderr);
    env.sw(&clone, &["init"]).ok();
    env.sw(&clone, &["watch", "--interval", "5ms"]).code(2);
    env.sw(&clone, &["watch", "--interval", "soon"]).code(2);
    env.sw(&clone, &["board", "--log-limit", "0"]).code(2);
    env.sw(&clone, &["--json", "board", "--html", "-"]).code(2);
    // An empty swarm is a page too.
    let page = env.sw(&clone, &["board", "--html", "-"]).ok().stdout;
    assert!(page.contains("no tasks") && page.contains("no judge has spoken yet"));
    assert_self_contained(&page);
}

// ---------------------------------------------------------------------------------------------------------------
// The page in a real browser

/// A headless Chromium, if installed; skipped (or failed under `GIT_SWARM_REQUIRE_ALL=1`) when not.
fn browser_or_skip(test: &str) -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"].iter().find_map(|name| {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => Some(p),
        None if std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1") => {
            panic!("{test}: no chromium on the PATH and GIT_SWARM_REQUIRE_ALL=1 (apt-get install chromium)")
        }
        None => {
            println!(
                "{test}: skipped: chromium not installed (apt-get install chromium; GIT_SWARM_REQUIRE_ALL=1 fails instead)"
            );
            None
        }
    }
}

/// Run the browser headless on `page` with `args`, in a process group of its own that is killed after 90 s.
fn headless(env: &Env, browser: &Path, page: &Path, args: &[&str]) -> String {
    let profile = tempfile::tempdir_in(env.root.path()).expect("profile");
    let mut cmd = Command::new(browser);
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1"])
        .args(["--no-first-run", "--disable-extensions", "--disable-background-networking"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .env("HOME", &env.home)
        .stdin(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the browser");
    let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| common::finish(child, 90, "chromium")));
    // Whatever happened, no browser process outlives the test.
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let out = out.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert_eq!(out.code, 0, "chromium failed: {}", out.stderr);
    out.stdout
}

/// Pixels of each colour in an RGB(A) PNG, and how many are not white.
fn pixels(png_path: &Path) -> (std::collections::HashMap<[u8; 3], usize>, usize, usize) {
    let file = std::io::BufReader::new(std::fs::File::open(png_path).expect("png"));
    let mut dec = png::Decoder::new(file);
    dec.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = dec.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png frame");
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    let mut counts = std::collections::HashMap::new();
    let mut non_white = 0;
    for y in 0..info.height as usize {
        let row = &buf[y * info.line_size..][..info.width as usize * channels];
        for px in row.chunks(channels) {
            let rgb = [px[0], px[1], px[2]];
            non_white += usize::from(rgb != [255, 255, 255]);
            *counts.entry(rgb).or_insert(0) += 1;
        }
    }
    (counts, non_white, (info.width * info.height) as usize)
}

#[test]
fn the_page_renders_in_headless_chromium() {
    let Some(browser) = browser_or_skip("the_page_renders_in_headless_chromium") else { return };
    let fx = fixture(path_url);
    let page = fx.env.path("board.html");
    fx.env.sw(&fx.clone, &["board", "--html", page.to_str().expect("utf-8")]).ok();
    let html = std::fs::read_to_string(&page).expect("the page");

    // The DOM the browser built: every section, a node per task coloured by its status, the escaped title as text.
    let dom = headless(&fx.env, &browser, &page, &["--dump-dom"]);
    for section in ["summary", "holders", "failures", "plan", "graph", "timeline", "throughput"] {
        assert!(dom.contains(&format!("<section id=\"{section}\">")), "section {section} in the DOM");
    }
    assert_eq!(dom.matches("<g class=\"node\"").count(), 7, "a node per task");
    assert!(!dom.contains("<script>alert"), "the hostile title stayed text");
    assert!(dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));

    // The picture: not blank, and the colour of each status on the board is there; the absent one is not.
    let shot = fx.env.path("board.png");
    let started = Instant::now();
    headless(&fx.env, &browser, &page, &[&format!("--screenshot={}", shot.display()), "--window-size=1200,2000"]);
    println!("chromium screenshot took {:?}", started.elapsed());
    let (counts, non_white, total) = pixels(&shot);
    assert!(total >= 1200 * 1900, "screenshot size");
    assert!(non_white * 50 > total, "the page is not blank ({non_white} of {total} pixels drawn)");
    let near = |c: [u8; 3]| -> usize {
        counts.iter().filter(|(k, _)| k.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= 2)).map(|(_, n)| *n).sum()
    };
    for st in ["open", "claimed", "done", "failed"] {
        let n = near(colour(&html, st));
        println!("{st}: {n} pixels");
        assert!(n > 200, "the colour of {st} is on the picture ({n} pixels)");
    }
    assert_eq!(near(colour(&html, "cancelled")), 0, "no task is cancelled: its colour must not appear");
}

/// What a held task's runner does now, on the page: its phase, how long its agent has run against its time limit,
/// and the last line it printed — from this clone's runner, beside what the ref knows (issue 35). Read in
/// headless Chromium; then the phase moves to the check, and a runner that is gone shows only what the ref knows.
#[test]
fn a_held_tasks_phase_time_and_last_line_show_on_the_page() {
    let test = "a_held_tasks_phase_time_and_last_line_show_on_the_page";
    let Some(browser) = browser_or_skip(test) else { return };
    let env = Env::new();
    let config = format!("[run]\ntask_timeout = \"30m\"\n[roles.worker]\nexec = {:?}\n", common::scripted_agent());
    let (bare, clones) = env.swarm_with_config(path_url, 1, &config);
    let c = &clones[0];
    let (go, checked) = (env.path("go"), env.path("checked"));
    let body = format!("@say working on step 3 <b>of 5\n@write w.txt w\n@wait-for {}", go.display());
    let id = env.sw(c, &["add", "a task to watch", "--body", &body]).ok().line();
    let check = format!("while [ ! -e '{}' ]; do sleep 0.1; done", checked.display());
    let worker = env.spawn(c, "watched-w1", &[], &["run", "worker", "--once", "--check", &check]);
    let holder = |env: &Env| -> serde_json::Value {
        let v = env.sw(c, &["board", "--json"]).ok().json();
        v["holders"].as_array().and_then(|h| h.iter().find(|x| x["task"] == id.as_str()).cloned()).unwrap_or_default()
    };
    common::wait_until(60, "the agent says its line", || {
        holder(&env)["run"]["last_line"].as_str().is_some_and(|l| l.contains("working on step 3"))
    });
    let h = holder(&env);
    assert_eq!((h["run"]["phase"].as_str(), h["run"]["timeout_secs"].as_u64()), (Some("agent"), Some(1800)), "{h}");
    assert_eq!(h["fleet"], "watched", "{h}");

    // The page, as a browser builds it.
    let page = env.path("board.html");
    env.sw(c, &["board", "--html", page.to_str().expect("utf-8")]).ok();
    let dom = headless(&env, &browser, &page, &["--dump-dom"]);
    let row = dom
        .split("<tr class=\"holder\"")
        .find(|r| r.contains(&format!("data-task=\"{id}\"")))
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row of {id} in the DOM:\n{dom}"));
    assert!(row.contains("data-phase=\"agent\""), "{row}");
    assert!(row.contains(" of 30 min</td>") && row.contains("data-limit=\"1800\""), "the time limit: {row}");
    assert!(row.contains("working on step 3 &lt;b&gt;of 5"), "the last line, as text: {row}");
    assert!(!dom.contains("<b>of 5"), "the agent's output made no markup");

    // The agent is done: the check runs.
    std::fs::write(&go, "").expect("go");
    common::wait_until(60, "the check runs", || holder(&env)["run"]["phase"] == "check");
    let h = holder(&env);
    assert!(h["run"]["last_line"].is_null(), "no agent runs in the check: {h}");
    std::fs::write(&checked, "").expect("checked");
    let out = common::finish(worker, 60, "the worker");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(env.git(&bare, &["show", "main:w.txt"]), "w");
    assert!(env.sw(c, &["board", "--json"]).ok().json()["holders"].as_array().is_some_and(Vec::is_empty));

    // A runner that is gone (killed, it could not clear its phase): only what the ref knows.
    let body = format!("@say stuck\n@wait-for {}", env.path("never").display());
    let stuck = env.sw(c, &["add", "a task whose runner dies", "--body", &body]).ok().line();
    let mut worker = Some(env.spawn(c, "watched-w2", &[], &["run", "worker", "--once"]));
    common::wait_until(60, "the second agent runs", || {
        let v = env.sw(c, &["board", "--json"]).ok().json();
        v["holders"]
            .as_array()
            .is_some_and(|h| h.iter().any(|x| x["task"] == stuck.as_str() && x["run"]["phase"] == "agent"))
    });
    common::kill(&mut worker);
    let v = env.sw(c, &["board", "--json"]).ok().json();
    let h = v["holders"]
        .as_array()
        .and_then(|h| h.iter().find(|x| x["task"] == stuck.as_str()).cloned())
        .unwrap_or_default();
    assert!(h["agent"] == "watched-w2" && h["run"].is_null(), "{h}");
}

// ---------------------------------------------------------------------------------------------------------------
// The live board: `board --serve`

/// A title that would run script if it ever became markup (CSP aside: escaping alone must stop it).
const HOSTILE_IMG: &str = "<img src=x onerror=\"window.__xss=1\"> <b>bold</b>";

/// `git swarm --json board --serve --port 0` in `dir`: the server, its port and its URL (from the JSON document it
/// prints when it listens).
struct Serving {
    c: Collected,
    port: u16,
    url: String,
}

fn serve(env: &Env, dir: &Path, extra: &[&str]) -> Serving {
    let mut cmd = env.cmd(dir);
    cmd.args(["--json", "board", "--serve", "--port", "0"]).args(extra);
    let mut c = Collected::start(cmd);
    c.wait_for("\n}", Duration::from_secs(30));
    let doc: serde_json::Value = serde_json::from_str(c.text().trim()).expect("one JSON document at start");
    let port = u16::try_from(doc["port"].as_u64().expect("port")).expect("a port");
    let url = doc["url"].as_str().expect("url").to_string();
    assert_eq!(url, format!("http://127.0.0.1:{port}/"));
    let said = format!("serving the board of default at {url}");
    let start = Instant::now();
    while !c.err().contains(&said) {
        assert!(start.elapsed() < Duration::from_secs(10), "stderr says where: {}", c.err());
        std::thread::sleep(Duration::from_millis(10));
    }
    Serving { c, port, url }
}

/// One raw HTTP/1.1 exchange with the server: status, head, body.
fn http(port: u16, request: &str) -> (u16, String, String) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, head.to_string(), body.to_string())
}

/// `GET path` with these extra header lines (each ending in `\r\n`), Host `127.0.0.1:<port>` unless they name one.
fn get(port: u16, path: &str, headers: &str) -> (u16, String, String) {
    let host = if headers.to_ascii_lowercase().contains("host:") {
        String::new()
    } else {
        format!("Host: 127.0.0.1:{port}\r\n")
    };
    http(port, &format!("GET {path} HTTP/1.1\r\n{host}{headers}Connection: close\r\n\r\n"))
}

/// A swarm for the live board: the fixture of the file page, a task with a title that would run script, and a
/// task landed by a runner whose agent wrote markup and a secret into its hand-off note; the id of that task.
fn live_fixture() -> (Fixture, String) {
    let fx = fixture(path_url);
    let sw = |args: &[&str]| fx.env.sw(&fx.clone, args).ok().line();
    sw(&["--agent", "planner", "add", HOSTILE_IMG]);
    let noted = sw(&["--agent", "planner", "add", "N gets a hand-off note", "--priority", "9"]);
    sw(&["config", "set", "roles.worker.env", "[\"MYSQL_PWD\"]"]);
    let exec = "echo n > n.txt; printf 'Did N <img src=x onerror=\"window.__xss=2\"> & more.\\nThe password was %s.\\n' \
                \"$MYSQL_PWD\" > \"$GIT_SWARM_HANDOFF_FILE\"";
    let out = fx.env.sw_env(
        &fx.clone,
        &[("MYSQL_PWD", "my-sql-pw-8f3k2")],
        &["--agent", "w5", "run", "worker", "--once", "--exec", exec],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let shown = fx.env.sw(&fx.clone, &["--json", "show", &noted]).ok().json();
    assert_eq!(shown["status"], "done", "the runner landed N: {shown}");
    assert!(shown["handoff"].as_str().is_some_and(|h| h.contains("[redacted]")), "{shown}");
    (fx, noted)
}

#[test]
fn the_live_server_answers_only_what_it_should() {
    let (fx, noted) = live_fixture();
    let mut s = serve(&fx.env, &fx.clone, &[]);
    let port = s.port;
    // The page: the board's sections, escaped, with the policy that allows only its own script.
    let (code, head, page) = get(port, "/", "");
    assert_eq!(code, 200, "{head}");
    let csp = head.lines().find(|l| l.starts_with("Content-Security-Policy: ")).expect("a CSP");
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self';"), "{csp}");
    let directive = |name: &str| csp.split(';').map(str::trim).find(|d| d.split(' ').next() == Some(name));
    assert_eq!(directive("script-src"), Some("script-src 'self'"), "only the page's own script file: {csp}");
    assert_eq!(directive("style-src"), Some("style-src 'self'"), "no inline style element: {csp}");
    assert!(head.contains("X-Content-Type-Options: nosniff") && !head.to_ascii_lowercase().contains("access-control"));
    assert!(page.contains("&lt;img src=x onerror=&quot;window.__xss=1&quot;&gt;") && !page.contains("<img"), "{page}");
    assert!(page.contains("A &lt;script&gt;alert(1)&lt;/script&gt;") && !page.contains("<script>alert"));
    assert_eq!(page.matches("<script").count(), 1, "one script: the page's own file");
    assert!(page.contains("<script src=\"/app.js\" defer></script>"));
    for section in ["summary", "holders", "failures", "spend", "latest", "graph", "timeline", "throughput", "plan"] {
        assert!(page.contains(&format!("id=\"s-{section}\"")), "section {section}");
    }
    for file in ["/app.js", "/app.css"] {
        let (code, head, body) = get(port, file, "");
        assert!(code == 200 && !body.is_empty(), "{file}: {head}");
    }
    // DNS rebinding: a Host that is a name other than localhost is refused, an IP literal or localhost is not.
    assert_eq!(get(port, "/", "Host: evil.example\r\n").0, 403);
    assert_eq!(get(port, "/frame", &format!("Host: rebind.example:{port}\r\n")).0, 403);
    assert_eq!(get(port, "/", &format!("Host: localhost:{port}\r\n")).0, 200);
    assert_eq!(http(port, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n").0, 400, "no Host at all");
    // No other origin, nothing that writes, no body, nothing long.
    assert_eq!(get(port, "/frame", "Origin: http://evil.example\r\n").0, 403);
    assert_eq!(get(port, "/frame", &format!("Origin: http://127.0.0.1:{port}\r\n")).0, 200);
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        let (code, head, _) =
            http(port, &format!("{method} / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"));
        assert_eq!(code, 405, "{method}: {head}");
        assert!(head.contains("Allow: GET, HEAD"), "{head}");
    }
    let body = http(
        port,
        &format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"),
    );
    assert_eq!(body.0, 413);
    assert_eq!(get(port, &format!("/{}", "a".repeat(3000)), "").0, 414);
    let many: String = (0..80).map(|i| format!("X-H{i}: 1\r\n")).collect();
    assert_eq!(get(port, "/", &many).0, 431);
    assert_eq!(get(port, "/nothing-here", "").0, 404);
    // The frame a polling page reads, with an ETag.
    let (code, head, frame) = get(port, "/frame", "");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&frame).expect("the frame is JSON");
    assert!(v["sections"]["holders"].as_str().is_some_and(|h| h.contains("data-agent=\"w3\"")), "{v}");
    let etag = head.lines().find_map(|l| l.strip_prefix("ETag: ")).expect("an ETag").to_string();
    assert_eq!(get(port, "/frame", &format!("If-None-Match: {etag}\r\n")).0, 304);
    // A task and its hand-off note: as JSON text, scrubbed; ids only, and only of the board.
    let (code, _, note) = get(port, &format!("/note/{noted}"), "");
    assert_eq!(code, 200, "{note}");
    let n: serde_json::Value = serde_json::from_str(&note).expect("JSON");
    assert_eq!(n["status"], "done");
    let text = n["note"].as_str().expect("a note");
    assert!(text.contains("Did N <img src=x") && text.contains("[redacted]") && !text.contains("my-sql-pw"), "{text}");
    assert_eq!(get(port, "/note/..%2F..%2Fetc%2Fpasswd", "").0, 400);
    assert_eq!(get(port, "/note/t-ffffff", "").0, 404);
    let (_, _, f) = get(port, &format!("/note/{}", fx.ids["F"]), "");
    assert!(serde_json::from_str::<serde_json::Value>(&f).expect("JSON")["note"].is_null(), "no note: null");
    // Server-sent events: the state at once, then a new one when another clone changes the ref.
    let mut events = events_show_a_claim(&fx, path_url, port);
    // Ctrl-C: the stream ends and the server exits 0.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(s.c.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = s.c.child.try_wait().expect("wait") {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "the server did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("the server stopped {:?} after Ctrl-C", start.elapsed());
    assert_eq!(status.code(), Some(0), "Ctrl-C ends it cleanly: {}", s.c.err());
    let mut rest = Vec::new();
    let _ = events.read_to_end(&mut rest);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "nothing listens any more");
    let _ = s.url;
}

/// Open `/events` on the server at `port`, have another clone (reaching the remote by `url_of`) file and claim a
/// task, and read the stream until an event shows that claim (within 10 s); the stream, still open.
fn events_show_a_claim(fx: &Fixture, url_of: fn(&Path) -> String, port: u16) -> std::net::TcpStream {
    let other = fx.env.clone(&url_of(&fx.bare), "c1");
    let mut events = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    events.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    std::io::Write::write_all(
        &mut events,
        format!("GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .expect("send");
    let mut seen = String::new();
    let mut read_until = |what: &str, seen: &mut String| {
        let mut buf = [0u8; 65536];
        while !seen.contains(what) {
            let n = events.read(&mut buf).unwrap_or_else(|e| panic!("no {what:?} in the stream: {e}\n{seen}"));
            assert!(n > 0, "the stream ended before {what:?}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    read_until("id: ", &mut seen);
    assert!(seen.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream"), "{seen}");
    read_until("\n\n", &mut seen);
    let task = fx.env.sw(&other, &["--agent", "w9", "add", "from the other clone"]).ok().line();
    let claimed = Instant::now();
    fx.env.sw(&other, &["--agent", "w9", "claim", &task]).ok();
    let after = claimed.elapsed();
    read_until(&format!("data-agent=\\\"w9\\\" data-task=\\\"{task}\\\""), &mut seen);
    let latency = claimed.elapsed() - after;
    println!("an event with another clone's claim came {latency:?} after its claim exited");
    assert!(latency < Duration::from_secs(2), "{latency:?}");
    assert!(seen.contains("event: board\nid: "), "{seen}");
    events
}

#[test]
fn the_live_server_fetches_a_url_remote_every_interval() {
    let fx = fixture(file_url);
    let s = serve(&fx.env, &fx.clone, &["--interval", "300ms"]);
    drop(events_show_a_claim(&fx, file_url, s.port));
}

/// `Loaded::advance`, which the live board reads each new state with (the log since its last state, not the whole
/// of it again), holds what a fresh read holds: the same ops, cut at the same limit — after a few ops, after more
#[test]
fn a_port_in_use_is_refused_naming_it() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let clone = env.clone(&path_url(&bare), "c0");
    env.sw(&clone, &["init"]).ok();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let out = env.sw(&clone, &["board", "--serve", "--port", &port.to_string()]).code(1);
    assert!(out.stderr.contains(&format!("port {port} of 127.0.0.1 is in use")), "{}", out.stderr);
    assert!(out.stderr.contains("--port 0"), "the way out: {}", out.stderr);
    // The flags of --serve go with it, and it is not --html.
    env.sw(&clone, &["board", "--port", "1"]).code(2);
    env.sw(&clone, &["board", "--serve", "--html", "-"]).code(2);
    env.sw(&clone, &["board", "--serve", "--interval", "1ms"]).code(2);
    env.sw(&clone, &["board", "--serve", "--bind", "localhost.example"]).code(2);
}

/// The live page in headless Chromium, driven over its DevTools protocol (a WebSocket; [`Cdp`]).
#[test]
fn the_live_page_shows_another_clones_claim_without_a_reload() {
    let Some(browser) = browser_or_skip("the_live_page_shows_another_clones_claim_without_a_reload") else { return };
    let (fx, noted) = live_fixture();
    let s = serve(&fx.env, &fx.clone, &[]);
    let mut b = Browser::start(&fx.env, &browser);
    // In a zone of its own, to show that times are the viewer's.
    b.cdp.call("Emulation.setTimezoneOverride", serde_json::json!({"timezoneId": "Asia/Tokyo"}));
    b.cdp.call("Page.navigate", serde_json::json!({"url": s.url}));
    b.wait(
        "the page is live",
        "document.readyState === 'complete' && document.getElementById('conn').dataset.state === 'live'",
    );
    let text = |b: &mut Browser, js: &str| b.cdp.eval(js).as_str().unwrap_or_default().to_string();
    // Escaped: the hostile titles are text, no element came of them, no script of theirs ran.
    assert_eq!(b.cdp.eval("document.querySelectorAll('img').length"), 0);
    assert_eq!(b.cdp.eval("document.scripts.length"), 1);
    assert_eq!(b.cdp.eval("window.__xss === undefined"), true);
    let body = text(&mut b, "document.body.innerText");
    assert!(body.contains(HOSTILE_IMG) && body.contains("A <script>alert(1)</script>"), "{body}");
    // Times: relative, and in the viewer's zone on hover.
    assert_eq!(text(&mut b, "document.getElementById('zone').textContent"), "Asia/Tokyo");
    let held = text(
        &mut b,
        &format!("document.querySelector('tr.holder[data-task=\"{}\"] td:nth-child(3) time').textContent", fx.ids["C"]),
    );
    assert!(held.starts_with("for "), "held for: {held:?}");
    let (utc, local) = {
        let t = b.cdp.eval("(() => { const t = document.querySelector('#s-latest time'); return [t.getAttribute('datetime'), t.title, t.textContent]; })()");
        println!("a time of the latest ops: {t}");
        assert!(t[2].as_str().is_some_and(|s| s.ends_with(" ago") || s == "now"), "relative: {t}");
        (t[0].as_str().expect("datetime").to_string(), t[1].as_str().expect("title").to_string())
    };
    let at = git_swarm_core::time::Timestamp::parse(&utc).expect("a UTC time");
    let tokyo = (at.secs() + 9 * 3600) % 86_400;
    let (h, m, sec) = (tokyo / 3600, tokyo / 60 % 60, tokyo % 60);
    let clock = format!("{}:{m:02}:{sec:02}", if h % 12 == 0 { 12 } else { h % 12 });
    assert!(local.contains(&clock), "{utc} in Asia/Tokyo is {clock}: {local:?}");

    // The hand-off note on click: text, scrubbed.
    b.cdp.eval(&format!("document.querySelector('li[id=\"task-{noted}\"] .id').click()"));
    b.wait(
        "the note is shown",
        "!document.getElementById('note').hidden && document.getElementById('note-text').textContent.includes('Did N')",
    );
    let note = text(&mut b, "document.getElementById('note-text').textContent");
    assert!(
        note.contains("Did N <img src=x onerror=\"window.__xss=2\"> & more.") && note.contains("[redacted]"),
        "{note}"
    );
    assert!(!note.contains("my-sql-pw"));
    assert_eq!(b.cdp.eval("document.querySelectorAll('#note img').length"), 0);
    assert!(text(&mut b, "document.getElementById('note-title').textContent").contains("N gets a hand-off note"));
    b.cdp.eval("document.getElementById('note-close').click()");
    assert_eq!(b.cdp.eval("document.getElementById('note').hidden"), true);

    // Another clone files a task and claims it: the page shows the claim within 2 s, without a reload.
    let other = fx.env.clone(&path_url(&fx.bare), "c1");
    let task = fx.env.sw(&other, &["--agent", "w9", "add", "claimed from the other clone"]).ok().line();
    b.wait("the new task is shown", &format!("!!document.getElementById('task-{task}')"));
    b.cdp.eval(&format!(
        "window.__marker = 'the same page'; window.__seen = null; new MutationObserver(() => {{ \
           if (!window.__seen && document.querySelector('tr.holder[data-agent=\"w9\"][data-task=\"{task}\"]')) \
             window.__seen = Date.now(); }}).observe(document.body, {{subtree: true, childList: true}}); true"
    ));
    let seq_before = b.cdp.eval("Number(document.body.dataset.seq)").as_u64().expect("seq");
    let epoch_ms =
        || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
    let start = epoch_ms();
    fx.env.sw(&other, &["--agent", "w9", "claim", &task]).ok();
    let exited = epoch_ms();
    let deadline = Instant::now() + Duration::from_secs(2);
    let seen = loop {
        if let Some(t) = b.cdp.eval("window.__seen").as_u64() {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the page did not show the claim within 2 s of it: {}",
            text(&mut b, "document.getElementById('s-holders').innerText")
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    println!(
        "the page showed another clone's claim {} ms after the claim exited ({} ms after it started; the claim took {} ms)",
        seen.saturating_sub(exited),
        seen.saturating_sub(start),
        exited - start
    );
    assert!(seen.saturating_sub(exited) <= 2_000, "{} ms", seen.saturating_sub(exited));
    assert_eq!(b.cdp.eval("window.__marker"), "the same page", "no reload");
    assert!(b.cdp.eval("Number(document.body.dataset.seq)").as_u64().expect("seq") > seq_before);
    let row = text(&mut b, &format!("document.querySelector('tr.holder[data-task=\"{task}\"]').innerText"));
    // "held for …": the claim's time comes from the log, read since the last state.
    assert!(row.contains("w9") && row.contains("claimed from the other clone"), "{row}");
    assert!(row.contains("for ") && row.contains("ends in "), "{row}");
    assert_eq!(b.cdp.eval(&format!("document.querySelector('#node-{task}').dataset.status")), "claimed");

    // Wide and narrow: a picture that is not blank, and on a phone nothing wider than the screen.
    let shot = b.screenshot(&fx.env.path("live.png"), 1200, 1800, false);
    let (_, non_white, total) = pixels(&shot);
    assert!(non_white * 20 > total, "the page is not blank ({non_white} of {total} pixels drawn)");
    let phone = b.screenshot(&fx.env.path("live-phone.png"), 390, 844, true);
    assert_eq!(
        b.cdp.eval("document.documentElement.scrollWidth <= window.innerWidth"),
        true,
        "the page fits a phone's width"
    );
    if let Ok(dir) = std::env::var("GIT_SWARM_SCREENSHOTS") {
        std::fs::copy(&shot, Path::new(&dir).join("board-live.png")).expect("copy the screenshot");
        std::fs::copy(&phone, Path::new(&dir).join("board-live-phone.png")).expect("copy the screenshot");
    }
}

/// A headless Chromium with remote debugging on a free port, in a process group of its own (killed on drop), and
/// a DevTools session attached to one page.
struct Browser {
    child: Child,
    cdp: Cdp,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(env: &Env, browser: &Path) -> Browser {
        let profile = tempfile::tempdir_in(env.root.path()).expect("profile");
        let mut cmd = Command::new(browser);
        cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--lang=en-US"])
            .args(["--no-first-run", "--disable-extensions", "--disable-background-networking"])
            .arg("--remote-debugging-port=0")
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .env("HOME", &env.home)
            .env("LANG", "en_US.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().expect("start the browser");
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let ws = loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("chromium says where DevTools listen");
            if let Some(url) = line.strip_prefix("DevTools listening on ") {
                break url.trim().to_string();
            }
        };
        let mut cdp = Cdp { ws: Ws::connect(&ws), next: 0, session: None };
        let target = cdp.call("Target.createTarget", serde_json::json!({"url": "about:blank"}))["targetId"].clone();
        let session = cdp.call("Target.attachToTarget", serde_json::json!({"targetId": target, "flatten": true}));
        cdp.session = Some(session["sessionId"].as_str().expect("a session").to_string());
        Browser { child, cdp, _profile: profile }
    }

    /// Wait (at most 10 s) until `js` is true in the page.
    fn wait(&mut self, what: &str, js: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cdp.eval(js) != true {
            assert!(Instant::now() < deadline, "{what}: not within 10 s ({js})");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// A PNG of the page at this size (a phone's when `mobile`), written to `path`.
    fn screenshot(&mut self, path: &Path, width: u32, height: u32, mobile: bool) -> PathBuf {
        let metrics = serde_json::json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile});
        self.cdp.call("Emulation.setDeviceMetricsOverride", metrics);
        std::thread::sleep(Duration::from_millis(300));
        let shot = self.cdp.call("Page.captureScreenshot", serde_json::json!({"format": "png"}));
        std::fs::write(path, base64(shot["data"].as_str().expect("image data"))).expect("write the screenshot");
        path.to_path_buf()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Standard base64 decoded.
fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = s.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()).map(val).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, d)| n | (u32::from(*d) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// The DevTools protocol over [`Ws`]: a call waits for its answer (events in between are skipped).
struct Cdp {
    ws: Ws,
    next: u64,
    session: Option<String>,
}

impl Cdp {
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.next += 1;
        let mut msg = serde_json::json!({"id": self.next, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = serde_json::json!(s);
        }
        self.ws.send(&msg.to_string());
        loop {
            let v: serde_json::Value = serde_json::from_str(&self.ws.recv()).expect("DevTools send JSON");
            if v["id"] == self.next {
                assert!(v["error"].is_null(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// The value of `js` in the page (promises awaited).
    fn eval(&mut self, js: &str) -> serde_json::Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r["exceptionDetails"].is_null(), "{js}: {r}");
        r["result"]["value"].clone()
    }
}

/// A WebSocket client, just enough for DevTools (RFC 6455: text frames, masked from the client; pings answered).
struct Ws {
    s: std::net::TcpStream,
}

impl Ws {
    fn connect(url: &str) -> Ws {
        use std::io::Write;
        let rest = url.strip_prefix("ws://").expect("a ws:// URL");
        let (host, path) = rest.split_at(rest.find('/').expect("a path"));
        let mut s = std::net::TcpStream::connect(host).expect("connect to DevTools");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        s.write_all(req.as_bytes()).expect("handshake");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).expect("handshake answer");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        Ws { s }
    }

    fn frame(&mut self, opcode: u8, payload: &[u8]) {
        use std::io::Write;
        let mut f = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n < 65_536 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mask = [0x37u8, 0xfa, 0x21, 0x3d];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.s.write_all(&f).expect("send a frame");
    }

    fn send(&mut self, text: &str) {
        self.frame(0x1, text.as_bytes());
    }

    /// The next text message (fragments joined).
    fn recv(&mut self) -> String {
        let mut msg = Vec::new();
        loop {
            let mut h = [0u8; 2];
            self.s.read_exact(&mut h).expect("a frame from DevTools");
            let (fin, opcode) = (h[0] & 0x80 != 0, h[0] & 0x0f);
            let len = match h[1] & 0x7f {
                126 => {
                    let mut b = [0u8; 2];
                    self.s.read_exact(&mut b).expect("length");
                    u64::from(u16::from_be_bytes(b))
                }
                127 => {
                    let mut b = [0u8; 8];
                    self.s.read_exact(&mut b).expect("length");
                    u64::from_be_bytes(b)
                }
                n => u64::from(n),
            };
            let mut payload = vec![0u8; usize::try_from(len).expect("length")];
            self.s.read_exact(&mut payload).expect("payload");
            match opcode {
                0x9 => self.frame(0xA, &payload),
                0x8 => panic!("DevTools closed the connection"),
                0xA => {}
                _ => {
                    msg.extend_from_slice(&payload);
                    if fin {
                        return String::from_utf8_lossy(&msg).into_owned();
                    }
                }
            }
        }
    }
}
