//! The last clean read of `tasks/`, kept on disk between processes: a fresh process (a CLI op, a hook) patches it
//! as a runner patches its last read in memory ([`super::patch`]), instead of parsing every live task again — on a
//! board of 20,000 that is a second an op.
//!
//! What is kept says "the `tasks/` tree with this id holds these tasks": keyed by the tree's id, so it is right for
//! any reader that has the tree (invariant 7; it is never keyed by a ref or a name). A kept read the store cannot use
//! — another format or version of git swarm, a checksum that does not match, a tree this object database does not
//! have, anything out of order — is not used, and the board is read in full. The file is replaced whole (a
//! temporary file renamed), and only after a full walk or when the patch since it has parsed
//! [`REWRITE_AFTER`] task files: a patch costs the files it parses, a rewrite the whole board.

use std::path::{Path, PathBuf};

use gix::ObjectId;
use serde::{Deserialize, Serialize};

use super::patch::LastRead;
use super::{Store, fill};
use crate::state::{Closed, Stored};

/// What a kept read must say it is, by scope: a changed format or a changed rule of the walk never trusts an old
/// file, nor one scope's read the other's.
const FORMATS: [&str; 2] = [
    concat!("git-swarm last read 1, live tasks, ", env!("CARGO_PKG_VERSION")),
    concat!("git-swarm last read 1, every task, ", env!("CARGO_PKG_VERSION")),
];
/// The files, by scope (the live tasks, every task), in the store's cache folder.
const FILES: [&str; 2] = ["last-read-live.json", "last-read-full.json"];
/// Task files a patch since the kept read may parse before the read is kept again.
pub(super) const REWRITE_AFTER: usize = 64;

#[derive(Serialize, Deserialize)]
struct Kept<T, C> {
    format: String,
    tree: String,
    tasks: T,
    closed: C,
}

/// A kept read as read back.
type Read = Kept<Vec<(String, Stored)>, Vec<(String, Closed)>>;

/// The maps as written: entries in key order, borrowed.
struct Entries<'a, V: Clone>(&'a imbl::OrdMap<String, V>);

impl<V: Clone + Serialize> Serialize for Entries<'_, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

impl Store {
    fn kept_path(&self, full: bool) -> Option<PathBuf> {
        Some(self.cache_dir.as_ref()?.join(FILES[usize::from(full)]))
    }

    /// The kept read of this scope, if there is one this store can patch.
    pub(super) fn load_kept(&self, full: bool) -> Option<LastRead> {
        let bytes = std::fs::read(self.kept_path(full)?).ok()?;
        // A tree this object database lacks is not one the patch can start from: it reads the board in full then.
        decode(&bytes, full)
    }

    /// Keep `read` for the next process (best effort: a read not kept is one full read later).
    pub(super) fn keep(&self, full: bool, read: &LastRead) {
        let Some(path) = self.kept_path(full) else { return };
        let _ = write(&path, read, full);
    }

    /// Forget the kept read of this scope: the board is not clean, so no patch of it can be used.
    pub(super) fn forget_kept(&self, full: bool) {
        if let Some(path) = self.kept_path(full) {
            let _ = std::fs::remove_file(path);
        }
        if !full {
            self.forget_index();
        }
    }
}

fn write(path: &Path, read: &LastRead, full: bool) -> std::io::Result<()> {
    let kept = Kept {
        format: FORMATS[usize::from(full)].to_string(),
        tree: read.tree.to_hex().to_string(),
        tasks: Entries(&read.tasks),
        closed: Entries(&read.closed),
    };
    write_whole(path, &serde_json::to_vec(&kept)?)
}

/// Replace the file at `path` by `body` after a line with its checksum, whole: a reader sees the old file or the
/// new one.
pub(super) fn write_whole(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    use std::io::Write;
    writeln!(file, "{:08x}", crc32fast::hash(body))?;
    file.write_all(body)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The body of a file [`write_whole`] wrote, if its checksum says it is whole.
pub(super) fn whole_body(bytes: &[u8]) -> Option<&[u8]> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let (sum, body) = (&bytes[..newline], &bytes[newline + 1..]);
    (u32::from_str_radix(std::str::from_utf8(sum).ok()?, 16).ok()? == crc32fast::hash(body)).then_some(body)
}

/// A kept read from the bytes of its file; `None` for anything but a whole file of this format whose entries are
/// in order and say the ids they are kept under.
fn decode(bytes: &[u8], full: bool) -> Option<LastRead> {
    let body = whole_body(bytes)?;
    let kept: Read = serde_json::from_slice(body).ok()?;
    if kept.format != FORMATS[usize::from(full)] {
        return None;
    }
    let tree = ObjectId::from_hex(kept.tree.as_bytes()).ok()?;
    let names = |id: &str, path: &str| path.strip_suffix(".toml").and_then(|p| p.rsplit('/').next()) == Some(id);
    let ordered = |a: &String, b: &String| a < b;
    if !kept.tasks.windows(2).all(|w| ordered(&w[0].0, &w[1].0))
        || !kept.closed.windows(2).all(|w| ordered(&w[0].0, &w[1].0))
        || !kept.tasks.iter().all(|(id, s)| s.task.id == *id && names(id, &s.path))
        || !kept.closed.iter().all(|(id, c)| names(id, &c.path))
    {
        return None;
    }
    let (mut tasks, mut closed) = (imbl::OrdMap::new(), imbl::OrdMap::new());
    fill(&mut tasks, kept.tasks);
    fill(&mut closed, kept.closed);
    if tasks.keys().any(|id| closed.contains_key(id)) {
        return None;
    }
    Some(LastRead { tree, tasks, closed, unkept: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Task};

    fn task(id: &str, title: &str) -> Task {
        let text = format!(
            "id = \"{id}\"\ntitle = \"x\"\nstatus = \"claimed\"\npriority = 3\ndeps = [\"t-0\"]\n\
             created_at = \"2026-11-29T14:05:00.250Z\"\n[claim]\nagent = \"w-1\"\nepoch = 2\n\
             lease_until = \"2026-11-29T14:15:00Z\"\n[usage]\ninput_tokens = 10\ncost_usd = 0.125\n"
        );
        let mut task: Task = toml::from_str(&text).expect("a task");
        task.title = title.to_string();
        task
    }

    fn read() -> LastRead {
        let mut tasks = imbl::OrdMap::new();
        for (id, title) in [("t-1", "one \"quoted\"\nline"), ("t-2", "two")] {
            tasks.insert(id.to_string(), Stored { path: format!("tasks/ab/{id}.toml"), task: task(id, title) });
        }
        let mut closed = imbl::OrdMap::new();
        closed.insert("t-0".to_string(), Closed { status: Status::Done, path: "tasks/done/t-0.toml".into() });
        let tree = ObjectId::from_hex(b"4b825dc642cb6eb9a060e54bf8d69288fbee4904").expect("an id");
        LastRead { tree, tasks, closed, unkept: 9 }
    }

    fn written(read: &LastRead) -> Vec<u8> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("kept.json");
        write(&path, read, false).expect("written");
        std::fs::read(&path).expect("read back")
    }

    /// The bytes of a file with `body` and its right checksum.
    fn with_sum(body: &str) -> Vec<u8> {
        format!("{:08x}\n{body}", crc32fast::hash(body.as_bytes())).into_bytes()
    }

    #[test]
    fn a_kept_read_reads_back_as_it_was() {
        let read = read();
        let back = decode(&written(&read), false).expect("decoded");
        assert_eq!((back.tree, &back.tasks, &back.closed), (read.tree, &read.tasks, &read.closed));
        assert_eq!(back.unkept, 0, "what is read back is the kept read");
    }

    #[test]
    fn a_damaged_file_is_not_used() {
        let bytes = written(&read());
        assert!(decode(&bytes[..bytes.len() - 1], false).is_none(), "cut short");
        assert!(decode(&bytes[..bytes.len() / 2], false).is_none(), "cut in half");
        assert!(decode(b"", false).is_none(), "empty");
        let mut flipped = bytes.clone();
        let at = flipped.len() - 40;
        flipped[at] ^= 0x01;
        assert!(decode(&flipped, false).is_none(), "a bit flipped");
        let mut sum = bytes.clone();
        sum[0] = if sum[0] == b'0' { b'1' } else { b'0' };
        assert!(decode(&sum, false).is_none(), "another checksum");
    }

    #[test]
    fn a_file_of_another_format_or_out_of_order_is_not_used() {
        let bytes = written(&read());
        let body = std::str::from_utf8(&bytes[9..]).expect("text");
        assert!(decode(&with_sum(body), false).is_some(), "the body as written is used");
        let other = body.replace(FORMATS[0], "git-swarm last read 0, 0.0.0");
        assert!(decode(&with_sum(&other), false).is_none(), "another version");
        assert!(decode(&with_sum(body), true).is_none(), "the other scope's");
        // t-1 and t-2 swapped: keys out of order.
        let swapped = body.replacen("\"t-1\",", "\"t-x\",", 1).replacen("\"t-2\",", "\"t-1\",", 1);
        let swapped = swapped.replacen("\"t-x\",", "\"t-2\",", 1);
        assert!(decode(&with_sum(&swapped), false).is_none(), "out of order, and under other ids");
        let renamed = body.replacen("tasks/ab/t-1.toml", "tasks/ab/t-9.toml", 1);
        assert!(decode(&with_sum(&renamed), false).is_none(), "a path that names another id");
        let twice =
            body.replacen("tasks/done/t-0.toml", "tasks/done/t-1.toml", 1).replacen("[\"t-0\",{", "[\"t-1\",{", 1);
        assert!(decode(&with_sum(&twice), false).is_none(), "an id both live and closed");
    }
}
