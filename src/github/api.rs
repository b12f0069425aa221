//! A small client of GitHub's REST API: start a workflow (`workflow_dispatch`) and list its runs.
//!
//! The caller passes the base URL (`GITHUB_API_URL`, else <https://api.github.com>) and the token; this module reads
//! no environment. The token goes only in its `Authorization` header (marked sensitive), only over https or to a
//! server on this machine, never through a redirect, and is scrubbed from every message. Errors are sorted the way
//! a person acts on them: bad token (401), no access (403), rate limit (403/429 with its reset time), not found
//! (404), refused input (422, with GitHub's own message).

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RepoSlug;
use crate::time::Timestamp;

/// The REST API version we speak.
pub(crate) const API_VERSION: &str = "2022-11-28";
/// Where the API is when `GITHUB_API_URL` is not set.
pub(crate) const DEFAULT_API_URL: &str = "https://api.github.com";

/// Why a call failed. Every message is safe to print: no token, no control characters.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// Neither `GITHUB_TOKEN` nor `GH_TOKEN` holds a token.
    #[error("no GitHub token: set GITHUB_TOKEN or GH_TOKEN")]
    NoToken,
    /// The base URL is unusable (not http(s), or plain http to another machine).
    #[error("GITHUB_API_URL {url}: {message}")]
    BadBase { url: String, message: String },
    /// No answer (connection refused, timeout, TLS, …).
    #[error("request to {url} failed: {message}")]
    Request { url: String, message: String },
    /// 401: the token is wrong or expired.
    #[error("GitHub refused the token (HTTP 401 on {url}): {message}")]
    Unauthorized { url: String, message: String },
    /// 403 that is not a rate limit: the token may not do this.
    #[error("GitHub denied access (HTTP 403 on {url}): {message}")]
    Forbidden { url: String, message: String },
    /// 403/429 for a rate limit (primary: `x-ratelimit-remaining: 0`; secondary: `retry-after` or its message).
    #[error("GitHub's rate limit was hit (HTTP {status} on {url}): {message}; {}", wait_text(*reset, *retry_after))]
    RateLimited { url: String, status: u16, message: String, reset: Option<Timestamp>, retry_after: Option<u64> },
    /// 404: no such repository or workflow, or the token cannot see it.
    #[error("not found (HTTP 404 on {url}): {message}")]
    NotFound { url: String, message: String },
    /// 422: GitHub understood the request and refused it (bad ref, inputs, no `workflow_dispatch` trigger).
    #[error("GitHub refused the request (HTTP 422 on {url}): {message}")]
    Unprocessable { url: String, message: String },
    /// Any other status.
    #[error("{url} answered HTTP {status}: {message}")]
    Status { url: String, status: u16, message: String },
    /// A 2xx answer we cannot read.
    #[error("unexpected answer from {url}: {message}")]
    BadResponse { url: String, message: String },
}

/// When to try again, for [`ApiError::RateLimited`].
fn wait_text(reset: Option<Timestamp>, retry_after: Option<u64>) -> String {
    let mut parts = Vec::new();
    if let Some(secs) = retry_after {
        parts.push(format!("retry after {secs} s (retry-after)"));
    }
    if let Some(r) = reset {
        let now = Timestamp::now_with_offset(0).secs();
        let left = r.secs().saturating_sub(now);
        parts.push(format!("the limit resets at {r} (in {} min, x-ratelimit-reset)", left.div_ceil(60)));
    }
    if parts.is_empty() { "wait a minute before trying again".into() } else { parts.join("; ") }
}

/// One run of a workflow, as `GET …/runs` lists it (the fields we show; a missing one is `None`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct Run {
    pub id: u64,
    pub name: Option<String>,
    pub display_title: Option<String>,
    pub run_number: Option<u64>,
    pub run_attempt: Option<u64>,
    /// queued, in_progress, completed, waiting, requested, pending.
    pub status: Option<String>,
    /// success, failure, cancelled, skipped, timed_out, … (null until completed).
    pub conclusion: Option<String>,
    pub event: Option<String>,
    pub head_branch: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub html_url: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub(crate) struct RunList {
    #[serde(default)]
    pub total_count: u64,
    #[serde(default)]
    pub workflow_runs: Vec<Run>,
}

/// What a dispatch answered: nothing (204), or the run it started (200, where GitHub returns run details).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dispatched {
    pub run_id: Option<u64>,
    pub html_url: Option<String>,
}

/// A client bound to one API base and token.
#[derive(Debug)]
pub(crate) struct Client {
    rest: crate::fleet::rest::Rest,
}

impl Client {
    /// A client of the API at `base` (e.g. <https://api.github.com>) with `token`. Refuses an empty token and a
    /// base that would carry the token over plain http to another machine.
    pub(crate) fn new(base: &str, token: &str) -> Result<Client, ApiError> {
        use crate::fleet::rest::{Rest, SetupError};
        match Rest::new(base, token) {
            Ok(rest) => Ok(Client { rest }),
            Err(SetupError::NoToken) => Err(ApiError::NoToken),
            Err(SetupError::BadBase { url, message }) => Err(ApiError::BadBase { url, message }),
        }
    }

    fn headers(&self) -> Result<HeaderMap, ApiError> {
        let mut h = HeaderMap::new();
        h.insert(reqwest::header::ACCEPT, HeaderValue::from_static("application/vnd.github+json"));
        h.insert("x-github-api-version", HeaderValue::from_static(API_VERSION));
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {}", self.rest.token)).map_err(|_| ApiError::BadBase {
                url: self.shown(""),
                message: "the token contains characters that cannot go in an HTTP header".into(),
            })?;
        auth.set_sensitive(true);
        h.insert(reqwest::header::AUTHORIZATION, auth);
        Ok(h)
    }

    fn shown(&self, path: &str) -> String {
        self.rest.shown(path)
    }

    /// One request; the body of a 2xx answer (empty for 204).
    fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<String, ApiError> {
        self.call_url(method, &format!("{}{path}", self.rest.base), body)
    }

    fn call_url(&self, method: reqwest::Method, url: &str, body: Option<&Value>) -> Result<String, ApiError> {
        let shown = crate::escape::line(&crate::secrets::redact(url));
        let mut req = self.rest.http.request(method, url).headers(self.headers()?);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().map_err(|e| ApiError::Request { url: shown.clone(), message: self.chain(e) })?;
        let status = resp.status().as_u16();
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string());
        let remaining = header("x-ratelimit-remaining");
        let reset = header("x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok()).map(Timestamp::from_secs);
        let retry_after = header("retry-after").and_then(|v| v.parse::<u64>().ok());
        let location = header("location");
        let text = resp.text().map_err(|e| ApiError::Request { url: shown.clone(), message: self.chain(e) })?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let message = self.error_message(&text, status);
        let url = shown;
        Err(match status {
            401 => ApiError::Unauthorized { url, message },
            403 | 429
                if status == 429
                    || remaining.as_deref() == Some("0")
                    || retry_after.is_some()
                    || message.to_ascii_lowercase().contains("rate limit") =>
            {
                let reset = if remaining.as_deref() == Some("0") { reset } else { None };
                ApiError::RateLimited { url, status, message, reset, retry_after }
            }
            403 => ApiError::Forbidden { url, message },
            404 => ApiError::NotFound { url, message },
            422 => ApiError::Unprocessable { url, message },
            301 | 302 | 307 | 308 => ApiError::Status {
                url,
                status,
                message: self.rest.redirect_message(location.as_deref(), "the repository was renamed or moved?"),
            },
            _ => ApiError::Status { url, status, message },
        })
    }

    /// GitHub's `message`, with the `errors` details of a 422, quoted; else the start of the body.
    fn error_message(&self, body: &str, status: u16) -> String {
        let Ok(v) = serde_json::from_str::<Value>(body) else { return self.rest.plain_message(body, status) };
        let mut msg = v.get("message").and_then(Value::as_str).unwrap_or("no message").to_string();
        if let Some(errors) = v.get("errors").and_then(Value::as_array) {
            let details: Vec<String> = errors
                .iter()
                .filter_map(|e| match e {
                    Value::String(s) => Some(s.clone()),
                    Value::Object(o) => o.get("message").and_then(Value::as_str).map(str::to_string).or_else(|| {
                        let field = o.get("field").and_then(Value::as_str).unwrap_or("?");
                        let code = o.get("code").and_then(Value::as_str).unwrap_or("invalid");
                        Some(format!("{field}: {code}"))
                    }),
                    _ => None,
                })
                .collect();
            if !details.is_empty() {
                msg = format!("{msg} ({})", details.join("; "));
            }
        }
        self.quote(&msg)
    }

    fn quote(&self, s: &str) -> String {
        self.rest.quote(s)
    }

    fn chain(&self, e: reqwest::Error) -> String {
        self.rest.chain(e)
    }

    /// The repository's default branch (`GET /repos/{owner}/{repo}`).
    pub(crate) fn default_branch(&self, repo: &RepoSlug) -> Result<String, ApiError> {
        let path = format!("/repos/{}/{}", repo.owner, repo.name);
        let text = self.call(reqwest::Method::GET, &path, None)?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        v.get("default_branch").and_then(Value::as_str).map(str::to_string).ok_or_else(|| ApiError::BadResponse {
            url: self.shown(&path),
            message: "no default_branch in the answer".into(),
        })
    }

    /// Start `workflow` (a file name under `.github/workflows/`) on `git_ref` with `inputs`
    /// (`POST /repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches`).
    pub(crate) fn dispatch(
        &self,
        repo: &RepoSlug,
        workflow: &str,
        git_ref: &str,
        inputs: &BTreeMap<String, String>,
    ) -> Result<Dispatched, ApiError> {
        let path = format!("/repos/{}/{}/actions/workflows/{}/dispatches", repo.owner, repo.name, workflow);
        let body = serde_json::json!({"ref": git_ref, "inputs": inputs});
        let text = self.call(reqwest::Method::POST, &path, Some(&body))?;
        if text.trim().is_empty() {
            return Ok(Dispatched::default());
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        Ok(Dispatched {
            run_id: v.get("workflow_run_id").and_then(Value::as_u64),
            html_url: v.get("html_url").and_then(Value::as_str).map(str::to_string),
        })
    }

    /// The newest `per_page` runs of `workflow` (`GET …/actions/workflows/{workflow}/runs`).
    pub(crate) fn runs(&self, repo: &RepoSlug, workflow: &str, per_page: u32) -> Result<RunList, ApiError> {
        let path =
            format!("/repos/{}/{}/actions/workflows/{}/runs?per_page={per_page}", repo.owner, repo.name, workflow);
        let text = self.call(reqwest::Method::GET, &path, None)?;
        serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))
    }

    /// The pull requests from `head` (a branch of `repo` itself) into `base`, open or closed, the newest first (`GET
    /// /repos/{owner}/{repo}/pulls?state=all&sort=created&direction=desc&head=owner:head&base=base`): the open one
    /// if there is one, and the ones GitHub merged before it, with the commit each merged and its description.
    pub(crate) fn recent_pulls(&self, repo: &RepoSlug, head: &str, base: &str) -> Result<Vec<Pull>, ApiError> {
        self.pulls(repo, head, base, "state=all&sort=created&direction=desc&per_page=10")
    }

    /// `GET /repos/{owner}/{repo}/pulls?head=owner:head&base=base&<filter>`.
    fn pulls(&self, repo: &RepoSlug, head: &str, base: &str, filter: &str) -> Result<Vec<Pull>, ApiError> {
        let path = format!(
            "/repos/{}/{}/pulls?head={}&base={}&{filter}",
            repo.owner,
            repo.name,
            query(&format!("{}:{head}", repo.owner)),
            query(base)
        );
        let text = self.call(reqwest::Method::GET, &path, None)?;
        let list: Vec<Value> = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        list.iter().map(|v| self.pull(&path, v)).collect()
    }

    /// Open a pull request from `head` into `base` (`POST /repos/{owner}/{repo}/pulls`).
    pub(crate) fn create_pull(
        &self,
        repo: &RepoSlug,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
        draft: bool,
    ) -> Result<Pull, ApiError> {
        let path = format!("/repos/{}/{}/pulls", repo.owner, repo.name);
        let req = serde_json::json!({"title": title, "head": head, "base": base, "body": body, "draft": draft,
            "maintainer_can_modify": false});
        let text = self.call(reqwest::Method::POST, &path, Some(&req))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        self.pull(&path, &v)
    }

    /// Change a pull request's title and description (`PATCH /repos/{owner}/{repo}/pulls/{number}`); its state as
    /// GitHub answers (merged, closed) with it.
    pub(crate) fn update_pull(&self, repo: &RepoSlug, number: u64, title: &str, body: &str) -> Result<Pull, ApiError> {
        let path = format!("/repos/{}/{}/pulls/{number}", repo.owner, repo.name);
        let req = serde_json::json!({"title": title, "body": body});
        let text = self.call(reqwest::Method::PATCH, &path, Some(&req))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        self.pull(&path, &v)
    }

    /// Mark a draft pull request ready for review (GraphQL `markPullRequestReadyForReview`: the REST API cannot).
    pub(crate) fn mark_ready(&self, node_id: &str) -> Result<(), ApiError> {
        let q = "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }";
        self.graphql(q, serde_json::json!({"id": node_id})).map(|_| ())
    }

    /// Let GitHub merge the pull request once its checks pass (GraphQL `enablePullRequestAutoMerge`, with a merge
    /// commit: the swarm's branch takes the base back in by a merge, `docs/forge.md`).
    pub(crate) fn enable_auto_merge(&self, node_id: &str) -> Result<(), ApiError> {
        let q = "mutation($id: ID!) { enablePullRequestAutoMerge(input: {pullRequestId: $id, mergeMethod: MERGE}) { clientMutationId } }";
        self.graphql(q, serde_json::json!({"id": node_id})).map(|_| ())
    }

    /// One GraphQL request (`POST /graphql` of api.github.com; `…/api/graphql` of a GitHub Enterprise server whose
    /// REST base is `…/api/v3`); GraphQL's own errors (a 200 with `errors`) are refusals.
    fn graphql(&self, query: &str, variables: Value) -> Result<Value, ApiError> {
        let url = match self.rest.base.strip_suffix("/api/v3") {
            Some(host) => format!("{host}/api/graphql"),
            None => format!("{}/graphql", self.rest.base),
        };
        let path = "/graphql";
        let req = serde_json::json!({"query": query, "variables": variables});
        let text = self.call_url(reqwest::Method::POST, &url, Some(&req))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(path, e))?;
        if let Some(errors) = v.get("errors").and_then(Value::as_array).filter(|e| !e.is_empty()) {
            let msg: Vec<String> =
                errors.iter().filter_map(|e| e.get("message").and_then(Value::as_str)).map(|m| self.quote(m)).collect();
            return Err(ApiError::Unprocessable { url: self.shown("/graphql"), message: msg.join("; ") });
        }
        Ok(v)
    }

    fn pull(&self, path: &str, v: &Value) -> Result<Pull, ApiError> {
        let bad = || ApiError::BadResponse { url: self.shown(path), message: "not a pull request".into() };
        Ok(Pull {
            number: v.get("number").and_then(Value::as_u64).ok_or_else(bad)?,
            url: v.get("html_url").and_then(Value::as_str).unwrap_or_default().to_string(),
            node_id: v.get("node_id").and_then(Value::as_str).unwrap_or_default().to_string(),
            open: v.get("state").and_then(Value::as_str) == Some("open"),
            draft: v.get("draft").and_then(Value::as_bool).unwrap_or(false),
            merged: v.get("merged").and_then(Value::as_bool).unwrap_or(false)
                || v.get("merged_at").is_some_and(|m| !m.is_null()),
            head_sha: v.pointer("/head/sha").and_then(Value::as_str).map(str::to_string),
            title: v.get("title").and_then(Value::as_str).unwrap_or_default().to_string(),
            body: v.get("body").and_then(Value::as_str).unwrap_or_default().to_string(),
        })
    }

    fn bad_response(&self, path: &str, e: serde_json::Error) -> ApiError {
        ApiError::BadResponse { url: self.shown(path), message: self.quote(&e.to_string()) }
    }
}

/// A pull request, as the swarm needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pull {
    pub number: u64,
    pub url: String,
    /// Its GraphQL id (to mark it ready, to let GitHub merge it).
    pub node_id: String,
    pub open: bool,
    pub draft: bool,
    pub merged: bool,
    /// The commit its branch was at (when merged: the commit the forge merged).
    pub head_sha: Option<String>,
    pub title: String,
    /// Its description.
    pub body: String,
}

/// A value for a URL's query: what is not a letter, digit, `-`, `_`, `.`, `~`, `/` or `:` percent-encoded.
fn query(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/:".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A workflow as the API addresses it: a file name (`git-swarm.yml`) or a numeric id.
pub(crate) fn validate_workflow(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    let numeric = name.chars().all(|c| c.is_ascii_digit());
    if ok && (numeric || name.ends_with(".yml") || name.ends_with(".yaml")) {
        Ok(())
    } else {
        Err(format!("'{}' is not a workflow file name (like git-swarm.yml) or id", crate::escape::line(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_never_goes_over_plain_http_to_another_machine() {
        let e = Client::new("http://api.example.com", "ghp_secret").expect_err("plain http elsewhere");
        assert!(e.to_string().contains("plain http") && !e.to_string().contains("ghp_secret"), "{e}");
        assert!(Client::new("http://127.0.0.1:9", "t").is_ok());
        assert!(Client::new("https://api.github.com/", "t").is_ok());
        assert!(matches!(Client::new("https://api.github.com", "  "), Err(ApiError::NoToken)));
        assert!(matches!(Client::new("ftp://x", "t"), Err(ApiError::BadBase { .. })));
        let c = Client::new("https://api.github.com", "ghp_secret").expect("client");
        assert!(!format!("{c:?}").contains("ghp_secret"));
        assert_eq!(c.quote("echo ghp_secret\u{1b}"), "echo [redacted]\\u{1b}");
    }

    #[test]
    fn error_bodies_become_one_line() {
        let c = Client::new("https://api.github.com", "tok").expect("client");
        let body = r#"{"message":"Invalid request.","errors":["Unexpected inputs provided: [\"goal\"]"]}"#;
        assert_eq!(c.error_message(body, 422), r#"Invalid request. (Unexpected inputs provided: ["goal"])"#);
        let body = r#"{"message":"Validation Failed","errors":[{"resource":"X","field":"ref","code":"invalid"}]}"#;
        assert_eq!(c.error_message(body, 422), "Validation Failed (ref: invalid)");
        assert_eq!(c.error_message("", 404), "Not Found");
        assert_eq!(c.error_message("<html>\n", 502), "<html>");
    }

    #[test]
    fn workflow_names() {
        for ok in ["git-swarm.yml", "ci.yaml", "12345"] {
            assert!(validate_workflow(ok).is_ok(), "{ok}");
        }
        for bad in ["", "../x.yml", "a/b.yml", "x.txt", ".yml", "x y.yml"] {
            assert!(validate_workflow(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rate_limit_messages_name_the_wait() {
        let t = wait_text(Some(Timestamp::from_secs(2_000_000_000)), Some(30));
        assert!(t.contains("retry after 30 s") && t.contains("2033-05-18T03:33:20Z"), "{t}");
        assert_eq!(wait_text(None, None), "wait a minute before trying again");
    }
}
