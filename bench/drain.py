#!/usr/bin/env python3
"""bench/drain.py — the core protocol under many CLI agents: tasks per second draining one board with 64 agents
(each in its own clone, each a loop of `git swarm claim` + `git swarm done`, as an agent harness drives it) against
one agent, `file://` remote, the two sides interleaved in one run (1, 64, 64, 1).

    python3 bench/drain.py [--bin PATH] [--quick] [--agents 64] [--tasks 192]

Goal (issue 15): 64 agents drain at ≥ 0.6 of one agent's rate — more agents must not mean much less throughput.
Prints one line per drain and the ratio of the medians; bench/run.sh's throughput rows (16 vs 1) are the same
measurement at a smaller size.
"""

import argparse
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


def drain(world, k, tasks, tag):
    bare, clones = world.swarm(f"drain-{tag}-{k}", k, "file", [(f"t{i}", "") for i in range(tasks)])
    procs = []
    t0 = time.monotonic()
    for i, c in enumerate(clones):
        env = dict(world.env, BIN=world.bin, AGENT=f"a{i}", OUT=os.path.join(c, "..", f"a{i}.out"))
        procs.append(subprocess.Popen(["sh", "-c", AGENT_LOOP], cwd=c, env=env))
    for p in procs:
        if p.wait(timeout=1800) != 0:
            sys.exit(f"bench: an agent of the {k}-agent drain failed")
    secs = time.monotonic() - t0
    done, errors = 0, 0
    for i, c in enumerate(clones):
        with open(os.path.join(c, "..", f"a{i}.out")) as f:
            a, b = f.read().split()
            done, errors = done + int(a), errors + int(b)
    if done != tasks:
        sys.exit(f"bench: {done} of {tasks} tasks done by {k} agents")
    shutil.rmtree(os.path.dirname(bare), ignore_errors=True)
    print(f"{k} agent(s): {tasks} tasks in {secs:.1f} s = {tasks / secs:.2f} tasks/s ({errors} ops retried)",
          file=sys.stderr)
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
        one, many = [], []
        for n, tag in [(1, "a"), (k, "b"), (k, "c"), (1, "d")]:
            (one if n == 1 else many).append(drain(world, n, tasks, tag))
        ratio = statistics.median(many) / statistics.median(one)
        print(f"| core drain, {k} CLI agents vs 1 (`bench/drain.py`, {tasks} tasks, `file://`) | "
              f"{statistics.median(many):.2f} vs {statistics.median(one):.2f} tasks/s: **{ratio:.2f}** | ≥ 0.6 |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
