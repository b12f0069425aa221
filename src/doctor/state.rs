//! The swarm's state ref and board: deleted, rewound or replaced against what this clone saw (and restored), settings
//! that cannot be read (and put back), unreadable files, expired claims, tasks that can never run, the spend, the
//! refs beside the state ref (kept and held work).

use super::*;

/// The board's `swarm.toml` cannot be read: which file, which commit, what is wrong, and what `--fix` puts back
/// (`fixed`: what it did). Every op but a repair is refused until then.
pub(super) fn broken_settings(b: &crate::ops::BrokenSettings, fixed: Option<String>) -> Finding {
    let p = &b.problem;
    let f = Finding::new(
        "settings",
        Severity::Error,
        format!(
            "{} in commit {} cannot be read: {}; every op but a repair is refused until it is fixed",
            p.path,
            short(&p.commit),
            p.message
        ),
    );
    match (fixed, &b.fallback) {
        (Some(what), _) => f.fixed(what),
        (None, Some(good)) => f.hint(format!(
            "`git swarm doctor --fix` puts back the settings of commit {} (the newest that read); or write them \
             whole: `git swarm init --config <file> --force`",
            short(good)
        )),
        (None, None) => f.hint("no earlier commit has settings that read: `git swarm init --config <file> --force`"),
    }
}

/// The state ref against what this clone saw; returns the tip to read the board at, when there is a good one.
pub(super) fn state_ref(swarm: &Swarm, repairs: Repairs, out: &mut Vec<Finding>) -> Result<Option<ObjectId>, TxnError> {
    const C: &str = "state-ref";
    let refname = swarm.ref_name();
    let remote = &swarm.remote_label;
    let seen = swarm.seen()?;
    let now = swarm.tip_unchecked()?;
    let rel = swarm.relation(seen, now)?;
    let sh = |id: ObjectId| short(&id.to_string()).to_string();
    match (rel, seen, now) {
        (Relation::Fresh, _, None) => {
            out.push(
                Finding::new(C, Severity::Error, format!("there is no swarm '{}' on {remote}", swarm.name))
                    .hint("create it with `git swarm init`, or name another remote with --remote"),
            );
            Ok(None)
        }
        (Relation::Fresh | Relation::Same | Relation::Ahead, _, Some(tip)) => {
            swarm.check_seen(seen, Some(tip))?;
            let ops = swarm.history(tip, usize::MAX, false)?.len();
            out.push(Finding::new(
                C,
                Severity::Ok,
                format!("{refname} on {remote} at {}: {ops} op(s) since its root", sh(tip)),
            ));
            if ops > LONG_HISTORY {
                out.push(
                    Finding::new(
                        C,
                        Severity::Info,
                        format!("{ops} ops since the root: every new clone fetches them all"),
                    )
                    .hint("`git swarm compact` starts a new root and keeps the history under refs/swarm-archive/"),
                );
            }
            Ok(Some(tip))
        }
        (_, Some(seen), _) if repairs.accept_remote => {
            let kept = swarm.accept_remote(seen, now)?;
            let what = match &kept {
                Some(r) => {
                    format!("took {refname} as it is on {remote}; what this clone saw ({}) is kept at {r}", sh(seen))
                }
                None => format!("took {refname} as it is on {remote}"),
            };
            out.push(Finding::new(C, Severity::Error, describe(rel, &refname, remote, seen, now)).fixed(what));
            Ok(now)
        }
        (Relation::Deleted | Relation::Rewound { .. }, Some(seen), _) => lost(swarm, repairs, rel, seen, now, out),
        (_, Some(seen), _) => {
            out.push(Finding::new(C, Severity::Error, describe(rel, &refname, remote, seen, now)).hint(format!(
                "two histories cannot be merged by doctor: `git swarm doctor --accept-remote` takes the remote's \
                 (this clone's is kept under refs/swarm-archive/{}/lost-…), or push {} back yourself with \
                 `git push --force-with-lease={refname}:<its tip> <remote> {}:{refname}` to drop the ops written since",
                swarm.name,
                sh(seen),
                seen
            )));
            swarm.check_seen(Some(seen), now).ok();
            Ok(None)
        }
        (_, None, _) => Ok(now),
    }
}

/// The state ref was deleted or rewound (what this clone saw is gone from the remote): the finding, and with
/// `--fix` the ref put back at the newest board of the lineage by compare-and-swap.
fn lost(
    swarm: &Swarm,
    repairs: Repairs,
    rel: Relation,
    seen: ObjectId,
    now: Option<ObjectId>,
    out: &mut Vec<Finding>,
) -> Result<Option<ObjectId>, TxnError> {
    const C: &str = "state-ref";
    let (refname, remote) = (swarm.ref_name(), &swarm.remote_label);
    let sh = |id: ObjectId| short(&id.to_string()).to_string();
    let mut f = Finding::new(C, Severity::Error, describe(rel, &refname, remote, seen, now));
    if let Relation::Rewound { lost } = rel {
        let gone = swarm.history(seen, lost, false)?;
        let list: Vec<String> = gone.iter().take(5).map(|e| e.summary.clone()).collect();
        f.message.push_str(&format!("; the ops gone: {}{}", list.join("; "), if lost > 5 { "; …" } else { "" }));
    }
    if !repairs.fix {
        out.push(f.hint(format!(
            "`git swarm doctor --fix` puts {refname} back at {} by compare-and-swap (nothing is lost: {})",
            sh(seen),
            if now.is_some() { "the rewound state is an ancestor of it" } else { "the ref is recreated" }
        )));
        swarm.check_seen(Some(seen), now).ok();
        return Ok(None);
    }
    // The newest board any ref of the lineage holds, not an older one this clone happened to see last.
    let to = swarm.newest_known(seen).unwrap_or(seen);
    match swarm.restore(now, to) {
        Ok(Publish::Done) => {
            let newer =
                if to != seen { format!(" (newer than {}, which this clone saw)", sh(seen)) } else { String::new() };
            out.push(f.fixed(format!("put {refname} back at {}{newer} on {remote}", sh(to))));
            Ok(Some(to))
        }
        Ok(Publish::LostRace(reason)) => {
            out.push(f.hint(format!("the ref moved while doctor repaired it ({reason}); run doctor again")));
            Ok(None)
        }
        Err(e) => {
            out.push(f.hint(format!(
                "cannot restore it from this clone ({e}); a clone that saw it can (`git swarm doctor --fix` \
                 there), else `git swarm doctor --accept-remote` takes the remote's state"
            )));
            Ok(None)
        }
    }
}

pub(super) fn describe(rel: Relation, refname: &str, remote: &str, seen: ObjectId, now: Option<ObjectId>) -> String {
    let seen = short(&seen.to_string()).to_string();
    match (rel, now) {
        (Relation::Deleted, _) => format!("{refname} was deleted from {remote} (this clone last saw it at {seen})"),
        (Relation::Rewound { lost }, Some(n)) => format!(
            "{refname} on {remote} went back {lost} op(s), from {seen} (seen by this clone) to {}: somebody pushed an \
             old state over it",
            short(&n.to_string())
        ),
        (_, Some(n)) => format!(
            "{refname} on {remote} was replaced: {} holds neither {seen} (seen by this clone) nor a compaction of it",
            short(&n.to_string())
        ),
        (_, None) => format!("{refname} on {remote} is gone"),
    }
}

/// The board at `tip`: unreadable files, settings, the target branch, expired claims, tasks that can never run,
/// this clone's held records, kept work and archives.
pub(super) fn board(
    swarm: &Swarm,
    tip: ObjectId,
    now: Timestamp,
    repairs: Repairs,
    out: &mut Vec<Finding>,
) -> Result<(), TxnError> {
    let snap = swarm.store().read_walked(tip, false)?;
    let b = &snap.board;
    for p in &snap.problems {
        out.push(
            Finding::new("board", Severity::Warn, format!("{} (commit {}): {}", p.path, short(&p.commit), p.message))
                .hint("the file is skipped; fix or remove it in the state ref (see docs/reliability.md)"),
        );
    }
    let live = b.tasks.len();
    out.push(Finding::new("board", Severity::Ok, format!("{live} live task(s), {} finished", b.closed.len())));
    for s in b.tasks.values() {
        let t = &s.task;
        if let Some(c) = t.expired_claim(now) {
            out.push(Finding::new(
                "board",
                Severity::Info,
                format!(
                    "{}: the lease of {} (epoch {}) ran out at {}; the next claim takes it over",
                    t.id, c.agent, c.epoch, c.lease_until
                ),
            ));
        }
        if t.status == Status::Open
            && let Some(why) = crate::ops::blocked_for_good(b, t)
        {
            let hint = match crate::ops::blocked_by_failure(b, t) {
                Some((dep, Status::Failed)) => format!(
                    "`git swarm retry {dep}` gives the failed task another go; `git swarm cancel {}` drops this one \
                     (a planner cancels such tasks too)",
                    t.id
                ),
                Some((dep, _)) => format!(
                    "`git swarm retry {dep}` opens the cancelled task again; `git swarm cancel {}` drops this one \
                     (a planner cancels such tasks too)",
                    t.id
                ),
                None => format!(
                    "`git swarm cancel <id>` drops a task of the cycle (made by hand on the state ref), or `git \
                     swarm cancel {}` this one",
                    t.id
                ),
            };
            out.push(Finding::new("board", Severity::Warn, format!("{} can never run: {why}", t.id)).hint(hint));
        }
    }
    match crate::runner::RunSettings::from_config(&b.config) {
        // Said by the CLI, which also repairs it ([`broken_settings`]).
        _ if b.broken_settings.is_some() => {}
        Ok(_) => out.push(Finding::new("settings", Severity::Ok, "swarm.toml is valid")),
        Err(e) => out.push(
            Finding::new("settings", Severity::Error, format!("swarm.toml: {e}"))
                .hint("runners refuse to start until it is fixed"),
        ),
    }
    let target = format!("refs/heads/{}", b.config.target);
    match swarm.fetch_branch(&target) {
        Ok(Some(t)) => {
            out.push(Finding::new(
                "target",
                Severity::Ok,
                format!("{} on {} at {}", b.config.target, swarm.remote_label, short(&t.to_string())),
            ));
            target_history(swarm, tip, &target, t, repairs, out)?;
        }
        Ok(None) => out.push(
            Finding::new(
                "target",
                Severity::Error,
                format!("{} has no branch {}", swarm.remote_label, b.config.target),
            )
            .hint("workers cannot land code until it exists: push it"),
        ),
        Err(e) => out.push(Finding::new("target", Severity::Warn, format!("cannot read {target}: {e}"))),
    }
    held(swarm, b, repairs, out);
    side_refs(swarm, b, repairs, out);
    spend(swarm, tip, out)
}

/// Does `spend.toml` (derived state, what budgets count) agree with what the tasks say they spent? A full read.
pub(super) fn spend(swarm: &Swarm, tip: ObjectId, out: &mut Vec<Finding>) -> Result<(), TxnError> {
    let full = swarm.store().read_walked(tip, true)?;
    let mut on_tasks: std::collections::BTreeMap<&str, crate::usage::Usage> = Default::default();
    for s in full.board.tasks.values() {
        if let Some(u) = s.task.spent() {
            let e = on_tasks.entry(crate::ops::role_of(s.task.kind)).or_default();
            *e = e.plus(&u);
        }
    }
    let mut disagree = Vec::new();
    for role in ["worker", "planner"] {
        let kept = full.board.spend.total.get(role).copied().unwrap_or_default();
        let told = on_tasks.get(role).copied().unwrap_or_default();
        if (kept.tokens(), kept.cost_usd.unwrap_or_default()) != (told.tokens(), told.cost_usd.unwrap_or_default()) {
            disagree.push(format!("{role}: spend.toml says {kept}, the tasks say {told}"));
        }
    }
    if disagree.is_empty() {
        let total = full.board.spend.grand_total();
        if !total.is_zero() {
            out.push(Finding::new("spend", Severity::Ok, format!("spent {total}; spend.toml agrees with the tasks")));
        }
    } else {
        out.push(Finding::new("spend", Severity::Warn, disagree.join("; ")).hint(
            "spend.toml was edited by hand, or tasks were finished by a git-swarm without spend records; budgets \
                 count spend.toml (see docs/spend.md)",
        ));
    }
    Ok(())
}

/// The refs beside the state ref: work kept for a person to look at, and archives of compacted history.
pub(super) fn side_refs(swarm: &Swarm, b: &crate::ops::Board, repairs: Repairs, out: &mut Vec<Finding>) {
    let work_prefix = swarm.kept_work_prefix();
    match swarm.remote_refs(&work_prefix) {
        Ok(kept) if !kept.is_empty() => {
            // `<id>/<epoch>` (one per attempt), or `<id>` as earlier versions kept them.
            let names: Vec<&str> = kept.iter().map(|(r, _)| r.trim_start_matches(work_prefix.as_str())).collect();
            let is_done = |name: &&&str| {
                let id = name.split('/').next().unwrap_or_default();
                b.closed.get(id).is_some_and(|c| c.status == Status::Done)
                    || b.tasks.get(id).is_some_and(|t| t.task.status == Status::Done)
            };
            let done = names.iter().filter(is_done).count();
            let mut f = Finding::new(
                "refs",
                Severity::Info,
                format!(
                    "{} kept work branch(es) under {work_prefix} (work that could not land): {}{}",
                    kept.len(),
                    names.join(", "),
                    if done > 0 { format!("; {done} of them for tasks done since") } else { String::new() }
                ),
            )
            .hint(format!("look with `git fetch {} {work_prefix}<id>/<epoch>`", swarm.remote_label));
            if done > 0 {
                if repairs.fix {
                    match swarm.prune_kept_work(b) {
                        Ok(gone) => f = f.fixed(format!("deleted the {} of tasks done since", gone.len())),
                        Err(e) => f = f.hint(format!("could not delete those of done tasks: {e}")),
                    }
                } else {
                    f = f.hint("`git swarm doctor --fix` (or `git swarm compact`) deletes those of tasks done since");
                }
            }
            out.push(f);
        }
        Ok(_) => {}
        Err(e) => out.push(Finding::new("refs", Severity::Warn, format!("cannot list {work_prefix}: {e}"))),
    }
    let archive_prefix = format!("refs/swarm-archive/{}/", swarm.name);
    if let Ok(archives) = swarm.remote_refs(&archive_prefix)
        && !archives.is_empty()
    {
        let names: Vec<&str> = archives.iter().map(|(r, _)| r.trim_start_matches(archive_prefix.as_str())).collect();
        out.push(Finding::new(
            "refs",
            Severity::Info,
            format!(
                "{} archive(s) of compacted history under {archive_prefix}: {} (`git swarm log --archived` reads them)",
                archives.len(),
                names.join(", ")
            ),
        ));
    }
}

/// This clone's records of the epochs its agents claimed under (`.git/swarm/held/<name>/<agent>/<id>`): a record
/// whose task is no longer claimed by that agent under that epoch only costs a file, and is removed by `--fix`.
pub(super) fn held(swarm: &Swarm, b: &crate::ops::Board, repairs: Repairs, out: &mut Vec<Finding>) {
    let dir = swarm.local.repo.common_dir().join("swarm").join("held").join(&swarm.name);
    let mut stale = Vec::new();
    for agent in read_dir(&dir) {
        let name = file_name(&agent);
        for rec in read_dir(&agent) {
            let id = file_name(&rec);
            let epoch = std::fs::read_to_string(&rec).ok().and_then(|s| s.trim().parse::<u64>().ok());
            let holds = b
                .tasks
                .get(&id)
                .and_then(|s| s.task.claim.as_ref())
                .is_some_and(|c| c.agent == name && Some(c.epoch) == epoch && s_is_claimed(b, &id));
            if !holds {
                stale.push(rec);
            }
        }
    }
    if stale.is_empty() {
        return;
    }
    let mut f = Finding::new(
        "held",
        Severity::Info,
        format!("{} record(s) of claims this clone no longer holds under {}", stale.len(), dir.display()),
    );
    if repairs.fix {
        let removed = stale.iter().filter(|p| std::fs::remove_file(p).is_ok()).count();
        f = f.fixed(format!("removed {removed}"));
    } else {
        f = f.hint("`git swarm doctor --fix` removes them");
    }
    out.push(f);
}

pub(super) fn s_is_claimed(b: &crate::ops::Board, id: &str) -> bool {
    b.tasks.get(id).is_some_and(|s| s.task.status == Status::Claimed)
}

/// The newest board's `swarm.toml` cannot be read: the finding, and with `fix` the settings of the newest commit
/// that has good ones written back by compare-and-swap (an op `config`, in the log). `true` when the settings read
/// afterwards.
pub(super) fn settings(swarm: &Swarm, with: &Examine<'_>) -> Result<Option<(Finding, bool)>, TxnError> {
    let fix = with.repairs.fix;
    let Ok(Some(snap)) = swarm.try_read(false) else { return Ok(None) };
    let Some(broken) = snap.board.broken_settings.clone() else { return Ok(None) };
    let Some(good) = broken.fallback.clone().filter(|_| fix) else {
        return Ok(Some((broken_settings(&broken, None), false)));
    };
    let agent = with.agent.to_string();
    let what = format!("put back by doctor: the settings of {}", crate::short(&good));
    let c = swarm.transact_settings(with.retry, with.who, with.clock, |snap, now| {
        let actor = crate::ops::Actor { agent: agent.clone(), now };
        // On a lost race the newest board is judged again: settings someone repaired meanwhile are left alone.
        match &snap.board.broken_settings {
            None => Ok((crate::ops::Change::default(), false)),
            Some(_) => Ok((crate::ops::configure(&snap.board, &actor, &snap.board.config, &what)?, true)),
        }
    })?;
    let fixed = match (c.value, c.commit) {
        (true, Some(commit)) => format!(
            "wrote back the settings of commit {} (state commit {})",
            crate::short(&good),
            crate::short(&commit.to_string())
        ),
        _ => "repaired meanwhile by another clone".to_string(),
    };
    Ok(Some((broken_settings(&broken, Some(fixed)), true)))
}
