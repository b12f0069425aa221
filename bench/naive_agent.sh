#!/usr/bin/env bash
# A naive agent for context in the throughput figure: drains a board with raw git plumbing (bench/floor.sh) and on
# a lost race tries again at once, without backoff. Claim picks the first open task in path order, so concurrent
# agents go for the same task, as `git swarm claim` (best ready task first) does.
#
#   naive_agent.sh CLONE-DIR REMOTE-URL AGENT OUT-FILE
# Writes "<tasks done> <lost races>" to OUT-FILE. Exit 1 on an error or when an op keeps losing for too long.
set -uo pipefail
dir=$1 url=$2 agent=$3 out=$4
# shellcheck source=floor.sh
source "$(dirname "$0")/floor.sh"
cd "$dir" || exit 1

done_n=0 lost=0
deadline=$((EPOCHSECONDS + ${NAIVE_TIMEOUT:-300}))

# Retry one CAS until it lands. $1 = claim|done, $2 = id ("" for claim: pick the first open task).
# Returns 0 when done, 3 when there is nothing left to claim, 1 on errors.
cas() {
	local op=$1 id=$2 rc hit
	while :; do
		((EPOCHSECONDS < deadline)) || { echo "naive $agent: gave up ($op)" >&2; return 1; }
		floor_fetch "$url" || return 1
		if [[ $op == claim ]]; then
			# `git grep` in the fetched tree: live shards are tasks/<2 hex>/, finished ones are under tasks/done/.
			hit=$(git grep -l -F 'status = "open"' "$FLOOR_BASE" -- 'tasks/??/*.toml' | head -n 1)
			[[ -z $hit ]] && return 3
			id=${hit##*/}
			id=${id%.toml}
		fi
		floor_build "$op" "$id" "$agent"
		rc=$?
		((rc == 1)) && continue # the task changed under us (only if a fetch raced); look again
		((rc == 0)) || return 1
		floor_push "$url"
		rc=$?
		((rc == 0)) && { CLAIMED=$id; return 0; }
		((rc == 1)) || return 1
		lost=$((lost + 1)) # lost race: again, at once
	done
}

while :; do
	cas claim ""
	rc=$?
	((rc == 3)) && break
	((rc == 0)) || { echo "$done_n $lost" >"$out"; exit 1; }
	cas done "$CLAIMED" || { echo "$done_n $lost" >"$out"; exit 1; }
	done_n=$((done_n + 1))
done
echo "$done_n $lost" >"$out"
