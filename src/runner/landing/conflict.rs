//! The rebase of a landing in the runner's own state: in-process when nothing overlaps, else commit by commit with
//! `git merge-tree` in the clone's git directory, the agent run again on a conflict to resolve its files.

use super::*;

impl<'a, 'r> Landing<'a, 'r> {
    /// Rebase the work onto `tip`, in the runner's own state: in-process when nothing conflicts (most landings
    /// after a lost race touch other paths than what landed meanwhile), else commit by commit with `git
    /// merge-tree` in the clone's git directory, the agent run again on a conflict to resolve its files.
    pub(crate) fn rebase(&mut self, tip: ObjectId) -> Result<(), Abort> {
        let r = self.r;
        let (id, epoch) = (self.task.id.as_str(), self.keeper.epoch);
        let fast = super::super::rebase::rebase_in_process(
            &r.swarm.local,
            tip,
            self.base,
            self.head,
            id,
            epoch,
            &r.who,
            (r.clock)(),
        );
        match fast {
            Ok(Some(new)) => self.head = new,
            _ if self.batched => return Err(Abort::Conflicted),
            _ => {
                let replay =
                    Replay { store: &r.swarm.local, task: id, epoch, committer: &r.who, now: (r.clock)(), attrs: tip };
                let commits =
                    super::super::rebase::commits(&r.swarm.local, self.base, self.head).map_err(Abort::Fail)?;
                let mut step = replay.replay(&commits, tip).map_err(Abort::Fail)?;
                let mut runs = 0;
                let new = loop {
                    match step {
                        Step::Done(new) => break new,
                        Step::Stopped(stop) => {
                            let keeper = self.keeper;
                            let tries = self.job.settings.conflict_tries.saturating_sub(runs);
                            r.phase(id, epoch, Phase::Conflict, None);
                            let res = resolve_conflict(
                                r,
                                self.job,
                                self.slot,
                                self.task,
                                &stop,
                                tries,
                                &mut self.events,
                                &|| keeper.keep(r),
                            );
                            self.events.extend(keeper.drain());
                            if let Some(why) = keeper.lost() {
                                return Err(Abort::LostClaim(why));
                            }
                            let (resolved, used) = res?;
                            runs += used;
                            r.phase(id, epoch, Phase::Rebase, None);
                            step = replay.resume(&stop, resolved).map_err(Abort::Fail)?;
                        }
                    }
                };
                self.head = new;
                // A conflict run's files are taken as the work's: what it added of the agents' own files goes, as
                // after the work.
                let scope = &self.task.scope;
                let artifact =
                    |p: &str| crate::hooks::agent::is_agent_artifact(p) && !crate::hooks::agent::in_scope(p, scope);
                if let Some(clean) =
                    super::super::rebase::strip_new_paths(&r.swarm.local, tip, self.head, &artifact).map_err(fail)?
                {
                    self.head = clean;
                }
                // Stamped by the replay already; a chain the strip rewrote is stamped again (same trees).
                if let Some(stamped) =
                    super::super::rebase::stamp_chain(&r.swarm.local, tip, self.head, id, epoch).map_err(fail)?
                {
                    self.head = stamped;
                }
            }
        }
        self.stamped = true;
        self.base = tip;
        Ok(())
    }
}

/// Resolve the conflicts of a stopped replay with the agent, up to `tries` runs: each run gets a work tree made
/// afresh with the merge's tree (conflict markers in the conflicted files, their stages in the index, `HEAD` the
/// replayed tip so far, `REBASE_HEAD` the commit being replayed), and the runner takes what it left as data
/// ([`super::super::snapshot`]). A conflicted file counts as resolved when it no longer holds what git left in it nor
/// markers of its own, or is gone. The resolved tree, and how many runs it took.
#[allow(clippy::too_many_arguments)]
pub(crate) fn resolve_conflict(
    r: &Runner<'_>,
    job: &Job<'_>,
    slot: &Slot,
    task: &Task,
    stop: &Stop,
    tries: u32,
    events: &mut Vec<Event>,
    keep_lease: &dyn Fn() -> bool,
) -> Result<(ObjectId, u32), Abort> {
    let (backend, timeout, target) = (job.backend, job.settings.task_timeout, &job.config.target);
    let template = prompts::load(r.swarm.store(), job.state, "conflict").0;
    let repo = &r.swarm.local.repo;
    // What git left in each conflicted file (the blob with markers), to tell which the agent changed.
    let at = |tree: ObjectId, path: &BString| -> Option<ObjectId> {
        let t = repo.find_tree(tree).ok()?;
        t.lookup_entry_by_path(path.to_path_lossy()).ok().flatten().map(|e| e.object_id())
    };
    let mut open: Vec<(BString, Option<ObjectId>)> =
        stop.conflicts.iter().map(|c| (c.path.clone(), at(stop.tree, &c.path))).collect();
    let mut current = stop.tree;
    for attempt in 1..=tries {
        let files: Vec<String> = open.iter().map(|(p, _)| p.to_string()).collect();
        events.push(Event::Conflict { task: task.id.clone(), files: files.clone(), attempt });
        let try_s = format!("{attempt} of {tries}");
        let replayed = short_commit(repo, stop.commit);
        let prompt = prompts::render(
            &template,
            &[
                ("task_id", &task.id),
                ("task_title", &task.title),
                ("task_body", &task.body),
                ("target", target),
                ("conflict_files", &files.join("\n")),
                ("replayed", &replayed),
                ("try", &try_s),
            ],
        );
        let left: Vec<super::super::slot::Conflicted> =
            stop.conflicts.iter().filter(|c| open.iter().any(|(p, _)| *p == c.path)).cloned().collect();
        let checkout = slot.checkout(repo, current, r.agent_owner(), &left, true).map_err(Abort::Fail)?;
        let mut env = r.base_env(Role::Worker);
        env.push(("GIT_SWARM_TASK_ID".into(), task.id.clone()));
        env.push(("GIT_SWARM_TASK_TITLE".into(), task.title.clone()));
        env.push(("GIT_SWARM_CONFLICT".into(), "1".into()));
        env.push(("GIT_SWARM_HANDOFF_FILE".into(), slot.run.join("handoff.md").to_string_lossy().into_owned()));
        let epoch = task.claim.as_ref().map_or(task.epoch, |c| c.epoch);
        let run = (slot, Some(stop.onto), Some(stop.commit));
        let (out, planted) = r
            .run_agent(
                backend,
                run,
                &prompt,
                env,
                timeout,
                Some((task, epoch)),
                (Role::Worker, job.config),
                &mut || keep_lease(),
            )
            .map_err(|e| Abort::Fail(e.to_string()))?;
        events.extend(planted.into_iter().map(Event::Warning));
        if let Err(e) = super::super::cannot_start(Role::Worker, backend, &out) {
            return Err(Abort::CannotStart(e));
        }
        if let Exit::OverBudget(why) = &out.exit {
            return Err(Abort::Budget(format!("the task spent its budget ({why}) in a conflict run")));
        }
        if out.exit == Exit::Stopped {
            return Err(if r.stopping() {
                Abort::Interrupted
            } else {
                Abort::LostClaim("taken over during a conflict run".into())
            });
        }
        if !out.exit.success() {
            return Err(Abort::Fail(super::super::reason_from(
                &format!("a rebase conflict in {} was not resolved: the agent {}", files.join(", "), out.exit),
                &out.tail,
            )));
        }
        // What it left, taken over the tree it was given: its own commits in this run do not count, its files do.
        let tree = crate::agent::files::Dir::open(&slot.tree)
            .map_err(|e| Abort::Fail(format!("the conflict run left no work tree: {e}")))?;
        let ignores = super::super::snapshot::Ignores {
            excludes: crate::hooks::agent::excludes_text(&r.common_dir(), r.env.config_home().as_deref()),
            info_exclude: crate::agent::files::read_text(&r.common_dir().join("info/exclude"), 1 << 20)
                .unwrap_or_default(),
        };
        let taken = super::super::snapshot::take(repo, &tree, checkout.tree, &ignores, None, &checkout.known)
            .map_err(|e| Abort::Fail(format!("cannot take what the conflict run left: {e}")))?;
        events.extend(taken.left_out.iter().map(|w| Event::Warning(format!("{}: {w}", task.id))));
        current = taken.tree;
        let still = super::super::slot::unresolved(repo, current, &open);
        if still.is_empty() {
            return Ok((current, attempt));
        }
        open.retain(|(p, _)| still.contains(p));
    }
    Err(Abort::Fail(format!("a rebase conflict was still unresolved after {tries} agent runs")))
}

/// `<12 hex> <subject>` of `id`, for a prompt.
pub(crate) fn short_commit(repo: &gix::Repository, id: ObjectId) -> String {
    let subject = repo
        .find_commit(id)
        .ok()
        .and_then(|c| c.message_raw_sloppy().lines().next().map(|l| l.to_str_lossy().into_owned()))
        .unwrap_or_default();
    format!("{} {subject}", &id.to_string()[..12])
}
