//! `git swarm goal <text> | --file <path>`: set the swarm's goal and start the next cycle with a fresh root plan —
//! also after the judge said `stop`. With no argument: print the goal.

use std::path::PathBuf;

use git_swarm::runner::goal::{self, Filed};
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub struct GoalArgs {
    /// The new goal (the same one again goes on with it in a new cycle). Without it, the current goal is printed.
    #[arg(conflicts_with = "file")]
    text: Option<String>,
    /// Read the goal from a file (`-` for stdin).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
}

pub fn run(ctx: &mut Ctx, args: GoalArgs) -> CliResult<()> {
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
            Some(g) => ctx.out.line(git_swarm::escape::block(g.trim_end())),
            None => ctx.out.note("the swarm has no goal yet: `git swarm goal <text>` sets one"),
        }
        ctx.out.doc(&json!({"goal": g, "cycle": last.as_ref().map(|c| c.cycle), "stopped": last.is_some_and(|c| c.verdict == git_swarm::runner::Verdict::Stop)}));
        return Ok(());
    };
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let filed = goal::replace(&swarm, &ctx.retry, &who, &clock, &agent, &text).map_err(|e| match e {
        git_swarm::runner::RunError::Txn(t) => CliError::from(t),
        other => CliError::usage(other.to_string()),
    })?;
    let doc = match &filed {
        Filed::New | Filed::Same => {
            ctx.out.line("goal set; the first planner plans it");
            json!({"goal": text.trim(), "ended_cycle": null})
        }
        Filed::Replaced { ended, plan } => {
            ctx.out.line(format!(
                "goal set; cycle {ended} ended, cycle {} starts with the root plan {plan}",
                ended.saturating_add(1)
            ));
            json!({"goal": text.trim(), "ended_cycle": ended, "plan": plan})
        }
    };
    ctx.out.note("runners that exited when the swarm stopped must be started again (git swarm up, git swarm run …)");
    ctx.out.doc(&doc);
    Ok(())
}
