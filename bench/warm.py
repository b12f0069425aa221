#!/usr/bin/env python3
"""bench/warm.py — what a landing's check costs on a real crate, warm (the default) against cold (`check_clean`).

    python3 bench/warm.py [--bin PATH] [--crate indexmap-2.14.2] [--tasks 4] [--rounds 2] [--sandbox auto|off]
                          [--write-doc]

A real crate from the registry (indexmap 2.14.2 by default: its `.crate` from the cargo cache, its
dependencies and dev-dependencies fetched once into your cargo registry, every build after offline) is the target branch of a bare remote; `[run] check` is
`cargo test --offline -q` (its 41 tests and doc tests). Each task's scripted agent makes a real one-line edit
of `src/lib.rs` (`@write src/lib.rs // task <i>`, a comment: indexmap and its tests rebuild, its dependencies do
not). One worker lands the tasks: first one task (`run worker --once`, cold on both sides: a new clone), then
`--tasks` more (`run worker --until-idle`, timed). The two sides differ only in `check_clean`:

* **warm**: `check_clean = false` — the check's tree carries `target/` from the agent's tree, which carried it
  from the last check;
* **cold**: `check_clean = true` — every check builds from nothing (the swarm's cargo registry is warm on both
  sides: the crates are not downloaded again).

The sides alternate (warm, cold, cold, warm, …) and the figure is the ratio of the medians of seconds per landed
task. Beside them, in the same run and with no swarm at all: `cargo test` of a fresh copy of the crate (cold) and
after a one-line edit in a built one (warm): the floor the swarm's warm side is compared with.

Writes a table into docs/performance.md between `<!-- bench-warm:begin -->` and `<!-- bench-warm:end -->` with
--write-doc.
"""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
AGENT = os.path.join(REPO, "tests", "agents", "scripted.sh")


def sh(args, cwd=None, env=None, check=True):
    p = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed in {cwd}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def person_cargo_home():
    home = os.environ.get("CARGO_HOME") or os.path.join(os.path.expanduser("~"), ".cargo")
    if not os.path.isdir(os.path.join(home, "registry")):
        sys.exit(f"bench: no cargo registry at {home}/registry (set CARGO_HOME)")
    return home


def crate_source(cargo_home, name, dest):
    """Unpack the `.crate` of `name` (e.g. indexmap-2.14.2) from the cargo cache into `dest`."""
    found = glob.glob(os.path.join(cargo_home, "registry", "cache", "*", f"{name}.crate"))
    if not found:
        sys.exit(f"bench: {name}.crate is not in {cargo_home}/registry/cache (cargo fetch it once: it is offline here)")
    with tarfile.open(found[0]) as t:
        t.extractall(dest, filter="data")
    src = os.path.join(dest, name)
    # A workspace of its own: the bench's folders are under this repository's target/, inside its workspace.
    with open(os.path.join(src, "Cargo.toml"), "a") as f:
        f.write("\n[workspace]\n")
    return src


class World:
    def __init__(self, root, binary, cargo_home, sandbox):
        self.root, self.bin, self.sandbox = root, binary, sandbox
        home = os.path.join(root, "home")
        os.makedirs(home)
        cfg = os.path.join(home, ".gitconfig")
        with open(cfg, "w") as f:
            f.write("[user]\n\tname = Bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n")
        self.env = dict(os.environ, HOME=home, GIT_CONFIG_GLOBAL=cfg, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C",
                        CARGO_HOME=cargo_home, CARGO_TERM_COLOR="never")
        rustup = os.environ.get("RUSTUP_HOME") or os.path.join(os.path.expanduser("~"), ".rustup")
        if os.path.isdir(rustup):
            self.env["RUSTUP_HOME"] = rustup
        for k in ("GIT_SWARM_AGENT", "GIT_SWARM_REMOTE", "GIT_SWARM_SWARM", "GIT_DIR", "GIT_WORK_TREE",
                  "CARGO_TARGET_DIR"):
            self.env.pop(k, None)

    def sw(self, cwd, *args):
        return sh([self.bin, *args], cwd=cwd, env=self.env)

    def project(self, src, name, ignore):
        """A bare remote whose main is the project at `src` (with `ignore` added to its `.gitignore`), and a clone."""
        base = os.path.join(self.root, name)
        bare, seed, clone = (os.path.join(base, d) for d in ("remote.git", "seed", "clone"))
        shutil.copytree(src, seed)
        with open(os.path.join(seed, ".gitignore"), "a") as f:
            f.write(f"\n{ignore}\n")
        sh(["git", "init", "-q", "--bare", bare], env=self.env)
        sh(["git", "init", "-q", seed], env=self.env)
        sh(["git", "add", "-A"], cwd=seed, env=self.env)
        sh(["git", "commit", "-q", "-m", "the crate"], cwd=seed, env=self.env)
        sh(["git", "push", "-q", bare, "HEAD:refs/heads/main"], cwd=seed, env=self.env)
        sh(["git", "clone", "-q", bare, clone], env=self.env)
        return clone

    def swarm(self, clone, clean, tasks, kind):
        cfg = os.path.join(self.root, f"swarm-{os.path.basename(os.path.dirname(clone))}.toml")
        with open(cfg, "w") as f:
            f.write(
                f'[run]\ncheck = "{kind["check"]}"\ncheck_clean = {str(clean).lower()}\n'
                f'sandbox = "{self.sandbox}"\ntask_timeout = "20m"\n{kind["run"]}'
                f'[roles.worker]\nexec = "sh {AGENT}"\n'
            )
        self.sw(clone, "init", "--config", cfg)
        for i in range(tasks):
            self.sw(clone, "add", f"edit {i}", "--body", f"@write {kind['edit']} {kind['comment']} task {i}")

    def land(self, clone, *how):
        t = time.monotonic()
        out = sh([self.bin, "--agent", "w", "run", "worker", *how, "--json"], cwd=clone, env=self.env, check=False)
        secs = time.monotonic() - t
        if out.returncode != 0:
            sys.exit(f"bench: the worker failed ({out.returncode}):\n{out.stderr[-3000:]}")
        return secs


def no_swarm(world, src, name, kind):
    """The setup and the check with no swarm: in a fresh copy (cold), then after a one-line edit (warm)."""
    d = os.path.join(world.root, name)
    shutil.copytree(src, d)
    cmd = f"{kind['setup']} && {kind['check']}" if kind["setup"] else kind["check"]
    t = time.monotonic()
    sh(["sh", "-c", cmd], cwd=d, env=world.env)
    cold = time.monotonic() - t
    with open(os.path.join(d, kind["edit"]), "a") as f:
        f.write(f"{kind['comment']} an edit\n")
    t = time.monotonic()
    sh(["sh", "-c", kind["check"]], cwd=d, env=world.env)
    return cold, time.monotonic() - t


def rust_crate(world, cargo_home, crate):
    src = crate_source(cargo_home, crate, os.path.join(world.root, "src"))
    # The lock file and every crate it names in your cargo registry, once (the one download of the bench: the
    # swarm's registry is seeded from yours, and every build after is offline).
    if not os.path.exists(os.path.join(src, "Cargo.lock")):
        sh(["cargo", "generate-lockfile"], cwd=src, env=world.env)
    sh(["cargo", "fetch"], cwd=src, env=world.env)
    kind = {"check": "cargo test --offline -q", "setup": "", "run": "", "edit": "src/lib.rs", "comment": "//",
            "ignore": "/target/", "what": f"`cargo test` of {crate}"}
    return src, kind


def python_sdist(world, spec):
    """A PyPI sdist (`name==version`) with its pytest suite: `[run] setup` makes the venv and installs pytest."""
    dl = os.path.join(world.root, "sdist")
    sh([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", spec, "-d", dl],
       env=world.env)
    (archive,) = os.listdir(dl)
    with tarfile.open(os.path.join(dl, archive)) as t:
        t.extractall(os.path.join(world.root, "src"), filter="data")
    (src,) = glob.glob(os.path.join(world.root, "src", "*"))
    package = spec.split("==")[0].replace("-", "_")
    setup = "python3 -m venv .venv && .venv/bin/pip install -q pytest"
    kind = {"check": "PYTHONPATH=. .venv/bin/python -m pytest -q -p no:cacheprovider tests", "setup": setup,
            "run": f'setup = "{setup}"\nsetup_when = ["pyproject.toml"]\n', "edit": f"{package}/__init__.py",
            "comment": "#", "ignore": "/.venv/", "what": f"`pytest` of the {spec} sdist, its venv made by `[run] setup`"}
    return src, kind


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "git-swarm"))
    ap.add_argument("--crate", default="indexmap-2.14.2")
    ap.add_argument("--python", metavar="NAME==VERSION", help="a PyPI sdist with a pytest suite in tests/ instead "
                    "of a crate (e.g. more-itertools==10.5.0)")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sandbox", default="auto", choices=["auto", "off"])
    ap.add_argument("--write-doc", action="store_true")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"bench: no binary at {a.bin} (cargo build --release, or --bin)")
    cargo_home = person_cargo_home()
    # Under the repository's target/: a sandboxed agent cannot see /tmp.
    base = os.path.join(REPO, "target")
    os.makedirs(base, exist_ok=True)
    root = tempfile.mkdtemp(prefix="bench-warm-", dir=base)
    os.chmod(root, 0o755)
    try:
        world = World(root, a.bin, cargo_home, a.sandbox)
        src, kind = python_sdist(world, a.python) if a.python else rust_crate(world, cargo_home, a.crate)
        sides = {"warm": [], "cold": []}
        raw = {"cold": [], "warm": []}
        firsts = {"warm": [], "cold": []}
        n = 0
        for r in range(a.rounds):
            order = ["warm", "cold"] if r % 2 == 0 else ["cold", "warm"]
            for side in order:
                n += 1
                clone = world.project(src, f"p{n}-{side}", kind["ignore"])
                world.swarm(clone, side == "cold", a.tasks + 1, kind)
                firsts[side].append(world.land(clone, "--once"))
                secs = world.land(clone, "--until-idle")
                sides[side].append(secs / a.tasks)
                print(f"round {r + 1} {side}: first task {firsts[side][-1]:.1f} s, then {secs / a.tasks:.1f} s a task",
                      file=sys.stderr)
            c, w = no_swarm(world, src, f"raw{r}", kind)
            raw["cold"].append(c)
            raw["warm"].append(w)
            print(f"round {r + 1} raw: cold {c:.1f} s, warm {w:.1f} s", file=sys.stderr)
        med = {k: statistics.median(v) for k, v in sides.items()}
        rmed = {k: statistics.median(v) for k, v in raw.items()}
        rows = [
            ("seconds per landed task, warm (default)", f"{med['warm']:.1f}"),
            ("seconds per landed task, cold (`check_clean = true`)", f"{med['cold']:.1f}"),
            ("**cold / warm, per landed task**", f"**{med['cold'] / med['warm']:.2f}×**"),
            ("no swarm: cold (setup and check in a fresh copy) / after a one-line edit",
             f"{rmed['cold']:.1f} s / {rmed['warm']:.1f} s ({rmed['cold'] / rmed['warm']:.2f}×)"),
            ("warm landed task / the check after a one-line edit with no swarm", f"{med['warm'] / rmed['warm']:.2f}×"),
            ("first task of a new clone (cold on both sides), median", f"{statistics.median(firsts['warm'] + firsts['cold']):.1f} s"),
        ]
        which = f"--python {a.python}" if a.python else f"--crate {a.crate}"
        table = (f"{kind['what']}: `python3 bench/warm.py {which} --tasks {a.tasks} --rounds {a.rounds} "
                 f"--sandbox {a.sandbox}` ({time.strftime('%Y-%m-%d')}, this machine, sides interleaved):\n\n"
                 "| figure | value |\n| --- | --- |\n" + "".join(f"| {k} | {v} |\n" for k, v in rows))
        print(table)
        if a.write_doc:
            doc = os.path.join(REPO, "docs", "performance.md")
            text = open(doc).read()
            tag = "bench-warm-python" if a.python else "bench-warm"
            begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
            if begin not in text:
                text += f"\n{begin}\n{end}\n"
            head, rest = text.split(begin, 1)
            _, tail = rest.split(end, 1)
            with open(doc, "w") as f:
                f.write(f"{head}{begin}\n{table}{end}{tail}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
