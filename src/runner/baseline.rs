//! The check's runs, kept by commit: what a run of the check said on a commit (`crate::check::CheckRun`), read
//! from its exit status and its JUnit report (`[run] check_report`), and kept under the clone's cache folder so
//! that the target's own run — the baseline a failing change is compared with (`[run] check_baseline`) — costs one
//! run per target commit and clone, not one per landing. A change that lands becomes the target's tip: its own run
//! is then the next landing's baseline.
//!
//! The results are keyed by the commit and by the check (its command and report path): another check is another
//! result. They are this clone's, never shared through the state ref (anyone can push that).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gix::ObjectId;

use crate::check::{CheckRun, TestState};

/// The most bytes of reports one run reads (a report past it is not used: the exit status still counts).
const MAX_REPORT_BYTES: usize = 64 * 1024 * 1024;

/// Where one check's runs are kept: `<cache folder>/checks/<commit>-<key of the check>.json`.
pub(super) struct Kept {
    dir: PathBuf,
    key: String,
}

impl Kept {
    pub(super) fn new(base: &Path, cmd: &str, report: Option<&str>) -> Kept {
        // FNV-1a of what makes two checks different: a stable name across builds.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in cmd.bytes().chain([0]).chain(report.unwrap_or_default().bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Kept { dir: base.join("checks"), key: format!("{h:016x}") }
    }

    fn path(&self, commit: ObjectId) -> PathBuf {
        self.dir.join(format!("{commit}-{}.json", self.key))
    }

    /// The run kept for `commit`, if any (a damaged file is no run).
    pub(super) fn get(&self, commit: ObjectId) -> Option<CheckRun> {
        let text = crate::agent::files::read_text(&self.path(commit), MAX_REPORT_BYTES)?;
        serde_json::from_str(&text).ok()
    }

    /// Keep `run` for `commit` (best effort: a run not kept is run again).
    pub(super) fn put(&self, commit: ObjectId, run: &CheckRun) {
        if std::fs::create_dir_all(&self.dir).is_ok()
            && let Ok(text) = serde_json::to_string(run)
        {
            let _ = crate::agent::files::write(&self.path(commit), text);
        }
    }
}

/// The tests of the report at `report` in the work tree `wt` after a run (a tree made afresh for the run: nothing
/// of an earlier one is there): `Ok(None)` when the run wrote none, `Err` when what it wrote cannot be used (then
/// only the exit status counts). Read as an agent's files are (`agent::files`: no link followed at any component,
/// regular files only, bounded): the check runs the change's code.
pub(super) fn read_report(wt: &Path, report: &str) -> Result<Option<BTreeMap<String, TestState>>, String> {
    let root = crate::agent::files::Dir::open(wt).map_err(|e| e.to_string())?;
    let rel = Path::new(report.trim_start_matches("./"));
    let (folder, files): (crate::agent::files::Dir, Vec<PathBuf>) = match root.dir(rel) {
        Ok(dir) => {
            let mut f: Vec<PathBuf> = dir
                .entries()
                .map_err(|e| format!("{report}: {e}"))?
                .into_iter()
                .filter(|e| e.kind == crate::agent::files::Kind::File)
                .map(|e| PathBuf::from(e.name))
                .filter(|p| p.extension().is_some_and(|x| x == "xml"))
                .collect();
            f.sort();
            if f.is_empty() {
                return Ok(None);
            }
            (dir, f)
        }
        Err(e) if e.is_missing() => return Ok(None),
        Err(_) => {
            let parent = rel.parent().unwrap_or(Path::new(""));
            let name = rel.file_name().map(PathBuf::from).ok_or_else(|| format!("{report}: not a file"))?;
            match root.dir(parent) {
                Ok(d) if d.kind(name.as_os_str()).is_some() => (d, vec![name]),
                Ok(_) => return Ok(None),
                Err(e) if e.is_missing() => return Ok(None),
                Err(e) => return Err(e.to_string()),
            }
        }
    };
    let mut tests = BTreeMap::new();
    let mut left = MAX_REPORT_BYTES;
    for f in files {
        let shown = Path::new(report).join(&f).display().to_string();
        let (bytes, more) = folder.read(&f, left).map_err(|e| e.to_string())?;
        if more {
            return Err(format!("{shown}: the reports are larger than {MAX_REPORT_BYTES} bytes; not read"));
        }
        left = left.saturating_sub(bytes.len());
        crate::check::parse_junit(&String::from_utf8_lossy(&bytes), &mut tests).map_err(|e| format!("{shown}: {e}"))?;
    }
    Ok(Some(tests))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_kept_by_commit_and_check() {
        let dir = tempfile::tempdir().expect("dir");
        let commit = ObjectId::empty_tree(gix::hash::Kind::Sha1);
        let a = Kept::new(dir.path(), "pytest -q", Some("junit.xml"));
        let b = Kept::new(dir.path(), "pytest -q", None);
        assert_eq!(a.get(commit), None);
        let run =
            CheckRun { passed: false, tests: Some([("t::a".to_string(), TestState::Failed)].into()), failed: Some(1) };
        a.put(commit, &run);
        assert_eq!(a.get(commit), Some(run));
        assert_eq!(b.get(commit), None, "another check is another result");
        std::fs::write(a.path(commit), "{ damaged").expect("write");
        assert_eq!(a.get(commit), None);
    }

    #[test]
    fn a_report_is_a_file_or_a_folder_of_xml_and_never_a_stale_one() {
        let wt = tempfile::tempdir().expect("dir");
        let xml = r#"<testsuite name="s"><testcase name="a"/><testcase name="b"><failure/></testcase></testsuite>"#;
        assert_eq!(read_report(wt.path(), "junit.xml"), Ok(None));
        std::fs::write(wt.path().join("junit.xml"), xml).expect("write");
        let t = read_report(wt.path(), "junit.xml").expect("read").expect("a report");
        assert_eq!((t.get("s::a"), t.get("s::b")), (Some(&TestState::Passed), Some(&TestState::Failed)));
        std::fs::remove_file(wt.path().join("junit.xml")).expect("rm");
        assert_eq!(read_report(wt.path(), "junit.xml"), Ok(None));
        // A folder: every *.xml in it.
        let dir = wt.path().join("reports");
        std::fs::create_dir(&dir).expect("dir");
        std::fs::write(dir.join("one.xml"), xml).expect("write");
        std::fs::write(dir.join("two.xml"), r#"<testsuite name="u"><testcase name="c"/></testsuite>"#).expect("w");
        std::fs::write(dir.join("notes.txt"), "not a report").expect("write");
        let t = read_report(wt.path(), "reports").expect("read").expect("a report");
        assert_eq!(t.len(), 3);
        // A folder reached through a link is not read.
        let out = tempfile::tempdir().expect("dir");
        std::fs::write(out.path().join("x.xml"), xml).expect("write");
        std::os::unix::fs::symlink(out.path(), wt.path().join("linked")).expect("symlink");
        assert!(read_report(wt.path(), "linked/x.xml").is_err());
        // What is not a report, or not a regular file, is not used.
        std::fs::write(wt.path().join("bad.xml"), "<html/>").expect("write");
        assert!(read_report(wt.path(), "bad.xml").is_err());
        std::os::unix::fs::symlink("/etc/passwd", wt.path().join("link.xml")).expect("symlink");
        assert!(read_report(wt.path(), "link.xml").is_err());
    }
}
