//! Agent hooks: the settings files a worker puts into its work tree before the agent starts (Claude Code's
//! `.claude/settings.local.json`, Cursor's `.cursor/hooks.json`, Gemini CLI's `.gemini/settings.json`), keeping
//! them and the other files agents leave behind ([`is_agent_artifact`]) out of the task's commits, and
//! what their handler (`git swarm hooks agent …`) needs: the last assistant message of a transcript, and writing
//! the hand-off without overwriting one the agent wrote itself.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A settings file of an agent, shipped in `hooks/` and embedded in the binary.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AgentFile {
    /// Which CLI reads it (the tests check that its handler says so).
    #[cfg_attr(not(test), allow(dead_code))]
    pub agent: &'static str,
    /// Relative to the work tree's top.
    pub path: &'static str,
    pub content: &'static str,
}

/// What the worker installs. Codex has no file here: see `hooks/codex/config.toml` and `docs/hooks.md`.
pub(crate) const FILES: &[AgentFile] = &[
    AgentFile {
        agent: "claude",
        path: ".claude/settings.local.json",
        content: include_str!("../../hooks/claude/settings.local.json"),
    },
    AgentFile { agent: "cursor", path: ".cursor/hooks.json", content: include_str!("../../hooks/cursor/hooks.json") },
    AgentFile {
        agent: "gemini",
        path: ".gemini/settings.json",
        content: include_str!("../../hooks/gemini/settings.json"),
    },
];

/// What [`install`] put into a work tree, to take out again with [`remove`].
#[derive(Debug, Default, Clone)]
pub(crate) struct Installed {
    pub files: Vec<PathBuf>,
    /// Folders it created, deepest first.
    pub dirs: Vec<PathBuf>,
    /// One line per file left alone, and why.
    pub skipped: Vec<String>,
}

/// Write the agent settings files into the work tree `wt`, fresh from a checkout (so whatever exists at one of
/// their paths is tracked by the repository: it is left alone). A path through a symbolic link or a file is
/// skipped too: nothing is written outside the work tree.
pub(crate) fn install(wt: &Path) -> Installed {
    let mut out = Installed::default();
    for f in FILES {
        let rel = Path::new(f.path);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            continue;
        }
        let target = wt.join(rel);
        if std::fs::symlink_metadata(&target).is_ok() {
            out.skipped.push(format!("{}: the repository has this file; it is left as it is", f.path));
            continue;
        }
        let mut created = Vec::new();
        let mut dir = wt.to_path_buf();
        let mut ok = true;
        for c in rel.parent().into_iter().flat_map(Path::components) {
            dir.push(c);
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    out.skipped.push(format!("{}: {} is not a folder in this repository", f.path, dir.display()));
                    ok = false;
                    break;
                }
                Err(_) => match std::fs::create_dir(&dir) {
                    Ok(()) => created.push(dir.clone()),
                    Err(e) => {
                        out.skipped.push(format!("{}: cannot create {}: {e}", f.path, dir.display()));
                        ok = false;
                        break;
                    }
                },
            }
        }
        let written = ok
            && std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .and_then(|mut file| std::io::Write::write_all(&mut file, f.content.as_bytes()))
                .map_err(|e| out.skipped.push(format!("{}: {e}", f.path)))
                .is_ok();
        if written {
            out.files.push(target);
        }
        created.reverse();
        out.dirs.extend(created);
    }
    out
}

impl Installed {
    /// Give what [`install`] made (in a work tree the runner just made, before the agent's run) to `uid`:`gid`.
    pub(crate) fn hand_over(&self, uid: u32, gid: u32) {
        for p in self.dirs.iter().chain(&self.files) {
            let _ = std::os::unix::fs::lchown(p, Some(uid), Some(gid));
        }
    }
}

/// The folders agent CLIs keep in a repository for themselves (sessions, settings, caches, the hook files above).
pub(crate) const ARTIFACT_DIRS: &[&str] = &[".claude", ".gemini", ".codex", ".cursor", ".opencode"];

/// Is `path` (relative to the work tree's top) a file an agent CLI leaves for itself: anything under one of
/// [`ARTIFACT_DIRS`], or a top-level `.aider*` (aider's chat and input history, its tags cache)? Such files never
/// enter a task's commit unless the repository has them already or the task's scope names them.
pub(crate) fn is_agent_artifact(path: &str) -> bool {
    let first = path.split('/').next().unwrap_or(path);
    first.starts_with(".aider") || (ARTIFACT_DIRS.contains(&first) && path.len() > first.len())
}

/// Can any agent file ([`is_agent_artifact`]) be [`in_scope`] of `scope`? Only an entry inside (or naming) an agent
/// folder can hold one.
pub(crate) fn scope_names_artifacts(scope: &[String]) -> bool {
    scope.iter().map(|s| s.trim().trim_start_matches("./")).any(|s| {
        let first = s.split('/').next().unwrap_or(s);
        first.starts_with(".aider") || ARTIFACT_DIRS.contains(&first)
    })
}

/// Is `path` within one of the task's scope entries (a file, or a folder and everything under it)?
pub(crate) fn in_scope(path: &str, scope: &[String]) -> bool {
    scope
        .iter()
        .map(|s| s.trim().trim_start_matches("./").trim_end_matches('/'))
        .filter(|s| !s.is_empty())
        .any(|s| path == s || path.strip_prefix(s).is_some_and(|rest| rest.starts_with('/')))
}

/// The excludes of an agent's run: the user's global excludes, the hook files and the agents' own folders
/// ([`is_agent_artifact`]). Untracked files there stay out of the agent's `git add -A` and of what the runner takes
/// from its work tree (`runner::snapshot`); files the repository tracks are not affected. `common`: the clone's git
/// directory, whose config (never an agent's) says where the user's excludes file is; `config_home` git's default
/// folder of it (`$XDG_CONFIG_HOME`, else `~/.config`: [`crate::environment::Environment::config_home`]).
pub(crate) fn excludes_text(common: &Path, config_home: Option<&Path>) -> String {
    let mut text = String::new();
    if let Some(global) = user_excludes_file(common, config_home) {
        let mut f = std::fs::File::open(global).ok();
        if let Some(f) = f.as_mut() {
            let _ = f.take(1 << 20).read_to_string(&mut text);
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
    }
    text.push_str("# git swarm: the agent hooks it installs, and the files agent CLIs keep for themselves\n");
    for f in FILES {
        text.push_str(&format!("/{}\n", f.path));
    }
    text.push_str("/.aider*\n");
    for d in ARTIFACT_DIRS {
        text.push_str(&format!("/{d}/\n"));
    }
    text
}

/// Write [`excludes_text`] into the run's fresh folder, for the agent's own git ([`exclude_env`]).
pub(crate) fn write_excludes(common: &Path, run_dir: &Path, config_home: Option<&Path>) -> Option<PathBuf> {
    let file = run_dir.join("agent-excludes");
    crate::agent::files::create(&file, excludes_text(common, config_home)).ok()?;
    Some(file)
}

/// The excludes file git would use: `core.excludesFile`, else `$XDG_CONFIG_HOME/git/ignore` (`~/.config/…`). Asked
/// of `git` in the clone's git directory (never in an agent's work tree, whose `.git` the agent writes) once per
/// clone and process (a runner asks for every task, a hundred agents in one process often).
fn user_excludes_file(common: &Path, config_home: Option<&Path>) -> Option<PathBuf> {
    static KNOWN: std::sync::Mutex<Vec<(PathBuf, Option<PathBuf>)>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, f)) = KNOWN.lock().ok()?.iter().find(|(w, _)| w == common) {
        return f.clone();
    }
    let found = ask_excludes_file(common, config_home);
    if let Ok(mut known) = KNOWN.lock() {
        known.push((common.to_path_buf(), found.clone()));
    }
    found
}

fn ask_excludes_file(common: &Path, config_home: Option<&Path>) -> Option<PathBuf> {
    let out = crate::gitcmd::local(common)
        .env("GIT_DIR", common)
        .args(["config", "--path", "--get", "core.excludesFile"])
        .output()
        .ok()?;
    let configured = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !configured.is_empty() {
        return Some(PathBuf::from(configured));
    }
    Some(config_home?.join("git").join("ignore"))
}

/// The last assistant text of the transcript at `path`, waiting up to `wait` for the file to appear (an agent may
/// call its hook before it has written the transcript).
pub(crate) fn last_assistant_text_of(path: &Path, wait: Duration) -> std::io::Result<Option<String>> {
    let start = std::time::Instant::now();
    loop {
        match read_tail(path, 8 << 20) {
            Ok(jsonl) => {
                if let Some(t) = last_assistant_text(&jsonl) {
                    return Ok(Some(t));
                }
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            Err(e) if start.elapsed() >= wait => return Err(e),
            Err(_) => {}
        }
        if start.elapsed() >= wait {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last `max` bytes of a file, as text (a transcript can be large; the end is what we want).
pub(crate) fn read_tail(path: &Path, max: u64) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len > max {
        f.seek(SeekFrom::Start(len - max))?;
    }
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The text of the last assistant message in a Claude Code transcript (JSON lines; an assistant entry is
/// `{"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": …}, …]}}`;
/// `content` may also be a plain string). Entries with no text (tool calls only) are passed over; lines that
/// are not JSON (a tail cut in the middle of one) too.
pub(crate) fn last_assistant_text(jsonl: &str) -> Option<String> {
    for line in jsonl.lines().rev() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let msg = &v["message"];
        if v["type"] != "assistant" && msg["role"] != "assistant" {
            continue;
        }
        let text = match &msg["content"] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(parts) => parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n"),
            _ => String::new(),
        };
        if !text.trim().is_empty() {
            return Some(text);
        }
    }
    None
}

/// The largest hand-off we write (the runner stores at most 64 KiB of it).
const MAX_HANDOFF: usize = 64 * 1024;

/// What happened to the hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    Written,
    /// The agent wrote one itself: left alone.
    AgentWrote,
    /// Nothing to write.
    Empty,
}

/// Write `text` as the hand-off at `file`, unless the agent wrote one itself. What we wrote is remembered next to
/// it (`<file>.auto`) so that a later message replaces our own hand-off, never the agent's.
pub(crate) fn record_handoff(file: &Path, text: &str) -> std::io::Result<Handoff> {
    if text.trim().is_empty() {
        return Ok(Handoff::Empty);
    }
    let marker = auto_marker(file);
    // What is at the path is the agent's: read as an agent's file is (no symlink, no FIFO, bounded).
    let read = |f: &Path| crate::agent::files::read(f, MAX_HANDOFF + 1).ok().map(|(t, _)| t);
    if let Some(current) = read(file)
        && !current.trim().is_empty()
        && read(&marker).as_deref() != Some(current.as_str())
    {
        return Ok(Handoff::AgentWrote);
    }
    let mut t: String = text.to_string();
    if t.len() > MAX_HANDOFF {
        t.truncate(t.floor_char_boundary(MAX_HANDOFF));
    }
    if !t.ends_with('\n') {
        t.push('\n');
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::agent::files::write(&marker, &t)?;
    crate::agent::files::write(file, &t)?;
    Ok(Handoff::Written)
}

/// Where [`record_handoff`] remembers what it wrote.
pub(crate) fn auto_marker(file: &Path) -> PathBuf {
    let mut name = file.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".auto");
    file.with_file_name(name)
}

/// A local rate limit: `true` when `stamp` was touched less than `every` ago; otherwise touch it and say `false`.
pub(crate) fn rate_limited(stamp: &Path, every: Duration) -> bool {
    let recent = std::fs::metadata(stamp)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age < every);
    if recent {
        return true;
    }
    if let Some(dir) = stamp.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(stamp, b"");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commit skips `git ls-files` when no scope entry names an agent folder: it must never skip a file the
    /// scope wants.
    #[test]
    fn a_scope_that_wants_an_agent_file_names_an_agent_folder() {
        let paths = [".claude/commands/review.md", ".aider.conf.yml", ".gemini/settings.json", ".codex/x", "src/a.rs"];
        let scopes: [&[&str]; 7] = [
            &[],
            &["src/a.rs"],
            &[".claude"],
            &["./.claude/commands/"],
            &[".aider.conf.yml", "docs"],
            &[" .gemini/settings.json "],
            &["src", ".codex/"],
        ];
        for scope in scopes {
            let scope: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
            for p in paths {
                if is_agent_artifact(p) && in_scope(p, &scope) {
                    assert!(scope_names_artifacts(&scope), "{p} is in {scope:?}");
                }
            }
        }
        assert!(!scope_names_artifacts(&["src".into(), "claude.md".into(), ".github/x".into()]));
    }

    #[test]
    fn templates_are_valid_json_and_name_the_handler() {
        for f in FILES {
            let v: serde_json::Value = serde_json::from_str(f.content).expect(f.path);
            assert!(v["hooks"].is_object(), "{}", f.path);
            assert!(f.content.contains(&format!("hooks agent {}", f.agent)), "{}", f.path);
        }
    }

    #[test]
    fn last_assistant_text_skips_tool_calls_and_broken_lines() {
        let t = concat!(
            r#"{"type":"user","message":{"role":"user","content":"do it"}}"#,
            "\n",
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"first"}]}}"#,
            "\n",
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Done: x"},{"type":"text","text":"y"}]}}"#,
            "\n",
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"1"}]}}"#,
            "\n",
            r#"{"type":"assistant","mess"#,
        );
        assert_eq!(last_assistant_text(t).as_deref(), Some("Done: x\n\ny"));
        assert_eq!(last_assistant_text(""), None);
    }

    #[test]
    fn agent_artifacts_are_the_agents_folders_and_aiders_files() {
        for p in [".aider.chat.history.md", ".aider.tags.cache.v4/cache.db", ".claude/settings.local.json", ".gemini/x"]
        {
            assert!(is_agent_artifact(p), "{p}");
        }
        for p in ["src/.claude/x", ".claude", "claude/x", ".github/workflows/ci.yml", "README.md", ".aiderignore/../x"]
        {
            assert_eq!(is_agent_artifact(p), p.starts_with(".aider"), "{p}");
        }
        let scope = vec![".claude/commands/".to_string(), "src/lib.rs".to_string()];
        assert!(in_scope(".claude/commands/review.md", &scope));
        assert!(
            in_scope("src/lib.rs", &scope) && !in_scope("src/lib.rs.orig", &scope) && !in_scope(".claude/x", &scope)
        );
    }

    #[test]
    fn handoff_never_overwrites_the_agents_own() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("handoff.md");
        assert_eq!(record_handoff(&f, "one").expect("w"), Handoff::Written);
        assert_eq!(record_handoff(&f, "two").expect("w"), Handoff::Written);
        assert_eq!(std::fs::read_to_string(&f).expect("r"), "two\n");
        std::fs::write(&f, "mine\n").expect("w");
        assert_eq!(record_handoff(&f, "three").expect("w"), Handoff::AgentWrote);
        assert_eq!(std::fs::read_to_string(&f).expect("r"), "mine\n");
        assert_eq!(record_handoff(&f, "  ").expect("w"), Handoff::Empty);
    }
}
