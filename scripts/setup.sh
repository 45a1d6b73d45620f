#!/usr/bin/env bash
# Create .venv and install anchorviz with its dev tools and the Ray backend (CPU build of torch
# first: a plain `torch` requirement would pull a multi-GB CUDA build; ray does not depend on
# torch, so it keeps that build). Idempotent; safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,ray]"
