//! The runner's settings: the `[run]` and `[roles.*]` tables of `swarm.toml` (see `docs/agents.md`).

use std::time::Duration;

use crate::agent::Backend;
use crate::agent::http::{Api, HttpAgent};
use crate::config::{RoleTable, RunTable};
use crate::escape::squash;
use crate::model::Config;
use crate::time::DurationText;

/// A role of the swarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Worker,
    Planner,
    Judge,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Planner => "planner",
            Role::Judge => "judge",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[run]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// Run in the work tree after the rebase, before landing; non-zero fails the task.
    pub check: Option<String>,
    /// Refuse a landing only for what it makes worse than the target ([`crate::check::compare`]): the check runs on
    /// the target too when it fails on the change (`docs/check.md`).
    pub check_baseline: bool,
    /// Where the check writes its JUnit XML report, relative to the work tree (a file, or a folder of `*.xml`):
    /// per-test results for the baseline.
    pub check_report: Option<String>,
    /// `[run] sandbox`: whether agent runs are contained (`agent::sandbox`).
    pub sandbox: crate::agent::sandbox::Mode,
    /// `[run] network = "off"`: agents get no network (in a sandbox).
    pub network: bool,
    /// `[run] sandbox_read`, `sandbox_write`: more paths agents may read, and write (`~/` is the runner's home).
    pub sandbox_read: Vec<String>,
    pub sandbox_write: Vec<String>,
    pub task_timeout: Duration,
    /// A time limit for planner and judge runs.
    pub plan_timeout: Duration,
    pub conflict_tries: u32,
    pub plan_depth: u32,
    pub plan_rounds: u32,
    /// What a worker that exits 0 without changing anything means: `fail` (the default) or `done`.
    pub empty_is_done: bool,
    pub cycle_max_tasks: Option<u64>,
    pub cycle_max_time: Option<Duration>,
    /// The fleet's push budget, pushes a minute to the remote (see `txn::Pacer`); `None`: as fast as it goes.
    pub pushes_per_minute: Option<f64>,
    /// How long the first landing (or claim) of a batch waits for others of the same runner process to join it
    /// (`run worker --agents <n>`; `docs/scale.md`).
    pub batch_window: Duration,
    /// Put the agent hooks (Claude Code, Cursor settings) into a worker's work tree (`docs/hooks.md`).
    pub agent_hooks: bool,
    /// `[run.budget]` `task_tokens`, `task_usd`: what one task may spend over all its attempts (`docs/spend.md`).
    pub task_budget: crate::usage::Limit,
    /// `[run.budget]` `cycle_tokens`, `cycle_usd`: what the running cycle may spend, every role together.
    pub cycle_budget: crate::usage::Limit,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            check: None,
            check_baseline: false,
            check_report: None,
            sandbox: crate::agent::sandbox::Mode::Auto,
            network: true,
            sandbox_read: vec![],
            sandbox_write: vec![],
            task_timeout: Duration::from_secs(30 * 60),
            plan_timeout: Duration::from_secs(20 * 60),
            conflict_tries: 2,
            plan_depth: 2,
            plan_rounds: 5,
            empty_is_done: false,
            cycle_max_tasks: None,
            cycle_max_time: None,
            pushes_per_minute: None,
            batch_window: Duration::from_millis(250),
            agent_hooks: true,
            task_budget: crate::usage::Limit::default(),
            cycle_budget: crate::usage::Limit::default(),
        }
    }
}

/// A budget's dollars: a positive amount.
fn usd(field: &str, v: Option<f64>) -> Result<Option<crate::usage::Usd>, String> {
    match v {
        None => Ok(None),
        Some(d) if d > 0.0 => crate::usage::Usd::from_dollars(d)
            .map(Some)
            .ok_or_else(|| format!("[run.budget] {field} = {d}: give an amount of dollars")),
        Some(d) => Err(format!("[run.budget] {field} = {d}: give an amount above 0 (or leave it out)")),
    }
}

/// A budget's tokens: at least one.
fn tokens(field: &str, v: Option<u64>) -> Result<Option<u64>, String> {
    match v {
        Some(0) => Err(format!("[run.budget] {field} = 0: give at least 1 (or leave it out)")),
        t => Ok(t),
    }
}

fn dur(field: &str, v: Option<DurationText>, default: Duration) -> Result<Duration, String> {
    match v {
        None => Ok(default),
        Some(s) => crate::time::parse_duration(&s.0).map_err(|e| format!("{field}: {e}")),
    }
}

/// `[run] sandbox_read`/`sandbox_write`: absolute paths or `~/…` (the runner's home).
fn sandbox_paths(field: &str, v: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let v = v.unwrap_or_default();
    if let Some(bad) =
        v.iter().find(|p| !(p.starts_with('/') || p.starts_with("~/")) || p.split('/').any(|c| c == ".."))
    {
        return Err(format!(
            "[run] {field}: '{}' is not an absolute path or one under ~/ (without ..)",
            crate::escape::line(bad)
        ));
    }
    Ok(v)
}

/// A list of a role's table that adds up over `[roles.<role>]` and `[roles.default]`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RoleList {
    /// `env`: the runner's variables the agent gets.
    Env,
    /// `home_files`: the files of the runner's home copied into a sandboxed agent's fresh home.
    HomeFiles,
}

/// The list of `[roles.<role>]` and of `[roles.default]`, both (a table that does not read gives nothing: the
/// settings' check refuses it before any runner starts).
pub(crate) fn role_list(config: &Config, role: Role, list: RoleList) -> Vec<String> {
    let Some(toml::Value::Table(roles)) = config.extra.get("roles") else { return vec![] };
    let mut out = Vec::new();
    for name in [role.as_str(), "default"] {
        let Some(t) = roles.get(name).and_then(|v| v.clone().try_into::<RoleTable>().ok()) else { continue };
        out.extend(
            match list {
                RoleList::Env => t.env,
                RoleList::HomeFiles => t.home_files,
            }
            .unwrap_or_default(),
        );
    }
    out
}

/// `[run] check_report`: a path inside the work tree (relative, no `..`), where the check writes its report.
fn report_path(p: &str) -> Result<String, String> {
    let bad = |why: &str| format!("[run] check_report = '{}': {why}", crate::escape::line(p));
    let path = std::path::Path::new(p.trim());
    if p.trim().is_empty() {
        return Err(bad("give the path of the check's JUnit XML report, e.g. \"junit.xml\""));
    }
    if !path.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir)) {
        return Err(bad("give a path inside the work tree, relative to its top (no leading /, no ..)"));
    }
    Ok(p.trim().to_string())
}

/// `[run] batch_window`: milliseconds count, zero turns it off, at most a minute.
fn window(s: &str) -> Result<Duration, String> {
    let bad = |why: String| format!("[run] batch_window = '{}': {why}", crate::escape::line(s));
    let w = humantime::parse_duration(s).map_err(|e| bad(format!("not a duration like 250ms or 2s ({e})")))?;
    if w > Duration::from_secs(60) {
        return Err(bad("give at most 1m (a landing waits that long for others to join it)".into()));
    }
    Ok(w)
}

impl RunSettings {
    /// Read `[run]` from the swarm's settings.
    pub fn from_config(config: &Config) -> Result<RunSettings, String> {
        let raw: RunTable = match config.extra.get("run") {
            None => RunTable::default(),
            Some(v) => v.clone().try_into().map_err(|e: toml::de::Error| format!("[run]: {}", squash(&e)))?,
        };
        let d = RunSettings::default();
        let cycle = raw.cycle.unwrap_or_default();
        let budget = raw.budget.unwrap_or_default();
        let task_budget = crate::usage::Limit {
            tokens: tokens("task_tokens", budget.task_tokens)?,
            usd: usd("task_usd", budget.task_usd)?,
        };
        let cycle_budget = crate::usage::Limit {
            tokens: tokens("cycle_tokens", budget.cycle_tokens)?,
            usd: usd("cycle_usd", budget.cycle_usd)?,
        };
        let empty_is_done = match raw.empty.as_deref() {
            None | Some("fail") => false,
            Some("done") => true,
            Some(other) => return Err(format!("[run] empty = '{other}': use \"fail\" or \"done\"")),
        };
        Ok(RunSettings {
            check: raw.check.filter(|c| !c.trim().is_empty()),
            check_baseline: raw.check_baseline.unwrap_or(d.check_baseline),
            check_report: match raw.check_report {
                None => None,
                Some(p) => Some(report_path(&p)?),
            },
            sandbox: match raw.sandbox.as_deref() {
                None => d.sandbox,
                Some(m) => crate::agent::sandbox::Mode::parse(m)?,
            },
            network: match raw.network.as_deref() {
                None | Some("on") => true,
                Some("off") => false,
                Some(other) => {
                    return Err(format!(
                        "[run] network = '{}': use \"on\" (the default) or \"off\"",
                        crate::escape::line(other)
                    ));
                }
            },
            sandbox_read: sandbox_paths("sandbox_read", raw.sandbox_read)?,
            sandbox_write: sandbox_paths("sandbox_write", raw.sandbox_write)?,
            task_timeout: dur("[run] task_timeout", raw.task_timeout, d.task_timeout)?,
            plan_timeout: dur("[run] plan_timeout", raw.plan_timeout, d.plan_timeout)?,
            conflict_tries: raw.conflict_tries.unwrap_or(d.conflict_tries),
            plan_depth: raw.plan_depth.unwrap_or(d.plan_depth),
            plan_rounds: raw.plan_rounds.unwrap_or(d.plan_rounds).max(1),
            empty_is_done,
            cycle_max_tasks: cycle.max_tasks,
            cycle_max_time: cycle.max_time.map(|t| dur("[run.cycle] max_time", Some(t), Duration::ZERO)).transpose()?,
            pushes_per_minute: match raw.pushes_per_minute {
                Some(p) if !(p.is_finite() && p >= 0.01) => {
                    return Err(format!(
                        "[run] pushes_per_minute = {p}: give a number of at least 0.01 (or leave it out)"
                    ));
                }
                p => p,
            },
            batch_window: match raw.batch_window {
                None => d.batch_window,
                Some(w) => window(&w.0)?,
            },
            agent_hooks: raw.agent_hooks.unwrap_or(d.agent_hooks),
            task_budget,
            cycle_budget,
        })
    }
}

/// The backend configured for `role` (`[roles.<role>]`, else `[roles.default]`), or `None` when nothing is set.
pub fn backend_for(config: &Config, role: Role) -> Result<Option<Backend>, String> {
    let roles = match config.extra.get("roles") {
        None => return Ok(None),
        Some(toml::Value::Table(t)) => t,
        Some(_) => return Err("[roles] must be a table".into()),
    };
    // The role's own table, else `[roles.default]` — one that chooses an agent: a table of only `env` or
    // `home_files` (a clone's `git config swarm.roles.default.env`, say) chooses none.
    let chooses = |v: &toml::Value| ["exec", "preset", "backend", "api"].iter().any(|k| v.get(k).is_some());
    let Some((name, raw)) =
        [role.as_str(), "default"].iter().find_map(|n| roles.get(*n).filter(|v| chooses(v)).map(|v| (*n, v)))
    else {
        return Ok(None);
    };
    let raw: RoleTable =
        raw.clone().try_into().map_err(|e: toml::de::Error| format!("[roles.{name}]: {}", squash(&e)))?;
    let backend = raw.backend.as_deref().unwrap_or(if raw.api.is_some() { "http" } else { "command" });
    match backend {
        "command" => match (&raw.exec, &raw.preset) {
            (Some(e), _) if !e.trim().is_empty() => Ok(Some(Backend::Command { exec: e.clone() })),
            (_, Some(p)) => crate::agent::preset::find(p).map(|p| Some(Backend::Preset(p))).ok_or_else(|| {
                format!("[roles.{name}] preset '{p}' is unknown (one of {})", crate::agent::preset::names())
            }),
            _ => Err(format!("[roles.{name}] needs `exec` (a command) or `preset`")),
        },
        "http" => {
            if role == Role::Worker {
                return Err(format!(
                    "[roles.{name}] backend \"http\" cannot be a worker: workers edit files; use a command agent"
                ));
            }
            let api = raw.api.ok_or_else(|| format!("[roles.{name}] needs api = \"openai\" or \"anthropic\""))?;
            let base_url = raw.base_url.unwrap_or_else(|| match api {
                Api::Openai => "https://api.openai.com/v1".into(),
                Api::Anthropic => "https://api.anthropic.com".into(),
            });
            let model = raw.model.ok_or_else(|| format!("[roles.{name}] needs model"))?;
            Ok(Some(Backend::Http(HttpAgent {
                api,
                base_url,
                model,
                api_key_env: raw.api_key_env,
                max_tokens: raw.max_tokens.unwrap_or(8000),
                temperature: raw.temperature,
            })))
        }
        other => Err(format!("[roles.{name}] backend '{other}' is unknown (command or http)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        toml::from_str(text).unwrap_or_default()
    }

    #[test]
    fn roles_fall_back_to_default_and_presets_expand() {
        let c = cfg("[roles.default]\npreset = \"claude\"\n[roles.planner]\napi = \"openai\"\nmodel = \"m\"\n");
        assert!(matches!(backend_for(&c, Role::Worker), Ok(Some(Backend::Preset(p))) if p.name == "claude"));
        assert!(matches!(backend_for(&c, Role::Planner), Ok(Some(Backend::Http(h))) if h.model == "m"));
        assert!(backend_for(&cfg(""), Role::Judge).expect("none").is_none());
    }

    #[test]
    fn bad_roles_and_run_settings_name_the_culprit() {
        for (text, want) in [
            ("[roles.worker]\nbackend = \"http\"\napi = \"openai\"\nmodel = \"m\"\n", "cannot be a worker"),
            ("[roles.worker]\npreset = \"nope\"\n", "preset 'nope'"),
            ("[roles.worker]\nexec = \"x\"\ncolour = 1\n", "[roles.worker]"),
            ("[roles.judge]\nbackend = \"carrier-pigeon\"\n", "carrier-pigeon"),
        ] {
            let role = if text.contains("judge") { Role::Judge } else { Role::Worker };
            let e = backend_for(&cfg(text), role).expect_err(text);
            assert!(e.contains(want), "{text}: {e}");
        }
        for (text, want) in [
            ("[run]\ntask_timeout = \"soon\"\n", "task_timeout"),
            ("[run]\nempty = \"maybe\"\n", "empty"),
            ("[run]\nchek = \"x\"\n", "chek"),
        ] {
            let e = RunSettings::from_config(&cfg(text)).expect_err(text);
            assert!(e.contains(want), "{text}: {e}");
        }
        let s = RunSettings::from_config(&cfg("[run]\ncheck = \"make\"\n[run.cycle]\nmax_tasks = 5\n")).expect("ok");
        assert_eq!((s.check.as_deref(), s.cycle_max_tasks), (Some("make"), Some(5)));
    }
}
