//! The one printer: data on stdout (human lines, or one JSON document with `--json`), diagnostics on stderr.
//! Task text goes through `escape` before it reaches a terminal. A closed stdout (`| head`) ends output quietly.

use std::io::Write;

use crate::Problem;
use crate::escape;
use crate::model::Task;
use crate::time::Timestamp;
use crate::usage::Usage;
use serde_json::{Value, json};

pub(crate) struct Printer {
    pub json: bool,
}

impl Printer {
    pub(crate) fn new(json: bool) -> Self {
        Printer { json }
    }

    /// A line of human output (ignored under `--json`).
    pub(crate) fn line(&self, s: impl AsRef<str>) {
        if !self.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", s.as_ref());
        }
    }

    /// The JSON document (only under `--json`).
    pub(crate) fn doc(&self, v: &Value) {
        if self.json {
            let mut out = std::io::stdout().lock();
            let _ = serde_json::to_writer_pretty(&mut out, v);
            let _ = writeln!(out);
        }
    }

    /// A remark for a person on stderr (not under `--json`), like "no tasks".
    pub(crate) fn note(&self, s: impl AsRef<str>) {
        if !self.json {
            let _ = writeln!(std::io::stderr().lock(), "{}", s.as_ref());
        }
    }

    pub(crate) fn warn(&self, s: impl AsRef<str>) {
        let _ = writeln!(std::io::stderr().lock(), "warning: {}", s.as_ref());
    }

    /// Unreadable files of the state ref, one `warning:` line each.
    pub(crate) fn problems(&self, problems: &[Problem]) {
        for p in problems {
            if p.path == "swarm.toml" {
                // The board is read all the same, with the newest settings that read: say what that means.
                self.warn(format!(
                    "{p} — shown with the newest settings that read; no op but a repair runs until it is fixed \
                     (`git swarm doctor`)"
                ));
            } else {
                self.warn(format!("skipped {p}"));
            }
        }
    }
}

/// The task object of the contract (`docs/json.md`), with the extra fields after the contract's.
pub(super) fn task_json(t: &Task, now: Timestamp) -> Value {
    let claim = t.claim.as_ref().map(|c| {
        json!({"agent": c.agent, "epoch": c.epoch, "lease_until": c.lease_until.to_string(), "expired": c.lease_until <= now,
               "usage": t.claim_usage.as_ref().map(usage_json)})
    });
    let result = t.result.as_ref().map(|r| {
        json!({"commit": r.commit, "note": r.note, "agent": r.agent, "epoch": r.epoch, "at": r.at.map(|a| a.to_string()),
               "usage": t.spent().as_ref().map(usage_json)})
    });
    json!({
        "id": t.id,
        "title": t.title,
        "body": t.body,
        "kind": t.kind.as_str(),
        "status": t.status.as_str(),
        "priority": t.priority,
        "deps": t.deps,
        "labels": t.labels,
        "acceptance": t.acceptance,
        "scope": t.scope,
        "attempts": t.attempts,
        "claim": claim,
        "result": result,
        "parent": t.parent,
        "epoch": t.epoch,
        "created_by": t.created_by,
        "created_at": t.created_at.map(|a| a.to_string()),
        "failures": t.failures.iter().map(|f| json!({
            "agent": f.agent, "epoch": f.epoch, "at": f.at.to_string(), "reason": f.reason,
            "usage": f.usage.as_ref().map(usage_json), "kept": f.kept
        })).collect::<Vec<_>>(),
        "usage": t.spent().as_ref().map(usage_json),
    })
}

/// The usage object of `docs/json.md`: `{"input_tokens", "output_tokens", "cache_read_tokens", "cost_usd", "runs"}`
/// (`cost_usd` is `null` when no run reported a cost).
pub(super) fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cost_usd": u.cost_usd.map(|c| c.dollars()),
        "runs": u.runs,
    })
}

pub(super) fn tasks_json<'a>(tasks: impl IntoIterator<Item = &'a Task>, now: Timestamp) -> Value {
    Value::Array(tasks.into_iter().map(|t| task_json(t, now)).collect())
}

/// One line for a task: `t-3f9a2c  claimed  p0  title  (alice until 14:05:00)`.
pub(super) fn task_line(t: &Task, now: Timestamp) -> String {
    let mut s = format!("{}  {:<9} p{:<3} {}", t.id, t.status.as_str(), t.priority, escape::line(&t.title));
    if t.kind != crate::model::Kind::Work {
        s.push_str(&format!("  [{}]", t.kind));
    }
    if let Some(c) = &t.claim {
        let state = if c.lease_until <= now { "expired" } else { "until" };
        s.push_str(&format!("  ({} {state} {})", c.agent, c.lease_until.clock()));
    }
    if !t.deps.is_empty() {
        s.push_str(&format!("  after {}", t.deps.join(",")));
    }
    s
}

/// The full human view of a task for `show`.
/// `handoff`: the worker's hand-off note (`notes/<id>.md`), when there is one.
pub(super) fn task_detail(t: &Task, now: Timestamp, waiting: &[String], handoff: Option<&str>) -> String {
    let mut s = String::new();
    let mut kv = |k: &str, v: String| s.push_str(&format!("{k:<10} {v}\n"));
    kv("id", t.id.clone());
    kv("title", escape::line(&t.title));
    kv("kind", t.kind.to_string());
    kv("status", t.status.to_string());
    kv("priority", t.priority.to_string());
    if !t.deps.is_empty() {
        let w = if waiting.is_empty() { String::new() } else { format!(" (waiting on {})", waiting.join(", ")) };
        kv("deps", format!("{}{w}", t.deps.join(", ")));
    }
    if !t.labels.is_empty() {
        kv("labels", t.labels.join(", "));
    }
    if let Some(p) = &t.parent {
        kv("parent", p.clone()); // validated: a word
    }
    if let Some(c) = &t.claim {
        let state = if c.lease_until <= now { "expired at" } else { "until" };
        kv("claim", format!("{} (epoch {}) {state} {}", c.agent, c.epoch, c.lease_until));
    }
    kv("attempts", t.attempts.to_string());
    if let Some(r) = &t.result {
        if let Some(c) = &r.commit {
            kv("commit", escape::line(c));
        }
        if let Some(n) = &r.note {
            kv("note", escape::line(n));
        }
        if let Some(a) = &r.agent {
            kv("done by", escape::line(a));
        }
    }
    for f in &t.failures {
        kv(
            "failure",
            format!("{} (epoch {}) at {}: {}", escape::line(&f.agent), f.epoch, f.at, escape::line(&f.reason)),
        );
        if let Some(kept) = &f.kept {
            kv("  its work", escape::line(kept));
        }
    }
    if let Some(u) = t.spent() {
        let live = if t.claim.is_some() && t.claim_usage.is_some() { " (the claim's so far included)" } else { "" };
        kv("spent", format!("{u}{live}"));
    }
    if let (Some(by), Some(at)) = (&t.created_by, &t.created_at) {
        kv("created", format!("by {} at {at}", escape::line(by)));
    }
    if !t.scope.is_empty() {
        kv("scope", escape::line(&t.scope.join(", ")));
    }
    let mut section = |title: &str, text: &str| {
        if text.trim().is_empty() {
            return;
        }
        if !title.is_empty() {
            s.push_str(&format!("\n{title}:\n"));
        } else {
            s.push('\n');
        }
        s.push_str(&escape::block(text.trim_end()));
        s.push('\n');
    };
    section("", &t.body);
    section("acceptance", &t.acceptance);
    section("hand-off", handoff.unwrap_or_default());
    s.trim_end().to_string()
}
