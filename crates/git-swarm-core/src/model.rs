//! The data of a swarm: tasks, the swarm's settings, and the validation of everything read from git.
//!
//! Everything in here is plain data with serde. Files in the state ref are TOML; the machine output of the CLI
//! is JSON with the task object of the contract (see `docs/json.md`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;
use crate::usage::Usage;

/// Largest task file we read or write. A bigger file in the state ref is reported, not loaded.
pub const MAX_TASK_FILE_BYTES: u64 = 1024 * 1024;
/// Largest `swarm.toml` we read.
pub const MAX_CONFIG_BYTES: u64 = 256 * 1024;
/// Longest id, agent or label.
pub(crate) const MAX_NAME_LEN: usize = 64;
/// Highest epoch (claims of one task); keeps it exact in JSON (2^53 - 1) and far from overflow.
pub const MAX_EPOCH: u64 = (1 << 53) - 1;
/// Longest title.
pub const MAX_TITLE_LEN: usize = 500;

/// What a task is for: code to write, or an area to plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Work,
    Plan,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Work => "work",
            Kind::Plan => "plan",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    #[default]
    Open,
    Claimed,
    Done,
    Failed,
    Cancelled,
}

impl Status {
    pub const ALL: [Status; 5] = [Status::Open, Status::Claimed, Status::Done, Status::Failed, Status::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Claimed => "claimed",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// A final status never changes again.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Done | Status::Failed | Status::Cancelled)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown status '{s}' (one of open, claimed, done, failed, cancelled)"))
    }
}

/// A live or expired claim on a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub agent: String,
    pub epoch: u64,
    pub lease_until: Timestamp,
}

/// What came of a finished task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TaskResult {
    pub commit: Option<String>,
    pub note: Option<String>,
    /// Who finished it, under which epoch, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
}

/// One attempt that did not succeed: a `fail`, or a lease that ran out and was taken over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub agent: String,
    pub epoch: u64,
    pub at: Timestamp,
    pub reason: String,
    /// What the attempt spent, as far as it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Where the attempt's work was kept for a person: a ref, and where it is (`refs/swarm-work/…` on the
    /// remote, `refs/swarm-held/…` in one clone only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// A task, exactly as stored in `tasks/**/<id>.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub kind: Kind,
    #[serde(default)]
    pub status: Status,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub deps: Vec<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// How to tell the task is done (a test that passes, a command's output): planners write it, workers read it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub acceptance: String,
    /// The paths the task is about; planners keep the scopes of open tasks apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
    /// For a plan: the planning rounds done so far (a planner that takes the plan over goes on counting).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub plan_round: u32,
    /// Finished attempts that did not succeed.
    #[serde(default)]
    pub attempts: u32,
    /// How many claims this task has seen; the epoch of the next claim is `epoch + 1`.
    #[serde(default)]
    pub epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<Failure>,
    /// What the task's ended attempts spent (agent runs, conflict runs), as their agents reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What the claim's attempt has spent so far, as its holder last reported it (with a renewal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_usage: Option<Usage>,
}

impl Task {
    /// Everything the task has spent as far as the board knows: its ended attempts and the claim's so far.
    pub fn spent(&self) -> Option<Usage> {
        crate::usage::plus(self.usage, self.claim.as_ref().and(self.claim_usage))
    }

    /// A claim that is live at `now`.
    pub fn live_claim(&self, now: Timestamp) -> Option<&Claim> {
        match (&self.status, &self.claim) {
            (Status::Claimed, Some(c)) if c.lease_until > now => Some(c),
            _ => None,
        }
    }

    /// A claim whose lease ran out at `now` (still recorded, takeable by anyone).
    pub fn expired_claim(&self, now: Timestamp) -> Option<&Claim> {
        match (&self.status, &self.claim) {
            (Status::Claimed, Some(c)) if c.lease_until <= now => Some(c),
            _ => None,
        }
    }

    /// Check the fields that a file could get wrong but TOML cannot.
    pub fn validate(&self) -> Result<(), String> {
        validate_id(&self.id).map_err(|e| format!("id: {e}"))?;
        if self.title.trim().is_empty() {
            return Err("title is empty".into());
        }
        if self.title.len() > MAX_TITLE_LEN {
            return Err(format!("title is longer than {MAX_TITLE_LEN} bytes"));
        }
        // The title reaches agents as an environment variable, which cannot hold a NUL: every runner that claimed
        // such a task would fail to start its agent, again and again.
        if self.title.contains('\0') {
            return Err("title contains a NUL character".into());
        }
        for d in &self.deps {
            validate_id(d).map_err(|e| format!("deps: {e}"))?;
        }
        if let Some(p) = &self.parent {
            validate_id(p).map_err(|e| format!("parent: {e}"))?;
        }
        for l in &self.labels {
            validate_label(l).map_err(|e| format!("labels: {e}"))?;
        }
        if self.epoch > MAX_EPOCH {
            return Err(format!("epoch {} is beyond the limit of {MAX_EPOCH}", self.epoch));
        }
        match (self.status, &self.claim) {
            (Status::Claimed, None) => {
                return Err("status is claimed but there is no [claim]".into());
            }
            (Status::Claimed, Some(c)) => {
                validate_agent(&c.agent).map_err(|e| format!("claim.agent: {e}"))?;
                if c.epoch == 0 || c.epoch > self.epoch {
                    return Err(format!("claim.epoch {} does not fit the task's epoch {}", c.epoch, self.epoch));
                }
            }
            (st, Some(_)) => return Err(format!("status is {st} but a [claim] is present")),
            _ => {}
        }
        Ok(())
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Ids of tasks: `t-` and hex digits when we mint them; anything of letters, digits, `-`, `_`, `.` when read.
/// Never `/`, never `..`, never a leading `.`: ids become paths and ref names.
pub fn validate_id(id: &str) -> Result<(), String> {
    validate_word(id, "id")
}

/// Agent ids: letters, digits, `-`, `_`, `.`.
pub fn validate_agent(agent: &str) -> Result<(), String> {
    validate_word(agent, "agent id")
}

/// Labels: a word, as ids.
pub fn validate_label(label: &str) -> Result<(), String> {
    validate_word(label, "label")
}

/// The target: a branch name git accepts (`git check-ref-format --branch`): `refs/heads/<target>` a valid ref,
/// not `HEAD`, not starting with `-`. A target such as `swarm/../x` would otherwise be stored and every worker
/// fail later on a push the remote refuses.
pub fn validate_branch(name: &str) -> Result<(), String> {
    let shown = crate::escape::line(name);
    if name.starts_with('-') {
        return Err(format!("target '{shown}' is not a branch name: it starts with '-'"));
    }
    if name.starts_with("refs/") {
        return Err(format!("target '{shown}' is not a branch name: name the branch without refs/heads/"));
    }
    let full = format!("refs/heads/{name}");
    gix::validate::reference::branch_name(full.as_str().into())
        .map(|_| ())
        .map_err(|e| format!("target '{shown}' is not a branch name: {e}"))
}

/// Swarm names become a ref name component.
pub fn validate_swarm_name(name: &str) -> Result<(), String> {
    validate_word(name, "swarm name")?;
    if name.ends_with(".lock") {
        return Err(format!("swarm name '{name}' may not end in .lock"));
    }
    Ok(())
}

fn validate_word(s: &str, what: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if s.len() > MAX_NAME_LEN {
        return Err(format!(
            "{what} '{}…' is longer than {MAX_NAME_LEN} characters",
            crate::escape::line(&s[..s.floor_char_boundary(MAX_NAME_LEN)])
        ));
    }
    if let Some(c) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
        return Err(format!(
            "{what} '{}' has the character {:?}; use letters, digits, '-', '_' and '.'",
            crate::escape::line(s),
            c
        ));
    }
    if s.starts_with('.') || s.contains("..") {
        return Err(format!("{what} '{s}' may not start with '.' or contain '..'"));
    }
    Ok(())
}

/// The swarm's settings, `swarm.toml` at the root of the state tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Layout version of the state tree.
    #[serde(default = "default_version")]
    pub version: u32,
    /// The branch that workers land code on.
    #[serde(default = "default_target")]
    pub target: String,
    /// Default lease of a claim.
    #[serde(default = "default_lease", with = "crate::time::duration_serde")]
    pub lease: std::time::Duration,
    /// Attempts (fails and expired leases) before a task is `failed`.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Settings that later versions and other tools add; kept as they are.
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl Config {
    /// The top-level keys of `swarm.toml`, as `Config` reads them: name, type, the default as `swarm.toml` writes
    /// it, and what it is (the docs' table of them comes from here). `version` is the layout's, written by `init`.
    pub const KEYS: &'static [(&'static str, &'static str, &'static str, &'static str)] = &[
        ("target", "text", "\"main\"", "The branch the workers land code on."),
        ("lease", "duration", "\"10m\"", "How long a claim holds when its holder says nothing (a renewal extends it)."),
        (
            "max_attempts",
            "whole number",
            "3",
            "Attempts of a task (fails and expired leases) before it is failed for good.",
        ),
        ("version", "whole number", "1", "The layout of the state tree (written by `init`; a newer one is refused)."),
    ];
}

pub(crate) const LAYOUT_VERSION: u32 = 1;

fn default_version() -> u32 {
    LAYOUT_VERSION
}
fn default_target() -> String {
    "main".into()
}
fn default_lease() -> std::time::Duration {
    std::time::Duration::from_secs(600)
}
fn default_max_attempts() -> u32 {
    3
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: LAYOUT_VERSION,
            target: default_target(),
            lease: default_lease(),
            max_attempts: default_max_attempts(),
            extra: toml::Table::new(),
        }
    }
}

impl Config {
    pub fn validate(&self) -> Result<(), String> {
        if self.version > LAYOUT_VERSION {
            return Err(format!(
                "layout version {} is newer than this git-swarm understands ({LAYOUT_VERSION}); upgrade git-swarm",
                self.version
            ));
        }
        // Reading stays lenient about what a branch name is (a board written by an older version must stay
        // readable, so that `config set target` can mend it); `check` below is the strict one.
        if self.target.is_empty() || self.target.chars().any(|c| c.is_control() || c == ' ') {
            return Err(format!("target '{}' is not a branch name", crate::escape::line(&self.target)));
        }
        if self.lease.as_secs() == 0 {
            return Err("lease must be at least 1s".into());
        }
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        Ok(())
    }

    /// [`Config::validate`] and a target that is a valid branch name: what `init`, `config set` and every runner
    /// require.
    pub fn check(&self) -> Result<(), String> {
        self.validate()?;
        validate_branch(&self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_reject_paths_and_controls() {
        for bad in ["", "a/b", "..", "a..b", ".hidden", "a b", "t-\u{7}", "é", &"x".repeat(65)] {
            assert!(validate_id(bad).is_err(), "{bad:?} should be refused");
        }
        for good in ["t-3f9a2c", "A.b_c-1", "x"] {
            assert!(validate_id(good).is_ok(), "{good:?} should pass");
        }
    }

    #[test]
    fn targets_must_be_branch_names() {
        for bad in [
            "swarm/../x",
            "-x",
            "a..b",
            "x.lock",
            "a/",
            "/a",
            "a//b",
            "HEAD",
            "refs/heads/x",
            "a~1",
            "a:b",
            "@{x}",
            "a\\b",
            "a.",
            "a?",
            "a*b",
            "a[b",
        ] {
            assert!(validate_branch(bad).is_err(), "{bad:?} should be refused");
        }
        for good in ["main", "swarm/x", "release-1.2", "feat/a_b", "Main"] {
            assert!(validate_branch(good).is_ok(), "{good:?}: {:?}", validate_branch(good));
        }
    }

    #[test]
    fn status_parses_every_name_and_rejects_others() {
        for st in Status::ALL {
            assert_eq!(st.as_str().parse::<Status>(), Ok(st));
        }
        assert!("finished".parse::<Status>().is_err());
    }

    #[test]
    fn config_keeps_unknown_settings() {
        let c: Config =
            toml::from_str("target = \"dev\"\nlease = \"2m\"\n[roles.worker]\ncommand = \"x\"\n").unwrap_or_default();
        assert_eq!(c.target, "dev");
        assert_eq!(c.lease.as_secs(), 120);
        assert!(c.extra.contains_key("roles"));
        let back = toml::to_string(&c).unwrap_or_default();
        assert!(back.contains("[roles.worker]"), "{back}");
    }
}

/// The judge's word at the end of a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Continue,
    Stop,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Continue => "continue",
            Verdict::Stop => "stop",
        })
    }
}

/// `cycles/<n>.toml`: what the judge said at the end of cycle `n`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleRecord {
    pub cycle: u64,
    pub verdict: Verdict,
    #[serde(default)]
    pub reasons: String,
    #[serde(default)]
    pub by: String,
    pub at: Timestamp,
    #[serde(default)]
    pub tasks_done: u64,
    #[serde(default)]
    pub tasks_failed: u64,
    /// What the judge's run for this verdict spent, as reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What the cycle spent, every role together (the judge's run included), as the board counted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Usage>,
}
