//! For an agent that runs uncontained (`[run] sandbox = "off"`, or no sandbox here): what it may not leave behind
//! in the git directory it shares with the runner and the user — a
//! `.git/config` with a clean/smudge filter, a `diff`/`merge` driver, `core.sshCommand`, `include.path`…; an
//! `info/attributes` that hooks such a driver to every path; a `config.worktree` of its own. The runner's next
//! `git add`, `checkout` or `rebase` — outside the agent's process group and time limit — and the user's own git
//! commands would run them.
//!
//! A [`Guard`] takes the bytes of those files before an agent runs; after it, whatever changed is put back, and the
//! agent's version kept under `.git/swarm/planted/` (0600) for a person to look at. Only changes made while the
//! agent ran are undone: a change the user makes at another time is theirs.

use std::path::{Path, PathBuf};

/// The files of a git directory an agent's run must leave as they were.
pub(crate) struct Guard {
    /// `(path, what it held; None: it did not exist)`.
    files: Vec<(PathBuf, Option<Vec<u8>>)>,
    keep_dir: PathBuf,
    /// The derived files of `.git/swarm/cache` (kept reads, the pick index) as they were: `(path, inode, ctime,
    /// size)`. One that changed or appeared during the run is the agent's: the whole cache is dropped (it is made
    /// again from the ref). `None`: not watched.
    cache: Option<(PathBuf, Vec<Fingerprint>)>,
}

impl Guard {
    /// Take the files as they are now: the common dir's `config` and `info/attributes`, and the derived files of
    /// `.git/swarm/cache`. For an agent that runs uncontained (`[run] sandbox = "off"`).
    pub(crate) fn take(common_dir: &Path) -> Guard {
        let files = [common_dir.join("config"), common_dir.join("info").join("attributes")]
            .into_iter()
            .map(|p| (p.clone(), read(&p)))
            .collect();
        let cache = common_dir.join("swarm").join("cache");
        Guard {
            files,
            keep_dir: common_dir.join("swarm").join("planted"),
            cache: Some((cache.clone(), fingerprints(&cache))),
        }
    }

    /// Nothing to guard: a sandboxed agent sees none of the clone's git directory.
    pub(crate) fn none() -> Guard {
        Guard { files: Vec::new(), keep_dir: PathBuf::new(), cache: None }
    }

    /// Put back every file that changed since [`Guard::take`]; one message per file put back.
    pub(crate) fn restore(&self) -> Vec<String> {
        let mut said = Vec::new();
        if let Some((dir, before)) = &self.cache
            && fingerprints(dir) != *before
        {
            // What a new process would take for the board (invariant 32) may be the agent's now: none of it is
            // kept. Another runner's write meanwhile is lost too, which costs it one full read.
            for (p, ..) in fingerprints(dir) {
                let _ = std::fs::remove_file(p);
            }
        }
        for (path, before) in &self.files {
            let now = read(path);
            if now == *before {
                continue;
            }
            let kept = now.as_ref().and_then(|bytes| self.keep(path, bytes));
            let put_back = match before {
                Some(bytes) => {
                    crate::agent::files::write(path, bytes).is_ok() && std::fs::read(path).ok().as_ref() == Some(bytes)
                }
                None => std::fs::remove_file(path).is_ok(),
            };
            let what = if put_back { "put back as it was" } else { "could NOT be put back" };
            let kept = kept.map(|k| format!("; the agent's version is kept at {}", k.display())).unwrap_or_default();
            said.push(format!("the agent changed {} during its run: {what}{kept}", path.display()));
        }
        said
    }

    fn keep(&self, path: &Path, bytes: &[u8]) -> Option<PathBuf> {
        if bytes.is_empty() {
            return None;
        }
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(&self.keep_dir).ok()?;
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
        let name = path.file_name()?.to_string_lossy().into_owned();
        let dest = self.keep_dir.join(format!("{name}-{stamp}"));
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&dest).ok()?;
        f.write_all(bytes).ok()?;
        Some(dest)
    }
}

/// A file and what only a write changes of it: inode, change time, size.
type Fingerprint = (PathBuf, u64, i64, u64);

/// The files of `dir` (one level), fingerprinted.
fn fingerprints(dir: &Path) -> Vec<Fingerprint> {
    use std::os::unix::fs::MetadataExt;
    let mut out: Vec<Fingerprint> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let m = std::fs::symlink_metadata(e.path()).ok()?;
            Some((e.path(), m.ino(), m.ctime() * 1_000_000_000 + m.ctime_nsec(), m.len()))
        })
        .collect();
    out.sort();
    out
}

/// What is at `path`, read as an agent's file is (`agent::files`: never through a symlink, never blocking on a
/// FIFO, bounded); something else there than a regular file reads as empty bytes, which differ from any snapshot
/// of a file, so that it is put back. `None`: nothing there.
fn read(path: &Path) -> Option<Vec<u8>> {
    match crate::agent::files::read(path, 4 << 20) {
        Ok((text, _)) => Some(text.into_bytes()),
        Err(e) if e.is_missing() => None,
        Err(_) => Some(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_agent_planted_is_put_back_and_kept() {
        let dir = tempfile::tempdir().expect("tmp");
        let common = dir.path();
        std::fs::write(common.join("config"), "[core]\n\tbare = false\n").expect("config");
        let g = Guard::take(common);
        assert!(g.restore().is_empty(), "nothing changed");
        std::fs::write(common.join("config"), "[core]\n\tbare = false\n[filter \"x\"]\n\tclean = evil\n").expect("w");
        std::fs::create_dir_all(common.join("info")).expect("info");
        std::fs::write(common.join("info/attributes"), "* filter=x\n").expect("w");
        let said = g.restore();
        assert_eq!(said.len(), 2, "{said:?}");
        assert_eq!(std::fs::read_to_string(common.join("config")).expect("r"), "[core]\n\tbare = false\n");
        assert!(!common.join("info/attributes").exists());
        let kept: Vec<_> = std::fs::read_dir(common.join("swarm/planted")).expect("kept").flatten().collect();
        assert_eq!(kept.len(), 2);
        assert!(said[0].contains("put back as it was"), "{said:?}");
    }
}
