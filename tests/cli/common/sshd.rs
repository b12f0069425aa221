//! A real OpenSSH server on loopback, for git over ssh: its own host key, one client key, the repositories by their
//! absolute paths (`ssh://<user>@127.0.0.1:<port><path>`). Clones reach it through `core.sshCommand`, so that
//! every git (and gix) of the clone uses the key, whatever the environment of the process.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Env, free_port};

/// `sshd`, when installed (Debian's `openssh-server`).
pub fn sshd() -> Option<PathBuf> {
    ["/usr/sbin/sshd", "/usr/bin/sshd"].iter().map(PathBuf::from).find(|p| p.is_file())
}

/// [`sshd`], or `None` with a note (a panic under `GIT_SWARM_REQUIRE_ALL=1`, as CI runs).
pub fn sshd_or_skip(test: &str) -> Option<PathBuf> {
    match sshd() {
        Some(p) => Some(p),
        None if std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1") => {
            panic!("{test}: sshd is not installed and GIT_SWARM_REQUIRE_ALL=1 (apt-get install openssh-server)")
        }
        None => {
            println!("{test}: skipped: sshd not installed (apt-get install openssh-server)");
            None
        }
    }
}

pub struct Sshd {
    child: Option<Child>,
    pub port: u16,
    program: PathBuf,
    dir: PathBuf,
    user: String,
}

impl Sshd {
    /// Start sshd with its files in `dir`, for the user that runs the tests, key only.
    pub fn start(env: &Env, program: &Path, dir: &Path) -> Sshd {
        std::fs::create_dir_all(dir).expect("sshd dir");
        let keygen = |path: &Path| {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path)
                .stdout(Stdio::null())
                .status()
                .expect("ssh-keygen");
            assert!(st.success(), "ssh-keygen failed");
        };
        keygen(&dir.join("host_key"));
        keygen(&dir.join("client_key"));
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).expect("authorized_keys");
        // Privilege separation needs this folder (a service would make it).
        let _ = std::fs::create_dir_all("/run/sshd");
        let user = String::from_utf8(Command::new("id").arg("-un").output().expect("id").stdout)
            .expect("utf-8")
            .trim()
            .to_string();
        let mut s = Sshd { child: None, port: 0, program: program.to_path_buf(), dir: dir.to_path_buf(), user };
        for _ in 0..20 {
            s.port = free_port();
            s.write_conf();
            if let Some(c) = s.spawn(env) {
                s.child = Some(c);
                return s;
            }
        }
        panic!("could not start sshd; its log:\n{}", s.log());
    }

    fn write_conf(&self) {
        let d = &self.dir;
        let conf = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {keys}\nPidFile {pid}\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nMaxStartups 100:30:200\n\
             MaxSessions 100\nLogLevel ERROR\n",
            port = self.port,
            host = d.join("host_key").display(),
            keys = d.join("authorized_keys").display(),
            pid = d.join("sshd.pid").display(),
        );
        std::fs::write(d.join("sshd_config"), conf).expect("write sshd_config");
    }

    fn spawn(&self, env: &Env) -> Option<Child> {
        let mut cmd = Command::new(&self.program);
        env.hermetic(&mut cmd);
        let child = cmd
            .args(["-D", "-e", "-f"])
            .arg(self.dir.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("sshd.log")).map_or(Stdio::null(), Stdio::from))
            .spawn()
            .expect("start sshd");
        super::listening(child, self.port, Duration::from_secs(10))
    }

    /// A new client key `<name>` (ed25519, no passphrase) in sshd's folder: its private key's path.
    pub fn new_key(&self, name: &str) -> PathBuf {
        let path = self.dir.join(name);
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&path)
            .stdout(Stdio::null())
            .status()
            .expect("ssh-keygen");
        assert!(st.success(), "ssh-keygen failed");
        path
    }

    /// Replace the authorized keys (sshd reads them at each login): `lines` in `authorized_keys` format, with
    /// `command="…"` and the like, as a gitolite account's are.
    pub fn authorize(&self, lines: &str) {
        std::fs::write(self.dir.join("authorized_keys"), lines).expect("authorized_keys");
    }

    /// Clone `url` into the test's folder `name` logging in with `ssh` (an [`Sshd::ssh_command`]), which the clone
    /// keeps as its `core.sshCommand`.
    pub fn clone_with(&self, env: &Env, url: &str, ssh: &str, name: &str) -> PathBuf {
        let dir = env.path(name);
        let set = format!("core.sshCommand={ssh}");
        let o = env.git_out(env.root.path(), &["-c", &set, "clone", "-q", url, dir.to_str().expect("utf-8")]);
        assert_eq!(o.code, 0, "git clone over ssh: {}\nsshd: {}", o.stderr, self.log());
        env.git(&dir, &["config", "core.sshCommand", ssh]);
        dir
    }

    /// The user every login is.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// What sshd printed (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }

    /// The URL of the repository at `path`.
    pub fn url(&self, path: &Path) -> String {
        format!("ssh://{}@127.0.0.1:{}{}", self.user, self.port, path.display())
    }

    /// What a clone sets as `core.sshCommand`: the client key, no host key check, never a prompt.
    pub fn ssh_command(&self) -> String {
        self.ssh_command_with(&self.dir.join("client_key"))
    }

    /// [`Sshd::ssh_command`] with the private key at `key`.
    pub fn ssh_command_with(&self, key: &Path) -> String {
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
             -o BatchMode=yes -o LogLevel=ERROR",
            key.display()
        )
    }

    /// Kill the listener (SIGKILL): new connections are refused until [`Sshd::restart`]; sessions under way run
    /// to their end.
    pub fn stop(&mut self) {
        super::kill(&mut self.child);
    }

    /// Start it again on the same port.
    pub fn restart(&mut self, env: &Env) {
        self.stop();
        match super::respawn(|| self.spawn(env)) {
            Some(c) => self.child = Some(c),
            None => panic!("could not restart sshd on port {}; its log:\n{}", self.port, self.log()),
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}
