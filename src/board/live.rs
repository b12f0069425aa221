//! The live page of `git swarm board --serve` as HTML computed from a [`BoardView`] — pure, no I/O: the page
//! ([`page`]: a shell holding the sections of the state it was asked at) and the sections alone for each new state
//! ([`frame`]), which the page's script (`live.js`, served as a file) puts in place without a reload.
//!
//! Every string from the board is escaped by [`html::esc`], in text and attributes, as on the file page; the page
//! builds no markup from the board's strings (the script sets titles and notes as text). Times are
//! `<time datetime="…">` in UTC, which the script shows relative ("3 min ago") and, as a tooltip, in the viewer's
//! zone; clock labels of the charts carry `data-utc` for the same.

use std::fmt::Write;

use serde::Serialize;

use super::html::{self, Caps, Times, cut, esc};
use super::{BoardView, LatestOp};
use crate::time::Timestamp;
use crate::usage::{Limit, Usage};

/// The page's script and style, served as `/app.js` and `/app.css` (the Content-Security-Policy allows no inline
/// script).
pub(crate) const SCRIPT: &str = include_str!("live.js");
pub(crate) const STYLE: &str = include_str!("live.css");

/// What the live page lists of a large board: it is sent again at every change.
pub(crate) const LIVE_CAPS: Caps = Caps { tree: 1_000, segments: 1_000 };
/// Most holders listed.
pub(crate) const MAX_HOLDERS: usize = 200;

/// The budgets the page shows (`[run.budget]`: the board's settings, under this clone's; docs/spend.md).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Budgets {
    pub cycle: Limit,
    pub task: Limit,
}

/// The sections of the page, in the order shown: id and HTML.
pub(crate) type Sections = Vec<(&'static str, String)>;

/// The ids of [`sections`], in order; the wide ones span the page.
pub(crate) const SECTION_IDS: [(&str, bool); 9] = [
    ("summary", false),
    ("holders", false),
    ("failures", false),
    ("spend", false),
    ("latest", false),
    ("graph", true),
    ("timeline", true),
    ("throughput", true),
    ("plan", true),
];

/// Every section of the page for view `v`.
pub(crate) fn sections(v: &BoardView, budgets: &Budgets) -> Sections {
    SECTION_IDS
        .iter()
        .map(|(id, _)| {
            let mut h = String::new();
            match *id {
                "summary" => summary(&mut h, v),
                "holders" => holders(&mut h, v),
                "failures" => html::failures(&mut h, v, Times::Live),
                "spend" => spend(&mut h, v, budgets),
                "latest" => latest(&mut h, &v.latest),
                "graph" => html::graph(&mut h, v),
                "timeline" => html::timeline(&mut h, v, LIVE_CAPS),
                "throughput" => html::throughput(&mut h, v),
                _ => html::plan_tree(&mut h, v, LIVE_CAPS),
            }
            (*id, h)
        })
        .collect()
}

/// What the page gets for each new state (`/events`, `/frame`).
#[derive(Serialize)]
struct Frame<'a> {
    /// Counts the states this server has shown; the page skips one it has.
    seq: u64,
    swarm: &'a str,
    commit: &'a str,
    now: Timestamp,
    /// Why the newest state could not be read (the page keeps showing this one).
    error: Option<&'a str>,
    sections: serde_json::Map<String, serde_json::Value>,
}

/// The JSON of one state for the page (one line: no newline in it).
pub(crate) fn frame(seq: u64, v: &BoardView, sections: &Sections, error: Option<&str>) -> String {
    let sections = sections.iter().map(|(id, h)| (id.to_string(), serde_json::Value::from(h.as_str()))).collect();
    let f = Frame { seq, swarm: &v.swarm, commit: &v.commit, now: v.now, error, sections };
    serde_json::to_string(&f).unwrap_or_else(|_| "{}".into())
}

fn time(t: Timestamp, rel: &str) -> String {
    Times::Live.at(t, rel)
}

/// The whole page at one state: `seq` is the state's number, as in its [`frame`].
pub(crate) fn page(v: &BoardView, sections: &Sections, seq: u64, error: Option<&str>) -> String {
    let mut h = String::with_capacity(sections.iter().map(|(_, s)| s.len()).sum::<usize>() + 4096);
    let title = format!("git swarm — {}", v.swarm);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} (live)</title><link rel=\"stylesheet\" href=\"/app.css\"><script src=\"/app.js\" defer></script>\
         </head><body data-seq=\"{seq}\">\n",
        esc(&title)
    );
    let _ = writeln!(
        h,
        "<header id=\"header\"><h1>{}</h1><div class=\"meta\">remote {} · target {} · state <span id=\"commit\">{}</span> \
         · <span id=\"conn\" data-state=\"loading\">loaded</span> · updated <span id=\"updated\">{}</span></div>\
         <div id=\"error\"{}>{}</div></header>",
        esc(&title),
        esc(&v.remote),
        esc(&v.target),
        esc(v.commit.get(..12).unwrap_or(&v.commit)),
        time(v.now, "ago"),
        if error.is_some() { "" } else { " hidden" },
        error.map(|e| format!("cannot read the board now (showing the last state): {}", esc(e))).unwrap_or_default()
    );
    h.push_str("<main id=\"board\">\n");
    for (id, body) in sections {
        let wide = SECTION_IDS.iter().any(|(i, w)| i == id && *w);
        let _ = writeln!(h, "<div class=\"card{}\" id=\"s-{id}\">{body}</div>", if wide { " wide" } else { "" });
    }
    h.push_str(
        "</main>\n<div id=\"note\" hidden><div class=\"note-box\" role=\"dialog\" aria-labelledby=\"note-title\">\
         <div class=\"note-head\"><b id=\"note-title\"></b><button type=\"button\" id=\"note-close\">close</button></div>\
         <div id=\"note-meta\" class=\"meta\"></div><pre id=\"note-text\"></pre></div></div>\n\
         <footer class=\"meta\">read-only · click a task for its hand-off note · times in <span id=\"zone\">UTC</span>\
         </footer>\n</body></html>\n",
    );
    h
}

fn summary(h: &mut String, v: &BoardView) {
    h.push_str("<section id=\"summary\"><h2>Tasks</h2>");
    html::counts(h, v);
    html::rate_line(h, v);
    per_minute(h, &v.landings_per_minute);
    html::cycle_line(h, v, Times::Live);
    h.push_str("</section>");
}

/// Landings in each of the last minutes, as bars (the newest on the right).
fn per_minute(h: &mut String, minutes: &[u64]) {
    const BW: usize = 18;
    const PH: usize = 36;
    let max = minutes.iter().copied().max().unwrap_or(0).max(1);
    let width = minutes.len() * BW + 4;
    let _ = write!(
        h,
        "<svg id=\"per-minute\" width=\"{width}\" height=\"{}\" viewBox=\"0 0 {width} {}\" role=\"img\" \
         aria-label=\"landings per minute\">",
        PH + 4,
        PH + 4
    );
    for (i, n) in minutes.iter().enumerate() {
        let ago = minutes.len() - 1 - i;
        let bh = ((*n as f64 / max as f64) * PH as f64).round().max(if *n > 0 { 2.0 } else { 1.0 }) as usize;
        let fill = if *n > 0 { html::status_colour(crate::model::Status::Done) } else { "#e5e7eb" };
        let _ = write!(
            h,
            "<rect class=\"minute\" data-landed=\"{n}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{bh}\" fill=\"{fill}\">\
             <title>{n} landed {}</title></rect>",
            2 + i * BW,
            2 + PH - bh,
            BW - 3,
            if ago == 0 { "this minute".to_string() } else { format!("{ago} min ago") }
        );
    }
    h.push_str("</svg>");
}

fn holders(h: &mut String, v: &BoardView) {
    let _ =
        write!(h, "<section id=\"holders\"><h2>Who holds what <span class=\"meta\">({})</span></h2>", v.holders.len());
    if v.holders.is_empty() {
        h.push_str("<p class=\"note\">nobody holds a task</p></section>");
        return;
    }
    h.push_str(
        "<table><tr><th>agent</th><th>task</th><th>held</th><th>lease</th><th>spent</th><th>phase</th>\
         <th>agent ran</th><th>last output</th></tr>",
    );
    for (i, x) in v.holders.iter().enumerate().take(MAX_HOLDERS) {
        html::fleet_row(h, v, i, 8);
        let _ = write!(
            h,
            "<tr class=\"holder{}\" data-agent=\"{}\" data-task=\"{}\" data-fleet=\"{}\"><td>{}</td>\
             <td><span class=\"id\">{}</span> {}</td><td>{}</td><td>{}</td><td>{}</td>",
            if x.expired { " expired" } else { "" },
            esc(&x.agent),
            esc(&x.task),
            esc(&x.fleet),
            esc(&x.agent),
            esc(&x.task),
            esc(&cut(&x.title, 120)),
            x.since.map(|t| time(t, "for")).unwrap_or_else(|| "?".into()),
            time(x.until, "until"),
            x.usage.as_ref().map(short_usage).unwrap_or_default()
        );
        html::run_cells(h, x, v.now);
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    if v.holders.len() > MAX_HOLDERS {
        let _ = write!(h, "<p class=\"note\">the first {MAX_HOLDERS} of {} holders listed</p>", v.holders.len());
    }
    h.push_str("</section>");
}

/// `12.3k tokens, $0.0412`.
fn short_usage(u: &Usage) -> String {
    let mut s = format!("{} tokens", crate::usage::short_count(u.tokens()));
    if let Some(c) = u.cost_usd {
        let _ = write!(s, ", {c}");
    }
    s
}

/// The spend section of the file page with the budgets, and what is left of them, under its heading.
fn spend(h: &mut String, v: &BoardView, b: &Budgets) {
    let mut section = String::new();
    html::spend(&mut section, v);
    let mut budgets = String::new();
    budget_lines(&mut budgets, v, b);
    let at = section.find("</h2>").map_or(0, |i| i + "</h2>".len());
    section.insert_str(at, &budgets);
    h.push_str(&section);
}

fn budget_lines(h: &mut String, v: &BoardView, b: &Budgets) {
    h.push_str("<div id=\"budgets\">");
    // `10000 tokens, $5.00`
    let amounts = |(tokens, usd): (Option<u64>, Option<crate::usage::Usd>)| {
        tokens
            .map(|t| format!("{t} tokens"))
            .into_iter()
            .chain(usd.map(|d| d.to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if b.cycle.is_set() {
        let state = match b.cycle.reached(&v.spend.in_cycle) {
            Some(why) => format!("<b class=\"spent\">spent</b> ({}): runners claim nothing more", esc(&why)),
            None => format!("left: {}", amounts(b.cycle.left(&v.spend.in_cycle))),
        };
        let limit = amounts((b.cycle.tokens, b.cycle.usd));
        let _ = write!(h, "<p id=\"budget-cycle\">cycle {} budget: {limit} · {state}</p>", v.spend.cycle);
    }
    if b.task.is_set() {
        let _ = write!(h, "<p id=\"budget-task\">task budget: {} each</p>", amounts((b.task.tokens, b.task.usd)));
    }
    if !b.cycle.is_set() && !b.task.is_set() {
        h.push_str("<p class=\"note\" id=\"budget-none\">no budget set (<code>[run.budget]</code>)</p>");
    }
    h.push_str("</div>");
}

fn latest(h: &mut String, ops: &[LatestOp]) {
    h.push_str("<section id=\"latest\"><h2>Latest</h2>");
    if ops.is_empty() {
        h.push_str("<p class=\"note\">no ops</p></section>");
        return;
    }
    h.push_str("<ul class=\"latest\">");
    for op in ops {
        let _ = write!(
            h,
            "<li data-op=\"{}\">{} <b>{}</b> {}</li>",
            esc(op.op.as_deref().unwrap_or("")),
            time(op.time, "ago"),
            esc(op.agent.as_deref().unwrap_or("?")),
            esc(&cut(&op.summary, 200))
        );
    }
    h.push_str("</ul></section>");
}
