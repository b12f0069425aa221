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

use crate::environment::Environment;

/// `[run] sandbox`: whether agent runs are contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mode {
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
    pub(crate) fn parse(s: &str) -> Result<Mode, String> {
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

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Required => "required",
            Mode::Off => "off",
        }
    }
}

/// Can agent runs be contained on this machine?
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Support {
    /// bubblewrap at this path starts a sandbox here; its agents run as `user`.
    Ready { bwrap: PathBuf, version: String, user: AgentUser },
    /// Why not (bubblewrap missing, user namespaces refused, not Linux), in a sentence, and what to do.
    Missing { why: String, hint: String },
}

/// Who an agent is in its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentUser {
    /// The runner is not root: the agent is the runner's own uid (what that uid can read outside the folders the
    /// sandbox hides, the agent can read: docs/security.md).
    Runner,
    /// The runner is root: the agent runs as this unprivileged uid and gid (`nobody`), after bubblewrap made its
    /// mounts as root ([`crate::agent::enter`]).
    Dropped { uid: u32, gid: u32 },
    /// The runner is root and cannot start an agent under another uid here (bubblewrap only works in a user
    /// namespace, as in a container without `CAP_SYS_ADMIN`): the agent keeps uid 0 and reads every file root owns
    /// that the sandbox does not hide. `doctor` says so; `sandbox = "required"` refuses it.
    Root,
}

impl Support {
    pub(crate) fn is_ready(&self) -> bool {
        matches!(self, Support::Ready { .. })
    }

    /// What is still open where agent runs are contained, in a sentence (`None`: nothing the design leaves open).
    pub(crate) fn open_door(&self) -> Option<String> {
        match self {
            Support::Ready { user: AgentUser::Root, .. } => Some(
                "the runner is root and bubblewrap cannot start an agent under another uid here (it needs a user \
                 namespace, as in a container without CAP_SYS_ADMIN): agents run as uid 0 in their sandbox and can \
                 read every file root owns that the sandbox does not hide"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// Whether a sandbox starts on this machine: probed once per process (a trial run of bubblewrap, bounded), with
/// `env`, the process's environment (`GIT_SWARM_BWRAP`, `PATH`).
pub(crate) fn support(env: &Environment) -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| probe(env))
}

/// The uid and gid an agent runs as when the runner is root: `nobody`'s, else 65534.
pub(crate) fn nobody() -> (u32, u32) {
    nix::unistd::User::from_name("nobody").ok().flatten().map_or((65534, 65534), |u| (u.uid.as_raw(), u.gid.as_raw()))
}

/// This binary, as a trampoline an agent starts through ([`crate::agent::enter`]); `None` when this process is not
/// `git-swarm` (a test of the library).
pub(crate) fn trampoline() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("git-swarm")))
}

fn probe(env: &Environment) -> Support {
    if !cfg!(target_os = "linux") {
        return Support::Missing {
            why: "agent sandboxes are built with bubblewrap, which needs Linux".into(),
            hint: "on macOS agents run uncontained: run the swarm in a container or a VM (docs/security.md)".into(),
        };
    }
    let bwrap = match env.bwrap() {
        Some(p) => p.to_path_buf(),
        None => match crate::agent::preset::which("bwrap", env) {
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
    let version = crate::agent::preset::run_bounded(&program, &["--version"], Duration::from_secs(10), env)
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    // A trial of the very namespaces a run uses: user namespaces may be off (a container's seccomp, AppArmor's
    // `kernel.apparmor_restrict_unprivileged_userns` without bubblewrap's profile).
    let trial = |user: Option<(u32, u32)>| -> Result<(), String> {
        let mut args: Vec<String> =
            ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"].map(String::from).to_vec();
        args.extend(caps(user).into_iter().map(|a| a.to_string_lossy().into_owned()));
        args.extend(
            ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--"].map(String::from),
        );
        match user {
            Some((uid, gid)) => {
                let exe = trampoline().ok_or("this program cannot find its own binary")?;
                let enter = crate::agent::enter::Enter {
                    user: Some((uid, gid)),
                    argv: ["sh", "-c", &format!("test \"$(id -u)\" = {uid}")].map(Into::into).to_vec(),
                    ..Default::default()
                };
                args.push(exe.to_string_lossy().into_owned());
                args.extend(enter.args().into_iter().map(|a| a.to_string_lossy().into_owned()));
            }
            None => args.push("true".into()),
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::agent::preset::run_bounded(&program, &args, Duration::from_secs(20), env)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let root = nix::unistd::geteuid().is_root();
    if root && trial(Some(nobody())).is_ok() {
        let (uid, gid) = nobody();
        return Support::Ready { bwrap, version, user: AgentUser::Dropped { uid, gid } };
    }
    match trial(None) {
        Ok(()) => Support::Ready { bwrap, version, user: if root { AgentUser::Root } else { AgentUser::Runner } },
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

/// The capabilities of a sandbox's first process: none, or — when it is to change its uid (a root runner's agent)
/// — only the two that `setuid`/`setgid` need, which the change of uid then clears.
fn caps(user: Option<(u32, u32)>) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["--cap-drop".into(), "ALL".into()];
    if user.is_some() {
        a.extend(["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"].map(OsString::from));
    }
    a
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
pub(crate) struct Spec {
    /// Where it starts.
    pub cwd: PathBuf,
    /// Hidden behind an empty folder, over the read-only root.
    pub hidden: Vec<PathBuf>,
    /// Shown again, read-only, inside what is hidden.
    pub readable: Vec<PathBuf>,
    /// Shown again, writable.
    pub writable: Vec<PathBuf>,
    /// Files replaced by an empty one (credentials inside a folder shown again, or anywhere a tool keeps them).
    pub blanked: Vec<PathBuf>,
    /// The network stays as the runner's.
    pub network: bool,
    /// The uid and gid the agent runs as, when not the runner's (a root runner's agent: [`AgentUser::Dropped`]).
    pub user: Option<(u32, u32)>,
    /// An empty regular file of the runner's, mounted over what is blanked (`/dev/null` where there is none: bubblewrap
    /// mounts no device there, so a tool that reads the file gets an error rather than nothing).
    pub empty: Option<PathBuf>,
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
    /// The rules for a run whose work tree is `cwd`, with the runner's home `home`: `hide` (the user's checkout,
    /// the clone's git directory, the folder of every runner's work trees) on top of the defaults, then `writable`
    /// (the run's work tree and folder) and `readable` (the clone's objects, `[run] sandbox_read`) shown again.
    /// Paths that do not exist are left out (a mount needs its source).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        cwd: &Path,
        home: Option<&Path>,
        hide: &[PathBuf],
        writable: &[PathBuf],
        readable: &[PathBuf],
        network: bool,
        user: Option<(u32, u32)>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Spec {
        let mut hidden: Vec<PathBuf> = HIDDEN_ALWAYS.iter().map(PathBuf::from).collect();
        hidden.extend(home.map(Path::to_path_buf));
        hidden.extend(hide.iter().cloned());
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
        // Where tools keep credentials outside a home (`CARGO_HOME=/opt/cargo`, `DOCKER_CONFIG`, `KUBECONFIG`…):
        // blanked or hidden wherever they are.
        let (files, folders) = credential_paths(env);
        blanked.extend(files.into_iter().filter(|f| f.exists() && !f.is_dir()));
        hidden.extend(folders);
        // Every PATH entry under a hidden home, with the tool's folder it is in (`~/.pyenv` for `~/.pyenv/shims`,
        // whose programs need the rest of it) unless that folder is one that keeps secrets; and this binary's folder
        // (the hooks call it).
        if let Some(path) = env("PATH") {
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
        let mut blanked: Vec<PathBuf> = blanked.iter().filter_map(|p| real(p)).collect();
        blanked.sort();
        blanked.dedup();
        let cwd = real(cwd).unwrap_or_else(|| cwd.to_path_buf());
        Spec { cwd, hidden, readable, writable, blanked, network, user, empty: None }
    }

    /// The bubblewrap arguments before `--` and the command. Mounts are made shallow before deep, and at one depth
    /// hidden before read-only before writable: a writable work tree inside a hidden cache folder is there, and
    /// `.git/swarm` hidden inside a `.git` shown again stays hidden. Every folder bubblewrap makes on the way to a
    /// mount is `0755`, so that an agent running as another uid than bubblewrap's can walk to what it is shown.
    pub(crate) fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> =
            ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
                .iter()
                .map(OsString::from)
                .collect();
        a.extend(caps(self.user));
        if !self.network {
            a.push("--unshare-net".into());
        }
        a.extend(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"].map(OsString::from));
        // (where, kind): 0 hidden, 1 read-only, 2 writable.
        let mut mounts: Vec<(&PathBuf, u8)> = self.hidden.iter().map(|p| (p, 0)).collect();
        mounts.extend(self.readable.iter().map(|p| (p, 1)));
        mounts.extend(self.writable.iter().map(|p| (p, 2)));
        mounts.sort_by_key(|(to, kind)| (to.components().count(), *kind));
        let mut made: Vec<&Path> = Vec::new();
        for (to, kind) in mounts {
            // The folders between the hidden one above it and the mount point: made, open to every uid.
            if let Some(top) =
                self.hidden.iter().filter(|h| to.starts_with(h) && *h != to).max_by_key(|h| h.as_os_str().len())
            {
                let mut between: Vec<&Path> = to.ancestors().skip(1).take_while(|p| *p != top.as_path()).collect();
                between.reverse();
                for p in between {
                    if !made.contains(&p) {
                        a.extend(["--perms".into(), "0755".into(), "--dir".into(), p.into()]);
                        made.push(p);
                    }
                }
            }
            match kind {
                0 => {
                    let private = PRIVATE_TMP.iter().any(|t| to == Path::new(t));
                    a.extend([
                        "--perms".into(),
                        if private { "1777" } else { "0755" }.into(),
                        "--tmpfs".into(),
                        to.into(),
                    ]);
                }
                1 => a.extend(["--ro-bind".into(), to.into(), to.into()]),
                _ => a.extend(["--bind".into(), to.into(), to.into()]),
            }
        }
        let empty: OsString = self.empty.as_ref().map_or_else(|| "/dev/null".into(), |e| e.clone().into());
        for f in &self.blanked {
            a.extend(["--ro-bind".into(), empty.clone(), f.into()]);
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

impl Spec {
    /// Why an agent that runs as another uid than the runner's ([`Spec::user`]) could not reach what this run shows
    /// it, if it could not: a real folder on the way that lets no other user through (folders the sandbox hides are
    /// made open on the way: bubblewrap makes them), or a folder of `must_write` (`[run] sandbox_write`) that it
    /// may not write. A sentence naming the folder and the fix.
    pub(crate) fn unreachable(&self, must_write: &[PathBuf]) -> Option<String> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (uid, gid) = self.user?;
        // `bits`: what the owner needs (0o100 to pass, 0o300 to write there); the group's and others' are shifted.
        let may = |p: &Path, bits: u32| {
            std::fs::metadata(p).is_ok_and(|m| {
                let mode = m.permissions().mode();
                (m.uid() == uid && mode & bits == bits)
                    || (m.gid() == gid && mode & (bits >> 3) == bits >> 3)
                    || mode & (bits >> 6) == bits >> 6
            })
        };
        for shown in self.writable.iter().chain(&self.readable).chain(std::iter::once(&self.cwd)) {
            for anc in shown.ancestors().skip(1) {
                if !self.hidden.iter().any(|h| anc.starts_with(h)) && !may(anc, 0o100) {
                    return Some(format!(
                        "{} lets no other user through, so uid {uid} cannot reach {} (open it: chmod o+x {})",
                        anc.display(),
                        shown.display(),
                        anc.display()
                    ));
                }
            }
        }
        must_write.iter().filter(|w| w.exists()).find(|w| !may(w, 0o300)).map(|w| {
            format!(
                "uid {uid} may not write {} ([run] sandbox_write): give it to that uid or open it to others (chmod o+rwx)",
                w.display()
            )
        })
    }
}

/// Where the tools a runner may hold credentials for keep them outside a home, as this environment names them:
/// `(files to blank, folders to hide)`. Under a home they are hidden with it; these are the ones a variable moved
/// elsewhere (`CARGO_HOME=/opt/cargo` shown for its `bin/`), which the read-only root would otherwise show.
pub(crate) fn credential_paths(env: &dyn Fn(&str) -> Option<OsString>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let path = |k: &str| env(k).map(PathBuf::from).filter(|p| p.is_absolute());
    let mut files: Vec<PathBuf> = Vec::new();
    let mut folders: Vec<PathBuf> = Vec::new();
    for (var, inside) in [
        ("CARGO_HOME", &["credentials", "credentials.toml"][..]),
        ("DOCKER_CONFIG", &["config.json"][..]),
        ("GRADLE_USER_HOME", &["gradle.properties"][..]),
        ("GEM_HOME", &["credentials"][..]),
    ] {
        if let Some(dir) = path(var) {
            files.extend(inside.iter().map(|f| dir.join(f)));
        }
    }
    for var in [
        "NPM_CONFIG_USERCONFIG",
        "npm_config_userconfig",
        "PIP_CONFIG_FILE",
        "PYPIRC",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "NETRC",
        "TF_CLI_CONFIG_FILE",
        "VAULT_TOKEN_FILE",
        "GIT_SSH_KEY",
    ] {
        files.extend(path(var));
    }
    if let Some(list) = env("KUBECONFIG") {
        files.extend(std::env::split_paths(&list).filter(|p| p.is_absolute()));
    }
    for var in
        ["GNUPGHOME", "PASSWORD_STORE_DIR", "CLOUDSDK_CONFIG", "AZURE_CONFIG_DIR", "GH_CONFIG_DIR", "SSH_AUTH_SOCK"]
    {
        folders.extend(path(var).filter(|p| p.is_dir()));
    }
    // An ssh agent's socket is a file: blanked (its folder is usually under the hidden /tmp or /run).
    files.extend(path("SSH_AUTH_SOCK").filter(|p| !p.is_dir()));
    (files, folders)
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
        for d in [&wt, &run, &git.join("swarm"), &git.join("objects"), &home.join(".rustup"), &home.join(".ssh")] {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::create_dir_all(home.join(".cargo")).expect("dir");
        std::fs::write(home.join(".cargo/credentials.toml"), "token").expect("write");
        // A cargo home outside any home, and a docker config: their credentials blanked where they are.
        let cargo = root.path().join("opt/cargo");
        std::fs::create_dir_all(cargo.join("bin")).expect("dir");
        std::fs::write(cargo.join("credentials.toml"), "token").expect("write");
        let docker = root.path().join("docker");
        std::fs::create_dir_all(&docker).expect("dir");
        std::fs::write(docker.join("config.json"), "{}").expect("write");
        let vars: Vec<(&str, OsString)> =
            vec![("CARGO_HOME", cargo.clone().into()), ("DOCKER_CONFIG", docker.clone().into())];
        let env = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        let spec = Spec::new(
            &wt,
            Some(&home),
            &[clone.clone(), git.clone()],
            &[wt.clone(), run.clone(), root.path().join("nowhere")],
            &[git.join("objects")],
            false,
            Some((65534, 65534)),
            &env,
        );
        assert!(spec.hidden.contains(&home) && spec.hidden.contains(&clone) && spec.hidden.contains(&git), "{spec:?}");
        assert!(spec.readable.contains(&home.join(".rustup")), "{spec:?}");
        assert!(spec.readable.contains(&git.join("objects")), "{spec:?}");
        assert!(!spec.readable.iter().any(|p| p.ends_with(".ssh")), "{spec:?}");
        assert!(!spec.writable.iter().any(|p| p.ends_with("nowhere")), "a path that does not exist: {spec:?}");
        for f in [home.join(".cargo/credentials.toml"), cargo.join("credentials.toml"), docker.join("config.json")] {
            assert!(spec.blanked.contains(&f), "{} not blanked: {spec:?}", f.display());
        }
        let args: Vec<String> = spec.args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let at = |kind: &str, p: &Path| {
            args.windows(2)
                .position(|w| w[0] == kind && w[1] == p.to_string_lossy())
                .unwrap_or_else(|| panic!("{kind} {}: {args:?}", p.display()))
        };
        // The home is hidden before the work tree inside it is bound; the clone's git directory hidden, its objects
        // shown read-only inside it; the folders on the way made open to the agent's uid.
        assert!(at("--tmpfs", &home) < at("--bind", &wt));
        assert!(at("--tmpfs", &git) < at("--ro-bind", &git.join("objects")));
        assert!(at("--dir", &home.join(".cache/git-swarm/trees")) < at("--bind", &wt), "{args:?}");
        assert!(args.contains(&"--unshare-net".to_string()) && args.contains(&"--cap-drop".to_string()));
        // Only what a change of uid needs, which the change then clears.
        assert!(args.windows(2).any(|w| w[0] == "--cap-add" && w[1] == "CAP_SETUID"), "{args:?}");
        assert_eq!(args.last().map(String::as_str), Some(wt.to_str().expect("utf-8")));
        let plain = Spec { user: None, ..spec };
        assert!(!plain.args().iter().any(|a| a == "--cap-add"), "no capability for an agent of the runner's uid");
    }

    #[test]
    fn credentials_are_found_where_their_variables_put_them() {
        let vars: Vec<(&str, &str)> = vec![
            ("CARGO_HOME", "/opt/cargo"),
            ("KUBECONFIG", "/etc/kube/a:/etc/kube/b"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/srv/aws/creds"),
            ("GNUPGHOME", "relative/is/ignored"),
        ];
        let env = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v));
        let (files, _) = credential_paths(&env);
        for f in ["/opt/cargo/credentials.toml", "/etc/kube/a", "/etc/kube/b", "/srv/aws/creds"] {
            assert!(files.contains(&PathBuf::from(f)), "{f}: {files:?}");
        }
        assert!(!files.iter().any(|f| f.starts_with("relative")));
    }
}
