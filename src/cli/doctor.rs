//! `git swarm doctor`: check the swarm and this clone's part of it; `--fix` repairs what it can without losing
//! anything, and says what it cannot. Exit 1 while an error remains.

use crate::doctor::{Repairs, Severity};
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Repair what can be repaired without losing anything: put back a state ref that was rewound or deleted
    /// (from what this clone saw), remove stale lock files, stray work trees and stale records.
    #[arg(long)]
    fix: bool,
    /// Take the remote's state ref as it is after a deliberate reset or re-init; what this clone saw of it is kept
    /// under refs/swarm-archive/<name>/lost-<commit>.
    #[arg(long)]
    accept_remote: bool,
}

pub fn run(ctx: &mut Ctx, args: DoctorArgs) -> CliResult<()> {
    let local = ctx.git_config()?;
    let swarm = ctx.swarm()?;
    let repairs = Repairs { fix: args.fix, accept_remote: args.accept_remote };
    let mut findings = crate::doctor::examine(&swarm, ctx.now(), repairs)?;
    // Settings that cannot be read stop every op: put back the newest that read (with --fix) before anything else.
    let settings_ok = match broken_settings(ctx, &swarm, args.fix)? {
        Some((f, repaired)) => {
            findings.push(f);
            repaired
        }
        None => true,
    };
    // After a restore too: tasks the board calls open whose code is on the target are finished, never redone.
    if settings_ok {
        let restored = crate::doctor::restored(&findings);
        findings.extend(landed_but_not_done(ctx, &swarm, args.fix, restored)?);
    }
    // The agents each role would run from this clone, and whether they can start here.
    if let Ok(Some(snap)) = swarm.try_read(false) {
        let run_dir = crate::runner::Places::of(swarm.local.repo.common_dir()).run_dir("doctor");
        findings.extend(crate::doctor::agents(&snap.board.config, &local, &run_dir));
        findings.push(crate::doctor::sandbox(&snap.board.config, &local));
        findings.extend(crate::doctor::git_version());
        findings.extend(crate::doctor::check_program(&snap.board.config, &local));
        findings.extend(crate::doctor::baseline(&snap.board.config, &local));
        findings.extend(crate::doctor::forge(&snap.board.config));
    }
    for f in &findings {
        let tag = match (f.severity, &f.fixed) {
            (_, Some(_)) => "fixed",
            (Severity::Ok, _) => "ok",
            (Severity::Info, _) => "info",
            (Severity::Warn, _) => "warn",
            (Severity::Error, _) => "error",
        };
        ctx.out.line(format!("{tag:<5} {:<9} {}", f.check, crate::escape::line(&f.message)));
        if let Some(what) = &f.fixed {
            ctx.out.line(format!("      {:<9} → {}", "", crate::escape::line(what)));
        } else if let Some(h) = &f.hint {
            ctx.out.line(format!("      {:<9} hint: {}", "", crate::escape::line(h)));
        }
    }
    let open = findings.iter().filter(|f| f.open_error()).count();
    ctx.out.doc(&json!({"ok": open == 0, "findings": findings}));
    if open > 0 {
        return Err(CliError::io(format!("{open} problem(s) doctor could not repair")).documented());
    }
    Ok(())
}

/// The newest board's `swarm.toml` cannot be read: the finding, and with `fix` the settings of the newest commit
/// that has good ones written back by compare-and-swap (an op `config`, in the log). `true` when the settings read
/// afterwards.
fn broken_settings(
    ctx: &Ctx,
    swarm: &crate::txn::Swarm,
    fix: bool,
) -> CliResult<Option<(crate::doctor::Finding, bool)>> {
    let Ok(Some(snap)) = swarm.try_read(false) else { return Ok(None) };
    let Some(broken) = snap.board.broken_settings.clone() else { return Ok(None) };
    let Some(good) = broken.fallback.clone().filter(|_| fix) else {
        return Ok(Some((crate::doctor::broken_settings(&broken, None), false)));
    };
    let agent = ctx.agent().to_string();
    let who = Ctx::identity(swarm, &agent);
    let clock = ctx.clock();
    let what = format!("put back by doctor: the settings of {}", crate::store::short(&good));
    let c = swarm.transact_settings(&ctx.retry, &who, &clock, |snap, now| {
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
            crate::store::short(&good),
            crate::store::short(&commit.to_string())
        ),
        _ => "repaired meanwhile by another clone".to_string(),
    };
    Ok(Some((crate::doctor::broken_settings(&broken, Some(fixed)), true)))
}

/// [`crate::doctor::landed_but_not_done`] on the newest board, and with `fix` the `done` of each (one op); the
/// commits that only name such a task are said.
fn landed_but_not_done(
    ctx: &Ctx,
    swarm: &crate::txn::Swarm,
    fix: bool,
    restored: bool,
) -> CliResult<Vec<crate::doctor::Finding>> {
    let Ok(Some(snap)) = swarm.try_read(false) else { return Ok(vec![]) };
    let target = format!("refs/heads/{}", snap.board.config.target);
    let Ok(Some(tip)) = swarm.fetch_branch(&target) else { return Ok(vec![]) };
    let found = crate::doctor::landed_but_not_done(swarm, &snap.board, tip, restored)?;
    let mut out = crate::doctor::refused_findings(&found.refused, &snap.board.config.target);
    let found = found.landed;
    if found.is_empty() {
        return Ok(out);
    }
    if !fix {
        out.push(crate::doctor::landed_finding(&found, None));
        return Ok(out);
    }
    let agent = ctx.agent().to_string();
    let who = Ctx::identity(swarm, &agent);
    let clock = ctx.clock();
    let why = format!("finished by doctor ({agent}): its code is on {}", snap.board.config.target);
    let c = swarm.transact(&ctx.retry, &who, &clock, |snap, now| {
        let actor = crate::ops::Actor { agent: agent.clone(), now };
        let mut after = snap.board.clone();
        let mut ch = crate::ops::Change::default();
        let mut n = 0;
        for (id, commit) in &found {
            if let Ok((done, _)) = crate::ops::done_found(&after, &actor, id, commit.to_string(), &why) {
                crate::ops::apply(&mut after, &done);
                ch = ch.then(done);
                n += 1;
            }
        }
        Ok((ch, n))
    })?;
    out.push(crate::doctor::landed_finding(&found, Some(c.value)));
    Ok(out)
}
