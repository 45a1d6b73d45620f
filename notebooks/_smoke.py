"""Shared set-up of the notebooks: the demo sweep they all read, small in smoke mode.

Every notebook starts with a parameters cell that reads ``ANCHORVIZ_SMOKE`` and
``ANCHORVIZ_NOTEBOOK_RUNS``; the helpers here turn those two values into the one sweep the
notebooks share. Full size, it is exactly the sweep of ``anchorviz demo`` (same settings, so
the same content-hashed run ids) in the demo's own folder ``runs/demo``: runs that the demo
(``bash scripts/demo.sh``) or another notebook finished are read, never trained again.
:func:`describe_plan` says before a training cell how many runs are missing and roughly how
many minutes they cost.

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

import inspect
import json
import math
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from anchorviz.cli import build_parser
from anchorviz.config import with_overrides
from anchorviz.pipeline.demo import OVERLAYS, SCENARIOS, demo_sweep
from anchorviz.pipeline.runner import build_graph
from anchorviz.pipeline.sweep import sweep
from anchorviz.sweep_config import SweepConfig, expand_sweep

Sweeps = SweepConfig | Sequence[SweepConfig]

if os.environ.get("ANCHORVIZ_NOTEBOOK_RENDERER"):  # scripts/execute_notebooks.py: static images
    import plotly.io as pio

    pio.renderers.default = os.environ["ANCHORVIZ_NOTEBOOK_RENDERER"]

_DEMO_DEFAULTS = build_parser().parse_args(["demo"])

#: the artefact strength of the teaching story (fraction of source pairs carrying the marker):
#: what ``anchorviz demo`` runs without ``--strength`` (its settings file's)
STRENGTH = float(demo_sweep().base.data.artifact_strength if _DEMO_DEFAULTS.strength is None
                 else _DEMO_DEFAULTS.strength)
#: the seeds of ``anchorviz demo`` without ``--seeds`` (None: its settings file's, five; one in
#: smoke mode, as ``--quick``)
DEMO_SEEDS = None if _DEMO_DEFAULTS.seeds is None else [int(s) for s in _DEMO_DEFAULTS.seeds]
#: every other setting of ``anchorviz demo`` at its command-line default (e.g. the scenario),
#: passed to ``demo_sweep`` as the CLI passes it, so that the run ids are the demo's
DEMO_OPTIONS = {k: getattr(_DEMO_DEFAULTS, k)
                for k in inspect.signature(demo_sweep).parameters
                if k not in ("strength", "seeds", "quick") and hasattr(_DEMO_DEFAULTS, k)}


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
    opts = dict(DEMO_OPTIONS)
    if scenario is not None:
        opts["scenario"] = scenario
    if visibility is not None:
        opts["visibility"] = float(visibility)
    chosen = seeds or DEMO_SEEDS
    sw = demo_sweep(strength=STRENGTH, seeds=tuple(chosen) if chosen else None, quick=smoke,
                    **opts)
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
    return float(SCENARIOS[scenario or DEMO_OPTIONS.get("scenario") or "marker"])


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


def _sweeps(sw: Sweeps) -> list[SweepConfig]:
    return [sw] if isinstance(sw, SweepConfig) else list(sw)


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
    import shutil

    src, dst = Path(src), Path(dst)
    n = 0
    for rid in sorted(sweep_run_ids(sw)):
        if _finished(src, rid) and not (dst / "runs" / rid).exists():
            (dst / "runs").mkdir(parents=True, exist_ok=True)
            shutil.copytree(src / "runs" / rid, dst / "runs" / f".copy-{rid}")
            os.rename(dst / "runs" / f".copy-{rid}", dst / "runs" / rid)
            n += 1
    return n


def sweep_runs(sw: Sweeps) -> dict[str, str]:
    """``{run id: kind}`` (content hashes; kind teacher / ceiling / student) of every run of a
    sweep (or of a list of sweeps): the nodes of its run graph but the shared reference
    captures."""
    nodes = build_graph(c for s in _sweeps(sw) for c in expand_sweep(s))
    return {n.id: n.kind for n in nodes if n.kind != "reference"}


def sweep_run_ids(sw: Sweeps) -> set[str]:
    """The run ids (content hashes) of every teacher, ceiling and student of a sweep."""
    return set(sweep_runs(sw))


def _finished(folder: Path, run_id: str) -> bool:
    try:
        man = json.loads((folder / "runs" / run_id / "MANIFEST.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(man, dict) and man.get("status") == "finished"


# CPU seconds on one torch thread, (low, high), measured on the 2-core development machine at
# 48 tokens (docs/BENCHMARKS.md: the demo's 5 runs in 7.9 CPU-minutes idle; docs/RESULTS.md:
# 1.9 s per MiniLM-L6 step of 16 pairs with two runs side by side); scaled by length below
_TEACHER_STEP_S = (0.5, 1.1)
_STUDENT_STEP_S = (1.0, 1.9)
_CAPTURE_PAIR_S = (0.03, 0.07)  # scoring + hidden-state capture + drift, per evaluated pair
_BF16_STEP, _BF16_EVAL = 0.6, 0.35


def run_minutes(sw: Sweeps, kind: str) -> tuple[float, float]:
    """Rough (low, high) CPU-minutes of one run of ``kind`` (teacher / ceiling / student) of the
    sweep's base config on one CPU thread (MiniLM-sized models; larger models cost more)."""
    base = _sweeps(sw)[0].base
    d = base.data
    scale = max(1.0, d.max_length / 48)
    n_eval = d.val + d.source_test + len(d.targets) * d.target_test
    if kind == "teacher":
        tc, n_train, step = base.teacher_train, d.teacher_train, _TEACHER_STEP_S
        per_pair = tuple(c / 3 for c in _CAPTURE_PAIR_S)  # scores only, no capture
    else:
        tc, n_train, step = base.student_train, d.w2s_train, _STUDENT_STEP_S
        per_pair = _CAPTURE_PAIR_S
    steps = math.ceil(n_train / tc.batch_size) * tc.epochs
    # bfloat16 autocast on a CPU with avx512_bf16: a step 0.6x, a scoring pass 0.35x float32
    # (bench/bench_flops.py; docs/RESULTS.md, the bf16 check of issue 28)
    f_step, f_eval = (_BF16_STEP, _BF16_EVAL) if tc.bf16 else (1.0, 1.0)
    return tuple((steps * s * f_step + n_eval * c * f_eval) * scale / 60
                 for s, c in zip(step, per_pair))


def plan(sw: Sweeps, folder: str | os.PathLike) -> dict:
    """What running ``sw`` into ``folder`` will cost: ``{"total", "stored", "missing" (run ids
    to train), "cpu_minutes" (low, high), "wall_minutes" (low, high), "jobs"}``."""
    from anchorviz.pipeline.runner import default_jobs

    folder = Path(folder)
    runs = sweep_runs(sw)
    missing = {rid: kind for rid, kind in runs.items() if not _finished(folder, rid)}
    cost = {k: run_minutes(sw, k) for k in ("teacher", "student")}
    per = [cost["teacher" if k == "teacher" else "student"] for k in missing.values()]
    cpu = (sum(p[0] for p in per), sum(p[1] for p in per))
    jobs = default_jobs()
    n_teachers = sum(k == "teacher" for k in missing.values())
    others = [p for p, k in zip(per, missing.values()) if k != "teacher"]
    width = max(1, min(jobs, len(others)))
    # teachers first (students wait for their labels), then the students side by side
    wall = tuple((cost["teacher"][i] * (1 if n_teachers else 0)
                  + sum(p[i] for p in others) / width) for i in (0, 1))
    return {"total": len(runs), "stored": len(runs) - len(missing), "missing": sorted(missing),
            "cpu_minutes": cpu, "wall_minutes": wall, "jobs": jobs}


def describe_plan(sw: Sweeps, folder: str | os.PathLike, train: bool = True) -> str:
    """One paragraph for the reader before a training cell: how many runs, how many already
    stored (read, not retrained), and about how many minutes the rest will take.

    ``train=False`` (the notebooks' read-only default): the missing runs are named per teacher
    visibility and not trained; the paragraph says how to train them (``TRAIN = True``)."""
    p = plan(sw, folder)
    head = (f"This sweep has {p['total']} runs (teacher, ceiling and students per seed, "
            f"strength and teacher visibility) in {folder}. ")
    if not p["missing"]:
        return head + (f"All {p['total']} are already stored there (by `anchorviz demo` or an "
                       "earlier notebook): the next cell only reads them (seconds).")
    lo, hi = p["cpu_minutes"]
    wlo, whi = p["wall_minutes"]
    cost = (f"about {lo:.0f}-{hi:.0f} CPU-minutes, roughly {max(1, round(wlo))}-"
            f"{max(1, round(whi))} minutes here with {p['jobs']} parallel worker(s), 2-3x "
            "longer when other jobs share the cores")
    if not train:
        missing = set(p["missing"])
        by_vis = []
        for s in _sweeps(sw):
            ids = sweep_run_ids(s)
            if ids & missing:
                by_vis.append(f"teacher visibility {s.base.data.artifact_teacher_visibility:g}: "
                              f"{len(ids & missing)} of {len(ids)}")
        return head + (f"{p['stored']} are stored and will be read; {len(missing)} are MISSING "
                       f"and will not be trained (TRAIN = False): {'; '.join(by_vis)}. The "
                       "cells below use the stored runs only. `anchorviz demo` in the "
                       "repository's root (`bash scripts/demo.sh` on a fresh clone) stores the "
                       "demo's runs; to train the missing ones here instead, set TRAIN = True in "
                       f"the first cell and run all cells again ({cost}; interrupting is safe: "
                       "finished runs are kept and reused).")
    return head + (f"{p['stored']} are stored and will be read; {len(p['missing'])} will be "
                   f"trained now: {cost}. Interrupting is safe: finished runs are kept and "
                   "reused.")


def ensure_sweep(sw: Sweeps, folder: str | os.PathLike):
    """Run the sweep (finished runs are read, not recomputed) and return the results rows of
    exactly this sweep: a runs folder may also hold other runs (a wider sweep of notebook 03,
    the launcher's runs, runs of an older version whose settings differed). A list of sweeps
    is trained as one run graph (`anchorviz.pipeline.sweep.sweep` takes the list), so that
    their runs share the workers, and the folder's ``sweep.yaml`` is that of the first."""
    sweeps = _sweeps(sw)
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
    import pandas as pd

    from anchorviz.pipeline.results import results_table

    folder = Path(folder)
    results = results_table(folder) if (folder / "runs").is_dir() else pd.DataFrame()
    if "run_id" not in results.columns:
        return pd.DataFrame({c: pd.Series(dtype=object if c in (
            "run_id", "kind", "method", "anchor_layers") else float) for c in _RESULT_COLUMNS})
    return results[results["run_id"].isin(sweep_run_ids(sw))].reset_index(drop=True)


def run_stored(cfg, folder: str | os.PathLike) -> bool:
    """Whether every run that training ``cfg`` (a RunConfig) needs -- its teacher, ceiling
    and student -- is already finished in ``folder``: then launching it only reads them."""
    return all(_finished(Path(folder), n.id) for n in build_graph([cfg]) if n.kind != "reference")


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub can be reached (and is not switched off by HF_HUB_OFFLINE)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("ANCHORVIZ_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False
