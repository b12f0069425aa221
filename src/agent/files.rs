//! Files an agent can write and the runner reads: the hand-off, a CLI's last-message file, its chat history.
//!
//! The agent controls what is at those paths. A symlink to `/dev/zero` would have the runner read gigabytes, a
//! FIFO would block it past SIGTERM, a symlink to `~/.ssh/id_ed25519` would put a key on the state ref. So they are
//! read as [`read`] does: the path itself (no symlink followed, `O_NOFOLLOW`), opened without blocking
//! (`O_NONBLOCK`, which a FIFO with no writer honours), a regular file or nothing, at most a bound of bytes.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::OFlag;

/// Why an agent's file was not read.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is a {kind}, not a regular file: not read")]
    NotRegular { path: String, kind: &'static str },
}

impl Refused {
    /// Nothing at the path: not a refusal, just no file.
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, Refused::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn open(path: &Path) -> Result<(std::fs::File, u64), Refused> {
    let shown = || path.display().to_string();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // ELOOP: the last component is a symlink.
            Some(code) if code == nix::errno::Errno::ELOOP as i32 => {
                Refused::NotRegular { path: shown(), kind: "symlink" }
            }
            _ => Refused::Io { path: shown(), source: e },
        })?;
    let meta = file.metadata().map_err(|e| Refused::Io { path: shown(), source: e })?;
    let ft = meta.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_dir() {
            "directory"
        } else if ft.is_fifo() {
            "FIFO"
        } else if ft.is_socket() {
            "socket"
        } else if ft.is_char_device() || ft.is_block_device() {
            "device"
        } else {
            "special file"
        };
        return Err(Refused::NotRegular { path: shown(), kind });
    }
    Ok((file, meta.len()))
}

/// The first `max` bytes of the regular file at `path` (text, invalid UTF-8 replaced), and whether there was more.
pub fn read(path: &Path, max: usize) -> Result<(String, bool), Refused> {
    let (file, len) = open(path)?;
    let mut bytes = Vec::with_capacity(max.min(len as usize));
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Refused::Io { path: path.display().to_string(), source: e })?;
    let more = bytes.len() > max;
    bytes.truncate(max);
    Ok((text(bytes), more))
}

/// The last `max` bytes of the regular file at `path` (a chat history that grows all run: its end is the reply).
pub(crate) fn read_tail(path: &Path, max: usize) -> Result<String, Refused> {
    let (mut file, len) = open(path)?;
    let io = |e| Refused::Io { path: path.display().to_string(), source: e };
    if len > max as u64 {
        file.seek(SeekFrom::Start(len - max as u64)).map_err(io)?;
    }
    let mut bytes = Vec::with_capacity(max.min(len as usize));
    file.take(max as u64).read_to_end(&mut bytes).map_err(io)?;
    Ok(text(bytes))
}

/// [`read`], or `None` for a missing, refused or empty file (a refusal other than a missing file is what a caller
/// that has no place to say it would log).
pub fn read_text(path: &Path, max: usize) -> Option<String> {
    read(path, max).ok().map(|(t, _)| t).filter(|t| !t.trim().is_empty())
}

/// Write `bytes` at `path` by renaming a new file over it: whatever the agent put there (a symlink to a file of the
/// user's, a FIFO nobody reads) is replaced, never written through or blocked on.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes.as_ref())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn text(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_never_past_the_bound() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("handoff.md");
        std::fs::write(&f, "0123456789").expect("write");
        assert_eq!(read(&f, 4).expect("read"), ("0123".to_string(), true));
        assert_eq!(read(&f, 10).expect("read"), ("0123456789".to_string(), false));
        assert_eq!(read_tail(&f, 3).expect("tail"), "789");
        // A symlink, even to a regular file (a key on this machine), is not followed.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "key").expect("write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&secret, &link).expect("symlink");
        assert!(matches!(read(&link, 100), Err(Refused::NotRegular { kind: "symlink", .. })));
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        assert!(read(&zero, 100).is_err());
        assert!(matches!(read(Path::new("/dev/zero"), 100), Err(Refused::NotRegular { kind: "device", .. })));
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let start = std::time::Instant::now();
        assert!(matches!(read(&fifo, 100), Err(Refused::NotRegular { kind: "FIFO", .. })));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(matches!(read(dir.path(), 100), Err(Refused::NotRegular { kind: "directory", .. })));
        assert!(read(&dir.path().join("none"), 1).expect_err("missing").is_missing());
        assert_eq!(read_text(&fifo, 10), None);
        // Writing replaces what is there: the symlink's target is untouched, the FIFO does not block.
        write(&link, "ours").expect("write");
        assert_eq!(std::fs::read_to_string(&secret).expect("r"), "key");
        assert_eq!(read(&link, 10).expect("read").0, "ours");
        write(&fifo, "ours").expect("write");
        assert_eq!(read(&fifo, 10).expect("read").0, "ours");
    }
}
