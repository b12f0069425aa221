//! The trailers of a landed commit. A runner's landing writes them on every commit it lands, and nobody else's
//! `Swarm-*` lines survive it: whatever an agent (or a hook, or a person) put in its commit messages is taken out
//! when the runner rebases the work ([`stamp`]). What the target then holds tells a runner's landing of a claim
//! ([`read`]: `Swarm-Task: <id>` and `Swarm-Epoch: <n>`, alone, in the message's last paragraph) from a commit
//! that only names a task (a `Swarm-Task:` of the `commit-msg` hook, of a person, of a forger).

use crate::model::validate_id;

/// The key of the task a landed commit is the code of.
pub(crate) const TASK: &str = "Swarm-Task";
/// The key of the epoch of the claim it was landed under.
pub(crate) const EPOCH: &str = "Swarm-Epoch";

/// Is `line` a `Swarm-*` trailer line, in any spelling git reads as one (`swarm-task:`, `Swarm-Task :`)?
pub(crate) fn is_swarm_line(line: &str) -> bool {
    let Some((key, _)) = line.trim_start().split_once(':') else { return false };
    let key = key.trim_end();
    key.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("swarm-"))
        && key.len() > 6
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `message` without any `Swarm-*` line (wherever it is: a subject, the body, a trailer block) nor the lines that
/// continue one (git folds a trailer over lines that start with white space), trimmed.
pub(crate) fn strip(message: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut dropping = false;
    for line in message.lines() {
        if is_swarm_line(line) {
            dropping = true;
            continue;
        }
        if dropping && line.starts_with([' ', '\t']) && !line.trim().is_empty() {
            continue;
        }
        dropping = false;
        out.push(line);
    }
    let text = out.join("\n");
    text.trim_matches(|c: char| c == '\n' || c == '\r' || c == ' ' || c == '\t').to_string()
}

/// `message` as a runner's landing of claim `epoch` of `task` writes it: without any `Swarm-*` line of whoever
/// wrote it, and with `Swarm-Task: <task>` and `Swarm-Epoch: <epoch>` ending it (in its trailer block, when it
/// ends with one). A message left empty says which task it is. `stamp(stamp(m)) == stamp(m)`.
pub fn stamp(message: &str, task: &str, epoch: u64) -> String {
    let body = strip(message);
    let body = if body.is_empty() { format!("work on {task}") } else { body };
    let lines = format!("{TASK}: {task}\n{EPOCH}: {epoch}\n");
    let last = body.rsplit("\n\n").next().unwrap_or_default();
    let is_trailers = body.contains("\n\n")
        && !last.trim().is_empty()
        && last.lines().all(|l| l.split_once(": ").is_some_and(|(k, _)| !k.is_empty() && !k.contains(' ')));
    if is_trailers { format!("{body}\n{lines}") } else { format!("{body}\n\n{lines}") }
}

/// What a commit message says about the task it is the code of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// No `Swarm-*` line names a task.
    None,
    /// A runner's landing of claim `epoch` of `task`: its two trailers, and no other `Swarm-*` line.
    Landing { task: String, epoch: u64 },
    /// `Swarm-*` lines that name these tasks but are not a landing's (no epoch, several tasks, other `Swarm-*`
    /// keys, or not in the trailer block): never taken as the code of a task.
    Claims { tasks: Vec<String>, why: String },
}

/// Read the mark of a commit message ([`Mark`]).
pub fn read(message: &str) -> Mark {
    let lines: Vec<&str> = message.lines().collect();
    // The last paragraph, when there is one after the subject's: where git reads trailers, and where [`stamp`]
    // writes them.
    let end = lines.iter().rposition(|l| !l.trim().is_empty()).map_or(0, |i| i + 1);
    let start = lines[..end].iter().rposition(|l| l.trim().is_empty()).map(|i| i + 1);
    let (mut tasks, mut epochs, mut odd) = (Vec::new(), Vec::new(), Vec::new());
    for (i, line) in lines.iter().enumerate().filter(|(_, l)| is_swarm_line(l)) {
        let (key, value) = line.trim_start().split_once(':').unwrap_or_default();
        let (key, value) = (key.trim_end(), value.trim());
        // As a runner writes it: `Key: value` in the trailer block, the key spelled as ours.
        let exact = start.is_some_and(|s| i >= s) && *line == format!("{key}: {value}");
        if key.eq_ignore_ascii_case(TASK) {
            if !(exact && key == TASK) {
                odd.push(format!("`{}` is not a trailer a runner writes", line.trim()));
            }
            tasks.push(value.to_string());
        } else if exact && key == EPOCH {
            epochs.push(value.to_string());
        } else {
            odd.push(format!("`{}` is not a trailer of a landing", line.trim()));
        }
    }
    let tasks: Vec<String> = tasks.into_iter().filter(|t| validate_id(t).is_ok()).collect();
    if tasks.is_empty() {
        return Mark::None;
    }
    let why = match (tasks.as_slice(), epochs.as_slice()) {
        _ if !odd.is_empty() => odd.join("; "),
        ([_], []) => "no Swarm-Epoch: trailer (a runner's landing writes the epoch of its claim)".to_string(),
        ([task], [epoch]) => match epoch.parse::<u64>() {
            Ok(epoch) if epoch > 0 => {
                return Mark::Landing { task: task.clone(), epoch };
            }
            _ => format!("Swarm-Epoch: {epoch} is no epoch of a claim"),
        },
        ([_], _) => "more than one Swarm-Epoch: trailer".to_string(),
        _ => format!("{} Swarm-Task: trailers (a landing names one task)", tasks.len()),
    };
    let mut tasks = tasks;
    tasks.sort();
    tasks.dedup();
    Mark::Claims { tasks, why }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_replaces_every_swarm_line_and_is_read_back_as_a_landing() {
        assert_eq!(stamp("fix it\n", "t-1", 2), "fix it\n\nSwarm-Task: t-1\nSwarm-Epoch: 2\n");
        assert_eq!(stamp("fix\n\nbody text", "t-1", 1), "fix\n\nbody text\n\nSwarm-Task: t-1\nSwarm-Epoch: 1\n");
        assert_eq!(
            stamp("fix\n\nSigned-off-by: a <b>\n", "t-1", 1),
            "fix\n\nSigned-off-by: a <b>\nSwarm-Task: t-1\nSwarm-Epoch: 1\n"
        );
        // Another task's trailers, in any spelling and place, folded or not, go.
        let forged = "Swarm-Task: t-9\nfix\n\nswarm-task : t-8\n  continued\nbody\n\nSwarm-Op: done\nSwarm-Task: t-9\n";
        let s = stamp(forged, "t-1", 3);
        assert_eq!(s, "fix\n\nbody\n\nSwarm-Task: t-1\nSwarm-Epoch: 3\n");
        assert_eq!(read(&s), Mark::Landing { task: "t-1".into(), epoch: 3 });
        assert_eq!(stamp(&s, "t-1", 3), s, "a stamp is a fixed point");
        assert_eq!(stamp("Swarm-Task: t-9\n", "t-1", 1), "work on t-1\n\nSwarm-Task: t-1\nSwarm-Epoch: 1\n");
    }

    #[test]
    fn only_a_landings_own_trailers_read_as_one() {
        let claims = |m: &str| matches!(read(m), Mark::Claims { .. });
        assert_eq!(read("fix\n\nSigned-off-by: a <b>\n"), Mark::None);
        assert_eq!(read("fix\n\nSwarm-Task: t-1\nSwarm-Epoch: 4\n\n"), Mark::Landing { task: "t-1".into(), epoch: 4 });
        // What the commit-msg hook writes, and what a person does.
        assert!(claims("fix\n\nSwarm-Task: t-1\n"));
        assert!(claims("fix\n\nSwarm-Task: t-1\nSwarm-Task: t-2\nSwarm-Epoch: 1\n"));
        assert!(claims("fix\n\nSwarm-Task: t-1\nSwarm-Epoch: 0\n"));
        assert!(claims("fix\n\nSwarm-Task: t-1\nSwarm-Epoch: 1\nSwarm-Epoch: 2\n"));
        assert!(claims("fix\n\nSwarm-Task: t-1\nSwarm-Epoch: 1\nSwarm-Op: done\n"));
        // Not in the trailer block, or not as the runner spells them.
        assert!(claims("fix\n\nSwarm-Task: t-1\nSwarm-Epoch: 1\n\nmore text\n"));
        assert!(claims("fix\n\nswarm-task: t-1\nSwarm-Epoch: 1\n"));
        assert!(claims("fix\n\nSwarm-Task: t-1\nswarm-epoch: 1\n"));
        match read("fix\n\nSwarm-Task: t-1\nSwarm-Task: t-2\n") {
            Mark::Claims { tasks, .. } => assert_eq!(tasks, ["t-1", "t-2"]),
            other => panic!("{other:?}"),
        }
    }
}
