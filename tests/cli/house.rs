//! The house rules that the compiler does not check. A `pub` function, constant or static of the library is one
//! that something outside it names — the CLI (`src/cli`, `src/main.rs`), the tests or the examples; everything
//! else is `pub(crate)`, so that a reader knows what the library offers and the compiler finds what nothing uses
//! (docs/invariants.md, invariant 33). Types are left to the compiler: one that a public item's signature names
//! must be `pub` (`private_interfaces`), whoever names it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The name of the function, constant or static a line declares `pub` (not `pub(crate)`, not a type, a field or a
/// re-export).
fn pub_item(line: &str) -> Option<&str> {
    let mut rest = line.trim_start().strip_prefix("pub ")?;
    for q in ["const ", "async ", "unsafe "] {
        if let Some(r) = rest.strip_prefix(q)
            && r.starts_with("fn ")
        {
            rest = r;
        }
    }
    let rest = ["fn ", "const ", "static "].iter().find_map(|k| rest.strip_prefix(k))?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// `text` without its comments (`//` to the end of the line, and `/* … */`), string literals kept: a name in a
/// comment is no use of it.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        match (in_str, b[i], b.get(i + 1)) {
            (false, b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            (false, b'/', Some(b'*')) => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    // Its lines stay, empty: what follows keeps its line number.
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
                i += 2;
                continue;
            }
            (false, b'"', _) => in_str = true,
            (true, b'\\', _) => {
                out.push(b[i] as char);
                i += 1;
            }
            (true, b'"', _) => in_str = false,
            _ => {}
        }
        if let Some(c) = b.get(i) {
            out.push(*c as char);
        }
        i += 1;
    }
    out
}

/// The engine's `pub` functions, constants and statics are its API: each is named by code outside it — the binary,
/// the tests, the examples — not by a comment. Whether a `pub` item can be reached from outside at all is the
/// compiler's (`unreachable_pub`, on in both crates); whether anything outside names it is this test's. (The binary
/// is a crate of its own with no library: there the compiler finds what nothing uses.)
#[test]
fn every_pub_function_and_constant_of_the_engine_is_used_outside_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let core = Path::new("crates/git-swarm-core/src");
    let mut files = Vec::new();
    for dir in
        ["src", "tests", "crates/git-swarm-core/src", "crates/git-swarm-core/tests", "crates/git-swarm-core/examples"]
    {
        rust_files(&root.join(dir), &mut files);
    }
    let outside = |p: &Path| !p.strip_prefix(root).unwrap_or(p).starts_with(core);
    let mut words = HashSet::new();
    for f in files.iter().filter(|f| outside(f)) {
        let text = code_of(&std::fs::read_to_string(f).expect("read a source file"));
        words.extend(text.split(|c: char| !(c.is_alphanumeric() || c == '_')).map(str::to_string));
    }
    let mut unused = Vec::new();
    for f in files.iter().filter(|f| !outside(f)) {
        let text = std::fs::read_to_string(f).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            if let Some(name) = pub_item(line)
                && !words.contains(name)
            {
                unused.push(format!("{}:{}: {name}", f.strip_prefix(root).unwrap_or(f).display(), n + 1));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "pub, but nothing outside the engine names them (make them pub(crate)):\n{}",
        unused.join("\n")
    );
}

#[test]
fn a_name_in_a_comment_is_no_use_of_it() {
    let code = code_of("let a = 1; // uses_b\n/* uses_c */ let d = \"// kept\";\n");
    assert!(!code.contains("uses_b") && !code.contains("uses_c"), "{code}");
    assert!(code.contains("let d = \"// kept\";"), "{code}");
}

#[test]
fn the_scan_sees_what_it_should() {
    assert_eq!(pub_item("    pub fn read(&self)"), Some("read"));
    assert_eq!(pub_item("pub const fn ceil(x: u64)"), Some("ceil"));
    assert_eq!(pub_item("pub const MAX: usize = 3;"), Some("MAX"));
    assert_eq!(pub_item("pub struct Board {"), None);
    assert_eq!(pub_item("pub(crate) fn hidden()"), None);
    assert_eq!(pub_item("    pub tasks: OrdMap<String, Stored>,"), None);
    assert_eq!(pub_item("pub use crate::state::Board;"), None);
    assert_eq!(pub_item("pub mod store;"), None);
}

/// The library's module of a file under `src/`: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` is the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// Skip a path's `{…}` group at `i` (just past its `{`): the paths in it, each as its segments.
fn group(b: &[u8], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    loop {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
            i += 1;
        }
        if i >= b.len() || b[i] == b'}' {
            return i + 1;
        }
        i = path(b, i, prefix.to_vec(), out);
    }
}

/// The path starting at `i` (segments after `prefix`), `{…}` groups expanded; where it ends.
fn path(b: &[u8], mut i: usize, mut segs: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        if b.get(i) == Some(&b'{') {
            return group(b, i + 1, &segs, out);
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i > start {
            segs.push(String::from_utf8_lossy(&b[start..i]).into_owned());
        }
        if b[i..].starts_with(b"::{") {
            return group(b, i + 3, &segs, out);
        }
        if b[i..].starts_with(b"::") && i > start {
            i += 2;
            continue;
        }
        out.push(segs);
        return i;
    }
}

/// The modules a file of module `me` names: every `crate::…` and `super::…` path (`use` groups expanded) and every
/// `child::…` of a child module it declares, each resolved to the longest module it starts with. Comments and the
/// file's inline test module (its `super` is the file itself) are not read.
fn imports(text: &str, me: &[String], modules: &HashSet<Vec<String>>) -> HashSet<Vec<String>> {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    // The indentation of each inline `mod x {` the line is in: there, `super` is one module less far.
    let mut inline: Vec<usize> = Vec::new();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if t == "#[cfg(test)]" && lines.peek().is_some_and(|n| n.trim_start().starts_with("mod ")) {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        if inline.last() == Some(&indent) && t.starts_with('}') {
            inline.pop();
        }
        let declares = t.strip_prefix("pub ").or_else(|| t.strip_prefix("pub(crate) ")).unwrap_or(t);
        if declares.starts_with("mod ") && t.ends_with('{') {
            inline.push(indent);
        }
        let mut line = line.split(" // ").next().unwrap_or(line).to_string();
        for _ in 0..inline.len() {
            line = line.replace("super::super::", "super::\u{0}").replace("super::", "").replace('\u{0}', "");
        }
        code.push_str(&line);
        code.push('\n');
    }
    let b = code.as_bytes();
    let children: Vec<&Vec<String>> = modules.iter().filter(|m| m.len() == me.len() + 1 && m.starts_with(me)).collect();
    let mut paths = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b':');
        if !boundary {
            i += 1;
            continue;
        }
        let (prefix, skip) = if b[i..].starts_with(b"crate::") {
            (vec![], 7)
        } else if b[i..].starts_with(b"super::") {
            let mut up = me.to_vec();
            let mut j = i;
            while b[j..].starts_with(b"super::") {
                up.pop();
                j += 7;
            }
            (up, j - i)
        } else if let Some(c) = children.iter().find(|c| {
            let name = c[me.len()].as_bytes();
            b[i..].starts_with(name) && b[i + name.len()..].starts_with(b"::")
        }) {
            let _ = c;
            (me.to_vec(), 0)
        } else {
            i += 1;
            continue;
        };
        let mut found = Vec::new();
        i = path(b, i + skip, prefix, &mut found).max(i + 1);
        paths.extend(found);
    }
    paths
        .into_iter()
        .filter_map(|p| (0..=p.len()).rev().map(|n| p[..n].to_vec()).find(|m| modules.contains(m)))
        .filter(|m| m.as_slice() != me)
        .collect()
}

/// The circles of `graph`: its strongly connected components of more than one module (Tarjan's algorithm), each
/// sorted, as `a::b` names.
fn circles(graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        index: std::collections::HashMap<&'g str, (usize, usize)>,
        stack: Vec<&'g str>,
        on: HashSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(w: &mut Walk<'g>, v: &'g str) {
        w.index.insert(v, (w.next, w.next));
        w.next += 1;
        w.stack.push(v);
        w.on.insert(v);
        for u in w.graph.get(v).into_iter().flatten() {
            let u = u.as_str();
            if !w.index.contains_key(u) {
                visit(w, u);
                let low = w.index[v].1.min(w.index[u].1);
                w.index.get_mut(v).expect("visited").1 = low;
            } else if w.on.contains(u) {
                let low = w.index[v].1.min(w.index[u].0);
                w.index.get_mut(v).expect("visited").1 = low;
            }
        }
        if w.index[v].0 == w.index[v].1 {
            let mut scc = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on.remove(u);
                scc.push(u.to_string());
                if u == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                w.out.push(scc);
            }
        }
    }
    let mut w = Walk { graph, index: Default::default(), stack: vec![], on: HashSet::new(), next: 0, out: vec![] };
    for v in graph.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.out.sort();
    w.out
}

/// The import graph of a crate (the binary's `src/`, the engine's `crates/git-swarm-core/src/`), module by module
/// (a file is a module). In the binary, `cli` is the top and is left out: it may use everything below it.
fn import_graph(src: &str) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.retain(|f| {
        let rel = f.strip_prefix(&src).unwrap_or(f);
        !rel.starts_with("cli") && rel != Path::new("main.rs") && rel != Path::new("fuzz.rs")
    });
    let mut modules: HashSet<Vec<String>> = HashSet::new();
    let of: Vec<(Vec<String>, PathBuf)> =
        files.iter().map(|f| (module_of(f.strip_prefix(&src).unwrap_or(f)), f.clone())).collect();
    for (m, _) in &of {
        for n in 0..=m.len() {
            modules.insert(m[..n].to_vec());
        }
    }
    let mut graph = std::collections::BTreeMap::new();
    for (m, f) in &of {
        let text = std::fs::read_to_string(f).expect("read a source file");
        graph.insert(m.clone(), imports(&text, m, &modules));
    }
    // Between rooms: an import of `a::x::…` from `a::y::…` is one of room `a::x` by room `a::y` (siblings, each with
    // everything under it). A module and the modules under it are one room seen from outside: a parent that uses
    // its children and children that use their parent's types (an `impl` split over files) are no circle.
    let name = |m: &[String]| if m.is_empty() { "crate".to_string() } else { m.join("::") };
    let mut rooms: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for (from, tos) in &graph {
        for to in tos {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            rooms.entry(name(&from[..=common])).or_default().insert(name(&to[..=common]));
        }
    }
    rooms
}

/// No room of the library imports, through others, a room that imports it: the rooms under one module (and the
/// top-level ones) can be read in an order, each knowing only the rooms it names. The circles left are listed
/// here, to be taken apart: a new one fails the test, and so does one that is gone while still listed.
#[test]
fn no_import_circle_in_either_crate() {
    let known: &[&[&str]] = KNOWN_CIRCLES;
    let mut graph = import_graph("src");
    let mut found = circles(&graph);
    let engine = import_graph("crates/git-swarm-core/src");
    found.extend(circles(&engine).into_iter().map(|c| c.into_iter().map(|m| format!("core:{m}")).collect()));
    graph.extend(
        engine.into_iter().map(|(k, v)| (format!("core:{k}"), v.into_iter().map(|m| format!("core:{m}")).collect())),
    );
    let want: Vec<Vec<String>> = known.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect();
    let new: Vec<&Vec<String>> = found.iter().filter(|c| !want.contains(c)).collect();
    let gone: Vec<&Vec<String>> = want.iter().filter(|c| !found.contains(c)).collect();
    // Each new circle with its edges inside it: where to cut.
    let edges: Vec<String> = new
        .iter()
        .flat_map(|c| {
            c.iter().map(|m| {
                let to: Vec<&str> = graph[m].iter().filter(|t| c.contains(t)).map(String::as_str).collect();
                format!("  {m} -> {}", to.join(", "))
            })
        })
        .collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import circles (rooms that import each other, through others):\nnew: {new:#?}\n{}\ngone (take them off \
         KNOWN_CIRCLES): {gone:#?}",
        edges.join("\n")
    );
}

/// The circles not yet taken apart (docs/architecture.md, "Rooms and their imports").
const KNOWN_CIRCLES: &[&[&str]] = &[];

#[test]
fn the_import_scan_sees_what_it_should() {
    let modules: HashSet<Vec<String>> = [
        vec![],
        vec!["runner".into()],
        vec!["runner".into(), "desk".into()],
        vec!["runner".into(), "git".into()],
        vec!["ops".into()],
        vec!["ops".into(), "claim".into()],
    ]
    .into_iter()
    .collect();
    let me = vec!["runner".to_string(), "desk".to_string()];
    let text = "use super::{Runner, git::{self, run}};\nuse crate::ops::claim::Claimed;\n/// crate::nothing\n";
    let got = imports(text, &me, &modules);
    let want: HashSet<Vec<String>> =
        [vec!["runner".into()], vec!["runner".into(), "git".into()], vec!["ops".into(), "claim".into()]]
            .into_iter()
            .collect();
    assert_eq!(got, want);
    // A parent names its child by its bare name.
    let got = imports("pub desk: Option<Arc<desk::Desk>>,\nlet x = std::desk::y;", &["runner".to_string()], &modules);
    assert_eq!(got, [vec!["runner".to_string(), "desk".to_string()]].into_iter().collect());
    let graph = [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(str::to_string).collect()))
        .collect();
    assert_eq!(circles(&graph), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
}

/// The raw file-system and process calls of the modules that handle what agents leave (`src/runner`, `src/agent`,
/// `src/hooks/agent.rs`): `std::fs`, `File`, `OpenOptions`, a command's working directory. Test code is left out.
fn raw_calls(text: &str) -> Vec<(usize, String)> {
    const RAW: &[&str] = &[
        "std::fs::",
        "File::open",
        "File::create",
        "OpenOptions",
        "DirBuilder",
        ".current_dir(",
        "--work-tree",
        "Command::new(",
        "lchown",
    ];
    let mut out = Vec::new();
    // Test modules (`#[cfg(test)] mod … { … }`) are skipped by counting their braces.
    let (mut in_test, mut depth, mut opened) = (false, 0i64, false);
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            (in_test, depth, opened) = (true, 0, false);
            continue;
        }
        if in_test {
            let code = line.split("//").next().unwrap_or_default();
            depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
            opened |= code.contains('{');
            if opened && depth <= 0 {
                in_test = false;
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        if RAW.iter().any(|r| code.contains(r)) {
            out.push((n + 1, line.trim().to_string()));
        }
    }
    out
}

/// Invariant 39 (docs/invariants.md): the runner reads and writes a path an agent could have replaced only through
/// `agent::files` (no link followed, no FIFO waited on, bounded), and runs git only in its own state. Every other
/// raw file or process call of the modules that handle what agents leave is audited here, file by file, with why
/// its paths are the runner's own: a new one fails this test until it goes through the helper, or is audited.
#[test]
fn every_raw_file_access_near_agents_is_audited() {
    const AUDITED: &[(&str, usize, &str)] = &[
        ("src/agent/contain.rs", 6, "/proc of the runner's own children and agents (bounded by the kernel)"),
        (
            "src/agent/command.rs",
            8,
            "the agent's command itself (the trampoline or `sh`, started in its work tree); the pid file of a run's group, beside its run folder in the runner's own `run/`; /proc of a leftover group",
        ),
        ("src/agent/preset.rs", 2, "a CLI's `--version` probe; programs on the runner's PATH"),
        ("src/agent/sandbox.rs", 5, "system folders (/etc/resolv.conf, /home), the mounts' sources and their modes"),
        (
            "src/agent/visible.rs",
            4,
            "stat and realpath only, never a content read or written: a command's program and paths, the PATH entries, the runner's home",
        ),
        (
            "src/hooks/agent.rs",
            11,
            "the hook files written into a work tree the runner just made; the user's excludes; the hook handler's own files (it runs as the agent)",
        ),
        ("src/runner/baseline.rs", 1, "the clone's cache folder of check results"),
        (
            "src/runner/contained.rs",
            8,
            "the runner's home (login files to copy), the fresh home it makes in a fresh run folder, the empty file it mounts over credentials",
        ),
        ("src/runner/git.rs", 10, "the clone's git directory: its worktree registrations and lock"),
        ("src/runner/mod.rs", 4, "the runner's logs, pid file and run folders, made private"),
        ("src/runner/places.rs", 16, "the places record and pid files of the clone's runners"),
        (
            "src/runner/status.rs",
            8,
            "the phase files of the clone's runners and the ends of their logs, in `<git dir>/swarm/` (no agent sees it)",
        ),
        (
            "src/runner/planted.rs",
            8,
            "uncontained runs only: the clone's config and cache, and the copies kept of them",
        ),
        (
            "src/runner/slot.rs",
            11,
            "the runner's index and folders: fresh trees and run folders made in folders of its own; the clone's refs copied into a fresh run folder",
        ),
        (
            "src/runner/slot/park.rs",
            14,
            "whole trees renamed aside, parked or taken back in the warm folders no sandbox shows (the entry moved, never followed), with the slot's own files of the runner's folder",
        ),
        (
            "src/runner/caches.rs",
            11,
            "the person's cargo registry read (their files, no link followed) into a new folder of the runner's, renamed into the agents' reach whole; once there, never written again",
        ),
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/runner"), &mut files);
    rust_files(&root.join("src/agent"), &mut files);
    files.push(root.join("src/hooks/agent.rs"));
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap_or(f).to_string_lossy().replace('\\', "/");
        if rel == "src/agent/files.rs" {
            continue; // the helper itself
        }
        let text = std::fs::read_to_string(f).expect("read a source file");
        let calls = raw_calls(&text);
        let audited = AUDITED.iter().find(|(p, ..)| *p == rel).map_or(0, |(_, n, _)| *n);
        if calls.len() != audited {
            let lines: Vec<String> = calls.iter().map(|(n, l)| format!("  {rel}:{n}: {l}")).collect();
            wrong.push(format!("{rel}: {} raw calls, {audited} audited:\n{}", calls.len(), lines.join("\n")));
        }
    }
    assert!(
        wrong.is_empty(),
        "a raw file or process call near agents that is not audited: read and write what an agent could have \
         replaced through agent::files, or (a path of the runner's own) count it in AUDITED with why:\n{}",
        wrong.join("\n")
    );
    // The runner's git writes into a work tree only where it makes one afresh (`Slot::checkout`, and the refresh of
    // the index for the times it kept, before anything is carried into the tree: `slot/park.rs`).
    let work_tree: Vec<&PathBuf> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .is_ok_and(|t| t.split("#[cfg(test)]").next().unwrap_or_default().contains("--work-tree"))
        })
        .collect();
    let slot = [root.join("src/runner/slot.rs"), root.join("src/runner/slot/park.rs")];
    assert_eq!(work_tree, slot.iter().collect::<Vec<_>>(), "git with a work tree outside Slot::checkout");
}

#[test]
fn the_raw_call_scan_sees_what_it_should() {
    let text = "let a = std::fs::read(p);\n// std::fs::write in a comment\nlet b = x; // std::fs::remove_file\n\
                cmd.current_dir(wt);\n#[cfg(test)]\nmod t {\n    fn f() {\n        std::fs::write(t);\n    }\n}\n\
                let c = File::open(p);\n";
    let got: Vec<usize> = raw_calls(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, vec![1, 4, 11]);
}

/// The size rule of issue 36: no file of either crate holds more than 700 lines of code before its tests, and no
/// function there is longer than 100 lines. (The test modules, and the scenario tests of `tests/cli/`, are left
/// alone: a scenario reads best whole.)
const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 100;

/// The lines of `text` that are not its test modules (each `#[cfg(test)]` at the start of a line followed by an
/// inline `mod … {`, to its closing `}`); a `#[cfg(test)] mod x;` declaration or a test-only item stays.
fn non_test(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let opens = lines[i].starts_with("#[cfg(test)]")
            && lines.get(i + 1).is_some_and(|n| n.starts_with("mod ") && n.trim_end().ends_with('{'));
        if opens {
            i += 2;
            while i < lines.len() && lines[i] != "}" {
                i += 1;
            }
            i += 1;
            continue;
        }
        out.push(lines[i]);
        i += 1;
    }
    out
}

/// The functions of `lines` longer than `max` lines: name, first line (1-based) and length. A function ends at the
/// first line after its signature that closes it at its own indentation.
fn long_functions(lines: &[&str], max: usize) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let rest = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| t.strip_prefix(p)).unwrap_or(t);
        let rest = ["const ", "async ", "unsafe "].iter().find_map(|p| rest.strip_prefix(p)).unwrap_or(rest);
        let Some(sig) = rest.strip_prefix("fn ") else { continue };
        let name: String = sig.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if l.trim_end().ends_with(';') || l.trim_end().ends_with('}') {
            continue;
        }
        let close = format!("{indent}}}");
        let end = lines[i + 1..].iter().position(|m| m.trim_end() == close).map_or(lines.len(), |k| i + 1 + k);
        let len = end - i + 1;
        if len > max {
            out.push((name, i + 1, len));
        }
    }
    out
}

#[test]
fn no_file_over_700_lines_of_code_and_no_function_over_100() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates/git-swarm-core/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
        // Whole files that are test modules of the binary.
        if rel == "src/fuzz.rs" || rel.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read a source file");
        let code = non_test(&text);
        if code.len() > MAX_FILE_LINES {
            wrong.push(format!(
                "{rel}: {} lines of code (at most {MAX_FILE_LINES}): split it along its seams",
                code.len()
            ));
        }
        for (name, at, len) in long_functions(&code, MAX_FN_LINES) {
            wrong.push(format!("{rel}:{at}: fn {name} is {len} lines (at most {MAX_FN_LINES})"));
        }
    }
    assert!(wrong.is_empty(), "too big:\n{}", wrong.join("\n"));
}

#[test]
fn the_size_scan_sees_what_it_should() {
    let body = (0..120).map(|i| format!("    let x{i} = {i};")).collect::<Vec<_>>().join("\n");
    let text = [
        "#[cfg(test)]\nmod declared;\nfn small() {\n    1\n}\n",
        &format!("pub(crate) fn big() {{\n{body}\n}}\n"),
        "fn one() -> u8 { 1 }\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nfn after() {}\n",
    ]
    .concat();
    let code = non_test(&text);
    assert!(!code.iter().any(|l| l.contains("fn t()")), "the tests are left out: {code:?}");
    assert!(code.iter().any(|l| l.contains("fn big()")), "a test module's declaration is no end of the code");
    assert!(code.iter().any(|l| l.contains("fn after()")), "code after a test module counts");
    assert_eq!(long_functions(&code, MAX_FN_LINES), vec![("big".to_string(), 6, 122)]);
}

/// Where `text` reads the process environment (`std::env::var`, `var_os`, `vars`, `vars_os`, or an import of
/// `std::env` that would let a read go by another name), test modules (`#[cfg(test)] mod … { … }`) and comments
/// ([`code_of`]) left out: its line numbers and lines.
fn env_reads(text: &str) -> Vec<(usize, String)> {
    const READS: &[&str] = &["env::var", "use std::env"];
    let code = code_of(text);
    let mut out = Vec::new();
    let (mut in_test, mut depth, mut opened) = (false, 0i64, false);
    for (n, (line, shown)) in code.lines().zip(text.lines()).enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            (in_test, depth, opened) = (true, 0, false);
            continue;
        }
        if in_test {
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            opened |= line.contains('{');
            if opened && depth <= 0 {
                in_test = false;
            }
            continue;
        }
        if READS.iter().any(|r| line.contains(r)) {
            out.push((n + 1, shown.trim().to_string()));
        }
    }
    out
}

/// The environment is read in one place (issue 36): `cli::main` takes the snapshot `environment::Environment`
/// (`Environment::from_vars(std::env::vars_os())`), and everything else gets what it needs of it as a parameter or
/// a field. The engine reads none at all (the binary hands it `Process`). Any other read fails here, by file and
/// line; test code is left out (`#[cfg(test)]` modules, `*_tests.rs`, `src/fuzz.rs`).
#[test]
fn the_environment_is_read_once_in_cli_main() {
    const THE_ONE: &str = "Environment::from_vars(std::env::vars_os())";
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("crates/git-swarm-core/src"), &mut files);
    files.sort();
    let (mut wrong, mut the_one) = (Vec::new(), Vec::new());
    for f in &files {
        let rel = f.strip_prefix(root).unwrap_or(f).to_string_lossy().replace('\\', "/");
        if rel == "src/environment.rs" || rel == "src/fuzz.rs" || rel.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read a source file");
        for (n, line) in env_reads(&text) {
            if rel == "src/cli/mod.rs" && line.contains(THE_ONE) {
                the_one.push(format!("{rel}:{n}"));
            } else {
                wrong.push(format!("  {rel}:{n}: {line}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the process environment read outside src/environment.rs and cli::main: take the value from the \
         `Environment` (a parameter, a field; a new variable declared in `variables!` of src/environment.rs):\n{}",
        wrong.join("\n")
    );
    // The scan sees the one read there is: it cannot pass for seeing nothing.
    assert_eq!(the_one.len(), 1, "cli::main reads the environment once, with {THE_ONE}: {the_one:?}");
}

#[test]
fn the_environment_scan_sees_what_it_should() {
    let text = "let a = std::env::var(\"X\");\n// std::env::var_os(\"Y\") in a comment\n/* std::env::vars()\n\
                over two lines */ let b = 1;\nuse std::env;\n#[cfg(test)]\nmod t {\n    fn f() {\n        \
                std::env::var_os(\"Z\");\n    }\n}\nlet c = std::env::vars_os().count();\n\
                let d = env::var(\"W\"); let e = std::env::current_dir();\n";
    let got: Vec<usize> = env_reads(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, vec![1, 5, 12, 13]);
    // The tree itself: a read planted in a file of the binary is found, with its line.
    let planted = format!("fn f() {{}}\n{}\n", "let home = std::env::var_os(\"HOME\");");
    assert_eq!(env_reads(&planted), vec![(2, "let home = std::env::var_os(\"HOME\");".to_string())]);
}
