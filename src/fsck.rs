//! What lands is a tree git itself would accept.
//!
//! Git refuses some trees outright. `git fsck`, and every server or forge with `receive.fsckObjects` (which runs the
//! same checks, with `--strict`, on each push), rejects names that some filesystem would read as `.git` (a checkout
//! aborts on them, or worse, writes into the repository's own git directory) and `.gitmodules` files that would make
//! a clone run a command or take a url or path for an option. An agent's commits can hold such a thing, by accident
//! or because a prompt injection put it there; landing it gets the push refused by the forge, or, where nothing
//! checks, hands the hazard to everyone who clones. [`refusal`] is the check the runner makes before a landing: it
//! reads only the objects the work adds, and says in one sentence, for the agent to fix, which commit, which path and
//! which rule.
//!
//! The rules are git's own (`fsck.c`: `fsck_tree`, `fsck_blob`, `fsck_gitmodules_fn`; `submodule-config.c`:
//! `check_submodule_name`, `check_submodule_url`; `urlmatch.c`: `url_normalize`; unchanged from git 2.47 to 2.54),
//! ported rule for rule: every message git gives as an error, or as a warning (which `--strict` makes an error), about
//! a tree or about a `.gitmodules` or `.gitattributes` blob. Each message names git's id for it (`hasDotgit`,
//! `gitmodulesUpdate`, …), and the tests run the real `git fsck --strict` over the same objects. A few rules are
//! stricter than git's and say "refused here" instead of "refused by git": a symbolic link as `.gitattributes`,
//! `.gitignore` or `.mailmap` (git 2.32 and later does not follow one, and its fsck only notes it), a `.gitmodules`
//! over 1 MiB or not readable as config, a submodule path that climbs out with `..` or is absolute, an absolute
//! submodule name, an `ext::` url, and a newline in any kind of url.
//!
//! Not checked: the commits' own headers (author, committer, dates), which `git commit` and the runner's replays
//! write well-formed and an agent would have to forge by hand; file modes git only notes (`badFilemode` is "info");
//! and the depth of trees (git's `core.maxTreeDepth`, 2048, is no fsck rule).

use std::collections::{HashMap, HashSet};

use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};
use gix::objs::Kind;

use crate::escape;

/// How many commits one landing may bring: past it the check would take longer than a landing is worth, and no
/// task's work is that long.
const MAX_COMMITS: usize = 10_000;
/// git's `max_tree_entry_len`: a longer name is `largePathname`.
const MAX_NAME: usize = 4096;
/// Ours: a `.gitmodules` larger than this is not read (git refuses one only when it cannot load it at all).
const MAX_GITMODULES: u64 = 1 << 20;
/// git's `ATTR_MAX_FILE_SIZE` (attr.h): a larger `.gitattributes` is `gitattributesLarge`.
const MAX_GITATTRIBUTES: u64 = 100 * 1024 * 1024;
/// git's `ATTR_MAX_LINE_LENGTH` (attr.h): a line this long or longer is `gitattributesLineLength`.
const MAX_ATTRIBUTES_LINE: usize = 2048;
/// How much of a name or value a message quotes.
const MAX_SHOWN: usize = 120;

/// The kind bits of a tree entry's mode, as git reads them (16 bits, raw: fsck does not canonicalize).
const S_IFMT: u16 = 0o170000;
const S_IFDIR: u16 = 0o040000;
const S_IFLNK: u16 = 0o120000;
const S_IFGITLINK: u16 = 0o160000;

/// Why the commits `base..head` (commit ids in `repo`; `base` is on the target, `head` is the work) hold something
/// git's fsck (with `receive.fsckObjects`) would refuse, if they do: a sentence naming the commit (12 hex), the path
/// and the rule, e.g. "commit 1a2b3c4d5e6f adds `a/.GIT`: a name that git reads as `.git` … is refused by git (fsck:
/// hasDotgit)". `None`: all clear.
///
/// Every commit reachable from `head` and not from `base` is checked (all parents, merges too), and in each only
/// the trees it does not share with a parent at the same path: what a parent holds was checked with that parent,
/// or is on the target already. `Err`: the objects could not be read.
pub(crate) fn refusal(repo: &gix::Repository, base: ObjectId, head: ObjectId) -> Result<Option<String>, String> {
    refusal_within(repo, base, head, MAX_COMMITS)
}

fn refusal_within(
    repo: &gix::Repository,
    base: ObjectId,
    head: ObjectId,
    max_commits: usize,
) -> Result<Option<String>, String> {
    let walk = repo
        .rev_walk([head])
        .with_hidden([base])
        .all()
        .map_err(|e| format!("cannot walk the commits {base}..{head}: {e}"))?;
    let mut commits = Vec::new();
    for info in walk {
        let info = info.map_err(|e| format!("cannot walk the commits {base}..{head}: {e}"))?;
        if commits.len() == max_commits {
            return Ok(Some(format!(
                "the work holds more than {max_commits} commits that the target does not: more than git-swarm \
                 checks before a landing"
            )));
        }
        commits.push((info.id, info.parent_ids.to_vec()));
    }
    // Oldest first: a finding then names the commit that brought it, not a later one that kept it.
    commits.reverse();
    let mut check = Check::new(repo);
    // Trees on the target were accepted when they landed.
    if let Some(tree) = tree_of(repo, base)? {
        check.trees.insert(tree);
    }
    for (id, parents) in commits {
        let tree = tree_of(repo, id)?.ok_or_else(|| format!("commit {id} is missing"))?;
        let mut kept = Vec::new();
        for parent in parents {
            kept.extend(tree_of(repo, parent)?);
        }
        if let Some(Finding { at, rule }) = check.tree(tree, kept)? {
            return Ok(Some(format!("commit {} adds {at}: {rule}", id.to_hex_with_len(12))));
        }
    }
    Ok(None)
}

/// The tree of commit `id`; `None` where the commit is not in the repository (a shallow clone's boundary).
fn tree_of(repo: &gix::Repository, id: ObjectId) -> Result<Option<ObjectId>, String> {
    let Some(object) = repo.try_find_object(id).map_err(|e| format!("cannot read commit {id}: {e}"))? else {
        return Ok(None);
    };
    let commit = object.try_into_commit().map_err(|e| format!("cannot read commit {id}: {e}"))?;
    Ok(Some(commit.tree_id().map_err(|e| format!("cannot read the tree of commit {id}: {e}"))?.detach()))
}

/// What git refuses and where: `at` is already quoted for a message ("`a/.GIT`", "folder `a`", "the top folder").
#[derive(Debug)]
struct Finding {
    at: String,
    rule: String,
}

impl Finding {
    fn entry(folder: &[u8], name: &[u8], rule: String) -> Finding {
        Finding { at: format!("`{}`", shown(&join(folder, name))), rule }
    }

    fn folder(path: &[u8], rule: String) -> Finding {
        let at = if path.is_empty() { "the top folder".to_string() } else { format!("folder `{}`", shown(path)) };
        Finding { at, rule }
    }
}

/// One entry of a tree as git's `decode_tree_entry` reads it: the mode as written and as a number, the name, the id.
struct Entry<'a> {
    mode_text: &'a [u8],
    mode: u16,
    name: &'a [u8],
    oid: ObjectId,
}

impl Entry<'_> {
    fn kind(&self) -> u16 {
        self.mode & S_IFMT
    }
}

/// The entries of a tree's bytes, parsed as git parses them (`decode_tree_entry`, `parse_mode`): `Err` with git's
/// words where git cannot parse them (fsck: `badTree`). Our own parser rather than gix's: fsck rules look at what
/// gix smooths over (a zero-padded mode, the order of entries, duplicates).
fn parse_tree(data: &[u8], hash_len: usize) -> Result<Vec<Entry<'_>>, &'static str> {
    let mut entries = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        if rest.len() < hash_len + 3 || rest[rest.len() - (hash_len + 1)] != 0 {
            return Err("too-short tree object");
        }
        let digits = rest.iter().take_while(|b| (b'0'..=b'7').contains(*b)).count();
        if digits == 0 || rest.get(digits) != Some(&b' ') {
            return Err("malformed mode in tree entry");
        }
        let mode_text = &rest[..digits];
        // git accumulates in an `unsigned int` and keeps 16 bits: so do we, so that an overlong mode means the same.
        let mode = mode_text.iter().fold(0u32, |m, d| m.wrapping_shl(3).wrapping_add(u32::from(d - b'0'))) as u16;
        let after = &rest[digits + 1..];
        let nul = after.find_byte(0).ok_or("too-short tree object")?;
        if nul == 0 {
            return Err("empty filename in tree entry");
        }
        let id = after.get(nul + 1..nul + 1 + hash_len).ok_or("too-short tree file")?;
        let oid = ObjectId::try_from(id).map_err(|_| "too-short tree file")?;
        entries.push(Entry { mode_text, mode, name: &after[..nul], oid });
        rest = &after[nul + 1 + hash_len..];
    }
    Ok(entries)
}

/// The walk over the work's trees, with what it checked already: git checks each object once, whatever path or
/// commit leads to it, and so can we.
struct Check<'r> {
    repo: &'r gix::Repository,
    hash_len: usize,
    /// Trees checked (or on the target).
    trees: HashSet<ObjectId>,
    /// `.gitmodules` and `.gitattributes` blobs found clean.
    clean: HashSet<(DotFile, ObjectId)>,
}

impl<'r> Check<'r> {
    fn new(repo: &'r gix::Repository) -> Self {
        Check { repo, hash_len: repo.object_hash().len_in_bytes(), trees: HashSet::new(), clean: HashSet::new() }
    }

    /// The first thing git refuses in tree `root` or below it, skipping a subtree that one of the `kept` trees (the
    /// parents' trees) holds at the same path. A loop with a stack, not recursion: a tree can be deeper than a stack.
    fn tree(&mut self, root: ObjectId, kept: Vec<ObjectId>) -> Result<Option<Finding>, String> {
        let mut stack = vec![(root, BString::default(), kept)];
        while let Some((id, path, kept)) = stack.pop() {
            if kept.contains(&id) || !self.trees.insert(id) {
                continue;
            }
            let object = self
                .repo
                .try_find_object(id)
                .map_err(|e| format!("cannot read tree {id}: {e}"))?
                .ok_or_else(|| format!("tree {id} (at `{}`) is missing", shown(&path)))?;
            if object.kind != Kind::Tree {
                return Ok(Some(Finding::folder(
                    &path,
                    format!("it is listed as a folder but is a {}: git cannot read it as a tree", object.kind),
                )));
            }
            let entries = match parse_tree(&object.data, self.hash_len) {
                Ok(entries) => entries,
                Err(why) => {
                    return Ok(Some(Finding::folder(
                        &path,
                        format!("git cannot parse it as a tree ({why}; fsck: badTree)"),
                    )));
                }
            };
            if let Some(finding) = tree_rule(&path, &entries) {
                return Ok(Some(finding));
            }
            for entry in &entries {
                if let Some(rule) = self.dotfile(entry)? {
                    return Ok(Some(Finding::entry(&path, entry.name, rule)));
                }
            }
            let new: Vec<&Entry<'_>> =
                entries.iter().filter(|e| e.kind() == S_IFDIR && !self.trees.contains(&e.oid)).collect();
            if new.is_empty() {
                continue;
            }
            let mut before = Vec::new();
            for id in &kept {
                before.push(self.folders(*id)?);
            }
            for entry in new {
                let same = before.iter().filter_map(|folders| folders.get(entry.name).copied()).collect();
                stack.push((entry.oid, join(&path, entry.name), same));
            }
        }
        Ok(None)
    }

    /// The folders of tree `id` by name: a parent's, to skip what a commit kept. Empty where `id` is not a tree
    /// git reads: then nothing is skipped.
    fn folders(&self, id: ObjectId) -> Result<HashMap<Vec<u8>, ObjectId>, String> {
        let Some(object) = self.repo.try_find_object(id).map_err(|e| format!("cannot read tree {id}: {e}"))? else {
            return Ok(HashMap::new());
        };
        if object.kind != Kind::Tree {
            return Ok(HashMap::new());
        }
        Ok(parse_tree(&object.data, self.hash_len)
            .map(|entries| entries.iter().filter(|e| e.kind() == S_IFDIR).map(|e| (e.name.to_vec(), e.oid)).collect())
            .unwrap_or_default())
    }

    /// What git refuses about an entry named as one of the files git itself reads (`.gitmodules`, `.gitattributes`,
    /// `.gitignore`, `.mailmap`, in any of their NTFS and HFS+ spellings): a symbolic link, or content it refuses.
    fn dotfile(&mut self, entry: &Entry<'_>) -> Result<Option<String>, String> {
        let link = entry.kind() == S_IFLNK;
        if is_gitmodules(entry.name) {
            if link {
                return Ok(Some(
                    "a `.gitmodules` that is a symbolic link is refused by git (fsck: gitmodulesSymlink)".into(),
                ));
            }
            if let Some(rule) = self.content(entry, DotFile::Gitmodules)? {
                return Ok(Some(rule));
            }
        }
        if is_dot(entry.name, "gitattributes", "gi7d29") {
            if link {
                return Ok(Some(symlink_rule(".gitattributes", "gitattributesSymlink")));
            }
            if let Some(rule) = self.content(entry, DotFile::Gitattributes)? {
                return Ok(Some(rule));
            }
        }
        if link && is_dot(entry.name, "gitignore", "gi250a") {
            return Ok(Some(symlink_rule(".gitignore", "gitignoreSymlink")));
        }
        if link && is_dot(entry.name, "mailmap", "maba30") {
            return Ok(Some(symlink_rule(".mailmap", "mailmapSymlink")));
        }
        Ok(None)
    }

    /// A `.gitmodules` or `.gitattributes` entry that is not a symbolic link: git reads the object it names, and
    /// refuses one that is no blob, too large, or that it refuses the content of.
    fn content(&mut self, entry: &Entry<'_>, file: DotFile) -> Result<Option<String>, String> {
        if self.clean.contains(&(file, entry.oid)) {
            return Ok(None);
        }
        let Some(size) = self.blob_size(entry, file)? else {
            return Ok(Some(not_a_file(entry, file)));
        };
        if size > file.max_size() {
            return Ok(Some(file.too_large().into()));
        }
        let blob = self.read(entry.oid)?;
        let rule = match file {
            DotFile::Gitmodules => gitmodules_rule(&blob),
            DotFile::Gitattributes => gitattributes_rule(&blob),
        };
        if rule.is_none() {
            self.clean.insert((file, entry.oid));
        }
        Ok(rule)
    }

    /// The size of the blob a special file's entry names; `None` where it names no blob (a folder, a submodule, an
    /// object of another kind): git reads the object whatever the mode says, and refuses what is not a blob.
    fn blob_size(&self, entry: &Entry<'_>, file: DotFile) -> Result<Option<u64>, String> {
        if matches!(entry.kind(), S_IFDIR | S_IFGITLINK) {
            return Ok(None);
        }
        let (id, name) = (entry.oid, file.name());
        let header = self
            .repo
            .try_find_header(id)
            .map_err(|e| format!("cannot read object {id} (a `{name}`): {e}"))?
            .ok_or_else(|| format!("object {id} (a `{name}`) is missing"))?;
        Ok((header.kind() == Kind::Blob).then(|| header.size()))
    }

    fn read(&self, id: ObjectId) -> Result<Vec<u8>, String> {
        let mut object = self.repo.find_object(id).map_err(|e| format!("cannot read blob {id}: {e}"))?;
        Ok(std::mem::take(&mut object.data))
    }
}

fn symlink_rule(file: &str, id: &str) -> String {
    format!(
        "a `{file}` that is a symbolic link is refused here: git (2.32 and later) does not follow it, and its fsck \
         notes it ({id})"
    )
}

fn not_a_file(entry: &Entry<'_>, file: DotFile) -> String {
    let (kind, id) = match entry.kind() {
        S_IFDIR => ("a folder", "Blob"),
        S_IFGITLINK => ("a submodule", "Missing"),
        _ => ("an object other than a blob", "Blob"),
    };
    format!("a `{}` that is {kind}, not a file, is refused by git (fsck: {}{id})", file.name(), file.id())
}

/// The files whose content git's fsck reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum DotFile {
    Gitmodules,
    Gitattributes,
}

impl DotFile {
    fn name(self) -> &'static str {
        match self {
            DotFile::Gitmodules => ".gitmodules",
            DotFile::Gitattributes => ".gitattributes",
        }
    }

    /// The start of git's message ids about it.
    fn id(self) -> &'static str {
        match self {
            DotFile::Gitmodules => "gitmodules",
            DotFile::Gitattributes => "gitattributes",
        }
    }

    fn max_size(self) -> u64 {
        match self {
            DotFile::Gitmodules => MAX_GITMODULES,
            DotFile::Gitattributes => MAX_GITATTRIBUTES,
        }
    }

    fn too_large(self) -> &'static str {
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
fn tree_rule(path: &[u8], entries: &[Entry<'_>]) -> Option<Finding> {
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
fn name_rule(entry: &Entry<'_>) -> Option<String> {
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
fn after_backslashes(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    name.iter().enumerate().filter(|(_, b)| **b == b'\\').map(move |(i, _)| &name[i + 1..])
}

/// `.gitmodules` as git recognizes it in a tree (`fsck_tree`): HFS+ or NTFS spelling, or NTFS after a backslash.
fn is_gitmodules(name: &[u8]) -> bool {
    is_dot(name, "gitmodules", "gi7eba")
        || after_backslashes(name).any(|rest| is_ntfs_dot(rest, "gitmodules", "gi7eba"))
}

/// `.<needle>` as HFS+ or NTFS would read `name` (git's `is_hfs_dot<needle>` or `is_ntfs_dot<needle>`).
fn is_dot(name: &[u8], needle: &str, short: &str) -> bool {
    is_hfs_dot(name, needle) || is_ntfs_dot(name, needle, short)
}

#[derive(Debug, PartialEq)]
enum Order {
    Sorted,
    Unsorted,
    Duplicate,
}

/// git's `verify_ordered`: whether entry 2 may follow entry 1 in a tree. Folders sort as if their name ended in `/`;
/// `candidates` holds the file names that a later folder of the same name would duplicate (`foo`, `foo.bar`, then
/// `foo/`: the two `foo` are not next to each other).
fn verify_ordered<'a>(
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
fn next_utf8(s: &mut &[u8]) -> u32 {
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
fn is_hfs_ignorable(c: u32) -> bool {
    matches!(c, 0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff)
}

fn next_hfs_char(s: &mut &[u8]) -> u32 {
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
fn is_hfs_dot(name: &[u8], needle: &str) -> bool {
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
fn only_spaces_and_periods(rest: &[u8]) -> bool {
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
fn is_ntfs_dotgit(name: &[u8]) -> bool {
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
fn is_ntfs_dot(name: &[u8], needle: &str, short: &str) -> bool {
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

/// What git refuses in a `.gitmodules` blob (`fsck_gitmodules_fn`), and what we refuse besides: the first
/// submodule setting at fault.
fn gitmodules_rule(data: &[u8]) -> Option<String> {
    let file =
        match gix::config::File::from_bytes_no_includes(data, gix::config::file::Metadata::api(), Default::default()) {
            Ok(file) => file,
            Err(e) => {
                return Some(format!(
                    "a `.gitmodules` that cannot be read as git config ({}) is refused here (git's fsck notes it: \
                     gitmodulesParse)",
                    escape::squash(&e)
                ));
            }
        };
    for section in file.sections() {
        let header = section.header();
        let Some(name) = header.subsection_name() else { continue };
        let body = section.body();
        // git looks at each `submodule.<name>.<key>` it reads: a section with no key is never looked at.
        if !header.name().eq_ignore_ascii_case(b"submodule") || body.num_values() == 0 {
            continue;
        }
        let rule = submodule_name_rule(name)
            .or_else(|| body.values("url").iter().find_map(|url| url_rule(url)))
            .or_else(|| body.values("path").iter().find_map(|path| path_rule(path)))
            .or_else(|| body.values("update").iter().find_map(|update| update_rule(update)));
        if let Some(rule) = rule {
            return Some(format!("a `.gitmodules` whose submodule `{}` {rule}", shown(name)));
        }
    }
    None
}

fn is_separator(c: u8) -> bool {
    c == b'/' || c == b'\\'
}

/// A `..` between separators (`/` or `\`, on every platform) or at either end.
fn has_dotdot_component(s: &[u8]) -> bool {
    s.split(|c| is_separator(*c)).any(|component| component == b"..")
}

/// Rooted on Unix (`/`), on Windows (`\`, `C:`).
fn is_absolute(s: &[u8]) -> bool {
    s.first().is_some_and(|c| is_separator(*c)) || (s.get(1) == Some(&b':') && s[0].is_ascii_alphabetic())
}

/// git's `check_submodule_name`, and ours: a name is a folder under `.git/modules/`.
fn submodule_name_rule(name: &[u8]) -> Option<String> {
    if name.is_empty() || has_dotdot_component(name) {
        return Some(
            "has a name that is empty or holds a `..` component: refused by git (fsck: gitmodulesName)".into(),
        );
    }
    if is_absolute(name) {
        return Some("has a name that is an absolute path: refused here".into());
    }
    None
}

/// git's check of `submodule.<name>.path` (`-` first), and ours: a path that climbs out or is absolute.
fn path_rule(path: &[u8]) -> Option<String> {
    let quoted = shown(path);
    if path.first() == Some(&b'-') {
        return Some(format!(
            "has path `{quoted}`, which starts with `-` and reads as an option: refused by git (fsck: \
             gitmodulesPath)"
        ));
    }
    if has_dotdot_component(path) || is_absolute(path) {
        return Some(format!("has path `{quoted}`, which leaves the repository: refused here"));
    }
    None
}

/// git's check of `submodule.<name>.update`: a `!command` would run on `git submodule update`.
fn update_rule(update: &[u8]) -> Option<String> {
    (update.first() == Some(&b'!')).then(|| {
        format!(
            "has update `{}`, a command `git submodule update` would run: refused by git (fsck: gitmodulesUpdate)",
            shown(update)
        )
    })
}

/// git's `check_submodule_url`, and ours (an `ext::` url, a newline in any kind of url).
fn url_rule(url: &[u8]) -> Option<String> {
    let quoted = shown(url);
    let by_git = |why: &str| Some(format!("has url `{quoted}`, {why}: refused by git (fsck: gitmodulesUrl)"));
    let here = |why: &str| Some(format!("has url `{quoted}`, {why}: refused here"));
    if url.first() == Some(&b'-') {
        return by_git("which starts with `-` and reads as an option");
    }
    // A newline, as is or %-escaped: git looks for one where the url may end up in a line that a credential helper
    // reads (relative, git:// and http(s)/ftp(s) urls); we look in every url.
    let escaped_newline = |s: &[u8]| s.windows(3).any(|w| w.eq_ignore_ascii_case(b"%0a"));
    let dot_slash = |s: &[u8]| s.first() == Some(&b'.') && s.get(1).is_some_and(|c| is_separator(*c));
    let dot_dot_slash = |s: &[u8]| s.starts_with(b"..") && s.get(2).is_some_and(|c| is_separator(*c));
    if dot_slash(url) || dot_dot_slash(url) || url.starts_with(b"git://") {
        // git's `url_decode` leaves what comes before the first `:` as it is.
        let decoded = match url.find_byte(b':') {
            Some(colon) if colon > 0 => &url[colon..],
            _ => url,
        };
        if url.contains(&b'\n') || escaped_newline(decoded) {
            return by_git("which holds a newline");
        }
        let mut rest = url;
        let mut climbs = 0;
        loop {
            if dot_dot_slash(rest) {
                climbs += 1;
                rest = &rest[3..];
            } else if dot_slash(rest) {
                rest = &rest[2..];
            } else {
                break;
            }
        }
        if climbs > 0 && matches!(rest.first(), Some(b':' | b'/')) {
            return by_git("whose `../` climbs past the host into `:` or `/` (CVE-2020-11008)");
        }
    } else if let Some(curl) = curl_url(url) {
        if !url_normalizes(curl) {
            return by_git("which git cannot normalize (scheme, host, port, `%` escape or `..`)");
        }
        if escaped_newline(curl) {
            return by_git("which holds a newline");
        }
    } else {
        if url.get(..5).is_some_and(|s| s.eq_ignore_ascii_case(b"ext::")) {
            return here("which runs a command through git's `ext` transport");
        }
        if url.contains(&b'\n') || escaped_newline(url) {
            return here("which holds a newline");
        }
    }
    None
}

/// git's `url_to_curl_url`: the url curl would get, for the transports git hands to curl.
fn curl_url(url: &[u8]) -> Option<&[u8]> {
    for helper in [&b"http::"[..], b"https::", b"ftp::", b"ftps::"] {
        if let Some(rest) = url.strip_prefix(helper) {
            return Some(rest);
        }
    }
    [&b"http://"[..], b"https://", b"ftp://", b"ftps://"].iter().any(|scheme| url.starts_with(scheme)).then_some(url)
}

/// git's `append_normalized_escapes` as a check: every `%` starts two hex digits.
fn escapes_ok(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            if !s.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// A path segment as `url_normalize` leaves it, as far as `.` and `..` go: `%2e` is a dot, any other byte is not
/// (and never a `/`: an escaped one stays escaped).
fn dots_of_segment(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let dot = if s[i] == b'%' {
            let dot = s.get(i + 1..i + 3).is_some_and(|h| h.eq_ignore_ascii_case(b"2e"));
            i += 3;
            dot
        } else {
            i += 1;
            s[i - 1] == b'.'
        };
        out.push(if dot { b'.' } else { b'x' });
    }
    out
}

/// Whether git's `url_normalize` accepts `url` (a url curl would get): a scheme and `://`, a host (but for
/// `file:`), a port from 1 to 65535, `%` escapes of two hex digits, no `..` above the root of the path.
fn url_normalizes(url: &[u8]) -> bool {
    let is_scheme = |c: &u8| c.is_ascii_alphanumeric() || b"+.-".contains(c);
    let scheme = url.iter().take_while(|c| is_scheme(c)).count();
    if scheme == 0 || !url[0].is_ascii_alphabetic() || url.get(scheme..scheme + 3) != Some(&b"://"[..]) {
        return false;
    }
    let is_file = url[..scheme].eq_ignore_ascii_case(b"file");
    let mut rest = &url[scheme + 3..];
    let mut slash = rest.iter().position(|c| b"/?#".contains(c)).unwrap_or(rest.len());
    if let Some(at) = rest.find_byte(b'@')
        && at < slash
    {
        if !escapes_ok(&rest[..at]) {
            return false;
        }
        rest = &rest[at + 1..];
        slash -= at + 1;
    }
    let no_host = rest.first().is_none_or(|c| b":/?#".contains(c));
    if no_host && !is_file {
        return false;
    }
    // The port's `:` is the last one before the path that is not inside an IPv6 literal's `[…]`.
    let mut colon = slash;
    if slash > 0 {
        let mut i = slash - 1;
        while i > 0 && rest[i] != b':' && rest[i] != b']' {
            i -= 1;
        }
        if rest[i] == b':' {
            colon = i;
        }
    }
    if no_host && colon < slash && colon + 1 != slash {
        return false;
    }
    let host = rest.iter().take_while(|c| c.is_ascii_alphanumeric() || b".-_[:]".contains(c)).count();
    if host < colon {
        return false;
    }
    if colon < slash {
        let mut p = colon + 1;
        while p < slash && rest[p] == b'0' {
            p += 1;
        }
        if p == slash && rest[p - 1] == b'0' {
            p -= 1;
        }
        if p != slash {
            let port = &rest[p..slash];
            if !port.iter().all(u8::is_ascii_digit) {
                return false;
            }
            let number = if port.len() <= 5 { port.to_str().ok().and_then(|s| s.parse::<u32>().ok()) } else { None };
            if !number.is_some_and(|n| (1..=65535).contains(&n)) {
                return false;
            }
        }
    }
    let mut rest = &rest[slash..];
    // The path as `url_normalize` builds it, each segment reduced to its dots, to find a `..` with nothing to remove.
    let mut path = vec![b'/'];
    if rest.first() == Some(&b'/') {
        rest = &rest[1..];
    }
    loop {
        let start = path.len();
        let next = rest.iter().position(|c| b"/?#".contains(c)).unwrap_or(rest.len());
        if !escapes_ok(&rest[..next]) {
            return false;
        }
        path.extend(dots_of_segment(&rest[..next]));
        let mut skip_slash = false;
        if path[start..] == b"."[..] {
            if start == 1 {
                path.truncate(path.len() - 1);
                skip_slash = true;
            } else {
                path.truncate(path.len() - 2);
            }
        } else if path[start..] == b".."[..] {
            let mut previous = path.len() - 3;
            if previous == 0 {
                return false;
            }
            loop {
                previous -= 1;
                if path[previous] == b'/' {
                    break;
                }
            }
            if previous == 0 {
                path.truncate(1);
                skip_slash = true;
            } else {
                path.truncate(previous);
            }
        }
        rest = &rest[next..];
        if rest.first() != Some(&b'/') {
            break;
        }
        rest = &rest[1..];
        if !skip_slash {
            path.push(b'/');
        }
    }
    escapes_ok(rest)
}

/// git's check of a `.gitattributes` blob: the lines it reads (up to a NUL) are shorter than 2048 bytes.
fn gitattributes_rule(data: &[u8]) -> Option<String> {
    let text = &data[..data.find_byte(0).unwrap_or(data.len())];
    text.split(|c| *c == b'\n').any(|line| line.len() >= MAX_ATTRIBUTES_LINE).then(|| {
        format!(
            "a `.gitattributes` with a line of {MAX_ATTRIBUTES_LINE} bytes or more is refused by git (fsck: \
             gitattributesLineLength)"
        )
    })
}

fn join(folder: &[u8], name: &[u8]) -> BString {
    let mut path = BString::from(folder);
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// A name or value from the work, for a message: control, bidirectional and HFS+-ignorable characters escaped (so
/// that `.g\u{200c}it` does not read as `.git`, and a name cannot forge a line), bytes that are not UTF-8 as `\xNN`,
/// and cut short.
fn shown(s: &[u8]) -> String {
    let mut out = String::new();
    for chunk in s.utf8_chunks() {
        for c in escape::line(chunk.valid()).chars() {
            if is_hfs_ignorable(u32::from(c)) {
                out.extend(c.escape_unicode());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if out.chars().count() > MAX_SHOWN {
        out = out.chars().take(MAX_SHOWN).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use gix::objs::Write as _;

    use super::*;

    /// An entry to write: mode as written, name, id.
    type Raw<'a> = (&'a str, &'a [u8], ObjectId);

    struct Repo {
        dir: tempfile::TempDir,
        repo: gix::Repository,
    }

    impl Repo {
        fn new() -> Repo {
            let dir = tempfile::tempdir().expect("tempdir");
            let repo = gix::init_bare(dir.path()).expect("init");
            Repo { dir, repo }
        }

        fn blob(&self, data: &[u8]) -> ObjectId {
            self.repo.write_blob(data).expect("blob").detach()
        }

        /// A tree written byte for byte, its entries in the order given: gix's own writers refuse `.git` and
        /// unsorted entries, and these tests need both.
        fn raw_tree(&self, entries: &[Raw<'_>]) -> ObjectId {
            let mut buf = Vec::new();
            for (mode, name, id) in entries {
                buf.extend_from_slice(mode.as_bytes());
                buf.push(b' ');
                buf.extend_from_slice(name);
                buf.push(0);
                buf.extend_from_slice(id.as_bytes());
            }
            self.repo.objects.write_buf(Kind::Tree, &buf).expect("tree")
        }

        /// A tree of `entries` in git's order: folders sort as if their name ended in `/`.
        fn tree(&self, entries: &[Raw<'_>]) -> ObjectId {
            let mut sorted = entries.to_vec();
            sorted.sort_by_key(|(mode, name, _)| {
                let mut key = name.to_vec();
                if mode.trim_start_matches('0') == "40000" {
                    key.push(b'/');
                }
                key
            });
            self.raw_tree(&sorted)
        }

        /// A folder path `a/b/c` down to the entries `leaf` (what `c` holds): the tree of `a`.
        fn nested(&self, path: &str, leaf: &[Raw<'_>]) -> ObjectId {
            let mut tree = self.tree(leaf);
            for name in path.split('/').collect::<Vec<_>>()[1..].iter().rev() {
                tree = self.tree(&[("40000", name.as_bytes(), tree)]);
            }
            tree
        }

        fn commit(&self, tree: ObjectId, parents: &[ObjectId]) -> ObjectId {
            let who = crate::store::Identity { name: "Test".into(), email: "test@example.com".into() };
            let store = crate::store::Store::from_repo(self.repo.clone());
            store
                .write_commit(tree, parents, "work\n", &who, crate::time::Timestamp::from_secs(1_700_000_000))
                .expect("commit")
        }

        /// The target's tip: a README and `src/lib.rs`.
        fn base_entries(&self) -> Vec<Raw<'static>> {
            let lib = self.blob(b"pub fn f() {}\n");
            vec![
                ("100644", b"README", self.blob(b"hello\n")),
                ("40000", b"src", self.tree(&[("100644", b"lib.rs", lib)])),
            ]
        }

        /// The target's tip, and one commit on it that adds `added` to the top folder.
        fn work(&self, added: &[Raw<'_>]) -> (ObjectId, ObjectId) {
            let mut entries = self.base_entries();
            let base = self.commit(self.tree(&entries), &[]);
            entries.extend_from_slice(added);
            let head = self.commit(self.tree(&entries), &[base]);
            (base, head)
        }

        fn check(&self, base: ObjectId, head: ObjectId) -> Option<String> {
            refusal(&self.repo, base, head).expect("the check runs")
        }

        /// `git fsck --strict` over every object here: what it says where it refuses them, `None` where it accepts.
        fn git_fsck(&self) -> Option<String> {
            let out = crate::gitcmd::base()
                .args(["fsck", "--strict", "--no-dangling", "--no-progress"])
                .env("GIT_DIR", self.dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .expect("git runs");
            (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The refusal of a work that adds `added` to the top folder, if any.
    fn refusal_of(added: impl Fn(&Repo) -> Vec<Raw<'static>>) -> Option<String> {
        let r = Repo::new();
        let added = added(&r);
        let (base, head) = r.work(&added);
        r.check(base, head)
    }

    fn file(r: &Repo, name: &'static [u8]) -> Vec<Raw<'static>> {
        vec![("100644", name, r.blob(b"x\n"))]
    }

    fn gitmodules(text: &str) -> Option<String> {
        gitmodules_rule(text.as_bytes())
    }

    #[test]
    fn a_clean_work_passes_and_git_agrees() {
        let r = Repo::new();
        let modules = r.blob(b"[submodule \"sub\"]\n\tpath = lib/sub\n\turl = https://example.com/sub.git\n\tupdate = rebase\n[submodule \"rel\"]\n\tpath = lib/rel\n\turl = ../rel.git\n");
        let gitlink = ObjectId::from_hex(b"1234567890123456789012345678901234567890").expect("hex");
        let lib =
            r.tree(&[("160000", b"sub", gitlink), ("160000", b"rel", gitlink), ("100644", b"a.rs", r.blob(b"a\n"))]);
        let x = r.blob(b"x\n");
        // Names that look like `.git` and its files, and are not to git.
        let lookalikes = r.tree(&[
            ("100644", b".gitignore", x),
            ("100644", b".github", x),
            ("100644", b".gitx", x),
            ("100644", b"git~2", x),
            ("100644", b".git-blame-ignore-revs", x),
            ("100644", b"a\\b", x),
            ("100644", b"a:b", x),
            ("100644", b"con", x),
            ("100644", b"...", x),
            ("100755", b"run.sh", x),
            ("120000", b"link", r.blob(b"../README")),
            ("100644", b".gitmodules", r.blob(b"# no submodules\n")),
        ]);
        let (base, head) = r.work(&[
            ("100644", b".gitmodules", modules),
            ("100644", b".gitattributes", r.blob(b"*.rs diff=rust\n")),
            ("40000", b"lib", lib),
            ("40000", b"look", lookalikes),
        ]);
        assert_eq!(r.check(base, head), None);
        assert_eq!(r.git_fsck(), None);
    }

    #[test]
    fn names_that_git_reads_as_dot_git_are_refused_at_any_depth() {
        let names: &[&[u8]] = &[
            b".git",
            b".GIT",
            b".gIt",
            b"git~1",
            b"GIT~1",
            b".git.",
            b".git ",
            b".git. . ",
            b".git::$INDEX_ALLOCATION",
            "\u{200c}.git".as_bytes(),
            ".g\u{200c}it".as_bytes(),
            ".git\u{feff}".as_bytes(),
            ".G\u{206f}IT".as_bytes(),
            b"a\\.git",
            b"a\\git~1\\b",
        ];
        for name in names {
            for as_folder in [true, false] {
                let r = Repo::new();
                let leaf: Vec<Raw<'_>> = if as_folder {
                    vec![("40000", name, r.tree(&[("100644", b"config", r.blob(b"[core]\n"))]))]
                } else {
                    vec![("100644", name, r.blob(b"x\n"))]
                };
                let (base, head) = r.work(&[("40000", b"deep", r.nested("deep/er", &leaf))]);
                let why = r.check(base, head).unwrap_or_else(|| panic!("{} passed", name.as_bstr()));
                assert!(why.starts_with(&format!("commit {} adds `deep/er/", head.to_hex_with_len(12))), "{why}");
                assert!(why.contains("(fsck: hasDotgit)"), "{why}");
            }
        }
    }

    #[test]
    fn dot_dotdot_and_slash_names_are_refused() {
        for (name, id) in [(&b"."[..], "hasDot"), (b"..", "hasDotdot"), (b"a/b", "fullPathname")] {
            let why = refusal_of(|r| file(r, name)).expect("refused");
            assert!(why.ends_with(&format!("(fsck: {id})")), "{why}");
        }
        // `...` and `..a` are names like any other.
        assert_eq!(refusal_of(|r| file(r, b"...")), None);
        assert_eq!(refusal_of(|r| file(r, b"..a")), None);
    }

    #[test]
    fn zero_padded_modes_null_ids_and_long_names_are_refused() {
        let why = refusal_of(|r| vec![("040000", b"dir", r.tree(&[("100644", b"a", r.blob(b"a"))]))]).expect("refused");
        assert!(why.contains("`040000`") && why.ends_with("(fsck: zeroPaddedFilemode)"), "{why}");
        let why = refusal_of(|_| vec![("100644", b"null", ObjectId::null(gix::hash::Kind::Sha1))]).expect("refused");
        assert!(why.ends_with("(fsck: nullSha1)"), "{why}");
        let long: &'static [u8] = Box::leak(vec![b'a'; MAX_NAME + 1].into_boxed_slice());
        let why = refusal_of(|r| file(r, long)).expect("refused");
        assert!(why.ends_with("(fsck: largePathname)"), "{why}");
        let longest: &'static [u8] = &long[..MAX_NAME];
        assert_eq!(refusal_of(|r| file(r, longest)), None);
    }

    #[test]
    fn unsorted_duplicate_and_unparsable_trees_are_refused() {
        let r = Repo::new();
        let x = r.blob(b"x\n");
        let folder = r.tree(&[("100644", b"f", x)]);
        let refused = |entries: &[Raw<'_>]| {
            let (base, head) = r.work(&[("40000", b"odd", r.raw_tree(entries))]);
            r.check(base, head)
        };
        let why = refused(&[("100644", b"b", x), ("100644", b"a", x)]).expect("refused");
        assert!(why.contains("adds folder `odd`: its entries are not in git's order"), "{why}");
        assert!(why.ends_with("(fsck: treeNotSorted)"), "{why}");
        let why = refused(&[("100644", b"a", x), ("100644", b"a", x)]).expect("refused");
        assert!(why.ends_with("(fsck: duplicateEntries)"), "{why}");
        // A folder sorts as `a/`: after `a.b`, and a file `a` two places before it is its duplicate.
        assert_eq!(refused(&[("100644", b"a.b", x), ("40000", b"a", folder)]), None);
        let why = refused(&[("40000", b"a", folder), ("100644", b"a.b", x)]).expect("refused");
        assert!(why.ends_with("(fsck: treeNotSorted)"), "{why}");
        let why = refused(&[("100644", b"a", x), ("100644", b"a.b", x), ("40000", b"a", folder)]).expect("refused");
        assert!(why.ends_with("(fsck: duplicateEntries)"), "{why}");
        // Bytes git cannot parse as a tree.
        let garbage = r.repo.objects.write_buf(Kind::Tree, b"100644 a").expect("tree");
        let (base, head) = r.work(&[("40000", b"bad", garbage)]);
        let why = r.check(base, head).expect("refused");
        assert!(why.contains("adds folder `bad`: git cannot parse it as a tree"), "{why}");
        // A folder entry that names a blob.
        let (base, head) = r.work(&[("40000", b"blob", x)]);
        let why = r.check(base, head).expect("refused");
        assert!(why.contains("adds folder `blob`: it is listed as a folder but is a blob"), "{why}");
    }

    #[test]
    fn git_s_own_files_as_symbolic_links_are_refused() {
        for name in [&b".gitmodules"[..], b".GITMODULES", b"gitmod~1", b".gitmodules ", b"GI7EBA~1", b"a\\.gitmodules"]
        {
            let why = refusal_of(|r| vec![("120000", name, r.blob(b"/etc/passwd"))])
                .unwrap_or_else(|| panic!("{} passed", name.as_bstr()));
            assert!(why.ends_with("(fsck: gitmodulesSymlink)"), "{why}");
        }
        for (name, id) in [
            (&b".gitattributes"[..], "gitattributesSymlink"),
            (b".gitignore", "gitignoreSymlink"),
            (b".MAILMAP", "mailmapSymlink"),
        ] {
            let why = refusal_of(|r| vec![("120000", name, r.blob(b"elsewhere"))]).expect("refused");
            assert!(why.contains("refused here") && why.contains(id), "{why}");
            assert_eq!(refusal_of(|r| file(r, name)), None);
        }
    }

    #[test]
    fn git_s_own_files_that_are_not_files_are_refused() {
        let folder = |r: &Repo| r.tree(&[("100644", b"x", r.blob(b"x"))]);
        let commit = ObjectId::from_hex(b"1234567890123456789012345678901234567890").expect("hex");
        let why = refusal_of(|r| vec![("40000", b".gitmodules", folder(r))]).expect("refused");
        assert!(why.ends_with("(fsck: gitmodulesBlob)"), "{why}");
        let why = refusal_of(|_| vec![("160000", b".gitmodules", commit)]).expect("refused");
        assert!(why.ends_with("(fsck: gitmodulesMissing)"), "{why}");
        let why = refusal_of(|r| vec![("40000", b".gitattributes", folder(r))]).expect("refused");
        assert!(why.ends_with("(fsck: gitattributesBlob)"), "{why}");
        // A file mode over an object that is no blob.
        let why = refusal_of(|r| vec![("100644", b".gitmodules", folder(r))]).expect("refused");
        assert!(why.ends_with("(fsck: gitmodulesBlob)"), "{why}");
    }

    #[test]
    fn submodule_settings_git_refuses_are_refused() {
        let refused = [
            ("[submodule \"a\"]\n\tupdate = !rm -rf ~\n", "gitmodulesUpdate"),
            ("[submodule \"a\"]\n\tupdate = \"!sh x\"\n", "gitmodulesUpdate"),
            ("[Submodule \"a\"]\n\tUPDATE = !x\n", "gitmodulesUpdate"),
            ("[submodule.a]\n\tupdate = !x\n", "gitmodulesUpdate"),
            ("[submodule \"a\"]\n\turl = -oProxyCommand=touch%20x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\tpath = -x\n", "gitmodulesPath"),
            ("[submodule \"../../hooks\"]\n\tpath = a\n", "gitmodulesName"),
            ("[submodule \"a\\\\..\"]\n\tpath = a\n", "gitmodulesName"),
            ("[submodule \"\"]\n\tpath = a\n", "gitmodulesName"),
            ("[submodule \"a\"]\n\turl = https://example.com/a%0a.git\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = ./a%0Ab\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = ../:x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = ./..//example.com/x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = http::example.com/x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https:///x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://exa mple.com/x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://example.com:99999/x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://example.com:0/x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://example.com:8x/x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://example.com/%zz\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://u%g@example.com/\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://example.com/../x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = https://example.com/a/%2e%2e/../x\n", "gitmodulesUrl"),
            ("[submodule \"a\"]\n\turl = ftp://example.com/x?%q\n", "gitmodulesUrl"),
        ];
        for (text, id) in refused {
            let why = gitmodules(text).unwrap_or_else(|| panic!("{text:?} passed"));
            assert!(why.ends_with(&format!("(fsck: {id})")), "{text:?}: {why}");
        }
    }

    #[test]
    fn submodule_settings_refused_here_are_refused() {
        let refused = [
            "[submodule \"a\"]\n\tpath = ../outside\n",
            "[submodule \"a\"]\n\tpath = a/../../b\n",
            "[submodule \"a\"]\n\tpath = /etc\n",
            "[submodule \"a\"]\n\tpath = C:\\x\n",
            "[submodule \"/abs\"]\n\tpath = a\n",
            "[submodule \"a\"]\n\turl = ext::sh -c touch% /tmp/pwned\n",
            "[submodule \"a\"]\n\turl = EXT::x\n",
            "[submodule \"a\"]\n\turl = git@example.com:a%0a.git\n",
        ];
        for text in refused {
            let why = gitmodules(text).unwrap_or_else(|| panic!("{text:?} passed"));
            assert!(why.contains("refused here"), "{text:?}: {why}");
        }
        let why = gitmodules("[submodule \"a\"\n").expect("refused");
        assert!(why.contains("cannot be read as git config"), "{why}");
        let large = format!("[submodule \"a\"]\n\tpath = a\n#{}\n", "x".repeat(1 << 20));
        let why = refusal_of(|r| vec![("100644", b".gitmodules", r.blob(large.as_bytes()))]).expect("refused");
        assert!(why.contains("larger than 1 MiB"), "{why}");
    }

    #[test]
    fn ordinary_submodule_settings_pass() {
        let fine = [
            "",
            "# nothing\n",
            "[submodule \"a\"]\n\tpath = lib/a\n\turl = https://example.com/a.git\n\tupdate = checkout\n",
            "[submodule \"a\"]\n\turl = ../../other/a.git\n",
            "[submodule \"a\"]\n\turl = ./a\n",
            "[submodule \"a\"]\n\turl = git@github.com:owner/a.git\n",
            "[submodule \"a\"]\n\turl = ssh://git@example.com:2222/a.git\n",
            "[submodule \"a\"]\n\turl = git://example.com/a.git\n",
            "[submodule \"a\"]\n\turl = file:///srv/git/a.git\n",
            "[submodule \"a\"]\n\turl = https://example.com:443/a.git\n",
            "[submodule \"a\"]\n\turl = https://example.com:/a.git\n",
            "[submodule \"a\"]\n\turl = https://[::1]:8080/a.git\n",
            "[submodule \"a\"]\n\turl = https://user:p%40ss@example.com/a/../b.git?x=%41#f\n",
            "[submodule \"a\"]\n\turl = http::https://example.com/a.git\n",
            "[submodule \"a-b/c..d\"]\n\tpath = c..d\n",
            // git looks at a setting, not at a section: one with none is never read.
            "[submodule \"..\"]\n",
            // Not a submodule setting.
            "[core]\n\tupdate = !x\n[submodule]\n\tupdate = !x\n",
        ];
        for text in fine {
            assert_eq!(gitmodules(text), None, "{text:?}");
        }
    }

    #[test]
    fn gitattributes_with_a_line_git_cannot_read_is_refused() {
        let line = |n: usize| format!("*.rs diff=rust\n*{}\n", "x".repeat(n - 1));
        assert_eq!(refusal_of(|r| vec![("100644", b".gitattributes", r.blob(line(2047).as_bytes()))]), None);
        let why = refusal_of(|r| vec![("100644", b".gitattributes", r.blob(line(2048).as_bytes()))]).expect("refused");
        assert!(why.ends_with("(fsck: gitattributesLineLength)"), "{why}");
        // git reads up to a NUL.
        let after_nul = format!("a\0{}", "x".repeat(3000));
        assert_eq!(refusal_of(|r| vec![("100644", b".gitattributes", r.blob(after_nul.as_bytes()))]), None);
    }

    #[test]
    fn every_commit_of_the_work_counts_merges_too() {
        let r = Repo::new();
        let entries = r.base_entries();
        let base = r.commit(r.tree(&entries), &[]);
        let mut bad = entries.clone();
        bad.push(("100644", b"..", r.blob(b"x")));
        let adds = r.commit(r.tree(&bad), &[base]);
        let mut clean = entries.clone();
        clean.push(("100644", b"ok", r.blob(b"ok")));
        let removes = r.commit(r.tree(&clean), &[adds]);
        let why = r.check(base, removes).expect("refused");
        assert!(why.starts_with(&format!("commit {} adds `..`", adds.to_hex_with_len(12))), "{why}");

        // Brought in by a merge's second parent, never on the first-parent line.
        let side = r.commit(r.tree(&bad), &[base]);
        let main = r.commit(r.tree(&clean), &[base]);
        let merge = r.commit(r.tree(&clean), &[main, side]);
        let why = r.check(base, merge).expect("refused");
        assert!(why.starts_with(&format!("commit {} adds `..`", side.to_hex_with_len(12))), "{why}");

        // Nothing new: nothing to refuse.
        assert_eq!(r.check(base, base), None);
        assert_eq!(r.check(removes, adds), None);
    }

    #[test]
    fn what_the_target_holds_already_is_not_the_work_s_to_answer_for() {
        let r = Repo::new();
        let x = r.blob(b"x\n");
        let vendor = r.nested("vendor/lib", &[("40000", b".git", r.tree(&[("100644", b"config", x)]))]);
        let mut entries = r.base_entries();
        entries.push(("40000", b"vendor", vendor));
        let base = r.commit(r.tree(&entries), &[]);
        // A change beside the folder: its trees are the target's, unread.
        let mut beside = entries.clone();
        beside.push(("100644", b"new", x));
        let head = r.commit(r.tree(&beside), &[base]);
        assert_eq!(r.check(base, head), None);
        // A change inside it: a new tree that holds `.git`, which git refuses on the push.
        let changed =
            r.nested("vendor/lib", &[("40000", b".git", r.tree(&[("100644", b"config", x)])), ("100644", b"new", x)]);
        let mut inside = r.base_entries();
        inside.push(("40000", b"vendor", changed));
        let head = r.commit(r.tree(&inside), &[base]);
        let why = r.check(base, head).expect("refused");
        assert!(why.contains("adds `vendor/lib/.git`"), "{why}");
    }

    #[test]
    fn a_work_of_too_many_commits_is_refused() {
        let r = Repo::new();
        let entries = r.base_entries();
        let base = r.commit(r.tree(&entries), &[]);
        let mut tip = base;
        for i in 0..4u8 {
            let mut more = entries.clone();
            more.push(("100644", b"n", r.blob(&[i])));
            tip = r.commit(r.tree(&more), &[tip]);
        }
        assert_eq!(refusal_within(&r.repo, base, tip, 4).expect("runs"), None);
        let why = refusal_within(&r.repo, base, tip, 3).expect("runs").expect("refused");
        assert!(why.contains("more than 3 commits"), "{why}");
    }

    #[test]
    fn messages_show_what_a_name_hides() {
        let why = refusal_of(|r| file(r, ".g\u{200c}it".as_bytes())).expect("refused");
        assert!(why.contains("adds `.g\\u{200c}it`"), "{why}");
        let why =
            refusal_of(|r| vec![("40000", b"a\nb", r.tree(&[("100644", b"..", r.blob(b"x"))]))]).expect("refused");
        assert!(why.contains("adds `a\\nb/..`") && !why.contains('\n'), "{why}");
        let why =
            refusal_of(|r| vec![("40000", b"\xff", r.tree(&[("100644", b"..", r.blob(b"x"))]))]).expect("refused");
        assert!(why.contains("adds `\\xff/..`"), "{why}");
    }

    /// What a case adds to the top folder.
    type Build = Box<dyn Fn(&Repo) -> Vec<Raw<'static>>>;

    /// A folder `odd` written as `entries` say, in their order.
    fn odd(r: &Repo, entries: &[Raw<'_>]) -> Vec<Raw<'static>> {
        vec![("40000", b"odd", r.raw_tree(entries))]
    }

    /// The rules are git's: for each, the real `git fsck --strict` refuses the same work, with the same id. And
    /// the few of ours are not git's: git accepts what they refuse.
    #[test]
    fn git_fsck_refuses_what_we_refuse() {
        let commit = ObjectId::from_hex(b"1234567890123456789012345678901234567890").expect("hex");
        let modules =
            |text: &'static str| move |r: &Repo| vec![("100644", &b".gitmodules"[..], r.blob(text.as_bytes()))];
        let cases: Vec<(&str, Build, bool)> = vec![
            ("hasDotgit", Box::new(|r| vec![("40000", b".GIT", r.tree(&[("100644", b"config", r.blob(b"x"))]))]), true),
            ("hasDotgit", Box::new(|r| file(r, b"git~1")), true),
            ("hasDotgit", Box::new(|r| file(r, b".git. ")), true),
            ("hasDotgit", Box::new(|r| file(r, ".g\u{200c}it".as_bytes())), true),
            ("hasDotgit", Box::new(|r| file(r, b"a\\.git")), true),
            // Malformed UTF-8 (U+FFFF is, to git) ends a name for git's HFS+ check: this is `.git` to it.
            ("hasDotgit", Box::new(|r| file(r, b".git\xff")), true),
            ("hasDotgit", Box::new(|r| file(r, b".git\xef\xbf\xbf")), true),
            ("hasDotdot", Box::new(|r| file(r, b"..")), true),
            ("hasDot", Box::new(|r| file(r, b".")), true),
            ("fullPathname", Box::new(|r| file(r, b"a/b")), true),
            ("zeroPaddedFilemode", Box::new(|r| vec![("0100644", b"f", r.blob(b"x"))]), true),
            ("largePathname", Box::new(|r| file(r, Box::leak(vec![b'a'; MAX_NAME + 1].into_boxed_slice()))), true),
            (
                "treeNotSorted",
                Box::new(|r| odd(r, &[("100644", b"b", r.blob(b"x")), ("100644", b"a", r.blob(b"x"))])),
                true,
            ),
            (
                "duplicateEntries",
                Box::new(|r| odd(r, &[("100644", b"a", r.blob(b"x")), ("100644", b"a", r.blob(b"x"))])),
                true,
            ),
            (
                "duplicateEntries",
                Box::new(|r| {
                    let folder = r.tree(&[("100644", b"f", r.blob(b"x"))]);
                    odd(r, &[("100644", b"a", r.blob(b"x")), ("100644", b"a.b", r.blob(b"x")), ("40000", b"a", folder)])
                }),
                true,
            ),
            (
                "badTree",
                Box::new(|r| vec![("40000", b"odd", r.repo.objects.write_buf(Kind::Tree, b"100644 a").expect("tree"))]),
                true,
            ),
            ("nullSha1", Box::new(|_| vec![("100644", b"f", ObjectId::null(gix::hash::Kind::Sha1))]), true),
            ("gitmodulesSymlink", Box::new(|r| vec![("120000", b".gitmodules", r.blob(b"x"))]), true),
            ("gitmodulesSymlink", Box::new(|r| vec![("120000", b"gitmod~1", r.blob(b"x"))]), true),
            ("gitmodulesSymlink", Box::new(|r| vec![("120000", b"a\\.gitmodules", r.blob(b"x"))]), true),
            ("gitmodulesSymlink", Box::new(|r| vec![("120000", ".gitmodules\u{200d}".as_bytes(), r.blob(b"x"))]), true),
            (
                "gitmodulesUpdate",
                Box::new(|r| vec![("100644", b"GI7EBA~9 . ", r.blob(b"[submodule \"a\"]\n\tupdate = !x\n"))]),
                true,
            ),
            (
                "gitmodulesBlob",
                Box::new(|r| vec![("40000", b".gitmodules", r.tree(&[("100644", b"x", r.blob(b"x"))]))]),
                true,
            ),
            ("gitmodulesMissing", Box::new(move |_| vec![("160000", b".gitmodules", commit)]), true),
            ("gitmodulesUpdate", Box::new(modules("[submodule \"a\"]\n\tpath = a\n\tupdate = !touch pwned\n")), true),
            ("gitmodulesUrl", Box::new(modules("[submodule \"a\"]\n\turl = -oProxyCommand=x\n")), true),
            ("gitmodulesUrl", Box::new(modules("[submodule \"a\"]\n\turl = ../:x\n")), true),
            ("gitmodulesUrl", Box::new(modules("[submodule \"a\"]\n\turl = https://example.com:99999/x\n")), true),
            ("gitmodulesUrl", Box::new(modules("[submodule \"a\"]\n\turl = https://example.com/%0a\n")), true),
            ("gitmodulesUrl", Box::new(modules("[submodule \"a\"]\n\turl = https://example.com/../x\n")), true),
            ("gitmodulesPath", Box::new(modules("[submodule \"a\"]\n\tpath = -x\n")), true),
            ("gitmodulesName", Box::new(modules("[submodule \"../x\"]\n\tpath = a\n")), true),
            (
                "gitattributesBlob",
                Box::new(|r| vec![("40000", b".gitattributes", r.tree(&[("100644", b"x", r.blob(b"x"))]))]),
                true,
            ),
            (
                "gitattributesLineLength",
                Box::new(|r| vec![("100644", b".gitattributes", r.blob("x".repeat(2048).as_bytes()))]),
                true,
            ),
            // Ours, past git's.
            ("gitignoreSymlink", Box::new(|r| vec![("120000", b".gitignore", r.blob(b"x"))]), false),
            ("gitattributesSymlink", Box::new(|r| vec![("120000", b".gitattributes", r.blob(b"x"))]), false),
            ("gitmodulesParse", Box::new(modules("[submodule \"a\"\n")), false),
            ("refused here", Box::new(modules("[submodule \"a\"]\n\tpath = ../x\n")), false),
            ("refused here", Box::new(modules("[submodule \"a\"]\n\turl = ext::sh -c x\n")), false),
        ];
        for (id, added, git_too) in cases {
            let r = Repo::new();
            let (base, head) = r.work(&added(&r));
            let ours = r.check(base, head).unwrap_or_else(|| panic!("{id}: we accepted it"));
            assert!(ours.contains(id), "{id}: {ours}");
            match r.git_fsck() {
                Some(git) => {
                    assert!(git_too, "{id}: git refused it too, the rule is git's: {git}");
                    assert!(git.contains(id), "{id}: git said {git}");
                }
                None => assert!(!git_too, "{id}: git accepted it"),
            }
        }
    }
}
