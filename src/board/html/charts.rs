//! The sections drawn from the log: failures with their reasons, the timeline of who held what, throughput, and
//! the spend — shared by the file page and the live page.

use super::*;

pub(crate) fn failures(h: &mut String, v: &BoardView, times: Times) {
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

pub(crate) fn timeline(h: &mut String, v: &BoardView, caps: Caps) {
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

pub(crate) fn throughput(h: &mut String, v: &BoardView) {
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
pub(crate) fn spend(h: &mut String, v: &BoardView) {
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
