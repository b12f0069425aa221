//! What a runner says while it works ([`Event`]), how it loops ([`Mode`]), how it ends ([`RunEnd`]) and how it
//! fails ([`RunError`]).

use std::time::Duration;

use super::{Role, Verdict, git};
use crate::TxnError;
use crate::agent;
use crate::model::Kind;
use crate::time::Timestamp;

/// What a runner reports while it works.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    Claimed {
        task: String,
        title: String,
        epoch: u64,
        kind: Kind,
    },
    AgentStarted {
        task: String,
        what: &'static str,
    },
    AgentExited {
        task: String,
        exit: String,
        secs: f64,
    },
    Renewed {
        task: String,
        until: Timestamp,
    },
    Landed {
        task: String,
        commit: String,
        lost_races: u32,
        exit_to_landed: Duration,
        next: Option<String>,
    },
    Failed {
        task: String,
        reason: String,
        attempts_left: bool,
    },
    Released {
        task: String,
    },
    LostClaim {
        task: String,
        why: String,
    },
    KeptAside {
        task: String,
        refname: String,
    },
    Conflict {
        task: String,
        files: Vec<String>,
        attempt: u32,
    },
    Proposed {
        plan: String,
        count: usize,
    },
    PlanDone {
        plan: String,
        rounds: u32,
    },
    Verdict {
        cycle: u64,
        verdict: Verdict,
        reasons: String,
    },
    Waiting {
        why: String,
    },
    Warning(String),
    /// What the runner did with the swarm's pull/merge request (`[forge]`): opened, merged, taken in, ready.
    Forge(String),
}

/// Why a runner stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// `--once` found nothing to claim.
    NothingReady,
    /// `--once` did its task, or `--max-tasks` were done.
    Done,
    /// `--until-idle`: nothing ready and no live claim.
    Idle,
    /// The judge said stop (cycle n).
    SwarmStopped { cycle: u64 },
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// The running cycle spent its budget (`[run.budget]`): no more claims until a new cycle.
    BudgetSpent { why: String },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error(transparent)]
    Txn(#[from] TxnError),
    #[error(transparent)]
    Git(#[from] git::GitError),
    #[error(transparent)]
    Agent(#[from] agent::AgentError),
    #[error("swarm.toml: {0}")]
    Settings(String),
    #[error("no agent is configured for the {role} role: pass --exec, or set [roles.{role}] in swarm.toml")]
    NoAgent { role: Role },
    /// The agent cannot start on this machine (found before a claim, or it exited 126/127): nothing is spent.
    #[error("{role}: {error}")]
    CannotStart { role: Role, error: agent::CannotStart },
    #[error("{0}")]
    Setup(String),
    /// The shared settings this runner would run are not trusted by its clone (`crate::trust`): nothing claimed.
    #[error(
        "the swarm's shared settings are not trusted in this clone (digest {short}): {}",
        changes.iter().take(6).cloned().collect::<Vec<_>>().join("; ")
    )]
    Untrusted { short: String, digest: String, changes: Vec<String> },
    /// Another runner of this clone runs under the same agent id (it holds the id's pid file locked).
    #[error("a runner with the agent id {agent} already runs in this clone{}", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    AlreadyRunning { agent: String, pid: Option<u32> },
    /// A request that cannot be met as asked (exit 2 in the CLI).
    #[error("{0}")]
    Usage(String),
}

/// How a runner loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    /// Until the judge says stop, or a signal.
    #[default]
    Forever,
    /// One task; [`RunEnd::NothingReady`] when there is none.
    Once,
    /// Until nothing is ready and no claim is live.
    UntilIdle,
}
