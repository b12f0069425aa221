//! A stand-in for the vendors' model APIs, on loopback: what the published agent CLIs talk to in our tests.
//!
//! It speaks the four wire formats the CLIs use — Anthropic Messages (Claude Code, opencode), OpenAI Responses
//! (Codex), OpenAI Chat Completions (aider, our `http` backend) and Gemini `generateContent` (Gemini CLI) — each
//! streaming (server-sent events) and not, and plays a **scripted model**:
//!
//! * The script is in the task: lines `standin: write <path> <text>` of the conversation's user text (the worker
//!   prompt carries the task body). For each such line the model calls the CLI's shell tool to append `<text>` to
//!   `<path>`, then calls it once more to commit (`git add -A && git commit -m "standin: <path>"`), then ends with
//!   a final message that starts `Status: done` (what the worker prompt asks for). `standin: fail <reason>` ends
//!   at once with `Status: failed: <reason>`; `standin: no-commit` leaves the commit to the runner;
//!   `standin: say <text>` answers `<text>` (`\n` for a new line) to any request, for text-only roles;
//!   `standin: loop` never ends: after its writes, one more shell call (`echo`) at every turn (a runaway agent).
//!   A conflict run (a prompt with a `<conflict-files>` block) resolves each file by keeping both sides, one shell
//!   call a file, and commits nothing.
//! * The step is the number of tool results already in the conversation, so the server keeps no state per session.
//! * The shell tool is found in the request's own tool list (`Bash`, `bash`, `exec_command`, `shell`,
//!   `shell_command`, `run_shell_command`), and its arguments are shaped by the tool's own JSON schema (a `command`
//!   or `cmd` property, a string or an argv array; a required `description`), so small drifts in a CLI's tools
//!   still work. A CLI without tools (aider) gets aider's whole-file *file listing* format instead.
//! * Side requests (titles, commit messages, routing classifiers that ask for JSON) get short answers; a request
//!   that asks for JSON with a schema gets an object with every required property filled.
//!
//! Every request is recorded with what it was billed (fixed token counts, reported in each API's `usage` shape),
//! and [`Strict`] validation refuses what the real APIs refuse (OpenAI's reasoning models and `max_tokens`, a
//! missing `anthropic-version`, unknown fields…), so a client that only works against a lenient server fails here.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::serve::{Answer, Seen, Served};

/// Tokens billed for one agent turn (a tool call or the final message).
pub const TURN_INPUT_TOKENS: u64 = 1000;
pub const TURN_OUTPUT_TOKENS: u64 = 100;
/// Tokens billed for a side request (a title, a commit message, a classifier).
pub const SIDE_INPUT_TOKENS: u64 = 10;
pub const SIDE_OUTPUT_TOKENS: u64 = 5;

/// Which wire format a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    AnthropicMessages,
    OpenaiResponses,
    OpenaiChat,
    Gemini,
}

/// One request as the stand-in saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub wire: Wire,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The HTTP status answered.
    pub status: u16,
    /// What the model did: `tool <name>`, `text`, `json`, `side`, or `error <message>`.
    pub reply: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// How closely requests are checked against the documented APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strict {
    /// Accept any well-formed JSON request (the CLIs send vendor extensions we do not model).
    #[default]
    Lenient,
    /// Refuse what the vendors' own servers refuse (used for our `http` backend).
    Vendor,
}

pub struct ModelApi {
    served: Served,
    pub port: u16,
    log: Arc<Mutex<Vec<Recorded>>>,
}

impl ModelApi {
    pub fn start(strict: Strict) -> ModelApi {
        Self::start_on("127.0.0.1:0", strict)
    }

    pub fn start_on(addr: &str, strict: Strict) -> ModelApi {
        let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let l = Arc::clone(&log);
        let served = Served::start_on(addr, move |req| handle(req, strict, &l));
        ModelApi { port: served.port, served, log }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Input and output tokens billed so far.
    pub fn billed(&self) -> (u64, u64) {
        self.requests().iter().fold((0, 0), |(i, o), r| (i + r.input_tokens, o + r.output_tokens))
    }

    /// One line per request, for failure messages.
    pub fn summary(&self) -> String {
        self.requests()
            .iter()
            .map(|r| format!("{:?} {} -> {} {}", r.wire, r.path, r.status, r.reply))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// What the model does next.
#[derive(Debug, Clone, PartialEq)]
enum Turn {
    Tool { name: String, args: Value },
    Text(String),
    Json(Value),
}

/// What a request says, whatever its wire format.
#[derive(Debug, Default)]
struct Conversation {
    model: String,
    stream: bool,
    /// The user's text, all of it (the system prompt left out).
    user_text: String,
    system_text: String,
    tool_results: usize,
    /// Tool name → its parameter schema.
    tools: Vec<(String, Value)>,
    /// A JSON schema the answer must follow.
    json_schema: Option<Value>,
}

fn handle(req: &Seen, strict: Strict, log: &Mutex<Vec<Recorded>>) -> Answer {
    let path = req.url.clone();
    let headers = req.headers.clone();
    let body: Value = serde_json::from_str(&req.body).unwrap_or(Value::Null);
    let wire = if path.starts_with("/v1/messages") {
        Some(Wire::AnthropicMessages)
    } else if path.starts_with("/v1/responses") {
        Some(Wire::OpenaiResponses)
    } else if path.contains("/chat/completions") {
        Some(Wire::OpenaiChat)
    } else if path.contains("/models/")
        && (path.contains(":generateContent") || path.contains(":streamGenerateContent"))
    {
        Some(Wire::Gemini)
    } else {
        None
    };
    let Some(wire) = wire else {
        // Model lists, token counts and the like: an empty, valid answer.
        let answer = if path.contains(":countTokens") {
            json!({"totalTokens": 10})
        } else {
            json!({"object": "list", "data": [], "models": []})
        };
        return respond(200, "application/json", answer.to_string());
    };
    let record = |status: u16, reply: String, tokens: (u64, u64)| {
        if let Ok(mut l) = log.lock() {
            l.push(Recorded {
                wire,
                path: path.clone(),
                headers: headers.clone(),
                body: body.clone(),
                status,
                reply,
                input_tokens: tokens.0,
                output_tokens: tokens.1,
            });
        }
    };
    if body.is_null() {
        record(400, "error not JSON".into(), (0, 0));
        return respond(400, "application/json", error_body(wire, "the request body is not JSON", None));
    }
    if strict == Strict::Vendor
        && let Err((message, param)) = validate(wire, &headers, &body)
    {
        record(400, format!("error {message}"), (0, 0));
        return respond(400, "application/json", error_body(wire, &message, param));
    }
    let conv = read_conversation(wire, &path, &body);
    let (turn, side) = decide(&conv);
    let tokens = if side { (SIDE_INPUT_TOKENS, SIDE_OUTPUT_TOKENS) } else { (TURN_INPUT_TOKENS, TURN_OUTPUT_TOKENS) };
    let reply = match (&turn, side) {
        (_, true) => "side".to_string(),
        (Turn::Tool { name, .. }, _) => format!("tool {name}"),
        (Turn::Text(_), _) => "text".into(),
        (Turn::Json(_), _) => "json".into(),
    };
    record(200, reply, tokens);
    let (content_type, text) = render(wire, &conv, &turn, tokens);
    respond(200, content_type, text)
}

fn respond(status: u16, content_type: &str, body: String) -> Answer {
    (status, vec![("Content-Type", content_type.to_string())], body)
}

fn error_body(wire: Wire, message: &str, param: Option<&str>) -> String {
    match wire {
        Wire::AnthropicMessages => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        }
        Wire::OpenaiChat | Wire::OpenaiResponses => json!({"error": {
            "message": message, "type": "invalid_request_error", "param": param,
            "code": if param.is_some() { "unsupported_parameter" } else { "invalid_request" }
        }}),
        Wire::Gemini => json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}),
    }
    .to_string()
}

/// Text of a message's content in any of the formats (a string, or parts with `text`).
fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn read_conversation(wire: Wire, path: &str, body: &Value) -> Conversation {
    let mut c = Conversation {
        model: body["model"].as_str().unwrap_or_default().to_string(),
        stream: body["stream"].as_bool().unwrap_or(false),
        ..Default::default()
    };
    let mut user = Vec::new();
    match wire {
        Wire::AnthropicMessages => {
            c.system_text = content_text(&body["system"]);
            for m in body["messages"].as_array().into_iter().flatten() {
                if let Some(parts) = m["content"].as_array() {
                    c.tool_results += parts.iter().filter(|p| p["type"] == "tool_result").count();
                }
                if m["role"] == "user" {
                    user.push(content_text(&m["content"]));
                }
            }
            for t in body["tools"].as_array().into_iter().flatten() {
                if let Some(n) = t["name"].as_str() {
                    c.tools.push((n.to_string(), t["input_schema"].clone()));
                }
            }
        }
        Wire::OpenaiResponses => {
            c.system_text = body["instructions"].as_str().unwrap_or_default().to_string();
            match &body["input"] {
                Value::String(s) => user.push(s.clone()),
                Value::Array(items) => {
                    for it in items {
                        let ty = it["type"].as_str().unwrap_or("message");
                        if ty.ends_with("call_output") {
                            c.tool_results += 1;
                        } else if ty == "message" && it["role"] == "user" {
                            user.push(content_text(&it["content"]));
                        } else if ty == "message" && (it["role"] == "developer" || it["role"] == "system") {
                            c.system_text.push_str(&content_text(&it["content"]));
                        }
                    }
                }
                _ => {}
            }
            collect_function_tools(&body["tools"], &mut c.tools);
            c.json_schema =
                body["text"]["format"]["schema"].as_object().map(|_| body["text"]["format"]["schema"].clone());
        }
        Wire::OpenaiChat => {
            for m in body["messages"].as_array().into_iter().flatten() {
                match m["role"].as_str() {
                    Some("tool") => c.tool_results += 1,
                    Some("system") | Some("developer") => c.system_text.push_str(&content_text(&m["content"])),
                    Some("user") => user.push(content_text(&m["content"])),
                    _ => {}
                }
            }
            for t in body["tools"].as_array().into_iter().flatten() {
                if let Some(n) = t["function"]["name"].as_str() {
                    c.tools.push((n.to_string(), t["function"]["parameters"].clone()));
                }
            }
            let rf = &body["response_format"];
            if rf["type"] == "json_schema" {
                c.json_schema = Some(rf["json_schema"]["schema"].clone());
            }
        }
        Wire::Gemini => {
            c.stream = path.contains(":streamGenerateContent");
            c.model = path.split("/models/").nth(1).and_then(|m| m.split(':').next()).unwrap_or_default().to_string();
            c.system_text = content_text(&body["systemInstruction"]["parts"]);
            for m in body["contents"].as_array().into_iter().flatten() {
                let parts = m["parts"].as_array().cloned().unwrap_or_default();
                c.tool_results += parts.iter().filter(|p| p.get("functionResponse").is_some()).count();
                if m["role"] != "model" {
                    user.push(parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"));
                }
            }
            for t in body["tools"].as_array().into_iter().flatten() {
                for f in t["functionDeclarations"].as_array().into_iter().flatten() {
                    if let Some(n) = f["name"].as_str() {
                        let schema = if f["parametersJsonSchema"].is_object() {
                            f["parametersJsonSchema"].clone()
                        } else {
                            f["parameters"].clone()
                        };
                        c.tools.push((n.to_string(), schema));
                    }
                }
            }
            let g = &body["generationConfig"];
            if g["responseMimeType"] == "application/json" {
                let schema =
                    if g["responseJsonSchema"].is_object() { &g["responseJsonSchema"] } else { &g["responseSchema"] };
                c.json_schema = Some(schema.clone());
            }
        }
    }
    c.user_text = user.join("\n");
    c
}

/// Function tools of a Responses request, namespaces included.
fn collect_function_tools(tools: &Value, out: &mut Vec<(String, Value)>) {
    for t in tools.as_array().into_iter().flatten() {
        if t["type"] == "namespace" {
            collect_function_tools(&t["tools"], out);
        } else if let Some(n) = t["name"].as_str() {
            out.push((n.to_string(), t["parameters"].clone()));
        }
    }
}

/// The script's lines in the user's text: `standin: <verb> <rest>`.
fn directives(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("standin:"))
        .map(|rest| {
            let rest = rest.trim();
            let (verb, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            (verb.to_string(), tail.trim().to_string())
        })
        .collect()
}

/// The conflicted files of a conflict run's prompt (its `<conflict-files>` block), when it is one.
fn conflict_files(text: &str) -> Option<Vec<String>> {
    let start = text.find("<conflict-files>")? + "<conflict-files>".len();
    let end = start + text[start..].find("</conflict-files>")?;
    Some(text[start..end].lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect())
}

/// The shell tool names the CLIs use, best first.
const SHELL_TOOLS: &[&str] = &["Bash", "bash", "run_shell_command", "exec_command", "shell_command", "shell"];

fn decide(c: &Conversation) -> (Turn, bool) {
    if let Some(schema) = &c.json_schema {
        return (Turn::Json(fill_schema(schema)), true);
    }
    let script = directives(&c.user_text);
    // `standin: say <text>`: that answer, whatever the request (planners and judges behind the http backend).
    if let Some((_, text)) = script.iter().find(|(v, _)| v == "say") {
        return (Turn::Text(text.replace("\\n", "\n")), false);
    }
    let lower = c.system_text.to_ascii_lowercase();
    // aider's edits: no tools, the whole-file "file listing" format in the system prompt.
    let whole_files = c.tools.is_empty() && lower.contains("file listing");
    if c.tools.is_empty() && !whole_files && lower.contains("commit message") {
        // Named after the first file of the diff it is asked about, as the worker's own commits are.
        let file = c.user_text.lines().find_map(|l| l.strip_prefix("+++ b/")).unwrap_or("a change");
        return (Turn::Text(format!("standin: {}", file.trim())), true);
    }
    // A title, a summary, a classifier: anything without the script, or without tools outside aider's format.
    if script.is_empty() || (c.tools.is_empty() && !whole_files) {
        return (Turn::Text("Swarm task".into()), true);
    }
    if let Some((_, reason)) = script.iter().find(|(v, _)| v == "fail") {
        return (Turn::Text(format!("Status: failed: {reason}\n\nThe stand-in was told to fail.")), false);
    }
    // A conflict run (the runner's conflict prompt): resolve each conflicted file by keeping both sides — one shell
    // call a file, no commit (the runner takes the files) — then say so.
    if let Some(files) = conflict_files(&c.user_text) {
        if let Some((tool, schema)) =
            SHELL_TOOLS.iter().find_map(|want| c.tools.iter().find(|(n, _)| n == want)).cloned()
            && let Some(f) = files.get(c.tool_results)
        {
            let q = sh_quote(f);
            let cmd = format!("grep -v -E '^(<<<<<<<|=======|>>>>>>>)' {q} > {q}.resolved; mv {q}.resolved {q}");
            return (Turn::Tool { args: shell_args(&schema, &cmd), name: tool }, false);
        }
        return (Turn::Text(format!("Resolved {} by keeping both sides.", files.join(", "))), false);
    }
    let writes: Vec<(String, String)> = script
        .iter()
        .filter(|(v, _)| v == "write")
        .map(|(_, rest)| {
            let (p, t) = rest.split_once(' ').unwrap_or((rest.as_str(), ""));
            (p.to_string(), t.to_string())
        })
        .collect();
    let commit = !script.iter().any(|(v, _)| v == "no-commit");
    let paths: Vec<&str> = writes.iter().map(|(p, _)| p.as_str()).collect();
    let done = format!(
        "Status: done\n\nThe stand-in model wrote {}{}.",
        paths.join(", "),
        if commit { " and committed it" } else { "" }
    );
    // aider: no tools, files as whole-file listings in the answer; aider writes and commits them itself.
    if whole_files {
        let listings: String = writes.iter().map(|(p, t)| format!("{p}\n```\n{t}\n```\n\n")).collect();
        return (Turn::Text(format!("{listings}{done}")), false);
    }
    let Some((tool, schema)) = SHELL_TOOLS.iter().find_map(|want| c.tools.iter().find(|(n, _)| n == want)).cloned()
    else {
        return (Turn::Text(format!("Status: failed: the stand-in found no shell tool in {:?}", c.tools)), false);
    };
    let step = c.tool_results;
    let command = if step < writes.len() {
        // No `$(…)`: Gemini CLI refuses command substitution in a tool call.
        let (p, t) = &writes[step];
        let dir = std::path::Path::new(p).parent().map(|d| d.to_string_lossy().into_owned()).filter(|d| !d.is_empty());
        let mkdir = dir.map(|d| format!("mkdir -p {} && ", sh_quote(&d))).unwrap_or_default();
        Some(format!("{mkdir}printf '%s\\n' {t} >> {q}", q = sh_quote(p), t = sh_quote(t)))
    } else if step == writes.len() && commit {
        let first = paths.first().copied().unwrap_or("nothing");
        Some(format!("git add -A && git commit -q -m {}", sh_quote(&format!("standin: {first}"))))
    } else if script.iter().any(|(v, _)| v == "loop") {
        // A runaway agent: one more tool call, for ever.
        Some("echo still working".to_string())
    } else {
        None
    };
    match command {
        Some(cmd) => (Turn::Tool { args: shell_args(&schema, &cmd), name: tool }, false),
        None => (Turn::Text(done), false),
    }
}

/// The arguments of a shell tool call, shaped by the tool's schema.
fn shell_args(schema: &Value, cmd: &str) -> Value {
    let props = schema["properties"].as_object().cloned().unwrap_or_default();
    let key = ["command", "cmd"].into_iter().find(|k| props.contains_key(*k)).unwrap_or("command");
    let value =
        if props.get(key).is_some_and(|p| p["type"] == "array") { json!(["bash", "-lc", cmd]) } else { json!(cmd) };
    let mut args = serde_json::Map::new();
    args.insert(key.to_string(), value);
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    for r in required {
        if r != key && !args.contains_key(r) {
            args.insert(r.to_string(), json!("a step of the stand-in model"));
        }
    }
    Value::Object(args)
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// An object that follows `schema`: every required property with a plain value of its type.
fn fill_schema(schema: &Value) -> Value {
    let ty = schema["type"].as_str().unwrap_or("object").to_ascii_lowercase();
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match ty.as_str() {
        "object" => {
            let mut out = serde_json::Map::new();
            let props = schema["properties"].as_object().cloned().unwrap_or_default();
            let required: Vec<String> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            for (k, v) in &props {
                if required.is_empty() || required.contains(k) {
                    out.insert(k.clone(), fill_schema(v));
                }
            }
            Value::Object(out)
        }
        "integer" | "number" => json!(10),
        "boolean" => json!(false),
        "array" => json!([]),
        _ => json!("ok"),
    }
}

fn render(wire: Wire, c: &Conversation, turn: &Turn, (input, output): (u64, u64)) -> (&'static str, String) {
    let text_of = |t: &Turn| match t {
        Turn::Text(s) => s.clone(),
        Turn::Json(v) => v.to_string(),
        Turn::Tool { .. } => String::new(),
    };
    let call_id = format!("call_{:08x}", fastrand::u32(..));
    match wire {
        Wire::AnthropicMessages => {
            let usage = json!({"input_tokens": input, "output_tokens": output,
                               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
            let (block, stop) = match turn {
                Turn::Tool { name, args } => (
                    json!({"type": "tool_use", "id": format!("toolu_{call_id}"), "name": name, "input": args}),
                    "tool_use",
                ),
                other => (json!({"type": "text", "text": text_of(other)}), "end_turn"),
            };
            let id = format!("msg_{call_id}");
            if !c.stream {
                let msg = json!({"id": id, "type": "message", "role": "assistant", "model": c.model,
                                 "content": [block], "stop_reason": stop, "stop_sequence": null, "usage": usage});
                return ("application/json", msg.to_string());
            }
            let mut sse = String::new();
            let mut ev = |name: &str, data: Value| sse.push_str(&format!("event: {name}\ndata: {data}\n\n"));
            ev(
                "message_start",
                json!({"type": "message_start", "message": {"id": id, "type": "message",
                "role": "assistant", "model": c.model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
            );
            match turn {
                Turn::Tool { name, args } => {
                    ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "tool_use", "id": format!("toolu_{call_id}"), "name": name, "input": {}}}),
                    );
                    ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": args.to_string()}}),
                    );
                }
                other => {
                    ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}),
                    );
                    ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": text_of(other)}}),
                    );
                }
            }
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 0}));
            ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"input_tokens": input, "output_tokens": output, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}),
            );
            ev("message_stop", json!({"type": "message_stop"}));
            ("text/event-stream", sse)
        }
        Wire::OpenaiResponses => {
            let item = match turn {
                Turn::Tool { name, args } => json!({"type": "function_call", "id": format!("fc_{call_id}"),
                    "call_id": call_id, "name": name, "arguments": args.to_string(), "status": "completed"}),
                other => {
                    json!({"type": "message", "id": format!("msg_{call_id}"), "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text_of(other), "annotations": []}]})
                }
            };
            let usage = json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input + output});
            let id = format!("resp_{call_id}");
            let response = json!({"id": id, "object": "response", "status": "completed", "model": c.model,
                                  "output": [item.clone()], "usage": usage});
            if !c.stream {
                return ("application/json", response.to_string());
            }
            let mut sse = String::new();
            let mut ev = |name: &str, data: Value| sse.push_str(&format!("event: {name}\ndata: {data}\n\n"));
            ev(
                "response.created",
                json!({"type": "response.created", "response": {"id": id, "status": "in_progress"}}),
            );
            ev(
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            );
            ev(
                "response.output_item.done",
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            );
            ev("response.completed", json!({"type": "response.completed", "response": response}));
            ("text/event-stream", sse)
        }
        Wire::OpenaiChat => {
            let usage = json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output,
                               "prompt_tokens_details": {"cached_tokens": 0}});
            let (message, finish) = match turn {
                Turn::Tool { name, args } => (
                    json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}),
                    "tool_calls",
                ),
                other => (json!({"role": "assistant", "content": text_of(other)}), "stop"),
            };
            let id = format!("chatcmpl-{call_id}");
            if !c.stream {
                let body = json!({"id": id, "object": "chat.completion", "created": 0, "model": c.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage});
                return ("application/json", body.to_string());
            }
            let mut delta = message.clone();
            if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (i, call) in calls.iter_mut().enumerate() {
                    call["index"] = json!(i);
                }
            }
            let chunk = |delta: Value, finish: Value, usage: Value| {
                json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": c.model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": usage})
            };
            let sse = format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                chunk(delta, Value::Null, Value::Null),
                chunk(json!({}), json!(finish), usage)
            );
            ("text/event-stream", sse)
        }
        Wire::Gemini => {
            let part = match turn {
                Turn::Tool { name, args } => json!({"functionCall": {"name": name, "args": args}}),
                other => json!({"text": text_of(other)}),
            };
            let body = json!({
                "candidates": [{"content": {"parts": [part], "role": "model"}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": input, "candidatesTokenCount": output, "totalTokenCount": input + output},
                "modelVersion": c.model,
                "responseId": call_id,
            });
            if c.stream {
                ("text/event-stream", format!("data: {body}\n\n"))
            } else {
                ("application/json", body.to_string())
            }
        }
    }
}

/// The documented rules of each API that our clients could break. `Err((message, param))` in the vendor's words.
fn validate(wire: Wire, headers: &[(String, String)], body: &Value) -> Result<(), (String, Option<&'static str>)> {
    let header = |n: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v.as_str());
    let obj = body.as_object().ok_or(("the body must be a JSON object".to_string(), None))?;
    let model = obj.get("model").and_then(Value::as_str).unwrap_or_default();
    match wire {
        Wire::OpenaiChat => {
            const KNOWN: &[&str] = &[
                "model",
                "messages",
                "max_completion_tokens",
                "max_tokens",
                "temperature",
                "top_p",
                "n",
                "stream",
                "stream_options",
                "stop",
                "presence_penalty",
                "frequency_penalty",
                "logit_bias",
                "logprobs",
                "top_logprobs",
                "user",
                "response_format",
                "seed",
                "tools",
                "tool_choice",
                "parallel_tool_calls",
                "reasoning_effort",
                "metadata",
                "store",
                "modalities",
                "service_tier",
                "prediction",
                "audio",
                "verbosity",
                "web_search_options",
                "prompt_cache_key",
                "safety_identifier",
            ];
            if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
                return Err((format!("Unrecognized request argument supplied: {k}"), None));
            }
            if model.is_empty() {
                return Err(("you must provide a model parameter".into(), Some("model")));
            }
            let messages = obj.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty());
            let Some(messages) = messages else {
                return Err(("'messages' must contain at least one message".into(), Some("messages")));
            };
            for m in messages {
                let role = m["role"].as_str().unwrap_or_default();
                if !["system", "developer", "user", "assistant", "tool", "function"].contains(&role) {
                    return Err((
                        format!(
                            "Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
                        ),
                        Some("messages"),
                    ));
                }
            }
            // The reasoning models (the o-series and GPT-5) refuse `max_tokens` and any temperature but 1.
            let reasoning = ["o1", "o3", "o4", "gpt-5"].iter().any(|p| model.starts_with(p));
            if reasoning && obj.contains_key("max_tokens") {
                return Err((
                    "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.".into(),
                    Some("max_tokens"),
                ));
            }
            if reasoning
                && let Some(t) = obj.get("temperature").and_then(Value::as_f64)
                && t != 1.0
            {
                return Err((
                    format!(
                        "Unsupported value: 'temperature' does not support {t} with this model. Only the default (1) value is supported."
                    ),
                    Some("temperature"),
                ));
            }
            if obj.contains_key("max_tokens") && obj.contains_key("max_completion_tokens") {
                return Err(("max_tokens and max_completion_tokens cannot both be set".into(), Some("max_tokens")));
            }
            Ok(())
        }
        Wire::AnthropicMessages => {
            if header("anthropic-version").is_none() {
                return Err(("anthropic-version: header is required".into(), None));
            }
            const KNOWN: &[&str] = &[
                "model",
                "messages",
                "max_tokens",
                "system",
                "temperature",
                "top_p",
                "top_k",
                "stop_sequences",
                "stream",
                "metadata",
                "tools",
                "tool_choice",
                "thinking",
                "service_tier",
                "container",
                "mcp_servers",
                "context_management",
                "output_config",
            ];
            if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
                return Err((format!("{k}: Extra inputs are not permitted"), None));
            }
            if model.is_empty() {
                return Err(("model: Field required".into(), None));
            }
            if !obj.get("max_tokens").is_some_and(Value::is_u64) {
                return Err(("max_tokens: Field required".into(), None));
            }
            let messages = obj.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
            if messages.is_empty() {
                return Err(("messages: at least one message is required".into(), None));
            }
            if messages[0]["role"] != "user" {
                return Err(("messages: first message must use the \"user\" role".into(), None));
            }
            if messages.iter().any(|m| m["role"] != "user" && m["role"] != "assistant") {
                return Err((
                    "messages: roles must be \"user\" or \"assistant\"; put system text in `system`".into(),
                    None,
                ));
            }
            if let Some(t) = obj.get("temperature").and_then(Value::as_f64)
                && !(0.0..=1.0).contains(&t)
            {
                return Err(("temperature: Input should be less than or equal to 1".into(), None));
            }
            Ok(())
        }
        Wire::OpenaiResponses | Wire::Gemini => Ok(()),
    }
}
