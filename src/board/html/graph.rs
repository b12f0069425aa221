//! The plan tree (by `parent`, done subtrees collapsed, capped) and the dependency graph (by `deps`, in layers, an
//! SVG), shared by the file page and the live page.

use super::*;

/// Children by parent; roots are tasks without a parent or whose parent is not on the board.
pub(crate) fn children(v: &BoardView) -> (Vec<&TaskNode>, HashMap<&str, Vec<&TaskNode>>) {
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

pub(crate) fn plan_tree(h: &mut String, v: &BoardView, caps: Caps) {
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

pub(crate) fn tree_node<'a>(
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

pub(crate) fn task_label(t: &TaskNode) -> String {
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
pub(crate) fn graph_nodes(v: &BoardView) -> Vec<&TaskNode> {
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
pub(crate) fn depths(nodes: &[&TaskNode]) -> HashMap<String, usize> {
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

pub(crate) fn graph(h: &mut String, v: &BoardView) {
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
