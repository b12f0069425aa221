//! `git swarm goal <text> | --file <path>`: set the swarm's goal and start the next cycle with a fresh root plan —
//! also after the judge said `stop`. With no argument: print the goal.

use std::path::PathBuf;

use crate::runner::goal::{self, Filed};
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct GoalArgs {
    /// The new goal (the same one again goes on with it in a new cycle). Without it, the current goal is printed.
    #[arg(conflicts_with = "file")]
    text: Option<String>,
    /// Read the goal from a file (`-` for stdin).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
}

pub(super) fn run(ctx: &mut Ctx, args: GoalArgs) -> CliResult<()> {
    let text = match (args.text, &args.file) {
        (Some(t), _) => Some(t),
        (None, Some(p)) => Some(super::read_text_arg(p, "--file")?),
        (None, None) => None,
    };
    let agent = ctx.agent().to_string();
    let swarm = ctx.swarm()?;
    let Some(text) = text else {
        let snap = swarm.read(false)?;
        let (g, last) = goal::state(swarm.store(), snap.commit);
        match &g {
            Some(g) => ctx.out.line(crate::escape::block(g.trim_end())),
            None => ctx.out.note("the swarm has no goal yet: `git swarm goal <text>` sets one"),
        }
        let stopped = last.as_ref().is_some_and(|c| c.verdict == crate::runner::Verdict::Stop);
        // The cycle as `status` counts it: the one that runs (one more than the last record).
        let cycle = last.as_ref().map_or(1, |c| c.cycle.saturating_add(1));
        ctx.out.doc(&json!({"goal": g.as_deref().map(str::trim_end), "cycle": cycle, "stopped": stopped}));
        return Ok(());
    };
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let filer = goal::Filer { swarm: &swarm, retry: &ctx.retry, who: &who, clock: &clock, agent: &agent };
    let filed = filer.replace(&text).map_err(|e| match e {
        crate::runner::RunError::Txn(t) => CliError::from(t),
        other => CliError::usage(other.to_string()),
    })?;
    let doc = match &filed {
        Filed::New { plan } => {
            ctx.out.line(format!("goal set; the first planner plans it (root plan {plan})"));
            json!({"goal": text.trim(), "ended_cycle": null, "plan": plan})
        }
        Filed::Same => {
            ctx.out.line("the swarm has this goal already");
            json!({"goal": text.trim(), "ended_cycle": null, "plan": null})
        }
        Filed::Replaced { ended, plan, stopped } => {
            let next = ended.saturating_add(1);
            if *stopped {
                ctx.out.line(format!(
                    "goal set; the judge had stopped the swarm after cycle {ended}: cycle {next} starts with the root \
                     plan {plan}"
                ));
            } else {
                ctx.out.line(format!("goal set; cycle {ended} ended, cycle {next} starts with the root plan {plan}"));
            }
            json!({"goal": text.trim(), "ended_cycle": ended, "plan": plan, "after_stop": stopped})
        }
    };
    // Runners end when the judge stops the swarm; on a swarm that never stopped they take the new root plan.
    if matches!(filed, Filed::Replaced { stopped: true, .. }) {
        ctx.out
            .note("runners that exited when the swarm stopped must be started again (git swarm up, git swarm run …)");
    }
    ctx.out.doc(&doc);
    Ok(())
}
