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

/// Every `git config` key this tool reads, with what it sets (for the manual page and `docs/configuration.md`).
pub const KEYS: &[(&str, &str)] = &[
    ("swarm.remote", "the shared remote holding the swarm (as --remote)."),
    ("swarm.name", "which swarm: refs/swarm/<name> (as --swarm)."),
    ("swarm.agent", "this clone's agent id (as --agent; $GIT_SWARM_AGENT wins over it)."),
    ("swarm.transport", "git or gix: how a local-path remote is reached ($GIT_SWARM_TRANSPORT wins over it)."),
    (
        "swarm.run.<key>",
        "a [run] setting of swarm.toml for this clone's runners: check, taskTimeout, planTimeout, conflictTries, planDepth, planRounds, empty, pushesPerMinute.",
    ),
    ("swarm.run.cycle.<key>", "a [run.cycle] setting: maxTasks, maxTime."),
    (
        "swarm.roles.<role>.<key>",
        "the agent of a role (default, worker, planner, judge) for this clone's runners: preset, exec, backend, api, baseUrl, model, apiKeyEnv, maxTokens, temperature. Setting exec or preset replaces both of them from swarm.toml.",
    ),
];

/// The type a setting has in `swarm.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Int,
    Float,
}

const RUN: &[(&str, Kind)] = &[
    ("check", Kind::Text),
    ("task_timeout", Kind::Text),
    ("plan_timeout", Kind::Text),
    ("conflict_tries", Kind::Int),
    ("plan_depth", Kind::Int),
    ("plan_rounds", Kind::Int),
    ("empty", Kind::Text),
    ("pushes_per_minute", Kind::Float),
];
const CYCLE: &[(&str, Kind)] = &[("max_tasks", Kind::Int), ("max_time", Kind::Text)];
const ROLE: &[(&str, Kind)] = &[
    ("backend", Kind::Text),
    ("exec", Kind::Text),
    ("preset", Kind::Text),
    ("api", Kind::Text),
    ("base_url", Kind::Text),
    ("model", Kind::Text),
    ("api_key_env", Kind::Text),
    ("max_tokens", Kind::Int),
    ("temperature", Kind::Float),
];
const ROLES: &[&str] = &["default", "worker", "planner", "judge"];
/// Keys without a subsection that `Ctx` reads itself.
const PLAIN: &[&str] = &["remote", "name", "agent", "transport"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("git config {key}: {why}")]
    Bad { key: String, why: String },
}

fn bad(key: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::Bad { key: key.to_string(), why: why.into() }
}

/// The settings of `swarm.toml` that this clone's git config overrides, as a table shaped like `swarm.toml`'s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Local {
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
    }
}

impl Local {
    /// Read every `swarm.*` entry of `config` (the repository's resolved configuration). Later entries win, as in
    /// git. An unknown key or a value of the wrong type is an error naming the key.
    pub fn from_git(config: &gix::config::File) -> Result<Local, ConfigError> {
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
            Some("run") => (vec!["run"], RUN),
            Some("run.cycle") => (vec!["run", "cycle"], CYCLE),
            Some(s) => match s.strip_prefix("roles.") {
                Some(role) if ROLES.contains(&role) => (vec!["roles", role], ROLE),
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

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// `config` with this clone's settings over it. Within a role, setting `exec` or `preset` drops both from
    /// `swarm.toml` (a clone that picks its agent picks it whole); every other key overrides key by key.
    pub fn apply(&self, config: &Config) -> Config {
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

fn merge(theirs: &mut toml::Table, mine: &toml::Table, roles: bool) {
    for (k, v) in mine {
        match (theirs.get_mut(k), v) {
            (Some(toml::Value::Table(t)), toml::Value::Table(m)) => {
                if roles && (m.contains_key("exec") || m.contains_key("preset")) {
                    t.remove("exec");
                    t.remove("preset");
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
    "the subsections run, run.cycle, roles.<role>".into()
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
             [roles.planner]\npreset = \"claude\"\n",
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
    }
}

/// The `git -c key=value` settings git hands to a subcommand, from `$GIT_CONFIG_PARAMETERS`, as `key=value`
/// strings (gix reads `GIT_CONFIG_COUNT` but not this variable). A key given without a value is `key=true`, as in
/// git. A malformed variable yields what could be read before the fault.
pub fn git_config_parameters() -> Vec<String> {
    std::env::var("GIT_CONFIG_PARAMETERS").map(|v| parse_config_parameters(&v)).unwrap_or_default()
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
            // New style: 'key'='value'.
            let Some((value, after)) = sq_word(after_eq) else { break };
            out.push(format!("{first}={value}"));
            rest = after;
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
mod parameters {
    use super::parse_config_parameters as parse;

    #[test]
    fn git_config_parameters_in_both_styles() {
        assert_eq!(parse("'swarm.agent'='a b'"), ["swarm.agent=a b"]);
        assert_eq!(parse("'swarm.agent'='it'\\''s' 'x.y'='1'"), ["swarm.agent=it's", "x.y=1"]);
        assert_eq!(parse("'swarm.run.check=make'  'core.bare'"), ["swarm.run.check=make", "core.bare=true"]);
        assert_eq!(parse("'a.b'='wow'\\!''"), ["a.b=wow!"]);
        assert_eq!(parse("'a.b'='ok' 'broken"), ["a.b=ok"]);
        assert!(parse("").is_empty());
    }
}
