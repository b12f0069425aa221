//! `Ctx`: what every subcommand gets — the parsed globals resolved once (the repository, the agent id, the clock,
//! the retry limits, the environment), the swarm opened on first use and shared by the command's reads and
//! transactions, this clone's records of the epochs it holds — and `Opener`, for runners that open their own.

use super::*;

/// Everything a subcommand needs: the parsed globals, the printer, and the swarm once opened.
/// Opens the command's swarm ([`Ctx::opener`]).
#[derive(Debug, Clone)]
pub(crate) struct Opener {
    pub(in crate::cli) dir: PathBuf,
    pub(in crate::cli) remote: Option<String>,
    pub(in crate::cli) swarm_name: String,
    pub(in crate::cli) transport: crate::Transport,
    pub(in crate::cli) env: Arc<Environment>,
}

impl Opener {
    pub(crate) fn open(&self) -> CliResult<Swarm> {
        let repo = crate::repo::discover(&self.dir, &self.env).map_err(|e| CliError::from(TxnError::from(e)))?;
        Ok(crate::open_swarm(repo, self.remote.as_deref(), &self.swarm_name, self.transport)?)
    }
}

pub(crate) struct Ctx {
    pub out: Printer,
    /// The repository until the swarm is opened, which then owns it (`swarm.local.repo`).
    pub(in crate::cli) repo: Option<gix::Repository>,
    /// The swarm, opened on first use and shared by every later use in the command (a command may read and
    /// transact).
    pub(in crate::cli) swarm: Option<std::rc::Rc<Swarm>>,
    pub swarm_name: String,
    pub(in crate::cli) remote: Option<String>,
    pub(in crate::cli) transport: crate::Transport,
    pub(in crate::cli) clock_offset: i64,
    pub retry: Retry,
    pub(in crate::cli) common_dir: PathBuf,
    pub(in crate::cli) agent: String,
    /// Where the command runs (`-C`, else the current directory), absolute.
    pub(in crate::cli) dir: PathBuf,
    /// Was the agent id given (`--agent`, `$GIT_SWARM_AGENT`, `swarm.agent`), or derived from user and host?
    pub(in crate::cli) agent_given: bool,
    /// `git config swarm.*` over `swarm.toml` (an error only for the commands that use it).
    pub(in crate::cli) git_config: Result<crate::config::Local, String>,
    /// The process environment, as it was at the start (`cli::main`).
    pub env: Arc<Environment>,
}

impl Ctx {
    pub(in crate::cli) fn new(global: GlobalArgs, env: Arc<Environment>) -> CliResult<Ctx> {
        let out = Printer::new(global.json);
        let dir = global.start_dir()?;
        // As git: run *in* that directory, so that relative paths (`--body-file`, `board --html`, a relative
        // `GIT_DIR`) mean what they would mean there.
        if !global.dir.is_empty() {
            std::env::set_current_dir(&dir)
                .map_err(|e| CliError::usage(format!("-C {}: cannot change into it: {e}", dir.display())))?;
        }
        let repo = crate::repo::discover(&dir, &env).map_err(|e| CliError::from(TxnError::from(e)))?;
        let cfg = repo.config_snapshot();
        let get = |key: &str| cfg.string(key).map(|v| v.to_string()).filter(|v| !v.is_empty());
        let (env_swarm, env_remote) = (env.swarm().map(String::from), env.remote().map(String::from));
        let swarm_name =
            global.swarm.clone().or(env_swarm).or_else(|| get("swarm.name")).unwrap_or_else(|| "default".into());
        crate::model::validate_swarm_name(&swarm_name).map_err(|e| CliError::usage(format!("--swarm: {e}")))?;
        let remote = global.remote.clone().or(env_remote).or_else(|| get("swarm.remote"));
        if let Some(r) = remote.as_deref().filter(|r| r.starts_with('-') || r.is_empty()) {
            return Err(CliError::usage(format!(
                "--remote '{}': not a remote name, URL or path",
                crate::escape::line(r)
            )));
        }
        let transport = match env.transport().map(Ok).or_else(|| get("swarm.transport").map(|t| t.parse())) {
            Some(t) => t.map_err(|e: String| CliError::usage(format!("swarm.transport: {e}")))?,
            None => crate::Transport::Auto,
        };
        let common_dir = repo.common_dir().to_path_buf();
        let git_config = crate::config::Local::from_git(cfg.plumbing()).map_err(|e| e.to_string());
        let clock_offset = env.clock_offset();
        // A bad agent id is a usage error for every command, not only for those that write. An empty or non-UTF-8
        // `$GIT_SWARM_AGENT` is unset (`environment`: the git hooks must not stop on it).
        let given = global.agent.clone().or_else(|| env.agent().map(String::from)).or_else(|| get("swarm.agent"));
        let agent_given = given.is_some();
        let agent = given.unwrap_or_else(|| default_agent(&common_dir, &env));
        validate_agent(&agent).map_err(|e| CliError::usage(format!("--agent: {e}")))?;
        let mut retry = Retry::default();
        retry.max_elapsed = env.max_retry().unwrap_or(retry.max_elapsed);
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Ok(Ctx {
            out,
            repo: Some(repo),
            swarm: None,
            swarm_name,
            remote,
            transport,
            clock_offset,
            retry,
            common_dir,
            agent,
            dir,
            agent_given,
            git_config,
            env,
        })
    }

    /// This clone's `git config swarm.*` settings for runners; a bad key is a usage error naming it.
    pub(crate) fn git_config(&self) -> CliResult<crate::config::Local> {
        self.git_config.clone().map_err(|e| {
            CliError::usage(e).hint("see the keys with `man git-swarm` (CONFIGURATION) or docs/configuration.md")
        })
    }

    /// This agent's id: `--agent`, `$GIT_SWARM_AGENT`, else `<user>-<host>` (validated once, in `new`).
    pub(crate) fn agent(&self) -> &str {
        &self.agent
    }

    /// The id of a long-running runner: as [`Ctx::agent`] when given; else `<user>-<host>-<4 hex>`, so that two
    /// runners started in one clone without `--agent` never share an id (and a work tree, and claims).
    pub(crate) fn runner_agent(&self) -> String {
        if self.agent_given {
            return self.agent.clone();
        }
        let base: String = self.agent.chars().take(58).collect();
        format!("{base}-{:04x}", fastrand::u16(..))
    }

    pub(crate) fn now(&self) -> Timestamp {
        Timestamp::now_with_offset(self.clock_offset)
    }

    /// The clock ops see: the system clock, shifted by `GIT_SWARM_CLOCK_OFFSET` (tests skew it).
    pub(crate) fn clock(&self) -> impl Fn() -> Timestamp + use<> {
        let offset = self.clock_offset;
        move || Timestamp::now_with_offset(offset)
    }

    /// `--remote` (or `$GIT_SWARM_REMOTE`, or `git config swarm.remote`) as given.
    pub(crate) fn remote_cli(&self) -> Option<String> {
        self.remote.clone()
    }

    /// Where the command runs.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The repository the command runs in, whether the swarm is open yet or not.
    pub(crate) fn repo(&self) -> Option<&gix::Repository> {
        self.repo.as_ref().or_else(|| self.swarm.as_deref().map(|s| &s.local.repo))
    }

    /// The remote as agents should name it (`GIT_SWARM_REMOTE`): `--remote`, else `origin` when configured, else
    /// this repository's path.
    pub(crate) fn remote_arg(&self) -> String {
        if let Some(r) = &self.remote {
            return r.clone();
        }
        let has_origin = self.repo().is_some_and(|r| r.config_snapshot().string("remote.origin.url").is_some());
        if has_origin { "origin".into() } else { self.common_dir.to_string_lossy().into_owned() }
    }

    /// The swarm, opened on the first call; every later call shares it.
    pub(crate) fn swarm(&mut self) -> CliResult<std::rc::Rc<Swarm>> {
        if let Some(s) = &self.swarm {
            return Ok(std::rc::Rc::clone(s));
        }
        let repo = self.repo.take().ok_or_else(|| CliError::io("internal: the repository is gone"))?;
        let swarm =
            std::rc::Rc::new(crate::open_swarm(repo, self.remote.as_deref(), &self.swarm_name, self.transport)?);
        self.swarm = Some(std::rc::Rc::clone(&swarm));
        Ok(swarm)
    }

    /// What opens this command's swarm again, in another thread (a `Swarm` is not `Send`): one per agent of
    /// `run worker --agents`.
    pub(crate) fn opener(&self) -> Opener {
        Opener {
            dir: self.dir.clone(),
            remote: self.remote.clone(),
            swarm_name: self.swarm_name.clone(),
            transport: self.transport,
            env: Arc::clone(&self.env),
        }
    }

    /// The identity written on state commits: the configured user, else the agent.
    pub(crate) fn identity(swarm: &Swarm, agent: &str) -> Identity {
        let cfg = swarm.local.repo.config_snapshot();
        let name = cfg.string("user.name").map(|v| v.to_string()).filter(|v| !v.trim().is_empty());
        let email = cfg.string("user.email").map(|v| v.to_string()).filter(|v| !v.trim().is_empty());
        Identity {
            name: name.unwrap_or_else(|| agent.to_string()),
            email: email.unwrap_or_else(|| format!("{agent}@git-swarm.invalid")),
        }
    }

    /// Run one op through the transaction loop, reporting unreadable files on the way.
    pub(crate) fn transact<T>(
        &mut self,
        op: impl FnMut(&Snapshot, Timestamp, &str) -> Result<(crate::ops::Change, T), DomainError>,
    ) -> CliResult<(std::rc::Rc<Swarm>, crate::Committed<T>)> {
        self.transact_on(crate::Reads::Live, op)
    }

    /// [`Ctx::transact`] for an op that reads only part of the board ([`crate::Reads`]).
    pub(crate) fn transact_on<T>(
        &mut self,
        reads: crate::Reads<'_>,
        op: impl FnMut(&Snapshot, Timestamp, &str) -> Result<(crate::ops::Change, T), DomainError>,
    ) -> CliResult<(std::rc::Rc<Swarm>, crate::Committed<T>)> {
        let mut op = op;
        let agent = self.agent().to_string();
        let swarm = self.swarm()?;
        let who = Self::identity(&swarm, &agent);
        let clock = self.clock();
        // Remember what the last attempt could not read, to report it whether the op went through or not.
        let mut seen = Vec::new();
        let res = swarm.transact_on(reads, &self.retry, &who, &clock, |snap, now| {
            seen.clone_from(&snap.problems);
            op(snap, now, &agent)
        });
        self.out.problems(&seen);
        Ok((swarm, res?))
    }

    /// [`Ctx::transact`] for an op that writes the settings ([`Swarm::transact_settings`]): it may replace a
    /// `swarm.toml` that cannot be read. What the board's settings were is in the snapshot the op gets.
    pub(crate) fn transact_settings<T>(
        &mut self,
        mut op: impl FnMut(&Snapshot, Timestamp, &str) -> Result<(crate::ops::Change, T), DomainError>,
    ) -> CliResult<(std::rc::Rc<Swarm>, crate::Committed<T>)> {
        let agent = self.agent().to_string();
        let swarm = self.swarm()?;
        let who = Self::identity(&swarm, &agent);
        let clock = self.clock();
        let mut seen = Vec::new();
        let res = swarm.transact_settings(&self.retry, &who, &clock, |snap, now| {
            seen.clone_from(&snap.problems);
            op(snap, now, &agent)
        });
        // The broken `swarm.toml` this op replaced is no problem to report.
        seen.retain(|p| p.path != "swarm.toml" || res.is_err());
        self.out.problems(&seen);
        Ok((swarm, res?))
    }

    /// Read the newest board, reporting unreadable files.
    pub(crate) fn read(&mut self, full: bool) -> CliResult<Snapshot> {
        let swarm = self.swarm()?;
        let snap = swarm.read(full)?;
        self.out.problems(&snap.problems);
        Ok(snap)
    }

    /// The local record of the epoch this agent claimed a task under, so that a later `done`/`fail` of a stale
    /// holder is fenced off even when it has the same agent id.
    pub(in crate::cli) fn held_path(&self, agent: &str, id: &str) -> PathBuf {
        self.common_dir.join("swarm").join("held").join(&self.swarm_name).join(agent).join(id)
    }

    pub(crate) fn remember_epoch(&self, agent: &str, id: &str, epoch: u64) {
        let p = self.held_path(agent, id);
        // Best effort: without the record, fencing falls back to the agent id alone.
        if let Some(parent) = p.parent()
            && std::fs::create_dir_all(parent).is_ok()
        {
            let _ = std::fs::write(&p, epoch.to_string());
        }
    }

    pub(crate) fn recalled_epoch(&self, agent: &str, id: &str) -> Option<u64> {
        std::fs::read_to_string(self.held_path(agent, id)).ok()?.trim().parse().ok()
    }

    /// Drop the record of `epoch`, unless another claim of this agent has replaced it meanwhile.
    pub(crate) fn forget_epoch(&self, agent: &str, id: &str, epoch: Option<u64>) {
        if epoch.is_none() || self.recalled_epoch(agent, id) == epoch {
            let _ = std::fs::remove_file(self.held_path(agent, id));
        }
    }

    /// Refuse a holder op (`claim`, `done`, `fail`, `release`) under the agent id of a runner that runs in this
    /// clone: its agent inherits the id, and an agent that finishes its own task would have it done without its
    /// code (the landing then refused). `renew` stays open to the agent's hooks.
    pub(crate) fn refuse_a_runners_id(&self, agent: &str, what: &str) -> CliResult<()> {
        // Inside a runner's agent run (its outbox is set; in a sandbox the runner's pid file is not even visible).
        let in_run = self.env.outbox().is_some() && self.env.agent() == Some(agent);
        let pid = match crate::runner::live_runner(&crate::runner::Places::of(&self.common_dir, &self.env), agent) {
            Some(pid) => pid.to_string(),
            None if in_run => "its own".to_string(),
            None => return Ok(()),
        };
        Err(CliError::new(
            error::Exit::Refused,
            format!(
                "{what}: {agent} is the agent id of a runner that runs in this clone (pid {pid}); its claims are the \
                 runner's to claim, finish and give back"
            ),
        )
        .hint("an agent of a runner just exits, its hand-off written: the runner lands or fails its task")
        .hint("to act by hand, stop that runner first, or use another id (--agent)"))
    }

    /// The shape of `release`, `done` and `fail`: an op by the holder of `id`, under `epoch` (the flag, else the
    /// recorded one), then the task printed as `<verb> <id>` or as JSON.
    pub(crate) fn holder_op(
        &mut self,
        id: &str,
        epoch: Option<u64>,
        verb: &str,
        op: impl Fn(
            &crate::ops::Board,
            &crate::ops::Actor,
            Option<u64>,
        ) -> Result<(crate::ops::Change, crate::model::Task), DomainError>,
    ) -> CliResult<std::rc::Rc<Swarm>> {
        let agent = self.agent().to_string();
        let what = match verb {
            "failed" => "fail",
            "released" => "release",
            v => v,
        };
        self.refuse_a_runners_id(&agent, what)?;
        let epoch = epoch.or_else(|| self.recalled_epoch(&agent, id));
        let (swarm, c) = self.transact_on(crate::Reads::Tasks(&[id]), |snap, now, agent| {
            let actor = crate::ops::Actor { agent: agent.to_string(), now };
            op(&snap.board, &actor, epoch)
        })?;
        self.forget_epoch(&agent, id, c.value.result.as_ref().and_then(|r| r.epoch).or(epoch));
        let t = c.value;
        let after = match (verb, t.status) {
            ("failed", crate::model::Status::Open) => " (open again for another attempt)".to_string(),
            ("failed", _) => " (no attempts left)".to_string(),
            _ => String::new(),
        };
        self.out.line(format!("{verb} {}: {}{after}", t.id, crate::escape::line(&t.title)));
        self.out.doc(&output::task_json(&t, self.now()));
        Ok(swarm)
    }

    /// The commit a revision names in this repository (`HEAD`, a branch, a short or full id). A revision that
    /// names nothing, or no commit, is a usage error naming `flag`.
    pub(crate) fn resolve_commit(&self, rev: &str, flag: &str) -> CliResult<gix::ObjectId> {
        let bad = |why: String| {
            CliError::usage(format!("{flag} '{}': {why}", crate::escape::line(rev)))
                .hint("give a commit of this repository: HEAD, a branch, or a commit id")
        };
        if rev.trim().is_empty() || rev.starts_with('-') {
            return Err(bad("not a revision".into()));
        }
        // git's own revision syntax, in the directory the command runs in (its work tree's HEAD).
        crate::runner::git::rev_parse(&self.dir, rev).map_err(|_| bad("no such commit in this repository".into()))
    }
}

/// The default agent id: `<user>-<host>-<clone>`, where `<clone>` is a short random id kept in this clone
/// (`<git dir>/swarm/clone-id`, made on first use): two clones on one machine are two agents, and every work tree
/// of one clone is the same agent (a claim made in one can be finished from another).
pub(crate) fn default_agent(common_dir: &std::path::Path, env: &Environment) -> String {
    let base = user_host(env);
    match clone_id(common_dir) {
        Some(c) => format!("{}-{c}", base.chars().take(55).collect::<String>()),
        None => base,
    }
}

/// This clone's short id (4 hex digits), made once; `None` when the git directory cannot hold it (read-only). The
/// file names the git directory it was made in: a clone copied with its `.git` (`cp -a`, an image, a snapshot) gets
/// an id of its own, or the copy and the original would be one agent.
pub(crate) fn clone_id(common_dir: &std::path::Path) -> Option<String> {
    let file = common_dir.join("swarm").join("clone-id");
    let here = std::fs::canonicalize(common_dir).unwrap_or_else(|_| common_dir.to_path_buf());
    let valid = |s: &str| (4..=16).contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit());
    let read = |text: &str| -> Option<String> {
        let mut lines = text.lines();
        let id = lines.next()?.trim().to_string();
        let made_in = lines.next().map(str::trim).filter(|p| !p.is_empty());
        (valid(&id) && made_in.is_none_or(|p| std::path::Path::new(p) == here)).then_some(id)
    };
    let existing = std::fs::read_to_string(&file).ok();
    if let Some(id) = existing.as_deref().and_then(read) {
        return Some(id);
    }
    let dir = file.parent()?;
    std::fs::create_dir_all(dir).ok()?;
    let id = format!("{:04x}", fastrand::u16(..));
    // Written whole, then linked into place: a reader never sees it half written, and of two commands that make
    // it at once, the first link wins for both. A copied or broken file is replaced (renamed over).
    let tmp = dir.join(format!("clone-id.{}.tmp", std::process::id()));
    std::fs::write(&tmp, format!("{id}\n{}\n", here.display())).ok()?;
    let placed = if existing.is_some() { std::fs::rename(&tmp, &file) } else { std::fs::hard_link(&tmp, &file) };
    let _ = std::fs::remove_file(&tmp);
    match placed {
        Ok(()) => Some(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::read_to_string(&file).ok().as_deref().and_then(read)
        }
        Err(_) => None,
    }
}

pub(crate) fn user_host(env: &Environment) -> String {
    let user = env.user().unwrap_or("agent");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| env.host().map(String::from))
        .unwrap_or_else(|| "host".into());
    let clean = |s: &str| -> String {
        s.trim().chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '-' }).collect()
    };
    let id = format!("{}-{}", clean(user), clean(&host));
    let id: String = id.trim_matches('-').chars().take(64).collect();
    if id.is_empty() { "agent".into() } else { id }
}
