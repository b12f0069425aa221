#!/usr/bin/env python3
"""bench/drain.py — the core protocol under many CLI agents: tasks per second draining one board with 64 agents
(each in its own clone, each a loop of `git swarm claim` + `git swarm done`, as an agent harness drives it) against
one agent, `file://` remote, the two sides interleaved in one run (1, 64, 64, 1).

    python3 bench/drain.py [--bin PATH] [--quick] [--agents 64] [--tasks 192] [--ceiling 2,4,8]

With `--ceiling`, it measures the CPU-bound ceiling too (issue 38): P boards, each with its own remote and one
agent, drained at once — nothing contends, so the sum of their rates stops growing only when the two cores are
busy. The highest sum over the P given is the ceiling; the 64 agents' rate is reported against it, and the cores'
busy share (from /proc/stat) beside each.

Goal (issues 15, 29): 64 agents drain at ≥ 0.6 of one agent's rate — more agents must not mean much less
throughput. Prints one line per drain (with the lost races an op, tasks per agent, the wait of a `claim`, and where
an op's time goes, phase by phase, from `GIT_SWARM_PROFILE`), the ratio of the medians and the fairness row; bench/run.sh's throughput rows (16 vs 1) are the same
measurement at a smaller size.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runner  # noqa: E402


AGENT_LOOP = r'''
n=0; err=0
while :; do
  id=$("$BIN" --agent "$AGENT" claim 2>>"$OUT.err"); rc=$?
  [ $rc -eq 3 ] && break
  if [ $rc -ne 0 ]; then err=$((err+1)); [ $err -gt 500 ] && exit 1; continue; fi
  tries=0
  while :; do
    "$BIN" --agent "$AGENT" done "$id" >/dev/null 2>>"$OUT.err"; rc=$?
    [ $rc -eq 1 ] && [ $tries -lt 50 ] && { tries=$((tries+1)); err=$((err+1)); continue; }
    break
  done
  if [ $rc -eq 4 ] && "$BIN" show --json "$id" 2>/dev/null | grep -q "\"agent\": *\"$AGENT\""; then rc=0; fi
  [ $rc -eq 0 ] || { echo "done $id exited $rc" >>"$OUT.err"; exit 1; }
  n=$((n+1))
done
echo "$n $err" > "$OUT"
'''


PHASES = ["fetch", "read", "apply", "write", "push", "backoff"]


def claim_waits(profile):
    """From the profile lines (`GIT_SWARM_PROFILE`): the wall time of every `claim` that claimed (ms), the lost
    races and the ops, and the milliseconds of each phase over all ops."""
    waits, lost, ops, phases = [], 0, 0, dict.fromkeys(PHASES, 0.0)
    with open(profile) as f:
        for line in f:
            p = json.loads(line)
            if p.get("command") not in ("claim", "done"):
                continue
            ops += 1
            lost += p["lost"]
            for ph in PHASES:
                phases[ph] += p[ph]["ms"]
            if p["command"] == "claim" and p["published"] > 0:
                waits.append(p["wall_ms"])
    return sorted(waits), lost, ops, phases


def cpu_busy():
    """The machine's busy and total jiffies so far (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def run_loops(world, clones, profile, what):
    """One agent loop per clone, all at once; returns the seconds until the last one finished and the cores'
    busy share meanwhile."""
    procs = []
    b0, t0c = cpu_busy()
    t0 = time.monotonic()
    for i, c in enumerate(clones):
        env = dict(world.env, BIN=world.bin, AGENT=f"a{i}", OUT=os.path.join(c, "..", f"a{i}.out"),
                   GIT_SWARM_PROFILE=profile)
        procs.append(subprocess.Popen(["sh", "-c", AGENT_LOOP], cwd=c, env=env))
    for p in procs:
        if p.wait(timeout=1800) != 0:
            sys.exit(f"bench: an agent of {what} failed")
    secs = time.monotonic() - t0
    b1, t1c = cpu_busy()
    return secs, (b1 - b0) / max(t1c - t0c, 1)


def ceiling(world, p, tasks, tag):
    """P boards of `tasks` tasks each, one agent each, drained at once: their summed rate (tasks/s) and the cores'
    busy share."""
    clones = []
    for j in range(p):
        _, cs = world.swarm(f"ceiling-{tag}-{p}-{j}", 1, "file", [(f"t{i}", "") for i in range(tasks)])
        clones += cs
    secs, busy = run_loops(world, clones, os.path.join(world.root, f"ceiling-{tag}-{p}.jsonl"), f"{p} boards")
    for i, c in enumerate(clones):
        with open(os.path.join(c, "..", f"a{i}.out")) as f:
            if int(f.read().split()[0]) != tasks:
                sys.exit(f"bench: a board of the ceiling run with {p} boards was not drained")
        shutil.rmtree(os.path.dirname(c), ignore_errors=True)
    rate = p * tasks / secs
    print(f"ceiling, {p} boards × 1 agent: {p * tasks} tasks in {secs:.1f} s = {rate:.2f} tasks/s; "
          f"cores busy {busy:.0%}", file=sys.stderr)
    return rate, busy


def drain(world, k, tasks, tag, stats=None):
    bare, clones = world.swarm(f"drain-{tag}-{k}", k, "file", [(f"t{i}", "") for i in range(tasks)])
    profile = os.path.join(os.path.dirname(bare), "profile.jsonl")
    secs, busy = run_loops(world, clones, profile, f"the {k}-agent drain")
    done, errors, per_agent = 0, 0, []
    for i, c in enumerate(clones):
        with open(os.path.join(c, "..", f"a{i}.out")) as f:
            a, b = f.read().split()
            done, errors = done + int(a), errors + int(b)
            per_agent.append(int(a))
    if done != tasks:
        sys.exit(f"bench: {done} of {tasks} tasks done by {k} agents")
    waits, lost, ops, phases = claim_waits(profile)
    shutil.rmtree(os.path.dirname(bare), ignore_errors=True)
    median, worst = statistics.median(waits), waits[-1]
    print(f"{k} agent(s): {tasks} tasks in {secs:.1f} s = {tasks / secs:.2f} tasks/s ({errors} ops retried); "
          f"{lost / max(ops, 1):.2f} lost races an op; tasks per agent {min(per_agent)}–{max(per_agent)}; "
          f"claim wait median {median / 1000:.2f} s, worst {worst / 1000:.2f} s; cores busy {busy:.0%}",
          file=sys.stderr)
    print("    an op's time (ms): " + ", ".join(f"{ph} {phases[ph] / max(ops, 1):.1f}" for ph in PHASES),
          file=sys.stderr)
    if stats is not None:
        stats.append({"rate": tasks / secs, "median": median, "worst": worst, "lost": lost / max(ops, 1),
                      "per_agent": (min(per_agent), max(per_agent))})
    return tasks / secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--tasks", type=int, default=None)
    ap.add_argument("--ceiling", default=None, help="board counts for the CPU-bound ceiling, e.g. 2,4,8")
    a = ap.parse_args()
    binary = runner.binary_of(a)
    k = 8 if a.quick else a.agents
    tasks = a.tasks or (24 if a.quick else 192)
    root = tempfile.mkdtemp(prefix="git-swarm-drain-")
    try:
        world = runner.World(root, binary)
        one, many, fair = [], [], []
        ceilings = []
        sizes = [int(x) for x in a.ceiling.split(",")] if a.ceiling else []
        for n, tag in [(1, "a"), (k, "b"), (k, "c"), (1, "d")]:
            (one if n == 1 else many).append(drain(world, n, tasks, tag, fair if n == k else None))
            if tag in ("b", "c"):
                # Between the two sides, so that the ceiling shares their moment of the machine.
                ceilings += [ceiling(world, p, max(tasks // p, 8), tag)[0] for p in sizes]
        ratio = statistics.median(many) / statistics.median(one)
        print(f"| core drain, {k} CLI agents vs 1 (`bench/drain.py`, {tasks} tasks, `file://`) | "
              f"{statistics.median(many):.2f} vs {statistics.median(one):.2f} tasks/s: **{ratio:.2f}** | ≥ 0.6 |")
        worst = max(f["worst"] for f in fair)
        median = statistics.median(f["median"] for f in fair)
        lo, hi = min(f["per_agent"][0] for f in fair), max(f["per_agent"][1] for f in fair)
        print(f"| fairness at {k} CLI agents: tasks per agent / claim wait | {lo} to {hi} tasks; median wait "
              f"{median / 1000:.2f} s, worst {worst / 1000:.2f} s ({worst / max(median, 1):.0f}× the median) | "
              f"worst ≤ 10× median and ≤ 2 s |")
        if ceilings:
            top = max(ceilings)
            print(f"| {k} CLI agents against the CPU-bound ceiling (`bench/drain.py --ceiling {a.ceiling}`) | "
                  f"{statistics.median(many):.2f} vs {top:.2f} tasks/s: **{statistics.median(many) / top:.2f}** | "
                  f"≥ 0.9 (or 64 vs 1 ≥ 0.6) |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
