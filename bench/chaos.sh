#!/usr/bin/env bash
# bench/chaos.sh — the long chaos runs of tests/chaos.rs, and a summary of their figures.
#
#   bench/chaos.sh                      every long variant once: file:// (the remote moved away), git daemon and
#                                       smart HTTP behind lighttpd (stopped and started again): 16 runners in 16
#                                       clones, 400 tasks, up to 4 minutes of faults each
#   bench/chaos.sh http daemon          only these variants (file, daemon, http, skew)
#                                       skew: the clock-skew sweep (a live holder, a taker 1–8 s ahead, lease 12 s)
#   CHAOS_RUNS=3 bench/chaos.sh         each variant 3 times
#   CHAOS_QUICK=1 bench/chaos.sh        the CI-sized runs (8 runners, 48 tasks, 40 s of faults) instead
#   GIT_SWARM_CHAOS_SEED=<n> bench/chaos.sh file
#                                       replay the chaos driver's choices of one run (which faults, when, whom, the
#                                       task mix); the machine's timing is not replayed
#
# Every run prints one `chaos-stats:` line: seed, runners (N), tasks, SIGKILLs of runners and of the git processes
# they started, outages of the remote, restarts, duplicates found and lost work (both must be 0), takeovers of
# expired leases, fenced landings, renewals and the least lease time left at a renewal, wall time. The summary at
# the end lists them with totals. Exit status: non-zero when a run failed; every run's output and runner logs are
# kept under $CHAOS_OUT (default: a new folder under /tmp, printed).
#
# Needs git (with git-daemon and git-http-backend) and lighttpd (Debian: apt-get install lighttpd; a missing
# lighttpd fails the http variant here, as GIT_SWARM_REQUIRE_ALL=1 does in CI). Everything runs on loopback in
# temporary folders, which the tests remove; each run's servers and processes are ended by the test itself.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
RUNS=${CHAOS_RUNS:-1}
QUICK=${CHAOS_QUICK:-0}
OUT=${CHAOS_OUT:-$(mktemp -d /tmp/git-swarm-chaos.XXXXXX)}
mkdir -p "$OUT"

variants=("$@")
((${#variants[@]})) || variants=(file daemon http skew)
tests=()
for v in "${variants[@]}"; do
	case "$v" in
	file) tests+=(chaos_over_file_urls_with_the_remote_moved_away) ;;
	daemon) tests+=(chaos_over_git_daemon_stopped_and_restarted) ;;
	http) tests+=(chaos_over_smart_http_behind_lighttpd) ;;
	skew) tests+=(clock_skew_tolerance_sweep) ;;
	*)
		echo "chaos: unknown variant '$v' (file, daemon, http, skew)" >&2
		exit 2
		;;
	esac
done

export GIT_SWARM_REQUIRE_ALL=${GIT_SWARM_REQUIRE_ALL:-1}
if ((QUICK)); then unset GIT_SWARM_CHAOS_LONG; else export GIT_SWARM_CHAOS_LONG=1; fi
export GIT_SWARM_CHAOS_LOGS="$OUT/runner-logs"

cd "$REPO_DIR"
echo "chaos: building (release)…" >&2
cargo test --release --test chaos --no-run >"$OUT/build.log" 2>&1 || {
	cat "$OUT/build.log" >&2
	exit 1
}

failed=0
for ((run = 1; run <= RUNS; run++)); do
	for t in "${tests[@]}"; do
		log="$OUT/$t-$run.log"
		echo "chaos: $t (run $run of $RUNS) → $log" >&2
		start=$(date +%s)
		if timeout 3600 cargo test --release --test chaos -- --exact "$t" --nocapture --test-threads 1 >"$log" 2>&1; then
			status=ok
		else
			status=FAILED
			failed=$((failed + 1))
		fi
		if [[ $t == clock_skew_tolerance_sweep ]]; then
			{ grep -ho 'skew-stats:.*' "$log" || true; } | tee -a "$OUT/skew.txt"
			echo "skew-stats: status=$status secs=$(($(date +%s) - start))" | tee -a "$OUT/skew.txt"
		else
			line=$(grep -ho 'chaos-stats:.*' "$log" | tail -n 1 || true)
			[[ -n $line ]] || line="chaos-stats: test=$t (no stats line)"
			echo "$line status=$status secs=$(($(date +%s) - start))" | tee -a "$OUT/stats.txt"
		fi
		if [[ $status != ok ]]; then
			grep -E -A25 'panicked at' "$log" | head -40 >&2 || true
		fi
	done
done

echo
if [[ -s $OUT/skew.txt ]]; then
	echo "== clock skew ($OUT/skew.txt)"
	cat "$OUT/skew.txt"
	echo
fi
[[ -s $OUT/stats.txt ]] || { ((failed == 0)) && exit 0 || exit 1; }
echo "== summary ($OUT/stats.txt)"
awk '
	{
		for (i = 2; i <= NF; i++) {
			n = split($i, kv, "=")
			if (n == 2) v[NR, kv[1]] = kv[2]
		}
		rows = NR
	}
	END {
		f = "%-10s %20s %3s %5s %8s %8s %7s %8s %4s %4s %8s %6s %5s %9s %8s %7s %s\n"
		printf f, "remote", "seed", "N", "tasks", "kill-run", "kill-git", "outages", "restarts", "dupl", "lost", "takeover", "fenced", "renew", "min-slack", "bug-lock", "wall", "status"
		for (r = 1; r <= rows; r++) {
			printf f, v[r, "remote"], v[r, "seed"], v[r, "N"], v[r, "tasks"], v[r, "runner_sigkills"], v[r, "git_sigkills"], v[r, "outages"], v[r, "restarts"], v[r, "duplicates"], v[r, "lost"], v[r, "takeovers"], v[r, "fenced"], v[r, "renewals"], v[r, "min_renew_slack"], v[r, "known_bug_locks"], v[r, "wall"], v[r, "status"]
			tk += v[r, "runner_sigkills"]; tg += v[r, "git_sigkills"]; to += v[r, "outages"]; tr += v[r, "restarts"]
			td += v[r, "duplicates"]; tl += v[r, "lost"]; tt += v[r, "tasks"]; tv += v[r, "takeovers"]; tf += v[r, "fenced"]
		}
		printf f, "total", "", "", tt, tk, tg, to, tr, td, tl, tv, tf, "", "", "", "", ""
	}
' "$OUT/stats.txt"
if ((failed)); then
	echo "chaos: $failed run(s) FAILED; logs in $OUT" >&2
	exit 1
fi
echo "chaos: all runs passed; duplicates and lost work must be 0 (see above); logs in $OUT"
