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

mod gitmodules;
mod names;

pub(crate) use names::name_refused;
// What the rooms of `fsck` share.
use gitmodules::*;
use names::*;

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
            let who = crate::Identity { name: "Test".into(), email: "test@example.com".into() };
            let store = crate::Store::from_repo(self.repo.clone());
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
