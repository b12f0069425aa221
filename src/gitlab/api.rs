//! A small client of GitLab's REST API (v4): start a pipeline (`POST /projects/:id/pipeline`), list a project's
//! pipelines, read a project's default branch.
//!
//! The caller passes the base URL (`GITLAB_API_URL`, else the remote's server, else <https://gitlab.com/api/v4>) and
//! the token; this module reads no environment. The token goes only in its `PRIVATE-TOKEN` header (marked
//! sensitive), only over https or to a server on this machine (`agent::http::may_carry_secret`, invariant 15),
//! never through a redirect, and is scrubbed from every message. (GitLab's trigger API, `POST
//! /projects/:id/trigger/pipeline`, takes its token as a form field of the body: not used, so that no secret travels
//! outside a header.) Errors are sorted the way a person acts on them: bad token (401), no access (403), not found
//! (404), refused (400/422, with GitLab's own message), rate limit (429, with `Retry-After`).

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Project;

/// Why a call failed. Every message is safe to print: no token, no control characters.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// `GITLAB_TOKEN` holds no token.
    #[error("no GitLab token: set GITLAB_TOKEN")]
    NoToken,
    /// The base URL is unusable (not http(s), or plain http to another machine).
    #[error("GitLab API {url}: {message}")]
    BadBase { url: String, message: String },
    /// No answer (connection refused, timeout, TLS, …).
    #[error("request to {url} failed: {message}")]
    Request { url: String, message: String },
    /// 401: the token is wrong, expired or revoked.
    #[error("GitLab refused the token (HTTP 401 on {url}): {message}")]
    Unauthorized { url: String, message: String },
    /// 403: the token may not do this (its scope, the role of its user).
    #[error("GitLab denied access (HTTP 403 on {url}): {message}")]
    Forbidden { url: String, message: String },
    /// 404: no such project, or the token cannot see it.
    #[error("not found (HTTP 404 on {url}): {message}")]
    NotFound { url: String, message: String },
    /// 400 or 422: GitLab understood the request and refused it (no such ref, no job the rules let run).
    #[error("GitLab refused the request (HTTP {status} on {url}): {message}")]
    Refused { url: String, status: u16, message: String },
    /// 429: a rate limit (`Retry-After`: seconds; `RateLimit-Reset`: when).
    #[error("GitLab's rate limit was hit (HTTP 429 on {url}): {message}; {}", wait_text(*retry_after, reset.as_ref()))]
    RateLimited { url: String, message: String, retry_after: Option<u64>, reset: Option<crate::time::Timestamp> },
    /// Any other status.
    #[error("{url} answered HTTP {status}: {message}")]
    Status { url: String, status: u16, message: String },
    /// A 2xx answer we cannot read.
    #[error("unexpected answer from {url}: {message}")]
    BadResponse { url: String, message: String },
}

/// When to try again, for [`ApiError::RateLimited`].
fn wait_text(retry_after: Option<u64>, reset: Option<&crate::time::Timestamp>) -> String {
    match (retry_after, reset) {
        (Some(s), Some(r)) => format!("retry after {s} s (Retry-After; the limit resets at {r})"),
        (Some(s), None) => format!("retry after {s} s (Retry-After)"),
        (None, Some(r)) => format!("the limit resets at {r} (RateLimit-Reset)"),
        (None, None) => "wait a minute before trying again".into(),
    }
}

/// A pipeline as GitLab answers it (the fields we show; a missing one is `None`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct Pipeline {
    pub id: u64,
    pub iid: Option<u64>,
    /// created, waiting_for_resource, preparing, pending, running, success, failed, canceled, skipped, manual, …
    pub status: Option<String>,
    /// push, web, trigger, schedule, api, parent_pipeline, …
    pub source: Option<String>,
    #[serde(rename = "ref")]
    pub git_ref: Option<String>,
    pub sha: Option<String>,
    pub web_url: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

/// A client bound to one API base and token.
#[derive(Debug)]
pub(crate) struct Client {
    rest: crate::fleet::rest::Rest,
}

impl Client {
    /// A client of the API at `base` (e.g. <https://gitlab.com/api/v4>) with `token`. Refuses an empty token and a
    /// base that would carry the token over plain http to another machine.
    pub(crate) fn new(base: &str, token: &str) -> Result<Client, ApiError> {
        use crate::fleet::rest::{Rest, SetupError};
        match Rest::new(base, token) {
            Ok(rest) => Ok(Client { rest }),
            Err(SetupError::NoToken) => Err(ApiError::NoToken),
            Err(SetupError::BadBase { url, message }) => Err(ApiError::BadBase { url, message }),
        }
    }

    /// The base URL, as messages show it.
    pub(crate) fn base(&self) -> String {
        self.shown("")
    }

    fn headers(&self) -> Result<HeaderMap, ApiError> {
        let mut h = HeaderMap::new();
        h.insert(reqwest::header::ACCEPT, HeaderValue::from_static("application/json"));
        let mut auth = HeaderValue::from_str(&self.rest.token).map_err(|_| ApiError::BadBase {
            url: self.shown(""),
            message: "the token contains characters that cannot go in an HTTP header".into(),
        })?;
        auth.set_sensitive(true);
        h.insert("private-token", auth);
        Ok(h)
    }

    fn shown(&self, path: &str) -> String {
        self.rest.shown(path)
    }

    fn quote(&self, s: &str) -> String {
        self.rest.quote(s)
    }

    /// One request; the body of a 2xx answer.
    fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<String, ApiError> {
        let shown = self.shown(path);
        let failed = |e: reqwest::Error| ApiError::Request { url: shown.clone(), message: self.rest.chain(e) };
        let mut req = self.rest.http.request(method, format!("{}{path}", self.rest.base)).headers(self.headers()?);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().map_err(failed)?;
        let status = resp.status().as_u16();
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string());
        let retry_after = header("retry-after").and_then(|v| v.parse::<u64>().ok());
        let reset =
            header("ratelimit-reset").and_then(|v| v.parse::<u64>().ok()).map(crate::time::Timestamp::from_secs);
        let location = header("location");
        let text = resp.text().map_err(failed)?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let message = self.error_message(&text, status);
        let url = shown.clone();
        Err(match status {
            401 => ApiError::Unauthorized { url, message },
            403 => ApiError::Forbidden { url, message },
            404 => ApiError::NotFound { url, message },
            400 | 422 => ApiError::Refused { url, status, message },
            429 => ApiError::RateLimited { url, message, retry_after, reset },
            301 | 302 | 307 | 308 => ApiError::Status {
                url,
                status,
                message: self.rest.redirect_message(
                    location.as_deref(),
                    "the project was renamed or moved, or the API is elsewhere: GITLAB_API_URL",
                ),
            },
            _ => ApiError::Status { url, status, message },
        })
    }

    /// GitLab's message: `message` (a string, or an object of fields to lists of messages, as a pipeline that cannot
    /// be created answers: `{"message": {"base": ["…"]}}`), else `error` (a missing parameter), else the start of
    /// the body; quoted.
    fn error_message(&self, body: &str, status: u16) -> String {
        let Ok(v) = serde_json::from_str::<Value>(body) else { return self.rest.plain_message(body, status) };
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string()))
                .collect::<Vec<_>>()
                .join("; "),
            other => other.to_string(),
        };
        let msg = match (v.get("message"), v.get("error")) {
            (Some(Value::Object(fields)), _) => fields
                .iter()
                .map(|(k, m)| if k == "base" { text(m) } else { format!("{k}: {}", text(m)) })
                .collect::<Vec<_>>()
                .join("; "),
            (Some(m), _) => text(m),
            (None, Some(e)) => text(e),
            (None, None) => "no message".into(),
        };
        self.quote(&msg)
    }

    fn bad_response(&self, path: &str, e: serde_json::Error) -> ApiError {
        ApiError::BadResponse { url: self.shown(path), message: self.quote(&e.to_string()) }
    }

    /// The project's default branch (`GET /projects/:id`).
    pub(crate) fn default_branch(&self, project: &Project) -> Result<String, ApiError> {
        let path = format!("/projects/{}", project.api_id());
        let text = self.call(reqwest::Method::GET, &path, None)?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        v.get("default_branch").and_then(Value::as_str).map(str::to_string).ok_or_else(|| ApiError::BadResponse {
            url: self.shown(&path),
            message: "no default_branch in the answer (an empty repository?)".into(),
        })
    }

    /// Start a pipeline on `git_ref` with `variables` (`POST /projects/:id/pipeline`, a JSON body
    /// `{"ref": …, "variables": [{"key": …, "value": …}]}`): the pipeline it created.
    pub(crate) fn create_pipeline(
        &self,
        project: &Project,
        git_ref: &str,
        variables: &BTreeMap<String, String>,
    ) -> Result<Pipeline, ApiError> {
        let path = format!("/projects/{}/pipeline", project.api_id());
        let vars: Vec<Value> = variables.iter().map(|(k, v)| serde_json::json!({"key": k, "value": v})).collect();
        let body = serde_json::json!({"ref": git_ref, "variables": vars});
        let text = self.call(reqwest::Method::POST, &path, Some(&body))?;
        serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))
    }

    /// The newest `per_page` pipelines of the project (`GET /projects/:id/pipelines`), newest first; of one `source`
    /// when given.
    pub(crate) fn pipelines(
        &self,
        project: &Project,
        per_page: u32,
        source: Option<&str>,
    ) -> Result<Vec<Pipeline>, ApiError> {
        let mut path = format!("/projects/{}/pipelines?per_page={per_page}&order_by=id&sort=desc", project.api_id());
        if let Some(s) = source {
            path.push_str(&format!("&source={s}"));
        }
        let text = self.call(reqwest::Method::GET, &path, None)?;
        serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))
    }
}

/// A merge request, as the swarm's `[forge]` needs it (`runner::propose`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergeRequest {
    pub iid: u64,
    pub url: String,
    pub open: bool,
    pub merged: bool,
    pub draft: bool,
    /// The commit its source branch was at (when merged: the commit GitLab merged).
    pub head_sha: Option<String>,
    pub title: String,
    pub description: String,
}

impl Client {
    fn mr(&self, path: &str, v: &Value) -> Result<MergeRequest, ApiError> {
        let state = v.get("state").and_then(Value::as_str).unwrap_or_default();
        Ok(MergeRequest {
            iid: v.get("iid").and_then(Value::as_u64).ok_or_else(|| ApiError::BadResponse {
                url: self.shown(path),
                message: "not a merge request".into(),
            })?,
            url: v.get("web_url").and_then(Value::as_str).unwrap_or_default().to_string(),
            open: state == "opened",
            merged: state == "merged",
            draft: v.get("draft").and_then(Value::as_bool).unwrap_or(false),
            head_sha: v.get("sha").and_then(Value::as_str).map(str::to_string),
            title: v.get("title").and_then(Value::as_str).unwrap_or_default().to_string(),
            description: v.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
        })
    }

    fn mrs(&self, project: &Project, source: &str, target: &str, filter: &str) -> Result<Vec<MergeRequest>, ApiError> {
        let path = format!(
            "/projects/{}/merge_requests?{filter}&source_branch={}&target_branch={}",
            project.api_id(),
            encoded(source),
            encoded(target)
        );
        let text = self.call(reqwest::Method::GET, &path, None)?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        v.as_array().map(Vec::as_slice).unwrap_or_default().iter().map(|m| self.mr(&path, m)).collect()
    }

    /// The merge requests from `source` into `target`, open or closed, the newest first
    /// (`GET /projects/:id/merge_requests?state=all&order_by=created_at&sort=desc&source_branch=…&target_branch=…`):
    /// the open one if there is one, and the ones GitLab merged before it, with the commit each merged and its
    /// description.
    pub(crate) fn recent_mrs(
        &self,
        project: &Project,
        source: &str,
        target: &str,
    ) -> Result<Vec<MergeRequest>, ApiError> {
        self.mrs(project, source, target, "state=all&order_by=created_at&sort=desc&per_page=10")
    }

    /// Open a merge request (`POST /projects/:id/merge_requests`); a draft's title starts `Draft:`.
    pub(crate) fn create_mr(
        &self,
        project: &Project,
        source: &str,
        target: &str,
        title: &str,
        description: &str,
    ) -> Result<MergeRequest, ApiError> {
        let path = format!("/projects/{}/merge_requests", project.api_id());
        let body = serde_json::json!({"source_branch": source, "target_branch": target, "title": title,
            "description": description, "remove_source_branch": false, "squash": false});
        let text = self.call(reqwest::Method::POST, &path, Some(&body))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        self.mr(&path, &v)
    }

    /// Change its title (a draft's loses `Draft:` when it is ready) and description
    /// (`PUT /projects/:id/merge_requests/:iid`); its state comes with the answer.
    pub(crate) fn update_mr(
        &self,
        project: &Project,
        iid: u64,
        title: &str,
        description: &str,
    ) -> Result<MergeRequest, ApiError> {
        let path = format!("/projects/{}/merge_requests/{iid}", project.api_id());
        let body = serde_json::json!({"title": title, "description": description});
        let text = self.call(reqwest::Method::PUT, &path, Some(&body))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(&path, e))?;
        self.mr(&path, &v)
    }

    /// Let GitLab merge it when its pipeline succeeds (`PUT /projects/:id/merge_requests/:iid/merge` with
    /// `auto_merge`; older servers read `merge_when_pipeline_succeeds`, sent too).
    pub(crate) fn auto_merge(&self, project: &Project, iid: u64) -> Result<(), ApiError> {
        let path = format!("/projects/{}/merge_requests/{iid}/merge", project.api_id());
        let body = serde_json::json!({"auto_merge": true, "merge_when_pipeline_succeeds": true,
            "should_remove_source_branch": false, "squash": false});
        self.call(reqwest::Method::PUT, &path, Some(&body)).map(|_| ())
    }
}

/// A branch name for a URL's query: what is not a letter, digit, `-`, `_` or `.` percent-encoded.
fn encoded(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect()
}

/// A pipeline source GitLab's `source` filter takes (what `runs --gitlab --source` passes on).
pub(crate) fn validate_source(s: &str) -> Result<(), String> {
    if !s.is_empty() && s.len() <= 40 && s.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        Ok(())
    } else {
        Err(format!("'{}' is not a pipeline source (api, trigger, web, schedule, push, …)", crate::escape::line(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_errors_are_gitlabs() {
        let e = Client::new("http://gitlab.example.com/api/v4", "glpat-secret").expect_err("plain http elsewhere");
        assert!(e.to_string().starts_with("GitLab API http://gitlab.example.com/api/v4: refusing"), "{e}");
        assert!(matches!(Client::new("https://gitlab.com/api/v4", " "), Err(ApiError::NoToken)));
    }

    #[test]
    fn error_bodies_become_one_line() {
        let c = Client::new("https://gitlab.com/api/v4", "tok").expect("client");
        let body = r#"{"message":{"base":["Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline."]}}"#;
        assert!(c.error_message(body, 400).starts_with("Pipeline will not run for the selected trigger."));
        assert_eq!(
            c.error_message(r#"{"message":{"base":["Reference not found"],"ref":["is invalid"]}}"#, 400),
            "Reference not found; ref: is invalid"
        );
        assert_eq!(c.error_message(r#"{"message":"404 Project Not Found"}"#, 404), "404 Project Not Found");
        assert_eq!(c.error_message(r#"{"error":"ref is missing"}"#, 400), "ref is missing");
        assert_eq!(c.error_message("", 404), "Not Found");
        assert_eq!(c.error_message("<html>\n", 502), "<html>");
    }

    #[test]
    fn rate_limit_messages_name_the_wait() {
        assert_eq!(wait_text(Some(30), None), "retry after 30 s (Retry-After)");
        let t = wait_text(None, Some(&crate::time::Timestamp::from_secs(2_000_000_000)));
        assert!(t.contains("2033-05-18T03:33:20Z"), "{t}");
        assert_eq!(wait_text(None, None), "wait a minute before trying again");
        assert!(validate_source("parent_pipeline").is_ok() && validate_source("a&b=c").is_err());
    }
}
