#!/usr/bin/env bash
# bench/run.sh — the performance figures of git swarm, as ratios measured side by side.
#
#   bench/run.sh [PATH-TO-git-swarm]     default: cargo build --release, then target/release/git-swarm
#   BENCH_QUICK=1 bench/run.sh ...       small, fast run (< 1 min) to smoke-test the script
#
# The machine this runs on is shared and noisy, so no figure is an absolute time: each one is the ratio of two
# medians, ours and a baseline, measured in the same run with the two sides interleaved (A B, B A, A B, …).
# Needs git, jq and python3. Everything happens in a temporary directory with its own HOME and git config, over
# loopback only; it is removed at exit, with every daemon and proxy the script started.
#
# The table goes to stdout and, for a full run, into docs/performance.md between the markers
# `<!-- bench:begin -->` and `<!-- bench:end -->` (BENCH_WRITE_DOC=1 writes it after a quick run too, 0 never).
#
# Measurements (see docs/performance.md for the goals):
#   1. seconds per op (claim, done) vs a raw-git plumbing floor (bench/floor.sh): file:// remote, plain-path
#      remote (in-process CAS), and GIT_SWARM_TRANSPORT=git-fetch vs the default gix fetch
#   2. throughput draining one board: 16 agents in 16 clones vs 1 agent, 4 vs 1, and a naive plumbing loop
#      that retries at once (bench/naive_agent.sh), 16 vs 1
#   3. seconds per op on a board with 2,000 finished tasks vs an empty board
#   4. bytes per op through a counting proxy (bench/proxy.py) in front of `git daemon`
#   5. board size: ops, a runner and the read commands on 100 / 2,000 / 20,000 open tasks, and a 20,000-task
#      `add --file` (bench/board_size.py, its own table in docs/performance.md)
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
QUICK=${BENCH_QUICK:-0}
[[ $QUICK == 0 || $QUICK == 1 ]] || { echo "bench: BENCH_QUICK must be 0 or 1" >&2; exit 2; }
WRITE_DOC=${BENCH_WRITE_DOC:-$((1 - QUICK))}
DOC=$REPO_DIR/docs/performance.md

# --- sizes ------------------------------------------------------------------------------------------------------
if ((QUICK)); then
	R1=6          # 1: interleaved rounds (one claim + one done per side per round)
	N2=24         # 2: tasks on the board each drain empties
	ROUNDS2=1     # 2: rounds of (1 agent, 16 agents, 4 agents)
	N2_NAIVE=8    # 2: tasks for the naive loop (it is slow under contention)
	ROUNDS2_NAIVE=1
	BIG=150       # 3: finished tasks on the big board
	R3=6          # 3: interleaved rounds (add + claim + done per side per round)
	M4=4          # 4: claim + done cycles counted
	DIAG=3        # where an op's time goes: traced claim + done cycles
else
	R1=40 N2=160 ROUNDS2=3 N2_NAIVE=32 ROUNDS2_NAIVE=2 BIG=2000 R3=30 M4=20 DIAG=10
fi

die() { echo "bench: error: $*" >&2; exit 1; }
for tool in git jq python3; do command -v "$tool" >/dev/null || die "$tool is needed"; done

# --- the binary ---------------------------------------------------------------------------------------------------
if (($# > 1)); then die "usage: bench/run.sh [PATH-TO-git-swarm]"; fi
if (($# == 1)); then
	SWARM=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
else
	echo "bench: building (cargo build --release)" >&2
	(cd "$REPO_DIR" && cargo build --release --quiet) || die "cargo build failed"
	SWARM=$REPO_DIR/target/release/git-swarm
fi
[[ -x $SWARM ]] || die "$SWARM is not an executable"

# --- a hermetic world -----------------------------------------------------------------------------------------------
W=$(mktemp -d "${TMPDIR:-/tmp}/gsbench.XXXXXX")
BG_PIDS=() # daemons and proxies
cleanup() {
	local rc=$?
	local p
	for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	# agents still running after an interrupt: the jobs of this shell
	for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$W"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export HOME=$W/home GIT_CONFIG_GLOBAL=$W/gitconfig GIT_CONFIG_NOSYSTEM=1 LC_ALL=C TZ=UTC
export GIT_TERMINAL_PROMPT=0 GIT_AUTHOR_NAME="bench" GIT_AUTHOR_EMAIL="bench@example.com"
export GIT_COMMITTER_NAME="bench" GIT_COMMITTER_EMAIL="bench@example.com"
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_SWARM_AGENT GIT_SWARM_TRANSPORT GIT_SWARM_CLOCK_OFFSET \
	GIT_SWARM_MAX_RETRY_SECS GIT_TRACE2_EVENT GIT_TRACE2 GIT_TRACE2_PERF
mkdir -p "$HOME" "$W/res"
git config --global user.name bench
git config --global user.email bench@example.com
git config --global init.defaultBranch main
git config --global advice.detachedHead false

RES=$W/res           # samples: one number per line
ROWS=$W/rows.tsv     # the rows of the table, for report.py
: >"$ROWS"
START=$EPOCHSECONDS
# shellcheck source=floor.sh
source "$BENCH_DIR/floor.sh"

say() { printf '[%3ds] %s\n' $((EPOCHSECONDS - START)) "$*" >&2; }
row() { local IFS=$'\t'; echo "$*" >>"$ROWS"; }
us() { local t=${1/./}; echo $((10#$t)); }                    # $EPOCHREALTIME -> microseconds
secs() { printf '%d.%06d\n' $(($1 / 1000000)) $(($1 % 1000000)); } # microseconds -> seconds
med() { python3 "$BENCH_DIR/report.py" median "$1"; }
ms() { python3 -c "import sys; print(f'{float(sys.argv[1]) * 1000:.1f}')" "$1"; }

# --- building blocks ------------------------------------------------------------------------------------------------

# new_board BARE N: a bare remote with a main branch and a swarm of N open tasks, built through an in-process
# (plain path) clone, then packed as a hosted remote would be.
new_board() {
	local bare=$1 n=$2 tmp=$W/tmp-board i
	rm -rf "$tmp"
	git init -q --bare "$bare"
	git clone -q "$bare" "$tmp" 2>/dev/null
	git -C "$tmp" commit -q --allow-empty -m "initial commit"
	git -C "$tmp" push -q origin main
	"$SWARM" -C "$tmp" init >/dev/null
	for ((i = 1; i <= n; i++)); do
		"$SWARM" -C "$tmp" --agent planner add "Benchmark task $i" \
			--body "Do the thing number $i: a paragraph of the size a planner writes for a worker, naming the files to touch, how to check the result, and what not to do." \
			>/dev/null
	done
	git -C "$bare" gc -q
	rm -rf "$tmp"
}

# open_ids DIR: the ids of the open tasks, oldest first (the order the board was built in).
open_ids() { "$SWARM" -C "$1" list --json | jq -r '[.[] | select(.status == "open")] | sort_by(.created_at, .id) | .[].id'; }

# clone URL DIR: a client clone; its first fetch of the swarm ref is done here, not in a timed op.
clone() {
	rm -rf "$2"
	git clone -q "$1" "$2" 2>/dev/null || die "cannot clone $1"
	"$SWARM" -C "$2" status >/dev/null || die "git swarm status failed in $2"
	git -C "$2" fetch -q origin "+$FLOOR_REF:refs/x/floor"
}

# run_op KIND DIR ARG OP ID: one timed op; sets DT_US. KIND ours: ARG is GIT_SWARM_TRANSPORT (auto = default);
# KIND floor: ARG is the remote URL.
run_op() {
	local kind=$1 dir=$2 arg=$3 op=$4 id=$5 t0 t1
	case $kind in
	ours)
		t0=$EPOCHREALTIME
		GIT_SWARM_TRANSPORT=$arg "$SWARM" -C "$dir" --agent bench "$op" "$id" >/dev/null 2>"$W/op.err" ||
			die "git swarm $op $id in $dir: $(cat "$W/op.err")"
		t1=$EPOCHREALTIME
		;;
	floor)
		cd "$dir"
		t0=$EPOCHREALTIME
		floor_op "$arg" "$op" "$id" bench 2>"$W/op.err" || die "floor $op $id in $dir: $(cat "$W/op.err")"
		t1=$EPOCHREALTIME
		cd "$W"
		;;
	esac
	DT_US=$(($(us "$t1") - $(us "$t0")))
}

# side_cycle KEY KIND DIR ARG ID: claim + done of ID on one side; appends the time of the pair to $RES/KEY (and, for
# the floor, the time spent in its fetch and push alone to $RES/KEY.transport, its split to $RES/KEY.split).
side_cycle() {
	local key=$1 kind=$2 dir=$3 arg=$4 id=$5 total=0 transport=0 op f b p
	for op in claim done; do
		run_op "$kind" "$dir" "$arg" "$op" "$id"
		total=$((total + DT_US))
		if [[ $kind == floor ]]; then
			f=$(us "$FLOOR_T_FETCH") b=$(us "$FLOOR_T_BUILD") p=$(us "$FLOOR_T_PUSH")
			transport=$((transport + f + p))
			echo "$op $(secs "$f") $(secs "$b") $(secs "$p")" >>"$RES/$key.split"
		fi
	done
	secs "$total" >>"$RES/$key"
	[[ $kind == floor ]] && secs "$transport" >>"$RES/$key.transport"
	return 0
}

# compare KEY ROUNDS "KIND DIR ARG" "KIND DIR ARG": interleaved claim + done cycles over the same task ids (the
# two sides work on identical but separate remotes). One untimed warm-up cycle each, then ROUNDS rounds; the side
# that goes first alternates. Samples go to $RES/KEY.a and $RES/KEY.b.
compare() {
	local key=$1 rounds=$2 a b r id
	read -r -a a <<<"$3"
	read -r -a b <<<"$4"
	mapfile -t ids < <(open_ids "${a[1]}")
	((${#ids[@]} > rounds)) || die "compare $key: only ${#ids[@]} open tasks for $rounds rounds"
	side_cycle "$key.warm" "${a[@]}" "${ids[0]}"
	side_cycle "$key.warm" "${b[@]}" "${ids[0]}"
	for ((r = 1; r <= rounds; r++)); do
		id=${ids[r]}
		if ((r % 2)); then
			side_cycle "$key.a" "${a[@]}" "$id"
			side_cycle "$key.b" "${b[@]}" "$id"
		else
			side_cycle "$key.b" "${b[@]}" "$id"
			side_cycle "$key.a" "${a[@]}" "$id"
		fi
	done
}

# check_done DIR N LABEL: the board holds N tasks, every one done exactly once (one claim and one done in the
# audit log per task). Sets MAX_SHARE to the most tasks one agent finished.
check_done() {
	local dir=$1 n=$2 label=$3 list log
	list=$("$SWARM" -C "$dir" list --json) || die "$label: git swarm list failed"
	log=$("$SWARM" -C "$dir" log --json) || die "$label: git swarm log failed"
	local total done_n claims dones dup
	total=$(jq length <<<"$list")
	done_n=$(jq '[.[] | select(.status == "done")] | length' <<<"$list")
	claims=$(jq '[.[] | select(.op == "claim")] | length' <<<"$log")
	dones=$(jq '[.[] | select(.op == "done")] | length' <<<"$log")
	dup=$(jq '[.[] | select(.op == "claim" or .op == "done") | "\(.op) \(.task)"] | group_by(.) |
		map(select(length > 1)) | length' <<<"$log")
	[[ $total == "$n" && $done_n == "$n" && $claims == "$n" && $dones == "$n" && $dup == 0 ]] ||
		die "$label: expected $n tasks each claimed and done once; got $total tasks, $done_n done, $claims claims, $dones dones, $dup repeated"
	MAX_SHARE=$(jq '[.[].result.agent] | group_by(.) | map(length) | max' <<<"$list")
}

# ===================================================================================================================
say "git swarm: $SWARM ($("$SWARM" --version 2>/dev/null || echo '?')); mode: $( ((QUICK)) && echo quick || echo full)"
say "work dir: $W"
cd "$W"

# --- 1. seconds per op vs the raw-git floor -----------------------------------------------------------------------
say "1. seconds per op vs a raw-git floor ($R1 rounds per comparison)"
mkdir -p m1
new_board m1/tpl.git $((R1 + 1 + DIAG))
for s in a-ours a-floor b-ours b-floor c-gix c-git; do cp -a m1/tpl.git "m1/$s.git"; done
clone "file://$W/m1/a-ours.git" m1/a-ours
clone "file://$W/m1/a-floor.git" m1/a-floor
clone "$W/m1/b-ours.git" m1/b-ours # a plain path: git swarm swaps the ref in-process
clone "$W/m1/b-floor.git" m1/b-floor
clone "file://$W/m1/c-gix.git" m1/c-gix
clone "file://$W/m1/c-git.git" m1/c-git

say "   1a file:// remote: git swarm vs floor"
compare m1a "$R1" "ours $W/m1/a-ours auto" "floor $W/m1/a-floor file://$W/m1/a-floor.git"
say "   1b plain-path remote (in-process CAS) vs floor over the same path"
compare m1b "$R1" "ours $W/m1/b-ours auto" "floor $W/m1/b-floor $W/m1/b-floor.git"
say "   1c GIT_SWARM_TRANSPORT=git-fetch vs default, file://"
compare m1c "$R1" "ours $W/m1/c-git git-fetch" "ours $W/m1/c-gix auto"
for s in a-ours a-floor b-ours b-floor c-gix c-git; do
	n=$("$SWARM" -C "m1/$s" list --json | jq '[.[] | select(.status == "done")] | length')
	[[ $n == $((R1 + 1)) ]] || die "1: board $s has $n done tasks, expected $((R1 + 1))"
done

# Where an op's time goes: the git processes of a few more ops, traced (not part of the timed samples above).
say "   where the time of an op goes (trace2, $DIAG cycles)"
mkdir -p diag
mapfile -t ids < <(open_ids m1/a-ours)
for ((i = 0; i < DIAG; i++)); do
	for op in claim done; do
		t0=$EPOCHREALTIME
		GIT_TRACE2_EVENT=$W/diag/$i-$op.json "$SWARM" -C m1/a-ours --agent bench "$op" "${ids[i]}" >/dev/null
		t1=$EPOCHREALTIME
		secs $(($(us "$t1") - $(us "$t0"))) >>"$RES/diag.wall"
		python3 "$BENCH_DIR/report.py" trace "$RES/diag.parts" "$t0" "$t1" "$W/diag/$i-$op.json"
	done
done
for f in 1:pre 2:fetch 3:push 4:maint 5:post; do awk -v c="${f%%:*}" '{ print $c }' "$RES/diag.parts" >"$RES/diag.${f#*:}"; done
awk '{print $2}' "$RES/m1a.b.split" >"$RES/floor.fetch"
awk '{print $3}' "$RES/m1a.b.split" >"$RES/floor.build"
awk '{print $4}' "$RES/m1a.b.split" >"$RES/floor.push"

row section "1. Seconds per op (claim or done) vs a raw-git floor — goal ratio ≤ 1.0"
row time 1a "git swarm over a \`file://\` remote vs the plumbing floor over \`file://\`" m1a.a m1a.b 2 "<=1.0"
row time 1b "git swarm on a plain-path remote (in-process CAS, no subprocess) vs the floor over that path" \
	m1b.a m1b.b 2 "<=1.0"
row time 1c "\`GIT_SWARM_TRANSPORT=git-fetch\` (git fetch subprocess) vs default (gix fetch), \`file://\`" \
	m1c.a m1c.b 2 "-"
row time 1d "context: git swarm over \`file://\` vs only the floor's \`git fetch\` + \`git push\` (no plumbing)" \
	m1a.a m1a.b.transport 2 "-"
row note "Floor per op (median of claim and done, 1a): fetch $(ms "$(med "$RES/floor.fetch")") ms, plumbing $(ms "$(med "$RES/floor.build")") ms (9 or 13 git processes), push $(ms "$(med "$RES/floor.push")") ms."
row note "git swarm per op over \`file://\` (median of $DIAG traced claim + done cycles): $(ms "$(med "$RES/diag.wall")") ms in all = $(ms "$(med "$RES/diag.pre")") ms start (process, repository, until upload-pack runs) + $(ms "$(med "$RES/diag.fetch")") ms gix fetch and the op in-process + $(ms "$(med "$RES/diag.push")") ms \`git push\` (of which the remote's receive-pack waits $(ms "$(med "$RES/diag.maint")") ms for \`git maintenance run --auto\`) + $(ms "$(med "$RES/diag.post")") ms after the push."

# --- 2. throughput --------------------------------------------------------------------------------------------------
say "2. throughput: drains of $N2 tasks (ours: 1, 16, 4 agents x $ROUNDS2), $N2_NAIVE tasks (naive: 1, 16 x $ROUNDS2_NAIVE)"
mkdir -p m2
new_board m2/tpl.git "$N2"
new_board m2/tpl-naive.git "$N2_NAIVE"

# ours_agent DIR AGENT OUT: claim the best ready task, mark it done, until nothing is left (exit 3). An op that
# fails with exit 1 (an error, not a refusal) is tried again, as an agent harness would, and counted: the table
# reports these errors. Writes "<tasks done> 0 <errors>" to OUT.
ours_agent() {
	local dir=$1 agent=$2 out=$3 n=0 errors=0 id rc tries
	while :; do
		rc=0
		id=$("$SWARM" -C "$dir" --agent "$agent" claim 2>>"$out.err") || rc=$?
		((rc == 3)) && break
		if ((rc == 1 && errors < 500)); then errors=$((errors + 1)) && continue; fi
		((rc == 0)) || { echo "$agent: claim exited $rc" >>"$out.err"; return 1; }
		for ((tries = 0; ; tries++)); do
			rc=0
			"$SWARM" -C "$dir" --agent "$agent" done "$id" >/dev/null 2>>"$out.err" || rc=$?
			((rc == 1 && tries < 50)) || break
			errors=$((errors + 1))
		done
		# exit 4 after an error: the failed attempt may have landed after all; then the task is done by me.
		if ((rc == 4)) && "$SWARM" -C "$dir" show --json "$id" 2>/dev/null |
			jq -e --arg a "$agent" '.status == "done" and .result.agent == $a' >/dev/null; then
			rc=0
		fi
		((rc == 0)) || { echo "$agent: done $id exited $rc" >>"$out.err"; return 1; }
		n=$((n + 1))
	done
	echo "$n 0 $errors" >"$out"
}

# drain KIND AGENTS [TRACE]: a fresh copy of the template board, AGENTS clones, all agents at once; appends tasks
# per second to $RES/m2.KIND.AGENTS. With TRACE, ours agents log trace2 events (to count pushes) and the rate is
# not recorded.
drain() {
	local kind=$1 k=$2 trace=${3:-} tpl=m2/tpl.git n=$N2 d t0 t1 pids=() p fail=0
	[[ $kind == naive ]] && tpl=m2/tpl-naive.git n=$N2_NAIVE
	rm -rf m2/r.git m2/c && mkdir -p m2/c
	cp -a "$tpl" m2/r.git
	for ((i = 1; i <= k; i++)); do clone "file://$W/m2/r.git" "m2/c/$i"; done
	t0=$EPOCHREALTIME
	for ((i = 1; i <= k; i++)); do
		d=$W/m2/c/$i
		if [[ $kind == ours ]]; then
			(
				[[ -n $trace ]] && export GIT_TRACE2_EVENT=$d.trace
				ours_agent "$d" "a$i" "$d.out"
			) &
		else
			"$BENCH_DIR/naive_agent.sh" "$d" "file://$W/m2/r.git" "n$i" "$d.out" 2>"$d.out.err" &
		fi
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || fail=1; done
	t1=$EPOCHREALTIME
	((fail == 0)) || die "drain $kind x$k: an agent failed: $(cat m2/c/*.err 2>/dev/null | head -n 5)"
	check_done m2/c/1 "$n" "drain $kind x$k"
	local secs_taken
	secs_taken=$(secs $(($(us "$t1") - $(us "$t0"))))
	local sum_done=0 sum_lost=0 sum_err=0 a b c
	for ((i = 1; i <= k; i++)); do
		read -r a b c <"m2/c/$i.out"
		sum_done=$((sum_done + a)) sum_lost=$((sum_lost + b)) sum_err=$((sum_err + ${c:-0}))
	done
	ERRORS=$sum_err
	((sum_done == n)) || die "drain $kind x$k: agents report $sum_done tasks done, expected $n"
	if [[ -n $trace ]]; then
		PUSHES=$(cat m2/c/*.trace | grep '"event":"cmd_name"' | grep -c '"hierarchy":"push"' || true)
	else
		python3 -c "import sys; print(f'{int(sys.argv[1]) / float(sys.argv[2]):.4f}')" "$n" "$secs_taken" \
			>>"$RES/m2.$kind.$k"
		echo "$MAX_SHARE" >>"$RES/m2.$kind.$k.share"
		echo "$sum_lost" >>"$RES/m2.$kind.$k.lost"
		echo "$sum_err" >>"$RES/m2.$kind.$k.errors"
		# pack files in the clones: every gix fetch that brings objects keeps them as a new pack
		for ((i = 1; i <= k; i++)); do find "m2/c/$i/.git/objects/pack" -name '*.pack' | wc -l; done |
			sort -n | tail -n 1 >>"$RES/m2.$kind.$k.packs"
		cat m2/c/*.out.err 2>/dev/null | grep '^error:' | grep -v 'no ready' >>"$RES/m2.errors.all" || true
	fi
	say "   $kind x$k: $n tasks in ${secs_taken}s (busiest agent did $MAX_SHARE, $sum_err ops failed and were retried)"
}

for ((r = 1; r <= ROUNDS2; r++)); do
	if ((r % 2)); then order=(1 16 4); else order=(4 16 1); fi
	for k in "${order[@]}"; do drain ours "$k"; done
done
for ((r = 1; r <= ROUNDS2_NAIVE; r++)); do
	if ((r % 2)); then order=(1 16); else order=(16 1); fi
	for k in "${order[@]}"; do drain naive "$k"; done
done
# Lost races are not visible on the remote (a lost push leaves no trace there): count the pushes of one more
# drain with trace2 on. Every op that lands is one push; every other push lost a race.
drain ours 16 trace
ours_lost=$((PUSHES - 2 * N2))
naive_lost=$(med "$RES/m2.naive.16.lost")

row section "2. Throughput draining one board, tasks per second — goal 16 agents vs 1 ≥ 0.8"
row rate 2a "16 agents in 16 clones vs 1 agent, $N2 tasks, \`file://\`" m2.ours.16 m2.ours.1 ">=0.8"
row rate 2b "4 agents vs 1 agent, same board" m2.ours.4 m2.ours.1 "-"
row rate 2c "context: naive plumbing loop retrying at once, 16 agents vs 1, $N2_NAIVE tasks" m2.naive.16 m2.naive.1 "-"
row text 2d "lost races per task (pushes per task), 16 agents" \
	"$(python3 -c "import sys; n=int(sys.argv[3]); print(f'{int(sys.argv[1])/n:.2f} ({int(sys.argv[2])/n:.2f})')" "$ours_lost" "$PUSHES" "$N2")" \
	"naive: $(python3 -c "import sys; print(f'{float(sys.argv[1])/int(sys.argv[2]):.2f}')" "$naive_lost" "$N2_NAIVE")" "" "-"
row text 2e "busiest of 16 agents: share of the tasks (median over drains)" \
	"$(python3 -c "import sys; print(f'{float(sys.argv[1])/int(sys.argv[2]):.0%}')" "$(med "$RES/m2.ours.16.share")" "$N2")" \
	"naive: $(python3 -c "import sys; print(f'{float(sys.argv[1])/int(sys.argv[2]):.0%}')" "$(med "$RES/m2.naive.16.share")" "$N2_NAIVE")" "" "-"
row text 2f "ops that failed with an error (exit 1) and were tried again, per drain (median): 16 / 4 / 1 agents" \
	"$(printf %g "$(med "$RES/m2.ours.16.errors")") / $(printf %g "$(med "$RES/m2.ours.4.errors")") / $(printf %g "$(med "$RES/m2.ours.1.errors")")" "naive: 0" "" "-"
row text 2g "pack files in the fullest clone after a drain (median): 16 / 4 / 1 agents" \
	"$(printf %g "$(med "$RES/m2.ours.16.packs")") / $(printf %g "$(med "$RES/m2.ours.4.packs")") / $(printf %g "$(med "$RES/m2.ours.1.packs")")" \
	"naive: $(printf %g "$(med "$RES/m2.naive.16.packs")") / – / $(printf %g "$(med "$RES/m2.naive.1.packs")")" "" "-"
row note "Every drain was checked: each task done exactly once, one claim and one done per task in the audit log, no duplicate."
if [[ -s $RES/m2.errors.all ]]; then
	row note "Most frequent errors in the drains (count: message): $(sed -E -e "s|$W|…|g" -e 's/=[0-9]+/=N/g' \
		"$RES/m2.errors.all" | sort | uniq -c | sort -rn | head -n 3 | cut -c1-170 |
		sed -E -e 's/^ *([0-9]+) /\1: /' -e 's/\|/\\|/g' | paste -sd ';' - | sed 's/;/; /g')"
fi

# --- 3. board size ----------------------------------------------------------------------------------------------------
say "3. a board with $BIG finished tasks vs an empty one ($R3 rounds of add + claim + done)"
mkdir -p m3
new_board m3/big.git 0
new_board m3/empty.git 0
git clone -q "$W/m3/big.git" m3/builder 2>/dev/null # a plain path: in-process, fast
for ((i = 1; i <= BIG; i++)); do
	id=$("$SWARM" -C m3/builder --agent builder add "Finished task $i" --body "Done long ago: $i.")
	"$SWARM" -C m3/builder --agent builder claim "$id" >/dev/null
	"$SWARM" -C m3/builder --agent builder done "$id" >/dev/null
	((i % 500 == 0)) && say "   built $i"
done
git -C m3/big.git gc -q
git -C m3/empty.git gc -q
n=$("$SWARM" -C m3/builder status --json | jq .counts.done)
[[ $n == "$BIG" ]] || die "3: the big board has $n done tasks, expected $BIG"
clone "file://$W/m3/big.git" m3/big
clone "file://$W/m3/empty.git" m3/empty

# cycle3 KEY DIR: add + claim + done, timed; appends the total to $RES/KEY.
cycle3() {
	local key=$1 dir=$2 t0 t1 id
	t0=$EPOCHREALTIME
	id=$("$SWARM" -C "$dir" --agent bench add "Measured task" --body "Measured.") || die "3: add failed in $dir"
	"$SWARM" -C "$dir" --agent bench claim "$id" >/dev/null || die "3: claim failed in $dir"
	"$SWARM" -C "$dir" --agent bench done "$id" >/dev/null || die "3: done failed in $dir"
	t1=$EPOCHREALTIME
	secs $(($(us "$t1") - $(us "$t0"))) >>"$RES/$key"
}
cycle3 m3.warm m3/big
cycle3 m3.warm m3/empty
for ((r = 1; r <= R3; r++)); do
	if ((r % 2)); then cycle3 m3.big m3/big; cycle3 m3.empty m3/empty; else cycle3 m3.empty m3/empty; cycle3 m3.big m3/big; fi
done

row section "3. Seconds per op on a big board — goal ratio ≤ 1.5"
row time 3a "add + claim + done with $BIG finished tasks vs an empty board, \`file://\`" m3.big m3.empty 3 "<=1.5"

# --- 4. bytes per op ---------------------------------------------------------------------------------------------------
say "4. bytes per op through a counting proxy in front of git daemon ($M4 claim + done cycles per side)"
mkdir -p m4
freeport() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
DPORT=$(freeport)
git daemon --reuseaddr --listen=127.0.0.1 --port="$DPORT" --base-path="$W" --export-all \
	--enable=receive-pack "$W" 2>"$W/daemon.log" &
BG_PIDS+=($!)
PPORT=$(freeport)
PLOG=$W/proxy.log
: >"$PLOG"
python3 "$BENCH_DIR/proxy.py" "$PPORT" "$DPORT" "$PLOG" 2>"$W/proxy.err" &
BG_PIDS+=($!)
for ((i = 0; i < 50; i++)); do
	git ls-remote "git://127.0.0.1:$PPORT/m1/tpl.git" >/dev/null 2>&1 && break
	sleep 0.1
done
git ls-remote "git://127.0.0.1:$PPORT/m1/tpl.git" >/dev/null || die "4: git daemon or proxy did not come up"

new_board m4/tpl.git $((M4 + 1))
cp -a m4/tpl.git m4/ours.git
cp -a m4/tpl.git m4/floor.git
GURL=git://127.0.0.1:$PPORT
clone "$GURL/m4/ours.git" m4/ours
clone "$GURL/m4/floor.git" m4/floor
clone "$GURL/m3/big.git" m4/big

# settle: wait until every connection the proxy saw has closed and been counted.
settle() {
	local i
	for ((i = 0; i < 100; i++)); do
		[[ $(grep -c '^open' "$PLOG") == $(grep -c '^close' "$PLOG") ]] && return 0
		sleep 0.05
	done
	die "4: the proxy still has open connections"
}
# bytes_of KEY OPS CMD...: run CMD, then record the bytes per op both ways in $RES/KEY.up and $RES/KEY.down.
bytes_of() {
	local key=$1 ops=$2 mark
	shift 2
	settle
	mark=$(wc -l <"$PLOG")
	"$@"
	settle
	awk -v from="$mark" -v ops="$ops" 'NR > from && $1 == "close" { u += $3; d += $4 }
		END { printf "%.1f\n", u / ops > "/dev/stderr"; printf "%.1f\n", d / ops }' \
		"$PLOG" 2>"$RES/$key.up" >"$RES/$key.down"
}
ours_cycles() { # DIR ID...
	local dir=$1 id
	shift
	for id in "$@"; do
		"$SWARM" -C "$dir" --agent bench claim "$id" >/dev/null || die "4: claim $id failed"
		"$SWARM" -C "$dir" --agent bench done "$id" >/dev/null || die "4: done $id failed"
	done
}
floor_cycles() { # URL ID...
	local url=$1 id
	shift
	cd "$W/m4/floor"
	for id in "$@"; do
		floor_op "$url" claim "$id" bench || die "4: floor claim $id failed"
		floor_op "$url" done "$id" bench || die "4: floor done $id failed"
	done
	cd "$W"
}
mapfile -t ids < <(open_ids m4/ours)
ours_cycles m4/ours "${ids[0]}" # warm-up
floor_cycles "$GURL/m4/floor.git" "${ids[0]}"
bytes_of m4.ours $((2 * M4)) ours_cycles m4/ours "${ids[@]:1:M4}"
bytes_of m4.floor $((2 * M4)) floor_cycles "$GURL/m4/floor.git" "${ids[@]:1:M4}"
# The big board (3's remote, now served by the daemon): tasks to claim first, then the same count.
mapfile -t big_ids < <(for ((i = 0; i <= M4; i++)); do "$SWARM" -C m4/big --agent bench add "Bytes task $i"; done)
ours_cycles m4/big "${big_ids[0]}"
bytes_of m4.big $((2 * M4)) ours_cycles m4/big "${big_ids[@]:1:M4}"

row section "4. Bytes on the wire per op (claim or done), \`git://\` through a counting proxy; ↑ client→server, ↓ server→client"
row bytes 4a "git swarm vs the plumbing floor" m4.ours.up m4.ours.down m4.floor.up m4.floor.down
row bytes 4b "git swarm with $BIG finished tasks vs an empty board" m4.big.up m4.big.down m4.ours.up m4.ours.down

# --- the table --------------------------------------------------------------------------------------------------------
ELAPSED=$((EPOCHSECONDS - START))
BLOCK=$W/block.md
{
	echo "Run of $(date -u +%Y-%m-%d) ($( ((QUICK)) && echo "quick mode, a smoke test" || echo "full mode"), ${ELAPSED}s):" \
		"$(nproc) cores, $(git --version), $("$SWARM" --version 2>/dev/null || echo 'git-swarm ?')," \
		"$(uname -sr). Ratios are ours / baseline, medians of interleaved samples from the same run."
	echo
	python3 "$BENCH_DIR/report.py" table "$RES" "$ROWS"
} >"$BLOCK"
echo
cat "$BLOCK"

if ((WRITE_DOC)); then
	if [[ ! -f $DOC ]]; then
		mkdir -p "$(dirname "$DOC")"
		cat >"$DOC" <<'EOF'
# Performance

What `git swarm` costs, measured by `bench/run.sh`. Rerun it with

    bench/run.sh                      # builds target/release/git-swarm, about 10 minutes on 2 cores
    bench/run.sh path/to/git-swarm    # measure a given binary
    BENCH_QUICK=1 bench/run.sh …      # a smoke test in under a minute (prints, does not touch this file)

<!-- bench:begin -->
<!-- bench:end -->
EOF
	fi
	python3 "$BENCH_DIR/report.py" splice "$DOC" "$BLOCK"
	say "wrote the table into $DOC"
fi
say "5. board size (bench/board_size.py)"
size_args=(--bin "$SWARM")
((QUICK)) && size_args+=(--quick)
((WRITE_DOC)) && size_args+=(--write-doc) || size_args+=(--no-doc)
python3 "$BENCH_DIR/board_size.py" "${size_args[@]}" || die "bench/board_size.py failed"
say "done in $((EPOCHSECONDS - START))s"
