"""Shared fixtures: tiny random backbones and word-level tokenizers (fast, offline)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

# the helper modules (fake_sweep, tiny_project, graph_nodes ...) live in tests/support/ and are
# imported by name, by the tests and by the worker processes they start
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
from builders import word_tokenizer, write_jsonl  # noqa: E402 -- tests/support/, on the path from here

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("ANCHORVIZ_JOBS", "1")  # sweeps run in-process unless a test asks for workers
# `bf16: auto` (the default of run configs and of the demo) resolves to float32 in tests on any
# machine, so that run ids and numbers do not depend on the CPU the suite runs on; a test of
# the bfloat16 path sets it (ANCHORVIZ_PRECISION=bf16 runs the whole suite that way)
os.environ.setdefault("ANCHORVIZ_PRECISION", "fp32")
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"


@pytest.fixture
def enc_tok():
    return word_tokenizer("encoder")


@pytest.fixture
def dec_tok():
    return word_tokenizer("decoder")


@pytest.fixture
def count_training(monkeypatch):
    """The ``desc`` of every ``train_reward_model`` call the pipeline makes (in this process)."""
    from anchorviz.training.loop import train_reward_model

    calls = []
    real = train_reward_model

    def counting(*a, **k):
        calls.append(k.get("desc"))
        return real(*a, **k)

    monkeypatch.setattr("anchorviz.pipeline.steps.train_reward_model", counting)
    return calls


# --------------------------------------------------------------------------- smoke sweeps

#: a bound on training the smoke sweeps (a hang, not a slow machine: on 2 busy cores it takes
#: tens of minutes)
SMOKE_TRAIN_LIMIT_S = 3 * 3600

_TRAIN_SMOKE_SWEEPS = """
import sys
sys.path.insert(0, sys.argv[1])
import _smoke
# notebook 03's sweeps in smoke mode (one per teacher visibility, two lambdas): their runs
# hold those of the demo sweep that notebooks 01 and 02 read, and the launcher's run of 03
sweeps = _smoke.explorer_configs(True, visibilities=sorted(_smoke.explorer_visibilities(True)),
                                 anchor_lambdas=[1.0, 10.0])
assert _smoke.sweep_run_ids(_smoke.demo_config(True)) <= _smoke.sweep_run_ids(sweeps)
_smoke.ensure_sweep(sweeps, _smoke.sweep_dir(sys.argv[2], True))
"""


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory) -> Path:
    """The runs folder (``ANCHORVIZ_NOTEBOOK_RUNS``) of the notebook and browser tests, with
    the smoke sweeps of notebooks 01-03 trained once per test session, before any of them runs.

    A test using it should time only its own call (``@pytest.mark.timeout(..., func_only=True)``)
    so that no per-test timeout is spent training: the training runs in a subprocess of its own
    bounded by ``SMOKE_TRAIN_LIMIT_S``. ``$ANCHORVIZ_TEST_NOTEBOOK_RUNS`` reuses a folder across
    sessions instead (a local shortcut: runs of older code in it would be reused too)."""
    env_runs = os.environ.get("ANCHORVIZ_TEST_NOTEBOOK_RUNS")
    runs = Path(env_runs) if env_runs else tmp_path_factory.mktemp("notebook-runs", numbered=False)
    runs.mkdir(parents=True, exist_ok=True)
    log_path = runs / "smoke-training.log"
    env = dict(os.environ, ANCHORVIZ_SMOKE="1", TQDM_DISABLE="1")
    t0 = time.perf_counter()
    with open(log_path, "a") as log:
        proc = subprocess.Popen([sys.executable, "-c", _TRAIN_SMOKE_SWEEPS, str(NOTEBOOK_DIR),
                                 str(runs)], cwd=runs, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=SMOKE_TRAIN_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    if code != 0:
        tail = log_path.read_text()[-4000:]
        why = f"did not finish in {SMOKE_TRAIN_LIMIT_S} s" if code is None else f"exited {code}"
        pytest.fail(f"training the smoke sweeps {why} (log {log_path}):\n{tail}", pytrace=False)
    print(f"smoke sweeps ready in {time.perf_counter() - t0:.0f} s")
    return runs


# --------------------------------------------------------------------------- bad-input helpers


@pytest.fixture
def hh_file(tmp_path: Path) -> Path:
    """The HH-RLHF rows of tests/support/pair_rows.py as a local ``test.jsonl`` (adapter and reader tests)."""
    from pair_rows import HH_ROWS

    return write_jsonl(tmp_path / "test.jsonl", HH_ROWS)


