//! The push budget of a fleet on one repository of a forge.
//!
//! Each forge has a ceiling of pushes a minute to one repository ([`Forge`]: GitHub asks for at most 6; GitLab
//! documents request limits, from which `docs/gitlab-ci.md` derives its figure). A worker pushes once per
//! completed task (its code, the task's `done` and its next claim ride in one atomic push), plus one push per
//! lease renewal while a task runs, plus one per lost race (a push refused because another agent moved the state
//! ref first; it is retried on the new state). `docs/github-actions.md` turns this into a table.

use std::time::Duration;

/// A forge's ceiling of pushes a minute to one repository, and how to name it in a warning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Forge {
    /// `GitHub`, `GitLab`.
    pub name: &'static str,
    /// The pushes a minute to one repository the fleet plans for.
    pub pushes_per_minute: f64,
    /// Where the figure comes from, as a warning says it ("GitHub recommends at most 6 a repository").
    pub says: &'static str,
    /// The page of git-swarm's documentation that explains the budget.
    pub doc: &'static str,
}

/// GitHub: at most 6 pushes a minute to one repository (its recommendation).
pub(crate) const GITHUB: Forge = Forge {
    name: "GitHub",
    pushes_per_minute: 6.0,
    says: "GitHub recommends at most 6 a repository",
    doc: "docs/github-actions.md",
};

/// GitLab: no documented push ceiling, but request limits per user (docs/gitlab-ci.md, *The push budget*): 60
/// pushes a minute keeps a fleet's Git HTTPS traffic (each landing a fetch and a push, a handful of requests each)
/// far inside GitLab.com's 10,000 authenticated Git HTTPS requests a minute of the token's user.
pub(crate) const GITLAB: Forge = Forge {
    name: "GitLab",
    pushes_per_minute: 60.0,
    says: "git-swarm plans for at most 60 a GitLab repository",
    doc: "docs/gitlab-ci.md",
};

/// Push attempts per completed task, lost races included, measured by `bench/runner.py` (`docs/performance.md`):
/// 1.25 for one worker (its first claim is a push of its own; later claims ride in landings) — the figure for
/// workers whose tasks end at different moments, as tasks of minutes do.
#[cfg(test)]
const ATTEMPTS_SPREAD: f64 = 1.25;

/// The same with every worker finishing in the same instant (the benchmark's worst case): 1.7–2.1 at 8 workers,
/// 2.2–2.8 at 16–32.
pub(crate) const ATTEMPTS_CONTENDED: f64 = 2.5;

/// Lease renewals while one task of length `task` runs under a lease of `lease`: the runner renews when a third
/// of the lease is left (`Runner::try_renew`), so every two thirds of the lease.
pub(crate) fn renewals_per_task(task: Duration, lease: Duration) -> u64 {
    let period = (lease.as_millis() * 2 / 3).max(1);
    let task = task.as_millis();
    if task == 0 { 0 } else { u64::try_from((task - 1) / period).unwrap_or(u64::MAX) }
}

/// Pushes a minute of one worker that runs tasks of length `task` back to back.
pub(crate) fn pushes_per_worker_minute(task: Duration, lease: Duration, attempts_per_task: f64) -> f64 {
    let minutes = task.as_secs_f64() / 60.0;
    if minutes <= 0.0 {
        return f64::INFINITY;
    }
    (attempts_per_task + renewals_per_task(task, lease) as f64) / minutes
}

/// The most workers that stay within GitHub's budget (at least 1: one worker is always allowed).
#[cfg(test)]
fn max_workers(task: Duration, lease: Duration, attempts_per_task: f64) -> u64 {
    GITHUB.max_workers(task, lease, attempts_per_task)
}

/// [`Forge::max_batching_jobs`] of GitHub.
#[cfg(test)]
fn max_batching_jobs(lease: Duration) -> u64 {
    GITHUB.max_batching_jobs(lease)
}

impl Forge {
    /// The most workers that stay within this forge's budget (at least 1: one worker is always allowed).
    pub(crate) fn max_workers(&self, task: Duration, lease: Duration, attempts_per_task: f64) -> u64 {
        let per_worker = pushes_per_worker_minute(task, lease, attempts_per_task);
        let n = (self.pushes_per_minute / per_worker).floor();
        if n.is_finite() && n >= 1.0 { n as u64 } else { 1 }
    }

    /// The most runner jobs of several agents each (`run worker --agents`, batched landings, one pacer a job) that
    /// stay within this forge's budget under a lease of `lease`: a job waits `jobs · 60 s / budget` between pushes,
    /// and a wait is capped at a sixth of the lease (`txn::Pacer`), past which the jobs together push faster than
    /// the budget.
    pub(crate) fn max_batching_jobs(&self, lease: Duration) -> u64 {
        let cap = lease.as_secs_f64() / 6.0;
        ((cap * self.pushes_per_minute / 60.0).floor() as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn renewals_follow_the_runners_rule() {
        // Renewed at 2/3 of a 10-minute lease: at 6m40s, 13m20s, 20m, 26m40s.
        assert_eq!(renewals_per_task(2 * MIN, 10 * MIN), 0);
        assert_eq!(renewals_per_task(6 * MIN, 10 * MIN), 0);
        assert_eq!(renewals_per_task(7 * MIN, 10 * MIN), 1);
        assert_eq!(renewals_per_task(30 * MIN, 10 * MIN), 4);
        assert_eq!(renewals_per_task(30 * MIN, 30 * MIN), 1);
        assert_eq!(renewals_per_task(Duration::ZERO, 10 * MIN), 0);
    }

    /// The table of docs/github-actions.md, "The push budget": change both together.
    #[test]
    fn the_documented_table() {
        let rows: Vec<(u32, u64, u64, u64, u64)> = [2u32, 5, 10, 30]
            .iter()
            .map(|&t| {
                let t_d = t * MIN;
                (
                    t,
                    max_workers(t_d, 10 * MIN, ATTEMPTS_SPREAD),
                    max_workers(t_d, 10 * MIN, ATTEMPTS_CONTENDED),
                    max_workers(t_d, 30 * MIN, ATTEMPTS_SPREAD),
                    max_workers(t_d, 30 * MIN, ATTEMPTS_CONTENDED),
                )
            })
            .collect();
        assert_eq!(rows, vec![(2, 9, 4, 9, 4), (5, 24, 12, 24, 12), (10, 26, 17, 48, 24), (30, 34, 27, 80, 51)]);
        assert_eq!(max_workers(Duration::from_secs(1), 10 * MIN, 5.0), 1);
        // docs/github-actions.md, "More than 100 agents": 30 jobs under a 30-minute lease, 10 under the default.
        assert_eq!((max_batching_jobs(30 * MIN), max_batching_jobs(10 * MIN), max_batching_jobs(MIN)), (30, 10, 1));
        assert_eq!(GITHUB.pushes_per_minute, 6.0);
    }

    /// The table of docs/gitlab-ci.md, "The push budget": change both together.
    #[test]
    fn the_documented_gitlab_table() {
        let rows: Vec<(u32, u64, u64, u64, u64)> = [2u32, 5, 10, 30]
            .iter()
            .map(|&t| {
                let t_d = t * MIN;
                (
                    t,
                    GITLAB.max_workers(t_d, 10 * MIN, ATTEMPTS_SPREAD),
                    GITLAB.max_workers(t_d, 10 * MIN, ATTEMPTS_CONTENDED),
                    GITLAB.max_workers(t_d, 30 * MIN, ATTEMPTS_SPREAD),
                    GITLAB.max_workers(t_d, 30 * MIN, ATTEMPTS_CONTENDED),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![(2, 96, 48, 96, 48), (5, 240, 120, 240, 120), (10, 266, 171, 480, 240), (30, 342, 276, 800, 514)]
        );
        // Several agents a job: 100 jobs under the default lease of 10 minutes, 300 under 30 minutes.
        assert_eq!((GITLAB.max_batching_jobs(10 * MIN), GITLAB.max_batching_jobs(30 * MIN)), (100, 300));
    }
}
