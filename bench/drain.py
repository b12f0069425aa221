#!/usr/bin/env python3
"""bench/drain.py — the core protocol under many CLI agents: tasks per second draining one board with 64 agents
(each in its own clone, each a loop of `git swarm claim` + `git swarm done`, as an agent harness drives it) against
one agent, `file://` remote, the two sides interleaved in one run (1, 64, 64, 1).

    python3 bench/drain.py [--bin PATH] [--quick] [--agents 64] [--tasks 192]

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


def drain(world, k, tasks, tag, stats=None):
    bare, clones = world.swarm(f"drain-{tag}-{k}", k, "file", [(f"t{i}", "") for i in range(tasks)])
    procs = []
    profile = os.path.join(os.path.dirname(bare), "profile.jsonl")
    t0 = time.monotonic()
    for i, c in enumerate(clones):
        env = dict(world.env, BIN=world.bin, AGENT=f"a{i}", OUT=os.path.join(c, "..", f"a{i}.out"),
                   GIT_SWARM_PROFILE=profile)
        procs.append(subprocess.Popen(["sh", "-c", AGENT_LOOP], cwd=c, env=env))
    for p in procs:
        if p.wait(timeout=1800) != 0:
            sys.exit(f"bench: an agent of the {k}-agent drain failed")
    secs = time.monotonic() - t0
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
          f"claim wait median {median / 1000:.2f} s, worst {worst / 1000:.2f} s", file=sys.stderr)
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
    a = ap.parse_args()
    binary = runner.binary_of(a)
    k = 8 if a.quick else a.agents
    tasks = a.tasks or (24 if a.quick else 192)
    root = tempfile.mkdtemp(prefix="git-swarm-drain-")
    try:
        world = runner.World(root, binary)
        one, many, fair = [], [], []
        for n, tag in [(1, "a"), (k, "b"), (k, "c"), (1, "d")]:
            (one if n == 1 else many).append(drain(world, n, tasks, tag, fair if n == k else None))
        ratio = statistics.median(many) / statistics.median(one)
        print(f"| core drain, {k} CLI agents vs 1 (`bench/drain.py`, {tasks} tasks, `file://`) | "
              f"{statistics.median(many):.2f} vs {statistics.median(one):.2f} tasks/s: **{ratio:.2f}** | ≥ 0.6 |")
        worst = max(f["worst"] for f in fair)
        median = statistics.median(f["median"] for f in fair)
        lo, hi = min(f["per_agent"][0] for f in fair), max(f["per_agent"][1] for f in fair)
        print(f"| fairness at {k} CLI agents: tasks per agent / claim wait | {lo} to {hi} tasks; median wait "
              f"{median / 1000:.2f} s, worst {worst / 1000:.2f} s ({worst / max(median, 1):.0f}× the median) | "
              f"worst ≤ 10× median and ≤ 2 s |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
