//! One batch of the desk: the landings prepared on the tip (each agent's work rebased and checked there, by its own
//! thread or here), one change for the whole batch, one update of the state ref and the target.

use super::*;

/// A landing's work rebased onto `at` by the leader, when that is all its preparation is: no check to run, the
/// in-process rebase goes through, and the target does not hold the task's code already. `None`: ask the agent
/// (its own `prepare` finds the conflict, the landed code, a broken work tree).
pub(crate) fn rebased_here(r: &Runner<'_>, what: &What, at: ObjectId) -> Option<(ObjectId, Option<Usage>)> {
    let What::Land(spec) = what else { return None };
    if !spec.here {
        return None;
    }
    let store = &r.swarm.local;
    let (id, epoch) = (spec.id.as_str(), spec.epoch);
    let new = if at == spec.base {
        spec.stamped.then_some(spec.head)?
    } else {
        // The task's code there already (or a commit that only names the task, to be said): the agent's own
        // prepare sees to it.
        let landed = store.landed_commit(at, id, Some(spec.base), 1..=epoch, super::super::landing::ROLL_FORWARD_DEPTH);
        if !matches!(landed, Ok(ref l) if l.code.is_none() && l.refused.is_empty()) {
            return None;
        }
        super::super::rebase::rebase_in_process(store, at, spec.base, spec.head, id, epoch, &spec.who, (r.clock)())
            .ok()
            .flatten()?
    };
    // What lands is the runner's landing of this claim, commit by commit (else the agent's prepare says why).
    let ours = matches!(super::super::rebase::unstamped(store, at, new, id, epoch), Ok(None));
    (ours && new != at && store.has_ancestor(new, at, 100_000).unwrap_or(false)).then_some((new, spec.usage))
}

/// The landings a batch carries, as one `prepare` made them: each one's slot, the commit it lands as (its work
/// rebased onto the one before it) and what its attempt spent.
pub(crate) type Prepared = Vec<(usize, ObjectId, Option<Usage>)>;

/// What a batch's state commit did: each landing's slot, code and next claim; each idle claim's slot and claim.
pub(crate) type Published = (Vec<(usize, ObjectId, Option<Task>)>, Vec<(usize, Result<Claimed, DomainError>)>);

/// Publish one batch: every landing of `batch` (rebased one after another onto the target's newest tip) and every
/// claim, in one atomic update; the outcome of each slot, in order. Requests that arrive while it races join it
/// ([`Desk::absorb`]). A batch that loses races for longer than the runner's ops may ([`Runner::ride_out`]) goes
/// again as a batch: broken up into one op an agent, it would only crowd the ref more.
pub(crate) fn publish(
    r: &Runner<'_>,
    desk: &Desk,
    batch: &RefCell<Vec<Arc<Slot>>>,
    mine: &Arc<Slot>,
    mut own: Option<&mut Own<'_>>,
) -> Vec<Outcome> {
    // The leader's own lease, kept while it waits on the others' preparations (checks may run there).
    let keep_mine: Option<&dyn Fn() -> bool> = own.as_deref().map(|o| o.keep);
    let keep = || {
        if let Some(k) = keep_mine {
            let _ = k();
        }
    };
    let mut out: Vec<Option<Outcome>> = Vec::new();
    // Rounds of the batch that ran out of time on a crowded ref; a few, then each agent meets it on its own.
    let mut crowded = 0;
    loop {
        out.resize_with(batch.borrow().len(), || None);
        let (lands, claims_only) = {
            let b = batch.borrow();
            let lands: Vec<usize> =
                (0..b.len()).filter(|&i| matches!(b[i].what, What::Land(_)) && out[i].is_none()).collect();
            let claims = b.iter().any(|s| matches!(s.what, What::Claim(_)));
            if lands.is_empty() && !claims {
                break;
            }
            let claims_only = lands.is_empty();
            (lands, claims_only)
        };
        // The landings the batch still carries, as the last `prepare` made them: `txn` holds the prepare and the
        // state op at once (it calls them in turn on each try), so what the one makes the other reads through this.
        let prepared: RefCell<Prepared> = RefCell::default();
        // The landing whose `done` the batch's board refused.
        let mut failed_at = None;
        let mut state_op = |snap: &crate::Snapshot, now: crate::time::Timestamp| {
            if claims_only {
                desk.absorb(batch, None);
            }
            let b = batch.borrow();
            let claims: Vec<usize> = (0..b.len()).filter(|&i| matches!(b[i].what, What::Claim(_))).collect();
            batch_change(r, &b, &claims, &prepared.borrow(), snap, now).map_err(|(i, e)| {
                failed_at = Some(i);
                e
            })
        };
        let res = if claims_only {
            r.swarm.transact(&r.retry, &r.who, r.clock, &mut state_op).map(Ok)
        } else {
            // Every landing of a batch goes to one branch: one that names another (the target changed while the
            // work went on) lands alone.
            let target = match &batch.borrow()[lands[0]].what {
                What::Land(spec) => spec.branch.clone(),
                What::Claim(_) => String::new(),
            };
            for &i in &lands {
                if matches!(&batch.borrow()[i].what, What::Land(s) if s.branch != target) {
                    out[i] = Some(Outcome::Alone);
                }
            }
            // The commit the batch lands as, as last prepared.
            let mut built = None;
            let mut prepare = |tip: ObjectId| -> Result<ObjectId, ()> {
                desk.absorb(batch, Some(&target));
                let b = batch.borrow();
                out.resize_with(b.len(), || None);
                let lands: Vec<usize> = (0..b.len())
                    .filter(|&i| matches!(&b[i].what, What::Land(s) if s.branch == target) && out[i].is_none())
                    .collect();
                let p = prepare_batch(r, &b, mine, own.as_deref_mut(), &keep, &target, &lands, &mut out, tip);
                built = p.last().map(|&(_, code, _)| code);
                *prepared.borrow_mut() = p;
                built.ok_or(())
            };
            let res =
                r.swarm.land(&r.retry, &r.who, r.clock, &target, &mut prepare, |snap, now, _| state_op(snap, now));
            // What this clone saw of the target is what the batch landed (see `Swarm::landed_on_target`).
            if let (Ok(Ok(_)), Some(code)) = (&res, built) {
                r.swarm.landed_on_target(&target, code);
                desk.published(&target, code);
            }
            res
        };
        out.resize_with(batch.borrow().len(), || None);
        if !round_again(r, desk, res, failed_at, &mut out, &mut crowded, &keep) {
            break;
        }
    }
    out.into_iter().map(|o| o.unwrap_or(Outcome::Alone)).collect()
}

/// Record what one round of a batch came to in `out`; `true` when the batch goes again (the landings that left it
/// aside, or a crowded ref: a few rounds, then each agent meets it on its own).
fn round_again(
    r: &Runner<'_>,
    desk: &Desk,
    res: Result<Result<crate::Committed<Published>, ()>, TxnError>,
    failed_at: Option<usize>,
    out: &mut [Option<Outcome>],
    crowded: &mut u32,
    keep: &dyn Fn(),
) -> bool {
    match res {
        Ok(Ok(c)) => {
            if let Some(commit) = c.commit {
                desk.published(&r.swarm.ref_name(), commit);
            }
            let (landed, claimed) = c.value;
            if let Ok(mut f) = desk.figures.lock() {
                f.batches += u64::from(c.commit.is_some());
                f.landings += landed.len() as u64;
                f.claims += claimed.iter().filter(|(_, v)| matches!(v, Ok(Claimed::Task(Some(_))))).count() as u64;
                f.widest = f.widest.max(landed.len() as u64);
            }
            for (i, code, next) in landed {
                out[i] = Some(Outcome::Landed { code, next: next.map(Box::new), lost_races: c.lost_races });
            }
            for (i, v) in claimed {
                out[i] = Some(Outcome::Claimed(v));
            }
            false
        }
        // Every landing left the batch while it was prepared: the claims go on their own.
        Ok(Err(())) => true,
        // A claim was gone: that landing leaves the batch, nothing was published, the rest go again.
        Err(TxnError::Domain(e)) => match failed_at {
            Some(i) => {
                out[i] = Some(Outcome::Lost(e));
                true
            }
            None => false,
        },
        // A crowded ref: the batch goes again, as a batch (the leader's lease kept first; the others keep theirs
        // while they wait).
        Err(TxnError::Contention { .. }) if *crowded < 3 && !r.stopping() => {
            *crowded += 1;
            keep();
            true
        }
        // Whatever else went wrong (the remote away, a refusal), each agent meets it on its own.
        Err(_) => false,
    }
}

/// One `prepare` of a batch on the target's tip `tip`: the work of each landing that is still in it (`lands`, to
/// `target`) rebased onto the one before it — by the leader where that is all it takes, else by its own agent —
/// in order. A landing that leaves the batch gets its outcome in `out`. Empty: nothing of the batch lands.
///
/// With `[run] check_policy = "tip"` and more than one landing, the check runs once, on the batch's tip (as bors
/// does): the landings are rebased unchecked, then the last one's agent checks the whole ([`check_tip`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare_batch(
    r: &Runner<'_>,
    batch: &[Arc<Slot>],
    mine: &Arc<Slot>,
    own: Option<&mut Own<'_>>,
    keep: &dyn Fn(),
    target: &str,
    lands: &[usize],
    out: &mut [Option<Outcome>],
    tip: ObjectId,
) -> Prepared {
    let mut p = Prepared::new();
    // A target that lost what this clone saw of it: each landing meets that alone, in its own prepare (which
    // stops its runner), and nothing of the batch lands.
    if super::super::landing::target_checked(r, target, tip).is_err() {
        for &i in lands {
            out[i].get_or_insert(Outcome::Alone);
        }
        return p;
    }
    let left: Vec<usize> = lands.iter().copied().filter(|&i| out[i].is_none()).collect();
    let once = left.len() > 1 && left.iter().all(|&i| matches!(&batch[i].what, What::Land(s) if s.tip_check));
    let mut agents = Agents { r, batch, mine, own, keep };
    chain(&mut agents, &mut p, &left, tip, !once, out);
    if once {
        check_tip(&mut agents, &mut p, tip, out);
    }
    p
}

/// Who prepares and checks the landings of a batch for its leader ([`Agents`]; a test's stand-in).
trait Checker {
    /// Landing `i`'s work rebased onto `at` (checked there with `check`; `on_target`: `at` is the target's tip, not
    /// the landing before it in the batch); `None`: it leaves the batch.
    fn prepare(&mut self, i: usize, at: ObjectId, check: bool, on_target: bool) -> Option<(ObjectId, Option<Usage>)>;
    /// Does the check pass on landing `i`'s work as last prepared, against `baseline`?
    fn verdict(&mut self, i: usize, baseline: ObjectId) -> Verdict;
    /// The verdicts of several landings, checked at once.
    fn verdicts(&mut self, which: &[usize], baseline: ObjectId) -> Vec<Verdict> {
        which.iter().map(|&i| self.verdict(i, baseline)).collect()
    }
}

/// The agents of a batch, as its leader asks them: the leader's own landing through `own`, the others through
/// their slots.
struct Agents<'b, 'o, 'r> {
    r: &'b Runner<'r>,
    batch: &'b [Arc<Slot>],
    mine: &'b Arc<Slot>,
    own: Option<&'b mut Own<'o>>,
    keep: &'b dyn Fn(),
}

impl Checker for Agents<'_, '_, '_> {
    fn prepare(&mut self, i: usize, at: ObjectId, check: bool, on_target: bool) -> Option<(ObjectId, Option<Usage>)> {
        match rebased_here(self.r, &self.batch[i].what, at) {
            Some(done) => Some(done),
            None if Arc::ptr_eq(&self.batch[i], self.mine) => {
                self.own.as_deref_mut().and_then(|o| o.prepare(at, check, on_target))
            }
            None => self.batch[i].ask(at, check, on_target, self.keep),
        }
    }

    fn verdict(&mut self, i: usize, baseline: ObjectId) -> Verdict {
        if Arc::ptr_eq(&self.batch[i], self.mine) {
            return self.own.as_deref_mut().map_or(Verdict::Out, |o| o.check(baseline));
        }
        self.batch[i].verdict(baseline, self.keep)
    }

    fn verdicts(&mut self, which: &[usize], baseline: ObjectId) -> Vec<Verdict> {
        // Every other agent is asked first, so that their checks run while the leader's own does.
        let asked: Vec<bool> = which
            .iter()
            .map(|&i| !Arc::ptr_eq(&self.batch[i], self.mine) && self.batch[i].ask_check(baseline))
            .collect();
        which
            .iter()
            .zip(asked)
            .map(|(&i, asked)| match asked {
                true => self.batch[i].await_verdict(self.keep),
                false => self.verdict(i, baseline),
            })
            .collect()
    }
}

/// Rebase each of `lands` onto the one before it, from the tip of `p` (or `tip`), onto the end of `p`; a landing
/// that leaves gets [`Outcome::Out`] (its agent keeps why).
fn chain(
    agents: &mut impl Checker,
    p: &mut Prepared,
    lands: &[usize],
    tip: ObjectId,
    check: bool,
    out: &mut [Option<Outcome>],
) {
    let mut at = p.last().map_or(tip, |&(_, code, _)| code);
    for &i in lands {
        match agents.prepare(i, at, check, at == tip) {
            Some((code, usage)) => {
                p.push((i, code, usage));
                at = code;
            }
            None => out[i] = Some(Outcome::Out),
        }
    }
}

/// Check the batch `p` (prepared unchecked on `tip`) once, on its tip, by the last landing's agent, against `tip`
/// as the baseline; when it fails, bisect: the prefix that ends at landing k is checked by k's agent (its work as
/// prepared is that prefix), until the first landing whose prefix fails is found. That landing leaves the batch
/// and lands alone ([`Outcome::Alone`]: checked again on the target's own tip, where a flaky failure passes and a
/// real one fails its attempt with the check's reason, its work kept); the landings after it are rebased again
/// without it, and the new tip checked. What is left in `p` is a batch whose tip passed, or nothing.
fn check_tip(agents: &mut impl Checker, p: &mut Prepared, tip: ObjectId, out: &mut [Option<Outcome>]) {
    // `p[..good]` is known to pass (nothing: the target itself).
    let mut good = 0;
    while p.len() > good {
        let last = p.len() - 1;
        let failed = match agents.verdict(p[last].0, tip) {
            Verdict::Passes => break,
            Verdict::Out => last,
            // `p[..lo]` passes and `p[..=hi]` fails: up to [`PROBES`] prefixes in between are checked at once, each by
            // its own agent in its own work tree, and the range shrinks to the part between the last that passed
            // and the first that failed.
            Verdict::Fails => {
                let (mut lo, mut hi) = (good, last);
                let mut gone = None;
                while lo < hi && gone.is_none() {
                    let probes = probes(lo, hi);
                    let who: Vec<usize> = probes.iter().map(|&k| p[k].0).collect();
                    // In order, up to the first that failed: what a flaky check says of a longer prefix after a
                    // shorter one failed is not taken, so `p[..lo]` has always passed.
                    for (&k, v) in probes.iter().zip(agents.verdicts(&who, tip)) {
                        match v {
                            Verdict::Passes => lo = k + 1,
                            Verdict::Fails => {
                                hi = k;
                                break;
                            }
                            Verdict::Out => {
                                gone = Some(k);
                                break;
                            }
                        }
                    }
                }
                match gone {
                    Some(at) => at,
                    None => {
                        // Landing `lo` breaks the check on what passed before it.
                        out[p[lo].0] = Some(Outcome::Alone);
                        good = lo;
                        rechain(agents, p, lo, tip, out);
                        continue;
                    }
                }
            }
        };
        // An agent that could not check leaves the batch (it keeps why); what came after it goes again without it.
        out[p[failed].0] = Some(Outcome::Out);
        good = good.min(failed);
        rechain(agents, p, failed, tip, out);
    }
}

/// Prefixes a bisection checks at once: a batch of four is settled in one round, and a CPU-bound suite on a small
/// machine is not run many times over.
const PROBES: usize = 3;

/// The prefixes to check between `lo` (passes before it) and `hi` (fails): all of them up to [`PROBES`], else that
/// many spread evenly.
fn probes(lo: usize, hi: usize) -> Vec<usize> {
    let n = hi - lo;
    if n <= PROBES {
        return (lo..hi).collect();
    }
    let mut v: Vec<usize> = (1..=PROBES).map(|j| lo + j * n / (PROBES + 1)).collect();
    v.dedup();
    v
}

/// Take the landing at `p[at]` out of the batch: the landings after it are rebased again onto the one before it.
fn rechain(agents: &mut impl Checker, p: &mut Prepared, at: usize, tip: ObjectId, out: &mut [Option<Outcome>]) {
    let rest: Vec<usize> = p[at + 1..].iter().map(|&(i, _, _)| i).collect();
    p.truncate(at);
    chain(agents, p, &rest, tip, false, out);
}

/// The state half of a batch on `snap`: every `done` of the landings `prepared` (with its next claim), then every
/// idle claim of `claims`, applied in order to one board, as one change. `Err`: the slot of the landing whose
/// `done` the board refused.
pub(crate) fn batch_change(
    r: &Runner<'_>,
    batch: &[Arc<Slot>],
    claims: &[usize],
    prepared: &[(usize, ObjectId, Option<Usage>)],
    snap: &crate::Snapshot,
    now: crate::time::Timestamp,
) -> Result<(ops::Change, Published), (usize, DomainError)> {
    let store = r.swarm.store();
    let stopped = super::super::claim::judge_stopped(store, snap);
    let codes: Vec<String> = prepared.iter().map(|(_, code, _)| code.to_string()).collect();
    let mut landings = Vec::new();
    for (&(i, _, usage), code) in prepared.iter().zip(&codes) {
        let What::Land(spec) = &batch[i].what else { continue };
        landings.push((
            batch[i].agent.as_str(),
            Record {
                id: &spec.id,
                epoch: spec.epoch,
                code,
                note: spec.note.as_deref(),
                claim_next: spec.claim_next,
                lease: spec.lease,
                usage,
                cycle_budget: spec.cycle_budget,
            },
        ));
    }
    let (mut ch, mut after, nexts) =
        land_batch(&snap.board, now, stopped, &landings).map_err(|(k, e)| (prepared[k].0, e))?;
    let landed: Vec<(usize, ObjectId, Option<Task>)> =
        prepared.iter().zip(nexts).map(|(&(i, code, _), next)| (i, code, next)).collect();
    let mut claimed = Vec::new();
    for &i in claims {
        let What::Claim(spec) = &batch[i].what else { continue };
        let actor = Actor { agent: batch[i].agent.clone(), now };
        if r.stopping() {
            claimed.push((i, Ok(Claimed::Task(None))));
            continue;
        }
        match claim_op(store, snap.commit, &after, &actor, &spec.looked_up, &spec.cycle_budget) {
            Ok((c, v)) => {
                ops::apply(&mut after, &c);
                ch = ch.then(super::super::scrub(c));
                claimed.push((i, Ok(v)));
            }
            Err(e) => claimed.push((i, Err(e))),
        }
    }
    Ok((super::super::scrub(ch), (landed, claimed)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Landings whose work is a set of tasks: a commit is the prefix it holds, the check fails on a prefix that
    /// holds a breaking task (or, for a flaky one, when told so), and an agent may be unable to check.
    struct Fake {
        breaks: Vec<bool>,
        /// Landings whose agent cannot check (its verdict is `Out`).
        broken_tree: Vec<bool>,
        /// Commit → the landings it holds, in order.
        commits: Vec<Vec<usize>>,
        /// Each landing's work as last prepared.
        head: Vec<Option<ObjectId>>,
        /// Landings whose agent's first check says the opposite of the truth (a flaky suite).
        flaky: Vec<bool>,
        /// The commits a check passed.
        passed: Vec<ObjectId>,
        verdicts: usize,
    }

    fn oid(n: usize) -> ObjectId {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&(n as u64 + 1).to_be_bytes());
        ObjectId::from_bytes_or_panic(&b)
    }

    impl Fake {
        fn new(breaks: Vec<bool>, broken_tree: Vec<bool>) -> Fake {
            let n = breaks.len();
            Fake {
                breaks,
                broken_tree,
                commits: vec![vec![]],
                head: vec![None; n],
                flaky: vec![false; n],
                passed: vec![],
                verdicts: 0,
            }
        }
        fn holds(&self, c: ObjectId) -> &[usize] {
            let k = (0..self.commits.len()).find(|&k| oid(k) == c).expect("a commit of this batch");
            &self.commits[k]
        }
    }

    impl Checker for Fake {
        fn prepare(
            &mut self,
            i: usize,
            at: ObjectId,
            check: bool,
            on_target: bool,
        ) -> Option<(ObjectId, Option<Usage>)> {
            assert!(!check, "a batch checked at its tip prepares unchecked");
            assert_eq!(on_target, at == oid(0), "only the target's tip is checked as the target");
            let mut held = self.holds(at).to_vec();
            held.push(i);
            self.commits.push(held);
            let c = oid(self.commits.len() - 1);
            self.head[i] = Some(c);
            Some((c, None))
        }
        fn verdict(&mut self, i: usize, baseline: ObjectId) -> Verdict {
            assert_eq!(baseline, oid(0), "the baseline is the target's tip");
            self.verdicts += 1;
            if self.broken_tree[i] {
                return Verdict::Out;
            }
            let head = self.head[i].expect("prepared before it is checked");
            // The truth, or its opposite on a flaky agent's first check.
            let broken = self.holds(head).iter().any(|&k| self.breaks[k]);
            let passes = broken == std::mem::take(&mut self.flaky[i]);
            if passes {
                self.passed.push(head);
                Verdict::Passes
            } else {
                Verdict::Fails
            }
        }
    }

    fn run(breaks: Vec<bool>, broken_tree: Vec<bool>) -> (Fake, Prepared, Vec<Option<Outcome>>) {
        run_flaky(breaks, broken_tree, vec![])
    }

    fn run_flaky(
        breaks: Vec<bool>,
        broken_tree: Vec<bool>,
        flaky: Vec<bool>,
    ) -> (Fake, Prepared, Vec<Option<Outcome>>) {
        let n = breaks.len();
        let mut fake = Fake::new(breaks, broken_tree);
        if !flaky.is_empty() {
            fake.flaky = flaky;
        }
        let (mut p, mut out) = (Prepared::new(), (0..n).map(|_| None).collect::<Vec<_>>());
        let lands: Vec<usize> = (0..n).collect();
        chain(&mut fake, &mut p, &lands, oid(0), false, &mut out);
        check_tip(&mut fake, &mut p, oid(0), &mut out);
        (fake, p, out)
    }

    #[test]
    fn a_passing_batch_is_checked_once_and_one_breaking_landing_costs_a_bisection() {
        let (fake, p, out) = run(vec![false; 4], vec![false; 4]);
        assert_eq!((fake.verdicts, p.len()), (1, 4));
        assert!(out.iter().all(Option::is_none));
        let (fake, p, out) = run(vec![false, false, true, false], vec![false; 4]);
        // The tip, the three prefixes before it at once, the tip without the third.
        assert_eq!(fake.verdicts, 5);
        assert_eq!(p.iter().map(|&(i, _, _)| i).collect::<Vec<_>>(), [0, 1, 3]);
        assert!(matches!(out[2], Some(Outcome::Alone)));
    }

    proptest! {
        /// Whatever breaks the check and whoever cannot check: what is left lands on a tip that passed and holds
        /// every landing that neither breaks the check nor left, in order; every breaking landing goes alone (to be
        /// checked on its own), and no landing is lost — each is in the batch or has its outcome.
        #[test]
        fn bisection_leaves_a_passing_tip_and_loses_no_landing(
            cases in proptest::collection::vec((any::<bool>(), 0u8..8), 1..9)
        ) {
            let breaks: Vec<bool> = cases.iter().map(|c| c.0).collect();
            let broken_tree: Vec<bool> = cases.iter().map(|c| c.1 == 0).collect();
            let n = breaks.len();
            let (fake, p, out) = run(breaks.clone(), broken_tree.clone());
            let landed: Vec<usize> = p.iter().map(|&(i, _, _)| i).collect();
            if let Some(&(_, tip, _)) = p.last() {
                prop_assert!(fake.holds(tip).iter().all(|&k| !breaks[k]), "the tip holds a breaking landing");
                prop_assert_eq!(fake.holds(tip), landed.as_slice(), "the tip is the batch");
            }
            for i in 0..n {
                let kept = landed.contains(&i);
                prop_assert!(kept != out[i].is_some(), "landing {} is both or neither in the batch and out", i);
                if breaks[i] {
                    prop_assert!(!kept, "a breaking landing landed");
                }
                if !breaks[i] && !broken_tree[i] {
                    prop_assert!(kept, "landing {} neither breaks the check nor left, and did not land", i);
                }
                if breaks[i] && !broken_tree[i] {
                    prop_assert!(matches!(out[i], Some(Outcome::Alone)), "a breaking landing is checked alone");
                }
            }
            let mut sorted = landed.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, landed);
            // At most a tip and a bisection (log2 n) a landing that left.
            let left = out.iter().filter(|o| o.is_some()).count();
            let log = (usize::BITS - n.leading_zeros()) as usize;
            prop_assert!(fake.verdicts <= 1 + left * (PROBES * log + 1), "{} runs of the check", fake.verdicts);
        }

        /// With a flaky check (an agent's first verdict the opposite of the truth), still: whatever lands is a tip a
        /// check passed, in order, and no landing is lost.
        #[test]
        fn a_flaky_check_never_lands_a_tip_no_check_passed(
            cases in proptest::collection::vec((any::<bool>(), 0u8..8, any::<bool>()), 1..9)
        ) {
            let breaks: Vec<bool> = cases.iter().map(|c| c.0).collect();
            let broken_tree: Vec<bool> = cases.iter().map(|c| c.1 == 0).collect();
            let flaky: Vec<bool> = cases.iter().map(|c| c.2).collect();
            let n = breaks.len();
            let (fake, p, out) = run_flaky(breaks, broken_tree, flaky);
            let landed: Vec<usize> = p.iter().map(|&(i, _, _)| i).collect();
            if let Some(&(_, tip, _)) = p.last() {
                prop_assert!(fake.passed.contains(&tip), "the tip {:?} was landed without a check that passed", landed);
                prop_assert_eq!(fake.holds(tip), landed.as_slice());
            }
            for (i, o) in out.iter().enumerate().take(n) {
                prop_assert!(landed.contains(&i) != o.is_some(), "landing {} lost or twice", i);
            }
        }
    }
}
