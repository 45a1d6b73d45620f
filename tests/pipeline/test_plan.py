"""The demo's options in one home (`anchorviz.pipeline.demo.DemoOptions`) and the run planning
the notebooks print before training (`anchorviz.pipeline.plan`)."""

from __future__ import annotations

import dataclasses
import json

from anchorviz.cli import build_parser, demo_out
from anchorviz.pipeline.demo import DemoOptions, demo_sweep
from anchorviz.pipeline.plan import (
    describe_plan,
    run_finished,
    run_minutes,
    sweep_plan,
    sweep_run_ids,
    sweep_runs,
)


def _demo_parser():
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices["demo"]


def test_the_command_line_reads_the_demo_options_and_their_defaults():
    parser = build_parser()
    assert DemoOptions.from_args(parser.parse_args(["demo"])) == DemoOptions()
    dests = {a.dest for a in _demo_parser()._actions}
    assert {f.name for f in dataclasses.fields(DemoOptions)} <= dests
    args = parser.parse_args(["demo", "--fp32", "--quick", "--seeds", "3", "1",
                              "--scenario", "marker", "--visibility", "0.25", "--strength", "0.5"])
    assert DemoOptions.from_args(args) == DemoOptions(strength=0.5, seeds=(3, 1), quick=True,
                                                      scenario="marker", visibility=0.25,
                                                      precision="fp32")
    assert DemoOptions.from_args(parser.parse_args(["demo", "--bf16"])).precision == "bf16"


def test_demo_options_build_the_demos_sweep_and_folder():
    assert sweep_run_ids(DemoOptions()) == sweep_run_ids(demo_sweep())
    fp32 = DemoOptions(precision="fp32", seeds=(0, 1))
    assert sweep_run_ids(fp32) == sweep_run_ids(demo_sweep(seeds=(0, 1), precision="fp32"))
    assert sweep_run_ids(fp32) != sweep_run_ids(DemoOptions(precision="bf16", seeds=(0, 1)))
    assert DemoOptions().out_dir() == demo_out("hidden-cue", False) == "runs/demo"
    assert DemoOptions(scenario="echo", quick=True, precision="fp32").out_dir() == \
        demo_out("echo", True) == "runs/demo-echo-quick"


def test_the_plan_counts_stored_runs_and_prices_the_rest(tmp_path):
    opts = DemoOptions(quick=True)
    runs = sorted(sweep_runs(opts))
    p = sweep_plan(opts, tmp_path)
    assert p["total"] == len(runs) == len(sweep_run_ids(opts.sweep())) and p["stored"] == 0
    assert sorted(p["missing"]) == runs and 0 < p["cpu_minutes"][0] < p["cpu_minutes"][1]
    for rid in runs[:2]:
        (tmp_path / "runs" / rid).mkdir(parents=True)
        (tmp_path / "runs" / rid / "MANIFEST.json").write_text(json.dumps({"status": "finished"}))
    (tmp_path / "runs" / runs[2]).mkdir(parents=True)  # a failed run is trained again
    (tmp_path / "runs" / runs[2] / "MANIFEST.json").write_text(json.dumps({"status": "failed"}))
    assert run_finished(tmp_path, runs[0]) and not run_finished(tmp_path, runs[2])
    p = sweep_plan(opts, tmp_path)
    assert p["stored"] == 2 and sorted(p["missing"]) == runs[2:]
    assert f"2 are stored and will be read; {len(runs) - 2} will be trained" in \
        describe_plan(opts, tmp_path)
    # a student costs more than a teacher; bfloat16 autocast less than float32
    bf16 = DemoOptions(precision="bf16").sweep()
    fp32 = DemoOptions(precision="fp32").sweep()
    assert run_minutes(fp32, "student")[0] > run_minutes(fp32, "teacher")[0]
    assert run_minutes(bf16, "student")[0] < run_minutes(fp32, "student")[0]
