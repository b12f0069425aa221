#!/usr/bin/env python3
"""bench/start_fetches.py — what many agents of one runner process cost the remote: connections per landed task.

    python3 bench/start_fetches.py [--bin PATH] [--before PATH] [--agents 8] [--rounds 3]

One runner process hosts `--agents` agents (`git swarm run worker --agents n --until-idle`) in one clone of a
`file://` remote, and lands as many tasks of the scripted agent (each writes a file of its own). Every fetch is
counted: gix finds `git-upload-pack` on the `PATH`, so a folder of the bench's own, first on it, holds a wrapper that
logs each start and execs the real program (a push's `git-receive-pack` is found in git's own exec path, which git
puts first: pushes are counted as the updates of the remote's refs, from its reflog). With `--before`, the same for a second binary, the runs interleaved (after, before, after, …), and the
ratio of the medians. Issue 38's figure: the agents of one process share their reads (the settings at the start,
the board and the target's tip before each work tree), so the fetches a task fall with the agents that share them.
Needs git and python3; everything runs in a temporary directory with its own HOME.
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
import runner  # noqa: E402  (bench/runner.py: the hermetic world)

WRAPPER = """#!/bin/sh
echo "$0" >> "{log}"
exec "{real}" "$@"
"""


def wrappers(root):
    """A folder holding logging wrappers of git-upload-pack and git-receive-pack; (folder, log)."""
    d = os.path.join(root, "wrap")
    os.makedirs(d)
    log = os.path.join(root, "connections.log")
    for prog in ("git-upload-pack",):
        real = shutil.which(prog)
        if real is None:
            exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout.strip()
            real = os.path.join(exec_path, prog)
        with open(os.path.join(d, prog), "w") as f:
            f.write(WRAPPER.format(log=log, real=real))
        os.chmod(os.path.join(d, prog), 0o755)
    return d, log


def ref_updates(world, bare):
    """Updates of the remote's state ref and main so far, from its reflog (the bench's remotes log every update)."""
    n = 0
    for ref in ("refs/swarm/default", "refs/heads/main"):
        out = subprocess.run(["git", "reflog", "show", "--format=%H", ref], cwd=bare, env=world.env,
                             capture_output=True, text=True).stdout
        n += len(out.split())
    return n


def one_run(world, name, binary, agents, wrap, log):
    tasks = [(f"task {i}", f"@write out/{name}-{i}.txt done") for i in range(agents)]
    world.bin = binary
    bare, clones = world.swarm(name, 1, "file", tasks)
    c = clones[0]
    runner.sh([binary, "trust", "--yes"], cwd=c, env=world.env)
    env = dict(world.env, PATH=wrap + os.pathsep + world.env["PATH"])
    if os.path.exists(log):
        os.remove(log)
    updates = ref_updates(world, bare)
    t0 = time.monotonic()
    p = subprocess.run([binary, "--agent", "r", "run", "worker", "--agents", str(agents), "--until-idle"], cwd=c,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench: the runner failed ({p.returncode}): {p.stderr[-2000:]}")
    landed = p.stderr.count(": landed ")
    if landed != agents:
        sys.exit(f"bench: {landed} of {agents} tasks landed: {p.stderr[-2000:]}")
    lines = open(log).read().split() if os.path.exists(log) else []
    fetches = sum(1 for x in lines if x.endswith("git-upload-pack"))
    return fetches, ref_updates(world, bare) - updates, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    ap.add_argument("--before", default=None, help="a second binary, measured interleaved")
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    after = runner.binary_of(a)
    sides = [("after", after)] + ([("before", os.path.abspath(a.before))] if a.before else [])
    root = tempfile.mkdtemp(prefix="gs-start-")
    try:
        world = runner.World(root, after)
        wrap, log = wrappers(root)
        got = {s: [] for s, _ in sides}
        for r in range(a.rounds):
            for side, binary in sides:
                got[side].append(one_run(world, f"{side}{r}", binary, a.agents, wrap, log))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{a.agents} agents in one runner process, {a.agents} tasks over file://, {a.rounds} rounds (medians)")
    print("| binary | fetches (upload-pack) | fetches a task | ref updates on the remote | wall |")
    print("| --- | --- | --- | --- | --- |")
    med = {}
    for side, _ in sides:
        f = statistics.median(x[0] for x in got[side])
        p = statistics.median(x[1] for x in got[side])
        w = statistics.median(x[2] for x in got[side])
        med[side] = (f, p, w)
        print(f"| {side} | {f:.0f} | {f / a.agents:.2f} | {p:.0f} | {w:.1f} s |")
    if a.before:
        (fa, pa, wa), (fb, pb, wb) = med["after"], med["before"]
        print(f"after / before: fetches {fa / fb:.2f}×, ref updates {pa / max(pb, 1):.2f}×, wall {wa / wb:.2f}×")


if __name__ == "__main__":
    main()
