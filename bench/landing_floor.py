#!/usr/bin/env python3
"""bench/landing_floor.py — the CPU a runner spends per landed task against the raw-git floor of the same landing.

    python3 bench/landing_floor.py [--bin PATH] [--tasks 40] [--rounds 3] [--fleet PxA]

*Ours*: `git swarm run worker --until-idle` (sandbox off) lands N tasks of the scripted agent (`@write f<i>.txt`)
from one clone over `file://`. *The floor*: a bash loop doing, per task, what the same landing needs with git
alone and nothing of ours — the claim as one compare-and-swap of the state ref written with plumbing
(`bench/floor.sh`), a checkout of the target's tip, the same scripted agent, `git add -A` and `git commit`, a fetch
of the target and the state ref, the `done` built with plumbing, and one `git push --atomic` of both with leases.
The CPU is that of every process of each side (user + system, the children's accounting), the sides interleaved
(ours, floor, ours, floor, …); the figure is the ratio of the medians of CPU per task. Goal (issue 29): ≤ 1.5×.

`--fleet 4x32`: ours as a fleet, P clones each with one `run worker --until-idle --agents A` at once, on
max(--tasks, 2·P·A) tasks — its lost races, batching and every process of the crowd counted — against the same
floor of one landing alone (the cheapest any fleet's landing can be).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runner  # noqa: E402

FLOOR_LOOP = r'''
set -u
. "$FLOOR_SH"
url=$1; shift
for id in "$@"; do
  floor_fetch "$url" || exit 2
  floor_build claim "$id" floor || { echo "floor: cannot claim $id" >&2; exit 2; }
  floor_push "$url" || { echo "floor: lost a race alone" >&2; exit 2; }
  git fetch -q --no-tags --no-auto-gc "$url" "+refs/heads/main:refs/x/main" || exit 2
  git checkout -q --detach refs/x/main || exit 2
  prompt=$(mktemp); printf '@write f-%s.txt %s\n' "$id" "$id" > "$prompt"
  GIT_SWARM_ROLE=worker GIT_SWARM_PROMPT_FILE=$prompt sh "$AGENT" >/dev/null || exit 2
  rm -f "$prompt"
  git add -A && git commit -q -m "$id" -m "Swarm-Task: $id" || exit 2
  floor_fetch "$url" || exit 2
  git fetch -q --no-tags --no-auto-gc "$url" "+refs/heads/main:refs/x/main" || exit 2
  git rebase -q refs/x/main >/dev/null 2>&1 || exit 2
  floor_build done "$id" floor || { echo "floor: cannot finish $id" >&2; exit 2; }
  code=$(git rev-parse HEAD); main=$(git rev-parse refs/x/main)
  git push -q --atomic --force-with-lease=refs/heads/main:"$main" \
    --force-with-lease="$FLOOR_REF:$FLOOR_BASE" "$url" "$code:refs/heads/main" "$FLOOR_NEW:$FLOOR_REF" || exit 2
done
'''


def board(world, clone):
    """The tasks of the clone's swarm (`git swarm list --json`)."""
    out = subprocess.run([world.bin, "list", "--json"], cwd=clone, env=world.env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def cpu(fn):
    before = os.times()
    fn()
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def ours(world, n, tag, procs=1, per=1):
    tasks = [(f"f{i}", f"@write f{i}.txt {i}") for i in range(n)]
    bare, clones = world.swarm(f"ours-{tag}", procs, "file", tasks, run_settings='sandbox = "off"\n')
    c = clones[0]

    def run():
        more = ["--agents", str(per)] if per > 1 else []
        ps = [subprocess.Popen([world.bin, "--agent", f"w{i}", "run", "worker", "--until-idle", *more], cwd=d,
                               env=world.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for i, d in enumerate(clones)]
        for p in ps:
            _, err = p.communicate()
            if p.returncode != 0:
                sys.exit(f"bench: a runner failed ({p.returncode}):\n{err[-2000:]}")

    secs = cpu(run)
    if sum(t["status"] == "done" for t in board(world, c)) != n:
        sys.exit("bench: the runner did not land every task")
    shutil.rmtree(os.path.dirname(bare), ignore_errors=True)
    return secs / n


def floor(world, n, tag):
    tasks = [(f"f{i}", "") for i in range(n)]
    bare, clones = world.swarm(f"floor-{tag}", 1, "file", tasks)
    c = clones[0]
    ids = [t["id"] for t in board(world, c)]
    env = dict(world.env, FLOOR_SH=os.path.join(HERE, "floor.sh"), AGENT=runner.AGENT)

    def run():
        runner.sh(["bash", "-c", FLOOR_LOOP, "floor", "file://" + bare, *ids], cwd=c, env=env)

    secs = cpu(run)
    if sum(t["status"] == "done" for t in board(world, c)) != n:
        sys.exit("bench: the floor did not finish every task")
    shutil.rmtree(os.path.dirname(bare), ignore_errors=True)
    return secs / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fleet", default="1x1", help="ours as P clones × A agents a runner (default 1x1)")
    a = ap.parse_args()
    procs, per = (int(x) for x in a.fleet.split("x"))
    n_ours = max(a.tasks, 2 * procs * per) if procs * per > 1 else a.tasks
    binary = runner.binary_of(a)
    root = tempfile.mkdtemp(prefix="git-swarm-landing-floor-")
    try:
        world = runner.World(root, binary)
        mine, raw = [], []
        for r in range(a.rounds):
            mine.append(ours(world, n_ours, r, procs, per))
            raw.append(floor(world, a.tasks, r))
            print(f"round {r + 1}: ours {mine[-1] * 1000:.0f} ms CPU a task, floor {raw[-1] * 1000:.0f} ms",
                  file=sys.stderr)
        ratio = statistics.median(mine) / statistics.median(raw)
        who = "one runner" if procs * per == 1 else f"{procs * per} agents ({procs} × {per}, {n_ours} tasks)"
        flag = "" if procs * per == 1 else f" --fleet {a.fleet}"
        print(f"| CPU per landed task, {who} vs the raw-git floor (`bench/landing_floor.py{flag}`, {a.tasks} tasks, "
              f"`file://`) | {statistics.median(mine) * 1000:.0f} vs {statistics.median(raw) * 1000:.0f} ms: "
              f"**{ratio:.2f}×** | ≤ 1.5× |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
