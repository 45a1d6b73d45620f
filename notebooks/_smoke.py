"""Shared set-up of the notebooks: the demo sweep they all read, small in smoke mode.

Every notebook starts with a parameters cell that reads ``ANCHORVIZ_SMOKE`` and
``ANCHORVIZ_NOTEBOOK_RUNS``; the helpers here turn those two values into the one sweep the
notebooks share. Full size, it is exactly the sweep of ``anchorviz demo`` (same settings, so
the same content-hashed run ids) in the demo's own folder ``runs/demo``: runs that the demo
(``bash scripts/demo.sh``) or another notebook finished are read, never trained again.
:func:`describe_plan` (``anchorviz.pipeline.plan``) says before a training cell how many runs
are missing and roughly how many minutes they cost. The demo's options are
``anchorviz.pipeline.demo.DemoOptions``, the ones ``anchorviz demo`` reads.

Notebook 03 adds the teacher-visibility knob of the hidden-cue scenario: one demo sweep per
visibility (:func:`explorer_configs`), each with the run ids of ``anchorviz demo --visibility V``,
in a folder of their own (:func:`explorer_dir`, ``runs/demo-visibility``: the demo's folder then
holds only the demo's setting, and its report never reads several visibilities as seeds); the
demo's finished runs are copied in from ``runs/demo`` (:func:`copy_finished_runs`), not retrained;
:func:`plan`, :func:`describe_plan` and :func:`ensure_sweep` take such a list as well as one
sweep (the list is trained as one run graph, so its runs share the workers). Notebook 03 trains
only when asked (its ``TRAIN`` flag, or smoke mode): by default :func:`stored_sweep` reads the
runs already finished, training nothing, and ``describe_plan(..., train=False)`` says what is
missing and how to train it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from anchorviz.config import with_overrides
from anchorviz.pipeline.demo import OVERLAYS, SCENARIOS, DemoOptions
from anchorviz.pipeline.plan import (  # noqa: F401 -- the notebooks call them as _smoke.<name>
    describe_plan,
    run_finished,
    run_minutes,
    sweep_plan,
    sweep_run_ids,
    sweep_runs,
)
from anchorviz.pipeline.results import results_table
from anchorviz.pipeline.runner import build_graph
from anchorviz.pipeline.sweep import sweep
from anchorviz.sweep_config import SweepConfig

Sweeps = SweepConfig | Sequence[SweepConfig]
plan = sweep_plan  # the name notebook 04 calls

if os.environ.get("ANCHORVIZ_NOTEBOOK_RENDERER"):  # scripts/execute_notebooks.py: static images
    import plotly.io as pio

    pio.renderers.default = os.environ["ANCHORVIZ_NOTEBOOK_RENDERER"]

#: ``anchorviz demo`` without options (the command line's defaults are these fields')
DEMO = DemoOptions()

#: the artefact strength of the teaching story (fraction of source pairs carrying the marker):
#: what ``anchorviz demo`` runs without ``--strength`` (its settings file's)
STRENGTH = float(DEMO.sweep().base.data.artifact_strength if DEMO.strength is None
                 else DEMO.strength)
#: the seeds of ``anchorviz demo`` without ``--seeds`` (None: its settings file's, five; one in
#: smoke mode, as ``--quick``)
DEMO_SEEDS = None if DEMO.seeds is None else list(DEMO.seeds)


def demo_config(smoke: bool, strengths: list[float] | None = None,
                anchor_lambdas: list[float] | None = None,
                seeds: list[int] | None = None, scenario: str | None = None,
                visibility: float | None = None) -> SweepConfig:
    """The demo sweep of ``anchorviz demo`` (``--quick`` with 1 epoch in smoke mode).

    ``strengths`` adds artefact strengths to the grid (the explorer's selector);
    ``anchor_lambdas`` replaces the demo's lambda grid (smoke mode has one lambda only);
    ``seeds`` replaces the demo's default seeds (as ``anchorviz demo --seeds`` does);
    ``scenario`` / ``visibility`` are ``anchorviz demo --scenario`` / ``--visibility`` (None:
    the demo's default scenario at its own teacher visibility).
    """
    chosen = seeds or DEMO_SEEDS
    opts = dataclasses.replace(DEMO, strength=STRENGTH, quick=smoke,
                               seeds=tuple(chosen) if chosen else None)
    if scenario is not None:
        opts = dataclasses.replace(opts, scenario=scenario)
    if visibility is not None:
        opts = dataclasses.replace(opts, visibility=float(visibility))
    sw = opts.sweep()
    if smoke:  # one epoch each: a first look in a minute or two, not a result
        sw.base = with_overrides(sw.base, **{"teacher_train.epochs": 1,
                                             "student_train.epochs": 1})
    if strengths is not None:
        sw.artifact_strengths = [float(s) for s in strengths]
    if anchor_lambdas is not None:
        sw.anchor_lambdas = [float(v) for v in anchor_lambdas]
    return sw


def scenario_visibility(scenario: str | None = None) -> float:
    """The teacher visibility of the marker in a demo scenario (None: the demo's default)."""
    return float(SCENARIOS[scenario or DEMO.scenario])


def explorer_visibilities(smoke: bool) -> list[float]:
    """The teacher visibilities notebook 03 shows by default: every scenario's value in smoke
    mode (two), and 0.25 as well at full size (the gain that a hidden cue buys should rise and
    fall between 0 and 1)."""
    values = {float(v) for k, v in SCENARIOS.items() if k not in OVERLAYS} | {scenario_visibility()}
    if not smoke:
        values.add(0.25)
    return sorted(values)


def explorer_configs(smoke: bool, seeds: list[int] | None = None,
                     visibilities: list[float] | None = None,
                     anchor_lambdas: list[float] | None = None) -> list[SweepConfig]:
    """The sweeps of notebook 03: the demo sweep at the default scenario's teacher visibility
    (the demo's run ids), then one per other visibility in ``visibilities`` (None:
    :func:`explorer_visibilities`), each that of ``anchorviz demo --visibility V``.

    The others run on the demo's detail seeds only (``seeds`` None: seed 0, where the demo runs
    its whole grid; the demo's other seeds hold only the verdict's teacher and naive student),
    so a visibility costs a seed's grid, not five. Smoke mode keeps them cheaper still: their
    teacher and naive student only (no ceiling, no ANCHOR), so the visibility slider has
    somewhere to go for the naive student, and the explorer says so for the methods that were
    not trained there."""
    main = scenario_visibility()
    others = [float(v) for v in (visibilities or explorer_visibilities(smoke))
              if not math.isclose(float(v), main)]
    out = [demo_config(smoke, anchor_lambdas=anchor_lambdas, seeds=seeds)]
    for v in others:
        sw = demo_config(smoke, anchor_lambdas=anchor_lambdas, seeds=seeds, visibility=v)
        if seeds is None and sw.detail_seeds:
            sw.seeds = list(sw.detail_seeds)
        if smoke:  # teacher + naive student; the run keys do not hold `ceiling` or the grid
            sw.methods = ["naive"]
            sw.base = with_overrides(sw.base, ceiling=False)
        out.append(sw)
    return out


def sweep_dir(runs: str | os.PathLike, smoke: bool) -> Path:
    """The demo sweep's folder inside the runs folder: ``<runs>/demo``, the folder
    ``anchorviz demo`` writes by default when ``runs`` is the repository's ``runs/``
    (``<runs>/demo-smoke`` in smoke mode, whose 1-epoch runs are not the demo's)."""
    return Path(runs) / ("demo-smoke" if smoke else "demo")


def explorer_dir(runs: str | os.PathLike, smoke: bool) -> Path:
    """Notebook 03's folder: ``<runs>/demo-visibility`` (``-smoke`` in smoke mode), its own, so
    that its runs at other teacher visibilities never land in the demo's folder."""
    return Path(runs) / ("demo-visibility-smoke" if smoke else "demo-visibility")


def copy_finished_runs(sw: Sweeps, src: str | os.PathLike, dst: str | os.PathLike) -> int:
    """Copy the finished runs of ``sw`` that ``src`` holds and ``dst`` lacks (run folders are
    content-addressed and self-verifying, so a copy is the same run); returns how many."""
    src, dst = Path(src), Path(dst)
    n = 0
    for rid in sorted(sweep_run_ids(sw)):
        if run_finished(src, rid) and not (dst / "runs" / rid).exists():
            (dst / "runs").mkdir(parents=True, exist_ok=True)
            shutil.copytree(src / "runs" / rid, dst / "runs" / f".copy-{rid}")
            os.rename(dst / "runs" / f".copy-{rid}", dst / "runs" / rid)
            n += 1
    return n


def ensure_sweep(sw: Sweeps, folder: str | os.PathLike):
    """Run the sweep (finished runs are read, not recomputed) and return the results rows of
    exactly this sweep: a runs folder may also hold other runs (a wider sweep of notebook 03,
    the launcher's runs, runs of an older version whose settings differed). A list of sweeps
    is trained as one run graph (`anchorviz.pipeline.sweep.sweep` takes the list), so that
    their runs share the workers, and the folder's ``sweep.yaml`` is that of the first."""
    sweeps = [sw] if isinstance(sw, SweepConfig) else list(sw)
    results = sweep(sweeps, folder)
    return results[results["run_id"].isin(sweep_run_ids(sweeps))].reset_index(drop=True)


#: the results columns notebook 03 reads, present (empty) even when no run is stored yet
_RESULT_COLUMNS = ("run_id", "kind", "method", "seed", "anchor_lambda", "anchor_layers",
                   "artifact_strength", "teacher_visibility", "acc_id", "acc_id_hidden", "wrg",
                   "aog", "nts")


def stored_sweep(sw: Sweeps, folder: str | os.PathLike):
    """The results rows of the runs of the sweep (or list of sweeps) already finished in
    ``folder``, training nothing: :func:`ensure_sweep`'s table without its training. The
    folder's ``results.parquet`` is rebuilt from its run folders (as after a sweep), so that an
    explorer opened on it sees them. With no finished run, an empty table that still has the
    columns the notebook reads."""
    folder = Path(folder)
    results = results_table(folder) if (folder / "runs").is_dir() else pd.DataFrame()
    if "run_id" not in results.columns:
        return pd.DataFrame({c: pd.Series(dtype=object if c in (
            "run_id", "kind", "method", "anchor_layers") else float) for c in _RESULT_COLUMNS})
    return results[results["run_id"].isin(sweep_run_ids(sw))].reset_index(drop=True)


def run_stored(cfg, folder: str | os.PathLike) -> bool:
    """Whether every run that training ``cfg`` (a RunConfig) needs -- its teacher, ceiling
    and student -- is already finished in ``folder``: then launching it only reads them."""
    return all(run_finished(folder, n.id) for n in build_graph([cfg]) if n.kind != "reference")


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub can be reached (and is not switched off by HF_HUB_OFFLINE)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("ANCHORVIZ_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False
