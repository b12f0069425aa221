#!/usr/bin/env python3
"""bench/scale.py — many agents on one remote: runner processes that host several agents each
(`git swarm run worker --agents <n>`) against one agent per process, and a fleet under a push budget.

    python3 bench/scale.py [--bin PATH] [--quick] [--write-doc | --no-doc] [--only parallel|budget]

1. Parallelism. A fleet of A agents, as P processes × A/P agents (each process in its own clone of one bare
   remote, plain-path URL), drains 4·A tasks whose scripted agent sleeps 2 s and writes a file of its own. The
   ideal makespan is 4 × 2 s; effective parallelism = ideal / measured makespan. Also: updates of the state ref per
   task (the remote's reflog: claims, landings, failures, renewals — every successful push), push attempts per
   task, and agent exit → code landed (p50, p90). Fleets: 32 as 32 × 1 and 4 × 8; 128 as 4 × 32 and 8 × 16.

2. A push budget, on a shrunk time scale (--scale f, default 60: one real minute is 1 s). The fleet works tasks
   of 10 minutes (10 s at f = 60, each ±20 %), under a lease of 30 minutes and `[run] pushes_per_minute` = 6
   (both scaled), against a remote whose every push takes 1 s (scaled; a pre-receive hook sleeps). Reported in
   real-time units: pushes a minute to the remote over the drain (goal: ≤ 6), effective parallelism, pushes per
   task. Fleets: 128 agents as 4 × 32, and 48 agents as 48 × 1 (the arithmetic's one-agent-per-process ceiling).

Both sides of each ratio come from the same run. Writes its tables into docs/performance.md between
`<!-- bench-scale:begin -->` and `<!-- bench-scale:end -->` for a full run.
"""

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runner  # noqa: E402  (bench/runner.py: the world of clones and the binary)

TASK_SECS = 2.0
ROUNDS = 4


def drain(world, bare, clones, agents_per_proc, timeout=1800):
    """One `run worker --until-idle --agents n` per clone, all at once; figures of the drain."""
    reflog = os.path.join(bare, "logs", "refs", "swarm", "default")
    before = sum(1 for _ in open(reflog)) if os.path.exists(reflog) else 0
    procs = []
    t0 = time.monotonic()
    for i, c in enumerate(clones):
        args = [world.bin, "--agent", f"p{i}", "--json", "run", "worker", "--until-idle"]
        if agents_per_proc > 1:
            args += ["--agents", str(agents_per_proc)]
        procs.append(subprocess.Popen(args, cwd=c, env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            sys.exit(f"bench: a runner failed ({p.returncode}):\n{err[-3000:]}")
        outs.append((out, err))
    makespan = time.monotonic() - t0
    after = sum(1 for _ in open(reflog))
    r = {"makespan": makespan, "updates": after - before, "attempted": 0, "lost": 0, "landed": 0, "exit": []}
    for out, err in outs:
        doc = runner.json.loads(out)
        r["attempted"] += doc["pushes"]
        r["lost"] += doc["lost_races"]
        r["landed"] += doc["landed"]
        for m in re.finditer(r"landed \S+ at \S+ \(\d+ lost race\(s\), ([0-9.]+)s after the agent exited\)", err):
            r["exit"].append(float(m.group(1)))
    return r


def check_main(world, bare, m):
    merges = runner.sh(["git", "rev-list", "--min-parents=2", "--count", "main"], cwd=bare, env=world.env).strip()
    count = runner.sh(["git", "rev-list", "--count", "main"], cwd=bare, env=world.env).strip()
    if merges != "0" or int(count) != m + 1:
        sys.exit(f"bench: main has {count} commits and {merges} merges after {m} tasks")


def parallel(world, procs, per, rounds=ROUNDS):
    n = procs * per
    m = rounds * n
    tasks = [(f"task {i}", f"@sleep {TASK_SECS:g}\n@write files/f{i}.txt {i}") for i in range(m)]
    bare, clones = world.swarm(f"par-{procs}x{per}", procs, "path", tasks)
    r = drain(world, bare, clones, per)
    if r["landed"] != m:
        sys.exit(f"bench: {r['landed']} of {m} tasks landed")
    check_main(world, bare, m)
    r.update(procs=procs, per=per, tasks=m, efficiency=rounds * TASK_SECS / r["makespan"])
    return r


def budget(world, procs, per, scale, tasks_each=2):
    """The fleet under a scaled push budget; figures in real-time units."""
    n = procs * per
    m = tasks_each * n
    task = 600.0 / scale
    rng = random.Random(7)
    tasks = []
    for i in range(m):
        secs = task * rng.uniform(0.8, 1.2)
        tasks.append((f"task {i}", f"@sleep {secs:.3f}\n@write files/f{i}.txt {i}"))
    lease = max(3, round(1800 / scale))
    run = f"pushes_per_minute = {6 * scale:g}\n"
    bare, clones = world.swarm(f"budget-{procs}x{per}", procs, "path", tasks, run_settings=run)
    runner.sh([world.bin, "config", "set", "lease", f"{lease}s"], cwd=clones[0], env=world.env)
    hook = os.path.join(bare, "hooks", "pre-receive")
    with open(hook, "w") as f:
        f.write(f"#!/bin/sh\ncat > /dev/null\nsleep {60.0 / scale:.3f}\n")
    os.chmod(hook, 0o755)
    for c in clones:
        runner.sh([world.bin, "trust", "--yes"], cwd=c, env=world.env)
    r = drain(world, bare, clones, per)
    if r["landed"] != m:
        sys.exit(f"bench: {r['landed']} of {m} tasks landed")
    real_minutes = r["makespan"] * scale / 60.0
    ideal = tasks_each * task
    r.update(procs=procs, per=per, tasks=m, per_minute=r["updates"] / real_minutes,
             efficiency=ideal / r["makespan"], scale=scale)
    return r


def p(xs, q):
    return runner.percentile(xs, q)


def tables(par, bud):
    out = []
    if par:
        out.append("| agents | as | effective parallelism | state-ref updates per task | push attempts per task "
                   "| exit → landed p50 / p90 |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for r in par:
            out.append(f"| {r['procs'] * r['per']} | {r['procs']} × {r['per']} | {r['efficiency']:.2f} "
                       f"| {r['updates'] / r['tasks']:.2f} | {r['attempted'] / r['tasks']:.2f} "
                       f"| {p(r['exit'], 0.5):.2f} s / {p(r['exit'], 0.9):.2f} s |")
    if bud:
        if out:
            out.append("")
        s = bud[0]["scale"]
        out.append(f"Push budget (time scale 1:{s:g}; figures in real time: 10-minute tasks, 30-minute lease, "
                   "6 pushes a minute, pushes of 1 s):")
        out.append("")
        out.append("| agents | as | pushes a minute | goal | effective parallelism | pushes per task |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for r in bud:
            out.append(f"| {r['procs'] * r['per']} | {r['procs']} × {r['per']} | {r['per_minute']:.1f} | ≤ 6 "
                       f"| {r['efficiency']:.2f} | {r['updates'] / r['tasks']:.2f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["parallel", "budget"], default=None)
    ap.add_argument("--scale", type=float, default=60.0)
    ap.add_argument("--fleets", default=None, help="parallel fleets as PxA,PxA (default 32x1,4x8,4x32,8x16)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write-doc", action="store_true")
    g.add_argument("--no-doc", action="store_true")
    a = ap.parse_args()
    binary = runner.binary_of(a)
    root = tempfile.mkdtemp(prefix="git-swarm-scale-")
    try:
        world = runner.World(root, binary)
        par, bud = [], []
        if a.only in (None, "parallel"):
            spec = a.fleets or ("4x1,2x2" if a.quick else "32x1,4x8,4x32,8x16")
            for f in spec.split(","):
                procs, per = (int(x) for x in f.split("x"))
                r = parallel(world, procs, per, rounds=2 if a.quick else ROUNDS)
                print(f"parallel {procs}x{per}: {r['efficiency']:.2f}, {r['updates'] / r['tasks']:.2f} updates/task",
                      file=sys.stderr)
                par.append(r)
        if a.only in (None, "budget"):
            fleets = [(2, 4)] if a.quick else [(4, 32), (48, 1)]
            for procs, per in fleets:
                r = budget(world, procs, per, a.scale, tasks_each=1 if a.quick else 2)
                print(f"budget {procs}x{per}: {r['per_minute']:.1f} pushes/min, {r['efficiency']:.2f}",
                      file=sys.stderr)
                bud.append(r)
        text = tables(par, bud)
        print(text)
        if (a.write_doc or not (a.quick or a.no_doc)) and par and bud:
            runner.write_doc(text + "\n", marker="bench-scale", heading="Many agents")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
