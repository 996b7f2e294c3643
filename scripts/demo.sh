#!/usr/bin/env bash
# Set up (idempotently), then run the offline demo. Arguments go to `coven-codex demo`,
# e.g. scripts/demo.sh --script "what is 2 plus 3?"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
exec .venv/bin/coven-codex demo "$@"
