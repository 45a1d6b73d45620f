"""The entry points: `run` (one config: teacher, ceiling, student) and `sweep` (a grid).

Both build a run graph (`anchorviz.pipeline.runner`), execute it on local worker processes or
Ray, then read the finished runs back and refresh the results table. Teachers, ceilings and
reference captures are shared by every student that needs them; a sweep resumes where it
stopped.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from anchorviz.config import RunConfig
from anchorviz.paths import write_atomic
from anchorviz.pipeline import steps
from anchorviz.pipeline.expected import SWEEP_FILE, record_grid
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.pipeline.results import results_table
from anchorviz.pipeline.runner import Node, build_graph, check_backend, run_graph
from anchorviz.pipeline.store import RunStore
from anchorviz.precision import warn_emulated
from anchorviz.sweep_config import SweepConfig, expand_sweep

__all__ = [
    "run",
    "sweep",
]


def run(cfg: RunConfig, out_dir: str | Path = "runs/default", jobs: int | None = None,
        threads: int = 1, progress: bool = True, backend: str = "local",
        address: str | None = None) -> list[steps.RunResult]:
    """The whole pipeline for one config: teacher, (ceiling), the student. Returns their results
    (already-finished parts are read, not recomputed) and refreshes the results table.
    ``jobs``: local worker processes (see `anchorviz.pipeline.runner.run_graph`; the ceiling and the
    student train in parallel with 2); ``threads``: torch threads per worker; ``backend``:
    ``"local"`` or ``"ray"`` (each node a Ray task on the cluster at ``address``, or on a local
    Ray instance; ``out_dir`` must then be on a filesystem every worker sees)."""
    cfg.validate()
    check_backend(out_dir, backend, address)

    warn_emulated([cfg])  # bfloat16 forced where it is emulated: said before any work
    store = RunStore(out_dir)
    store.clean_temporaries()
    # what this folder was asked for: a run folder's report names its missing runs too
    record_grid(out_dir, "run", {"config": cfg.to_dict()}, command=_command_line())
    data = prepare_data(data_config(cfg))
    done = run_graph(build_graph([cfg]), out_dir, jobs=jobs, threads=threads, progress=progress,
                     backend=backend, address=address)
    teacher = steps.ensure_teacher(store, cfg, data)  # all finished now: these read the store
    out = [teacher]
    if cfg.ceiling:
        out.append(steps.run_student(store, cfg, data, kind="ceiling", teacher=teacher))
    out.append(steps.run_student(store, cfg, data, teacher=teacher))
    results_table(out_dir)
    # computed = trained by this call (the graph's report), not by an earlier one
    return [dataclasses.replace(r, computed=bool(done.get(r.run_id, {}).get("computed", False)))
            for r in out]


def _sweep_payload(sw: SweepConfig) -> dict:
    """A sweep as ``sweep.yaml`` holds it: the base config and every other SweepConfig field."""
    return {"base": sw.base.to_dict(), "grid": {k: v for k, v in asdict(sw).items() if k != "base"}}


def _write_sweep_yaml(path: Path, payload: dict) -> None:
    """``sweep.yaml``, atomically: a reader (a report during a second sweep) never sees half."""
    import yaml

    text = yaml.safe_dump(payload, sort_keys=False)
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _command_line() -> str:
    """This process's command line (``anchorviz sweep a.yaml --out x``), for the grid file."""
    import shlex
    import sys

    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""


def sweep(sw: SweepConfig | Sequence[SweepConfig], out_dir: str | Path, jobs: int | None = None,
          threads: int = 1, progress: bool = True, backend: str = "local",
          address: str | None = None, first: Callable[[Node], bool] | None = None,
          on_done: Callable[[Node, dict], None] | None = None) -> pd.DataFrame:
    """Run every config of a sweep (sharing teachers, ceilings, reference captures); resumes.

    The grid becomes a run graph (`anchorviz.pipeline.runner`) executed by ``jobs`` local worker
    processes (None: ``$ANCHORVIZ_JOBS`` or the number of cores), each running torch on
    ``threads`` threads; the run ids and metrics do not depend on ``jobs``. ``backend="ray"``
    runs each node as a Ray task instead (on the cluster at ``address``, else a running or new
    local Ray instance); ``out_dir`` must then be on a filesystem every worker sees.

    A list of sweeps (e.g. one per teacher visibility) runs as one run graph, so that their
    runs share the workers and their common runs are made once; ``out_dir/sweep.yaml`` is then
    that of the first. Each sweep is also recorded as its own grid file
    (``out_dir/grids/sweep-<hash>.yaml``, `anchorviz.pipeline.expected.record_grid`), so a
    second sweep with another grid on the same folder is recorded beside the first.
    ``first``, ``on_done``: which nodes run first, and a call after each finished node
    (`anchorviz.pipeline.runner.build_graph`, `run_graph`)."""
    sweeps = [sw] if isinstance(sw, SweepConfig) else list(sw)
    if not sweeps:
        raise ValueError("sweep: no sweep given (an empty list)")
    check_backend(out_dir, backend, address)
    store = RunStore(out_dir)
    store.clean_temporaries()
    _write_sweep_yaml(Path(out_dir) / SWEEP_FILE, _sweep_payload(sweeps[0]))
    for s in sweeps:  # one grid file per sweep: another grid on this folder is kept beside it
        record_grid(out_dir, "sweep", _sweep_payload(s), command=_command_line())
    configs = [c for s in sweeps for c in expand_sweep(s)]

    warn_emulated(configs)  # bfloat16 forced where it is emulated: said before any work
    for d in {json.dumps(asdict(data_config(c)), sort_keys=True): data_config(c)
              for c in configs}.values():
        prepare_data(d)  # load / build every dataset once here, before the workers start
    run_graph(build_graph(configs, first), out_dir, jobs=jobs, threads=threads,
              progress=progress, backend=backend, address=address, on_done=on_done)
    return results_table(out_dir)
