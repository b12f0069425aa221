# shellcheck shell=bash
# The raw-git floor: one compare-and-swap of refs/swarm/default done with git plumbing only, the way a careful
# shell script would do it. Sourced by run.sh and naive_agent.sh; run from inside a clone.
#
# It writes the same tree layout as git swarm (a live task at tasks/<2hex>/<id>.toml, a finished one moved to
# tasks/done/<2hex>/<id>.toml) and valid task TOML, so `git swarm list` can read a board it produced.
#
#   floor_fetch URL                -> sets FLOOR_BASE (the tip of the remote's state ref)
#   floor_build claim|done ID AGENT -> sets FLOOR_NEW (a commit on FLOOR_BASE); returns 1 if the op makes no sense
#   floor_push URL                 -> CAS of the ref from FLOOR_BASE to FLOOR_NEW; returns 1 on a lost race
#   floor_op URL claim|done ID AGENT: all three once; FLOOR_T_FETCH/_BUILD/_PUSH hold the split (seconds)
#
# Subprocesses per op: claim 11 (fetch, 3 ls-tree, cat-file, hash-object, 3 mktree, commit-tree, push),
# done 15 (5 trees change: tasks/<sh>, tasks/done/<sh>, tasks/done, tasks, root).

FLOOR_REF=refs/swarm/default

floor_fetch() {
	local out line
	# --porcelain -v prints "<flag> <old> <new> <local ref>", also when the ref did not move; the flag may be a
	# space. -v also makes git:// fetches chatty on stderr, so both streams are read and the ref line picked out.
	out=$(git fetch --porcelain -v --no-tags --no-write-fetch-head --no-auto-gc --no-recurse-submodules \
		"$1" "+$FLOOR_REF:refs/x/floor" 2>&1) || { echo "floor: fetch failed: $out" >&2; return 2; }
	while IFS= read -r line; do
		[[ $line =~ ^.\ [0-9a-f]{40}\ ([0-9a-f]{40})\ refs/x/floor$ ]] && FLOOR_BASE=${BASH_REMATCH[1]} && return 0
	done <<<"$out"
	echo "floor: cannot parse fetch output: $out" >&2
	return 2
}

# _tree_edit LISTING NAME SHA [NAME SHA]... -> mktree of LISTING (ls-tree output) with each NAME set to SHA (a blob
# when NAME ends in .toml, else a tree), or removed when SHA is empty. Prints the new tree id, or nothing when the
# tree would be empty (the caller then removes its entry, as git swarm does).
_tree_edit() {
	local listing=$1 out="" line name kind
	shift
	local -A edit=()
	while (($#)); do edit[$1]=$2; shift 2; done
	while IFS= read -r line; do
		[[ -z $line ]] && continue
		name=${line#*$'\t'}
		[[ -v "edit[$name]" ]] && continue
		out+=$line$'\n'
	done <<<"$listing"
	for name in "${!edit[@]}"; do
		[[ -z ${edit[$name]} ]] && continue
		[[ $name == *.toml ]] && kind="100644 blob" || kind="040000 tree"
		out+="$kind ${edit[$name]}"$'\t'"$name"$'\n'
	done
	[[ -z $out ]] && return 0
	printf '%s' "$out" | git mktree
}

floor_build() {
	local op=$1 id=$2 agent=$3 sh=${2:2:2} base=$FLOOR_BASE
	local now lease text epoch blob root tasks shard t_shard t_tasks t_root
	printf -v now '%(%Y-%m-%dT%H:%M:%SZ)T' -1
	printf -v lease '%(%Y-%m-%dT%H:%M:%SZ)T' $((EPOCHSECONDS + 600))
	root=$(git ls-tree "$base") || return 2
	tasks=$(git ls-tree "$base:tasks") || return 2
	shard=$(git ls-tree "$base:tasks/$sh" 2>/dev/null) || return 1   # no such shard: not a live task
	text=$(git cat-file blob "$base:tasks/$sh/$id.toml" 2>/dev/null) || return 1
	[[ $text =~ $'\n'epoch\ =\ ([0-9]+) ]] && epoch=${BASH_REMATCH[1]} || epoch=0
	text=${text%%$'\n\n['*}   # drop the [claim] table; keep the task's own fields
	case $op in
	claim)
		[[ $text == *'status = "open"'* ]] || return 1
		text=${text/status = \"open\"/status = \"claimed\"}
		text=${text/$'\n'epoch = $epoch/$'\n'epoch = $((epoch + 1))}
		text+=$'\n\n[claim]\n'"agent = \"$agent\""$'\n'"epoch = $((epoch + 1))"$'\n'"lease_until = \"$lease\""$'\n'
		blob=$(printf '%s' "$text" | git hash-object -w --stdin) || return 2
		t_shard=$(_tree_edit "$shard" "$id.toml" "$blob") || return 2
		t_tasks=$(_tree_edit "$tasks" "$sh" "$t_shard") || return 2
		;;
	done)
		[[ $text == *'status = "claimed"'* ]] || return 1
		text=${text/status = \"claimed\"/status = \"done\"}
		text+=$'\n\n[result]\n'"agent = \"$agent\""$'\n'"epoch = $epoch"$'\n'"at = \"$now\""$'\n'
		blob=$(printf '%s' "$text" | git hash-object -w --stdin) || return 2
		local dtree dshard t_dshard t_done
		dtree=$(git ls-tree "$base:tasks/done" 2>/dev/null) || dtree=""
		dshard=$(git ls-tree "$base:tasks/done/$sh" 2>/dev/null) || dshard=""
		t_dshard=$(_tree_edit "$dshard" "$id.toml" "$blob") || return 2
		t_done=$(_tree_edit "$dtree" "$sh" "$t_dshard") || return 2
		t_shard=$(_tree_edit "$shard" "$id.toml" "") || return 2
		t_tasks=$(_tree_edit "$tasks" "$sh" "$t_shard" done "$t_done") || return 2
		;;
	*) echo "floor: unknown op $op" >&2; return 2 ;;
	esac
	t_root=$(_tree_edit "$root" tasks "$t_tasks") || return 2
	FLOOR_NEW=$(git commit-tree "$t_root" -p "$base" -m "$op $id" -m "Swarm-Op: $op
Swarm-Task: $id
Swarm-Agent: $agent") || return 2
}

floor_push() {
	local out
	out=$(git push --porcelain --no-verify --force-with-lease="$FLOOR_REF:$FLOOR_BASE" \
		"$1" "$FLOOR_NEW:$FLOOR_REF" 2>/dev/null) && return 0
	[[ $out == *$'\n!\t'*'[rejected]'* || $out == *$'\n!\t'*'[remote rejected]'* ]] && return 1
	echo "floor: push failed: $out" >&2
	return 2
}

floor_op() {
	local url=$1 op=$2 id=$3 agent=$4 t0 t1 t2 t3 rc
	t0=$EPOCHREALTIME
	floor_fetch "$url" || return 2
	t1=$EPOCHREALTIME
	floor_build "$op" "$id" "$agent" || { rc=$?; echo "floor: cannot $op $id" >&2; return "$rc"; }
	t2=$EPOCHREALTIME
	floor_push "$url" || return $?
	t3=$EPOCHREALTIME
	FLOOR_T_FETCH=$(_sub "$t1" "$t0") FLOOR_T_BUILD=$(_sub "$t2" "$t1") FLOOR_T_PUSH=$(_sub "$t3" "$t2")
}

# _sub A B -> A-B for two $EPOCHREALTIME values, in seconds, without forking.
_sub() {
	local a=${1/./} b=${2/./} d
	d=$((10#$a - 10#$b))
	printf '%d.%06d' $((d / 1000000)) $((d % 1000000))
}
