#!/usr/bin/env python3
"""bench/sandbox.py — what the sandbox of an agent run costs (issue 26): the seconds a contained run adds.

    python3 bench/sandbox.py [--bin PATH] [--tasks 20] [--rounds 3]

One worker drains a board of `--tasks` trivial tasks (the agent writes one file) with `[run] sandbox = "auto"`
(bubblewrap; the fresh home, the agent's own git directory, its work taken as data; as root, the agent as nobody)
and with `sandbox = "off"`,
in interleaved rounds (off, on, on, off, …) on the same machine, each round on a fresh board of its own. The
figure is (time on − time off) / tasks: what one run costs more in a sandbox, everything of it included. Also the
bare cost of bubblewrap: `bwrap <the runner's arguments> -- true` against `sh -c true`, 50 times each.

Goal: under 50 ms a run. Needs bubblewrap.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(args, cwd=None, env=None):
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def world(base, binary, mode, tasks):
    """A bare remote, a clone, a swarm whose worker writes one file, `tasks` tasks."""
    home = os.path.join(base, "home")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_SWARM_TRUST": "any", "LC_ALL": "C",
                "GIT_CEILING_DIRECTORIES": os.path.dirname(base)})
    env.pop("XDG_CACHE_HOME", None)
    with open(os.path.join(home, ".gitconfig"), "w") as f:
        f.write("[user]\n\tname = Bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n")
    bare = os.path.join(base, "r.git")
    sh(["git", "init", "-q", "--bare", bare], env=env)
    seed = os.path.join(base, "seed")
    sh(["git", "init", "-q", seed], env=env)
    with open(os.path.join(seed, "README"), "w") as f:
        f.write("bench\n")
    sh(["git", "add", "README"], cwd=seed, env=env)
    sh(["git", "commit", "-q", "-m", "root"], cwd=seed, env=env)
    sh(["git", "push", "-q", bare, "HEAD:main"], cwd=seed, env=env)
    clone = os.path.join(base, "c")
    sh(["git", "clone", "-q", bare, clone], env=env)
    cfg = os.path.join(base, "swarm.toml")
    with open(cfg, "w") as f:
        f.write(f'lease = "10m"\n[run]\nsandbox = "{mode}"\n[roles.worker]\n'
                'exec = "echo \\"$GIT_SWARM_TASK_ID\\" > \\"$GIT_SWARM_TASK_ID.txt\\""\n')
    sh([binary, "init", "--config", cfg], cwd=clone, env=env)
    lines = "".join(f'[[task]]\ntitle = "t{i}"\n\n' for i in range(tasks))
    p = subprocess.run([binary, "add", "--file", "-"], cwd=clone, env=env, input=lines, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr)
    return clone, env


def drain(binary, mode, tasks):
    base = tempfile.mkdtemp(prefix=f"swarm-sandbox-{mode}-", dir=os.environ.get("BENCH_TMP", "/var/tmp"))
    # Open to other users, as a projects folder is: a root runner's agents run as nobody and must reach it.
    os.chmod(base, 0o755)
    try:
        clone, env = world(base, binary, mode, tasks)
        t = time.monotonic()
        out = subprocess.run([binary, "--agent", "w", "run", "worker", "--until-idle"], cwd=clone, env=env,
                             capture_output=True, text=True)
        secs = time.monotonic() - t
        if out.returncode != 0 or out.stderr.count("landed ") != tasks:
            sys.exit(f"bench: the {mode} drain did not land every task:\n{out.stderr}")
        if mode == "auto" and "uncontained" in out.stderr:
            sys.exit("bench: no sandbox here (bubblewrap does not start)")
        return secs
    finally:
        shutil.rmtree(base, ignore_errors=True)


def bare_bwrap(runs):
    args = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--tmpfs", "/home", "--tmpfs", "/root", "--", "sh", "-c", "true"]

    def timed(cmd):
        t = time.monotonic()
        for _ in range(runs):
            subprocess.run(cmd, check=True)
        return (time.monotonic() - t) / runs

    return timed(["sh", "-c", "true"]), timed(args)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "git-swarm"))
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not shutil.which("bwrap"):
        sys.exit("bench: bubblewrap (bwrap) is not installed")
    plain, boxed = bare_bwrap(50)
    print(f"bare: sh -c true {plain * 1000:.1f} ms, in bubblewrap {boxed * 1000:.1f} ms "
          f"(+{(boxed - plain) * 1000:.1f} ms)")
    offs, ons = [], []
    for r in range(a.rounds):
        order = ["off", "auto"] if r % 2 == 0 else ["auto", "off"]
        for mode in order:
            secs = drain(a.bin, mode, a.tasks)
            (offs if mode == "off" else ons).append(secs)
            print(f"round {r + 1}: sandbox {mode:<4} {a.tasks} tasks in {secs:.2f} s ({secs / a.tasks * 1000:.0f} ms a task)")
    off, on = statistics.median(offs), statistics.median(ons)
    extra = (on - off) / a.tasks * 1000
    print(f"median: off {off:.2f} s, sandbox {on:.2f} s; ratio {on / off:.2f}; the sandbox adds {extra:.0f} ms a run "
          f"(goal: under 50 ms)")


if __name__ == "__main__":
    main()
