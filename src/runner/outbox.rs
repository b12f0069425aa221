//! The agent's own `git swarm add` (docs/security.md, *Containment*): an agent holds no credential and, in a
//! sandbox, cannot write the clone, so the tasks it files go to an outbox — `$GIT_SWARM_OUTBOX`, a task file
//! (`[[task]]` tables, the format of `add --file`) in its run's folder — and the runner files them when the run is
//! over, through its own transaction: scrubbed of the runner's secrets like everything else it writes
//! (`runner::scrub`), checked against the board, all or none. Each table's `key` is the id the agent was told;
//! the runner files the tasks under those ids when they are all free, else under fresh ones.

use std::path::Path;

use crate::ops::plan::{self, Proposal};
use crate::ops::{self, DomainError};

/// The most an outbox holds (what `add --file` takes).
const MAX_OUTBOX: usize = crate::model::MAX_TASK_FILE_BYTES as usize * 4;

/// Add `proposals` to the outbox at `path` (what `git swarm add` does inside an agent run).
pub(crate) fn append(path: &Path, proposals: &[Proposal]) -> Result<(), String> {
    let mut all = match crate::agent::files::read_text(path, MAX_OUTBOX) {
        Some(text) => plan::parse_task_file(&text).map_err(|e| format!("{}: {e}", path.display()))?,
        None => Vec::new(),
    };
    all.extend(proposals.iter().cloned());
    #[derive(serde::Serialize)]
    struct File<'a> {
        task: &'a [Proposal],
    }
    let text = toml::to_string(&File { task: &all }).map_err(|e| format!("cannot write the outbox: {e}"))?;
    if text.len() > MAX_OUTBOX {
        return Err(format!("the outbox would hold more than {MAX_OUTBOX} bytes of tasks"));
    }
    crate::agent::files::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// What the outbox at `path` holds, and the outbox is gone (`None`: there is none; `Err`: it cannot be read,
/// and is gone too — an agent's file, said once).
pub(crate) fn take(path: &Path) -> Option<Result<Vec<Proposal>, String>> {
    let text = match crate::agent::files::read(path, MAX_OUTBOX) {
        Ok((t, false)) => Ok(t),
        Ok((_, true)) => Err(format!("more than {MAX_OUTBOX} bytes")),
        Err(e) if e.is_missing() => return None,
        Err(e) => Err(e.to_string()),
    };
    let _ = crate::agent::files::remove_all(path);
    Some(text.and_then(|t| if t.trim().is_empty() { Ok(vec![]) } else { plan::parse_task_file(&t) }))
}

impl super::Runner<'_> {
    /// Say in the agent's log which of its hooks fired during the run (their stamps in the run's folder: inside a
    /// runner the renewal hooks leave the lease to the runner, and this is how one tells they ran).
    pub(crate) fn note_hooks(&self) {
        // The run's folder is the agent's: listed through `agent::files` (names only), its stamps removed by
        // name (an unlink, never followed).
        let dir = self.run_dir();
        let Ok(run) = crate::agent::files::Dir::open(&dir) else { return };
        let mut fired: Vec<String> = run
            .entries()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| e.name.to_str().filter(|n| n.starts_with("hook-")).map(str::to_string))
            .collect();
        if fired.is_empty() {
            return;
        }
        fired.sort();
        for f in &fired {
            let _ = crate::agent::files::remove_all(&dir.join(f));
        }
        if let Ok(mut log) = crate::secrets::private_file(&self.log_file(), true) {
            use std::io::Write;
            let _ = writeln!(log, "git swarm: the agent's hooks fired: {}", fired.join(", "));
        }
    }

    /// File what the agent's run left in its outbox: one op (`add`), all or none. What to report.
    pub(crate) fn file_outbox(&self) -> Vec<String> {
        self.note_hooks();
        let proposals = match take(&self.outbox_file()) {
            None => return vec![],
            Some(Err(why)) => return vec![format!("the tasks the agent added were not filed: {why}")],
            Some(Ok(p)) if p.is_empty() => return vec![],
            Some(Ok(p)) => p,
        };
        let res = self.transact(|snap, actor| {
            plan::check_task_file(&snap.board, &proposals)
                .map_err(|why| DomainError::NotOnBoard { file: "the agent's outbox".into(), why })?;
            // The ids the agent was told, when they are all free ids; else fresh ones.
            let wanted: Vec<String> = proposals.iter().filter_map(|p| p.key.clone()).collect();
            let usable = wanted.len() == proposals.len()
                && wanted.iter().all(|k| crate::model::validate_id(k).is_ok() && !snap.board.contains(k));
            let mut keys = wanted.into_iter();
            let mut mint = || if usable { keys.next().unwrap_or_else(ops::mint_id) } else { ops::mint_id() };
            let file = plan::task_file_tasks_with(&snap.board, None, &proposals, &mut mint)?;
            let mut queue = file.minted.into_iter();
            let mut mint = || queue.next().unwrap_or_else(ops::mint_id);
            ops::add(&snap.board, actor, file.news, &mut mint)
        });
        match res {
            Ok(c) => {
                let ids: Vec<String> = c.value.iter().map(|t| t.id.clone()).collect();
                vec![format!("filed {} task(s) the agent added: {}", ids.len(), ids.join(", "))]
            }
            Err(e) => vec![format!("the tasks the agent added were not filed: {e}")],
        }
    }
}
