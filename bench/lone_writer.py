#!/usr/bin/env python3
"""bench/lone_writer.py — a lone writer after others wrote pays nothing for contention that is not there (issue 38).

    python3 bench/lone_writer.py [--bin PATH] [--pairs 10] [--rounds 3] [--remote path|file]

The issue's own measurement, as one command: a planner files 4·pairs tasks; one agent does `--pairs` claim/done
pairs (its clean op time); two people each add one task, a second apart; the same agent does `--pairs` more. Each
op is timed (`git swarm --agent w claim`, `git swarm --agent w done <id>`), and the figure is the ratio of the
median op after the adds to the median op before them, per round and over all rounds (goal ≤ 1.2×; it was 8.5–12.4×
when the share rule read the last minute's history). Over a plain-path remote (in-process compare-and-swap) and
`file://`.
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
REPO = os.path.dirname(HERE)


def sh(args, cwd=None, env=None):
    p = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed in {cwd}: {p.stderr}")
    return p.stdout.strip()


def world(root, remote):
    home = os.path.join(root, "home")
    os.makedirs(home)
    cfg = os.path.join(home, ".gitconfig")
    with open(cfg, "w") as f:
        f.write("[user]\n\tname = Bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n")
    env = dict(os.environ, HOME=home, GIT_CONFIG_GLOBAL=cfg, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    for k in ("GIT_SWARM_AGENT", "GIT_SWARM_REMOTE", "GIT_SWARM_SWARM", "GIT_DIR", "GIT_WORK_TREE"):
        env.pop(k, None)
    bare = os.path.join(root, "remote.git")
    seed = os.path.join(root, "seed")
    sh(["git", "init", "-q", "--bare", bare], env=env)
    sh(["git", "init", "-q", seed], env=env)
    with open(os.path.join(seed, "README.md"), "w") as f:
        f.write("bench\n")
    sh(["git", "add", "-A"], cwd=seed, env=env)
    sh(["git", "commit", "-q", "-m", "seed"], cwd=seed, env=env)
    sh(["git", "push", "-q", bare, "HEAD:refs/heads/main"], cwd=seed, env=env)
    url = bare if remote == "path" else f"file://{bare}"
    clones = []
    for name in ("agent", "person-1", "person-2"):
        c = os.path.join(root, name)
        sh(["git", "clone", "-q", url, c], env=env)
        clones.append(c)
    return env, clones


def timed(binary, clone, env, *args):
    t = time.monotonic()
    out = sh([binary, *args], cwd=clone, env=env)
    return time.monotonic() - t, out


def round_(binary, root, pairs, remote):
    env, (agent, p1, p2) = world(root, remote)
    sh([binary, "init"], cwd=agent, env=env)
    for i in range(4 * pairs):
        sh([binary, "add", f"task {i}"], cwd=agent, env=env)

    def pairs_of(n):
        secs = []
        for _ in range(n):
            s, tid = timed(binary, agent, env, "--agent", "w", "claim")
            secs.append(s)
            s, _ = timed(binary, agent, env, "--agent", "w", "done", tid.splitlines()[-1])
            secs.append(s)
        return secs

    before = pairs_of(pairs)
    sh([binary, "--agent", "p1", "add", "a person's task"], cwd=p1, env=env)
    time.sleep(1)
    sh([binary, "--agent", "p2", "add", "another person's task"], cwd=p2, env=env)
    after = pairs_of(pairs)
    return statistics.median(before), statistics.median(after)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "git-swarm"))
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--remote", choices=["path", "file"], default="file")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"bench: no binary at {a.bin} (cargo build --release, or --bin)")
    ratios, befores, afters = [], [], []
    for r in range(a.rounds):
        root = tempfile.mkdtemp(prefix="bench-lone-")
        try:
            b, af = round_(a.bin, root, a.pairs, a.remote)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        befores.append(b)
        afters.append(af)
        ratios.append(af / b)
        print(f"round {r + 1}: {b * 1000:.0f} ms an op before the adds, {af * 1000:.0f} ms after: {af / b:.2f}×",
              file=sys.stderr)
    print(f"| lone writer after others wrote ({a.remote} remote, {a.pairs} pairs, {a.rounds} rounds) | "
          f"{statistics.median(befores) * 1000:.0f} ms → {statistics.median(afters) * 1000:.0f} ms an op | "
          f"**{statistics.median(ratios):.2f}×** (rounds {min(ratios):.2f}–{max(ratios):.2f}×; goal ≤ 1.2×) |")


if __name__ == "__main__":
    main()
