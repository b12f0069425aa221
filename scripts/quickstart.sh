#!/usr/bin/env bash
# A first swarm in a minute: a throwaway "shared" remote and two clones (two laptops, two CI runners…) that
# coordinate through nothing but that remote. Uses the git-swarm on your PATH (or $GIT_SWARM).
# Usage: scripts/quickstart.sh [--keep]     (--keep leaves the temp folder for you to explore)
set -euo pipefail
SW=${GIT_SWARM:-$(command -v git-swarm || true)}
if [[ -z $SW ]]; then
  echo "quickstart: git-swarm is not on your PATH; run: cargo install --locked --path ." >&2
  exit 1
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/git-swarm-quickstart.XXXXXX")
[[ ${1:-} == --keep ]] || trap 'rm -rf "$T"' EXIT
# Hermetic: your own git config is not read or changed.
export HOME=$T/home GIT_CONFIG_GLOBAL=$T/home/.gitconfig GIT_CONFIG_NOSYSTEM=1
mkdir -p "$HOME"
git config --global user.name "Quick Start"
git config --global user.email quickstart@example.com
git config --global init.defaultBranch main
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

echo "== a shared bare remote ($T/shared.git) and two clones, alice/ and bob/"
git init -q --bare "$T/shared.git"
git init -q "$T/seed" && git -C "$T/seed" commit -q --allow-empty -m "initial commit" &&
  git -C "$T/seed" push -q "$T/shared.git" HEAD:refs/heads/main
git clone -q "file://$T/shared.git" "$T/alice"
git clone -q "file://$T/shared.git" "$T/bob"
cd "$T/alice"

echo; echo "== alice creates the swarm and a plan of three tasks"
step "$SW" init
PARSER=$("$SW" --agent alice add "Write the parser" --priority 2 --label core)
echo "$PARSER"
step "$SW" --agent alice add "Write the docs" --after "$PARSER"
step "$SW" --agent alice add "Add CI" --body "GitHub Actions: build, test, clippy"

echo; echo "== bob, in his own clone, sees the board and claims the best ready task"
cd "$T/bob"
step "$SW" ready
TASK=$("$SW" --agent bob claim); echo "bob claimed $TASK"
step "$SW" status

echo; echo "== alice cannot take bob's task (exit 4), and takes the next one instead"
cd "$T/alice"
"$SW" --agent alice claim "$TASK" || echo "(exit $?: refused, as it should be)"
step "$SW" --agent alice claim

echo; echo "== bob finishes; the docs task becomes ready because its dependency is done"
cd "$T/bob"
step "$SW" --agent bob done "$TASK" --note "parser handles the whole grammar"
step "$SW" ready

echo; echo "== the audit log: one commit per op on refs/swarm/default, on the remote"
step "$SW" log
step git --git-dir="$T/shared.git" log --oneline refs/swarm/default
echo; echo "== nothing touched the work trees or branches:"
git -C "$T/alice" status --short; git -C "$T/bob" status --short
git --git-dir="$T/shared.git" for-each-ref --format='%(refname)'
echo; echo "quickstart: done${1:+ (kept in $T)}"
