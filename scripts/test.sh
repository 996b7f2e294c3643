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
echo "== import-linter (the layers of docs/architecture.md)" && .venv/bin/lint-imports --no-cache
if [ $# -gt 0 ]; then
  echo "== pytest" && exec .venv/bin/python -m pytest "$@"
fi
# Every test but the releases of the version matrix beyond the CI ones (run those with:
# scripts/test.sh -m matrix tests/agent/test_version_matrix.py), the slow ones included, in two passes:
# first the tests marked `serial` (they measure CPU, wake-ups or latency, or load the machine themselves),
# one at a time with the machine to themselves; then every other test on COVEN_TEST_WORKERS workers
# (pytest-xdist; most of a test's time is waiting on Codex, so more workers than cores pay).
workers="${COVEN_TEST_WORKERS:-4}"
# pytest caches the test modules it rewrites only when bytecode may be written: without this, each of
# the five pytest processes below would rewrite every test module again (~7 s of CPU each).
unset PYTHONDONTWRITEBYTECODE
status=0
echo "== pytest (serial: one at a time)"
.venv/bin/python -m pytest -m "serial and not matrix" || status=$?
echo "== pytest (parallel: $workers workers)"
.venv/bin/python -m pytest -n "$workers" --dist worksteal -m "not serial and not matrix" || status=$?
exit "$status"
