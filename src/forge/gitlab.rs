//! A small client of GitLab's REST API (v4) for the swarm's merge request: find the open one from the swarm's
//! branch, open one, update its title and description (its state comes with the answer), let GitLab merge it when
//! its pipeline succeeds. The token goes only in its `PRIVATE-TOKEN` header (marked sensitive), only over https or
//! to a server on this machine, never through a redirect; every message is scrubbed of it.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;

/// Where the API is when `[forge] api_url` is not set.
pub const DEFAULT_API_URL: &str = "https://gitlab.com/api/v4";
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call failed; every message is safe to print.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no GitLab token: set {0}")]
    NoToken(String),
    #[error("GitLab API {url}: {message}")]
    BadBase { url: String, message: String },
    #[error("request to {url} failed: {message}")]
    Request { url: String, message: String },
    /// 401, 403, 404, 409, 422, 429 and the rest, with GitLab's own message.
    #[error("GitLab answered HTTP {status} on {url}: {message}{}", retry_after.map(|s| format!("; retry after {s} s")).unwrap_or_default())]
    Status { url: String, status: u16, message: String, retry_after: Option<u64> },
    #[error("unexpected answer from {url}: {message}")]
    BadResponse { url: String, message: String },
}

/// A merge request, as the swarm needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeRequest {
    pub iid: u64,
    pub url: String,
    pub open: bool,
    pub merged: bool,
    pub draft: bool,
    /// The commit its source branch was at (when merged: the commit GitLab merged).
    pub head_sha: Option<String>,
}

pub struct Client {
    base: String,
    token: String,
    http: reqwest::blocking::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &crate::remote::redact(&self.base))
            .field("token", &"[redacted]")
            .finish()
    }
}

/// The project's path as the API names it: URL-encoded (`group%2Fproject`).
fn project(path: &str) -> String {
    path.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect()
}

impl Client {
    pub fn new(base: &str, token: &str, token_var: &str) -> Result<Client, ApiError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(ApiError::NoToken(token_var.to_string()));
        }
        let base = base.trim().trim_end_matches('/').to_string();
        let shown = crate::escape::line(&crate::remote::redact(&base));
        let bad = |message: &str| ApiError::BadBase { url: shown.clone(), message: message.into() };
        let parsed = reqwest::Url::parse(&base).map_err(|_| bad("not a URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") || !crate::agent::http::may_carry_secret(&base) {
            return Err(bad("refusing to send the token there (use https; plain http only to this machine)"));
        }
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .user_agent(concat!("git-swarm/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none());
        if crate::agent::http::is_loopback(&base) {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| bad(&format!("cannot set up the HTTP client: {e}")))?;
        Ok(Client { base, token: token.to_string(), http })
    }

    fn scrub(&self) -> crate::agent::http::Scrub<'_> {
        crate::agent::http::Scrub { key: Some(&self.token) }
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let shown = crate::escape::line(&crate::remote::redact(&url));
        let mut h = HeaderMap::new();
        let mut tok = HeaderValue::from_str(&self.token).map_err(|_| ApiError::BadBase {
            url: shown.clone(),
            message: "the token cannot go in an HTTP header".into(),
        })?;
        tok.set_sensitive(true);
        h.insert("private-token", tok);
        let mut req = self.http.request(method, &url).headers(h);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().map_err(|e| ApiError::Request {
            url: shown.clone(),
            message: crate::agent::http::chain(e, &self.scrub()),
        })?;
        let status = resp.status().as_u16();
        let retry_after =
            resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
        let text = resp.text().map_err(|e| ApiError::Request {
            url: shown.clone(),
            message: crate::agent::http::chain(e, &self.scrub()),
        })?;
        if !(200..300).contains(&status) {
            // GitLab's errors: `{"message": "…"}` (a string, a list or a map of field → problems) or `{"error": "…"}`.
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("message").or_else(|| v.get("error")).cloned())
                .map(|m| match m {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .unwrap_or_else(|| text.trim().chars().take(200).collect());
            let message = crate::agent::http::quote(&message, &self.scrub());
            return Err(ApiError::Status { url: shown, status, message, retry_after });
        }
        serde_json::from_str(&text).map_err(|e| ApiError::BadResponse { url: shown, message: e.to_string() })
    }

    fn mr(&self, v: &Value) -> Result<MergeRequest, ApiError> {
        let bad = || ApiError::BadResponse { url: self.base.clone(), message: "not a merge request".into() };
        let state = v.get("state").and_then(Value::as_str).unwrap_or_default();
        Ok(MergeRequest {
            iid: v.get("iid").and_then(Value::as_u64).ok_or_else(bad)?,
            url: v.get("web_url").and_then(Value::as_str).unwrap_or_default().to_string(),
            open: state == "opened",
            merged: state == "merged",
            draft: v.get("draft").and_then(Value::as_bool).unwrap_or(false),
            head_sha: v.get("sha").and_then(Value::as_str).map(str::to_string),
        })
    }

    /// The open merge request from `source` into `target` of `project_path`, if there is one
    /// (`GET /projects/:id/merge_requests?state=opened&source_branch=…&target_branch=…`).
    pub(crate) fn open_mr(
        &self,
        project_path: &str,
        source: &str,
        target: &str,
    ) -> Result<Option<MergeRequest>, ApiError> {
        Ok(self.mrs(project_path, source, target, "state=opened")?.into_iter().next())
    }

    /// The merge requests from `source` into `target` that GitLab merged, the last updated first
    /// (`…&state=merged&order_by=updated_at&sort=desc`).
    pub(crate) fn merged_mrs(
        &self,
        project_path: &str,
        source: &str,
        target: &str,
    ) -> Result<Vec<MergeRequest>, ApiError> {
        self.mrs(project_path, source, target, "state=merged&order_by=updated_at&sort=desc&per_page=10")
    }

    fn mrs(&self, project_path: &str, source: &str, target: &str, filter: &str) -> Result<Vec<MergeRequest>, ApiError> {
        let path = format!(
            "/projects/{}/merge_requests?{filter}&source_branch={}&target_branch={}",
            project(project_path),
            project(source),
            project(target)
        );
        let v = self.call(reqwest::Method::GET, &path, None)?;
        v.as_array().map(Vec::as_slice).unwrap_or_default().iter().map(|m| self.mr(m)).collect()
    }

    /// Open a merge request (`POST /projects/:id/merge_requests`); a draft's title starts `Draft:`.
    pub(crate) fn create_mr(
        &self,
        project_path: &str,
        source: &str,
        target: &str,
        title: &str,
        description: &str,
    ) -> Result<MergeRequest, ApiError> {
        let path = format!("/projects/{}/merge_requests", project(project_path));
        let body = serde_json::json!({"source_branch": source, "target_branch": target, "title": title,
            "description": description, "remove_source_branch": false, "squash": false});
        let v = self.call(reqwest::Method::POST, &path, Some(&body))?;
        self.mr(&v)
    }

    /// Change its title (a draft's loses `Draft:` when it is ready) and description
    /// (`PUT /projects/:id/merge_requests/:iid`); its state comes with the answer.
    pub(crate) fn update_mr(
        &self,
        project_path: &str,
        iid: u64,
        title: &str,
        description: &str,
    ) -> Result<MergeRequest, ApiError> {
        let path = format!("/projects/{}/merge_requests/{iid}", project(project_path));
        let body = serde_json::json!({"title": title, "description": description});
        let v = self.call(reqwest::Method::PUT, &path, Some(&body))?;
        self.mr(&v)
    }

    /// Let GitLab merge it when its pipeline succeeds (`PUT /projects/:id/merge_requests/:iid/merge` with
    /// `auto_merge`; older servers read `merge_when_pipeline_succeeds`, sent too).
    pub(crate) fn auto_merge(&self, project_path: &str, iid: u64) -> Result<(), ApiError> {
        let path = format!("/projects/{}/merge_requests/{iid}/merge", project(project_path));
        let body = serde_json::json!({"auto_merge": true, "merge_when_pipeline_succeeds": true,
            "should_remove_source_branch": false, "squash": false});
        self.call(reqwest::Method::PUT, &path, Some(&body)).map(|_| ())
    }
}

/// The project a remote URL names on `host` (`https://gitlab.example.com/group/sub/project.git`,
/// `git@gitlab.example.com:group/project.git`): its path and the API it has (`https://<host>/api/v4`).
pub(crate) fn project_of_remote(url: &str) -> Option<(String, String)> {
    let url = url.trim();
    let (host, path) = if let Some((user_host, path)) = url.split_once(':').filter(|_| !url.contains("://")) {
        (user_host.rsplit('@').next()?.to_string(), path.to_string())
    } else {
        let (scheme, rest) = url.split_once("://")?;
        if !matches!(scheme, "https" | "http" | "ssh") {
            return None;
        }
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit('@').next()?.split(':').next()?.to_string();
        (host, path.to_string())
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let ok = path.contains('/')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != ".." && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
    (ok && !host.is_empty()).then(|| (path.to_string(), format!("https://{host}/api/v4")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_from_remote_urls() {
        assert_eq!(
            project_of_remote("https://oauth2:tok@gitlab.example.com/g/sub/p.git"),
            Some(("g/sub/p".into(), "https://gitlab.example.com/api/v4".into()))
        );
        assert_eq!(
            project_of_remote("git@gitlab.com:g/p.git"),
            Some(("g/p".into(), "https://gitlab.com/api/v4".into()))
        );
        assert_eq!(project_of_remote("/srv/git/p.git"), None);
        assert_eq!(project_of_remote("https://gitlab.com/p"), None);
        assert_eq!(project("g/sub/p"), "g%2Fsub%2Fp");
    }

    #[test]
    fn the_token_never_goes_over_plain_http_to_another_machine() {
        assert!(Client::new("http://gitlab.example.com/api/v4", "glpat-x", "GITLAB_TOKEN").is_err());
        assert!(Client::new("http://127.0.0.1:1/api/v4", "glpat-x", "GITLAB_TOKEN").is_ok());
        assert!(matches!(Client::new("https://gitlab.com/api/v4", " ", "GITLAB_TOKEN"), Err(ApiError::NoToken(_))));
        let c = Client::new("https://gitlab.com/api/v4", "glpat-secret", "GITLAB_TOKEN").expect("client");
        assert!(!format!("{c:?}").contains("glpat-secret"));
    }
}
