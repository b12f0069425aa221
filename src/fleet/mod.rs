//! What every CI generator of a fleet shares, whichever forge runs it (`ci github`, `ci gitlab`): how a fresh runner
//! installs git-swarm and the agents' CLIs ([`install`]), the pinned settings that only work on the author's
//! machine ([`portable`]), the push budget of a forge ([`budget`]), the command a runner job runs
//! ([`runner_command`]), all pure; and the setup of a forge's REST client (`rest`).

pub(crate) mod budget;
pub(crate) mod install;
pub(crate) mod portable;
pub(crate) mod rest;

/// The command of a runner job: `exec git swarm run <role> --until-idle`, with `--agents <n>` for a worker job of
/// several agents. (`exec`: a CI that signals the job's entry process on a cancel or a time-out reaches the runner,
/// which releases its claims on the way out.)
pub(crate) fn runner_command(role: &str, agents: u32) -> String {
    match agents {
        0 | 1 => format!("exec git swarm run {role} --until-idle"),
        n => format!("exec git swarm run {role} --until-idle --agents {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_commands() {
        assert_eq!(runner_command("worker", 1), "exec git swarm run worker --until-idle");
        assert_eq!(runner_command("worker", 32), "exec git swarm run worker --until-idle --agents 32");
        assert_eq!(runner_command("judge", 1), "exec git swarm run judge --until-idle");
    }
}
