//! Fuzzing of every parser of what a swarm reads from others: the files of the state ref (task files, `swarm.toml`,
//! `cycles/<n>.toml`, and the text files `notes/<id>.md`, `prompts/<name>.md` and `goal.md`), the porcelain output of
//! `git push`, and what planner and judge agents print.
//!
//! Files go through the real reading path: each case writes its bytes as a blob into a real repository, commits a
//! state with it beside a healthy board (an open task that waits on a done one), points `refs/swarm/default` there,
//! and reads and claims through [`Swarm`] as every command does. One repository serves all the cases of a test.
//! Inputs are arbitrary bytes and strings, and structure-aware mutations of valid files: fields replaced by values
//! of other types, huge numbers, deep nesting, invalid UTF-8, NULs, control and bidi characters, odd paths, and
//! symlinks, submodules or folders where a file should be.
//!
//! The properties: nothing panics; a bad file is named, with the commit, by a warning (for `swarm.toml`: by the
//! error that stops every op); everything else still reads, and the healthy task can still be claimed.
//!
//! `tests/corpus/<parser>/` holds inputs replayed with the same checks on every run (see its README). A failing
//! case is saved to `target/tmp/fuzz-failures/<parser>/latest` so that it can join the corpus; proptest keeps the
//! seeds of failures in `tests/fuzz.proptest-regressions`. `FUZZ_SCALE=20` runs twenty times the cases.

use std::io::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{Role, backend_for};
use crate::model::{self, Claim, Config, Failure, Kind, Status, Task, TaskResult};
use crate::ops::plan::to_new_tasks;
use crate::ops::{self, Actor, Board, Closed, NewTask, Stored};
use crate::runner::judge::parse_verdict;
use crate::runner::planner::parse_proposals;
use crate::runner::{self, CycleRecord, RunSettings, Verdict, prompts};
use crate::time::Timestamp;
use crate::{Identity, LogEntry, Snapshot, Store, short};
use crate::{PushLine, RemoteError, classify, parse_porcelain};
use crate::{Retry, Swarm, TxnError};
use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};
use gix::objs::tree::EntryKind;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{TestCaseError, TestRunner};

const REF: &str = "refs/swarm/default";
/// The healthy task every case must still be able to claim; it waits on [`DEP`], which is done.
const GOOD: &str = "t-600d00";
const DEP: &str = "t-dee000";
/// The id of the hostile task files (when they keep one).
const BAD: &str = "t-bad001";
const NOW_SECS: u64 = 1_800_000_000;
const LEASE: Duration = Duration::from_secs(600);
const PROMPTS: [&str; 5] = ["worker", "conflict", "planner", "sub-planner", "judge"];
/// What a submodule entry points at (a commit of another repository: never present).
const GITLINK: &str = "1234567890abcdef1234567890abcdef12345678";
/// Limits of the text files, as the runner reads them.
const NOTE_LIMIT: usize = 64 * 1024;
const PROMPT_LIMIT: usize = 256 * 1024;
const GOAL_LIMIT: usize = 256 * 1024;

// ---------------------------------------------------------------------------------------------------------------
// Running cases

/// `n` cases, times `FUZZ_SCALE` when set.
fn scaled(n: u32) -> u32 {
    let scale = std::env::var("FUZZ_SCALE").ok().and_then(|s| s.parse::<u32>().ok()).unwrap_or(1).max(1);
    n.saturating_mul(scale)
}

/// Run `test` on `cases` values of `strategy`, with failures persisted next to this file.
fn run_cases<S>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let config = ProptestConfig { cases: scaled(cases), source_file: Some(file!()), ..ProptestConfig::default() };
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Where the last failing input of `parser` is saved.
fn failure_dir(parser: &str) -> PathBuf {
    // Unit tests have no CARGO_TARGET_TMPDIR: `target/tmp`, as integration tests have it.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("tmp").join("fuzz-failures").join(parser)
}

/// Run `check` on one input. A failure or a panic saves the input (proptest shrinks by trying smaller failing
/// inputs, so the last one saved is the smallest) and fails the case.
fn guarded(
    parser: &str,
    input: &[u8],
    case: &dyn std::fmt::Debug,
    check: impl FnOnce() -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let why = match std::panic::catch_unwind(AssertUnwindSafe(check)) {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(TestCaseError::Reject(r))) => return Err(TestCaseError::Reject(r)),
        Ok(Err(e)) => e.to_string(),
        Err(panic) => format!("panicked: {}", panic_text(&*panic)),
    };
    let dir = failure_dir(parser);
    let saved = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("latest"), input))
        .and_then(|()| std::fs::write(dir.join("latest.case.txt"), format!("{case:#?}\n")));
    let note = match saved {
        Ok(()) => format!("input saved to {}; copy it into tests/corpus/{parser}/", dir.join("latest").display()),
        Err(e) => format!("the input could not be saved: {e}"),
    };
    Err(TestCaseError::fail(format!("{why}\n({note})")))
}

/// The inputs of `tests/corpus/<parser>/`, by file name.
fn corpus(parser: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("corpus").join(parser);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            (name, bytes)
        })
        .collect();
    out.sort();
    assert!(out.len() >= 3, "{} holds {} inputs; the corpus went missing?", dir.display(), out.len());
    out
}

/// Replay the corpus of `parser` through `check`; every input must pass.
fn replay(parser: &str, check: impl Fn(&[u8]) -> Result<(), TestCaseError>) {
    let mut failed = Vec::new();
    for (name, bytes) in corpus(parser) {
        match std::panic::catch_unwind(AssertUnwindSafe(|| check(&bytes))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("{name}: {e}")),
            Err(p) => failed.push(format!("{name}: panicked: {}", panic_text(&*p))),
        }
    }
    assert!(failed.is_empty(), "tests/corpus/{parser}:\n{}", failed.join("\n"));
}

// ---------------------------------------------------------------------------------------------------------------
// A real repository with a healthy board

fn who() -> Identity {
    Identity { name: "fuzzer".into(), email: "fuzzer@git-swarm.invalid".into() }
}

fn clock() -> Timestamp {
    Timestamp::from_secs(NOW_SECS)
}

fn actor(now: Timestamp) -> Actor {
    Actor { agent: "worker-1".into(), now }
}

fn retry() -> Retry {
    Retry { max_attempts: 3, max_elapsed: Duration::from_secs(10), ..Retry::default() }
}

/// A bare repository holding a swarm whose board is healthy: [`DEP`] done, [`GOOD`] open and waiting on it. Each
/// case commits a hostile state on top of `base` and points the state ref at it.
struct Fixture {
    dir: tempfile::TempDir,
    swarm: Swarm,
    base: ObjectId,
    base_tree: ObjectId,
    /// The `tasks` folder of the base: a tree that exists, to put where a file should be.
    tasks_tree: ObjectId,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new().prefix("git-swarm-fuzz").tempdir().expect("a temp dir");
        gix::init_bare(dir.path()).expect("git init --bare");
        // An op runs `git gc --auto` once there are enough loose objects: never in the background of a test whose
        // folder is about to go.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("config"))
            .and_then(|mut f| f.write_all(b"[gc]\n\tauto = 0\n"))
            .expect("configure the repository");
        let repo = gix::open(dir.path()).expect("open the repository");
        let swarm = crate::open_swarm(repo, None, "default", crate::Transport::Auto).expect("open the swarm");
        swarm.init(&retry(), &who(), &clock, &Config::default(), "fuzzer").expect("init");
        let op = |what: &str, f: &dyn Fn(&Board, &Actor) -> Result<ops::Change, ops::DomainError>| {
            swarm
                .transact(&retry(), &who(), &clock, |snap, now| Ok((f(&snap.board, &actor(now))?, ())))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        };
        let add = |b: &Board, a: &Actor, id: &str, deps: Vec<String>| {
            let new = NewTask { title: format!("task {id}"), deps, ..NewTask::default() };
            ops::add(b, a, vec![new], &mut || id.to_string()).map(|r| r.0)
        };
        op("add the dependency", &|b, a| add(b, a, DEP, vec![]));
        op("claim it", &|b, a| ops::claim(b, a, Some(DEP), Kind::Work, LEASE, None).map(|r| r.0));
        op("finish it", &|b, a| ops::done(b, a, DEP, None, None, Some("ok".into()), None).map(|r| r.0));
        op("add the healthy task", &|b, a| add(b, a, GOOD, vec![DEP.into()]));
        let base = swarm.tip().expect("read the tip").expect("the swarm exists");
        let (base_tree, tasks_tree) = {
            let tree = swarm.store().repo.find_commit(base).and_then(|c| c.tree()).expect("the base tree");
            (tree.id, tree.find_entry("tasks").map(|e| e.object_id()).expect("a tasks folder"))
        };
        Fixture { dir, swarm, base, base_tree, tasks_tree }
    }

    fn repo(&self) -> &gix::Repository {
        &self.swarm.store().repo
    }

    fn blob(&self, bytes: &[u8]) -> Result<ObjectId, TestCaseError> {
        Ok(self.repo().write_blob(bytes).map_err(fail)?.detach())
    }

    /// The entry that stands for `shape` (`None`: no entry).
    fn entry(&self, shape: &Shape) -> Result<Option<(EntryKind, ObjectId)>, TestCaseError> {
        Ok(match shape {
            Shape::File(b) => Some((EntryKind::Blob, self.blob(b)?)),
            Shape::Exec(b) => Some((EntryKind::BlobExecutable, self.blob(b)?)),
            Shape::Link(target) => Some((EntryKind::Link, self.blob(target)?)),
            Shape::Submodule => Some((EntryKind::Commit, ObjectId::from_hex(GITLINK.as_bytes()).map_err(fail)?)),
            Shape::Folder => Some((EntryKind::Tree, self.tasks_tree)),
            Shape::Missing => None,
        })
    }

    /// Commit the base's tree with `edits` (path, entry or `None` to remove it) on top of the current tip (a history
    /// that only grows, as clones expect), and make it the tip of the state ref, as a rogue writer with push access
    /// could.
    fn craft(&self, edits: &[(BString, Option<(EntryKind, ObjectId)>)]) -> Result<ObjectId, TestCaseError> {
        let repo = self.repo();
        let parent = self.swarm.store().read_ref(REF).map_err(fail)?.unwrap_or(self.base);
        let mut editor = repo.edit_tree(self.base_tree).map_err(fail)?;
        for (path, entry) in edits {
            let res = match entry {
                Some((kind, id)) => editor.upsert(path, *kind, *id).map(|_| ()),
                None => editor.remove(path).map(|_| ()),
            };
            res.map_err(|e| TestCaseError::reject(format!("cannot place {path}: {e}")))?;
        }
        // gix refuses to write trees with names like `.`, `..` or `.git` (see `a_dot_git_entry_does_not_block_ops`).
        let tree = editor.write().map_err(|e| TestCaseError::reject(format!("cannot write the tree: {e}")))?.detach();
        let sig = gix::actor::Signature {
            name: "rogue".into(),
            email: "rogue@example.com".into(),
            time: gix::date::Time { seconds: NOW_SECS as i64, offset: 0 },
        };
        let commit = gix::objs::Commit {
            tree,
            parents: [parent].into_iter().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: "rogue edit".into(),
            extra_headers: vec![],
        };
        let id = repo.write_object(&commit).map_err(fail)?.detach();
        self.swarm.store().set_ref(REF, id, "fuzz: a rogue edit").map_err(fail)?;
        Ok(id)
    }

    /// The entry at `path` in the tree of `commit`.
    fn entry_at(&self, commit: ObjectId, path: &[u8]) -> Option<(EntryKind, ObjectId)> {
        let tree = self.repo().find_commit(commit).ok()?.tree().ok()?;
        let entry = tree.lookup_entry(path.split(|b| *b == b'/')).ok()??;
        Some((entry.mode().kind(), entry.object_id()))
    }

    /// Claim `id` as every command does (read the newest state, apply, commit, compare-and-swap).
    fn claim(&self, id: &str) -> Result<crate::Committed<Option<Task>>, TxnError> {
        self.swarm.transact(&retry(), &who(), &clock, |snap, now| {
            ops::claim(&snap.board, &actor(now), Some(id), Kind::Work, LEASE, None)
        })
    }

    fn read(&self, full: bool) -> Result<Snapshot, TestCaseError> {
        self.swarm
            .read(full)
            .map_err(|e| fail(format!("the board did not read ({}): {e}", if full { "full" } else { "op" })))
    }

    /// The healthy part of the board reads as it should, and the healthy task can be claimed through the
    /// transaction loop (which reports the same problems as the read).
    fn still_works(&self, commit: ObjectId) -> Result<Snapshot, TestCaseError> {
        for full in [true, false] {
            let snap = self.read(full)?;
            prop_assert_eq!(snap.commit, commit);
            healthy(&snap)?;
            // The swarm's store patched its last read (`store/patch.rs`); a store that never read says the same.
            let fresh = Store::open(self.dir.path()).map_err(fail)?.read(commit, full).map_err(fail)?;
            prop_assert_eq!(&snap.board.tasks, &fresh.board.tasks);
            prop_assert_eq!(&snap.board.closed, &fresh.board.closed);
            prop_assert_eq!(&snap.board.twins, &fresh.board.twins);
            prop_assert_eq!(&snap.problems, &fresh.problems);
        }
        let lazy = self.read(false)?;
        let claimed = self.claim(GOOD).map_err(|e| fail(format!("claiming {GOOD}: {e}")))?;
        prop_assert_eq!(claimed.value.as_ref().map(|t| t.id.as_str()), Some(GOOD));
        prop_assert!(claimed.commit.is_some(), "the claim wrote nothing");
        prop_assert_eq!(&claimed.problems, &lazy.problems, "the op saw other problems than the read");
        Ok(lazy)
    }
}

/// The healthy task is there and ready, its dependency done, and every problem names its file and the commit.
fn healthy(snap: &Snapshot) -> Result<(), TestCaseError> {
    let good = snap.board.tasks.get(GOOD).ok_or_else(|| fail(format!("{GOOD} is gone: {:?}", snap.problems)))?;
    prop_assert_eq!(good.task.status, Status::Open);
    prop_assert_eq!(&good.path, &ops::task_path(GOOD));
    prop_assert_eq!(snap.board.status_of(DEP), Some(Status::Done));
    prop_assert!(ops::is_ready(&snap.board, &good.task, clock()), "{} is not ready", GOOD);
    let hex = snap.commit.to_hex().to_string();
    for p in &snap.problems {
        prop_assert_eq!(&p.commit, &hex, "a problem from another commit: {:?}", p);
        prop_assert!(!p.message.is_empty(), "a problem without a reason: {:?}", p);
        let shown = p.to_string();
        prop_assert!(shown.contains(&crate::escape::line(&p.path)), "{shown:?} does not name {:?}", p.path);
        prop_assert!(shown.contains(short(&hex)), "{shown:?} does not name the commit");
        prop_assert!(!shown.chars().any(char::is_control), "a warning with control characters: {shown:?}");
    }
    Ok(())
}

/// Is the file at `path` accounted for: a task of the board read from that path, or a problem naming the path or a
/// folder above it?
fn accounted(snap: &Snapshot, path: &str) -> bool {
    snap.problems.iter().any(|p| p.path == path || path.starts_with(&format!("{}/", p.path)))
        || snap.board.tasks.values().any(|s| s.path == path)
        || snap.board.closed.values().any(|c| c.path == path)
}

/// What stands at a path of the state tree.
#[derive(Clone)]
enum Shape {
    File(Vec<u8>),
    Exec(Vec<u8>),
    /// A symbolic link to this target.
    Link(Vec<u8>),
    Submodule,
    /// A folder (the base's `tasks`).
    Folder,
    Missing,
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::File(b) => write!(f, "File({:?})", b.as_bstr()),
            Shape::Exec(b) => write!(f, "Exec({:?})", b.as_bstr()),
            Shape::Link(b) => write!(f, "Link({:?})", b.as_bstr()),
            Shape::Submodule => f.write_str("Submodule"),
            Shape::Folder => f.write_str("Folder"),
            Shape::Missing => f.write_str("Missing"),
        }
    }
}

impl Shape {
    fn bytes(&self) -> &[u8] {
        match self {
            Shape::File(b) | Shape::Exec(b) | Shape::Link(b) => b,
            _ => b"",
        }
    }

    /// The text a reader gets from it: a file of at most `limit` bytes of UTF-8.
    fn text(&self, limit: usize) -> Option<&str> {
        match self {
            Shape::File(b) | Shape::Exec(b) if b.len() <= limit => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
}

fn shape(bytes: BoxedStrategy<Vec<u8>>) -> BoxedStrategy<Shape> {
    prop_oneof![
        24 => bytes.clone().prop_map(Shape::File),
        1 => bytes.prop_map(Shape::Exec),
        1 => prop_oneof![Just(b"/etc/passwd".to_vec()), Just(b"../../swarm.toml".to_vec())].prop_map(Shape::Link),
        1 => Just(Shape::Submodule),
        1 => Just(Shape::Folder),
        1 => Just(Shape::Missing),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile values

/// Strings that have broken parsers and terminals before.
fn spicy() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "\0",
        "a\0b",
        "\u{1b}[31mred\u{1b}[0m",
        "\u{1b}]0;title\u{7}",
        "\u{202e}txt.exe",
        "\u{200b}",
        "\u{feff}",
        "\u{7f}",
        "\u{85}",
        "\u{2028}",
        "line\nbreak",
        "cr\rlf\r\n",
        "tab\t",
        "../../etc/passwd",
        "a/b",
        ".hidden",
        "..",
        ".",
        "t-bad001",
        "t-600d00",
        "t-dee000",
        "é",
        "日本語",
        "🦀",
        "\"'`$(rm -rf /)`",
        "'''",
        "\"\"\"",
        "```",
        "```toml",
        "{{goal}}",
        "{{",
        "}}",
        "</task-data>",
        "\\",
        "\\u0000",
        "[[task]]",
        "[claim]",
        "=",
        "#",
        "nan",
        "inf",
        "-0",
        "0x10",
        "1e400",
        "9223372036854775808",
        "-9223372036854775809",
        "2026-11-29T14:05:00Z",
    ]
    .map(str::to_string)
    .to_vec();
    v.push("x".repeat(65));
    v.push("x".repeat(501));
    v.push("é".repeat(300));
    v
}

/// Valid words of the formats, in places where they may not belong.
const WORDS: &[&str] = &[
    "open",
    "claimed",
    "done",
    "failed",
    "cancelled",
    "finished",
    "OPEN",
    "work",
    "plan",
    "t-bad001",
    "t-600d00",
    "t-dee000",
    "t-ffffff",
    "worker-1",
    "bob",
    "judge-1",
    "continue",
    "stop",
    "Stop",
    "fail",
    "command",
    "http",
    "claude",
    "openai",
    "anthropic",
    "main",
    "10m",
    "0s",
    "1s",
    "8000y",
    "366d",
    "1h30m",
    "-5m",
    "10",
];

/// Times as the files write them, and near misses.
const TIMES: &[&str] = &[
    "2026-11-29T14:05:00Z",
    "2026-11-29T14:05:00.123Z",
    "2026-11-29T14:05:00.123456789Z",
    "9999-12-31T23:59:59.999Z",
    "0000-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "2026-02-30T00:00:00Z",
    "2026-11-29 14:05:00",
    "yesterday",
    "2026-11-29T14:05:00+02:00",
    "10000-01-01T00:00:00Z",
];

const EDGE_INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    3,
    600,
    i64::MAX,
    i64::MIN,
    (1 << 53) - 1,
    1 << 53,
    u32::MAX as i64,
    u32::MAX as i64 + 1,
    u64::MAX as i64,
];

const DATETIMES: &[&str] = &["1979-05-27T07:32:00Z", "1979-05-27T00:32:00.999999-07:00", "1979-05-27", "07:32:00"];

/// Arbitrary, spicy, long and odd strings.
fn hostile_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "(?s).{0,40}",
        3 => select(spicy()),
        1 => (select(spicy()), 1usize..300).prop_map(|(s, n)| s.repeat(n)),
        1 => proptest::collection::vec(select(spicy()), 0..6).prop_map(|v| v.concat()),
    ]
    .boxed()
}

fn key_name() -> BoxedStrategy<String> {
    prop_oneof![3 => select(WORDS).prop_map(str::to_string), 1 => hostile_text()].boxed()
}

fn leaf() -> BoxedStrategy<toml::Value> {
    use toml::Value;
    prop_oneof![
        3 => select(WORDS).prop_map(|s| Value::String(s.to_string())),
        1 => select(TIMES).prop_map(|s| Value::String(s.to_string())),
        2 => hostile_text().prop_map(Value::String),
        2 => select(EDGE_INTS).prop_map(Value::Integer),
        1 => any::<i64>().prop_map(Value::Integer),
        1 => any::<f64>().prop_map(Value::Float),
        1 => any::<bool>().prop_map(Value::Boolean),
        1 => select(DATETIMES).prop_map(|s| Value::Datetime(s.parse().expect("a TOML date-time"))),
    ]
    .boxed()
}

/// Any TOML value: scalars of every type, arrays and tables nested a few levels.
fn value() -> BoxedStrategy<toml::Value> {
    leaf()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
                proptest::collection::vec((key_name(), inner), 0..4)
                    .prop_map(|kv| toml::Value::Table(kv.into_iter().collect())),
            ]
        })
        .boxed()
}

/// A structural change of a TOML document: a key (dotted; numbers index arrays) set to a value or removed, or an
/// unknown key added.
#[derive(Debug, Clone)]
enum Edit {
    Set(&'static str, toml::Value),
    Remove(&'static str),
    Extra(String, toml::Value),
}

fn edit(paths: &'static [&'static str]) -> BoxedStrategy<Edit> {
    prop_oneof![
        6 => (select(paths), value()).prop_map(|(p, v)| Edit::Set(p, v)),
        2 => select(paths).prop_map(Edit::Remove),
        1 => (key_name(), value()).prop_map(|(k, v)| Edit::Extra(k, v)),
    ]
    .boxed()
}

fn apply_edit(doc: &mut toml::Value, e: &Edit) {
    let (path, new): (Vec<&str>, Option<toml::Value>) = match e {
        Edit::Set(p, v) => (p.split('.').collect(), Some(v.clone())),
        Edit::Remove(p) => (p.split('.').collect(), None),
        Edit::Extra(k, v) => (vec![k.as_str()], Some(v.clone())),
    };
    let Some((last, init)) = path.split_last() else { return };
    let mut cur = doc;
    for k in init {
        cur = match cur {
            toml::Value::Table(t) => t.entry(k.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new())),
            toml::Value::Array(a) => match k.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(v) => v,
                None => return,
            },
            _ => return,
        };
    }
    match cur {
        toml::Value::Table(t) => match new {
            Some(v) => {
                t.insert(last.to_string(), v);
            }
            None => {
                t.remove(*last);
            }
        },
        toml::Value::Array(a) => {
            if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < a.len()) {
                match new {
                    Some(v) => a[i] = v,
                    None => {
                        a.remove(i);
                    }
                }
            }
        }
        _ => {}
    }
}

/// A change of the bytes of a document.
#[derive(Debug, Clone)]
enum ByteEdit {
    Truncate(Index),
    Insert(Index, Vec<u8>),
    Overwrite(Index, u8),
    /// Append a copy of one line (a duplicate key, a second table header).
    DupLine(Index),
    Prepend(String),
}

/// Byte sequences that break UTF-8 or TOML.
fn spicy_bytes() -> Vec<Vec<u8>> {
    [
        &b"\0"[..],
        b"\xff",
        b"\xc3",
        b"\xed\xa0\x80",
        b"\xef\xbb\xbf",
        b"\xf4\x90\x80\x80",
        b"\r\n",
        b"\r",
        b"\"",
        b"'''",
        b"[",
        b"]]",
        b"=",
        b"\n[claim]\n",
        b"\n[[failures]]\n",
        b"\n[[task]]\n",
        b"\n```\n",
        b"\\u0000",
        b"\\",
    ]
    .iter()
    .map(|b| b.to_vec())
    .collect()
}

/// A line that nests `depth` levels deep: arrays, inline tables, dotted keys or table headers.
fn nesting() -> BoxedStrategy<String> {
    (select(vec!["deps", "labels", "x", "title", "run", "task"]), 1usize..300, 0u8..4)
        .prop_map(|(k, depth, how)| match how {
            0 => format!("{k} = {}1{}\n", "[".repeat(depth), "]".repeat(depth)),
            1 => format!("{k} = {}1{}\n", "{a = ".repeat(depth), "}".repeat(depth)),
            2 => format!("{} = 1\n", vec![k; depth].join(".")),
            _ => format!("[{}]\n", vec![k; depth].join(".")),
        })
        .boxed()
}

fn byte_edit() -> BoxedStrategy<ByteEdit> {
    prop_oneof![
        2 => any::<Index>().prop_map(ByteEdit::Truncate),
        3 => (any::<Index>(), prop_oneof![select(spicy_bytes()), proptest::collection::vec(any::<u8>(), 1..8)])
            .prop_map(|(i, b)| ByteEdit::Insert(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Overwrite(i, b)),
        1 => any::<Index>().prop_map(ByteEdit::DupLine),
        2 => nesting().prop_map(ByteEdit::Prepend),
    ]
    .boxed()
}

fn apply_bytes(mut b: Vec<u8>, edits: &[ByteEdit]) -> Vec<u8> {
    for e in edits {
        match e {
            ByteEdit::Truncate(i) => {
                let at = i.index(b.len() + 1);
                b.truncate(at);
            }
            ByteEdit::Insert(i, x) => {
                let at = i.index(b.len() + 1);
                b.splice(at..at, x.iter().copied());
            }
            ByteEdit::Overwrite(i, x) => {
                if !b.is_empty() {
                    let at = i.index(b.len());
                    b[at] = *x;
                }
            }
            ByteEdit::DupLine(i) => {
                let lines: Vec<Vec<u8>> = b.split(|c| *c == b'\n').map(<[u8]>::to_vec).collect();
                let line = lines[i.index(lines.len())].clone();
                b.push(b'\n');
                b.extend(line);
                b.push(b'\n');
            }
            ByteEdit::Prepend(s) => {
                b.splice(0..0, s.bytes());
            }
        }
    }
    b
}

/// `path` set to values of `v`.
fn typed(path: &'static str, v: impl Strategy<Value = toml::Value> + 'static) -> BoxedStrategy<Edit> {
    v.prop_map(move |v| Edit::Set(path, v)).boxed()
}

fn text_value() -> BoxedStrategy<toml::Value> {
    hostile_text().prop_map(toml::Value::String).boxed()
}

fn int_value(range: std::ops::RangeInclusive<i64>) -> BoxedStrategy<toml::Value> {
    prop_oneof![select(vec![*range.start(), *range.end()]), range].prop_map(toml::Value::Integer).boxed()
}

/// A TOML document: one of `templates` with edits of `paths` (any value: mostly an invalid document) and `benign`
/// edits (a value of the right type: hostile text where text goes, extreme numbers where numbers go, so that the
/// document mostly stays valid), serialized, then sometimes edited as bytes.
fn doc(
    templates: Vec<toml::Table>,
    paths: &'static [&'static str],
    benign: BoxedStrategy<Edit>,
) -> BoxedStrategy<Vec<u8>> {
    // Two in five keep their shape (benign edits only); the others get any edits, and half of them byte edits too.
    let edits = prop_oneof![
        2 => proptest::collection::vec(benign.clone(), 0..4).prop_map(|e| (e, vec![])),
        3 => (
            proptest::collection::vec(prop_oneof![edit(paths), benign], 0..4),
            prop_oneof![Just(vec![]), proptest::collection::vec(byte_edit(), 1..4)],
        ),
    ];
    (select(templates), edits)
        .prop_map(|(t, (edits, bytes))| {
            let mut v = toml::Value::Table(t);
            for e in &edits {
                apply_edit(&mut v, e);
            }
            let text = toml::to_string(&v).unwrap_or_else(|e| format!("# not serializable: {e}\n"));
            apply_bytes(text.into_bytes(), &bytes)
        })
        .boxed()
}

/// A document's bytes: mostly a mutated template, sometimes arbitrary bytes or text.
fn file_bytes(
    templates: Vec<toml::Table>,
    paths: &'static [&'static str],
    benign: BoxedStrategy<Edit>,
) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        8 => doc(templates, paths, benign),
        1 => proptest::collection::vec(any::<u8>(), 0..300),
        1 => hostile_text().prop_map(String::into_bytes),
    ]
    .boxed()
}

fn table_of(v: &impl serde::Serialize) -> toml::Table {
    match toml::Value::try_from(v) {
        Ok(toml::Value::Table(t)) => t,
        other => panic!("not a table: {other:?}"),
    }
}

/// One bad path component (never `/` or NUL, which a tree entry cannot hold).
fn component(mut b: Vec<u8>) -> Vec<u8> {
    for c in &mut b {
        if matches!(*c, b'/' | 0) {
            *c = b'_';
        }
    }
    if b.is_empty() {
        b.push(b'_');
    }
    b
}

// ---------------------------------------------------------------------------------------------------------------
// Task files

fn task_template() -> Task {
    Task {
        id: BAD.into(),
        title: "a hostile neighbour".into(),
        body: "what it says".into(),
        kind: Kind::Work,
        status: Status::Open,
        priority: 1,
        deps: vec![DEP.into()],
        labels: vec!["core".into()],
        parent: None,
        acceptance: "cargo test".into(),
        scope: vec!["src/".into()],
        plan_round: 0,
        attempts: 0,
        epoch: 0,
        created_by: Some("fuzzer".into()),
        created_at: Some(clock()),
        claim: None,
        result: None,
        failures: vec![],
        usage: None,
        claim_usage: None,
    }
}

fn task_templates() -> Vec<toml::Table> {
    let open = task_template();
    let spent = crate::usage::Usage {
        input_tokens: 1200,
        output_tokens: 80,
        cache_read_tokens: 5000,
        cost_usd: crate::usage::Usd::from_dollars(0.0125),
        runs: 1,
    };
    let failure = Failure {
        agent: "carol".into(),
        epoch: 1,
        at: clock(),
        reason: "tests broke".into(),
        usage: Some(spent),
        kept: None,
    };
    let claimed = Task {
        status: Status::Claimed,
        epoch: 2,
        attempts: 1,
        claim: Some(Claim { agent: "bob".into(), epoch: 2, lease_until: clock().plus(LEASE) }),
        failures: vec![failure.clone()],
        usage: Some(spent),
        claim_usage: Some(spent),
        ..open.clone()
    };
    let done = Task {
        status: Status::Done,
        epoch: 1,
        result: Some(TaskResult {
            commit: Some("ab".repeat(20)),
            note: Some("ok".into()),
            agent: Some("bob".into()),
            epoch: Some(1),
            at: Some(clock()),
        }),
        ..open.clone()
    };
    let failed = Task { status: Status::Failed, epoch: 3, attempts: 3, failures: vec![failure; 3], ..open.clone() };
    let cancelled = Task { status: Status::Cancelled, ..open.clone() };
    let plan = Task { kind: Kind::Plan, parent: Some(GOOD.into()), plan_round: 2, ..open.clone() };
    [open, claimed, done, failed, cancelled, plan].iter().map(table_of).collect()
}

const TASK_PATHS: &[&str] = &[
    "id",
    "title",
    "body",
    "kind",
    "status",
    "priority",
    "deps",
    "deps.0",
    "labels",
    "labels.0",
    "parent",
    "acceptance",
    "scope",
    "plan_round",
    "attempts",
    "epoch",
    "created_by",
    "created_at",
    "claim",
    "claim.agent",
    "claim.epoch",
    "claim.lease_until",
    "claim.extra",
    "result",
    "result.commit",
    "result.note",
    "result.agent",
    "result.epoch",
    "result.at",
    "failures",
    "failures.0",
    "failures.0.agent",
    "failures.0.epoch",
    "failures.0.at",
    "failures.0.reason",
];

/// Edits that keep a task valid: hostile text in every text field, numbers at the edges of their range.
fn task_benign() -> BoxedStrategy<Edit> {
    let max_epoch = model::MAX_EPOCH as i64;
    prop_oneof![
        typed("title", text_value()),
        typed("body", text_value()),
        typed("acceptance", text_value()),
        typed("created_by", text_value()),
        typed("result.note", text_value()),
        typed("result.commit", text_value()),
        typed("failures.0.reason", text_value()),
        typed("failures.0.agent", text_value()),
        typed("scope", proptest::collection::vec(text_value(), 0..4).prop_map(toml::Value::Array)),
        typed("priority", int_value(i64::MIN..=i64::MAX)),
        typed("plan_round", int_value(0..=u32::MAX.into())),
        typed("attempts", int_value(0..=u32::MAX.into())),
        typed("epoch", int_value(0..=max_epoch)),
        typed("created_at", select(TIMES).prop_map(|w| toml::Value::String(w.into()))),
    ]
    .boxed()
}

/// A file under `tasks/`.
#[derive(Clone)]
struct TaskCase {
    dir: BString,
    name: BString,
    kind: EntryKind,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for TaskCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskCase")
            .field("dir", &self.dir)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("bytes", &self.bytes.as_bstr())
            .finish()
    }
}

fn task_dir() -> BoxedStrategy<BString> {
    prop_oneof![
        20 => Just(b"tasks/ba".to_vec()),
        3 => Just(b"tasks/done/ba".to_vec()),
        1 => Just(b"tasks/failed/ba".to_vec()),
        1 => Just(b"tasks/cancelled/ba".to_vec()),
        3 => select(vec![
            "tasks",
            "tasks/done",
            "tasks/open/ba",
            "tasks/ba/done",
            "tasks/custom/deeper/still",
            "tasks/ ",
            "tasks/-",
            "tasks/\u{1b}[2J",
            "tasks/\u{202e}ab",
            "tasks/done/...",
            "tasks/con"
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => (1usize..12).prop_map(|n| format!("tasks{}", "/d".repeat(n)).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 1..6).prop_map(|b| [&b"tasks/"[..], &component(b)].concat()),
    ]
    .prop_map(BString::from)
    .boxed()
}

fn task_name() -> BoxedStrategy<BString> {
    let bad_stems = select(vec!["..", ".x", "a b", "é", "t-\u{7}", "t-bad001 ", "T-BAD001", "-", "_", "con", "x.lock"]);
    prop_oneof![
        20 => Just(format!("{BAD}.toml").into_bytes()),
        2 => bad_stems.prop_map(|s| format!("{s}.toml").into_bytes()),
        1 => Just(format!("{}.toml", "x".repeat(65)).into_bytes()),
        1 => hostile_text().prop_map(|s| format!("{s}.toml").into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 1..10).prop_map(|mut b| {
            b.extend_from_slice(b".toml");
            b
        }),
        1 => select(vec!["t-bad001", "t-bad001.TOML", ".toml", "t-bad001.toml.bak", "t-bad001.md"])
            .prop_map(|s| s.as_bytes().to_vec()),
    ]
    .prop_map(|b| BString::from(component(b)))
    .boxed()
}

fn task_case() -> impl Strategy<Value = TaskCase> {
    let kind = prop_oneof![
        16 => Just(EntryKind::Blob),
        1 => Just(EntryKind::BlobExecutable),
        2 => Just(EntryKind::Link),
        1 => Just(EntryKind::Commit),
    ];
    (task_dir(), task_name(), kind, file_bytes(task_templates(), TASK_PATHS, task_benign()))
        .prop_map(|(dir, name, kind, bytes)| TaskCase { dir, name, kind, bytes })
}

/// A task that an op writes must read back as it was (an op writes a hostile but valid task back when it claims it).
fn round_trips(task: &Task) -> Result<(), TestCaseError> {
    let text = toml::to_string(task).map_err(|e| fail(format!("cannot write {task:?}: {e}")))?;
    let back: Task = toml::from_str(&text).map_err(|e| fail(format!("{task:?} was written as {text:?}: {e}")))?;
    prop_assert_eq!(&back, task, "written as {:?}", text);
    prop_assert!(back.validate().is_ok(), "{:?} no longer valid: {:?}", back, back.validate());
    serde_json::to_string(task).map_err(|e| fail(format!("no JSON for {task:?}: {e}")))?;
    Ok(())
}

/// One hostile file under `tasks/` beside the healthy board.
fn check_task(fx: &Fixture, case: &TaskCase) -> Result<(), TestCaseError> {
    let path: BString = [&case.dir[..], b"/", &case.name[..]].concat().into();
    // Not the fixture's own files or folders, nor a twin of them (twins are the subject of tests/hostile.rs).
    for own in [ops::task_path(GOOD), ops::closed_path(Status::Done, DEP)] {
        if own.as_bytes() == &path[..] || own.as_bytes().starts_with(&[&path[..], b"/"].concat()) {
            return Err(TestCaseError::reject("the fixture's own path"));
        }
    }
    if [GOOD, DEP].iter().any(|id| case.name == format!("{id}.toml").as_bytes()) {
        return Err(TestCaseError::reject("a twin of a fixture task"));
    }
    let id = match case.kind {
        EntryKind::Commit => ObjectId::from_hex(GITLINK.as_bytes()).map_err(fail)?,
        _ => fx.blob(&case.bytes)?,
    };
    let commit = fx.craft(&[(path.clone(), Some((case.kind, id)))])?;
    let lossy = path.to_str_lossy().into_owned();
    let full = fx.read(true)?;
    let lazy = fx.read(false)?;
    // A file whose name says it is a task (or whose path is not UTF-8, or too deep) is read or reported; any
    // other file is none of the board's business.
    let must = case.name.ends_with(b".toml") || path.to_str().is_err();
    for snap in [&full, &lazy] {
        if must {
            prop_assert!(
                accounted(snap, &lossy),
                "{lossy:?} is neither on the board nor reported: {:?}",
                snap.problems
            );
        } else {
            prop_assert!(!snap.problems.iter().any(|p| p.path == lossy), "{lossy:?} is not a task file, yet reported");
        }
    }
    for s in full.board.tasks.values() {
        prop_assert!(s.task.validate().is_ok(), "an invalid task on the board: {:?}", s.task);
        round_trips(&s.task)?;
    }
    fx.still_works(commit)?;
    let tip = fx.swarm.tip().map_err(fail)?.ok_or_else(|| fail("the state ref is gone"))?;
    prop_assert_eq!(fx.entry_at(tip, &path), Some((case.kind, id)), "the op changed the hostile entry");
    // A hostile file that is a valid live task can be claimed like any other, and reads back once written.
    if let Some(s) = lazy.board.tasks.values().find(|s| s.path == lossy)
        && s.task.id != GOOD
        && !s.task.status.is_final()
    {
        let id = s.task.id.clone();
        match fx.claim(&id) {
            Ok(_) => {
                let again = fx.read(true)?;
                let t = again.board.tasks.get(&id).ok_or_else(|| fail(format!("{id} vanished once claimed")))?;
                prop_assert_eq!(t.task.status, Status::Claimed);
                prop_assert!(!again.problems.iter().any(|p| p.path == t.path), "{id} no longer reads once claimed");
            }
            Err(TxnError::Domain(_)) => {}
            Err(e) => return Err(fail(format!("claiming the hostile task {id}: {e}"))),
        }
    }
    Ok(())
}

#[test]
fn task_files_fuzzed() {
    let fx = Fixture::new();
    run_cases(256, task_case(), |case| guarded("task", &case.bytes, &case, || check_task(&fx, &case)));
}

/// Where a corpus task file is replayed: a live shard folder, and the folder of done tasks.
fn corpus_task_cases(bytes: &[u8]) -> [TaskCase; 2] {
    ["tasks/ba", "tasks/done/ba"].map(|dir| TaskCase {
        dir: dir.into(),
        name: format!("{BAD}.toml").into(),
        kind: EntryKind::Blob,
        bytes: bytes.to_vec(),
    })
}

#[test]
fn corpus_task_files() {
    let fx = Fixture::new();
    replay("task", |b| {
        corpus_task_cases(b).iter().try_for_each(|c| check_task(&fx, c))?;
        check_task_text(b)
    });
}

/// The parser of task files alone: what reads as a valid task writes back as the same task.
fn check_task_text(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(()) };
    if let Ok(task) = toml::from_str::<Task>(text)
        && task.validate().is_ok()
    {
        round_trips(&task)?;
    }
    Ok(())
}

#[test]
fn task_text_round_trips() {
    run_cases(1000, file_bytes(task_templates(), TASK_PATHS, task_benign()), |b| {
        guarded("task", &b, &b.as_bstr(), || check_task_text(&b))
    });
}

/// The limit of a task file is a limit, not an estimate: a valid file of exactly that size is read, one byte more
/// is reported and not loaded.
#[test]
fn task_files_at_the_size_limit() {
    let fx = Fixture::new();
    let limit = model::MAX_TASK_FILE_BYTES as usize;
    let empty = toml::to_string(&Task { body: String::new(), ..task_template() }).expect("a task file");
    let exact = toml::to_string(&Task { body: "x".repeat(limit - empty.len()), ..task_template() }).expect("a file");
    assert_eq!(exact.len(), limit);
    let path = format!("tasks/ba/{BAD}.toml");
    for (bytes, on_board) in [(exact.clone(), true), (format!("{exact} "), false)] {
        let id = fx.blob(bytes.as_bytes()).expect("a blob");
        let commit = fx.craft(&[(path.as_str().into(), Some((EntryKind::Blob, id)))]).expect("a state");
        let snap = fx.read(true).expect("a board");
        assert_eq!(snap.board.tasks.contains_key(BAD), on_board, "{} bytes: {:?}", bytes.len(), snap.problems);
        if !on_board {
            assert!(snap.problems.iter().any(|p| p.path == path && p.message.contains("limit")), "{:?}", snap.problems);
        }
        fx.still_works(commit).expect("the board works");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// swarm.toml

fn config_templates() -> Vec<toml::Table> {
    let plain = table_of(&Config::default());
    let full: toml::Table = toml::from_str(
        r#"
version = 1
target = "main"
lease = "10m"
max_attempts = 3

[run]
check = "cargo test"
task_timeout = "30m"
plan_timeout = "20m"
conflict_tries = 2
plan_depth = 2
plan_rounds = 5
empty = "fail"

[run.cycle]
max_tasks = 5
max_time = "1h"

[roles.default]
preset = "claude"

[roles.worker]
exec = "my-agent --yes"

[roles.planner]
api = "openai"
model = "m"
base_url = "https://example.com/v1"
max_tokens = 100
temperature = 0.5
"#,
    )
    .expect("a full swarm.toml");
    vec![plain, full]
}

fn config_benign() -> BoxedStrategy<Edit> {
    prop_oneof![
        typed("run.check", text_value()),
        typed("roles.default.exec", text_value()),
        typed("roles.planner.model", text_value()),
        typed("roles.planner.base_url", text_value()),
        typed("max_attempts", int_value(1..=u32::MAX.into())),
        typed("run.cycle.max_tasks", int_value(0..=i64::MAX)),
        typed("run.plan_depth", int_value(0..=u32::MAX.into())),
        typed("extra", value()),
    ]
    .boxed()
}

const CONFIG_PATHS: &[&str] = &[
    "version",
    "target",
    "lease",
    "max_attempts",
    "run",
    "run.check",
    "run.task_timeout",
    "run.plan_timeout",
    "run.conflict_tries",
    "run.plan_depth",
    "run.plan_rounds",
    "run.empty",
    "run.cycle",
    "run.cycle.max_tasks",
    "run.cycle.max_time",
    "roles",
    "roles.default",
    "roles.default.preset",
    "roles.default.exec",
    "roles.default.backend",
    "roles.worker",
    "roles.worker.backend",
    "roles.planner.api",
    "roles.planner.model",
    "roles.planner.temperature",
    "roles.planner.max_tokens",
];

/// `swarm.toml` replaced: it reads and the board works, or the board is read with the newest settings that read
/// (the parent's), the broken file named with its commit, and every op but a repair fails with an error naming
/// `swarm.toml` and the commit.
fn check_config(fx: &Fixture, shape: &Shape) -> Result<(), TestCaseError> {
    let entry = fx.entry(shape)?;
    let good = fx.swarm.read(false).map_err(fail)?;
    let commit = fx.craft(&[("swarm.toml".into(), entry)])?;
    let hex = commit.to_hex().to_string();
    let snap = fx.swarm.read(true).map_err(|e| TestCaseError::fail(format!("a read failed on {shape:?}: {e}")))?;
    match &snap.board.broken_settings {
        None => {
            prop_assert!(matches!(shape, Shape::File(_) | Shape::Exec(_)), "{shape:?} read as settings");
            let config = &snap.board.config;
            prop_assert!(config.validate().is_ok(), "invalid settings accepted: {config:?}");
            // The runner's own tables: read or refused, never a panic.
            let _ = RunSettings::from_config(config);
            for role in [Role::Worker, Role::Planner, Role::Judge] {
                let _ = backend_for(config, role);
            }
            fx.still_works(commit)?;
        }
        Some(b) => {
            let shown = b.problem.to_string();
            prop_assert_eq!(b.problem.path.as_str(), "swarm.toml");
            prop_assert_eq!(&b.problem.commit, &hex);
            prop_assert!(!b.problem.message.is_empty());
            prop_assert!(!shown.chars().any(char::is_control), "a problem with control characters: {shown:?}");
            prop_assert!(snap.problems.contains(&b.problem), "the broken file is not among the problems");
            // The board shows the newest settings that read: those of the commit before.
            prop_assert_eq!(&snap.board.config, &good.board.config);
            // (The commit before may be a broken one of an earlier case: then its own fallback.)
            let want = match &good.board.broken_settings {
                Some(before) => before.fallback.clone(),
                None => Some(good.commit.to_hex().to_string()),
            };
            prop_assert_eq!(&b.fallback, &want);
            // Without settings no op can be judged: ops stop with an error naming the file and the commit.
            match fx.claim(GOOD) {
                Ok(c) => prop_assert!(false, "an op went through with a broken swarm.toml: {:?}", c.commit),
                Err(e @ TxnError::BrokenSettings { .. }) => {
                    let shown = e.to_string();
                    prop_assert!(shown.contains("swarm.toml") && shown.contains(&hex[..12]), "{shown:?}");
                }
                Err(other) => prop_assert!(false, "not an error about swarm.toml: {other}"),
            }
        }
    }
    Ok(())
}

#[test]
fn swarm_toml_fuzzed() {
    let fx = Fixture::new();
    let shapes = shape(file_bytes(config_templates(), CONFIG_PATHS, config_benign()));
    run_cases(160, shapes, |s| guarded("swarm_toml", s.bytes(), &s, || check_config(&fx, &s)));
}

#[test]
fn corpus_swarm_toml() {
    let fx = Fixture::new();
    replay("swarm_toml", |b| check_config(&fx, &Shape::File(b.to_vec())));
}

#[test]
fn swarm_toml_at_the_size_limit() {
    let fx = Fixture::new();
    let limit = model::MAX_CONFIG_BYTES as usize;
    let head = "version = 1\n# ";
    let exact = format!("{head}{}\n", "x".repeat(limit - head.len() - 1));
    assert_eq!(exact.len(), limit);
    check_config(&fx, &Shape::File(exact.clone().into_bytes())).expect("a file at the limit");
    assert!(fx.read(true).is_ok(), "a swarm.toml of exactly the limit is read");
    check_config(&fx, &Shape::File(format!("{exact} ").into_bytes())).expect("a file over the limit");
    let over = fx.read(true).expect("the board is read all the same");
    assert!(over.board.broken_settings.is_some(), "a swarm.toml over the limit is not taken");
}

// ---------------------------------------------------------------------------------------------------------------
// cycles/<n>.toml

fn valid_cycle() -> CycleRecord {
    CycleRecord {
        cycle: 1,
        verdict: Verdict::Continue,
        reasons: "more to do".into(),
        by: "judge-1".into(),
        at: clock(),
        tasks_done: 3,
        tasks_failed: 1,
        usage: Some(crate::usage::Usage { input_tokens: 10, output_tokens: 5, runs: 1, ..Default::default() }),
        spent: None,
    }
}

fn cycle_templates() -> Vec<toml::Table> {
    let stop = CycleRecord { cycle: 2, verdict: Verdict::Stop, reasons: "all done".into(), ..valid_cycle() };
    vec![table_of(&valid_cycle()), table_of(&stop)]
}

fn cycle_benign() -> BoxedStrategy<Edit> {
    prop_oneof![
        typed("reasons", text_value()),
        typed("by", text_value()),
        typed("tasks_done", int_value(0..=i64::MAX)),
        typed("cycle", int_value(0..=i64::MAX)),
    ]
    .boxed()
}

const CYCLE_PATHS: &[&str] = &["cycle", "verdict", "reasons", "by", "at", "tasks_done", "tasks_failed"];

/// A file in `cycles/` (or, with `folder`, `cycles` itself replaced) beside a valid `cycles/1.toml`.
#[derive(Debug, Clone)]
struct CycleCase {
    name: BString,
    shape: Shape,
    folder: bool,
}

fn cycle_case() -> impl Strategy<Value = CycleCase> {
    let odd = [
        "0.toml",
        "2.toml",
        "18446744073709551615.toml",
        "18446744073709551614.toml",
        "18446744073709551616.toml",
        "-1.toml",
        "+2.toml",
        "007.toml",
        "01.toml",
        "2.TOML",
        "2",
        "1e3.toml",
        " 2.toml",
        "2.toml.bak",
        "٣.toml",
    ];
    let name = prop_oneof![
        3 => (2u64..1000).prop_map(|n| format!("{n}.toml").into_bytes()),
        3 => select(odd.to_vec()).prop_map(|s| s.as_bytes().to_vec()),
        1 => hostile_text().prop_map(|s| format!("{s}.toml").into_bytes()),
    ]
    .prop_map(|b| BString::from(component(b)));
    (name, shape(file_bytes(cycle_templates(), CYCLE_PATHS, cycle_benign())), proptest::bool::weighted(0.05))
        .prop_map(|(name, shape, folder)| CycleCase { name, shape, folder })
}

/// The last cycle: the highest-numbered record when it reads; a file that is no record, or numbered below the valid
/// one, changes nothing. Never a panic, and the board works.
fn check_cycle(fx: &Fixture, case: &CycleCase) -> Result<(), TestCaseError> {
    if case.name == "1.toml" {
        return Err(TestCaseError::reject("the valid record's name"));
    }
    let valid = valid_cycle();
    let valid_blob = fx.blob(toml::to_string(&valid).map_err(fail)?.as_bytes())?;
    let hostile = fx.entry(&case.shape)?;
    let edits: Vec<(BString, Option<(EntryKind, ObjectId)>)> = if case.folder {
        vec![("cycles".into(), hostile)]
    } else {
        vec![
            ("cycles/1.toml".into(), Some((EntryKind::Blob, valid_blob))),
            ([&b"cycles/"[..], &case.name[..]].concat().into(), hostile),
        ]
    };
    let commit = fx.craft(&edits)?;
    let last = runner::last_cycle(fx.swarm.store(), commit);
    let n = case.name.to_str().ok().and_then(|s| s.strip_suffix(".toml")).and_then(|s| s.parse::<u64>().ok());
    let is_file = matches!(case.shape, Shape::File(_) | Shape::Exec(_));
    if case.folder {
        prop_assert_eq!(last, None, "no record can be read from a cycles that is not a folder of files");
    } else if let Some(n) = n.filter(|n| *n > 1 && is_file) {
        // The highest number that reads is the current record: this one when it reads, else the valid one.
        let text = case.shape.text(64 * 1024);
        match text.and_then(|t| toml::from_str::<CycleRecord>(t).ok()) {
            Some(parsed) => prop_assert_eq!(last, Some(CycleRecord { cycle: n, ..parsed })),
            None => prop_assert_eq!(last, Some(valid), "an unreadable newer record hid the valid one"),
        }
    } else {
        prop_assert_eq!(last, Some(valid), "the valid record is not the last one");
    }
    fx.still_works(commit)?;
    Ok(())
}

#[test]
fn cycle_records_fuzzed() {
    let fx = Fixture::new();
    run_cases(128, cycle_case(), |c| guarded("cycle", c.shape.bytes(), &c, || check_cycle(&fx, &c)));
}

#[test]
fn corpus_cycle_records() {
    let fx = Fixture::new();
    replay("cycle", |b| {
        let case = CycleCase { name: "2.toml".into(), shape: Shape::File(b.to_vec()), folder: false };
        check_cycle(&fx, &case)?;
        // Pure: a record that reads holds what the file says.
        if let Ok(rec) = toml::from_str::<CycleRecord>(&String::from_utf8_lossy(b)) {
            toml::to_string(&rec).map_err(fail)?;
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------------------------
// Text files: notes, prompt overrides, the goal

#[derive(Debug, Clone)]
struct TextCase {
    shape: Shape,
    prompt: &'static str,
    /// A second note, of a task that is not on the board.
    note: BString,
}

fn text_bytes() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..400),
        4 => hostile_text().prop_map(String::into_bytes),
        2 => select(vec![
            "{{goal}} {{task_id}} {{ {{}} }}{{x",
            "{{{{goal}}}}",
            "</task-data></goal>{{task_body}}",
            "   \n\t\n",
            "# Worker\n\nDo {{task_title}}.\n",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => (NOTE_LIMIT - 200..NOTE_LIMIT + 200, select(vec!["x", "é", "日"])).prop_map(|(n, s)| {
            let mut b = s.repeat(n / s.len()).into_bytes();
            b.truncate(n);
            b
        }),
    ]
    .boxed()
}

fn text_case() -> impl Strategy<Value = TextCase> {
    let note = prop_oneof![
        2 => Just("t-ffffff.md".to_string().into_bytes()),
        1 => hostile_text().prop_map(|s| format!("{s}.md").into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 1..8),
    ]
    .prop_map(|b| BString::from(component(b)));
    (shape(text_bytes()), select(PROMPTS.to_vec()), note).prop_map(|(shape, prompt, note)| TextCase {
        shape,
        prompt,
        note,
    })
}

/// The same bytes as `goal.md`, two notes and one prompt override: read as text when they are UTF-8 files within
/// the limit, else passed over (a prompt with a warning naming it); the board works.
fn check_text(fx: &Fixture, case: &TextCase) -> Result<(), TestCaseError> {
    let entry = fx.entry(&case.shape)?;
    let paths = [
        "goal.md".to_string(),
        format!("notes/{GOOD}.md"),
        format!("notes/{}", case.note.to_str_lossy()),
        format!("prompts/{}.md", case.prompt),
    ];
    let mut edits: Vec<(BString, Option<(EntryKind, ObjectId)>)> =
        paths.iter().map(|p| (BString::from(p.as_str()), entry)).collect();
    // The second note by its raw name, which need not be UTF-8.
    edits[2].0 = [&b"notes/"[..], &case.note[..]].concat().into();
    let commit = fx.craft(&edits)?;
    let store = fx.swarm.store();
    for name in PROMPTS {
        let (text, warning) = prompts::load(store, commit, name);
        let builtin = prompts::builtin(name).ok_or_else(|| fail(format!("no built-in {name} prompt")))?;
        let path = format!("prompts/{name}.md");
        match case.shape.text(PROMPT_LIMIT) {
            _ if name != case.prompt => prop_assert_eq!((text.as_str(), warning), (builtin, None)),
            Some(t) if !t.trim().is_empty() => prop_assert_eq!((text.as_str(), warning), (t, None)),
            _ if matches!(case.shape, Shape::Missing) => prop_assert_eq!((text.as_str(), warning), (builtin, None)),
            _ => {
                prop_assert_eq!(text.as_str(), builtin);
                prop_assert!(warning.as_ref().is_some_and(|w| w.contains(&path)), "{warning:?} does not name {path}");
            }
        }
    }
    let goal = runner::goal(store, commit);
    prop_assert_eq!(goal.as_deref(), case.shape.text(GOAL_LIMIT));
    let snap = fx.read(false)?;
    let handoffs = runner::handoffs(store, &snap, None, 60_000);
    let head = format!("## {GOOD}: task {GOOD}");
    match case.shape.text(NOTE_LIMIT) {
        Some(t) if t.trim().len() < 25_000 => {
            prop_assert!(handoffs.contains(&head) && handoffs.contains(t.trim()), "the note is not in {handoffs:?}");
        }
        Some(_) => {}
        None => prop_assert!(!handoffs.contains(&head), "an unreadable note was handed off: {handoffs:?}"),
    }
    prop_assert_eq!(runner::handoffs(store, &snap, Some("t-nobody"), 60_000), "(none yet)");
    let _ = prompts::render(&String::from_utf8_lossy(case.shape.bytes()), &[("goal", "G"), ("task_id", GOOD)]);
    fx.still_works(commit)?;
    Ok(())
}

#[test]
fn text_files_fuzzed() {
    let fx = Fixture::new();
    run_cases(128, text_case(), |c| guarded("text", c.shape.bytes(), &c, || check_text(&fx, &c)));
}

#[test]
fn corpus_text_files() {
    let fx = Fixture::new();
    replay("text", |b| {
        PROMPTS.iter().try_for_each(|prompt| {
            check_text(&fx, &TextCase { shape: Shape::File(b.to_vec()), prompt, note: "t-ffffff.md".into() })
        })
    });
}

#[test]
fn text_files_at_their_size_limits() {
    let fx = Fixture::new();
    for n in [NOTE_LIMIT, NOTE_LIMIT + 1, PROMPT_LIMIT, PROMPT_LIMIT + 1] {
        let case = TextCase { shape: Shape::File(vec![b'x'; n]), prompt: "judge", note: "t-ffffff.md".into() };
        check_text(&fx, &case).unwrap_or_else(|e| panic!("{n} bytes: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// `git push --porcelain`

fn check_porcelain(out: &str) -> Result<(), TestCaseError> {
    let lines = parse_porcelain(out);
    prop_assert!(lines.len() <= out.lines().count());
    for l in &lines {
        prop_assert!(matches!(l.flag, ' ' | '+' | '-' | '*' | '!' | '='), "{l:?}");
        prop_assert!(!l.from.contains(':') && !l.from.contains('\t') && !l.to.contains('\t'), "{l:?}");
    }
    // Classified for the refs it names, and for one it does not.
    let mut refs: Vec<&str> = lines.iter().map(|l| l.to.as_str()).collect();
    refs.push(REF);
    let ok = |l: &PushLine| matches!(l.flag, ' ' | '+' | '*' | '=');
    let first = |r: &str| lines.iter().find(|l| l.to == r);
    for success in [true, false] {
        let res = classify("https://user:secret@example.com/r.git", refs.iter().copied(), &lines, success, out);
        let seen: Vec<&PushLine> = refs.iter().filter_map(|r| first(r)).collect();
        match &res {
            Ok(crate::Publish::Done) => {
                prop_assert!(success && !seen.is_empty() && seen.iter().all(|l| ok(l)), "{res:?} for {lines:?}");
            }
            Ok(crate::Publish::LostRace(_)) => {
                prop_assert!(seen.iter().any(|l| !ok(l)), "{res:?} for {lines:?}");
            }
            Err(RemoteError::Refused { refname, .. }) => {
                // Every ref refused is named (`a and b`: ref names hold no space).
                for r in refname.split(" and ") {
                    prop_assert!(first(r).is_some_and(|l| !ok(l)), "{res:?} for {lines:?}");
                }
            }
            Err(RemoteError::Unreachable { .. }) => prop_assert!(!success || seen.is_empty(), "{res:?} for {lines:?}"),
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
        if let Err(e) = &res
            && !out.contains("secret")
        {
            prop_assert!(!e.to_string().contains("secret"), "a credential in {e}");
        }
    }
    Ok(())
}

fn push_line() -> impl Strategy<Value = PushLine> {
    let flag = select(vec![' ', '+', '-', '*', '!', '=']);
    let summary = prop_oneof![
        select(vec!["[rejected]", "[remote rejected]", "[new reference]", "[up to date]", "abc..def", "[deleted]"])
            .prop_map(str::to_string),
        "[^(\n\r]{0,20}",
    ];
    let reason = proptest::option::of(prop_oneof![
        select(vec!["stale info", "fetch first", "incorrect old value provided", "pre-receive hook declined"])
            .prop_map(str::to_string),
        "[^\n\r]{0,20}",
    ]);
    (flag, "[^:\t\n\r]{0,12}", "[^\t\n\r]{0,30}", summary, reason)
        .prop_map(|(flag, from, to, summary, reason)| PushLine { flag, from, to, summary, reason })
}

fn porcelain_output() -> impl Strategy<Value = (Vec<PushLine>, String)> {
    proptest::collection::vec(push_line(), 0..5).prop_map(|lines| {
        let mut out = String::from("To /srv/r.git\n");
        for l in &lines {
            let reason = l.reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default();
            out.push_str(&format!("{}\t{}:{}\t{}{reason}\n", l.flag, l.from, l.to, l.summary));
        }
        out.push_str("Done\n");
        (lines, out)
    })
}

#[test]
fn porcelain_fuzzed() {
    run_cases(1000, prop_oneof![any::<String>(), hostile_text()], |s| {
        guarded("porcelain", s.as_bytes(), &s, || check_porcelain(&s))
    });
    // Well-formed output reads back line for line.
    run_cases(500, porcelain_output(), |(lines, out)| {
        guarded("porcelain", out.as_bytes(), &out, || {
            prop_assert_eq!(&parse_porcelain(&out), &lines);
            check_porcelain(&out)
        })
    });
}

#[test]
fn corpus_porcelain() {
    replay("porcelain", |b| check_porcelain(&String::from_utf8_lossy(b)));
}

// ---------------------------------------------------------------------------------------------------------------
// Planner output

/// A board with the plan the proposals go under.
fn plan_board() -> Board {
    let plan = Task {
        id: "t-p1a000".into(),
        kind: Kind::Plan,
        status: Status::Claimed,
        epoch: 1,
        deps: vec![],
        claim: Some(Claim { agent: "planner-1".into(), epoch: 1, lease_until: clock().plus(LEASE) }),
        ..task_template()
    };
    let mut b = Board::default();
    b.tasks.insert(plan.id.clone(), Stored { path: ops::task_path(&plan.id), task: plan });
    b.closed.insert(DEP.into(), Closed { status: Status::Done, path: ops::closed_path(Status::Done, DEP) });
    b
}

/// What a planner proposes is checked, and what gets filed from it reads back.
fn check_proposals(out: &str) -> Result<(), TestCaseError> {
    let proposals = match parse_proposals(out) {
        Err(e) => {
            prop_assert!(!e.is_empty());
            return Ok(());
        }
        Ok(None) => return Ok(()),
        Ok(Some(p)) => p,
    };
    prop_assert!(out.to_ascii_lowercase().contains("```toml"), "proposals without a toml block");
    let mut keys = std::collections::BTreeSet::new();
    for p in &proposals {
        let title = p.title.trim();
        prop_assert!(!title.is_empty() && !title.contains('\n') && title.len() <= model::MAX_TITLE_LEN, "{p:?}");
        prop_assert!(p.labels.iter().all(|l| model::validate_label(l).is_ok()), "{p:?}");
        if let Some(k) = &p.key {
            prop_assert!(keys.insert(k.clone()), "key {k:?} twice");
        }
    }
    let board = plan_board();
    let Ok((news, _)) = to_new_tasks(&board, "t-p1a000", &proposals, true, &mut crate::ops::mint_id) else {
        return Ok(());
    };
    let now = clock();
    if let Ok((change, tasks)) = ops::add(&board, &Actor { agent: "planner-1".into(), now }, news, &mut ops::mint_id) {
        prop_assert_eq!(tasks.len(), proposals.len());
        for w in &change.writes {
            prop_assert!(w.task.validate().is_ok(), "filed an invalid task: {:?} {:?}", w.task, w.task.validate());
            round_trips(&w.task)?;
        }
    }
    Ok(())
}

fn proposal_templates() -> Vec<toml::Table> {
    let two: toml::Table = toml::from_str(
        r#"
[[task]]
key = "a"
title = "Write the parser"
body = "Parse the format.\nSee the docs."
acceptance = "cargo test parser"
scope = ["src/parse.rs"]
kind = "work"
priority = 2
labels = ["core"]

[[task]]
key = "b"
title = "Plan the docs"
kind = "plan"
deps = ["a", "t-dee000"]
"#,
    )
    .expect("a proposal block");
    vec![two, toml::Table::new()]
}

fn proposal_benign() -> BoxedStrategy<Edit> {
    prop_oneof![
        typed("task.0.title", text_value()),
        typed("task.0.body", text_value()),
        typed("task.0.acceptance", text_value()),
        typed("task.0.scope", proptest::collection::vec(text_value(), 0..4).prop_map(toml::Value::Array)),
        typed("task.1.title", text_value()),
        typed("task.1.key", text_value()),
        typed("task.0.priority", int_value(i64::MIN..=i64::MAX)),
    ]
    .boxed()
}

const PROPOSAL_PATHS: &[&str] = &[
    "task",
    "task.0",
    "task.0.key",
    "task.0.title",
    "task.0.body",
    "task.0.acceptance",
    "task.0.scope",
    "task.0.kind",
    "task.0.priority",
    "task.0.deps",
    "task.0.labels",
    "task.0.labels.0",
    "task.1.key",
    "task.1.title",
    "task.1.deps",
    "task.1.deps.0",
    "task.1.kind",
];

/// Agent output around a block: chatter, a fence (well-formed or not), the block, chatter; sometimes the prompt's
/// example echoed first.
fn agent_output(block: BoxedStrategy<Vec<u8>>) -> BoxedStrategy<String> {
    let chatter = prop_oneof![3 => "[a-zA-Z ,.]{0,40}", 1 => hostile_text()];
    let open = select(vec!["```toml", "```TOML", "```toml ", "```toml\r", "``` toml", "~~~toml", "```toml x", "```"]);
    let close = select(vec!["```", "", "````", "  ```", "```toml"]);
    (chatter.clone(), open, block, close, chatter, any::<bool>())
        .prop_map(|(pre, open, body, close, post, echo)| {
            let body = String::from_utf8_lossy(&body);
            let one = format!("{pre}\n{open}\n{body}\n{close}\n{post}");
            if echo { format!("```toml\n[[task]]\ntitle = \"example\"\n```\n{one}") } else { one }
        })
        .boxed()
}

#[test]
fn proposals_fuzzed() {
    let outputs = prop_oneof![
        6 => agent_output(file_bytes(proposal_templates(), PROPOSAL_PATHS, proposal_benign())),
        1 => any::<String>(),
        1 => hostile_text(),
    ];
    run_cases(1000, outputs, |s| guarded("proposals", s.as_bytes(), &s, || check_proposals(&s)));
}

#[test]
fn corpus_proposals() {
    replay("proposals", |b| check_proposals(&String::from_utf8_lossy(b)));
}

// ---------------------------------------------------------------------------------------------------------------
// Judge output

fn check_verdict(out: &str) -> Result<(), TestCaseError> {
    if let Some((_, reasons)) = parse_verdict(out) {
        prop_assert!(out.to_ascii_lowercase().contains("verdict"), "a verdict from nowhere");
        prop_assert!(reasons.len() <= out.len());
    }
    Ok(())
}

/// Judge output that ends with a verdict line, with the reasons on the line before.
fn verdict_output() -> impl Strategy<Value = (Verdict, String, String)> {
    let chatter = proptest::collection::vec("[a-zA-Z ,.]{0,40}", 0..4);
    let prefix = select(vec!["verdict: ", "Verdict: ", "**Verdict:** ", "  verdict:", "**verdict: ", "verdict:\t"]);
    let word = prop_oneof![
        select(vec!["stop", "STOP", "Stop.", "**stop**", "stop!"]).prop_map(|w| (Verdict::Stop, w)),
        select(vec!["continue", "Continue.", "CONTINUE", "`continue`"]).prop_map(|w| (Verdict::Continue, w)),
    ];
    (chatter.clone(), "[^\n\r]{0,40}", prefix, word, chatter).prop_map(|(pre, reasons, prefix, (v, w), post)| {
        let out = format!("{}\nreasons: {reasons}\n{prefix}{w}\n{}", pre.join("\n"), post.join("\n"));
        (v, reasons.trim().to_string(), out)
    })
}

#[test]
fn verdicts_fuzzed() {
    let line = prop_oneof!["[^\n]{0,20}", Just("verdict: stop".to_string()), Just("reasons:".to_string())];
    let outputs = prop_oneof![
        2 => agent_output(hostile_text().prop_map(String::into_bytes).boxed()),
        2 => any::<String>(),
        2 => hostile_text(),
        1 => proptest::collection::vec(line, 0..6).prop_map(|l| l.join("\n")),
    ];
    run_cases(1000, outputs, |s| guarded("verdict", s.as_bytes(), &s, || check_verdict(&s)));
    run_cases(300, verdict_output(), |(v, reasons, out)| {
        guarded("verdict", out.as_bytes(), &out, || {
            prop_assert_eq!(parse_verdict(&out), Some((v, reasons.clone())));
            check_verdict(&out)
        })
    });
}

#[test]
fn corpus_verdicts() {
    replay("verdict", |b| check_verdict(&String::from_utf8_lossy(b)));
}

// ---------------------------------------------------------------------------------------------------------------
// Commit messages of the state ref (the audit log)

#[test]
fn log_entries_fuzzed() {
    let messages = prop_oneof![
        any::<String>(),
        hostile_text(),
        proptest::collection::vec(
            prop_oneof![
                select(vec!["Swarm-Op", "Swarm-Task", "Swarm-Agent", "Swarm-Epoch", "swarm-op"])
                    .prop_flat_map(|k| hostile_text().prop_map(move |v| format!("{k}: {v}"))),
                hostile_text(),
            ],
            0..8
        )
        .prop_map(|l| l.join("\n")),
    ];
    run_cases(500, messages, |msg| {
        guarded("log", msg.as_bytes(), &msg, || {
            let e = LogEntry::parse("c".into(), clock(), &msg);
            prop_assert_eq!(e.summary.as_str(), msg.lines().next().unwrap_or_default());
            Ok(())
        })
    });
}

// ---------------------------------------------------------------------------------------------------------------
// Known issues

/// Put `entry` at `path` under the tree `tree`, writing every tree on the way without gix's name checks (as
/// `git hash-object --literally`, or a server without `receive.fsckObjects`, lets a tree through).
fn put_raw(repo: &gix::Repository, tree: ObjectId, path: &[&[u8]], entry: (EntryKind, ObjectId)) -> ObjectId {
    let mut t: gix::objs::Tree = repo.find_tree(tree).expect("a tree").decode().expect("a tree").into();
    let (name, rest) = path.split_first().expect("a path");
    let pos = t.entries.iter().position(|e| e.filename == *name);
    let new = if rest.is_empty() {
        entry
    } else {
        let sub = pos.map(|i| t.entries[i].oid).unwrap_or_else(|| ObjectId::empty_tree(repo.object_hash()));
        (EntryKind::Tree, put_raw(repo, sub, rest, entry))
    };
    let e = gix::objs::tree::Entry { mode: new.0.into(), filename: (*name).into(), oid: new.1 };
    match pos {
        Some(i) => t.entries[i] = e,
        None => t.entries.push(e),
    }
    t.entries.sort();
    repo.write_object(&t).expect("write a tree").detach()
}

/// A tree entry named `.git`, `.` or `..` — which git itself lets through a push unless the server runs
/// `receive.fsckObjects` — is read past, and ops still work: `Store::write` uses gix's raw tree editor, which does
/// not re-check the names of entries it carries along (gix's checked editor refused them and blocked every op).
#[test]
fn a_dot_git_entry_does_not_block_ops() {
    let fx = Fixture::new();
    let blob = fx.blob(b"x").expect("a blob");
    let mut failed = Vec::new();
    for path in [&[&b".git"[..]][..], &[b"tasks", b"."], &[b"tasks", b"ba", b".."], &[b"tasks", b"GIT~1"]] {
        let tip = fx.swarm.tip().expect("a tip").expect("a swarm");
        let tree = put_raw(fx.repo(), fx.base_tree, path, (EntryKind::Blob, blob));
        let sig = gix::actor::Signature {
            name: "rogue".into(),
            email: "rogue@example.com".into(),
            time: gix::date::Time { seconds: NOW_SECS as i64, offset: 0 },
        };
        let commit = gix::objs::Commit {
            tree,
            parents: [tip].into_iter().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: "rogue edit".into(),
            extra_headers: vec![],
        };
        let commit = fx.repo().write_object(&commit).expect("a commit").detach();
        fx.swarm.store().set_ref(REF, commit, "fuzz").expect("move the ref");
        let shown = path.iter().map(|c| c.to_str_lossy().into_owned()).collect::<Vec<_>>().join("/");
        if let Err(e) = fx.still_works(commit) {
            failed.push(format!("{shown}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The record with the highest number that reads counts: a broken `cycles/<n+1>.toml` pushed by anyone must not make
/// the runners forget the judge's `stop` (they would start again, and the judge would overwrite `cycles/1.toml`).
#[test]
fn an_unreadable_newest_cycle_record_does_not_hide_a_stop() {
    let fx = Fixture::new();
    let stop = CycleRecord { cycle: 3, verdict: Verdict::Stop, ..valid_cycle() };
    let good = fx.blob(toml::to_string(&stop).expect("a record").as_bytes()).expect("a blob");
    let bad = fx.blob(b"not a record").expect("a blob");
    let commit = fx
        .craft(&[
            ("cycles/3.toml".into(), Some((EntryKind::Blob, good))),
            ("cycles/4.toml".into(), Some((EntryKind::Blob, bad))),
        ])
        .expect("a state");
    assert_eq!(runner::last_cycle(fx.swarm.store(), commit), Some(stop));
}
