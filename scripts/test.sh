#!/usr/bin/env bash
# The whole test suite, as CI runs it (README's test command runs this after set-up); notebooks
# run in smoke mode. The fast tier: bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${VIRTUAL_ENV:-}" ] || . .venv/bin/activate
export ANCHORVIZ_SMOKE=1
python -m pytest -q -p no:cacheprovider --timeout=1200 "$@"
