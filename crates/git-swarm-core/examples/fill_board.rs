//! Fill a swarm's state ref with ops, fast (in-process, through the library): the big boards of
//! `bench/compact.py`. Usage: `fill_board <clone> <ops> [open]` — adds tasks and claims and finishes them until
//! about `<ops>` ops are written, leaving `[open]` tasks open (default 50). Every op is a real transaction: one
//! commit of the state ref each, as agents would write them.

use std::path::PathBuf;

use git_swarm_core::Identity;
use git_swarm_core::Retry;
use git_swarm_core::model::Kind;
use git_swarm_core::ops::{self, Actor, NewTask};
use git_swarm_core::time::Timestamp;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: fill_board <clone> <ops> [open]")?);
    let ops_wanted: usize = args.next().ok_or("usage: fill_board <clone> <ops> [open]")?.parse()?;
    let open: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(50);
    let repo = gix::discover(&dir)?;
    let swarm = git_swarm_core::open_swarm(repo, None, "default", git_swarm_core::Transport::Auto)?;
    let who = Identity { name: "filler".into(), email: "filler@example.com".into() };
    let retry = Retry::default();
    let clock = || Timestamp::now_with_offset(0);
    let mut written = 0usize;
    let mut n = 0usize;
    let agents = ["worker-1", "worker-2", "worker-3", "worker-4"];
    while written + 3 <= ops_wanted.saturating_sub(open) {
        n += 1;
        let agent = agents[n % agents.len()];
        let title = format!("Task {n}: change module {} so that it does what the plan says", n % 97);
        let added = swarm.transact(&retry, &who, &clock, |snap, now| {
            let actor = Actor { agent: agent.into(), now };
            let new = NewTask {
                title: title.clone(),
                body: format!("Body of task {n}.\nAcceptance: the tests of module {} pass.", n % 97),
                kind: Kind::Work,
                ..NewTask::default()
            };
            ops::add(&snap.board, &actor, vec![new], &mut || format!("t-{n:06x}"))
        })?;
        let id = added.value[0].id.clone();
        let lease = std::time::Duration::from_secs(600);
        swarm.transact(&retry, &who, &clock, |snap, now| {
            ops::claim(&snap.board, &Actor { agent: agent.into(), now }, Some(&id), Kind::Work, lease, None)
        })?;
        let commit = format!("{:040x}", n);
        swarm.transact(&retry, &who, &clock, |snap, now| {
            let note = Some(format!("Finished task {n}: what the next planner should know."));
            ops::done(&snap.board, &Actor { agent: agent.into(), now }, &id, None, Some(commit.clone()), note, None)
        })?;
        written += 3;
    }
    for i in 0..open.min(ops_wanted.saturating_sub(written)) {
        swarm.transact(&retry, &who, &clock, |snap, now| {
            let new = NewTask { title: format!("Open task {i}"), kind: Kind::Work, ..NewTask::default() };
            ops::add(&snap.board, &Actor { agent: "planner".into(), now }, vec![new], &mut || {
                format!("t-{:06x}", 0xf00000 + i)
            })
        })?;
        written += 1;
    }
    println!("{written}");
    Ok(())
}
