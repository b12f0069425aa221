//! Settings of one clone from `git config swarm.*`, over the shared `swarm.toml` of the state ref.
//!
//! Precedence, first that sets a value wins (see `docs/configuration.md`): a command-line flag, an environment
//! variable, `git config swarm.*` (in git's own order: `git -c`, the worktree's config, the repository's, the
//! global and the system one — gix resolves that), `swarm.toml` on the state ref, the built-in default.
//!
//! `swarm.toml`'s tables map to git config subsections: `[run] task_timeout` is `swarm.run.taskTimeout`,
//! `[roles.worker] preset` is `swarm.roles.worker.preset`. git config names are case-insensitive and cannot hold
//! `_`, so `taskTimeout`, `tasktimeout` and `task-timeout` all name `task_timeout`. Unknown keys are errors that
//! name the key (a typo silently ignored is a setting silently lost).

use crate::model::Config;

/// Every `git config` key this tool reads, with what it sets (for the manual page; `docs/configuration.md` is checked
/// against it). The keys of `[run]` and the tables under it are named from their declaration (`schema`).
pub(crate) fn keys() -> Vec<(&'static str, String)> {
    let names = |schema: &[(&str, Kind)]| schema.iter().map(|(k, _)| camel(k)).collect::<Vec<_>>().join(", ");
    vec![
        ("swarm.remote", "the shared remote holding the swarm (as --remote).".into()),
        ("swarm.name", "which swarm: refs/swarm/<name> (as --swarm).".into()),
        ("swarm.agent", "this clone's agent id (as --agent; $GIT_SWARM_AGENT wins over it).".into()),
        (
            "swarm.transport",
            "auto, git or git-fetch: in-process for a local path (auto), git's transport for every remote (git), git fetch subprocesses too (git-fetch); $GIT_SWARM_TRANSPORT wins over it.".into(),
        ),
        (
            "swarm.trusted",
            "digests of shared settings this clone's runners may run (one entry each; `git swarm trust` adds them).".into(),
        ),
        (
            "swarm.run.<key>",
            format!("a [run] setting of swarm.toml for this clone's runners: {}.", names(RunTable::KEYS)),
        ),
        ("swarm.run.cycle.<key>", format!("a [run.cycle] setting: {}.", names(RunCycle::KEYS))),
        ("swarm.run.budget.<key>", format!("a [run.budget] setting: {}.", names(RunBudget::KEYS))),
        (
            "swarm.roles.<role>.<key>",
            "the agent of a role (default, worker, planner, judge) for this clone's runners: preset, exec, backend, api, baseUrl, model, apiKeyEnv, maxTokens, temperature, env, homeFiles. Setting exec or preset replaces both of them from swarm.toml; a list (env, homeFiles) is one value, its items separated by commas.".into(),
        ),
    ]
}

/// The type a setting has in `swarm.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Int,
    Float,
    Bool,
    /// A list of text: in git config one value, its items separated by commas.
    List,
}

mod checks;
mod schema;
mod settings;

pub(crate) use checks::{CheckPolicy, Empty};
pub(crate) use schema::ForgeSettings;
pub(crate) use schema::RunSettings;
pub(crate) use schema::{
    Budget as RunBudget, Cycle as RunCycle, Forge as ForgeTable, Role as RoleTable, Run as RunTable,
};
pub(crate) use settings::{Role, backend_for};
pub(crate) use settings::{RoleList, role_list};
const ROLES: &[&str] = &["default", "worker", "planner", "judge"];
/// The keys of a role that choose its agent: one of them set locally replaces the shared role table.
const AGENT_CHOICE: &[&str] = &["exec", "preset", "backend", "api"];
/// Keys without a subsection that `Ctx` reads itself.
const PLAIN: &[&str] = &["remote", "name", "agent", "transport", "trusted"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ConfigError {
    #[error("git config {key}: {why}")]
    Bad { key: String, why: String },
}

fn bad(key: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::Bad { key: key.to_string(), why: why.into() }
}

/// The settings of `swarm.toml` that this clone's git config overrides, as a table shaped like `swarm.toml`'s.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Local {
    pub table: toml::Table,
}

/// `taskTimeout`, `task-timeout`, `tasktimeout` → the `swarm.toml` key of `schema` they name.
fn canonical(name: &str, schema: &[(&'static str, Kind)]) -> Option<(&'static str, Kind)> {
    let folded: String = name.chars().filter(|c| *c != '-' && *c != '_').flat_map(char::to_lowercase).collect();
    schema.iter().copied().find(|(k, _)| k.replace('_', "") == folded)
}

fn typed(key: &str, value: &str, kind: Kind) -> Result<toml::Value, ConfigError> {
    match kind {
        Kind::Text => Ok(toml::Value::String(value.to_string())),
        Kind::List => Ok(toml::Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| toml::Value::String(v.to_string()))
                .collect(),
        )),
        Kind::Int => value
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(toml::Value::Integer)
            .ok_or_else(|| bad(key, format!("'{value}' is not a whole number"))),
        Kind::Float => value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(toml::Value::Float)
            .ok_or_else(|| bad(key, format!("'{value}' is not a number"))),
        // As git reads booleans.
        Kind::Bool => match value.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" | "" => Ok(toml::Value::Boolean(true)),
            "false" | "no" | "off" | "0" => Ok(toml::Value::Boolean(false)),
            _ => Err(bad(key, format!("'{value}' is not true or false"))),
        },
    }
}

impl Local {
    /// Read every `swarm.*` entry of `config` (the repository's resolved configuration). Later entries win, as in
    /// git. An unknown key or a value of the wrong type is an error naming the key.
    pub(crate) fn from_git(config: &gix::config::File) -> Result<Local, ConfigError> {
        let mut local = Local::default();
        let Some(sections) = config.sections_by_name("swarm") else { return Ok(local) };
        for section in sections {
            let sub = section.header().subsection_name().map(|s| s.to_string());
            let body = section.body();
            for name in body.value_names() {
                // `value_names` lists a repeated name once per entry; the last value wins either way.
                let Some(value) = body.value(&name) else { continue };
                let value = value.to_string();
                local.set(sub.as_deref(), &name, &value)?;
            }
        }
        Ok(local)
    }

    fn set(&mut self, sub: Option<&str>, name: &str, value: &str) -> Result<(), ConfigError> {
        let full = match sub {
            Some(s) => format!("swarm.{s}.{name}"),
            None => format!("swarm.{name}"),
        };
        let (path, schema): (Vec<&str>, &[(&'static str, Kind)]) = match sub {
            None if PLAIN.iter().any(|p| p.eq_ignore_ascii_case(name)) => return Ok(()),
            None => return Err(bad(&full, unknown_plain())),
            Some("run") => (vec!["run"], RunTable::KEYS),
            Some("run.cycle") => (vec!["run", "cycle"], RunCycle::KEYS),
            Some("run.budget") => (vec!["run", "budget"], RunBudget::KEYS),
            Some(s) => match s.strip_prefix("roles.") {
                Some(role) if ROLES.contains(&role) => (vec!["roles", role], RoleTable::KEYS),
                Some(role) => {
                    return Err(bad(&full, format!("'{role}' is not a role (one of {})", ROLES.join(", "))));
                }
                None => return Err(bad(&full, format!("unknown subsection '{s}' ({})", known_subsections()))),
            },
        };
        let Some((key, kind)) = canonical(name, schema) else {
            let known: Vec<String> = schema.iter().map(|(k, _)| camel(k)).collect();
            return Err(bad(&full, format!("unknown key '{name}' (one of {})", known.join(", "))));
        };
        let v = typed(&full, value, kind)?;
        let mut table = &mut self.table;
        for p in path {
            let entry = table.entry(p.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
            // Only this function fills the table, always with tables on the path: a non-table cannot be met.
            let toml::Value::Table(t) = entry else { return Err(bad(&full, "internal: not a table")) };
            table = t;
        }
        table.insert(key.to_string(), v);
        Ok(())
    }

    /// `config` with this clone's settings over it. Within a role, setting `exec`, `preset`, `backend` or `api`
    /// replaces the role's table of `swarm.toml` (a clone that picks its agent picks it whole); every other key
    /// overrides key by key.
    pub(crate) fn apply(&self, config: &Config) -> Config {
        let mut out = config.clone();
        for (section, value) in &self.table {
            let toml::Value::Table(mine) = value else { continue };
            let theirs = out.extra.entry(section.clone()).or_insert_with(|| toml::Value::Table(Default::default()));
            if !theirs.is_table() {
                *theirs = toml::Value::Table(Default::default());
            }
            if let toml::Value::Table(theirs) = theirs {
                merge(theirs, mine, section == "roles");
            }
        }
        out
    }
}

impl Local {
    /// Does this clone choose the agent of the `[roles.<table>]` table itself (an `exec`, `preset`, `backend` or
    /// `api` of its own, which replaces the whole shared table), so that nothing of the shared choice is used?
    pub(crate) fn chooses_agent(&self, table: &str) -> bool {
        self.table
            .get("roles")
            .and_then(|r| r.get(table))
            .and_then(|t| t.as_table())
            .is_some_and(|t| AGENT_CHOICE.iter().any(|k| t.contains_key(*k)))
    }
}

fn merge(theirs: &mut toml::Table, mine: &toml::Table, roles: bool) {
    for (k, v) in mine {
        match (theirs.get_mut(k), v) {
            (Some(toml::Value::Table(t)), toml::Value::Table(m)) => {
                if roles && AGENT_CHOICE.iter().any(|k| m.contains_key(*k)) {
                    // A clone that picks its agent picks it whole: nothing of the shared choice (an http
                    // backend's api and model, a command's exec) may outlive it.
                    t.clear();
                }
                merge(t, m, false);
            }
            _ => {
                theirs.insert(k.clone(), v.clone());
            }
        }
    }
}

fn camel(k: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in k.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn unknown_plain() -> String {
    format!("unknown key (known: {}; and {})", PLAIN.join(", "), known_subsections())
}

fn known_subsections() -> String {
    "the subsections run, run.cycle, run.budget, roles.<role>".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(text: &str) -> Result<Local, ConfigError> {
        let file = gix::config::File::try_from(text).expect("valid git config");
        Local::from_git(&file)
    }

    #[test]
    fn keys_map_to_swarm_toml_in_any_spelling() {
        let l = local(
            "[swarm]\n name = x\n[swarm \"run\"]\n taskTimeout = 5m\n conflict-tries = 3\n[swarm \"run.cycle\"]\n \
             MAXTASKS = 9\n[swarm \"roles.worker\"]\n preset = codex\n temperature = 0.5\n",
        )
        .expect("ok");
        let want: toml::Table = toml::from_str(
            "[run]\ntask_timeout = \"5m\"\nconflict_tries = 3\n[run.cycle]\nmax_tasks = 9\n\
             [roles.worker]\npreset = \"codex\"\ntemperature = 0.5\n",
        )
        .expect("toml");
        assert_eq!(l.table, want);
    }

    #[test]
    fn a_list_is_set_by_its_items_or_as_toml_and_a_wrong_type_says_how_to_write_it() {
        let base = Config::default();
        for (value, want) in [("/opt/x", vec!["/opt/x"]), ("/opt/x, /srv/y", vec!["/opt/x", "/srv/y"])] {
            let c = edit(&base, "run.sandbox_read", Some(value)).expect(value);
            assert_eq!(get(&c, "run.sandbox_read"), Some(toml::Value::try_from(&want).expect("list")), "{value}");
        }
        let c = edit(&base, "run.sandbox_read", Some("[\"/a\"]")).expect("toml list");
        assert_eq!(get(&c, "run.sandbox_read"), Some(toml::Value::try_from(vec!["/a"]).expect("list")));
        // A text where a list is wanted, written as a TOML literal: the error shows both ways to write it.
        let e = edit(&base, "run.secret_allow", Some("7")).expect_err("a number is no list");
        assert!(e.starts_with("run.secret_allow:") && e.contains("'a,b'"), "{e}");
    }

    #[test]
    fn the_last_value_wins_as_in_git() {
        let l = local("[swarm \"run\"]\n check = a\n[swarm \"run\"]\n check = b\n").expect("ok");
        assert_eq!(l.table["run"]["check"].as_str(), Some("b"));
    }

    #[test]
    fn bad_keys_and_values_name_the_key() {
        for (text, culprit) in [
            ("[swarm]\n lease = 5m\n", "swarm.lease"),
            ("[swarm \"run\"]\n chek = x\n", "swarm.run.chek"),
            ("[swarm \"run\"]\n planDepth = two\n", "swarm.run.planDepth"),
            ("[swarm \"roles.reviewer\"]\n preset = x\n", "swarm.roles.reviewer.preset"),
            ("[swarm \"nope\"]\n x = 1\n", "swarm.nope.x"),
            ("[swarm \"roles.judge\"]\n temperature = hot\n", "swarm.roles.judge.temperature"),
        ] {
            let e = local(text).expect_err(text).to_string();
            assert!(e.starts_with(&format!("git config {culprit}:")), "{text}: {e}");
        }
    }

    #[test]
    fn apply_overrides_key_by_key_and_an_agent_choice_whole() {
        let config: Config = toml::from_str(
            "[run]\ncheck = \"make test\"\ntask_timeout = \"30m\"\n[roles.worker]\nexec = \"my-agent\"\n\
             [roles.planner]\npreset = \"claude\"\n[roles.judge]\nbackend = \"http\"\napi = \"openai\"\nmodel = \"m\"\n",
        )
        .expect("toml");
        let l = local("[swarm \"run\"]\n check = cargo test\n[swarm \"roles.worker\"]\n preset = codex\n").expect("ok");
        let c = l.apply(&config);
        assert_eq!(c.extra["run"]["check"].as_str(), Some("cargo test"));
        assert_eq!(c.extra["run"]["task_timeout"].as_str(), Some("30m"));
        assert_eq!(c.extra["roles"]["worker"].get("exec"), None);
        assert_eq!(c.extra["roles"]["worker"]["preset"].as_str(), Some("codex"));
        assert_eq!(c.extra["roles"]["planner"]["preset"].as_str(), Some("claude"));
        assert_eq!(Local::default().apply(&config), config);
        // A shared http judge does not outlive a local command.
        let l = local("[swarm \"roles.judge\"]\n exec = ./judge.sh\n").expect("ok");
        let c = l.apply(&config);
        assert_eq!(c.extra["roles"]["judge"].as_table().map(|t| t.len()), Some(1), "{:?}", c.extra["roles"]["judge"]);
        assert!(matches!(backend_for(&c, Role::Judge), Ok(Some(crate::agent::Backend::Command { .. }))));
    }
}

/// The top-level keys of `swarm.toml` that `git swarm config set` may change (`version` is the layout's, not a
/// setting), and the tables under them.
/// The top-level keys (`Config::KEYS`, the engine's) and the tables (`[run]`, `[roles.*]`, `[forge]`) a key of
/// `config set` may start with; the first three are values, not tables.
const TOP: &[&str] = &["target", "lease", "max_attempts", "run", "roles", "forge"];

/// Everything a reader needs of a `swarm.toml`: the layout, the `[run]` settings and every role's agent. `init`
/// and `config set` refuse settings that fail here, so that no runner meets them on the ref. Keys this version
/// does not know are refused too (a typo in a shared file is a setting silently lost for the whole fleet).
pub(crate) fn check(config: &Config) -> Result<(), String> {
    config.check()?;
    RunSettings::from_config(config)?;
    crate::forge::settings(config)?;
    for role in [Role::Worker, Role::Planner, Role::Judge] {
        backend_for(config, role)?;
    }
    if let Some(toml::Value::Table(roles)) = config.extra.get("roles")
        && let Some(bad) = roles.keys().find(|r| !ROLES.contains(&r.as_str()))
    {
        return Err(format!("[roles.{bad}]: not a role (one of {})", ROLES.join(", ")));
    }
    Ok(())
}

/// A `swarm.toml` value from the command line: a TOML literal when it is one (`6`, `true`, `"text"`, `[1, 2]`),
/// else the text itself (`30m`, `cargo test --quiet`).
fn literal(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// `config` with the dotted `key` (`lease`, `run.pushes_per_minute`, `roles.worker.preset`) set to `value`, or
/// removed when `value` is `None`, checked as [`check`] does. The error names the key.
pub(crate) fn edit(config: &Config, key: &str, value: Option<&str>) -> Result<Config, String> {
    let path: Vec<&str> = key.split('.').collect();
    if path.iter().any(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')) {
        return Err(format!("'{}': not a key (words joined by '.', like run.check)", crate::escape::line(key)));
    }
    if !TOP.contains(&path[0]) {
        return Err(format!("'{key}': unknown setting (one of {})", TOP.join(", ")));
    }
    if TOP[..3].contains(&path[0]) && path.len() > 1 {
        return Err(format!("'{key}': {} is a value, not a table", path[0]));
    }
    let mut root = toml::Value::try_from(config).map_err(|e| format!("cannot edit the settings: {e}"))?;
    let (last, parents) = path.split_last().ok_or_else(|| "an empty key".to_string())?;
    let mut table = root.as_table_mut().ok_or_else(|| "the settings are not a table".to_string())?;
    for p in parents {
        let entry = table.entry(p.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
        table = entry.as_table_mut().ok_or_else(|| format!("'{key}': {p} is a value, not a table"))?;
    }
    match value {
        // A list's items as `git config` takes them too, separated by commas (`run.sandbox_read /opt/x,/srv/y`),
        // beside the TOML literal (`'["/opt/x"]'`).
        Some(v) => {
            let value = match (literal(v), kind_of(&path)) {
                (toml::Value::String(_), Some(Kind::List)) => typed(key, v, Kind::List).map_err(|e| e.to_string())?,
                (value, _) => value,
            };
            table.insert(last.to_string(), value);
        }
        None => {
            if table.remove(*last).is_none() {
                return Err(format!("'{key}' is not set"));
            }
            // A table left empty goes too (`[run]` with nothing in it says nothing).
            if let Some(top) = root.as_table_mut() {
                prune(top, parents);
            }
        }
    }
    let edited: Config = root.try_into().map_err(|e: toml::de::Error| typed_error(key, e.message().trim()))?;
    check(&edited).map_err(|e| typed_error(key, &e))?;
    Ok(edited)
}

/// `key: why`, and when serde's words name a type, how to write one on the command line.
fn typed_error(key: &str, why: &str) -> String {
    let example = if why.contains("expected a sequence") {
        format!(" (a list: `git swarm config set {key} 'a,b'` or '[\"a\", \"b\"]')")
    } else if why.contains("expected a string") {
        format!(" (a text: `git swarm config set {key} '\"…\"'`)")
    } else {
        String::new()
    };
    format!("{key}: {why}{example}")
}

/// The type of the setting at the dotted `path`, when the schema of its table knows it.
fn kind_of(path: &[&str]) -> Option<Kind> {
    let (schema, key): (&[(&str, Kind)], &str) = match path {
        ["run", "cycle", k] => (RunCycle::KEYS, k),
        ["run", "budget", k] => (RunBudget::KEYS, k),
        ["run", k] => (RunTable::KEYS, k),
        ["roles", _, k] => (RoleTable::KEYS, k),
        _ => return None,
    };
    schema.iter().find(|(name, _)| *name == key).map(|(_, kind)| *kind)
}

/// Remove the tables along `path` that are left empty, innermost first.
fn prune(table: &mut toml::Table, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else { return };
    if let Some(toml::Value::Table(inner)) = table.get_mut(*first) {
        prune(inner, rest);
        if inner.is_empty() {
            table.remove(*first);
        }
    }
}

/// Whether this version knows the dotted `key` of `swarm.toml` (a setting or a table of them): `Err` says what the
/// table holds. `config get` of an unknown key says so instead of "not set".
pub(crate) fn known(key: &str) -> Result<(), String> {
    let path: Vec<&str> = key.split('.').collect();
    let unknown = |what: String| Err(format!("'{}': unknown setting ({what})", crate::escape::line(key)));
    let in_table = |table: &str, schema: &[(&str, Kind)], k: &str| {
        if schema.iter().any(|(name, _)| *name == k) {
            Ok(())
        } else {
            let names: Vec<&str> = schema.iter().map(|(name, _)| *name).collect();
            unknown(format!("[{table}] has {}", names.join(", ")))
        }
    };
    match path.as_slice() {
        [top] if TOP.contains(top) || *top == "version" => Ok(()),
        [top, ..] if TOP[..3].contains(top) => unknown(format!("{top} is a value, not a table")),
        ["run", "cycle"] | ["run", "budget"] => Ok(()),
        ["run", "cycle", k] => in_table("run.cycle", RunCycle::KEYS, k),
        ["run", "budget", k] => in_table("run.budget", RunBudget::KEYS, k),
        ["run", k] => in_table("run", RunTable::KEYS, k),
        ["roles", role, ..] if !ROLES.contains(role) => {
            unknown(format!("'{role}' is not a role: one of {}", ROLES.join(", ")))
        }
        ["roles", _] => Ok(()),
        ["forge", k] => in_table("forge", ForgeTable::KEYS, k),
        ["roles", role, k] => in_table(&format!("roles.{role}"), RoleTable::KEYS, k),
        _ => unknown(format!("one of {}, and the tables under run and roles", TOP.join(", "))),
    }
}

/// The value at the dotted `key` of `config`, if set.
pub(crate) fn get(config: &Config, key: &str) -> Option<toml::Value> {
    let mut v = toml::Value::try_from(config).ok()?;
    for p in key.split('.') {
        v = v.as_table_mut()?.remove(p)?;
    }
    Some(v)
}

/// The `git -c key=value` settings git hands to a subcommand, from `$GIT_CONFIG_PARAMETERS`, as `key=value`
/// strings (gix reads `GIT_CONFIG_COUNT` but not this variable). A key given without a value is `key=true`, as in
/// git. A malformed variable yields what could be read before the fault.
pub(crate) fn git_config_parameters(env: &crate::environment::Environment) -> Vec<String> {
    env.git_config_parameters().map(parse_config_parameters).unwrap_or_default()
}

/// One shell-single-quoted word at the start of `s` (git's `sq_quote`: `'` inside is `'\''`, `!` is `'\!'`),
/// and the rest after it.
fn sq_word(s: &str) -> Option<(String, &str)> {
    let mut rest = s.strip_prefix('\'')?;
    let mut word = String::new();
    loop {
        let end = rest.find('\'')?;
        word.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        // `'\''`: an escaped character between two quoted runs.
        let mut chars = rest.chars();
        match (chars.next(), chars.next(), chars.next()) {
            (Some('\\'), Some(c), Some('\'')) => {
                word.push(c);
                rest = &rest[1 + c.len_utf8() + 1..];
            }
            _ => return Some((word, rest)),
        }
    }
}

fn parse_config_parameters(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = v.trim_start();
    while !rest.is_empty() {
        let Some((first, after)) = sq_word(rest) else { break };
        rest = after;
        if let Some(after_eq) = rest.strip_prefix('=') {
            // New style: 'key'='value', or 'key'= for a key given without a value (git -c core.bare).
            if after_eq.is_empty() || after_eq.starts_with(char::is_whitespace) {
                out.push(format!("{first}=true"));
                rest = after_eq;
            } else {
                let Some((value, after)) = sq_word(after_eq) else { break };
                out.push(format!("{first}={value}"));
                rest = after;
            }
        } else if first.contains('=') {
            // Old style: 'key=value'.
            out.push(first);
        } else {
            out.push(format!("{first}=true"));
        }
        rest = rest.trim_start();
    }
    out
}

#[cfg(test)]
mod editing {
    use super::*;

    fn base() -> Config {
        toml::from_str("lease = \"10m\"\n[run]\ncheck = \"make\"\n[roles.worker]\npreset = \"claude\"\n").expect("toml")
    }

    #[test]
    fn set_and_unset_keep_everything_else() {
        let c = edit(&base(), "run.pushes_per_minute", Some("6")).expect("set");
        assert_eq!(get(&c, "run.pushes_per_minute"), Some(toml::Value::Integer(6)));
        assert_eq!(get(&c, "run.check").and_then(|v| v.as_str().map(String::from)).as_deref(), Some("make"));
        let c = edit(&c, "lease", Some("30m")).expect("lease");
        assert_eq!(c.lease, std::time::Duration::from_secs(1800));
        let c = edit(&c, "roles.planner.exec", Some("my planner --flag")).expect("a new table");
        assert_eq!(
            get(&c, "roles.planner.exec").and_then(|v| v.as_str().map(String::from)).as_deref(),
            Some("my planner --flag")
        );
        let c = edit(&c, "run.check", None).expect("unset");
        assert_eq!(get(&c, "run.check"), None);
        let c = edit(&c, "run.pushes_per_minute", None).expect("unset");
        assert_eq!(get(&c, "run"), None, "an empty [run] goes too");
        assert_eq!(edit(&base(), "run.check", Some("make")).expect("same"), base());
    }

    #[test]
    fn bad_settings_name_the_key_and_change_nothing() {
        for (key, value, want) in [
            ("leese", Some("5m"), "unknown setting"),
            ("lease", Some("soon"), "lease"),
            ("lease", Some("0s"), "shorter than one second"),
            ("run.chek", Some("x"), "run.chek"),
            ("run.pushes_per_minute", Some("-1"), "pushes_per_minute"),
            ("roles.reviewer.preset", Some("claude"), "not a role"),
            ("roles.worker.preset", Some("nobody"), "unknown"),
            ("roles.worker.backend", Some("http"), "cannot be a worker"),
            ("max_attempts.x", Some("1"), "not a table"),
            ("run..check", Some("x"), "not a key"),
            ("run.plan_depth", None, "is not set"),
        ] {
            let e = edit(&base(), key, value).expect_err(key);
            assert!(e.contains(want), "{key}: {e}");
        }
    }
}

#[cfg(test)]
mod parameters {
    use super::parse_config_parameters as parse;

    #[test]
    fn git_config_parameters_in_both_styles() {
        assert_eq!(parse("'swarm.agent'='a b'"), ["swarm.agent=a b"]);
        assert_eq!(parse("'swarm.agent'='it'\\''s' 'x.y'='1'"), ["swarm.agent=it's", "x.y=1"]);
        assert_eq!(parse("'swarm.run.check=make'  'core.bare'"), ["swarm.run.check=make", "core.bare=true"]);
        assert_eq!(parse("'a.b'='wow'\\!''"), ["a.b=wow!"]);
        // What git 2.47 writes for `git -c core.bare -c swarm.agent=x`.
        assert_eq!(parse("'core.bare'= 'swarm.agent'='x'"), ["core.bare=true", "swarm.agent=x"]);
        assert_eq!(parse("'swarm.agent'='x' 'core.bare'="), ["swarm.agent=x", "core.bare=true"]);
        assert_eq!(parse("'a.b'='ok' 'broken"), ["a.b=ok"]);
        assert!(parse("").is_empty());
    }
}

/// The keys are declared once, in `schema`; the key list of the manual page and `docs/configuration.md` are
/// generated from it or checked against it here, so that neither drifts from what is read.
#[cfg(test)]
mod key_list {
    use super::*;

    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    const BEGIN: &str =
        "<!-- generated from src/config/schema.rs: edit there, and paste what config::key_list says -->";
    const END: &str = "<!-- end of the generated table -->";

    fn doc_row(doc: &str, key: &str) -> String {
        let head = format!("| `{key}` |");
        doc.lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row {key}"))
            .into()
    }

    /// The table of the runners' settings in `docs/configuration.md`, from their declaration.
    fn settings_table() -> String {
        let mut out = String::from(
            "| `swarm.toml` | `git config` | type | default | what it does |\n| --- | --- | --- | --- | --- |\n",
        );
        for (table, docs) in [("run", RunTable::DOCS), ("run.cycle", RunCycle::DOCS), ("run.budget", RunBudget::DOCS)] {
            for (key, shown, default, doc) in docs {
                assert!(!doc.contains('|') && !doc.trim().is_empty(), "the doc string of {table}.{key}: {doc:?}");
                let default = if default.is_empty() { "unset".to_string() } else { format!("`{default}`") };
                out.push_str(&format!(
                    "| `{table}.{key}` | `swarm.{table}.{}` | {shown} | {default} | {} |\n",
                    camel(key),
                    doc.trim()
                ));
            }
        }
        out
    }

    const SHARED_BEGIN: &str = "<!-- generated from model::Config::KEYS and src/config/schema.rs's [forge]: paste what config::key_list says -->";
    const SHARED_END: &str = "<!-- end of the generated table of the shared settings -->";

    /// The table of the settings no clone overrides — the top-level keys (the engine's `Config`) and `[forge]` —
    /// from their declarations.
    fn shared_table() -> String {
        let mut out = String::from("| `swarm.toml` | type | default | what it is |\n| --- | --- | --- | --- |\n");
        let mut row = |key: String, shown: &str, default: &str, doc: &str| {
            assert!(!doc.contains('|') && !doc.trim().is_empty(), "the doc string of {key}: {doc:?}");
            let default = if default.is_empty() { "unset".to_string() } else { format!("`{default}`") };
            out.push_str(&format!("| `{key}` | {shown} | {default} | {} |\n", doc.trim()));
        };
        for (key, shown, default, doc) in Config::KEYS {
            row(key.to_string(), shown, default, doc);
        }
        for (key, shown, default, doc) in ForgeTable::DOCS {
            row(format!("forge.{key}"), shown, default, doc);
        }
        out
    }

    fn generated<'d>(doc: &'d str, begin: &str, end: &str) -> &'d str {
        doc.split_once(begin)
            .and_then(|(_, rest)| rest.split_once(end))
            .map(|(table, _)| table.trim_start_matches('\n'))
            .unwrap_or_else(|| panic!("docs/configuration.md has no lines {begin} … {end}"))
    }

    #[test]
    fn the_docs_table_of_the_shared_settings_is_their_declaration() {
        let doc = std::fs::read_to_string(DOC).expect("docs");
        let want = shared_table();
        assert!(
            generated(&doc, SHARED_BEGIN, SHARED_END) == want,
            "docs/configuration.md's table of the shared settings is not the declaration's:\n{want}"
        );
        // Each top-level key is one `Config` reads, with the default it says.
        let text: String = Config::KEYS.iter().map(|(k, _, d, _)| format!("{k} = {d}\n")).collect();
        let read: Config = toml::from_str(&text).expect("the top-level defaults");
        assert_eq!(read, Config::default());
        let forge: ForgeTable = toml::from_str(
            &ForgeTable::DOCS
                .iter()
                .filter(|(_, _, d, _)| !d.is_empty())
                .map(|(k, _, d, _)| format!("{k} = {d}\n"))
                .collect::<String>(),
        )
        .expect("[forge] defaults");
        assert_eq!(ForgeSettings::resolve(forge), Ok(ForgeSettings::default()));
    }

    #[test]
    fn the_docs_table_of_the_runners_settings_is_their_declaration() {
        let doc = std::fs::read_to_string(DOC).expect("docs");
        let table = doc
            .split_once(BEGIN)
            .and_then(|(_, rest)| rest.split_once(END))
            .map(|(table, _)| table.trim_start_matches('\n'))
            .unwrap_or_else(|| panic!("docs/configuration.md has no lines {BEGIN} … {END}"));
        let want = settings_table();
        assert!(
            table == want,
            "docs/configuration.md's table of the runners' settings is not the declaration's:\n{want}"
        );
    }

    /// A default as the docs show it is the default the runner uses.
    #[test]
    fn the_defaults_shown_are_the_defaults() {
        let text = |docs: &[(&str, &str, &str, &str)]| {
            docs.iter()
                .filter(|(_, _, d, _)| !d.is_empty())
                .map(|(k, _, d, _)| format!("{k} = {d}\n"))
                .collect::<String>()
        };
        let run: RunTable = toml::from_str(&text(RunTable::DOCS)).expect("[run] defaults");
        assert_eq!(RunSettings::resolve(run), Ok(RunSettings::default()));
        let cycle: RunCycle = toml::from_str(&text(RunCycle::DOCS)).expect("[run.cycle] defaults");
        assert_eq!(schema::CycleSettings::resolve(cycle), Ok(schema::CycleSettings::default()));
        let budget: RunBudget = toml::from_str(&text(RunBudget::DOCS)).expect("[run.budget] defaults");
        assert_eq!(schema::BudgetSettings::resolve(budget), Ok(schema::BudgetSettings::default()));
        assert_eq!(RunSettings::from_config(&Config::default()), Ok(RunSettings::default()));
    }

    #[test]
    fn every_key_read_is_in_the_key_list_and_the_docs() {
        let doc = std::fs::read_to_string(DOC).expect("docs");
        let keys = keys();
        let described = |key: &str| keys.iter().find(|(k, _)| *k == key).map(|(_, d)| d.clone()).unwrap_or_default();
        for plain in PLAIN {
            let key = format!("swarm.{plain}");
            assert!(!described(&key).is_empty(), "{key} is read but not in config::keys");
            doc_row(&doc, &key);
        }
        for key in ["swarm.run.<key>", "swarm.run.cycle.<key>", "swarm.run.budget.<key>"] {
            doc_row(&doc, key);
        }
        let row = doc_row(&doc, "swarm.roles.<role>.<key>");
        for (name, _) in RoleTable::KEYS {
            let git_name = camel(name);
            assert!(
                described("swarm.roles.<role>.<key>").contains(&git_name),
                "config::keys for roles does not name {git_name}"
            );
            assert!(
                row.contains(&format!("`{git_name}`")),
                "docs/configuration.md's roles row does not name {git_name}"
            );
        }
        for role in ROLES {
            assert!(described("swarm.roles.<role>.<key>").contains(role), "config::keys does not name the role {role}");
        }
        // The values `swarm.transport` takes are the ones `Transport` parses.
        for t in ["auto", "git", "git-fetch"] {
            assert!(t.parse::<crate::Transport>().is_ok(), "{t}");
            assert!(described("swarm.transport").contains(t), "config::keys does not name transport {t}");
            assert!(doc_row(&doc, "swarm.transport").contains(&format!("`{t}`")), "docs do not name transport {t}");
        }
        assert!("gix".parse::<crate::Transport>().is_err());
    }
}
