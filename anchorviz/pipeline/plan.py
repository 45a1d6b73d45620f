"""What running a sweep into a folder will cost, said before anything trains: how many runs,
how many are already stored (read, not retrained), and about how many CPU- and wall-minutes the
rest take (`sweep_plan`, `describe_plan`). The notebooks print it before every training cell;
it takes a sweep, a list of sweeps (one run graph) or the demo's `DemoOptions`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from anchorviz.pipeline.demo import DemoOptions
from anchorviz.pipeline.runner import build_graph, default_jobs
from anchorviz.sweep_config import SweepConfig, expand_sweep

__all__ = ["describe_plan", "run_finished", "run_minutes", "sweep_plan", "sweep_run_ids",
           "sweep_runs"]

#: what the planning takes: a sweep, a list of sweeps (trained as one run graph), or the
#: demo's options
Plannable = SweepConfig | Sequence[SweepConfig] | DemoOptions


def _sweeps(sw: Plannable) -> list[SweepConfig]:
    if isinstance(sw, DemoOptions):
        return [sw.sweep()]
    return [sw] if isinstance(sw, SweepConfig) else list(sw)


def sweep_runs(sw: Plannable) -> dict[str, str]:
    """``{run id: kind}`` (content hashes; kind teacher / ceiling / student) of every run of a
    sweep (or of a list of sweeps): the nodes of its run graph but the shared reference
    captures."""
    nodes = build_graph(c for s in _sweeps(sw) for c in expand_sweep(s))
    return {n.id: n.kind for n in nodes if n.kind != "reference"}


def sweep_run_ids(sw: Plannable) -> set[str]:
    """The run ids (content hashes) of every teacher, ceiling and student of a sweep."""
    return set(sweep_runs(sw))


def run_finished(folder: str | os.PathLike, run_id: str) -> bool:
    """Whether ``folder`` holds run ``run_id`` finished (its manifest says so)."""
    try:
        man = json.loads((Path(folder) / "runs" / run_id / "MANIFEST.json").read_text())
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
# attention: packed (the per-token arithmetic on real tokens only): a training step at 56%
# real tokens, float32 (bench/bench_fp32_levers.py, docs/BENCHMARKS.md)
_PACKED_STEP = 0.6


def run_minutes(sw: Plannable, kind: str) -> tuple[float, float]:
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
    if base.models.attention == "packed":
        f_step *= _PACKED_STEP
    return tuple((steps * s * f_step + n_eval * c * f_eval) * scale / 60
                 for s, c in zip(step, per_pair))


def sweep_plan(sw: Plannable, folder: str | os.PathLike) -> dict:
    """What running ``sw`` into ``folder`` will cost: ``{"total", "stored", "missing" (run ids
    to train), "cpu_minutes" (low, high), "wall_minutes" (low, high), "jobs"}``."""
    folder = Path(folder)
    runs = sweep_runs(sw)
    missing = {rid: kind for rid, kind in runs.items() if not run_finished(folder, rid)}
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


def describe_plan(sw: Plannable, folder: str | os.PathLike, train: bool = True) -> str:
    """One paragraph for the reader before a training cell: how many runs, how many already
    stored (read, not retrained), and about how many minutes the rest will take.

    ``train=False`` (the notebooks' read-only default): the missing runs are named per teacher
    visibility and not trained; the paragraph says how to train them (``TRAIN = True``)."""
    p = sweep_plan(sw, folder)
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
