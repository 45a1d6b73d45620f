"""Benchmark: a demo worker's resident memory under allocator settings, and what they cost.

A pool worker of ``anchorviz demo`` runs node after node in one process, so each node starts on
what the last one left resident. This runs that chain: in one fresh process per variant, the
demo's scores-only naive students of ``--seeds`` (default two) one after the other, as a worker
does (``anchorviz.pipeline.runner.execute_node``), under each allocator variant:

- ``default``: glibc's and oneDNN's defaults;
- ``onednn``: oneDNN's primitive cache at 8 primitives (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``;
  its default is 1024);
- ``mmap``: glibc's ``M_MMAP_THRESHOLD`` fixed at ``--mmap-threshold`` bytes (default 1 MiB):
  large blocks get their own mappings and go back to the system when freed;
- ``onednn+mmap``: both (what ``anchorviz.pipeline.runner.limit_heap`` sets in a local worker).

Per variant: the process's CPU seconds (user + system), its peak RSS (VmHWM) after each node,
its RSS after each node, and a hash of every node's scores (the same in every variant: an
allocator setting changes no number). The variants run ``--jobs`` at a time (default 2, as the
demo's two workers do: with four variants each one runs beside another); the teachers are
trained once beforehand in a shared store that each variant copies.

    python bench/bench_heap.py            # the section in docs/BENCHMARKS.md (about 8 minutes)
    python bench/bench_heap.py --quick    # the quick demo's sizes (a smoke run)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

VARIANTS = ("default", "onednn", "mmap", "onednn+mmap")


def variant_settings(variant: str, mmap_threshold: int) -> dict:
    """The ``limit_heap`` arguments of a variant (None: left at the library default)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    return {"onednn_cache": 8 if "onednn" in variant else None,
            "mmap_threshold": mmap_threshold if "mmap" in variant else None}


def demo_nodes(seeds: list[int], quick: bool) -> tuple[list, list]:
    """(teacher nodes, scores-only naive student nodes) of the demo for ``seeds``."""
    from anchorviz.pipeline.demo import demo_sweep
    from anchorviz.pipeline.runner import build_graph
    from anchorviz.sweep_config import expand_sweep

    sw = demo_sweep(seeds=tuple(seeds), quick=quick)
    sw.detail_seeds = []  # every seed a naive student scored only, as the demo's verdict seeds
    nodes = build_graph(expand_sweep(sw))
    return ([n for n in nodes if n.kind == "teacher"],
            [n for n in nodes if n.kind == "student"])


def scores_hash(store: Path, before: set[str]) -> str:
    """sha256 over the reward columns of the run directories that appeared since ``before``."""
    import pandas as pd

    h = hashlib.sha256()
    for d in sorted(set(os.listdir(store / "runs")) - before):
        df = pd.read_parquet(store / "runs" / d / "scores.parquet")
        for col in sorted(c for c in df.columns if df[c].dtype.kind == "f"):
            h.update(df[col].to_numpy().tobytes())
    return h.hexdigest()[:16]


def worker(variant: str, store: Path, seeds: list[int], quick: bool, mmap_threshold: int) -> dict:
    """One variant's chain in this (fresh) process; returns its measurements."""
    from anchorviz.pipeline.runner import limit_heap

    took = limit_heap(**variant_settings(variant, mmap_threshold))
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch

    torch.set_num_threads(1)
    from anchorviz.pipeline.runner import execute_node

    _, students = demo_nodes(seeds, quick)
    c0 = time.process_time()
    nodes = []
    for node in students:
        before = set(os.listdir(store / "runs"))
        t0 = time.perf_counter()
        execute_node(node.kind, node.config, str(store))
        nodes.append({"seed": int(node.config["seed"]), "seconds": time.perf_counter() - t0,
                      "peak_mb": common.hwm_rss_mb(), "after_mb": common.current_rss_mb(),
                      "scores": scores_hash(store, before)})
    return {"variant": variant, "took": took, "cpu_s": time.process_time() - c0, "nodes": nodes}


def prepare_teachers(store: Path, seeds: list[int], quick: bool, reuse: Path | None) -> None:
    """Teachers of ``seeds`` in ``store``: copied from ``reuse`` where it has them, else trained."""
    from anchorviz.pipeline.runner import execute_node
    from anchorviz.pipeline.store import RunStore

    teachers, _ = demo_nodes(seeds, quick)
    (store / "runs").mkdir(parents=True, exist_ok=True)
    for t in teachers:
        if reuse is not None and RunStore(reuse).is_finished(t.id):
            shutil.copytree(reuse / "runs" / t.id, store / "runs" / t.id)
        else:
            execute_node(t.kind, t.config, str(store))


def measure(args, log=print) -> dict:
    base = Path(tempfile.mkdtemp(prefix="bench_heap_", dir=args.tmp))
    try:
        teachers = base / "teachers"
        prepare_teachers(teachers, args.seeds, args.quick, args.reuse)
        pending = list(VARIANTS)
        running: dict[str, tuple[subprocess.Popen, Path]] = {}
        out: dict[str, dict] = {}
        while pending or running:
            while pending and len(running) < args.jobs:
                v = pending.pop(0)
                store = base / v.replace("+", "_")
                shutil.copytree(teachers, store)
                cmd = [sys.executable, __file__, "--worker", v, "--store", str(store),
                       "--mmap-threshold", str(args.mmap_threshold),
                       "--seeds", *map(str, args.seeds), *(["--quick"] if args.quick else [])]
                running[v] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True), store)
                log(f"started {v}")
            for v, (proc, _) in list(running.items()):
                if proc.poll() is None:
                    continue
                text = proc.stdout.read()
                lines = [ln for ln in text.splitlines() if ln.startswith("{")]
                if proc.returncode != 0 or not lines:
                    raise RuntimeError(f"variant {v} failed (rc {proc.returncode}): {text[-2000:]}")
                out[v] = json.loads(lines[-1])
                del running[v]
                log(f"finished {v}: {out[v]['cpu_s']:.0f} CPU-s")
            time.sleep(0.5)
        return {"variants": out, "seeds": args.seeds, "jobs": args.jobs,
                "mmap_threshold": args.mmap_threshold, "quick": args.quick}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def markdown(res: dict, args, command: str, facts: dict, elapsed: float) -> str:
    vs = res["variants"]
    ref = vs["default"]
    rows = []
    for v in VARIANTS:
        r = vs[v]
        cells = [f"`{v}`", f"{r['cpu_s']:.0f}", f"{r['cpu_s'] / ref['cpu_s']:.2f}"]
        for n in r["nodes"]:
            cells += [f"{n['peak_mb']:,.0f}", f"{n['after_mb']:,.0f}"]
        same = all(a["scores"] == b["scores"] for a, b in zip(r["nodes"], ref["nodes"]))
        cells.append("yes" if same else "**NO**")
        rows.append(cells)
    heads = ["variant", "CPU s", "CPU vs default"]
    for i, s in enumerate(res["seeds"], 1):
        heads += [f"peak RSS after node {i} (seed {s}) MB", f"RSS left after node {i} MB"]
    heads.append("scores identical to default")
    table = common.md_table(heads, rows)
    best = vs["onednn+mmap"]
    notes = (
        f"- Peak RSS of the chain: default {ref['nodes'][-1]['peak_mb']:,.0f} MB, "
        f"`onednn` {vs['onednn']['nodes'][-1]['peak_mb']:,.0f} MB, `mmap` "
        f"{vs['mmap']['nodes'][-1]['peak_mb']:,.0f} MB, `onednn+mmap` "
        f"{best['nodes'][-1]['peak_mb']:,.0f} MB ({best['nodes'][-1]['peak_mb'] / ref['nodes'][-1]['peak_mb']:.2f}x); "
        f"CPU time {best['cpu_s'] / ref['cpu_s']:.2f}x the default's. The peak is the process's "
        "whole life (VmHWM), so the last node's column is the chain's peak.\n"
        f"- M_MMAP_THRESHOLD: {res['mmap_threshold']:,} bytes. The variants ran "
        f"{res['jobs']} at a time (as the demo's workers do), so CPU seconds include the same "
        "contention for each; one run per variant (a chain takes minutes), so CPU ratios within "
        "a few percent are noise.")
    intro = (f"The demo's scores-only naive students of seeds {', '.join(map(str, res['seeds']))} "
             "run one after the other in one fresh process per variant, as a pool worker runs "
             "them (each node starts on what the last left resident)"
             + (" (quick demo sizes)" if res["quick"] else "") + ".")
    return common.section("bench_heap", intro, table, notes, command, facts, elapsed)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--quick", action="store_true", help="the quick demo's sizes")
    ap.add_argument("--jobs", type=int, default=2, help="variants run at a time")
    ap.add_argument("--mmap-threshold", type=int, default=1 << 20)
    ap.add_argument("--reuse", type=Path, default=None,
                    help="a demo store to copy finished teachers from (e.g. runs/demo)")
    ap.add_argument("--tmp", type=Path, default=None, help="where the temporary stores go")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--worker", choices=VARIANTS, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--store", type=Path, default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.store, args.seeds, args.quick,
                                args.mmap_threshold)))
        return
    common.publish("bench_heap", args, argv, lambda: measure(args), markdown)


if __name__ == "__main__":
    main()
