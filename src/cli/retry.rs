//! `git swarm retry <id>`: open a failed or cancelled task again, its attempts reset.

use git_swarm::ops::{self, Actor, DomainError};

use super::output::task_json;
use super::{CliError, CliResult, Ctx, parse_id};

#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    /// The failed or cancelled task.
    #[arg(value_parser = parse_id)]
    id: String,
}

pub fn run(ctx: &mut Ctx, args: RetryArgs) -> CliResult<()> {
    let agent = ctx.agent().to_string();
    let swarm = ctx.swarm()?;
    let who = Ctx::identity(&swarm, &agent);
    let clock = ctx.clock();
    let id = args.id.clone();
    let res = swarm.transact(&ctx.retry, &who, &clock, |snap, now| {
        let actor = Actor { agent: agent.clone(), now };
        // A finished task is stored apart and may not be read into the board: read it by name.
        let (task, path) = match snap.board.tasks.get(&id) {
            Some(s) => (s.task.clone(), s.path.clone()),
            None => match swarm.store().read_closed(snap, &id) {
                Ok(Some(Ok(t))) => {
                    let path = snap.board.closed.get(&id).map(|c| c.path.clone()).unwrap_or_default();
                    (t, path)
                }
                _ => return Err(DomainError::UnknownTask(id.clone())),
            },
        };
        ops::retry(&snap.board, &actor, &task, &path)
    });
    let c = res.map_err(CliError::from)?;
    ctx.out.line(format!("open again: {} {} (attempts reset)", c.value.id, git_swarm::escape::line(&c.value.title)));
    ctx.out.doc(&task_json(&c.value, ctx.now()));
    Ok(())
}
