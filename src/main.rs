//! `git-swarm`: the runner of a swarm's planners, workers and judge, its boards, its forges and its command line,
//! over the engine `git_swarm_core` (the state ref and the protocol). `cli` parses and prints; the modules beside it
//! do the work and print nothing.

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

// The engine's modules, under the names this crate has always used for them (`crate::store::Store`).
pub(crate) use git_swarm_core::{
    Transport, child, escape, gitcmd, model, open_options, open_swarm, ops, remote, secrets, state, store, time, txn,
    usage, with_causes,
};

fn main() -> std::process::ExitCode {
    cli::main()
}
