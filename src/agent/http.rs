//! The `http` agent backend: one blocking request to a chat API, for text-only roles (planner, judge).
//!
//! Two wire formats are spoken:
//!
//! * [`Api::Openai`] — any OpenAI-compatible server: `POST {base_url}/chat/completions` (OpenAI, ollama, vLLM,
//!   llama.cpp, OpenRouter, …), key in `Authorization: Bearer`.
//! * [`Api::Anthropic`] — the Anthropic messages API: `POST {base_url}/v1/messages`, key in `x-api-key`.
//!
//! The key is read from the environment variable the configuration names, is sent only in its header (marked
//! sensitive), is never followed through a redirect, and is scrubbed from every error message. Rate limits (429),
//! server errors (5xx) and failed connections are retried a few times with a back-off; a timeout is not retried,
//! since the timeout is the caller's budget for one request.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::environment::Environment;

/// The version of the Anthropic messages API we speak.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// How many times a failed request is tried again.
const MAX_RETRIES: u32 = 3;
/// The longest `retry-after` we honour, in seconds.
const MAX_RETRY_AFTER_SECS: u64 = 60;
/// The first back-off in milliseconds (doubled each retry) without `GIT_SWARM_HTTP_RETRY_BASE_MS` (tests set it low).
#[cfg(test)]
const DEFAULT_RETRY_BASE_MS: u64 = 1000;
/// How much of a response body an error message quotes, in characters.
const MAX_QUOTED_CHARS: usize = 300;

/// Which wire format the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Api {
    /// OpenAI chat completions (and every server compatible with it).
    Openai,
    /// Anthropic messages.
    Anthropic,
}

/// An agent that is a model behind an HTTP API. (`PartialEq` only: the temperature is a float.)
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HttpAgent {
    pub api: Api,
    /// e.g. https://api.openai.com/v1 (OpenAI-compatible: POST {base_url}/chat/completions) or
    /// https://api.anthropic.com (POST {base_url}/v1/messages). A trailing '/' is tolerated; for Anthropic a base
    /// that already ends in `/v1` is tolerated too.
    pub base_url: String,
    pub model: String,
    /// The NAME of the environment variable holding the API key (the key itself is never stored or printed).
    /// None: no auth header (local servers such as ollama/vLLM).
    pub api_key_env: Option<String>,
    pub max_tokens: u32,
    /// Optional temperature.
    pub temperature: Option<f64>,
}

/// Why a completion failed. Every message is safe to print: no API key, no URL userinfo, no control characters.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The environment variable that should hold the API key is unset or empty.
    #[error("the API key environment variable {env} is not set (or is empty)")]
    MissingKey { env: String },
    /// The request could not be made or no response came back (connection refused, reset, timeout, …).
    #[error("request to {url} failed: {message}")]
    Request { url: String, message: String },
    /// The server answered with a status other than 2xx.
    #[error("{url} answered HTTP {status}: {message}")]
    Status { url: String, status: u16, message: String, retry_after: Option<u64> },
    /// The server answered 2xx, but not with something we understand.
    #[error("unexpected response from {url}: {message}")]
    BadResponse { url: String, message: String },
}

/// Send `system` + `prompt` as one user turn, return the model's text (all text parts concatenated).
///
/// The API key is read from the variable of `env` that `agent.api_key_env` names; an unset or empty variable is
/// [`HttpError::MissingKey`], before any request is made. `timeout` bounds each request (connect, send, read).
#[cfg(test)]
pub(crate) fn complete(
    agent: &HttpAgent,
    system: &str,
    prompt: &str,
    timeout: Duration,
    env: &Environment,
) -> Result<String, HttpError> {
    complete_reporting(agent, system, prompt, timeout, env).map(|(text, _)| text)
}

/// [`complete`], with the usage the API reported for the request that answered (`usage` of either API), if any.
pub(crate) fn complete_reporting(
    agent: &HttpAgent,
    system: &str,
    prompt: &str,
    timeout: Duration,
    env: &Environment,
) -> Result<(String, Option<crate::usage::Usage>), HttpError> {
    let key = match &agent.api_key_env {
        None => None,
        Some(name) => match env.text(name) {
            Some(key) => Some(key),
            None => return Err(HttpError::MissingKey { env: crate::escape::line(name) }),
        },
    };
    request(agent, key, system, prompt, timeout, env.http_retry_base_ms())
}

/// [`complete`] with the API key given rather than read from the environment (`None`: no auth header).
#[cfg(test)]
pub(crate) fn complete_with_key(
    agent: &HttpAgent,
    key: Option<&str>,
    system: &str,
    prompt: &str,
    timeout: Duration,
) -> Result<String, HttpError> {
    request(agent, key, system, prompt, timeout, DEFAULT_RETRY_BASE_MS).map(|(text, _)| text)
}

fn request(
    agent: &HttpAgent,
    key: Option<&str>,
    system: &str,
    prompt: &str,
    timeout: Duration,
    retry_base: u64,
) -> Result<(String, Option<crate::usage::Usage>), HttpError> {
    let key = key.map(str::trim).filter(|k| !k.is_empty());
    let scrub = Scrub { key };
    let url = endpoint(agent.api, &agent.base_url);
    let shown_url = scrub.clean(&crate::escape::line(&crate::secrets::redact(&url)));
    let request_error = |message: String| HttpError::Request { url: shown_url.clone(), message };

    // The key goes only where nobody on the way can read it: https, or a server on this machine.
    if key.is_some() && !may_carry_secret(&url) {
        return Err(request_error(
            "refusing to send the API key over plain http to another machine (use https, or a server on loopback)"
                .into(),
        ));
    }
    let headers = headers(agent.api, key).map_err(request_error)?;
    let mut shape = Shape::first(agent, &url);
    let encode = |shape: Shape| {
        serde_json::to_vec(&request_body(agent, system, prompt, shape))
            .map_err(|e| request_error(format!("cannot encode the request: {e}")))
    };
    let mut body = encode(shape)?;
    // At most two adaptations in all (a server that refuses both spellings gets its error back, after three
    // requests at most).
    let mut adapted = 0;
    let mut builder = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("git-swarm/", env!("CARGO_PKG_VERSION")))
        // Never resend the key to wherever a redirect points.
        .redirect(reqwest::redirect::Policy::none());
    if is_loopback(&url) {
        // A local model server is never behind the proxy the environment names.
        builder = builder.no_proxy();
    }
    let client =
        builder.build().map_err(|e| request_error(format!("cannot set up the HTTP client: {}", chain(e, &scrub))))?;

    let mut attempt = 0;
    loop {
        let (error, retry_after) = match send(&client, &url, &headers, &body, &shown_url, &scrub) {
            Ok(text) => {
                let answer = parse_response(agent.api, &text, &scrub)
                    .map_err(|message| HttpError::BadResponse { url: shown_url.clone(), message })?;
                return Ok((answer, parse_usage(agent.api, &text)));
            }
            Err(Failure::Final(e)) => {
                // A field this server refuses, and says what it takes instead: once more, shaped as it asks.
                let next = match &e {
                    HttpError::Status { status: 400, message, .. } if adapted < 2 => shape.adapt(agent, message),
                    _ => None,
                };
                adapted += 1;
                match next {
                    Some(next) => {
                        shape = next;
                        body = encode(shape)?;
                        continue;
                    }
                    None => return Err(e),
                }
            }
            Err(Failure::Retryable(e)) => {
                let retry_after = match &e {
                    HttpError::Status { retry_after, .. } => *retry_after,
                    _ => None,
                };
                (e, retry_after)
            }
        };
        if attempt >= MAX_RETRIES {
            return Err(error);
        }
        std::thread::sleep(backoff(attempt, retry_after, retry_base));
        attempt += 1;
    }
}

/// The outcome of one failed request: worth trying again, or not.
enum Failure {
    Retryable(HttpError),
    Final(HttpError),
}

/// One request; `Ok` is the body of a 2xx answer.
fn send(
    client: &reqwest::blocking::Client,
    url: &str,
    headers: &HeaderMap,
    body: &[u8],
    shown_url: &str,
    scrub: &Scrub<'_>,
) -> Result<String, Failure> {
    let transport = |e: reqwest::Error| {
        let retryable = !e.is_timeout() && (e.is_connect() || e.is_request() || e.is_body());
        let error = HttpError::Request { url: shown_url.to_string(), message: chain(e, scrub) };
        if retryable { Failure::Retryable(error) } else { Failure::Final(error) }
    };
    let response = client.post(url).headers(headers.clone()).body(body.to_vec()).send().map_err(transport)?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let bytes = response.bytes().map_err(transport)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if status.is_success() {
        return Ok(text);
    }
    let error = HttpError::Status {
        url: shown_url.to_string(),
        status: status.as_u16(),
        message: error_message(&text, status.canonical_reason(), scrub),
        retry_after,
    };
    if status.as_u16() == 429 || status.is_server_error() {
        Err(Failure::Retryable(error))
    } else {
        Err(Failure::Final(error))
    }
}

/// Where the request goes.
fn endpoint(api: Api, base_url: &str) -> String {
    let base = base_url.trim().trim_end_matches('/');
    match api {
        Api::Openai => format!("{base}/chat/completions"),
        Api::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
        Api::Anthropic => format!("{base}/v1/messages"),
    }
}

fn headers(api: Api, key: Option<&str>) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static("application/json"));
    let secret = |value: String| {
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| "the API key contains characters that cannot go in an HTTP header".to_string())?;
        value.set_sensitive(true);
        Ok::<_, String>(value)
    };
    match api {
        Api::Openai => {
            if let Some(key) = key {
                headers.insert(reqwest::header::AUTHORIZATION, secret(format!("Bearer {key}"))?);
            }
        }
        Api::Anthropic => {
            headers.insert("anthropic-version", HeaderValue::from_static(ANTHROPIC_VERSION));
            if let Some(key) = key {
                headers.insert("x-api-key", secret(key.to_string())?);
            }
        }
    }
    Ok(headers)
}

/// How a request is shaped; changed when the server refuses a field (see [`Shape::adapt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    /// OpenAI: `max_completion_tokens` (what OpenAI's own API takes, and requires of its reasoning models) or
    /// the older `max_tokens` (what compatible servers have always taken).
    completion_tokens: bool,
    /// Send the configured temperature (reasoning models take only their default).
    temperature: bool,
}

impl Shape {
    fn first(agent: &HttpAgent, url: &str) -> Shape {
        Shape { completion_tokens: agent.api == Api::Openai && is_openai_host(url), temperature: true }
    }

    /// The shape to try after a 400 that names a field this one sent, if the server says how: OpenAI refuses
    /// `max_tokens` of its reasoning models ("Use 'max_completion_tokens' instead"), an older compatible server the
    /// reverse; a model that takes only its default temperature refuses ours.
    fn adapt(self, agent: &HttpAgent, message: &str) -> Option<Shape> {
        let m = message.to_ascii_lowercase();
        if agent.api == Api::Openai && m.contains("max_tokens") && m.contains("max_completion_tokens") {
            return Some(Shape { completion_tokens: !self.completion_tokens, ..self });
        }
        if self.temperature && agent.temperature.is_some() && m.contains("temperature") && m.contains("unsupported") {
            return Some(Shape { temperature: false, ..self });
        }
        None
    }
}

/// OpenAI's own API (and Azure's), which takes `max_completion_tokens`.
fn is_openai_host(url: &str) -> bool {
    reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_ascii_lowercase)).is_some_and(|h| {
        h == "api.openai.com" || h.ends_with(".openai.azure.com") || h.ends_with(".services.ai.azure.com")
    })
}

fn request_body(agent: &HttpAgent, system: &str, prompt: &str, shape: Shape) -> Value {
    let mut body = match agent.api {
        Api::Openai => {
            let mut messages = Vec::new();
            if !system.trim().is_empty() {
                messages.push(json!({"role": "system", "content": system}));
            }
            messages.push(json!({"role": "user", "content": prompt}));
            let field = if shape.completion_tokens { "max_completion_tokens" } else { "max_tokens" };
            json!({"model": agent.model, "messages": messages, field: agent.max_tokens})
        }
        Api::Anthropic => {
            let mut b = json!({
                "model": agent.model,
                "max_tokens": agent.max_tokens,
                "messages": [{"role": "user", "content": prompt}],
            });
            if !system.trim().is_empty() {
                b["system"] = json!(system);
            }
            b
        }
    };
    if let (Some(t), true, Some(map)) = (agent.temperature, shape.temperature, body.as_object_mut()) {
        map.insert("temperature".into(), json!(t));
    }
    body
}

/// The model's text in a 2xx body; `Err` says what is wrong with the body (printable: quoted through `scrub`).
fn parse_response(api: Api, body: &str, scrub: &Scrub<'_>) -> Result<String, String> {
    let quote = |s: &str| quote(s, scrub);
    let value: Value = serde_json::from_str(body).map_err(|e| format!("not JSON ({e}): {}", quote(body)))?;
    if let Some(message) = api_error(&value) {
        return Err(format!("the API reported an error: {}", quote(&message)));
    }
    match api {
        Api::Openai => {
            let message = value
                .pointer("/choices/0/message")
                .ok_or_else(|| format!("no choices[0].message in {}", quote(body)))?;
            match message.get("content") {
                Some(Value::String(text)) => Ok(text.clone()),
                Some(Value::Array(parts)) => Ok(join_text_parts(parts, false)),
                _ => match message.get("refusal").and_then(Value::as_str) {
                    Some(refusal) => Err(format!("the model refused: {}", quote(refusal))),
                    None => Err(format!("choices[0].message has no text content: {}", quote(body))),
                },
            }
        }
        Api::Anthropic => match value.get("content") {
            Some(Value::Array(blocks)) => Ok(join_text_parts(blocks, true)),
            _ => Err(format!("no content array in {}", quote(body))),
        },
    }
}

/// The `usage` of a 2xx body: OpenAI's `prompt_tokens` (cached ones in `prompt_tokens_details.cached_tokens`) and
/// `completion_tokens`; Anthropic's `input_tokens` + `cache_creation_input_tokens`, `cache_read_input_tokens`,
/// `output_tokens`. Neither API says what a request cost.
fn parse_usage(api: Api, body: &str) -> Option<crate::usage::Usage> {
    let value: Value = serde_json::from_str(body).ok()?;
    let u = value.get("usage")?;
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let usage = match api {
        Api::Openai => {
            let cached = n("/prompt_tokens_details/cached_tokens");
            crate::usage::Usage {
                input_tokens: n("/prompt_tokens").saturating_sub(cached),
                output_tokens: n("/completion_tokens"),
                cache_read_tokens: cached,
                cost_usd: None,
                runs: 1,
            }
        }
        Api::Anthropic => crate::usage::Usage {
            input_tokens: n("/input_tokens").saturating_add(n("/cache_creation_input_tokens")),
            output_tokens: n("/output_tokens"),
            cache_read_tokens: n("/cache_read_input_tokens"),
            cost_usd: None,
            runs: 1,
        },
    };
    Some(usage)
}

/// The `text` of every part; with `typed`, only of parts whose `type` is `text`.
fn join_text_parts(parts: &[Value], typed: bool) -> String {
    parts
        .iter()
        .filter(|p| !typed || p.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect()
}

/// `{"error": {"message": …}}` (both APIs), or `{"error": "…"}` (some compatible servers).
fn api_error(value: &Value) -> Option<String> {
    match value.get("error")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(e) => {
            let message = e.get("message").and_then(Value::as_str)?;
            Some(match e.get("type").and_then(Value::as_str) {
                Some(kind) if !kind.is_empty() => format!("{message} ({kind})"),
                _ => message.to_string(),
            })
        }
        _ => None,
    }
}

/// What a non-2xx answer says about itself: the API's own message, else the start of the body, else the reason.
fn error_message(body: &str, reason: Option<&str>, scrub: &Scrub<'_>) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| api_error(&v));
    match from_json {
        Some(message) => quote(&message, scrub),
        None if body.trim().is_empty() => reason.unwrap_or("no message").to_string(),
        None => quote(body.trim(), scrub),
    }
}

/// At most [`MAX_QUOTED_CHARS`] characters of `s` on one line: the key removed first (so that no cut leaves part
/// of it), control characters escaped. (Shared with the GitHub client.)
pub(crate) fn quote(s: &str, scrub: &Scrub<'_>) -> String {
    let s = scrub.clean(s);
    let mut cut: String = s.chars().take(MAX_QUOTED_CHARS).collect();
    if cut.len() < s.len() {
        cut.push('…');
    }
    crate::escape::line(&cut)
}

/// A `reqwest` error with its causes, without its URL (which could carry userinfo; the caller names the URL).
pub(crate) fn chain(error: reqwest::Error, scrub: &Scrub<'_>) -> String {
    let message = crate::with_causes(&error.without_url());
    scrub.clean(&crate::escape::line(&message))
}

/// Removes the key from text headed for an error message (a server may echo it back).
pub(crate) struct Scrub<'a> {
    pub(crate) key: Option<&'a str>,
}

impl Scrub<'_> {
    fn clean(&self, text: &str) -> String {
        match self.key {
            Some(key) if !key.is_empty() => text.replace(key, "[redacted]"),
            _ => text.to_string(),
        }
    }
}

/// How long to wait before retry number `attempt + 1`.
fn backoff(attempt: u32, retry_after: Option<u64>, base_ms: u64) -> Duration {
    match retry_after {
        Some(secs) => Duration::from_secs(secs.min(MAX_RETRY_AFTER_SECS)),
        None => Duration::from_millis(base_ms.saturating_mul(1 << attempt.min(16))),
    }
}

/// May a secret (an API key, a token) be sent to this URL? Only over https, or to a server on this machine: on
/// plain http to another machine anybody on the way could read it. (Shared with the GitHub client, `crate::github`.)
pub(crate) fn may_carry_secret(url: &str) -> bool {
    url.starts_with("https://") || is_loopback(url)
}

/// Whether the URL's host is this machine.
pub(crate) fn is_loopback(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else { return false };
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_KEY: Scrub<'static> = Scrub { key: None };

    #[test]
    fn joins_endpoints() {
        assert_eq!(endpoint(Api::Openai, "https://api.openai.com/v1"), "https://api.openai.com/v1/chat/completions");
        assert_eq!(endpoint(Api::Openai, "http://localhost:11434/v1/"), "http://localhost:11434/v1/chat/completions");
        assert_eq!(endpoint(Api::Anthropic, "https://api.anthropic.com"), "https://api.anthropic.com/v1/messages");
        assert_eq!(endpoint(Api::Anthropic, "https://api.anthropic.com/"), "https://api.anthropic.com/v1/messages");
        assert_eq!(endpoint(Api::Anthropic, "https://api.anthropic.com/v1/"), "https://api.anthropic.com/v1/messages");
    }

    #[test]
    fn parses_openai_responses() {
        let body = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}"#;
        assert_eq!(parse_response(Api::Openai, body, &NO_KEY).as_deref(), Ok("hello"));
        let parts = r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}"#;
        assert_eq!(parse_response(Api::Openai, parts, &NO_KEY).as_deref(), Ok("ab"));
        let refusal = r#"{"choices":[{"message":{"content":null,"refusal":"no"}}]}"#;
        assert!(parse_response(Api::Openai, refusal, &NO_KEY).is_err_and(|e| e.contains("refused")));
        assert!(parse_response(Api::Openai, r#"{"choices":[]}"#, &NO_KEY).is_err());
        assert!(parse_response(Api::Openai, "<html>", &NO_KEY).is_err_and(|e| e.contains("not JSON")));
    }

    #[test]
    fn parses_anthropic_responses() {
        let body = r#"{"type":"message","role":"assistant","content":[{"type":"thinking","thinking":"hm"},
            {"type":"text","text":"one "},{"type":"tool_use","id":"x"},{"type":"text","text":"two"}],
            "stop_reason":"end_turn"}"#;
        assert_eq!(parse_response(Api::Anthropic, body, &NO_KEY).as_deref(), Ok("one two"));
        let error = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert!(parse_response(Api::Anthropic, error, &NO_KEY).is_err_and(|e| e.contains("Overloaded")));
    }

    #[test]
    fn error_messages_are_short_and_escaped() {
        assert_eq!(error_message(r#"{"error":{"message":"bad key"}}"#, Some("Unauthorized"), &NO_KEY), "bad key");
        assert_eq!(error_message("", Some("Unauthorized"), &NO_KEY), "Unauthorized");
        assert_eq!(error_message("oops\x1b[2J", None, &NO_KEY), "oops\\u{1b}[2J");
        let long = "x".repeat(1000);
        assert_eq!(error_message(&long, None, &NO_KEY).chars().count(), MAX_QUOTED_CHARS + 1);
    }

    #[test]
    fn a_key_never_goes_over_plain_http_to_another_machine() {
        let agent = |base: &str| HttpAgent {
            api: Api::Openai,
            base_url: base.into(),
            model: "m".into(),
            api_key_env: None,
            max_tokens: 10,
            temperature: None,
        };
        let d = Duration::from_secs(1);
        // Refused before any connection: the host does not even resolve.
        let e = complete_with_key(&agent("http://models.example.invalid/v1"), Some("sk-1"), "s", "p", d);
        assert!(matches!(&e, Err(HttpError::Request { message, .. }) if message.contains("refusing")), "{e:?}");
        assert!(!format!("{e:?}").contains("sk-1"));
        // The http backend's tests (tests/http_backend.rs) send keys over plain http to loopback servers.
    }

    #[test]
    fn builds_request_bodies() {
        let mut agent = HttpAgent {
            api: Api::Openai,
            base_url: "http://x".into(),
            model: "m".into(),
            api_key_env: None,
            max_tokens: 100,
            temperature: None,
        };
        let shape = Shape::first(&agent, "http://x/chat/completions");
        let body = request_body(&agent, "sys", "hi", shape);
        assert_eq!(body["messages"][0]["content"], "sys");
        assert_eq!(body["messages"][1]["role"], "user");
        assert_eq!(body["max_tokens"], 100);
        assert!(body.get("temperature").is_none());
        // OpenAI itself takes max_completion_tokens (its reasoning models refuse max_tokens).
        let openai = Shape::first(&agent, "https://api.openai.com/v1/chat/completions");
        let body = request_body(&agent, "", "hi", openai);
        assert_eq!((body.get("max_tokens"), &body["max_completion_tokens"]), (None, &json!(100)));
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(1), "no empty system message");
        agent.temperature = Some(0.2);
        let refusal = "Unsupported parameter: 'max_tokens' is not supported with this model. Use \
                       'max_completion_tokens' instead.";
        assert_eq!(shape.adapt(&agent, refusal), Some(Shape { completion_tokens: true, temperature: true }));
        let t = "Unsupported value: 'temperature' does not support 0.2 with this model.";
        assert_eq!(openai.adapt(&agent, t), Some(Shape { completion_tokens: true, temperature: false }));
        assert_eq!(openai.adapt(&agent, "model not found"), None);
        agent.api = Api::Anthropic;
        agent.temperature = Some(0.5);
        let body = request_body(&agent, "sys", "hi", Shape::first(&agent, "https://api.anthropic.com/v1/messages"));
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["temperature"], 0.5);
    }

    #[test]
    fn backs_off() {
        assert_eq!(backoff(0, None, 1000), Duration::from_secs(1));
        assert_eq!(backoff(2, None, 1000), Duration::from_secs(4));
        assert_eq!(backoff(0, Some(5), 1000), Duration::from_secs(5));
        assert_eq!(backoff(0, Some(3600), 1000), Duration::from_secs(60));
    }

    #[test]
    fn scrubs_keys_and_recognises_loopback() {
        assert_eq!(Scrub { key: Some("sk-1") }.clean("bad key sk-1"), "bad key [redacted]");
        let key = "sk-0123456789abcdef";
        let straddling = format!("{}{key}", "x".repeat(MAX_QUOTED_CHARS - 5));
        assert!(!error_message(&straddling, None, &Scrub { key: Some(key) }).contains("sk-01"));
        assert!(is_loopback("http://127.0.0.1:8080/v1"));
        assert!(is_loopback("http://localhost/v1"));
        assert!(is_loopback("http://[::1]:1/"));
        assert!(!is_loopback("https://api.openai.com/v1"));
    }
}
