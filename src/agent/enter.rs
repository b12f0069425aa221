//! How an agent's process starts: `git-swarm __exec [--setsid] [--user UID:GID] [--die-with-parent] -- PROGRAM
//! ARGS…`, this binary called as a trampoline that changes what the process is and then becomes `PROGRAM` (an
//! `exec`: no process is left in between). What the standard library cannot do before an `exec` without `unsafe`
//! code (the crate forbids it), a trampoline does in safe calls:
//!
//! * `--setsid`: a session of its own, with no controlling terminal: nothing the agent starts can open `/dev/tty`
//!   and write escapes to the person's terminal, or type into the shell that started the runner (`TIOCSTI`). Its
//!   process group is its pid, so the runner's group signals still reach everything that does not leave it.
//! * `--user`: the uid and gid an agent runs as when the runner is root (its supplementary groups dropped, then
//!   checked: uid 0 cannot be taken back) — inside the sandbox, after bubblewrap made its mounts as root. A user
//!   namespace alone would map the agent back to uid 0, which reads every file root owns.
//! * `--die-with-parent`: `SIGKILL` when the process that started it ends (a runner killed with `SIGKILL` takes its
//!   agents along); `--term-with-parent`: `SIGTERM` then (the members of `up` give their claims back and exit when
//!   `up` ends, however it ends).
//!
//! `no_new_privs` is set whenever the uid changes (bubblewrap sets it too): no setuid program or file capability
//! gives the agent back what it lost.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;

/// The first argument that makes `git-swarm` the trampoline.
pub(crate) const ARG: &str = "__exec";

/// What the trampoline does before it becomes the program.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Enter {
    pub setsid: bool,
    pub user: Option<(u32, u32)>,
    pub die_with_parent: bool,
    /// `SIGTERM` when the process that started it ends (a member of `up`: it gives its claims back and exits).
    pub term_with_parent: bool,
    /// The program and its arguments.
    pub argv: Vec<OsString>,
}

impl Enter {
    /// The arguments that make `git-swarm` do this (after the binary's path).
    pub(crate) fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![ARG.into()];
        if self.setsid {
            a.push("--setsid".into());
        }
        if let Some((u, g)) = self.user {
            a.push("--user".into());
            a.push(format!("{u}:{g}").into());
        }
        if self.die_with_parent {
            a.push("--die-with-parent".into());
        }
        if self.term_with_parent {
            a.push("--term-with-parent".into());
        }
        a.push("--".into());
        a.extend(self.argv.iter().cloned());
        a
    }

    /// Read the arguments after [`ARG`].
    pub(crate) fn parse(args: &[OsString]) -> Result<Enter, String> {
        let mut e = Enter::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.to_str() {
                Some("--setsid") => e.setsid = true,
                Some("--die-with-parent") => e.die_with_parent = true,
                Some("--term-with-parent") => e.term_with_parent = true,
                Some("--user") => {
                    let v = it.next().and_then(|v| v.to_str()).ok_or("--user needs UID:GID")?;
                    let (u, g) = v.split_once(':').ok_or("--user needs UID:GID")?;
                    let n = |s: &str| s.parse::<u32>().map_err(|_| format!("--user {v}: not UID:GID"));
                    e.user = Some((n(u)?, n(g)?));
                }
                Some("--") => {
                    e.argv = it.cloned().collect();
                    break;
                }
                _ => return Err(format!("{}: unknown option of {ARG}", a.to_string_lossy())),
            }
        }
        if e.argv.is_empty() {
            return Err(format!("{ARG}: no program to run"));
        }
        Ok(e)
    }

    /// Change the process as asked, then become the program. Returns only on failure: why.
    pub(crate) fn exec(&self) -> String {
        match self.prepare() {
            Ok(()) => {}
            Err(why) => return why,
        }
        let argv: Result<Vec<CString>, _> = self.argv.iter().map(|a| CString::new(a.clone().into_vec())).collect();
        let Ok(argv) = argv else { return "an argument holds a NUL byte".into() };
        match nix::unistd::execvp(&argv[0], &argv) {
            Ok(never) => match never {},
            Err(e) => format!("{}: {e}", self.argv[0].to_string_lossy()),
        }
    }

    fn prepare(&self) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        if self.die_with_parent || self.term_with_parent {
            let sig = if self.die_with_parent {
                nix::sys::signal::Signal::SIGKILL
            } else {
                nix::sys::signal::Signal::SIGTERM
            };
            nix::sys::prctl::set_pdeathsig(sig).map_err(|e| format!("cannot ask to end with its parent: {e}"))?;
            // The parent may have ended already, before the wish was made: then end now.
            if nix::unistd::getppid().as_raw() == 1 {
                let _ = nix::sys::signal::raise(sig);
            }
        }
        if self.setsid {
            nix::unistd::setsid().map_err(|e| format!("cannot start a session of its own: {e}"))?;
        }
        if let Some((uid, gid)) = self.user {
            use nix::unistd::{Gid, Uid};
            nix::unistd::setgroups(&[]).map_err(|e| format!("cannot drop the supplementary groups: {e}"))?;
            nix::unistd::setgid(Gid::from_raw(gid)).map_err(|e| format!("cannot become gid {gid}: {e}"))?;
            nix::unistd::setuid(Uid::from_raw(uid)).map_err(|e| format!("cannot become uid {uid}: {e}"))?;
            // Checked, not assumed: a uid that can become root again is no drop at all.
            let (ruid, euid) = (nix::unistd::getuid().as_raw(), nix::unistd::geteuid().as_raw());
            if ruid != uid || euid != uid || (uid != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok()) {
                return Err(format!("the uid did not change to {uid} for good"));
            }
            #[cfg(target_os = "linux")]
            nix::sys::prctl::set_no_new_privs().map_err(|e| format!("cannot set no_new_privs: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_read_back_as_written() {
        let e = Enter {
            setsid: true,
            user: Some((65534, 65534)),
            die_with_parent: true,
            term_with_parent: true,
            argv: vec!["sh".into(), "-c".into(), "--user 0:0".into()],
        };
        let args = e.args();
        assert_eq!(args[0], ARG);
        assert_eq!(Enter::parse(&args[1..]), Ok(e));
        assert!(Enter::parse(&["--user".into(), "x".into(), "--".into(), "sh".into()]).is_err());
        assert!(Enter::parse(&["--".into()]).is_err());
        assert!(Enter::parse(&["--bogus".into(), "--".into(), "sh".into()]).is_err());
    }
}
