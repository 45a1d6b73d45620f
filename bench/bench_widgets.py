"""Benchmark: response time of the sweep explorer (``anchorviz.viz.widgets.SweepExplorer``).

Builds a stored sweep (``tests/support/fake_sweep.py``'s writer, sized like the full demo: 400 pairs per
test split, source + 3 targets, 2 map layers; or ``--sweep DIR`` for a real finished sweep),
constructs the explorer, then applies ``--changes`` random single-control changes through
``explorer.update(...)`` (method, lambda, anchored layers, target, seed; every change a new value)
and reads ``explorer.timings`` (milliseconds per panel) after each. Reported: median and p90 per
panel, of drift + accuracy together, and of the whole ``update`` call (the run lookup included).

What is timed is the Python side of an update (table lookups and the ``go.FigureWidget`` trace
updates inside ``batch_update``); outside a notebook there is no front end, so sending the
messages to a browser and plotly.js drawing them are not included.

Usage (what produced docs/BENCHMARKS.md)::

    python bench/bench_widgets.py
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TESTS = common.REPO / "tests"
KEYS = ("method", "lambda_", "layer", "target", "seed")


def build_fake_sweep(root: Path, n_pairs: int = 400, seeds=(0, 1, 2),
                     lambdas=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0)) -> Path:
    sys.path.insert(0, str(TESTS))
    from fake_sweep import write_fake_sweep

    return write_fake_sweep(root, seeds=seeds, lambdas=lambdas, layers=("last", "middle"),
                            targets=("amazon", "nyt", "tweets"),
                            methods=("naive", "confidence", "anchor"), n_pairs=n_pairs,
                            projection_layers=(3, 6))


def _values(w) -> list:
    opts = list(w.options)
    return [v for _, v in opts] if opts and isinstance(opts[0], tuple) else opts


def random_changes(explorer, n: int, seed: int = 0) -> list[dict]:
    """``n`` single-key changes, each to a value different from the current one."""
    rng = np.random.default_rng(seed)
    controls = explorer._controls()
    current = {k: controls[k].value for k in KEYS}
    keys = [k for k in KEYS if len(_values(controls[k])) > 1]
    out = []
    for _ in range(n):
        key = keys[int(rng.integers(len(keys)))]
        choices = [v for v in _values(controls[key]) if v != current[key]]
        value = choices[int(rng.integers(len(choices)))]
        current[key] = value
        out.append({key: value})
    return out


def measure(sweep_dir: Path, changes: int, seed: int = 0, log=print) -> dict:
    from anchorviz.viz.widgets import SweepExplorer

    t0 = time.perf_counter()
    explorer = SweepExplorer(sweep_dir)
    build_s = time.perf_counter() - t0
    live = all(s.live for s in explorer._slots.values())
    explorer.update(method="anchor")  # first update: warm caches (summaries per target)
    rec = {k: [] for k in ("drift", "umap", "accuracy", "drift+accuracy", "total", "update")}
    per_key = {k: [] for k in KEYS}
    for change in random_changes(explorer, changes, seed):
        t = time.perf_counter()
        explorer.update(**change)
        wall = 1e3 * (time.perf_counter() - t)
        tm = explorer.timings
        for k in ("drift", "umap", "accuracy", "total"):
            rec[k].append(tm[k])
        rec["drift+accuracy"].append(tm["drift"] + tm["accuracy"])
        rec["update"].append(wall)
        per_key[next(iter(change))].append(wall)
    log(f"explorer built in {build_s:.2f} s; {changes} updates done")
    n_runs = int((explorer.results["kind"] != "teacher").sum())
    return {"ms": rec, "per_key": per_key, "build_s": build_s, "live": live, "n_runs": n_runs}


def markdown(res, args, sweep_desc, command, facts, elapsed) -> str:
    ms = res["ms"]
    labels = {"drift": "drift panel", "accuracy": "accuracy panel",
              "drift+accuracy": "drift + accuracy", "umap": "UMAP panel",
              "total": "all three panels", "update": "whole `update()` call"}
    rows = [[labels[k], f"{common.median(v):.1f}", f"{common.p90(v):.1f}", f"{max(v):.1f}"]
            for k, v in ms.items()]
    table = common.md_table(["what", "median ms", "p90 ms", "max ms"], rows)
    per_key = ", ".join(f"`{k}` {common.median(v):.0f} ms (n={len(v)})"
                        for k, v in res["per_key"].items() if v)
    acc_ok = common.p90(ms["drift+accuracy"]) < 100
    umap_ok = common.p90(ms["umap"]) < 300
    intro = (
        f"Sweep: {sweep_desc} ({res['n_runs']} student / ceiling runs). Explorer construction "
        f"(reads results, every drift and projection table once): {res['build_s']:.2f} s. "
        f"{args.changes} random single-control changes (seed {args.seed}) through "
        "`explorer.update(...)`; panel times from `explorer.timings`. Figures are "
        + ("live `go.FigureWidget`s (anywidget installed)." if res["live"] else
           "plain figures (anywidget missing: the slower fallback).")
    )
    notes = "\n".join([
        f"- Target: accuracy + drift panels < 100 ms (p90 of their sum): {common.met(acc_ok)}.",
        f"- Target: UMAP panel < 300 ms (p90): {common.met(umap_ok)}.",
        f"- Median whole-update time by the control changed: {per_key}.",
        "- Python side only: no browser is attached, so message transport and plotly.js "
        "rendering are not in these numbers.",
    ])
    return common.section("bench_widgets", intro, table, notes, command, facts, elapsed)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, default=None, help="a finished sweep directory")
    ap.add_argument("--pairs", type=int, default=400, help="fake sweep: pairs per test split")
    ap.add_argument("--changes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    facts = common.machine_facts()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-widgets-") as tmp:
        if args.sweep is None:
            sweep = build_fake_sweep(Path(tmp) / "sweep", n_pairs=args.pairs)
            desc = (f"synthetic (`tests/support/fake_sweep.py`: 3 seeds, naive / confidence / ANCHOR at 6 "
                    f"lambdas x 2 layer sets, 3 targets, {args.pairs} pairs per test split, map "
                    "layers 3 and 6)")
        else:
            sweep, desc = args.sweep, f"`{args.sweep}`"
        res = measure(sweep, args.changes, args.seed,
                      log=lambda m: print(m, file=sys.stderr, flush=True))
    md = markdown(res, args, desc, common.command_line("bench_widgets.py", argv), facts,
                  time.time() - t0)
    print(md)
    if not args.no_write:
        print(f"updated {common.update_section('bench_widgets', md)}", file=sys.stderr)


if __name__ == "__main__":
    main()
