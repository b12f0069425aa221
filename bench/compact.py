#!/usr/bin/env python3
"""Compaction, measured: a board after 20,000 ops, before and after `git swarm compact`, side by side in one run.

    python3 bench/compact.py [--ops 20000] [--rounds 15] [--no-doc]

Builds the release binary and `examples/fill_board`, fills one bare remote with --ops ops (tasks added, claimed
and finished, 50 left open; every op one commit, as agents write them), copies it, compacts the copy, and then
measures both remotes in alternation:

  * bytes a new clone fetches for the state ref (`git fetch` of refs/swarm/<name> into an empty repository over
    file://, pack kept as received), and the seconds of a new clone's first `git swarm status`;
  * seconds per op (add + claim + done) in a warm clone over file://, and in-process (a plain path);
  * that `git swarm log --archived` on the compacted remote still lists every op.

Ratios (after / before) are what to read: this machine is shared and noisy. Writes the table into
docs/performance.md between `<!-- bench-compact:begin -->` and `<!-- bench-compact:end -->` unless --no-doc.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/git-swarm"
FILL = ROOT / "target/release/examples/fill_board"


def run(args, cwd=None, env=None, check=True):
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, args))}\n{p.stdout}\n{p.stderr}")
    return p


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-doc", action="store_true")
    a = ap.parse_args()

    run(["cargo", "build", "--release", "--locked", "--example", "fill_board", "-p", "git-swarm-core"], cwd=ROOT)
    run(["cargo", "build", "--release", "--locked", "--bin", "git-swarm"], cwd=ROOT)
    work = Path(tempfile.mkdtemp(prefix="swarm-compact-"))
    home = work / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n"
        "[protocol \"file\"]\n\tallow = always\n[gc]\n\tauto = 0\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GIT_SWARM_"))}
    env.update(HOME=str(home), GIT_CONFIG_GLOBAL=str(home / ".gitconfig"), GIT_CONFIG_NOSYSTEM="1")

    def git(*args, cwd=None):
        return run(["git", *map(str, args)], cwd=cwd, env=env).stdout.strip()

    def swarm(clone, *args, agent="bench"):
        return run([str(BIN), "-C", str(clone), "--agent", agent, *map(str, args)], env=env).stdout.strip()

    # The board: one remote filled with --ops ops.
    before = work / "before.git"
    git("init", "-q", "--bare", before)
    builder = work / "builder"
    git("clone", "-q", before, builder)
    git("-C", builder, "commit", "-q", "--allow-empty", "-m", "start")
    git("-C", builder, "push", "-q", "origin", "main")
    swarm(builder, "init")
    t = time.perf_counter()
    written = int(run([str(FILL), str(builder), str(a.ops - 1)], env=env).stdout.strip()) + 1
    fill_secs = time.perf_counter() - t
    git("-C", before, "gc", "-q")
    ops_before = len(json.loads(swarm(builder, "--json", "log")))
    print(f"filled {written} ops in {fill_secs:.1f}s; the log lists {ops_before}", file=sys.stderr)

    # The same board, compacted.
    after = work / "after.git"
    shutil.copytree(before, after, symlinks=True)
    compactor = work / "compactor"
    git("clone", "-q", f"file://{after}", compactor)
    compact_secs = timed(lambda: swarm(compactor, "compact"))
    doc = json.loads(swarm(compactor, "--json", "log", "--archived"))
    assert len(doc) == ops_before + 1, f"log --archived lists {len(doc)} ops, expected {ops_before + 1}"
    assert json.loads(swarm(compactor, "--json", "list")) == json.loads(swarm(builder, "--json", "list"))
    git("-C", after, "gc", "-q")

    def fetch_bytes(remote):
        d = Path(tempfile.mkdtemp(dir=work))
        git("init", "-q", "--bare", d)
        secs = timed(
            lambda: git("-C", d, "-c", "fetch.unpackLimit=1", "fetch", "-q", "--no-tags", f"file://{remote}",
                        "refs/swarm/default:refs/swarm/default")
        )
        size = sum(p.stat().st_size for p in (d / "objects/pack").glob("*.pack"))
        shutil.rmtree(d)
        return size, secs

    def first_status(remote):
        d = work / f"fresh-{time.perf_counter_ns()}"
        git("init", "-q", d)
        secs = timed(lambda: swarm(d, "--remote", f"file://{remote}", "status"))
        shutil.rmtree(d)
        return secs

    clones = {}
    for name, remote in (("before", before), ("after", after)):
        url = work / f"{name}-url"
        git("clone", "-q", f"file://{remote}", url)
        path = work / f"{name}-path"
        git("clone", "-q", remote, path)
        clones[name] = (remote, url, path)

    def cycle(clone, agent):
        t = time.perf_counter()
        tid = swarm(clone, "add", "Bench task", agent=agent)
        swarm(clone, "claim", tid, agent=agent)
        swarm(clone, "done", tid, agent=agent)
        return (time.perf_counter() - t) / 3

    m = {k: [] for k in ("bytes", "fetch", "first", "url", "path")}
    res = {name: {k: [] for k in m} for name in clones}
    for r in range(a.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in order:
            remote, url, path = clones[name]
            size, secs = fetch_bytes(remote)
            res[name]["bytes"].append(size)
            res[name]["fetch"].append(secs)
            res[name]["first"].append(first_status(remote))
            res[name]["url"].append(cycle(url, f"url-{name}"))
            res[name]["path"].append(cycle(path, f"path-{name}"))
        print(f"round {r + 1}/{a.rounds}", file=sys.stderr)

    med = {name: {k: statistics.median(v) for k, v in d.items()} for name, d in res.items()}
    rows = [
        ("bytes a new clone fetches for the state ref", "bytes", lambda v: f"{v / 1e6:.2f} MB"),
        ("seconds of that fetch (`git fetch`, file://)", "fetch", lambda v: f"{v:.2f} s"),
        ("a new clone's first `git swarm status` (file://)", "first", lambda v: f"{v:.2f} s"),
        ("seconds per op, warm clone, file:// (add + claim + done)", "url", lambda v: f"{v * 1000:.0f} ms"),
        ("seconds per op, warm clone, in-process (a plain path)", "path", lambda v: f"{v * 1000:.0f} ms"),
    ]
    lines = [
        f"Board after {written} ops ({ops_before} commits on the state ref: tasks added, claimed, finished; 50 open), "
        f"median of {a.rounds} alternating rounds. `git swarm compact` took {compact_secs:.2f} s; "
        f"`git swarm log --archived` on the compacted remote lists all {ops_before + 1} ops.",
        "",
        "| measure | before compaction | after | after / before |",
        "| --- | --- | --- | --- |",
    ]
    for label, key, fmt in rows:
        b, af = med["before"][key], med["after"][key]
        lines.append(f"| {label} | {fmt(b)} | {fmt(af)} | {af / b:.2f} |")
    table = "\n".join(lines)
    print(table)
    if not a.no_doc:
        p = ROOT / "docs/performance.md"
        text = p.read_text()
        begin, end = "<!-- bench-compact:begin -->", "<!-- bench-compact:end -->"
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            _, tail = rest.split(end, 1)
            p.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
        else:
            p.write_text(f"{text.rstrip()}\n\n## Compaction (`bench/compact.py`)\n\n{begin}\n{table}\n{end}\n")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
