//! The target branch's history: done tasks whose code a force-push dropped, commits that name an open task without
//! being a runner's landing of it, and tasks whose code is there while the board calls them open (finished, with
//! `--fix`).

use super::*;

/// The target's history against what this clone saw of it (`Swarm::check_target`): a rewind that took done tasks'
/// code is an error, named task by task (`--accept-remote` takes the target as it is); one that took none is said.
/// A clone that has no record of the target yet (a person's clone, where git fetched it) looks at every done task
/// instead: a task whose landed commit is in this clone but no longer on the target, with no other landing of it
/// there, lost its code.
pub(super) fn target_history(
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
            crate::TargetCheck::Rewound(loss) => loss,
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
pub(super) fn gone_from(
    swarm: &Swarm,
    state: ObjectId,
    tip: ObjectId,
) -> Result<Vec<(String, String, String)>, TxnError> {
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
        .map_err(|m| TxnError::Store(crate::StoreError::Git { context: "git rev-list".into(), message: m }))?;
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
pub(super) fn run_with_input(dir: &Path, args: &[&str], input: &str) -> Result<String, String> {
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

pub(super) fn escape_line(s: &str) -> String {
    crate::escape::line(s).to_string()
}

/// How far back on the target `doctor` looks for the code of tasks the board does not call done.
pub(crate) const LANDED_DEPTH: usize = 10_000;

/// What [`landed_but_not_done`] found.
#[derive(Debug, Default)]
pub(super) struct Landed {
    /// Task → the commit a runner's landing of one of its claims put on the target.
    pub landed: std::collections::BTreeMap<String, ObjectId>,
    /// Commits on the target that name an open or claimed task but are no landing of a claim of it (the
    /// `commit-msg` hook's trailer, a person's, a forger's): task, commit, why. Never taken as its code.
    pub refused: crate::Refused,
}

/// The open or claimed work tasks of `board` whose code a runner's landing put on the target (`target_tip`,
/// first-parent, by their trailers: `Swarm-Task: <id>` alone and `Swarm-Epoch: <n>` of a claim the task had, `n` up
/// to its epoch on the board): what a state ref restored from an older tip, or rewound by hand, shows as still to
/// do although it landed. Each would land a second time. `restored`: the board is older than what landed (doctor
/// just put back an older tip, or took the remote's): the claims the landings were made under may be newer than
/// it, and any epoch counts.
pub(super) fn landed_but_not_done(
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
pub(super) fn restored(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.check == "state-ref" && f.fixed.is_some())
}

/// The finding about [`landed_but_not_done`]: a warning with the way to fix it, or what `--fix` did.
pub(super) fn landed_finding(found: &std::collections::BTreeMap<String, ObjectId>, fixed: Option<usize>) -> Finding {
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
pub(super) fn refused_findings(refused: &[(String, ObjectId, String)], target: &str) -> Vec<Finding> {
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

/// [`landed_but_not_done`] on the newest board, and with `fix` the `done` of each (one op); the commits that only
/// name such a task are said.
pub(super) fn finish_landed(swarm: &Swarm, with: &Examine<'_>, restored: bool) -> Result<Vec<Finding>, TxnError> {
    let fix = with.repairs.fix;
    let Ok(Some(snap)) = swarm.try_read(false) else { return Ok(vec![]) };
    let target = format!("refs/heads/{}", snap.board.config.target);
    let Ok(Some(tip)) = swarm.fetch_branch(&target) else { return Ok(vec![]) };
    let found = landed_but_not_done(swarm, &snap.board, tip, restored)?;
    let mut out = refused_findings(&found.refused, &snap.board.config.target);
    let found = found.landed;
    if found.is_empty() {
        return Ok(out);
    }
    if !fix {
        out.push(landed_finding(&found, None));
        return Ok(out);
    }
    let agent = with.agent.to_string();
    let why = format!("finished by doctor ({agent}): its code is on {}", snap.board.config.target);
    let c = swarm.transact(with.retry, with.who, with.clock, |snap, now| {
        let actor = crate::ops::Actor { agent: agent.clone(), now };
        let mut after = snap.board.clone();
        let mut ch = crate::ops::Change::default();
        let mut n = 0;
        for (id, commit) in &found {
            if let Ok((done, _)) = crate::ops::done_found(&after, &actor, id, commit.to_string(), &why) {
                crate::ops::apply(&mut after, &done);
                ch = ch.then(done);
                n += 1;
            }
        }
        Ok((ch, n))
    })?;
    out.push(landed_finding(&found, Some(c.value)));
    Ok(out)
}
