//! What this clone's runners are doing now, beside the state ref: the phase of the task each agent slot holds
//! (its agent, a conflict run, the rebase, the check, the landing), since when, and the time limit of the agent's
//! run. One small file an agent id, `<git dir>/swarm/live/<agent>.json`, written whole by its runner at each phase
//! (a temporary file moved into place: a reader never sees half of one) and removed when the task ends. No agent
//! can write there: agents see their own work tree and run folder, never the clone's git directory.
//!
//! The boards of this clone ([`read_all`]) show it beside what the ref knows of every holder, with the last line
//! the agent printed, read from the end of its log (which the runner writes scrubbed of secrets). Nothing here is
//! pushed: other clones' runners show only what the ref knows.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Places;
use crate::time::Timestamp;

/// What a task's holder is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Phase {
    /// Its agent runs (a worker's task, a planner's plan).
    Agent,
    /// The agent runs again to resolve a rebase conflict.
    Conflict,
    /// The runner rebases the work onto the target's tip.
    Rebase,
    /// The check runs on the rebased work.
    Check,
    /// The runner publishes the landing (the code and the task's `done`).
    Landing,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Agent => "agent",
            Phase::Conflict => "conflict",
            Phase::Rebase => "rebase",
            Phase::Check => "check",
            Phase::Landing => "landing",
        }
    }
}

/// One agent slot's task, as its runner last wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Live {
    pub agent: String,
    pub task: String,
    pub epoch: u64,
    pub phase: Phase,
    /// When this phase began.
    pub phase_since: Timestamp,
    /// When the agent's run of this claim began (the time limit counts from here).
    pub started: Timestamp,
    /// The agent's time limit (`[run] task_timeout`).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// [`Live`] with what the board adds: the last line the agent printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LocalRun {
    #[serde(flatten)]
    pub live: Live,
    /// The last line of the agent's output (scrubbed, one line, at most [`LAST_LINE`] characters), while its agent
    /// runs.
    pub last_line: Option<String>,
}

/// The longest last line shown.
pub(crate) const LAST_LINE: usize = 200;
/// How much of the end of a log is read for its last line.
const TAIL: u64 = 16 * 1024;

fn dir(home: &Path) -> PathBuf {
    home.join("live")
}

fn file(home: &Path, agent: &str) -> PathBuf {
    dir(home).join(format!("{agent}.json"))
}

/// Record that `agent` is in `phase` of claim `epoch` of `task` since `now`. The agent's start and its time limit
/// are kept from the file of the same claim; a new claim starts afresh (`timeout` given with its agent phase).
/// Best effort: a board that cannot be told is no reason to stop a landing.
pub(crate) fn set(
    home: &Path,
    agent: &str,
    task: &str,
    epoch: u64,
    phase: Phase,
    now: Timestamp,
    timeout: Option<Duration>,
) {
    let path = file(home, agent);
    let before: Option<Live> = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|l: &Live| l.task == task && l.epoch == epoch);
    let live = Live {
        agent: agent.to_string(),
        task: task.to_string(),
        epoch,
        phase,
        phase_since: now,
        started: before.as_ref().map_or(now, |b| b.started),
        timeout_secs: timeout.map(|t| t.as_secs()).or(before.and_then(|b| b.timeout_secs)),
    };
    let Ok(text) = serde_json::to_vec(&live) else { return };
    if std::fs::create_dir_all(dir(home)).is_err() {
        return;
    }
    let tmp = dir(home).join(format!(".{agent}.{}.tmp", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The task of `agent` ended (or its runner stops): nothing to show.
pub(crate) fn clear(home: &Path, agent: &str) {
    let _ = std::fs::remove_file(file(home, agent));
}

/// What the live runners of the clone whose runner folders are `places` do now, by agent id. Files of runners that
/// are gone (killed before they could remove theirs) are left out.
pub(crate) fn read_all(places: &Places) -> Vec<LocalRun> {
    let Ok(entries) = std::fs::read_dir(dir(&places.home)) else { return vec![] };
    let mut runs: Vec<LocalRun> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<Live>(&b).ok())
        .filter(|l| super::places::runner_alive(places, &l.agent))
        .map(|live| {
            let running = matches!(live.phase, Phase::Agent | Phase::Conflict);
            let last_line = running.then(|| last_line(&places.home.join("logs").join(format!("{}.log", live.agent))));
            LocalRun { live, last_line: last_line.flatten() }
        })
        .collect();
    runs.sort_by(|a, b| a.live.agent.cmp(&b.live.agent));
    runs
}

/// The last line with something in it at the end of the log `path`, one line (escaped), cut to [`LAST_LINE`]. A
/// JSON event (a CLI's stream output) is shown by its text, when it has some.
fn last_line(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut bytes = Vec::new();
    f.take(TAIL).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let shown =
        serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| text_of(&v)).unwrap_or(line.to_string());
    let one = crate::escape::line(shown.trim());
    Some(if one.chars().count() > LAST_LINE {
        format!("{}…", one.chars().take(LAST_LINE - 1).collect::<String>())
    } else {
        one
    })
}

/// The words in a CLI's JSON event: its `text`, `result` or `message` (a string, or the texts of its `content`).
fn text_of(v: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    for key in ["text", "result", "message", "content", "delta", "part", "item"] {
        match v.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => return Some(s.lines().last().unwrap_or(s).to_string()),
            Some(inner @ Value::Object(_)) => {
                if let Some(t) = text_of(inner) {
                    return Some(t);
                }
            }
            Some(Value::Array(items)) => {
                if let Some(t) = items.iter().rev().find_map(text_of) {
                    return Some(t);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_keeps_the_claims_start_and_a_new_claim_starts_afresh() {
        let home = tempfile::tempdir().expect("tmp");
        let t = |s| Timestamp::from_secs(s);
        set(home.path(), "w1", "t-1", 1, Phase::Agent, t(10), Some(Duration::from_secs(600)));
        set(home.path(), "w1", "t-1", 1, Phase::Check, t(50), None);
        let read = |home: &Path| -> Live {
            serde_json::from_slice(&std::fs::read(file(home, "w1")).expect("file")).expect("json")
        };
        let l = read(home.path());
        assert_eq!((l.phase, l.phase_since, l.started, l.timeout_secs), (Phase::Check, t(50), t(10), Some(600)));
        set(home.path(), "w1", "t-2", 1, Phase::Agent, t(60), None);
        let l = read(home.path());
        assert_eq!((l.task.as_str(), l.started, l.timeout_secs), ("t-2", t(60), None));
        clear(home.path(), "w1");
        assert!(!file(home.path(), "w1").exists());
    }

    #[test]
    fn the_last_line_is_the_last_with_words_and_a_json_event_by_its_text() {
        let dir = tempfile::tempdir().expect("tmp");
        let log = dir.path().join("a.log");
        std::fs::write(&log, "first\nworking on step 3\n\n  \n").expect("write");
        assert_eq!(last_line(&log).as_deref(), Some("working on step 3"));
        let event = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Now I run the tests"}]}}"#;
        std::fs::write(&log, format!("x\n{event}\n")).expect("write");
        assert_eq!(last_line(&log).as_deref(), Some("Now I run the tests"));
        std::fs::write(&log, format!("{}\n", "y".repeat(40_000))).expect("write");
        let long = last_line(&log).expect("a line");
        assert_eq!(long.chars().count(), LAST_LINE, "cut");
        std::fs::write(&log, "\u{1b}]0;title\u{7}evil\n").expect("write");
        assert!(!last_line(&log).expect("a line").contains('\u{1b}'), "escaped");
        assert_eq!(last_line(&dir.path().join("none.log")), None);
    }
}
