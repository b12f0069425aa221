//! What an agent's sandbox shows of a path ([`super::sandbox::Spec`]): writable, read-only, or hidden — and which rule
//! hides it (`/tmp is private in the sandbox`). `doctor` asks it of each role's agent and of `[run] check` before
//! any run; the runner asks it after a sandboxed run that failed saying something was missing (`not found`, `No
//! module named pytest`), so that the hint names the folder the sandbox hid and the setting that shows it, not a
//! missing program.
//!
//! [`View::seen`] is pure: it reads the mount lists as bubblewrap applies them ([`super::sandbox::Spec::args`]:
//! shallow before deep, at one depth hidden before read-only before writable; what is mounted last over a path is
//! what the agent sees there; everything else is the read-only root). What looks at the file system here (a program
//! looked up on `PATH`, a link followed to where it leads) is apart, in [`unseen`] and [`unseen_env`].

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use super::sandbox::Spec;

/// The temporary folders every run gets a private, empty one of.
const PRIVATE: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// What a sandboxed run sees at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Shown, and the run may change it (its work tree, its run folder, `[run] sandbox_write`).
    Writable,
    /// Shown as it is here, read-only.
    ReadOnly,
    /// Not shown: what is here is not what the run finds there (an empty folder, or a private one).
    Hidden(Rule),
}

/// Why a path is hidden: the folder that hides it, and the rule in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub folder: PathBuf,
    pub why: String,
}

/// The mount lists of one sandbox, as a [`Spec`] holds them (absolute, real paths), and the runner's home (for the
/// rule's words).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct View {
    pub hidden: Vec<PathBuf>,
    pub readable: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    /// Files replaced by an empty one.
    pub blanked: Vec<PathBuf>,
    pub home: Option<PathBuf>,
}

impl View {
    /// The view of `spec`, whose runner's home is `home` (taken where it leads, as the spec's paths are).
    pub(crate) fn of(spec: &Spec, home: Option<&Path>) -> View {
        View {
            hidden: spec.hidden.clone(),
            readable: spec.readable.clone(),
            writable: spec.writable.clone(),
            blanked: spec.blanked.clone(),
            home: home.map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.to_path_buf())),
        }
    }

    /// What the sandbox shows at `path` (absolute, taken as it is written: no link followed, `..` not allowed —
    /// [`View::seen_here`] follows links).
    pub(crate) fn seen(&self, path: &Path) -> Seen {
        if !path.is_absolute() || path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Seen::Hidden(Rule {
                folder: path.to_path_buf(),
                why: "not an absolute path: the sandbox's rules are for absolute ones".into(),
            });
        }
        if self.blanked.iter().any(|b| b == path) {
            return Seen::Hidden(Rule {
                folder: path.to_path_buf(),
                why: "a credential file, blanked in the sandbox".into(),
            });
        }
        // (depth, kind) of every mount over `path`: the greatest is the one bubblewrap made last.
        let over = |list: &[PathBuf], kind: u8| {
            list.iter().filter(|m| path.starts_with(m)).map(|m| (m.components().count(), kind, m.clone())).max()
        };
        let last =
            [over(&self.hidden, 0), over(&self.readable, 1), over(&self.writable, 2)].into_iter().flatten().max();
        match last {
            None | Some((_, 1, _)) => Seen::ReadOnly,
            Some((_, 2, _)) => Seen::Writable,
            Some((_, _, folder)) => {
                let why = self.rule_for(&folder);
                Seen::Hidden(Rule { folder, why })
            }
        }
    }

    /// What the sandbox shows of `path` as this machine has it: hidden when the path as written or where its links
    /// lead is hidden (a program in a folder shown again that links into a hidden one cannot start).
    pub(crate) fn seen_here(&self, path: &Path) -> Seen {
        let written = self.seen(&lexical(path));
        if matches!(written, Seen::Hidden(_)) {
            return written;
        }
        match std::fs::canonicalize(path) {
            Ok(real) if real != path => match self.seen(&real) {
                hidden @ Seen::Hidden(_) => hidden,
                _ => written,
            },
            _ => written,
        }
    }

    /// The rule that hides `folder` (one of [`View::hidden`]), in words.
    fn rule_for(&self, folder: &Path) -> String {
        let shown = folder.display();
        if PRIVATE.iter().any(|t| folder == Path::new(t)) {
            return format!("{shown} is private in the sandbox");
        }
        if self.home.as_deref() == Some(folder) {
            return format!(
                "the runner's home {shown} is hidden in the sandbox but for its toolchains (~/.cargo/bin, ~/.rustup, \
                 ~/.local/bin, …) and the PATH entries in it"
            );
        }
        match folder.to_str() {
            Some("/home") => "every home under /home is hidden in the sandbox".into(),
            Some("/root") => "root's home is hidden in the sandbox".into(),
            Some("/run" | "/var/run") => format!("{shown} (sockets: an ssh agent, Docker) is hidden in the sandbox"),
            Some("/mnt" | "/media") => format!("{shown} is hidden in the sandbox"),
            _ => format!(
                "{shown} is hidden in the sandbox (the clone's checkout and git directory, the runners' work trees \
                 and the folders of credentials are)"
            ),
        }
    }

    /// What the sandbox shows and hides, one line each: `hides …`, `read-only …`, `writable …` (the runner's home
    /// as `~`).
    pub(crate) fn lines(&self) -> Vec<String> {
        let name = |p: &PathBuf| match self.home.as_deref().and_then(|h| p.strip_prefix(h).ok()) {
            Some(rest) if rest.as_os_str().is_empty() => "~".to_string(),
            Some(rest) => format!("~/{}", rest.display()),
            None => p.display().to_string(),
        };
        let list = |v: &[PathBuf], tag: &dyn Fn(&PathBuf) -> &'static str| -> String {
            if v.is_empty() {
                return "nothing".into();
            }
            v.iter().map(|p| format!("{}{}", name(p), tag(p))).collect::<Vec<_>>().join(", ")
        };
        let private = |p: &PathBuf| if PRIVATE.iter().any(|t| p == Path::new(t)) { " (private)" } else { "" };
        vec![
            format!("hides: {}", list(&self.hidden, &private)),
            format!(
                "read-only: the rest of the file system, and again inside what it hides: {}",
                list(&self.readable, &|_| "")
            ),
            format!("writable: {}", list(&self.writable, &|_| "")),
        ]
    }
}

/// A path a command needs that the sandbox hides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unseen {
    /// What it is to the command: "the program `pytest`", "a PATH entry", "VIRTUAL_ENV".
    pub what: String,
    pub path: PathBuf,
    pub rule: Rule,
}

impl std::fmt::Display for Unseen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the sandbox hides {}, {} ({})", self.path.display(), self.what, self.rule.why)
    }
}

/// Where a command's paths are looked up: the folder it starts in (the agent's work tree, or the clone's for
/// `doctor`: a relative path that stays inside it is the run's own), and the environment it gets (`PATH`,
/// `VIRTUAL_ENV`…).
pub(crate) struct Lookup<'a> {
    pub cwd: &'a Path,
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
}

/// The paths `command` starts or names that the sandbox hides: its program (as written, or the first match on
/// `PATH`, and where its link leads), the Python venv that program is in, and every other word that is a path to
/// something that exists here (`sh /tmp/x/agent.sh`, `./scripts/check` leading out of the tree). A path that does
/// not exist here is none of the sandbox's doing.
pub(crate) fn unseen(view: &View, command: &str, at: &Lookup<'_>) -> Vec<Unseen> {
    let mut out: Vec<Unseen> = Vec::new();
    let push = |out: &mut Vec<Unseen>, what: String, path: PathBuf| {
        if let Seen::Hidden(rule) = view.seen_here(&path)
            && !out.iter().any(|u| u.path == path)
        {
            out.push(Unseen { what, path, rule });
        }
    };
    let words = words(command);
    let program = words.iter().position(|w| !is_assignment(w) && !WRAPPERS.contains(&w.as_str()));
    for (i, w) in words.iter().enumerate() {
        let is_program = program == Some(i);
        let after_redirect = i > 0 && matches!(words[i - 1].as_str(), ">" | ">>" | "<" | "2>" | "2>>" | "&>");
        if after_redirect || w.contains(['>', '<', '$', '`', '*', '?']) {
            continue;
        }
        let what = if is_program { "the program".to_string() } else { "a path the command names".to_string() };
        if w.starts_with('/') {
            if Path::new(w).exists() {
                push(&mut out, what, PathBuf::from(w));
            }
        } else if w.starts_with("./") || w.starts_with("../") {
            let p = at.cwd.join(w);
            // Inside the work tree, it is the run's own; a link out of it is judged where it leads.
            if let (Ok(real), Ok(tree)) = (std::fs::canonicalize(&p), std::fs::canonicalize(at.cwd))
                && !real.starts_with(&tree)
            {
                push(&mut out, what, real);
            }
        } else if is_program && !w.contains('/') {
            let Some((entry, found)) = on_path(w, at) else { continue };
            if let Seen::Hidden(rule) = view.seen(&entry) {
                out.push(Unseen { what: format!("the PATH entry that holds `{w}`"), path: entry.clone(), rule });
            } else {
                push(&mut out, format!("the program `{w}`"), found.clone());
            }
            if let Some(venv) = venv_of(&found) {
                push(&mut out, format!("the Python venv `{w}` is in"), venv);
            }
        }
    }
    out
}

/// What of the environment a command reads its programs and modules from that the sandbox hides: `PATH` entries,
/// `VIRTUAL_ENV` (and the venv a `PATH` entry is the `bin` of), `PYTHONPATH`, `NODE_PATH`, `CONDA_PREFIX`.
pub(crate) fn unseen_env(view: &View, env: &dyn Fn(&str) -> Option<OsString>) -> Vec<Unseen> {
    let mut out: Vec<Unseen> = Vec::new();
    let mut push = |what: &str, path: PathBuf| {
        if path.is_absolute()
            && path.exists()
            && !out.iter().any(|u| u.path == path)
            && let Seen::Hidden(rule) = view.seen_here(&path)
        {
            out.push(Unseen { what: what.to_string(), path, rule });
        }
    };
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = env(var) {
            push(var, PathBuf::from(v));
        }
    }
    if let Some(path) = env("PATH") {
        for entry in std::env::split_paths(&path) {
            if let Some(venv) =
                entry.parent().filter(|_| entry.ends_with("bin")).filter(|v| v.join("pyvenv.cfg").is_file())
            {
                push("the Python venv of a PATH entry", venv.to_path_buf());
            }
            push("a PATH entry", entry);
        }
    }
    for var in ["PYTHONPATH", "NODE_PATH"] {
        if let Some(list) = env(var) {
            for p in std::env::split_paths(&list) {
                push(var, p);
            }
        }
    }
    out
}

/// Did a run's output say that something it needed was not there (a program, a file, a Python or Node module)?
pub(crate) fn said_missing(tail: &[String]) -> bool {
    const SAID: &[&str] = &[
        "not found",
        "No such file or directory",
        "No module named",
        "ModuleNotFoundError",
        "Cannot find module",
        "cannot open shared object file",
    ];
    tail.iter().any(|l| SAID.iter().any(|s| l.contains(s)))
}

/// The hint for what the sandbox hides of a command: `None` when it hides nothing the command needs.
pub(crate) fn hint(unseen: &[Unseen]) -> Option<String> {
    let first = unseen.first()?;
    let named: Vec<String> =
        unseen.iter().map(|u| format!("{} ({}; {})", u.path.display(), u.what, u.rule.why)).collect();
    Some(format!(
        "the sandbox hides {}: add it to [run] sandbox_read ({}), or install it where the sandbox shows it",
        named.join("; "),
        show_command(&first.path)
    ))
}

/// The command that shows `path` (its folder, when it is a file) in every run: `git swarm config set
/// run.sandbox_read <folder>`, in backticks, with a word on the paths the list holds already.
pub(crate) fn show_command(path: &Path) -> String {
    let folder = if path.is_file() { path.parent().unwrap_or(path) } else { path };
    format!(
        "`git swarm config set run.sandbox_read {}`, with the paths the list holds already, comma-separated",
        shell_word(folder)
    )
}

/// After a sandboxed run of `command` (in `cwd`, with the runner's environment `env`) that failed: the hint naming
/// what the sandbox hid of it, when its output says something was missing and the sandbox hides a path it needs.
pub(crate) fn after_run(
    spec: &Spec,
    home: Option<&Path>,
    command: &str,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
    tail: &[String],
) -> Option<String> {
    if !said_missing(tail) {
        return None;
    }
    let view = View::of(spec, home);
    let mut all = unseen(&view, command, &Lookup { cwd, env });
    for u in unseen_env(&view, env) {
        if !all.iter().any(|a| a.path == u.path) {
            all.push(u);
        }
    }
    hint(&all)
}

/// Words a shell would not split further, with simple quotes taken off (`'a b'` is one word).
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')') => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

/// Words that start another program: what follows is the program.
const WRAPPERS: &[&str] = &["exec", "env", "command", "nice", "nohup", "time"];

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The first `PATH` entry of `at.env` holding an executable `program`, and the program's path there.
fn on_path(program: &str, at: &Lookup<'_>) -> Option<(PathBuf, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let path = (at.env)("PATH")?;
    std::env::split_paths(&path).filter(|d| d.is_absolute()).find_map(|d| {
        let p = d.join(program);
        std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).then_some((d, p))
    })
}

/// The venv a program is in (`<venv>/bin/<program>` beside `<venv>/pyvenv.cfg`): its `python` finds its packages
/// there, and runs without them when the venv is hidden ("No module named pytest").
fn venv_of(program: &Path) -> Option<PathBuf> {
    let bin = program.parent().filter(|b| b.ends_with("bin"))?;
    let venv = bin.parent()?;
    venv.join("pyvenv.cfg").is_file().then(|| venv.to_path_buf())
}

/// `path` with `.` taken out and `..` taken back (no link followed).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `path` as one word of a shell command line (quoted when it needs to be).
fn shell_word(path: &Path) -> String {
    let s = path.to_string_lossy();
    if s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+@:,~".contains(c)) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> View {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        View {
            hidden: p(&["/home", "/root", "/tmp", "/run", "/home/me", "/srv/clone", "/srv/clone/.git"]),
            readable: p(&["/home/me/.cargo/bin", "/srv/clone/.git/objects", "/tmp/venv/bin"]),
            writable: p(&["/home/me/.cache/git-swarm/trees/w1", "/tmp"]),
            blanked: p(&["/home/me/.cargo/bin/credentials.toml"]),
            home: Some(PathBuf::from("/home/me")),
        }
    }

    fn hidden_by(seen: Seen) -> (PathBuf, String) {
        match seen {
            Seen::Hidden(r) => (r.folder, r.why),
            other => panic!("not hidden: {other:?}"),
        }
    }

    #[test]
    fn what_is_mounted_last_over_a_path_is_what_the_run_sees() {
        let v = view();
        assert_eq!(v.seen(Path::new("/usr/bin/python3")), Seen::ReadOnly, "the read-only root");
        assert_eq!(v.seen(Path::new("/home/me/.cargo/bin/cargo")), Seen::ReadOnly, "a toolchain shown again");
        assert_eq!(v.seen(Path::new("/home/me/.cache/git-swarm/trees/w1/src/a.rs")), Seen::Writable);
        assert_eq!(v.seen(Path::new("/srv/clone/.git/objects/pack")), Seen::ReadOnly);
        let (folder, why) = hidden_by(v.seen(Path::new("/srv/clone/.git/config")));
        assert_eq!(folder, Path::new("/srv/clone/.git"));
        assert!(why.contains("hidden in the sandbox"), "{why}");
        // The deepest hidden folder names the rule: the runner's home, not /home.
        let (folder, why) = hidden_by(v.seen(Path::new("/home/me/.ssh/id_ed25519")));
        assert_eq!(folder, Path::new("/home/me"));
        assert!(why.contains("the runner's home"), "{why}");
        let (folder, why) = hidden_by(v.seen(Path::new("/home/other/bin/agent")));
        assert_eq!(folder, Path::new("/home"));
        assert!(why.contains("every home under /home"), "{why}");
        let (_, why) = hidden_by(v.seen(Path::new("/home/me/.cargo/bin/credentials.toml")));
        assert!(why.contains("blanked"), "{why}");
    }

    #[test]
    fn a_private_tmp_hides_what_is_there_though_the_run_may_write_its_own() {
        let v = View { writable: vec![], ..view() };
        let (folder, why) = hidden_by(v.seen(Path::new("/tmp/venv/lib/python3.12/site-packages")));
        assert_eq!(folder, Path::new("/tmp"));
        assert!(why.starts_with("/tmp is private in the sandbox"), "{why}");
        assert_eq!(v.seen(Path::new("/tmp/venv/bin/python")), Seen::ReadOnly, "a PATH entry shown again");
        // At one depth a writable mount comes after the hidden one (a folder of [run] sandbox_write).
        assert_eq!(view().seen(Path::new("/tmp/x")), Seen::Writable);
        assert!(matches!(v.seen(Path::new("relative/x")), Seen::Hidden(_)));
        assert!(matches!(v.seen(Path::new("/usr/../tmp/x")), Seen::Hidden(_)));
    }

    #[test]
    fn nothing_hidden_is_everything_read_only() {
        let v = View::default();
        assert_eq!(v.seen(Path::new("/tmp/x")), Seen::ReadOnly);
        assert_eq!(v.lines()[0], "hides: nothing");
    }

    #[test]
    fn the_lines_name_the_home_as_a_tilde_and_the_private_folders() {
        let lines = view().lines();
        assert!(lines[0].starts_with("hides: /home, /root, /tmp (private), /run, ~, "), "{lines:?}");
        assert!(lines[1].contains("~/.cargo/bin"), "{lines:?}");
        assert!(lines[2].starts_with("writable: ~/.cache/git-swarm/trees/w1"), "{lines:?}");
    }

    #[test]
    fn words_are_split_as_a_shell_would_split_plain_ones() {
        assert_eq!(words("sh '/a b/agent.sh' --x"), ["sh", "/a b/agent.sh", "--x"]);
        assert_eq!(words("A=1 exec ./run.sh;make  check"), ["A=1", "exec", "./run.sh", "make", "check"]);
        assert_eq!(words("x \"\""), ["x", ""]);
        assert!(is_assignment("A_1=x") && !is_assignment("--a=b") && !is_assignment("1A=x"));
    }

    /// A real folder tree: a script and a venv in a hidden folder, a link out of the work tree into it.
    #[test]
    fn a_command_names_what_it_needs_that_the_sandbox_hides() {
        let root = tempfile::tempdir().expect("dir");
        let root = std::fs::canonicalize(root.path()).expect("real");
        let (hid, tree, bin) = (root.join("hid"), root.join("tree"), root.join("bin"));
        let venv = hid.join("venv");
        for d in [&hid, &tree, &bin, &venv.join("bin")] {
            std::fs::create_dir_all(d).expect("dir");
        }
        let exe = |p: &Path| {
            std::fs::write(p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        };
        exe(&hid.join("agent.sh"));
        exe(&venv.join("bin/pytest"));
        exe(&bin.join("tool"));
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("cfg");
        std::os::unix::fs::symlink(hid.join("agent.sh"), tree.join("linked.sh")).expect("link");
        exe(&tree.join("own.sh"));
        let v = View {
            hidden: vec![hid.clone()],
            readable: vec![venv.join("bin")],
            writable: vec![tree.clone()],
            ..View::default()
        };
        let path: OsString = std::env::join_paths([venv.join("bin"), bin.clone()]).expect("path");
        let env = move |k: &str| match k {
            "PATH" => Some(path.clone()),
            "VIRTUAL_ENV" => Some(venv.clone().into()),
            _ => None,
        };
        let at = Lookup { cwd: &tree, env: &env };
        let script = format!("sh {}/agent.sh --go", hid.display());
        let u = unseen(&v, &script, &at);
        assert_eq!(u.len(), 1, "{u:?}");
        assert_eq!(u[0].path, hid.join("agent.sh"));
        assert!(u[0].to_string().starts_with("the sandbox hides "), "{}", u[0]);
        let u = unseen(&v, "./linked.sh && ./own.sh", &at);
        assert_eq!(u.iter().map(|u| u.path.clone()).collect::<Vec<_>>(), [hid.join("agent.sh")], "{u:?}");
        // `pytest` found on PATH in a folder shown again, but its venv hidden: "No module named pytest".
        let u = unseen(&v, "pytest -q", &at);
        assert_eq!(u.len(), 1, "{u:?}");
        assert_eq!(u[0].path, hid.join("venv"));
        assert!(u[0].what.contains("venv"), "{u:?}");
        assert!(unseen(&v, "tool --x > /dev/null", &at).is_empty());
        assert!(unseen(&v, "/nonexistent/x", &at).is_empty(), "what is not here is not the sandbox's doing");
        let e = unseen_env(&v, &env);
        assert_eq!(e.len(), 1, "the venv, once (VIRTUAL_ENV, and the venv of a PATH entry): {e:?}");
        let h = hint(&e).expect("a hint");
        assert!(h.contains(&format!("the sandbox hides {}", hid.join("venv").display())), "{h}");
        assert!(
            h.contains("git swarm config set run.sandbox_read ") && h.contains("where the sandbox shows it"),
            "{h}"
        );
        assert_eq!(hint(&[]), None);
    }

    #[test]
    fn only_output_that_says_something_is_missing_asks_for_the_hint() {
        let said = |l: &str| said_missing(&[l.to_string()]);
        assert!(said("sh: 1: /tmp/x/agent.sh: not found"));
        assert!(said("/usr/bin/python3: No module named pytest"));
        assert!(said("ModuleNotFoundError: No module named 'requests'"));
        assert!(said("Error: Cannot find module 'left-pad'"));
        assert!(said("sh: 1: cannot open /tmp/x: No such file or directory"));
        assert!(!said("1 failed, 3 passed"));
    }

    #[test]
    fn a_path_is_quoted_in_the_command_it_is_given_in() {
        assert_eq!(shell_word(Path::new("/tmp/venv")), "/tmp/venv");
        assert_eq!(shell_word(Path::new("/tmp/my venv")), "'/tmp/my venv'");
        assert_eq!(lexical(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
    }
}
