//! One Ctrl-C stops the fleet (issue 35): `git swarm up`, started through `git` in a pseudo-terminal as a person
//! starts it, stopped by one Ctrl-C typed at the terminal — and by the terminal going away (SIGHUP) — leaves no
//! process behind and no claim held. Through `git`, one Ctrl-C reached `up` twice (from the terminal, and again
//! from git, which passes it on to its child): `up` took the echo for a second Ctrl-C and exited at once, and its
//! members, in process groups of their own, went on claiming and landing.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{Env, path_url, wait_until};

/// How the terminal stops the fleet.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Ctrl-C typed at the terminal.
    CtrlC,
    /// The terminal goes away (its `script` is killed: the kernel hangs the session up).
    HangUp,
}

/// The processes whose command line names the test's folder (members, agents, their sandboxes).
fn left_in(root: &Path) -> Vec<String> {
    let needle = root.to_string_lossy().into_owned();
    common::procs::all()
        .iter()
        .filter(|p| p.pid != std::process::id() && !common::procs::is_zombie(p.pid))
        .map(|p| common::procs::cmdline(p.pid))
        .filter(|c| c.contains(&needle))
        .collect()
}

fn claimed(env: &Env, c: &Path) -> usize {
    let list = env.sw(c, &["list", "--status", "claimed", "--json"]).ok().json();
    list.as_array().map_or(0, Vec::len)
}

fn stops_clean(stop: Stop, runs: usize) {
    let test = format!("{stop:?}").to_lowercase();
    let Some(script) = common::tool_or_skip(&test, "script", "apt-get install util-linux") else { return };
    let env = Env::new();
    let agent = env.path("agent.sh");
    std::fs::write(&agent, "sleep 30; echo \"$GIT_SWARM_TASK_ID\" > \"$GIT_SWARM_TASK_ID.txt\"\n").expect("agent");
    let (_bare, clones) =
        env.swarm_with_config(path_url, 1, &format!("[roles.worker]\nexec = \"sh {}\"\n", agent.display()));
    let c = &clones[0];
    // `git swarm` finds `git-swarm` on the PATH, as after `cargo install`.
    let bin = Path::new(env!("CARGO_BIN_EXE_git-swarm")).parent().expect("bin dir").to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    for run in 1..=runs {
        for i in 0..3 {
            env.sw(c, &["add", &format!("run {run} task {i}")]).ok();
        }
        let mut term = env
            .command(&script)
            .args(["-qec", "git swarm up --workers 2", "/dev/null"])
            .current_dir(c)
            .env("PATH", &path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("script");
        wait_until(60, "the fleet to claim", || claimed(&env, c) > 0);
        match stop {
            Stop::CtrlC => {
                let mut stdin = term.stdin.take().expect("stdin");
                stdin.write_all(b"\x03").expect("Ctrl-C");
                stdin.flush().expect("flush");
                // Kept open: the terminal stays until `up` is done.
                let started = Instant::now();
                while term.try_wait().expect("wait").is_none() {
                    assert!(started.elapsed() < Duration::from_secs(90), "{test} run {run}: up did not stop");
                    std::thread::sleep(Duration::from_millis(100));
                }
                drop(stdin);
            }
            Stop::HangUp => {
                let _ = term.kill();
                let _ = term.wait();
            }
        }
        wait_until(60, "every process of the fleet to end", || left_in(env.root.path()).is_empty());
        assert_eq!(claimed(&env, c), 0, "{test} run {run}: claims held after the stop");
    }
}

/// 20 fleets, each stopped by one Ctrl-C at the terminal: nothing left running, no claim held.
#[test]
fn one_ctrl_c_through_git_stops_the_whole_fleet() {
    stops_clean(Stop::CtrlC, 20);
}

/// 20 fleets, each losing its terminal: the same.
#[test]
fn a_closed_terminal_stops_the_whole_fleet() {
    stops_clean(Stop::HangUp, 20);
}
