#!/usr/bin/env python3
"""bench/check_fleet.py — a fleet with a check (issue 39): how fast it lands when every landing runs the suite.

    python3 bench/check_fleet.py [--bin PATH] [--before PATH] [--fleets 1x4,4x1,4x2] [--tasks 16] [--agent 2]
                                 [--check 3] [--breaking 2] [--policy tip|strict] [--python NAME==VERSION]

A fleet of P runner processes × A agents (`git swarm run worker --until-idle --agents A`, each process in its own
clone of one bare remote, plain-path URL, sandbox off: the coordination is what is measured) drains `--tasks`
tasks whose scripted agent sleeps `--agent` seconds and writes a file of its own; `--breaking` of them (spread
evenly) also write `broken.txt`. `[run] check` sleeps `--check` seconds (sleeping, so that no CPU is contended:
it shows coordination, not the machine), counts its runs in a file outside the work trees, and fails when
`broken.txt` is in the tree. `max_attempts = 1`: a breaking task fails once, for good.

Reported per fleet, and paired with `--before` (an older binary, the same fleet right after):
* makespan, against the no-queue ideal ceil(tasks / agents) × (agent + check) (issue 39's goal: within 1/0.7);
* check runs per landed task (goal ≤ 1.5 with breaking tasks, ≤ 1.0 without);
* the tasks refused (exactly the breaking ones) and that every other one landed once (one commit a task on main);
* whether the target's final tip passes the check (no `broken.txt`), and attempts spent because the target moved.

With `--python more-itertools==10.5.0` the target is that PyPI sdist and the check its real pytest suite (CPU-bound:
parallel checks share the two cores), its venv made by `[run] setup`: each task writes a module of its own into the
package, a breaking one also a failing test (`tests/test_broken_<i>.py`). The ideal then uses the suite's time as
measured in the same run with no swarm, after a one-line edit.

Issue 39's table (2026-12-05, before the batch's tip check): 1 × 4 agents, 12 tasks of 1 s, check 4 s: 52 s
against an ideal of 15 s, 1.0 check runs a task; 4 × 1: 52 s, 3.5 runs a task.
"""

import argparse
import glob
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runner  # noqa: E402  (bench/runner.py: the world of clones and the binary)


def python_project(root, spec):
    """The sdist `spec` unpacked (with a `.gitignore` for its venv), the check and setup that run its pytest suite,
    and the suite's seconds after a one-line edit with no swarm (its venv made first)."""
    dl = os.path.join(root, "sdist")
    runner.sh([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", spec, "-d", dl])
    (archive,) = os.listdir(dl)
    with tarfile.open(os.path.join(dl, archive)) as t:
        t.extractall(os.path.join(root, "src"), filter="data")
    (src,) = glob.glob(os.path.join(root, "src", "*"))
    with open(os.path.join(src, ".gitignore"), "a") as f:
        f.write("/.venv/\n__pycache__/\n")
    package = spec.split("==")[0].replace("-", "_")
    setup = "python3 -m venv .venv && .venv/bin/pip install -q pytest"
    check = "PYTHONPATH=. .venv/bin/python -m pytest -q -p no:cacheprovider tests"
    probe = os.path.join(root, "probe")
    shutil.copytree(src, probe)
    runner.sh(["sh", "-c", setup], cwd=probe)
    with open(os.path.join(probe, package, "__init__.py"), "a") as f:
        f.write("# an edit\n")
    t = time.monotonic()
    runner.sh(["sh", "-c", check], cwd=probe)
    return {"src": src, "package": package, "setup": setup, "check": check, "secs": time.monotonic() - t}


def fleet(world, procs, per, a, tag, project=None):
    n = procs * per
    every = max(1, a.tasks // a.breaking) if a.breaking else 0
    breaking = {i for i in range(a.tasks) if a.breaking and i % every == every // 2}
    breaking = set(sorted(breaking)[: a.breaking])
    tasks = []
    runs = os.path.join(world.root, f"check-runs-{tag}-{procs}x{per}")
    for i in range(a.tasks):
        if project:
            extra = f"\n@write tests/test_broken_{i}.py def test_broken(): assert False" if i in breaking else ""
            body = f"@sleep {a.agent:g}\n@write {project['package']}/task_{i}.py TASK = {i}{extra}"
        else:
            extra = "\n@write broken.txt x" if i in breaking else ""
            body = f"@sleep {a.agent:g}\n@write files/f{i}.txt {i}{extra}"
        tasks.append((f"task {i}", body))
    if project:
        check = f"echo run >> '{runs}'; {project['check']}"
        more = f'setup = {runner.json.dumps(project["setup"])}\nsetup_when = ["pyproject.toml"]\n'
    else:
        check = f"sleep {a.check:g}; echo run >> '{runs}'; test ! -e broken.txt"
        more = ""
    # The default policy unsaid, so that a binary from before `check_policy` reads the same settings.
    policy = "" if a.policy == "tip" else f'check_policy = "{a.policy}"\n'
    settings = f'sandbox = "off"\ncheck = {runner.json.dumps(check)}\n{policy}{more}'
    bare, clones = world.swarm(f"fleet-{tag}-{procs}x{per}", procs, "path", tasks, run_settings=settings,
                               seed_from=project and project["src"])
    runner.sh([world.bin, "config", "set", "max_attempts", "1"], cwd=clones[0], env=world.env)
    for c in clones:
        runner.sh([world.bin, "trust", "--yes"], cwd=c, env=world.env)
    procs_ = []
    t0 = time.monotonic()
    for i, c in enumerate(clones):
        args = [world.bin, "--agent", f"p{i}", "--json", "run", "worker", "--until-idle"]
        if per > 1:
            args += ["--agents", str(per)]
        procs_.append(subprocess.Popen(args, cwd=c, env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True))
    errs = []
    for p in procs_:
        out, err = p.communicate(timeout=1800)
        if p.returncode not in (0, 1):
            sys.exit(f"bench: a runner failed ({p.returncode}):\n{err[-3000:]}")
        errs.append(err)
    makespan = time.monotonic() - t0
    listed = runner.json.loads(runner.sh([world.bin, "list", "--json"], cwd=clones[0], env=world.env))
    by_title = {t["title"]: t for t in listed}
    refused = sorted(i for i in range(a.tasks) if by_title[f"task {i}"]["status"] != "done")
    landed = a.tasks - len(refused)
    count = int(runner.sh(["git", "rev-list", "--count", "main"], cwd=bare, env=world.env).strip())
    files = runner.sh(["git", "ls-tree", "-r", "--name-only", "main"], cwd=bare, env=world.env).split()
    moved = sum(e.count("the target moved during each of") for e in errs)
    with open(runs) as f:
        check_runs = sum(1 for _ in f)
    shutil.rmtree(os.path.dirname(bare), ignore_errors=True)
    check_secs = project["secs"] if project else a.check
    ideal = math.ceil(a.tasks / n) * (a.agent + check_secs)
    return {
        "fleet": f"{procs} × {per}", "makespan": makespan, "ideal": ideal, "landed": landed,
        "runs_per_landed": check_runs / max(landed, 1), "refused_ok": refused == sorted(breaking),
        "refused": refused, "once": count == landed + 1, "green": not any(f == "broken.txt" or "test_broken_" in f for f in files), "moved": moved,
    }


def row(r, label):
    return (f"| {r['fleet']} | {label} | {r['makespan']:.1f} s / {r['ideal']:.0f} s | **{r['ideal'] / r['makespan']:.2f}** "
            f"| {r['runs_per_landed']:.2f} | {'yes' if r['refused_ok'] else 'no: ' + str(r['refused'])} "
            f"| {'yes' if r['once'] else 'no'} | {'yes' if r['green'] else 'no'} | {r['moved']} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    ap.add_argument("--before", default=None, help="an older binary, run on the same fleets right after")
    ap.add_argument("--fleets", default="1x4,4x1,4x2", help="processes x agents, comma-separated")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--agent", type=float, default=2.0, help="seconds an agent works")
    ap.add_argument("--check", type=float, default=3.0, help="seconds the check takes")
    ap.add_argument("--breaking", type=int, default=2, help="tasks that break the check")
    ap.add_argument("--policy", default="tip", choices=["tip", "strict"])
    ap.add_argument("--python", metavar="NAME==VERSION", help="a PyPI sdist whose pytest suite is the check")
    a = ap.parse_args()
    fleets = [tuple(int(x) for x in f.split("x")) for f in a.fleets.split(",")]
    binaries = [("this", runner.binary_of(a))] + ([("before", os.path.abspath(a.before))] if a.before else [])
    root = tempfile.mkdtemp(prefix="git-swarm-check-fleet-")
    try:
        project = python_project(root, a.python) if a.python else None
        what = (f"--python {a.python}` (its pytest suite: {project['secs']:.1f} s after a one-line edit, no swarm)"
                if project else f"--check {a.check:g}`")
        print(f"Measured {time.strftime('%Y-%m-%d')} with `python3 bench/check_fleet.py --fleets {a.fleets} "
              f"--tasks {a.tasks} --agent {a.agent:g} --breaking {a.breaking} {what} ({os.cpu_count()} cores).\n")
        print("| fleet | binary | makespan / ideal | of the ideal (goal ≥ 0.7) | check runs a landed task | "
              "refused: the breaking ones | each landed once | final tip passes | attempts lost to a moved target |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for procs, per in fleets:
            for label, binary in binaries:
                world = runner.World(os.path.join(root, f"{label}-{procs}x{per}"), binary)
                print(row(fleet(world, procs, per, a, label, project), label), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
