#!/usr/bin/env bash
# bench/spend.sh — what recording spend costs an op, as a ratio measured side by side.
#
#   bench/spend.sh [PATH-TO-git-swarm]     default: cargo build --release, then target/release/git-swarm
#   BENCH_OPS=N                            ops of each kind per side (default 30)
#
# Two swarms of 120 tasks on file:// remotes, the same but for one thing: in A the 20 tasks a worker finished first
# reported usage (so A's ops read spend.toml, and its tasks carry usage records); in B they reported nothing. Then
# `claim <id>` + `done <id>` on the open tasks, one op on A, one on B, in turn (A B, B A, …), each a fresh process
# over file:// as an agent's hook or a person would run it. The figure is median(A) / median(B).
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
OPS=${BENCH_OPS:-30}
die() { echo "bench/spend.sh: $*" >&2; exit 1; }

if (($# == 1)); then
	SWARM=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
else
	(cd "$REPO_DIR" && cargo build --release --quiet) || die "cargo build failed"
	SWARM=$REPO_DIR/target/release/git-swarm
fi
[[ -x $SWARM ]] || die "$SWARM is not an executable"

W=$(mktemp -d "${TMPDIR:-/tmp}/gsspend.XXXXXX")
trap 'rm -rf "$W"' EXIT
export HOME=$W/home GIT_CONFIG_GLOBAL=$W/gitconfig GIT_CONFIG_NOSYSTEM=1 LC_ALL=C TZ=UTC GIT_SWARM_TRUST=any
unset GIT_DIR GIT_WORK_TREE GIT_SWARM_AGENT GIT_SWARM_TRANSPORT
mkdir -p "$HOME"
git config --global user.name bench
git config --global user.email bench@example.com
git config --global init.defaultBranch main

# board NAME REPORT: a bare remote with 120 tasks, 20 of them done by a worker whose agent reports usage (1) or not.
board() {
	local report=$2 bare=$W/$1.git clone=$W/$1 i exec
	git init -q --bare "$bare"
	git clone -q "file://$bare" "$clone" 2>/dev/null
	git -C "$clone" commit -q --allow-empty -m "initial commit"
	git -C "$clone" push -q origin main
	"$SWARM" -C "$clone" init >/dev/null
	for ((i = 1; i <= 120; i++)); do
		"$SWARM" -C "$clone" --agent planner add "Benchmark task $i" --body "Do the thing number $i." >/dev/null
	done
	# The agent's command line, for `sh -c` in its work tree (the variables are the agent's, not ours).
	# shellcheck disable=SC2016
	exec='echo "$GIT_SWARM_TASK_ID" >> done.txt'
	if ((report)); then
		# shellcheck disable=SC2016
		exec="$exec"'; printf '"'"'{"input_tokens": 12000, "output_tokens": 800, "cost_usd": 0.05}'"'"' > "$GIT_SWARM_USAGE_FILE"'
	fi
	"$SWARM" -C "$clone" --agent seeder run worker --max-tasks 20 --exec "$exec" >/dev/null 2>&1
}
board a 1
board b 0
[[ $("$SWARM" -C "$W/a" status --json | jq '.spend.total.runs') == 20 ]] || die "board a has no spend recorded"
[[ $("$SWARM" -C "$W/b" status --json | jq '.spend.total.runs') == 0 ]] || die "board b has spend recorded"

mapfile -t IDS_A < <("$SWARM" -C "$W/a" list --json | jq -r '[.[] | select(.status == "open")] | .[].id')
mapfile -t IDS_B < <("$SWARM" -C "$W/b" list --json | jq -r '[.[] | select(.status == "open")] | .[].id')
((${#IDS_A[@]} >= OPS && ${#IDS_B[@]} >= OPS)) || die "not enough open tasks for $OPS ops"

us() { local t=${1/./}; echo $((10#$t)); }
# op SIDE ID VERB: one timed op, microseconds appended to $W/<side>.<verb>.
op() {
	local t0 t1
	t0=$EPOCHREALTIME
	"$SWARM" -C "$W/$1" --agent bench "$3" "$2" >/dev/null 2>&1 || die "$3 $2 failed on $1"
	t1=$EPOCHREALTIME
	echo $(($(us "$t1") - $(us "$t0"))) >>"$W/$1.$3"
}
for ((i = 0; i < OPS; i++)); do
	if ((i % 2 == 0)); then first=a second=b; else first=b second=a; fi
	for side in $first $second; do
		if [[ $side == a ]]; then id=${IDS_A[i]}; else id=${IDS_B[i]}; fi
		op "$side" "$id" claim
	done
	for side in $second $first; do
		if [[ $side == a ]]; then id=${IDS_A[i]}; else id=${IDS_B[i]}; fi
		op "$side" "$id" "done"
	done
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf '| op (file://, fresh process) | with spend recorded (ms) | without (ms) | ratio |\n| --- | --- | --- | --- |\n'
for verb in claim "done"; do
	a=$(median "$W/a.$verb")
	b=$(median "$W/b.$verb")
	awk -v a="$a" -v b="$b" -v v="$verb" 'BEGIN {printf "| %s | %.1f | %.1f | %.2f |\n", v, a / 1000, b / 1000, a / b}'
done
