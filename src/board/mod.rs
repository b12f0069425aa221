//! The board as something to look at: a pure [`BoardView`] computed from a snapshot of the state ref and its audit
//! log — counts, who holds what, landings per minute, failures, the last cycle, the plan tree, per-agent timeline
//! segments and throughput over time. `git swarm watch` and `git swarm up` render it as text, `git swarm board
//! --html` as one self-contained page ([`html::render`]), `git swarm board --json` as JSON (`docs/json.md`).
//!
//! Nothing here does I/O: the CLI reads the snapshot, the log and the cycle record and passes them in.

pub(crate) mod html;
pub(crate) mod live;
mod read;
mod series;
pub(crate) mod serve;

pub(crate) use read::{Loaded, RefWatch};
use series::*;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::model::{Kind, Status};
use crate::runner::CycleRecord;
use crate::time::Timestamp;
use crate::usage::Usage;
use crate::{LogEntry, Snapshot};
use crate::{Reach, Swarm, TxnError};

/// The version of the JSON document of `git swarm board --json`.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// How much to compute.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Landings per minute over this many minutes (the newest last).
    pub minutes: usize,
    /// How many recent failures to keep.
    pub recent_failures: usize,
    /// How many of the newest ops to keep as `latest`.
    pub latest: usize,
    /// Throughput buckets over the span of the log read (at most).
    pub buckets: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { minutes: 10, recent_failures: 5, latest: 8, buckets: 30 }
    }
}

/// Everything a board shows, computed once.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BoardView {
    pub version: u32,
    pub swarm: String,
    pub remote: String,
    pub commit: String,
    pub target: String,
    pub now: Timestamp,
    /// Tasks by status (every status, zeros included), in the order of [`Status::ALL`].
    pub counts: BTreeMap<String, usize>,
    pub total: usize,
    /// Open tasks a claim could take now (their deps done), and open tasks that wait on deps not done.
    pub ready: usize,
    pub blocked: usize,
    /// Claimed tasks and their holders (expired leases included, marked).
    pub holders: Vec<Holder>,
    /// Landings (`done` ops) in each of the last [`Options::minutes`] minutes, oldest first.
    pub landings_per_minute: Vec<u64>,
    /// Their mean per minute over [`BoardView::rate_secs`].
    pub landing_rate: f64,
    /// The seconds the rate is taken over: the last [`Options::minutes`] minutes, or since the swarm's first op
    /// when it is younger (10 landings in its first 8 s are 75 a minute, not 1).
    pub rate_secs: u64,
    pub failures: Failures,
    /// The judge's last verdict.
    pub cycle: Option<CycleView>,
    /// Every task read (finished ones too when the snapshot was a full read), in id order.
    pub tasks: Vec<TaskNode>,
    /// Who held what, when: one segment per claim seen in the log.
    pub timeline: Vec<Segment>,
    /// Landings and failed attempts over the span of the log read.
    pub throughput: Throughput,
    /// The newest ops, newest first.
    pub latest: Vec<LatestOp>,
    /// Ops read from the log, and whether older ones were left out (the timeline and throughput start there).
    pub log_ops: usize,
    pub log_truncated: bool,
    /// Files of the state ref that could not be read.
    pub problems: usize,
    /// What the swarm spent.
    pub spend: SpendView,
}

/// What the swarm spent (`docs/spend.md`): all of it and the running cycle's by role (`spend.toml`), by agent and
/// over time (from the attempts of the tasks read).
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct SpendView {
    pub total: Usage,
    pub by_role: BTreeMap<String, Usage>,
    /// The cycle that runs.
    pub cycle: u64,
    pub in_cycle: Usage,
    pub in_cycle_by_role: BTreeMap<String, Usage>,
    /// By the agent that ran the attempt (finished attempts of the tasks read, and live claims as last reported).
    pub by_agent: BTreeMap<String, Usage>,
    /// Spend of finished attempts over time, summed up, oldest first.
    pub over_time: Vec<SpendPoint>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct SpendPoint {
    pub at: Timestamp,
    /// Tokens (input and output) and dollars spent up to `at`.
    pub tokens: u64,
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Holder {
    pub agent: String,
    pub task: String,
    pub title: String,
    pub epoch: u64,
    /// `work` or `plan`: a planner holds the plans it works on (the root plan, the goal, all cycle long).
    pub kind: crate::model::Kind,
    /// When the claim was taken (from the log; `None` when it is older than the log read).
    pub since: Option<Timestamp>,
    pub until: Timestamp,
    pub expired: bool,
    /// What the claim's attempt spent, as last reported.
    pub usage: Option<Usage>,
    /// The fleet the holder belongs to: its agent id without the member suffix `up` and `ci` give (`-w3`,
    /// `-w1-2`, `-p1`, `-judge`), so the members of one `up`, or of one CI run, are one fleet.
    pub fleet: String,
    /// What its runner does now, when it runs in this clone ([`crate::runner::status`]): the ref does not know.
    pub run: Option<HolderRun>,
}

/// A holder's task as its runner in this clone last said.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HolderRun {
    /// `agent`, `conflict`, `rebase`, `check` or `landing`.
    pub phase: &'static str,
    pub phase_since: Timestamp,
    /// When its agent's run began, and the time limit it runs under.
    pub started: Timestamp,
    pub timeout_secs: Option<u64>,
    /// The last line its agent printed (scrubbed), while it runs.
    pub last_line: Option<String>,
}

/// The fleet of an agent id: the id without the suffix of a member of `up` (`<base>-w<n>`, `<base>-w<n>-<m>`,
/// `<base>-p<n>`, `<base>-judge`) or of a CI job (`gha-<run>-<attempt>-w<n>`, `gl-…-w<n>`); an id without one is a
/// fleet of its own.
pub(crate) fn fleet_of(agent: &str) -> &str {
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let member = |s: &str| s == "judge" || ['w', 'p'].iter().any(|c| s.strip_prefix(*c).is_some_and(digits));
    // `<base>-w1-2`: the second agent of worker process 1.
    if let Some((head, n)) = agent.rsplit_once('-')
        && digits(n)
        && let Some((base, w)) = head.rsplit_once('-')
        && !base.is_empty()
        && w.strip_prefix('w').is_some_and(digits)
    {
        return base;
    }
    match agent.rsplit_once('-') {
        Some((base, m)) if !base.is_empty() && member(m) => base,
        _ => agent,
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct Failures {
    /// Tasks whose status is `failed`.
    pub tasks_failed: usize,
    /// Failed attempts recorded on the tasks read (`fail` ops and expired leases taken over).
    pub attempts_failed: usize,
    /// The newest failed attempts, newest first.
    pub recent: Vec<FailureView>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct FailureView {
    pub task: String,
    pub title: String,
    pub agent: String,
    pub epoch: u64,
    pub at: Timestamp,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct CycleView {
    pub cycle: u64,
    pub verdict: String,
    pub reasons: String,
    pub by: String,
    pub at: Timestamp,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskNode {
    pub id: String,
    /// Empty for a finished task known only by its path.
    pub title: String,
    pub kind: Kind,
    pub status: Status,
    pub parent: Option<String>,
    pub deps: Vec<String>,
    pub priority: i64,
    /// The holder of a claimed task.
    pub holder: Option<String>,
    pub attempts: u32,
    /// What the task spent (its claim's so far included).
    pub usage: Option<Usage>,
}

/// How a held claim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    /// Still held (the task is claimed under this epoch now).
    Held,
    Done,
    /// A `fail` (the task may be open again for another attempt).
    Failed,
    Released,
    /// The lease ran out: another claim took the task over, or a sweep recorded it as failed.
    Expired,
    Cancelled,
    /// The log does not say (the task is no longer held under this epoch, but no op that ended it was read).
    Unknown,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Held => "held",
            Outcome::Done => "done",
            Outcome::Failed => "failed",
            Outcome::Released => "released",
            Outcome::Expired => "expired",
            Outcome::Cancelled => "cancelled",
            Outcome::Unknown => "unknown",
        }
    }
}

/// One claim, from its `claim` op to the op that ended it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Segment {
    pub agent: String,
    pub task: String,
    pub epoch: Option<u64>,
    pub start: Timestamp,
    /// `None` while held.
    pub end: Option<Timestamp>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct Throughput {
    /// Bucket width in seconds.
    pub bucket_secs: u64,
    pub buckets: Vec<Bucket>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Bucket {
    pub start: Timestamp,
    pub done: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct LatestOp {
    pub time: Timestamp,
    pub agent: Option<String>,
    pub op: Option<String>,
    pub summary: String,
}

/// What the view is built from (all read by the caller).
pub(crate) struct Input<'a> {
    pub swarm: &'a str,
    pub remote: &'a str,
    pub snapshot: &'a Snapshot,
    /// The audit log, newest first (as [`crate::Store::log`] returns it).
    pub log: &'a [LogEntry],
    /// Was the log cut at a limit (older ops exist)?
    pub log_truncated: bool,
    pub cycle: Option<CycleRecord>,
    pub now: Timestamp,
    /// What this clone's runners do now ([`crate::runner::status::read_all`]; empty: only the ref is shown).
    pub local: &'a [crate::runner::status::LocalRun],
}

/// The holders, the tree's nodes and the failures of every task read (`since`: when each claim began, from the
/// log).
fn tasks_of(
    input: &Input<'_>,
    since: &HashMap<(&str, u64), Timestamp>,
) -> (Vec<Holder>, Vec<TaskNode>, Failures, Vec<FailureView>) {
    let (board, now) = (&input.snapshot.board, input.now);
    let mut holders = Vec::new();
    let mut tasks = Vec::new();
    let mut failures = Failures::default();
    let mut recent = Vec::new();
    for s in board.tasks.values() {
        let t = &s.task;
        let claim = t.claim.as_ref().filter(|_| t.status == Status::Claimed);
        if let Some(c) = claim {
            holders.push(Holder {
                agent: c.agent.clone(),
                task: t.id.clone(),
                title: t.title.clone(),
                epoch: c.epoch,
                kind: t.kind,
                since: since.get(&(t.id.as_str(), c.epoch)).copied(),
                until: c.lease_until,
                expired: c.lease_until <= now,
                usage: t.claim_usage,
                fleet: fleet_of(&c.agent).to_string(),
                run: input
                    .local
                    .iter()
                    .find(|l| l.live.agent == c.agent && l.live.task == t.id && l.live.epoch == c.epoch)
                    .map(|l| HolderRun {
                        phase: l.live.phase.as_str(),
                        phase_since: l.live.phase_since,
                        started: l.live.started,
                        timeout_secs: l.live.timeout_secs,
                        last_line: l.last_line.clone(),
                    }),
            });
        }
        if t.status == Status::Failed {
            failures.tasks_failed += 1;
        }
        failures.attempts_failed += t.failures.len();
        for f in &t.failures {
            recent.push(FailureView {
                task: t.id.clone(),
                title: t.title.clone(),
                agent: f.agent.clone(),
                epoch: f.epoch,
                at: f.at,
                reason: f.reason.clone(),
            });
        }
        tasks.push(TaskNode {
            id: t.id.clone(),
            title: t.title.clone(),
            kind: t.kind,
            status: t.status,
            parent: t.parent.clone(),
            deps: t.deps.clone(),
            priority: t.priority,
            holder: claim.map(|c| c.agent.clone()),
            attempts: t.attempts,
            usage: t.spent(),
        });
    }
    for (id, c) in &board.closed {
        failures.tasks_failed += usize::from(c.status == Status::Failed);
        tasks.push(TaskNode {
            id: id.clone(),
            title: String::new(),
            kind: Kind::Work,
            status: c.status,
            parent: None,
            deps: vec![],
            priority: 0,
            holder: None,
            attempts: 0,
            usage: None,
        });
    }
    (holders, tasks, failures, recent)
}

impl BoardView {
    pub(crate) fn build(input: &Input<'_>, opts: &Options) -> BoardView {
        let board = &input.snapshot.board;
        let now = input.now;
        let mut counts: BTreeMap<String, usize> = Status::ALL.iter().map(|s| (s.as_str().to_string(), 0)).collect();
        for st in board.tasks.values().map(|s| s.task.status).chain(board.closed.values().map(|c| c.status)) {
            *counts.entry(st.as_str().to_string()).or_default() += 1;
        }
        let total = counts.values().sum();
        let open = board.tasks.values().map(|s| &s.task).filter(|t| t.status == Status::Open);
        let (ready, blocked) =
            open.fold(
                (0, 0),
                |(r, b), t| {
                    if crate::ops::waiting_on(board, t).is_empty() { (r + 1, b) } else { (r, b + 1) }
                },
            );

        let timeline = timeline(input.log, input.snapshot, now);
        let since: HashMap<(&str, u64), Timestamp> =
            timeline.iter().filter_map(|s| Some(((s.task.as_str(), s.epoch?), s.start))).collect();

        let (mut holders, mut tasks, mut failures, mut recent) = tasks_of(input, &since);
        tasks.sort_by(|a, b| a.id.cmp(&b.id));
        holders.sort_by(|a, b| (&a.fleet, &a.agent, &a.task).cmp(&(&b.fleet, &b.agent, &b.task)));
        recent.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| a.task.cmp(&b.task)));
        recent.truncate(opts.recent_failures);
        failures.recent = recent;

        let landings_per_minute = per_minute(input.log, now, opts.minutes);
        let rate_secs = rate_window(input.log, input.log_truncated, now, opts.minutes);
        let landing_rate =
            if rate_secs == 0 { 0.0 } else { landings_per_minute.iter().sum::<u64>() as f64 * 60.0 / rate_secs as f64 };
        let cycle = input.cycle.as_ref().map(|c| CycleView {
            cycle: c.cycle,
            verdict: c.verdict.to_string(),
            reasons: c.reasons.clone(),
            by: c.by.clone(),
            at: c.at,
        });
        let latest = input
            .log
            .iter()
            .take(opts.latest)
            .map(|e| LatestOp { time: e.time, agent: e.agent.clone(), op: e.op.clone(), summary: e.summary.clone() })
            .collect();
        BoardView {
            version: SCHEMA_VERSION,
            swarm: input.swarm.to_string(),
            remote: input.remote.to_string(),
            commit: input.snapshot.commit.to_string(),
            target: board.config.target.clone(),
            now,
            counts,
            total,
            ready,
            blocked,
            holders,
            landings_per_minute,
            landing_rate,
            rate_secs,
            failures,
            cycle,
            tasks,
            timeline,
            throughput: throughput(input.log, now, opts.buckets),
            spend: spend_view(input.snapshot),
            latest,
            log_ops: input.log.len(),
            log_truncated: input.log_truncated,
            problems: input.snapshot.problems.len(),
        }
    }

    /// How long the landing rate is taken over: `8 s`, `3 min`, `10 min`.
    pub(crate) fn rate_span(&self) -> String {
        if self.rate_secs < 120 { format!("{} s", self.rate_secs) } else { format!("{} min", self.rate_secs / 60) }
    }

    /// The count of one status.
    pub(crate) fn count(&self, status: Status) -> usize {
        self.counts.get(status.as_str()).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// than the limit, and after a compaction replaced the history it knew.
    #[test]
    fn a_live_board_reads_the_log_since_its_last_state_as_a_fresh_read_does() {
        use crate::Identity;
        use crate::Retry;
        use crate::ops::{self, Actor, NewTask};
        use crate::time::Timestamp;
        // A swarm in a repository of its own, written through the engine as the commands write it, with a judge's
        // verdict on record.
        let dir = tempfile::tempdir().expect("tmp");
        let repo = gix::init_bare(dir.path().join("r.git")).expect("a repository");
        let swarm = crate::open_swarm(repo, None, "default", crate::Transport::Auto).expect("open the swarm");
        let (who, retry) = (Identity { name: "T".into(), email: "t@example.com".into() }, Retry::default());
        let clock = || Timestamp::now_with_offset(0);
        swarm.init(&retry, &who, &clock, &crate::model::Config::default(), "w7").expect("init");
        let mut n = 0;
        let add = |n: &mut usize| {
            *n += 1;
            let title = format!("op {n}");
            swarm
                .transact(&retry, &who, &clock, |snap, now| {
                    let new = NewTask { title: title.clone(), ..NewTask::default() };
                    ops::add(&snap.board, &Actor { agent: "w7".into(), now }, vec![new], &mut ops::mint_id)
                })
                .expect("add");
        };
        add(&mut n);
        swarm
            .transact(&retry, &who, &clock, |snap, now| {
                let (verdict, reasons) = (crate::model::Verdict::Continue, "more");
                let said = ops::cycle::Said { cycle: 1, verdict, reasons, tasks_done: 0, tasks_failed: 0, usage: None };
                ops::cycle::verdict(
                    &snap.board,
                    &Actor { agent: "judge".into(), now },
                    &said,
                    None,
                    None,
                    &mut ops::mint_id,
                )
            })
            .expect("a verdict");
        let commits = |l: &Loaded| l.log.iter().map(|e| e.commit.clone()).collect::<Vec<_>>();
        let check = |live: &mut Loaded, limit: usize, what: &str| {
            let snap = swarm.read(true).expect("read");
            live.advance(&swarm, snap, limit).expect("advance");
            let fresh = Loaded::read(&swarm, true, limit).expect("read");
            assert_eq!(live.snapshot.commit, fresh.snapshot.commit, "{what}");
            assert_eq!(commits(live), commits(&fresh), "{what}");
            assert_eq!(live.log_truncated, fresh.log_truncated, "{what}");
            assert_eq!(live.cycle.as_ref().map(|c| c.cycle), fresh.cycle.as_ref().map(|c| c.cycle), "{what}");
            assert!(live.cycle.is_some(), "{what}: the verdict is read");
        };
        for limit in [2usize, 5, 1_000] {
            let mut live = Loaded::read(&swarm, true, limit).expect("read");
            for ops in [1usize, 4, 9] {
                for _ in 0..ops {
                    add(&mut n);
                }
                check(&mut live, limit, &format!("limit {limit}, {ops} new op(s)"));
            }
            check(&mut live, limit, &format!("limit {limit}, no new op"));
        }
        let mut live = Loaded::read(&swarm, true, 1_000).expect("read");
        assert!(live.log.len() > 20);
        swarm.compact(&retry, &who, &clock, "w7", 0).expect("compact");
        check(&mut live, 1_000, "after a compaction");
        assert!(live.log.len() < 3, "the compacted history: {} ops", live.log.len());
    }

    #[test]
    fn the_members_of_one_fleet_share_its_name() {
        for (agent, fleet) in [
            ("alice-host-w1", "alice-host"),
            ("alice-host-w12-3", "alice-host"),
            ("alice-host-p1", "alice-host"),
            ("alice-host-judge", "alice-host"),
            ("gha-123-1-w4", "gha-123-1"),
            ("w1", "w1"),
            ("-w1", "-w1"),
            ("bob", "bob"),
            ("bob-7", "bob-7"),
            ("build-worker", "build-worker"),
        ] {
            assert_eq!(fleet_of(agent), fleet, "{agent}");
        }
    }

    fn entry(secs: u64, op: &str, task: &str, agent: &str, epoch: Option<u64>) -> LogEntry {
        LogEntry {
            commit: format!("c{secs}"),
            time: Timestamp::from_secs(secs),
            op: Some(op.into()),
            task: Some(task.into()),
            agent: Some(agent.into()),
            epoch,
            summary: format!("{op} {task}"),
            writer: None,
            also: vec![],
        }
    }

    #[test]
    fn landings_per_minute_count_the_minute_they_fell_in() {
        let now = Timestamp::from_secs(10_000);
        // newest first, as the log is
        let log = vec![
            entry(9_990, "done", "t-1", "a", Some(1)),
            entry(9_950, "done", "t-2", "a", Some(1)),
            entry(9_930, "claim", "t-2", "a", Some(1)),
            entry(9_000, "done", "t-3", "b", Some(1)),
            entry(1_000, "done", "t-4", "b", Some(1)),
        ];
        let m = per_minute(&log, now, 10);
        assert_eq!(m.len(), 10);
        assert_eq!(m[9], 2, "{m:?}");
        // 1000 s ago is minute 16: outside the window
        assert_eq!(m.iter().sum::<u64>(), 2);
        let m = per_minute(&log, now, 20);
        assert_eq!(m[20 - 1 - 16], 1, "{m:?}");
    }

    /// A claim in a test: agent, epoch, lease end (seconds).
    type TestClaim<'a> = Option<(&'a str, u64, u64)>;

    fn snapshot(tasks: &[(&str, Status, TestClaim<'_>)]) -> Snapshot {
        let mut board = crate::ops::Board::default();
        for (id, status, claim) in tasks {
            let mut t: crate::model::Task =
                toml::from_str(&format!("id = \"{id}\"\ntitle = \"{id}\"\n")).expect("task");
            t.status = *status;
            t.claim = claim.map(|(agent, epoch, until)| crate::model::Claim {
                agent: agent.into(),
                epoch,
                lease_until: Timestamp::from_secs(until),
            });
            board.tasks.insert(id.to_string(), crate::ops::Stored { path: format!("tasks/{id}.toml"), task: t });
        }
        Snapshot { commit: gix::ObjectId::null(gix::hash::Kind::Sha1), board, problems: vec![] }
    }

    #[test]
    fn timeline_segments_end_with_the_op_that_ended_the_claim() {
        let mut land = entry(60, "done", "t-a", "w1", Some(1));
        land.also.push(("claim".into(), Some("t-c".into()), Some(1), None));
        // newest first
        let log = vec![
            entry(90, "claim", "t-b", "w2", Some(2)),
            land,
            entry(40, "claim", "t-b", "w1", Some(1)),
            entry(20, "claim", "t-a", "w1", Some(1)),
            entry(15, "claim", "t-a", "w1", Some(1)),
            entry(10, "claim", "t-a", "w1", Some(1)),
            entry(5, "claim", "t-d", "w3", Some(4)),
        ];
        let snap = snapshot(&[
            ("t-a", Status::Done, None),
            ("t-b", Status::Claimed, Some(("w2", 2, 1_000))),
            ("t-c", Status::Claimed, Some(("w1", 1, 100))),
            ("t-d", Status::Open, None),
        ]);
        let tl = timeline(&log, &snap, Timestamp::from_secs(120));
        let got: Vec<(&str, &str, u64, Option<u64>, Outcome)> = tl
            .iter()
            .map(|s| (s.agent.as_str(), s.task.as_str(), s.start.secs(), s.end.map(|e| e.secs()), s.outcome))
            .collect();
        assert_eq!(
            got,
            vec![
                // The log does not say how w3's claim ended.
                ("w3", "t-d", 5, Some(5), Outcome::Unknown),
                // Claiming again is a renewal, not a new segment.
                ("w1", "t-a", 10, Some(60), Outcome::Done),
                // w2 took t-b over: w1's lease had run out.
                ("w1", "t-b", 40, Some(90), Outcome::Expired),
                // Claimed in the same commit as the landing; its lease ran out at 100, before now (120).
                ("w1", "t-c", 60, Some(100), Outcome::Expired),
                ("w2", "t-b", 90, None, Outcome::Held),
            ]
        );
        let view = BoardView::build(
            &Input {
                swarm: "s",
                remote: "r",
                snapshot: &snap,
                log: &log,
                log_truncated: false,
                cycle: None,
                now: Timestamp::from_secs(120),
                local: &[],
            },
            &Options::default(),
        );
        let held: Vec<_> =
            view.holders.iter().map(|h| (h.task.as_str(), h.since.map(|t| t.secs()), h.expired)).collect();
        assert_eq!(held, vec![("t-c", Some(60), true), ("t-b", Some(90), false)]);
        assert_eq!(view.throughput.buckets.iter().map(|b| b.done).sum::<u64>(), 1);
    }

    #[test]
    fn bucket_widths_are_round_and_cover_the_span() {
        assert_eq!(bucket_width(10, 30), 1);
        assert_eq!(bucket_width(100, 30), 5);
        assert_eq!(bucket_width(3_600, 30), 120);
        assert_eq!(bucket_width(1_000_000, 30), 36_000);
        for span in [1u64, 7, 59, 61, 999, 86_400, 10_000_000] {
            assert!(bucket_width(span, 30) * 30 >= span, "{span}");
        }
    }
}
