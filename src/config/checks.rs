//! The checks of the runner's settings (`schema`'s keys): each turns a raw value of `swarm.toml` into what the runner
//! uses, or says why not; `key` is `[table] key`, as the errors name it.

use std::time::Duration;

use crate::time::DurationText;
use crate::usage::Usd;

/// `[run] empty`: what a worker's run that exits 0 without changing anything means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Empty {
    /// The task fails (the default): an agent that quietly did nothing is the common failure.
    Fail,
    /// The task is done (for tasks that only verify).
    Done,
}

/// `[run] check_policy`: which commits of a batch of landings the check runs on (docs/check.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckPolicy {
    /// The tip of what lands together, once, on its exact base (as bors does); a failing tip is bisected to the
    /// landing that breaks it (the default).
    Tip,
    /// Each landing on the one before it (its own tip on its exact base).
    Strict,
}

/// A budget's dollars: a positive amount.
pub(super) fn usd(key: &str, v: Option<f64>, _: Option<Usd>) -> Result<Option<Usd>, String> {
    match v {
        None => Ok(None),
        Some(d) if d > 0.0 => {
            Usd::from_dollars(d).map(Some).ok_or_else(|| format!("{key} = {d}: give an amount of dollars"))
        }
        Some(d) => Err(format!("{key} = {d}: give an amount above 0 (or leave it out)")),
    }
}

/// A budget's tokens: at least one.
pub(super) fn tokens(key: &str, v: Option<u64>, _: Option<u64>) -> Result<Option<u64>, String> {
    match v {
        Some(0) => Err(format!("{key} = 0: give at least 1 (or leave it out)")),
        t => Ok(t),
    }
}

pub(super) fn duration(key: &str, v: Option<DurationText>, default: Duration) -> Result<Duration, String> {
    match v {
        None => Ok(default),
        Some(s) => crate::time::parse_duration(&s.0).map_err(|e| format!("{key}: {e}")),
    }
}

/// `[run] sandbox_read`/`sandbox_write`: absolute paths or `~/…` (the runner's home).
pub(super) fn sandbox_paths(key: &str, v: Option<Vec<String>>, _: Vec<String>) -> Result<Vec<String>, String> {
    let v = v.unwrap_or_default();
    if let Some(bad) =
        v.iter().find(|p| !(p.starts_with('/') || p.starts_with("~/")) || p.split('/').any(|c| c == ".."))
    {
        return Err(format!(
            "{key}: '{}' is not an absolute path or one under ~/ (without ..)",
            crate::escape::line(bad)
        ));
    }
    Ok(v)
}

/// `[run] network`: `on` or `off`.
pub(super) fn network(key: &str, v: Option<String>, _: bool) -> Result<bool, String> {
    match v.as_deref() {
        None | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(format!("{key} = '{}': use \"on\" (the default) or \"off\"", crate::escape::line(other))),
    }
}

/// `[run] empty`: `fail` or `done`.
pub(super) fn empty(key: &str, v: Option<String>, _: Empty) -> Result<Empty, String> {
    match v.as_deref() {
        None | Some("fail") => Ok(Empty::Fail),
        Some("done") => Ok(Empty::Done),
        Some(other) => Err(format!("{key} = '{other}': use \"fail\" or \"done\"")),
    }
}

pub(super) fn check_policy(key: &str, v: Option<String>, _: CheckPolicy) -> Result<CheckPolicy, String> {
    match v.as_deref() {
        None | Some("tip") => Ok(CheckPolicy::Tip),
        Some("strict") => Ok(CheckPolicy::Strict),
        Some(other) => Err(format!("{key} = '{other}': use \"tip\" or \"strict\"")),
    }
}

/// `[run] pushes_per_minute`: at least 0.01 a minute.
pub(super) fn pushes(key: &str, v: Option<f64>, _: Option<f64>) -> Result<Option<f64>, String> {
    match v {
        Some(p) if !(p.is_finite() && p >= 0.01) => {
            Err(format!("{key} = {p}: give a number of at least 0.01 (or leave it out)"))
        }
        p => Ok(p),
    }
}

/// `[run] check_report`: a path inside the work tree (relative, no `..`), where the check writes its report.
pub(super) fn report_path(key: &str, p: &str) -> Result<String, String> {
    let bad = |why: &str| format!("{key} = '{}': {why}", crate::escape::line(p));
    let path = std::path::Path::new(p.trim());
    if p.trim().is_empty() {
        return Err(bad("give the path of the check's JUnit XML report, e.g. \"junit.xml\""));
    }
    if !path.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir)) {
        return Err(bad("give a path inside the work tree, relative to its top (no leading /, no ..)"));
    }
    Ok(p.trim().to_string())
}

/// `[run] setup_when`: paths inside the work tree (relative, no `..`), each a file whose change re-runs `setup`.
pub(super) fn setup_files(key: &str, v: Option<Vec<String>>, default: Vec<String>) -> Result<Vec<String>, String> {
    let Some(v) = v else { return Ok(default) };
    v.iter()
        .map(|p| {
            report_path(key, p).map_err(|_| {
                format!(
                    "{key}: '{}' is not a path inside the work tree: give files relative to its top, like \"uv.lock\"",
                    crate::escape::line(p)
                )
            })
        })
        .collect()
}

/// `[run] batch_window`: milliseconds count, zero turns it off, at most a minute.
pub(super) fn window(key: &str, s: &str) -> Result<Duration, String> {
    let bad = |why: String| format!("{key} = '{}': {why}", crate::escape::line(s));
    let w = humantime::parse_duration(s).map_err(|e| bad(format!("not a duration like 250ms or 2s ({e})")))?;
    if w > Duration::from_secs(60) {
        return Err(bad("give at most 1m (a landing waits that long for others to join it)".into()));
    }
    Ok(w)
}
