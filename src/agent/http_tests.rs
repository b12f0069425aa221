//! The `http` agent backend against a real HTTP/1.1 server on loopback, written here by hand: the client is not
//! mocked, every request goes through a socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::http::{Api, HttpAgent, HttpError, complete, complete_reporting, complete_with_key};
use crate::environment::Environment;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(10);

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    /// Names lowercased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("request body is JSON")
    }
}

/// What the server does with the n-th connection.
#[derive(Debug, Clone)]
enum Reply {
    /// Status code, extra headers, JSON body.
    Respond(u16, Vec<(&'static str, String)>, String),
    /// Read the request, then close the connection without a word.
    Close,
    /// Read the request, then answer nothing for this long.
    Stall(Duration),
}

fn ok(body: &str) -> Reply {
    Reply::Respond(200, vec![], body.to_string())
}

struct Server {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// Serve `replies` in order, the last one forever after. The thread is left running when the test ends.
    fn start(replies: Vec<Reply>) -> Server {
        assert!(!replies.is_empty());
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base = format!("http://127.0.0.1:{}", listener.local_addr().expect("local addr").port());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let reply = replies.get(n).unwrap_or(&replies[replies.len() - 1]).clone();
                handle(stream, reply, &log);
            }
        });
        Server { base, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

fn handle(stream: TcpStream, reply: Reply, log: &Mutex<Vec<Seen>>) {
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    assert_eq!(parts.next(), Some("HTTP/1.1"), "request line: {line:?}");
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("header has a colon");
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().expect("numeric content-length"))
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("request body");
    let body = String::from_utf8(body).expect("UTF-8 body");
    log.lock().expect("lock").push(Seen { method, path, headers, body });

    let mut stream = stream;
    match reply {
        Reply::Close => {}
        Reply::Stall(time) => std::thread::sleep(time),
        Reply::Respond(code, extra, body) => {
            let mut head = format!(
                "HTTP/1.1 {code} Whatever\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n",
                body.len()
            );
            for (name, value) in extra {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            // The client may have gone (a timeout test); a failed write is not the server's problem.
            let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body.as_bytes()));
            let _ = stream.flush();
        }
    }
}

fn agent(api: Api, base_url: String, key_env: Option<&str>) -> HttpAgent {
    HttpAgent {
        api,
        base_url,
        model: "test-model".into(),
        api_key_env: key_env.map(str::to_string),
        max_tokens: 512,
        temperature: None,
    }
}

const OPENAI_ANSWER: &str = r#"{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "1. Split the parser.\n2. Add tests.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {"prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163},
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;

const ANTHROPIC_ANSWER: &str = r#"{
  "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-20250514",
  "content": [
    {"type": "text", "text": "Verdict: "},
    {"type": "text", "text": "accept"}
  ],
  "stop_reason": "end_turn",
  "stop_sequence": null,
  "usage": {"input_tokens": 2095, "output_tokens": 503}
}"#;

#[test]
fn openai_happy_path() {
    let server = Server::start(vec![ok(OPENAI_ANSWER)]);
    let mut agent = agent(Api::Openai, format!("{}/v1", server.base), None);
    agent.temperature = Some(0.25);
    let text = complete_with_key(&agent, Some("sk-test"), "You plan.", "Plan this.", TIMEOUT).expect("completion");
    assert_eq!(text, "1. Split the parser.\n2. Add tests.");

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("user-agent"), Some(concat!("git-swarm/", env!("CARGO_PKG_VERSION"))));
    let body = request.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 512);
    assert_eq!(body["temperature"], 0.25);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][0]["content"], "You plan.");
    assert_eq!(body["messages"][1]["role"], "user");
    assert_eq!(body["messages"][1]["content"], "Plan this.");
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
}

#[test]
fn openai_without_key_sends_no_auth_and_tolerates_trailing_slash() {
    let server = Server::start(vec![ok(OPENAI_ANSWER)]);
    let agent = agent(Api::Openai, format!("{}/v1/", server.base), None);
    complete(&agent, "s", "p", TIMEOUT, &Environment::default()).expect("completion");
    let seen = server.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("authorization"), None);
}

#[test]
fn anthropic_happy_path() {
    let server = Server::start(vec![ok(ANTHROPIC_ANSWER)]);
    let agent = agent(Api::Anthropic, server.base.clone(), None);
    let text = complete_with_key(&agent, Some("sk-ant-test"), "You judge.", "Judge this.", TIMEOUT).expect("ok");
    assert_eq!(text, "Verdict: accept");

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("authorization"), None);
    let body = request.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 512);
    assert_eq!(body["system"], "You judge.");
    assert_eq!(body["messages"], serde_json::json!([{"role": "user", "content": "Judge this."}]));
    assert!(body.get("temperature").is_none());
}

#[test]
fn rate_limit_is_retried_after_retry_after() {
    let limited = r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#.to_string();
    let server =
        Server::start(vec![Reply::Respond(429, vec![("retry-after", "0".into())], limited), ok(OPENAI_ANSWER)]);
    let agent = agent(Api::Openai, format!("{}/v1", server.base), None);
    let started = Instant::now();
    let text = complete_with_key(&agent, Some("sk-test"), "s", "p", TIMEOUT).expect("second attempt succeeds");
    assert_eq!(text, "1. Split the parser.\n2. Add tests.");
    assert_eq!(server.seen().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(5), "retry-after: 0 means no wait");
}

#[test]
fn server_errors_are_retried_three_times_then_reported() {
    let overloaded = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.to_string();
    let server = Server::start(vec![Reply::Respond(529, vec![("retry-after", "0".into())], overloaded)]);
    let agent = agent(Api::Anthropic, server.base.clone(), None);
    let error = complete_with_key(&agent, Some("sk-ant-test"), "s", "p", TIMEOUT).expect_err("always overloaded");
    assert_eq!(server.seen().len(), 4, "one request and three retries");
    match &error {
        HttpError::Status { status, retry_after, message, .. } => {
            assert_eq!(*status, 529);
            assert_eq!(*retry_after, Some(0));
            assert!(message.contains("Overloaded"), "{message}");
        }
        other => panic!("expected a Status error, got {other:?}"),
    }
}

#[test]
fn unauthorized_names_status_and_message_but_not_the_key() {
    let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let server = Server::start(vec![Reply::Respond(401, vec![], body.into())]);
    let agent = agent(Api::Anthropic, server.base.clone(), None);
    let key = "sk-ant-secret-0123456789";
    let error = complete_with_key(&agent, Some(key), "s", "p", TIMEOUT).expect_err("401");
    assert_eq!(server.seen().len(), 1, "a 401 is not retried");
    let shown = error.to_string();
    assert!(shown.contains("401"), "{shown}");
    assert!(shown.contains("invalid x-api-key"), "{shown}");
    assert!(shown.contains(&format!("{}/v1/messages", server.base)), "{shown}");
    assert!(!shown.contains(key), "{shown}");
    assert!(!format!("{error:?}").contains(key));
}

#[test]
fn echoed_keys_and_url_userinfo_are_redacted() {
    let key = "sk-echoed-secret-42";
    let body = format!(r#"{{"error":{{"message":"Incorrect API key provided: {key}\u001b[2J","type":"invalid"}}}}"#);
    let server = Server::start(vec![Reply::Respond(403, vec![], body)]);
    let base = server.base.replace("http://", "http://alice:hunter2@");
    let agent = agent(Api::Openai, format!("{base}/v1"), None);
    let error = complete_with_key(&agent, Some(key), "s", "p", TIMEOUT).expect_err("403");
    let shown = error.to_string();
    assert!(shown.contains("403") && shown.contains("Incorrect API key provided"), "{shown}");
    assert!(!shown.contains(key), "{shown}");
    assert!(!shown.contains("hunter2") && !shown.contains("alice"), "{shown}");
    assert!(!shown.contains('\x1b'), "control characters are escaped: {shown}");
}

#[test]
fn missing_key_variable_fails_before_any_request() {
    let server = Server::start(vec![ok(OPENAI_ANSWER)]);
    let env = "GIT_SWARM_SURELY_UNSET_KEY_9f3";
    // Unset, or set to blanks: the key is missing either way.
    let blank = Environment::of(&[(env, "  ")]);
    let unset = Environment::default();
    for (api, vars) in [Api::Openai, Api::Anthropic].into_iter().flat_map(|a| [(a, &unset), (a, &blank)]) {
        let agent = agent(api, format!("{}/v1", server.base), Some(env));
        match complete(&agent, "s", "p", TIMEOUT, vars) {
            Err(error @ HttpError::MissingKey { .. }) => {
                assert!(matches!(&error, HttpError::MissingKey { env: e } if e == env));
                assert!(error.to_string().contains(env), "{error}");
            }
            other => panic!("expected MissingKey, got {other:?}"),
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(server.seen().len(), 0);
}

#[test]
fn garbage_json_is_a_bad_response() {
    let server = Server::start(vec![Reply::Respond(200, vec![], "<html>not json\x07</html>".into())]);
    let agent = agent(Api::Openai, format!("{}/v1", server.base), None);
    let error = complete_with_key(&agent, Some("sk-test"), "s", "p", TIMEOUT).expect_err("garbage");
    assert!(matches!(error, HttpError::BadResponse { .. }), "{error:?}");
    assert!(!error.to_string().contains('\x07'));
    assert_eq!(server.seen().len(), 1, "a bad 2xx body is not retried");

    let server = Server::start(vec![ok(r#"{"choices":[]}"#)]);
    let agent = self::agent(Api::Openai, format!("{}/v1", server.base), None);
    let error = complete_with_key(&agent, None, "s", "p", TIMEOUT).expect_err("no choices");
    assert!(matches!(error, HttpError::BadResponse { .. }), "{error:?}");

    let server = Server::start(vec![ok(r#"{"type":"message","content":"not an array"}"#)]);
    let agent = self::agent(Api::Anthropic, server.base.clone(), None);
    let error = complete_with_key(&agent, None, "s", "p", TIMEOUT).expect_err("content not an array");
    assert!(matches!(error, HttpError::BadResponse { .. }), "{error:?}");
}

#[test]
fn closed_connection_is_retried_then_succeeds() {
    let server = Server::start(vec![Reply::Close, ok(OPENAI_ANSWER)]);
    let agent = agent(Api::Openai, format!("{}/v1", server.base), None);
    let text = complete_with_key(&agent, Some("sk-test"), "s", "p", TIMEOUT).expect("second attempt succeeds");
    assert_eq!(text, "1. Split the parser.\n2. Add tests.");
    assert_eq!(server.seen().len(), 2);
}

/// Waits 1 + 2 + 4 s of back-off (the base without GIT_SWARM_HTTP_RETRY_BASE_MS).
#[test]
fn always_closed_connection_is_a_request_error() {
    let server = Server::start(vec![Reply::Close]);
    let agent = agent(Api::Openai, format!("{}/v1", server.base), None);
    let error = complete_with_key(&agent, Some("sk-test"), "s", "p", TIMEOUT).expect_err("never answered");
    assert!(matches!(error, HttpError::Request { .. }), "{error:?}");
    assert_eq!(server.seen().len(), 4, "one request and three retries");
    let shown = error.to_string();
    assert!(shown.contains(&server.base) && !shown.contains("sk-test"), "{shown}");
}

#[test]
fn timeout_is_a_request_error_and_not_retried() {
    let server = Server::start(vec![Reply::Stall(Duration::from_secs(5))]);
    let agent = agent(Api::Openai, format!("{}/v1", server.base), None);
    let started = Instant::now();
    let error =
        complete_with_key(&agent, None, "s", "p", Duration::from_millis(300)).expect_err("the server never answers");
    assert!(matches!(error, HttpError::Request { .. }), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert_eq!(server.seen().len(), 1);
}

// --- the vendors' current APIs, as their servers check requests (the stand-in's `Strict::Vendor`) ---------------

// The model API stand-in of the CLI's tests (`tests/cli/common`), the same server (its items are `pub` for the
// integration tests' modules).
#[allow(unreachable_pub)]
#[path = "../../tests/cli/common/model_api.rs"]
mod model_api;
#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/cli/common/serve.rs"]
mod serve;

use model_api::{ModelApi, Strict, Wire};

fn vendor(api: Api, base: String, model: &str, temperature: Option<f64>) -> HttpAgent {
    HttpAgent { api, base_url: base, model: model.into(), api_key_env: None, max_tokens: 500, temperature }
}

/// The guard itself: what OpenAI refuses of its reasoning models, the stand-in refuses too (else the tests below
/// would pass against a server that takes anything).
#[test]
fn the_stand_in_refuses_max_tokens_for_openai_reasoning_models() {
    let api = ModelApi::start(Strict::Vendor);
    let res = reqwest::blocking::Client::new()
        .post(format!("{}/v1/chat/completions", api.url()))
        .json(
            &serde_json::json!({"model": "gpt-5.2", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .expect("send");
    assert_eq!(res.status().as_u16(), 400);
    let body: Value = res.json().expect("json");
    assert!(
        body["error"]["message"].as_str().unwrap_or_default().contains("Use 'max_completion_tokens' instead"),
        "{body}"
    );
}

#[test]
fn openai_reasoning_models_get_max_completion_tokens_and_no_temperature_they_refuse() {
    let api = ModelApi::start(Strict::Vendor);
    let agent = vendor(Api::Openai, format!("{}/v1", api.url()), "gpt-5.2", Some(0.2));
    let text = complete_with_key(&agent, Some("sk-test"), "You judge.", "standin: say verdict: stop", TIMEOUT)
        .expect("the completion goes through");
    assert_eq!(text, "verdict: stop");
    let seen = api.requests();
    let last = seen.last().expect("a request");
    assert_eq!(last.status, 200);
    assert_eq!(last.body["max_completion_tokens"], 500, "{}", last.body);
    assert!(last.body.get("max_tokens").is_none() && last.body.get("temperature").is_none(), "{}", last.body);
    assert_eq!(last.header("authorization"), Some("Bearer sk-test"));
    // Adapted, not guessed: each refusal was answered once, never more.
    assert!(seen.len() <= 3, "{}", api.summary());
}

/// What planners and judges behind the `http` backend spent is the API's own `usage` of the request that answered:
/// exactly what the stand-in billed (the refused first tries of a reasoning model bill nothing).
#[test]
fn the_usage_an_api_reports_is_what_it_billed() {
    for (kind, model) in
        [(Api::Openai, "gpt-5.2"), (Api::Openai, "llama3.3:70b"), (Api::Anthropic, "claude-sonnet-4-5")]
    {
        let api = ModelApi::start(Strict::Vendor);
        let base = if kind == Api::Openai { format!("{}/v1", api.url()) } else { api.url() };
        let agent = vendor(kind, base, model, None);
        let (text, usage) =
            complete_reporting(&agent, "sys", "standin: say verdict: stop", TIMEOUT, &Environment::default())
                .expect("ok");
        assert_eq!(text, "verdict: stop");
        let u = usage.expect("the API reported usage");
        assert_eq!((u.input_tokens, u.output_tokens), api.billed(), "{model}: {}", api.summary());
        assert_eq!((u.runs, u.cost_usd), (1, None), "{model}: the APIs say no price");
    }
}

#[test]
fn compatible_servers_keep_getting_max_tokens_in_one_request() {
    let api = ModelApi::start(Strict::Vendor);
    let agent = vendor(Api::Openai, format!("{}/v1", api.url()), "llama3.3:70b", Some(0.2));
    let text = complete_with_key(&agent, None, "", "standin: say fine", TIMEOUT).expect("completion");
    assert_eq!(text, "fine");
    let seen = api.requests();
    assert_eq!(seen.len(), 1, "{}", api.summary());
    assert_eq!((seen[0].body["max_tokens"].as_u64(), seen[0].body["temperature"].as_f64()), (Some(500), Some(0.2)));
    assert_eq!(seen[0].body["messages"].as_array().map(Vec::len), Some(1), "no empty system message");
}

#[test]
fn anthropic_requests_carry_the_version_header_and_the_fields_it_requires() {
    let api = ModelApi::start(Strict::Vendor);
    let agent = vendor(Api::Anthropic, api.url(), "claude-sonnet-4-5", None);
    let text = complete_with_key(&agent, Some("sk-ant-test"), "sys", "standin: say planned", TIMEOUT).expect("ok");
    assert_eq!(text, "planned");
    let seen = api.requests();
    assert_eq!(seen.len(), 1, "{}", api.summary());
    let r = &seen[0];
    assert_eq!(r.wire, Wire::AnthropicMessages);
    assert_eq!((r.header("anthropic-version"), r.header("x-api-key")), (Some("2023-06-01"), Some("sk-ant-test")));
    assert_eq!((r.body["max_tokens"].as_u64(), r.body["system"].as_str()), (Some(500), Some("sys")));
}
