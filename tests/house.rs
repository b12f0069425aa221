//! The house rules that the compiler does not check. A `pub` function, constant or static of the library is one
//! that something outside it names — the CLI (`src/cli`, `src/main.rs`), the tests or the examples; everything
//! else is `pub(crate)`, so that a reader knows what the library offers and the compiler finds what nothing uses
//! (docs/architecture.md). Types are left to the compiler: one that a public item's signature names must be `pub`
//! (`private_interfaces`), whoever names it.

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

#[test]
fn every_pub_function_and_constant_of_the_library_is_used_outside_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "examples"] {
        rust_files(&root.join(dir), &mut files);
    }
    let outside = |p: &Path| {
        let rel = p.strip_prefix(root).unwrap_or(p);
        !rel.starts_with("src") || rel.starts_with("src/cli") || rel == Path::new("src/main.rs")
    };
    let mut words = HashSet::new();
    for f in files.iter().filter(|f| outside(f)) {
        let text = std::fs::read_to_string(f).expect("read a source file");
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
        "pub, but nothing outside the library names them (make them pub(crate)):\n{}",
        unused.join("\n")
    );
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
