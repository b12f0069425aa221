//! The landing desk of a runner process that hosts several agents (`git swarm run worker --agents <n>`): what the
//! agents would each publish on their own — a landing (code and `done`, and the next claim), a claim when idle — they
//! hand to the desk, and the desk publishes everything that is waiting **in one atomic update**: the commits of each
//! landing rebased one after another onto the newest target, every `done` and every claim in one state commit.
//!
//! There is no desk thread. The first agent to arrive while nothing is in flight leads: it takes every request that
//! is waiting (its own too), publishes them as one batch, hands each agent its result, and passes the lead to whoever
//! arrived meanwhile, who takes the next batch. An agent that waits answers the leader's questions about its own work
//! (each rebase runs in the agent's own thread, on its own work tree and claim) and keeps its lease alive.
//!
//! What stays true of one landing stays true of a batch (docs/invariants.md, invariant 35): each task's code lands
//! with its own `done` in the same atomic update or not at all; a task whose rebase needs an agent (a conflict) leaves
//! the batch and lands alone; a task whose claim is gone leaves it before anything is published; a batch that goes in
//! doubt is settled by `txn` as one op (it either landed whole or not at all).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gix::ObjectId;

use super::Runner;
use super::claim::claim_op;
use super::landing::{Abort, Alone, Landed, Landing, Publisher, Recording};
use crate::TxnError;
use crate::model::Task;
use crate::ops::claim::Claimed;
use crate::ops::land::{Record, land_batch};
use crate::ops::{self, Actor, DomainError};
use crate::usage::{Limit, Usage};

mod batch;

use batch::*;

/// Shared by the agents of one runner process.
#[derive(Default)]
pub(crate) struct Desk {
    queue: Mutex<Queue>,
    /// Woken when a request joins (a leader gathering its batch waits on it).
    joined: Condvar,
    /// What the desk published: batches, and the landings and claims in them (for the runner's summary).
    pub figures: Mutex<Figures>,
    /// Each ref's tip (the state ref, a target branch) as an agent of this process last fetched or published it,
    /// and when ([`Desk::shared_tip`]).
    tips: Mutex<BTreeMap<String, (Instant, Option<ObjectId>)>>,
    /// The last state an idle agent of this process judged, and whether it held work ([`Desk::worth_waking`]).
    judged: Mutex<Option<(ObjectId, bool)>>,
}

impl Desk {
    /// The tip of `refname` for an agent of this process that takes one at most `every` old: the one another agent
    /// of the process fetched (or published) within that time, else `fetch`'s, which the others wait for and share.
    /// Idle agents of one process poll the remote once between them, not once each (at the end of a drain, with the
    /// ref moving every round trip, 32 idle agents of a process fetched 5 times a second each); agents that start
    /// together read the settings and the target once between them (8 agents made 53 fetches to land 8 tasks, 40 of
    /// them the same reads at the same moment). A tip a moment old is safe for any read: every write is a
    /// compare-and-swap that a moved ref refuses.
    pub(crate) fn shared_tip(
        &self,
        refname: &str,
        every: Duration,
        fetch: impl FnOnce() -> Result<Option<ObjectId>, TxnError>,
    ) -> Result<Option<ObjectId>, TxnError> {
        let mut tips = lock(&self.tips);
        if let Some(&(at, tip)) = tips.get(refname)
            && at.elapsed() < every
        {
            return Ok(tip);
        }
        let tip = fetch()?;
        tips.insert(refname.to_string(), (Instant::now(), tip));
        Ok(tip)
    }

    /// `refname` is at `tip` now: this process just moved it there.
    pub(crate) fn published(&self, refname: &str, tip: ObjectId) {
        lock(&self.tips).insert(refname.to_string(), (Instant::now(), Some(tip)));
    }

    /// Whether the state `tip` holds something for an idle agent of this process to do: `judge`'s answer, asked
    /// once a state for all the agents of the process (they wait for it and share it), as the tip itself is.
    pub(crate) fn worth_waking(&self, tip: ObjectId, judge: impl FnOnce() -> bool) -> bool {
        let mut judged = lock(&self.judged);
        match *judged {
            Some((t, worth)) if t == tip => worth,
            _ => {
                let worth = judge();
                *judged = Some((tip, worth));
                worth
            }
        }
    }
}

/// What a desk published so far.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Figures {
    /// Updates of the state ref the desk made (each one atomic, with the target branch when it landed code).
    pub batches: u64,
    pub landings: u64,
    pub claims: u64,
    /// The most landings one batch carried.
    pub widest: u64,
}

#[derive(Default)]
struct Queue {
    /// A batch is being published (its leader works on it).
    busy: bool,
    waiting: Vec<Arc<Slot>>,
    /// The agents that use the desk now ([`Desk::enter`]): a batch that holds a request of each needs no wait.
    agents: usize,
}

impl Desk {
    /// An agent starts using the desk (until the guard drops).
    pub(crate) fn enter(self: &Arc<Self>) -> Member {
        lock(&self.queue).agents += 1;
        Member(Arc::clone(self))
    }
}

/// An agent's use of a desk: while it lasts, a leader may wait for its request ([`Desk::enter`]).
pub(crate) struct Member(Arc<Desk>);

impl Drop for Member {
    fn drop(&mut self) {
        let mut q = lock(&self.0.queue);
        q.agents = q.agents.saturating_sub(1);
        self.0.joined.notify_all();
    }
}

/// The state half of one agent's landing, as data the leader can apply for it.
pub(super) struct LandSpec {
    /// `refs/heads/<target>`.
    pub branch: String,
    pub id: String,
    pub epoch: u64,
    pub note: Option<String>,
    pub claim_next: bool,
    pub lease: Duration,
    pub cycle_budget: Limit,
    /// `[run] batch_window`.
    pub window: Duration,
    /// The work as committed: its commits are `base..head`, and whether they are all stamped as this claim's
    /// landing already (`hooks::trailer`). With
    /// `here`, the leader rebases it itself (no check to run in the agent's work tree): no round trip to a thread
    /// that a busy machine may take long to wake.
    pub base: ObjectId,
    pub head: ObjectId,
    pub stamped: bool,
    pub here: bool,
    /// The check is the batch's (`[run] check_policy = "tip"`): prepared unchecked, the work is checked as part of
    /// the batch's tip, once.
    pub tip_check: bool,
    /// Who commits the rebased work (the agent's identity).
    pub who: crate::Identity,
    /// What the attempt spent when the landing was handed in (its agent run is over; a conflict run, which would
    /// add to it, is never the leader's).
    pub usage: Option<Usage>,
}

/// An idle agent's claim of the next work task.
pub(super) struct ClaimSpec {
    /// The expired claims with no attempts left that the agent looked up on the target (see `claim::claim_op`).
    pub looked_up: BTreeMap<String, Option<ObjectId>>,
    pub cycle_budget: Limit,
    /// `[run] batch_window`.
    pub window: Duration,
}

enum What {
    Land(Box<LandSpec>),
    Claim(ClaimSpec),
}

/// One agent's request, and its mailbox while it waits.
struct Slot {
    agent: String,
    what: What,
    mail: Mutex<Mail>,
    cv: Condvar,
}

#[derive(Default)]
struct Mail {
    to_agent: Option<ToAgent>,
    /// The answer to the last `Prepare`: the commit to land (its work rebased onto the given tip) and what the
    /// attempt spent; `None` when the work leaves the batch (the agent keeps why).
    answer: Option<Option<(ObjectId, Option<Usage>)>>,
    /// The answer to the last `Check`.
    verdict: Option<Verdict>,
    /// The agent's thread is gone (it panicked while it waited): it answers nothing more.
    dead: bool,
}

enum ToAgent {
    /// Rebase your work onto this commit (and check it, with `check`; the target's tip, with `on_target`): what
    /// is the commit to land?
    Prepare { tip: ObjectId, check: bool, on_target: bool },
    /// Check the tip of your work as last prepared (the batch up to it), against this baseline.
    Check(ObjectId),
    /// Lead the next batch.
    Lead,
    /// Your request is over.
    Result(Outcome),
}

/// How an agent's request ended.
pub(super) enum Outcome {
    /// Landed in a batch: the code, the next task claimed with it, the races the batch lost.
    Landed { code: ObjectId, next: Option<Box<Task>>, lost_races: u32 },
    /// The work left the batch when it was prepared: the agent's own [`Abort`] says why.
    Out,
    /// Publish it alone, as a runner of one agent would (the batch met an error that is the agent's to meet).
    Alone,
    /// The agent's claim is gone: nothing of it was published.
    Lost(DomainError),
    /// An idle agent's claim.
    Claimed(Result<Claimed, DomainError>),
}

/// What the check of a prefix of a batch found (`ToAgent::Check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Passes,
    Fails,
    /// The agent could not check (a signal, a broken work tree, a check that cannot start): its work leaves the
    /// batch, and it keeps why.
    Out,
}

/// What the desk asks of an agent's landing: its work rebased onto a tip (checked there or not), or the check of
/// its tip against a baseline (`Ok(Some(_))` passes, `Ok(None)` fails).
pub(super) enum Ask {
    Prepare { tip: ObjectId, check: bool, on_target: bool },
    Check { baseline: ObjectId },
}

/// What the agent whose request it is does for the desk: prepare its work, say what it spent, keep its lease.
pub(super) struct Own<'a> {
    pub work: &'a mut dyn FnMut(Ask) -> Result<Option<ObjectId>, Abort>,
    pub usage: &'a dyn Fn() -> Option<Usage>,
    pub keep: &'a dyn Fn() -> bool,
    /// Why the work left the batch, when it did.
    pub abort: Option<Abort>,
}

impl Own<'_> {
    fn prepare(&mut self, tip: ObjectId, check: bool, on_target: bool) -> Option<(ObjectId, Option<Usage>)> {
        match (self.work)(Ask::Prepare { tip, check, on_target }) {
            Ok(Some(code)) => Some((code, (self.usage)())),
            Ok(None) => None,
            Err(a) => {
                self.abort = Some(a);
                None
            }
        }
    }

    fn check(&mut self, baseline: ObjectId) -> Verdict {
        match (self.work)(Ask::Check { baseline }) {
            Ok(Some(_)) => Verdict::Passes,
            Ok(None) => Verdict::Fails,
            Err(a) => {
                self.abort = Some(a);
                Verdict::Out
            }
        }
    }
}

/// How often a waiting agent wakes to keep its lease.
const KEEP_EVERY: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Slot {
    fn send(&self, m: ToAgent) {
        lock(&self.mail).to_agent = Some(m);
        self.cv.notify_all();
    }

    /// The leader asks: the agent's work rebased onto `tip`, checked there with `check` (`keep`: the leader's own
    /// lease, kept while it waits — the agent may run a check).
    fn ask(&self, tip: ObjectId, check: bool, on_target: bool, keep: &dyn Fn()) -> Option<(ObjectId, Option<Usage>)> {
        self.wait_for(ToAgent::Prepare { tip, check, on_target }, keep, |m| m.answer.take()).flatten()
    }

    /// The leader asks: does the check pass on the agent's work as last prepared (against `baseline`)?
    fn verdict(&self, baseline: ObjectId, keep: &dyn Fn()) -> Verdict {
        self.wait_for(ToAgent::Check(baseline), keep, |m| m.verdict.take()).unwrap_or(Verdict::Out)
    }

    /// [`Slot::verdict`] in two halves, so that several agents check at once: ask (`false`: the agent's thread is
    /// gone), then wait.
    fn ask_check(&self, baseline: ObjectId) -> bool {
        self.send_ask(ToAgent::Check(baseline))
    }

    fn await_verdict(&self, keep: &dyn Fn()) -> Verdict {
        self.wait_answer(keep, |m| m.verdict.take()).unwrap_or(Verdict::Out)
    }

    /// Send `msg` and wait for the answer `take` finds (`None`: the agent's thread is gone).
    fn wait_for<T>(&self, msg: ToAgent, keep: &dyn Fn(), take: impl Fn(&mut Mail) -> Option<T>) -> Option<T> {
        if !self.send_ask(msg) {
            return None;
        }
        self.wait_answer(keep, take)
    }

    /// Put a question in the agent's mail, the last answers cleared; `false` when its thread is gone.
    fn send_ask(&self, msg: ToAgent) -> bool {
        let mut mail = lock(&self.mail);
        if mail.dead {
            return false;
        }
        mail.answer = None;
        mail.verdict = None;
        mail.to_agent = Some(msg);
        self.cv.notify_all();
        true
    }

    /// Wait for the answer `take` finds, keeping the leader's lease meanwhile (`None`: the agent's thread is gone).
    fn wait_answer<T>(&self, keep: &dyn Fn(), take: impl Fn(&mut Mail) -> Option<T>) -> Option<T> {
        let mut mail = lock(&self.mail);
        loop {
            if let Some(a) = take(&mut mail) {
                return Some(a);
            }
            if mail.dead {
                return None;
            }
            let (m, waited) = self.cv.wait_timeout(mail, KEEP_EVERY).unwrap_or_else(|e| e.into_inner());
            mail = m;
            if waited.timed_out() {
                drop(mail);
                keep();
                mail = lock(&self.mail);
            }
        }
    }
}

/// A waiting agent's hold on its request: should its thread unwind while it waits, the request leaves the queue,
/// a leader asking it gets no answer instead of waiting for ever, and a lead handed to it passes on.
struct Waiter<'d> {
    desk: &'d Desk,
    slot: &'d Arc<Slot>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let had_lead = {
            let mut mail = lock(&self.slot.mail);
            mail.dead = true;
            mail.answer.get_or_insert(None);
            matches!(mail.to_agent.take(), Some(ToAgent::Lead))
        };
        self.slot.cv.notify_all();
        let mut q = lock(&self.desk.queue);
        q.waiting.retain(|s| !Arc::ptr_eq(s, self.slot));
        if had_lead {
            match q.waiting.first() {
                Some(next) => next.send(ToAgent::Lead),
                None => q.busy = false,
            }
        }
        self.desk.joined.notify_all();
    }
}

impl Desk {
    /// Land one agent's work through the desk: `Outcome::Landed`, `Out` (then `own.abort` says why), `Alone` or
    /// `Lost`.
    pub(super) fn land(&self, r: &Runner<'_>, spec: LandSpec, own: &mut Own<'_>) -> Outcome {
        self.serve(r, What::Land(Box::new(spec)), Some(own))
    }

    /// Claim the next work task for an idle agent through the desk: `Outcome::Claimed`, or `Alone`.
    pub(super) fn claim(&self, r: &Runner<'_>, spec: ClaimSpec) -> Outcome {
        self.serve(r, What::Claim(spec), None)
    }

    fn serve(&self, r: &Runner<'_>, what: What, mut own: Option<&mut Own<'_>>) -> Outcome {
        let window = match &what {
            What::Land(s) => s.window,
            What::Claim(s) => s.window,
        };
        let slot = Arc::new(Slot { agent: r.agent.clone(), what, mail: Mutex::default(), cv: Condvar::new() });
        let arrived = std::time::Instant::now();
        let lead = {
            let mut q = lock(&self.queue);
            q.waiting.push(Arc::clone(&slot));
            self.joined.notify_all();
            !std::mem::replace(&mut q.busy, true)
        };
        if !lead {
            let _waiter = Waiter { desk: self, slot: &slot };
            loop {
                let msg = {
                    let mut mail = lock(&slot.mail);
                    if mail.to_agent.is_none() {
                        mail = slot.cv.wait_timeout(mail, KEEP_EVERY).unwrap_or_else(|e| e.into_inner()).0;
                    }
                    mail.to_agent.take()
                };
                match msg {
                    None => {
                        if let Some(o) = own.as_deref_mut() {
                            // A lost claim is found by the leader's op (it leaves the batch, nothing published).
                            let _ = (o.keep)();
                        }
                    }
                    Some(ToAgent::Prepare { tip, check, on_target }) => {
                        let a = own.as_deref_mut().and_then(|o| o.prepare(tip, check, on_target));
                        lock(&slot.mail).answer = Some(a);
                        slot.cv.notify_all();
                    }
                    Some(ToAgent::Check(baseline)) => {
                        let v = own.as_deref_mut().map_or(Verdict::Out, |o| o.check(baseline));
                        lock(&slot.mail).verdict = Some(v);
                        slot.cv.notify_all();
                    }
                    Some(ToAgent::Lead) => break,
                    Some(ToAgent::Result(o)) => return o,
                }
            }
        }
        let batch: Vec<Arc<Slot>> = {
            // Gather: others that finish within the window join this batch (not past the time a request of every
            // agent of the desk is in, nor past a stop).
            let mut q = lock(&self.queue);
            loop {
                let left = window.saturating_sub(arrived.elapsed());
                if left.is_zero() || q.waiting.len() >= q.agents || r.stopping() {
                    break;
                }
                let (g, waited) = self.joined.wait_timeout(q, left.min(KEEP_EVERY)).unwrap_or_else(|e| e.into_inner());
                q = g;
                if waited.timed_out()
                    && let Some(o) = own.as_deref()
                {
                    drop(q);
                    let _ = (o.keep)();
                    q = lock(&self.queue);
                }
            }
            std::mem::take(&mut q.waiting)
        };
        let mut lead = Lead { desk: self, batch: RefCell::new(batch), mine: Arc::clone(&slot), results: Vec::new() };
        let outcomes = publish(r, self, &lead.batch, &slot, own);
        lead.results = outcomes.into_iter().map(Some).collect();
        let mine = lead.batch.borrow().iter().position(|s| Arc::ptr_eq(s, &slot)).and_then(|i| lead.results[i].take());
        drop(lead);
        mine.unwrap_or(Outcome::Alone)
    }

    /// Before each attempt of a batch: the requests that arrived since it was gathered join it (appended, so that
    /// the slots already in it keep their places) — every idle claim, and each landing to `target` when the batch
    /// lands code (`None`: a batch of claims alone, which a landing cannot join). On a crowded ref a batch may race
    /// for minutes; what its agents finish meanwhile goes with it rather than waiting for the next, so that the
    /// landings an update carries grow with the wait and the ref's few updates carry the fleet's work.
    fn absorb(&self, batch: &RefCell<Vec<Arc<Slot>>>, target: Option<&str>) {
        let mut q = lock(&self.queue);
        if q.waiting.is_empty() {
            return;
        }
        let joins = |s: &Arc<Slot>| match (&s.what, target) {
            (What::Claim(_), _) => true,
            (What::Land(spec), Some(t)) => spec.branch == t,
            (What::Land(_), None) => false,
        };
        let (join, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut q.waiting).into_iter().partition(joins);
        q.waiting = stay;
        batch.borrow_mut().extend(join);
    }
}

/// The lead of one batch: when it ends (or its thread panics), every other agent of the batch gets its result —
/// [`Outcome::Alone`] when it has none — and the lead passes to the first agent that arrived meanwhile.
struct Lead<'d> {
    desk: &'d Desk,
    /// Grows while it is published ([`Desk::absorb`]).
    batch: RefCell<Vec<Arc<Slot>>>,
    /// The leader's own request (answered by its return).
    mine: Arc<Slot>,
    results: Vec<Option<Outcome>>,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        for (i, slot) in self.batch.borrow().iter().enumerate() {
            if !Arc::ptr_eq(slot, &self.mine) {
                let o = self.results.get_mut(i).and_then(Option::take).unwrap_or(Outcome::Alone);
                slot.send(ToAgent::Result(o));
            }
        }
        let mut q = lock(&self.desk.queue);
        match q.waiting.first() {
            Some(next) => next.send(ToAgent::Lead),
            None => q.busy = false,
        }
    }
}

/// With other agents in this process, a landing goes in the desk's next batch; one whose rebase needs the agent (a
/// conflict run), or whose batch met an error that is the agent's to meet, is published alone.
impl Publisher for Desk {
    fn publish(&self, landing: &mut Landing<'_, '_>, rec: &Recording<'_>) -> Landed {
        let (r, task, epoch, keeper) = landing.parts();
        let (base, head, stamped, settings) = landing.work();
        let id = task.id.clone();
        let spec = LandSpec {
            branch: rec.branch.to_string(),
            id: id.clone(),
            epoch,
            note: rec.note.map(str::to_string),
            claim_next: rec.claim_next,
            lease: rec.lease,
            cycle_budget: rec.cycle_budget,
            window: settings.batch_window,
            base,
            head,
            stamped,
            here: settings.check.is_none(),
            tip_check: settings.check.is_some() && settings.check_policy == crate::config::CheckPolicy::Tip,
            who: r.who.clone(),
            usage: r.spent.of(&id, epoch),
        };
        landing.batched = true;
        let (outcome, abort) = {
            let mut own = Own {
                work: &mut |ask| match ask {
                    Ask::Prepare { tip, check, on_target } => landing.prepare_as(tip, check, on_target).map(Some),
                    Ask::Check { baseline } => landing.check_tip(baseline).map(|passes| passes.then_some(baseline)),
                },
                usage: &|| r.spent.of(&id, epoch),
                keep: &|| keeper.keep(r),
                abort: None,
            };
            (self.land(r, spec, &mut own), own.abort)
        };
        landing.batched = false;
        match (outcome, abort) {
            (Outcome::Landed { code, next, lost_races }, _) => {
                Landed::Published { code, next, lost_races, alone: false }
            }
            (Outcome::Lost(e), _) => Landed::Failed(TxnError::Domain(e)),
            // A rebase that needs the agent (a conflict) goes on alone, with its conflict run.
            (Outcome::Out, Some(Abort::Conflicted) | None) => Alone.publish(landing, rec),
            (Outcome::Out, Some(a)) => Landed::Aborted(a),
            (Outcome::Alone | Outcome::Claimed(_), _) => Alone.publish(landing, rec),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(agent: &str, what: What) -> Arc<Slot> {
        Arc::new(Slot { agent: agent.into(), what, mail: Mutex::default(), cv: Condvar::new() })
    }

    fn claim(agent: &str) -> Arc<Slot> {
        let spec = ClaimSpec { looked_up: BTreeMap::new(), cycle_budget: Limit::default(), window: Duration::ZERO };
        slot(agent, What::Claim(spec))
    }

    fn land(agent: &str, branch: &str) -> Arc<Slot> {
        let spec = LandSpec {
            branch: branch.into(),
            id: format!("t-{agent}"),
            epoch: 1,
            note: None,
            claim_next: true,
            lease: Duration::from_secs(60),
            cycle_budget: Limit::default(),
            window: Duration::ZERO,
            base: ObjectId::null(gix::hash::Kind::Sha1),
            head: ObjectId::null(gix::hash::Kind::Sha1),
            stamped: true,
            here: true,
            tip_check: false,
            who: crate::Identity { name: "a".into(), email: "a@example.com".into() },
            usage: None,
        };
        slot(agent, What::Land(Box::new(spec)))
    }

    fn agents(batch: &RefCell<Vec<Arc<Slot>>>) -> Vec<String> {
        batch.borrow().iter().map(|s| s.agent.clone()).collect()
    }

    #[test]
    fn requests_that_arrive_while_a_batch_races_join_it_when_they_can() {
        let desk = Desk::default();
        let main = "refs/heads/main";
        // A landing batch to main: idle claims and landings to main join, in the order they came, after the slots
        // already in it; a landing to another branch waits for a batch of its own.
        let batch = RefCell::new(vec![land("a", main)]);
        lock(&desk.queue).waiting = vec![claim("b"), land("c", "refs/heads/other"), land("d", main)];
        desk.absorb(&batch, Some(main));
        assert_eq!(agents(&batch), ["a", "b", "d"]);
        let left: Vec<String> = lock(&desk.queue).waiting.iter().map(|s| s.agent.clone()).collect();
        assert_eq!(left, ["c"]);
        // A batch of claims alone: a claim joins it, no landing does.
        let claims = RefCell::new(vec![claim("e")]);
        lock(&desk.queue).waiting.push(claim("f"));
        desk.absorb(&claims, None);
        assert_eq!(agents(&claims), ["e", "f"]);
        let left: Vec<String> = lock(&desk.queue).waiting.iter().map(|s| s.agent.clone()).collect();
        assert_eq!(left, ["c"]);
        // Nothing waiting: nothing changes.
        lock(&desk.queue).waiting.clear();
        desk.absorb(&batch, Some(main));
        assert_eq!(agents(&batch), ["a", "b", "d"]);
    }

    #[test]
    fn agents_that_read_together_share_one_fetch_and_a_publish_is_read_back() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let desk = Desk::default();
        let fetches = AtomicUsize::new(0);
        let a = ObjectId::from_hex(b"1111111111111111111111111111111111111111").expect("an id");
        let b = ObjectId::from_hex(b"2222222222222222222222222222222222222222").expect("an id");
        let fetch = |id| {
            fetches.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            Ok(Some(id))
        };
        let every = Duration::from_secs(60);
        // Eight agents at once: one fetches, the others wait for it and take its tip.
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| assert_eq!(desk.shared_tip("refs/swarm/x", every, || fetch(a)).expect("tip"), Some(a)));
            }
        });
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // Another ref is fetched on its own.
        assert_eq!(desk.shared_tip("refs/heads/main", every, || fetch(b)).expect("tip"), Some(b));
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        // What this process published is the tip, with no fetch.
        desk.published("refs/swarm/x", b);
        assert_eq!(desk.shared_tip("refs/swarm/x", every, || fetch(a)).expect("tip"), Some(b));
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        // Older than the reader takes: fetched again.
        assert_eq!(desk.shared_tip("refs/swarm/x", Duration::ZERO, || fetch(a)).expect("tip"), Some(a));
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
    }
}
