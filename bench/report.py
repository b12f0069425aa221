#!/usr/bin/env python3
"""Statistics and the markdown table of bench/run.sh.

    report.py table RESULTS_DIR ROWS_FILE      print the markdown block (machine line, tables) for the rows
    report.py splice DOC BLOCK_FILE            put BLOCK_FILE between the bench markers of DOC (create DOC if missing)
    report.py trace OUT_FILE T0 T1 TRACE_FILE  append where one op's time went (see trace_op) to OUT_FILE
    report.py median FILE                      the median of the numbers in FILE

ROWS_FILE has one tab-separated row per line; the first field says what kind of row it is:

    section <title>
    time  <id> <what> <ours file> <baseline file> <divisor> <goal>   seconds per sample; shown in ms per op
    rate  <id> <what> <ours file> <baseline file> <goal>             tasks per second
    bytes <id> <what> <ours up> <ours down> <base up> <base down>    files with one number: bytes per op
    text  <id> <what> <ours> <baseline> <ratio> <goal>               given as is
    note  <text>                                                     a line under the current table

A goal is "<=1.0", ">=0.8" or "-" (context only). Every ratio is median(ours) / median(baseline), both measured
side by side in the same run.
"""

import datetime
import json
import os
import statistics
import sys

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def numbers(path):
    with open(path) as f:
        return [float(x) for x in f.read().split()]


def median(path):
    xs = numbers(path)
    if not xs:
        raise SystemExit(f"report: no samples in {path}")
    return statistics.median(xs)


def met(ratio, goal):
    if goal == "-" or ratio is None:
        return ""
    op, bound = goal[:2], float(goal[2:])
    ok = ratio <= bound if op == "<=" else ratio >= bound
    return "yes" if ok else "**no**"


def goal_text(goal):
    return "—" if goal == "-" else goal.replace("<=", "≤ ").replace(">=", "≥ ")


def kib(n):
    return f"{n / 1024:.2f} KiB" if n >= 1024 else f"{n:.0f} B"


def table(res, rows_file):
    out = []
    header = "| # | measurement | ours | baseline | ratio | goal | met |\n|---|---|--:|--:|--:|:-:|:-:|"
    in_table = False
    for raw in open(rows_file):
        f = raw.rstrip("\n").split("\t")
        kind = f[0]
        if kind == "section":
            out += ["", f"**{f[1]}**", "", header]
            in_table = True
            continue
        if kind == "note":
            if in_table:
                out.append("")
                in_table = False
            out.append(f"* {f[1]}")
            continue
        if not in_table:
            out += ["", header]
            in_table = True
        rid, what = f[1], f[2]
        p = lambda name: os.path.join(res, name)
        if kind == "time":
            a, b, div, goal = p(f[3]), p(f[4]), float(f[5]), f[6]
            ma, mb = median(a), median(b)
            r = ma / mb
            n = len(numbers(a))
            ours = f"{ma / div * 1000:.1f} ms"
            base = f"{mb / div * 1000:.1f} ms"
            out.append(f"| {rid} | {what} (n={n}) | {ours} | {base} | {r:.2f} | {goal_text(goal)} | {met(r, goal)} |")
        elif kind == "rate":
            a, b, goal = p(f[3]), p(f[4]), f[5]
            ma, mb = median(a), median(b)
            r = ma / mb
            n = len(numbers(a))
            out.append(
                f"| {rid} | {what} (n={n}) | {ma:.1f} tasks/s | {mb:.1f} tasks/s | {r:.2f} | {goal_text(goal)} "
                f"| {met(r, goal)} |"
            )
        elif kind == "bytes":
            au, ad, bu, bd = (median(p(x)) for x in f[3:7])
            r = (au + ad) / (bu + bd)
            out.append(
                f"| {rid} | {what} | ↑ {kib(au)} ↓ {kib(ad)} | ↑ {kib(bu)} ↓ {kib(bd)} | {r:.2f} | — | |"
            )
        elif kind == "text":
            out.append(f"| {rid} | {what} | {f[3]} | {f[4]} | {f[5]} | {goal_text(f[6])} | |")
        else:
            raise SystemExit(f"report: unknown row kind {kind!r}")
    return "\n".join(out).strip("\n") + "\n"


def splice(doc, block_file):
    block = open(block_file).read().strip("\n")
    text = open(doc).read()
    if BEGIN not in text or END not in text or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"report: {doc} lacks the markers {BEGIN} … {END}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(doc, "w") as f:
        f.write(f"{head}{BEGIN}\n{block}\n{END}{tail}")


def trace_op(path, t0, t1):
    """Where one `git swarm` op spent its time, from the trace2 events of the git processes it started and the
    wall-clock start t0 and end t1 of the op (seconds since the epoch).

    Returns the phases in seconds: before the fetch (process start, opening the repository, until the
    upload-pack that gix fetches from starts), fetch and apply (gix fetch, reading the board, the op, writing
    objects: until `git push` starts), the `git push`, the part of the push the remote's receive-pack waited for
    `git maintenance run --auto` (or `gc --auto`), and after the push (mirror ref, exit).
    """
    starts = {}  # sid -> wall time of its start event
    names, exits, children = {}, {}, {}
    maint = 0.0
    for line in open(path):
        e = json.loads(line)
        sid, ev = e.get("sid", ""), e.get("event")
        if ev == "start":
            starts[sid] = datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
        elif ev == "cmd_name":
            names[sid] = e.get("name")
        elif ev == "exit":
            exits[sid] = e.get("t_abs", 0.0)
        elif ev == "child_start":
            children[(sid, e.get("child_id"))] = " ".join(e.get("argv") or [])
        elif ev == "child_exit":
            argv = children.get((sid, e.get("child_id")), "")
            if "maintenance" in argv or "gc --auto" in argv:
                maint += e.get("t_rel", 0.0)
    top = [s for s in starts if "/" not in s]
    upload = min((starts[s] for s in top if names.get(s) == "upload-pack"), default=None)
    push = [s for s in top if names.get(s) == "push"]
    if upload is None or len(push) != 1:
        raise SystemExit(f"report: {path}: expected one upload-pack and one push, got {sorted(names.values())}")
    p0 = starts[push[0]]
    p1 = p0 + exits.get(push[0], 0.0)
    return upload - t0, p0 - upload, p1 - p0, maint, t1 - p1


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "table":
        sys.stdout.write(table(sys.argv[2], sys.argv[3]))
    elif cmd == "splice":
        splice(sys.argv[2], sys.argv[3])
    elif cmd == "median":
        print(median(sys.argv[2]))
    elif cmd == "trace":
        t0, t1 = float(sys.argv[3]), float(sys.argv[4])
        with open(sys.argv[2], "a") as out:
            out.write(" ".join("%.6f" % x for x in trace_op(sys.argv[5], t0, t1)) + "\n")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
