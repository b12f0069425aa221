#!/usr/bin/env python3
"""bench/board_serve.py — what `git swarm board --serve` costs on a board of 20,000 open tasks.

    python3 bench/board_serve.py [--bin PATH] [--quick] [--fill-ops N] [--rounds N]

The board: `--fill-ops` ops written through the library by `examples/fill_board.rs` (tasks added, claimed and
landed: a log to read back), then 20,000 open tasks filed with one `add --file` as in bench/board_size.py
(`--quick`: 2,000), the remote packed. On a clone by plain path (file events) it measures:

1. the first page: from starting `board --serve` to a `200` for `/`, with no read kept on disk (cold: the whole
   board parsed) and with the one the first run kept (warm);
2. per new state: another clone claims a task (one process); the time from that process's exit (and start) to the
   event on `/events` that shows the claim, and what the server says it spent reading and rendering the state;
3. the sizes of the page and of an event.

Prints a table; needs git, python3 and the release binary (and `examples/fill_board` beside it for --fill-ops).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import board_size  # noqa: E402  (the 20,000-task board)
from board_size import sh  # noqa: E402


def build(w, n, fill_ops):
    """A packed bare remote (`fill_ops` ops of log, then n open tasks) and two more clones of it."""
    bare, (first, served, other) = w.swarm("board", 3, "path", [])
    if fill_ops:
        fill = os.path.join(os.path.dirname(w.bin), "examples", "fill_board")
        sh([fill, first, str(fill_ops), "0"], env=w.env)
    tasks = board_size.task_file(n, "k")
    sh([w.bin, "--agent", "planner", "add", "--file", "-"], cwd=first, env=w.env, stdin=tasks)
    sh(["git", "gc", "-q"], cwd=bare, env=w.env)
    return served, other


def start(w, clone):
    """`board --serve --port 0` in clone; (process, port). Its stderr says where it listens, then a line per state."""
    p = subprocess.Popen([w.bin, "board", "--serve", "--port", "0"], cwd=clone, env=w.env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while True:
        line = p.stderr.readline()
        if not line:
            sys.exit(f"bench: board --serve ended: {p.stderr.read()}")
        m = re.search(r"serving the board of \S+ at http://127\.0\.0\.1:(\d+)/", line)
        if m:
            return p, int(m.group(1)), int(re.search(r"tasks in (\d+) ms", line).group(1))


def first_page(w, clone):
    """Seconds from the start of the server to the first page; the page's size; the server, its port; the ms its
    first read of the board took."""
    t0 = time.monotonic()
    p, port, read_ms = start(w, clone)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", "/")
    r = c.getresponse()
    body = r.read()
    took = time.monotonic() - t0
    assert r.status == 200, r.status
    return took, len(body), p, port, read_ms


def stop(p):
    p.send_signal(2)
    p.wait(timeout=20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "git-swarm"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fill-ops", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    n = 2000 if a.quick else 20000
    root = tempfile.mkdtemp(prefix="gsserve.")
    try:
        w = board_size.World(root, os.path.abspath(a.bin))
        print(f"bench: building a board of {a.fill_ops} ops and {n} open tasks", file=sys.stderr)
        clone, other = build(w, n, a.fill_ops)
        sh([w.bin, "status"], cwd=clone, env=w.env)
        sh([w.bin, "status"], cwd=other, env=w.env)
        ids = w.open_ids(other)
        cache = os.path.join(clone, ".git", "swarm", "cache")
        shutil.rmtree(cache, ignore_errors=True)
        cold, page_bytes, p, _, cold_read = first_page(w, clone)
        stop(p)
        warm, _, p, port, warm_read = first_page(w, clone)
        # Each event: read until the one that shows the claim.
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        buf = b""
        while b"\n\n" not in buf.split(b"\r\n\r\n", 1)[-1] or b"data: " not in buf:
            buf += s.recv(1 << 20)
        after_exit, after_start, claim_secs, event_bytes = [], [], [], []
        for i in range(a.rounds):
            task = ids[i]
            want = f'data-agent=\\"b{i}\\" data-task=\\"{task}\\"'.encode()
            buf = b""
            t0 = time.monotonic()
            sh([w.bin, "--agent", f"b{i}", "claim", task], cwd=other, env=w.env)
            t1 = time.monotonic()
            while want not in buf:
                chunk = s.recv(1 << 20)
                if not chunk:
                    sys.exit("bench: the event stream ended")
                buf += chunk
            t2 = time.monotonic()
            # The whole event it came in.
            while not buf.endswith(b"\n\n"):
                buf += s.recv(1 << 20)
            events = [e for e in buf.split(b"\n\n") if want in e]
            event_bytes.append(len(events[-1]))
            after_exit.append(t2 - t1)
            after_start.append(t2 - t0)
            claim_secs.append(t1 - t0)
        stop(p)
        states = [(int(r), int(g)) for r, g in re.findall(r"read in (\d+) ms, page in (\d+) ms", p.stderr.read())]
        reads, renders = [r for r, _ in states[1:]], [g for _, g in states[1:]]
        first_render = states[0][1] if states else float("nan")
        ms = lambda xs: f"{statistics.median(xs) * 1000:.0f} ms (max {max(xs) * 1000:.0f})"  # noqa: E731
        print(f"| board --serve, {n} open tasks, {a.fill_ops} ops of log | |")
        print("| --- | --- |")
        print(f"| first page, nothing kept (start → 200 for /) | {cold * 1000:.0f} ms (the board read in {cold_read} ms) |")
        print(f"| first page, the read kept by the last run | {warm * 1000:.0f} ms (read {warm_read} ms, "
              f"view and sections {first_render} ms) |")
        print(f"| page size | {page_bytes / 1024:.0f} KiB |")
        print(f"| another clone's claim (one process) | {ms(claim_secs)} |")
        print(f"| claim process exit → event with the claim | {ms(after_exit)} |")
        print(f"| claim process start → event with the claim | {ms(after_start)} |")
        if reads:
            print(f"| the server's read of a new state (tip, patched board, new ops) | {statistics.median(reads)} ms "
                  f"(max {max(reads)}) |")
            print(f"| the server's view and sections of a new state | {statistics.median(renders)} ms "
                  f"(max {max(renders)}) |")
        print(f"| an event's size | {statistics.median(event_bytes) / 1024:.0f} KiB |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
