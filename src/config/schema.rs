//! The tables of `swarm.toml` that a clone's `git config swarm.*` can override, declared once: each is a serde
//! struct (the runner reads `swarm.toml` through it, unknown keys refused) and the list of its keys with the type
//! each takes (`git config` values are read by it), from the same declaration. `docs/configuration.md` and
//! [`super::KEYS`] are checked against these lists by a test.

use super::Kind;
use crate::agent::http::Api;
use crate::time::DurationText;

/// The type of a setting as `git config` gives it (text), by the Rust type of its field.
pub(crate) trait Setting {
    const KIND: Kind;
}

macro_rules! kinds {
    ($($ty:ty => $kind:ident),* $(,)?) => {
        $(impl Setting for $ty {
            const KIND: Kind = Kind::$kind;
        })*
    };
}

kinds! { String => Text, DurationText => Text, Vec<String> => List, Api => Text, u32 => Int, u64 => Int, f64 => Float, bool => Bool }

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

table! {
    /// `[run]`: how this swarm's runners work.
    Run {
        check: String,
        check_baseline: bool,
        check_report: String,
        sandbox: String,
        network: String,
        sandbox_read: Vec<String>,
        sandbox_write: Vec<String>,
        task_timeout: DurationText,
        plan_timeout: DurationText,
        conflict_tries: u32,
        plan_depth: u32,
        plan_rounds: u32,
        empty: String,
        pushes_per_minute: f64,
        batch_window: DurationText,
        agent_hooks: bool,
    }
    tables { cycle: Cycle, budget: Budget }
}

table! {
    /// `[run.cycle]`: when a cycle of planner, workers and judge ends.
    Cycle { max_tasks: u64, max_time: DurationText }
}

table! {
    /// `[run.budget]`: what a task and a cycle may spend.
    Budget { task_tokens: u64, task_usd: f64, cycle_tokens: u64, cycle_usd: f64 }
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
