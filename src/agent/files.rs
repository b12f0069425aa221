//! The one helper through which a runner touches a path an agent could have replaced (docs/security.md,
//! *Containment*; invariant 39 of docs/invariants.md): its work tree, its run folder (the hand-off, a CLI's
//! last-message file, its chat history, its git directory), the report a check leaves.
//!
//! The agent controls what is at those paths. A symlink to `/dev/zero` would have the runner read gigabytes, a
//! FIFO would block it past SIGTERM, a symlink to `~/.ssh/id_ed25519` would put a key on the state ref, a folder
//! link would have the runner write into the user's home. So:
//!
//! * a **read** takes the path itself (`O_NOFOLLOW`: no symlink followed — below a [`Dir`], at no component of
//!   the relative path either), opened without blocking (`O_NONBLOCK`, which a FIFO with no writer honours) and
//!   without taking a terminal (`O_NOCTTY`), a regular file or nothing, at most a bound of bytes;
//! * a **write** creates a new file where nothing is (`O_CREAT | O_EXCL`, which refuses a symlink too), or
//!   replaces the path by renaming a new file over it ([`write`]) — never writes through what is there;
//! * a **folder** is opened once without following a link ([`Dir::open`]) and everything below it is reached from
//!   its descriptor (`openat`, `fstatat`, `readlinkat`, `fchownat` with `AT_SYMLINK_NOFOLLOW`), so that a link an
//!   agent put in place of a folder of its tree leads nowhere.
//!
//! `tests/house.rs` reads the runner's sources and fails when a read or write of a path under an agent's reach goes
//! around this module.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

/// Why an agent's file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is a {kind}, not a regular file: not read")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path} goes through a {kind}: not followed")]
    Through { path: String, kind: &'static str },
}

impl Refused {
    /// Nothing at the path: not a refusal, just no file.
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, Refused::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What a file is, by its `st_mode`.
fn kind_of(mode: u32) -> &'static str {
    match mode & libc_fmt::S_IFMT {
        libc_fmt::S_IFREG => "regular file",
        libc_fmt::S_IFDIR => "directory",
        libc_fmt::S_IFLNK => "symlink",
        libc_fmt::S_IFIFO => "FIFO",
        libc_fmt::S_IFSOCK => "socket",
        libc_fmt::S_IFCHR | libc_fmt::S_IFBLK => "device",
        _ => "special file",
    }
}

/// The file-type bits of `st_mode` (what `libc` names; written out so that this module needs no `libc`).
mod libc_fmt {
    pub(super) const S_IFMT: u32 = 0o170000;
    pub(super) const S_IFREG: u32 = 0o100000;
    pub(super) const S_IFDIR: u32 = 0o040000;
    pub(super) const S_IFLNK: u32 = 0o120000;
    pub(super) const S_IFIFO: u32 = 0o010000;
    pub(super) const S_IFSOCK: u32 = 0o140000;
    pub(super) const S_IFCHR: u32 = 0o020000;
    pub(super) const S_IFBLK: u32 = 0o060000;
}

const READ_FLAGS: OFlag = OFlag::O_RDONLY.union(OFlag::O_NOFOLLOW).union(OFlag::O_NONBLOCK).union(OFlag::O_NOCTTY);
const DIR_FLAGS: OFlag = OFlag::O_RDONLY.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

fn io(path: &Path, e: impl Into<std::io::Error>) -> Refused {
    Refused::Io { path: path.display().to_string(), source: e.into() }
}

/// A regular file opened for reading, with its length; anything else at the path is refused.
fn checked(file: std::fs::File, shown: &Path) -> Result<(std::fs::File, u64), Refused> {
    let meta = file.metadata().map_err(|e| io(shown, e))?;
    if !meta.file_type().is_file() {
        use std::os::unix::fs::MetadataExt;
        return Err(Refused::NotRegular { path: shown.display().to_string(), kind: kind_of(meta.mode()) });
    }
    Ok((file, meta.len()))
}

fn open(path: &Path) -> Result<(std::fs::File, u64), Refused> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // ELOOP: the last component is a symlink.
            Some(code) if code == nix::errno::Errno::ELOOP as i32 => {
                Refused::NotRegular { path: path.display().to_string(), kind: "symlink" }
            }
            _ => io(path, e),
        })?;
    checked(file, path)
}

/// At most `max` bytes of `file` (and whether there was more).
fn bounded(file: std::fs::File, len: u64, max: usize, shown: &Path) -> Result<(Vec<u8>, bool), Refused> {
    let mut bytes = Vec::with_capacity(max.min(len as usize));
    file.take(max as u64 + 1).read_to_end(&mut bytes).map_err(|e| io(shown, e))?;
    let more = bytes.len() > max;
    bytes.truncate(max);
    Ok((bytes, more))
}

/// The first `max` bytes of the regular file at `path` (text, invalid UTF-8 replaced), and whether there was more.
/// The folder `path` is in is the runner's (a run folder it made): only the last component is the agent's.
pub(crate) fn read(path: &Path, max: usize) -> Result<(String, bool), Refused> {
    let (file, len) = open(path)?;
    let (bytes, more) = bounded(file, len, max, path)?;
    Ok((text(bytes), more))
}

/// The last `max` bytes of the regular file at `path` (a chat history that grows all run: its end is the reply).
pub(crate) fn read_tail(path: &Path, max: usize) -> Result<String, Refused> {
    let (mut file, len) = open(path)?;
    if len > max as u64 {
        file.seek(SeekFrom::Start(len - max as u64)).map_err(|e| io(path, e))?;
    }
    let mut bytes = Vec::with_capacity(max.min(len as usize));
    file.take(max as u64).read_to_end(&mut bytes).map_err(|e| io(path, e))?;
    Ok(text(bytes))
}

/// [`read`], or `None` for a missing, refused or empty file (a refusal other than a missing file is what a caller
/// that has no place to say it would log).
pub(crate) fn read_text(path: &Path, max: usize) -> Option<String> {
    read(path, max).ok().map(|(t, _)| t).filter(|t| !t.trim().is_empty())
}

/// Write `bytes` at `path` by renaming a new file over it: whatever the agent put there (a symlink to a file of the
/// user's, a FIFO nobody reads) is replaced, never written through or blocked on.
pub(crate) fn write(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes.as_ref())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Create the file `path` with `bytes`, private to this user (0600), where nothing is: a symlink or any file at the
/// path is an error (`O_CREAT | O_EXCL`), never written through. What a runner writes into a folder it made for a
/// run, before the run.
pub(crate) fn create(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(bytes.as_ref())
}

/// Remove what is at `path`, whatever it is: a folder with everything in it (no link followed: the standard
/// library's `remove_dir_all` removes a link, never what it points at, and opens each folder relative to its
/// parent), a file, a link. Nothing there is fine.
pub(crate) fn remove_all(path: &Path) -> std::io::Result<()> {
    let res = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match res {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn text(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// What an entry of a [`Dir`] is, as `fstatat` without following a link says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Link,
    /// A FIFO, a socket, a device: nothing git holds, never opened.
    Other(&'static str),
}

/// One entry of a [`Dir`].
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: OsString,
    pub(crate) kind: Kind,
    pub(crate) stat: Stat,
}

/// What a runner compares to tell whether a file changed since it wrote it: a write changes the change time (which
/// no process can set back) and usually the size and modification time; a replacement changes the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Stat {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
    /// Who owns it.
    pub(crate) uid: u32,
}

impl Stat {
    fn of(s: &nix::sys::stat::FileStat) -> Stat {
        Stat {
            dev: s.st_dev,
            ino: s.st_ino,
            mode: s.st_mode,
            size: u64::try_from(s.st_size).unwrap_or(0),
            mtime: (s.st_mtime, s.st_mtime_nsec),
            ctime: (s.st_ctime, s.st_ctime_nsec),
            uid: s.st_uid,
        }
    }

    /// Is the owner's execute bit set (what git records as `100755`)?
    pub(crate) fn executable(&self) -> bool {
        self.mode & 0o100 != 0
    }
}

/// A folder an agent may have written in, opened without following a link; everything below it is reached from it
/// ([`Dir::read`], [`Dir::dir`], [`Dir::entries`]) and never through a link.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    /// For messages, and nothing else: the path is never opened again.
    path: PathBuf,
}

impl Dir {
    /// Open the folder at `path`. The path is the runner's own up to its last component (a work tree or run folder
    /// it made in a folder of its own): that one is not followed if it is a link.
    pub(crate) fn open(path: &Path) -> Result<Dir, Refused> {
        let fd = nix::fcntl::open(path, DIR_FLAGS, Mode::empty()).map_err(|e| refused(path, e))?;
        Ok(Dir { fd, path: path.to_path_buf() })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The folder `rel` below this one (plain components only), no component followed if it is a link.
    pub(crate) fn dir(&self, rel: &Path) -> Result<Dir, Refused> {
        let mut cur: Option<Dir> = None;
        for name in plain(rel, &self.path)? {
            let from = cur.as_ref().unwrap_or(self);
            let shown = from.path.join(name);
            let fd = nix::fcntl::openat(from.fd.as_fd(), name, DIR_FLAGS, Mode::empty())
                .map_err(|e| from.refused_at(name, e))?;
            cur = Some(Dir { fd, path: shown });
        }
        match cur {
            Some(d) => Ok(d),
            None => self.dup(),
        }
    }

    fn dup(&self) -> Result<Dir, Refused> {
        let fd =
            nix::fcntl::openat(self.fd.as_fd(), ".", DIR_FLAGS, Mode::empty()).map_err(|e| refused(&self.path, e))?;
        Ok(Dir { fd, path: self.path.clone() })
    }

    /// Why opening `name` here failed: a link or another kind of file named as such.
    fn refused_at(&self, name: &OsStr, e: nix::errno::Errno) -> Refused {
        let shown = self.path.join(name);
        match e {
            nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => {
                let kind = self.kind(name).map_or("special file", |k| match k {
                    Kind::Link => "symlink",
                    Kind::File => "regular file",
                    Kind::Dir => "directory",
                    Kind::Other(k) => k,
                });
                Refused::Through { path: shown.display().to_string(), kind }
            }
            e => refused(&shown, e),
        }
    }

    /// What `name` is in this folder (a link is a link).
    pub(crate) fn kind(&self, name: &OsStr) -> Option<Kind> {
        self.stat(name).ok().map(|s| kind_from(s.mode))
    }

    fn stat(&self, name: &OsStr) -> nix::Result<Stat> {
        nix::sys::stat::fstatat(self.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).map(|s| Stat::of(&s))
    }

    /// The regular file `rel` below this folder: at most `max` bytes, and whether there was more. No component of
    /// `rel` is followed if it is a link; a FIFO, a device or a folder is refused without being waited on.
    pub(crate) fn read(&self, rel: &Path, max: usize) -> Result<(Vec<u8>, bool), Refused> {
        let (file, len, shown) = self.open_file(rel)?;
        bounded(file, len, max, &shown)
    }

    /// [`Dir::read`] as text (invalid UTF-8 replaced); `None` for nothing there, a refusal or an empty file.
    pub(crate) fn read_text(&self, rel: &Path, max: usize) -> Option<String> {
        self.read(rel, max).ok().map(|(b, _)| text(b)).filter(|t| !t.trim().is_empty())
    }

    fn open_file(&self, rel: &Path) -> Result<(std::fs::File, u64, PathBuf), Refused> {
        let names = plain(rel, &self.path)?;
        let Some((last, folders)) = names.split_last() else {
            return Err(Refused::NotRegular { path: self.path.display().to_string(), kind: "directory" });
        };
        let parent = self.dir(&folders.iter().collect::<PathBuf>())?;
        let shown = parent.path.join(last);
        let fd = nix::fcntl::openat(parent.fd.as_fd(), *last, READ_FLAGS | OFlag::O_CLOEXEC, Mode::empty()).map_err(
            |e| match e {
                nix::errno::Errno::ELOOP => Refused::NotRegular { path: shown.display().to_string(), kind: "symlink" },
                e => refused(&shown, e),
            },
        )?;
        let (file, len) = checked(std::fs::File::from(fd), &shown)?;
        Ok((file, len, shown))
    }

    /// The entries of this folder (not `.` and `..`), each as `fstatat` without following a link sees it.
    pub(crate) fn entries(&self) -> Result<Vec<Entry>, Refused> {
        let fd =
            nix::fcntl::openat(self.fd.as_fd(), ".", DIR_FLAGS, Mode::empty()).map_err(|e| refused(&self.path, e))?;
        let mut d = nix::dir::Dir::from_fd(fd).map_err(|e| refused(&self.path, e))?;
        let mut out = Vec::new();
        for e in d.iter() {
            let e = e.map_err(|e| refused(&self.path, e))?;
            let name = OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
            if name == "." || name == ".." {
                continue;
            }
            // Gone meanwhile: not an entry any more.
            let Ok(stat) = self.stat(&name) else { continue };
            out.push(Entry { kind: kind_from(stat.mode), name, stat });
        }
        Ok(out)
    }

    /// The target of the link `name` in this folder, as bytes (never followed).
    pub(crate) fn link_target(&self, name: &OsStr) -> Result<Vec<u8>, Refused> {
        nix::fcntl::readlinkat(self.fd.as_fd(), name)
            .map(|t| t.as_bytes().to_vec())
            .map_err(|e| refused(&self.path.join(name), e))
    }

    /// Give this folder and everything in it to `uid`:`gid` (links themselves, never what they point at): what a
    /// runner that is root does to a work tree or run folder it made, before an agent that runs as nobody works in
    /// it.
    pub(crate) fn chown_all(&self, uid: u32, gid: u32) -> Result<(), Refused> {
        self.chown_self(uid, gid)?;
        for e in self.entries()? {
            self.chown(&e.name, uid, gid)?;
            if e.kind == Kind::Dir {
                self.dir(Path::new(&e.name))?.chown_all(uid, gid)?;
            }
        }
        Ok(())
    }

    /// Give this folder itself to `uid`:`gid`.
    pub(crate) fn chown_self(&self, uid: u32, gid: u32) -> Result<(), Refused> {
        let (u, g) = (Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)));
        nix::unistd::fchownat(self.fd.as_fd(), ".", u, g, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| refused(&self.path, e))
    }

    /// Give the entry `name` of this folder (a link itself, never what it points at) to `uid`:`gid`: its stat
    /// afterwards.
    pub(crate) fn chown(&self, name: &OsStr, uid: u32, gid: u32) -> Result<Stat, Refused> {
        let (u, g) = (Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)));
        let shown = || self.path.join(name);
        nix::unistd::fchownat(self.fd.as_fd(), name, u, g, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| refused(&shown(), e))?;
        self.stat(name).map_err(|e| refused(&shown(), e))
    }

    /// Move the entry `name` of this folder, whatever it is (a link is moved as a link, a folder with everything
    /// in it), to `name` in the folder `to` on the same filesystem, where nothing may be (`RENAME_NOREPLACE`).
    pub(crate) fn move_to(&self, name: &OsStr, to: &Dir) -> Result<(), Refused> {
        nix::fcntl::renameat2(self.fd.as_fd(), name, to.fd.as_fd(), name, nix::fcntl::RenameFlags::RENAME_NOREPLACE)
            .map_err(|e| refused(&to.path.join(name), e))
    }

    /// Hold the entry `name` of this folder (`O_PATH`, no link followed, nothing opened for reading: a FIFO is not
    /// waited on): its inode cannot be given to another file while the descriptor lives. Its stat with it.
    pub(crate) fn hold(&self, name: &OsStr) -> Result<(OwnedFd, Stat), Refused> {
        let shown = || self.path.join(name);
        let fd = nix::fcntl::openat(
            self.fd.as_fd(),
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| refused(&shown(), e))?;
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| refused(&shown(), e))?;
        Ok((fd, Stat::of(&st)))
    }

    /// Remove the entry `name` of this folder, whatever it is: a folder with everything in it, each below reached
    /// from its parent's descriptor (no link followed at any depth). Nothing there is fine.
    pub(crate) fn remove(&self, name: &OsStr) -> Result<(), Refused> {
        use nix::unistd::{UnlinkatFlags, unlinkat};
        let shown = || self.path.join(name);
        match self.kind(name) {
            None => Ok(()),
            Some(Kind::Dir) => {
                let sub = self.dir(Path::new(name))?;
                for e in sub.entries()? {
                    sub.remove(&e.name)?;
                }
                unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir).map_err(|e| refused(&shown(), e))
            }
            Some(_) => unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir).map_err(|e| refused(&shown(), e)),
        }
    }

    /// Set the modification time of the entry `name` of this folder (a link itself, never what it points at) to
    /// `mtime`, its access time to now; its stat afterwards.
    pub(crate) fn set_mtime(&self, name: &OsStr, mtime: (i64, i64)) -> Result<Stat, Refused> {
        use nix::sys::time::TimeSpec;
        let shown = || self.path.join(name);
        let at = TimeSpec::new(mtime.0, mtime.1);
        nix::sys::stat::utimensat(
            self.fd.as_fd(),
            name,
            &TimeSpec::UTIME_NOW,
            &at,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        )
        .map_err(|e| refused(&shown(), e))?;
        self.stat(name).map_err(|e| refused(&shown(), e))
    }

    /// Copy the regular files below this folder into the folder `to` (made here; the runner's), keeping the
    /// relative paths: links, FIFOs and devices are left out, and so is everything past `budget` bytes in all
    /// (`Err` then). What the runner does with an agent's object folder before any git reads it.
    pub(crate) fn copy_files(&self, to: &Path, budget: &mut u64) -> Result<(), Refused> {
        std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
        for e in self.entries()? {
            let dest = to.join(&e.name);
            match e.kind {
                Kind::Dir => self.dir(Path::new(&e.name))?.copy_files(&dest, budget)?,
                Kind::File => {
                    let (mut file, len, shown) = self.open_file(Path::new(&e.name))?;
                    if len > *budget {
                        return Err(Refused::Io {
                            path: shown.display().to_string(),
                            source: std::io::Error::other("more bytes than a run's objects may hold"),
                        });
                    }
                    let mut out = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&dest)
                        .map_err(|err| io(&dest, err))?;
                    let copied =
                        std::io::copy(&mut (&mut file).take(*budget), &mut out).map_err(|err| io(&dest, err))?;
                    *budget -= copied;
                }
                Kind::Link | Kind::Other(_) => {}
            }
        }
        Ok(())
    }
}

fn kind_from(mode: u32) -> Kind {
    match mode & libc_fmt::S_IFMT {
        libc_fmt::S_IFREG => Kind::File,
        libc_fmt::S_IFDIR => Kind::Dir,
        libc_fmt::S_IFLNK => Kind::Link,
        other => Kind::Other(kind_of(other)),
    }
}

fn refused(path: &Path, e: nix::errno::Errno) -> Refused {
    match e {
        nix::errno::Errno::ELOOP => Refused::NotRegular { path: path.display().to_string(), kind: "symlink" },
        e => io(path, std::io::Error::from(e)),
    }
}

/// The components of `rel`, each a plain name (no `..`, no root, no `.`).
fn plain<'a>(rel: &'a Path, base: &Path) -> Result<Vec<&'a OsStr>, Refused> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(Refused::Through { path: base.join(rel).display().to_string(), kind: "path outside its folder" }),
        })
        .collect()
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
        // Creating never goes through a link, a dangling one included.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("made-through-the-link"), &dangling).expect("symlink");
        assert!(create(&dangling, "x").is_err());
        assert!(!dir.path().join("made-through-the-link").exists());
        create(&dir.path().join("new"), "fresh").expect("create");
        assert!(create(&dir.path().join("new"), "again").is_err(), "an existing file is never written over");
    }

    #[test]
    fn below_a_folder_no_component_is_followed() {
        let root = tempfile::tempdir().expect("tmp");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(outside.join("deep")).expect("dir");
        std::fs::write(outside.join("deep/key"), "secret").expect("write");
        let tree = root.path().join("tree");
        std::fs::create_dir_all(tree.join("src")).expect("dir");
        std::fs::write(tree.join("src/main.rs"), "fn main() {}").expect("write");
        // A folder of the tree replaced by a link to a folder elsewhere.
        std::os::unix::fs::symlink(&outside, tree.join("link")).expect("symlink");
        let d = Dir::open(&tree).expect("open");
        assert_eq!(d.read(Path::new("src/main.rs"), 100).expect("read").0, b"fn main() {}");
        let through = d.read(Path::new("link/deep/key"), 100).expect_err("through a link");
        assert!(matches!(through, Refused::Through { kind: "symlink", .. }), "{through}");
        assert!(d.dir(Path::new("link")).is_err());
        assert!(d.read(Path::new("../outside/deep/key"), 100).is_err(), "no way out by `..`");
        // The folder itself given as a link is refused.
        let alias = root.path().join("alias");
        std::os::unix::fs::symlink(&tree, &alias).expect("symlink");
        assert!(Dir::open(&alias).is_err());
        let mut names: Vec<(String, Kind)> = d
            .entries()
            .expect("entries")
            .into_iter()
            .map(|e| (e.name.to_string_lossy().into_owned(), e.kind))
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(names, [("link".to_string(), Kind::Link), ("src".to_string(), Kind::Dir)]);
        assert_eq!(d.link_target(OsStr::new("link")).expect("target"), outside.as_os_str().as_bytes());
        // A copy takes regular files only, and stops at its budget.
        let fifo = tree.join("src/fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let copy = root.path().join("copy");
        let mut budget = 1 << 20;
        d.copy_files(&copy, &mut budget).expect("copy");
        assert_eq!(std::fs::read_to_string(copy.join("src/main.rs")).expect("copied"), "fn main() {}");
        assert!(!copy.join("link").exists() && !copy.join("src/fifo").exists());
        let mut small = 3;
        assert!(d.copy_files(&root.path().join("copy2"), &mut small).is_err());
    }
}
