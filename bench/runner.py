#!/usr/bin/env python3
"""bench/runner.py — the runner's figures: effective parallelism, pushes per task, agent exit → code landed.

    python3 bench/runner.py [--bin PATH] [--quick] [--write-doc | --no-doc]

N workers (`git swarm run worker --until-idle`), each in its own clone of one bare remote, drain a board of
4·N tasks whose scripted agent (tests/agents/scripted.sh) takes 2 s and writes a file of its own. The ideal
makespan is 4 rounds × 2 s = 8 s; effective parallelism = ideal / measured makespan (goal ≥ 0.9 at N = 8,
≥ 0.8 at N = 32). Both sides of that ratio come from the same run, so the figure holds on a noisy machine.

Also measured, in the same runs:
* pushes per completed task: successful updates of the state ref on the remote (its reflog) per task, and the
  pushes the runners attempted (lost races included) per task (goal ≤ 1.2);
* time from an agent's exit to its code on the target branch (commit, rebase, atomic push), median and p90, from
  the runners' own reports, and the same on a contended board where every task appends to one file (so that
  most landings meet a rebase and a conflict run).

Writes a table into docs/performance.md between `<!-- bench-runner:begin -->` and `<!-- bench-runner:end -->`
for a full run (--write-doc forces it, --no-doc prevents it).
"""

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
AGENT = os.path.join(REPO, "tests", "agents", "scripted.sh")
TASK_SECS = 2.0
ROUNDS = 4


def sh(args, cwd=None, env=None, check=True):
    p = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed in {cwd}: {p.stderr}")
    return p.stdout


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class World:
    def __init__(self, root, binary):
        self.root = root
        self.bin = binary
        home = os.path.join(root, "home")
        os.makedirs(home)
        cfg = os.path.join(home, ".gitconfig")
        with open(cfg, "w") as f:
            f.write("[user]\n\tname = Bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n")
        self.env = dict(os.environ, HOME=home, GIT_CONFIG_GLOBAL=cfg, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
        for k in ("GIT_SWARM_AGENT", "GIT_SWARM_REMOTE", "GIT_SWARM_SWARM", "GIT_DIR", "GIT_WORK_TREE"):
            self.env.pop(k, None)

    def swarm(self, name, n, url_kind, tasks, run_settings="", seed_from=None):
        """A bare remote, n clones, the swarm and its tasks (`run_settings`: more lines of `[run]`; `seed_from`: a
        folder whose files the target's first commit holds beside README.md). Returns (bare, clones)."""
        base = os.path.join(self.root, name)
        os.makedirs(base)
        bare = os.path.join(base, "remote.git")
        seed = os.path.join(base, "seed")
        sh(["git", "init", "-q", "--bare", bare], env=self.env)
        sh(["git", "config", "core.logAllRefUpdates", "always"], cwd=bare, env=self.env)
        sh(["git", "init", "-q", seed], env=self.env)
        if seed_from:
            shutil.copytree(seed_from, seed, dirs_exist_ok=True)
        with open(os.path.join(seed, "README.md"), "w") as f:
            f.write("bench\n")
        sh(["git", "add", "."], cwd=seed, env=self.env)
        sh(["git", "commit", "-q", "-m", "root"], cwd=seed, env=self.env)
        sh(["git", "push", "-q", bare, "HEAD:refs/heads/main"], cwd=seed, env=self.env)
        url = bare if url_kind == "path" else "file://" + bare
        clones = []
        for i in range(n):
            c = os.path.join(base, f"c{i}")
            sh(["git", "clone", "-q", url, c], env=self.env)
            clones.append(c)
        cfg = os.path.join(base, "swarm.toml")
        with open(cfg, "w") as f:
            f.write('lease = "10m"\n[run]\ntask_timeout = "5m"\n' + run_settings + '[roles.worker]\n')
            f.write("exec = " + json.dumps(f"sh '{AGENT}'") + "\n")
        sh([self.bin, "init", "--config", cfg], cwd=clones[0], env=self.env)
        for i, (title, body) in enumerate(tasks):
            sh([self.bin, "add", title, "--body", body], cwd=clones[0], env=self.env)
        for c in clones:
            # The agent comes from the shared swarm.toml: each clone's runner must be told to trust it.
            sh([self.bin, "trust", "--yes"], cwd=c, env=self.env)
        return bare, clones

    def drain(self, bare, clones):
        """Start one worker per clone at once; wait for all. Returns figures."""
        reflog = os.path.join(bare, "logs", "refs", "swarm", "default")
        before = sum(1 for _ in open(reflog)) if os.path.exists(reflog) else 0
        procs = []
        t0 = time.monotonic()
        for i, c in enumerate(clones):
            p = subprocess.Popen(
                [self.bin, "--agent", f"w{i}", "--json", "run", "worker", "--until-idle"],
                cwd=c, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            procs.append(p)
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            if p.returncode != 0:
                sys.exit(f"bench: a worker failed ({p.returncode}):\n{err[-3000:]}")
            outs.append((out, err))
        makespan = time.monotonic() - t0
        after = sum(1 for _ in open(reflog))
        attempted = 0
        lost = 0
        landed = 0
        exit_to_landed = []
        for out, err in outs:
            doc = json.loads(out)
            attempted += doc["pushes"]
            lost += doc["lost_races"]
            landed += doc["landed"]
            for m in re.finditer(r"landed \S+ at \S+ \((\d+) lost race\(s\), ([0-9.]+)s after the agent exited\)", err):
                exit_to_landed.append(float(m.group(2)))
        return {
            "makespan": makespan,
            "landed": landed,
            "state_pushes": after - before,
            "attempted": attempted,
            "lost": lost,
            "exit_to_landed": exit_to_landed,
        }


def parallel_run(world, n, url_kind="path", rounds=ROUNDS):
    m = rounds * n
    tasks = [(f"task {i}", f"@sleep {TASK_SECS:g}\n@write files/f{i}.txt {i}") for i in range(m)]
    bare, clones = world.swarm(f"par-{url_kind}-{n}", n, url_kind, tasks)
    r = world.drain(bare, clones)
    if r["landed"] != m:
        sys.exit(f"bench: {r['landed']} of {m} tasks landed")
    merges = sh(["git", "rev-list", "--min-parents=2", "--count", "main"], cwd=bare, env=world.env).strip()
    count = sh(["git", "rev-list", "--count", "main"], cwd=bare, env=world.env).strip()
    if merges != "0" or int(count) != m + 1:
        sys.exit(f"bench: main has {count} commits and {merges} merges after {m} tasks")
    ideal = rounds * TASK_SECS
    r.update(n=n, tasks=m, ideal=ideal, efficiency=ideal / r["makespan"], url=url_kind)
    return r


def jittered_run(world, n, rounds=ROUNDS):
    """Tasks of 1–3 s (uniform, fixed seed): agents do not all finish at once, as in real use. The ideal is the
    total agent time over N (no schedule can beat it), or the longest task."""
    import random
    rng = random.Random(7 * n)
    m = rounds * n
    secs = [round(rng.uniform(1.0, 3.0), 2) for _ in range(m)]
    tasks = [(f"task {i}", f"@sleep {d}\n@write files/f{i}.txt {i}") for i, d in enumerate(secs)]
    bare, clones = world.swarm(f"jitter-{n}", n, "path", tasks)
    r = world.drain(bare, clones)
    if r["landed"] != m:
        sys.exit(f"bench: {r['landed']} of {m} tasks landed")
    ideal = max(sum(secs) / n, max(secs))
    r.update(n=n, tasks=m, ideal=ideal, efficiency=ideal / r["makespan"], url="path", jitter=True)
    return r


def contended_run(world, n, rounds=2):
    """Every task appends a line to the same file: most landings meet a moved branch and a conflict."""
    m = rounds * n
    tasks = [(f"append {i}", f"@sleep {TASK_SECS:g}\n@write shared.txt line {i}") for i in range(m)]
    bare, clones = world.swarm(f"contended-{n}", n, "path", tasks)
    r = world.drain(bare, clones)
    shared = sh(["git", "show", "main:shared.txt"], cwd=bare, env=world.env)
    missing = [i for i in range(m) if f"line {i}" not in shared]
    if missing:
        sys.exit(f"bench: lines lost in the contended run: {missing}")
    r.update(n=n, tasks=m, ideal=rounds * TASK_SECS, efficiency=rounds * TASK_SECS / r["makespan"], url="path")
    return r


def table(rows, contended, quick):
    lines = [
        "| workers | tasks | remote | makespan / ideal | effective parallelism | pushes per task (state ref) | push attempts per task | lost races | agent exit → landed, median / p90 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows + contended:
        kind = r["url"] + (" (one shared file)" if r in contended else "") + (", tasks of 1–3 s" if r.get("jitter") else "")
        e = r["exit_to_landed"]
        lines.append(
            f"| {r['n']} | {r['tasks']} | {kind} | {r['makespan']:.1f} s / {r['ideal']:.1f} s | **{r['efficiency']:.2f}** | "
            f"{r['state_pushes'] / r['tasks']:.2f} | {r['attempted'] / r['tasks']:.2f} | {r['lost']} | "
            f"{statistics.median(e):.2f} s / {percentile(e, 0.9):.2f} s |"
        )
    head = f"Measured {time.strftime('%Y-%m-%d')} with `python3 bench/runner.py{' --quick' if quick else ''}` on this machine ({os.cpu_count()} cores)."
    return head + "\n\n" + "\n".join(lines) + "\n"


def write_doc(text, marker="bench-runner", heading="The runner"):
    """Put `text` between `<!-- {marker}:begin -->` and `<!-- {marker}:end -->` of docs/performance.md (a new
    section `heading` at the end when the markers are not there yet)."""
    doc = os.path.join(REPO, "docs", "performance.md")
    with open(doc) as f:
        s = f.read()
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    block = f"{begin}\n{text}{end}"
    if begin in s and end in s:
        s = s[: s.index(begin)] + block + s[s.index(end) + len(end):]
    else:
        s = s.rstrip() + f"\n\n## {heading}\n\n" + block + "\n"
    with open(doc, "w") as f:
        f.write(s)


def bench_args():
    """The flags every bench script of ours takes: --bin, --quick, --write-doc | --no-doc."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    ap.add_argument("--quick", action="store_true")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write-doc", action="store_true")
    g.add_argument("--no-doc", action="store_true")
    return ap


def binary_of(a):
    """The binary to measure: --bin, else a fresh release build of this checkout."""
    if a.bin is None:
        sh(["cargo", "build", "--release", "--quiet"], cwd=REPO)
        return os.path.join(REPO, "target", "release", "git-swarm")
    return os.path.abspath(a.bin)


def main():
    ap = bench_args()
    ap.add_argument("--sizes", default=None, help="comma-separated worker counts (default 1,8,16,32; quick 1,4,8)")
    a = ap.parse_args()
    binary = binary_of(a)
    root = tempfile.mkdtemp(prefix="git-swarm-bench-runner-")
    try:
        world = World(root, binary)
        sizes = [1, 4, 8] if a.quick else [1, 8, 16, 32]
        if a.sizes:
            sizes = [int(x) for x in a.sizes.split(",")]
        rows = []
        for n in sizes:
            r = parallel_run(world, n)
            print(f"N={n}: makespan {r['makespan']:.1f}s ideal {r['ideal']:.0f}s efficiency {r['efficiency']:.2f} "
                  f"pushes/task {r['state_pushes'] / r['tasks']:.2f} attempts/task {r['attempted'] / r['tasks']:.2f}",
                  file=sys.stderr)
            rows.append(r)
        r = parallel_run(world, 8 if not a.quick else 4, "file")
        rows.append(r)
        for n in ([4] if a.quick else [8, 32]):
            r = jittered_run(world, n)
            print(f"N={n} jittered: makespan {r['makespan']:.1f}s ideal {r['ideal']:.1f}s efficiency {r['efficiency']:.2f}",
                  file=sys.stderr)
            rows.append(r)
        contended = [contended_run(world, 4 if a.quick else 8)]
        text = table(rows, contended, a.quick)
        print(text)
        if (not a.quick and not a.no_doc) or a.write_doc:
            write_doc(text)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
