//! `git swarm add`: a new open task, or all the tasks of a task file (`--file`) in one commit.

use std::path::PathBuf;

use crate::model::{Kind, MAX_TASK_FILE_BYTES, MAX_TITLE_LEN, validate_label};
use crate::ops::{self, Actor, NewTask};

use super::output::task_json;
use super::{CliError, CliResult, Ctx, parse_id, parse_kind};

#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The task's title (one line).
    #[arg(required_unless_present = "file")]
    title: Option<String>,
    /// Add every `[[task]]` table of this TOML file (`-` for stdin) — the planner's format: `key`, `title`, `body`,
    /// `acceptance`, `scope`, `priority`, `labels`, `kind`, `deps` (keys of the file or task ids), `parent` — in one
    /// commit and one push, all or none.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["title", "body", "body_file", "after", "labels", "acceptance", "scope"])]
    file: Option<PathBuf>,
    /// The task's description.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Read the description from a file (`-` for stdin).
    #[arg(long, value_name = "PATH")]
    body_file: Option<PathBuf>,
    /// Wait for this task to be done before this one is ready (repeatable).
    #[arg(long = "after", value_name = "ID", value_parser = parse_id)]
    after: Vec<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = parse_priority)]
    priority: i64,
    /// A label (repeatable).
    #[arg(long = "label", value_name = "LABEL")]
    labels: Vec<String>,
    /// `work` (code to write) or `plan` (an area to plan).
    #[arg(long, default_value = "work", value_parser = parse_kind)]
    kind: Kind,
    /// The plan task this one belongs to [default: $GIT_SWARM_PARENT, set for planner agents by the runner].
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    parent: Option<String>,
    /// How to tell the task is done (a test, a command and its expected output).
    #[arg(long, value_name = "TEXT")]
    acceptance: Option<String>,
    /// A path the task is about (repeatable).
    #[arg(long = "scope", value_name = "PATH")]
    scope: Vec<String>,
}

/// Inside an agent's run, where the tasks it files go: the runner files them when the run is over
/// (`runner::outbox`).
fn outbox(ctx: &Ctx) -> Option<PathBuf> {
    ctx.env.outbox().map(PathBuf::from)
}

pub(super) fn run(ctx: &mut Ctx, mut args: AddArgs) -> CliResult<()> {
    // `--parent`, else `$GIT_SWARM_PARENT` (a runner sets it for its planner's agent).
    args.parent = args.parent.or_else(|| ctx.env.parent().map(String::from));
    if let Some(file) = &args.file {
        return add_file(ctx, file, args.parent.as_deref());
    }
    let title = args.title.as_deref().unwrap_or_default().trim().to_string();
    if title.is_empty() {
        return Err(CliError::usage("add: the title is empty"));
    }
    if title.contains(['\n', '\r']) {
        return Err(CliError::usage("add: the title must be one line; put the rest in --body"));
    }
    if title.len() > MAX_TITLE_LEN {
        return Err(CliError::usage(format!(
            "add: the title is longer than {MAX_TITLE_LEN} bytes; put the rest in --body"
        )));
    }
    for l in &args.labels {
        validate_label(l).map_err(|e| CliError::usage(format!("--label: {e}")))?;
    }
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => b.clone(),
        (None, Some(p)) if p.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| CliError::io(format!("--body-file -: cannot read stdin: {e}")))?;
            s
        }
        (None, Some(p)) => {
            std::fs::read_to_string(p).map_err(|e| CliError::io(format!("--body-file {}: {e}", p.display())))?
        }
        (None, None) => String::new(),
    };
    // Leave room for the other fields within the file limit.
    let max_body = (MAX_TASK_FILE_BYTES as usize) / 2;
    if body.len() > max_body {
        return Err(CliError::usage(format!(
            "add: the body is {} bytes, more than the limit of {max_body}; link to a file in the repository instead",
            body.len()
        )));
    }
    let new = NewTask {
        title,
        body,
        kind: args.kind,
        priority: args.priority,
        deps: args.after,
        labels: args.labels,
        parent: args.parent,
        acceptance: args.acceptance.unwrap_or_default(),
        scope: args.scope,
    };
    if let Some(path) = outbox(ctx) {
        let id = ops::mint_id();
        let p = crate::ops::plan::Proposal {
            key: Some(id.clone()),
            title: new.title.clone(),
            body: new.body.clone(),
            acceptance: new.acceptance.clone(),
            scope: new.scope.clone(),
            kind: new.kind,
            priority: new.priority,
            deps: new.deps.clone(),
            labels: new.labels.clone(),
            parent: new.parent.clone(),
        };
        return to_outbox(ctx, &path, vec![p]);
    }
    // A task with no deps needs no other task parsed but its parent; whether an id is taken is known by the names
    // of the files.
    let parent: Vec<&str> = new.parent.iter().map(String::as_str).collect();
    let reads = if new.deps.is_empty() { crate::Reads::TasksAndNames(&parent) } else { crate::Reads::Live };
    let (_swarm, c) = ctx.transact_on(reads, |snap, now, agent| {
        let actor = Actor { agent: agent.to_string(), now };
        ops::add(&snap.board, &actor, vec![new.clone()], &mut ops::mint_id)
    })?;
    let now = ctx.now();
    for t in &c.value {
        ctx.out.line(&t.id);
    }
    if let [t] = c.value.as_slice() {
        ctx.out.doc(&task_json(t, now));
    }
    Ok(())
}

/// `--priority`: a whole number, higher first (a word like `high` says what to write instead).
fn parse_priority(s: &str) -> Result<i64, String> {
    s.trim().parse::<i64>().map_err(|_| {
        format!("'{s}' is not a whole number: higher runs first, e.g. --priority 2 (urgent) or --priority -1 (later); the default is 0")
    })
}

/// `add --file`: every task of the file, one op.
fn add_file(ctx: &mut Ctx, file: &std::path::Path, parent: Option<&str>) -> CliResult<()> {
    let shown = file.display().to_string();
    let bytes = if file.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
            .map_err(|e| CliError::io(format!("--file -: cannot read stdin: {e}")))?;
        b
    } else {
        std::fs::read(file).map_err(|e| CliError::io(format!("--file {shown}: {e}")))?
    };
    let bad =
        |e: String| CliError::usage(format!("--file {shown}: {e}")).hint("the format: docs/contract.md (`add --file`)");
    // Not UTF-8 is the file's own fault, like bad TOML (exit 2), not a failure to read it.
    let text = String::from_utf8(bytes).map_err(|e| {
        bad(format!("not UTF-8 text (the first bad byte is at offset {})", e.utf8_error().valid_up_to()))
    })?;
    let proposals = crate::ops::plan::parse_task_file(&text).map_err(bad)?;
    let max_body = (MAX_TASK_FILE_BYTES as usize) / 2;
    if let Some((i, p)) = proposals.iter().enumerate().find(|(_, p)| p.body.len() > max_body) {
        return Err(bad(format!("[[task]] {} ('{}'): the body is more than {max_body} bytes", i + 1, p.title.trim())));
    }
    let mut keys = Vec::new();
    if let Some(path) = outbox(ctx) {
        // The file's keys become the ids the agent is told, and its deps by key follow them.
        let ids: std::collections::BTreeMap<String, String> =
            proposals.iter().filter_map(|p| p.key.clone()).map(|k| (k, ops::mint_id())).collect();
        let proposals = proposals
            .into_iter()
            .map(|mut p| {
                p.key = Some(p.key.as_ref().and_then(|k| ids.get(k).cloned()).unwrap_or_else(ops::mint_id));
                p.deps = p.deps.iter().map(|d| ids.get(d).cloned().unwrap_or_else(|| d.clone())).collect();
                p.parent = p.parent.or_else(|| parent.map(str::to_string));
                p
            })
            .collect();
        return to_outbox(ctx, &path, proposals);
    }
    let (_swarm, c) = ctx.transact(|snap, now, agent| {
        let actor = Actor { agent: agent.to_string(), now };
        crate::ops::plan::check_task_file(&snap.board, &proposals)
            .map_err(|why| ops::DomainError::NotOnBoard { file: format!("--file {shown}"), why })?;
        let file = crate::ops::plan::task_file_tasks(&snap.board, parent, &proposals)?;
        keys = file.keys;
        let mut queue = file.minted.into_iter();
        let mut mint = || queue.next().unwrap_or_else(ops::mint_id);
        ops::add(&snap.board, &actor, file.news, &mut mint)
    })?;
    let now = ctx.now();
    // A line a task: its id, the key it had in the file (`-` without one), its title — so that a script or a
    // person can tell which id is which without reading the board.
    for (t, key) in c.value.iter().zip(keys.iter().chain(std::iter::repeat(&None))) {
        let key = key.as_deref().map(crate::escape::line).unwrap_or_else(|| "-".into());
        ctx.out.line(format!("{}  {key}  {}", t.id, crate::escape::line(&t.title)));
    }
    let mut doc = super::output::tasks_json(&c.value, now);
    if let Some(items) = doc.as_array_mut() {
        for (item, key) in items.iter_mut().zip(keys.iter()) {
            if let Some(o) = item.as_object_mut() {
                o.insert("key".into(), serde_json::json!(key));
            }
        }
    }
    ctx.out.doc(&doc);
    Ok(())
}

/// `add` inside an agent's run: the tasks go to its outbox, which the runner files when the run is over (the
/// agent holds no credential to push with). Their ids are printed as they will be filed.
fn to_outbox(ctx: &mut Ctx, path: &std::path::Path, tasks: Vec<crate::ops::plan::Proposal>) -> CliResult<()> {
    crate::runner::outbox::append(path, &tasks).map_err(CliError::io)?;
    let mut docs = Vec::new();
    for t in &tasks {
        let id = t.key.clone().unwrap_or_default();
        ctx.out.line(&id);
        docs.push(serde_json::json!({
            "id": id, "title": t.title, "body": t.body, "kind": t.kind.as_str(), "status": "open",
            "priority": t.priority, "deps": t.deps, "labels": t.labels, "parent": t.parent, "filed": false,
        }));
    }
    ctx.out.note("(the runner files these when this agent's run is over)");
    match docs.as_slice() {
        [one] => ctx.out.doc(one),
        _ => ctx.out.doc(&serde_json::Value::Array(docs)),
    }
    Ok(())
}
