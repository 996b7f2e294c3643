#!/usr/bin/env bash
# Set up, then run the checks and every test, including the slow crash tests (what CI runs).
# Extra arguments replace the test selection and go to pytest, e.g. scripts/test.sh tests/journal
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
echo "== ruff" && .venv/bin/ruff check coven_codex mcp_shim tests benchmarks examples
echo "== ruff format" && .venv/bin/ruff format --check coven_codex mcp_shim tests benchmarks examples
echo "== mypy --strict" && .venv/bin/mypy
if [ $# -eq 0 ]; then
  # plain `pytest` leaves out the slow tests; CI runs them all, but not the releases of the
  # version matrix beyond the CI ones (run those with: scripts/test.sh -m matrix tests/agent/test_version_matrix.py)
  set -- -m "not matrix"
fi
echo "== pytest" && .venv/bin/python -m pytest "$@"
