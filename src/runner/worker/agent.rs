//! The agent's run on a claimed task: its prompt, its environment, the lease kept while it runs, and its hand-off
//! read once (bounded) when it exits.

use super::*;

/// What the agent run came to.
pub(super) enum AgentRun {
    /// `handoff`: what the agent (or its CLI's last message) left as its hand-off, read once, bounded.
    Exited {
        exit: Exit,
        tail: Vec<String>,
        at: Instant,
        handoff: Option<String>,
    },
    LostClaim(String),
    Interrupted,
}

/// The worker prompt of task `t` (the template on the state ref, or the built-in one), rendered.
pub(super) fn worker_prompt(
    r: &mut Runner<'_>,
    settings: &RunSettings,
    snap: &Snapshot,
    t: &Task,
    config: &crate::model::Config,
) -> String {
    let (template, warn) = prompts::load(r.swarm.store(), snap.commit, "worker");
    if let Some(w) = warn {
        r.emit(Event::Warning(w));
    }
    let goal = super::super::goal(r.swarm.store(), snap.commit).unwrap_or_else(|| "(no goal recorded)".into());
    let failures = if t.failures.is_empty() {
        "none".to_string()
    } else {
        t.failures.iter().map(|f| format!("- {} ({}): {}", f.agent, f.at, f.reason)).collect::<Vec<_>>().join("\n")
    };
    let attempt = format!("{} of {}", t.attempts.saturating_add(1), config.max_attempts);
    let scope = if t.scope.is_empty() { "(not given)".to_string() } else { t.scope.join(", ") };
    let acceptance = if t.acceptance.is_empty() { "(not given)" } else { t.acceptance.as_str() };
    let check = settings.check.clone().unwrap_or_else(|| "none".into());
    prompts::render(
        &template,
        &[
            ("task_id", &t.id),
            ("task_title", &t.title),
            ("task_body", &t.body),
            ("acceptance", acceptance),
            ("scope", &scope),
            ("goal", &goal),
            ("target", &config.target),
            ("attempt", &attempt),
            ("previous_failures", &failures),
            ("check", &check),
        ],
    )
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_worker_agent(
    r: &mut Runner<'_>,
    backend: &Prepared,
    settings: &RunSettings,
    snap: &Snapshot,
    h: &mut Held,
    slot: &super::super::slot::Slot,
    base: ObjectId,
    config: &crate::model::Config,
) -> Result<AgentRun, RunError> {
    let prompt = worker_prompt(r, settings, snap, &h.task, config);
    let t = &h.task;
    let handoff = slot.run.join("handoff.md");
    let mut env = r.base_env(Role::Worker);
    env.push(("GIT_SWARM_TASK_ID".into(), t.id.clone()));
    env.push(("GIT_SWARM_TASK_TITLE".into(), t.title.clone()));
    env.push(("GIT_SWARM_EPOCH".into(), h.epoch.to_string()));
    env.push(("GIT_SWARM_HANDOFF_FILE".into(), handoff.to_string_lossy().into_owned()));
    // The agent hooks (docs/hooks.md): settings files in the fresh work tree, ignored by what the runner takes.
    let hooks = if settings.agent_hooks { crate::hooks::agent::install(&slot.tree) } else { Default::default() };
    // Written after the tree was given to the agent's uid: theirs too, or the agent could not write beside them.
    if let Some((uid, gid)) = r.agent_owner() {
        hooks.hand_over(uid, gid);
    }
    for why in &hooks.skipped {
        r.emit(Event::Warning(format!("agent hooks: {why}")));
    }
    // What the hooks run (`${GIT_SWARM_BIN:-git-swarm}`): this binary, whatever the agent's PATH holds.
    if let Ok(exe) = std::env::current_exe() {
        env.push(("GIT_SWARM_BIN".into(), exe.to_string_lossy().into_owned()));
    }
    env.extend(backend.env.iter().cloned());
    let contained = r.contain_run(slot, Role::Worker, Some(backend), config, Some(base), None)?;
    env.extend(contained.env.iter().cloned());
    r.emit(Event::AgentStarted { task: t.id.clone(), what: "work" });
    r.phase(&t.id, h.epoch, super::super::status::Phase::Agent, Some(settings.task_timeout));
    let id = t.id.clone();
    let lease = config.lease;
    let epoch = h.epoch;
    let keeper = LeaseKeeper::new(&id, epoch, h.until, lease);
    let out = {
        // The poll below needs `r` mutably (to report renewals as they happen); the run itself only reads it:
        // split the borrow by moving what the run needs out first.
        let stop = std::sync::Arc::clone(&r.stop);
        let log = r.log_file();
        let (live, budget) = r.spent.watch(&id, epoch, h.task.usage);
        let inv = crate::agent::Invocation {
            cwd: &slot.tree,
            prompt: &prompt,
            prompt_file: slot.run.join("prompt.md"),
            env,
            log: Some(log),
            timeout: Some(settings.task_timeout),
            grace: Duration::from_secs(10),
            report: backend.report.clone(),
            live: Some(live),
            budget,
            contain: Some(contained.contain.clone()),
        };
        // What the agent may not leave changed in the git directory (uncontained: its config, attributes, cache).
        let guard = r.guard();
        let out = crate::agent::run(&backend.backend, &inv, &mut || {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            let alive = keeper.keep(r);
            for e in keeper.drain() {
                r.emit(e);
            }
            alive
        });
        r.spent.ended(&id, epoch, out.as_ref().ok().and_then(|o| o.usage));
        (out, guard.restore())
    };
    let (out, planted) = out;
    for p in planted {
        r.emit(Event::Warning(p));
    }
    for m in r.file_outbox() {
        r.emit(Event::Warning(m));
    }
    let out = out?;
    h.until = keeper.until();
    let at = Instant::now();
    r.emit(Event::AgentExited { task: h.task.id.clone(), exit: out.exit.to_string(), secs: out.elapsed.as_secs_f64() });
    if let Some(why) = keeper.lost() {
        return Ok(AgentRun::LostClaim(why));
    }
    if out.exit == Exit::Stopped {
        return Ok(AgentRun::Interrupted);
    }
    // A command that could not start did no work: the claim goes back with no attempt spent, the runner stops.
    super::super::cannot_start(Role::Worker, backend, &out)?;
    // The CLI's own record of its last message is the hand-off when neither the agent nor a hook wrote one.
    let mut handoff = read_handoff(r, &handoff);
    if handoff.is_none() {
        handoff = backend.last_message.read(&out.stdout_tail).filter(|t| !t.trim().is_empty());
    }
    Ok(AgentRun::Exited { tail: out.tail_and_hint(), exit: out.exit, at, handoff })
}

/// How much of a hand-off file is read (what is kept of it is less: 64 KiB).
pub(super) const HANDOFF_READ: usize = 1 << 20;

/// The hand-off the agent left at `file`: a regular file, read bounded ([`crate::agent::files`]); anything else at
/// that path is said and ignored.
pub(super) fn read_handoff(r: &mut Runner<'_>, file: &Path) -> Option<String> {
    match crate::agent::files::read(file, HANDOFF_READ) {
        Ok((t, _)) => Some(t).filter(|t| !t.trim().is_empty()),
        Err(e) if e.is_missing() => None,
        Err(e) => {
            r.emit(Event::Warning(format!("hand-off not read: {e}")));
            None
        }
    }
}

/// The reason of a hand-off whose status line (its first line that says something) is `Status: failed[: reason]`
/// (any case, `**Status:**` too): `None` for any other status, or none.
pub(crate) fn reported_failure(handoff: &str) -> Option<String> {
    let line = handoff.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with("```"))?;
    let line = line.trim_start_matches(['*', '_', '#', ' ']);
    let (key, rest) = line.split_once(':')?;
    if !key.trim_matches(['*', '_', ' ']).eq_ignore_ascii_case("status") {
        return None;
    }
    let rest = rest.trim_start_matches(['*', '_', ' ']);
    let word: String = rest.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    if !word.eq_ignore_ascii_case("failed") {
        return None;
    }
    let reason = rest[word.len()..].trim_start_matches(['*', '_', ' ', ':', '-', '—']).trim();
    Some(if reason.is_empty() { "no reason given".to_string() } else { one_line(reason).chars().take(300).collect() })
}
