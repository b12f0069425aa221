//! The runner's settings: the `[run]` and `[roles.*]` tables of `swarm.toml` (see `docs/agents.md`) read and
//! checked. `[run]` and the tables under it are declared in `schema` (each key once); the checks of their values
//! are here, and [`backend_for`] reads a role's agent.

use super::schema::RunSettings;
use super::{RoleTable, RunTable};
use crate::agent::Backend;
use crate::agent::http::{Api, HttpAgent};
use crate::escape::squash;
use crate::model::Config;

/// A role of the swarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Role {
    Worker,
    Planner,
    Judge,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
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

impl RunSettings {
    /// Read `[run]` (and the tables under it) from the swarm's settings.
    pub(crate) fn from_config(config: &Config) -> Result<RunSettings, String> {
        let raw: RunTable = match config.extra.get("run") {
            None => RunTable::default(),
            Some(v) => v.clone().try_into().map_err(|e: toml::de::Error| format!("[run]: {}", squash(&e)))?,
        };
        RunSettings::resolve(raw)
    }
}

/// The backend configured for `role` (`[roles.<role>]`, else `[roles.default]`), or `None` when nothing is set.
pub(crate) fn backend_for(config: &Config, role: Role) -> Result<Option<Backend>, String> {
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
        assert_eq!((s.check.as_deref(), s.cycle.max_tasks), (Some("make"), Some(5)));
    }
}
