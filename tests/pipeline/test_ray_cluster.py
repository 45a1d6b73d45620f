"""The Ray backend on a cluster of two nodes (issue 43, point 6), on one machine:
``ray.cluster_utils.Cluster`` starts a head that runs no task (0 CPUs: the driver, the GCS and
the sweep's bookkeeping actor) and two worker nodes of 1 CPU each, every node a raylet of its
own with its own CPU resources. A tiny sweep spreads over both nodes (each run's manifest
records the Ray node that made it), its results table equals the local backend's, and when
the node running a student is removed mid-training the task is retried on the other node:
every run is committed once, none is lost. Needs ray (installed by scripts/setup.sh)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray", reason="the Ray cluster test needs ray: "
                                        "pip install 'anchorviz[ray]'")

from tiny_project import tiny_config  # noqa: E402

from anchorviz.pipeline.results import results_table  # noqa: E402
from anchorviz.pipeline.runner import build_graph, run_graph  # noqa: E402
from anchorviz.pipeline.store import MANIFEST, RunStore  # noqa: E402
from anchorviz.pipeline.sweep import sweep  # noqa: E402
from anchorviz.sweep_config import SweepConfig, expand_sweep  # noqa: E402

COLS = ["run_id", "acc_id", "acc_ood", "wrg", "aog", "nts", "pgr", "drift_cos_target",
        "drift_cka_target", "acc_val"]
TESTS = str(Path(__file__).resolve().parents[1] / "support")  # the helper modules

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head of 0 CPUs and two worker nodes of 1 CPU each; the driver connected to it."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, old) if p)
    c = None
    try:
        # Ray waits 30 s for a raylet to come up: on a loaded 2-core machine the head alone
        # took 28 s, so a start that times out is tried again (3 tries)
        for attempt in range(3):
            try:
                c = Cluster(initialize_head=True, head_node_args={
                    "num_cpus": 0, "include_dashboard": False})
                workers = [c.add_node(num_cpus=1) for _ in range(2)]
                c.wait_for_nodes()
                break
            except Exception:  # noqa: BLE001 - "The current node timed out during startup"
                if c is not None:
                    c.shutdown()
                    c = None
                if attempt == 2:
                    raise
        ray.init(address=c.address, log_to_driver=False)
        yield c, workers
    finally:
        ray.shutdown()
        if c is not None:
            c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray-cluster-project")
    sw = SweepConfig(base=tiny_config(tmp), methods=["naive", "anchor"], anchor_lambdas=[1.0],
                     anchor_layers=["last"], seeds=[0])
    local = sweep(sw, tmp / "local", jobs=1, progress=False)
    return sw, tmp, local


def _manifests(out: Path) -> dict[str, dict]:
    return {d.name: json.loads((d / MANIFEST).read_text())
            for d in sorted((out / "runs").iterdir()) if not d.name.startswith(".")}


def test_a_sweep_spreads_over_two_nodes_and_gives_the_local_table(cluster, project):
    c, workers = cluster
    sw, tmp, local = project
    ids = {w.node_id for w in workers}
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}
    assert alive == ids and len(ids) == 2
    out = tmp / "two-nodes"
    got = sweep(sw, out, backend="ray", progress=False)
    pd.testing.assert_frame_equal(local[COLS], got[COLS])
    made_on = {rid: m["worker"]["ray_node"] for rid, m in _manifests(out).items()}
    assert set(made_on) == set(local["run_id"])
    assert set(made_on.values()) == ids, made_on  # both nodes ran runs


def test_removing_the_node_that_trains_a_student_retries_it_on_the_other(cluster, project):
    from graph_nodes import stall_naive_student_once

    c, workers = cluster
    sw, tmp, local = project
    out = tmp / "node-lost"
    out.mkdir()
    marker = out / "stalled-once.json"
    removed: dict = {}

    def remove_when_stalled() -> None:
        deadline = time.time() + 400
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.2)
        if not marker.exists():
            return
        node_id = json.loads(marker.read_text())["ray_node"]
        victim = next(w for w in workers if w.node_id == node_id)
        removed["id"] = node_id
        c.remove_node(victim, allow_graceful=False)

    t = threading.Thread(target=remove_when_stalled, daemon=True)
    t.start()
    nodes = build_graph(expand_sweep(sw))
    done = run_graph(nodes, out, backend="ray", progress=False,
                     execute=stall_naive_student_once)
    t.join(timeout=30)
    assert removed, "the naive student never started training"
    survivor = ({w.node_id for w in workers} - {removed["id"]}).pop()
    assert sorted(done) == sorted(n.id for n in nodes)
    # the student was retried on the other node, which committed it
    naive = next(r for r in local["run_id"] if r.startswith("naive"))
    man = _manifests(out)
    assert man[naive]["worker"]["ray_node"] == survivor
    # nothing lost: every run finished and intact, no half-written folder left
    store = RunStore(out)
    assert sorted(store.finished_runs()) == sorted(local["run_id"])
    assert not list((out / "runs").glob(".tmp-*"))
    pd.testing.assert_frame_equal(local[COLS], results_table(out)[COLS])
    # nothing duplicated: each node computed its run once; only the lost attempts repeat
    events = [json.loads(x) for x in (out / "attempts.jsonl").read_text().splitlines()]
    computed = [e["node"] for e in events if e["event"] == "done" and e["computed"]]
    assert sorted(computed) == sorted({e["node"] for e in events}), events
    starts = [e for e in events if e["event"] == "start" and e["node"] == "student:naive"]
    assert [e["ray_node"] for e in starts][-1] == survivor and len(starts) >= 2
    assert removed["id"] in {e["ray_node"] for e in starts}
