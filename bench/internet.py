#!/usr/bin/env python3
"""bench/internet.py — a fleet at internet scale: hundreds of agents in separate runner processes, one remote
whose every push takes 1 s and every fetch 200 ms, on a shrunk time scale.

    python3 bench/internet.py [--bin PATH] [--quick] [--write-doc | --no-doc] [--fleets A:P,A:P]
                              [--push 1.0] [--fetch 0.2] [--task 600] [--lease 1800] [--rate 3] [--rounds 2]

The world, in real-time units: tasks of 10 minutes (±20 %, fixed seed), a lease of 30 minutes, a remote behind
1 s per push and 200 ms per fetch (bench/proxy.py in front of `git daemon`, over git://: the delays sit where a far
forge spends them, a push's between its ref advertisement and the compare-and-swap). A fleet of A agents runs as
P processes (`git swarm run worker --until-idle --agents ⌈A/P⌉ or ⌊A/P⌋`, each process in its own clone) and
drains `rounds` × A tasks whose scripted agent sleeps its task's length and writes a file of its own (sandbox
off: the coordination is what is measured). Fleets:
100 agents over 8 processes, 300 over 16, 1,000 over 64.

Every duration, the network's included, is divided by a time scale f, chosen per fleet so that the machine lands
about `--rate` tasks a second (f = rate × task / A, between 1 and `--max-scale`, 6): 1,000 agents on two cores
cannot land 100 tasks a second, and the protocol's arithmetic does not change with f (each of its durations
scales alike) — but for this machine's own CPU time (a landing's commit, rebase and `git` processes, 0.1–0.3 s),
which is not scaled and so counts f times in the figures: hence the small f. The figures are given back in
real-time units.

Reported, per fleet:
* landings a minute, and the bound: the lower of what the agents can do (A tasks per task length) and what the
  one ref can carry — one update a push (60 / push a minute) times the landings an update carried in this run;
  the goal is ≥ 80 % of the bound;
* pushes a minute to the remote (every `git-receive-pack` connection), updates of the state ref a minute, lost
  races a landing;
* claim waits: from an agent's start, or its agent's exit, to its next claim (its landing included, as the agent
  is idle meanwhile), median / p99 / worst, against a third of the lease (the goal: none longer).

Checks, every run: every task landed once (the target has one commit a task, no merge), and each task's `done`
is on the state ref once.

Writes a table into docs/performance.md between `<!-- bench-internet:begin -->` and `<!-- bench-internet:end -->`
for a full run.
"""

import argparse
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runner  # noqa: E402  (bench/runner.py: the world of clones and the binary)

AGENT = runner.AGENT


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"bench: {what} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"bench: {what} did not listen on {port}")


class Remote:
    """A bare repository served by `git daemon` behind the delaying proxy."""

    def __init__(self, world, base, fetch_delay, push_delay):
        self.world = world
        self.base = base
        self.bare = os.path.join(base, "remote.git")
        env = world.env
        runner.sh(["git", "init", "-q", "--bare", self.bare], env=env)
        runner.sh(["git", "config", "core.logAllRefUpdates", "always"], cwd=self.bare, env=env)
        seed = os.path.join(base, "seed")
        runner.sh(["git", "init", "-q", seed], env=env)
        with open(os.path.join(seed, "README.md"), "w") as f:
            f.write("bench\n")
        runner.sh(["git", "add", "."], cwd=seed, env=env)
        runner.sh(["git", "commit", "-q", "-m", "root"], cwd=seed, env=env)
        runner.sh(["git", "push", "-q", self.bare, "HEAD:refs/heads/main"], cwd=seed, env=env)
        dport, self.port = free_port(), free_port()
        self.log = os.path.join(base, "proxy.log")
        open(self.log, "w").close()
        self.daemon = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={dport}", f"--base-path={base}",
             "--export-all", "--enable=receive-pack", "--max-connections=0", base],
            env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(base, "daemon.err"), "w"))
        wait_port(dport, self.daemon, "git daemon")
        self.proxy = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "proxy.py"), str(self.port), str(dport), self.log,
             "--fetch-delay", f"{fetch_delay:.4f}", "--push-delay", f"{push_delay:.4f}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(base, "proxy.err"), "w"))
        wait_port(self.port, self.proxy, "the proxy")
        self.url = f"git://127.0.0.1:{self.port}/remote.git"

    def connections(self):
        """(pushes, fetches) the proxy saw so far."""
        pushes = fetches = 0
        with open(self.log) as f:
            for line in f:
                if line.startswith("close "):
                    pushes += line.rstrip().endswith("git-receive-pack")
                    fetches += line.rstrip().endswith("git-upload-pack")
        return pushes, fetches

    def stop(self):
        for p in (self.proxy, self.daemon):
            p.send_signal(signal.SIGTERM)
        for p in (self.proxy, self.daemon):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def split(agents, procs):
    """`agents` over `procs` processes, as evenly as they go."""
    return [agents // procs + (1 if i < agents % procs else 0) for i in range(procs)]


def fleet(world, agents, procs, a):
    """One fleet's drain; its figures in real-time units."""
    f = a.scale or min(a.max_scale, max(1.0, a.rate * a.task / agents))
    base = os.path.join(world.root, f"fleet-{agents}x{procs}")
    os.makedirs(base)
    remote = Remote(world, base, a.fetch / f, a.push / f)
    try:
        return drain(world, remote, agents, procs, f, a)
    finally:
        remote.stop()


def drain(world, remote, agents, procs, f, a):
    env = world.env
    m = a.rounds * agents
    rng = random.Random(agents)
    secs = [a.task / f * rng.uniform(0.8, 1.2) for _ in range(m)]
    clones = []
    for i in range(procs):
        c = os.path.join(remote.base, f"c{i}")
        runner.sh(["git", "clone", "-q", remote.bare, c], env=env)
        clones.append(c)
    lease = a.lease / f
    cfg = os.path.join(remote.base, "swarm.toml")
    with open(cfg, "w") as out:
        # The batch window is a duration of the protocol too: 250 ms (its default) in real time.
        window = max(1, round(250 / f))
        # No sandbox: what this measures is the coordination; a sandboxed run costs about 17 ms more an agent run
        # (bench/sandbox.py), and a copy of the git directory each, which 1,000 agents on two cores cannot afford.
        out.write(f'lease = "{lease:.0f}s"\n[run]\ntask_timeout = "{3 * max(secs):.0f}s"\nbatch_window = "{window}ms"\n'
                  'sandbox = "off"\n[roles.worker]\n')
        out.write("exec = " + json.dumps(f"sh '{AGENT}'") + "\n")
    runner.sh([world.bin, "init", "--config", cfg], cwd=clones[0], env=env)
    tasks = os.path.join(remote.base, "tasks.toml")
    with open(tasks, "w") as out:
        for i, s in enumerate(secs):
            out.write(f'[[task]]\ntitle = "task {i}"\nbody = """@sleep {s:.3f}\n@write files/f{i}.txt {i}\n"""\n')
    runner.sh([world.bin, "add", "--file", tasks], cwd=clones[0], env=env)
    for c in clones:
        runner.sh([world.bin, "trust", "--yes"], cwd=c, env=env)
        # From here on every op of the fleet goes through the far remote.
        runner.sh(["git", "remote", "set-url", "origin", remote.url], cwd=c, env=env)

    reflog = os.path.join(remote.bare, "logs", "refs", "swarm", "default")
    updates_before = sum(1 for _ in open(reflog))
    pushes_before, fetches_before = remote.connections()
    lines = []  # (monotonic time, tag, text)
    lock = threading.Lock()

    def read(p):
        for line in p.stderr:
            now = time.monotonic()
            tag, _, text = line.rstrip("\n").partition(": ")
            with lock:
                lines.append((now, tag, text))

    sizes = split(agents, procs)
    t0 = time.monotonic()
    running = []
    for i, (c, n) in enumerate(zip(clones, sizes)):
        args = [world.bin, "--agent", f"p{i}", "--json", "run", "worker", "--until-idle"]
        if n > 1:
            args += ["--agents", str(n)]
        p = subprocess.Popen(args, cwd=c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t = threading.Thread(target=read, args=(p,), daemon=True)
        t.start()
        running.append((p, t))
    docs = []
    for p, t in running:
        out = p.stdout.read()
        p.wait(timeout=a.timeout)
        t.join()
        if p.returncode != 0:
            tail = "\n".join(f"{tag}: {text}" for _, tag, text in lines[-40:])
            servers = "".join(f"\n{name}:\n" + open(os.path.join(remote.base, name)).read()[-2000:]
                              for name in ("daemon.err", "proxy.err"))
            sys.exit(f"bench: a runner failed ({p.returncode}); the last lines:\n{tail}{servers}")
        docs.append(json.loads(out))
    makespan = time.monotonic() - t0
    updates = sum(1 for _ in open(reflog)) - updates_before
    pushes, fetches = remote.connections()
    pushes -= pushes_before
    fetches -= fetches_before

    landed = sum(d["landed"] for d in docs)
    lost = sum(d["lost_races"] for d in docs)
    if landed != m:
        sys.exit(f"bench: {landed} of {m} tasks landed")
    runner.sh(["git", "fetch", "-q", remote.bare, "+refs/heads/main:refs/bench/main", "+refs/swarm/default:refs/bench/state"],
              cwd=clones[0], env=env)
    count = int(runner.sh(["git", "rev-list", "--count", "main"], cwd=remote.bare, env=env))
    merges = int(runner.sh(["git", "rev-list", "--min-parents=2", "--count", "main"], cwd=remote.bare, env=env))
    if merges or count != m + 1:
        sys.exit(f"bench: main has {count} commits and {merges} merges after {m} tasks")
    board = json.loads(runner.sh([world.bin, "list", "--json"], cwd=clones[0], env=env))
    board = board.get("tasks", board) if isinstance(board, dict) else board
    not_done = [t["id"] for t in board if t["status"] != "done"]
    if not_done:
        sys.exit(f"bench: tasks not done: {not_done[:10]}")

    if a.dump:
        with open(a.dump, "a") as out:
            for at, tag, text in sorted(lines):
                out.write(f"{(at - t0) * f:9.1f} {tag}: {text}\n")
    waits = claim_waits(lines, t0)
    sim_minutes = makespan * f / 60.0
    ideal = ideal_makespan(secs, agents)
    work_bound = m / (ideal * f / 60.0)
    per_update = landed / updates
    ref_bound = 60.0 / a.push * per_update
    bound = min(work_bound, ref_bound)
    rate = landed / sim_minutes
    return {
        "agents": agents, "procs": procs, "scale": f, "tasks": m, "makespan": makespan * f, "ideal": ideal * f,
        "landings_per_min": rate, "work_bound": work_bound, "ref_bound": ref_bound, "bound": bound,
        "of_bound": rate / bound, "pushes_per_min": pushes / sim_minutes, "fetches_per_min": fetches / sim_minutes,
        "updates_per_min": updates / sim_minutes, "per_update": per_update, "lost_per_landing": lost / landed,
        "wait_p50": runner.percentile(waits, 0.5) * f, "wait_p99": runner.percentile(waits, 0.99) * f,
        "wait_max": max(waits) * f, "lease_third": a.lease / 3,
    }


def ideal_makespan(secs, agents):
    """No schedule drains the board faster than its total agent time over the agents, or its longest task."""
    return max(sum(secs) / agents, max(secs))


CLAIM = re.compile(r"^claimed work task |; claimed \S+ in the same push$")
EXIT = re.compile(r"^agent on \S+ ")


def claim_waits(lines, t0):
    """For every agent: from its start, and from each of its agent's exits, to its next claim. An exit with no claim
    after it (the board ran dry) is no wait."""
    free = {}
    started = set()
    waits = []
    for at, tag, text in sorted(lines):
        # A claim in a landing's push is said twice (the landing's line, then its own): counted once.
        if CLAIM.search(text) and (tag in free or tag not in started):
            waits.append(at - free.pop(tag, t0))
            started.add(tag)
        if EXIT.match(text):
            free[tag] = at
    return waits


def table(rows, a):
    out = [
        f"Measured {time.strftime('%Y-%m-%d')} with `python3 bench/internet.py{' --quick' if a.quick else ''}` on this "
        f"machine ({os.cpu_count()} cores). Real-time units: tasks of {a.task / 60:g} minutes (±20 %), a lease of "
        f"{a.lease / 60:g} minutes, pushes of {a.push:g} s and fetches of {a.fetch * 1000:g} ms; time scale 1:f.",
        "",
        "| agents | processes | f | landings a minute | bound: agents / ref | of the bound (goal ≥ 80 %) "
        "| pushes a minute | state-ref updates a minute | landings an update | lost races a landing "
        "| claim wait p50 / p99 / worst | lease third |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r['agents']} | {r['procs']} | {r['scale']:.1f} | {r['landings_per_min']:.1f} "
            f"| {r['work_bound']:.1f} / {r['ref_bound']:.1f} | **{100 * r['of_bound']:.0f} %** "
            f"| {r['pushes_per_min']:.1f} | {r['updates_per_min']:.1f} | {r['per_update']:.2f} "
            f"| {r['lost_per_landing']:.2f} | {r['wait_p50']:.0f} s / {r['wait_p99']:.0f} s / {r['wait_max']:.0f} s "
            f"| {r['lease_third']:.0f} s |")
    return "\n".join(out) + "\n"


def main():
    # Hundreds of runner processes, their pipes, the daemon's connections: as many files as the system allows (the
    # children inherit it).
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    ap = runner.bench_args()
    ap.add_argument("--fleets", default=None, help="agents:processes,… (default 100:8,300:16,1000:64)")
    ap.add_argument("--push", type=float, default=1.0, help="seconds a push takes (real time)")
    ap.add_argument("--fetch", type=float, default=0.2, help="seconds a fetch takes (real time)")
    ap.add_argument("--task", type=float, default=600.0, help="seconds a task takes (real time, ±20 %%)")
    ap.add_argument("--lease", type=float, default=1800.0, help="the lease in seconds (real time)")
    ap.add_argument("--rounds", type=int, default=2, help="tasks per agent")
    ap.add_argument("--rate", type=float, default=3.0, help="landings a second this machine is asked for")
    ap.add_argument("--scale", type=float, default=None, help="one time scale for every fleet (default: per fleet)")
    ap.add_argument("--max-scale", type=float, default=6.0,
                    help="the largest time scale (default 6: this machine's own CPU time is not scaled)")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--dump", default=None, help="append every runner's lines here, stamped in real-time seconds")
    a = ap.parse_args()
    binary = runner.binary_of(a)
    root = tempfile.mkdtemp(prefix="git-swarm-internet-")
    try:
        world = runner.World(root, binary)
        spec = a.fleets or ("20:4,60:8" if a.quick else "100:8,300:16,1000:64")
        rows = []
        for item in spec.split(","):
            agents, procs = (int(x) for x in item.split(":"))
            r = fleet(world, agents, procs, a)
            print(f"{agents} agents over {procs}: {r['landings_per_min']:.1f} landings/min of a bound of "
                  f"{r['bound']:.1f} ({100 * r['of_bound']:.0f} %), {r['pushes_per_min']:.1f} pushes/min, worst claim "
                  f"wait {r['wait_max']:.0f} s (f = {r['scale']:.1f})", file=sys.stderr)
            rows.append(r)
        text = table(rows, a)
        print(text)
        if (not a.quick and not a.no_doc and not a.fleets) or a.write_doc:
            runner.write_doc(text, marker="bench-internet", heading="At internet scale")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
