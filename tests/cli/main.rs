//! The command line from outside: every test here drives the real `git-swarm` binary in real repositories, with
//! real remotes (paths, `file://`, `git daemon`, smart HTTP, sshd, gitolite), real agents and real faults. One test
//! binary (one link on a 2-core machine); each file below is a module of it, sharing `common`.

mod common;

mod board;
mod chaos;
mod contained;
mod contract;
mod conventions;
mod docs_map;
mod escape;
mod fetch_repack;
mod first_hour;
mod first_week;
mod forge;
mod forged;
mod github;
mod gitlab;
mod gitolite;
mod history;
mod hooks;
mod hostile;
mod house;
mod many_agents;
mod open_world;
mod promises;
mod race;
mod real_agents;
mod runner;
mod security;
mod snapshots;
mod spend;
mod stop;
mod warm;
