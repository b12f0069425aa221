//! The sandbox of an agent run: on Linux, bubblewrap (`bwrap`). An agent runs with every permission of its CLI
//! switched off (nobody answers its questions), so what it can reach is what the runner lets it reach:
//!
//! * the file system read-only, with the runner's home, other users' homes, `/tmp`, `/var/tmp` and `/run` (sockets:
//!   an ssh agent, a Docker daemon, a session bus) hidden behind empty folders, and the clone's work tree hidden too
//!   (its untracked files: `.env`);
//! * writable: the task's work tree, its own git directory (`.git/worktrees/<id>`), the run's folder (prompt,
//!   hand-off, a fresh home, the object directory its commits go to);
//! * readable again: the clone's git directory (objects, config; `.git/swarm/`, the runner's own files, stays
//!   hidden), the toolchains of the hidden home (`~/.rustup`, `~/.cargo/bin`, `~/.nvm`, …, and the `PATH` entries
//!   under it), and what `[run] sandbox_read` names;
//! * its own pid, IPC and UTS namespaces (the run ends with everything it started: bubblewrap's `--die-with-parent`
//!   and a pid namespace whose first process is the agent), no capabilities (`--cap-drop ALL`, as root too), and
//!   the network unless `[run] network = "off"`.
//!
//! Why bubblewrap and not Landlock: Landlock can make paths read-only but cannot hide them from reads without a
//! rule per path, has no pid namespace (a daemon would outlive the run), and is missing from older kernels; bwrap
//! is a small, audited, packaged program (Debian's `bubblewrap`, on GitHub's Ubuntu runners too) that does all of
//! the above without privileges (user namespaces), as Flatpak does. Building the arguments is pure
//! ([`Spec::args`]); [`support`] probes once per process whether a sandbox starts here.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// `[run] sandbox`: whether agent runs are contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Contained when this machine can (bubblewrap works); else the runner warns at every start.
    #[default]
    Auto,
    /// Contained, or the runner refuses to run (exit 1 before the first claim).
    Required,
    /// Not contained: the agent runs with the runner's file system (the clean-ups of `runner::planted` and
    /// `agent::contain` are then the only nets).
    Off,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "required" => Ok(Mode::Required),
            "off" => Ok(Mode::Off),
            other => Err(format!(
                "[run] sandbox = '{}': use \"auto\" (the default), \"required\" or \"off\"",
                crate::escape::line(other)
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Required => "required",
            Mode::Off => "off",
        }
    }
}

/// Can agent runs be contained on this machine?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// bubblewrap at this path starts a sandbox here.
    Ready { bwrap: PathBuf, version: String },
    /// Why not (bubblewrap missing, user namespaces refused, not Linux), in a sentence, and what to do.
    Missing { why: String, hint: String },
}

impl Support {
    pub fn is_ready(&self) -> bool {
        matches!(self, Support::Ready { .. })
    }
}

/// Where bubblewrap is looked for besides `PATH`: `GIT_SWARM_BWRAP` names another one (a test points it at
/// nothing to see the runner without a sandbox).
pub(crate) const BWRAP_VAR: &str = "GIT_SWARM_BWRAP";

/// Whether a sandbox starts on this machine: probed once per process (a trial run of bubblewrap, bounded).
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

fn probe() -> Support {
    if !cfg!(target_os = "linux") {
        return Support::Missing {
            why: "agent sandboxes are built with bubblewrap, which needs Linux".into(),
            hint: "on macOS agents run uncontained: run the swarm in a container or a VM (docs/security.md)".into(),
        };
    }
    let bwrap = match std::env::var_os(BWRAP_VAR) {
        Some(p) => PathBuf::from(p),
        None => match crate::agent::preset::which("bwrap") {
            Some(p) => p,
            None => {
                return Support::Missing {
                    why: "bubblewrap (bwrap) is not installed".into(),
                    hint: "install it (`apt-get install bubblewrap`, `dnf install bubblewrap`); or set [run] sandbox \
                           = \"off\" to run agents uncontained"
                        .into(),
                };
            }
        },
    };
    let program = bwrap.to_string_lossy().into_owned();
    let version = crate::agent::preset::run_bounded(&program, &["--version"], Duration::from_secs(10))
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    // A trial of the very namespaces a run uses: user namespaces may be off (a container's seccomp, AppArmor's
    // `kernel.apparmor_restrict_unprivileged_userns` without bubblewrap's profile).
    let args = [
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "true",
    ];
    match crate::agent::preset::run_bounded(&program, &args, Duration::from_secs(20)) {
        Ok(_) => Support::Ready { bwrap, version },
        Err(why) => Support::Missing {
            why: format!("bubblewrap ({}) cannot start a sandbox here: {why}", bwrap.display()),
            hint:
                "user namespaces may be turned off (in a container, run it with --security-opt seccomp=unconfined or \
                   as root; on Ubuntu 24.04 keep the bubblewrap package's AppArmor profile); or set [run] sandbox = \
                   \"off\""
                    .into(),
        },
    }
}

/// What every agent gets of the runner's environment, whatever its role: where programs are, the locale and the
/// terminal, the proxies and certificate bundles of this network, where toolchains live, `CI`, and git swarm's
/// own knobs (`GIT_SWARM_*`: a clock offset, a transport; the runner sets the task's on top). Nothing that
/// names a credential: those come only by name, from the preset ([`crate::agent::preset::Preset::env`]) or `[roles.*]
/// env`. `HOME`, `TMPDIR` and `XDG_*` are set by [`environment`], not passed.
pub(crate) const BASE_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "USER",
    "LOGNAME",
    "SHELL",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NIX_SSL_CERT_FILE",
    "GIT_SSL_CAINFO",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "NVM_DIR",
    "NVM_BIN",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "VOLTA_HOME",
    "BUN_INSTALL",
    "DENO_DIR",
    "PNPM_HOME",
    "CI",
    "GIT_SWARM_*",
];

/// Does `name` match one of `patterns` (a name, or a prefix followed by `*`)?
pub(crate) fn matches(name: &str, patterns: &[impl AsRef<str>]) -> bool {
    patterns.iter().any(|p| {
        let p = p.as_ref();
        match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        }
    })
}

/// The agent's environment: of `from` (the runner's), only what [`BASE_ENV`] and `pass` name; then `HOME` (the
/// fresh one of a sandboxed run, else the runner's own), and for a sandboxed run `TMPDIR=/tmp` (its private one).
/// The runner's `set` (the task's variables, the identity of commits…) come on top, in [`crate::agent::run`].
pub(crate) fn environment(
    from: impl Iterator<Item = (OsString, OsString)>,
    pass: &[String],
    home: Option<&Path>,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    let mut runner_home = None;
    for (k, v) in from {
        let Some(name) = k.to_str() else { continue };
        if name == "HOME" {
            runner_home = Some(v);
            continue;
        }
        if name == "TMPDIR" || name.starts_with("XDG_") {
            // Into the runner's home or its temporary folder: only when the agent shares them.
            if home.is_none() && matches(name, &["TMPDIR", "XDG_*"]) {
                out.push((k, v));
            }
            continue;
        }
        if matches(name, BASE_ENV) || matches(name, pass) {
            out.push((k, v));
        }
    }
    match home {
        Some(h) => {
            out.push(("HOME".into(), h.as_os_str().to_os_string()));
            out.push(("TMPDIR".into(), "/tmp".into()));
        }
        None => out.extend(runner_home.map(|h| (OsString::from("HOME"), h))),
    }
    out
}

/// What one run may see and change. Paths are absolute, bound at the same path inside (what the agent writes
/// there, the runner reads at the same name: a transcript path a hook hands over).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    /// Where it starts.
    pub cwd: PathBuf,
    /// Hidden behind an empty folder, over the read-only root.
    pub hidden: Vec<PathBuf>,
    /// Shown again, read-only, inside what is hidden.
    pub readable: Vec<PathBuf>,
    /// Shown again, writable.
    pub writable: Vec<PathBuf>,
    /// Files replaced by an empty one (credentials inside a folder shown again).
    pub blanked: Vec<PathBuf>,
    /// Folders shown at another path: `(what, where, writable)` (the run's copy of the clone's git directory over
    /// it, the clone's objects read-only inside that copy).
    pub binds: Vec<(PathBuf, PathBuf, bool)>,
    /// The network stays as the runner's.
    pub network: bool,
}

/// What is always hidden besides the runner's home: other homes, temporary folders, sockets.
const HIDDEN_ALWAYS: &[&str] =
    &["/home", "/root", "/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm", "/mnt", "/media"];

/// The hidden folders an agent may write: its own temporary ones.
const PRIVATE_TMP: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// Folders of a home that hold toolchains, not secrets: shown again (read-only) when they exist.
pub(crate) const HOME_TOOLS: &[&str] = &[
    ".rustup",
    ".cargo/bin",
    ".cargo/registry",
    ".cargo/git",
    ".pyenv",
    ".nvm",
    ".volta",
    ".asdf",
    ".bun",
    ".deno",
    ".sdkman",
    ".local/bin",
    ".local/lib",
    ".local/pipx",
    ".local/share/pipx",
    ".npm-global",
    "go/bin",
    "go/pkg",
];

/// Folders of a home that hold secrets (or much else besides tools): a `PATH` entry in one is shown alone.
const HOME_SECRET_ROOTS: &[&str] =
    &[".ssh", ".gnupg", ".aws", ".azure", ".config", ".docker", ".kube", ".password-store", ".local", ".cache"];

/// The folder of a home `h` that a `PATH` entry under it belongs to (`~/.pyenv` for `~/.pyenv/shims`), unless it
/// is one of [`HOME_SECRET_ROOTS`] or the entry is that folder itself.
fn tool_root(h: &Path, entry: &Path) -> Option<PathBuf> {
    let rel = entry.strip_prefix(h).ok()?;
    let first = rel.components().next()?;
    let name = first.as_os_str().to_str()?;
    (rel.components().count() > 1 && !HOME_SECRET_ROOTS.contains(&name)).then(|| h.join(name))
}

/// Files inside the folders above that hold credentials.
const HOME_SECRETS: &[&str] = &[".cargo/credentials", ".cargo/credentials.toml"];

impl Spec {
    /// The rules for a run whose work tree is `cwd`, in a clone whose work tree (if any) is `clone_top`, with the
    /// runner's home `home`: `writable` (the work tree, the run's folder…) and `readable` paths on top of the
    /// defaults, and `binds` (see [`Spec::binds`]). Paths that do not exist are left out (a mount needs its source).
    pub fn new(
        cwd: &Path,
        home: Option<&Path>,
        clone_top: Option<&Path>,
        writable: &[PathBuf],
        readable: &[PathBuf],
        binds: Vec<(PathBuf, PathBuf, bool)>,
        network: bool,
    ) -> Spec {
        let mut hidden: Vec<PathBuf> = HIDDEN_ALWAYS.iter().map(PathBuf::from).collect();
        hidden.extend(home.map(Path::to_path_buf));
        // The user's checkout (its untracked files).
        hidden.extend(clone_top.map(Path::to_path_buf));
        let mut shown: Vec<PathBuf> = Vec::new();
        // What /etc/resolv.conf points into /run for (systemd-resolved): DNS must keep working.
        if let Ok(target) = std::fs::canonicalize("/etc/resolv.conf")
            && let Some(dir) = target.parent()
            && (dir.starts_with("/run") || dir.starts_with("/var/run"))
        {
            shown.push(dir.to_path_buf());
        }
        // The homes that are hidden: the runner's, root's, every user's under /home. Their toolchains are shown again
        // (read-only), their credential files inside those blanked.
        let mut homes: Vec<PathBuf> = home.map(Path::to_path_buf).into_iter().collect();
        homes.push(PathBuf::from("/root"));
        homes.extend(std::fs::read_dir("/home").into_iter().flatten().flatten().map(|e| e.path()));
        let mut blanked = Vec::new();
        for h in &homes {
            shown.extend(HOME_TOOLS.iter().map(|t| h.join(t)));
            blanked.extend(HOME_SECRETS.iter().map(|f| h.join(f)).filter(|f| f.is_file()));
        }
        // Every PATH entry under a hidden home, with the tool's folder it is in (`~/.pyenv` for `~/.pyenv/shims`,
        // whose programs need the rest of it) unless that folder is one that keeps secrets; and this binary's folder
        // (the hooks call it).
        if let Some(path) = std::env::var_os("PATH") {
            for entry in std::env::split_paths(&path).filter(|p| p.is_absolute()) {
                if let Some(root) = homes.iter().find_map(|h| tool_root(h, &entry)) {
                    shown.push(root);
                }
                shown.push(entry);
            }
        }
        if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
            shown.push(dir);
        }
        shown.extend(readable.iter().cloned());
        // Mounts are made on real folders: a path through a symbolic link (`/var/run` → `/run`) is taken where it
        // leads, and a path that does not exist is left out.
        let real = |p: &Path| std::fs::canonicalize(p).ok();
        let mut hidden: Vec<PathBuf> = hidden
            .iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
            .filter_map(|p| real(p))
            .collect();
        hidden.sort();
        hidden.dedup();
        let under_hidden = |p: &Path| hidden.iter().any(|h| p.starts_with(h));
        let mut readable: Vec<PathBuf> =
            shown.iter().filter(|p| p.is_absolute()).filter_map(|p| real(p)).filter(|p| under_hidden(p)).collect();
        readable.sort();
        readable.dedup();
        let mut writable: Vec<PathBuf> = writable.iter().filter_map(|p| real(p)).collect();
        writable.sort();
        writable.dedup();
        let blanked = blanked.iter().filter_map(|p| real(p)).collect();
        let cwd = real(cwd).unwrap_or_else(|| cwd.to_path_buf());
        // A bind's place may exist only inside (a mount point in the run's copy of the git directory).
        let place = |p: &Path| real(p).or_else(|| Some(real(p.parent()?)?.join(p.file_name()?)));
        let binds = binds.into_iter().filter_map(|(from, to, rw)| Some((real(&from)?, place(&to)?, rw))).collect();
        Spec { cwd, hidden, readable, writable, blanked, binds, network }
    }

    /// The bubblewrap arguments before `--` and the command. Mounts are made shallow before deep, and at one depth
    /// hidden before read-only before writable: a writable work tree inside a hidden cache folder is there, and
    /// `.git/swarm` hidden inside a `.git` shown again stays hidden.
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = [
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        if !self.network {
            a.push("--unshare-net".into());
        }
        a.extend(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"].map(OsString::from));
        // (where, what, kind): 0 hidden, 1 read-only, 2 writable.
        let mut mounts: Vec<(&PathBuf, &PathBuf, u8)> = self.hidden.iter().map(|p| (p, p, 0)).collect();
        mounts.extend(self.readable.iter().map(|p| (p, p, 1)));
        mounts.extend(self.writable.iter().map(|p| (p, p, 2)));
        mounts.extend(self.binds.iter().map(|(from, to, rw)| (to, from, if *rw { 2 } else { 1 })));
        mounts.sort_by_key(|(to, _, kind)| (to.components().count(), *kind));
        for (to, from, kind) in mounts {
            match kind {
                0 => a.extend(["--tmpfs".into(), to.into()]),
                1 => a.extend(["--ro-bind".into(), from.into(), to.into()]),
                _ => a.extend(["--bind".into(), from.into(), to.into()]),
            }
        }
        for f in &self.blanked {
            a.extend(["--ro-bind".into(), "/dev/null".into(), f.into()]);
        }
        // What is hidden is an empty folder the agent cannot write either (what it wrote there would look like it
        // reached the runner's home or the user's checkout), but for the private temporary folders.
        for p in &self.hidden {
            if !PRIVATE_TMP.iter().any(|t| p == Path::new(t)) {
                a.extend(["--remount-ro".into(), p.into()]);
            }
        }
        a.push("--chdir".into());
        a.push(self.cwd.clone().into());
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_an_allow_list() {
        let runner: Vec<(OsString, OsString)> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("LC_ALL", "C"),
            ("GITHUB_TOKEN", "ghs_secret"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("MY_AGENT_FLAG", "1"),
            ("TMPDIR", "/var/tmp/x"),
            ("XDG_CONFIG_HOME", "/root/.config"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
        let names = |env: &[(OsString, OsString)]| -> Vec<String> {
            env.iter().map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy())).collect()
        };
        let pass = vec!["ANTHROPIC_*".to_string(), "MY_AGENT_FLAG".to_string()];
        let sandboxed = names(&environment(runner.clone().into_iter(), &pass, Some(Path::new("/run/x/home"))));
        assert_eq!(
            sandboxed,
            [
                "PATH=/usr/bin",
                "LC_ALL=C",
                "ANTHROPIC_API_KEY=sk-ant",
                "MY_AGENT_FLAG=1",
                "HOME=/run/x/home",
                "TMPDIR=/tmp"
            ]
        );
        let open = names(&environment(runner.into_iter(), &[], None));
        assert_eq!(
            open,
            ["PATH=/usr/bin", "LC_ALL=C", "TMPDIR=/var/tmp/x", "XDG_CONFIG_HOME=/root/.config", "HOME=/root"]
        );
    }

    #[test]
    fn modes_parse_and_name_themselves() {
        for m in [Mode::Auto, Mode::Required, Mode::Off] {
            assert_eq!(Mode::parse(m.as_str()), Ok(m));
        }
        assert!(Mode::parse("on").expect_err("not a mode").contains("\"required\""));
    }

    #[test]
    fn the_work_tree_is_writable_inside_what_is_hidden_and_shallow_mounts_come_first() {
        let root = tempfile::tempdir().expect("dir");
        let home = root.path().join("home");
        let wt = home.join(".cache/git-swarm/trees/w1");
        let run = home.join(".cache/git-swarm/run/w1");
        let clone = root.path().join("clone");
        let git = clone.join(".git");
        for d in [&wt, &run, &git.join("swarm"), &git.join("worktrees/w1"), &home.join(".rustup"), &home.join(".ssh")] {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::create_dir_all(home.join(".cargo")).expect("dir");
        std::fs::write(home.join(".cargo/credentials.toml"), "token").expect("write");
        let shadow = run.join("git");
        for d in [&shadow.join("worktrees/w1"), &shadow.join(".objects")] {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::create_dir_all(git.join("objects")).expect("dir");
        let binds = vec![
            (shadow.clone(), git.clone(), true),
            (git.join("objects"), git.join(".objects"), false),
            (git.join("worktrees/w1"), git.join("worktrees/w1"), true),
        ];
        let spec = Spec::new(
            &wt,
            Some(&home),
            Some(&clone),
            &[wt.clone(), run.clone(), root.path().join("nowhere")],
            &[],
            binds,
            false,
        );
        assert!(spec.hidden.contains(&home) && spec.hidden.contains(&clone), "{spec:?}");
        assert!(spec.readable.contains(&home.join(".rustup")), "{spec:?}");
        assert!(!spec.readable.iter().any(|p| p.ends_with(".ssh")), "{spec:?}");
        assert!(!spec.writable.iter().any(|p| p.ends_with("nowhere")), "a path that does not exist: {spec:?}");
        assert_eq!(spec.blanked, vec![home.join(".cargo/credentials.toml")]);
        let args: Vec<String> = spec.args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let at = |kind: &str, p: &Path| {
            args.windows(2)
                .position(|w| w[0] == kind && w[1] == p.to_string_lossy())
                .unwrap_or_else(|| panic!("{kind} {}: {args:?}", p.display()))
        };
        // The home is hidden before the work tree inside it is bound; the run's copy of the git directory goes over
        // the clone's, and the objects (read-only) and the work tree's own git directory (writable) inside it.
        assert!(at("--tmpfs", &home) < at("--bind", &wt));
        assert!(at("--tmpfs", &clone) < at("--bind", &shadow));
        let over = args
            .windows(3)
            .position(|w| w[0] == "--bind" && w[1] == shadow.to_string_lossy() && w[2] == git.to_string_lossy());
        let objects =
            args.windows(3).position(|w| w[0] == "--ro-bind" && w[2] == git.join(".objects").to_string_lossy());
        assert!(over.is_some() && objects.is_some() && over < objects, "{args:?}");
        assert!(over < Some(at("--bind", &git.join("worktrees/w1"))), "{args:?}");
        assert!(args.contains(&"--unshare-net".to_string()) && args.contains(&"--cap-drop".to_string()));
        assert_eq!(args.last().map(String::as_str), Some(wt.to_str().expect("utf-8")));
    }
}
