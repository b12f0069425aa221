//! What an agent run reports it spent, read from the CLI's own machine-readable output (see `docs/spend.md`).
//!
//! Each preset asks its CLI for an output we can read: Claude Code's `stream-json` events, Codex's `exec --json`
//! events, Gemini CLI's `--output-format json` document, opencode's `--format json` events, aider's analytics log
//! (a file). A command agent may write `$GIT_SWARM_USAGE_FILE`. A [`Meter`] is fed the run's stdout line by line
//! (what it knows so far is the run's *live* usage, which budgets check while the agent runs) and told when the run
//! is over. Nothing is estimated: a run that reports nothing has no usage.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::usage::{Usage, Usd};

/// Where a run's usage is found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Report {
    /// Nowhere.
    #[default]
    Nothing,
    /// `$GIT_SWARM_USAGE_FILE`: one JSON object with the run's totals so far (`docs/spend.md`).
    UsageFile(PathBuf),
    /// Claude Code `--output-format stream-json`: `assistant` events as the run goes, the `result` event at the end.
    ClaudeStream,
    /// Codex `exec --json`: a `turn.completed` event with `usage` per turn.
    CodexEvents,
    /// Gemini CLI `--output-format json`: one document at the end, `stats.models.<model>.tokens`.
    GeminiJson,
    /// opencode `--format json`: a `step_finish` event with `tokens` and `cost` per step.
    OpencodeEvents,
    /// aider `--analytics-log <file>`: a `message_send` event per message (with `--no-stream`, the API's counts).
    AiderAnalytics(PathBuf),
}

impl Report {
    /// The model's final text, where the machine-readable output holds it apart from the progress (Claude Code's
    /// `result`, Gemini CLI's `response`), for planners and judges.
    pub(crate) fn answer(&self, stdout: &str) -> Option<String> {
        match self {
            Report::ClaudeStream => {
                let result = json_lines(stdout)
                    .filter(|v| v["type"] == "result")
                    .last()
                    .and_then(|v| v["result"].as_str().map(String::from));
                // No `result` (an error ended the run): the text of the assistant's messages, never the JSON.
                result.or_else(|| {
                    let texts: Vec<String> = json_lines(stdout)
                        .filter(|v| v["type"] == "assistant")
                        .flat_map(|v| {
                            v["message"]["content"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter(|b| b["type"] == "text")
                                .filter_map(|b| b["text"].as_str().map(String::from))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    Some(texts.join("\n"))
                })
            }
            Report::GeminiJson => last_document(stdout).and_then(|v| v["response"].as_str().map(String::from)),
            _ => None,
        }
    }
}

/// Largest line of stdout a meter reads (longer ones are progress with whole files in them).
pub(crate) const MAX_LINE: usize = 4 << 20;
/// Largest usage file or analytics log read.
const MAX_FILE: usize = 4 << 20;

/// The usage of one run, as it is reported.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meter {
    report: Report,
    /// Claude Code: the usage of each assistant message seen (by message id; a message comes in several events).
    messages: BTreeMap<String, Usage>,
    /// What the final report of the run said (Claude Code's `result`, a file read at the end).
    settled: Option<Usage>,
    /// Summed events (Codex turns, opencode steps).
    summed: Option<Usage>,
}

impl Meter {
    pub(crate) fn new(report: Report) -> Meter {
        Meter { report, ..Meter::default() }
    }

    /// One line of the run's stdout.
    pub(crate) fn line(&mut self, line: &str) {
        if !line.trim_start().starts_with('{') {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
        match &self.report {
            Report::ClaudeStream => match v["type"].as_str() {
                Some("assistant") => {
                    let m = &v["message"];
                    if let (Some(id), Some(u)) = (m["id"].as_str(), anthropic_usage(&m["usage"])) {
                        let e = self.messages.entry(id.to_string()).or_default();
                        // Later events of one message report at least as much.
                        *e = Usage {
                            input_tokens: e.input_tokens.max(u.input_tokens),
                            output_tokens: e.output_tokens.max(u.output_tokens),
                            cache_read_tokens: e.cache_read_tokens.max(u.cache_read_tokens),
                            cost_usd: None,
                            runs: 0,
                        };
                    }
                }
                Some("result") => self.settled = claude_result(&v),
                _ => {}
            },
            Report::CodexEvents if v["type"] == "turn.completed" => {
                let u = &v["usage"];
                let n = |k: &str| u[k].as_u64().unwrap_or(0);
                let cached = n("cached_input_tokens");
                self.add(Usage {
                    input_tokens: n("input_tokens").saturating_sub(cached),
                    output_tokens: n("output_tokens"),
                    cache_read_tokens: cached,
                    cost_usd: None,
                    runs: 0,
                });
            }
            Report::OpencodeEvents if v["type"] == "step_finish" => {
                let t = &v["part"]["tokens"];
                let n = |p: &str| t.pointer(p).and_then(Value::as_u64).unwrap_or(0);
                self.add(Usage {
                    input_tokens: n("/input").saturating_add(n("/cache/write")),
                    output_tokens: n("/output").saturating_add(n("/reasoning")),
                    cache_read_tokens: n("/cache/read"),
                    cost_usd: priced(&v["part"]["cost"]),
                    runs: 0,
                });
            }
            _ => {}
        }
    }

    fn add(&mut self, u: Usage) {
        self.summed = Some(self.summed.unwrap_or_default().plus(&u));
    }

    /// Read what files report (a usage file, aider's log): while the run goes, and once more at its end.
    pub(crate) fn poll(&mut self) {
        match &self.report {
            Report::UsageFile(p) => {
                if let Some(u) = super::files::read_text(p, 64 * 1024).and_then(|t| usage_file(&t)) {
                    self.settled = Some(u);
                }
            }
            Report::AiderAnalytics(p) => {
                if let Ok(text) = super::files::read_tail(p, MAX_FILE) {
                    let mut sum: Option<Usage> = None;
                    for v in json_lines(&text).filter(|v| v["event"] == "message_send") {
                        let p = &v["properties"];
                        let n = |k: &str| p[k].as_u64().unwrap_or(0);
                        let u = Usage {
                            input_tokens: n("prompt_tokens"),
                            output_tokens: n("completion_tokens"),
                            cost_usd: priced(&p["cost"]),
                            ..Usage::default()
                        };
                        sum = Some(sum.unwrap_or_default().plus(&u));
                    }
                    if sum.is_some() {
                        self.settled = sum;
                    }
                }
            }
            _ => {}
        }
    }

    /// The run is over; `stdout_tail` is the end of what it printed (for reports written once, at the end).
    pub(crate) fn finish(&mut self, stdout_tail: &str) -> Option<Usage> {
        self.poll();
        if self.report == Report::GeminiJson {
            self.settled = last_document(stdout_tail).and_then(|v| gemini_stats(&v["stats"]));
        }
        self.current()
    }

    /// The usage reported so far (one run), or `None` when nothing was.
    pub(crate) fn current(&self) -> Option<Usage> {
        let live = (!self.messages.is_empty()).then(|| Usage::sum(self.messages.values()));
        self.settled.or(self.summed).or(live).map(|u| Usage { runs: 1, ..u }).and_then(Usage::sane)
    }
}

/// Anthropic's `usage` object: cache writes are input, cache reads apart.
fn anthropic_usage(u: &Value) -> Option<Usage> {
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    u.is_object().then(|| Usage {
        input_tokens: n("input_tokens").saturating_add(n("cache_creation_input_tokens")),
        output_tokens: n("output_tokens"),
        cache_read_tokens: n("cache_read_input_tokens"),
        cost_usd: None,
        runs: 0,
    })
}

/// Claude Code's `result` event: `modelUsage` covers every model the run used (side requests included), `usage`
/// only the main one; `total_cost_usd` is Claude Code's own price of the run.
fn claude_result(v: &Value) -> Option<Usage> {
    let by_model = v["modelUsage"].as_object().filter(|m| !m.is_empty());
    let mut u = match by_model {
        Some(models) => {
            let mut sum = Usage::default();
            for m in models.values() {
                let n = |k: &str| m[k].as_u64().unwrap_or(0);
                sum = sum.plus(&Usage {
                    input_tokens: n("inputTokens").saturating_add(n("cacheCreationInputTokens")),
                    output_tokens: n("outputTokens"),
                    cache_read_tokens: n("cacheReadInputTokens"),
                    ..Usage::default()
                });
            }
            sum
        }
        None => anthropic_usage(&v["usage"])?,
    };
    u.cost_usd = v["total_cost_usd"].as_f64().and_then(Usd::from_dollars);
    Some(u)
}

/// Gemini CLI's `stats`: every model's tokens (`prompt` holds the cached ones; `thoughts` are output).
fn gemini_stats(stats: &Value) -> Option<Usage> {
    let models = stats["models"].as_object()?;
    let mut sum = Usage::default();
    for m in models.values() {
        let t = &m["tokens"];
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        let cached = n("cached");
        let input = t["input"].as_u64().unwrap_or_else(|| n("prompt").saturating_sub(cached));
        sum = sum.plus(&Usage {
            input_tokens: input,
            output_tokens: n("candidates").saturating_add(n("thoughts")),
            cache_read_tokens: cached,
            ..Usage::default()
        });
    }
    Some(sum)
}

/// A cost a CLI reported; `0` is what aider and opencode report for a model whose price they do not know, so it is
/// no cost at all.
fn priced(v: &Value) -> Option<Usd> {
    v.as_f64().filter(|c| *c > 0.0).and_then(Usd::from_dollars)
}

/// `$GIT_SWARM_USAGE_FILE`: `{"input_tokens": n, "output_tokens": n, "cache_read_tokens": n, "cost_usd": x}`, every
/// key optional; anything else in it is ignored, a wrong type makes the whole file unread.
fn usage_file(text: &str) -> Option<Usage> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        input_tokens: u64,
        #[serde(default)]
        output_tokens: u64,
        #[serde(default)]
        cache_read_tokens: u64,
        #[serde(default)]
        cost_usd: Option<Usd>,
    }
    let f: File = serde_json::from_str(text.trim()).ok()?;
    Some(Usage {
        input_tokens: f.input_tokens,
        output_tokens: f.output_tokens,
        cache_read_tokens: f.cache_read_tokens,
        cost_usd: f.cost_usd,
        runs: 1,
    })
}

fn json_lines(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.lines().filter(|l| l.trim_start().starts_with('{')).filter_map(|l| serde_json::from_str(l.trim()).ok())
}

/// The last JSON document of `text` that starts at the beginning of a line (Gemini CLI prints it pretty, after
/// whatever else it printed).
fn last_document(text: &str) -> Option<Value> {
    let starts = std::iter::once(0).chain(text.match_indices("\n{").map(|(i, _)| i + 1));
    let starts: Vec<usize> = starts.filter(|&i| text[i..].starts_with('{')).collect();
    starts.into_iter().rev().find_map(|i| {
        let mut de = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        de.next().and_then(Result::ok).filter(Value::is_object)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(report: Report, out: &str) -> Option<Usage> {
        let mut m = Meter::new(report);
        for l in out.lines() {
            m.line(l);
        }
        m.finish(out)
    }

    fn tokens(u: Option<Usage>) -> Option<(u64, u64, u64, Option<u64>)> {
        u.map(|u| (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cost_usd.map(|c| c.0)))
    }

    // The outputs below are what the pinned CLIs printed against the stand-in model API (cut to the fields read).
    #[test]
    fn claude_code_reports_every_model_and_its_price_at_the_end_and_messages_as_it_goes() {
        let a = |id: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"{id}","usage":{{"input_tokens":1000,"cache_creation_input_tokens":5,"cache_read_input_tokens":7,"output_tokens":1}}}}}}"#
            )
        };
        let live = [a("m1"), a("m1"), a("m2")].join("\n");
        assert_eq!(tokens(feed(Report::ClaudeStream, &live)), Some((2010, 2, 14, None)), "live: by message");
        let result = r#"{"type":"result","subtype":"success","total_cost_usd":0.018000000000000002,"result":"Status: done","usage":{"input_tokens":3000,"output_tokens":300},"modelUsage":{"claude-opus":{"inputTokens":3000,"outputTokens":300,"cacheReadInputTokens":0,"cacheCreationInputTokens":0},"claude-haiku":{"inputTokens":10,"outputTokens":5,"cacheReadInputTokens":2,"cacheCreationInputTokens":1}}}"#;
        let out = format!("{live}\n{result}\n");
        assert_eq!(tokens(feed(Report::ClaudeStream, &out)), Some((3011, 305, 2, Some(18_000))));
        assert_eq!(Report::ClaudeStream.answer(&out).as_deref(), Some("Status: done"));
    }

    #[test]
    fn codex_and_opencode_sum_their_turns_and_steps() {
        let codex = "{\"type\":\"turn.started\"}\n{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":3000,\"cached_input_tokens\":1000,\"output_tokens\":300}}\n";
        assert_eq!(tokens(feed(Report::CodexEvents, codex)), Some((2000, 300, 1000, None)));
        let step = r#"{"type":"step_finish","part":{"type":"step-finish","tokens":{"total":1100,"input":1000,"output":90,"reasoning":10,"cache":{"write":3,"read":4}},"cost":0.0045}}"#;
        let zero = r#"{"type":"step_finish","part":{"tokens":{"input":1,"output":1},"cost":0}}"#;
        let out = format!("{step}\n{{\"type\":\"text\"}}\n{step}\n{zero}\n");
        assert_eq!(tokens(feed(Report::OpencodeEvents, &out)), Some((2007, 201, 8, Some(9_000))));
    }

    #[test]
    fn gemini_reports_one_pretty_document_at_the_end() {
        let out = "Loaded cached credentials.\n{\n  \"response\": \"verdict: stop\",\n  \"stats\": {\"models\": {\n    \"flash-lite\": {\"tokens\": {\"input\": 10, \"prompt\": 10, \"candidates\": 5, \"cached\": 0, \"thoughts\": 0}},\n    \"flash\": {\"tokens\": {\"prompt\": 3000, \"candidates\": 300, \"cached\": 1000, \"thoughts\": 7}}\n  }}\n}\n";
        assert_eq!(tokens(feed(Report::GeminiJson, out)), Some((2010, 312, 1000, None)));
        assert_eq!(Report::GeminiJson.answer(out).as_deref(), Some("verdict: stop"));
        assert_eq!(feed(Report::GeminiJson, "Error: quota\n"), None);
    }

    #[test]
    fn files_report_what_aider_and_command_agents_wrote_and_bad_files_report_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("aider.jsonl");
        let ev = r#"{"event":"message_send","properties":{"prompt_tokens":1000,"completion_tokens":100,"cost":0}}"#;
        std::fs::write(&log, format!("{{\"event\":\"launched\"}}\n{ev}\n{ev}\n")).expect("write");
        assert_eq!(tokens(feed(Report::AiderAnalytics(log), "")), Some((2000, 200, 0, None)));
        let file = dir.path().join("usage.json");
        assert_eq!(feed(Report::UsageFile(file.clone()), ""), None, "no file, no usage");
        std::fs::write(&file, r#"{"input_tokens": 5, "cost_usd": 0.5, "model": "x"}"#).expect("write");
        assert_eq!(tokens(feed(Report::UsageFile(file.clone()), "")), Some((5, 0, 0, Some(500_000))));
        std::fs::write(&file, r#"{"input_tokens": -5}"#).expect("write");
        assert_eq!(feed(Report::UsageFile(file), ""), None);
    }
}
