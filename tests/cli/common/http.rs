//! git's smart HTTP protocol as hosting services serve it: `git http-backend` (a CGI program) behind a real web
//! server, lighttpd, on a free loopback port. The configuration is generated into the test's temp dir; the server
//! runs in the foreground (`lighttpd -D -f <conf>`) as a child of the test, and is killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Env, free_port};

/// Where Debian's package `lighttpd` installs the server.
const LIGHTTPD: &str = "/usr/sbin/lighttpd";

/// The lighttpd binary, if installed (Debian's path, else the PATH).
pub fn lighttpd() -> Option<PathBuf> {
    if Path::new(LIGHTTPD).is_file() {
        return Some(PathBuf::from(LIGHTTPD));
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("lighttpd"))
        .find(|p| p.is_file())
}

/// Can a test that needs lighttpd run? When it is missing the test is skipped with a clear line on stdout — unless
/// `GIT_SWARM_REQUIRE_ALL=1` (CI), where a missing server is a failure.
#[track_caller]
pub fn lighttpd_or_skip(test: &str) -> Option<PathBuf> {
    match lighttpd() {
        Some(p) => Some(p),
        None if std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1") => {
            panic!("{test}: lighttpd is not installed and GIT_SWARM_REQUIRE_ALL=1 (apt-get install lighttpd)")
        }
        None => {
            println!(
                "{test}: skipped: lighttpd not installed (apt-get install lighttpd; GIT_SWARM_REQUIRE_ALL=1 fails instead)"
            );
            None
        }
    }
}

/// lighttpd serving every repository under `root` at `http://127.0.0.1:<port>/git/<repo>` through
/// `git http-backend`, pushes included (each bare repository needs `http.receivepack = true`).
pub struct Lighttpd {
    child: Option<Child>,
    pub port: u16,
    program: PathBuf,
    dir: PathBuf,
    backend: PathBuf,
    root: PathBuf,
    /// `user:password` a push must authenticate with (HTTP basic), as a forge asks; fetches stay anonymous.
    push_auth: Option<String>,
}

impl Lighttpd {
    /// Start it on a free port; `dir` holds its configuration and error log.
    pub fn start(env: &Env, program: &Path, root: &Path, dir: &Path) -> Lighttpd {
        Lighttpd::start_with(env, program, root, dir, None)
    }

    /// [`Lighttpd::start`], with pushes refused unless they authenticate as `user:password` (HTTP basic; `git
    /// http-backend` then takes them with `REMOTE_USER` set, which a pre-receive hook can read). Fetches need none.
    pub fn start_with_push_auth(env: &Env, program: &Path, root: &Path, dir: &Path, user_password: &str) -> Lighttpd {
        Lighttpd::start_with(env, program, root, dir, Some(user_password.to_string()))
    }

    fn start_with(env: &Env, program: &Path, root: &Path, dir: &Path, push_auth: Option<String>) -> Lighttpd {
        std::fs::create_dir_all(dir).expect("lighttpd dir");
        let exec_path = env.git(root, &["--exec-path"]);
        let backend = Path::new(&exec_path).join("git-http-backend");
        assert!(backend.is_file(), "no git-http-backend at {}", backend.display());
        let mut s = Lighttpd {
            child: None,
            port: 0,
            program: program.to_path_buf(),
            dir: dir.to_path_buf(),
            backend,
            root: root.to_path_buf(),
            push_auth,
        };
        for _ in 0..20 {
            s.port = free_port();
            s.write_conf();
            if let Some(c) = s.spawn(env) {
                s.child = Some(c);
                return s;
            }
        }
        panic!("could not start lighttpd; its log:\n{}", s.log());
    }

    fn conf_path(&self) -> PathBuf {
        self.dir.join("lighttpd.conf")
    }

    /// The error log (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    fn write_conf(&self) {
        let q = |p: &Path| format!("{:?}", p.display().to_string());
        // The trailing slash makes lighttpd pass the rest of the URL as PATH_INFO (`/origin.git/info/refs`).
        let backend = PathBuf::from(format!("{}/", self.backend.display()));
        let auth = match &self.push_auth {
            None => String::new(),
            Some(up) => {
                std::fs::write(self.dir.join("users"), format!("{up}\n")).expect("write the users file");
                let require =
                    r#"auth.require = ("" => ("method" => "basic", "realm" => "git", "require" => "valid-user"))"#;
                format!(
                    "auth.backend = \"plain\"\nauth.backend.plain.userfile = {users}\n\
                     $HTTP[\"querystring\"] =~ \"service=git-receive-pack\" {{ {require} }}\n\
                     $HTTP[\"url\"] =~ \"/git-receive-pack$\" {{ {require} }}\n",
                    users = q(&self.dir.join("users"))
                )
            }
        };
        let modules = if self.push_auth.is_some() {
            r#""mod_alias", "mod_setenv", "mod_auth", "mod_authn_file", "mod_cgi""#
        } else {
            r#""mod_alias", "mod_setenv", "mod_cgi""#
        };
        let conf = format!(
            r#"server.document-root = {root}
server.bind = "127.0.0.1"
server.port = {port}
server.modules = ({modules})
server.errorlog = {log}
server.max-request-size = 0
server.max-connections = 1024
alias.url = ("/git/" => {backend})
{auth}$HTTP["url"] =~ "^/git/" {{
    cgi.assign = ("" => "")
    setenv.set-environment = (
        "GIT_PROJECT_ROOT" => {root},
        "GIT_HTTP_EXPORT_ALL" => "1",
        "GIT_CONFIG_NOSYSTEM" => "1",
        "GIT_CONFIG_GLOBAL" => "/dev/null",
        "HOME" => {home}
    )
}}
"#,
            root = q(&self.root),
            port = self.port,
            log = q(&self.dir.join("error.log")),
            backend = q(&backend),
            home = q(&self.dir),
        );
        std::fs::write(self.conf_path(), conf).expect("write lighttpd.conf");
    }

    /// Start the server with the current configuration and wait until it listens.
    fn spawn(&self, env: &Env) -> Option<Child> {
        let mut cmd = Command::new(&self.program);
        env.hermetic(&mut cmd);
        let child = cmd
            .arg("-D")
            .arg("-f")
            .arg(self.conf_path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start lighttpd");
        super::listening(child, self.port, Duration::from_secs(10))
    }

    pub fn url(&self, repo: &str) -> String {
        format!("http://127.0.0.1:{}/git/{repo}", self.port)
    }

    /// Kill the server (SIGKILL): connections are refused until [`Lighttpd::restart`]. CGI processes it started
    /// run to their end.
    pub fn stop(&mut self) {
        super::kill(&mut self.child);
    }

    /// Start it again on the same port (tried for up to 30 s: the port may linger for a moment).
    pub fn restart(&mut self, env: &Env) {
        self.stop();
        match super::respawn(|| self.spawn(env)) {
            Some(c) => self.child = Some(c),
            None => panic!("could not restart lighttpd on port {}; its log:\n{}", self.port, self.log()),
        }
    }
}

impl Drop for Lighttpd {
    fn drop(&mut self) {
        self.stop();
    }
}
