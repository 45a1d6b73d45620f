"""The run graph of a sweep and its local workers: order, sharing, failures, and results that do
not depend on the number of workers."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from graph_nodes import fail_teacher_of_seed_1, record
from tiny_project import tiny_config

from anchorviz.pipeline.runner import build_graph, default_jobs, fresh_process, run_graph
from anchorviz.pipeline.sweep import sweep
from anchorviz.sweep_config import SweepConfig, expand_sweep


def _sweep(tmp_path, seeds=(0, 1)) -> SweepConfig:
    return SweepConfig(base=tiny_config(tmp_path), methods=["naive", "anchor"],
                       anchor_lambdas=[0.5, 2.0], anchor_layers=["last"], seeds=list(seeds))


def test_graph_shares_teachers_and_references_and_orders_dependencies(tmp_path):
    sw = _sweep(tmp_path)
    sw.base.data.split_per_seed = False  # (the default is True)
    nodes = build_graph(expand_sweep(sw))
    kinds = [n.kind for n in nodes]
    # per seed: one teacher, one ceiling, three students; one reference capture for both seeds
    # (same split), two once each seed draws its own split
    assert kinds.count("teacher") == 2 and kinds.count("reference") == 1
    assert kinds.count("ceiling") == 2 and kinds.count("student") == 6
    sw.base.data.split_per_seed = True
    assert [n.kind for n in build_graph(expand_sweep(sw))].count("reference") == 2
    ids = [n.id for n in nodes]
    assert len(set(ids)) == len(ids)
    by_id = {n.id: n for n in nodes}
    for i, n in enumerate(nodes):
        assert all(ids.index(d) < i for d in n.deps), n
        # students wait for their own seed's teacher and the reference, not for the ceiling (the
        # results table computes PGR from stored scores), so they train beside the ceiling
        if n.kind in ("student", "ceiling"):
            assert sorted(by_id[d].kind for d in n.deps) == ["reference", "teacher"]
            assert all(by_id[d].config["seed"] == n.config["seed"] for d in n.deps
                       if by_id[d].kind == "teacher")


@pytest.mark.slow  # over 5 s on 2 busy cores: two worker processes
def test_two_workers_run_independent_nodes_at_once_and_respect_dependencies(tmp_path):
    nodes = build_graph(expand_sweep(_sweep(tmp_path)))
    run_graph(nodes, tmp_path, jobs=2, progress=False, execute=record)
    log = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(log) == len(nodes)
    # teachers share the long-lived workers (both used); every captured / ANCHOR student, ceiling
    # and reference capture ran in a process of its own (`fresh_process`)
    light = [r for r in log if r["kind"] == "teacher"]
    heavy = [r for r in log if r["kind"] != "teacher"]
    assert len({r["pid"] for r in light}) == 2
    assert len({r["pid"] for r in heavy}) == len(heavy) == len(nodes) - len(light)
    assert not {r["pid"] for r in heavy} & {r["pid"] for r in light}
    for r in log:  # never more than two nodes at once
        assert sum(1 for b in log if b["start"] <= r["start"] < b["end"]) <= 2
    teachers = {r["seed"]: r for r in log if r["kind"] == "teacher"}
    for r in log:
        if r["kind"] in ("student", "ceiling"):
            assert r["start"] >= teachers[r["seed"]]["end"] - 1e-3
    assert sorted(n.kind for n in nodes if not fresh_process(n)) == ["teacher"] * 2
    overlaps = sum(1 for a in log for b in log
                   if a is not b and a["start"] < b["end"] and b["start"] < a["end"])
    assert overlaps > 0


def test_a_failing_node_stops_its_dependents_and_raises_after_the_others(tmp_path):
    nodes = build_graph(expand_sweep(_sweep(tmp_path)))
    with pytest.raises(ValueError, match="seed 1 broke on purpose"):
        run_graph(nodes, tmp_path, jobs=2, progress=False, execute=fail_teacher_of_seed_1)
    log = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert not any(r["seed"] == 1 and r["kind"] in ("student", "ceiling") for r in log)


def test_jobs_must_be_positive(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        run_graph([], tmp_path, jobs=0)
    monkeypatch.setenv("ANCHORVIZ_JOBS", "zero")
    with pytest.raises(ValueError, match="ANCHORVIZ_JOBS"):
        default_jobs()
    monkeypatch.setenv("ANCHORVIZ_JOBS", "3")
    assert default_jobs() == 3


@pytest.mark.slow  # over 5 s on 2 busy cores: a sweep trained twice, in 1 and 2 workers
def test_results_do_not_depend_on_the_number_of_workers(tmp_path):
    """The real pipeline on two worker processes gives the same run ids and metrics as in one."""
    sw = _sweep(tmp_path, seeds=(0,))
    one = sweep(sw, tmp_path / "one", jobs=1, progress=False)
    two = sweep(sw, tmp_path / "two", jobs=2, progress=False)
    cols = ["run_id", "acc_id", "acc_ood", "wrg", "aog", "nts", "pgr", "drift_cos_target",
            "drift_cka_target", "acc_val"]
    pd.testing.assert_frame_equal(one[cols], two[cols])
    # every computed run keeps its own log
    logs = list((tmp_path / "two" / "runs").glob("*/run.log"))
    assert len(logs) == 1 + 1 + 3


def test_a_list_of_sweeps_runs_as_one_graph(tmp_path):
    """Sweeps given together share their common runs (one teacher here) and the folder's
    sweep.yaml is the first's; an empty list is refused."""
    from anchorviz.paths import read_yaml

    base = tiny_config(tmp_path)
    base.ceiling = False
    naive = SweepConfig(base=base, methods=["naive"], seeds=[0])
    anchor = SweepConfig(base=base, methods=["anchor"], anchor_lambdas=[1.0],
                         anchor_layers=["last"], seeds=[0])
    # the verdict-first order of `anchorviz demo`: the naive student before the anchored one,
    # each finished node told to the caller
    seen = []
    res = sweep([naive, anchor], tmp_path / "out", jobs=1, progress=False,
                first=lambda n: n.config["method"]["name"] == "naive",
                on_done=lambda node, summary: seen.append((node.kind, node.config["method"]["name"])))
    assert seen == [("teacher", "naive"), ("reference", "naive"), ("student", "naive"),
                    ("student", "anchor")]
    want = {n.id for n in build_graph([*expand_sweep(naive), *expand_sweep(anchor)])
            if n.kind != "reference"}
    assert set(res["run_id"]) == want and len(want) == 3  # one teacher, two students
    assert read_yaml(tmp_path / "out" / "sweep.yaml")["grid"]["methods"] == ["naive"]
    with pytest.raises(ValueError, match="no sweep given"):
        sweep([], tmp_path / "empty")


def test_pgr_comes_from_the_stored_scores_of_teacher_student_and_ceiling(tmp_path):
    from anchorviz.pipeline.results import pgr_from_runs

    def scores(folder, correct, finished=True):
        folder.mkdir()
        n = len(correct)
        pd.DataFrame({"split": ["source_test"] * n + ["target_test:t"] * n,
                      "pair_id": [f"p{i}" for i in range(n)] * 2,
                      "r_chosen": [1.0 if c else -1.0 for c in correct] * 2,
                      "r_rejected": [0.0] * (2 * n)}).to_parquet(folder / "scores.parquet")
        (folder / "MANIFEST.json").write_text(json.dumps({"status": "finished" if finished
                                                          else "failed"}))
        return folder

    t = scores(tmp_path / "t", [1, 0, 0, 0, 1, 0, 1, 0, 1, 0])  # 40%
    s = scores(tmp_path / "s", [1, 1, 0, 0, 1, 0, 1, 1, 1, 0])  # 60%
    c = scores(tmp_path / "c", [1, 1, 1, 0, 1, 1, 1, 1, 1, 0])  # 80%
    got = pgr_from_runs(s, c, t, n_boot=200, seed=0)
    assert got["point"] == pytest.approx((0.6 - 0.4) / (0.8 - 0.4))
    assert got["lo"] <= got["point"] <= got["hi"]
    unfinished = scores(tmp_path / "c2", [1] * 10, finished=False)
    assert pgr_from_runs(s, unfinished, t) is None


def test_a_reference_capture_read_from_the_store_reports_not_computed(tmp_path):
    # a cached capture must not feed the sweep's ETA as if it had been computed
    from dataclasses import asdict

    from anchorviz.pipeline.runner import execute_node

    cfg = tiny_config(tmp_path)
    store = str(tmp_path / "store")
    first = execute_node("reference", asdict(cfg), store)
    again = execute_node("reference", asdict(cfg), store)
    assert first["computed"] is True and again["computed"] is False


def test_every_node_hands_its_memory_back_before_the_next(tmp_path, monkeypatch):
    """A worker runs many nodes; each ends with `release_memory` (gc + malloc_trim), so the next
    node starts nearer its own footprint (a second student node started 840 MB above a fresh
    process without it, 420 MB with it)."""
    from dataclasses import asdict

    import anchorviz.pipeline.steps as steps
    from anchorviz.pipeline.runner import execute_node

    calls = []
    real = steps.release_memory
    monkeypatch.setattr(steps, "release_memory", lambda: calls.append(1) or real())
    execute_node("reference", asdict(tiny_config(tmp_path)), str(tmp_path / "store"))
    assert calls == [1]


@pytest.mark.slow  # over 5 s on 2 busy cores: a sweep in a subprocess with workers
def test_ctrl_c_stops_the_workers_at_once_without_their_tracebacks(tmp_path):
    """Ctrl-C reaches the whole process group: the driver reports it, the busy workers stop at
    once (not after their node) and neither they nor the idle one (its node done) print a
    traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "support"  # graph_nodes
    script = tmp_path / "sweep.py"
    script.write_text(
        "import sys\n"
        "from graph_nodes import sleep_long\n"
        "from anchorviz.pipeline.runner import Node, run_graph\n"
        "if __name__ == '__main__':\n"
        "    nodes = [Node('a', 'teacher', {}), Node('b', 'teacher', {}),\n"
        "             Node('r', 'reference', {})]\n"
        "    try:\n"
        f"        run_graph(nodes, {str(tmp_path)!r}, jobs=3, progress=False, execute=sleep_long)\n"
        "    except KeyboardInterrupt:\n"
        "        print('driver interrupted', flush=True)\n"
        "        sys.exit(130)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(Path(__file__).resolve().parent),
                                          os.environ.get("PYTHONPATH", "")])}
    # as from a terminal, whatever this process's SIGINT disposition: an ignored SIGINT is
    # inherited across exec (CI's pytest had it so once; the driver then ignored the Ctrl-C and
    # only its workers stopped: docs/RELIABILITY.md, known limits)
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300  # bounds a hang; worker start-up is slow on a loaded machine
    while len(list(tmp_path.glob("started-*"))) < 3 and time.time() < deadline:
        time.sleep(0.2)
    assert len(list(tmp_path.glob("started-*"))) == 3, "the workers never started their nodes"
    time.sleep(2)  # the reference node's worker is back waiting for work
    t0 = time.time()
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
    out, err = proc.communicate(timeout=300)
    assert time.time() - t0 < 45  # not the nodes' 60 s: the workers stopped at once
    assert proc.returncode == 130 and "driver interrupted" in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert "leaked" not in err, err[-3000:]


def test_the_demo_runs_its_captured_and_anchor_nodes_in_processes_of_their_own():
    """The demo's largest process: a captured or ANCHOR node's peak stacked on what a long-lived
    worker kept from earlier nodes (1.9-2.1 GB); such nodes get a fresh process, the teachers and
    the scores-only verdict students reuse the workers."""
    from anchorviz.pipeline.demo import demo_sweep

    nodes = build_graph(expand_sweep(demo_sweep()))
    fresh = {(n.kind, n.config["seed"], n.config["method"]["name"]) for n in nodes
             if fresh_process(n)}
    assert fresh == {("reference", 0, "naive"), ("ceiling", 0, "naive"),
                     ("student", 0, "naive"), ("student", 0, "anchor")}
    assert sum(fresh_process(n) for n in nodes) == 5  # two ANCHOR lambdas
    reused = [n for n in nodes if not fresh_process(n)]
    assert sorted(n.kind for n in reused) == ["student"] * 4 + ["teacher"] * 5
    assert not any(n.config["capture"]["enabled"] for n in reused if n.kind == "student")
    # ANCHOR without captures still holds its reference: a process of its own
    anchor = next(n for n in nodes if n.config["method"]["name"] == "anchor")
    cfg = {**anchor.config, "capture": {**anchor.config["capture"], "enabled": False}}
    assert fresh_process(type(anchor)(anchor.id, "student", cfg, anchor.deps))
    assert not fresh_process(type(anchor)(anchor.id, "teacher", cfg))


@pytest.mark.slow  # over 5 s on 2 busy cores: a sweep in a subprocess with two workers
def test_a_worker_warning_reaches_the_drivers_console_once_naming_its_run(tmp_path):
    """A WARNING logged inside a local worker process (``--jobs 2``) is shown on the driver's
    stderr, once per run, with the run's kind and id; INFO lines stay in the worker."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "support"  # graph_nodes
    nodes = build_graph(expand_sweep(_sweep(tmp_path)))
    teachers = [n for n in nodes if n.kind == "teacher"]
    assert len(teachers) == 2
    script = tmp_path / "sweep.py"
    script.write_text(
        "import logging, sys\n"
        "from graph_nodes import warn_in_teacher\n"
        "from test_runner import _sweep\n"
        "from pathlib import Path\n"
        "from anchorviz.pipeline.runner import build_graph, run_graph\n"
        "from anchorviz.sweep_config import expand_sweep\n"
        "if __name__ == '__main__':\n"
        "    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
        f"    tmp = Path({str(tmp_path)!r})\n"
        "    nodes = build_graph(expand_sweep(_sweep(tmp)))\n"
        "    run_graph(nodes, tmp, jobs=2, progress=False, execute=warn_in_teacher)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(Path(__file__).resolve().parent),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    for t in teachers:
        said = [x for x in lines if f"teacher-of-seed-{t.config['seed']} warns on purpose" in x]
        assert len(said) == 1, proc.stderr[-3000:]
        assert said[0].startswith("WARNING") and f"teacher {t.id}" in said[0]
    assert "an info line that stays in the worker" not in proc.stderr


def test_the_demo_runs_its_verdict_nodes_first_and_says_the_verdict_once_they_are_done(
        tmp_path, monkeypatch):
    """`anchorviz demo` orders the verdict's nodes (teachers, the reference capture, the naive
    students) before the first seed's illustration (ceiling, ANCHOR students) and prints the
    verdict from `EarlyVerdict` once they are done, while the others still run."""
    import anchorviz.pipeline.results as results
    from anchorviz.pipeline.demo import EarlyVerdict, demo_sweep, verdict_nodes

    plain = build_graph(expand_sweep(demo_sweep()))
    want = verdict_nodes(plain)
    kinds = {(n.kind, n.config["method"]["name"]) for n in plain if n.id in want}
    assert kinds == {("teacher", "naive"), ("reference", "naive"), ("student", "naive")}
    assert len(want) == 5 + 1 + 5 and len(plain) == 14
    said: list[str] = []
    early = EarlyVerdict(plain, tmp_path, said.append, 0.0)
    nodes = build_graph(expand_sweep(demo_sweep()), early.wanted)
    assert {n.id for n in nodes} == {n.id for n in plain}
    assert [n.id in want for n in nodes] == [True] * 11 + [False] * 3
    ids = [n.id for n in nodes]
    assert all(ids.index(d) < i for i, n in enumerate(nodes) for d in n.deps)
    # the verdict is read from the store once, when its last node is done; the rows it reads
    # are the naive students' only
    seen = []

    def table(out):
        seen.append(out)
        return pd.DataFrame({"run_id": ids, "method": ["x"] * len(ids)})

    monkeypatch.setattr(results, "results_table", table)
    monkeypatch.setattr("anchorviz.pipeline.demo.verdict_sentence",
                        lambda df: f"VERDICT from {sorted(set(df['run_id']))}")
    for n in nodes[:10]:
        early(n, {})
    assert said == [] and seen == []
    early(nodes[10], {})
    assert seen == [tmp_path] and len(said) == 1
    naive = sorted(n.id for n in nodes if n.kind == "student" and n.id in want)
    assert f"VERDICT from {naive}" in said[0] and "still running" in said[0]
    for n in nodes[11:]:
        early(n, {})
    assert len(said) == 1
    # a demo whose illustration was done before (a resumed run): the full table comes at the
    # end anyway, nothing is said early
    said.clear()
    late = EarlyVerdict(plain, tmp_path, said.append, 0.0)
    for n in nodes[11:] + nodes[:11]:
        late(n, {})
    assert said == []
    # a demo run again on a finished store: the illustration is stored, the table comes at once
    # after the verdict's nodes, so nothing is said early
    import anchorviz.pipeline.plan as plan

    stored = {n.id for n in nodes[11:]}
    monkeypatch.setattr(plan, "run_finished", lambda out, run_id: run_id in stored)
    again = EarlyVerdict(plain, tmp_path, said.append, 0.0)
    for n in nodes:
        again(n, {})
    assert said == []
    # one seed (`--seeds 0`, `--quick`): no verdict to tell early
    one = build_graph(expand_sweep(demo_sweep(seeds=(0,))))
    first_look = EarlyVerdict(one, tmp_path, said.append, 0.0)
    for n in build_graph(expand_sweep(demo_sweep(seeds=(0,))), first_look.wanted):
        first_look(n, {})
    assert said == []


def test_on_done_sees_every_finished_node_and_a_failing_callback_stops_nothing(tmp_path, caplog):
    nodes = build_graph(expand_sweep(_sweep(tmp_path)))
    seen = []

    def on_done(node, res):
        seen.append(node.id)
        if len(seen) == 1:
            raise RuntimeError("a reader's bug")

    with caplog.at_level("WARNING", logger="anchorviz.pipeline.runner"):
        out = run_graph(nodes, tmp_path, jobs=1, progress=False, execute=record, on_done=on_done)
    assert seen == [n.id for n in nodes] and set(out) == set(seen)
    assert "a reader's bug" in caplog.text
