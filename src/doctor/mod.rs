//! `git swarm doctor`: check a swarm and this clone's part of it, repair what can be repaired without losing
//! anything, and say what cannot. No terminal I/O: the CLI prints the [`Finding`]s.
//!
//! What it looks at, in order: the state ref against what this clone saw of it (deleted, rewound by a force-push,
//! replaced), the board (unreadable files, expired claims, tasks blocked for good), the settings, the target
//! branch, lock files left by killed git processes, runners' work trees whose runner is gone, this clone's records
//! of held epochs that no longer match the board, and the refs beside the state ref (kept work, archives).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gix::ObjectId;

use crate::Publish;
use crate::Reach;
use crate::model::Status;
use crate::short;
use crate::time::Timestamp;
use crate::{Relation, Swarm, TxnError};

mod clone;
mod state;
mod target;

use clone::*;
use state::*;
use target::*;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Severity {
    Ok,
    Info,
    Warn,
    Error,
}

/// One thing doctor found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Finding {
    /// Which check: `state-ref`, `board`, `settings`, `target`, `locks`, `worktrees`, `held`, `refs`.
    pub check: &'static str,
    pub severity: Severity,
    pub message: String,
    /// What `--fix` did about it.
    pub fixed: Option<String>,
    /// What to do when it was not fixed.
    pub hint: Option<String>,
    /// More of what it found, a line each (what the sandbox shows and hides).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

impl Finding {
    fn new(check: &'static str, severity: Severity, message: impl Into<String>) -> Finding {
        Finding { check, severity, message: message.into(), fixed: None, hint: None, details: Vec::new() }
    }
    fn hint(mut self, h: impl Into<String>) -> Finding {
        self.hint = Some(h.into());
        self
    }
    fn fixed(mut self, what: impl Into<String>) -> Finding {
        self.fixed = Some(what.into());
        self
    }
    /// Still a problem after the repairs?
    pub(crate) fn open_error(&self) -> bool {
        self.severity == Severity::Error && self.fixed.is_none()
    }
}

/// What doctor may change.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Repairs {
    /// Repairs that lose nothing: restore a rewound or deleted state ref from what this clone saw, remove stale
    /// lock files, stray work trees and stale records.
    pub fix: bool,
    /// Take the remote's state ref as it is (after a deliberate reset), keeping what this clone saw in an archive.
    pub accept_remote: bool,
}

/// A lock file older than this is left over by a killed process (git holds ref locks for milliseconds).
pub(crate) const STALE_LOCK: Duration = Duration::from_secs(60);
/// Ops since the last root past which doctor suggests `git swarm compact`.
pub(crate) const LONG_HISTORY: usize = 10_000;

/// Who writes the repairs that are ops (settings put back, tasks finished), and what this clone's runners would
/// run.
pub(crate) struct Examine<'a> {
    pub(crate) repairs: Repairs,
    pub(crate) now: Timestamp,
    /// This clone's `git config swarm.*` over the shared settings.
    pub(crate) local: &'a crate::config::Local,
    pub(crate) agent: &'a str,
    pub(crate) who: &'a crate::Identity,
    pub(crate) retry: &'a crate::Retry,
    pub(crate) clock: &'a dyn Fn() -> Timestamp,
    /// The process environment (what the runners started here would get).
    pub(crate) env: &'a crate::environment::Environment,
}

/// Run every check, in order — the state ref, the settings, the target's history, the board, the clone's locks
/// and work trees, what its runners would run —, repairing as `with.repairs` allows.
pub(crate) fn examine(swarm: &Swarm, with: &Examine<'_>) -> Result<Vec<Finding>, TxnError> {
    let repairs = with.repairs;
    let mut out = Vec::new();
    let tip = state_ref(swarm, repairs, &mut out)?;
    if let Some(tip) = tip {
        board(swarm, tip, with.now, repairs, &mut out)?;
    }
    locks(swarm, repairs, &mut out);
    worktrees(swarm, repairs, &mut out, with.env);
    // Settings that cannot be read stop every op: put back the newest that read (with --fix) before anything else.
    let settings_ok = match state::settings(swarm, with)? {
        Some((f, repaired)) => {
            out.push(f);
            repaired
        }
        None => true,
    };
    // After a restore too: tasks the board calls open whose code is on the target are finished, never redone.
    if settings_ok {
        let restored = restored(&out);
        out.extend(target::finish_landed(swarm, with, restored)?);
    }
    // The agents each role would run from this clone, and whether they can start here.
    if let Ok(Some(snap)) = swarm.try_read(false) {
        let (config, local, env) = (&snap.board.config, with.local, with.env);
        let run_dir = crate::runner::Places::of(swarm.local.repo.common_dir(), env).run_dir("doctor");
        let sandboxed = Sandboxed::of(swarm, config, local, env);
        out.extend(agents(config, local, &run_dir, env, sandboxed.as_ref()));
        out.push(sandbox(config, local, env));
        out.extend(sandboxed.as_ref().map(Sandboxed::finding));
        out.extend(git_version());
        out.extend(check_program(config, local, env, sandboxed.as_ref()));
        out.extend(baseline(config, local));
        out.extend(forge(config, env));
    }
    Ok(out)
}
