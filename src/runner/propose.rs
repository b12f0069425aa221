//! The runner's part of landing where main is protected (`[forge]`, `crate::forge`, `docs/forge.md`): after
//! landings, keep the one pull/merge request from the swarm's branch to the protected one open and current; when the
//! judge says stop, mark it ready; before claiming, take the protected branch back into the swarm's when it moved
//! (the forge merged the request, or others' work) — by a merge commit on the swarm's branch, published like a
//! landing (`sync`), so that nothing landed is rewritten and every task's commit stays where the board says.
//!
//! A request's description lists the tasks its head carries: landed on the swarm's branch, and neither in the base
//! nor in what the forge merged of an earlier request. A request the forge merged is not written again, but for one
//! write, when what its description lists is not what the merged commit holds (a landing the description had not
//! caught up with, or a write that raced the merge), to say exactly that; the next request lists only the rest.
//!
//! Calls are few: at most one a landing batch, and at most one every [`UPDATE_EVERY`] per process (later landings
//! are in the next one, and the last is never dropped: a pending update is made when the runner goes idle, stops or
//! ends). That one is the update of the description (whose answer says whether the forge merged it meanwhile), or,
//! when the base moved since the forge last said the request was open (a merge moves it), a look at the requests
//! instead, before anything is written: it says whether the forge merged the request and at which commit, the sync
//! takes the merged commit from it, and an update it finds still due waits for the next chance. Once a request: the
//! search (the same look) and the opening, and after its merge at most the one write above. The token is read from
//! the runner's environment; agents never see it (`agent::sandbox`).

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
    /// The base's tip when the forge last answered that the request was open. A base that moved since may be the
    /// forge's merge of it: the next update looks at the request before it writes (a merged request's description
    /// is never written but to say what it carried).
    base_seen: Option<ObjectId>,
    /// The commit the forge merged of the last request this process knows merged: what it holds was carried, and is
    /// not proposed again, whether or not the swarm's branch has taken the merge in yet.
    carried: Option<ObjectId>,
    /// The last look at the requests from the swarm's branch into the base (newest first), and the base's tip then:
    /// the update and the sync share it while the base stays there (one look per move of the base).
    looked: Option<(Option<ObjectId>, Vec<State>)>,
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
            k.base_seen = None;
            k.carried = None;
            k.looked = None;
            k.merged_head = None;
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
#[derive(Debug, Clone)]
struct State {
    request: Request,
    open: bool,
    merged: bool,
    /// The commit its branch was at: the commit merged, when it was.
    head: Option<ObjectId>,
    title: String,
    /// Its description.
    body: String,
}

impl Client {
    fn open(r: &Runner<'_>, s: &Settings) -> Result<Client, String> {
        let vars = s.token_vars();
        let token =
            s.token(&r.env).ok_or_else(|| format!("no token for {}: set {}", s.kind.as_str(), vars.join(" or ")))?;
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
                    .or_else(|| r.env.github_api_url().map(String::from))
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
                    .or_else(|| r.env.gitlab_api_url().map(String::from))
                    .or_else(|| derived.map(|d| d.api))
                    .unwrap_or_else(|| crate::gitlab::DEFAULT_API_URL.to_string());
                Ok(Client::Gitlab(crate::gitlab::api::Client::new(&api, &token).map_err(|e| e.to_string())?, project))
            }
        }
    }

    /// The requests from `head` into `base`, open or closed, the newest first (one call).
    fn look(&self, head: &str, base: &str) -> Result<Vec<State>, String> {
        match self {
            Client::Github(c, repo) => {
                Ok(c.recent_pulls(repo, head, base).map_err(|e| e.to_string())?.into_iter().map(gh_state).collect())
            }
            Client::Gitlab(c, p) => {
                Ok(c.recent_mrs(p, head, base).map_err(|e| e.to_string())?.into_iter().map(gl_state).collect())
            }
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
}

fn gh_state(p: crate::github::api::Pull) -> State {
    State {
        open: p.open,
        merged: p.merged,
        head: p.head_sha.and_then(|s| s.parse().ok()),
        title: p.title,
        body: p.body,
        request: Request { number: p.number, url: p.url, node_id: p.node_id, draft: p.draft },
    }
}

fn gl_state(m: crate::gitlab::api::MergeRequest) -> State {
    State {
        open: m.open,
        merged: m.merged,
        head: m.head_sha.and_then(|s| s.parse().ok()),
        title: m.title,
        body: m.description,
        request: Request { number: m.iid, url: m.url, node_id: String::new(), draft: m.draft },
    }
}

/// The requests from the swarm's branch into the base: the last look when the base is still at `base`, else one call
/// (kept for the next update and sync).
fn look(client: &Client, target: &str, base_name: &str, base: Option<ObjectId>) -> Result<Vec<State>, String> {
    if let Some(l) = with_known(|k| k.looked.as_ref().filter(|(at, _)| *at == base).map(|(_, l)| l.clone())) {
        return Ok(l);
    }
    let l = client.look(target, base_name)?;
    with_known(|k| k.looked = Some((base, l.clone())));
    Ok(l)
}

/// The request is merged or closed: it is written no more, and the next landing opens the next one. `head`: the
/// commit the forge merged (none when a person closed it), carried from now on.
fn forget(head: Option<ObjectId>, common: &std::path::Path) {
    with_known(|k| {
        k.request = None;
        k.base_seen = None;
        k.last_sync = None;
        if let Some(h) = head {
            k.merged_head = Some(h);
            if k.carried.is_none_or(|c| git::is_ancestor(common, c, h)) {
                k.carried = Some(h);
            }
        }
    });
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
        match self.update_request(&snap, &s, now) {
            Ok(said) => {
                for say in said {
                    self.emit(Event::Forge(say));
                }
            }
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

    /// One update of the request: its title and description, or its opening when there is none (and work to
    /// propose). A request the forge merged or a person closed is never written, but for one write that puts right
    /// what a merged one says it carried ([`Runner::merged`]); a merge makes the next claim take the base in. What
    /// to say.
    ///
    /// The description lists the tasks whose code is on the swarm's branch and neither in the base nor in what the
    /// forge merged of an earlier request ([`Known::carried`]). What the forge merged is learned before writing:
    /// when this process knows no request, or the base moved since the forge last said the request was open (a merge
    /// moves it), one look at the requests comes first, in place of the search and of the sync's own look. If the
    /// forge merges in the instant between that and the write, the write's answer says so and the next step puts the
    /// description back to what the request carried.
    fn update_request(
        &mut self,
        snap: &crate::store::Snapshot,
        s: &Settings,
        now: bool,
    ) -> Result<Vec<String>, String> {
        let config = &snap.board.config;
        let target = format!("refs/heads/{}", config.target);
        let base_ref = format!("refs/heads/{}", s.base);
        let tip = self
            .swarm
            .fetch_branch(&target)
            .map_err(|e| e.to_string())?
            .ok_or("the swarm's branch is not there yet")?;
        let base = self.swarm.fetch_branch(&base_ref).map_err(|e| e.to_string())?;
        let common = self.common_dir();
        let tasks: Vec<&crate::model::Task> = snap.board.tasks.values().map(|t| &t.task).collect();
        let proposed = || {
            let carried = with_known(|k| k.carried);
            forge::landed_since(&tasks, &commits_not_in(&common, tip, &[base, carried]))
        };
        let (mut request, base_seen) = with_known(|k| {
            k.pending = false;
            k.last_update = Some(Instant::now());
            (k.request.clone(), k.base_seen)
        });
        // Nothing to propose, unless the base moved under a request this process knows: the forge may have merged
        // it with the last landings (then they are in the base), and its description is to be settled.
        if proposed().is_empty() && (request.is_none() || base_seen == base) {
            return Ok(Vec::new());
        }
        let client = Client::open(self, s)?;
        let mut said = Vec::new();
        if request.is_none() || base_seen != base {
            let seen = look(&client, &config.target, &s.base, base)?;
            if let Some(req) = request.take() {
                match seen.iter().find(|r| r.request.number == req.number) {
                    // Still open (others' work moved the base): the look was this batch's call, and the write waits
                    // for the next chance (at once when the runner goes idle, stops or ends).
                    Some(st) if st.open && !now => {
                        with_known(|k| {
                            k.request = Some(st.request.clone());
                            k.base_seen = base;
                            k.pending = true;
                        });
                        return Ok(said);
                    }
                    Some(st) if st.open => request = Some(st.request.clone()),
                    Some(st) if st.merged => said.extend(self.merged(&client, s, &target, st, base_seen, &st.body)?),
                    _ => forget(None, &common),
                }
            }
            if request.is_none() {
                // Another runner's, or a person's.
                request = seen.iter().find(|r| r.open).map(|r| r.request.clone());
                // What the forge merged last was carried, though the swarm's branch may not have taken it in yet.
                if let Some(h) = seen.iter().find(|r| r.merged).and_then(|r| r.head)
                    && self.have(&target, h)
                {
                    with_known(|k| {
                        if k.carried.is_none_or(|c| git::is_ancestor(&common, c, h)) {
                            k.carried = Some(h);
                        }
                    });
                }
            }
            with_known(|k| {
                k.request = request.clone();
                k.base_seen = if request.is_some() { base } else { None };
            });
        }
        let mut landed = proposed();
        if landed.is_empty() {
            return Ok(said);
        }
        if let Some(req) = request {
            let (title, body, _) = self.describe(snap, s, &mut landed);
            let st = client.update(&req, &title, &body)?;
            if st.open {
                with_known(|k| {
                    k.request = Some(st.request.clone());
                    k.base_seen = base;
                });
                return Ok(said);
            }
            // Merged (in the instant since the base was looked at: this write went in after it, and is put right),
            // or closed by a person: the rest goes into a new one.
            if st.merged {
                said.extend(self.merged(&client, s, &target, &st, base, &body)?);
            } else {
                forget(None, &common);
            }
            landed = proposed();
            if landed.is_empty() {
                return Ok(said);
            }
        }
        let (title, body, draft) = self.describe(snap, s, &mut landed);
        let created = match client.create(&config.target, &s.base, &title, &body, draft) {
            Ok(c) => c,
            // Another runner opened it meanwhile: these landings go into it at the next chance.
            Err(e) => {
                with_known(|k| {
                    k.looked = None;
                    k.pending = true;
                });
                look(&client, &config.target, &s.base, base)?.into_iter().find(|r| r.open).ok_or(e)?
            }
        };
        if s.auto_merge {
            client.auto_merge(&created.request)?;
        }
        said.push(format!(
            "opened {} {} from {} into {}: {}",
            if s.kind == Kind::Github { "pull request" } else { "merge request" },
            created.request.number,
            config.target,
            s.base,
            created.request.url
        ));
        with_known(|k| {
            k.request = Some(created.request.clone());
            k.base_seen = base;
        });
        Ok(said)
    }

    /// The title and description of a request carrying `landed` (their notes are read), and whether it is a draft.
    fn describe(
        &self,
        snap: &crate::store::Snapshot,
        s: &Settings,
        landed: &mut [forge::Landed],
    ) -> (String, String, bool) {
        let store = self.swarm.store();
        for l in landed.iter_mut().take(forge::MAX_SHOWN) {
            if l.note.is_none() {
                l.note = store
                    .read_text(snap.commit, &crate::state::note_path(&l.id), 64 * 1024)
                    .ok()
                    .flatten()
                    .and_then(Result::ok);
            }
        }
        let goal = super::goal(store, snap.commit);
        let draft = s.draft && self.stopped_at(snap).is_none();
        let title = forge::title(goal.as_deref(), draft, s.kind);
        let body = forge::body(goal.as_deref(), snap.board.cycle, &snap.board.config.target, &s.base, landed);
        (title, body, draft)
    }

    /// The forge merged the request `st` at `st.head`: what that commit holds is carried from now on (the next
    /// request lists none of it), and the request's description says exactly that. `shown` is what its description
    /// says now (the forge's, or what this runner just wrote), `before` the base before the merge. One write when
    /// what it lists differs from what the merged commit holds (a landing not yet described when the forge merged,
    /// or a write that raced the merge), none else; none either when the runner cannot tell (the merged commit is
    /// not here, or `before` holds it already).
    fn merged(
        &self,
        client: &Client,
        s: &Settings,
        target: &str,
        st: &State,
        before: Option<ObjectId>,
        shown: &str,
    ) -> Result<Vec<String>, String> {
        let common = self.common_dir();
        let earlier = with_known(|k| k.carried);
        let head = st.head.filter(|h| self.have(target, *h));
        forget(head, &common);
        let mut said =
            vec![format!("request {} was merged into {}; the swarm's branch takes it in", st.request.number, s.base)];
        let Some(h) = head else { return Ok(said) };
        if before.is_some_and(|b| git::is_ancestor(&common, h, b)) {
            return Ok(said);
        }
        // A board as new as the merged commit: every task whose code it holds is done there (one atomic push).
        let snap = self.swarm.read(true).map_err(|e| e.to_string())?;
        let tasks: Vec<&crate::model::Task> = snap.board.tasks.values().map(|t| &t.task).collect();
        let mut carried = forge::landed_since(&tasks, &commits_not_in(&common, h, &[before, earlier]));
        let (_, body, _) = self.describe(&snap, s, &mut carried);
        if forge::listed(&body) != forge::listed(shown) {
            client.update(&st.request, &st.title, &body)?;
            said.push(format!(
                "request {}'s description now lists the {} task(s) the forge merged",
                st.request.number,
                carried.len()
            ));
        }
        Ok(said)
    }

    /// Whether commit `h` is here, fetching the swarm's branch (`target`) once if it is not: the forge may have
    /// merged a landing this runner has not fetched yet.
    fn have(&self, target: &str, h: ObjectId) -> bool {
        let common = self.common_dir();
        let here = || git::run(&common, &["cat-file", "-e", &format!("{h}^{{commit}}")]).is_ok();
        here() || (self.swarm.fetch_branch(target).is_ok() && here())
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
        // last look at the request, else one look at the forge (which the next update uses too).
        let merged = with_known(|k| k.merged_head.take()).or_else(|| {
            let client = Client::open(self, &s).ok()?;
            let seen = look(&client, &config.target, &s.base, Some(base)).ok()?;
            seen.iter().find(|r| r.merged).and_then(|r| r.head)
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

/// The commits of `tip` that are not proposed yet: in none of `carried` (the base, what the forge merged of an
/// earlier request) nor in what the forge last merged of a squashed or rebased request as the branch records it
/// (all of them when there is none), by id.
fn commits_not_in(
    common: &std::path::Path,
    tip: ObjectId,
    carried: &[Option<ObjectId>],
) -> std::collections::BTreeSet<String> {
    let mut args = vec!["rev-list".to_string(), "--max-count=100000".to_string(), tip.to_string()];
    args.extend(carried.iter().flatten().map(|b| format!("^{b}")));
    args.extend(last_merged_on(common, tip).map(|m| format!("^{m}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    git::run(common, &args)
        .map(|out| out.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default()
}
