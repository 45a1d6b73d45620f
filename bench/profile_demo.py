"""Profile: where the demo's CPU goes, node kind by node kind and, within a node, stage by stage.

Runs the default demo's sweep (`anchorviz.pipeline.demo.demo_sweep`, the arithmetic asked for:
``--precision fp32`` by default, the path of a CPU without native bfloat16) into a fresh folder
on ``--jobs`` local worker processes, exactly as ``anchorviz demo`` does, except that every node
runs through `profiled_node`: it wraps the pipeline's stages (loading the backbone, tokenising,
training steps, validation scoring inside training, scoring the evaluation splits, hidden-state
capture, the reference capture, drift, the shared map (UMAP fit / transform), bootstrap
blocks, saving) with a timer that records each stage's SELF time (a nested stage's time is
taken out of its parent's) in process CPU-seconds and wall seconds, per node, into
``<out>/profile.jsonl``. The driver then times what ``anchorviz demo`` does after the sweep
(results table, verdict, HTML report).

It prints (and with ``--write`` puts in docs/BENCHMARKS.md) one table per node kind and one of
the stages summed over the demo, with the end-to-end wall time, the CPU-seconds of the tree and
the load average: on a shared machine the wall time is not an idle one, the CPU-seconds are
close to one.

To take the path of a CPU without native bfloat16 on one that has it, run under
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` (bench/bench_precision.py checks that this
takes native bfloat16 away); float32 matmuls then use AVX2 kernels, as on such a CPU.

Usage::

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python bench/profile_demo.py --jobs 2
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (module, attribute, stage name): the functions timed, where the pipeline looks them up
STAGES = [
    ("anchorviz.pipeline.steps", "load_backbone", "load backbone"),
    ("anchorviz.pipeline.steps", "encode_run_pairs", "tokenise"),
    ("anchorviz.pipeline.steps", "train_reward_model", "training"),
    ("anchorviz.training.loop", "score_pairs", "validation in training"),
    ("anchorviz.pipeline.steps", "score_pairs", "scoring"),
    ("anchorviz.pipeline.steps", "anchor_reference", "ANCHOR reference set-up"),
    ("anchorviz.pipeline.steps", "evaluate_model", "scoring"),
    ("anchorviz.analysis.capture", "capture_states", "capture"),
    ("anchorviz.pipeline.steps", "ensure_reference_capture", "reference capture (make / read)"),
    ("anchorviz.pipeline.steps", "drift_blocks", "drift (CKA, cosine)"),
    ("anchorviz.pipeline.steps", "_projector", "UMAP fit / load"),
    ("anchorviz.pipeline.steps", "_projection_table", "projection (UMAP transform)"),
    ("anchorviz.pipeline.steps", "save_captured", "save"),
    ("anchorviz.analysis.capture", "save_captured", "save"),
    ("anchorviz.pipeline.steps", "_save_weights", "save"),
    ("anchorviz.pipeline.steps", "accuracy_block", "bootstrap blocks"),
    ("anchorviz.pipeline.steps", "cue_block", "bootstrap blocks"),
    ("anchorviz.pipeline.steps", "transfer_block", "bootstrap blocks"),
    ("anchorviz.pipeline.steps", "release_memory", "release memory"),
    ("anchorviz.pipeline.steps", "prepare_data", "prepare data"),
    ("anchorviz.pipeline.runner", "prepare_data", "prepare data"),
]


class _Clock:
    """Self time per stage: entering a stage pauses the one it is called from."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = collections.defaultdict(float)
        self.wall: dict[str, float] = collections.defaultdict(float)
        self.stack: list[list] = []

    @contextlib.contextmanager
    def stage(self, name: str):
        c0, w0 = time.process_time(), time.perf_counter()
        self.stack.append([name, 0.0, 0.0])
        try:
            yield
        finally:
            _, cc, cw = self.stack.pop()
            dc, dw = time.process_time() - c0, time.perf_counter() - w0
            self.cpu[name] += dc - cc
            self.wall[name] += dw - cw
            if self.stack:
                self.stack[-1][1] += dc
                self.stack[-1][2] += dw


#: the clock of the node running in this process (a warm worker runs node after node: its
#: wrapped functions must time the current node, not the one that wrapped them)
_CURRENT: list[_Clock] = []


def _wrap(name: str, fn):
    if getattr(fn, "_profiled", False):
        return fn

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        with _CURRENT[-1].stage(name):
            return fn(*args, **kwargs)

    inner._profiled = True
    return inner


def _patch(clock: _Clock) -> None:
    import importlib

    _CURRENT[:] = [clock]
    for mod, attr, name in STAGES:
        m = importlib.import_module(mod)
        if hasattr(m, attr):
            setattr(m, attr, _wrap(name, getattr(m, attr)))


def profiled_node(kind: str, config: dict, out_dir: str) -> dict:
    """`anchorviz.pipeline.runner.execute_node` with its stages timed (one jsonl line per node)."""
    from anchorviz.pipeline import runner

    clock = _Clock()
    _patch(clock)
    c0, w0 = time.process_time(), time.perf_counter()
    with clock.stage("other (in the node)"):
        res = runner.execute_node(kind, config, out_dir)
    row = {"kind": kind, "seed": config.get("seed"), "method": config["method"]["name"],
           "lambda": config["method"].get("anchor_lambda"),
           "captured": bool(config["capture"]["enabled"]), "pid": os.getpid(),
           "cpu": time.process_time() - c0, "wall": time.perf_counter() - w0,
           "stages_cpu": dict(clock.cpu), "stages_wall": dict(clock.wall)}
    with open(Path(out_dir) / "profile.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    return res


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def tables(rows: list[dict]) -> list[str]:
    """Markdown lines: the nodes (CPU-s, wall s) and the CPU-seconds by stage and node kind."""
    lines = ["Per node (CPU-s of the node's process, wall s):", "",
             "| node | seed | captured | CPU-s | wall s |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (["teacher", "reference", "ceiling", "student"].index(
            r["kind"]), r["seed"], r["method"], r["lambda"] or 0)):
        name = r["kind"] if r["kind"] != "student" else f"student {r['method']}" + (
            f" lambda {r['lambda']:g}" if r["method"] == "anchor" else "")
        lines.append(f"| {name} | {r['seed']} | {'yes' if r['captured'] else 'no'} | "
                     f"{r['cpu']:.0f} | {r['wall']:.0f} |")
    kinds: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    for r in rows:
        k = r["kind"] if r["kind"] != "student" else (
            "student, captured" if r["captured"] else "student, scores only")
        for st, v in r["stages_cpu"].items():
            kinds[k][st] += v
    stages = sorted({st for v in kinds.values() for st in v},
                    key=lambda st: -sum(v.get(st, 0) for v in kinds.values()))
    order = [k for k in ("teacher", "reference", "ceiling", "student, captured",
                         "student, scores only") if k in kinds]
    total = sum(sum(v.values()) for v in kinds.values()) or float("nan")
    lines += ["", "CPU-seconds by stage (self time: a nested stage is not counted in its "
              "parent) and node kind, summed over the profiled nodes:", "",
              "| stage | " + " | ".join(order) + " | all | share |",
              "|---|" + "---|" * (len(order) + 2)]
    for st in stages:
        vals = [kinds[k].get(st, 0.0) for k in order]
        lines.append(f"| {st} | " + " | ".join(f"{v:.0f}" for v in vals)
                     + f" | {sum(vals):.0f} | {sum(vals) / total:.0%} |")
    lines.append("| **all** | " + " | ".join(f"{sum(kinds[k].values()):.0f}" for k in order)
                 + f" | {total:.0f} | 100% |")
    return lines


def summarise(folder: Path, argv: list[str] | None, note: str = "") -> str:
    """The tables of a profile folder's ``profile.jsonl`` (the nodes finished so far)."""
    import common

    rows = [json.loads(x) for x in (folder / "profile.jsonl").read_text().splitlines()]
    facts = common.machine_facts()
    head = [f"## {common._TITLES['profile_demo']}", "",
            f"PARTIAL: {len(rows)} node(s) finished when this was written. " + note, ""]
    return "\n".join(head + tables(rows) + [
        "", common.facts_markdown(facts), "",
        f"Command: `{common.command_line('profile_demo.py', argv)}`"])


def main(argv: list[str] | None = None) -> int:
    import common

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--out", default=None, help="run folder (default: a fresh temporary one)")
    ap.add_argument("--seeds", type=int, nargs="*", default=None)
    ap.add_argument("--quick", action="store_true", help="the smoke-sized demo (checks the script)")
    ap.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    ap.add_argument("--summarise", type=Path, default=None,
                    help="only tabulate the nodes an earlier (or running) profile finished")
    ap.add_argument("--note", default="", help="a sentence for a --summarise section")
    args = ap.parse_args(argv)
    if args.summarise is not None:
        body = summarise(args.summarise, argv, args.note)
        print(body)
        if args.write:
            common.update_section("profile_demo", body)
        return 0
    os.environ.setdefault("TQDM_DISABLE", "1")
    facts = common.machine_facts()
    out = Path(args.out or tempfile.mkdtemp(prefix="profile-demo-"))
    from anchorviz.pipeline.demo import demo_sweep
    from anchorviz.pipeline.runner import build_graph
    from anchorviz.sweep_config import expand_sweep

    sw = demo_sweep(bf16=args.precision == "bf16", quick=args.quick, seeds=tuple(args.seeds) if args.seeds else None)
    nodes = build_graph(expand_sweep(sw))
    t0, c0 = time.perf_counter(), _children_cpu() + _self_cpu()
    loads = [common.loadavg()[0]]
    from profile_demo import profiled_node  # by module name: the workers import it so

    from anchorviz.pipeline import runner
    from anchorviz.pipeline.sweep import sweep

    real = runner.run_graph
    graph_wall: list[float] = []

    def timed_graph(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **{**k, "execute": profiled_node})
        finally:
            graph_wall.append(time.perf_counter() - t)

    runner.run_graph = timed_graph
    try:  # what `anchorviz demo` runs: data in the driver, the graph, the results table
        sweep(sw, out, jobs=args.jobs, threads=1, progress=False)
    finally:
        runner.run_graph = real
    sweep_wall = time.perf_counter() - t0
    loads.append(common.loadavg()[0])
    driver = _Clock()
    from anchorviz.pipeline.results import results_table
    from anchorviz.viz.report import write_report

    own = {n.id for n in nodes if n.kind != "reference"}
    with driver.stage("results table (again)"):
        df = results_table(out)
    df = df[df["run_id"].isin(own)].reset_index(drop=True)
    with driver.stage("verdict"):
        from anchorviz.pipeline.demo import verdict_sentence

        sentence = verdict_sentence(df)
    with driver.stage("HTML report"):
        write_report(out, run_ids=own)
    wall = time.perf_counter() - t0
    cpu = _children_cpu() + _self_cpu() - c0
    rows = [json.loads(x) for x in (out / "profile.jsonl").read_text().splitlines()]
    print(sentence)
    lines = [f"## {common._TITLES['profile_demo']}", "", f"Precision {args.precision}; {len(nodes)} nodes on {args.jobs} worker processes "
             f"(1 thread each); environment ATEN_CPU_CAPABILITY="
             f"{os.environ.get('ATEN_CPU_CAPABILITY', '-')}, ONEDNN_MAX_CPU_ISA="
             f"{os.environ.get('ONEDNN_MAX_CPU_ISA', '-')}. End to end {wall / 60:.1f} min wall "
             f"(sweep {sweep_wall / 60:.1f} min, of which the run graph {graph_wall[0] / 60:.1f} "
             f"min; after the sweep "
             f"{sum(driver.wall.values()):.0f} s), {cpu:.0f} CPU-s over the process tree; "
             f"load average (1 min) {loads[0]:.1f} at the start, {loads[1]:.1f} at the end of "
             "the sweep (other jobs shared the 2 cores: the wall time is not an idle one).", "",
             *tables(rows)]
    lines += ["", "After the sweep, in the driver (CPU-s): " + ", ".join(
        f"{k} {v:.1f}" for k, v in driver.cpu.items()) + ".", "",
        common.facts_markdown(facts), "",
        f"Command: `{common.command_line('profile_demo.py', argv)}`"]
    body = "\n".join(lines)
    print(body)
    print(f"Store: {out}")
    (out / "profile.md").write_text(body + "\n")
    if args.write:
        common.update_section("profile_demo", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
