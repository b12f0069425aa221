//! The planner: claim a plan task (the root goal or an area), run the agent with the planner prompt, the board and
//! the hand-offs, file the tasks it proposes in one commit, wait until they are finished, and plan again with the
//! new hand-offs; the plan is done when its agent proposes nothing.
//!
//! One planner process can hold several plans: while it waits on the children of one, it takes any ready plan
//! task (a sub-plan it or another planner filed), so that a single planner never waits on itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;

use super::{Event, Mode, Role, RunEnd, RunError, Runner, git, prompts};
use crate::agent::Exit;
use crate::model::{Kind, Status, Task};
use crate::ops::{self, Board, DomainError, NewTask};
use crate::store::Snapshot;
use crate::time::Timestamp;
use crate::txn::TxnError;

/// Options of `git swarm run planner`.
#[derive(Debug, Clone, Default)]
pub struct PlannerOptions {
    pub goal: Option<String>,
    /// `--replace-goal`: a goal other than the swarm's (or any goal on a stopped swarm) replaces it, as `git swarm
    /// goal` would, instead of being refused.
    pub replace_goal: bool,
    pub mode: Mode,
}

#[derive(Debug, Clone, Default)]
pub struct PlannerStats {
    pub rounds: u64,
    pub proposed: u64,
    pub plans_done: u64,
}

/// A plan this planner holds.
struct HeldPlan {
    task: Task,
    epoch: u64,
    until: Timestamp,
    rounds: u32,
    /// Its children were filed and are not all finished yet.
    waiting: bool,
}

/// A task as a planner proposes it (one `[[task]]` table of its output). Keys this version does not know are
/// ignored (models add fields).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Proposal {
    #[serde(default)]
    pub key: Option<String>,
    pub title: String,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub acceptance: String,
    #[serde(default)]
    pub scope: Vec<String>,
    #[serde(default)]
    pub kind: Kind,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub deps: Vec<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    /// The plan the task belongs to (a task file's; a planner's tasks belong to its plan, whatever they say).
    #[serde(default)]
    pub parent: Option<String>,
}

/// The keys of a `[[task]]` table.
pub const TASK_KEYS: &[&str] =
    &["key", "title", "body", "acceptance", "scope", "kind", "priority", "deps", "labels", "parent"];

#[derive(Deserialize)]
struct Block {
    task: Vec<Proposal>,
}

/// The tasks of the planner's output: the **last** fenced ```toml block that holds `[[task]]` tables (an agent that
/// echoes its prompt repeats the prompt's example first), or an empty block, "nothing more to do" (`Some([])`).
/// Other toml blocks (a quoted `Cargo.toml`) are not proposals and are passed over. `Ok(None)`: no such block.
pub fn parse_proposals(output: &str) -> Result<Option<Vec<Proposal>>, String> {
    let mut found: Option<Vec<Proposal>> = None;
    let mut last_error = None;
    for block in fenced_blocks(output, "toml") {
        let table: toml::Table = match toml::from_str(block) {
            Ok(t) => t,
            Err(e) => {
                if block.contains("[[task]]") {
                    last_error = Some(one_line(&e));
                }
                continue;
            }
        };
        if table.is_empty() {
            found = Some(Vec::new());
        } else if table.contains_key("task") {
            let parsed: Block = toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| format!("the planner's [[task]] block is not valid: {}", one_line(&e)))?;
            found = Some(parsed.task);
            last_error = None;
        }
    }
    if found.is_none()
        && let Some(e) = last_error
    {
        return Err(format!("the planner's ```toml block is not valid TOML: {e}"));
    }
    if let Some(ps) = &found {
        let mut keys = BTreeSet::new();
        for (i, p) in ps.iter().enumerate() {
            let title = p.title.trim();
            if title.is_empty() || title.contains('\n') || title.len() > crate::model::MAX_TITLE_LEN {
                return Err(format!("proposed task {} has an empty, multi-line or too long title", i + 1));
            }
            if let Some(k) = &p.key
                && !keys.insert(k.clone())
            {
                return Err(format!("the key '{}' is used twice", crate::escape::line(k)));
            }
            for l in &p.labels {
                crate::model::validate_label(l)
                    .map_err(|e| format!("proposed task '{}': {e}", crate::escape::line(title)))?;
            }
        }
    }
    Ok(found)
}

fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The tasks of a task file (`git swarm add --file`): a TOML document of `[[task]]` tables, the planner's format
/// (`docs/agents.md`), strictly: an unknown key is an error (a typo must not drop a dependency), and every error
/// names its table (`[[task]] 3 ('Write the parser'): …`). Keys must be unique; deps name a key of the file or a task.
pub fn parse_task_file(text: &str) -> Result<Vec<Proposal>, String> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| format!("not valid TOML: {}", one_line(&e)))?;
    if let Some(k) = doc.keys().find(|k| *k != "task") {
        return Err(format!("unknown key '{}' at the top (a task file holds [[task]] tables)", crate::escape::line(k)));
    }
    let tables = match doc.get("task") {
        None => return Err("no [[task]] table".into()),
        Some(toml::Value::Array(a)) => a,
        Some(_) => return Err("`task` must be [[task]] tables".into()),
    };
    let mut out = Vec::with_capacity(tables.len());
    let mut keys = BTreeSet::new();
    for (i, v) in tables.iter().enumerate() {
        let n = i + 1;
        let toml::Value::Table(t) = v else { return Err(format!("[[task]] {n} is not a table")) };
        let title = t.get("title").and_then(toml::Value::as_str).map(|s| crate::escape::line(s.trim()));
        let name = match &title {
            Some(title) => format!("[[task]] {n} ('{}')", title.chars().take(60).collect::<String>()),
            None => format!("[[task]] {n}"),
        };
        if let Some(k) = t.keys().find(|k| !TASK_KEYS.contains(&k.as_str())) {
            return Err(format!("{name}: unknown key '{}' (one of {})", crate::escape::line(k), TASK_KEYS.join(", ")));
        }
        let p: Proposal = v.clone().try_into().map_err(|e: toml::de::Error| format!("{name}: {}", one_line(&e)))?;
        let trimmed = p.title.trim();
        if trimmed.is_empty() || trimmed.contains(['\n', '\r']) || trimmed.len() > crate::model::MAX_TITLE_LEN {
            return Err(format!(
                "{name}: the title is empty, more than one line or longer than {} bytes",
                crate::model::MAX_TITLE_LEN
            ));
        }
        if let Some(k) = &p.key
            && !keys.insert(k.clone())
        {
            return Err(format!("{name}: the key '{}' is used twice", crate::escape::line(k)));
        }
        for l in &p.labels {
            crate::model::validate_label(l).map_err(|e| format!("{name}: labels: {e}"))?;
        }
        for id in p.deps.iter().filter(|d| p.key.as_deref() != Some(d.as_str())).chain(p.parent.iter()) {
            if !keys.contains(id) && !tables.iter().any(|o| o.get("key").and_then(toml::Value::as_str) == Some(id)) {
                crate::model::validate_id(id).map_err(|e| format!("{name}: deps/parent: {e}"))?;
            }
        }
        out.push(p);
    }
    Ok(out)
}

/// Where each task of a task file goes wrong against `board`: a dependency that is neither a key of the file nor
/// a task, a parent that is no task. The first one, naming its table.
pub fn check_task_file(board: &Board, proposals: &[Proposal]) -> Result<(), String> {
    let keys: BTreeSet<&str> = proposals.iter().filter_map(|p| p.key.as_deref()).collect();
    for (i, p) in proposals.iter().enumerate() {
        let name = format!("[[task]] {} ('{}')", i + 1, crate::escape::line(p.title.trim()));
        for d in &p.deps {
            if !keys.contains(d.as_str()) && !board.contains(d) {
                return Err(format!(
                    "{name}: deps: '{}' is neither a key of the file nor a task",
                    crate::escape::line(d)
                ));
            }
        }
        if let Some(parent) = &p.parent
            && !board.contains(parent)
        {
            return Err(format!("{name}: parent: no task {}", crate::escape::line(parent)));
        }
    }
    Ok(())
}

/// The contents of fenced code blocks tagged `lang` (```` ```toml ````, any case). A fence line inside the block
/// (in a multi-line string) does not end it when the text up to there is not valid TOML yet but the text up to a
/// later fence is.
pub fn fenced_blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let lower = text.to_ascii_lowercase();
    let open = format!("```{lang}");
    let mut from = 0;
    while let Some(i) = lower[from..].find(&open).map(|i| i + from) {
        let after = i + open.len();
        let Some(nl) = text[after..].find('\n').map(|n| n + after) else { break };
        if !text[after..nl].trim().is_empty() {
            from = nl;
            continue;
        }
        let body_start = nl + 1;
        // Every line that starts with ``` after the opening is a candidate end.
        let mut ends = Vec::new();
        let mut pos = body_start;
        for line in text[body_start..].split_inclusive('\n') {
            if line.trim_start().starts_with("```") {
                ends.push(pos);
            }
            pos += line.len();
        }
        let Some(&first) = ends.first() else { break };
        let end = ends
            .iter()
            .copied()
            .find(|&e| toml::from_str::<toml::Table>(&text[body_start..e]).is_ok())
            .unwrap_or(first);
        out.push(&text[body_start..end]);
        from = text[end..].find('\n').map_or(text.len(), |n| end + n);
    }
    out
}

/// Turn proposals into new tasks under `parent`, in an order where every dep comes first, with ids minted for
/// the block's keys. Plans beyond the depth limit become work tasks.
pub fn to_new_tasks(
    board: &Board,
    parent: &str,
    proposals: &[Proposal],
    plans_allowed: bool,
) -> Result<(Vec<NewTask>, Vec<String>), DomainError> {
    new_tasks(board, &|_| Some(parent.to_string()), proposals, plans_allowed)
}

/// The tasks of a task file as [`ops::add`] takes them (deps by key resolved, in dependency order), each under its
/// own `parent` or else `default_parent`: the same filing as a planner's. With the ids minted for them.
pub fn task_file_tasks(
    board: &Board,
    default_parent: Option<&str>,
    proposals: &[Proposal],
) -> Result<(Vec<NewTask>, Vec<String>), DomainError> {
    let parent_of = |p: &Proposal| p.parent.clone().or(default_parent.map(String::from));
    new_tasks(board, &parent_of, proposals, true)
}

fn new_tasks(
    board: &Board,
    parent_of: &dyn Fn(&Proposal) -> Option<String>,
    proposals: &[Proposal],
    plans_allowed: bool,
) -> Result<(Vec<NewTask>, Vec<String>), DomainError> {
    // Mint an id for every proposal up front, so that deps by key can name them.
    let mut ids: Vec<String> = Vec::with_capacity(proposals.len());
    let mut taken = BTreeSet::new();
    for _ in proposals {
        ids.push(ops::fresh_id(board, &mut taken, &mut ops::mint_id)?);
    }
    let by_key: BTreeMap<&str, usize> =
        proposals.iter().enumerate().filter_map(|(i, p)| p.key.as_deref().map(|k| (k, i))).collect();
    let mut deps_of: Vec<Vec<usize>> = Vec::new();
    let mut ext_deps: Vec<Vec<String>> = Vec::new();
    for p in proposals {
        let mut mine = Vec::new();
        let mut ext = Vec::new();
        for d in &p.deps {
            match by_key.get(d.as_str()) {
                Some(j) => mine.push(*j),
                None if board.contains(d) => ext.push(d.clone()),
                None => return Err(DomainError::UnknownTask(d.clone())),
            }
        }
        deps_of.push(mine);
        ext_deps.push(ext);
    }
    // Topological order (Kahn, the earliest ready proposal first); a cycle is refused. Linear in the proposals and
    // their deps, however they are listed (a chain of 20,000 listed backwards included).
    let mut waiting: Vec<usize> = deps_of.iter().map(Vec::len).collect();
    let mut needed_by: Vec<Vec<usize>> = vec![Vec::new(); proposals.len()];
    for (i, deps) in deps_of.iter().enumerate() {
        for d in deps {
            needed_by[*d].push(i);
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> =
        (0..proposals.len()).filter(|i| waiting[*i] == 0).map(std::cmp::Reverse).collect();
    let mut order = Vec::with_capacity(proposals.len());
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &j in &needed_by[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.push(std::cmp::Reverse(j));
            }
        }
    }
    if order.len() < proposals.len() {
        let stuck: Vec<String> =
            (0..proposals.len()).filter(|i| waiting[*i] > 0).map(|i| proposals[i].title.clone()).collect();
        return Err(DomainError::DepsNotDone { id: "(proposed)".into(), waiting: stuck });
    }
    let mut demoted = Vec::new();
    let mut news = Vec::new();
    let mut minted = Vec::new();
    for i in order {
        let p = &proposals[i];
        let mut kind = p.kind;
        if kind == Kind::Plan && !plans_allowed {
            kind = Kind::Work;
            demoted.push(p.title.clone());
        }
        let mut deps: Vec<String> = deps_of[i].iter().map(|j| ids[*j].clone()).collect();
        deps.extend(ext_deps[i].iter().cloned());
        news.push(NewTask {
            title: p.title.trim().to_string(),
            body: p.body.clone(),
            kind,
            priority: p.priority,
            deps,
            labels: p.labels.clone(),
            parent: parent_of(p),
            acceptance: p.acceptance.clone(),
            scope: p.scope.clone(),
        });
        minted.push(ids[i].clone());
    }
    Ok((news, [minted, demoted].concat()))
}

/// Leave out the proposals that repeat a task of the same plan: one with the same title (case and spacing aside)
/// that is done, claimed, or open and still able to run — a planner that proposes the same task every round must
/// not file it every round, while one that proposes again a task that can never run (its dependency failed) is
/// routing around the failure and is filed. `live` is the newest state (open and claimed tasks), `full` the board
/// with every task (done ones: done is final). A later proposal's dependency on a left-out one (by its key) points
/// at the task it repeats. Returns what is kept and, per left-out proposal, its title and the id it repeats.
pub fn without_repeats(
    live: &Board,
    full: &Board,
    parent: &str,
    proposals: &[Proposal],
) -> (Vec<Proposal>, Vec<(String, String)>) {
    let norm = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let mut existing: BTreeMap<String, String> = BTreeMap::new();
    let children = |b: &'_ Board| {
        b.tasks.values().map(|s| &s.task).filter(|t| t.parent.as_deref() == Some(parent)).cloned().collect::<Vec<_>>()
    };
    for t in children(live) {
        let runs =
            t.status == Status::Claimed || (t.status == Status::Open && ops::blocked_for_good(live, &t).is_none());
        if runs {
            existing.entry(norm(&t.title)).or_insert(t.id);
        }
    }
    for t in children(full).into_iter().filter(|t| t.status == Status::Done) {
        existing.entry(norm(&t.title)).or_insert(t.id);
    }
    let mut repeats = Vec::new();
    let mut renamed: BTreeMap<String, String> = BTreeMap::new();
    let mut kept = Vec::new();
    for p in proposals {
        match existing.get(&norm(&p.title)) {
            Some(id) => {
                if let Some(k) = &p.key {
                    renamed.insert(k.clone(), id.clone());
                }
                repeats.push((p.title.clone(), id.clone()));
            }
            None => kept.push(p.clone()),
        }
    }
    for p in &mut kept {
        for d in &mut p.deps {
            if let Some(id) = renamed.get(d.as_str()) {
                d.clone_from(id);
            }
        }
    }
    (kept, repeats)
}

/// The depth of a plan task: 0 for a root, one more per plan parent.
fn depth(board: &Board, task: &Task) -> u32 {
    let mut d = 0;
    let mut cur = task.parent.clone();
    let mut seen = BTreeSet::new();
    while let Some(p) = cur {
        if !seen.insert(p.clone()) || d > 64 {
            break;
        }
        d += 1;
        cur = board.tasks.get(&p).and_then(|s| s.task.parent.clone());
    }
    d
}

pub fn run(r: &mut Runner<'_>, opts: &PlannerOptions) -> Result<(RunEnd, PlannerStats), RunError> {
    r.setup()?;
    let snap = r.read(false)?;
    r.check_trust(&snap, Role::Planner)?;
    let config = snap.board.config;
    r.settings(&config)?;
    r.backend(&config, Role::Planner)?;
    let mut stats = PlannerStats::default();
    if let Some(goal) = &opts.goal {
        let filer =
            super::goal::Filer { swarm: r.swarm, retry: &r.retry, who: &r.who, clock: r.clock, agent: &r.agent };
        if opts.replace_goal {
            filer.first_or_replace(goal)?;
        } else {
            filer.first(goal)?;
        }
    }
    let mut held: Vec<HeldPlan> = Vec::new();
    let res = run_loop(r, opts, &mut held, &mut stats);
    // Every way out gives back what is still held (an error too: another planner takes over at once).
    for h in held.drain(..) {
        r.release(&h.task.id, h.epoch);
    }
    r.teardown();
    res.map(|end| (end, stats))
}

fn run_loop(
    r: &mut Runner<'_>,
    opts: &PlannerOptions,
    held: &mut Vec<HeldPlan>,
    stats: &mut PlannerStats,
) -> Result<RunEnd, RunError> {
    let mut backoff = super::MIN_POLL;
    loop {
        if r.stopping() {
            return Ok(RunEnd::Interrupted);
        }
        let snap = r.read(false)?;
        if let Some(cycle) = r.stopped_at(&snap) {
            return Ok(RunEnd::SwarmStopped { cycle });
        }
        // The cycle spent its budget: no new claim, no new round; the plans held go back for the next cycle.
        if let Some(why) = super::cycle_budget_spent(&snap.board, &r.spent.budgets().1) {
            for h in std::mem::take(held) {
                r.release(&h.task.id, h.epoch);
            }
            return Ok(RunEnd::BudgetSpent { why });
        }
        let lease = snap.board.config.lease;
        let mut progressed = false;
        // Keep the plans we hold; note those whose children are all finished (or can never run).
        let mut i = 0;
        while i < held.len() {
            let (id, epoch, mut until) = (held[i].task.id.clone(), held[i].epoch, held[i].until);
            let renewed = r.renew_if_due(&id, epoch, &mut until, lease);
            held[i].until = until;
            if let Err(why) = renewed {
                r.emit(Event::LostClaim { task: id, why });
                held.remove(i);
                continue;
            }
            if held[i].waiting && !children_running(&snap, &id) {
                held[i].waiting = false;
                cancel_blocked_children(r, &snap, &id)?;
            }
            i += 1;
        }
        // Plan every held plan that is not waiting.
        let mut j = 0;
        while j < held.len() {
            if held[j].waiting {
                j += 1;
                continue;
            }
            progressed = true;
            let (head, rest) = held.split_at_mut(j);
            let (this, tail) = rest.split_first_mut().ok_or_else(|| RunError::Setup("internal: plan index".into()))?;
            let others: Vec<&mut HeldPlan> = head.iter_mut().chain(tail.iter_mut()).collect();
            match plan_round(r, this, others, stats)? {
                RoundEnd::Waiting if opts.mode == Mode::Once => {
                    // One round: give the plan back (its round count is in the task), so that the next round is
                    // anyone's.
                    return Ok(RunEnd::Done);
                }
                RoundEnd::Waiting => {
                    held[j].waiting = true;
                    j += 1;
                }
                RoundEnd::Finished | RoundEnd::Gone => {
                    held.remove(j);
                    if opts.mode == Mode::Once {
                        return Ok(RunEnd::Done);
                    }
                }
                RoundEnd::Interrupted => {
                    // Released already.
                    held.remove(j);
                    return Ok(RunEnd::Interrupted);
                }
            }
        }
        // Take a ready plan task.
        let snap = r.read(false)?;
        match r.transact(|snap, actor| ops::claim(&snap.board, actor, None, Kind::Plan, lease, None)) {
            Ok(c) => {
                if let Some(t) = c.value
                    && let Some(cl) = t.claim.clone()
                {
                    r.emit(Event::Claimed {
                        task: t.id.clone(),
                        title: t.title.clone(),
                        epoch: cl.epoch,
                        kind: Kind::Plan,
                    });
                    let rounds = t.plan_round;
                    // A plan taken over (or given back after a round) whose tasks still run waits for them first.
                    let snap = r.read(false)?;
                    let waiting = children_running(&snap, &t.id);
                    held.push(HeldPlan { task: t, epoch: cl.epoch, until: cl.lease_until, rounds, waiting });
                }
                continue;
            }
            Err(TxnError::Domain(DomainError::NothingReady { .. })) => {}
            Err(e) => return Err(e.into()),
        }
        if held.is_empty() {
            match opts.mode {
                Mode::Once if stats.rounds > 0 => return Ok(RunEnd::Done),
                Mode::Once => return Ok(RunEnd::NothingReady),
                Mode::UntilIdle if super::idle(&snap.board, (r.clock)()) => return Ok(RunEnd::Idle),
                _ => {}
            }
        }
        if !progressed {
            let why = if held.is_empty() {
                "no plan task ready".to_string()
            } else {
                format!("{} plan(s) wait for their tasks", held.len())
            };
            r.emit(Event::Waiting { why });
            // Wake up in time to renew what we hold.
            let max = Duration::from_secs(30).min(lease / 4).max(Duration::from_millis(500));
            r.wait_for_change(snap.commit, max, &mut backoff)?;
        }
    }
}

/// Does `plan` have a live child that can still run? (Children blocked for good by a failed dependency do not
/// count: waiting on them would wait for ever.)
fn children_running(snap: &Snapshot, plan: &str) -> bool {
    snap.board.tasks.values().any(|s| {
        s.task.parent.as_deref() == Some(plan)
            && (s.task.status == Status::Claimed || ops::blocked_for_good(&snap.board, &s.task).is_none())
    })
}

/// Cancel the children of `plan` that can never run, so that the board says so and the cycle can end.
fn cancel_blocked_children(r: &mut Runner<'_>, snap: &Snapshot, plan: &str) -> Result<(), RunError> {
    let ids: Vec<String> = children(snap, plan).into_iter().collect();
    if ids.is_empty() {
        return Ok(());
    }
    let res = r.transact(|snap, actor| Ok((ops::cancel_blocked(&snap.board, actor, &ids), ())))?;
    if res.commit.is_some() {
        r.emit(Event::Warning(format!("cancelled tasks of plan {plan} whose dependencies failed")));
    }
    Ok(())
}

enum RoundEnd {
    /// Tasks were filed; wait for them.
    Waiting,
    /// The plan is done (or failed).
    Finished,
    /// The claim was lost.
    Gone,
    /// A signal; the claim was released.
    Interrupted,
}

fn plan_round(
    r: &mut Runner<'_>,
    h: &mut HeldPlan,
    mut others: Vec<&mut HeldPlan>,
    stats: &mut PlannerStats,
) -> Result<RoundEnd, RunError> {
    let full = r.read(true)?;
    r.check_trust(&full, Role::Planner)?;
    let config = full.board.config.clone();
    let settings = r.settings(&config)?;
    let backend = r.backend(&config, Role::Planner)?;
    h.rounds += 1;
    stats.rounds += 1;
    let id = h.task.id.clone();
    let d = depth(&full.board, &h.task);
    let goal = super::goal(r.swarm.store(), full.commit).unwrap_or_else(|| h.task.body.clone());
    let name = if d == 0 { "planner" } else { "sub-planner" };
    let (template, warn) = prompts::load(r.swarm.store(), full.commit, name);
    if let Some(w) = warn {
        r.emit(Event::Warning(w));
    }
    let prompt = prompts::render(
        &template,
        &[
            ("goal", &goal),
            ("plan_id", &id),
            ("plan_title", &h.task.title),
            ("plan_body", &h.task.body),
            ("depth", &d.to_string()),
            ("max_depth", &settings.plan_depth.to_string()),
            ("round", &h.rounds.to_string()),
            ("board", &super::board_text(&full.board, 60_000)),
            ("handoffs", &super::handoffs(r.swarm.store(), &full, None, 60_000)),
            ("target", &config.target),
        ],
    );
    let children_before: BTreeSet<String> = children(&full, &id);
    // The planner explores a work tree at the target's tip (read-only by its prompt; whatever it changes is
    // thrown away with the tree).
    let wt = r.worktree();
    let common = r.common_dir();
    let branch = format!("refs/heads/{}", config.target);
    let cwd = match r.swarm.fetch_branch(&branch)? {
        Some(tip) => {
            git::add_worktree(&common, &wt, tip)?;
            wt.clone()
        }
        None => r.run_dir(),
    };
    let mut env = r.base_env(Role::Planner);
    env.push(("GIT_SWARM_PARENT".into(), id.clone()));
    env.push(("GIT_SWARM_TASK_ID".into(), id.clone()));
    env.push(("GIT_SWARM_TASK_TITLE".into(), h.task.title.clone()));
    env.push(("GIT_SWARM_ROUND".into(), h.rounds.to_string()));
    env.push(("GIT_SWARM_DEPTH".into(), d.to_string()));
    r.emit(Event::AgentStarted { task: id.clone(), what: "plan" });
    let (epoch, lease) = (h.epoch, config.lease);
    let mut until = h.until;
    let mut lost = None;
    env.extend(backend.env.iter().cloned());
    backend.clear_last_message();
    let out = {
        let stop = std::sync::Arc::clone(&r.stop);
        let (live, budget) = r.spent.watch(&id, epoch, h.task.usage);
        let inv = crate::agent::Invocation {
            cwd: &cwd,
            prompt: &prompt,
            prompt_file: r.run_dir().join("prompt.md"),
            env,
            log: Some(r.log_file()),
            timeout: Some(settings.plan_timeout),
            grace: Duration::from_secs(10),
            report: backend.report.clone(),
            live: Some(live),
            budget,
        };
        let guard = super::planted::Guard::take(&r.common_dir(), &cwd);
        let res = crate::agent::run(&backend.backend, &inv, &mut || {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            // The other plans this planner holds wait on their tasks meanwhile: keep their leases too.
            for o in others.iter_mut() {
                let (oid, oepoch) = (o.task.id.clone(), o.epoch);
                let _ = r.renew_if_due(&oid, oepoch, &mut o.until, lease);
            }
            match r.renew_if_due(&id, epoch, &mut until, lease) {
                Ok(()) => true,
                Err(why) => {
                    lost = Some(why);
                    false
                }
            }
        });
        r.spent.ended(&id, epoch, res.as_ref().ok().and_then(|o| o.usage));
        let planted = guard.restore();
        git::remove_worktree(&common, &wt);
        for p in planted {
            r.emit(Event::Warning(p));
        }
        res?
    };
    h.until = until;
    r.emit(Event::AgentExited { task: id.clone(), exit: out.exit.to_string(), secs: out.elapsed.as_secs_f64() });
    if let Some(why) = lost {
        r.emit(Event::LostClaim { task: id, why });
        return Ok(RoundEnd::Gone);
    }
    if out.exit == Exit::Stopped {
        r.release(&id, epoch);
        return Ok(RoundEnd::Interrupted);
    }
    let fail = |r: &mut Runner<'_>, reason: String| -> Result<RoundEnd, RunError> {
        let usage = r.spent.of(&id, epoch);
        r.spent.forget(&id, epoch);
        let for_good = matches!(out.exit, Exit::OverBudget(_));
        let res = r.transact(|snap, actor| {
            ops::fail_reporting(&snap.board, actor, &id, Some(epoch), reason.clone(), usage, for_good)
        });
        match res {
            Ok(c) => {
                r.emit(Event::Failed { task: id.clone(), reason, attempts_left: c.value.status == Status::Open });
                Ok(RoundEnd::Finished)
            }
            Err(TxnError::Domain(e)) => {
                r.emit(Event::LostClaim { task: id.clone(), why: e.to_string() });
                Ok(RoundEnd::Gone)
            }
            Err(e) => Err(e.into()),
        }
    };
    if crate::agent::could_not_start(&out) {
        // Nothing was planned: the plan goes back as it was, and the runner stops with the reason.
        r.release(&id, epoch);
        super::cannot_start(Role::Planner, &backend, &out)?;
    }
    if !out.exit.success() {
        return fail(r, super::reason_from(&format!("the planner agent {}", out.exit), &out.tail));
    }
    let proposals = match parse_proposals(&backend.answer(&out)) {
        Ok(p) => p,
        Err(e) => return fail(r, e),
    };
    let plans_allowed = d < settings.plan_depth;
    let last_round = h.rounds >= settings.plan_rounds;
    let round = h.rounds;
    let agent = r.agent.clone();
    let usage = r.spent.of(&id, epoch);
    let res = r.transact(|snap, actor| {
        // Tasks the agent filed itself with `git swarm add` count as proposals too.
        let filed_by_cli = children(snap, &id).difference(&children_before).count();
        let plan = snap.board.tasks.get(&id).ok_or_else(|| DomainError::UnknownTask(id.clone()))?;
        ops::check_holder(&plan.task, &agent, Some(epoch))?;
        let proposals = match &proposals {
            Some(p) if !p.is_empty() => p,
            Some(_) | None if filed_by_cli > 0 => {
                let mut t = plan.task.clone();
                t.plan_round = round;
                let spend = ops::report(&snap.board, &mut t, usage);
                let ch = ops::Change {
                    op: "plan",
                    agent: actor.agent.clone(),
                    task: Some(id.clone()),
                    epoch: Some(epoch),
                    summary: format!("plan {id}: round {round} (tasks filed by the agent)"),
                    writes: vec![ops::Stored { path: plan.path.clone(), task: t }],
                    spend,
                    ..Default::default()
                };
                return Ok((ch, Proposed::Filed(filed_by_cli, vec![], vec![])));
            }
            Some(_) => {
                let note = format!("planned in {round} round(s)");
                let (ch, _) = ops::done_reporting(&snap.board, actor, &id, Some(epoch), None, Some(note), usage)?;
                return Ok((ch, Proposed::Nothing));
            }
            None => return Ok((Default::default(), Proposed::NoBlock)),
        };
        // A repeat of a task of this plan (the same title, open or done) is not filed again.
        let (fresh, repeats) = without_repeats(&snap.board, &full.board, &id, proposals);
        if fresh.is_empty() && filed_by_cli == 0 {
            let note = format!("planned in {round} round(s); the last proposed only what the plan has");
            let (ch, _) = ops::done_reporting(&snap.board, actor, &id, Some(epoch), None, Some(note), usage)?;
            return Ok((ch, Proposed::Repeats(repeats)));
        }
        let proposals = &fresh;
        let (news, extra) = to_new_tasks(&snap.board, &id, proposals, plans_allowed)?;
        let minted: Vec<String> = extra.iter().take(news.len()).cloned().collect();
        let demoted: Vec<String> = extra.iter().skip(news.len()).cloned().collect();
        let mut queue = minted.into_iter();
        let mut mint = || queue.next().unwrap_or_else(ops::mint_id);
        let (mut ch, _) = ops::add(&snap.board, actor, news, &mut mint)?;
        // The plan keeps its round count, for whoever plans its next round, and what its rounds spent.
        let mut t = plan.task.clone();
        t.plan_round = round;
        ch.spend = ops::report(&snap.board, &mut t, usage);
        ch.writes.push(ops::Stored { path: plan.path.clone(), task: t });
        ch.summary = format!("plan {id}: {}", ch.summary);
        Ok((ch, Proposed::Filed(proposals.len() + filed_by_cli, demoted, repeats)))
    });
    match res {
        Ok(c) => match c.value {
            Proposed::NoBlock => fail(
                r,
                "the planner printed no ```toml block with [[task]] tables (an empty block means: nothing more to do)"
                    .into(),
            ),
            Proposed::Nothing => {
                stats.plans_done += 1;
                r.emit(Event::PlanDone { plan: id, rounds: h.rounds });
                Ok(RoundEnd::Finished)
            }
            Proposed::Repeats(repeats) => {
                report_repeats(r, &repeats);
                stats.plans_done += 1;
                r.emit(Event::PlanDone { plan: id, rounds: h.rounds });
                Ok(RoundEnd::Finished)
            }
            Proposed::Filed(n, demoted, repeats) => {
                report_repeats(r, &repeats);
                for t in demoted {
                    r.emit(Event::Warning(format!(
                        "'{}' was proposed as a plan beyond the depth limit ({}); filed as a work task",
                        crate::escape::line(&t),
                        settings.plan_depth
                    )));
                }
                stats.proposed += n as u64;
                r.emit(Event::Proposed { plan: id.clone(), count: n });
                if last_round {
                    // The round limit: this plan has had its say; what it filed runs without it.
                    let note = format!("stopped after {} rounds (run.plan_rounds)", h.rounds);
                    match r.transact(|snap, actor| {
                        ops::done_reporting(&snap.board, actor, &id, Some(epoch), None, Some(note.clone()), usage)
                    }) {
                        Ok(_) => {
                            r.emit(Event::PlanDone { plan: id, rounds: h.rounds });
                            stats.plans_done += 1;
                        }
                        Err(TxnError::Domain(e)) => r.emit(Event::LostClaim { task: id, why: e.to_string() }),
                        Err(e) => return Err(e.into()),
                    }
                    return Ok(RoundEnd::Finished);
                }
                Ok(RoundEnd::Waiting)
            }
        },
        Err(TxnError::Domain(e @ (DomainError::UnknownTask(_) | DomainError::DepsNotDone { .. }))) if !matches!(&e, DomainError::UnknownTask(u) if *u == id) => {
            fail(r, format!("the planner proposed tasks that cannot be filed: {e}"))
        }
        Err(TxnError::Domain(e)) => {
            r.emit(Event::LostClaim { task: id, why: e.to_string() });
            Ok(RoundEnd::Gone)
        }
        Err(e) => Err(e.into()),
    }
}

fn report_repeats(r: &mut Runner<'_>, repeats: &[(String, String)]) {
    for (title, existing) in repeats {
        r.emit(Event::Warning(format!(
            "not filed again: '{}' repeats {existing} of the same plan",
            crate::escape::line(title)
        )));
    }
}

/// What a planning round came to.
enum Proposed {
    /// Tasks were filed (by the block, or by the agent through the CLI); plans demoted to work; repeats left out.
    Filed(usize, Vec<String>, Vec<(String, String)>),
    /// Everything proposed repeats tasks of the plan: the plan is done.
    Repeats(Vec<(String, String)>),
    /// An empty block: the plan is done.
    Nothing,
    /// No block at all: a failed round.
    NoBlock,
}

/// Ids of the live tasks whose parent is `plan`.
fn children(snap: &Snapshot, plan: &str) -> BTreeSet<String> {
    snap.board.tasks.values().filter(|s| s.task.parent.as_deref() == Some(plan)).map(|s| s.task.id.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(key: &str, title: &str, deps: &[&str]) -> Proposal {
        Proposal {
            key: Some(key.into()),
            title: title.into(),
            body: String::new(),
            acceptance: String::new(),
            scope: vec![],
            kind: Kind::Work,
            priority: 0,
            deps: deps.iter().map(|d| d.to_string()).collect(),
            labels: vec![],
            parent: None,
        }
    }

    #[test]
    fn proposals_come_from_toml_blocks_and_an_empty_block_means_nothing() {
        let out = "thinking…\n```toml\n[[task]]\nkey = \"a\"\ntitle = \"A\"\n\n[[task]]\ntitle = \"B\"\ndeps = [\"a\"]\nkind = \"plan\"\n```\nbye";
        let p = parse_proposals(out).expect("ok").expect("some");
        assert_eq!(p.len(), 2);
        assert_eq!((p[1].kind, p[1].deps.clone()), (Kind::Plan, vec!["a".to_string()]));
        assert_eq!(parse_proposals("```toml\n```\n").expect("ok"), Some(vec![]));
        assert_eq!(parse_proposals("no block").expect("ok"), None);
        assert!(parse_proposals("```toml\n[[task]]\ntitel = \"x\"\n```").is_err(), "no title");
        // Other toml blocks are passed over; the last [[task]] block wins; unknown keys are ignored.
        let out = "```toml\n[package]\nname = \"x\"\n```\n```toml\n[[task]]\ntitle = \"example\"\n```\n```TOML\n[[task]]\ntitle = \"real\"\neffort = \"small\"\n```";
        assert_eq!(parse_proposals(out).expect("ok").expect("some")[0].title, "real");
        assert_eq!(parse_proposals("```toml\n[package]\nname = \"x\"\n```").expect("ok"), None);
        // A fence inside a multi-line string does not end the block.
        let out = "```toml\n[[task]]\ntitle = \"t\"\nbody = '''\nrun:\n```\nmake\n```\n'''\n```\n";
        assert_eq!(parse_proposals(out).expect("ok").expect("some")[0].body, "run:\n```\nmake\n```\n");
        assert!(
            parse_proposals("```toml\n[[task]]\nkey=\"k\"\ntitle=\"x\"\n[[task]]\nkey=\"k\"\ntitle=\"y\"\n```")
                .is_err()
        );
    }

    #[test]
    fn repeats_of_the_plans_tasks_are_left_out_but_not_of_tasks_that_can_never_run() {
        let actor = ops::Actor { agent: "p".into(), now: crate::time::Timestamp::from_secs(1_800_000_000) };
        let mut board = Board::default();
        let add = |b: &mut Board, title: &str, deps: Vec<String>| {
            let parent = b.tasks.values().find(|s| s.task.kind == Kind::Plan).map(|s| s.task.id.clone());
            let kind = if parent.is_none() { Kind::Plan } else { Kind::Work };
            let new = NewTask { title: title.into(), parent, kind, deps, ..NewTask::default() };
            let mut ids = 0u32;
            let (ch, t) = ops::add(b, &actor, vec![new], &mut || {
                ids += 1;
                format!("t-{:06x}", b.tasks.len() as u32 * 16 + ids)
            })
            .expect("add");
            ops::apply(b, &ch);
            t[0].id.clone()
        };
        let root = add(&mut board, "Goal: parse", vec![]);
        let parser = add(&mut board, "Write the parser", vec![]);
        let failing = add(&mut board, "Fetch the data", vec![]);
        let blocked = add(&mut board, "Use the data", vec![failing.clone()]);
        // `Fetch the data` fails for good: `Use the data` can never run.
        board.tasks.get_mut(&failing).expect("t").task.status = Status::Failed;
        let prop = proposal;
        let proposals = [
            prop("p", "write  the PARSER", &[]),
            prop("u", "Use the data", &[]),
            prop("d", "Document it", &["p", "u"]),
        ];
        let (kept, repeats) = without_repeats(&board, &board, &root, &proposals);
        assert_eq!(repeats, vec![("write  the PARSER".to_string(), parser.clone())]);
        let titles: Vec<&str> = kept.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(titles, ["Use the data", "Document it"], "a repeat of a task that can never run is filed");
        assert_eq!(kept[1].deps, vec![parser, "u".to_string()], "a dependency on a repeat points at the task");
        let _ = blocked;
        // Another plan's task of the same title is not a repeat.
        let (kept, _) = without_repeats(&board, &board, "t-other", &proposals[..1]);
        assert_eq!(kept.len(), 1);
    }

    #[test]
    fn a_chain_listed_backwards_is_filed_in_dependency_order() {
        let board = Board::default();
        let n = 2_000;
        // k0 ← k1 ← … ← k(n-1), listed from the end: every task needs the one listed after it.
        let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
        let props: Vec<Proposal> = (0..n)
            .rev()
            .map(|i| {
                let deps: Vec<&str> = if i == 0 { vec![] } else { vec![keys[i - 1].as_str()] };
                proposal(&keys[i], &keys[i], &deps)
            })
            .collect();
        let (news, ids) = to_new_tasks(&board, "t-root", &props, true).expect("ok");
        let titles: Vec<&str> = news.iter().map(|t| t.title.as_str()).collect();
        let expected: Vec<&str> = keys.iter().map(String::as_str).collect();
        assert_eq!(titles, expected);
        // Each one's dep is the id minted for the one before it.
        assert_eq!(ids.len(), n);
        for k in 1..n {
            assert_eq!(news[k].deps, vec![ids[k - 1].clone()], "task {k}");
        }
    }

    #[test]
    fn new_tasks_come_in_dependency_order_with_minted_ids_and_cycles_are_refused() {
        let board = Board::default();
        let p = |key: &str, deps: &[&str]| proposal(key, key, deps);
        let (news, ids) = to_new_tasks(&board, "t-root", &[p("b", &["a"]), p("a", &[])], true).expect("ok");
        assert_eq!(news[0].title, "a");
        assert_eq!(news[1].deps, vec![ids[0].clone()]);
        assert!(to_new_tasks(&board, "t-root", &[p("a", &["b"]), p("b", &["a"])], true).is_err());
        assert!(to_new_tasks(&board, "t-root", &[p("a", &["t-nowhere"])], true).is_err());
    }
}
