#!/bin/sh
# A scripted agent for git swarm: deterministic planner, worker, conflict resolver and judge, with real edits and
# commits. The tests and `git swarm demo` run it in place of a model. It reads everything from its environment and
# its prompt file, as a real agent would; task text is never evaluated.
#
#   planner  (GIT_SWARM_ROLE=planner): round 1 prints the plan as a ```toml block: the file named by
#            $SCRIPTED_PLAN (depth 0) or $SCRIPTED_SUBPLAN (deeper), else a built-in demo plan; later rounds print
#            an empty block (nothing more to do).
#   worker   (GIT_SWARM_ROLE=worker): runs the directives of its task body, lines of the prompt starting with '@':
#              @write <path> <text>   append a line      @set <path> <text>   replace the file by one line
#              @sleep <secs>          @exit <code>        @hang (sleep for an hour)
#              @nothing (change nothing)                  @commit (commit itself instead of leaving it to the runner)
#              @usage <in> <out> [usd]  report what the run spent in $GIT_SWARM_USAGE_FILE
#              @loop <in>             loop for ever, reporting <in> more input tokens every 0.2 s (a runaway agent)
#              @first-sleep <secs>    sleep, in the task's first claim only (epoch 1)
#              @first-write <path> <text>  @write, in the task's first claim only (epoch 1)
#              @wait-for <path>       wait until the file exists (a test's go-ahead; at most 120 s)
#              @say <text>            print the text on stdout (a line of the agent's output)
#            With GIT_SWARM_CONFLICT=1 it resolves the conflicted files by keeping both sides of every conflict.
#   judge    (GIT_SWARM_ROLE=judge): prints `verdict: <v>`, v from $SCRIPTED_VERDICTS (comma-separated, one per
#            cycle, the last one repeats; default stop).
#   Usage:   $SCRIPTED_CONFLICT_USAGE / $SCRIPTED_JUDGE_USAGE ("<in> <out>") are reported by conflict and judge runs.
set -u
role="${GIT_SWARM_ROLE:-worker}"

# Report usage as a command agent does: one JSON object in $GIT_SWARM_USAGE_FILE (docs/spend.md).
report_usage() {
    [ -n "${GIT_SWARM_USAGE_FILE:-}" ] || return 0
    if [ -n "${3:-}" ]; then
        printf '{"input_tokens": %s, "output_tokens": %s, "cost_usd": %s}\n' "$1" "$2" "$3" > "$GIT_SWARM_USAGE_FILE.tmp"
    else
        printf '{"input_tokens": %s, "output_tokens": %s}\n' "$1" "$2" > "$GIT_SWARM_USAGE_FILE.tmp"
    fi
    mv "$GIT_SWARM_USAGE_FILE.tmp" "$GIT_SWARM_USAGE_FILE"
}
prompt="${GIT_SWARM_PROMPT_FILE:-/dev/null}"
[ -n "${SCRIPTED_DELAY:-}" ] && sleep "$SCRIPTED_DELAY"

demo_plan() {
    cat <<'PLAN'
[[task]]
key = "readme"
title = "Describe the tool in the README"
body = "@write README.md wc-lite counts the lines, words and bytes of its input."
acceptance = "README.md says what wc-lite does"
scope = ["README.md"]

[[task]]
key = "lines"
title = "Count lines"
body = "@set src/lines.sh wc -l"
acceptance = "src/lines.sh exists"
scope = ["src/lines.sh"]

[[task]]
key = "words"
title = "Count words"
body = "@set src/words.sh wc -w"
scope = ["src/words.sh"]

[[task]]
key = "bytes"
title = "Count bytes"
body = "@set src/bytes.sh wc -c"
scope = ["src/bytes.sh"]

[[task]]
key = "usage-a"
title = "Document the line counter"
body = "@write USAGE.md lines: sh src/lines.sh < file"
deps = ["lines"]

[[task]]
key = "usage-b"
title = "Document the word counter"
body = "@write USAGE.md words: sh src/words.sh < file"
deps = ["words"]

[[task]]
key = "tests"
title = "Test suite"
kind = "plan"
body = "An area: split the tests of the tool into tasks."
PLAN
}

demo_subplan() {
    cat <<'PLAN'
[[task]]
title = "Test the line counter"
body = "@set tests/lines.t printf 'a\\nb\\n' | sh src/lines.sh  # expect 2"

[[task]]
title = "Test the word counter"
body = "@set tests/words.t echo 'a b c' | sh src/words.sh  # expect 3"
PLAN
}

case "$role" in
planner)
    echo "Planning round ${GIT_SWARM_ROUND:-1} of ${GIT_SWARM_TASK_ID:-?} (depth ${GIT_SWARM_DEPTH:-0})."
    echo '```toml'
    if [ "${GIT_SWARM_ROUND:-1}" = 1 ]; then
        if [ "${GIT_SWARM_DEPTH:-0}" = 0 ]; then
            if [ -n "${SCRIPTED_PLAN:-}" ]; then cat "$SCRIPTED_PLAN"; else demo_plan; fi
        else
            if [ -n "${SCRIPTED_SUBPLAN:-}" ]; then cat "$SCRIPTED_SUBPLAN"; else demo_subplan; fi
        fi
    fi
    echo '```'
    ;;
judge)
    # shellcheck disable=SC2086
    [ -n "${SCRIPTED_JUDGE_USAGE:-}" ] && report_usage ${SCRIPTED_JUDGE_USAGE}
    n="${GIT_SWARM_CYCLE:-1}"
    v=$(printf '%s\n' "${SCRIPTED_VERDICTS:-stop}" | tr ',' '\n' | sed -n "${n}p")
    [ -z "$v" ] && v=$(printf '%s\n' "${SCRIPTED_VERDICTS:-stop}" | tr ',' '\n' | tail -n 1)
    echo "reasons: scripted judge, cycle $n."
    echo "verdict: $v"
    ;;
worker)
    if [ "${GIT_SWARM_CONFLICT:-}" = 1 ]; then
        # shellcheck disable=SC2086
        [ -n "${SCRIPTED_CONFLICT_USAGE:-}" ] && report_usage ${SCRIPTED_CONFLICT_USAGE}
        # The runner made the merge: the conflicted files hold markers, the index their stages. Keep both sides.
        for f in $(git diff --name-only --diff-filter=U); do
            grep -v -E '^(<<<<<<<|=======|>>>>>>>)' "$f" > "$f.resolved" || true
            mv "$f.resolved" "$f"
        done
        echo "resolved the conflict of ${GIT_SWARM_TASK_ID:-?} by keeping both sides"
        exit 0
    fi
    commit=0
    grep -E '^@(write|set|sleep|first-sleep|first-write|wait-for|exit|hang|nothing|commit|usage|loop|say)' "$prompt" > "${prompt}.directives" || true
    while IFS=' ' read -r cmd path rest; do
        case "$cmd" in
        @write) mkdir -p "$(dirname -- "$path")"; printf '%s\n' "$rest" >> "$path" ;;
        @set) mkdir -p "$(dirname -- "$path")"; printf '%s\n' "$rest" > "$path" ;;
        @sleep) sleep "$path" ;;
        @first-sleep) [ "${GIT_SWARM_EPOCH:-1}" = 1 ] && sleep "$path" ;;
        @first-write) if [ "${GIT_SWARM_EPOCH:-1}" = 1 ]; then mkdir -p "$(dirname -- "$path")"; printf '%s\n' "$rest" >> "$path"; fi ;;
        @exit) echo "exiting with $path as told"; exit "$path" ;;
        @hang) sleep 3600 ;;
        @wait-for) n=0; while [ ! -e "$path" ] && [ "$n" -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done ;;
        @nothing) ;;
        @say) printf '%s %s\n' "$path" "$rest" ;;
        @commit) commit=1 ;;
        @usage)
            out=${rest%% *}; usd=""
            case "$rest" in *" "*) usd=${rest#* } ;; esac
            report_usage "$path" "${out:-0}" "$usd" ;;
        @loop) n=0; while :; do n=$((n + 1)); report_usage $((n * path)) 0; sleep 0.2; done ;;
        esac
    done < "${prompt}.directives"
    if [ "$commit" = 1 ]; then
        git add -A && git commit -q -m "${GIT_SWARM_TASK_TITLE:-work}"
    fi
    if [ -n "${GIT_SWARM_HANDOFF_FILE:-}" ]; then
        printf 'Status: done\n\n## What was done\n%s\n\n## Concerns\nnone\n\n## What is left\nnothing\n' \
            "${GIT_SWARM_TASK_TITLE:-}" > "$GIT_SWARM_HANDOFF_FILE"
    fi
    echo "did ${GIT_SWARM_TASK_ID:-?}"
    ;;
esac
