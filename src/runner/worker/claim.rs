//! The worker's next claim: through the landing desk or alone, with the lookup of exhausted claims on the target
//! first; a target checked out in this clone's own work tree refused.

use super::*;

/// What the worker loop does next, once it looked for a claim.
pub(super) enum Next {
    Task(Box<Held>),
    /// Look again (a sweep, a lookup of exhausted claims, a change of the ref after a wait).
    Again,
    End(RunEnd),
}

/// Claim the next work task (through the desk when other agents share this process), or say why not: the judge
/// stopped the swarm, the cycle spent its budget, nothing is ready (`mode` says whether to wait for a change of the
/// state ref); expired claims with no attempts left are looked up on the target first (`looked_up`).
pub(super) fn claim_next_task(
    r: &mut Runner<'_>,
    config: &crate::model::Config,
    window: Duration,
    mode: Mode,
    looked_up: &mut std::collections::BTreeMap<String, Option<ObjectId>>,
    backoff: &mut Duration,
) -> Result<Next, RunError> {
    // Where main is protected: take it back into the swarm's branch when it moved (`runner::propose`).
    if let Err(e) = r.sync_target(config) {
        r.emit(Event::Warning(format!("the swarm's branch was not brought up to date: {e}")));
    }
    // One read: the claim's own. A stop of the judge is seen there, and nothing is claimed then.
    let cycle_budget = r.spent.budgets().1;
    let classic = |r: &Runner<'_>| {
        let store = r.swarm.store();
        r.transact(|snap, actor| claim_op(store, snap.commit, &snap.board, actor, looked_up, &cycle_budget))
            .map(|c| c.value)
    };
    // With other agents in this process, the claim goes with whatever they publish next.
    let claimed = match r.desk.clone() {
        Some(desk) => {
            let spec = super::super::desk::ClaimSpec { looked_up: looked_up.clone(), cycle_budget, window };
            match desk.claim(r, spec) {
                super::super::desk::Outcome::Claimed(res) => res.map_err(TxnError::Domain),
                _ => classic(r),
            }
        }
        None => classic(r),
    };
    match claimed {
        Ok(c) => match c {
            Claimed::Stopped(cycle) => Ok(Next::End(RunEnd::SwarmStopped { cycle })),
            Claimed::Budget(why) => Ok(Next::End(RunEnd::BudgetSpent { why })),
            Claimed::LookUp(ids) => {
                let target = format!("refs/heads/{}", config.target);
                let tip = super::super::landing::fetch_target(r, &target)?
                    .ok_or_else(|| missing_target(r, &config.target))?;
                for (id, epoch) in ids {
                    // Only a landing of one of its claims (the expired one's, or an earlier one's).
                    let code = landed_code(r, tip, &id, None, 1..=epoch, &config.target)?;
                    if let Some(code) = code {
                        r.emit(Event::Warning(format!(
                            "{id}: its claim ran out with no attempts left, and its code is on {} \
                             ({code}): finishing it as done",
                            config.target
                        )));
                    }
                    looked_up.insert(id, code);
                }
                Ok(Next::Again)
            }
            // None: a sweep of exhausted claims; look again.
            Claimed::Task(t) => Ok(t.and_then(|t| Held::from(*t)).map_or(Next::Again, |h| Next::Task(Box::new(h)))),
        },
        Err(TxnError::Domain(DomainError::NothingReady { .. })) => {
            // Idle: what landed is in the request before the runner waits (or goes).
            r.propose(true);
            if mode == Mode::Once {
                return Ok(Next::End(RunEnd::NothingReady));
            }
            let snap = r.read(false)?;
            if mode == Mode::UntilIdle && ops::claim::idle(&snap.board, (r.clock)()) {
                return Ok(Next::End(RunEnd::Idle));
            }
            r.emit(Event::Waiting { why: "no ready work task".into() });
            // Woken by a state with something to claim or sweep, a stop of the judge, or (until idle) nothing left.
            let store = r.swarm.store();
            let wake = |snap: &Snapshot| {
                let now = (r.clock)();
                let actor = ops::Actor { agent: r.agent.clone(), now };
                judge_stopped(store, snap)
                    || (mode == Mode::UntilIdle && ops::claim::idle(&snap.board, now))
                    || !matches!(
                        ops::claim::next_work(&snap.board, &actor, None, looked_up, &cycle_budget),
                        Err(DomainError::NothingReady { .. })
                    )
            };
            r.wait_for_work(snap.commit, Duration::from_secs(30), backoff, Some(&wake))?;
            Ok(Next::Again)
        }
        Err(e) => Err(e.into()),
    }
}

/// With the repository itself as the remote, landing moves the target branch in this repository: refuse when it is
/// checked out in a work tree, whose files would silently fall behind (git refuses such a push for the same reason).
pub(super) fn guard_checked_out_target(r: &mut Runner<'_>, target: &str) -> Result<(), RunError> {
    let branch = format!("refs/heads/{target}");
    // A non-bare repository on a local path, written in-process: its own checkout must not be on the target.
    if let Reach::Path(store) = r.swarm.remote.reach() {
        let head = store.repo.head_name().ok().flatten().map(|h| h.as_bstr().to_string());
        if let (Some(dir), Some(h)) = (store.repo.workdir(), head)
            && h == branch
        {
            return Err(RunError::Setup(format!(
                "the swarm's remote {} has {target} checked out: landing would move it under that work tree (git \
                 push refuses that too). Check out another branch there, or use a bare remote",
                dir.display()
            )));
        }
        return Ok(());
    }
    if !matches!(r.swarm.remote.reach(), Reach::Itself(_)) {
        return Ok(());
    }
    if let Some((_, path)) = git::checked_out_branches(&r.common_dir()).into_iter().find(|(b, _)| *b == branch) {
        return Err(RunError::Setup(format!(
            "the target branch {target} is checked out in {}, and this repository is the swarm's remote: landing \
             would move it under that work tree. Check out another branch there (git switch -c mine), or give the \
             swarm a bare remote (--remote)",
            path.display()
        )));
    }
    Ok(())
}
