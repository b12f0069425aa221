//! The runner's part of landing where main is protected (`[forge]`, `crate::forge`, `docs/forge.md`): after
//! landings, keep the one pull/merge request from the swarm's branch to the protected one open and current; when the
//! judge says stop, mark it ready; before claiming, take the protected branch back into the swarm's when it moved
//! (the forge merged the request, or others' work) — by a merge commit on the swarm's branch, published like a
//! landing (`sync`), so that nothing landed is rewritten and every task's commit stays where the board says.
//!
//! Calls are few: at most one a landing batch (the update of the description, whose answer says whether the forge
//! merged it), at most one every [`UPDATE_EVERY`] per process (later landings are in the next one, and the last is
//! never dropped: a pending update is made when the runner goes idle, stops or ends), and the search and opening of
//! a request once. The token is read from the runner's environment; agents never see it (`agent::sandbox`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use gix::ObjectId;

use super::{Event, Runner, git};
use crate::forge::{self, Kind, Settings};
use crate::model::Config;
use crate::ops::Change;

/// The least time between two updates of the request by one process.
const UPDATE_EVERY: Duration = Duration::from_secs(10);
/// The least time between two looks at the protected branch by one process, between landings.
const SYNC_EVERY: Duration = Duration::from_secs(60);

/// What a process knows of the swarm's request.
#[derive(Debug, Default)]
struct Known {
    /// The swarm's `[forge]` as the runner read its settings last (`None`: it proposes nothing, and nothing here
    /// costs anything).
    settings: Option<Settings>,
    /// The request (number, its URL, GitHub's node id for GraphQL), once found or opened.
    request: Option<Request>,
    last_update: Option<Instant>,
    last_sync: Option<Instant>,
    /// Landings not yet in the description.
    pending: bool,
    /// Said once: no token, or the forge refuses.
    warned: bool,
    /// The commit the forge merged of the last request this process saw merged (a squash or a rebase leaves it
    /// out of the base: the next merge of the base takes it as its merge base).
    merged_head: Option<ObjectId>,
    /// The base tip whose merge into the swarm's branch conflicted (not tried again until the base moves).
    conflicted: Option<ObjectId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    number: u64,
    url: String,
    node_id: String,
    draft: bool,
}

static KNOWN: Mutex<Option<Known>> = Mutex::new(None);

/// The runner read its settings: what `[forge]` says now.
pub(crate) fn configure(config: &Config) {
    let s = forge::settings(config).ok().flatten();
    with_known(|k| {
        if k.settings.as_ref().map(|x| (x.kind, &x.base)) != s.as_ref().map(|x| (x.kind, &x.base)) {
            k.request = None;
        }
        k.settings = s;
    });
}

fn with_known<T>(f: impl FnOnce(&mut Known) -> T) -> T {
    let mut g = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Known::default))
}

/// A forge client for the swarm's repository.
enum Client {
    Github(crate::github::api::Client, crate::github::RepoSlug),
    Gitlab(crate::gitlab::api::Client, crate::gitlab::Project),
}

/// What a forge said of the request.
struct State {
    request: Request,
    open: bool,
    merged: bool,
    /// The commit its branch was at: the commit merged, when it was.
    head: Option<ObjectId>,
}

impl Client {
    fn open(r: &Runner<'_>, s: &Settings) -> Result<Client, String> {
        let vars = s.token_vars();
        let token = s.token().ok_or_else(|| format!("no token for {}: set {}", s.kind.as_str(), vars.join(" or ")))?;
        let url = remote_url(r);
        match s.kind {
            Kind::Github => {
                let repo = match &s.repo {
                    Some(r) => r.parse().map_err(|e: String| e)?,
                    None => url.as_deref().and_then(crate::github::RepoSlug::from_remote_url).ok_or_else(|| {
                        "the remote is not on github.com: set [forge] repo = \"owner/name\" (and api_url for GitHub \
                         Enterprise)"
                            .to_string()
                    })?,
                };
                let api = s
                    .api_url
                    .clone()
                    .or_else(|| std::env::var("GITHUB_API_URL").ok().filter(|u| !u.is_empty()))
                    .unwrap_or_else(|| crate::github::api::DEFAULT_API_URL.to_string());
                Ok(Client::Github(crate::github::api::Client::new(&api, &token).map_err(|e| e.to_string())?, repo))
            }
            Kind::Gitlab => {
                let derived = url.as_deref().and_then(crate::gitlab::RemoteProject::from_remote_url);
                let project = match &s.repo {
                    Some(r) => r.parse()?,
                    None => derived.as_ref().map(|d| d.project.clone()).ok_or_else(|| {
                        "the remote's URL names no GitLab project: set [forge] repo = \"group/project\"".to_string()
                    })?,
                };
                let api = s
                    .api_url
                    .clone()
                    .or_else(|| std::env::var("GITLAB_API_URL").ok().filter(|u| !u.is_empty()))
                    .or_else(|| derived.map(|d| d.api))
                    .unwrap_or_else(|| crate::gitlab::DEFAULT_API_URL.to_string());
                Ok(Client::Gitlab(crate::gitlab::api::Client::new(&api, &token).map_err(|e| e.to_string())?, project))
            }
        }
    }

    fn find(&self, head: &str, base: &str) -> Result<Option<State>, String> {
        match self {
            Client::Github(c, repo) => Ok(c.open_pull(repo, head, base).map_err(|e| e.to_string())?.map(gh_state)),
            Client::Gitlab(c, p) => Ok(c.open_mr(p, head, base).map_err(|e| e.to_string())?.map(gl_state)),
        }
    }

    fn create(&self, head: &str, base: &str, title: &str, body: &str, draft: bool) -> Result<State, String> {
        match self {
            Client::Github(c, repo) => {
                c.create_pull(repo, head, base, title, body, draft).map(gh_state).map_err(|e| e.to_string())
            }
            Client::Gitlab(c, p) => c.create_mr(p, head, base, title, body).map(gl_state).map_err(|e| e.to_string()),
        }
    }

    fn update(&self, req: &Request, title: &str, body: &str) -> Result<State, String> {
        match self {
            Client::Github(c, repo) => {
                c.update_pull(repo, req.number, title, body).map(gh_state).map_err(|e| e.to_string())
            }
            Client::Gitlab(c, p) => c.update_mr(p, req.number, title, body).map(gl_state).map_err(|e| e.to_string()),
        }
    }

    /// Ready for review, on GitHub (GitLab's is the title, without `Draft:`).
    fn ready(&self, req: &Request) -> Result<(), String> {
        match self {
            Client::Github(c, _) => c.mark_ready(&req.node_id).map_err(|e| e.to_string()),
            Client::Gitlab(..) => Ok(()),
        }
    }

    fn auto_merge(&self, req: &Request) -> Result<(), String> {
        match self {
            Client::Github(c, _) => c.enable_auto_merge(&req.node_id).map_err(|e| e.to_string()),
            Client::Gitlab(c, p) => c.auto_merge(p, req.number).map_err(|e| e.to_string()),
        }
    }

    /// The commit the forge merged of the last request it merged from `head` into `base`.
    fn last_merged(&self, head: &str, base: &str) -> Result<Option<ObjectId>, String> {
        let sha = match self {
            Client::Github(c, repo) => {
                c.merged_pulls(repo, head, base).map_err(|e| e.to_string())?.into_iter().find_map(|p| p.head_sha)
            }
            Client::Gitlab(c, p) => {
                c.merged_mrs(p, head, base).map_err(|e| e.to_string())?.into_iter().find_map(|m| m.head_sha)
            }
        };
        Ok(sha.and_then(|s| s.parse().ok()))
    }
}

fn gh_state(p: crate::github::api::Pull) -> State {
    State {
        open: p.open,
        merged: p.merged,
        head: p.head_sha.and_then(|s| s.parse().ok()),
        request: Request { number: p.number, url: p.url, node_id: p.node_id, draft: p.draft },
    }
}

fn gl_state(m: crate::gitlab::api::MergeRequest) -> State {
    State {
        open: m.open,
        merged: m.merged,
        head: m.head_sha.and_then(|s| s.parse().ok()),
        request: Request { number: m.iid, url: m.url, node_id: String::new(), draft: m.draft },
    }
}

/// The URL of the remote the swarm is on, as configured.
fn remote_url(r: &Runner<'_>) -> Option<String> {
    let name = &r.remote_env;
    if name.contains("://") || name.contains(':') || name.starts_with('/') {
        return Some(name.clone());
    }
    let name = if name.is_empty() { "origin" } else { name.as_str() };
    r.swarm.local.repo.config_snapshot().string(format!("remote.{name}.url").as_str()).map(|u| u.to_string())
}

impl Runner<'_> {
    /// The swarm's `[forge]`, when it proposes (broken settings were refused before any runner started).
    fn forge(&self, config: &Config) -> Option<Settings> {
        forge::settings(config).ok().flatten()
    }

    /// A task landed (alone or in a batch): bring the request up to date, now or at the next chance.
    pub(crate) fn after_landing(&mut self) {
        if with_known(|k| k.settings.is_none()) {
            return;
        }
        with_known(|k| k.pending = true);
        self.propose(false);
    }

    /// Bring the request up to date if a landing is not in it yet: `now` regardless of [`UPDATE_EVERY`] (the
    /// runner goes idle or ends, the judge stopped the swarm).
    pub(crate) fn propose(&mut self, now: bool) {
        let due = with_known(|k| {
            k.settings.is_some() && k.pending && (now || k.last_update.is_none_or(|t| t.elapsed() >= UPDATE_EVERY))
        });
        if !due {
            return;
        }
        let Ok(snap) = self.swarm.read(true) else { return };
        let Some(s) = self.forge(&snap.board.config) else { return };
        match self.update_request(&snap, &s) {
            Ok(Some(say)) => self.emit(Event::Forge(say)),
            Ok(None) => {}
            Err(why) => {
                let first = with_known(|k| !std::mem::replace(&mut k.warned, true));
                if first {
                    self.emit(Event::Warning(format!(
                        "the {} request from {} into {} is not kept current: {why}",
                        s.kind.as_str(),
                        snap.board.config.target,
                        s.base
                    )));
                }
            }
        }
    }

    /// One update of the request: open it when there is none (and work to propose), else its title and
    /// description; a request the forge merged makes the next claim take the base in. What to say, if anything.
    fn update_request(&mut self, snap: &crate::store::Snapshot, s: &Settings) -> Result<Option<String>, String> {
        let config = &snap.board.config;
        let target = format!("refs/heads/{}", config.target);
        let base_ref = format!("refs/heads/{}", s.base);
        let tip = self
            .swarm
            .fetch_branch(&target)
            .map_err(|e| e.to_string())?
            .ok_or("the swarm's branch is not there yet")?;
        let base = self.swarm.fetch_branch(&base_ref).map_err(|e| e.to_string())?;
        let on_branch = commits_not_in(&self.common_dir(), tip, base);
        let tasks: Vec<&crate::model::Task> = snap.board.tasks.values().map(|t| &t.task).collect();
        let mut landed = forge::landed_since(&tasks, &on_branch);
        with_known(|k| {
            k.pending = false;
            k.last_update = Some(Instant::now());
        });
        if landed.is_empty() {
            return Ok(None);
        }
        let store = self.swarm.store();
        for l in landed.iter_mut().take(forge::MAX_SHOWN) {
            l.note = store
                .read_text(snap.commit, &crate::state::note_path(&l.id), 64 * 1024)
                .ok()
                .flatten()
                .and_then(Result::ok);
        }
        let goal = super::goal(store, snap.commit);
        let stopped = self.stopped_at(snap).is_some();
        let draft = s.draft && !stopped;
        let title = forge::title(goal.as_deref(), draft, s.kind);
        let body = forge::body(goal.as_deref(), snap.board.cycle, &config.target, &s.base, &landed);
        let client = Client::open(self, s)?;
        let known = with_known(|k| k.request.clone());
        let state = match known {
            Some(req) => client.update(&req, &title, &body)?,
            None => match client.find(&config.target, &s.base)? {
                Some(found) => client.update(&found.request, &title, &body)?,
                None => {
                    let created = match client.create(&config.target, &s.base, &title, &body, draft) {
                        Ok(c) => c,
                        // Another runner opened it meanwhile.
                        Err(e) => client.find(&config.target, &s.base)?.ok_or(e)?,
                    };
                    if s.auto_merge {
                        client.auto_merge(&created.request)?;
                    }
                    let say = format!(
                        "opened {} {} from {} into {}: {}",
                        if s.kind == Kind::Github { "pull request" } else { "merge request" },
                        created.request.number,
                        config.target,
                        s.base,
                        created.request.url
                    );
                    with_known(|k| k.request = Some(created.request.clone()));
                    return Ok(Some(say));
                }
            },
        };
        if state.open {
            with_known(|k| k.request = Some(state.request.clone()));
            return Ok(None);
        }
        // Merged (or closed by a person): the next landing opens a new one; a merge is taken back in first.
        with_known(|k| {
            k.request = None;
            k.last_sync = None;
            if state.merged {
                k.merged_head = state.head;
            }
        });
        Ok(state.merged.then(|| {
            format!("request {} was merged into {}; the swarm's branch takes it in", state.request.number, s.base)
        }))
    }

    /// The judge said stop: the request is brought up to date and marked ready.
    pub(crate) fn propose_ready(&mut self) {
        if with_known(|k| k.settings.is_none()) {
            return;
        }
        with_known(|k| k.pending = true);
        self.propose(true);
        let Ok(snap) = self.swarm.read(false) else { return };
        let Some(s) = self.forge(&snap.board.config) else { return };
        let Some(req) = with_known(|k| k.request.clone()) else { return };
        if !s.draft {
            return;
        }
        // GitLab's title carries the draft, and the update above wrote it without (the swarm is stopped); GitHub's
        // REST API cannot undraft, its GraphQL can.
        let res = match s.kind {
            Kind::Gitlab => Ok(()),
            Kind::Github => Client::open(self, &s).and_then(|c| c.ready(&req)),
        };
        match res {
            Ok(()) => {
                self.emit(Event::Forge(format!("marked request {} ready: the judge stopped the swarm", req.number)))
            }
            Err(why) => self.emit(Event::Warning(format!("request {} could not be marked ready: {why}", req.number))),
        }
    }

    /// Before a claim: take the protected branch into the swarm's when it moved past it (a merge commit on the
    /// swarm's branch, published with a state op `sync` in one atomic update, as a landing is). At most every
    /// [`SYNC_EVERY`] per process, and right after a request was merged. A merge that conflicts is said once per
    /// base commit and left for a person (the request then shows the conflict).
    ///
    /// A request the forge squashed or rebased leaves the base without the swarm's commits, only their content: the
    /// merge then takes the commit the forge merged as its merge base (what the base has beyond it is others' work,
    /// what the swarm's branch has beyond it is work landed since), so later edits of the same lines do not conflict
    /// with their own squashed past, and the merge says `Swarm-Merged: <commit>` so that later requests list only
    /// the tasks landed after it.
    pub(crate) fn sync_target(&mut self, config: &Config) -> Result<(), super::RunError> {
        let Some(s) = self.forge(config) else { return Ok(()) };
        let due = with_known(|k| k.last_sync.is_none_or(|t| t.elapsed() >= SYNC_EVERY));
        if !due {
            return Ok(());
        }
        with_known(|k| k.last_sync = Some(Instant::now()));
        let target = format!("refs/heads/{}", config.target);
        let Some(base) = self.swarm.fetch_branch(&format!("refs/heads/{}", s.base))? else { return Ok(()) };
        let Some(tip) = self.swarm.fetch_branch(&target)? else { return Ok(()) };
        let common = self.common_dir();
        if git::is_ancestor(&common, base, tip) || with_known(|k| k.conflicted == Some(base)) {
            return Ok(());
        }
        // The commit the forge merged last, when it is not in the base (a squash or a rebase): from this process's
        // last look at the request, else one call to the forge.
        let merged = with_known(|k| k.merged_head.take()).or_else(|| {
            let client = Client::open(self, &s).ok()?;
            client.last_merged(&config.target, &s.base).ok().flatten()
        });
        let squashed = merged.filter(|h| {
            git::is_ancestor(&common, *h, tip)
                && !git::is_ancestor(&common, *h, base)
                && last_merged_on(&common, tip).is_none_or(|m| m != *h && git::is_ancestor(&common, m, *h))
        });
        let mut message = format!("git swarm: take {} into {}", s.base, config.target);
        if let Some(h) = squashed {
            message.push_str(&format!("\n\n{MERGED_TRAILER}: {h}\n"));
        }
        let ident = self.commit_ident.clone();
        let mut made: Option<(ObjectId, ObjectId)> = None;
        let mut prepare = |at: ObjectId| -> Result<ObjectId, String> {
            if let Some((on, m)) = made
                && on == at
            {
                return Ok(m);
            }
            if git::is_ancestor(&common, base, at) {
                return Err(TAKEN.into());
            }
            let m = merge_commit(&common, &ident, at, base, squashed, &message)?;
            made = Some((at, m));
            Ok(m)
        };
        let agent = self.agent.clone();
        let summary = format!("sync {} with {} at {}", config.target, s.base, crate::store::short(&base.to_string()));
        let res =
            self.swarm.land(&self.retry, &self.who, self.clock, &target, &mut prepare, |_snap, _now, _code| {
                Ok((Change { op: "sync", agent: agent.clone(), summary: summary.clone(), ..Default::default() }, ()))
            })?;
        match res {
            Ok(_) => self.emit(Event::Forge(format!(
                "took {} into {}{}",
                s.base,
                config.target,
                if squashed.is_some() {
                    " (the request was squashed or rebased: merged past its own commits)"
                } else {
                    ""
                }
            ))),
            Err(why) if why == TAKEN => {}
            Err(why) => {
                with_known(|k| k.conflicted = Some(base));
                self.emit(Event::Warning(format!(
                    "{} cannot be taken into {} ({why}): a person merges {} into {}; the request shows it",
                    s.base, config.target, s.base, config.target
                )));
            }
        }
        Ok(())
    }
}

/// What `prepare` says when another runner took the base in first.
const TAKEN: &str = "taken in already";
/// The trailer of a merge that took in a request the forge squashed or rebased: the commit it merged.
const MERGED_TRAILER: &str = "Swarm-Merged";

/// A merge commit of `base` into `tip` (or `base` itself when `tip` is behind it), made without a work tree
/// (`git merge-tree --write-tree`, `git commit-tree`); with `merge_base`, that commit is the merge's base.
fn merge_commit(
    common: &std::path::Path,
    ident: &[(String, String)],
    tip: ObjectId,
    base: ObjectId,
    merge_base: Option<ObjectId>,
    message: &str,
) -> Result<ObjectId, String> {
    if git::is_ancestor(common, tip, base) && merge_base.is_none() {
        return Ok(base);
    }
    let (tip_s, base_s) = (tip.to_string(), base.to_string());
    let mb = merge_base.map(|m| format!("--merge-base={m}"));
    let mut args = vec!["merge-tree", "--write-tree", "--name-only", "--no-messages"];
    if let Some(mb) = &mb {
        args.push(mb);
    }
    args.extend([tip_s.as_str(), base_s.as_str()]);
    let out = git::output(common, &args).map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let tree = lines.next().unwrap_or_default().trim().to_string();
    match out.status.code() {
        Some(0) => {}
        Some(1) => {
            let files: Vec<&str> = lines.filter(|l| !l.is_empty()).take(10).collect();
            return Err(format!("conflict in {}", crate::escape::line(&files.join(", "))));
        }
        _ => return Err(format!("git merge-tree: {}", String::from_utf8_lossy(&out.stderr).trim())),
    }
    let mut cmd = git::git_in(common);
    cmd.args(["commit-tree", &tree, "-p", &tip_s, "-p", &base_s, "-m", message]);
    for (k, v) in ident {
        cmd.env(k, v);
    }
    let made = cmd.output().map_err(|e| e.to_string())?;
    if !made.status.success() {
        return Err(format!("git commit-tree: {}", String::from_utf8_lossy(&made.stderr).trim()));
    }
    String::from_utf8_lossy(&made.stdout).trim().parse().map_err(|_| "git commit-tree said no commit".to_string())
}

/// The commit the last squashed or rebased request merged, as the swarm's branch records it: the
/// `Swarm-Merged` trailer of the newest of its merges that took the base in (merges only, on the first-parent line:
/// an agent's own commit cannot move it).
fn last_merged_on(common: &std::path::Path, tip: ObjectId) -> Option<ObjectId> {
    let format = format!("--format=%(trailers:key={MERGED_TRAILER},valueonly,separator=%x2C)");
    let out = git::run(
        common,
        &["log", "--first-parent", "--merges", "--grep=^git swarm: take ", "-n", "1", &format, &tip.to_string()],
    )
    .ok()?;
    out.trim().split(',').next()?.trim().parse().ok()
}

/// The commits of `tip` that are not proposed yet: neither in `base` nor in what the forge last merged of a squashed or
/// rebased request (all of them when there is no base), by id.
fn commits_not_in(
    common: &std::path::Path,
    tip: ObjectId,
    base: Option<ObjectId>,
) -> std::collections::BTreeSet<String> {
    let mut args = vec!["rev-list".to_string(), "--max-count=100000".to_string(), tip.to_string()];
    args.extend(base.map(|b| format!("^{b}")));
    args.extend(last_merged_on(common, tip).map(|m| format!("^{m}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    git::run(common, &args)
        .map(|out| out.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default()
}
