//! `git-swarm`: the runner of a swarm's planners, workers and judge, its boards, its forges and its command line,
//! over the engine `git_swarm_core` (the state ref and the protocol). `cli` parses and prints; the modules beside it
//! do the work and print nothing.

#![warn(unreachable_pub)]

mod agent;
mod board;
mod check;
mod cli;
mod config;
mod doctor;
mod environment;
mod fleet;
mod forge;
mod fsck;
mod github;
mod gitlab;
mod hooks;
mod leaks;
mod repo;
mod runner;
mod trust;

#[cfg(test)]
mod fuzz;

// The engine's API — its modules (`crate::model`, `crate::ops`, …) and what its private ones offer (`crate::Swarm`,
// `crate::Store`, …) — under the names this crate uses for them.
pub(crate) use git_swarm_core::*;

fn main() -> std::process::ExitCode {
    cli::main()
}
