//! How a runner contains the agents it starts (`agent::sandbox`; docs/security.md, *Containment*): the policy of
//! `[run] sandbox`, `network`, `sandbox_read`/`sandbox_write` and `[roles.*] env`/`home_files`; for each run its
//! environment (an allow-list), a fresh home holding only its CLI's config and login, and an object directory of
//! its own (`GIT_OBJECT_DIRECTORY`, the clone's objects as alternates: the clone's `.git` is read-only inside);
//! and after the run, the objects of its commits brought into the clone, each checked against its id.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gix::ObjectId;

use super::{Role, RunError, Runner};
use crate::agent::sandbox::{Mode, Spec, Support};
use crate::agent::{self, Prepared};
use crate::model::Config;

/// `[run]`'s containment settings, as this runner read them last ([`Runner::settings`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    pub mode: Mode,
    pub network: bool,
    /// More paths an agent may read, and write (absolute, `~/` expanded).
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// The settings a runner contains its agents by; set from `[run]` before each claim.
#[derive(Debug, Default)]
pub struct Policy(Mutex<Option<Settings>>);

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

/// The runner's home: `$HOME`, when it is an absolute path.
pub(crate) fn runner_home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute())
}

/// One run, contained: what [`agent::Invocation::contain`] takes, the variables the runner adds for it, and the
/// object directory its commits go to.
pub(crate) struct Run {
    pub contain: agent::Contain,
    pub env: Vec<(String, String)>,
    /// The objects folder of the run's copy of the git directory, and the work tree's own git directory.
    objects: Option<PathBuf>,
    admin: Option<PathBuf>,
}

/// Where the clone's objects are shown (read-only) inside the run's copy of its git directory.
const OBJECTS_INSIDE: &str = ".swarm-objects";

/// Make `shadow` a copy of the git directory `common` for an agent's run: its config, `HEAD`, `packed-refs`,
/// `shallow`, `info/exclude` and loose refs copied; an empty objects folder whose alternates are the clone's
/// objects (as the agent sees them, at [`OBJECTS_INSIDE`], and what they name in turn); mount points for those
/// and for the work tree's own git directory `admin`.
fn shadow_git_dir(common: &Path, shadow: &Path, admin: Option<&Path>) -> std::io::Result<()> {
    std::fs::create_dir_all(shadow.join("objects").join("info"))?;
    std::fs::create_dir_all(shadow.join("objects").join("pack"))?;
    std::fs::create_dir_all(shadow.join(OBJECTS_INSIDE))?;
    for f in ["HEAD", "packed-refs", "shallow"] {
        copy_into(&common.join(f), &shadow.join(f));
    }
    // Not the config as it is: it may hold a credential (actions/checkout's `http.<url>.extraheader`, a remote's URL
    // with a token, `include.path` to a file of them). Only what reading the repository needs.
    std::fs::write(shadow.join("config"), repository_config(&common.join("config")))?;
    copy_into(&common.join("info").join("exclude"), &shadow.join("info").join("exclude"));
    copy_into(&common.join("refs"), &shadow.join("refs"));
    std::fs::create_dir_all(shadow.join("refs").join("heads"))?;
    std::fs::create_dir_all(shadow.join("refs").join("tags"))?;
    let mut alternates = vec![common.join(OBJECTS_INSIDE).to_string_lossy().into_owned()];
    // The clone's own alternates (a clone made with --reference), absolute: they are read from their place.
    if let Some(text) = agent::files::read_text(&common.join("objects/info/alternates"), 64 * 1024) {
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let p = Path::new(line);
            let abs = if p.is_absolute() { p.to_path_buf() } else { common.join("objects").join(p) };
            alternates.push(abs.to_string_lossy().into_owned());
        }
    }
    std::fs::write(shadow.join("objects/info/alternates"), alternates.join("\n") + "\n")?;
    if let Some(gd) = admin
        && let Ok(rel) = gd.strip_prefix(common)
    {
        std::fs::create_dir_all(shadow.join(rel))?;
    }
    Ok(())
}

/// What an agent's copy of the git directory keeps of its `config`: the repository's format (`[core]`'s
/// `repositoryformatversion`, `bare`, `filemode`, `symlinks`, `ignorecase`, `precomposeunicode`, `logallrefupdates`)
/// and every `[extensions]` key; nothing else (remotes, credentials, includes, filters, hooks).
fn repository_config(path: &Path) -> String {
    const CORE: &[&str] = &[
        "repositoryformatversion",
        "bare",
        "filemode",
        "symlinks",
        "ignorecase",
        "precomposeunicode",
        "logallrefupdates",
    ];
    let mut out = String::new();
    let Some(text) = agent::files::read_text(path, 1 << 20) else {
        return "[core]\n\trepositoryformatversion = 0\n[gc]\n\tauto = 0\n".into();
    };
    let Ok(file) = gix::config::File::try_from(text.as_str()) else {
        return "[core]\n\trepositoryformatversion = 0\n[gc]\n\tauto = 0\n".into();
    };
    let simple = |v: &str| v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    for (section, keep) in [("core", Some(CORE)), ("extensions", None)] {
        let mut lines = Vec::new();
        for sec in
            file.sections_by_name(section).into_iter().flatten().filter(|s| s.header().subsection_name().is_none())
        {
            for name in sec.body().value_names() {
                let key = name.to_string().to_ascii_lowercase();
                if keep.is_some_and(|k| !k.contains(&key.as_str())) {
                    continue;
                }
                if let Some(v) = sec.body().value(&name).map(|v| v.to_string()).filter(|v| simple(v)) {
                    lines.push(format!("\t{key} = {v}\n"));
                }
            }
        }
        if !lines.is_empty() {
            out.push_str(&format!("[{section}]\n"));
            out.extend(lines);
        }
    }
    // No background maintenance of a copy that is thrown away.
    out.push_str("[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n");
    out
}

/// A work tree whose `HEAD` names a branch that lives only in the run's copy (`git checkout -b` by the agent):
/// its `HEAD` becomes the commit the branch is at, so that the runner finds the agent's work.
fn detach_head(admin: &Path, shadow: &Path) {
    let head = admin.join("HEAD");
    let Some(text) = agent::files::read_text(&head, 4096) else { return };
    let Some(name) = text.trim().strip_prefix("ref: ") else { return };
    if !name.starts_with("refs/") || name.split('/').any(|c| c == ".." || c.is_empty()) {
        return;
    }
    let loose = agent::files::read_text(&shadow.join(name), 4096).map(|t| t.trim().to_string());
    let packed = || {
        agent::files::read_text(&shadow.join("packed-refs"), 16 << 20).and_then(|t| {
            t.lines().find_map(|l| l.strip_suffix(name).and_then(|h| h.strip_suffix(' ')).map(str::to_string))
        })
    };
    if let Some(id) = loose.or_else(packed).filter(|id| ObjectId::from_hex(id.as_bytes()).is_ok()) {
        let _ = agent::files::write(&head, format!("{id}\n"));
    }
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

    /// Whether this runner's agent runs are sandboxed: `Ok(Some(bwrap))` when they are, `Ok(None)` when they run
    /// uncontained (`sandbox = "off"`, or `auto` on a machine with no sandbox: said once per runner start by the
    /// caller), `Err` when `required` and there is none.
    pub(crate) fn sandbox_program(&self) -> Result<Option<PathBuf>, RunError> {
        let s = self.contain.get();
        match (s.mode, agent::sandbox::support()) {
            (Mode::Off, _) => Ok(None),
            (_, Support::Ready { bwrap, .. }) => Ok(Some(bwrap.clone())),
            (Mode::Required, Support::Missing { why, hint }) => {
                Err(RunError::Settings(format!("[run] sandbox = \"required\", but {why} ({hint})")))
            }
            (Mode::Auto, Support::Missing { .. }) => Ok(None),
        }
    }

    /// How a run of `agent` for `role` in `cwd` (a work tree of this clone, or a folder of the runner's) is
    /// contained. A fresh home and an object directory are made in the run's folder when it is sandboxed.
    pub(crate) fn contain_run(
        &self,
        cwd: &Path,
        role: Role,
        agent: Option<&Prepared>,
        config: &Config,
    ) -> Result<Run, RunError> {
        let settings = self.contain.get();
        let home = runner_home();
        let applied = self.git_config.apply(config);
        let pass = pass_env(&applied, role, agent, home.as_deref());
        let mut env = vec![
            // The agent's own `git swarm add` goes to the runner, which files it scrubbed ([`super::outbox`]).
            ("GIT_SWARM_OUTBOX".to_string(), self.outbox_file().to_string_lossy().into_owned()),
        ];
        // Nothing of an earlier run's outbox is taken for this one's.
        let _ = std::fs::remove_file(self.outbox_file());
        let Some(bwrap) = self.sandbox_program()? else {
            let contain = agent::Contain { pass_env: pass, sandbox: None, home: None };
            return Ok(Run { contain, env, objects: None, admin: None });
        };
        let run = self.run_dir();
        let io = |e: std::io::Error, what: &Path| RunError::Setup(format!("cannot prepare {}: {e}", what.display()));
        // A fresh home, holding only the CLI's config and login, copied in.
        let fresh = run.join("home");
        remove_all(&fresh);
        std::fs::create_dir_all(&fresh).map_err(|e| io(e, &fresh))?;
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
        // The clone's git directory, as the agent sees it: a copy of its small files (config, refs, packed-refs)
        // in the run's folder, over it, with the clone's objects read-only inside and the work tree's own git
        // directory (`worktrees/<id>`: its HEAD, index, rebase state) writable. What the agent's git writes there
        // (objects of its commits, a branch, a lock) stays in the copy; the runner brings the objects in afterwards.
        let common = self.common_dir();
        let shadow = run.join("git");
        remove_all(&shadow);
        let admin = worktree_git_dir(cwd);
        shadow_git_dir(&common, &shadow, admin.as_deref()).map_err(|e| io(e, &shadow))?;
        let mut binds =
            vec![(shadow.clone(), common.clone(), true), (common.join("objects"), common.join(OBJECTS_INSIDE), false)];
        if let Some(gd) = &admin
            && let Ok(rel) = gd.strip_prefix(&common)
        {
            binds.push((gd.clone(), common.join(rel), true));
        }
        // The agent's own `GIT_CONFIG_*` (the excludes of `hooks::agent::exclude_env`) are its only ones: the
        // copy's config says no background maintenance.
        env.push(("GIT_SWARM_SANDBOXED".to_string(), "1".to_string()));
        let clone_top = self.swarm.local.repo.workdir().map(Path::to_path_buf);
        let mut writable = vec![cwd.to_path_buf(), run.clone()];
        writable.extend(settings.write.iter().cloned());
        let spec =
            Spec::new(cwd, home.as_deref(), clone_top.as_deref(), &writable, &settings.read, binds, settings.network);
        let contain = agent::Contain { pass_env: pass, sandbox: Some((bwrap, spec)), home: Some(fresh) };
        Ok(Run { contain, env, objects: Some(shadow.join("objects")), admin })
    }

    /// After a contained run: bring the objects its commits wrote into the clone, each written again through the
    /// clone's object database (so an object whose content is not its name is never taken). How many came in.
    pub(crate) fn bring_objects(&self, run: &Run) -> Result<usize, RunError> {
        let Some(dir) = &run.objects else { return Ok(0) };
        // The copy's alternates name the clone's own objects: out of the way, so that only the run's are listed.
        let _ = std::fs::remove_file(dir.join("info").join("alternates"));
        let n = bring_objects(&self.swarm.local.repo, dir).map_err(RunError::Setup)?;
        // A branch the agent checked out lives in the copy: its work tree's HEAD is made the commit it names.
        if let (Some(admin), Some(shadow)) = (&run.admin, dir.parent()) {
            detach_head(admin, shadow);
        }
        Ok(n)
    }

    /// What of the git directory a run in `cwd` must leave as it was ([`super::planted::Guard`]): in a sandbox only
    /// the work tree's links (the rest is read-only there), else the shared config, attributes and cache too.
    pub(crate) fn guard(&self, cwd: &Path) -> super::planted::Guard {
        match self.sandbox_program() {
            Ok(Some(_)) => super::planted::Guard::take_links(&self.common_dir(), cwd),
            _ => super::planted::Guard::take(&self.common_dir(), cwd),
        }
    }

    /// Where the agent's own `git swarm add` writes the tasks it files (`GIT_SWARM_OUTBOX`).
    pub(crate) fn outbox_file(&self) -> PathBuf {
        self.run_dir().join("outbox.toml")
    }
}

/// The git directory of the linked work tree `wt` (its `.git` file names it), if it is one.
fn worktree_git_dir(wt: &Path) -> Option<PathBuf> {
    let text = agent::files::read_text(&wt.join(".git"), 4096)?;
    let dir = PathBuf::from(text.trim().strip_prefix("gitdir:")?.trim());
    dir.is_absolute().then_some(dir).filter(|d| d.is_dir())
}

/// Copy `from` (a regular file, or a folder of them) to `to`, private to this user; links and anything else are
/// left out, and so is everything past 16 MiB.
fn copy_into(from: &Path, to: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(from) else { return };
    if let Some(parent) = to.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if meta.is_file() && meta.len() <= 16 << 20 {
        if std::fs::copy(from, to).is_ok() {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600));
        }
    } else if meta.is_dir() {
        let _ = std::fs::create_dir_all(to);
        for e in std::fs::read_dir(from).into_iter().flatten().flatten() {
            copy_into(&e.path(), &to.join(e.file_name()));
        }
    }
}

fn remove_all(p: &Path) {
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_dir_all(p);
    } else {
        let _ = std::fs::remove_file(p);
    }
}

/// Write every object of the object directory `dir` into `repo`, checking that each is what its id says.
pub(crate) fn bring_objects(repo: &gix::Repository, dir: &Path) -> Result<usize, String> {
    use gix::objs::Find;
    use gix::objs::Write;
    let odb = gix::odb::at(dir, gix::hash::Kind::Sha1).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    let ids: Vec<ObjectId> = odb
        .iter()
        .map_err(|e| format!("cannot list the objects of {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .collect();
    let mut buf = Vec::new();
    let mut brought = 0;
    for id in ids {
        if repo.has_object(id) {
            continue;
        }
        let Ok(Some(data)) = odb.try_find(&id, &mut buf) else { continue };
        let (kind, bytes) = (data.kind, data.data.to_vec());
        match repo.write_buf(kind, &bytes) {
            Ok(written) if written == id => brought += 1,
            // Not what its name says: the clone never takes it (a commit naming it then has a missing object).
            Ok(_) => {}
            Err(e) => return Err(format!("cannot write object {id}: {e}")),
        }
    }
    Ok(brought)
}
