"""Smoke tests of the benchmark scripts in bench/: each core function runs on tiny sizes.

No timing assertions (the machine is shared); only that the code paths run and produce tables.
The TRL side of bench_trl.py needs a separate venv with TRL; it runs only when
ANCHORVIZ_TRL_PYTHON names that venv's python.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from builders import toy_pairs
from tiny_project import save_tiny_model

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import bench_capture  # noqa: E402
import bench_demo  # noqa: E402
import bench_flops  # noqa: E402
import bench_heap  # noqa: E402
import bench_jobs  # noqa: E402
import bench_rehash  # noqa: E402
import bench_step  # noqa: E402
import bench_trl  # noqa: E402
import bench_widgets  # noqa: E402
import common  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("bench") / "student", layers=2, seed=0)


def _facts():
    return common.machine_facts()


def test_common_sections(tmp_path):
    doc = tmp_path / "BENCH.md"
    times = common.interleaved({"a": lambda: 1.0, "b": lambda: None}, repeats=3, warmup=1)
    assert len(times["a"]) == len(times["b"]) == 3 and times["a"] == [1.0] * 3
    common.update_section("bench_widgets", "## x\n\nfirst", path=doc)
    common.update_section("bench_step", "## y\n\nstep", path=doc)
    common.update_section("bench_widgets", "## x\n\nsecond", path=doc)
    text = doc.read_text()
    assert "second" in text and "first" not in text and "step" in text
    assert text.index("<!-- bench_step -->") < text.index("<!-- bench_widgets -->")
    assert text.count("<!-- bench_cka -->") == 1
    assert "| a | b |" in common.md_table(["a", "b"], [[1, 2.5]])


def test_bench_step_all_variants(tiny_model, tmp_path):
    args = bench_step.build_parser().parse_args(
        ["--model", str(tiny_model), "--steps", "1", "--repeats", "1", "--batch-size", "4",
         "--max-length", "16", "--no-memory", "--mem-steps", "1"])
    res = bench_step.measure(args, log=lambda m: None, pairs=toy_pairs(8))
    assert set(res["times"]) == set(bench_step.VARIANTS)
    assert all(len(v) == 1 and v[0] > 0 for v in res["times"].values())
    assert res["setup_s"]["anchor-cached"] >= 0
    # the memory worker's body, in-process
    s = bench_step.setup_variant("anchor-cached", args, toy_pairs(4))
    assert bench_step.step_seconds(s) > 0
    s.reference.close()
    res["memory"] = {k: {"peak_rss_mb": 100.0, "rss_before_load_mb": 50.0} for k in res["times"]}
    md = bench_step.markdown(res, args, "python bench/bench_step.py", _facts(), 1.0)
    assert "anchor-adapter_off" in md and "Target" in md
    assert len(bench_step.synthetic_pairs(3)) == 3


def test_bench_trl_anchorviz_side(tiny_model, tmp_path):
    args = bench_trl.build_parser().parse_args(
        ["--model", str(tiny_model), "--steps", "2", "--batch-size", "4", "--max-length", "16"])
    model, enc, spec_path, tokens = bench_trl.prepare(args, tmp_path, pairs=toy_pairs(8))
    spec = json.loads(spec_path.read_text())
    assert len(spec["chosen_ids"]) == 8 and tokens > 0
    assert sorted(map(tuple, spec["chosen_ids"])) == sorted(map(tuple, enc.chosen_ids))
    out = bench_trl.anchorviz_run(model, enc, args)
    assert out["steps"] == 2 and out["loop_s"] > 0
    assert out["optim"].startswith("adamw_fused")  # the package default
    single = bench_trl.anchorviz_run(model, enc, args, "adamw")
    assert single["optim"].startswith("adamw ") and single["steps"] == 2
    res = {"runs": {"anchorviz": [out], "anchorviz-adamw": [single],
                    "trl": [{**out, "optim": "adamw_torch_fused"}],
                    "trl-adamw_torch": [{**single, "optim": "adamw_torch"}]},
           "info": {"trl": "x"}, "tokens": tokens, "n_pairs": 8, "loads": [1.0]}
    md = bench_trl.markdown(res, args, "cmd", _facts(), 1.0)
    assert "`trl`" in md and "x `trl`" in md and "Target: anchorviz" in md
    assert "could not be used" in bench_trl.unavailable_markdown("no venv", "cmd", _facts())


@pytest.mark.skipif(not os.environ.get("ANCHORVIZ_TRL_PYTHON"),
                    reason="set ANCHORVIZ_TRL_PYTHON to a venv with TRL to run its worker")
def test_bench_trl_worker(tiny_model, tmp_path):
    args = bench_trl.build_parser().parse_args(
        ["--model", str(tiny_model), "--steps", "1", "--repeats", "1", "--batch-size", "4",
         "--max-length", "16", "--trl-variants", "trl-adamw_torch"])
    res = bench_trl.measure(args, log=lambda m: None, pairs=toy_pairs(4))
    assert res["runs"]["trl-adamw_torch"][0]["steps"] == 1


def test_bench_capture(tiny_model):
    from anchorviz.models.reward_model import load_reward_model
    from anchorviz.models.tokenization import encode_pairs

    model, tok = load_reward_model(str(tiny_model), dropout=False)
    enc = encode_pairs(tok, toy_pairs(10), max_length=16)
    times = bench_capture.measure(model, enc, batch_size=4, repeats=1, log=lambda m: None)
    assert set(times) == {"bare", "bare+hidden", "capture"}
    args = bench_capture.build_parser().parse_args(["--model", str(tiny_model)])
    assert "capture" in bench_capture.markdown(times, args, 10, 100, 2, "cmd", _facts(), 1.0)


def test_bench_widgets(tmp_path):
    sweep = bench_widgets.build_fake_sweep(tmp_path / "sweep", n_pairs=20, seeds=(0,),
                                           lambdas=(0.1, 1.0))
    res = bench_widgets.measure(sweep, changes=5, log=lambda m: None)
    assert len(res["ms"]["umap"]) == 5
    args = bench_widgets.build_parser().parse_args([])
    assert "UMAP panel" in bench_widgets.markdown(res, args, "fake", "cmd", _facts(), 1.0)


def test_bench_flops(tiny_model):
    args = bench_flops.build_parser().parse_args(
        ["--model", str(tiny_model), "--data", "synthetic", "--quick", "--no-write",
         "--max-length", "16"])
    args.steps, args.repeats, args.matmul_n = 2, 1, 64
    res = bench_flops.measure(args, log=lambda m: None)
    assert set(res["times"]) == {"matmul fp32", "matmul bf16", "step fp32", "step bf16",
                                 "step bf16 eager", "score bf16", "score bf16 eager"}
    assert res["step_flops"] > 0 and res["matmul_flops"] == 2 * 64 ** 3
    md = bench_flops.markdown(res, args, "cmd", _facts(), 1.0)
    assert "GFLOP/s" in md and "share of the matmul rate" in md and "Eager / SDPA" in md


def test_bench_rehash(tmp_path):
    args = bench_rehash.build_parser().parse_args(
        ["--quick", "--no-write", "--tmp", str(tmp_path)])
    args.seeds, args.ckpt_mb, args.rounds = 1, 0.05, 1
    res = bench_rehash.measure(args, log=lambda m: None)
    assert res["same"] and res["n_runs"] == 10
    assert res["hashed"]["table cheap"] == 0 < res["hashed"]["table full"]
    assert res["hashed"]["resume cheap"] < res["hashed"]["resume full"]
    assert len(res["times"]["resume cheap"]) == 1
    assert "speed-up" in bench_rehash.markdown(res, args, "cmd", _facts(), 1.0)


def test_bench_demo_runner(tmp_path):
    cmd = [sys.executable, "-c", "import time; x = bytearray(50 * 2**20); time.sleep(1.2); "
           "print('Results (x):'); print('done')"]
    res = bench_demo.run_demo(tmp_path / "out", quick=True, timeout=60, cmd=cmd,
                              log_path=tmp_path / "log")
    assert res["rc"] == 0 and res["wall_s"] > 1
    assert res["peak_child_mb"] >= 50
    assert bench_demo.demo_command(tmp_path, quick=True)[-1] == "--quick"
    args = bench_demo.build_parser().parse_args(["--quick"])
    md = bench_demo.markdown(res, args, "cmd", _facts(), 1.0, "Results (x):\ndone")
    assert "Target" in md and "with the table" in md
    # a demo that printed its verdict early: the time to it is a column and a target of its own
    text = "x\nVERDICT over 5 seeds ...\n(after 9.4 min, from the teachers and naive students; ...)\n"
    assert bench_demo.verdict_minutes(text) == 9.4
    assert bench_demo.verdict_minutes("Results (x):\n(after lunch)") is None
    md = bench_demo.markdown({**res, "verdict_min": 9.4}, args, "cmd", _facts(), 1.0, "")
    assert "| 9.4 min |" in md and "after 9.4 min, < 10 minutes: **met**" in md
    # the sampler (psutil, which ipykernel brings) names each process's own peak: here the one
    # child (the driver) holding 50 MB
    import importlib.util

    if importlib.util.find_spec("psutil"):
        assert res["per_process"] and res["per_process"][0][1] == "driver"
        assert res["per_process"][0][0] >= 50 and "driver" in md



def test_bench_jobs_results_check_and_report():
    import pandas as pd

    a = pd.DataFrame({"run_id": ["r1", "r2"], "method": ["naive", "anchor"],
                      "acc_id": [0.9, np.nan], "seconds": [10.0, 20.0]})
    b = a.iloc[::-1].assign(seconds=[1.0, 2.0])  # other row order, other times
    assert bench_jobs.compare_results(a, b)["identical"]
    c = b.assign(acc_id=[np.nan, 0.91])
    got = bench_jobs.compare_results(a, c)
    assert not got["identical"] and got["differing"] == ["acc_id"]
    assert got["max_abs_diff"] == pytest.approx(0.01)
    assert not got["close"]
    tiny = bench_jobs.compare_results(a, b.assign(acc_id=[np.nan, 0.9 + 4e-16]))
    assert tiny["close"] and not tiny["identical"]
    assert not bench_jobs.compare_results(a, a.assign(run_id=["r1", "r3"]))["run_ids"]
    log = "noise\nResults (x):\n method\n naive\nHTML report: /tmp/r.html\n"
    assert bench_jobs.printed_table(log) == "Results (x):\n method\n naive"

    args = bench_jobs.build_parser().parse_args(["--quick", "--rounds", "2"])
    assert args.quick and args.rounds == 2

    def run(jobs, wall, results):
        return {"jobs": jobs, "rc": 0, "wall_s": wall, "cpu_s": wall, "peak_tree_mb": 100.0,
                "max_procs": jobs + 1, "loads": [1.0, 2.0], "printed": "Results (x):\n1",
                "results": results}

    rounds = [{1: run(1, 100.0, a), 2: run(2, 55.0, b)}, {2: run(2, 60.0, c), 1: run(1, 100.0, a)}]
    checks = bench_jobs.check_all(rounds)
    assert [(ch["round"], ch["jobs"], ch["identical"]) for ch in checks] == [
        (1, 2, True), (2, 1, True), (2, 2, False)]
    md = bench_jobs.markdown({"rounds": rounds, "checks": checks}, args, "cmd", _facts(), 1.0)
    assert "QUICK" in md and "0.575x" in md and "DIFFERENT" in md and "`acc_id`" in md


def test_bench_heap_variants_nodes_and_table():
    assert bench_heap.variant_settings("default", 1 << 20) == {"onednn_cache": None,
                                                               "mmap_threshold": None}
    assert bench_heap.variant_settings("onednn+mmap", 4096) == {"onednn_cache": 8,
                                                                "mmap_threshold": 4096}
    with pytest.raises(ValueError, match="variant must be one of"):
        bench_heap.variant_settings("jemalloc", 1)
    # the chain is the demo's own verdict-seed work: a teacher and a scores-only naive student
    teachers, students = bench_heap.demo_nodes([1, 2], quick=True)
    assert len(teachers) == 2 and len(students) == 2
    assert all(n.config["method"]["name"] == "naive" for n in students)
    assert all(n.config["capture"]["enabled"] is False for n in students)

    def fake(cpu, peaks, scores):
        return {"cpu_s": cpu, "took": {}, "nodes": [
            {"seed": s, "seconds": 1.0, "peak_mb": p, "after_mb": p / 2, "scores": h}
            for s, p, h in zip((1, 2), peaks, scores)]}

    res = {"variants": {"default": fake(100, (1300, 1500), ("a", "b")),
                        "onednn": fake(99, (1200, 1300), ("a", "b")),
                        "mmap": fake(101, (1150, 1250), ("a", "b")),
                        "onednn+mmap": fake(103, (1100, 1150), ("a", "c"))},
           "seeds": [1, 2], "jobs": 2, "mmap_threshold": 1 << 20, "quick": False}
    args = bench_heap.build_parser().parse_args(["--no-write"])
    md = bench_heap.markdown(res, args, "cmd", _facts(), 1.0)
    assert "1,150 MB (0.77x)" in md and "1.03x" in md
    # a variant whose scores differ from the default's says so
    assert md.count("**NO**") == 1


def test_bench_demo_takes_both_arithmetics_and_names_the_cpus_flags(tmp_path):
    """Issue 40: the demo is timed in either arithmetic and as a CPU without native bfloat16
    (the AVX2 override) on any machine; every figure names the CPU's arithmetic flags."""
    assert bench_demo.variant_args("auto", "as-is") == ([], {})
    assert bench_demo.variant_args("fp32", "avx2") == (
        ["--fp32"], {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"})
    args = bench_demo.build_parser().parse_args(["--cpu-class", "avx2"])
    name = bench_demo.section_name(args)
    assert name == "bench_demo_avx2_auto" and name in common.SECTIONS
    assert bench_demo.section_name(bench_demo.build_parser().parse_args([])) == "bench_demo"
    cmd = [sys.executable, "-c", "import os; print('arithmetic: float32, because ' + "
           "os.environ['ONEDNN_MAX_CPU_ISA']); print('Results (x):'); print('done')"]
    res = bench_demo.run_demo(tmp_path / "out", quick=True, timeout=60, cmd=cmd,
                              log_path=tmp_path / "log", env=bench_demo.AVX2_ENV)
    assert res["rc"] == 0 and "because AVX2" in (tmp_path / "log").read_text()
    facts = _facts()
    md = common.facts_markdown(facts)
    assert "flags" in md and facts["cpu_flags"] in md
    if Path("/proc/cpuinfo").is_file():
        assert any(f in facts["cpu_flags"] for f in common.ARITHMETIC_FLAGS)


def test_profile_demo_counts_self_time_and_tabulates_by_stage_and_kind(tmp_path):
    import json
    import time

    import profile_demo

    clock = profile_demo._Clock()
    with clock.stage("outer"):
        time.sleep(0.05)
        with clock.stage("inner"):
            time.sleep(0.1)
    assert 0.09 < clock.wall["inner"] < 0.5 and 0.04 < clock.wall["outer"] < 0.09
    # a warm worker's second node: the functions wrapped for the first time the current clock
    import types

    mod = types.ModuleType("fake_stage_module")
    mod.work = lambda: time.sleep(0.02)
    first, second = profile_demo._Clock(), profile_demo._Clock()
    profile_demo._CURRENT[:] = [first]
    wrapped = profile_demo._wrap("training", mod.work)
    assert profile_demo._wrap("training", wrapped) is wrapped  # wrapped once
    profile_demo._CURRENT[:] = [second]
    wrapped()
    assert second.wall["training"] > 0.015 and not first.wall
    rows = [{"kind": "teacher", "seed": 0, "method": "naive", "lambda": 0.0, "captured": False,
             "cpu": 100.0, "wall": 200.0,
             "stages_cpu": {"training": 60.0, "scoring": 40.0}, "stages_wall": {}},
            {"kind": "student", "seed": 1, "method": "naive", "lambda": 0.0, "captured": False,
             "cpu": 50.0, "wall": 90.0,
             "stages_cpu": {"training": 30.0, "scoring": 20.0}, "stages_wall": {}}]
    text = "\n".join(profile_demo.tables(rows))
    assert "| training | 60 | 30 | 90 | 60% |" in text
    assert "| **all** | 100 | 50 | 150 | 100% |" in text
    (tmp_path / "profile.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    body = profile_demo.summarise(tmp_path, [], "a note")
    assert "PARTIAL: 2 node(s)" in body and "a note" in body and "flags" in body


def test_bench_fp32_levers(tiny_model):
    import bench_fp32_levers

    args = bench_step.build_parser().parse_args(
        ["--model", str(tiny_model), "--data", "synthetic", "--max-length", "16"])
    args.steps, args.repeats = 2, 1
    res = bench_fp32_levers.measure(args)
    assert set(res["times"]) == {"step sdpa", "step eager", "step packed", "score 64 no_grad",
                                 "score 64 inference_mode", "score 256 no_grad"}
    assert all(len(v) == 1 and v[0] > 0 for v in res["times"].values())
    assert 0 < res["real"] <= 1
