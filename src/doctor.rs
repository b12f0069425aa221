//! `git swarm doctor`: check a swarm and this clone's part of it, repair what can be repaired without losing
//! anything, and say what cannot. No terminal I/O: the CLI prints the [`Finding`]s.
//!
//! What it looks at, in order: the state ref against what this clone saw of it (deleted, rewound by a force-push,
//! replaced), the board (unreadable files, expired claims, tasks blocked for good), the settings, the target
//! branch, lock files left by killed git processes, runners' work trees whose runner is gone, this clone's records
//! of held epochs that no longer match the board, and the refs beside the state ref (kept work, archives).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gix::ObjectId;

use crate::model::Status;
use crate::remote::Publish;
use crate::store::short;
use crate::time::Timestamp;
use crate::txn::Reach;
use crate::txn::{Relation, Swarm, TxnError};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Ok,
    Info,
    Warn,
    Error,
}

/// One thing doctor found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// Which check: `state-ref`, `board`, `settings`, `target`, `locks`, `worktrees`, `held`, `refs`.
    pub check: &'static str,
    pub severity: Severity,
    pub message: String,
    /// What `--fix` did about it.
    pub fixed: Option<String>,
    /// What to do when it was not fixed.
    pub hint: Option<String>,
}

impl Finding {
    fn new(check: &'static str, severity: Severity, message: impl Into<String>) -> Finding {
        Finding { check, severity, message: message.into(), fixed: None, hint: None }
    }
    fn hint(mut self, h: impl Into<String>) -> Finding {
        self.hint = Some(h.into());
        self
    }
    fn fixed(mut self, what: impl Into<String>) -> Finding {
        self.fixed = Some(what.into());
        self
    }
    /// Still a problem after the repairs?
    pub fn open_error(&self) -> bool {
        self.severity == Severity::Error && self.fixed.is_none()
    }
}

/// What doctor may change.
#[derive(Debug, Clone, Copy, Default)]
pub struct Repairs {
    /// Repairs that lose nothing: restore a rewound or deleted state ref from what this clone saw, remove stale
    /// lock files, stray work trees and stale records.
    pub fix: bool,
    /// Take the remote's state ref as it is (after a deliberate reset), keeping what this clone saw in an archive.
    pub accept_remote: bool,
}

/// A lock file older than this is left over by a killed process (git holds ref locks for milliseconds).
pub(crate) const STALE_LOCK: Duration = Duration::from_secs(60);
/// Ops since the last root past which doctor suggests `git swarm compact`.
pub(crate) const LONG_HISTORY: usize = 10_000;

/// Run every check; repair as `repairs` allows.
pub fn examine(swarm: &Swarm, now: Timestamp, repairs: Repairs) -> Result<Vec<Finding>, TxnError> {
    let mut out = Vec::new();
    let tip = state_ref(swarm, repairs, &mut out)?;
    if let Some(tip) = tip {
        board(swarm, tip, now, repairs, &mut out)?;
    }
    locks(swarm, repairs, &mut out);
    worktrees(swarm, repairs, &mut out);
    Ok(out)
}

/// Each role's agent as this clone's runners would run it (`swarm.toml` under this clone's `git config swarm.*`):
/// which command or preset, the CLI's version, and whether it can start here ([`crate::agent::prepare`]).
pub fn agents(config: &crate::model::Config, local: &crate::config::Local, run_dir: &std::path::Path) -> Vec<Finding> {
    const C: &str = "agents";
    let config = local.apply(config);
    let probes = crate::agent::Probes::default();
    let mut out = Vec::new();
    for role in [crate::runner::Role::Worker, crate::runner::Role::Planner, crate::runner::Role::Judge] {
        let f = match crate::config::backend_for(&config, role) {
            Err(e) => Finding::new(C, Severity::Error, format!("{role}: {e}")),
            Ok(None) => Finding::new(C, Severity::Info, format!("{role}: no agent configured"))
                .hint(format!("set [roles.{role}] (or [roles.default]) in swarm.toml, or pass --exec to the runner")),
            Ok(Some(b)) => match crate::agent::prepare(&b, run_dir, &probes) {
                Ok(p) => {
                    let untested = matches!(b, crate::agent::Backend::Preset(p) if p.untested);
                    let note = if untested { " — this preset is not tested against its CLI" } else { "" };
                    Finding::new(C, Severity::Ok, format!("{role}: {} will run here{note}", p.label))
                }
                // An error: a runner of this role would exit before its first claim. (A role nobody configured is
                // only noted above; a clone that only watches can pass `--exec` to the roles it runs.)
                Err(e) => Finding::new(C, Severity::Error, format!("{role}: {e}")).hint(e.hint),
            },
        };
        out.push(f);
    }
    out
}

/// The board's `swarm.toml` cannot be read: which file, which commit, what is wrong, and what `--fix` puts back
/// (`fixed`: what it did). Every op but a repair is refused until then.
pub fn broken_settings(b: &crate::ops::BrokenSettings, fixed: Option<String>) -> Finding {
    let p = &b.problem;
    let f = Finding::new(
        "settings",
        Severity::Error,
        format!(
            "{} in commit {} cannot be read: {}; every op but a repair is refused until it is fixed",
            p.path,
            short(&p.commit),
            p.message
        ),
    );
    match (fixed, &b.fallback) {
        (Some(what), _) => f.fixed(what),
        (None, Some(good)) => f.hint(format!(
            "`git swarm doctor --fix` puts back the settings of commit {} (the newest that read); or write them \
             whole: `git swarm init --config <file> --force`",
            short(good)
        )),
        (None, None) => f.hint("no earlier commit has settings that read: `git swarm init --config <file> --force`"),
    }
}

/// Whether this clone's runners contain their agents (`[run] sandbox`, under this clone's `git config swarm.*`):
/// in a sandbox here, uncontained on purpose, or uncontained for want of one — an error where `required`.
pub fn sandbox(config: &crate::model::Config, local: &crate::config::Local) -> Finding {
    use crate::agent::sandbox::{AgentUser, Mode, Support, support};
    const C: &str = "sandbox";
    let mode = crate::runner::RunSettings::from_config(&local.apply(config)).map(|s| s.sandbox).unwrap_or_default();
    match (mode, support()) {
        (Mode::Off, _) => Finding::new(C, Severity::Info, "agents run uncontained here: [run] sandbox = \"off\"")
            .hint("they can read this machine's files and keys and write the clone; \"auto\" contains them where bubblewrap works"),
        (mode, support @ Support::Ready { version, user, .. }) => {
            let bwrap = if version.is_empty() { "bubblewrap" } else { version.as_str() };
            let who = match user {
                AgentUser::Runner => "as this user (what it can read outside the hidden folders, they can: docs/security.md)".to_string(),
                AgentUser::Dropped { uid, .. } => format!("as nobody (uid {uid}), not root"),
                AgentUser::Root => "as root".to_string(),
            };
            match (support.open_door(), mode) {
                (None, _) => Finding::new(
                    C,
                    Severity::Ok,
                    format!("agents run in a sandbox ({bwrap}) {who}: their work tree, a fresh home, no credentials, no terminal"),
                ),
                (Some(door), Mode::Required) => Finding::new(
                    C,
                    Severity::Error,
                    format!("[run] sandbox = \"required\", but {door}: runners refuse to start"),
                )
                .hint("run the runner as a normal user, or give its container CAP_SYS_ADMIN so that agents run as nobody"),
                (Some(door), _) => Finding::new(C, Severity::Warn, format!("agents run in a sandbox ({bwrap}), but {door}"))
                    .hint("run the runner as a normal user, or give its container CAP_SYS_ADMIN so that agents run as nobody"),
            }
        }
        (Mode::Auto, Support::Missing { why, hint }) => {
            Finding::new(C, Severity::Warn, format!("agents would run uncontained: {why}")).hint(hint.clone())
        }
        (Mode::Required, Support::Missing { why, hint }) => Finding::new(
            C,
            Severity::Error,
            format!("[run] sandbox = \"required\", but {why}: runners refuse to start"),
        )
        .hint(hint.clone()),
    }
}

/// Whether `[run] check` can start here: its program found on `PATH` (the suite is not run). `None` without a check,
/// or when the program cannot be told without running it (a script, a relative path).
pub fn check_program(config: &crate::model::Config, local: &crate::config::Local) -> Option<Finding> {
    let s = crate::runner::RunSettings::from_config(&local.apply(config)).ok()?;
    let check = s.check?;
    Some(match crate::agent::missing_program(&check) {
        Some(p) => Finding::new(
            "check",
            Severity::Error,
            format!("[run] check `{}` cannot start here: `{p}` is not on PATH", crate::escape::line(&check)),
        )
        .hint("install it where runners run (the sandbox shows PATH's folders), or change the check: a runner stops at its first landing, no attempt spent"),
        None => Finding::new("check", Severity::Ok, format!("[run] check `{}` can start here", crate::escape::line(&check))),
    })
}

/// `[run] check_baseline` without `check_report`: a change that makes a red suite worse lands unless the check's
/// output counts its failing tests (docs/check.md). `None` otherwise.
pub fn baseline(config: &crate::model::Config, local: &crate::config::Local) -> Option<Finding> {
    let s = crate::runner::RunSettings::from_config(&local.apply(config)).ok()?;
    (s.check.is_some() && s.check_baseline && s.check_report.is_none()).then(|| {
        Finding::new(
            "check",
            Severity::Warn,
            "[run] check_baseline without check_report: on a red suite, a change that breaks more tests is caught only \
             when the check's output counts its failing tests (pytest, cargo test, jest…), and lands otherwise",
        )
        .hint("make the check write a JUnit report and name it: `git swarm config set run.check_report junit.xml` (docs/check.md)")
    })
}

/// Whether this machine's git has what the runner's own rebase uses: `git merge-tree --write-tree` (2.38) to
/// replay a work that conflicts, `--merge-base` and `--attr-source` (2.40) to replay it commit by commit with the
/// target's attributes. `None` when it does.
pub fn git_version() -> Option<Finding> {
    const C: &str = "git";
    let v = crate::gitcmd::version()?;
    let shown = format!("{}.{}", v.0, v.1);
    if v < (2, 38) {
        Some(
            Finding::new(
                C,
                Severity::Warn,
                format!(
                    "git {shown} has no `merge-tree --write-tree`: a task whose rebase conflicts fails its attempt"
                ),
            )
            .hint("install git 2.40 or newer"),
        )
    } else if v < (2, 40) {
        Some(
            Finding::new(C, Severity::Warn, format!("git {shown}: a task whose rebase needs git lands its commits as one, and merges without the target's attributes"))
                .hint("install git 2.40 or newer"),
        )
    } else {
        None
    }
}

/// Whether runners started here would keep the swarm's pull/merge request (`[forge]`): the token they read is in
/// this environment (a warning without: tasks land on the swarm's branch, but no request carries them to the
/// protected one). `None` when the swarm proposes nothing.
pub fn forge(config: &crate::model::Config) -> Option<Finding> {
    const C: &str = "forge";
    let s = match crate::forge::settings(config) {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            return Some(
                Finding::new(C, Severity::Error, e).hint("`git swarm config set forge.<key> <value>` mends it"),
            );
        }
    };
    let what =
        format!("tasks land on {} and one {} request takes them into {}", config.target, s.kind.as_str(), s.base);
    Some(match s.token() {
        Some(_) => Finding::new(C, Severity::Ok, what),
        None => Finding::new(C, Severity::Warn, format!("{what}, but no {} here", s.token_vars().join(" or ")))
            .hint("runners started here land the work without a request; give them the token (docs/forge.md)"),
    })
}

/// The state ref against what this clone saw; returns the tip to read the board at, when there is a good one.
fn state_ref(swarm: &Swarm, repairs: Repairs, out: &mut Vec<Finding>) -> Result<Option<ObjectId>, TxnError> {
    const C: &str = "state-ref";
    let refname = swarm.ref_name();
    let remote = &swarm.remote_label;
    let seen = swarm.seen()?;
    let now = swarm.tip_unchecked()?;
    let rel = swarm.relation(seen, now)?;
    let sh = |id: ObjectId| short(&id.to_string()).to_string();
    match (rel, seen, now) {
        (Relation::Fresh, _, None) => {
            out.push(
                Finding::new(C, Severity::Error, format!("there is no swarm '{}' on {remote}", swarm.name))
                    .hint("create it with `git swarm init`, or name another remote with --remote"),
            );
            Ok(None)
        }
        (Relation::Fresh | Relation::Same | Relation::Ahead, _, Some(tip)) => {
            swarm.check_seen(seen, Some(tip))?;
            let ops = swarm.history(tip, usize::MAX, false)?.len();
            out.push(Finding::new(
                C,
                Severity::Ok,
                format!("{refname} on {remote} at {}: {ops} op(s) since its root", sh(tip)),
            ));
            if ops > LONG_HISTORY {
                out.push(
                    Finding::new(
                        C,
                        Severity::Info,
                        format!("{ops} ops since the root: every new clone fetches them all"),
                    )
                    .hint("`git swarm compact` starts a new root and keeps the history under refs/swarm-archive/"),
                );
            }
            Ok(Some(tip))
        }
        (_, Some(seen), _) if repairs.accept_remote => {
            let kept = swarm.accept_remote(seen, now)?;
            let what = match &kept {
                Some(r) => {
                    format!("took {refname} as it is on {remote}; what this clone saw ({}) is kept at {r}", sh(seen))
                }
                None => format!("took {refname} as it is on {remote}"),
            };
            out.push(Finding::new(C, Severity::Error, describe(rel, &refname, remote, seen, now)).fixed(what));
            Ok(now)
        }
        (Relation::Deleted | Relation::Rewound { .. }, Some(seen), _) => {
            let mut f = Finding::new(C, Severity::Error, describe(rel, &refname, remote, seen, now));
            if let Relation::Rewound { lost } = rel {
                let gone = swarm.history(seen, lost, false)?;
                let list: Vec<String> = gone.iter().take(5).map(|e| e.summary.clone()).collect();
                f.message.push_str(&format!(
                    "; the ops gone: {}{}",
                    list.join("; "),
                    if lost > 5 { "; …" } else { "" }
                ));
            }
            if !repairs.fix {
                out.push(f.hint(format!(
                    "`git swarm doctor --fix` puts {refname} back at {} by compare-and-swap (nothing is lost: {})",
                    sh(seen),
                    if now.is_some() { "the rewound state is an ancestor of it" } else { "the ref is recreated" }
                )));
                swarm.check_seen(Some(seen), now).ok();
                return Ok(None);
            }
            // The newest board any ref of the lineage holds, not an older one this clone happened to see last.
            let to = swarm.newest_known(seen).unwrap_or(seen);
            match swarm.restore(now, to) {
                Ok(Publish::Done) => {
                    let newer = if to != seen {
                        format!(" (newer than {}, which this clone saw)", sh(seen))
                    } else {
                        String::new()
                    };
                    out.push(f.fixed(format!("put {refname} back at {}{newer} on {remote}", sh(to))));
                    Ok(Some(to))
                }
                Ok(Publish::LostRace(reason)) => {
                    out.push(f.hint(format!("the ref moved while doctor repaired it ({reason}); run doctor again")));
                    Ok(None)
                }
                Err(e) => {
                    out.push(f.hint(format!(
                        "cannot restore it from this clone ({e}); a clone that saw it can (`git swarm doctor --fix` \
                         there), else `git swarm doctor --accept-remote` takes the remote's state"
                    )));
                    Ok(None)
                }
            }
        }
        (_, Some(seen), _) => {
            out.push(Finding::new(C, Severity::Error, describe(rel, &refname, remote, seen, now)).hint(format!(
                "two histories cannot be merged by doctor: `git swarm doctor --accept-remote` takes the remote's \
                 (this clone's is kept under refs/swarm-archive/{}/lost-…), or push {} back yourself with \
                 `git push --force-with-lease={refname}:<its tip> <remote> {}:{refname}` to drop the ops written since",
                swarm.name,
                sh(seen),
                seen
            )));
            swarm.check_seen(Some(seen), now).ok();
            Ok(None)
        }
        (_, None, _) => Ok(now),
    }
}

fn describe(rel: Relation, refname: &str, remote: &str, seen: ObjectId, now: Option<ObjectId>) -> String {
    let seen = short(&seen.to_string()).to_string();
    match (rel, now) {
        (Relation::Deleted, _) => format!("{refname} was deleted from {remote} (this clone last saw it at {seen})"),
        (Relation::Rewound { lost }, Some(n)) => format!(
            "{refname} on {remote} went back {lost} op(s), from {seen} (seen by this clone) to {}: somebody pushed an \
             old state over it",
            short(&n.to_string())
        ),
        (_, Some(n)) => format!(
            "{refname} on {remote} was replaced: {} holds neither {seen} (seen by this clone) nor a compaction of it",
            short(&n.to_string())
        ),
        (_, None) => format!("{refname} on {remote} is gone"),
    }
}

/// The board at `tip`: unreadable files, settings, the target branch, expired claims, tasks that can never run,
/// this clone's held records, kept work and archives.
fn board(
    swarm: &Swarm,
    tip: ObjectId,
    now: Timestamp,
    repairs: Repairs,
    out: &mut Vec<Finding>,
) -> Result<(), TxnError> {
    let snap = swarm.store().read_walked(tip, false)?;
    let b = &snap.board;
    for p in &snap.problems {
        out.push(
            Finding::new("board", Severity::Warn, format!("{} (commit {}): {}", p.path, short(&p.commit), p.message))
                .hint("the file is skipped; fix or remove it in the state ref (see docs/reliability.md)"),
        );
    }
    let live = b.tasks.len();
    out.push(Finding::new("board", Severity::Ok, format!("{live} live task(s), {} finished", b.closed.len())));
    for s in b.tasks.values() {
        let t = &s.task;
        if let Some(c) = t.expired_claim(now) {
            out.push(Finding::new(
                "board",
                Severity::Info,
                format!(
                    "{}: the lease of {} (epoch {}) ran out at {}; the next claim takes it over",
                    t.id, c.agent, c.epoch, c.lease_until
                ),
            ));
        }
        if t.status == Status::Open
            && let Some(why) = crate::ops::blocked_for_good(b, t)
        {
            let hint = match crate::ops::blocked_by_failure(b, t) {
                Some((dep, Status::Failed)) => format!(
                    "`git swarm retry {dep}` gives the failed task another go; `git swarm cancel {}` drops this one \
                     (a planner cancels such tasks too)",
                    t.id
                ),
                Some((dep, _)) => format!(
                    "`git swarm retry {dep}` opens the cancelled task again; `git swarm cancel {}` drops this one \
                     (a planner cancels such tasks too)",
                    t.id
                ),
                None => format!(
                    "`git swarm cancel <id>` drops a task of the cycle (made by hand on the state ref), or `git \
                     swarm cancel {}` this one",
                    t.id
                ),
            };
            out.push(Finding::new("board", Severity::Warn, format!("{} can never run: {why}", t.id)).hint(hint));
        }
    }
    match crate::runner::RunSettings::from_config(&b.config) {
        // Said by the CLI, which also repairs it ([`broken_settings`]).
        _ if b.broken_settings.is_some() => {}
        Ok(_) => out.push(Finding::new("settings", Severity::Ok, "swarm.toml is valid")),
        Err(e) => out.push(
            Finding::new("settings", Severity::Error, format!("swarm.toml: {e}"))
                .hint("runners refuse to start until it is fixed"),
        ),
    }
    let target = format!("refs/heads/{}", b.config.target);
    match swarm.fetch_branch(&target) {
        Ok(Some(t)) => {
            out.push(Finding::new(
                "target",
                Severity::Ok,
                format!("{} on {} at {}", b.config.target, swarm.remote_label, short(&t.to_string())),
            ));
            target_history(swarm, tip, &target, t, repairs, out)?;
        }
        Ok(None) => out.push(
            Finding::new(
                "target",
                Severity::Error,
                format!("{} has no branch {}", swarm.remote_label, b.config.target),
            )
            .hint("workers cannot land code until it exists: push it"),
        ),
        Err(e) => out.push(Finding::new("target", Severity::Warn, format!("cannot read {target}: {e}"))),
    }
    held(swarm, b, repairs, out);
    side_refs(swarm, b, repairs, out);
    spend(swarm, tip, out)
}

/// The target's history against what this clone saw of it (`Swarm::check_target`): a rewind that took done tasks'
/// code is an error, named task by task (`--accept-remote` takes the target as it is); one that took none is said.
/// A clone that has no record of the target yet (a person's clone, where git fetched it) looks at every done task
/// instead: a task whose landed commit is in this clone but no longer on the target, with no other landing of it
/// there, lost its code.
fn target_history(
    swarm: &Swarm,
    state: ObjectId,
    branch: &str,
    tip: ObjectId,
    repairs: Repairs,
    out: &mut Vec<Finding>,
) -> Result<(), TxnError> {
    const C: &str = "target";
    let remote = &swarm.remote_label;
    let loss = match swarm.target_seen(branch)? {
        Some(_) => match swarm.check_target(branch, tip)? {
            crate::txn::TargetCheck::Rewound(loss) => loss,
            _ => return Ok(()),
        },
        None => {
            let gone = gone_from(swarm, state, tip)?;
            if gone.is_empty() {
                swarm.check_target(branch, tip)?;
                return Ok(());
            }
            let list: Vec<String> = gone
                .iter()
                .take(10)
                .map(|(id, title, c)| format!("{id} ({}, {})", escape_line(title), short(c)))
                .collect();
            let f = Finding::new(
                C,
                Severity::Error,
                format!(
                    "{} on {remote} holds no landing of {} done task(s) whose landed commit this clone has: {}{}",
                    branch.trim_start_matches("refs/heads/"),
                    gone.len(),
                    list.join(", "),
                    if gone.len() > 10 { ", …" } else { "" }
                ),
            );
            if repairs.accept_remote {
                swarm.accept_target(branch, tip)?;
                out.push(f.fixed("took the target as it is: this clone checks its history from here on"));
            } else {
                out.push(f.hint(
                    "a force-push dropped their code: put it back (the commits are in this clone: `git branch \
                     rescue <commit>`, then merge or push it), or `git swarm doctor --accept-remote` takes the \
                     target as it is",
                ));
            }
            return Ok(());
        }
    };
    let f = Finding::new(C, if loss.gone.is_empty() { Severity::Warn } else { Severity::Error }, loss.describe(remote));
    if loss.gone.is_empty() {
        // Taken (`check_target` recorded it): every done task's code is still there.
        out.push(f);
    } else if repairs.accept_remote {
        swarm.accept_target(branch, tip)?;
        out.push(f.fixed(format!(
            "took {} as it is (its old tip was {}): this clone checks its history from here on",
            branch.trim_start_matches("refs/heads/"),
            loss.seen
        )));
    } else {
        out.push(f.hint(loss.hint(remote)));
    }
    Ok(())
}

/// Done tasks of the board at `state` whose landed commit (a runner's landing of it, `result.commit`) this clone
/// has but the target at `tip` does not hold, and that have no other landing on it: id, title, commit.
fn gone_from(swarm: &Swarm, state: ObjectId, tip: ObjectId) -> Result<Vec<(String, String, String)>, TxnError> {
    let full = swarm.store().read_walked(state, true)?;
    let mut candidates = std::collections::BTreeMap::new();
    for s in full.board.tasks.values().filter(|s| s.task.status == Status::Done) {
        let Some(c) = s.task.result.as_ref().and_then(|r| r.commit.as_deref()) else { continue };
        let Ok(id) = ObjectId::from_hex(c.as_bytes()) else { continue };
        let Ok(commit) = swarm.local.repo.find_commit(id) else { continue };
        let landing = crate::hooks::trailer::read(&commit.message_raw_sloppy().to_string());
        if matches!(landing, crate::hooks::trailer::Mark::Landing { ref task, .. } if *task == s.task.id) {
            candidates.insert(c.to_string(), (s.task.id.clone(), s.task.title.clone()));
        }
    }
    if candidates.is_empty() {
        return Ok(vec![]);
    }
    // Which of them the tip does not hold: one `git rev-list`.
    let mut input: String = candidates.keys().map(|c| format!("{c}\n")).collect();
    input.push_str(&format!("^{tip}\n"));
    let dir = swarm.local.repo.common_dir();
    let lost = run_with_input(dir, &["rev-list", "--stdin"], &input)
        .map_err(|m| TxnError::Store(crate::store::StoreError::Git { context: "git rev-list".into(), message: m }))?;
    let lost: std::collections::BTreeSet<&str> = lost.lines().collect();
    let mut gone: Vec<(String, String, String)> = candidates
        .into_iter()
        .filter(|(c, _)| lost.contains(c.as_str()))
        .map(|(c, (id, title))| (id, title, c))
        .collect();
    if gone.is_empty() {
        return Ok(gone);
    }
    // A rewrite keeps the landings (new commits, the same trailers).
    let named = gone.iter().map(|(id, ..)| (id.clone(), 1..=u64::MAX)).collect();
    let (still, _) = swarm.local.landed_commits(tip, &named, LANDED_DEPTH)?;
    gone.retain(|(id, ..)| !still.contains_key(id));
    Ok(gone)
}

/// `git <args>` in `dir` with `input` on stdin: its stdout, or what it said.
fn run_with_input(dir: &Path, args: &[&str], input: &str) -> Result<String, String> {
    use std::io::Write;
    let mut child = crate::gitcmd::local(dir)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn escape_line(s: &str) -> String {
    crate::escape::line(s).to_string()
}

/// Does `spend.toml` (derived state, what budgets count) agree with what the tasks say they spent? A full read.
fn spend(swarm: &Swarm, tip: ObjectId, out: &mut Vec<Finding>) -> Result<(), TxnError> {
    let full = swarm.store().read_walked(tip, true)?;
    let mut on_tasks: std::collections::BTreeMap<&str, crate::usage::Usage> = Default::default();
    for s in full.board.tasks.values() {
        if let Some(u) = s.task.spent() {
            let e = on_tasks.entry(crate::ops::role_of(s.task.kind)).or_default();
            *e = e.plus(&u);
        }
    }
    let mut disagree = Vec::new();
    for role in ["worker", "planner"] {
        let kept = full.board.spend.total.get(role).copied().unwrap_or_default();
        let told = on_tasks.get(role).copied().unwrap_or_default();
        if (kept.tokens(), kept.cost_usd.unwrap_or_default()) != (told.tokens(), told.cost_usd.unwrap_or_default()) {
            disagree.push(format!("{role}: spend.toml says {kept}, the tasks say {told}"));
        }
    }
    if disagree.is_empty() {
        let total = full.board.spend.grand_total();
        if !total.is_zero() {
            out.push(Finding::new("spend", Severity::Ok, format!("spent {total}; spend.toml agrees with the tasks")));
        }
    } else {
        out.push(Finding::new("spend", Severity::Warn, disagree.join("; ")).hint(
            "spend.toml was edited by hand, or tasks were finished by a git-swarm without spend records; budgets \
                 count spend.toml (see docs/spend.md)",
        ));
    }
    Ok(())
}

/// How far back on the target `doctor` looks for the code of tasks the board does not call done.
pub(crate) const LANDED_DEPTH: usize = 10_000;

/// What [`landed_but_not_done`] found.
#[derive(Debug, Default)]
pub struct Landed {
    /// Task → the commit a runner's landing of one of its claims put on the target.
    pub landed: std::collections::BTreeMap<String, ObjectId>,
    /// Commits on the target that name an open or claimed task but are no landing of a claim of it (the
    /// `commit-msg` hook's trailer, a person's, a forger's): task, commit, why. Never taken as its code.
    pub refused: crate::store::Refused,
}

/// The open or claimed work tasks of `board` whose code a runner's landing put on the target (`target_tip`,
/// first-parent, by their trailers: `Swarm-Task: <id>` alone and `Swarm-Epoch: <n>` of a claim the task had, `n` up
/// to its epoch on the board): what a state ref restored from an older tip, or rewound by hand, shows as still to
/// do although it landed. Each would land a second time. `restored`: the board is older than what landed (doctor
/// just put back an older tip, or took the remote's): the claims the landings were made under may be newer than
/// it, and any epoch counts.
pub fn landed_but_not_done(
    swarm: &Swarm,
    board: &crate::ops::Board,
    target_tip: ObjectId,
    restored: bool,
) -> Result<Landed, TxnError> {
    let waiting: std::collections::BTreeMap<String, std::ops::RangeInclusive<u64>> = board
        .tasks
        .values()
        .filter(|s| matches!(s.task.status, Status::Open | Status::Claimed) && s.task.kind == crate::model::Kind::Work)
        .map(|s| (s.task.id.clone(), 1..=if restored { u64::MAX } else { s.task.epoch }))
        .collect();
    if waiting.is_empty() {
        return Ok(Landed::default());
    }
    let (found, refused) = swarm.local.landed_commits(target_tip, &waiting, LANDED_DEPTH)?;
    Ok(Landed { landed: found.into_iter().map(|(id, (commit, _))| (id, commit)).collect(), refused })
}

/// Did doctor put back (or take) the state ref in this run? Then the board it reads is older than the target.
pub fn restored(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.check == "state-ref" && f.fixed.is_some())
}

/// The finding about [`landed_but_not_done`]: a warning with the way to fix it, or what `--fix` did.
pub fn landed_finding(found: &std::collections::BTreeMap<String, ObjectId>, fixed: Option<usize>) -> Finding {
    let ids: Vec<&str> = found.keys().map(String::as_str).take(10).collect();
    let more = if found.len() > 10 { ", …" } else { "" };
    let f = Finding::new(
        "board",
        Severity::Error,
        format!(
            "{} task(s) are open or claimed although their code is on the target (a state ref restored or rewound to \
             an older board?): {}{more}",
            found.len(),
            ids.join(", ")
        ),
    );
    match fixed {
        Some(n) => f.fixed(format!("finished {n} as done, with the commit that carries each")),
        None => f.hint("`git swarm doctor --fix` finishes them as done (their code would otherwise land twice)"),
    }
}

/// The findings about commits that name an open or claimed task without being a runner's landing of it.
pub fn refused_findings(refused: &[(String, ObjectId, String)], target: &str) -> Vec<Finding> {
    refused
        .iter()
        .map(|(id, commit, why)| {
            let c = commit.to_string();
            Finding::new(
                "target",
                Severity::Warn,
                format!(
                    "commit {} on {target} names {id}, which is not done, but is no runner's landing of a claim of it \
                     ({why}): not taken as its code",
                    short(&c)
                ),
            )
            .hint(format!(
                "if it is {id}'s work, its holder records it: `git swarm done {id} --commit {c}`; else nothing is \
                 to do (a forged or hand-written Swarm-Task: trailer finishes no task)"
            ))
        })
        .collect()
}

/// The refs beside the state ref: work kept for a person to look at, and archives of compacted history.
fn side_refs(swarm: &Swarm, b: &crate::ops::Board, repairs: Repairs, out: &mut Vec<Finding>) {
    let work_prefix = swarm.kept_work_prefix();
    match swarm.remote_refs(&work_prefix) {
        Ok(kept) if !kept.is_empty() => {
            // `<id>/<epoch>` (one per attempt), or `<id>` as earlier versions kept them.
            let names: Vec<&str> = kept.iter().map(|(r, _)| r.trim_start_matches(work_prefix.as_str())).collect();
            let is_done = |name: &&&str| {
                let id = name.split('/').next().unwrap_or_default();
                b.closed.get(id).is_some_and(|c| c.status == Status::Done)
                    || b.tasks.get(id).is_some_and(|t| t.task.status == Status::Done)
            };
            let done = names.iter().filter(is_done).count();
            let mut f = Finding::new(
                "refs",
                Severity::Info,
                format!(
                    "{} kept work branch(es) under {work_prefix} (work that could not land): {}{}",
                    kept.len(),
                    names.join(", "),
                    if done > 0 { format!("; {done} of them for tasks done since") } else { String::new() }
                ),
            )
            .hint(format!("look with `git fetch {} {work_prefix}<id>/<epoch>`", swarm.remote_label));
            if done > 0 {
                if repairs.fix {
                    match swarm.prune_kept_work(b) {
                        Ok(gone) => f = f.fixed(format!("deleted the {} of tasks done since", gone.len())),
                        Err(e) => f = f.hint(format!("could not delete those of done tasks: {e}")),
                    }
                } else {
                    f = f.hint("`git swarm doctor --fix` (or `git swarm compact`) deletes those of tasks done since");
                }
            }
            out.push(f);
        }
        Ok(_) => {}
        Err(e) => out.push(Finding::new("refs", Severity::Warn, format!("cannot list {work_prefix}: {e}"))),
    }
    let archive_prefix = format!("refs/swarm-archive/{}/", swarm.name);
    if let Ok(archives) = swarm.remote_refs(&archive_prefix)
        && !archives.is_empty()
    {
        let names: Vec<&str> = archives.iter().map(|(r, _)| r.trim_start_matches(archive_prefix.as_str())).collect();
        out.push(Finding::new(
            "refs",
            Severity::Info,
            format!(
                "{} archive(s) of compacted history under {archive_prefix}: {} (`git swarm log --archived` reads them)",
                archives.len(),
                names.join(", ")
            ),
        ));
    }
}

/// This clone's records of the epochs its agents claimed under (`.git/swarm/held/<name>/<agent>/<id>`): a record
/// whose task is no longer claimed by that agent under that epoch only costs a file, and is removed by `--fix`.
fn held(swarm: &Swarm, b: &crate::ops::Board, repairs: Repairs, out: &mut Vec<Finding>) {
    let dir = swarm.local.repo.common_dir().join("swarm").join("held").join(&swarm.name);
    let mut stale = Vec::new();
    for agent in read_dir(&dir) {
        let name = file_name(&agent);
        for rec in read_dir(&agent) {
            let id = file_name(&rec);
            let epoch = std::fs::read_to_string(&rec).ok().and_then(|s| s.trim().parse::<u64>().ok());
            let holds = b
                .tasks
                .get(&id)
                .and_then(|s| s.task.claim.as_ref())
                .is_some_and(|c| c.agent == name && Some(c.epoch) == epoch && s_is_claimed(b, &id));
            if !holds {
                stale.push(rec);
            }
        }
    }
    if stale.is_empty() {
        return;
    }
    let mut f = Finding::new(
        "held",
        Severity::Info,
        format!("{} record(s) of claims this clone no longer holds under {}", stale.len(), dir.display()),
    );
    if repairs.fix {
        let removed = stale.iter().filter(|p| std::fs::remove_file(p).is_ok()).count();
        f = f.fixed(format!("removed {removed}"));
    } else {
        f = f.hint("`git swarm doctor --fix` removes them");
    }
    out.push(f);
}

fn s_is_claimed(b: &crate::ops::Board, id: &str) -> bool {
    b.tasks.get(id).is_some_and(|s| s.task.status == Status::Claimed)
}

/// Lock files older than [`STALE_LOCK`] under the refs of this clone and of an in-process remote.
fn locks(swarm: &Swarm, repairs: Repairs, out: &mut Vec<Finding>) {
    let mut dirs = vec![swarm.local.repo.common_dir().to_path_buf()];
    if let Reach::Path(store) = swarm.remote.reach() {
        dirs.push(store.repo.common_dir().to_path_buf());
    }
    let mut stale = Vec::new();
    for d in &dirs {
        for f in [d.join("packed-refs.lock"), d.join("index.lock"), d.join("HEAD.lock")] {
            if is_stale(&f) {
                stale.push(f);
            }
        }
        find_locks(&d.join("refs"), &mut stale, 0);
    }
    if stale.is_empty() {
        out.push(Finding::new("locks", Severity::Ok, "no stale lock files"));
        return;
    }
    let list: Vec<String> = stale.iter().map(|p| p.display().to_string()).collect();
    let mut f = Finding::new(
        "locks",
        Severity::Warn,
        format!(
            "lock file(s) older than {} s, left by killed git processes: {}",
            STALE_LOCK.as_secs(),
            list.join(", ")
        ),
    );
    if repairs.fix {
        let removed = stale.iter().filter(|p| std::fs::remove_file(p).is_ok()).count();
        f = f.fixed(format!("removed {removed}"));
    } else {
        f = f.hint("updates of a locked ref fail until the lock goes: `git swarm doctor --fix` removes them");
    }
    out.push(f);
}

fn find_locks(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 16 {
        return;
    }
    for p in read_dir(dir) {
        if p.is_dir() {
            find_locks(&p, out, depth + 1);
        } else if p.extension().is_some_and(|e| e == "lock") && is_stale(&p) {
            out.push(p);
        }
    }
}

fn is_stale(p: &Path) -> bool {
    std::fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_LOCK))
}

/// Runners' work trees whose runner is gone.
fn worktrees(swarm: &Swarm, repairs: Repairs, out: &mut Vec<Finding>) {
    let common = swarm.local.repo.common_dir().to_path_buf();
    let places = crate::runner::Places::of(&common);
    let all = crate::runner::worktrees(&places);
    let stray: Vec<_> = all.iter().filter(|(_, _, alive)| !alive).collect();
    if stray.is_empty() {
        let live = all.len();
        out.push(Finding::new("worktrees", Severity::Ok, format!("no stray work trees ({live} of live runners)")));
        return;
    }
    let names: Vec<&str> = stray.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut f = Finding::new(
        "worktrees",
        Severity::Warn,
        format!("work tree(s) of runners that are gone: {}", names.join(", ")),
    );
    if repairs.fix {
        for (name, path, _) in &stray {
            crate::runner::remove_runner_worktree(&places, &common, name, path);
        }
        crate::runner::sweep_legacy_worktrees(&places.home, &common);
        let _ = crate::runner::git::run(&common, &["worktree", "prune"]);
        f = f.fixed(format!("removed {}", stray.len()));
    } else {
        f = f.hint("the next runner in this clone removes them; `git swarm doctor --fix` does it now");
    }
    out.push(f);
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.sort();
    v
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}
