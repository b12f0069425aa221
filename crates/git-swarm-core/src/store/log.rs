//! History: the audit log of the state ref (`LogEntry`, read from each commit's trailers), and the landings a
//! branch holds (`landed_commit`: a runner's landing of a task, by its trailers).

use super::*;

impl Store {
    /// Is `wanted` the commit `tip` or one of its first `depth` first-parent ancestors?
    pub fn has_ancestor(&self, tip: ObjectId, wanted: ObjectId, depth: usize) -> Result<bool, StoreError> {
        let mut at = tip;
        for _ in 0..depth {
            if at == wanted {
                return Ok(true);
            }
            let c = self.repo.find_commit(at).git(|| format!("cannot read state commit {at}"))?;
            match c.parent_ids().next() {
                Some(p) => at = p.detach(),
                None => return Ok(false),
            }
        }
        Ok(false)
    }

    /// Visit the first-parent line from `tip`, newest first, at most `limit` commits, until `visit` says stop.
    pub(super) fn first_parents(
        &self,
        tip: ObjectId,
        limit: usize,
        mut visit: impl FnMut(ObjectId, &gix::Commit<'_>) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let mut at = tip;
        for _ in 0..limit {
            let c = self.repo.find_commit(at).git(|| format!("cannot read commit {at}"))?;
            if visit(at, &c)? {
                return Ok(());
            }
            match c.parent_ids().next() {
                Some(p) => at = p.detach(),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// The newest commit on the first-parent line from `tip` that a runner's landing wrote for `task` under a claim
    /// whose epoch is in `epochs`: the code of a task that landed. Its trailers say so (`Swarm-Task: <task>` alone
    /// and `Swarm-Epoch: <n>`, [`crate::trailer::read`]); a commit that names the task otherwise — the
    /// `commit-msg` hook's trailer, a person's, a forger's, an epoch no claim of the task had — is never its code,
    /// and is reported in [`Landed::refused`]. The walk stops at `stop` (a commit known not to hold it), or after
    /// `limit` commits.
    pub fn landed_commit(
        &self,
        tip: ObjectId,
        task: &str,
        stop: Option<ObjectId>,
        epochs: std::ops::RangeInclusive<u64>,
        limit: usize,
    ) -> Result<Landed, StoreError> {
        let mut found = Landed::default();
        self.first_parents(tip, limit, |at, c| {
            if Some(at) == stop {
                return Ok(true);
            }
            let msg = c.message_raw_sloppy();
            // Only a message that holds the id can name it: most are not parsed at all.
            if msg.find(task.as_bytes()).is_none() {
                return Ok(false);
            }
            match crate::trailer::read(&msg.to_str_lossy()) {
                Mark::Landing { task: t, epoch } if t == task && epochs.contains(&epoch) => {
                    found.code = Some((at, epoch));
                    return Ok(true);
                }
                Mark::Landing { task: t, epoch } if t == task => {
                    if epoch > *epochs.end() && found.later.is_none() {
                        found.later = Some((at, epoch));
                    }
                    found.refuse(at, no_such_claim(task, epoch, &epochs));
                }
                Mark::Claims { tasks, why } if tasks.iter().any(|t| t == task) => found.refuse(at, why),
                _ => {}
            }
            Ok(false)
        })?;
        Ok(found)
    }

    /// [`Store::landed_commit`] for many tasks in one walk: for each of `tasks` (with the epochs of its claims) that
    /// a commit of the first-parent line from `tip` (within `limit` commits) is a runner's landing of, the newest
    /// such commit and its epoch; and the commits that name one of them without being its landing.
    pub fn landed_commits(
        &self,
        tip: ObjectId,
        tasks: &BTreeMap<String, std::ops::RangeInclusive<u64>>,
        limit: usize,
    ) -> Result<(Landings, Refused), StoreError> {
        let mut found = BTreeMap::new();
        let mut refused = Vec::new();
        self.first_parents(tip, limit, |at, c| {
            let msg = c.message_raw_sloppy();
            if !msg.windows(6).any(|w| w.eq_ignore_ascii_case(b"swarm-")) {
                return Ok(false);
            }
            match crate::trailer::read(&msg.to_str_lossy()) {
                Mark::Landing { task, epoch } => match tasks.get(&task) {
                    Some(epochs) if epochs.contains(&epoch) => {
                        found.entry(task).or_insert((at, epoch));
                    }
                    Some(epochs) if !found.contains_key(&task) && refused.len() < MAX_REFUSED => {
                        let why = no_such_claim(&task, epoch, epochs);
                        refused.push((task, at, why));
                    }
                    _ => {}
                },
                Mark::Claims { tasks: named, why } => {
                    for t in named.into_iter().filter(|t| tasks.contains_key(t) && !found.contains_key(t)) {
                        if refused.len() < MAX_REFUSED {
                            refused.push((t, at, why.clone()));
                        }
                    }
                }
                Mark::None => {}
            }
            Ok(found.len() == tasks.len())
        })?;
        Ok((found, refused))
    }

    /// The ops on the state ref from `tip`, newest first, at most `limit`.
    pub fn log(&self, tip: ObjectId, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        Ok(self.log_until(tip, None, limit)?.0)
    }

    /// [`Store::log`] that stops before `stop` (a tip read before: what a live board has already); `true` when it
    /// met it, so that the ops returned are all those since.
    pub fn log_until(
        &self,
        tip: ObjectId,
        stop: Option<ObjectId>,
        limit: usize,
    ) -> Result<(Vec<LogEntry>, bool), StoreError> {
        let walk = self.repo.rev_walk([tip]).all().git(|| "cannot walk the state ref".into())?;
        let mut out = Vec::new();
        for info in walk.take(limit) {
            let info = info.git(|| "cannot walk the state ref".into())?;
            if Some(info.id) == stop {
                return Ok((out, true));
            }
            let c = info.object().git(|| "cannot read a state commit".into())?;
            let msg = c.message_raw_sloppy().to_str_lossy().into_owned();
            let time = c.time().map(|t| Timestamp::from_secs(t.seconds.max(0) as u64)).unwrap_or_default();
            out.push(LogEntry::parse(info.id.to_hex().to_string(), time, &msg));
        }
        Ok((out, false))
    }
}

/// What a walk of the target found of one task's code ([`Store::landed_commit`]).
#[derive(Debug, Default)]
pub struct Landed {
    /// The newest commit a runner's landing wrote for one of the task's claims, and that claim's epoch.
    pub code: Option<(ObjectId, u64)>,
    /// Commits on the way that name the task but are no landing of a claim of it, and why (at most
    /// `MAX_REFUSED`).
    pub refused: Vec<(ObjectId, String)>,
    /// The newest of those that is a landing of an epoch later than any in `epochs`: to a holder of the claim of
    /// the last epoch asked for, a sign that a later claim took the task over and landed it (also in `refused`).
    pub later: Option<(ObjectId, u64)>,
}

/// Per task, the commit a runner's landing of one of its claims put on the target, and that claim's epoch.
pub type Landings = BTreeMap<String, (ObjectId, u64)>;

/// Commits that name a task without being a landing of a claim of it: task, commit, why.
pub type Refused = Vec<(String, ObjectId, String)>;

/// How many commits that only name a task a walk reports.
pub(super) const MAX_REFUSED: usize = 10;

impl Landed {
    fn refuse(&mut self, at: ObjectId, why: String) {
        if self.refused.len() < MAX_REFUSED {
            self.refused.push((at, why));
        }
    }
}

/// Why a landing's trailers under `epoch` are not a claim of `task` that `epochs` allows.
pub(super) fn no_such_claim(task: &str, epoch: u64, epochs: &std::ops::RangeInclusive<u64>) -> String {
    match epochs.end() {
        0 => format!("Swarm-Epoch: {epoch}, but {task} was never claimed"),
        end if epoch > *end => format!("Swarm-Epoch: {epoch}, but no claim of {task} had it (its epoch is {end})"),
        _ => format!("Swarm-Epoch: {epoch} is not the epoch of a claim whose code this can be"),
    }
}

/// One op of the audit log, parsed from its commit message trailers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogEntry {
    pub commit: String,
    pub time: Timestamp,
    pub op: Option<String>,
    pub task: Option<String>,
    pub agent: Option<String>,
    pub epoch: Option<u64>,
    pub summary: String,
    /// The process that published it when that is not `agent` (a runner's desk: `Swarm-Writer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    /// Further ops of the same commit (a landing that also claimed the next task; a batch of several agents'
    /// landings): op, task, epoch, and the op's agent when it is not the commit's.
    pub also: Vec<AlsoOp>,
}

/// A further op of a commit ([`LogEntry::also`]): op, task, epoch, agent (when not the commit's).
pub type AlsoOp = (String, Option<String>, Option<u64>, Option<String>);

impl LogEntry {
    /// Who published the op: its writer when the commit names one (a runner's desk), else its agent.
    pub(crate) fn publisher(&self) -> Option<&str> {
        self.writer.as_deref().or(self.agent.as_deref())
    }

    pub fn parse(commit: String, time: Timestamp, msg: &str) -> LogEntry {
        let summary = msg.lines().next().unwrap_or_default().to_string();
        let mut e = LogEntry {
            commit,
            time,
            op: None,
            task: None,
            agent: None,
            epoch: None,
            summary,
            writer: None,
            also: vec![],
        };
        // Each `Swarm-Op` starts a group; the first group is the commit's op, later ones go to `also`.
        let mut groups = 0usize;
        for line in msg.lines().skip(1) {
            let Some((k, v)) = line.split_once(": ") else {
                continue;
            };
            let v = v.trim().to_string();
            match (k, groups) {
                ("Swarm-Op", 0) => {
                    e.op = Some(v);
                    groups = 1;
                }
                ("Swarm-Op", _) => {
                    e.also.push((v, None, None, None));
                    groups += 1;
                }
                ("Swarm-Agent", 0 | 1) => e.agent = Some(v),
                ("Swarm-Agent", _) => {
                    if let Some(last) = e.also.last_mut() {
                        last.3 = Some(v);
                    }
                }
                ("Swarm-Writer", _) => e.writer = Some(v),
                ("Swarm-Task", 0 | 1) => e.task = Some(v),
                ("Swarm-Epoch", 0 | 1) => e.epoch = v.parse().ok(),
                ("Swarm-Task", _) => {
                    if let Some(last) = e.also.last_mut() {
                        last.1 = Some(v);
                    }
                }
                ("Swarm-Epoch", _) => {
                    if let Some(last) = e.also.last_mut() {
                        last.2 = v.parse().ok();
                    }
                }
                _ => {}
            }
        }
        e
    }
}
