"""The Ray backend on a local Ray instance started here (2 CPUs): a tiny sweep gives the same
results table as the local backend, and a worker killed mid-run is retried without losing
anything. Skipped when ray is not installed (pip install 'anchorviz[ray]')."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray", reason="the Ray backend tests need ray: "
                                        "pip install 'anchorviz[ray]'")

from tiny_project import tiny_config  # noqa: E402

from anchorviz.pipeline.runner import build_graph, node_resources, run_graph  # noqa: E402
from anchorviz.pipeline.store import RunStore  # noqa: E402
from anchorviz.pipeline.sweep import sweep  # noqa: E402
from anchorviz.sweep_config import SweepConfig, expand_sweep  # noqa: E402

COLS = ["run_id", "acc_id", "acc_ood", "wrg", "aog", "nts", "pgr", "drift_cos_target",
        "drift_cka_target", "acc_val"]
TESTS = str(Path(__file__).resolve().parents[1] / "support")  # the helper modules

# slow: a local Ray instance (~13 s to start on 2 busy cores) and tiny sweeps on it
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray instance of 2 CPUs; its workers import the test helpers from tests/."""
    if ray.is_initialized():
        ray.shutdown()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, old) if p)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield ray
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """One tiny sweep (teacher, reference, ceiling, naive and ANCHOR students) and its results
    table on the local backend (in this process), the reference for the Ray runs."""
    tmp = tmp_path_factory.mktemp("ray-project")
    sw = SweepConfig(base=tiny_config(tmp), methods=["naive", "anchor"], anchor_lambdas=[1.0],
                     anchor_layers=["last"], seeds=[0])
    local = sweep(sw, tmp / "local", jobs=1, progress=False)
    return sw, tmp, local


def _finished_everything(out: Path, sw: SweepConfig) -> None:
    store = RunStore(out)
    runs = [n.id for n in build_graph(expand_sweep(sw)) if n.kind != "reference"]
    assert sorted(store.finished_runs()) == sorted(runs)
    assert not list((out / "runs").glob(".tmp-*"))  # no half-written folder left behind


def test_ray_sweep_gives_the_local_results_table(ray_local, project):
    sw, tmp, local = project
    out = tmp / "ray"
    got = sweep(sw, out, backend="ray", progress=False)
    pd.testing.assert_frame_equal(local[COLS], got[COLS])
    _finished_everything(out, sw)
    # a second submission reads the store: nothing is trained again
    again = run_graph(build_graph(expand_sweep(sw)), out, backend="ray", progress=False)
    assert len(again) == len(build_graph(expand_sweep(sw)))
    assert not any(r["computed"] for r in again.values() if r["kind"] != "reference")


def test_a_worker_killed_mid_run_is_retried_and_nothing_is_lost(ray_local, project):
    from graph_nodes import kill_first_student_mid_run

    sw, tmp, local = project
    out = tmp / "ray-killed"
    nodes = build_graph(expand_sweep(sw))
    done = run_graph(nodes, out, backend="ray", progress=False, execute=kill_first_student_mid_run)
    killed = json.loads((out / "killed-once.txt").read_text())  # a worker did die mid-run
    assert killed["pid"] != os.getpid() and killed["method"] == "naive"
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)  # that worker is gone; Ray ran the node again on another
    assert sorted(done) == sorted(n.id for n in nodes)  # every node ran, the killed one again
    _finished_everything(out, sw)
    from anchorviz.pipeline.results import results_table

    pd.testing.assert_frame_equal(local[COLS], results_table(out)[COLS])


def test_a_failing_node_on_ray_raises_its_own_error_and_stops_its_dependents(ray_local, tmp_path):
    from graph_nodes import fail_teacher_of_seed_1

    sw = SweepConfig(base=tiny_config(tmp_path), methods=["naive"], seeds=[0, 1])
    nodes = build_graph(expand_sweep(sw))
    with pytest.raises(ValueError, match="seed 1 broke on purpose"):
        run_graph(nodes, tmp_path, backend="ray", progress=False, execute=fail_teacher_of_seed_1)
    log = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert not any(r["seed"] == 1 and r["kind"] in ("student", "ceiling") for r in log)


def test_a_warning_in_a_ray_task_reaches_the_driver_naming_its_run(ray_local, tmp_path, caplog):
    import logging

    from graph_nodes import warn_in_teacher

    sw = SweepConfig(base=tiny_config(tmp_path), methods=["naive"], seeds=[0, 1])
    nodes = build_graph(expand_sweep(sw))
    with caplog.at_level(logging.WARNING, logger="anchorviz.pipeline.runner"):
        run_graph(nodes, tmp_path, backend="ray", progress=False, execute=warn_in_teacher)
    said = [r.getMessage() for r in caplog.records if "warns on purpose" in r.getMessage()]
    teachers = [n for n in nodes if n.kind == "teacher"]
    assert len(said) == len(teachers) == 2
    for t in teachers:
        assert sum(f"teacher {t.id}: teacher-of-seed-{t.config['seed']} warns" in m
                   for m in said) == 1


def test_node_resources_and_backend_arguments(tmp_path, monkeypatch):
    cfg = tiny_config(tmp_path)
    nodes = {n.kind: n for n in build_graph([cfg])}
    assert node_resources(nodes["student"], 2) == {"num_cpus": 2, "num_gpus": 0}
    cfg.student_train.device = "cuda"
    nodes = {n.kind: n for n in build_graph([cfg])}
    assert node_resources(nodes["teacher"], 1)["num_gpus"] == 0
    assert node_resources(nodes["student"], 1)["num_gpus"] == 1
    assert node_resources(nodes["reference"], 1)["num_gpus"] == 1
    with pytest.raises(ValueError, match="backend must be one of"):
        run_graph([], tmp_path, backend="slurm")
    with pytest.raises(ValueError, match="address is for the Ray backend"):
        run_graph([], tmp_path, address="10.0.0.1:6379")
    with pytest.raises(ValueError, match="not a URI"):
        run_graph([], "s3://bucket/store", backend="ray")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    with pytest.raises(ImportError, match=r"pip install 'anchorviz\[ray\]'"):
        sweep(SweepConfig(base=cfg), tmp_path / "never", backend="ray")
    assert not (tmp_path / "never").exists()  # refused before anything was written
