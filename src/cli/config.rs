//! `git swarm config`: the swarm's shared settings, `swarm.toml` on the state ref — show them, read one, change one
//! by compare-and-swap (an op like any other: in the log, replayed on the newest settings after a lost race).
//! A clone's own settings are `git config swarm.*` (docs/configuration.md).

use crate::ops;
use serde_json::json;

use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    #[command(subcommand)]
    action: Option<Action>,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Print one setting (a dotted key: lease, run.check, roles.worker.preset).
    Get { key: String },
    /// Change one setting for the whole swarm (checked first: a setting no runner could use is refused).
    Set {
        key: String,
        /// A TOML literal (6, true, "text") or plain text (30m, cargo test --quiet).
        value: String,
    },
    /// Remove one setting (back to its default).
    Unset { key: String },
}

pub(super) fn run(ctx: &mut Ctx, args: ConfigArgs) -> CliResult<()> {
    match args.action {
        None => {
            let snap = ctx.read(false)?;
            let text = toml::to_string(&snap.board.config)
                .map_err(|e| CliError::io(format!("cannot show swarm.toml: {e}")))?;
            ctx.out.line(text.trim_end());
            let value = serde_json::to_value(toml::Value::try_from(&snap.board.config).ok())
                .map_err(|e| CliError::io(format!("cannot show swarm.toml: {e}")))?;
            ctx.out.doc(&value);
            Ok(())
        }
        Some(Action::Get { key }) => {
            let snap = ctx.read(false)?;
            let Some(v) = crate::config::get(&snap.board.config, &key) else {
                // A key this version does not know is a typo, not a setting left out.
                crate::config::known(&key).map_err(|e| {
                    CliError::usage(e)
                        .hint("`git swarm config` shows the settings; docs/configuration.md lists every key")
                })?;
                ctx.out.doc(&json!({"key": key, "value": null}));
                return Err(
                    CliError::io(format!("{}: not set (its default applies)", crate::escape::line(&key))).documented()
                );
            };
            ctx.out.line(plain(&v));
            ctx.out.doc(&json!({"key": key, "value": v}));
            Ok(())
        }
        Some(Action::Set { key, value }) => edit(ctx, &key, Some(&value)),
        Some(Action::Unset { key }) => edit(ctx, &key, None),
    }
}

/// A value as `git config --get` prints one: text bare, everything else as TOML.
fn plain(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn edit(ctx: &mut Ctx, key: &str, value: Option<&str>) -> CliResult<()> {
    let mut before = None;
    let mut repaired = None;
    let (swarm, c) = ctx.transact_settings(|snap, now, agent| {
        let edited = crate::config::edit(&snap.board.config, key, value).map_err(ops::DomainError::BadSetting)?;
        before = crate::config::get(&snap.board.config, key);
        repaired.clone_from(&snap.board.broken_settings);
        let actor = ops::Actor { agent: agent.to_string(), now };
        Ok((ops::configure(&snap.board, &actor, &edited, key)?, crate::config::get(&edited, key)))
    })?;
    let after = c.value;
    if let Some(b) = &repaired
        && c.commit.is_some()
    {
        let from = match &b.fallback {
            Some(good) => format!("the settings of commit {}, the newest that read", crate::short(good)),
            None => "the defaults (no earlier settings read)".into(),
        };
        ctx.out.warn(format!(
            "{} in commit {} could not be read ({}): it is replaced by {from}, with this edit",
            b.problem.path,
            crate::short(&b.problem.commit),
            crate::escape::line(&b.problem.message)
        ));
    }
    if key == "target"
        && c.commit.is_some()
        && let Some(toml::Value::String(t)) = &after
    {
        super::init::warn_unless_branch(ctx, &swarm, t);
    }
    // This clone wrote them: its runners trust them (docs/security.md, *Trust*).
    if let Some(commit) = c.commit {
        super::trust::trust_own(ctx, &swarm, commit, true);
    }
    let shown = |v: &Option<toml::Value>| v.as_ref().map(plain).unwrap_or_else(|| "(unset)".into());
    let what = if c.commit.is_some() { "" } else { " (nothing changed)" };
    ctx.out.line(format!("{key}: {} → {}{what}", shown(&before), shown(&after)));
    ctx.out.doc(&json!({
        "key": key,
        "value": after,
        "previous": before,
        "commit": c.commit.map(|c| c.to_string()),
    }));
    Ok(())
}
