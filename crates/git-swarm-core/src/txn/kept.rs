//! Work kept aside for a person: `refs/swarm-work/<swarm>/<task>/<epoch>` on the remote, or in this clone while the
//! remote cannot take it (pushed by the next runner here), and pruned once its task landed.

use super::*;

impl Swarm {
    /// Push `new` to `refname` on the remote, whatever is there (a work branch kept for a person to look at; never
    /// the state ref or the target branch).
    pub fn push_aside(&self, refname: &str, new: ObjectId) -> Result<(), TxnError> {
        match self.remote.force(&self.local, refname, new, "git swarm: work kept")? {
            Publish::Done => Ok(()),
            Publish::LostRace(reason) => Err(TxnError::Remote(RemoteError::Refused {
                remote: self.remote_label.clone(),
                refname: refname.into(),
                reason,
            })),
        }
    }

    /// Keep `new` at `refname` in this clone: work that could not be pushed aside (the remote away past the
    /// outage window), so that it outlives the work tree; the next runner of the clone pushes it
    /// (`Swarm::kept_here`).
    pub fn keep_here(&self, refname: &str, new: ObjectId) -> Result<(), TxnError> {
        Ok(self.local.set_ref(refname, new, "git swarm: work kept here (the remote could not be reached)")?)
    }

    /// The work kept in this clone by [`Swarm::keep_here`] (none when the clone is the remote itself).
    pub(crate) fn kept_here(&self) -> Vec<(String, ObjectId)> {
        if !matches!(self.remote.reach(), Reach::Transport) {
            return vec![];
        }
        let prefix = self.kept_work_prefix();
        let Ok(platform) = self.local.repo.references() else { return vec![] };
        let Ok(iter) = platform.prefixed(prefix.as_str()) else { return vec![] };
        iter.flatten().map(|r| (r.name().as_bstr().to_string(), r.id().detach())).collect()
    }

    /// Push the work kept in this clone (`Swarm::kept_here`) to the remote, each ref deleted here once it is
    /// there: what was pushed, and what could not be (with why).
    pub fn push_kept_here(&self) -> (Vec<String>, Vec<(String, TxnError)>) {
        let (mut pushed, mut failed) = (vec![], vec![]);
        for (refname, tip) in self.kept_here() {
            match self.push_aside(&refname, tip) {
                Ok(()) => {
                    let _ = self.local.delete_ref(&refname);
                    pushed.push(refname);
                }
                Err(e) => failed.push((refname, e)),
            }
        }
        (pushed, failed)
    }

    /// Where the work of attempt `epoch` of task `id` is kept when it cannot land: one ref per attempt, so that a
    /// later attempt never overwrites an earlier one's work.
    pub fn kept_work_ref(&self, id: &str, epoch: u64) -> String {
        format!("{}{id}/{epoch}", self.kept_work_prefix())
    }

    /// `refs/swarm-work/<name>/`.
    pub fn kept_work_prefix(&self) -> String {
        format!("refs/swarm-work/{}/", self.name)
    }

    /// The kept work of tasks that are done on `board` (their code landed: what was kept of their failed attempts
    /// is history), deleted on the remote. Returns the refs deleted.
    pub fn prune_kept_work(&self, board: &crate::ops::Board) -> Result<Vec<String>, TxnError> {
        let prefix = self.kept_work_prefix();
        let done = |id: &str| {
            board.closed.get(id).is_some_and(|c| c.status == crate::model::Status::Done)
                || board.tasks.get(id).is_some_and(|t| t.task.status == crate::model::Status::Done)
        };
        let stale: Vec<String> = self
            .remote_refs(&prefix)?
            .into_iter()
            .map(|(r, _)| r)
            .filter(|r| r.strip_prefix(prefix.as_str()).and_then(|rest| rest.split('/').next()).is_some_and(done))
            .collect();
        self.remote.delete(&self.local, &stale)?;
        Ok(stale)
    }
}
