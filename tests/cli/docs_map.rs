//! The code map of `docs/architecture.md` against the tree, so that the map a newcomer reads first stays true.
//!
//! The map is the table under the heading `## Code map`. The first cell of each row names paths from the root of
//! the repository, each in backticks, several separated by `, ` (nothing else may stand in that cell):
//!
//! * a plain path names that file or folder (`src/cli/mod.rs`, `hooks/`, `bench/run.sh`);
//! * a `<…>` in the last component stands for any name without a `/` (`src/cli/<command>.rs` is every `.rs` file
//!   directly in `src/cli/`); a folder's components take none;
//! * a folder named `common/` (a test harness, `tests/cli/common/`) stands for the `.rs` files directly in it; any
//!   other folder stands for itself alone.
//!
//! The test fails (a) when a path a row names does not exist (a pattern: when no file of its folder matches it),
//! and (b) when a `.rs` file under `src/`, `crates/git-swarm-core/src/`, `tests/cli/` or
//! `crates/git-swarm-core/tests/` is covered by no row. Rows may overlap: a file named by a row of its own may
//! match a pattern too.

use std::path::Path;

/// The folders whose every `.rs` file the map must cover.
const COVERED: [&str; 4] = ["src", "crates/git-swarm-core/src", "tests/cli", "crates/git-swarm-core/tests"];

/// The paths each row of the table under `heading` names (the header row and the rule below it left out), or what
/// is wrong with a row.
fn map_rows(doc: &str, heading: &str) -> Result<Vec<Vec<String>>, String> {
    let mut lines = doc.lines().skip_while(|l| l.trim_end() != heading);
    if lines.next().is_none() {
        return Err(format!("no heading {heading}"));
    }
    let table: Vec<&str> = lines.take_while(|l| !l.starts_with("## ")).filter(|l| l.starts_with('|')).collect();
    let Some(rule) = table.get(1) else { return Err(format!("no table under {heading}")) };
    if !rule.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')) {
        return Err(format!("the table's second line is not its rule: {rule}"));
    }
    let mut rows = Vec::new();
    for line in &table[2..] {
        let cell = line.split('|').nth(1).unwrap_or_default();
        let parts: Vec<&str> = cell.split('`').collect();
        if parts.len() < 3 || parts.len().is_multiple_of(2) {
            return Err(format!("a row whose first cell names no path in backticks: {line}"));
        }
        // Between the paths: only `, `; before the first and after the last: nothing but spaces.
        let between = parts.iter().step_by(2).enumerate();
        for (i, text) in between {
            let edge = i == 0 || i == parts.len() / 2;
            if !((edge && text.trim().is_empty()) || (!edge && *text == ", ")) {
                return Err(format!("a first cell with more than paths separated by `, `: {line}"));
            }
        }
        rows.push(parts.iter().skip(1).step_by(2).map(|p| p.to_string()).collect());
    }
    Ok(rows)
}

/// Does the name `pattern` (its `<…>` standing for any non-empty run of characters) match `name`?
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('<') {
        None => pattern == name,
        Some((lit, rest)) => {
            let Some(after) = name.strip_prefix(lit) else { return false };
            let Some((_, rest)) = rest.split_once('>') else { return false };
            // The placeholder takes at least one character, and any number more.
            (1..=after.len()).any(|n| after.is_char_boundary(n) && name_matches(rest, &after[n..]))
        }
    }
}

/// Does the path `named` of a row cover the file `file` (both from the root, with `/`)?
fn covers(named: &str, file: &str) -> bool {
    if let Some(folder) = named.strip_suffix('/') {
        return folder.rsplit('/').next() == Some("common")
            && file.rsplit_once('/').is_some_and(|(dir, _)| dir == folder);
    }
    let (dir, name) = named.rsplit_once('/').unwrap_or(("", named));
    let (file_dir, file_name) = file.rsplit_once('/').unwrap_or(("", file));
    dir == file_dir && name_matches(name, file_name)
}

/// What is wrong with `named` on the tree at `root`: it does not exist, or no file of its folder matches it.
fn missing(root: &Path, named: &str) -> Option<String> {
    let (dir, name) = named.trim_end_matches('/').rsplit_once('/').unwrap_or(("", named));
    if dir.contains('<') {
        return Some(format!("{named}: a placeholder stands only in the file name"));
    }
    if !name.contains('<') {
        return (!root.join(named).exists()).then(|| format!("{named}: no such file or folder"));
    }
    let found = std::fs::read_dir(root.join(dir))
        .map(|entries| {
            entries.flatten().any(|e| e.path().is_file() && name_matches(name, &e.file_name().to_string_lossy()))
        })
        .unwrap_or(false);
    (!found).then(|| format!("{named}: no file of {dir}/ matches it"))
}

/// Every `.rs` file under `dir` (a path from `root`), from `root`, with `/`.
fn rust_files(root: &Path, dir: &str, out: &mut Vec<String>) {
    let entries = std::fs::read_dir(root.join(dir)).expect("read a source folder");
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = format!("{dir}/{name}");
        if entry.path().is_dir() {
            rust_files(root, &path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_code_map_names_every_source_file_and_only_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("read docs/architecture.md");
    let rows = map_rows(&doc, "## Code map").unwrap_or_else(|e| panic!("docs/architecture.md: {e}"));
    let named: Vec<&str> = rows.iter().flatten().map(String::as_str).collect();
    // Not vacuous: the map has its rows, and each folder it must cover has files.
    assert!(rows.len() > 100, "docs/architecture.md's code map has {} rows: is it the table it was?", rows.len());
    let mut missing_paths: Vec<String> = named.iter().filter_map(|n| missing(root, n)).collect();
    missing_paths.sort();
    let mut files = Vec::new();
    for dir in COVERED {
        let before = files.len();
        rust_files(root, dir, &mut files);
        assert!(files.len() > before, "no .rs file under {dir}");
    }
    let mut uncovered: Vec<&String> = files.iter().filter(|f| !named.iter().any(|n| covers(n, f))).collect();
    uncovered.sort();
    assert!(
        missing_paths.is_empty() && uncovered.is_empty(),
        "docs/architecture.md's code map is not the tree (rule: tests/cli/docs_map.rs)\nnamed, but not there:\n  \
         {}\nno row of the map:\n  {}",
        missing_paths.join("\n  "),
        uncovered.iter().map(|f| f.as_str()).collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn the_map_parser_sees_what_it_should() {
    let doc = "# A\n\n## Code map\n\nText.\n\n| path | what |\n| --- | --- |\n| `src/a.rs`, `src/b.rs` | two \
               | with `x` |\n| `src/cli/<command>.rs` | one each |\n| `tests/cli/common/` | the harness |\n\n## Next\n\n\
               | path | what |\n| --- | --- |\n| `elsewhere.rs` | not the map |\n";
    let rows = map_rows(doc, "## Code map").expect("the map");
    assert_eq!(rows, [vec!["src/a.rs", "src/b.rs"], vec!["src/cli/<command>.rs"], vec!["tests/cli/common/"]]);

    assert!(covers("src/cli/<command>.rs", "src/cli/add.rs"));
    assert!(!covers("src/cli/<command>.rs", "src/cli/ci/gitlab.rs"), "a placeholder never takes a /");
    assert!(!covers("src/cli/<command>.rs", "src/cli/.rs"), "a placeholder takes a character at least");
    assert!(!covers("src/cli/<command>.rs", "src/cli/add.txt"));
    assert!(covers("src/<a>_tests.rs", "src/http_tests.rs") && !covers("src/<a>_tests.rs", "src/http.rs"));
    assert!(covers("src/a.rs", "src/a.rs") && !covers("src/a.rs", "src/ab.rs") && !covers("src/a.rs", "x/src/a.rs"));
    assert!(covers("tests/cli/common/", "tests/cli/common/mod.rs"));
    assert!(!covers("tests/cli/common/", "tests/cli/common/deeper/x.rs"));
    assert!(!covers("tests/cli/", "tests/cli/board.rs"), "only a harness folder covers its files");

    for bad in ["| `a.rs` and `b.rs` | x |", "| src/a.rs | x |", "| `a.rs`,`b.rs` | x |", "| see `a.rs` | x |"] {
        let doc = format!("## Code map\n| path | what |\n| --- | --- |\n{bad}\n");
        assert!(map_rows(&doc, "## Code map").is_err(), "{bad} was taken");
    }
    assert!(map_rows("## Other\n| a | b |\n| - | - |\n", "## Code map").is_err());

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(missing(root, "src/cli/<command>.rs"), None);
    assert_eq!(missing(root, "tests/cli/common/"), None);
    assert!(missing(root, "src/no_such_file.rs").is_some());
    assert!(missing(root, "src/cli/<command>.toml").is_some());
    assert!(missing(root, "src/<room>/mod.rs").is_some(), "a placeholder in a folder is refused");
}
