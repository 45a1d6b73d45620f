"""Faults on the tiny offline project: SIGKILL at many points of a sweep and resume, corrupted
run folders, non-finite losses, two sweeps writing one store at once, CPU determinism.

The multi-process tests launch ``tests/support/sweep_worker.py`` (see its docstring for the kill
points and the event log). Every result is compared with an uninterrupted sweep of the same
config EXACTLY (metric columns bit for bit): a resumed sweep must be indistinguishable from one
that never failed. Everything runs single-threaded (torch) so the numbers are reproducible.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from tiny_project import tiny_config

import anchorviz.training.loop as train_mod
from anchorviz.cli import EXIT_OK, EXIT_TRAIN, main
from anchorviz.config import with_overrides
from anchorviz.pipeline.keys import run_id_for, student_key
from anchorviz.pipeline.prepare import _DATA_CACHE, data_config, prepare_data
from anchorviz.pipeline.results import results_table
from anchorviz.pipeline.steps import _PROJECTORS, RunResult, run_student
from anchorviz.pipeline.store import MANIFEST, RunStore, StoreError
from anchorviz.pipeline.sweep import run, sweep
from anchorviz.sweep_config import expand_sweep, load_sweep
from anchorviz.training.loop import train_reward_model
from anchorviz.training.losses import NonFiniteLossError

WORKER = Path(__file__).resolve().parents[1] / "support" / "sweep_worker.py"
GRID = {"methods": ["naive", "anchor"], "anchor_lambdas": [1.0], "anchor_layers": ["last"],
        "seeds": [0]}
N_RUNS = 4  # teacher, ceiling, naive, anchor (lambda 1.0)
KILLED = -signal.SIGKILL


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    prev = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers run single-threaded too: identical numerics
    yield
    torch.set_num_threads(prev)


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    # what a new process would see: no cached data splits, no fitted projections
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    monkeypatch.setattr("anchorviz.pipeline.steps._PROJECTORS", {})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny project (models + data, written once) and a sweep file over it."""
    root = tmp_path_factory.mktemp("faults")
    cfg = tiny_config(root)
    sweep_yaml = root / "sweep.yaml"
    sweep_yaml.write_text(yaml.safe_dump({"base": cfg.to_dict(), "grid": GRID}, sort_keys=False))
    return root, sweep_yaml


@pytest.fixture(scope="module")
def reference(project: tuple[Path, Path]) -> tuple[Path, pd.DataFrame]:
    """The same sweep run once, uninterrupted, in this process (single-threaded)."""
    root, sweep_yaml = project
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    saved = dict(_DATA_CACHE), dict(_PROJECTORS)
    _DATA_CACHE.clear()
    _PROJECTORS.clear()
    try:
        table = sweep(load_sweep(sweep_yaml), root / "reference")
    finally:
        torch.set_num_threads(prev)
        _DATA_CACHE.clear()
        _DATA_CACHE.update(saved[0])
        _PROJECTORS.clear()
        _PROJECTORS.update(saved[1])
    assert len(table) == N_RUNS and table["run_id"].is_unique
    return root / "reference", table


def worker_cmd(sweep_yaml: Path, out: Path, log: Path, *extra: str) -> list[str]:
    return [sys.executable, str(WORKER), str(sweep_yaml), str(out), "--log", str(log), *extra]


def worker_env() -> dict[str, str]:
    return {**os.environ, "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1"}


def run_worker(sweep_yaml: Path, out: Path, log: Path, *extra: str,
               timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(worker_cmd(sweep_yaml, out, log, *extra), capture_output=True,
                          text=True, timeout=timeout, env=worker_env())


def events(log: Path) -> list[tuple[int, str, str]]:
    if not log.is_file():
        return []
    out = []
    for line in log.read_text().splitlines():
        pid, event, what = line.split(" ", 2)
        out.append((int(pid), event, what))
    return out


def compare_tables(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Every column but the wall-clock ``seconds``, exactly (no tolerance)."""
    cols = [c for c in want.columns if c != "seconds"]
    assert sorted(got.columns) == sorted(want.columns)
    g = got.sort_values("run_id").reset_index(drop=True)[cols]
    w = want.sort_values("run_id").reset_index(drop=True)[cols]
    pd.testing.assert_frame_equal(g, w, check_exact=True)


def assert_store_complete(out: Path, want_runs: set[str]) -> None:
    """Exactly the wanted runs, each finished and matching its hashes; no leftovers."""
    runs = out / "runs"
    visible = {d.name for d in runs.iterdir() if not d.name.startswith(".")}
    hidden = sorted(d.name for d in runs.iterdir() if d.name.startswith("."))
    assert visible == want_runs, "a run is lost or an extra one appeared"
    assert hidden == [], f"temporary folders left behind: {hidden}"
    store = RunStore(out)
    for run_id in want_runs:
        ok, why = store.verify(runs / run_id)
        assert ok, f"{run_id}: {why}"
    assert sorted(store.finished_runs()) == sorted(want_runs)


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


# --------------------------------------------------------------------------- SIGKILL + resume

# (kill spec, what the worker must be doing when it dies: the run kind it is inside, or "")
KILL_CHAIN: list[tuple[str | None, str]] = [
    ("hash:1:2", "teacher"),      # mid-commit of the teacher: 2 of 7 files hashed, no manifest
    ("reference:1", ""),          # half of the shared reference capture (its own graph node,
                                  # before any student) written, no DONE.json
    ("prerename:1", "ceiling"),   # complete folder + finished manifest, not yet renamed
    ("aftertrain:2", "naive"),    # naive student trained in memory, nothing of it written
    ("random", ""),               # SIGKILL from the parent after a random delay
    ("random", ""),               # ... twice
    ("results", ""),              # while the results table is written
    (None, ""),                   # the final, undisturbed resume
]


@pytest.mark.slow
def test_sigkill_at_many_points_then_resume_gives_the_uninterrupted_results(
        project: tuple[Path, Path], reference: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    _, sweep_yaml = project
    ref_dir, ref_table = reference
    want_runs = set(ref_table["run_id"])
    out, log = tmp_path / "sweep", tmp_path / "events.log"
    seed = int(os.environ.get("ANCHORVIZ_FAULT_SEED", random.SystemRandom().randrange(2**31)))
    rng = random.Random(seed)
    outcomes = []
    for spec, inside in KILL_CHAIN:
        if spec == "random":
            proc = subprocess.Popen(worker_cmd(sweep_yaml, out, log), env=worker_env(),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 120
            while (proc.pid, "ready", "-") not in events(log) and proc.poll() is None:
                assert time.monotonic() < deadline, "worker never got ready"
                time.sleep(0.02)
            delay = rng.uniform(0.0, 2.5)
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate(timeout=240)
            rc = proc.returncode
            assert rc in (0, KILLED), err
            outcomes.append((f"random {delay:.2f}s", rc))
            continue
        res = run_worker(sweep_yaml, out, log, *(["--kill", spec] if spec else []))
        last = events(log)[-1]
        if spec is None:
            assert res.returncode == 0, res.stderr
            assert last[1] == "finished"
        else:
            assert res.returncode == KILLED, f"{spec}: rc {res.returncode}\n{res.stderr}"
            assert last[1] == "kill", last
            point = spec.split(":")[0]
            assert last[2].startswith(f"{point}:{inside}-" if inside else point), last
        outcomes.append((spec, res.returncode))
        store = RunStore(out)
        # what each deterministic kill left behind is not mistaken for a finished run
        if spec == "hash:1:2":
            tmps = list((out / "runs").glob(".tmp-teacher-*"))
            assert tmps and not any((t / MANIFEST).exists() for t in tmps)
            assert store.finished_runs() == []
        elif spec == "reference:1":
            assert [r.split("-")[0] for r in store.finished_runs()] == ["teacher"]
            refs = list((out / "shared").glob("reference-*"))
            assert refs and not (refs[0] / "DONE.json").exists()
        elif spec == "prerename:1":
            tmps = list((out / "runs").glob(".tmp-ceiling-*"))
            assert any(json.loads((t / MANIFEST).read_text())["status"] == "finished"
                       for t in tmps)
            assert [r.split("-")[0] for r in store.finished_runs()] == ["teacher"]
        elif spec == "aftertrain:2":
            assert sorted(r.split("-")[0] for r in store.finished_runs()) == ["ceiling", "teacher"]

    # the final table is the uninterrupted one, bit for bit; no run lost, none duplicated
    final = pd.read_parquet(out / "results.parquet")
    assert final["run_id"].is_unique and len(final) == N_RUNS
    compare_tables(final, ref_table)
    compare_tables(pd.read_csv(out / "results.csv"), pd.read_csv(ref_dir / "results.csv"))
    assert_store_complete(out, want_runs)
    ev = events(log)
    starts = Counter(w for _, e, w in ev if e == "start")
    dones = Counter(w for _, e, w in ev if e == "done")
    assert set(starts) == want_runs and all(dones[r] <= 1 for r in want_runs)
    # a committed run is never computed again
    for r in want_runs:
        done_at = [i for i, (_, e, w) in enumerate(ev) if e == "done" and w == r]
        if done_at:
            assert not any(e == "start" and w == r for _, e, w in ev[done_at[0]:]), r
    # the runs the deterministic kills interrupted were redone
    kinds = {r.split("-")[0]: n for r, n in starts.items()}
    # (the reference kill no longer interrupts a ceiling: the capture is its own graph node)
    assert kinds["teacher"] >= 2 and kinds["ceiling"] >= 2 and kinds["naive"] >= 2, (kinds, seed)
    print(f"kill chain (seed {seed}): {outcomes}; starts per run: {dict(kinds)}")


# --------------------------------------------------------------------------- corruption


def _copy_of_reference(reference: tuple[Path, pd.DataFrame],
                       tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the reference sweep folder (copy2 keeps mtimes: the copy reads as cheaply)
    and its run ids by kind."""
    ref_dir, ref_table = reference
    out = tmp_path / "copy"
    shutil.copytree(ref_dir, out)
    return out, {r.split("-")[0]: r for r in ref_table["run_id"]}


def test_corrupted_files_in_several_runs_are_redone_not_read(
        project: tuple[Path, Path], reference: tuple[Path, pd.DataFrame], tmp_path: Path,
        count_training: list) -> None:
    _, sweep_yaml = project
    ref_table = reference[1]
    out, by_kind = _copy_of_reference(reference, tmp_path)
    runs = out / "runs"
    flip_byte(runs / by_kind["teacher"] / "metrics.json")  # same size, one bit differs
    (runs / by_kind["ceiling"] / MANIFEST).write_text("{not json")
    hidden = runs / by_kind["anchor"] / "hidden" / "student" / "source_test.safetensors"
    hidden.write_bytes(hidden.read_bytes()[: hidden.stat().st_size // 2])  # truncated
    ref_capture = next((out / "shared").glob("reference-*"))
    (ref_capture / "DONE.json").write_text('{"hash": ')  # a truncated marker
    shared_file = next(ref_capture.glob("*.safetensors"))
    shared_file.write_bytes(shared_file.read_bytes()[:100])

    store = RunStore(out)
    for kind, why in (("teacher", "metrics.json does not match"), ("ceiling", "no readable manifest"),
                      ("anchor", "hidden/student/source_test.safetensors does not match")):
        ok, reason = store.verify(runs / by_kind[kind])
        assert not ok and why in reason, (kind, reason)
    # not read: the table lists only the intact run
    assert results_table(out)["run_id"].tolist() == [by_kind["naive"]]

    table = sweep(load_sweep(sweep_yaml), out)
    assert sorted(count_training) == sorted(["teacher", by_kind["ceiling"], by_kind["anchor"]])
    compare_tables(table, ref_table)
    assert_store_complete(out, set(ref_table["run_id"]))
    assert json.loads((ref_capture / "DONE.json").read_text())["hash"]  # recomputed


def test_a_teacher_file_changed_with_its_mtime_restored_is_caught_before_a_student_reads_it(
        project: tuple[Path, Path], reference: tuple[Path, pd.DataFrame], tmp_path: Path,
        count_training: list) -> None:
    _, sweep_yaml = project
    ref_table = reference[1]
    out, by_kind = _copy_of_reference(reference, tmp_path)
    runs = out / "runs"
    labels = runs / by_kind["teacher"] / "labels.parquet"
    st = labels.stat()
    flip_byte(labels)  # same size, one bit differs, and the mtime put back
    os.utime(labels, ns=(st.st_atime_ns, st.st_mtime_ns))
    shutil.rmtree(runs / by_kind["naive"])  # a student still to train on those labels
    store = RunStore(out)
    cfg = next(c for c in expand_sweep(load_sweep(sweep_yaml)) if c.method.name == "naive")
    teacher = RunResult(by_kind["teacher"], runs / by_kind["teacher"], "teacher", {},
                        computed=False)
    with pytest.raises(StoreError, match=r"teacher run .* changed since it was written \(file "
                                         r"labels.parquet does not match its sha256"):
        run_student(store, cfg, prepare_data(data_config(cfg)), teacher=teacher)
    assert store.manifest(by_kind["naive"])["status"] == "failed"

    # the next sweep hashes what students read from the teacher: it redoes the teacher
    table = sweep(load_sweep(sweep_yaml), out)
    assert sorted(count_training) == sorted(["teacher", by_kind["naive"]])
    compare_tables(table, ref_table)
    assert_store_complete(out, set(ref_table["run_id"]))


# --------------------------------------------------------------------------- NaN guard


def test_absurd_lr_stops_with_the_step_terms_and_batch_and_marks_the_run_failed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tiny_config(tmp_path, **{"student_train.lr": 1e30})
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text(yaml.safe_dump(cfg.to_dict()))
    out = tmp_path / "out"
    assert main(["run", str(bad_yaml), "--out", str(out)]) == EXIT_TRAIN
    err = capsys.readouterr().err
    assert "non-finite loss at step" in err and "fit=" in err and "batch pair_ids: [" in err
    store = RunStore(out)
    manifests = {d.name: json.loads((d / MANIFEST).read_text()) for d in (out / "runs").iterdir()
                 if not d.name.startswith(".")}
    failed = [r for r, m in manifests.items() if m["status"] == "failed"]
    assert [r.split("-")[0] for r in failed] == ["ceiling"]  # the first run on the student
    m = manifests[failed[0]]
    assert "NonFiniteLossError" in m["error"] and "step" in m["error"] and m["files"] == {}
    assert not store.is_finished(failed[0])
    assert [r.split("-")[0] for r in store.finished_runs()] == ["teacher"]
    assert not list((out / "runs").glob(".tmp-*"))
    # fixed config: runs to the end; the failed run never appears in the results table
    good_yaml = tmp_path / "good.yaml"
    good_yaml.write_text(yaml.safe_dump(tiny_config(tmp_path).to_dict()))
    assert main(["run", str(good_yaml), "--out", str(out)]) == EXIT_OK
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 3 and failed[0] not in set(table["run_id"])


def test_transient_nan_fails_the_run_and_a_rerun_redoes_the_same_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny_config(tmp_path)
    out = tmp_path / "out"
    real_train, real_bt = train_reward_model, train_mod.bt_soft_loss

    def nan_in_student(*a, **k):
        if not str(k.get("desc", "")).startswith("naive-"):
            return real_train(*a, **k)
        calls = []

        def bt(*x, **y):
            calls.append(1)
            loss = real_bt(*x, **y)
            return loss * float("nan") if len(calls) == 3 else loss  # the 3rd step: step 2

        monkeypatch.setattr(train_mod, "bt_soft_loss", bt)
        try:
            return real_train(*a, **k)
        finally:
            monkeypatch.setattr(train_mod, "bt_soft_loss", real_bt)

    monkeypatch.setattr("anchorviz.pipeline.steps.train_reward_model", nan_in_student)
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss at step 2: fit=nan, total=nan; "
                                                 r"batch pair_ids: \[src:"):
        run(cfg, out)
    store = RunStore(out)
    student = run_id_for(student_key(cfg, "student"))
    man = store.manifest(student)
    assert man is not None and man["status"] == "failed" and "step 2" in man["error"]
    assert not store.is_finished(student)
    assert results_table(out)["kind"].tolist() == ["ceiling", "teacher"]

    monkeypatch.setattr("anchorviz.pipeline.steps.train_reward_model", real_train)  # the fault is gone
    results = run(cfg, out)
    assert [r.computed for r in results] == [False, False, True]  # only the failed run redone
    assert results[-1].run_id == student and store.manifest(student)["status"] == "finished"
    assert store.is_finished(student)
    assert len(results_table(out)) == 3
    assert not [d for d in (out / "runs").iterdir() if d.name.startswith(".")]


# --------------------------------------------------------------------------- concurrency


@pytest.mark.slow
def test_two_sweeps_at_once_on_one_store_train_each_run_exactly_once(
        project: tuple[Path, Path], reference: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    _, sweep_yaml = project
    _, ref_table = reference
    out, log = tmp_path / "store", tmp_path / "events.log"
    procs = [subprocess.Popen(worker_cmd(sweep_yaml, out, log, "--barrier", "2", *extra),
                              env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for extra in ([], ["--reverse"])]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    ev = events(log)
    want_runs = set(ref_table["run_id"])
    for event in ("start", "train", "done"):
        counts = Counter(w for _, e, w in ev if e == event)
        assert counts == Counter({r: 1 for r in want_runs}), (event, counts)
    assert sum(e == "finished" for _, e, _ in ev) == 2
    compare_tables(pd.read_parquet(out / "results.parquet"), ref_table)
    csv = pd.read_csv(out / "results.csv")
    assert sorted(csv["run_id"]) == sorted(want_runs)
    assert_store_complete(out, want_runs)
    who = Counter(pid for pid, e, _ in ev if e == "train")
    print(f"runs trained per worker: {dict(who)}")


# --------------------------------------------------------------------------- determinism


def _strip_timings(obj):
    if isinstance(obj, dict):
        return {k: _strip_timings(v) for k, v in obj.items()
                if k != "seconds" and not k.endswith("_seconds")}
    if isinstance(obj, list):
        return [_strip_timings(v) for v in obj]
    return obj


def same_safetensors(a: Path, b: Path) -> bool:
    from safetensors import safe_open

    with safe_open(str(a), framework="numpy") as fa, safe_open(str(b), framework="numpy") as fb:
        if fa.metadata() != fb.metadata() or sorted(fa.keys()) != sorted(fb.keys()):
            return False
        return all(fa.get_tensor(k).tobytes() == fb.get_tensor(k).tobytes() for k in fa.keys())


def test_same_config_and_seed_give_identical_results_twice_on_cpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny_config(tmp_path, **{"method.name": "anchor", "method.anchor_lambda": 1.0})
    outs = [tmp_path / "first", tmp_path / "second"]
    for out in outs:
        monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
        monkeypatch.setattr("anchorviz.pipeline.steps._PROJECTORS", {})
        run(cfg, out)
    a, b = (RunStore(o) for o in outs)
    assert a.finished_runs() == b.finished_runs() and len(a.finished_runs()) == 3
    for run_id in a.finished_runs():
        ma, mb = a.manifest(run_id), b.manifest(run_id)
        assert sorted(ma["files"]) == sorted(mb["files"])
        da, db = a.run_dir(run_id), b.run_dir(run_id)
        for rel in ma["files"]:
            if rel in ("metrics.json", "run.log"):  # wall-clock timings: compared below without
                continue                                # them (metrics) or not at all (the log)
            if rel.startswith("hidden/"):
                # safetensors writes its metadata map in a random order: same tensors, same
                # metadata, the header bytes may differ
                assert same_safetensors(da / rel, db / rel), f"{run_id}: {rel} differs"
                continue
            assert ma["files"][rel] == mb["files"][rel], f"{run_id}: {rel} differs"
        assert (da / "scores.parquet").read_bytes() == (db / "scores.parquet").read_bytes()
        # untrusted-file rule: only JSON, YAML, parquet and safetensors, never a pickle
        suffixes = {p.suffix for p in da.rglob("*") if p.is_file()}
        assert suffixes <= {".json", ".yaml", ".parquet", ".safetensors", ".log"}, suffixes
        metrics = [_strip_timings(json.loads((d / "metrics.json").read_text())) for d in (da, db)]
        assert metrics[0] == metrics[1]
        assert metrics[0]["accuracy"]["source_test"]["point"] == metrics[1]["accuracy"][
            "source_test"]["point"]
    compare_tables(pd.read_parquet(outs[1] / "results.parquet"),
                   pd.read_parquet(outs[0] / "results.parquet"))
    # and the comparison can fail: another seed gives other scores
    other = with_overrides(cfg, seed=1)
    monkeypatch.setattr("anchorviz.pipeline.steps._PROJECTORS", {})
    student = run(other, tmp_path / "third")[-1]
    first = pd.read_parquet(a.run_dir(run_id_for(student_key(cfg, "student")))
                            / "scores.parquet")
    assert not first["r_chosen"].equals(pd.read_parquet(student.run_dir / "scores.parquet")
                                        ["r_chosen"])
