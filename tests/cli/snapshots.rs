//! The human output of the read commands and of the errors a user meets first, as snapshots (`insta`): a change of
//! wording, order or layout shows up in review as a diff of `tests/snapshots/`, not as a surprise to a user.
//! What varies from run to run is replaced: task ids and commit ids by stable names in the order they first appear
//! (`t-1`, `c-1` …), so that the snapshot keeps which is which, and every time by `<time>` (whether two ops fell in
//! the same second is luck, so times are not numbered).
//! Update them with `cargo insta review` (or `INSTA_UPDATE=always cargo nextest run --test snapshots`).

use std::collections::HashMap;

use crate::common::{Env, Out, file_url};

/// Names for what varies, each kind numbered in the order of first appearance.
#[derive(Default)]
struct Stable {
    seen: HashMap<String, String>,
    counts: HashMap<&'static str, usize>,
}

impl Stable {
    fn name(&mut self, kind: &'static str, raw: &str) -> String {
        if let Some(n) = self.seen.get(raw) {
            return n.clone();
        }
        let c = self.counts.entry(kind).or_default();
        *c += 1;
        let n = format!("{kind}-{c}");
        self.seen.insert(raw.to_string(), n.clone());
        n
    }

    /// `text` with every task id, commit id (12 or 40 hex digits, letters or not) and time replaced.
    fn text(&mut self, text: &str) -> String {
        let b = text.as_bytes();
        let (mut out, mut i) = (String::new(), 0);
        let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
        let word_edge = |j: usize| j >= b.len() || !b[j].is_ascii_alphanumeric();
        while i < b.len() {
            let at_edge = i == 0 || !b[i - 1].is_ascii_alphanumeric();
            // t-xxxxxx
            if at_edge
                && b[i..].starts_with(b"t-")
                && b.len() >= i + 8
                && b[i + 2..i + 8].iter().all(|c| hex(*c))
                && word_edge(i + 8)
            {
                out.push_str(&self.name("t", &text[i..i + 8]));
                i += 8;
                continue;
            }
            // 2026-12-02T01:46:12(.063)Z
            if at_edge
                && b.len() >= i + 20
                && b[i + 4] == b'-'
                && b[i + 10] == b'T'
                && b[i..i + 4].iter().all(u8::is_ascii_digit)
            {
                let mut j = i + 19;
                while j < b.len() && (b[j] == b'.' || b[j].is_ascii_digit()) {
                    j += 1;
                }
                if j < b.len() && b[j] == b'Z' {
                    out.push_str("<time>");
                    i = j + 1;
                    continue;
                }
            }
            // 01:56:13 (a time of day alone)
            if at_edge
                && b.len() >= i + 8
                && b[i + 2] == b':'
                && b[i + 5] == b':'
                && [0, 1, 3, 4, 6, 7].iter().all(|k| b[i + k].is_ascii_digit())
                && word_edge(i + 8)
            {
                out.push_str("<time>");
                i += 8;
                continue;
            }
            // commit ids: 40 or 12 hex digits
            if at_edge {
                let n = b[i..].iter().take_while(|c| hex(**c)).count();
                if (n == 40 || n == 12) && word_edge(i + n) {
                    out.push_str(&self.name("c", &text[i..i + 12]));
                    i += n;
                    continue;
                }
            }
            let ch = text[i..].chars().next().expect("a char");
            out.push(ch);
            i += ch.len_utf8();
        }
        out
    }

    fn out(&mut self, env: &Env, o: &Out) -> String {
        let root = env.path("");
        let root = root.to_string_lossy();
        let place = |t: &str| t.replace(root.trim_end_matches('/'), "<root>");
        format!(
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            o.code,
            self.text(&place(&o.stdout)),
            self.text(&place(&o.stderr))
        )
    }
}

/// A swarm with a small board in every state: done, claimed, failed, open waiting on another, ready.
fn board() -> (Env, std::path::PathBuf, Stable, Vec<String>) {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let c = Env::clone(&env, &file_url(&bare), "c");
    env.sw(&c, &["--agent", "planner", "init"]).ok();
    let add = |args: &[&str]| env.sw(&c, &[&["--agent", "planner", "add"], args].concat()).ok().line();
    let a = add(&["Write the parser", "--body", "Parse the input file.", "--acceptance", "cargo test passes"]);
    let b = add(&["Wire the CLI", "--after", &a, "--priority", "2"]);
    let d = add(&["Document it", "--label", "docs"]);
    let e = add(&["Flaky step"]);
    env.sw(&c, &["--agent", "w1", "claim", &a]).ok();
    env.sw(&c, &["--agent", "w1", "done", &a, "--note", "parser in src/parse.rs"]).ok();
    env.sw(&c, &["--agent", "w2", "claim", &d]).ok();
    env.sw(&c, &["--agent", "w3", "claim", &e]).ok();
    env.sw(&c, &["--agent", "w3", "fail", &e, "--reason", "the network was down"]).ok();
    let mut s = Stable::default();
    // Number the ids in the order they were added, whatever order a command prints them in.
    for id in [&a, &b, &d, &e] {
        s.name("t", id);
    }
    (env, c, s, vec![a, b, d, e])
}

#[test]
fn read_commands() {
    let (env, c, mut s, ids) = board();
    insta::assert_snapshot!("list", s.out(&env, &env.sw(&c, &["list"])));
    insta::assert_snapshot!("show_done", s.out(&env, &env.sw(&c, &["show", &ids[0]])));
    insta::assert_snapshot!("show_waiting", s.out(&env, &env.sw(&c, &["show", &ids[1]])));
    insta::assert_snapshot!("status", s.out(&env, &env.sw(&c, &["status"])));
    insta::assert_snapshot!("ready", s.out(&env, &env.sw(&c, &["ready"])));
}

#[test]
fn first_errors() {
    let (env, c, mut s, ids) = board();
    insta::assert_snapshot!("claim_unknown", s.out(&env, &env.sw(&c, &["--agent", "w9", "claim", "t-000000"])));
    insta::assert_snapshot!("done_not_mine", s.out(&env, &env.sw(&c, &["--agent", "w9", "done", &ids[2]])));
    insta::assert_snapshot!("claim_bad_id", s.out(&env, &env.sw(&c, &["--agent", "w9", "claim", "not-an-id"])));
    insta::assert_snapshot!("bad_agent", s.out(&env, &env.sw(&c, &["--agent", "bad agent!", "list"])));
    let elsewhere = env.path("plain");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    insta::assert_snapshot!("not_a_repository", s.out(&env, &env.sw(&elsewhere, &["list"])));
}
