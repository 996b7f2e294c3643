#!/usr/bin/env bash
# Set up everything coven-codex needs on a fresh machine, idempotently:
# a virtualenv in .venv with the package and its dev tools, and the pinned Codex CLIs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      py="$candidate"; break
    fi
  done
fi
if [ -z "$py" ]; then
  echo "setup: Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: npm (Node.js 18+) is required to install the Codex CLI (apt-get install nodejs npm)" >&2
  exit 1
fi
if ! command -v tmux >/dev/null 2>&1; then
  # the console chat's terminal test runs it under tmux
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq tmux) >&2
  else
    echo "setup: warning: tmux is missing (needed by the terminal test); install it with your package manager" >&2
  fi
fi
if ! command -v chromium >/dev/null 2>&1; then
  # the web page's tests drive Debian's Chromium through Playwright (no browser download)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq chromium) >&2
  else
    echo "setup: warning: chromium is missing (needed by the web page's tests); install it with your package manager" >&2
  fi
fi
if ! command -v redis-server >/dev/null 2>&1; then
  # the Redis journal's tests start their own redis-server (Debian's package, 7.0 or newer)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2
  else
    echo "setup: warning: redis-server is missing (needed by the Redis journal's tests); install it with your package manager" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=.venv/.coven-setup-stamp
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,redis]' >&2
  touch "$stamp"
fi
# An editable install leaves the sources uncompiled, and with PYTHONDONTWRITEBYTECODE set (as in many CI
# images) every daemon, adapter and shim process would compile them again on each start (~0.15 s of CPU
# each): compile them once here (compileall writes regardless, and skips what is up to date).
.venv/bin/python -m compileall -q coven_codex mcp_shim >/dev/null
scripts/install-codex.sh >/dev/null  # its errors still reach stderr; the paths it prints are not news
scripts/install-npm-pinned.sh mcp-sdk-js >/dev/null
scripts/install-npm-pinned.sh mcp-inspector >/dev/null  # the MCP Inspector CLI, for the mcp-serve conformance tests
