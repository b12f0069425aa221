#!/usr/bin/env python3
"""bench/budget.py — `[run] pushes_per_minute`: does a fleet with no server stay inside a push budget?

    python3 bench/budget.py [--bin PATH] [--workers 8] [--per-worker 4] [--budget 60] [--task-secs 2]

N workers (`git swarm run worker --until-idle`, one clone each, one bare remote) drain N·per-worker tasks whose
scripted agent sleeps --task-secs, twice in one run: without a budget, and with `pushes_per_minute = --budget`.
The time scale is shrunk (2 s tasks, a budget of 60 a minute) so that a run takes a minute, not an hour; the
ratios carry over to GitHub's 6 pushes a minute with 20 s... 30 min tasks. Reported per run:

* pushes a minute to the remote over the whole drain: successful updates of the state ref (its reflog) and the
  pushes the runners attempted (lost races included — a hosted remote counts those too);
* the most successful updates in any 60 s window (from the reflog's timestamps, 1 s resolution);
* pushes per task and the makespan, so the cost of staying in budget shows.
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner import REPO, World, sh  # noqa: E402


def reflog_times(bare):
    path = os.path.join(bare, "logs", "refs", "swarm", "default")
    times = []
    for line in open(path):
        head = line.split("\t", 1)[0].split()
        # <old> <new> <name…> <email> <unix time> <tz>
        times.append(int(head[-2]))
    return times


def busiest_window(times, secs=60):
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] < t - secs + 1:
            j += 1
        best = max(best, i - j + 1)
    return best


def one(world, name, n, per_worker, task_secs, budget):
    m = n * per_worker
    tasks = [(f"task {i}", f"@sleep {task_secs:g}\n@write files/f{i}.txt {i}") for i in range(m)]
    run = f"pushes_per_minute = {budget}\n" if budget else ""
    bare, clones = world.swarm(name, n, "file", tasks, run)
    before = len(reflog_times(bare))
    r = world.drain(bare, clones)
    if r["landed"] != m:
        sys.exit(f"bench: {r['landed']} of {m} tasks landed")
    times = reflog_times(bare)[before:]
    minutes = r["makespan"] / 60
    return {
        "budget": budget or "none",
        "makespan": r["makespan"],
        "updates_per_min": r["state_pushes"] / minutes,
        "attempts_per_min": r["attempted"] / minutes,
        "busiest_60s": busiest_window(times),
        "updates_per_task": r["state_pushes"] / m,
        "attempts_per_task": r["attempted"] / m,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=None)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--per-worker", type=int, default=4)
    ap.add_argument("--budget", type=float, default=60)
    ap.add_argument("--task-secs", type=float, default=2)
    a = ap.parse_args()
    binary = a.bin
    if binary is None:
        sh(["cargo", "build", "--release", "--quiet"], cwd=REPO)
        binary = os.path.join(REPO, "target", "release", "git-swarm")
    root = tempfile.mkdtemp(prefix="git-swarm-bench-budget-")
    try:
        world = World(root, os.path.abspath(binary))
        rows = [
            one(world, "free", a.workers, a.per_worker, a.task_secs, None),
            one(world, "paced", a.workers, a.per_worker, a.task_secs, a.budget),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{a.workers} workers × {a.per_worker} tasks of {a.task_secs:g} s, over file://")
    print("| budget (pushes/min) | makespan | updates/min | attempts/min | busiest 60 s | updates/task | attempts/task |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['budget']} | {r['makespan']:.1f} s | {r['updates_per_min']:.1f} | {r['attempts_per_min']:.1f} | "
              f"{r['busiest_60s']} | {r['updates_per_task']:.2f} | {r['attempts_per_task']:.2f} |")
    free, paced = rows
    print(f"paced / free: updates a minute {paced['updates_per_min'] / free['updates_per_min']:.2f}, "
          f"makespan {paced['makespan'] / free['makespan']:.2f}")


if __name__ == "__main__":
    main()
