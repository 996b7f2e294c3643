#!/usr/bin/env bash
# Set up, then run the checks and the default test suite (what CI runs).
# Extra arguments go to pytest, e.g. scripts/test.sh -m slow
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
echo "== ruff" && .venv/bin/ruff check coven_codex mcp_shim tests benchmarks examples
echo "== mypy --strict" && .venv/bin/mypy
echo "== pytest" && .venv/bin/python -m pytest "$@"
