"""The runs a sweep folder's grid expects, and which of them the folder lacks.

A sweep stores its grid in ``<sweep folder>/sweep.yaml`` (`anchorviz.pipeline.sweep.sweep`);
rebuilding its run graph gives the run ids it should hold (the content hashes follow the inputs
as they are now), so a report or a console table can name the runs that are missing or
unreadable, and tell rows of the current grid from stale ones (older inputs, another grid).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

logger = logging.getLogger(__name__)

__all__ = ["SWEEP_FILE", "current_rows", "expected_runs", "missing_runs", "run_ids_of"]

SWEEP_FILE = "sweep.yaml"  # written by `sweep` next to runs/


def run_ids_of(configs: Iterable) -> dict[str, str]:
    """``{run id: kind}`` of the teacher, ceiling and student runs of ``RunConfig`` objects
    (reference captures are shared artefacts, not runs)."""
    from anchorviz.pipeline.runner import build_graph

    return {n.id: n.kind for n in build_graph(configs) if n.kind != "reference"}


def expected_runs(sweep_dir: str | Path) -> dict[str, str] | None:
    """``{run id: kind}`` the grid in ``<sweep_dir>/sweep.yaml`` expects; None when there is no
    such file (a folder of ``anchorviz run``). Raises ValueError naming the file when it cannot
    be read as a sweep."""
    from anchorviz.config import config_from_dict
    from anchorviz.paths import read_yaml
    from anchorviz.sweep_config import SweepConfig, expand_sweep

    path = Path(sweep_dir) / SWEEP_FILE
    if not path.is_file():
        return None
    try:
        # as `sweep` wrote it: the base config and every SweepConfig field (None included)
        stored = read_yaml(path)
        sw = SweepConfig(base=config_from_dict(stored["base"], f"{path}: base"),
                         **stored["grid"])
        return run_ids_of(expand_sweep(sw))
    except Exception as err:  # noqa: BLE001 - any failure: the grid cannot be rebuilt
        raise ValueError(f"{path}: cannot rebuild the sweep's grid ({type(err).__name__}: "
                         f"{err})") from err


def missing_runs(sweep_dir: str | Path) -> dict[str, str]:
    """``{run id: why}`` for every run the sweep's grid expects that is not finished and
    readable in the folder (``"<kind>: missing"`` or ``"<kind>: unreadable (<why>)"``); empty
    when the folder has no ``sweep.yaml``."""
    from anchorviz.pipeline.store import RunStore

    want = expected_runs(sweep_dir)
    if not want:
        return {}
    runs = Path(sweep_dir) / "runs"
    finished, bad = RunStore(sweep_dir).scan() if runs.is_dir() else ([], {})
    done = set(finished)
    out = {}
    for run_id, kind in want.items():
        if run_id in bad:
            out[run_id] = f"{kind}: unreadable ({bad[run_id]})"
        elif run_id not in done:
            out[run_id] = f"{kind}: missing (no finished run folder)"
    return out


def current_rows(df: pd.DataFrame, run_ids: Iterable[str]) -> tuple[pd.DataFrame, int]:
    """``(rows of df whose run_id is in run_ids, how many other rows were left out)``: the rows
    of the grid just run, not stale ones from older inputs or another grid in the folder."""
    ids = set(run_ids)
    keep = df["run_id"].isin(ids) if "run_id" in df else pd.Series(False, index=df.index)
    out = df[keep].reset_index(drop=True)
    out.attrs.update(df.attrs)
    return out, int((~keep).sum())
