//! The rules of names in a tree (`fsck.c`'s `fsck_tree`): names any filesystem reads as `.git` (case, HFS+
//! ignorables, NTFS short names and trailing dots or spaces), `.gitmodules` and the other dot files as links or
//! folders, and the order of a tree's entries.

use super::*;

pub(super) fn symlink_rule(file: &str, id: &str) -> String {
    format!(
        "a `{file}` that is a symbolic link is refused here: git (2.32 and later) does not follow it, and its fsck \
         notes it ({id})"
    )
}

pub(super) fn not_a_file(entry: &Entry<'_>, file: DotFile) -> String {
    let (kind, id) = match entry.kind() {
        S_IFDIR => ("a folder", "Blob"),
        S_IFGITLINK => ("a submodule", "Missing"),
        _ => ("an object other than a blob", "Blob"),
    };
    format!("a `{}` that is {kind}, not a file, is refused by git (fsck: {}{id})", file.name(), file.id())
}

/// The files whose content git's fsck reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum DotFile {
    Gitmodules,
    Gitattributes,
}

impl DotFile {
    pub(super) fn name(self) -> &'static str {
        match self {
            DotFile::Gitmodules => ".gitmodules",
            DotFile::Gitattributes => ".gitattributes",
        }
    }

    /// The start of git's message ids about it.
    pub(super) fn id(self) -> &'static str {
        match self {
            DotFile::Gitmodules => "gitmodules",
            DotFile::Gitattributes => "gitattributes",
        }
    }

    pub(super) fn max_size(self) -> u64 {
        match self {
            DotFile::Gitmodules => MAX_GITMODULES,
            DotFile::Gitattributes => MAX_GITATTRIBUTES,
        }
    }

    pub(super) fn too_large(self) -> &'static str {
        match self {
            DotFile::Gitmodules => {
                "a `.gitmodules` larger than 1 MiB is refused here (git refuses one it cannot load: gitmodulesLarge)"
            }
            DotFile::Gitattributes => {
                "a `.gitattributes` larger than 100 MiB is refused by git (fsck: gitattributesLarge)"
            }
        }
    }
}

/// git's `fsck_tree` over the names, modes and order of one tree's entries: the first thing it refuses.
pub(super) fn tree_rule(path: &[u8], entries: &[Entry<'_>]) -> Option<Finding> {
    let mut previous: Option<&Entry<'_>> = None;
    let mut candidates = Vec::new();
    for entry in entries {
        if let Some(rule) = name_rule(entry) {
            return Some(Finding::entry(path, entry.name, rule));
        }
        if let Some(before) = previous {
            match verify_ordered(before.mode, before.name, entry.mode, entry.name, &mut candidates) {
                Order::Sorted => {}
                Order::Unsorted => {
                    return Some(Finding::folder(
                        path,
                        format!(
                            "its entries are not in git's order (`{}` comes before `{}`): refused by git (fsck: \
                             treeNotSorted)",
                            shown(before.name),
                            shown(entry.name)
                        ),
                    ));
                }
                Order::Duplicate => {
                    return Some(Finding::folder(
                        path,
                        format!(
                            "it holds two entries named `{}`: refused by git (fsck: duplicateEntries)",
                            shown(entry.name)
                        ),
                    ));
                }
            }
        }
        previous = Some(entry);
    }
    None
}

/// What git refuses about one entry on its own: its name, its mode as written, its id.
pub(super) fn name_rule(entry: &Entry<'_>) -> Option<String> {
    if let Some(why) = name_refused(entry.name) {
        return Some(why);
    }
    if entry.mode_text.first() == Some(&b'0') {
        return Some(format!(
            "a file mode written with a leading zero (`{}`) is refused by git (fsck: zeroPaddedFilemode)",
            shown(entry.mode_text)
        ));
    }
    if entry.oid.is_null() {
        return Some("an entry pointing at the null object id is refused by git (fsck: nullSha1)".into());
    }
    None
}

/// Why git refuses a tree entry named `name`, if it does: what a runner leaves out of what it takes from a work tree
/// (`runner::snapshot`) for the same reasons its landings are refused.
pub(crate) fn name_refused(name: &[u8]) -> Option<String> {
    if name.is_empty() {
        return Some("an empty name is refused by git (fsck: badTree)".into());
    }
    if name.contains(&b'/') {
        return Some("a name holding `/` is refused by git (fsck: fullPathname)".into());
    }
    if name == b"." {
        return Some("a name `.` is refused by git (fsck: hasDot)".into());
    }
    if name == b".." {
        return Some("a name `..` is refused by git (fsck: hasDotdot)".into());
    }
    // After a backslash, a name is a path on Windows: `a\.git` is `.git` in folder `a` there.
    if is_hfs_dot(name, "git") || is_ntfs_dotgit(name) || after_backslashes(name).any(is_ntfs_dotgit) {
        return Some(
            "a name that git reads as `.git` (in any case, or as NTFS or HFS+ would: `git~1`, trailing dots or \
             spaces, a `:` stream, an ignorable code point, a `\\` before it) is refused by git (fsck: hasDotgit)"
                .into(),
        );
    }
    if name.len() > MAX_NAME {
        return Some(format!("a name longer than {MAX_NAME} bytes is refused by git (fsck: largePathname)"));
    }
    None
}

/// The rest of a name after each of its backslashes.
pub(super) fn after_backslashes(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    name.iter().enumerate().filter(|(_, b)| **b == b'\\').map(move |(i, _)| &name[i + 1..])
}

/// `.gitmodules` as git recognizes it in a tree (`fsck_tree`): HFS+ or NTFS spelling, or NTFS after a backslash.
pub(super) fn is_gitmodules(name: &[u8]) -> bool {
    is_dot(name, "gitmodules", "gi7eba")
        || after_backslashes(name).any(|rest| is_ntfs_dot(rest, "gitmodules", "gi7eba"))
}

/// `.<needle>` as HFS+ or NTFS would read `name` (git's `is_hfs_dot<needle>` or `is_ntfs_dot<needle>`).
pub(super) fn is_dot(name: &[u8], needle: &str, short: &str) -> bool {
    is_hfs_dot(name, needle) || is_ntfs_dot(name, needle, short)
}

#[derive(Debug, PartialEq)]
pub(super) enum Order {
    Sorted,
    Unsorted,
    Duplicate,
}

/// git's `verify_ordered`: whether entry 2 may follow entry 1 in a tree. Folders sort as if their name ended in `/`;
/// `candidates` holds the file names that a later folder of the same name would duplicate (`foo`, `foo.bar`, then
/// `foo/`: the two `foo` are not next to each other).
pub(super) fn verify_ordered<'a>(
    mode1: u16,
    name1: &'a [u8],
    mode2: u16,
    name2: &'a [u8],
    candidates: &mut Vec<&'a [u8]>,
) -> Order {
    let len = name1.len().min(name2.len());
    match name1[..len].cmp(&name2[..len]) {
        std::cmp::Ordering::Less => return Order::Sorted,
        std::cmp::Ordering::Greater => return Order::Unsorted,
        std::cmp::Ordering::Equal => {}
    }
    let mut c1 = name1.get(len).copied().unwrap_or(0);
    let mut c2 = name2.get(len).copied().unwrap_or(0);
    if c1 == 0 && c2 == 0 {
        return Order::Duplicate;
    }
    if c1 == 0 && mode1 & S_IFMT == S_IFDIR {
        c1 = b'/';
    }
    if c2 == 0 && mode2 & S_IFMT == S_IFDIR {
        c2 = b'/';
    }
    let less_than_slash = |c: u8| c != 0 && c < b'/';
    if c1 == 0 && less_than_slash(c2) {
        candidates.push(name1);
    } else if c2 == b'/' && less_than_slash(c1) {
        while let Some(file) = candidates.pop() {
            let Some(rest) = name2.strip_prefix(file) else { continue };
            match rest.first() {
                None => return Order::Duplicate,
                Some(&c) if less_than_slash(c) => {
                    candidates.push(file);
                    break;
                }
                Some(_) => {}
            }
        }
    }
    if c1 < c2 { Order::Sorted } else { Order::Unsorted }
}

/// git's `pick_one_utf8_char` as `next_hfs_char` uses it: the next code point, `0` at the end and on malformed
/// UTF-8 (which git takes for the end too). Stricter than Rust's UTF-8: U+FFFE and U+FFFF are malformed to git.
pub(super) fn next_utf8(s: &mut &[u8]) -> u32 {
    let b = |i: usize| s.get(i).copied().unwrap_or(0);
    let cont = |c: u8| c & 0xc0 == 0x80;
    let (c, len) = match b(0) {
        0 => return 0,
        c0 if c0 < 0x80 => (u32::from(c0), 1),
        c0 if c0 & 0xe0 == 0xc0 => {
            if !cont(b(1)) || c0 & 0xfe == 0xc0 {
                return 0;
            }
            ((u32::from(c0 & 0x1f) << 6) | u32::from(b(1) & 0x3f), 2)
        }
        c0 if c0 & 0xf0 == 0xe0 => {
            let (c1, c2) = (b(1), b(2));
            if !cont(c1)
                || !cont(c2)
                || (c0 == 0xe0 && c1 & 0xe0 == 0x80)
                || (c0 == 0xed && c1 & 0xe0 == 0xa0)
                || (c0 == 0xef && c1 == 0xbf && c2 & 0xfe == 0xbe)
            {
                return 0;
            }
            ((u32::from(c0 & 0x0f) << 12) | (u32::from(c1 & 0x3f) << 6) | u32::from(c2 & 0x3f), 3)
        }
        c0 if c0 & 0xf8 == 0xf0 => {
            let (c1, c2, c3) = (b(1), b(2), b(3));
            if !cont(c1)
                || !cont(c2)
                || !cont(c3)
                || (c0 == 0xf0 && c1 & 0xf0 == 0x80)
                || (c0 == 0xf4 && c1 > 0x8f)
                || c0 > 0xf4
            {
                return 0;
            }
            (
                (u32::from(c0 & 0x07) << 18)
                    | (u32::from(c1 & 0x3f) << 12)
                    | (u32::from(c2 & 0x3f) << 6)
                    | u32::from(c3 & 0x3f),
                4,
            )
        }
        _ => return 0,
    };
    *s = &s[len..];
    c
}

/// Code points HFS+ ignores when it compares names (git's `next_hfs_char`): `.g\u{200c}it` is `.git` there.
pub(super) fn is_hfs_ignorable(c: u32) -> bool {
    matches!(c, 0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff)
}

pub(super) fn next_hfs_char(s: &mut &[u8]) -> u32 {
    loop {
        let c = next_utf8(s);
        if c == 0 {
            *s = &[];
            return 0;
        }
        if !is_hfs_ignorable(c) {
            return c;
        }
    }
}

/// git's `is_hfs_dot_generic`: `name` is `.<needle>` to HFS+ (any case, ignorable code points anywhere).
pub(super) fn is_hfs_dot(name: &[u8], needle: &str) -> bool {
    let mut s = name;
    if next_hfs_char(&mut s) != u32::from(b'.') {
        return false;
    }
    for n in needle.bytes() {
        let c = next_hfs_char(&mut s);
        if c > 127 || (c as u8).to_ascii_lowercase() != n {
            return false;
        }
    }
    let c = next_hfs_char(&mut s);
    c == 0 || c == u32::from(b'/')
}

/// NTFS drops trailing dots and spaces, and `:` starts a stream name (`.git::$INDEX_ALLOCATION` is `.git`).
pub(super) fn only_spaces_and_periods(rest: &[u8]) -> bool {
    for &c in rest {
        if c == b':' {
            return true;
        }
        if c != b' ' && c != b'.' {
            return false;
        }
    }
    true
}

/// git's `is_ntfs_dotgit`: `.git` or its 8.3 short name `git~1`, any case, then dots and spaces to the end, a
/// separator or a `:`.
pub(super) fn is_ntfs_dotgit(name: &[u8]) -> bool {
    let rest = if name.first() == Some(&b'.') && name.get(1..4).is_some_and(|g| g.eq_ignore_ascii_case(b"git")) {
        &name[4..]
    } else if name.get(..5).is_some_and(|g| g.eq_ignore_ascii_case(b"git~1")) {
        &name[5..]
    } else {
        return false;
    };
    for &c in rest {
        if c == b'/' || c == b'\\' || c == b':' {
            return true;
        }
        if c != b'.' && c != b' ' {
            return false;
        }
    }
    true
}

/// git's `is_ntfs_dot_generic`: `name` is `.<needle>` to NTFS: the long name, the short name `<first 6>~1` to `~4`,
/// or the fall-back short name `<short>~<digits>` (`short` is git's hash-like prefix for it, e.g. `gi7eba`).
pub(super) fn is_ntfs_dot(name: &[u8], needle: &str, short: &str) -> bool {
    let needle = needle.as_bytes();
    let short = short.as_bytes();
    if name.first() == Some(&b'.') && name.get(1..=needle.len()).is_some_and(|n| n.eq_ignore_ascii_case(needle)) {
        return only_spaces_and_periods(&name[needle.len() + 1..]);
    }
    if name.get(..6).zip(needle.get(..6)).is_some_and(|(n, d)| n.eq_ignore_ascii_case(d))
        && name.get(6) == Some(&b'~')
        && name.get(7).is_some_and(|c| (b'1'..=b'4').contains(c))
    {
        return only_spaces_and_periods(&name[8..]);
    }
    let mut saw_tilde = false;
    let mut i = 0;
    while i < 8 {
        let Some(&c) = name.get(i) else { return false };
        if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !name.get(i).is_some_and(|c| (b'1'..=b'9').contains(c)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c & 0x80 != 0 || short.get(i) != Some(&c.to_ascii_lowercase()) {
            return false;
        }
        i += 1;
    }
    only_spaces_and_periods(name.get(i..).unwrap_or_default())
}
