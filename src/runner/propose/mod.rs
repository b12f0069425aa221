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

mod client;
mod sync;

use client::*;
use sync::*;

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
    fn update_request(&mut self, snap: &crate::Snapshot, s: &Settings, now: bool) -> Result<Vec<String>, String> {
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
        said.push(self.open_request(&client, snap, s, &mut landed, base)?);
        Ok(said)
    }

    /// Open the request carrying `landed` (as a draft where the settings say), or find the one another runner opened
    /// meanwhile; what was done, said.
    fn open_request(
        &mut self,
        client: &Client,
        snap: &crate::Snapshot,
        s: &Settings,
        landed: &mut [forge::Landed],
        base: Option<ObjectId>,
    ) -> Result<String, String> {
        let config = &snap.board.config;
        let (title, body, draft) = self.describe(snap, s, landed);
        let created = match client.create(&config.target, &s.base, &title, &body, draft) {
            Ok(c) => c,
            // Another runner opened it meanwhile: these landings go into it at the next chance.
            Err(e) => {
                with_known(|k| {
                    k.looked = None;
                    k.pending = true;
                });
                look(client, &config.target, &s.base, base)?.into_iter().find(|r| r.open).ok_or(e)?
            }
        };
        if s.auto_merge {
            client.auto_merge(&created.request)?;
        }
        let opened = format!(
            "opened {} {} from {} into {}: {}",
            if s.kind == Kind::Github { "pull request" } else { "merge request" },
            created.request.number,
            config.target,
            s.base,
            created.request.url
        );
        with_known(|k| {
            k.request = Some(created.request.clone());
            k.base_seen = base;
        });
        Ok(opened)
    }

    /// The title and description of a request carrying `landed` (their notes are read), and whether it is a draft.
    fn describe(&self, snap: &crate::Snapshot, s: &Settings, landed: &mut [forge::Landed]) -> (String, String, bool) {
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
}
