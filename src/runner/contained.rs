//! How a runner contains the agents it starts (`agent::sandbox`; docs/security.md, *Containment*): the policy of
//! `[run] sandbox`, `network`, `sandbox_read`/`sandbox_write` and `[roles.*] env`/`home_files`; for each run its
//! environment (an allow-list), a fresh home holding only its CLI's config and login, its own git directory in
//! the run folder ([`super::slot::Slot::agent_git`]), and — when the runner is root — the unprivileged uid it runs
//! as, which then owns the run folder and the work tree.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gix::ObjectId;

use super::slot::Slot;
use super::{Role, RunError, Runner};
use crate::agent::sandbox::{AgentUser, Mode, Spec, Support};
use crate::agent::{self, Prepared};
use crate::model::Config;

/// `[run]`'s containment settings, as this runner read them last ([`Runner::settings`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Settings {
    pub mode: Mode,
    pub network: bool,
    /// More paths an agent may read, and write (absolute, `~/` expanded).
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// The settings a runner contains its agents by; set from `[run]` before each claim.
#[derive(Debug, Default)]
pub(crate) struct Policy(Mutex<Option<Settings>>);

impl Policy {
    pub(crate) fn set(&self, s: Settings) {
        if let Ok(mut p) = self.0.lock() {
            *p = Some(s);
        }
    }

    fn get(&self) -> Settings {
        self.0.lock().ok().and_then(|p| p.clone()).unwrap_or(Settings { network: true, ..Default::default() })
    }
}

/// `~/x` under `home`; an absolute path as it is; anything else is refused by the settings' check.
pub(crate) fn expand(p: &str, home: Option<&Path>) -> Option<PathBuf> {
    match (p.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => Some(h.join(rest)),
        (Some(_), None) => None,
        (None, _) => Some(PathBuf::from(p)).filter(|p| p.is_absolute()),
    }
}

/// One run, contained: what [`agent::Invocation::contain`] takes, and the variables the runner adds for it.
pub(crate) struct Run {
    pub contain: agent::Contain,
    pub env: Vec<(String, String)>,
}

/// The names of the runner's environment an agent of `role` gets: its preset's, then `env` of `[roles.<role>]`
/// and `[roles.default]` (`config` with this clone's `git config swarm.*` over it), and the API-key variables a
/// Codex config names (`model_providers.*.env_key`).
pub(crate) fn pass_env(config: &Config, role: Role, agent: Option<&Prepared>, home: Option<&Path>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    if let Some(p) = agent.and_then(|a| a.preset) {
        names.extend(p.env.iter().map(|s| s.to_string()));
        if p.name == "codex"
            && let Some(h) = home
        {
            names.extend(codex_key_names(&h.join(".codex/config.toml")));
        }
    }
    names.extend(crate::config::role_list(config, role, crate::config::RoleList::Env));
    names
}

/// The `env_key`s of a Codex config's model providers (the variables its custom providers read their key from).
fn codex_key_names(file: &Path) -> Vec<String> {
    let Some(text) = agent::files::read_text(file, 1 << 20) else { return vec![] };
    let Ok(t) = toml::from_str::<toml::Table>(&text) else { return vec![] };
    t.get("model_providers")
        .and_then(|p| p.as_table())
        .map(|p| {
            p.values()
                .filter_map(|v| v.get("env_key").and_then(|k| k.as_str()))
                .filter(|k| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl Runner<'_> {
    /// `[run] sandbox` as this runner read it last.
    pub(crate) fn contain_mode(&self) -> Mode {
        self.contain.get().mode
    }

    /// Whether this runner's agent runs are sandboxed: `Ok(Some((bwrap, user)))` when they are, `Ok(None)` when they
    /// run uncontained (`sandbox = "off"`, or `auto` on a machine with no sandbox: said once per runner start by the
    /// caller), `Err` when `required` and there is none — or there is one that leaves a door open (a root runner
    /// whose agents cannot run as another uid here).
    pub(crate) fn sandbox_program(&self) -> Result<Option<(PathBuf, AgentUser)>, RunError> {
        let s = self.contain.get();
        let support = agent::sandbox::support(&self.env);
        match (s.mode, support) {
            (Mode::Off, _) => Ok(None),
            (Mode::Required, Support::Ready { .. }) if support.open_door().is_some() => {
                Err(RunError::Settings(format!(
                    "[run] sandbox = \"required\", but {} (run the runner as a normal user, or give its container \
                 CAP_SYS_ADMIN)",
                    support.open_door().unwrap_or_default()
                )))
            }
            (_, Support::Ready { bwrap, user, .. }) => Ok(Some((bwrap.clone(), *user))),
            (Mode::Required, Support::Missing { why, hint }) => {
                Err(RunError::Settings(format!("[run] sandbox = \"required\", but {why} ({hint})")))
            }
            (Mode::Auto, Support::Missing { .. }) => Ok(None),
        }
    }

    /// The uid and gid this runner's agents run as when they are not its own (a root runner, sandboxed): what owns
    /// their work trees and run folders.
    pub(crate) fn agent_owner(&self) -> Option<(u32, u32)> {
        match self.sandbox_program() {
            Ok(Some((_, AgentUser::Dropped { uid, gid }))) => Some((uid, gid)),
            _ => None,
        }
    }

    /// This runner's slot: its work tree, its run folder, and its own index for them.
    pub(crate) fn slot(&self) -> Slot {
        Slot::new(&self.places(), &self.common_dir(), &self.agent, self.env.config_home())
    }

    /// Prepare a run of `agent` for `role` in the slot's work tree (as [`Slot::checkout`] left it), whose git
    /// `HEAD` is `head` (`replayed`: the commit a conflict run replays): a fresh run folder with the agent's own git
    /// directory, and — sandboxed — a fresh home holding only its CLI's config and login.
    pub(crate) fn contain_run(
        &self,
        slot: &Slot,
        role: Role,
        agent: Option<&Prepared>,
        config: &Config,
        head: Option<ObjectId>,
        replayed: Option<ObjectId>,
    ) -> Result<Run, RunError> {
        let settings = self.contain.get();
        // The runner's home: `$HOME`, when it is an absolute path.
        let home = self.env.home().map(Path::to_path_buf);
        let applied = self.git_config.apply(config);
        let pass = pass_env(&applied, role, agent, home.as_deref());
        slot.fresh_run().map_err(RunError::Setup)?;
        let sandbox = self.sandbox_program()?;
        let owner = self.agent_owner();
        slot.agent_git(head, replayed, owner).map_err(RunError::Setup)?;
        let env = vec![
            // The agent's own `git swarm add` goes to the runner, which files it scrubbed ([`super::outbox`]).
            ("GIT_SWARM_OUTBOX".to_string(), self.outbox_file().to_string_lossy().into_owned()),
        ];
        let Some((bwrap, _)) = sandbox else {
            let runner_env = Arc::clone(&self.env);
            let contain = agent::Contain { pass_env: pass, sandbox: None, home: None, owner: None, runner_env };
            return Ok(Run { contain, env });
        };
        let io = |e: std::io::Error, what: &Path| RunError::Setup(format!("cannot prepare {}: {e}", what.display()));
        // A fresh home, holding only the CLI's config and login, copied in.
        let fresh = slot.run.join("home");
        std::fs::create_dir(&fresh).map_err(|e| io(e, &fresh))?;
        if let Some(h) = &home {
            let mut files: Vec<String> = agent
                .and_then(|a| a.preset)
                .map(|p| p.home.iter().map(|s| s.to_string()).collect())
                .unwrap_or_default();
            files.extend(crate::config::role_list(&applied, role, crate::config::RoleList::HomeFiles));
            for f in files {
                let rel = f.strip_prefix("~/").unwrap_or(&f);
                if Path::new(rel).components().all(|c| matches!(c, std::path::Component::Normal(_))) {
                    copy_into(&h.join(rel), &fresh.join(rel));
                }
            }
        }
        let common = self.common_dir();
        let places = self.places();
        // The swarm's own caches and the toolchains a fresh home lacks (`runner::caches`).
        let var = |k: &str| self.env.get(k).and_then(|v| v.to_str().map(str::to_string));
        let (cache_env, _) = super::caches::environment(&places.base, home.as_deref(), &var, owner);
        let mut env = env;
        env.extend(cache_env);
        let workdir = self.swarm.local.repo.workdir();
        let (hide, readable, shown) = mounts(&places, &common, workdir, &settings.read, &settings.write);
        let mut writable = vec![slot.tree.clone(), slot.run.clone()];
        writable.extend(shown);
        let env_of = |k: &str| self.env.get(k).map(std::ffi::OsStr::to_os_string);
        let spec =
            Spec::new(&slot.tree, home.as_deref(), &hide, &writable, &readable, settings.network, owner, &env_of);
        let mut spec = spec;
        spec.empty = empty_file(&places.base);
        if let Some(why) = spec.unreachable(&settings.write) {
            return Err(RunError::Setup(format!(
                "the agents of a root runner run as nobody, and {why}; or run the runner as a normal user"
            )));
        }
        let runner_env = Arc::clone(&self.env);
        let contain =
            agent::Contain { pass_env: pass, sandbox: Some((bwrap, spec)), home: Some(fresh), owner, runner_env };
        Ok(Run { contain, env })
    }

    /// What of the git directory a run must leave as it was ([`super::planted::Guard`]): in a sandbox nothing (the
    /// agent sees none of the clone's git directory, and the runner's git reads nothing the agent could write),
    /// else the shared config, attributes and cache.
    pub(crate) fn guard(&self) -> super::planted::Guard {
        match self.sandbox_program() {
            Ok(Some(_)) => super::planted::Guard::none(),
            _ => super::planted::Guard::take(&self.common_dir()),
        }
    }

    /// The secrets this runner knows, by value, that no landing may carry (S21): those of its environment (by name
    /// and by value, as the scrubber knows them: the agent's own API key among them), and the credentials in the
    /// login files of `agent`'s CLI that a run gets a copy of (`~/.codex/auth.json`, `~/.claude/.credentials.json`…).
    pub(crate) fn known_secrets(&self, agent: &Prepared) -> Vec<crate::leaks::Known> {
        let mut known = crate::leaks::known_from_vars(self.env.utf8_vars());
        if let (Some(p), Some(home)) = (agent.preset, self.env.home()) {
            for f in p.home {
                let path = home.join(f);
                if let Some(text) = agent::files::read_text(&path, 1 << 20) {
                    known.extend(crate::leaks::known_in_file(&format!("~/{f}"), &text));
                }
            }
        }
        known
    }

    /// Where the agent's own `git swarm add` writes the tasks it files (`GIT_SWARM_OUTBOX`).
    pub(crate) fn outbox_file(&self) -> PathBuf {
        self.run_dir().join("outbox.toml")
    }
}

/// What a sandboxed run of the clone (git directory `common`, work tree `workdir`) has hidden, shown read-only and
/// shown writable besides its own work tree and run folder. Hidden: the user's checkout (its untracked files), the
/// clone's git directory (its config may hold a credential; its hooks, refs and the runner's files are no agent's
/// business), every runner's work trees and run folders. Shown again: the clone's objects (read-only: the
/// alternates of the agent's git directory) and `read`; the swarm's caches (`runner::caches`) and `write`. What
/// `contain_run` mounts and `doctor` shows.
pub(crate) fn mounts(
    places: &super::Places,
    common: &Path,
    workdir: Option<&Path>,
    read: &[PathBuf],
    write: &[PathBuf],
) -> (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>) {
    let mut hide: Vec<PathBuf> = workdir.map(Path::to_path_buf).into_iter().collect();
    hide.extend([common.to_path_buf(), places.base.clone()]);
    let mut readable = vec![common.join("objects")];
    readable.extend(read.iter().cloned());
    let mut writable = vec![super::caches::root(&places.base)];
    writable.extend(write.iter().cloned());
    (hide, readable, writable)
}

/// Copy `from` (a regular file of the runner's home, or a folder of them) to `to` (in a fresh run folder), private
/// to this user; links and anything else are left out, and so is everything past 16 MiB.
fn copy_into(from: &Path, to: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(from) else { return };
    if let Some(parent) = to.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if meta.is_file() && meta.len() <= 16 << 20 {
        if let Ok(bytes) = std::fs::read(from) {
            let _ = agent::files::create(to, bytes);
        }
    } else if meta.is_dir() {
        let _ = std::fs::create_dir_all(to);
        for e in std::fs::read_dir(from).into_iter().flatten().flatten() {
            copy_into(&e.path(), &to.join(e.file_name()));
        }
    }
}

/// An empty regular file of the runner's in `base` (made when it is not one: `0444`, readable by the uid its agents
/// run as), mounted over the credential files a sandbox blanks: they read as empty, not as an error.
fn empty_file(base: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = base.join("empty");
    let good = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0);
    if !good {
        let _ = agent::files::remove_all(&path);
        agent::files::create(&path, b"").ok()?;
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).ok()?;
    Some(path)
}
