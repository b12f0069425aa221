//! Test harness: hermetic git environments, bare remotes, clones, the built binary, and a `git daemon` on
//! loopback. Every test gets its own temp HOME and git config; nothing of the user's setup leaks in.
#![allow(dead_code)]

pub mod http;
pub mod model_api;
pub mod procs;
pub mod serve;
pub mod sshd;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_git-swarm");

/// What a test's commands get of the suite's own environment ([`Env::hermetic`]).
const PASSED: &[&str] = &["PATH", "TMPDIR", "RUST_BACKTRACE", "RUST_LIB_BACKTRACE", "LLVM_PROFILE_FILE"];

/// The scripted agent of `tests/agents/scripted.sh` as an `exec` command.
pub fn scripted_agent() -> String {
    format!("sh '{}/tests/agents/scripted.sh'", env!("CARGO_MANIFEST_DIR"))
}

pub struct Env {
    pub root: tempfile::TempDir,
    pub home: PathBuf,
    pub gitconfig: PathBuf,
}

/// What a command printed and how it ended.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn from(o: Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Assert exit 0 and return self.
    #[track_caller]
    pub fn ok(self) -> Out {
        assert_eq!(self.code, 0, "expected success\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        self
    }

    /// Assert this exit code and return self.
    #[track_caller]
    pub fn code(self, want: i32) -> Out {
        assert_eq!(self.code, want, "expected exit {want}\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        self
    }

    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr: {}", self.stdout, self.stderr))
    }

    /// stdout without the trailing newline.
    pub fn line(&self) -> String {
        self.stdout.trim_end().to_string()
    }
}

impl Env {
    pub fn new() -> Env {
        // Under the build's own temporary folder, not /tmp: an agent's sandbox hides /tmp (its own is private), and
        // the agents, scripts and remotes a test writes must stay where a sandboxed agent can read them.
        let root = tempfile::Builder::new()
            .prefix("git-swarm-test")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("temp dir");
        // Open to other users, as a user's projects folder is: a root runner's agents run as nobody, and reach
        // their work trees, the clone's objects and the test's agent scripts through it.
        std::fs::set_permissions(root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let home = root.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let gitconfig = home.join(".gitconfig");
        // The scripted agents' own variables reach them as a clone's agent's do: named in `env` of a role (the
        // agent's environment is an allow-list, docs/agents.md).
        std::fs::write(
            &gitconfig,
            "[user]\n\tname = Tester\n\temail = tester@example.com\n[init]\n\tdefaultBranch = main\n[protocol \"file\"]\n\tallow = always\n[safe]\n\tdirectory = *\n[swarm \"roles.default\"]\n\tenv = SCRIPTED_*, STOP_CMD, OUT, CHAOS_*\n",
        )
        .expect("gitconfig");
        Env { root, home, gitconfig }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// The environment of everything a test runs: nothing of the one the suite runs in but `PATH` (where git and
    /// the tools are), `TMPDIR` and a Rust backtrace switch — no `GIT_*` of a hook or an agent that runs `cargo
    /// test` (its task, its `GIT_DIR`), no `XDG_CONFIG_HOME`, no token (`GH_TOKEN`, `GITHUB_API_URL`), no
    /// `IS_SANDBOX` —, then the test's own home and git config, a fixed author date, and what every test assumes.
    pub fn hermetic(&self, cmd: &mut Command) {
        cmd.env_clear();
        for key in PASSED {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.env("HOME", &self.home)
            // The test's folders are under the build's, inside this very repository: git must not find it from them.
            .env("GIT_CEILING_DIRECTORIES", env!("CARGO_TARGET_TMPDIR"))
            .env("GIT_CONFIG_GLOBAL", &self.gitconfig)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .env("LC_ALL", "C")
            .env("GIT_SWARM_HTTP_RETRY_BASE_MS", "10")
            // Runners trust the shared settings a test writes from whichever clone; `tests/open_world.rs` tests
            // the trust boundary itself with this removed.
            .env("GIT_SWARM_TRUST", "any")
            .stdin(Stdio::null());
    }

    /// `program` in the test's environment ([`Env::hermetic`]).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.hermetic(&mut cmd);
        cmd
    }

    /// Run git in `dir`; panics on failure.
    #[track_caller]
    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        self.hermetic(&mut cmd);
        let o = cmd.current_dir(dir).args(args).output().expect("run git");
        let out = Out::from(o);
        assert_eq!(out.code, 0, "git {args:?} in {}: {}", dir.display(), out.stderr);
        out.stdout.trim_end().to_string()
    }

    /// Run git in `dir`, whatever it returns.
    pub fn git_out(&self, dir: &Path, args: &[&str]) -> Out {
        let mut cmd = Command::new("git");
        self.hermetic(&mut cmd);
        Out::from(cmd.current_dir(dir).args(args).output().expect("run git"))
    }

    /// Run git in `dir` with extra environment (a `PATH` that finds `git-swarm` for hooks, …), whatever it returns.
    pub fn git_env(&self, dir: &Path, extra: &[(&str, &str)], args: &[&str]) -> Out {
        let mut cmd = Command::new("git");
        self.hermetic(&mut cmd);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        Out::from(cmd.current_dir(dir).args(args).output().expect("run git"))
    }

    /// A bare repository `<name>.git` with one commit on main.
    pub fn bare_remote(&self, name: &str) -> PathBuf {
        let bare = self.path(&format!("{name}.git"));
        let seed = self.path(&format!("{name}-seed"));
        self.git(self.root.path(), &["init", "-q", "--bare", bare.to_str().expect("utf-8 path")]);
        self.git(self.root.path(), &["init", "-q", seed.to_str().expect("utf-8 path")]);
        std::fs::write(seed.join("README.md"), "hello\n").expect("write");
        self.git(&seed, &["add", "README.md"]);
        self.git(&seed, &["commit", "-q", "-m", "root"]);
        self.git(&seed, &["push", "-q", bare.to_str().expect("utf-8"), "HEAD:refs/heads/main"]);
        bare
    }

    /// Clone `url` (a path or URL) into `<name>`.
    pub fn clone(&self, url: &str, name: &str) -> PathBuf {
        let dir = self.path(name);
        self.git(self.root.path(), &["clone", "-q", url, dir.to_str().expect("utf-8")]);
        dir
    }

    /// A `git swarm` command in `dir`.
    pub fn cmd(&self, dir: &Path) -> Command {
        let mut cmd = Command::new(BIN);
        self.hermetic(&mut cmd);
        cmd.current_dir(dir);
        cmd
    }

    /// Run `git swarm args…` in `dir`.
    pub fn sw(&self, dir: &Path, args: &[&str]) -> Out {
        Out::from(self.cmd(dir).args(args).output().expect("run git-swarm"))
    }

    /// Start `git swarm --agent <agent> args…` in `dir` with extra environment, its output piped.
    pub fn spawn(&self, dir: &Path, agent: &str, extra_env: &[(&str, &str)], args: &[&str]) -> Child {
        let mut cmd = self.cmd(dir);
        cmd.args(["--agent", agent]).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("spawn git-swarm")
    }

    /// Run `git swarm args…` in `dir` with extra environment.
    pub fn sw_env(&self, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Out {
        let mut cmd = self.cmd(dir);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Out::from(cmd.args(args).output().expect("run git-swarm"))
    }

    /// Where the runners of the clone at `clone` keep their work trees and run files, as they see it (the test's
    /// HOME, no `XDG_CACHE_HOME`): the binary says (`git swarm __places`).
    pub fn places(&self, clone: &Path) -> Places {
        let doc = self.sw(clone, &["__places"]).ok().json();
        let path = |k: &str| PathBuf::from(doc[k].as_str().unwrap_or_else(|| panic!("__places: no {k} in {doc}")));
        Places { home: path("home"), base: path("base") }
    }

    /// The commit a ref points at in a repository, if any.
    pub fn rev(&self, git_dir: &Path, refname: &str) -> Option<String> {
        let o = self.git_out(git_dir, &["rev-parse", "-q", "--verify", refname]);
        (o.code == 0).then(|| o.stdout.trim().to_string())
    }

    /// A fresh bare remote and `n` clones of it named `c0…`, with the swarm initialised from the first with
    /// `config` as its `swarm.toml`.
    pub fn swarm_with_config(
        &self,
        url_of: impl Fn(&Path) -> String,
        n: usize,
        config: &str,
    ) -> (PathBuf, Vec<PathBuf>) {
        let bare = self.bare_remote("origin");
        let url = url_of(&bare);
        let clones: Vec<PathBuf> = (0..n).map(|i| self.clone(&url, &format!("c{i}"))).collect();
        let cfg = self.path("swarm.toml");
        std::fs::write(&cfg, config).expect("config");
        self.sw(&clones[0], &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
        (bare, clones)
    }

    /// A fresh bare remote and `n` clones of it named `c0…`, with the swarm initialised from the first.
    pub fn swarm_with_clones(&self, url_of: impl Fn(&Path) -> String, n: usize) -> (PathBuf, Vec<PathBuf>) {
        let bare = self.bare_remote("origin");
        let url = url_of(&bare);
        let clones: Vec<PathBuf> = (0..n).map(|i| self.clone(&url, &format!("c{i}"))).collect();
        self.sw(&clones[0], &["init"]).ok();
        (bare, clones)
    }
}

/// Where a clone's runners keep their things (the binary's `runner::Places`, as `git swarm __places` prints it):
/// its git directory's `swarm/` folder, and the work trees and run folders in the cache folder.
pub struct Places {
    #[allow(dead_code)]
    pub home: PathBuf,
    pub base: PathBuf,
}

impl Places {
    pub fn trees(&self) -> PathBuf {
        self.base.join("trees")
    }

    pub fn worktree(&self, agent: &str) -> PathBuf {
        self.trees().join(agent)
    }

    pub fn pid_file(&self, agent: &str) -> PathBuf {
        self.trees().join(format!("{agent}.pid"))
    }
}

/// Run one cycle to the judge's `stop` in the clone `c` of a swarm whose roles are the scripted agent: a planner
/// files the goal's one task (from `plan`, a task file it writes), a worker does it, the plan is done, the judge
/// says stop. `plan` stays set in `SCRIPTED_PLAN` for later rounds; the environment is returned for them.
pub fn cycle_to_stop(env: &Env, c: &Path, plan: &Path) -> [(&'static str, String); 1] {
    std::fs::write(plan, "[[task]]\ntitle = \"the first goal's task\"\nbody = \"@write a.txt a\"\n").expect("plan");
    let plan_env = [("SCRIPTED_PLAN", plan.to_str().expect("utf-8").to_string())];
    let e: Vec<(&str, &str)> = plan_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.sw_env(c, &e, &["--agent", "p", "run", "planner", "--once", "--goal", "first goal"]).ok();
    // (`--until-idle` would wait: the plan task is ready for a planner all along.)
    env.sw(c, &["--agent", "w", "run", "worker", "--once"]).ok();
    env.sw(c, &["--agent", "p", "run", "planner", "--once"]).ok();
    env.sw(c, &["--agent", "j", "run", "judge", "--once"]).ok();
    plan_env
}

/// `git daemon` serving a directory on a free loopback port, with pushes enabled; stopped on drop. The chaos tests
/// stop it and start it again on the same port (a remote that is unreachable for a while).
pub struct Daemon {
    child: Option<Child>,
    pub port: u16,
    base: PathBuf,
    program: PathBuf,
    pushes: bool,
}

impl Daemon {
    pub fn start(env: &Env, base: &Path) -> Daemon {
        Daemon::start_with(env, base, true)
    }

    /// A daemon that serves fetches only (no `receive-pack`): a read-only remote.
    #[allow(dead_code)]
    pub fn start_read_only(env: &Env, base: &Path) -> Daemon {
        Daemon::start_with(env, base, false)
    }

    fn start_with(env: &Env, base: &Path, pushes: bool) -> Daemon {
        // Run git-daemon itself, not `git daemon`: the `git` wrapper would leave its git-daemon child behind
        // when killed.
        let exec_path = env.git(base, &["--exec-path"]);
        let program = Path::new(&exec_path).join("git-daemon");
        for _ in 0..20 {
            let port = free_port();
            if let Some(child) = Daemon::spawn_on(env, &program, base, port, pushes) {
                return Daemon { child: Some(child), port, base: base.to_path_buf(), program, pushes };
            }
        }
        panic!("could not start git daemon");
    }

    /// Start the daemon on `port` and wait until it listens; `None` when it exits (port taken) or never listens.
    fn spawn_on(env: &Env, program: &Path, base: &Path, port: u16, pushes: bool) -> Option<Child> {
        let mut cmd = Command::new(program);
        env.hermetic(&mut cmd);
        if pushes {
            cmd.arg("--enable=receive-pack");
        }
        let child = cmd
            .args(["--reuseaddr", "--listen=127.0.0.1", "--export-all"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start git daemon");
        listening(child, port, Duration::from_secs(5))
    }

    pub fn url(&self, repo: &str) -> String {
        format!("git://127.0.0.1:{}/{repo}", self.port)
    }

    /// Kill the daemon (SIGKILL): new connections are refused; the ones it already forked run to their end.
    pub fn stop(&mut self) {
        kill(&mut self.child);
    }

    /// Start it again on the same port (tried for up to 30 s: the port may linger for a moment).
    pub fn restart(&mut self, env: &Env) {
        self.stop();
        let (program, base, port, pushes) = (&self.program, &self.base, self.port, self.pushes);
        let child = respawn(|| Daemon::spawn_on(env, program, base, port, pushes))
            .unwrap_or_else(|| panic!("could not restart git daemon on port {port}"));
        self.child = Some(child);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wait until `f` holds, polling; fail the test naming `what` after `secs` seconds.
#[track_caller]
pub fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}: not within {secs}s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run `git swarm --agent <agent> run worker --once` in `dir` until it finds a task (exit 0; 3 is nothing ready yet,
/// anything else fails the test), for at most `secs`: a takeover once an expired lease can be claimed.
#[track_caller]
pub fn work_once_when_ready(env: &Env, dir: &Path, agent: &str, secs: u64) -> Out {
    let start = Instant::now();
    loop {
        let o = env.sw(dir, &["--agent", agent, "run", "worker", "--once"]);
        if o.code == 0 {
            return o;
        }
        assert_eq!(o.code, 3, "{}", o.stderr);
        assert!(start.elapsed() < Duration::from_secs(secs), "{agent} found nothing to do within {secs}s");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Wait for a child at most `secs`; kill it and fail the test past that.
#[track_caller]
pub fn finish(mut child: Child, secs: u64, what: &str) -> Out {
    use std::io::Read;
    let start = Instant::now();
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code().unwrap_or(-1);
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            let e = t_err.join().unwrap_or_default();
            panic!("{what} did not finish within {secs}s; stderr:\n{e}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Out { code, stdout: t_out.join().unwrap_or_default(), stderr: t_err.join().unwrap_or_default() }
}

/// Wait until a server just started as `child` accepts connections on `port`: the child, or `None` when it died
/// or did not listen within `within` (then it is killed).
/// SIGKILL a server and reap it (nothing when it is not running).
pub fn kill(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Start a server again on the port it had, trying for up to 30 s (a port may linger for a moment after a kill).
pub fn respawn(mut spawn: impl FnMut() -> Option<Child>) -> Option<Child> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(c) = spawn() {
            return Some(c);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

pub fn listening(mut child: Child, port: u16, within: Duration) -> Option<Child> {
    let start = Instant::now();
    while start.elapsed() < within {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(child);
        }
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// `file://` URL of a path.
pub fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

/// A plain path.
pub fn path_url(p: &Path) -> String {
    p.display().to_string()
}

/// The program `tool` on the PATH, or None with a line saying why the test is skipped; a failure instead when
/// `GIT_SWARM_REQUIRE_ALL=1` (CI, where `.ci/run` installs it: `install` says how).
pub fn tool_or_skip(test: &str, tool: &str, install: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.is_file());
    match found {
        Some(p) => Some(p),
        None if std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1") => {
            panic!("{test}: {tool} is not installed and GIT_SWARM_REQUIRE_ALL=1 ({install})")
        }
        None => {
            println!("{test}: skipped: {tool} not installed ({install}; GIT_SWARM_REQUIRE_ALL=1 fails instead)");
            None
        }
    }
}

/// Is a sandbox possible on this machine? Without bubblewrap the tests that need it say so (and fail under
/// `GIT_SWARM_REQUIRE_ALL=1`, which `.ci/run` sets).
pub fn sandbox_or_skip(test: &str) -> bool {
    let ok = Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-pid", "--dev", "/dev", "--proc", "/proc", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("GIT_SWARM_REQUIRE_ALL").is_none(), "{test}: bubblewrap does not work here");
        println!("{test}: skipped: bubblewrap does not work here");
    }
    ok
}

/// Give `path` and everything in it to `uid`:`gid` (no link followed).
pub fn chown_all(path: &Path, uid: u32, gid: u32) {
    let _ = std::os::unix::fs::lchown(path, Some(uid), Some(gid));
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
        && let Ok(rd) = std::fs::read_dir(path)
    {
        for e in rd.flatten() {
            chown_all(&e.path(), uid, gid);
        }
    }
}

/// A hostile agent's report holds a line per door, `<door>: <what the agent got>`: what it got at `name`.
#[track_caller]
pub fn door<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("the agent did not report {name}:\n{report}"))
}
