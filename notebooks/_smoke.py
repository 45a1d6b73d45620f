"""Shared set-up of the notebooks: the demo sweep they all read, small in smoke mode.

Every notebook starts with a parameters cell that reads ``ANCHORVIZ_SMOKE`` and
``ANCHORVIZ_NOTEBOOK_RUNS``; the helpers here turn those two values into the one sweep the
notebooks share, so that 01, 02 and 03 ask for exactly the same runs (same configs, same
content hashes) and a run finished by one notebook is reused, not retrained, by the next.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from anchorviz.cli import demo_sweep
from anchorviz.experiment import (
    SweepConfig,
    expand_sweep,
    run_id_for,
    student_key,
    sweep,
    teacher_key,
    with_overrides,
)

#: the artefact strength of the teaching story (fraction of source pairs carrying the marker)
STRENGTH = 0.8


def demo_config(smoke: bool, strengths: list[float] | None = None,
                anchor_lambdas: list[float] | None = None) -> SweepConfig:
    """The demo sweep of ``anchorviz demo`` (``--quick`` with 1 epoch in smoke mode).

    ``strengths`` adds artefact strengths to the grid (the explorer's selector);
    ``anchor_lambdas`` replaces the demo's lambda grid (smoke mode has one lambda only).
    """
    sw = demo_sweep(strength=STRENGTH, quick=smoke)
    if smoke:  # one epoch each: a first look in a minute or two, not a result
        sw.base = with_overrides(sw.base, **{"teacher_train.epochs": 1,
                                             "student_train.epochs": 1})
    if strengths is not None:
        sw.artifact_strengths = [float(s) for s in strengths]
    if anchor_lambdas is not None:
        sw.anchor_lambdas = [float(v) for v in anchor_lambdas]
    return sw


def sweep_dir(runs: str | os.PathLike, smoke: bool) -> Path:
    """The demo sweep's folder inside the notebooks' runs folder."""
    return Path(runs) / ("demo-smoke" if smoke else "demo")


def sweep_run_ids(sw: SweepConfig) -> set[str]:
    """The run ids (content hashes) of every teacher, ceiling and student of a sweep."""
    ids = set()
    for cfg in expand_sweep(sw):
        ids.add(run_id_for(teacher_key(cfg)))
        if cfg.ceiling:
            ids.add(run_id_for(student_key(cfg, "ceiling")))
        ids.add(run_id_for(student_key(cfg, "student")))
    return ids


def ensure_sweep(sw: SweepConfig, folder: str | os.PathLike):
    """Run the sweep (finished runs are read, not recomputed) and return the results rows of
    exactly this sweep: a runs folder may also hold other runs (a wider sweep of notebook 03,
    the launcher's runs, runs of an older version whose settings differed)."""
    results = sweep(sw, folder)
    return results[results["run_id"].isin(sweep_run_ids(sw))].reset_index(drop=True)


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub can be reached (and is not switched off by HF_HUB_OFFLINE)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("ANCHORVIZ_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False
