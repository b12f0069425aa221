//! What the audit log gives the board over time: landings per minute and the rate, who held what when (the
//! timeline's segments), throughput in buckets, and the spend of the tasks read over time.

use super::*;

/// The ops of one log entry: the commit's own, then those folded into it (a landing that also claimed; the
/// landings and claims of other agents in a batch, each with its own agent).
pub(super) fn ops_of(e: &LogEntry) -> impl Iterator<Item = (&str, Option<&str>, Option<u64>, Option<&str>)> {
    let first = e.op.as_deref().map(|op| (op, e.task.as_deref(), e.epoch, e.agent.as_deref()));
    first.into_iter().chain(e.also.iter().map(|(op, task, epoch, agent)| {
        (op.as_str(), task.as_deref(), *epoch, agent.as_deref().or(e.agent.as_deref()))
    }))
}

/// Is this op a landing / a failed attempt?
pub(super) fn is_landing(op: &str) -> bool {
    op == "done"
}

pub(super) fn is_failure(op: &str) -> bool {
    op == "fail"
}

/// Landings in each of the last `minutes` minutes before `now`, oldest first.
pub(super) fn per_minute(log: &[LogEntry], now: Timestamp, minutes: usize) -> Vec<u64> {
    let mut out = vec![0u64; minutes];
    for e in log {
        let n = ops_of(e).filter(|(op, ..)| is_landing(op)).count() as u64;
        if n == 0 || e.time > now {
            // A commit from a clock ahead of ours counts in the newest minute.
            if n > 0
                && let Some(last) = out.last_mut()
            {
                *last += n;
            }
            continue;
        }
        let ago = (now.0 - e.time.0) / 60_000;
        if let Ok(ago) = usize::try_from(ago)
            && ago < minutes
        {
            out[minutes - 1 - ago] += n;
        }
    }
    out
}

/// The seconds a landing rate is taken over: `minutes`, or the time since the first op of the swarm when the log
/// holds it (not truncated) and it is younger; at least one second.
pub(super) fn rate_window(log: &[LogEntry], truncated: bool, now: Timestamp, minutes: usize) -> u64 {
    let full = minutes as u64 * 60;
    if full == 0 {
        return 0;
    }
    let first = if truncated { None } else { log.iter().map(|e| e.time).min() };
    match first {
        Some(t) if t < now => (now.0 - t.0).div_ceil(1000).clamp(1, full),
        Some(_) => 1,
        None => full,
    }
}

/// A bucket width of a round number of seconds, so that `buckets` of them cover `span` seconds.
pub(super) fn bucket_width(span: u64, buckets: usize) -> u64 {
    const STEPS: [u64; 14] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];
    let want = span.div_ceil(buckets.max(1) as u64).max(1);
    STEPS.iter().copied().find(|s| *s >= want).unwrap_or_else(|| want.div_ceil(3600) * 3600)
}

/// Landings and failed attempts per bucket, from the oldest op read to `now`.
pub(super) fn throughput(log: &[LogEntry], now: Timestamp, buckets: usize) -> Throughput {
    let Some(first) = log.iter().map(|e| e.time).min() else {
        return Throughput::default();
    };
    let last = log.iter().map(|e| e.time).max().unwrap_or(first).max(now);
    let width = bucket_width(last.secs().saturating_sub(first.secs()) + 1, buckets);
    let start = first.secs() / width * width;
    let n = usize::try_from((last.secs() - start) / width + 1).unwrap_or(1);
    let mut out: Vec<Bucket> =
        (0..n as u64).map(|i| Bucket { start: Timestamp::from_secs(start + i * width), done: 0, failed: 0 }).collect();
    for e in log {
        let Some(b) = usize::try_from((e.time.secs().saturating_sub(start)) / width).ok().and_then(|i| out.get_mut(i))
        else {
            continue;
        };
        for (op, ..) in ops_of(e) {
            b.done += u64::from(is_landing(op));
            b.failed += u64::from(is_failure(op));
        }
    }
    Throughput { bucket_secs: width, buckets: out }
}

/// Claim segments from the log (oldest op first): a `claim` opens one for its task; the holder's `done`, `fail`,
/// `release`, a `cancel`, a `sweep`, or the next claim of the task (a takeover) ends it. A segment the log leaves
/// open is `held` when the snapshot still has the task claimed under that epoch.
pub(super) fn timeline(log: &[LogEntry], snap: &Snapshot, now: Timestamp) -> Vec<Segment> {
    let mut done: Vec<Segment> = Vec::new();
    let mut open: BTreeMap<String, Segment> = BTreeMap::new();
    for e in log.iter().rev() {
        for (op, task, epoch, agent) in ops_of(e) {
            let agent = agent.unwrap_or_default().to_string();
            let Some(task) = task else { continue };
            let end = |outcome: Outcome, open: &mut BTreeMap<String, Segment>, done: &mut Vec<Segment>| {
                if let Some(mut s) = open.remove(task) {
                    s.end = Some(e.time);
                    s.outcome = outcome;
                    done.push(s);
                }
            };
            match op {
                "claim" => {
                    if let Some(s) = open.get(task)
                        && s.epoch == epoch
                        && s.agent == agent
                    {
                        continue; // claiming again is a renewal
                    }
                    end(Outcome::Expired, &mut open, &mut done);
                    open.insert(
                        task.to_string(),
                        Segment {
                            agent: agent.clone(),
                            task: task.to_string(),
                            epoch,
                            start: e.time,
                            end: None,
                            outcome: Outcome::Held,
                        },
                    );
                }
                "done" => end(Outcome::Done, &mut open, &mut done),
                "fail" => end(Outcome::Failed, &mut open, &mut done),
                "release" => end(Outcome::Released, &mut open, &mut done),
                "cancel" => end(Outcome::Cancelled, &mut open, &mut done),
                "sweep" => end(Outcome::Expired, &mut open, &mut done),
                _ => {}
            }
        }
    }
    for (id, mut s) in open {
        let claim =
            snap.board.tasks.get(&id).and_then(|t| t.task.claim.as_ref().filter(|_| t.task.status == Status::Claimed));
        match claim {
            Some(c) if Some(c.epoch) == s.epoch || s.epoch.is_none() => {
                if c.lease_until <= now {
                    s.outcome = Outcome::Expired;
                    s.end = Some(c.lease_until.max(s.start));
                }
            }
            _ => {
                s.outcome = Outcome::Unknown;
                s.end = Some(s.start);
            }
        }
        done.push(s);
    }
    done.sort_by(|a, b| (a.start, &a.agent, &a.task).cmp(&(b.start, &b.agent, &b.task)));
    done
}

/// [`SpendView`] of a snapshot: the totals of `spend.toml`, and by agent and over time from the tasks' attempts.
pub(super) fn spend_view(snap: &Snapshot) -> SpendView {
    let board = &snap.board;
    let mut by_agent: BTreeMap<String, Usage> = BTreeMap::new();
    let mut points: Vec<(Timestamp, Usage)> = Vec::new();
    let mut add = |agent: &str, at: Option<Timestamp>, u: &Usage| {
        let e = by_agent.entry(agent.to_string()).or_default();
        *e = e.plus(u);
        if let Some(at) = at {
            points.push((at, *u));
        }
    };
    for s in board.tasks.values() {
        let t = &s.task;
        let mut failed = Usage::default();
        for f in &t.failures {
            if let Some(u) = &f.usage {
                add(&f.agent, Some(f.at), u);
                failed = failed.plus(u);
            }
        }
        // The attempt that finished the task: what its usage has beyond its failed attempts'.
        if let (Some(r), Some(u)) = (&t.result, &t.usage) {
            let rest = u.since(&failed);
            if !rest.is_zero() {
                add(r.agent.as_deref().unwrap_or("?"), r.at, &rest);
            }
        }
        if let (Some(c), Some(u)) = (&t.claim, &t.claim_usage) {
            add(&c.agent, None, u);
        }
    }
    points.sort_by_key(|(at, _)| *at);
    let mut sum = Usage::default();
    let over_time = points
        .into_iter()
        .map(|(at, u)| {
            sum = sum.plus(&u);
            SpendPoint { at, tokens: sum.tokens(), cost_usd: sum.cost_usd.map(|c| c.dollars()) }
        })
        .collect();
    SpendView {
        total: board.spend.grand_total(),
        by_role: board.spend.total.clone(),
        cycle: board.cycle,
        in_cycle: board.spend.cycle_total(board.cycle),
        in_cycle_by_role: board.spend.of_cycle(board.cycle),
        by_agent,
        over_time,
    }
}
