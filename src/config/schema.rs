//! The tables of `swarm.toml` that a clone's `git config swarm.*` can override, declared once. Each key of `[run]`,
//! `[run.cycle]` and `[run.budget]` is one entry of [`settings!`]: its doc string, the type `swarm.toml` writes it
//! in, the type the runner uses, the default (the value, and as the docs show it) and the check that turns the
//! one into the other (the functions of [`super::checks`]). From that entry come the serde struct `swarm.toml`
//! is read through (unknown keys refused), the typed key list `git config` values are read by, the runner's
//! resolved struct with its `Default` and its `resolve`, the key list of the manual page ([`super::keys`]) and the
//! table of `docs/configuration.md` (checked by a test). `[roles.<role>]` is read by [`super::backend_for`], so it
//! is only a [`table!`].

use std::time::Duration;

use super::Kind;
use super::checks::{
    CheckPolicy, Empty, check_policy, duration, empty, network, pushes, report_path, sandbox_paths, setup_files,
    tokens, usd, window,
};
use crate::agent::http::Api;
use crate::agent::sandbox::Mode;
use crate::time::DurationText;
use crate::usage::{Limit, Usd};

/// The type of a setting as `git config` gives it (text), by the Rust type of its field, and its name in the docs.
pub(crate) trait Setting {
    const KIND: Kind;
    #[cfg(test)]
    const SHOWN: &'static str;
}

macro_rules! kinds {
    ($($ty:ty => $kind:ident $shown:literal),* $(,)?) => {
        $(impl Setting for $ty {
            const KIND: Kind = Kind::$kind;
            #[cfg(test)]
            const SHOWN: &'static str = $shown;
        })*
    };
}

kinds! {
    String => Text "text",
    DurationText => Text "duration",
    Vec<String> => List "list of text",
    Api => Text "text",
    u32 => Int "whole number",
    u64 => Int "whole number",
    f64 => Float "number",
    bool => Bool "true or false",
}

/// A table: its settings (every one optional), then the tables under it, which are subsections in `git config`.
macro_rules! table {
    ($(#[$doc:meta])* $name:ident { $($key:ident: $ty:ty),* $(,)? } $(tables { $($sub:ident: $subty:ty),* $(,)? })?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            $(pub(crate) $key: Option<$ty>,)*
            $($(pub(crate) $sub: Option<$subty>,)*)?
        }

        impl $name {
            /// The settings of this table, in `swarm.toml`'s spelling, with their types.
            pub(crate) const KEYS: &'static [(&'static str, Kind)] = &[$((stringify!($key), <$ty as Setting>::KIND)),*];
        }
    };
}

/// How a key's `swarm.toml` value becomes the runner's: the check given, else the value itself or the default.
macro_rules! resolver {
    () => {
        |_, v, d| Ok(v.unwrap_or(d))
    };
    ($check:expr) => {
        $check
    };
}

/// A table the runner resolves: the raw table (a [`table!`]) and the resolved struct, from one entry per key:
///
/// ```text
/// /// What it does (the field's doc, and the docs table's).
/// key: <type in swarm.toml> => <type the runner uses> = <default>, "<default as swarm.toml writes it>"[, <check>];
/// ```
///
/// The check is a `fn("[table] key", Option<raw>, default) -> Result<resolved, String>`; without one, the raw type
/// is the resolved one and an unset key takes the default. An empty default text says the key has none (unset).
/// The tables under it resolve first, then its keys in their order.
macro_rules! settings {
    (
        $(#[$tdoc:meta])*
        $label:literal $raw:ident => $resolved:ident {
            $(
                $(#[doc = $doc:literal])*
                $key:ident: $rty:ty => $ty:ty = $default:expr, $shown:literal $(, $check:expr)?;
            )*
        }
        $(tables { $($sub:ident: $subraw:ident => $subres:ident),* $(,)? })?
    ) => {
        table! {
            $(#[$tdoc])*
            $raw { $($key: $rty),* } $(tables { $($sub: $subraw),* })?
        }

        impl $raw {
            /// Each key's default as `swarm.toml` writes it (empty: unset) and its doc string.
            #[cfg(test)]
            pub(crate) const DOCS: &'static [(&'static str, &'static str, &'static str, &'static str)] =
                &[$((stringify!($key), <$rty as Setting>::SHOWN, $shown, concat!($($doc),*))),*];
        }

        $(#[$tdoc])*
        #[derive(Debug, Clone, PartialEq)]
        pub(crate) struct $resolved {
            $($(#[doc = $doc])* pub(crate) $key: $ty,)*
            $($(pub(crate) $sub: $subres,)*)?
        }

        impl Default for $resolved {
            fn default() -> Self {
                $resolved { $($key: $default,)* $($($sub: $subres::default(),)*)? }
            }
        }

        impl $resolved {
            /// The table read from `swarm.toml`, every value checked (the error names the key), the defaults for
            /// what it leaves out.
            pub(crate) fn resolve(raw: $raw) -> Result<$resolved, String> {
                let d = $resolved::default();
                $($(let $sub = $subres::resolve(raw.$sub.unwrap_or_default())?;)*)?
                $(
                    let $key = {
                        let check: fn(&str, Option<$rty>, $ty) -> Result<$ty, String> = resolver!($($check)?);
                        check(concat!("[", $label, "] ", stringify!($key)), raw.$key, d.$key)?
                    };
                )*
                Ok($resolved { $($key,)* $($($sub,)*)? })
            }
        }
    };
}

settings! {
    /// `[run]`: how this swarm's runners work.
    "run" Run => RunSettings {
        /// A command run in the work tree after the rebase, before landing; a non-zero exit fails the task.
        check: String => Option<String> = None, "", |_, v, _| Ok(v.filter(|c| !c.trim().is_empty()));
        /// Refuse a landing only for what it makes worse than the target: the check runs on the target too when it
        /// fails on the change (docs/check.md).
        check_baseline: bool => bool = false, "false";
        /// Where the check writes its JUnit XML report, relative to the work tree (a file, or a folder of `*.xml`):
        /// per-test results for the baseline.
        check_report: String => Option<String> = None, "", |key, v, _| v.map(|p| report_path(key, &p)).transpose();
        /// Run the check in a work tree made from nothing (what the repository ignores not carried from the last
        /// run: no build output, no dependencies) — slower, and free of whatever an earlier run left (docs/check.md).
        check_clean: bool => bool = false, "false";
        /// Which commits of a batch of landings the check runs on: `"tip"`, the batch's tip once (a failing one
        /// bisected to the landing that breaks it), or `"strict"`, each landing on the one before it (docs/check.md).
        check_policy: String => CheckPolicy = CheckPolicy::Tip, "\"tip\"", check_policy;
        /// A command run in the work tree before the agent when the tree is new to this runner or a file of
        /// `setup_when` changed since its last run (`npm ci`, `uv sync`, `cargo fetch`); trusted like `check`.
        setup: String => Option<String> = None, "", |_, v, _| Ok(v.filter(|c| !c.trim().is_empty()));
        /// Files (paths relative to the work tree) whose change re-runs `setup` (`["package-lock.json", "uv.lock"]`);
        /// empty: only a new work tree does.
        setup_when: Vec<String> => Vec<String> = vec![], "[]", setup_files;
        /// The time limit of one run of `setup`.
        setup_timeout: DurationText => Duration = Duration::from_secs(10 * 60), "\"10m\"", duration;
        /// Whether agent runs are contained: `"auto"` (when this machine can), `"required"` (or the runner refuses
        /// to start) or `"off"` (docs/agents.md).
        sandbox: String => Mode = Mode::Auto, "\"auto\"", |_, v, d| v.map_or(Ok(d), |m| Mode::parse(&m));
        /// `"off"`: contained agents get no network.
        network: String => bool = true, "\"on\"", network;
        /// More paths contained agents may read (absolute, or `~/…` in the runner's home).
        sandbox_read: Vec<String> => Vec<String> = vec![], "[]", sandbox_paths;
        /// More paths contained agents may write (absolute, or `~/…` in the runner's home; under a root runner, writable by nobody).
        sandbox_write: Vec<String> => Vec<String> = vec![], "[]", sandbox_paths;
        /// Paths (globs, `tests/fixtures/**`) where token shapes are no secret: the scan of a landing lets them land
        /// (never a value of the runner's own secrets; docs/security.md, S21).
        secret_allow: Vec<String> => Vec<String> = vec![], "[]";
        /// A worker agent that runs longer than this is stopped, and the task fails; the check's time limit too.
        task_timeout: DurationText => Duration = Duration::from_secs(30 * 60), "\"30m\"", duration;
        /// The time limit of planner and judge runs.
        plan_timeout: DurationText => Duration = Duration::from_secs(20 * 60), "\"20m\"", duration;
        /// Agent runs allowed to resolve a rebase conflict before the task fails.
        conflict_tries: u32 => u32 = 2, "2";
        /// The sub-planner recursion limit (the root plan is depth 0).
        plan_depth: u32 => u32 = 2, "2";
        /// How many times a planner re-plans one plan task before it is done anyway (at least 1).
        plan_rounds: u32 => u32 = 5, "5", |_, v, d| Ok(v.unwrap_or(d).max(1));
        /// What a worker's run that exits 0 without changing anything means: `"fail"` or `"done"`.
        empty: String => Empty = Empty::Fail, "\"fail\"", empty;
        /// The fleet's push budget, pushes a minute to the remote (at least 0.01); unset, as fast as it goes.
        pushes_per_minute: f64 => Option<f64> = None, "", pushes;
        /// How long the first landing (or claim) of a batch waits for the other agents of the same runner process
        /// to join it (`run worker --agents <n>`; `"0s"`: off; at most 1m; docs/scale.md).
        batch_window: DurationText => Duration = Duration::from_millis(250), "\"250ms\"",
            |key, v, d| v.map_or(Ok(d), |w| window(key, &w.0));
        /// Put the agent hooks (Claude Code, Cursor settings) into a worker's work tree (docs/hooks.md).
        agent_hooks: bool => bool = true, "true";
    }
    tables { cycle: Cycle => CycleSettings, budget: Budget => BudgetSettings }
}

settings! {
    /// `[forge]`: landing where main is protected — one pull/merge request from the target into `base`
    /// (docs/forge.md). The checks that need the whole table (a known forge, `base` set and not the target, an
    /// https `api_url`) are `forge::settings`'s.
    "forge" Forge => ForgeSettings {
        /// `"github"` or `"gitlab"`: the forge the request is opened on; unset, nothing is proposed.
        propose: String => Option<String> = None, "", |_, v, _| Ok(v);
        /// The protected branch the request goes into (`main`).
        base: String => Option<String> = None, "", |_, v, _| Ok(v);
        /// `owner/name` (GitHub) or the project's path (`group/sub/project`, GitLab); unset, from the remote's URL.
        repo: String => Option<String> = None, "", |_, v, _| Ok(v);
        /// The API's base URL (GitHub Enterprise, a self-hosted GitLab); unset, the forge's public one.
        api_url: String => Option<String> = None, "", |_, v, _| Ok(v);
        /// The variable of the runner's environment that holds the token; unset, `GITHUB_TOKEN` then `GH_TOKEN`, or `GITLAB_TOKEN`.
        token_env: String => Option<String> = None, "", |_, v, _| Ok(v);
        /// Open the request as a draft, and mark it ready when the judge says stop.
        draft: bool => bool = true, "true";
        /// Ask the forge to merge it by itself once its checks pass.
        auto_merge: bool => bool = false, "false";
    }
}

settings! {
    /// `[run.cycle]`: when a cycle of planner, workers and judge ends.
    "run.cycle" Cycle => CycleSettings {
        /// The judge runs when this many tasks have finished in the cycle.
        max_tasks: u64 => Option<u64> = None, "", |_, v, _| Ok(v);
        /// The judge runs this long after the cycle began.
        max_time: DurationText => Option<Duration> = None, "",
            |key, v, _| v.map(|t| duration(key, Some(t), Duration::ZERO)).transpose();
    }
}

settings! {
    /// `[run.budget]`: what a task and a cycle may spend, as the agents report it (docs/spend.md).
    "run.budget" Budget => BudgetSettings {
        /// The tokens one task may spend over all its attempts (at least 1); a task past it is stopped and failed.
        task_tokens: u64 => Option<u64> = None, "", tokens;
        /// The dollars one task may spend over all its attempts (above 0).
        task_usd: f64 => Option<Usd> = None, "", usd;
        /// The tokens the running cycle may spend, every role together; past it nothing more is claimed.
        cycle_tokens: u64 => Option<u64> = None, "", tokens;
        /// The dollars the running cycle may spend, every role together.
        cycle_usd: f64 => Option<Usd> = None, "", usd;
    }
}

impl BudgetSettings {
    /// What one task may spend over all its attempts.
    pub(crate) fn task(&self) -> Limit {
        Limit { tokens: self.task_tokens, usd: self.task_usd }
    }

    /// What the running cycle may spend, every role together.
    pub(crate) fn cycle(&self) -> Limit {
        Limit { tokens: self.cycle_tokens, usd: self.cycle_usd }
    }
}

table! {
    /// `[roles.<role>]`: the agent of a role.
    Role {
        backend: String,
        exec: String,
        preset: String,
        api: Api,
        base_url: String,
        model: String,
        api_key_env: String,
        max_tokens: u32,
        temperature: f64,
        env: Vec<String>,
        home_files: Vec<String>,
    }
}
