//! The scan of what a landing adds for secrets, before the runner lands an agent's work on the target branch: the
//! exact values of the secrets the runner knows (its environment's, [`known_from_vars`]) and the well-known token
//! shapes ([`crate::secrets::shapes_in`]). A [`Finding`] names the file, the line and what kind of secret it is, and
//! never the secret: the reason a landing is refused is written to the board and to logs.
//!
//! Only what the work adds is looked at — the lines of a file that were not lines of it before — so that a token
//! already on the target (a test fixture, a documented example) does not refuse every landing after it.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryMode;

use crate::secrets::{URL_USER, is_secret, shapes_in};

/// A blob larger than this is searched for known values only (whole, not line by line).
const MAX_BLOB: usize = 32 * 1024 * 1024;
/// The most findings returned: enough to say what to fix, short enough for a message.
const MAX_FINDINGS: usize = 50;
/// How far git looks for a NUL byte to call a file binary.
const BINARY_PROBE: usize = 8000;

/// One secret the runner knows: what to call it in a message (`the value of $ANTHROPIC_API_KEY`) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    pub(crate) label: String,
    pub(crate) value: String,
}

/// A secret that a landing adds, without the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// The file, from the top of the tree (a name that is not UTF-8 is shown with U+FFFD).
    pub(crate) path: String,
    /// 1-based; 0 for a binary file.
    pub(crate) line: usize,
    /// `the value of $X`, or the kind of a shape (`a token shaped like ghp_…`).
    pub(crate) what: String,
    /// An exact value of the runner's (never allowed), not a shape.
    pub(crate) known: bool,
}

impl std::fmt::Display for Finding {
    /// `src/config.py:12: the value of $ANTHROPIC_API_KEY`; the path escaped, since an agent chose it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = crate::escape::line(&self.path);
        match self.line {
            0 => write!(f, "{path}: {} (in a binary file)", self.what),
            n => write!(f, "{path}:{n}: {}", self.what),
        }
    }
}

/// The secrets of an environment (name, value) that [`scan`] looks for: those [`crate::secrets::Scrubber`] scrubs
/// (the one rule, [`is_secret`]), each labelled `the value of $NAME`; one entry a value (the first name wins).
pub(crate) fn known_from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Vec<Known> {
    let mut seen = HashSet::new();
    vars.into_iter()
        .filter(|(name, value)| is_secret(name, value) && seen.insert(value.clone()))
        .map(|(name, value)| Known { label: format!("the value of ${name}"), value })
        .collect()
}

/// The credentials in a login file a runner copies into its agents' homes (`~/.codex/auth.json`, Claude Code's
/// `.credentials.json`, Gemini CLI's `oauth_creds.json` and `.env`): every string value under a name that says it
/// is a secret (the scrubber's rule, `secrets::is_secret`), in JSON, TOML or `NAME=value` lines, labelled by the
/// file and the name. The agent was handed these values: none of them may land.
pub(crate) fn known_in_file(file: &str, text: &str) -> Vec<Known> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    fn walk_json(name: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::String(s) => out.push((name.to_string(), s.clone())),
            serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| walk_json(k, v, out)),
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk_json(name, v, out)),
            _ => {}
        }
    }
    fn walk_toml(name: &str, v: &toml::Value, out: &mut Vec<(String, String)>) {
        match v {
            toml::Value::String(s) => out.push((name.to_string(), s.clone())),
            toml::Value::Table(m) => m.iter().for_each(|(k, v)| walk_toml(k, v, out)),
            toml::Value::Array(a) => a.iter().for_each(|v| walk_toml(name, v, out)),
            _ => {}
        }
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        walk_json("", &v, &mut pairs);
    } else if let Ok(v) = toml::from_str::<toml::Table>(text) {
        v.iter().for_each(|(k, v)| walk_toml(k, v, &mut pairs));
    } else {
        for line in text.lines() {
            if let Some((k, v)) = line.trim().trim_start_matches("export ").split_once(['=', ':']) {
                pairs.push((k.trim().to_string(), v.trim().trim_matches(['"', '\'']).to_string()));
            }
        }
    }
    let mut seen = HashSet::new();
    pairs
        .into_iter()
        .filter(|(name, value)| is_secret(name, value) && seen.insert(value.clone()))
        .map(|(name, value)| Known { label: format!("the {name} of {file}, which the agent was given"), value })
        .collect()
}

/// Scan what `head_tree` adds over `base_tree` (both trees in `repo`) for secrets: in every blob added or changed
/// (symbolic links too; not submodules), the lines of the new blob that were not lines of the old one. Known values
/// are looked for everywhere, binary files included (line 0); shapes only in text, and not in a path `allow` says
/// holds no secrets (test fixtures) — a known value is found there too. Findings come sorted by path and line, at
/// most [`MAX_FINDINGS`].
pub(crate) fn scan(
    repo: &gix::Repository,
    base_tree: ObjectId,
    head_tree: ObjectId,
    known: &[Known],
    allow: &dyn Fn(&str) -> bool,
) -> Result<Vec<Finding>, String> {
    // An empty value is in every line.
    let known: Vec<&Known> = known.iter().filter(|k| !k.value.is_empty()).collect();
    let mut findings = Vec::new();
    for (path, old, new) in added_blobs(repo, base_tree, head_tree)? {
        let old = old.map(|id| blob(repo, id)).transpose()?;
        let new = blob(repo, new)?;
        let mut file = File { path: &path, known: &known, shapes: !allow(&path), found: Vec::new() };
        file.scan(old.as_deref(), &new);
        findings.extend(file.found);
        findings.sort_by(|a, b| (&a.path, a.line, !a.known, &a.what).cmp(&(&b.path, b.line, !b.known, &b.what)));
        findings.truncate(MAX_FINDINGS);
    }
    Ok(findings)
}

/// The blobs that `head` has and `base` has not at the same path: (path, what `base` has there if a blob, the new
/// blob). Walked with a stack, not recursion: an agent's tree may be as deep as it likes.
fn added_blobs(
    repo: &gix::Repository,
    base: ObjectId,
    head: ObjectId,
) -> Result<Vec<(String, Option<ObjectId>, ObjectId)>, String> {
    let mut out = Vec::new();
    let mut folders = vec![(Some(base), head, String::new())];
    while let Some((base, head, prefix)) = folders.pop() {
        if base == Some(head) {
            continue;
        }
        let old: HashMap<Vec<u8>, (EntryMode, ObjectId)> = match base {
            Some(id) => entries(repo, id)?.into_iter().map(|(name, mode, id)| (name, (mode, id))).collect(),
            None => HashMap::new(),
        };
        for (name, mode, id) in entries(repo, head)? {
            let before = old.get(&name).copied();
            let path = match prefix.as_str() {
                "" => name.to_str_lossy().into_owned(),
                p => format!("{p}/{}", name.to_str_lossy()),
            };
            let kept = |f: fn(&EntryMode) -> bool| before.filter(|(m, _)| f(m)).map(|(_, id)| id);
            if mode.is_tree() {
                folders.push((kept(EntryMode::is_tree), id, path));
            } else if mode.is_blob_or_symlink() && kept(EntryMode::is_blob_or_symlink) != Some(id) {
                out.push((path, kept(EntryMode::is_blob_or_symlink), id));
            }
        }
    }
    Ok(out)
}

/// The entries of tree `id`: name, mode, object.
fn entries(repo: &gix::Repository, id: ObjectId) -> Result<Vec<(Vec<u8>, EntryMode, ObjectId)>, String> {
    let tree = repo.find_tree(id).map_err(|e| format!("cannot read tree {id}: {e}"))?;
    tree.iter()
        .map(|e| {
            let e = e.map_err(|e| format!("cannot decode tree {id}: {e}"))?;
            Ok((e.filename().to_vec(), e.mode(), e.object_id()))
        })
        .collect()
}

fn blob(repo: &gix::Repository, id: ObjectId) -> Result<Vec<u8>, String> {
    Ok(repo.find_blob(id).map_err(|e| format!("cannot read blob {id}: {e}"))?.take_data())
}

/// The scan of one file.
struct File<'a> {
    path: &'a str,
    known: &'a [&'a Known],
    /// Are shapes looked for (not an allowed path)?
    shapes: bool,
    found: Vec<Finding>,
}

impl File<'_> {
    fn scan(&mut self, old: Option<&[u8]>, new: &[u8]) {
        let binary = new[..new.len().min(BINARY_PROBE)].contains(&0);
        let whole = binary || new.len() > MAX_BLOB;
        // A value that spans lines (a PEM key) is in no one line: it is looked for in the whole blob, as in a
        // binary one.
        for k in self.known.iter().filter(|k| whole || k.value.contains('\n')) {
            let v = k.value.as_bytes();
            let count = |data: &[u8]| data.find_iter(v).count();
            if count(new) > old.map_or(0, count) {
                let line = match new.find(v) {
                    Some(at) if !binary => new[..at].find_iter("\n").count() + 1,
                    _ => 0,
                };
                self.add(line, &k.label, true);
            }
        }
        if whole {
            return;
        }
        let old_lines: HashSet<&[u8]> = old.map(|o| o.split(|b| *b == b'\n').collect()).unwrap_or_default();
        for (n, line) in new.split(|b| *b == b'\n').enumerate() {
            if self.found.len() >= MAX_FINDINGS {
                return;
            }
            if !old_lines.contains(line) {
                self.line(n + 1, line);
            }
        }
    }

    /// The findings of one added line: each known value in it, then each kind of shape, but for a shape that is
    /// (part of) a known value already found.
    fn line(&mut self, n: usize, line: &[u8]) {
        let mut values: Vec<Range<usize>> = Vec::new();
        for k in self.known.iter().filter(|k| !k.value.contains('\n')) {
            if let Some(at) = line.find(k.value.as_bytes()) {
                values.push(at..at + k.value.len());
                self.add(n, &k.label, true);
            }
        }
        if !self.shapes {
            return;
        }
        // Not UTF-8: the shapes are ASCII, and a byte that is not shifts the ranges only past itself.
        let text = String::from_utf8_lossy(line);
        let mut kinds = Vec::new();
        for (range, kind) in shapes_in(&text) {
            let in_value = values.iter().any(|v| v.start < range.end && range.start < v.end);
            if kind != URL_USER && !in_value && !kinds.contains(&kind) {
                kinds.push(kind);
                self.add(n, kind, false);
            }
        }
    }

    fn add(&mut self, line: usize, what: &str, known: bool) {
        self.found.push(Finding { path: self.path.to_string(), line, what: what.to_string(), known });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credentials_of_a_login_file_are_known() {
        let json = r#"{"OPENAI_API_KEY": null, "tokens": {"access_token": "eyJhbGciOiJSUzI1NiJ9.abcdefghijk", "account_id": "acct-1"}, "last_refresh": "2026-12-01"}"#;
        let k = known_in_file("~/.codex/auth.json", json);
        assert_eq!(k.len(), 1, "{:?}", k.iter().map(|k| &k.label).collect::<Vec<_>>());
        assert_eq!(k[0].value, "eyJhbGciOiJSUzI1NiJ9.abcdefghijk");
        assert!(k[0].label.contains("access_token") && k[0].label.contains("~/.codex/auth.json"));
        let env = "GEMINI_API_KEY=AIzaSyA-0123456789abcdefghij\nOTHER=plain words\n";
        let k = known_in_file("~/.gemini/.env", env);
        assert_eq!(k.iter().map(|k| k.value.as_str()).collect::<Vec<_>>(), ["AIzaSyA-0123456789abcdefghij"]);
        assert!(known_in_file("x", "model = \"gpt-5.2\"\n").is_empty());
    }
    use gix::object::tree::EntryKind;

    const KEY: &str = "sk-ant-api03-not-a-real-key-0123456789";

    struct Repo {
        _dir: tempfile::TempDir,
        repo: gix::Repository,
    }

    impl Repo {
        fn new() -> Repo {
            let dir = tempfile::tempdir().expect("tempdir");
            let repo = gix::init_bare(dir.path()).expect("init");
            Repo { _dir: dir, repo }
        }

        /// A tree of `files` (path, content): a path ending in `@` is a symbolic link, one of `!` a submodule.
        fn tree(&self, files: &[(&str, &[u8])]) -> ObjectId {
            let empty = ObjectId::empty_tree(gix::hash::Kind::Sha1);
            let mut editor = self.repo.edit_tree(empty).expect("editor");
            for (path, content) in files {
                let id = self.repo.write_blob(content).expect("blob").detach();
                let (path, kind) = match (path.strip_suffix('@'), path.strip_suffix('!')) {
                    (Some(p), _) => (p, EntryKind::Link),
                    (_, Some(p)) => (p, EntryKind::Commit),
                    _ => (*path, EntryKind::Blob),
                };
                editor.upsert(path, kind, id).expect("upsert");
            }
            editor.write().expect("write").detach()
        }

        fn scan(&self, base: &[(&str, &[u8])], head: &[(&str, &[u8])], allow: &dyn Fn(&str) -> bool) -> Vec<Finding> {
            let known = known_from_vars([("ANTHROPIC_API_KEY".to_string(), KEY.to_string())]);
            scan(&self.repo, self.tree(base), self.tree(head), &known, allow).expect("scan")
        }
    }

    fn none(_: &str) -> bool {
        false
    }

    fn shown(found: &[Finding]) -> Vec<String> {
        found.iter().map(Finding::to_string).collect()
    }

    #[test]
    fn a_known_value_added_to_a_file_is_found_at_its_line_and_not_shown() {
        let r = Repo::new();
        let old: &[u8] = b"import os\nKEY = os.environ['K']\n";
        let new = format!("import os\nKEY = os.environ['K']\n\nKEY = '{KEY}'\n");
        let found = r.scan(&[("src/config.py", old)], &[("src/config.py", new.as_bytes())], &none);
        assert_eq!(shown(&found), ["src/config.py:4: the value of $ANTHROPIC_API_KEY"]);
        assert!(found[0].known);
        assert!(!format!("{found:?}").contains(KEY));
    }

    #[test]
    fn lines_already_there_are_not_reported() {
        let r = Repo::new();
        let old = format!("token = 'ghp_ABCDEFGHIJ0123456789'\nkey = '{KEY}'\n");
        let new = format!("# moved\n{old}print()\n");
        let found = r.scan(&[("a.py", old.as_bytes())], &[("a.py", new.as_bytes())], &none);
        assert_eq!(found, []);
        // The same lines in a file of their own are added.
        let found = r.scan(&[("a.py", old.as_bytes())], &[("a.py", old.as_bytes()), ("b.py", old.as_bytes())], &none);
        assert_eq!(shown(&found), ["b.py:1: a token shaped like ghp_…", "b.py:2: the value of $ANTHROPIC_API_KEY"]);
    }

    #[test]
    fn an_allowed_path_skips_shapes_but_never_a_known_value() {
        let r = Repo::new();
        let fixture = format!("ghp_ABCDEFGHIJ0123456789\npostgres://u:s3cretpass@db/x\n{KEY}\n");
        let allow = |p: &str| p.starts_with("tests/fixtures/");
        let head = [("tests/fixtures/tokens.txt", fixture.as_bytes()), ("notes.txt", fixture.as_bytes())];
        let found = r.scan(&[], &head, &allow);
        assert_eq!(
            shown(&found),
            [
                "notes.txt:1: a token shaped like ghp_…",
                "notes.txt:2: a password in a URL",
                "notes.txt:3: the value of $ANTHROPIC_API_KEY",
                "tests/fixtures/tokens.txt:3: the value of $ANTHROPIC_API_KEY",
            ]
        );
        assert_eq!(found.iter().map(|f| f.known).collect::<Vec<_>>(), [false, false, true, true]);
    }

    #[test]
    fn a_known_value_in_a_binary_blob_is_found_at_line_zero() {
        let r = Repo::new();
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend_from_slice(KEY.as_bytes());
        png.extend_from_slice(b"\0ghp_ABCDEFGHIJ0123456789\0");
        let found = r.scan(&[("img.png", b"\x89PNG\0")], &[("img.png", &png)], &none);
        assert_eq!(shown(&found), ["img.png: the value of $ANTHROPIC_API_KEY (in a binary file)"]);
        assert_eq!(found[0].line, 0);
        // Already in the old blob as often: not added.
        assert_eq!(r.scan(&[("img.png", &png)], &[("img.png", &[png.as_slice(), b"\0more"].concat())], &none), []);
    }

    #[test]
    fn nested_folders_and_links_are_walked_and_submodules_skipped() {
        let r = Repo::new();
        let line = format!("x = '{KEY}'\n");
        let base: &[(&str, &[u8])] = &[("a/b/keep.rs", b"fn main() {}\n")];
        let head: &[(&str, &[u8])] = &[
            ("a/b/keep.rs", b"fn main() {}\n"),
            ("a/b/c/deep.rs", line.as_bytes()),
            ("a/link@", line.as_bytes()),
            ("vendor/sub!", line.as_bytes()),
        ];
        let found = r.scan(base, head, &none);
        assert_eq!(
            shown(&found),
            ["a/b/c/deep.rs:1: the value of $ANTHROPIC_API_KEY", "a/link:1: the value of $ANTHROPIC_API_KEY"]
        );
    }

    #[test]
    fn nothing_added_is_nothing_found() {
        let r = Repo::new();
        let files: &[(&str, &[u8])] = &[("a.txt", KEY.as_bytes()), ("d/b.txt", b"ghp_ABCDEFGHIJ0123456789")];
        assert_eq!(r.scan(files, files, &none), []);
        // Removing a file adds nothing either.
        assert_eq!(r.scan(files, &files[..1], &none), []);
    }

    #[test]
    fn a_multi_line_value_and_an_account_in_a_url() {
        let r = Repo::new();
        let pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----";
        let known = known_from_vars([("DEPLOY_KEY".to_string(), pem.to_string()), ("HOME".to_string(), "/h".into())]);
        assert_eq!(known.len(), 1);
        let file = format!("remote = 'ssh://git@github.com/o/r'\n\n{pem}\n");
        let found = scan(&r.repo, r.tree(&[]), r.tree(&[("deploy.txt", file.as_bytes())]), &known, &none);
        assert_eq!(shown(&found.expect("scan")), ["deploy.txt:3: the value of $DEPLOY_KEY"]);
    }

    #[test]
    fn findings_are_at_most_fifty_sorted_by_path_and_line() {
        let r = Repo::new();
        let many = format!("{KEY}\n").repeat(80);
        let found = r.scan(&[], &[("z.txt", many.as_bytes()), ("a.txt", b"x\nghp_ABCDEFGHIJ0123456789\n")], &none);
        assert_eq!(found.len(), 50);
        assert_eq!(found[0].to_string(), "a.txt:2: a token shaped like ghp_…");
        assert_eq!((found[1].path.as_str(), found[1].line), ("z.txt", 1));
        assert_eq!(found[49].line, 49);
    }
}
