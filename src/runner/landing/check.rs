//! The check of a landing: run on the rebased work in a tree made afresh, once per base, its verdict against the
//! target's baseline when the suite is red, its runs kept by commit and check.

use super::*;

impl<'a, 'r> Landing<'a, 'r> {
    /// Run the check on the rebased work, once per base: each lost race to a moving target runs it again, so a
    /// check slower than the gap between landings gives up after [`MAX_CHECK_RUNS`].
    pub(crate) fn check(&mut self) -> Result<(), Abort> {
        match self.verdict(self.base)? {
            None => Ok(()),
            // In a batch the check ran on the landings before this one too: whose code failed it is not known
            // (and one of them may leave the batch yet). Alone, on the target's own tip, it counts.
            Some(_) if self.batched => Err(Abort::Conflicted),
            Some(why) => Err(Abort::Fail(why)),
        }
    }

    /// The check of the work's tip as a batch's checker asks it (`desk::batch`): `true` when it passes, against
    /// `baseline` (the target's tip the batch lands on) when the suite is red.
    pub(crate) fn check_tip(&mut self, baseline: ObjectId) -> Result<bool, Abort> {
        Ok(self.verdict(baseline)?.is_none())
    }

    /// The check's verdict on the work's tip: `None` passes, else why it fails. With `check_baseline`, the run on
    /// `baseline` is the yardstick.
    fn verdict(&mut self, baseline: ObjectId) -> Result<Option<String>, Abort> {
        let Some(cmd) = &self.job.settings.check else { return Ok(None) };
        if self.checked_on == Some(self.base) {
            return Ok(None);
        }
        self.checks_run += 1;
        self.r.phase(&self.task.id, self.keeper.epoch, Phase::Check, None);
        if self.checks_run > MAX_CHECK_RUNS {
            return Err(Abort::Fail(format!(
                "the target moved during each of {MAX_CHECK_RUNS} runs of the check; giving up this attempt"
            )));
        }
        let cmd = cmd.clone();
        let (run, tail, cannot_start) = self.run_check_on(&cmd, self.head)?;
        if cannot_start {
            // A program missing on this machine (tox not installed) fails every landing alike: the runner's set-up,
            // no attempt spent — unless it starts on the target and only the change broke it.
            let (_, base_tail, on_base_too) = self.run_check_on(&cmd, baseline)?;
            if on_base_too {
                return Err(Abort::CannotStart(RunError::Setup(format!(
                    "the check `{cmd}` cannot start here, on the target's tip {} too: {} — install what it runs \
                     where the runner runs (agents and checks run in a sandbox: `git swarm doctor` says what it \
                     sees), or change [run] check; no attempt was spent",
                    &baseline.to_string()[..12],
                    super::super::reason_from("", &base_tail).trim_start_matches(": ")
                ))));
            }
            return Ok(Some(super::super::reason_from(
                "the check cannot start with this change (it starts on the target)",
                &tail,
            )));
        }
        if !run.passed {
            // With a baseline, a red target is the yardstick: only what the change makes worse counts.
            let worse = match self.job.settings.check_baseline {
                false => Some(format!("the check failed{}", crate::check::failing_named(&run, &tail))),
                true => {
                    let base = baseline;
                    let on_base = match self.kept(&cmd).get(base) {
                        Some(b) => b,
                        // The target's tip, checked out afresh for its own run.
                        None => self.run_check_on(&cmd, base)?.0,
                    };
                    match crate::check::compare(&on_base, &run) {
                        crate::check::Compared::Passes => None,
                        crate::check::Compared::NotWorse { failing, fixed } => {
                            let counted =
                                failing.map(|n| format!(" ({n} failing test(s) on both)")).unwrap_or_default();
                            let fixed = match fixed.len() {
                                0 => String::new(),
                                n => format!(
                                    "; it fixes {n}: {}",
                                    fixed.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                                ),
                            };
                            self.events.push(Event::Warning(format!(
                                "{}: the check fails on the target {} too{counted} and this change makes nothing \
                                 worse{fixed}: landing it",
                                self.task.id,
                                &base.to_string()[..12]
                            )));
                            None
                        }
                        crate::check::Compared::Unknown => {
                            self.events.push(Event::Warning(format!(
                                "{}: the check fails on the target {} too, and whether this change makes it worse \
                                 cannot be told: no report ([run] check_report) and no count of failing tests in its \
                                 output. Landing it (docs/check.md)",
                                self.task.id,
                                &base.to_string()[..12]
                            )));
                            None
                        }
                        crate::check::Compared::Worse(why) => {
                            Some(format!("the check is worse than on the target {} ({why})", &base.to_string()[..12]))
                        }
                    }
                }
            };
            if let Some(what) = worse {
                return Ok(Some(super::super::reason_from(&what, &tail)));
            }
        }
        self.checked_on = Some(self.base);
        Ok(None)
    }

    /// Where this check's runs are kept ([`super::super::baseline::Kept`]).
    pub(crate) fn kept(&self, cmd: &str) -> super::super::baseline::Kept {
        super::super::baseline::Kept::new(&self.r.places().base, cmd, self.job.settings.check_report.as_deref())
    }

    /// Run the check on `commit`, in a work tree made afresh for it, read its report, and keep the run for
    /// `commit`.
    pub(crate) fn run_check_on(
        &mut self,
        cmd: &str,
        commit: ObjectId,
    ) -> Result<(crate::check::CheckRun, Vec<String>, bool), Abort> {
        let (r, keeper) = (self.r, self.keeper);
        r.check_runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let report = self.job.settings.check_report.clone();
        let warm = !self.job.settings.check_clean;
        let checkout =
            self.slot.checkout(&r.swarm.local.repo, commit, r.agent_owner(), &[], warm).map_err(Abort::Fail)?;
        if let Some(rep) = report.as_deref() {
            // A report an earlier run left (carried with what the repository ignores) is no result of this one.
            super::super::warm::remove_report(&self.slot.tree, rep).map_err(Abort::Fail)?;
        }
        // The change's own tree fails its setup (the target passed it before the agent ran): the check fails.
        let (job, task) = (self.job, &self.task.id);
        if let Err(f) = r.set_up(self.slot, &checkout, commit, job.settings, job.config, task, &mut self.events) {
            if f.cannot_run {
                return Err(Abort::CannotStart(RunError::Setup(f.reason)));
            }
            let mut tail = f.tail;
            tail.push(f.reason);
            let run = crate::check::CheckRun { passed: false, tests: None, failed: None };
            return Ok((run, tail, false));
        }
        // The check runs the change's code (its tests, its Makefile): uncontained, what it plants in `.git` is put
        // back too.
        let guard = r.guard();
        let timeout = self.job.settings.task_timeout;
        let out = run_check(r, self.slot, commit, cmd, timeout, self.job.config, &|| keeper.keep(r));
        self.events.extend(guard.restore().into_iter().map(Event::Warning));
        self.events.extend(keeper.drain());
        if let Some(why) = keeper.lost() {
            return Err(Abort::LostClaim(why));
        }
        if let Some(why) = out.setup {
            return Err(Abort::CannotStart(RunError::Setup(format!("the check `{cmd}` could not be run: {why}"))));
        }
        let tests = match report.as_deref().map(|rep| super::super::baseline::read_report(&self.slot.tree, rep)) {
            None | Some(Ok(None)) => None,
            Some(Ok(Some(t))) => Some(t),
            Some(Err(why)) => {
                self.events.push(Event::Warning(format!(
                    "{}: the check's report cannot be used ({why}); only its exit status counts",
                    self.task.id
                )));
                None
            }
        };
        let failed = crate::check::failed_in_output(&out.tail);
        let run = crate::check::CheckRun { passed: out.passed, tests, failed };
        // A run that could not start is no result of this commit's.
        if !out.cannot_start {
            self.kept(cmd).put(commit, &run);
        }
        Ok((run, out.tail, out.cannot_start))
    }
}

/// Runs of the check for one landing before it gives up (each lost race to a moved target re-runs it).
pub(crate) const MAX_CHECK_RUNS: u32 = 8;

/// Run the check `cmd` in the slot's work tree (checked out at `commit`; contained as the worker's agent is: it
/// runs the change's code), for at most `timeout`: whether it passed, and the last lines it printed.
pub(crate) fn run_check(
    r: &Runner<'_>,
    slot: &Slot,
    commit: ObjectId,
    cmd: &str,
    timeout: Duration,
    config: &crate::model::Config,
    keep_going: &dyn Fn() -> bool,
) -> Checked {
    let setup = |why: String| Checked { passed: false, tail: vec![why.clone()], setup: Some(why), cannot_start: false };
    match run_contained(r, slot, commit, cmd, timeout, config, None, keep_going) {
        Ok(out) => {
            let cannot_start = crate::agent::could_not_start(&out);
            let mut tail = out.tail;
            if !out.exit.success() {
                tail.push(format!("(the check {})", out.exit));
            }
            tail.extend(out.sandbox_hint.map(|h| format!("(hint: {h})")));
            Checked { passed: out.exit.success(), tail, setup: None, cannot_start }
        }
        Err(e) => setup(e),
    }
}

/// Run the trusted command `cmd` (the check, `[run] setup`) in the slot's work tree, checked out at `commit`,
/// contained as the worker's agent is (it runs the change's code), for at most `timeout`, its output into `log`.
/// `Err`: it could not be run at all.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_contained(
    r: &Runner<'_>,
    slot: &Slot,
    commit: ObjectId,
    cmd: &str,
    timeout: Duration,
    config: &crate::model::Config,
    log: Option<std::path::PathBuf>,
    keep_going: &dyn Fn() -> bool,
) -> Result<crate::agent::Outcome, String> {
    let contained = r.contain_run(slot, Role::Worker, None, config, Some(commit), None).map_err(|e| e.to_string())?;
    let mut env = r.commit_ident.clone();
    env.extend(contained.env.iter().cloned());
    let inv = crate::agent::Invocation {
        cwd: &slot.tree,
        prompt: "",
        prompt_file: slot.run.join("check-input.txt"),
        env,
        log,
        timeout: Some(timeout),
        grace: Duration::from_secs(5),
        report: crate::agent::report::Report::Nothing,
        live: None,
        budget: None,
        contain: Some(contained.contain),
    };
    crate::agent::run(&Backend::Command { exec: cmd.to_string() }, &inv, &mut || keep_going())
        .map_err(|e| e.to_string())
}

/// What a run of the check came to.
pub(crate) struct Checked {
    pub(crate) passed: bool,
    /// Its last lines.
    pub(crate) tail: Vec<String>,
    /// It could not be run at all (a sandbox that could not be made, a process that could not be started): the
    /// runner's set-up, never the change's.
    pub(crate) setup: Option<String>,
    /// It exited 126 or 127 at once, saying a program is missing: the runner's set-up when it does so on the target
    /// too, the change's when only with it (the change deleted a script).
    pub(crate) cannot_start: bool,
}
