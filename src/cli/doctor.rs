//! `git swarm doctor`: check the swarm and this clone's part of it; `--fix` repairs what it can without losing
//! anything, and says what it cannot. Exit 1 while an error remains.

use crate::doctor::{Repairs, Severity};
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// Repair what can be repaired without losing anything: put back a state ref that was rewound or deleted
    /// (from what this clone saw), remove stale lock files, stray work trees and stale records.
    #[arg(long)]
    fix: bool,
    /// Take the remote's state ref as it is after a deliberate reset or re-init; what this clone saw of it is kept
    /// under refs/swarm-archive/<name>/lost-<commit>.
    #[arg(long)]
    accept_remote: bool,
}

pub(super) fn run(ctx: &mut Ctx, args: DoctorArgs) -> CliResult<()> {
    let local = ctx.git_config()?;
    let swarm = ctx.swarm()?;
    let agent = ctx.agent().to_string();
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let with = crate::doctor::Examine {
        repairs: Repairs { fix: args.fix, accept_remote: args.accept_remote },
        now: ctx.now(),
        local: &local,
        agent: &agent,
        who: &who,
        retry: &ctx.retry,
        clock: &clock,
        env: &ctx.env,
    };
    let findings = crate::doctor::examine(&swarm, &with)?;
    for f in &findings {
        let tag = match (f.severity, &f.fixed) {
            (_, Some(_)) => "fixed",
            (Severity::Ok, _) => "ok",
            (Severity::Info, _) => "info",
            (Severity::Warn, _) => "warn",
            (Severity::Error, _) => "error",
        };
        ctx.out.line(format!("{tag:<5} {:<9} {}", f.check, crate::escape::line(&f.message)));
        for d in &f.details {
            ctx.out.line(format!("      {:<9} {}", "", crate::escape::line(d)));
        }
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
