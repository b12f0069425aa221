//! The live board as text, for `git swarm watch` and `git swarm up`: one frame from a [`BoardView`]. Every string
//! from the board goes through `escape::line`, so a title cannot move the cursor or forge a line.

use crate::board::BoardView;
use crate::escape::line;
use crate::model::Status;

/// A member of a local fleet (`git swarm up`): its agent id and exit code once it has exited.
pub(super) struct MemberLine<'a> {
    pub agent: &'a str,
    pub exit: Option<i32>,
}

/// The first line of a frame of `git swarm <command>`: the swarm, the remote, the state commit, the clock.
pub(super) fn head(command: &str, swarm: &crate::Swarm, v: &BoardView) -> String {
    format!(
        "git swarm {command} — swarm {} on {} — state {} — {}",
        line(&swarm.name),
        line(&swarm.remote_label),
        v.commit.get(..12).unwrap_or(&v.commit),
        v.now.clock()
    )
}

/// Most holder lines in a frame, so that a frame fits a terminal and redraws in place.
const MAX_AGENT_LINES: usize = 20;

/// Longest text of a task on one line of the frame.
pub(super) const WIDTH: usize = 100;

pub(super) fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Eight levels, for the landings of each minute.
fn sparkline(values: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| if max == 0 || v == 0 { '·' } else { BARS[((v * 7).div_ceil(max) as usize).min(7)] })
        .collect()
}

/// One frame. `head` is the first line (what and where); with `members`, the holders are listed per member of
/// the fleet (idle ones and exited ones too), else per agent that holds something.
pub(super) fn render(v: &BoardView, head: &str, members: Option<&[MemberLine<'_>]>) -> String {
    let mut s = String::new();
    s.push_str(head);
    s.push('\n');
    summary_lines(&mut s, v);
    s.push('\n');
    holder_lines(&mut s, v, members);
    latest_lines(&mut s, v);
    s
}

/// Counts, landings per minute, the last verdict, failures, the spend, unreadable files.
fn summary_lines(s: &mut String, v: &BoardView) {
    // A planner holds its plans all cycle long: those are planning, not work in hand.
    let plans = v.holders.iter().filter(|h| h.kind == crate::model::Kind::Plan).count();
    let claimed = v.count(Status::Claimed);
    let claimed = if plans > 0 {
        format!("{} claimed + {plans} plan(s) held", claimed.saturating_sub(plans))
    } else {
        format!("{claimed} claimed")
    };
    s.push_str(&format!(
        "tasks: {} open · {claimed} · {} done · {} failed · {} cancelled — {:.1} landed/min (last {})\n",
        v.count(Status::Open),
        v.count(Status::Done),
        v.count(Status::Failed),
        v.count(Status::Cancelled),
        v.landing_rate,
        v.rate_span(),
    ));
    if !v.landings_per_minute.is_empty() {
        s.push_str(&format!(
            "landings per minute: {} (now: {})\n",
            sparkline(&v.landings_per_minute),
            v.landings_per_minute.last().copied().unwrap_or(0)
        ));
    }
    match &v.cycle {
        Some(c) => s.push_str(&format!(
            "cycle {}: {} ({} at {}) — {}\n",
            c.cycle,
            c.verdict,
            line(&c.by),
            c.at.clock(),
            clip(&line(&c.reasons), WIDTH)
        )),
        None => s.push_str("cycle: no verdict yet\n"),
    }
    if v.failures.attempts_failed > 0 || v.failures.tasks_failed > 0 {
        s.push_str(&format!(
            "failures: {} task(s) failed, {} failed attempt(s)\n",
            v.failures.tasks_failed, v.failures.attempts_failed
        ));
        for f in &v.failures.recent {
            s.push_str(&format!(
                "  {} {} {}: {}\n",
                f.at.clock(),
                f.task,
                line(&f.agent),
                clip(&line(&f.reason), WIDTH)
            ));
        }
    }
    if !v.spend.total.is_zero() {
        let roles: Vec<String> = v
            .spend
            .in_cycle_by_role
            .iter()
            .map(|(role, u)| format!("{role} {}", crate::ops::spent_briefly(u)))
            .collect();
        s.push_str(&format!(
            "spent: {} in all · cycle {}: {}{}\n",
            crate::ops::spent_briefly(&v.spend.total),
            v.spend.cycle,
            crate::ops::spent_briefly(&v.spend.in_cycle),
            if roles.is_empty() { String::new() } else { format!(" ({})", roles.join(", ")) }
        ));
    }
    if v.problems > 0 {
        s.push_str(&format!("unreadable files: {} (git swarm doctor)\n", v.problems));
    }
}

/// Who holds what: per member of the fleet (idle and exited ones too), else per agent that holds something.
fn holder_lines(s: &mut String, v: &BoardView, members: Option<&[MemberLine<'_>]>) {
    let held = |agent: &str| -> Vec<String> {
        v.holders
            .iter()
            .filter(|h| h.agent == agent)
            .map(|h| {
                let lease = if h.expired {
                    format!("expired {}", h.until.clock())
                } else {
                    format!("until {}", h.until.clock())
                };
                let spent = h.usage.as_ref().map(|u| format!(", {}", crate::ops::spent_briefly(u))).unwrap_or_default();
                // What its runner does now, when it runs in this clone.
                let phase = h
                    .run
                    .as_ref()
                    .map(|r| {
                        let secs = v.now.0.saturating_sub(r.phase_since.0) / 1000;
                        format!("{} {}, ", r.phase, crate::board::html::span(secs))
                    })
                    .unwrap_or_default();
                format!("{} {} ({phase}{lease}{spent})", h.task, line(&h.title))
            })
            .collect()
    };
    match members {
        Some(members) => {
            for m in members {
                // A member that hosts agents (`run worker --agents`) holds what `<member>-<n>` hold.
                let mut h = held(m.agent);
                let prefix = format!("{}-", m.agent);
                let mut hosted: Vec<&str> = v
                    .holders
                    .iter()
                    .map(|h| h.agent.as_str())
                    .filter(|a| a.strip_prefix(prefix.as_str()).is_some_and(|n| n.parse::<u32>().is_ok()))
                    .collect();
                hosted.dedup();
                for a in hosted {
                    h.extend(held(a).into_iter().map(|t| format!("{}: {t}", &a[prefix.len()..])));
                }
                // One line a task: a member that hosts several agents shows each (joined, the third was cut off).
                match (m.exit, h.as_slice()) {
                    (Some(code), _) => s.push_str(&format!("  {:<16} exited ({code})\n", line(m.agent))),
                    (None, []) => s.push_str(&format!("  {:<16} idle\n", line(m.agent))),
                    (None, [first, rest @ ..]) => {
                        s.push_str(&format!("  {:<16} {}\n", line(m.agent), clip(first, WIDTH)));
                        for r in rest.iter().take(MAX_AGENT_LINES) {
                            s.push_str(&format!("  {:<16} {}\n", "", clip(r, WIDTH)));
                        }
                    }
                }
            }
        }
        None => {
            let mut agents: Vec<&str> = v.holders.iter().map(|h| h.agent.as_str()).collect();
            agents.dedup();
            if agents.is_empty() {
                s.push_str("holders: nobody holds a task\n");
            } else {
                s.push_str("holders:\n");
            }
            for a in agents.iter().take(MAX_AGENT_LINES) {
                s.push_str(&format!("  {:<16} {}\n", line(a), clip(&held(a).join("; "), WIDTH)));
            }
            if agents.len() > MAX_AGENT_LINES {
                s.push_str(&format!("  … and {} more agents (git swarm status)\n", agents.len() - MAX_AGENT_LINES));
            }
        }
    }
}

/// The newest ops.
fn latest_lines(s: &mut String, v: &BoardView) {
    s.push_str("\nlatest:\n");
    for e in &v.latest {
        let agent = line(e.agent.as_deref().unwrap_or("-"));
        s.push_str(&format!("  {} {:<14} {}\n", e.time.clock(), agent, clip(&line(&e.summary), WIDTH)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_to_the_busiest_minute() {
        assert_eq!(sparkline(&[0, 1, 2, 4]), "·▃▅█");
        assert_eq!(sparkline(&[0, 0]), "··");
    }
}
