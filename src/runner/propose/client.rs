//! The forge's API as the runner uses it for the swarm's one request: GitHub's pull requests or GitLab's merge
//! requests — look for them, open, update, mark ready, ask for the merge.

use super::*;

/// A forge client for the swarm's repository.
pub(crate) enum Client {
    Github(crate::github::api::Client, crate::github::RepoSlug),
    Gitlab(crate::gitlab::api::Client, crate::gitlab::Project),
}

/// What a forge said of the request.
#[derive(Debug, Clone)]
pub(crate) struct State {
    pub(crate) request: Request,
    pub(crate) open: bool,
    pub(crate) merged: bool,
    /// The commit its branch was at: the commit merged, when it was.
    pub(crate) head: Option<ObjectId>,
    pub(crate) title: String,
    /// Its description.
    pub(crate) body: String,
}

impl Client {
    pub(crate) fn open(r: &Runner<'_>, s: &Settings) -> Result<Client, String> {
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
    pub(crate) fn look(&self, head: &str, base: &str) -> Result<Vec<State>, String> {
        match self {
            Client::Github(c, repo) => {
                Ok(c.recent_pulls(repo, head, base).map_err(|e| e.to_string())?.into_iter().map(gh_state).collect())
            }
            Client::Gitlab(c, p) => {
                Ok(c.recent_mrs(p, head, base).map_err(|e| e.to_string())?.into_iter().map(gl_state).collect())
            }
        }
    }

    pub(crate) fn create(&self, head: &str, base: &str, title: &str, body: &str, draft: bool) -> Result<State, String> {
        match self {
            Client::Github(c, repo) => {
                c.create_pull(repo, head, base, title, body, draft).map(gh_state).map_err(|e| e.to_string())
            }
            Client::Gitlab(c, p) => c.create_mr(p, head, base, title, body).map(gl_state).map_err(|e| e.to_string()),
        }
    }

    pub(crate) fn update(&self, req: &Request, title: &str, body: &str) -> Result<State, String> {
        match self {
            Client::Github(c, repo) => {
                c.update_pull(repo, req.number, title, body).map(gh_state).map_err(|e| e.to_string())
            }
            Client::Gitlab(c, p) => c.update_mr(p, req.number, title, body).map(gl_state).map_err(|e| e.to_string()),
        }
    }

    /// Ready for review, on GitHub (GitLab's is the title, without `Draft:`).
    pub(crate) fn ready(&self, req: &Request) -> Result<(), String> {
        match self {
            Client::Github(c, _) => c.mark_ready(&req.node_id).map_err(|e| e.to_string()),
            Client::Gitlab(..) => Ok(()),
        }
    }

    pub(crate) fn auto_merge(&self, req: &Request) -> Result<(), String> {
        match self {
            Client::Github(c, _) => c.enable_auto_merge(&req.node_id).map_err(|e| e.to_string()),
            Client::Gitlab(c, p) => c.auto_merge(p, req.number).map_err(|e| e.to_string()),
        }
    }
}

pub(crate) fn gh_state(p: crate::github::api::Pull) -> State {
    State {
        open: p.open,
        merged: p.merged,
        head: p.head_sha.and_then(|s| s.parse().ok()),
        title: p.title,
        body: p.body,
        request: Request { number: p.number, url: p.url, node_id: p.node_id, draft: p.draft },
    }
}

pub(crate) fn gl_state(m: crate::gitlab::api::MergeRequest) -> State {
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
pub(crate) fn look(
    client: &Client,
    target: &str,
    base_name: &str,
    base: Option<ObjectId>,
) -> Result<Vec<State>, String> {
    if let Some(l) = with_known(|k| k.looked.as_ref().filter(|(at, _)| *at == base).map(|(_, l)| l.clone())) {
        return Ok(l);
    }
    let l = client.look(target, base_name)?;
    with_known(|k| k.looked = Some((base, l.clone())));
    Ok(l)
}
