"""The runs a sweep folder's grids expect, and which of them the folder lacks.

Every ``anchorviz sweep`` / ``run`` on a folder records what it was asked for as one *grid
file*, ``<folder>/grids/<kind>-<hash>.yaml`` (`record_grid`; ``kind`` is ``sweep`` or
``run``, ``hash`` that of the sweep or run config), so several sweeps with different grids on
one folder are recorded side by side instead of the last one overwriting the other; the
latest sweep's grid is also ``<folder>/sweep.yaml``, written atomically. Rebuilding a grid's
run graph gives the run ids it should hold (the content hashes follow the inputs as they are
now), so a report or a console table can name the runs that are missing or unreadable (of
every grid, an ``anchorviz run`` folder's included), and tell the rows of another grid from
stale ones (older inputs). A folder written before grid files existed falls back to its
``sweep.yaml``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from anchorviz.config import config_from_dict
from anchorviz.paths import read_yaml, write_atomic
from anchorviz.pipeline.runner import build_graph
from anchorviz.pipeline.store import RunStore, config_hash
from anchorviz.sweep_config import SweepConfig, expand_sweep

logger = logging.getLogger(__name__)

__all__ = ["GRIDS_DIR", "SWEEP_FILE", "Grid", "current_rows", "expected_runs", "grids",
           "missing_runs", "other_grid_rows", "record_grid", "run_ids_of"]

SWEEP_FILE = "sweep.yaml"  # written by `sweep` next to runs/ (the latest sweep's grid)
GRIDS_DIR = "grids"  # one file per sweep / run config asked for on the folder


@dataclass
class Grid:
    """One recorded grid of a folder: ``id`` (its file's stem), ``kind`` (``sweep`` / ``run``),
    ``path``, ``written_at`` (when a command last asked for it), ``command`` (that command
    line, when recorded), ``run_ids`` (``{run id: kind}`` it expects with the inputs as they
    are now; empty when ``error`` says why it cannot be rebuilt)."""

    id: str
    kind: str
    path: Path
    written_at: str
    command: str
    run_ids: dict[str, str]
    error: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} grid {self.id.split('-', 1)[-1]}"


def record_grid(folder: str | Path, kind: str, payload: dict, command: str = "") -> Path:
    """Write ``payload`` (a sweep's ``{"base", "grid"}``, or a run's ``{"config"}``) as the grid
    file ``<folder>/grids/<kind>-<hash>.yaml`` (atomically; the same grid asked for again
    rewrites its own file with the new time). Returns the file."""
    import time

    if kind not in ("sweep", "run"):
        raise ValueError(f"grid kind must be 'sweep' or 'run', got {kind!r}")
    folder = Path(folder) / GRIDS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}-{config_hash(payload)}.yaml"
    text = yaml.safe_dump({"kind": kind, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                           "command": command, **payload}, sort_keys=False)
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path


def _configs_of(stored: dict, path: Path) -> list:
    if not isinstance(stored, dict):
        raise ValueError("not a mapping")
    if stored.get("kind", "sweep") == "run":
        return [config_from_dict(stored["config"], f"{path}: config")]
    sw = SweepConfig(base=config_from_dict(stored["base"], f"{path}: base"), **stored["grid"])
    return expand_sweep(sw)


def grids(folder: str | Path) -> list[Grid]:
    """Every grid recorded in ``folder`` (`record_grid`), oldest first; a folder without grid
    files but with a ``sweep.yaml`` (written before grid files existed) gives that one grid;
    [] when there is neither. A grid file that cannot be rebuilt is a `Grid` with ``error``."""
    folder = Path(folder)
    files = sorted((folder / GRIDS_DIR).glob("*.yaml")) if (folder / GRIDS_DIR).is_dir() else []
    if not files and (folder / SWEEP_FILE).is_file():
        files = [folder / SWEEP_FILE]
    out = []
    for path in files:
        stored: object = {}
        try:
            stored = read_yaml(path)
            ids = run_ids_of(_configs_of(stored, path))
            err = None
        except Exception as exc:  # noqa: BLE001 - any failure: the grid cannot be rebuilt
            ids = {}
            err = f"{path}: cannot rebuild the grid ({type(exc).__name__}: {exc})"
        stored = stored if isinstance(stored, dict) else {}
        out.append(Grid(id=path.stem, kind=str(stored.get("kind", "sweep")), path=path,
                        written_at=str(stored.get("written_at", "")),
                        command=str(stored.get("command", "")), run_ids=ids, error=err))
    return sorted(out, key=lambda g: (g.written_at, g.id))


def run_ids_of(configs: Iterable) -> dict[str, str]:
    """``{run id: kind}`` of the teacher, ceiling and student runs of ``RunConfig`` objects
    (reference captures are shared artefacts, not runs)."""
    return {n.id: n.kind for n in build_graph(configs) if n.kind != "reference"}


def expected_runs(sweep_dir: str | Path) -> dict[str, str] | None:
    """``{run id: kind}`` the grid in ``<sweep_dir>/sweep.yaml`` expects; None when there is no
    such file (a folder of ``anchorviz run``). Raises ValueError naming the file when it cannot
    be read as a sweep."""
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
    """``{run id: why}`` for every run a grid of the folder (`grids`: every sweep and run asked
    for on it, or its ``sweep.yaml``) expects that is not finished and readable in the folder
    (``"<kind>: missing"`` or ``"<kind>: unreadable (<why>)"``, followed by the grid when the
    folder holds several); empty when no grid is recorded. Raises ValueError naming the file
    when a grid cannot be rebuilt."""
    found = grids(sweep_dir)
    for g in found:
        if g.error:
            raise ValueError(g.error)
    if not any(g.run_ids for g in found):
        return {}
    runs = Path(sweep_dir) / "runs"
    finished, bad = RunStore(sweep_dir).scan() if runs.is_dir() else ([], {})
    done = set(finished)
    out: dict[str, str] = {}
    for g in found:
        where = f" [{g.label}]" if len(found) > 1 else ""
        for run_id, kind in g.run_ids.items():
            if run_id in out:
                continue
            if run_id in bad:
                out[run_id] = f"{kind}: unreadable ({bad[run_id]}){where}"
            elif run_id not in done:
                out[run_id] = f"{kind}: missing (no finished run folder){where}"
    return out


def other_grid_rows(df: pd.DataFrame, folder: str | Path, run_ids: Iterable[str]
                    ) -> dict[str, int]:
    """``{grid label: rows}``: how many rows of ``df`` outside ``run_ids`` belong to each other
    grid recorded in ``folder`` (the rest of the rows outside ``run_ids`` are stale: older
    inputs)."""
    ids = set(run_ids)
    rows = set(df["run_id"]) - ids if "run_id" in df else set()
    out: dict[str, int] = {}
    for g in grids(folder):
        n = len(rows & set(g.run_ids))
        if n:
            out[g.label] = n
            rows -= set(g.run_ids)
    return out


def current_rows(df: pd.DataFrame, run_ids: Iterable[str]) -> tuple[pd.DataFrame, int]:
    """``(rows of df whose run_id is in run_ids, how many other rows were left out)``: the rows
    of the grid just run, not stale ones from older inputs or another grid in the folder."""
    ids = set(run_ids)
    keep = df["run_id"].isin(ids) if "run_id" in df else pd.Series(False, index=df.index)
    out = df[keep].reset_index(drop=True)
    out.attrs.update(df.attrs)
    return out, int((~keep).sum())
