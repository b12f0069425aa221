//! Plans: the `[[task]]` tables a planner proposes or a task file holds, how they become new tasks (deps by key,
//! dependency order, repeats left out), and the planning round's write ([`plan_round`]), a pure op like the others.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{Actor, Board, Change, DomainError, NewTask, Stored};
use crate::escape::squash;
use crate::model::{Kind, Status};
use crate::usage::Usage;

/// A task as a planner proposes it (one `[[task]]` table of its output). Keys this version does not know are
/// ignored (models add fields).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
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
pub(crate) const TASK_KEYS: &[&str] =
    &["key", "title", "body", "acceptance", "scope", "kind", "priority", "deps", "labels", "parent"];

/// The tasks of a task file (`git swarm add --file`): a TOML document of `[[task]]` tables, the planner's format
/// (`docs/agents.md`), strictly: an unknown key is an error (a typo must not drop a dependency), and every error
/// names its table (`[[task]] 3 ('Write the parser'): …`). Keys must be unique; deps name a key of the file or a task.
pub fn parse_task_file(text: &str) -> Result<Vec<Proposal>, String> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| format!("not valid TOML: {}", squash(&e)))?;
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
    // Every key of the file, for deps on a task further down (a chain listed backwards): one set, not a scan of
    // every table for each dep.
    let all_keys: BTreeSet<&str> = tables.iter().filter_map(|t| t.get("key").and_then(toml::Value::as_str)).collect();
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
        let p: Proposal = v.clone().try_into().map_err(|e: toml::de::Error| format!("{name}: {}", squash(&e)))?;
        let trimmed = p.title.trim();
        if trimmed.is_empty() || trimmed.contains(['\n', '\r']) || trimmed.len() > crate::model::MAX_TITLE_LEN {
            return Err(format!(
                "{name}: the title is empty, more than one line or longer than {} bytes",
                crate::model::MAX_TITLE_LEN
            ));
        }
        // The title reaches agents as an environment variable, which cannot hold a NUL (`Task::validate`).
        if trimmed.contains('\0') {
            return Err(format!("{name}: the title contains a NUL character"));
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
            if !all_keys.contains(id.as_str()) {
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

/// Turn proposals into new tasks under `parent`, in an order where every dep comes first, with ids minted for
/// the block's keys (by `mint`, [`super::mint_id`] outside tests). Plans beyond the depth limit become work tasks.
pub fn to_new_tasks(
    board: &Board,
    parent: &str,
    proposals: &[Proposal],
    plans_allowed: bool,
    mint: &mut dyn FnMut() -> String,
) -> Result<(Vec<NewTask>, Vec<String>), DomainError> {
    new_tasks(board, &|_| Some(parent.to_string()), proposals, plans_allowed, mint).map(|n| (n.news, n.minted))
}

/// The tasks of a task file as [`super::add`] takes them (deps by key resolved, in dependency order), each under its
/// own `parent` or else `default_parent`: the same filing as a planner's. With the ids minted for them.
pub fn task_file_tasks(
    board: &Board,
    default_parent: Option<&str>,
    proposals: &[Proposal],
) -> Result<FileTasks, DomainError> {
    task_file_tasks_with(board, default_parent, proposals, &mut super::mint_id)
}

/// [`task_file_tasks`] with the ids minted by `mint`, asked once per proposal in the file's order (an id already
/// on the board is thrown away and another asked for).
pub fn task_file_tasks_with(
    board: &Board,
    default_parent: Option<&str>,
    proposals: &[Proposal],
    mint: &mut dyn FnMut() -> String,
) -> Result<FileTasks, DomainError> {
    let parent_of = |p: &Proposal| p.parent.clone().or(default_parent.map(String::from));
    let n = new_tasks(board, &parent_of, proposals, true, mint)?;
    let keys = n.order.iter().map(|i| proposals[*i].key.clone()).collect();
    Ok(FileTasks { news: n.news, minted: n.minted, keys })
}

/// The tasks of a task file, ready for [`super::add`]: in dependency order, the ids minted for them, and the key
/// each had in the file (`None` for a table without one).
#[derive(Debug)]
pub struct FileTasks {
    pub news: Vec<NewTask>,
    pub minted: Vec<String>,
    pub keys: Vec<Option<String>>,
}

/// What [`new_tasks`] makes: the tasks in dependency order, the ids minted for them (then the titles of the plans
/// made work tasks), and the index of each task's proposal.
struct NewTasks {
    news: Vec<NewTask>,
    minted: Vec<String>,
    order: Vec<usize>,
}

fn new_tasks(
    board: &Board,
    parent_of: &dyn Fn(&Proposal) -> Option<String>,
    proposals: &[Proposal],
    plans_allowed: bool,
    mint: &mut dyn FnMut() -> String,
) -> Result<NewTasks, DomainError> {
    // Mint an id for every proposal up front, so that deps by key can name them.
    let mut ids: Vec<String> = Vec::with_capacity(proposals.len());
    let mut taken = BTreeSet::new();
    for _ in proposals {
        ids.push(super::fresh_id(board, &mut taken, mint)?);
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
    for &i in &order {
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
    Ok(NewTasks { news, minted: [minted, demoted].concat(), order })
}

/// Leave out the proposals that repeat a task of the same plan: one with the same title (case and spacing aside)
/// that is done, claimed, or open and still able to run — a planner that proposes the same task every round must
/// not file it every round, while one that proposes again a task that can never run (its dependency failed) is
/// routing around the failure and is filed. `live` is the newest state (open and claimed tasks), `full` the board
/// with every task (done ones: done is final). A later proposal's dependency on a left-out one (by its key) points
/// at the task it repeats. Returns what is kept and, per left-out proposal, its title and the id it repeats.
pub(crate) fn without_repeats(
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
            t.status == Status::Claimed || (t.status == Status::Open && super::blocked_for_good(live, &t).is_none());
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

/// What a planning round came to.
pub enum Proposed {
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
pub fn children(board: &Board, plan: &str) -> BTreeSet<String> {
    board.tasks.values().filter(|s| s.task.parent.as_deref() == Some(plan)).map(|s| s.task.id.clone()).collect()
}

/// What a planning round brings to the board: the plan's agent proposed `proposals` (from its answer's block;
/// `None`: it printed none) in round `round` of the plan it holds at `epoch`.
#[derive(Debug, Clone, Copy)]
pub struct PlanRound<'a> {
    pub plan: &'a str,
    pub epoch: u64,
    pub round: u32,
    pub proposals: Option<&'a [Proposal]>,
    /// The plan may file plans (its depth is below the limit); else proposed plans become work tasks.
    pub plans_allowed: bool,
    /// The plan's live children when the round began: any others were filed by the agent itself (`git swarm add`)
    /// and count as proposals.
    pub children_before: &'a BTreeSet<String>,
    /// Every task (done ones too) when the round began: a proposal repeating a done child is not filed.
    pub full: &'a Board,
    /// What the round's agent run spent, as reported.
    pub usage: Option<Usage>,
}

/// The write of a planning round on `board` (the newest state) by the plan's holder: its proposals filed as tasks
/// of the plan, in one change with the plan's round count and spend; or the plan done when the agent proposed
/// nothing (an empty block) or only repeats; or nothing at all when it printed no block (the caller fails the
/// round). A plan no longer held by `actor` at `epoch` is refused.
/// Ids are minted by `mint` ([`super::mint_id`] outside tests).
pub fn plan_round(
    board: &Board,
    actor: &Actor,
    round: &PlanRound<'_>,
    mint: &mut dyn FnMut() -> String,
) -> Result<(Change, Proposed), DomainError> {
    let id = round.plan;
    // Tasks the agent filed itself with `git swarm add` count as proposals too.
    let filed_by_cli = children(board, id).difference(round.children_before).count();
    // A finished plan is `Final`, as for every op on a task (the op view knows it by its path alone).
    let plan = super::get(board, id)?;
    super::check_holder(&plan.task, &actor.agent, Some(round.epoch))?;
    let n = round.round;
    let proposals = match round.proposals {
        Some(p) if !p.is_empty() => p,
        Some(_) | None if filed_by_cli > 0 => {
            let mut t = plan.task.clone();
            t.plan_round = n;
            let spend = super::report(board, &mut t, round.usage);
            let ch = Change {
                op: "plan",
                agent: actor.agent.clone(),
                task: Some(id.to_string()),
                epoch: Some(round.epoch),
                summary: format!("plan {id}: round {n} (tasks filed by the agent)"),
                writes: vec![Stored { path: plan.path.clone(), task: t }],
                spend,
                ..Default::default()
            };
            return Ok((ch, Proposed::Filed(filed_by_cli, vec![], vec![])));
        }
        Some(_) => {
            let note = format!("planned in {n} round(s)");
            let (ch, _) = super::done(board, actor, id, Some(round.epoch), None, Some(note), round.usage)?;
            return Ok((ch, Proposed::Nothing));
        }
        None => return Ok((Change { agent: actor.agent.clone(), ..Change::default() }, Proposed::NoBlock)),
    };
    // A repeat of a task of this plan (the same title, open or done) is not filed again.
    let (fresh, repeats) = without_repeats(board, round.full, id, proposals);
    if fresh.is_empty() && filed_by_cli == 0 {
        let note = format!("planned in {n} round(s); the last proposed only what the plan has");
        let (ch, _) = super::done(board, actor, id, Some(round.epoch), None, Some(note), round.usage)?;
        return Ok((ch, Proposed::Repeats(repeats)));
    }
    let (news, extra) = to_new_tasks(board, id, &fresh, round.plans_allowed, mint)?;
    let minted: Vec<String> = extra.iter().take(news.len()).cloned().collect();
    let demoted: Vec<String> = extra.iter().skip(news.len()).cloned().collect();
    let mut queue = minted.into_iter();
    let mut next = || queue.next().unwrap_or_else(&mut *mint);
    let (mut ch, _) = super::add(board, actor, news, &mut next)?;
    // The plan keeps its round count, for whoever plans its next round, and what its rounds spent.
    let mut t = plan.task.clone();
    t.plan_round = n;
    ch.spend = super::report(board, &mut t, round.usage);
    ch.writes.push(Stored { path: plan.path.clone(), task: t });
    ch.summary = format!("plan {id}: {}", ch.summary);
    Ok((ch, Proposed::Filed(fresh.len() + filed_by_cli, demoted, repeats)))
}

#[cfg(test)]
mod tests {
    use super::super::mint_id;
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
    fn repeats_of_the_plans_tasks_are_left_out_but_not_of_tasks_that_can_never_run() {
        let actor = Actor { agent: "p".into(), now: crate::time::Timestamp::from_secs(1_800_000_000) };
        let mut board = Board::default();
        let add = |b: &mut Board, title: &str, deps: Vec<String>| {
            let parent = b.tasks.values().find(|s| s.task.kind == Kind::Plan).map(|s| s.task.id.clone());
            let kind = if parent.is_none() { Kind::Plan } else { Kind::Work };
            let new = NewTask { title: title.into(), parent, kind, deps, ..NewTask::default() };
            let mut ids = 0u32;
            let (ch, t) = super::super::add(b, &actor, vec![new], &mut || {
                ids += 1;
                format!("t-{:06x}", b.tasks.len() as u32 * 16 + ids)
            })
            .expect("add");
            super::super::apply(b, &ch);
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
        let (news, ids) = to_new_tasks(&board, "t-root", &props, true, &mut mint_id).expect("ok");
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
        let (news, ids) =
            to_new_tasks(&board, "t-root", &[p("b", &["a"]), p("a", &[])], true, &mut mint_id).expect("ok");
        assert_eq!(news[0].title, "a");
        assert_eq!(news[1].deps, vec![ids[0].clone()]);
        assert!(to_new_tasks(&board, "t-root", &[p("a", &["b"]), p("b", &["a"])], true, &mut mint_id).is_err());
        assert!(to_new_tasks(&board, "t-root", &[p("a", &["t-nowhere"])], true, &mut mint_id).is_err());
    }
}
