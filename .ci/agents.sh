#!/usr/bin/env bash
# Install the published agent CLIs that tests/real_agents.rs drives, at the versions the presets are tested with
# (src/agent/preset.rs, `tested`), into one folder: $GIT_SWARM_AGENTS_DIR (default /opt/git-swarm-agents), with
# bin/ holding a link to each CLI. A second run with the same versions changes nothing (a cache for CI).
#
#   .ci/agents.sh            the pinned versions
#   .ci/agents.sh --latest   the newest releases, into $GIT_SWARM_AGENTS_DIR (default /opt/git-swarm-agents-latest)
#
# Needs node + npm and python3 (with venv); the npm and PyPI registries.
set -euo pipefail

latest=0
[[ "${1:-}" == "--latest" ]] && latest=1
if ((latest)); then
  dir="${GIT_SWARM_AGENTS_DIR:-/opt/git-swarm-agents-latest}"
  npm_pkgs=(@anthropic-ai/claude-code@latest @openai/codex@latest @google/gemini-cli@latest opencode-ai@latest)
  pip_pkg="aider-chat"
else
  dir="${GIT_SWARM_AGENTS_DIR:-/opt/git-swarm-agents}"
  npm_pkgs=(@anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 @google/gemini-cli@0.61.0 opencode-ai@1.18.33)
  pip_pkg="aider-chat==0.86.2"
fi
want="${npm_pkgs[*]} $pip_pkg"
if ((!latest)) && [[ -f "$dir/installed.txt" && "$(cat "$dir/installed.txt")" == "$want" ]]; then
  echo "agents: $dir has them already ($want)"
  exit 0
fi
mkdir -p "$dir/bin"
# Readable by every user: the suite also runs each preset as an unprivileged user.
umask 022
echo "agents: npm ${npm_pkgs[*]}"
npm install --prefix "$dir/npm" --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}"
echo "agents: pip $pip_pkg"
# Debian's python, not one under /root (pyenv): the unprivileged user must be able to run it.
py=python3
[[ -x /usr/bin/python3 ]] && /usr/bin/python3 -m venv --help >/dev/null 2>&1 && py=/usr/bin/python3
[[ -x "$dir/aider/bin/python" ]] || "$py" -m venv "$dir/aider"
"$dir/aider/bin/python" -m pip install --quiet --disable-pip-version-check "$pip_pkg"
for cli in claude codex gemini opencode; do
  ln -sfn "../npm/node_modules/.bin/$cli" "$dir/bin/$cli"
done
ln -sfn ../aider/bin/aider "$dir/bin/aider"
chmod -R a+rX "$dir"
for cli in claude codex gemini opencode aider; do
  printf 'agents: %-9s %s\n' "$cli" "$("$dir/bin/$cli" --version 2>&1 | head -n 1)"
done
echo "$want" > "$dir/installed.txt"
