//! `git swarm board --html`: one self-contained page — inline CSS and inline SVG, no script, no external reference
//! of any kind — with the counts, the holders, the plan tree, the dependency graph coloured by status, a timeline
//! of agents and the tasks they held, throughput over time, and the recent failures.
//!
//! Every string that comes from the board (titles, agents, reasons, the remote) is HTML-escaped by [`esc`]. Elements
//! carry `id`s and `data-*` attributes (`data-status`, `data-outcome`, `data-task`) so that tests and scripts can
//! check the structure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

use super::{BoardView, Outcome, TaskNode};
use crate::model::Status;
use crate::time::Timestamp;

/// Most nodes drawn in the dependency graph; beyond it the graph shows the live tasks first and says so.
pub const MAX_GRAPH_NODES: usize = 300;
/// Most tasks listed in the plan tree.
pub(crate) const MAX_TREE_NODES: usize = 5_000;
/// Most lanes (agents) and segments in the timeline.
pub(crate) const MAX_LANES: usize = 60;
pub(crate) const MAX_SEGMENTS: usize = 5_000;

/// How much of a large board a page lists: the file page lists more than the live page, which sends it again
/// at every change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub tree: usize,
    pub segments: usize,
}

/// The caps of `board --html`.
pub(crate) const FILE_CAPS: Caps = Caps { tree: MAX_TREE_NODES, segments: MAX_SEGMENTS };

/// The colour of a status: legend, counts, tree badges, graph nodes, timeline bars of held and done claims,
/// throughput of landings. Only elements that stand for a task of that status use it (tests count its pixels).
pub fn status_colour(s: Status) -> &'static str {
    match s {
        Status::Open => "#2563eb",
        Status::Claimed => "#f59e0b",
        Status::Done => "#16a34a",
        Status::Failed => "#dc2626",
        Status::Cancelled => "#7c3aed",
    }
}

/// Timeline colours of the ends of a claim that are not a task's status.
fn outcome_colour(o: Outcome) -> &'static str {
    match o {
        Outcome::Held => status_colour(Status::Claimed),
        Outcome::Done => status_colour(Status::Done),
        Outcome::Failed => "#db2777",
        Outcome::Released => "#64748b",
        Outcome::Expired => "#a16207",
        Outcome::Cancelled => "#6b7280",
        Outcome::Unknown => "#cbd5e1",
    }
}

/// Colour of failed attempts in the throughput chart.
const FAIL_ATTEMPT_COLOUR: &str = "#db2777";

/// HTML-escape text for element content and quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters (but newline and tab) have no business in a page; show them as escapes.
            c if c.is_control() && c != '\n' && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The rest of an element's start tag and its text for a clock time: `data-utc="…" data-fmt="clock">14:05:00`
/// (UTC; the live page shows it in the viewer's zone).
fn clock_text(t: Timestamp) -> String {
    format!("data-utc=\"{t}\" data-fmt=\"clock\">{}", t.clock())
}

/// At most `n` characters, with an ellipsis when cut.
pub(super) fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

const CSS: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#111;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px;border-bottom:1px solid #ddd}
.meta{color:#555}.note{color:#555;font-style:italic}
.chip{display:inline-block;padding:2px 8px;margin:2px;border-radius:4px;color:#fff;font-weight:600}
.chip.zero{background:#fff;color:#777;border:1px solid #ccc}
.badge{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px;vertical-align:middle}
ul.tree{list-style:none;padding-left:18px;margin:0}ul.tree li{margin:1px 0}
summary{cursor:pointer}.id{font-family:monospace;color:#333}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
svg text{font:11px sans-serif;fill:#111}svg .axis{stroke:#999;stroke-width:1}
svg .edge{stroke:#9aa;stroke-width:1;fill:none}
td.last{font-family:monospace;font-size:12px;color:#333;max-width:40em;overflow-wrap:anywhere}
td.near-limit{color:#b91c1c;font-weight:600}tr.fleet th{background:#f3f4f6}
";

/// Every status's colour as a property of the page (`--status-<status>: #rrggbb`), whether or not a task has it:
/// what the picture of a page is checked against.
fn palette() -> String {
    let mut s = String::from(":root{");
    for st in Status::ALL {
        let _ = write!(s, "--status-{st}:{};", status_colour(st));
    }
    s.push('}');
    s
}

/// The whole page.
pub fn render(v: &BoardView) -> String {
    let mut h = String::with_capacity(64 * 1024 + v.tasks.len() * 400);
    let title = format!("git swarm — {}", v.swarm);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>{}</title><style>{CSS}{}</style></head><body>\n",
        esc(&title),
        palette()
    );
    let _ = writeln!(
        h,
        "<header id=\"header\"><h1>{}</h1><div class=\"meta\">remote {} · target {} · state {} · at {}</div></header>",
        esc(&title),
        esc(&v.remote),
        esc(&v.target),
        esc(v.commit.get(..12).unwrap_or(&v.commit)),
        esc(&v.now.to_string())
    );
    summary(&mut h, v);
    holders(&mut h, v);
    failures(&mut h, v, Times::Text);
    plan_tree(&mut h, v, FILE_CAPS);
    graph(&mut h, v);
    timeline(&mut h, v, FILE_CAPS);
    throughput(&mut h, v);
    spend(&mut h, v);
    h.push_str("</body></html>\n");
    h
}

/// The counts by status, colour-coded (`<div id="counts">`).
pub(super) fn counts(h: &mut String, v: &BoardView) {
    h.push_str("<div id=\"counts\">");
    for s in Status::ALL {
        let n = v.count(s);
        if n > 0 {
            let _ = write!(
                h,
                "<span class=\"chip\" data-status=\"{s}\" data-count=\"{n}\" style=\"background:{}\">{n} {s}</span>",
                status_colour(s)
            );
        } else {
            let _ = write!(h, "<span class=\"chip zero\" data-status=\"{s}\" data-count=\"0\">0 {s}</span>");
        }
    }
    h.push_str("</div>");
    let open = v.count(Status::Open);
    if open > 0 {
        let _ = write!(
            h,
            "<p id=\"readiness\" data-ready=\"{}\" data-blocked=\"{}\">open: {} ready to claim, {} waiting on \
             dependencies</p>",
            v.ready, v.blocked, v.ready, v.blocked
        );
    }
}

/// `3 min`, `45 s`, `2 h 5 min`.
pub fn span(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} s"),
        120..7200 => format!("{} min", secs / 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

/// The cells of a holder's row that say what its runner does now (`run`: known only of this clone's runners):
/// the phase and since when, how long its agent has run against its time limit, the agent's last line.
pub(super) fn run_cells(h: &mut String, x: &super::Holder, now: Timestamp) {
    let Some(run) = &x.run else {
        h.push_str(
            "<td class=\"phase\" data-phase=\"\" title=\"not run in this clone: only the ref is known\">—</td>\
                    <td class=\"elapsed\"></td><td class=\"last\"></td>",
        );
        return;
    };
    let ran = now.0.saturating_sub(run.started.0) / 1000;
    let over = run.timeout_secs.is_some_and(|t| ran * 10 >= t * 9);
    let limit = run.timeout_secs.map(|t| format!(" of {}", span(t))).unwrap_or_default();
    let _ = write!(
        h,
        "<td class=\"phase\" data-phase=\"{}\">{} <span class=\"meta\">for {}</span></td>\
         <td class=\"elapsed{}\" data-secs=\"{ran}\" data-limit=\"{}\">{}{limit}</td><td class=\"last\">{}</td>",
        run.phase,
        run.phase,
        span(now.0.saturating_sub(run.phase_since.0) / 1000),
        if over { " near-limit" } else { "" },
        run.timeout_secs.map(|t| t.to_string()).unwrap_or_default(),
        span(ran),
        run.last_line.as_deref().map(|l| esc(&cut(l, crate::runner::status::LAST_LINE))).unwrap_or_default()
    );
}

/// A row heading a fleet's holders, when the board has several fleets.
pub(super) fn fleet_row(h: &mut String, v: &BoardView, i: usize, columns: usize) {
    let x = &v.holders[i];
    let first = i == 0 || v.holders[i - 1].fleet != x.fleet;
    let several = v.holders.iter().any(|o| o.fleet != v.holders[0].fleet);
    if first && several {
        let n = v.holders.iter().filter(|o| o.fleet == x.fleet).count();
        let _ = write!(
            h,
            "<tr class=\"fleet\" data-fleet=\"{}\"><th colspan=\"{columns}\">fleet {} <span class=\"meta\">{n} \
             held</span></th></tr>",
            esc(&x.fleet),
            esc(&x.fleet)
        );
    }
}

fn summary(h: &mut String, v: &BoardView) {
    h.push_str("<section id=\"summary\"><h2>Tasks</h2>");
    counts(h, v);
    rate_line(h, v);
    cycle_line(h, v, Times::Text);
    // The legend: only the statuses on the board, so that a colour on the page means a task in that status.
    h.push_str("<div id=\"legend\">");
    for s in Status::ALL.into_iter().filter(|s| v.count(*s) > 0) {
        let _ = write!(
            h,
            "<span class=\"legend\" data-status=\"{s}\"><span class=\"badge\" style=\"background:{}\"></span>{s}</span> ",
            status_colour(s)
        );
    }
    h.push_str("</div></section>\n");
}

fn holders(h: &mut String, v: &BoardView) {
    h.push_str("<section id=\"holders\"><h2>Who holds what</h2>");
    if v.holders.is_empty() {
        h.push_str("<p class=\"note\">nobody holds a task</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>agent</th><th>task</th><th>since</th><th>lease until</th><th>phase</th><th>agent ran</th>\
         <th>last output</th></tr>",
    );
    for (i, x) in v.holders.iter().enumerate() {
        fleet_row(h, v, i, 7);
        let _ = write!(
            h,
            "<tr class=\"holder\" data-agent=\"{}\" data-task=\"{}\" data-fleet=\"{}\"><td>{}</td><td><span class=\"id\">{}</span> {}</td><td>{}</td><td>{}{}</td>",
            esc(&x.agent),
            esc(&x.task),
            esc(&x.fleet),
            esc(&x.agent),
            esc(&x.task),
            esc(&x.title),
            x.since.map(|t| t.to_string()).unwrap_or_else(|| "?".into()),
            x.until,
            if x.expired { " (expired)" } else { "" }
        );
        run_cells(h, x, v.now);
        h.push_str("</tr>");
    }
    h.push_str("</table></section>\n");
}

/// How a page writes a time: the file page as UTC text; the live page as `<time datetime>` in UTC, which its script
/// shows relative — `ago` ("3 min ago"), `for` ("for 3 min": held since), `until` ("ends in 4 min") — and in the
/// viewer's zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Times {
    Text,
    Live,
}

impl Times {
    pub(super) fn at(self, t: Timestamp, rel: &str) -> String {
        match self {
            Times::Text => t.to_string(),
            Times::Live => format!("<time datetime=\"{t}\" data-rel=\"{rel}\">{t}</time>"),
        }
    }
}

/// `N tasks · R landings/min over the last … · N failed attempt(s)`.
pub(super) fn rate_line(h: &mut String, v: &BoardView) {
    let _ = write!(
        h,
        "<p>{} tasks · <b id=\"rate\">{:.1}</b> landings/min over the last {} · {} failed attempt(s)",
        v.total,
        v.landing_rate,
        v.rate_span(),
        v.failures.attempts_failed
    );
    if v.problems > 0 {
        let _ = write!(h, " · {} unreadable file(s) skipped", v.problems);
    }
    h.push_str("</p>");
}

/// The judge's last verdict.
pub(super) fn cycle_line(h: &mut String, v: &BoardView, times: Times) {
    match &v.cycle {
        Some(c) => {
            let when = match times {
                Times::Text => format!("at {}", esc(&c.at.to_string())),
                Times::Live => times.at(c.at, "ago"),
            };
            let _ = write!(
                h,
                "<p id=\"cycle\" data-verdict=\"{}\">cycle {}: the judge ({}) said <b>{}</b> {when}: {}</p>",
                esc(&c.verdict),
                c.cycle,
                esc(&c.by),
                esc(&c.verdict),
                esc(&cut(&c.reasons, 2_000))
            );
        }
        None => h.push_str("<p id=\"cycle\" class=\"note\">no judge has spoken yet</p>"),
    }
}

pub(super) fn failures(h: &mut String, v: &BoardView, times: Times) {
    let f = &v.failures;
    let _ = write!(
        h,
        "<section id=\"failures\"><h2>Failures</h2><p>{} task(s) failed for good, {} failed attempt(s)</p>",
        f.tasks_failed, f.attempts_failed
    );
    if !f.recent.is_empty() {
        h.push_str("<table><tr><th>when</th><th>task</th><th>agent</th><th>reason</th></tr>");
        for x in &f.recent {
            let _ = write!(
                h,
                "<tr class=\"failure\" data-task=\"{}\"><td>{}</td><td><span class=\"id\">{}</span> {}</td><td>{}</td>\
                 <td class=\"reason\">{}</td></tr>",
                esc(&x.task),
                times.at(x.at, "ago"),
                esc(&x.task),
                esc(&x.title),
                esc(&x.agent),
                esc(&cut(&x.reason, 300))
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</section>\n");
}

/// Children by parent; roots are tasks without a parent or whose parent is not on the board.
fn children(v: &BoardView) -> (Vec<&TaskNode>, HashMap<&str, Vec<&TaskNode>>) {
    let ids: HashSet<&str> = v.tasks.iter().map(|t| t.id.as_str()).collect();
    let mut roots = Vec::new();
    let mut kids: HashMap<&str, Vec<&TaskNode>> = HashMap::new();
    for t in &v.tasks {
        match t.parent.as_deref().filter(|p| ids.contains(p) && *p != t.id) {
            Some(p) => kids.entry(p).or_default().push(t),
            None => roots.push(t),
        }
    }
    (roots, kids)
}

pub(super) fn plan_tree(h: &mut String, v: &BoardView, caps: Caps) {
    h.push_str("<section id=\"plan\"><h2>Plan</h2>");
    let (roots, kids) = children(v);
    // A subtree in which every task is done is collapsed.
    let mut all_done: HashMap<&str, bool> = HashMap::new();
    fn settle<'a>(
        t: &'a TaskNode,
        kids: &HashMap<&str, Vec<&'a TaskNode>>,
        memo: &mut HashMap<&'a str, bool>,
        depth: usize,
    ) -> bool {
        if let Some(d) = memo.get(t.id.as_str()) {
            return *d;
        }
        memo.insert(&t.id, t.status == Status::Done); // guards against a parent cycle
        let mut d = t.status == Status::Done;
        if depth < 200 {
            for c in kids.get(t.id.as_str()).into_iter().flatten() {
                d &= settle(c, kids, memo, depth + 1);
            }
        }
        memo.insert(&t.id, d);
        d
    }
    for r in &roots {
        settle(r, &kids, &mut all_done, 0);
    }
    let mut shown = 0usize;
    let mut seen = HashSet::new();
    h.push_str("<ul class=\"tree\" id=\"tree\">");
    for r in &roots {
        tree_node(h, r, &kids, &all_done, (&mut shown, caps.tree), &mut seen, 0);
    }
    // Tasks on a cycle of parents (a hand-made file; the ops never make one) are reached from no root.
    for t in &v.tasks {
        if !seen.contains(t.id.as_str()) {
            settle(t, &kids, &mut all_done, 0);
            tree_node(h, t, &kids, &all_done, (&mut shown, caps.tree), &mut seen, 0);
        }
    }
    h.push_str("</ul>");
    if shown < v.tasks.len() {
        let _ = write!(
            h,
            "<p class=\"note\" id=\"tree-capped\">{} of {} tasks listed (the plan tree stops at {})</p>",
            shown,
            v.tasks.len(),
            caps.tree
        );
    }
    h.push_str("</section>\n");
}

fn tree_node<'a>(
    h: &mut String,
    t: &'a TaskNode,
    kids: &HashMap<&str, Vec<&'a TaskNode>>,
    all_done: &HashMap<&str, bool>,
    (shown, max): (&mut usize, usize),
    seen: &mut HashSet<&'a str>,
    depth: usize,
) {
    if *shown >= max || depth > 200 || !seen.insert(&t.id) {
        return;
    }
    *shown += 1;
    let label = task_label(t);
    let _ = write!(h, "<li id=\"task-{}\" data-status=\"{}\" data-kind=\"{}\">", esc(&t.id), t.status, t.kind);
    match kids.get(t.id.as_str()).filter(|k| !k.is_empty()) {
        None => h.push_str(&label),
        Some(k) => {
            let open = if all_done.get(t.id.as_str()).copied().unwrap_or(false) { "" } else { " open" };
            let _ = write!(
                h,
                "<details{open}><summary>{label} <span class=\"meta\">({} below)</span></summary><ul class=\"tree\">",
                k.len()
            );
            for c in k {
                tree_node(h, c, kids, all_done, (&mut *shown, max), seen, depth + 1);
            }
            h.push_str("</ul></details>");
        }
    }
    h.push_str("</li>");
}

fn task_label(t: &TaskNode) -> String {
    let mut s = format!(
        "<span class=\"badge\" style=\"background:{}\"></span><span class=\"id\">{}</span> {} <span class=\"meta\">{}",
        status_colour(t.status),
        esc(&t.id),
        esc(&t.title),
        t.status
    );
    if t.kind != crate::model::Kind::Work {
        let _ = write!(s, " · {}", t.kind);
    }
    if let Some(a) = &t.holder {
        let _ = write!(s, " · held by {}", esc(a));
    }
    if !t.deps.is_empty() {
        let _ = write!(s, " · after {}", esc(&t.deps.join(", ")));
    }
    s.push_str("</span>");
    s
}

/// The tasks the graph draws: all when they fit, else the live ones first, then the newest finished.
fn graph_nodes(v: &BoardView) -> Vec<&TaskNode> {
    if v.tasks.len() <= MAX_GRAPH_NODES {
        return v.tasks.iter().collect();
    }
    let mut live: Vec<&TaskNode> = v.tasks.iter().filter(|t| !t.status.is_final()).collect();
    let mut rest: Vec<&TaskNode> = v.tasks.iter().filter(|t| t.status.is_final()).collect();
    live.truncate(MAX_GRAPH_NODES);
    rest.truncate(MAX_GRAPH_NODES - live.len());
    live.extend(rest);
    live
}

/// Depth of each node: the longest chain of dependencies below it among the drawn nodes (cycles are cut).
fn depths(nodes: &[&TaskNode]) -> HashMap<String, usize> {
    let idx: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
    let mut depth = vec![0usize; nodes.len()];
    // Relax at most n times: enough for any acyclic chain; a cycle stops growing there.
    for _ in 0..nodes.len().min(1_000) {
        let mut changed = false;
        for (i, t) in nodes.iter().enumerate() {
            for d in &t.deps {
                if let Some(&j) = idx.get(d.as_str())
                    && j != i
                    && depth[i] < depth[j] + 1
                    && depth[j] < nodes.len()
                {
                    depth[i] = depth[j] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    nodes.iter().zip(depth).map(|(t, d)| (t.id.clone(), d)).collect()
}

pub(super) fn graph(h: &mut String, v: &BoardView) {
    h.push_str("<section id=\"graph\"><h2>Dependencies</h2>");
    let nodes = graph_nodes(v);
    if nodes.is_empty() {
        h.push_str("<p class=\"note\">no tasks</p></section>\n");
        return;
    }
    if nodes.len() < v.tasks.len() {
        let _ = write!(
            h,
            "<p class=\"note\" id=\"graph-capped\">{} of {} tasks drawn (the live ones first; the graph stops at {MAX_GRAPH_NODES})</p>",
            nodes.len(),
            v.tasks.len()
        );
    }
    let depth = depths(&nodes);
    let mut layers: BTreeMap<usize, Vec<&TaskNode>> = BTreeMap::new();
    for t in &nodes {
        layers.entry(depth.get(&t.id).copied().unwrap_or(0)).or_default().push(t);
    }
    const W: usize = 170;
    const NW: usize = 150;
    const RH: usize = 26;
    const NH: usize = 20;
    let mut pos: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut rows = 0;
    for (col, (_, layer)) in layers.iter().enumerate() {
        for (row, t) in layer.iter().enumerate() {
            pos.insert(&t.id, (10 + col * W, 10 + row * RH));
        }
        rows = rows.max(layer.len());
    }
    let width = 20 + layers.len() * W;
    let height = 20 + rows * RH;
    let _ = write!(h, "<svg id=\"depgraph\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">");
    for t in &nodes {
        let Some(&(x, y)) = pos.get(t.id.as_str()) else { continue };
        for d in &t.deps {
            if let Some(&(dx, dy)) = pos.get(d.as_str()) {
                let _ = write!(
                    h,
                    "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"M{} {} C{} {} {} {} {} {}\"/>",
                    esc(d),
                    esc(&t.id),
                    dx + NW,
                    dy + NH / 2,
                    dx + NW + 10,
                    dy + NH / 2,
                    x.saturating_sub(10),
                    y + NH / 2,
                    x,
                    y + NH / 2
                );
            }
        }
    }
    for t in &nodes {
        let Some(&(x, y)) = pos.get(t.id.as_str()) else { continue };
        let _ = write!(
            h,
            "<g class=\"node\" id=\"node-{}\" data-status=\"{}\"><title>{} {} ({})</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{NW}\" height=\"{NH}\" rx=\"3\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" style=\"fill:#fff\">{}</text></g>",
            esc(&t.id),
            t.status,
            esc(&t.id),
            esc(&t.title),
            t.status,
            status_colour(t.status),
            x + 4,
            y + 14,
            esc(&cut(&format!("{} {}", t.id, t.title), 24))
        );
    }
    h.push_str("</svg></section>\n");
}

pub(super) fn timeline(h: &mut String, v: &BoardView, caps: Caps) {
    h.push_str("<section id=\"timeline\"><h2>Agents over time</h2>");
    if v.timeline.is_empty() {
        h.push_str("<p class=\"note\">no claims in the log read</p></section>\n");
        return;
    }
    let segs: Vec<_> = v.timeline.iter().rev().take(caps.segments).collect();
    let mut agents: Vec<&str> = segs.iter().map(|s| s.agent.as_str()).collect();
    agents.sort_unstable();
    agents.dedup();
    let capped = agents.len() > MAX_LANES || segs.len() < v.timeline.len();
    agents.truncate(MAX_LANES);
    let lane: HashMap<&str, usize> = agents.iter().enumerate().map(|(i, a)| (*a, i)).collect();
    let t0 = segs.iter().map(|s| s.start).min().unwrap_or(v.now);
    let t1 = v.now.max(segs.iter().filter_map(|s| s.end).max().unwrap_or(v.now));
    let span = (t1.0.saturating_sub(t0.0)).max(1000) as f64;
    const LEFT: usize = 160;
    const PLOT: usize = 900;
    const LH: usize = 22;
    let width = LEFT + PLOT + 20;
    let height = 30 + agents.len() * LH;
    let x_of = |t: Timestamp| LEFT as f64 + (t.0.saturating_sub(t0.0)) as f64 / span * PLOT as f64;
    if capped {
        let _ = write!(
            h,
            "<p class=\"note\" id=\"timeline-capped\">the newest {} claims of {} agents drawn (at most {MAX_LANES} lanes)</p>",
            segs.len(),
            agents.len()
        );
    }
    let _ =
        write!(h, "<svg id=\"timeline-svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">");
    for (i, a) in agents.iter().enumerate() {
        let y = 10 + i * LH;
        let _ = write!(
            h,
            "<g class=\"lane\" data-agent=\"{}\"><text x=\"4\" y=\"{}\">{}</text><line class=\"axis\" x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/></g>",
            esc(a),
            y + 14,
            esc(&cut(a, 24)),
            y + LH - 2,
            LEFT + PLOT,
            y + LH - 2
        );
    }
    for s in &segs {
        let Some(&i) = lane.get(s.agent.as_str()) else { continue };
        let x = x_of(s.start);
        let end = s.end.unwrap_or(v.now);
        // A pixel of gap, so that a claim taken again at once reads as two bars.
        let w = ((x_of(end) - x) - 1.0).max(3.0);
        let _ = write!(
            h,
            "<rect class=\"seg\" data-agent=\"{}\" data-task=\"{}\" data-outcome=\"{}\" x=\"{x:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"14\" fill=\"{}\"><title>{} {} → {} ({})</title></rect>",
            esc(&s.agent),
            esc(&s.task),
            s.outcome.as_str(),
            12 + i * LH,
            outcome_colour(s.outcome),
            esc(&s.task),
            s.start,
            s.end.map(|e| e.to_string()).unwrap_or_else(|| "now".into()),
            s.outcome.as_str()
        );
    }
    let ty = height - 6;
    let _ = write!(
        h,
        "<text x=\"{LEFT}\" y=\"{ty}\" data-utc=\"{t0}\">{t0}</text>\
         <text x=\"{}\" y=\"{ty}\" text-anchor=\"end\" data-utc=\"{t1}\">{t1}</text></svg>",
        LEFT + PLOT,
    );
    h.push_str("<div class=\"meta\">");
    for o in [Outcome::Held, Outcome::Done, Outcome::Failed, Outcome::Released, Outcome::Expired] {
        if v.timeline.iter().any(|s| s.outcome == o) {
            let _ = write!(
                h,
                "<span data-outcome=\"{0}\"><span class=\"badge\" style=\"background:{1}\"></span>{0}</span> ",
                o.as_str(),
                outcome_colour(o)
            );
        }
    }
    h.push_str("</div></section>\n");
}

pub(super) fn throughput(h: &mut String, v: &BoardView) {
    let tp = &v.throughput;
    h.push_str("<section id=\"throughput\"><h2>Throughput</h2>");
    if tp.buckets.is_empty() {
        h.push_str("<p class=\"note\">no ops in the log read</p></section>\n");
        return;
    }
    let _ = write!(
        h,
        "<p>landings (and failed attempts, stacked) per {}</p>",
        crate::time::format_duration(std::time::Duration::from_secs(tp.bucket_secs))
    );
    let max = tp.buckets.iter().map(|b| b.done + b.failed).max().unwrap_or(0).max(1);
    const PH: usize = 160;
    const LEFT: usize = 40;
    let bw = (900 / tp.buckets.len()).clamp(4, 40);
    let width = LEFT + bw * tp.buckets.len() + 20;
    let height = PH + 40;
    let _ = write!(
        h,
        "<svg id=\"throughput-svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/><text x=\"4\" y=\"16\">{max}</text><text x=\"4\" y=\"{}\">0</text>",
        10 + PH,
        width - 10,
        10 + PH,
        10 + PH
    );
    let scale = |n: u64| (n as f64 / max as f64 * PH as f64).round() as usize;
    for (i, b) in tp.buckets.iter().enumerate() {
        let x = LEFT + i * bw;
        let hd = scale(b.done);
        let hf = scale(b.failed);
        let base = 10 + PH;
        let _ = write!(
            h,
            "<g class=\"bucket\" data-start=\"{}\" data-done=\"{}\" data-failed=\"{}\"><title>{}: {} landed, {} failed</title>",
            b.start, b.done, b.failed, b.start, b.done, b.failed
        );
        if hd > 0 {
            let _ = write!(
                h,
                "<rect x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{hd}\" fill=\"{}\"/>",
                base - hd,
                bw.saturating_sub(1).max(1),
                status_colour(Status::Done)
            );
        }
        if hf > 0 {
            let _ = write!(
                h,
                "<rect x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{hf}\" fill=\"{FAIL_ATTEMPT_COLOUR}\"/>",
                base - hd - hf,
                bw.saturating_sub(1).max(1)
            );
        }
        h.push_str("</g>");
    }
    let (Some(first), Some(last)) = (tp.buckets.first(), tp.buckets.last()) else {
        h.push_str("</svg></section>\n");
        return;
    };
    let _ = write!(h, "<text x=\"{LEFT}\" y=\"{}\" {}</text>", PH + 30, clock_text(first.start));
    if tp.buckets.len() > 1 {
        let _ = write!(
            h,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" {}</text>",
            width - 10,
            PH + 30,
            clock_text(last.start)
        );
    }
    h.push_str("</svg>");
    if v.log_truncated {
        let _ = write!(h, "<p class=\"note\" id=\"log-capped\">the log was read back {} ops only</p>", v.log_ops);
    }
    h.push_str("</section>\n");
}

/// What the swarm spent: totals by role, by agent, the tasks that spent most, and the sum over time.
pub(super) fn spend(h: &mut String, v: &BoardView) {
    let sp = &v.spend;
    h.push_str("<section id=\"spend\"><h2>Spend</h2>");
    if sp.total.is_zero() {
        h.push_str("<p class=\"note\">no agent reported what it spent</p></section>\n");
        return;
    }
    let _ = write!(
        h,
        "<p id=\"spend-total\">{} in all · cycle {}: {}</p>",
        esc(&sp.total.to_string()),
        sp.cycle,
        esc(&sp.in_cycle.to_string())
    );
    let mut table = |id: &str, what: &str, rows: Vec<(String, crate::usage::Usage)>| {
        let _ = write!(
            h,
            "<table id=\"{id}\"><tr><th>{what}</th><th>input</th><th>output</th><th>cached</th><th>USD</th><th>runs</th></tr>"
        );
        for (name, u) in rows {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&name),
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cost_usd.map(|c| format!("{:.4}", c.dollars())).unwrap_or_else(|| "—".into()),
                u.runs
            );
        }
        h.push_str("</table>");
    };
    table("spend-roles", "role", sp.by_role.iter().map(|(r, u)| (r.clone(), *u)).collect());
    table("spend-agents", "agent", sp.by_agent.iter().map(|(a, u)| (a.clone(), *u)).collect());
    let mut tasks: Vec<(String, crate::usage::Usage)> =
        v.tasks.iter().filter_map(|t| Some((format!("{} {}", t.id, cut(&t.title, 60)), t.usage?))).collect();
    tasks.sort_by(|a, b| b.1.tokens().cmp(&a.1.tokens()).then_with(|| a.0.cmp(&b.0)));
    tasks.truncate(20);
    table("spend-tasks", "task (the 20 that spent most)", tasks);
    // The sum over time, as a line.
    if let (Some(first), Some(last)) = (sp.over_time.first(), sp.over_time.last()) {
        const W: usize = 900;
        const PH: usize = 120;
        let span = last.at.0.saturating_sub(first.at.0).max(1) as f64;
        let max = last.tokens.max(1) as f64;
        let pts: Vec<String> = sp
            .over_time
            .iter()
            .map(|p| {
                let x = 40.0 + (p.at.0 - first.at.0) as f64 / span * (W - 60) as f64;
                let y = 10.0 + PH as f64 - p.tokens as f64 / max * PH as f64;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = write!(
            h,
            "<svg id=\"spend-svg\" width=\"{W}\" height=\"{}\" viewBox=\"0 0 {W} {}\"><text x=\"4\" y=\"16\">{}</text>\
             <polyline fill=\"none\" stroke=\"#444\" stroke-width=\"2\" points=\"{}\"/>\
             <text x=\"40\" y=\"{}\" {}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\" {}</text></svg>",
            PH + 40,
            PH + 40,
            crate::usage::short_count(last.tokens),
            pts.join(" "),
            PH + 30,
            clock_text(first.at),
            W - 10,
            PH + 30,
            clock_text(last.at)
        );
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {

    /// Nothing of the page comes from elsewhere, nor runs (the CLI's tests check the same of the files it writes).
    fn assert_self_contained(page: &str) {
        let lower = page.to_ascii_lowercase();
        for bad in ["http://", "https://", "src=", "href=", "url(", "@import", "<script", "<link", "<iframe", "<img"] {
            assert!(!lower.contains(bad), "the page holds {bad:?}");
        }
    }

    #[test]
    fn a_large_board_stays_usable() {
        // Thousands of tasks through the library (the same build and render the CLI runs): the graph is capped and
        // says so, done subtrees are collapsed, and it is quick.
        use crate::board::{BoardView, Input, Options, html};
        use crate::model::{Status, Task};
        use crate::ops::{Board, Stored};
        use crate::store::Snapshot;
        let mut board = Board::default();
        let n = 5_000;
        for i in 0..n {
            let id = format!("t-{i:06x}");
            let toml = format!(
                "id = \"{id}\"\ntitle = \"task {i}\"\nstatus = \"{}\"\n{}{}",
                if i % 3 == 0 && i < n / 2 { "open" } else { "done" },
                if i > 0 { format!("deps = [\"t-{:06x}\"]\n", i - 1) } else { String::new() },
                if i % 10 != 0 { format!("parent = \"t-{:06x}\"\n", i / 10 * 10) } else { String::new() },
            );
            let task: Task = toml::from_str(&toml).expect("task");
            board.tasks.insert(id.clone(), Stored { path: format!("tasks/{id}.toml"), task });
        }
        let snapshot = Snapshot { commit: gix::ObjectId::null(gix::hash::Kind::Sha1), board, problems: vec![] };
        let started = std::time::Instant::now();
        let view = BoardView::build(
            &Input {
                swarm: "big",
                remote: "origin",
                snapshot: &snapshot,
                log: &[],
                log_truncated: false,
                cycle: None,
                now: crate::time::Timestamp::from_secs(1_800_000_000),
                local: &[],
            },
            &Options::default(),
        );
        let page = html::render(&view);
        let took = started.elapsed();
        println!("{n} tasks: built and rendered in {took:?}, {} bytes", page.len());
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
        assert_eq!(page.matches("<g class=\"node\"").count(), html::MAX_GRAPH_NODES);
        assert!(page.contains("id=\"graph-capped\""));
        assert_eq!(page.matches("<li id=\"task-").count(), n);
        assert_eq!(view.count(Status::Open), (n / 2).div_ceil(3));
        // Subtrees with work left are open, those all done are collapsed.
        assert!(page.contains("<details open>") && page.contains("<details>"));
        assert_self_contained(&page);
    }

    #[test]
    fn cycles_in_a_hand_made_board_neither_hang_nor_hide_tasks() {
        // The ops never make a cycle of parents or dependencies, but a hand-edited state ref can.
        use crate::board::{BoardView, Input, Options, html};
        use crate::model::Task;
        use crate::ops::{Board, Stored};
        use crate::store::Snapshot;
        let mut board = Board::default();
        for (id, other) in [("t-aaaa", "t-bbbb"), ("t-bbbb", "t-aaaa"), ("t-cccc", "t-cccc")] {
            let toml = format!("id = \"{id}\"\ntitle = \"{id}\"\nparent = \"{other}\"\ndeps = [\"{other}\"]\n");
            let task: Task = toml::from_str(&toml).expect("task");
            board.tasks.insert(id.into(), Stored { path: format!("tasks/{id}.toml"), task });
        }
        let snapshot = Snapshot { commit: gix::ObjectId::null(gix::hash::Kind::Sha1), board, problems: vec![] };
        let input = Input {
            swarm: "s",
            remote: "r",
            snapshot: &snapshot,
            log: &[],
            log_truncated: false,
            cycle: None,
            now: crate::time::Timestamp::from_secs(1),
            local: &[],
        };
        let page = html::render(&BoardView::build(&input, &Options::default()));
        for id in ["t-aaaa", "t-bbbb", "t-cccc"] {
            assert_eq!(page.matches(&format!("<li id=\"task-{id}\"")).count(), 1, "{id} listed once");
            assert_eq!(page.matches(&format!("id=\"node-{id}\"")).count(), 1, "{id} drawn once");
        }
        assert!(!page.contains("tree-capped"));
    }

    use super::*;

    #[test]
    fn escapes_markup_and_controls() {
        assert_eq!(esc("<script>\"a\" & 'b'</script>"), "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;");
        assert_eq!(esc("a\x1bb"), "a\\u{1b}b");
    }

    #[test]
    fn cut_keeps_short_text() {
        assert_eq!(cut("abc", 5), "abc");
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}
