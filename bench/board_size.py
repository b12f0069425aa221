#!/usr/bin/env python3
"""bench/board_size.py — what an op costs on a board of 100, 2,000 and 20,000 open tasks.

    python3 bench/board_size.py [--bin PATH] [--quick] [--write-doc | --no-doc]

`bench/run.sh` runs it after its own table. Each size gets a bare remote whose tasks were filed with one
`git swarm add --file` and then packed (`git gc`, as a hosted remote is), and two clones of it: one over `file://`
(every op fetches and pushes through git) and one by plain path (in-process compare-and-swap). Then, in interleaved
rounds (the order of the sizes rotates each round, so that the machine's noise falls on every size alike):

1. `claim <id>` + `done <id>`, each a fresh process, on each size and transport: goal ≤ 1.5× the 100-task board;
2. the same with `claim` of the next ready task (no id: chosen from the store's index of every live task): goal ≤ 1.5×;
3. a runner (`git swarm run worker --max-tasks 3`, a shell agent that writes one file) landing three tasks;
4. `status`, `list --json`, `board --json`, `board --html` and `watch --once`: time and peak memory;
5. filing 20,000 tasks with one `add --file` against 100 single `add`s (the per-task rate, extrapolated), and as a
   chain of dependencies forwards and backwards, by plain path and over `file://` (goal ≤ 2 s each).

Figures are medians of same-run samples; ratios are against the 100-task board of the same transport. The table goes
to stdout and, for a full run, into docs/performance.md between `<!-- bench-size:begin -->` and
`<!-- bench-size:end -->`. Needs git and python3 only; everything runs in a temporary directory with its own HOME.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402  (bench/runner.py: the hermetic world and the doc splice)


def sh(args, cwd=None, env=None, check=True, stdin=None):
    p = subprocess.run(args, cwd=cwd, env=env, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed in {cwd}: {p.stderr[-2000:]}")
    return p.stdout


def timed(args, cwd, env):
    """Run one process; (seconds, stdout, stderr)."""
    t0 = time.monotonic()
    p = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    dt = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed in {cwd} ({p.returncode}): {err.decode(errors='replace')[-2000:]}")
    return dt, out.decode(errors="replace"), err.decode(errors="replace")


def peak_kib(args, cwd, env):
    """Peak resident memory of one run of `args`, in KiB, from GNU time (`/usr/bin/time -f %M`): the rusage a child
    of this interpreter reports counts the interpreter's own pages from before the exec. `None` without GNU time."""
    if not os.access("/usr/bin/time", os.X_OK):
        return None
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed in {cwd}: {p.stderr[-2000:]}")
    return int(p.stderr.strip().splitlines()[-1])


def task_file(n, prefix, chain=None):
    """n tasks; `chain` "forwards" (each waits for the one before) or "backwards" (for the one after)."""
    def deps(i):
        if chain == "forwards" and i > 0:
            return f'deps = ["{prefix}{i - 1}"]\n'
        if chain == "backwards" and i < n - 1:
            return f'deps = ["{prefix}{i + 1}"]\n'
        return ""
    return "".join(
        f'[[task]]\nkey = "{prefix}{i}"\ntitle = "Benchmark task {i}"\n'
        f'body = "@write out/{prefix}{i}.txt done\\nDo the thing number {i}: a paragraph of the size a planner writes '
        f'for a worker, naming the files to touch, how to check the result, and what not to do."\n{deps(i)}\n'
        for i in range(n)
    )


class World(runner.World):
    """The hermetic world of bench/runner.py (its own HOME and git config), boards of many tasks in it."""

    def board(self, n, name=None):
        """A packed bare remote with n open tasks; returns {"file": clone, "path": clone}."""
        base = os.path.join(self.root, name or f"b{n}")
        bare = os.path.join(base, "remote.git")
        seed = os.path.join(base, "seed")
        sh(["git", "init", "-q", "--bare", bare], env=self.env)
        sh(["git", "init", "-q", seed], env=self.env)
        with open(os.path.join(seed, "README.md"), "w") as f:
            f.write("bench\n")
        sh(["git", "add", "."], cwd=seed, env=self.env)
        sh(["git", "commit", "-q", "-m", "root"], cwd=seed, env=self.env)
        sh(["git", "push", "-q", bare, "HEAD:refs/heads/main"], cwd=seed, env=self.env)
        shutil.rmtree(seed)
        first = os.path.join(base, "planner")
        sh(["git", "clone", "-q", bare, first], env=self.env)
        cfg = os.path.join(base, "swarm.toml")
        with open(cfg, "w") as f:
            f.write('lease = "10m"\n[run]\ntask_timeout = "5m"\n[roles.worker]\n')
            f.write("exec = " + json.dumps(f"sh '{os.path.join(REPO, 'tests', 'agents', 'scripted.sh')}'") + "\n")
        sh([self.bin, "init", "--config", cfg], cwd=first, env=self.env)
        sh([self.bin, "--agent", "planner", "add", "--file", "-"], cwd=first, env=self.env, stdin=task_file(n, "k"))
        sh(["git", "gc", "-q"], cwd=bare, env=self.env)
        clones = {}
        for kind, url in (("file", "file://" + bare), ("path", bare)):
            c = os.path.join(base, kind)
            sh(["git", "clone", "-q", url, c], env=self.env)
            sh([self.bin, "status"], cwd=c, env=self.env)  # the first fetch of the state ref is not timed
            sh([self.bin, "trust", "--yes"], cwd=c, env=self.env)  # the runner's agent
            clones[kind] = c
        return clones

    def open_ids(self, clone):
        tasks = json.loads(sh([self.bin, "list", "--json"], cwd=clone, env=self.env))
        tasks = sorted((t for t in tasks if t["status"] == "open"), key=lambda t: (t.get("created_at") or "", t["id"]))
        return [t["id"] for t in tasks]


def fmt_ratio(r, goal=None):
    s = f"{r:.2f}×"
    if goal is not None:
        s = f"**{s}**" if r <= goal else f"{s} (missed)"
    return s


def main():
    a = runner.bench_args().parse_args()
    binary = runner.binary_of(a)
    sizes = [100, 500, 2000] if a.quick else [100, 2000, 20000]
    rounds = 4 if a.quick else 12
    runner_rounds = 1 if a.quick else 3
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="gsboard.")
    try:
        w = World(root, binary)
        boards, ids = {}, {}
        for n in sizes:
            print(f"bench: building a board of {n} open tasks", file=sys.stderr)
            boards[n] = w.board(n)
            # The tasks have one priority, so `claim` without id takes the oldest: the ops by id take the newest.
            ids[n] = w.open_ids(boards[n]["file"])
        samples = {}  # (figure, n, transport) -> [seconds]

        def add(key, dt):
            samples.setdefault(key, []).append(dt)

        print(f"bench: {rounds} rounds of claim + done per size and transport", file=sys.stderr)
        for r in range(rounds + 1):  # round 0 warms the caches up and is not kept
            order = sizes[r % len(sizes):] + sizes[: r % len(sizes)]
            for n in order:
                for kind in ("file", "path"):
                    c = boards[n][kind]
                    agent = ["--agent", f"bench-{kind}"]
                    tid = ids[n].pop()
                    t1, _, _ = timed([binary, *agent, "claim", tid], c, w.env)
                    t2, _, _ = timed([binary, *agent, "done", tid], c, w.env)
                    t3, got, _ = timed([binary, *agent, "claim"], c, w.env)
                    t4, _, _ = timed([binary, *agent, "done", got.strip()], c, w.env)
                    if r:
                        add(("by-id", n, kind), t1 + t2)
                        add(("next", n, kind), t3 + t4)
        print(f"bench: {runner_rounds} rounds of a runner landing 3 tasks", file=sys.stderr)
        for r in range(runner_rounds):
            order = sizes[r % len(sizes):] + sizes[: r % len(sizes)]
            for n in order:
                for kind in ("file", "path"):
                    c = boards[n][kind]
                    dt, out, err = timed(
                        [binary, "--agent", f"runner-{kind}", "--json", "run", "worker", "--max-tasks", "3"], c, w.env
                    )
                    doc = json.loads(out)
                    if doc.get("landed") != 3:
                        sys.exit(f"bench: the runner landed {doc.get('landed')} of 3 tasks on {n} ({kind}): {out}")
                    add(("runner", n, kind), dt / 3)
                    # The runner's own report: from its agent's exit to the code and the done on the remote.
                    for m in re.finditer(r"landed \S+ at \S+ \(\d+ lost race\(s\), ([0-9.]+)s after the agent", err):
                        add(("landing", n, kind), float(m.group(1)))
        print("bench: read commands", file=sys.stderr)
        reads = [
            ("status", ["status"]),
            ("list --json", ["list", "--json"]),
            ("board --json", ["board", "--json"]),
            ("board --html", ["board", "--html", os.path.join(root, "board.html")]),
            ("watch --once", ["watch", "--once"]),
        ]
        peaks = {}
        for r in range(3):
            for n in sizes:
                c = boards[n]["path"]
                for name, args in reads:
                    dt, _, _ = timed([binary, *args], c, w.env)
                    add((name, n, "path"), dt)
                    if r == 0:
                        peaks[(name, n)] = peak_kib([binary, *args], c, w.env)
        print("bench: filing tasks, one add --file against single adds", file=sys.stderr)
        big = sizes[-1]
        c = boards[sizes[0]]["path"]
        singles = 10 if a.quick else 100
        t0 = time.monotonic()
        for i in range(singles):
            sh([binary, "--agent", "planner", "add", f"Single {i}", "--body", "one by one"], cwd=c, env=w.env)
        single = (time.monotonic() - t0) / singles
        t0 = time.monotonic()
        sh([binary, "--agent", "planner", "add", "--file", "-"], cwd=c, env=w.env, stdin=task_file(big, "x"))
        batch = time.monotonic() - t0
        # The same filing as a chain of dependencies, forwards and backwards, by plain path and over file://
        # (goal ≤ 2 s each: issue 38). Each on a board of its own with the smallest board's tasks, so that no
        # filing first fetches the tasks another one filed.
        chains = {}
        for kind in ("path", "file"):
            for chain in ("forwards", "backwards"):
                fresh = w.board(sizes[0], name=f"chain-{kind}-{chain}")[kind]
                text = task_file(big, "c", chain)
                t0 = time.monotonic()
                sh([binary, "--agent", "planner", "add", "--file", "-"], cwd=fresh, env=w.env, stdin=text)
                chains[(kind, chain)] = time.monotonic() - t0
        elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in samples.items()}
    lines = [
        "| figure | transport | " + " | ".join(f"{n:,} tasks" for n in sizes) + f" | {sizes[-1]:,} / {sizes[0]:,} | goal |",
        "| --- | --- | " + " | ".join("---" for _ in sizes) + " | --- | --- |",
    ]
    names = {
        "by-id": "`claim <id>` + `done <id>` (fresh processes)",
        "next": "`claim` (next ready) + `done`",
        "runner": "a runner, wall time per task (`run worker --max-tasks 3`, its start included)",
        "landing": "a runner's landing: agent exit → code and `done` on the remote (its report)",
    }
    goals = {"by-id": 1.5, "next": 1.5, "runner": None, "landing": 1.5}
    for fig in ("by-id", "next", "runner", "landing"):
        for kind in ("file", "path"):
            row = [med[(fig, n, kind)] for n in sizes]
            ratio = row[-1] / row[0]
            g = goals[fig]
            lines.append(
                f"| {names[fig]} | {'`file://`' if kind == 'file' else 'plain path'} | "
                + " | ".join(f"{x * 1000:.0f} ms" for x in row)
                + f" | {fmt_ratio(ratio, g)} | {'≤ 1.5×' if g else '–'} |"
            )
    for name, _ in reads:
        row = [med[(name, n, "path")] for n in sizes]
        mem = [peaks[(name, n)] for n in sizes]
        lines.append(
            f"| `{name}` (time; peak memory) | plain path | "
            + " | ".join(f"{x * 1000:.0f} ms; {m / 1024:.0f} MiB" if m else f"{x * 1000:.0f} ms" for x, m in zip(row, mem))
            + f" | {row[-1] / row[0]:.1f}× | – |"
        )
    lines.append(
        f"| filing {big:,} tasks: one `add --file` vs {singles} single `add`s × {big // singles} | plain path | "
        + f"{batch:.1f} s vs {single * big:.0f} s (extrapolated) | | | {fmt_ratio(batch / (single * big))} | – |"
    )
    for kind in ("path", "file"):
        f, b = chains[(kind, "forwards")], chains[(kind, "backwards")]
        ok = "**met**" if max(f, b) <= 2.0 else "(missed)"
        lines.append(
            f"| filing {big:,} tasks as a chain of dependencies, forwards; backwards (one `add --file`) | "
            f"{'`file://`' if kind == 'file' else 'plain path'} | {f:.2f} s; {b:.2f} s | | | {ok} | ≤ 2 s |"
        )
    head = (
        f"Measured {time.strftime('%Y-%m-%d')} with `python3 bench/board_size.py{' --quick' if a.quick else ''}` "
        f"({os.cpu_count()} cores, {elapsed:.0f} s): medians of {rounds} interleaved rounds; ratios are the biggest "
        f"board over the smallest, same transport, same run."
    )
    text = head + "\n\n" + "\n".join(lines) + "\n"
    print(text)
    if (not a.quick and not a.no_doc) or a.write_doc:
        runner.write_doc(text, marker="bench-size", heading="Board size")


if __name__ == "__main__":
    main()
