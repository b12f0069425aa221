//! This clone's part: stale lock files, stray work trees, and what its runners would run — each role's agent, the
//! sandbox, git's version, the check's program, the baseline's report, the forge's token.

use super::*;
use crate::environment::Environment;

/// Each role's agent as this clone's runners would run it (`swarm.toml` under this clone's `git config swarm.*`):
/// which command or preset, the CLI's version, and whether it can start here ([`crate::agent::prepare`]).
pub(super) fn agents(
    config: &crate::model::Config,
    local: &crate::config::Local,
    run_dir: &std::path::Path,
    env: &Environment,
    sandboxed: Option<&Sandboxed>,
) -> Vec<Finding> {
    const C: &str = "agents";
    let config = local.apply(config);
    let probes = crate::agent::Probes::default();
    let mut out = Vec::new();
    for role in [crate::runner::Role::Worker, crate::runner::Role::Planner, crate::runner::Role::Judge] {
        let f = match crate::config::backend_for(&config, role) {
            Err(e) => Finding::new(C, Severity::Error, format!("{role}: {e}")),
            Ok(None) => Finding::new(C, Severity::Info, format!("{role}: no agent configured"))
                .hint(format!("set [roles.{role}] (or [roles.default]) in swarm.toml, or pass --exec to the runner")),
            Ok(Some(b)) => match crate::agent::prepare(&b, run_dir, &probes, env) {
                Ok(p) => match sandboxed.and_then(|s| s.hides(C, &p.backend, &format!("{role}: {}", p.label))) {
                    Some(hidden) => hidden,
                    None => {
                        let untested = matches!(b, crate::agent::Backend::Preset(p) if p.untested);
                        let note = if untested { " — this preset is not tested against its CLI" } else { "" };
                        Finding::new(C, Severity::Ok, format!("{role}: {} will run here{note}", p.label))
                    }
                },
                // An error: a runner of this role would exit before its first claim. (A role nobody configured is
                // only noted above; a clone that only watches can pass `--exec` to the roles it runs.)
                Err(e) => Finding::new(C, Severity::Error, format!("{role}: {e}")).hint(e.hint),
            },
        };
        out.push(f);
    }
    out
}

/// Whether this clone's runners contain their agents (`[run] sandbox`, under this clone's `git config swarm.*`):
/// in a sandbox here, uncontained on purpose, or uncontained for want of one — an error where `required`.
pub(super) fn sandbox(config: &crate::model::Config, local: &crate::config::Local, env: &Environment) -> Finding {
    use crate::agent::sandbox::{AgentUser, Mode, Support, support};
    const C: &str = "sandbox";
    let mode = crate::runner::RunSettings::from_config(&local.apply(config)).map(|s| s.sandbox).unwrap_or_default();
    match (mode, support(env)) {
        (Mode::Off, _) => Finding::new(C, Severity::Info, "agents run uncontained here: [run] sandbox = \"off\"")
            .hint("they can read this machine's files and keys and write the clone; \"auto\" contains them where bubblewrap works"),
        (mode, support @ Support::Ready { version, user, .. }) => {
            let bwrap = if version.is_empty() { "bubblewrap" } else { version.as_str() };
            let who = match user {
                AgentUser::Runner => "as this user (what it can read outside the hidden folders, they can: docs/security.md)".to_string(),
                AgentUser::Dropped { uid, .. } => format!("as nobody (uid {uid}), not root"),
                AgentUser::Root => "as root".to_string(),
            };
            match (support.open_door(), mode) {
                (None, _) => Finding::new(
                    C,
                    Severity::Ok,
                    format!("agents run in a sandbox ({bwrap}) {who}: their work tree, a fresh home, no credentials, no terminal"),
                ),
                (Some(door), Mode::Required) => Finding::new(
                    C,
                    Severity::Error,
                    format!("[run] sandbox = \"required\", but {door}: runners refuse to start"),
                )
                .hint("run the runner as a normal user, or give its container CAP_SYS_ADMIN so that agents run as nobody"),
                (Some(door), _) => Finding::new(C, Severity::Warn, format!("agents run in a sandbox ({bwrap}), but {door}"))
                    .hint("run the runner as a normal user, or give its container CAP_SYS_ADMIN so that agents run as nobody"),
            }
        }
        (Mode::Auto, Support::Missing { why, hint }) => {
            Finding::new(C, Severity::Warn, format!("agents would run uncontained: {why}")).hint(hint.clone())
        }
        (Mode::Required, Support::Missing { why, hint }) => Finding::new(
            C,
            Severity::Error,
            format!("[run] sandbox = \"required\", but {why}: runners refuse to start"),
        )
        .hint(hint.clone()),
    }
}

/// What a sandboxed run of this clone would see ([`crate::agent::visible`]), when its runners sandbox their agents
/// (`[run] sandbox` not `"off"`, and bubblewrap starts here): the mounts of a run as `contain_run` makes them, less
/// the run's own work tree and folder (writable, made for each run).
pub(super) struct Sandboxed {
    view: crate::agent::visible::View,
    /// The clone's work tree, where a `./relative` path of a command is looked up (the run's own tree holds it).
    tree: PathBuf,
    env: Vec<(String, std::ffi::OsString)>,
}

impl Sandboxed {
    pub(super) fn of(
        swarm: &Swarm,
        config: &crate::model::Config,
        local: &crate::config::Local,
        env: &Environment,
    ) -> Option<Sandboxed> {
        use crate::agent::sandbox::{Mode, Spec, support};
        let s = crate::runner::RunSettings::from_config(&local.apply(config)).ok()?;
        if s.sandbox == Mode::Off || !support(env).is_ready() {
            return None;
        }
        let home = env.home();
        let paths = |v: &[String]| -> Vec<PathBuf> {
            v.iter().filter_map(|p| crate::runner::contained::expand(p, home)).collect()
        };
        let common = swarm.local.repo.common_dir().to_path_buf();
        let tree = swarm.local.repo.workdir().map_or_else(|| common.clone(), Path::to_path_buf);
        let places = crate::runner::Places::of(&common, env);
        let workdir = swarm.local.repo.workdir();
        let (read, write) = (paths(&s.sandbox_read), paths(&s.sandbox_write));
        let (hide, readable, writable) = crate::runner::contained::mounts(&places, &common, workdir, &read, &write);
        let env_of = |k: &str| env.get(k).map(std::ffi::OsStr::to_os_string);
        let spec = Spec::new(&tree, home, &hide, &writable, &readable, s.network, None, &env_of);
        let view = crate::agent::visible::View::of(&spec, home);
        let env = ["PATH", "VIRTUAL_ENV"]
            .iter()
            .filter_map(|k| env.get(k).map(|v| (k.to_string(), v.to_os_string())))
            .collect();
        Some(Sandboxed { view, tree, env })
    }

    /// An error naming what the sandbox hides of `backend`'s command (`what`: the role and its agent, or the
    /// check), if it hides a path the command starts or names; `None` for a model API or a command it shows.
    fn hides(&self, check: &'static str, backend: &crate::agent::Backend, what: &str) -> Option<Finding> {
        let crate::agent::Backend::Command { exec } = backend else { return None };
        let env = |k: &str| self.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let at = crate::agent::visible::Lookup { cwd: &self.tree, env: &env };
        let unseen = crate::agent::visible::unseen(&self.view, exec, &at);
        let first = unseen.first()?;
        let more = match unseen.len() {
            1 => String::new(),
            n => format!(
                " (and {} more: {})",
                n - 1,
                unseen[1..].iter().map(|u| u.path.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
        };
        Some(Finding::new(check, Severity::Error, format!("{what} cannot start in the sandbox: {first}{more}")).hint(
            format!(
                "move it where the sandbox shows it (not under a hidden folder), or add its folder to [run] \
                     sandbox_read: {}",
                crate::agent::visible::show_command(&first.path)
            ),
        ))
    }

    /// What the sandbox shows and hides, as one finding: a line each in its details.
    pub(super) fn finding(&self) -> Finding {
        let mut f = Finding::new(
            "sandbox",
            Severity::Info,
            "what a sandboxed run sees besides its own work tree and run folder (writable):",
        );
        f.details = self.view.lines();
        f
    }
}

/// Whether `[run] check` can start here: its program found on `PATH` (the suite is not run). `None` without a check,
/// or when the program cannot be told without running it (a script, a relative path).
pub(super) fn check_program(
    config: &crate::model::Config,
    local: &crate::config::Local,
    env: &Environment,
    sandboxed: Option<&Sandboxed>,
) -> Option<Finding> {
    let s = crate::runner::RunSettings::from_config(&local.apply(config)).ok()?;
    let check = s.check?;
    let exec = crate::agent::Backend::Command { exec: check.clone() };
    if let Some(f) =
        sandboxed.and_then(|s| s.hides("check", &exec, &format!("[run] check `{}`", crate::escape::line(&check))))
    {
        return Some(f);
    }
    Some(match crate::agent::missing_program(&check, env) {
        Some(p) => Finding::new(
            "check",
            Severity::Error,
            format!("[run] check `{}` cannot start here: `{p}` is not on PATH", crate::escape::line(&check)),
        )
        .hint("install it where runners run (the sandbox shows PATH's folders), or change the check: a runner stops at its first landing, no attempt spent"),
        None => Finding::new("check", Severity::Ok, format!("[run] check `{}` can start here", crate::escape::line(&check))),
    })
}

/// `[run] check_baseline` without `check_report`: a change that makes a red suite worse lands unless the check's
/// output counts its failing tests (docs/check.md). `None` otherwise.
pub(super) fn baseline(config: &crate::model::Config, local: &crate::config::Local) -> Option<Finding> {
    let s = crate::runner::RunSettings::from_config(&local.apply(config)).ok()?;
    (s.check.is_some() && s.check_baseline && s.check_report.is_none()).then(|| {
        Finding::new(
            "check",
            Severity::Warn,
            "[run] check_baseline without check_report: on a red suite, a change that breaks more tests is caught only \
             when the check's output counts its failing tests (pytest, cargo test, jest…), and lands otherwise",
        )
        .hint("make the check write a JUnit report and name it: `git swarm config set run.check_report junit.xml` (docs/check.md)")
    })
}

/// Whether this machine's git has what the runner's own rebase uses: `git merge-tree --write-tree` (2.38) to
/// replay a work that conflicts, `--merge-base` and `--attr-source` (2.40) to replay it commit by commit with the
/// target's attributes. `None` when it does.
pub(super) fn git_version() -> Option<Finding> {
    const C: &str = "git";
    let v = crate::gitcmd::version()?;
    let shown = format!("{}.{}", v.0, v.1);
    if v < (2, 38) {
        Some(
            Finding::new(
                C,
                Severity::Warn,
                format!(
                    "git {shown} has no `merge-tree --write-tree`: a task whose rebase conflicts fails its attempt"
                ),
            )
            .hint("install git 2.40 or newer"),
        )
    } else if v < (2, 40) {
        Some(
            Finding::new(C, Severity::Warn, format!("git {shown}: a task whose rebase needs git lands its commits as one, and merges without the target's attributes"))
                .hint("install git 2.40 or newer"),
        )
    } else {
        None
    }
}

/// Whether runners started here would keep the swarm's pull/merge request (`[forge]`): the token they read is in
/// this environment (a warning without: tasks land on the swarm's branch, but no request carries them to the
/// protected one). `None` when the swarm proposes nothing.
pub(super) fn forge(config: &crate::model::Config, env: &Environment) -> Option<Finding> {
    const C: &str = "forge";
    let s = match crate::forge::settings(config) {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            return Some(
                Finding::new(C, Severity::Error, e).hint("`git swarm config set forge.<key> <value>` mends it"),
            );
        }
    };
    let what =
        format!("tasks land on {} and one {} request takes them into {}", config.target, s.kind.as_str(), s.base);
    Some(match s.token(env) {
        Some(_) => Finding::new(C, Severity::Ok, what),
        None => Finding::new(C, Severity::Warn, format!("{what}, but no {} here", s.token_vars().join(" or ")))
            .hint("runners started here land the work without a request; give them the token (docs/forge.md)"),
    })
}

/// Lock files older than [`STALE_LOCK`] under the refs of this clone and of an in-process remote.
pub(super) fn locks(swarm: &Swarm, repairs: Repairs, out: &mut Vec<Finding>) {
    let mut dirs = vec![swarm.local.repo.common_dir().to_path_buf()];
    if let Reach::Path(store) = swarm.remote.reach() {
        dirs.push(store.repo.common_dir().to_path_buf());
    }
    let mut stale = Vec::new();
    for d in &dirs {
        for f in [d.join("packed-refs.lock"), d.join("index.lock"), d.join("HEAD.lock")] {
            if is_stale(&f) {
                stale.push(f);
            }
        }
        find_locks(&d.join("refs"), &mut stale, 0);
    }
    if stale.is_empty() {
        out.push(Finding::new("locks", Severity::Ok, "no stale lock files"));
        return;
    }
    let list: Vec<String> = stale.iter().map(|p| p.display().to_string()).collect();
    let mut f = Finding::new(
        "locks",
        Severity::Warn,
        format!(
            "lock file(s) older than {} s, left by killed git processes: {}",
            STALE_LOCK.as_secs(),
            list.join(", ")
        ),
    );
    if repairs.fix {
        let removed = stale.iter().filter(|p| std::fs::remove_file(p).is_ok()).count();
        f = f.fixed(format!("removed {removed}"));
    } else {
        f = f.hint("updates of a locked ref fail until the lock goes: `git swarm doctor --fix` removes them");
    }
    out.push(f);
}

pub(super) fn find_locks(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 16 {
        return;
    }
    for p in read_dir(dir) {
        if p.is_dir() {
            find_locks(&p, out, depth + 1);
        } else if p.extension().is_some_and(|e| e == "lock") && is_stale(&p) {
            out.push(p);
        }
    }
}

pub(super) fn is_stale(p: &Path) -> bool {
    std::fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_LOCK))
}

/// Runners' work trees whose runner is gone.
pub(super) fn worktrees(swarm: &Swarm, repairs: Repairs, out: &mut Vec<Finding>, env: &Environment) {
    let common = swarm.local.repo.common_dir().to_path_buf();
    let places = crate::runner::Places::of(&common, env);
    let all = crate::runner::worktrees(&places);
    let stray: Vec<_> = all.iter().filter(|(_, _, alive)| !alive).collect();
    if stray.is_empty() {
        let live = all.len();
        out.push(Finding::new("worktrees", Severity::Ok, format!("no stray work trees ({live} of live runners)")));
        return;
    }
    let names: Vec<&str> = stray.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut f = Finding::new(
        "worktrees",
        Severity::Warn,
        format!("work tree(s) of runners that are gone: {}", names.join(", ")),
    );
    if repairs.fix {
        for (name, path, _) in &stray {
            crate::runner::remove_runner_worktree(&places, &common, name, path);
        }
        crate::runner::sweep_legacy_worktrees(&places.home, &common);
        let _ = crate::runner::git::run(&common, &["worktree", "prune"]);
        f = f.fixed(format!("removed {}", stray.len()));
    } else {
        f = f.hint("the next runner in this clone removes them; `git swarm doctor --fix` does it now");
    }
    out.push(f);
}

pub(super) fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.sort();
    v
}

pub(super) fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}
