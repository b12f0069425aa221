//! Model check of the protocol with `stateright` (see `docs/model.md`).
//!
//! Worker processes, a planner, judges, the state ref and a clock are one state machine; the checker visits every
//! state they can reach and checks the protocol's rules in each. The transitions run the REAL pure ops of
//! `git_swarm_core::ops` (the worker's claim `ops::claim::next_work`, renew, release, done, fail, add, a landing's fold
//! of `done` with the next claim, a batch of two landings, and the judge's verdict `ops::cycle::verdict`) on
//! a real `ops::Board` built from a small abstract board, and `ops::claim::idle` for a worker's decision to exit, so the
//! model checks the code, not a paraphrase of it. Abstracted: git (a commit is a board; the CAS is one atomic step),
//! the agents' work (it ends in done or fail, or never), and absolute time (a lease is the ticks it has left, which
//! keeps the state space finite while time runs on for ever).
//!
//! Run: `cargo nextest run --locked --test model`; the bigger configurations with `cargo test --test model on_request -- --ignored`.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use git_swarm_core::model::{Claim, CycleRecord, Kind, Status, Task, Verdict};
use git_swarm_core::ops::claim::Claimed;
use git_swarm_core::ops::{self, Actor, Board, Change, Closed, DomainError, NewTask, Stored};
use git_swarm_core::time::Timestamp;
use stateright::{Checker, HasDiscoveries, Model, Property};

/// The moment every op is computed at. Time is relative: a lease is kept as the ticks it has left, and given to the
/// real ops as `lease_until = NOW + left` (an expired one as `NOW`), see [`to_board`].
const NOW: Timestamp = Timestamp(1_800_000_000_000);
/// One tick of the model's clock.
const TICK_SECS: u64 = 1;
/// Most tasks a board can hold: the biggest configuration's and one duplicate `add` (a mutant).
const MAX_TASKS: usize = 4;
/// The planner's agent number (never renamed by the symmetry reduction, never a claim's agent).
const PLANNER_NO: u8 = u8::MAX;
const PLANNER: &str = "planner";
/// Judges are agents `judge0`, `judge1`, … numbered from here (outside the workers' symmetry, as the planner).
const JUDGE_NO: u8 = 200;

// -----------------------------------------------------------------------------------------------------------------
// Configuration.

/// What the model explores, and which protections it has (all on, except in the mutant tests).
#[derive(Debug, Clone)]
struct Cfg {
    /// Worker processes at the start: agents `w0`, `w1`, ….
    workers: u8,
    /// Tasks on the board at the start.
    tasks_at_start: u8,
    /// Tasks the planner adds in its one `add`: 1, or 0 for no planner.
    planned: u8,
    /// The lease, in ticks.
    lease: u8,
    /// `max_attempts` of `swarm.toml`.
    max_attempts: u32,
    /// Crashes (a process dies at any step) and interrupts (a worker releases its claim and exits), in all.
    faults: u8,
    /// Restarts of a frozen holder: a new process with the agent id of one that holds a claim and has stopped
    /// answering, but is not dead — it may wake up.
    spawns: u8,
    /// Pushes whose answer is lost (the CAS took the commit or not; the writer does not know), in all.
    lost_answers: u8,
    /// Renewals, in all.
    renews: u8,
    /// The CAS compares the ref with the writer's base (off: a force push — a mutant).
    cas_checks_base: bool,
    /// Holders name their epoch in renew, done, fail, release (off: only the agent id is checked — a mutant).
    fence_with_epoch: bool,
    /// After a lost answer the writer looks for its commit on the ref before it re-applies (off: a mutant).
    settle_in_doubt: bool,
    /// Landings that publish half, in all: the remote takes the target branch (the code) and fails the state ref,
    /// and the writer reads a refusal.
    half_landings: u8,
    /// Whoever next looks at a claimed task whose code is on the target finishes it with a state-only `done`
    /// instead of landing the code again (off: a mutant).
    roll_forward: bool,
    /// Batches of two landings (`runner::desk`: two holders of one runner process land in one atomic update), in all.
    batches: u8,
    /// Judges, each saying `stop` at the end of cycle 1 (`ops::cycle::verdict`) whenever it likes.
    judges: u8,
    /// Claims read the judge's stop on the board they claim from (`ops::claim::next_work`, a landing's next claim)
    /// (off: a mutant that reads it once, before).
    claims_read_the_stop: bool,
}

impl Cfg {
    /// 3 agents and 2 tasks (one on the board, one added by a planner), lease 2 ticks, 2 attempts, and no faults.
    fn base() -> Cfg {
        Cfg {
            workers: 3,
            tasks_at_start: 1,
            planned: 1,
            lease: 2,
            max_attempts: 2,
            faults: 0,
            spawns: 0,
            lost_answers: 0,
            renews: 0,
            cas_checks_base: true,
            fence_with_epoch: true,
            settle_in_doubt: true,
            half_landings: 0,
            roll_forward: true,
            batches: 0,
            judges: 0,
            claims_read_the_stop: true,
        }
    }

    /// Two judges that race to say `stop` while 2 workers claim, land and fail (and a planner adds), with a lost
    /// push answer and a crash: the stop is recorded once, and no claim lands after it.
    fn judges() -> Cfg {
        Cfg { workers: 2, judges: 2, lost_answers: 1, faults: 1, ..Cfg::base() }
    }

    /// Batches of two landings beside single ones, a crash and a renewal: a holder whose lease ran out leaves the
    /// batch, the other lands with its next claim.
    fn batches() -> Cfg {
        Cfg { batches: 2, faults: 1, renews: 1, ..Cfg::base() }
    }

    /// A landing that publishes half, and a crash: the next claimant may be the one to roll it forward.
    fn half_landings() -> Cfg {
        Cfg { half_landings: 1, faults: 1, ..Cfg::base() }
    }

    /// A crash at any step or an interrupt, a lost push answer, a renewal.
    fn crashes() -> Cfg {
        Cfg { faults: 1, lost_answers: 1, renews: 1, ..Cfg::base() }
    }

    /// A frozen holder restarted under its own agent id, and woken up.
    fn restarts() -> Cfg {
        Cfg { spawns: 1, ..Cfg::base() }
    }

    /// On request (ignored test): crashes, lost answers and restarts together.
    fn everything() -> Cfg {
        Cfg { spawns: 1, ..Cfg::crashes() }
    }

    /// On request (ignored test): [`Cfg::crashes`] with 3 tasks (two on the board, one planned).
    fn three_tasks() -> Cfg {
        Cfg { tasks_at_start: 2, ..Cfg::crashes() }
    }

    fn lease(&self) -> Duration {
        ticks(self.lease)
    }
}

fn ticks(n: u8) -> Duration {
    Duration::from_secs(u64::from(n) * TICK_SECS)
}

// -----------------------------------------------------------------------------------------------------------------
// State.

/// A task as the ops see it. Titles, failure records and results are written by the real ops, but no op reads
/// them: [`project`] drops them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct T {
    status: Status,
    epoch: u8,
    attempts: u8,
    claim: Option<C>,
}

/// A claim: agent, epoch, and the ticks its lease has left (0: expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct C {
    agent: u8,
    epoch: u8,
    left: u8,
}

/// What a process believes it holds (the runner's `Held`): task, epoch, ticks left of the lease it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct H {
    task: u8,
    epoch: u8,
    left: u8,
}

/// The op a process runs through the transaction loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Op {
    /// `claim` without id (the worker loop).
    Claim,
    /// A landing: `done` of the held task folded with the claim of the next ready task, one commit.
    Finish,
    /// `fail` of the held task folded with the claim of another ready task.
    Fail,
    /// `renew` of the held task.
    Renew,
    /// `release` of the held task (on a signal), then exit.
    Release,
    /// The planner's `add` of one task.
    Add,
    /// A judge's `stop` for cycle 1.
    Verdict,
}

impl Op {
    /// An op of a claim's holder, checked against its epoch.
    fn of_holder(self) -> bool {
        matches!(self, Op::Finish | Op::Fail | Op::Renew | Op::Release)
    }
}

/// What an op computed on the tip: the board of its commit, and what its writer learns when it lands.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Out {
    board: Vec<T>,
    /// The claim its writer holds afterwards (a claim, a landing's next claim, a renewal).
    next: Option<H>,
    /// `Change::epoch`: the epoch the op acted under (for a holder's op: the epoch of the claim it ended).
    epoch: Option<u8>,
    /// A bit per task that this commit marks done.
    done: u8,
    /// The tasks whose code was on the target when the op read it.
    code_seen: u8,
    /// The judge's stop is on the state after this commit.
    stop: bool,
}

/// Why an op published nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    Domain(DomainError),
    /// A worker's claim found the judge's stop (`Claimed::Stopped`): it exits.
    Stopped,
    /// A judge found the cycle judged already: its verdict does not stand, and it exits.
    Spoken,
}

impl From<DomainError> for Refusal {
    fn from(e: DomainError) -> Refusal {
        Refusal::Domain(e)
    }
}

/// Where a process is in its loop (`runner::worker::run_loop` around `txn::Swarm::transact`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Pc {
    /// Wants to claim (a worker) or to add (the planner).
    Idle,
    /// Its claim found nothing ready: it reads the board again, and exits when the swarm is idle.
    IdleCheck,
    /// Works on its claim: it may finish, fail, renew, release — or stay frozen as long as it likes.
    Holding,
    /// Lost a race, or did not find its in-doubt commit: it reads the newest state and re-applies `op`.
    Ready(Op),
    /// Applied `op` to the tip; the CAS is next. When another commit lands first, a correct CAS refuses this one,
    /// so the process is put back to `Ready(op)` at once (the refused CAS changes nothing but the process). Only
    /// a CAS that does not check (a mutant) keeps it here, `stale`, and notes whether another writer saw success
    /// since (`acked_since`).
    InFlight {
        op: Op,
        out: Out,
        stale: bool,
        acked_since: bool,
    },
    /// Pushed, and the answer was lost; `landed`: the CAS took the commit.
    Doubt {
        op: Op,
        landed: bool,
        out: Out,
    },
    Exited,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct P {
    /// Agent number (`w<n>`), or [`PLANNER_NO`].
    agent: u8,
    pc: Pc,
    held: Option<H>,
}

impl P {
    fn planner(&self) -> bool {
        self.agent == PLANNER_NO
    }

    fn judge(&self) -> bool {
        (JUDGE_NO..PLANNER_NO).contains(&self.agent)
    }

    fn gone(&self) -> bool {
        matches!(self.pc, Pc::Exited | Pc::Dead)
    }
}

/// Ghost state: not part of the system, only watched by the rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct Ghost {
    /// Per task: landed commits that marked it done (counted up to 2).
    done: [u8; MAX_TASKS],
    /// Per task: times its code landed on the target (counted up to 2).
    landings: [u8; MAX_TASKS],
    /// A `done` landed for a task whose code was on the target already (a roll-forward): by its holder
    /// ([`ROLLED_BY_HOLDER`]: the landing's retry, a takeover), by a sweep ([`ROLLED_BY_SWEEP`]).
    rolled: u8,
    /// Per task (a bit each): failed while its code was on the target, by a sweep that read the target before the
    /// code landed (a race docs/reliability.md names).
    raced: u8,
    /// Rules seen broken when the ref moved, a bit each (`BROKE_*`); once set, they stay.
    broke: u8,
    /// A batch of two landed ([`BATCH_LANDED`]), a batch's landing left it, refused ([`BATCH_LEFT`]).
    batched: u8,
    /// Stop verdicts of cycle 1 that landed (counted up to 2).
    verdicts: u8,
    /// A judge found the cycle judged ([`JUDGED_SECOND`]); a worker's claim found the stop ([`CLAIM_STOPPED`]).
    judged: u8,
}

const JUDGED_SECOND: u8 = 1;
const CLAIM_STOPPED: u8 = 2;

const BATCH_LANDED: u8 = 1;
const BATCH_LEFT: u8 = 2;

const ROLLED_BY_HOLDER: u8 = 1;
const ROLLED_BY_SWEEP: u8 = 2;

const BROKE_REWOUND: u8 = 1;
const BROKE_LOST_ACK: u8 = 2;
const BROKE_EPOCH_BACK: u8 = 4;
const BROKE_UNFINAL: u8 = 8;
const BROKE_STALE_LANDED: u8 = 16;
const BROKE_FAILED_LANDED: u8 = 32;
const BROKE_CLAIM_AFTER_STOP: u8 = 64;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct S {
    /// The board at the state ref's tip.
    tip: Vec<T>,
    /// A bit per task whose code (a commit with its `Swarm-Task:` trailer) is on the target branch.
    code: u8,
    /// The judge's stop of cycle 1 is on the state ref (`cycles/1.toml`).
    stopped: bool,
    /// The processes, sorted (their order means nothing; see [`Swarm::canonical`]).
    procs: Vec<P>,
    faults: u8,
    spawns: u8,
    lost_answers: u8,
    renews: u8,
    half_landings: u8,
    batches: u8,
    ghost: Ghost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    /// The clock moves one tick: every lease ages (on the ref, in commits in flight, in the processes' memory).
    Tick,
    /// Process `i` takes its next step; a holder chooses its op.
    Step(usize, Option<Op>),
    /// The CAS of process `i`, whose answer is lost.
    CasAnswerLost(usize),
    Crash(usize),
    /// A new process with the agent id of process `i`, a frozen holder that may wake up.
    Spawn(usize),
    /// The landing of process `i` publishes half: the target takes the code, the state ref fails; the process
    /// reads a refusal.
    HalfLanding(usize),
    /// Holders `i` and `j` (agents of one runner process) land in one batch: read, both landings' state halves by
    /// `ops::land::land_batch`, one CAS with both codes — a step, as a CAS that loses puts it back to the read.
    Batch(usize, usize),
}

// -----------------------------------------------------------------------------------------------------------------
// Between the abstract board and the real one.

fn task_id(i: usize) -> String {
    format!("t-{:06x}", i + 1)
}

fn task_index(id: &str) -> usize {
    let n = id.strip_prefix("t-").and_then(|h| usize::from_str_radix(h, 16).ok()).expect("ids are minted as t-<hex>");
    n.checked_sub(1).expect("ids start at t-000001")
}

fn agent_name(a: u8) -> String {
    match a {
        PLANNER_NO => PLANNER.to_string(),
        JUDGE_NO.. => format!("judge{}", a - JUDGE_NO),
        _ => format!("w{a}"),
    }
}

fn agent_no(name: &str) -> u8 {
    name.strip_prefix('w').and_then(|n| n.parse().ok()).expect("only workers hold claims")
}

fn small(n: u64, what: &str) -> u8 {
    u8::try_from(n).unwrap_or_else(|_| panic!("{what} {n} is too big for the model"))
}

/// The board an op reads, as the store gives it to ops: live tasks in full, finished ones by path only.
fn to_board(cfg: &Cfg, b: &[T]) -> Board {
    let mut board = Board::default();
    board.config.max_attempts = cfg.max_attempts;
    board.config.lease = cfg.lease();
    for (i, t) in b.iter().enumerate() {
        let id = task_id(i);
        if t.status.is_final() {
            board.closed.insert(id.clone(), Closed { status: t.status, path: ops::closed_path(t.status, &id) });
            continue;
        }
        let task = Task {
            id: id.clone(),
            title: format!("task {}", i + 1),
            body: String::new(),
            kind: Kind::Work,
            status: t.status,
            priority: 0,
            deps: vec![],
            labels: vec![],
            parent: None,
            acceptance: String::new(),
            scope: vec![],
            plan_round: 0,
            attempts: u32::from(t.attempts),
            epoch: u64::from(t.epoch),
            created_by: Some(PLANNER.into()),
            // Older first, in the order of the ids, as `add` wrote them.
            created_at: Some(Timestamp(NOW.0 - 60_000 + i as u64)),
            claim: t.claim.map(|c| Claim {
                agent: agent_name(c.agent),
                epoch: u64::from(c.epoch),
                lease_until: NOW.plus(ticks(c.left)),
            }),
            result: None,
            failures: vec![],
            usage: None,
            claim_usage: None,
        };
        board.tasks.insert(id.clone(), Stored { path: ops::task_path(&id), task });
    }
    board
}

fn abs_claim(c: &Claim) -> C {
    let left_ms = c.lease_until.0.saturating_sub(NOW.0);
    assert_eq!(left_ms % (TICK_SECS * 1000), 0, "leases are whole ticks: {c:?}");
    C { agent: agent_no(&c.agent), epoch: small(c.epoch, "epoch"), left: small(left_ms / (TICK_SECS * 1000), "lease") }
}

fn abs_task(t: &Task) -> T {
    let claim = t.claim.as_ref().map(abs_claim);
    assert_eq!(claim.is_some(), t.status == Status::Claimed, "a claim exactly when claimed: {t:?}");
    T { status: t.status, epoch: small(t.epoch, "epoch"), attempts: small(u64::from(t.attempts), "attempts"), claim }
}

/// The abstract board of `after` (a real board: `base` with a change applied). A finished task that the change did
/// not write is known by path only, as in the op view: it keeps what `base` knew of it.
fn project(base: &[T], after: &Board) -> Vec<T> {
    let mut out: Vec<T> = base.to_vec();
    let mut ids: BTreeSet<usize> = after.tasks.keys().map(|id| task_index(id)).collect();
    ids.extend(after.closed.keys().map(|id| task_index(id)));
    for i in ids {
        let t = match (after.tasks.get(&task_id(i)), after.closed.get(&task_id(i))) {
            (Some(s), _) => abs_task(&s.task),
            (None, Some(c)) => {
                let known = base.get(i).expect("a task known by path only was on the base");
                assert_eq!(known.status, c.status, "a closed task keeps its status");
                *known
            }
            (None, None) => unreachable!("the ids come from the board"),
        };
        if i < out.len() {
            out[i] = t;
        } else {
            assert_eq!(i, out.len(), "ids are minted in order");
            out.push(t);
        }
    }
    assert!(out.len() <= MAX_TASKS, "too many tasks for the model: {out:?}");
    out
}

fn held_of(t: &Task) -> Option<H> {
    let c = abs_claim(t.claim.as_ref()?);
    Some(H { task: small(task_index(&t.id) as u64, "task"), epoch: c.epoch, left: c.left })
}

// -----------------------------------------------------------------------------------------------------------------
// The model.

struct Swarm {
    cfg: Cfg,
    /// Reduce the states by the symmetry of the workers (off: counterexamples keep the agents' names).
    symmetry: bool,
    /// Tells the configurations apart in the caches of [`Swarm::compute_cached`].
    cfg_key: u64,
}

impl Swarm {
    fn new(cfg: Cfg) -> Swarm {
        use std::hash::{Hash, Hasher};
        assert!(cfg.planned <= 1 && cfg.workers <= 8, "the model has one planner with one task, a few workers");
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{cfg:?}").hash(&mut h);
        Swarm { cfg, symmetry: true, cfg_key: h.finish() }
    }

    /// Run `op` of process `p` on the board `base` with the real ops, as `transact` does (read → apply).
    fn compute(&self, base: &[T], code: u8, stopped: bool, p: &P, op: Op) -> Result<Out, Refusal> {
        let board = to_board(&self.cfg, base);
        // What a claim reads of the judge's stop: the board it claims from (a mutant: never).
        let seen_stop = stopped && self.cfg.claims_read_the_stop;
        let actor = Actor { agent: agent_name(p.agent), now: NOW };
        let lease = self.cfg.lease();
        let held_id = || task_id(usize::from(p.held.expect("a holder's op needs a claim").task));
        let epoch = p.held.filter(|_| self.cfg.fence_with_epoch).map(|h| u64::from(h.epoch));
        let (ch, next): (Change, Option<Task>) = match op {
            Op::Claim => {
                // The worker loop looks up the expired claims a sweep would fail, on the target as it reads it now
                // (`Claimed::LookUp`, answered at once here).
                let code_of = gix::ObjectId::from_hex(&[b'c'; 40]).expect("hex");
                let looked_up = ops::claim::sweep_candidates(&board, NOW)
                    .into_iter()
                    .map(|id| {
                        let on_target = self.cfg.roll_forward && code & (1 << task_index(&id)) != 0;
                        (id, on_target.then_some(code_of))
                    })
                    .collect();
                let budget = git_swarm_core::usage::Limit::default();
                match ops::claim::next_work(&board, &actor, seen_stop.then_some(1), &looked_up, &budget)? {
                    (_, Claimed::Stopped(_)) => return Err(Refusal::Stopped),
                    (ch, Claimed::Task(t)) => (ch, t.map(|t| *t)),
                    (_, other) => panic!("the model does not expect {other:?}"),
                }
            }
            Op::Finish => {
                let (ch, _) = ops::done(&board, &actor, &held_id(), epoch, Some("c0de".into()), None, None)?;
                ops::land::then_claim(&board, &actor, ch, !seen_stop, lease, None)
            }
            Op::Fail => {
                let id = held_id();
                let (ch, _) = ops::fail(&board, &actor, &id, epoch, ops::Failing::because("the agent failed"))?;
                ops::land::then_claim(&board, &actor, ch, !seen_stop, lease, Some(&id))
            }
            Op::Verdict => {
                // What the judge reads of the cycles: the record of cycle 1, when one is on the ref.
                let last = stopped.then(|| CycleRecord {
                    cycle: 1,
                    verdict: Verdict::Stop,
                    reasons: String::new(),
                    by: String::new(),
                    at: NOW,
                    tasks_done: 0,
                    tasks_failed: 0,
                    usage: None,
                    spent: None,
                });
                let said = ops::cycle::Said {
                    cycle: 1,
                    verdict: Verdict::Stop,
                    reasons: "enough",
                    tasks_done: 0,
                    tasks_failed: 0,
                    usage: None,
                };
                let mut mint = || unreachable!("a stop files no plan");
                let (ch, stands) = ops::cycle::verdict(&board, &actor, &said, last.as_ref(), None, &mut mint)?;
                if !stands {
                    return Err(Refusal::Spoken);
                }
                (ch, None)
            }
            Op::Renew => {
                let (ch, tasks) = ops::renew(&board, &actor, Some(&held_id()), epoch, lease, None)?;
                (ch, tasks.into_iter().next())
            }
            Op::Release => (ops::release(&board, &actor, &held_id(), epoch, None)?.0, None),
            Op::Add => {
                // Every attempt mints afresh, from the same sequence: a re-applied add draws an id that is not on
                // the board yet, as `mint_id` (random) would.
                let mut k = usize::from(self.cfg.tasks_at_start);
                let mut mint = || {
                    k += 1;
                    task_id(k - 1)
                };
                let new = vec![NewTask { title: "planned".into(), ..Default::default() }];
                (ops::add(&board, &actor, new, &mut mint)?.0, None)
            }
        };
        // `transact` publishes nothing for an empty change; none of these ops makes one when it succeeds.
        assert!(!ch.is_empty(), "{op:?} succeeded without a change");
        let mut after = board;
        ops::apply(&mut after, &ch);
        let board = project(base, &after);
        let done = board
            .iter()
            .enumerate()
            .filter(|(i, t)| t.status == Status::Done && base.get(*i).is_none_or(|b| b.status != Status::Done))
            .fold(0u8, |m, (i, _)| m | (1 << i));
        let next = if matches!(op, Op::Release | Op::Add) { None } else { next.as_ref().and_then(held_of) };
        let stop = stopped || op == Op::Verdict;
        Ok(Out { board, next, epoch: ch.epoch.map(|e| small(e, "epoch")), done, code_seen: code, stop })
    }

    /// [`Swarm::compute`], remembered: the same few boards come up again and again.
    fn compute_cached(&self, base: &[T], code: u8, stopped: bool, p: &P, op: Op) -> Result<Out, Refusal> {
        type Key = (u64, Vec<T>, u8, bool, u8, Option<H>, Op);
        thread_local! {
            static SEEN: std::cell::RefCell<std::collections::HashMap<Key, Result<Out, Refusal>>> =
                Default::default();
        }
        let key = (self.cfg_key, base.to_vec(), code, stopped, p.agent, p.held, op);
        if let Some(hit) = SEEN.with(|m| m.borrow().get(&key).cloned()) {
            return hit;
        }
        let res = self.compute(base, code, stopped, p, op);
        SEEN.with(|m| m.borrow_mut().insert(key, res.clone()));
        res
    }

    /// Process `i` reads the tip and applies `op`: a commit in flight, or a refusal handled as the runner does.
    fn start(&self, s: &mut S, i: usize, op: Op) {
        match self.compute_cached(&s.tip, s.code, s.stopped, &s.procs[i], op) {
            Ok(out) => s.procs[i].pc = Pc::InFlight { op, out, stale: false, acked_since: false },
            Err(Refusal::Domain(e)) => refused(&mut s.procs[i], op, e),
            Err(why) => {
                s.ghost.judged |= if why == Refusal::Stopped { CLAIM_STOPPED } else { JUDGED_SECOND };
                s.procs[i].held = None;
                s.procs[i].pc = Pc::Exited;
            }
        }
    }

    /// The CAS of process `i`'s commit; `true` when the ref took it. The rules that hold whenever the ref moves are
    /// checked here.
    fn cas(&self, s: &mut S, i: usize) -> bool {
        let Pc::InFlight { op, out, stale, acked_since } = &s.procs[i].pc else { unreachable!("a commit in flight") };
        if *stale && self.cfg.cas_checks_base {
            unreachable!("a correct CAS never meets a stale commit: it is put back to Ready when the ref moves");
        }
        let g = &mut s.ghost;
        if *stale {
            g.broke |= BROKE_REWOUND;
            if *acked_since {
                g.broke |= BROKE_LOST_ACK;
            }
        }
        for (old, new) in s.tip.iter().zip(out.board.iter().map(Some).chain(std::iter::repeat(None))) {
            let Some(new) = new else {
                g.broke |= BROKE_UNFINAL | BROKE_EPOCH_BACK; // a task vanished
                continue;
            };
            if new.epoch < old.epoch {
                g.broke |= BROKE_EPOCH_BACK;
            }
            if old.status.is_final() && new.status != old.status {
                g.broke |= BROKE_UNFINAL;
            }
        }
        if op.of_holder() && s.procs[i].held.map(|h| h.epoch) != out.epoch {
            g.broke |= BROKE_STALE_LANDED;
        }
        for (t, n) in g.done.iter_mut().enumerate() {
            if out.done & (1 << t) != 0 {
                *n = (*n + 1).min(2);
            }
        }
        for (t, (old, new)) in s.tip.iter().zip(&out.board).enumerate() {
            if s.code & (1 << t) != 0 && new.status == Status::Failed && old.status != Status::Failed {
                if out.code_seen & (1 << t) != 0 {
                    g.broke |= BROKE_FAILED_LANDED;
                } else {
                    g.raced |= 1 << t;
                }
            }
        }
        if *op == Op::Claim && out.done != 0 {
            g.rolled |= ROLLED_BY_SWEEP;
        }
        // A claim (a worker's, or a landing's next one) on a state that holds the judge's stop.
        if s.stopped && matches!(op, Op::Claim | Op::Finish | Op::Fail) && out.next.is_some() {
            g.broke |= BROKE_CLAIM_AFTER_STOP;
        }
        if *op == Op::Verdict {
            g.verdicts = (g.verdicts + 1).min(2);
        }
        if *op == Op::Finish {
            let t = usize::from(s.procs[i].held.expect("a landing holds its task").task);
            if s.code & (1 << t) != 0 && self.cfg.roll_forward {
                // The code is there: the landing is the state half alone.
                g.rolled |= ROLLED_BY_HOLDER;
            } else {
                s.code |= 1 << t;
                g.landings[t] = (g.landings[t] + 1).min(2);
            }
        }
        s.tip = out.board.clone();
        s.stopped = out.stop;
        // Every other commit in flight was computed on a board that is no longer the tip.
        for (j, p) in s.procs.iter_mut().enumerate() {
            if let (true, Pc::InFlight { op, stale, .. }) = (j != i, &mut p.pc) {
                if self.cfg.cas_checks_base {
                    p.pc = Pc::Ready(*op);
                } else {
                    *stale = true;
                }
            }
        }
        true
    }

    /// Holders `i` and `j` land in one batch, as `runner::desk` publishes it: a landing refused on the batch's
    /// board leaves the batch (its holder learns its claim is gone) and the other is landed alone, through its own
    /// transaction loop; else one commit marks both done with their code and their next claims, and the rules of
    /// [`Swarm::cas`] are checked on it as on any commit.
    fn batch(&self, s: &mut S, i: usize, j: usize) {
        let board = to_board(&self.cfg, &s.tip);
        let held = |k: usize| s.procs[k].held.expect("a batch's landings hold their tasks");
        let (hi, hj) = (held(i), held(j));
        let ids = [task_id(usize::from(hi.task)), task_id(usize::from(hj.task))];
        let agents = [agent_name(s.procs[i].agent), agent_name(s.procs[j].agent)];
        let landing = |k: usize, h: H| {
            let record = ops::land::Record {
                id: &ids[k],
                epoch: u64::from(h.epoch),
                code: "c0de",
                note: None,
                claim_next: true,
                lease: self.cfg.lease(),
                usage: None,
                cycle_budget: Default::default(),
            };
            (agents[k].as_str(), record)
        };
        let seen_stop = s.stopped && self.cfg.claims_read_the_stop;
        match ops::land::land_batch(&board, NOW, seen_stop, &[landing(0, hi), landing(1, hj)]) {
            Err((k, e)) => {
                s.ghost.batched |= BATCH_LEFT;
                let (out, alone) = if k == 0 { (i, j) } else { (j, i) };
                refused(&mut s.procs[out], Op::Finish, e);
                s.procs[alone].pc = Pc::Ready(Op::Finish);
            }
            Ok((ch, after, nexts)) => {
                assert!(!ch.is_empty(), "a batch landed without a change");
                let tip = project(&s.tip, &after);
                let done = [hi.task, hj.task].iter().fold(0u8, |m, t| m | (1 << t));
                let mut nexts = nexts.iter().map(|n| n.as_ref().and_then(held_of));
                let (ni, nj) = (nexts.next().flatten(), nexts.next().flatten());
                // Holder j's half first (its code lands, its epoch is checked), then i's through the CAS itself.
                let tj = usize::from(hj.task);
                s.code |= 1 << tj;
                s.ghost.landings[tj] = (s.ghost.landings[tj] + 1).min(2);
                if s.tip[tj].epoch != hj.epoch {
                    s.ghost.broke |= BROKE_STALE_LANDED;
                }
                if s.stopped && nj.is_some() {
                    s.ghost.broke |= BROKE_CLAIM_AFTER_STOP;
                }
                let out = Out { board: tip, next: ni, epoch: Some(hi.epoch), done, code_seen: s.code, stop: s.stopped };
                s.procs[i].pc = Pc::InFlight { op: Op::Finish, out: out.clone(), stale: false, acked_since: false };
                assert!(self.cas(s, i), "a batch's CAS is a step");
                self.succeeded(s, i, Op::Finish, &out);
                s.procs[j].held = nj;
                s.procs[j].pc = if nj.is_some() { Pc::Holding } else { Pc::Idle };
                s.ghost.batched |= BATCH_LANDED;
            }
        }
    }

    /// Process `i` learns that its op landed.
    fn succeeded(&self, s: &mut S, i: usize, op: Op, out: &Out) {
        if !self.cfg.cas_checks_base {
            for p in &mut s.procs {
                if let Pc::InFlight { stale: true, acked_since, .. } = &mut p.pc {
                    *acked_since = true;
                }
            }
        }
        let p = &mut s.procs[i];
        match op {
            Op::Claim | Op::Finish | Op::Fail | Op::Renew => {
                p.held = out.next;
                p.pc = if p.held.is_some() { Pc::Holding } else { Pc::Idle };
            }
            Op::Release | Op::Add | Op::Verdict => {
                p.held = None;
                p.pc = Pc::Exited;
            }
        }
    }

    /// The state that stands for every renaming of the workers' agents and every order of the processes (they are
    /// interchangeable: an agent's name only ever meets `==`). Agents are numbered in the order of what they hold
    /// and do; agents that look alike keep their order, which may leave two states for one class (sound, if not
    /// the smallest).
    fn canonical(&self, mut s: S) -> S {
        if !self.symmetry {
            return s;
        }
        let n = usize::from(self.cfg.workers);
        /// What an agent's processes are doing, the claims the tip gives it, and its number now.
        type Signature = (Vec<(Pc, Option<H>)>, Vec<(usize, u8, u8)>, u8);
        let mut sigs: Vec<Signature> = (0..n)
            .map(|a| {
                let mut procs: Vec<(Pc, Option<H>)> =
                    s.procs.iter().filter(|p| usize::from(p.agent) == a).map(|p| (shape(&p.pc), p.held)).collect();
                procs.sort();
                let claims = s
                    .tip
                    .iter()
                    .enumerate()
                    .filter_map(|(t, x)| x.claim.filter(|c| usize::from(c.agent) == a).map(|c| (t, c.epoch, c.left)))
                    .collect();
                (procs, claims, small(a as u64, "agent"))
            })
            .collect();
        sigs.sort();
        let mut to = vec![0u8; n];
        for (rank, sig) in sigs.iter().enumerate() {
            to[usize::from(sig.2)] = small(rank as u64, "agent");
        }
        let r = |a: u8| if usize::from(a) >= n { a } else { to[usize::from(a)] };
        let rb = |b: &mut Vec<T>| b.iter_mut().filter_map(|t| t.claim.as_mut()).for_each(|c| c.agent = r(c.agent));
        rb(&mut s.tip);
        for p in &mut s.procs {
            p.agent = r(p.agent);
            if let Pc::InFlight { out, .. } | Pc::Doubt { out, .. } = &mut p.pc {
                rb(&mut out.board);
            }
        }
        s.procs.sort();
        s
    }
}

/// A process's place without the boards it carries (they name other agents).
fn shape(pc: &Pc) -> Pc {
    let blank = |o: &Out| Out { board: vec![], ..o.clone() };
    match pc {
        Pc::InFlight { op, out, stale, acked_since } => {
            Pc::InFlight { op: *op, out: blank(out), stale: *stale, acked_since: *acked_since }
        }
        Pc::Doubt { op, landed, out } => Pc::Doubt { op: *op, landed: *landed, out: blank(out) },
        pc => pc.clone(),
    }
}

fn refused(p: &mut P, op: Op, e: DomainError) {
    match (op, e) {
        (Op::Claim, DomainError::NothingReady { .. }) => p.pc = Pc::IdleCheck,
        // The claim is gone (taken over, or finished by a twin): the work is kept aside, the worker goes on.
        (Op::Finish | Op::Fail | Op::Renew, _) => {
            p.held = None;
            p.pc = Pc::Idle;
        }
        // A refused release is reported, and the lease runs out; the worker exits either way.
        (Op::Release, _) => {
            p.held = None;
            p.pc = Pc::Exited;
        }
        (op, e) => panic!("the model does not expect {op:?} to be refused: {e}"),
    }
}

fn age(b: &mut [T]) -> bool {
    let mut moved = false;
    for c in b.iter_mut().filter_map(|t| t.claim.as_mut()).filter(|c| c.left > 0) {
        c.left -= 1;
        moved = true;
    }
    moved
}

fn age_held(h: &mut Option<H>) -> bool {
    match h {
        Some(h) if h.left > 0 => {
            h.left -= 1;
            true
        }
        _ => false,
    }
}

impl Model for Swarm {
    type State = S;
    type Action = Action;

    fn init_states(&self) -> Vec<S> {
        let cfg = &self.cfg;
        let mut procs: Vec<P> = (0..cfg.workers).map(|agent| P { agent, pc: Pc::Idle, held: None }).collect();
        if cfg.planned > 0 {
            procs.push(P { agent: PLANNER_NO, pc: Pc::Idle, held: None });
        }
        procs.extend((0..cfg.judges).map(|k| P { agent: JUDGE_NO + k, pc: Pc::Idle, held: None }));
        let open = T { status: Status::Open, epoch: 0, attempts: 0, claim: None };
        let s = S {
            tip: vec![open; usize::from(cfg.tasks_at_start)],
            code: 0,
            stopped: false,
            procs,
            faults: cfg.faults,
            spawns: cfg.spawns,
            lost_answers: cfg.lost_answers,
            renews: cfg.renews,
            half_landings: cfg.half_landings,
            batches: cfg.batches,
            ghost: Ghost::default(),
        };
        vec![self.canonical(s)]
    }

    fn actions(&self, s: &S, actions: &mut Vec<Action>) {
        actions.push(Action::Tick);
        for (i, p) in s.procs.iter().enumerate() {
            match &p.pc {
                Pc::Exited | Pc::Dead => continue,
                Pc::Holding => {
                    actions.push(Action::Step(i, Some(Op::Finish)));
                    // A takeover of a task whose code is on the target rolls it forward before any agent runs:
                    // nothing can fail it.
                    if !(self.cfg.roll_forward && p.held.is_some_and(|h| s.code & (1 << h.task) != 0)) {
                        actions.push(Action::Step(i, Some(Op::Fail)));
                    }
                    if s.renews > 0 {
                        actions.push(Action::Step(i, Some(Op::Renew)));
                    }
                    if s.faults > 0 {
                        actions.push(Action::Step(i, Some(Op::Release)));
                    }
                    if s.spawns > 0 {
                        actions.push(Action::Spawn(i));
                    }
                }
                Pc::InFlight { op, .. } => {
                    actions.push(Action::Step(i, None));
                    if s.lost_answers > 0 {
                        actions.push(Action::CasAnswerLost(i));
                    }
                    // Only a landing that pushes code can publish half (a roll-forward pushes the state ref alone).
                    let pushes_code = p.held.is_some_and(|h| s.code & (1 << h.task) == 0 || !self.cfg.roll_forward);
                    if *op == Op::Finish && s.half_landings > 0 && pushes_code {
                        actions.push(Action::HalfLanding(i));
                    }
                }
                _ => actions.push(Action::Step(i, None)),
            }
            // Two holders whose code is not on the target yet (else the landing would roll forward, alone).
            let unlanded = |p: &P| p.pc == Pc::Holding && p.held.is_some_and(|h| s.code & (1 << h.task) == 0);
            if s.batches > 0 && !p.planner() && unlanded(p) {
                for (j, q) in s.procs.iter().enumerate().skip(i + 1) {
                    if !q.planner() && unlanded(q) {
                        actions.push(Action::Batch(i, j));
                    }
                }
            }
            // A process that holds nothing and has nothing in flight changes nothing by dying: it is as if it
            // paused for ever (which the interleavings cover), so it crashes only with something at stake.
            if s.faults > 0 && (p.held.is_some() || matches!(p.pc, Pc::InFlight { .. } | Pc::Doubt { .. })) {
                actions.push(Action::Crash(i));
            }
        }
    }

    fn next_state(&self, last: &S, action: Action) -> Option<S> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                let mut moved = age(&mut s.tip);
                for p in &mut s.procs {
                    moved |= age_held(&mut p.held);
                    if let Pc::InFlight { out, .. } | Pc::Doubt { out, .. } = &mut p.pc {
                        moved |= age(&mut out.board);
                        moved |= age_held(&mut out.next);
                    }
                }
                if !moved {
                    return None;
                }
            }
            Action::Crash(i) => {
                s.faults -= 1;
                s.procs[i].pc = Pc::Dead;
                s.procs[i].held = None;
            }
            Action::Spawn(i) => {
                s.spawns -= 1;
                s.procs.push(P { agent: s.procs[i].agent, pc: Pc::Idle, held: None });
            }
            Action::HalfLanding(i) => {
                s.half_landings -= 1;
                let t = usize::from(s.procs[i].held.expect("a landing holds its task").task);
                s.code |= 1 << t;
                s.ghost.landings[t] = (s.ghost.landings[t] + 1).min(2);
                // The target moved: every landing in flight (this one too) is refused there, and tried again.
                for p in &mut s.procs {
                    if let Pc::InFlight { op: Op::Finish, .. } = p.pc {
                        p.pc = Pc::Ready(Op::Finish);
                    }
                }
            }
            Action::Batch(i, j) => {
                s.batches -= 1;
                self.batch(&mut s, i, j);
            }
            Action::CasAnswerLost(i) => {
                s.lost_answers -= 1;
                let Pc::InFlight { op, out, .. } = s.procs[i].pc.clone() else { unreachable!("offered in flight") };
                let landed = self.cas(&mut s, i);
                // What the process will learn if it finds its commit: only `next` is read, so the board is dropped
                // (it would only tell otherwise equal states apart).
                let out = Out {
                    board: vec![],
                    epoch: None,
                    done: 0,
                    code_seen: 0,
                    next: out.next.filter(|_| landed),
                    stop: false,
                };
                s.procs[i].pc = Pc::Doubt { op, landed, out };
            }
            Action::Step(i, choice) => match s.procs[i].pc.clone() {
                Pc::Idle if s.procs[i].planner() => self.start(&mut s, i, Op::Add),
                Pc::Idle if s.procs[i].judge() => self.start(&mut s, i, Op::Verdict),
                Pc::Idle => self.start(&mut s, i, Op::Claim),
                Pc::IdleCheck => {
                    // `run_loop`: after "nothing ready", read again; exit when idle, else wait for a change. While
                    // the planner may still add, the workers wait (docs/model.md says why).
                    let planning = s.procs.iter().any(|p| p.planner() && !p.gone());
                    let board = to_board(&self.cfg, &s.tip);
                    let idle = ops::claim::idle(&board, NOW);
                    s.procs[i].pc = if idle && !planning { Pc::Exited } else { Pc::Idle };
                }
                Pc::Holding => {
                    let op = choice.expect("a holder chooses its op");
                    match op {
                        Op::Renew => s.renews -= 1,
                        Op::Release => s.faults -= 1,
                        _ => {}
                    }
                    self.start(&mut s, i, op);
                }
                Pc::Ready(op) => self.start(&mut s, i, op),
                Pc::InFlight { op, out, .. } => {
                    if self.cas(&mut s, i) {
                        self.succeeded(&mut s, i, op, &out);
                    }
                }
                // `settle`: the commit is among the tip's ancestors, so the op is done; else it is applied again.
                Pc::Doubt { op, landed, out } => {
                    if landed && self.cfg.settle_in_doubt {
                        self.succeeded(&mut s, i, op, &out);
                    } else {
                        s.procs[i].pc = Pc::Ready(op);
                    }
                }
                Pc::Exited | Pc::Dead => unreachable!("not offered"),
            },
        }
        Some(self.canonical(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut rules = safety();
        rules.extend(scenarios(&self.cfg));
        rules
    }
}

/// What must always hold.
fn safety() -> Vec<Property<Swarm>> {
    vec![
        Property::always("done at most once", |_, s: &S| s.ghost.done.iter().all(|n| *n <= 1)),
        Property::always("code lands at most once", |_, s: &S| s.ghost.landings.iter().all(|n| *n <= 1)),
        Property::always("a task whose code is seen on the target is never failed", |_, s: &S| {
            s.ghost.broke & BROKE_FAILED_LANDED == 0
        }),
        Property::always(
            "a finished run leaves every task whose code landed done (but for a raced sweep)",
            |_, s: &S| {
                // After the judge's stop nobody claims, so nobody sweeps: what is left is a person's (doctor).
                !ended(s)
                    || s.stopped
                    || s.tip.iter().enumerate().all(|(t, x)| {
                        s.code & (1 << t) == 0 || x.status == Status::Done || s.ghost.raced & (1 << t) != 0
                    })
            },
        ),
        Property::always(
            "a finished run leaves every task done or failed (unless the judge stopped it)",
            |_, s: &S| {
                !ended(s) || s.stopped || s.tip.iter().all(|t| matches!(t.status, Status::Done | Status::Failed))
            },
        ),
        Property::always("no claim lands after the judge's stop", |_, s: &S| {
            s.ghost.broke & BROKE_CLAIM_AFTER_STOP == 0
        }),
        Property::always("a cycle's verdict is recorded once", |_, s: &S| s.ghost.verdicts <= 1),
        Property::always("the ref moves only by a CAS from its tip", |_, s: &S| s.ghost.broke & BROKE_REWOUND == 0),
        Property::always("an op seen to succeed stays in the history", |_, s: &S| s.ghost.broke & BROKE_LOST_ACK == 0),
        Property::always("one live holder per task", |_, s: &S| {
            (0..s.tip.len()).all(|t| s.procs.iter().filter(|p| live_holder(p, t)).count() <= 1)
        }),
        Property::always("epochs only grow", |_, s: &S| s.ghost.broke & BROKE_EPOCH_BACK == 0),
        Property::always("done is final", |_, s: &S| s.ghost.broke & BROKE_UNFINAL == 0),
        Property::always("a stale epoch never gets an op through", |_, s: &S| s.ghost.broke & BROKE_STALE_LANDED == 0),
        Property::always("an add lands once", |m: &Swarm, s: &S| {
            s.tip.len() <= usize::from(m.cfg.tasks_at_start + m.cfg.planned)
        }),
        Property::always("the board is well formed", |_, s: &S| s.tip.iter().all(well_formed)),
    ]
}

/// The scenarios that the rules are about do happen (the rules are not vacuous): each `sometimes`.
fn scenarios(cfg: &Cfg) -> Vec<Property<Swarm>> {
    let mut rules = Vec::new();
    rules.push(Property::sometimes("every task done", |m: &Swarm, s: &S| {
        ended(s)
            && s.tip.len() == usize::from(m.cfg.tasks_at_start + m.cfg.planned)
            && s.tip.iter().all(|t| t.status == Status::Done)
    }));
    rules.push(Property::sometimes("a task failed for good", |_, s: &S| {
        s.tip.iter().any(|t| t.status == Status::Failed)
    }));
    rules.push(Property::sometimes("a holder taken over after its lease ran out", |_, s: &S| {
        s.procs.iter().any(|p| p.pc == Pc::Holding && p.held.is_some_and(|h| superseded(s, h)))
    }));
    if cfg.spawns > 0 {
        rules.push(Property::sometimes("a holder taken over by a process with its own agent id", |_, s: &S| {
            s.procs.iter().any(|p| {
                p.pc == Pc::Holding
                    && p.held.is_some_and(|h| {
                        superseded(s, h) && s.tip[usize::from(h.task)].claim.is_some_and(|c| c.agent == p.agent)
                    })
            })
        }));
    }
    if cfg.lost_answers > 0 {
        rules.push(Property::sometimes("a landed push whose answer was lost", |_, s: &S| {
            s.procs.iter().any(|p| matches!(p.pc, Pc::Doubt { landed: true, .. }))
        }));
    }
    if cfg.half_landings > 0 {
        rules.push(Property::sometimes("a half-published landing rolled forward by its holder", |_, s: &S| {
            s.ghost.rolled & ROLLED_BY_HOLDER != 0
        }));
        rules.push(Property::sometimes("a half-published landing rolled forward by a sweep", |_, s: &S| {
            s.ghost.rolled & ROLLED_BY_SWEEP != 0
        }));
        // The race docs/reliability.md names: it exists (the model finds it), and ends with the code once.
        rules.push(Property::sometimes("a sweep that read the target just before a half landing", |_, s: &S| {
            s.ghost.raced != 0
        }));
        rules.push(Property::sometimes("a half-published task taken over by another agent", |_, s: &S| {
            s.procs
                .iter()
                .any(|p| p.pc == Pc::Holding && p.held.is_some_and(|h| s.code & (1 << h.task) != 0 && h.epoch > 1))
        }));
    }
    if cfg.judges > 0 {
        rules.push(Property::sometimes("the judge's stop ended the run with work left", |_, s: &S| {
            ended(s) && s.stopped && s.tip.iter().any(|t| !t.status.is_final())
        }));
        rules.push(Property::sometimes("a worker's claim found the stop", |_, s: &S| {
            s.ghost.judged & CLAIM_STOPPED != 0
        }));
        if cfg.judges > 1 {
            rules.push(Property::sometimes("a judge found the cycle judged by another", |_, s: &S| {
                s.ghost.judged & JUDGED_SECOND != 0
            }));
        }
    }
    if cfg.batches > 0 {
        rules.push(Property::sometimes("a batch of two landed", |_, s: &S| s.ghost.batched & BATCH_LANDED != 0));
        rules.push(Property::sometimes("a landing refused in a batch left it", |_, s: &S| {
            s.ghost.batched & BATCH_LEFT != 0
        }));
    }
    if cfg.faults > 0 {
        rules.push(Property::sometimes("a claim held by a dead process", |_, s: &S| {
            s.tip
                .iter()
                .filter_map(|t| t.claim)
                .any(|c| s.procs.iter().filter(|p| p.agent == c.agent).all(|p| p.pc == Pc::Dead))
        }));
    }
    rules
}

/// The claim `h` was taken over: the task has been claimed again since (only an expired claim can be).
fn superseded(s: &S, h: H) -> bool {
    s.tip[usize::from(h.task)].epoch > h.epoch
}

/// The run has ended: no process can act any more.
fn ended(s: &S) -> bool {
    s.procs.iter().all(P::gone)
}

/// Process `p` works on task `t` under a lease that it believes live (a process that is ending its claim, or has
/// died, does not count).
fn live_holder(p: &P, t: usize) -> bool {
    let working = match &p.pc {
        Pc::Holding => true,
        Pc::Ready(op) | Pc::InFlight { op, .. } | Pc::Doubt { op, .. } => *op == Op::Renew,
        _ => false,
    };
    working && p.held.is_some_and(|h| usize::from(h.task) == t && h.left > 0)
}

fn well_formed(t: &T) -> bool {
    (t.status == Status::Claimed) == t.claim.is_some() && t.claim.is_none_or(|c| c.epoch == t.epoch && c.epoch > 0)
}

// -----------------------------------------------------------------------------------------------------------------
// Running it.

struct Report {
    states: usize,
    unique: usize,
    depth: usize,
    secs: f64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} unique states ({} generated), max depth {}, {:.1} s",
            self.unique, self.states, self.depth, self.secs
        )
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(4)
}

/// Check `cfg` in full: no counterexample to any `always` rule, an example of every `sometimes` one.
fn check_all(model: Swarm, max_states: usize) -> Report {
    let started = Instant::now();
    let checker = model.checker().threads(threads()).target_state_count(max_states).spawn_bfs().join();
    let report = Report {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        secs: started.elapsed().as_secs_f64(),
    };
    eprintln!("model: {report}");
    for p in checker.model().properties() {
        let found = match (checker.discovery(p.name), p.expectation.discovery_is_failure()) {
            (Some(path), true) => format!("BROKEN by\n{}", story(path)),
            (Some(_), false) => "example found".into(),
            (None, true) => "holds".into(),
            (None, false) => "NO EXAMPLE".into(),
        };
        eprintln!("  {:?} '{}': {found}", p.expectation, p.name);
    }
    checker.assert_properties();
    report
}

/// A path, one line per step: the action, then the board and the processes after it.
fn story(path: stateright::Path<S, Action>) -> String {
    let mut out = String::new();
    for (state, action) in path.into_vec() {
        let board: Vec<String> = state
            .tip
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let claim = t.claim.map(|c| format!(" by {} e{} left {}", agent_name(c.agent), c.epoch, c.left));
                format!("t{}: {} e{} a{}{}", i + 1, t.status, t.epoch, t.attempts, claim.unwrap_or_default())
            })
            .collect();
        let procs: Vec<String> = state
            .procs
            .iter()
            .map(|p| {
                let pc = match &p.pc {
                    Pc::InFlight { op, .. } => format!("{op:?} in flight"),
                    Pc::Doubt { op, landed, .. } => format!("{op:?} in doubt (landed: {landed})"),
                    pc => format!("{pc:?}"),
                };
                let held = p.held.map(|h| format!(" holds t{} e{} left {}", h.task + 1, h.epoch, h.left));
                format!("{} {}{}", agent_name(p.agent), pc, held.unwrap_or_default())
            })
            .collect();
        out.push_str(&format!("  [{}] | {}\n", board.join(", "), procs.join(", ")));
        if let Some(a) = action {
            let who = |i: usize| agent_name(state.procs[i].agent);
            let what = match a {
                Action::Tick => "tick".to_string(),
                Action::Step(i, Some(op)) => format!("{} starts {op:?}", who(i)),
                Action::Step(i, None) => format!("{} steps", who(i)),
                Action::CasAnswerLost(i) => format!("{} pushes, the answer is lost", who(i)),
                Action::Crash(i) => format!("{} crashes", who(i)),
                Action::Spawn(i) => format!("a second {} starts", who(i)),
                Action::HalfLanding(i) => format!("{} lands its code, its state half fails", who(i)),
                Action::Batch(i, j) => format!("{} and {} land in one batch", who(i), who(j)),
            };
            out.push_str(&format!("-> {what}\n"));
        }
    }
    out
}

/// Check a mutant until it breaks one of `rules` (any rule when empty): the rule's name and the story of the run
/// that breaks it (shortest first; without the symmetry reduction, so that the agents keep their names).
fn first_failure(cfg: Cfg, rules: &[&'static str]) -> (&'static str, String) {
    let model = Swarm { symmetry: false, ..Swarm::new(cfg) };
    let until = if rules.is_empty() {
        HasDiscoveries::AnyFailures
    } else {
        HasDiscoveries::AnyOf(rules.iter().copied().collect())
    };
    let checker = model.checker().threads(threads()).finish_when(until).spawn_bfs().join();
    let failed = checker
        .model()
        .properties()
        .into_iter()
        .filter(|p| p.expectation.discovery_is_failure() && (rules.is_empty() || rules.contains(&p.name)))
        .find_map(|p| checker.discovery(p.name).map(|path| (p.name, path)));
    let (name, path) = failed.expect("the mutant must break a rule");
    (name, story(path))
}

/// For working on the model: `GIT_SWARM_MODEL_CFG="spawns=0,faults=0"` changes [`Cfg::everything`]
/// (`symmetry=0` turns the symmetry reduction off), `GIT_SWARM_MODEL_MAX=100000` stops after about that many
/// states.
#[test]
#[ignore = "a tool for working on the model"]
fn explore() {
    let mut cfg = Cfg::everything();
    let mut symmetry = true;
    for kv in std::env::var("GIT_SWARM_MODEL_CFG").unwrap_or_default().split(',').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').expect("key=value");
        let n: u8 = v.parse().expect("a number");
        match k {
            "workers" => cfg.workers = n,
            "tasks" => cfg.tasks_at_start = n,
            "planned" => cfg.planned = n,
            "lease" => cfg.lease = n,
            "attempts" => cfg.max_attempts = u32::from(n),
            "faults" => cfg.faults = n,
            "spawns" => cfg.spawns = n,
            "lost" => cfg.lost_answers = n,
            "renews" => cfg.renews = n,
            "half" => cfg.half_landings = n,
            "judges" => cfg.judges = n,
            "symmetry" => symmetry = n == 1,
            _ => panic!("unknown key {k}"),
        }
    }
    let max = std::env::var("GIT_SWARM_MODEL_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(usize::MAX);
    check_all(Swarm { symmetry, ..Swarm::new(cfg) }, max);
}

/// 3 agents, 2 tasks, with crashes at any step (before a CAS, after it and before the answer, while holding a
/// claim), interrupts (release and exit), a lost push answer, a renewal, and leases that run out.
#[test]
fn the_protocol_holds_through_crashes_and_lost_answers() {
    let r = check_all(Swarm::new(Cfg::crashes()), usize::MAX);
    assert!(r.unique > 100_000, "the model explored too little: {r}");
}

/// 3 agents, 2 tasks, and a holder that freezes, is restarted under its own agent id, and wakes up.
#[test]
fn the_protocol_holds_when_a_frozen_holder_is_restarted_and_wakes() {
    let r = check_all(Swarm::new(Cfg::restarts()), usize::MAX);
    assert!(r.unique > 100_000, "the model explored too little: {r}");
}

/// 3 agents and 3 tasks, with the faults of the first check (about 3.5 minutes, 1.5 GB).
#[test]
#[ignore = "long (minutes): cargo test --locked --test model on_request -- --ignored --nocapture"]
fn three_tasks_on_request() {
    check_all(Swarm::new(Cfg::three_tasks()), usize::MAX);
}

/// 3 agents and 2 tasks with crashes, lost answers and restarts together (about 8.5 minutes, 2.2 GB).
#[test]
#[ignore = "long (minutes): cargo test --locked --test model on_request -- --ignored --nocapture"]
fn everything_at_once_on_request() {
    check_all(Swarm::new(Cfg::everything()), usize::MAX);
}

/// 3 agents, 2 tasks, a landing that publishes half (code on the target, the state ref's update failed) and a crash:
/// the worker's retry, or the next claimant, finishes it without landing the code again.
#[test]
fn the_protocol_holds_with_batches_of_two_landings() {
    let r = check_all(Swarm::new(Cfg::batches()), usize::MAX);
    assert!(r.unique > 50_000, "the model explored too little: {r}");
    eprintln!("batches: {r}");
}

#[test]
fn the_protocol_holds_when_a_landing_publishes_half() {
    let r = check_all(Swarm::new(Cfg::half_landings()), usize::MAX);
    assert!(r.unique > 50_000, "the model explored too little: {r}");
}

/// Mutant: a claimant that does not look for the task's code on the target redoes a half-published landing.
#[test]
fn redoing_a_half_published_landing_is_caught() {
    for rule in ["code lands at most once", "a task whose code is seen on the target is never failed"] {
        let (broken, story) = first_failure(Cfg { roll_forward: false, ..Cfg::half_landings() }, &[rule]);
        eprintln!("no roll-forward: '{broken}' broken by\n{story}");
        assert_eq!(broken, rule, "{story}");
    }
}

/// Mutant: a CAS that does not compare the ref with the writer's base (a plain force push).
#[test]
fn a_cas_that_does_not_check_the_base_is_caught() {
    let cfg = Cfg { cas_checks_base: false, ..Cfg::base() };
    let (rule, story) = first_failure(cfg.clone(), &[]);
    eprintln!("force push: '{rule}' broken by\n{story}");
    assert_eq!(rule, "the ref moves only by a CAS from its tip", "{story}");
    // And what it leads to: two workers on one task, a lost update.
    for rule in ["one live holder per task", "an op seen to succeed stays in the history"] {
        let (broken, story) = first_failure(cfg.clone(), &[rule]);
        eprintln!("force push: '{broken}' broken by\n{story}");
        assert_eq!(broken, rule, "{story}");
    }
}

/// Mutant: holders that do not name their epoch (only the agent id is checked), and a restart under an old id.
#[test]
fn holders_without_epoch_fencing_are_caught() {
    let (rule, story) = first_failure(Cfg { fence_with_epoch: false, ..Cfg::restarts() }, &[]);
    eprintln!("no fencing: '{rule}' broken by\n{story}");
    assert_eq!(rule, "a stale epoch never gets an op through", "{story}");
}

/// Mutant: after a lost answer, the op is applied again without looking for the commit that may have landed.
#[test]
fn replaying_a_push_whose_answer_was_lost_is_caught() {
    let (rule, story) = first_failure(Cfg { settle_in_doubt: false, lost_answers: 1, ..Cfg::base() }, &[]);
    eprintln!("no settle: '{rule}' broken by\n{story}");
    assert_eq!(rule, "an add lands once", "{story}");
}

/// 2 workers, a planner and 2 judges that race to say `stop`, with a lost push answer and a crash: the verdict is
/// recorded once, a claim that lost its race to the stop reads it on the new state and claims nothing (nor does a
/// landing's next claim), and the workers exit.
#[test]
fn the_protocol_holds_when_judges_race_to_stop() {
    let r = check_all(Swarm::new(Cfg::judges()), usize::MAX);
    assert!(r.unique > 20_000, "the model explored too little: {r}");
    eprintln!("judges: {r}");
}

/// Mutant: claims that do not read the stop on the board they claim from (a stop read once, before the loop).
#[test]
fn a_claim_that_does_not_read_the_stop_is_caught() {
    let rule = "no claim lands after the judge's stop";
    let (broken, story) = first_failure(Cfg { claims_read_the_stop: false, ..Cfg::judges() }, &[rule]);
    eprintln!("stop not read: '{broken}' broken by\n{story}");
    assert_eq!(broken, rule, "{story}");
}
