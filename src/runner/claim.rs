//! What the runner reads for the claim ops it makes: whether the judge stopped the swarm ([`judge_stopped`]), and the
//! worker's next claim on a read of the state ref ([`claim_op`], `ops::claim::next_work` with the stop read from the
//! cycles). Used by the worker, the landing and the desk alike.

use std::collections::BTreeMap;

use gix::ObjectId;

use crate::ops::claim::Claimed;
use crate::ops::{self, Actor, Board, Change, DomainError};
use crate::usage::Limit;
use crate::{Snapshot, Store};

/// Has the judge said stop (as of `snap`)?
pub(super) fn judge_stopped(store: &Store, snap: &Snapshot) -> bool {
    super::last_cycle(store, snap.commit).is_some_and(|c| c.verdict == super::Verdict::Stop)
}

/// The worker loop's claim on `board` (of the state commit `commit`, whose cycles say whether the judge stopped
/// the swarm): [`ops::claim::next_work`].
pub(super) fn claim_op(
    store: &Store,
    commit: ObjectId,
    board: &Board,
    actor: &Actor,
    looked_up: &BTreeMap<String, Option<ObjectId>>,
    cycle_budget: &Limit,
) -> Result<(Change, Claimed), DomainError> {
    let stopped = super::last_cycle(store, commit).filter(|c| c.verdict == super::Verdict::Stop).map(|c| c.cycle);
    ops::claim::next_work(board, actor, stopped, looked_up, cycle_budget)
}
