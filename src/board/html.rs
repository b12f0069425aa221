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

mod charts;
mod graph;

pub(crate) use charts::{failures, spend, throughput, timeline};
pub(crate) use graph::{graph, plan_tree};

/// Most nodes drawn in the dependency graph; beyond it the graph shows the live tasks first and says so.
pub(crate) const MAX_GRAPH_NODES: usize = 300;
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
pub(crate) fn status_colour(s: Status) -> &'static str {
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
pub(crate) fn render(v: &BoardView) -> String {
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
pub(crate) fn span(secs: u64) -> String {
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
pub(crate) enum Times {
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
        use crate::Snapshot;
        use crate::board::{BoardView, Input, Options, html};
        use crate::model::{Status, Task};
        use crate::ops::{Board, Stored};
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
        use crate::Snapshot;
        use crate::board::{BoardView, Input, Options, html};
        use crate::model::Task;
        use crate::ops::{Board, Stored};
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
