#!/usr/bin/env bash
# The test suite (README's test command runs this after set-up). Notebooks run in smoke mode.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${VIRTUAL_ENV:-}" ] || . .venv/bin/activate
export ANCHORVIZ_SMOKE=1
python -m pytest -q -p no:cacheprovider --timeout=1200 "$@"
