#!/usr/bin/env bash
# Install pinned Codex CLI versions from the npm registry into .codex-cli/<version>/
# (ignored by git) and print each binary's path, one per line: "<version> <path>".
# Usage: scripts/install-codex.sh [VERSION ...]   (default: the versions CI tests: tests/agent/test_version_matrix.py)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  versions=(0.169.0 0.47.0 0.135.0 0.147.0 0.171.0)
fi
for v in "${versions[@]}"; do
  if ! [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "install-codex: '$v' is not a version like 0.169.0" >&2
    exit 2
  fi
  dir="$root/.codex-cli/$v"
  bin="$dir/node_modules/.bin/codex"
  # one `codex --version` (a Node.js start, about a second) when it is installed already
  if [ ! -x "$bin" ] || ! "$bin" --version >/dev/null 2>&1; then
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@openai/codex@$v" >&2
    if ! "$bin" --version >/dev/null 2>&1; then
      echo "install-codex: codex $v installed but '$bin --version' fails" >&2
      exit 1
    fi
  fi
  echo "$v $bin"
done
