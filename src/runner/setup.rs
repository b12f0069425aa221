//! `[run] setup` (docs/check.md, *Setup*): a command of the shared settings (trusted like `check`) run in a work
//! tree the runner just made, before the agent or the check works in it — when the tree is cold (nothing was
//! carried into it: [`super::warm`]) or a file `[run] setup_when` names is not what it was at this slot's last
//! setup. It runs contained as the check does, for at most `[run] setup_timeout`, its output in the runner's log.
//!
//! What it must leave is what the repository ignores (`node_modules/`, `.venv/`): that is carried to the next
//! tree; anything else it writes is the agent's work like any file of the tree.

use std::path::Path;
use std::time::Duration;

use gix::ObjectId;

use super::Runner;
use super::slot::{Checkout, Slot};
use crate::agent::files;

/// Why `[run] setup` did not run to the end.
#[derive(Debug)]
pub(crate) struct SetupFailed {
    /// One line: the command and how it ended.
    pub(crate) reason: String,
    /// Its last lines.
    pub(crate) tail: Vec<String>,
    /// It could not be run at all (the sandbox, the process): the runner's set-up.
    pub(crate) cannot_run: bool,
}

/// What identifies a setup: its command and, for each file of `when`, the blob the commit `tree` has there.
fn key(repo: &gix::Repository, tree: ObjectId, cmd: &str, when: &[String]) -> String {
    let mut key = format!("{cmd}\n");
    let t = repo.find_tree(tree).ok();
    for f in when {
        let id = t
            .as_ref()
            .and_then(|t| t.lookup_entry_by_path(Path::new(f)).ok().flatten())
            .map_or_else(|| "-".to_string(), |e| e.object_id().to_string());
        key.push_str(&format!("{f} {id}\n"));
    }
    key
}

impl Runner<'_> {
    /// Run `[run] setup` in the slot's work tree (as `checkout` made it at `what`) when it is due: `Ok(true)` when
    /// it ran, `Ok(false)` when it was not needed (or there is none). What it says goes to `events`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_up(
        &self,
        slot: &Slot,
        checkout: &Checkout,
        what: ObjectId,
        settings: &super::RunSettings,
        config: &crate::model::Config,
        task: &str,
        events: &mut Vec<super::Event>,
    ) -> Result<bool, SetupFailed> {
        let Some(cmd) = settings.setup.as_deref() else { return Ok(false) };
        let key = key(&self.swarm.local.repo, checkout.tree, cmd, &settings.setup_when);
        let file = slot.setup_key();
        if !checkout.known.carried.is_empty() && files::read_text(&file, 1 << 20).is_some_and(|k| k == key) {
            return Ok(false);
        }
        let _ = files::remove_all(&file);
        events.push(super::Event::AgentStarted { task: task.to_string(), what: "setup" });
        let started = std::time::Instant::now();
        let (out, warnings) = run(self, slot, what, cmd, settings.setup_timeout, config);
        for w in warnings {
            events.push(super::Event::Warning(w));
        }
        let exit = match &out {
            Ok(()) => "exit 0".to_string(),
            Err(f) => f.reason.clone(),
        };
        events.push(super::Event::AgentExited { task: task.to_string(), exit, secs: started.elapsed().as_secs_f64() });
        out?;
        let _ = files::write(&file, key);
        Ok(true)
    }
}

/// One run of `cmd` in the slot's tree, contained as the check is.
fn run(
    r: &Runner<'_>,
    slot: &Slot,
    what: ObjectId,
    cmd: &str,
    timeout: Duration,
    config: &crate::model::Config,
) -> (Result<(), SetupFailed>, Vec<String>) {
    let shown = crate::escape::line(cmd);
    let cannot = |why: String| SetupFailed {
        reason: format!("[run] setup `{shown}` could not be run: {why}"),
        tail: vec![],
        cannot_run: true,
    };
    let guard = r.guard();
    let res = super::landing::run_contained(r, slot, what, cmd, timeout, config, Some(r.log_file()), &|| !r.stopping());
    let warnings = guard.restore();
    let out = match res {
        Ok(out) => out,
        Err(e) => return (Err(cannot(e)), warnings),
    };
    if out.exit.success() {
        return (Ok(()), warnings);
    }
    let last = out.tail.iter().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string());
    let said = last.map(|l| format!(": {}", crate::escape::line(&l))).unwrap_or_default();
    let failed = SetupFailed {
        reason: format!("[run] setup `{shown}` failed ({}){said}", out.exit),
        cannot_run: crate::agent::could_not_start(&out),
        tail: out.tail,
    };
    (Err(failed), warnings)
}
