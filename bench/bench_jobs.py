"""Benchmark: ``anchorviz demo --jobs 1`` vs ``--jobs 2``, side by side on one machine.

Each round runs the demo twice, once per worker count, each into a FRESH temporary folder (so
nothing is reused from a previous run; models come from the zoo cache, prepared once before the
first round and outside every timing), the order alternating from round to round (round 1:
jobs 1 then jobs 2; round 2: jobs 2 then jobs 1; ...). Both use the demo's default of one torch
thread per worker, so ``--jobs 1`` uses one core and ``--jobs 2`` up to two. Reported per run:
wall time, CPU time of the whole process tree (user + sys, from ``getrusage(RUSAGE_CHILDREN)``,
which includes the worker processes the demo reaps), the load average sampled during the run, and
per round the ratio wall(jobs 2) / wall(jobs 1) with its median over rounds (target <= 0.6x).

Results check: every run's ``results.parquet`` must equal the first ``--jobs 1`` run's (same run
ids, same columns, every value identical, the ``seconds`` column ignored), and the results table
each run printed must be the same text.

Usage::

    python bench/bench_jobs.py                      # the full demo, 1 round (~15 min idle)
    python bench/bench_jobs.py --rounds 2           # 2 rounds, order alternating (~30 min)
    python bench/bench_jobs.py --quick --rounds 1   # the quick demo (a check of the harness)

The full demo needs a machine with 2 otherwise idle cores for a meaningful ratio: under load the
second worker competes with other jobs, not only with the first worker.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bench_demo import run_demo  # noqa: E402

TARGET_RATIO = 0.6
JOBS = (1, 2)
IGNORE_COLUMNS = ("seconds",)  # the only column allowed to differ between identical runs


# --------------------------------------------------------------------------- results check


def compare_results(a, b, ignore: tuple[str, ...] = IGNORE_COLUMNS, rtol: float = 1e-9,
                    atol: float = 1e-12) -> dict:
    """Compare two results tables (pandas DataFrames) row by row keyed on ``run_id``.

    Returns ``{"identical": bool, "close": bool, "run_ids": bool, "columns": bool,
    "differing": [columns], "max_abs_diff": float}``: identical means the same set of run ids,
    the same columns and every value equal (NaN equal to NaN), once ``ignore`` columns are
    dropped; close means the same except that numeric values may differ by float rounding
    (``rtol``, ``atol``), which the check reports rather than hides.
    """
    import numpy as np
    import pandas as pd

    a = a.drop(columns=[c for c in ignore if c in a.columns])
    b = b.drop(columns=[c for c in ignore if c in b.columns])
    out = {"run_ids": set(a["run_id"]) == set(b["run_id"]) and len(a) == len(b),
           "columns": set(a.columns) == set(b.columns), "differing": [], "max_abs_diff": 0.0}
    if not (out["run_ids"] and out["columns"]):
        out["identical"] = out["close"] = False
        return out
    close = True
    a = a.set_index("run_id").sort_index()
    b = b.set_index("run_id").sort_index()[a.columns]
    for col in a.columns:
        x, y = a[col], b[col]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            xv, yv = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
            same = (xv == yv) | (np.isnan(xv) & np.isnan(yv))
            if not same.all():
                out["differing"].append(col)
                diff = np.abs(xv - yv)[~same]
                out["max_abs_diff"] = max(out["max_abs_diff"], float(np.nanmax(diff))
                                          if np.isfinite(diff).any() else float("inf"))
                close = close and bool(np.allclose(xv, yv, rtol=rtol, atol=atol, equal_nan=True))
        elif not ((x == y) | (x.isna() & y.isna())).all():
            out["differing"].append(col)
            close = False
    out["identical"] = not out["differing"]
    out["close"] = close
    return out


def printed_table(log_text: str) -> str:
    """The results table and verdict the demo printed (from ``Results (`` up to the report line)."""
    start = log_text.rfind("Results (")
    if start < 0:
        return ""
    lines = log_text[start:].splitlines()
    return "\n".join(ln for ln in lines if not ln.startswith("HTML report")).strip()


# --------------------------------------------------------------------------- running


def warm_models(quick: bool) -> list[str]:
    """Prepare (extract / verify) the demo's zoo models once, outside every timing."""
    from anchorviz.models.zoo import resolve_model
    from anchorviz.pipeline.demo import demo_sweep

    models = demo_sweep(quick=quick).base.models
    names = []
    for name in {models.teacher, models.student}:
        path = resolve_model(name)
        names.append(name)
        if isinstance(path, Path):  # read the files once so no run pays a cold page cache
            for f in path.rglob("*"):
                if f.is_file():
                    with open(f, "rb") as fh:
                        while fh.read(1 << 24):
                            pass
    return sorted(names)


def run_once(jobs: int, quick: bool, timeout: float, tmp: Path, tag: str) -> dict:
    import pandas as pd

    run_dir = tmp / tag
    run_dir.mkdir()
    out, log_path = run_dir / "demo", run_dir / "demo.log"
    res = run_demo(out, quick, timeout, extra=["--jobs", str(jobs)], log_path=log_path)
    text = log_path.read_text(errors="replace")
    res["jobs"] = jobs
    res["printed"] = printed_table(text)
    res["results"] = (pd.read_parquet(out / "results.parquet")
                      if (out / "results.parquet").is_file() else None)
    if res["rc"] != 0:
        res["log_tail"] = text[-4000:]
    shutil.rmtree(out, ignore_errors=True)  # the next run starts from nothing
    return res


def measure(args, log=print) -> dict:
    rounds: list[dict[int, dict]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    try:
        for r in range(args.rounds):
            order = JOBS if r % 2 == 0 else JOBS[::-1]
            this: dict[int, dict] = {}
            for jobs in order:
                res = run_once(jobs, args.quick, args.timeout, tmp, f"r{r}-jobs{jobs}")
                this[jobs] = res
                load = (sum(res["loads"]) / len(res["loads"])) if res["loads"] else float("nan")
                log(f"round {r + 1}/{args.rounds} --jobs {jobs}: rc {res['rc']}, wall "
                    f"{res['wall_s']:.1f} s, CPU {res['cpu_s']:.1f} s, load {load:.2f}")
                if res["rc"] != 0:
                    log(res.get("log_tail", ""))
            rounds.append(this)
            log(f"round {r + 1}: jobs2 / jobs1 = {this[2]['wall_s'] / this[1]['wall_s']:.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rounds": rounds, "checks": check_all(rounds)}


def check_all(rounds: list[dict[int, dict]]) -> list[dict]:
    """Every run against the first ``--jobs 1`` run: results.parquet and the printed table."""
    ref = rounds[0][1]
    checks = []
    for r, this in enumerate(rounds):
        for jobs, res in sorted(this.items()):
            if r == 0 and jobs == 1:
                continue
            if ref["results"] is None or res["results"] is None:
                cmp = {"identical": False, "close": False, "run_ids": False, "columns": False,
                       "differing": ["results.parquet missing"], "max_abs_diff": float("nan")}
            else:
                cmp = compare_results(ref["results"], res["results"])
            cmp["printed_same"] = bool(ref["printed"]) and res["printed"] == ref["printed"]
            checks.append({"round": r + 1, "jobs": jobs, **cmp})
    return checks


# --------------------------------------------------------------------------- report


def _mean(xs) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def markdown(res: dict, args, command: str, facts: dict, elapsed: float) -> str:
    rounds, checks = res["rounds"], res["checks"]
    ncores = os.cpu_count() or 1
    rows, ratios, cpu_ratios = [], [], []
    for r, this in enumerate(rounds):
        ratio = this[2]["wall_s"] / this[1]["wall_s"]
        cpu_ratio = this[2]["cpu_s"] / this[1]["cpu_s"] if this[1]["cpu_s"] > 0 else float("nan")
        ratios.append(ratio)
        cpu_ratios.append(cpu_ratio)
        order = list(this)
        for jobs in order:
            x = this[jobs]
            loads = x["loads"]
            rows.append([
                r + 1, f"{order.index(jobs) + 1} of 2", f"`--jobs {jobs}`", str(x["rc"]),
                f"{x['wall_s']:.0f} s ({x['wall_s'] / 60:.1f} min)",
                f"{x['cpu_s']:.0f} s", f"{x['cpu_s'] / x['wall_s']:.2f}",
                f"{x['peak_tree_mb']:,.0f}", x["max_procs"],
                f"{_mean(loads):.1f} / {max(loads):.1f}" if loads else "n/a",
                f"**{ratio:.3f}**" if jobs == 2 else ""])
    table = common.md_table(
        ["round", "order", "run", "exit", "wall time", "CPU time (user + sys, tree)",
         "CPU / wall (cores busy)", "peak RSS, sum over tree MB", "processes (max)",
         "load avg during run (mean / max)", "wall jobs2 / jobs1"], rows)
    med = common.median(ratios)
    all_loads = [v for this in rounds for x in this.values() for v in x["loads"]]
    ok_rc = all(x["rc"] == 0 for this in rounds for x in this.values())
    identical = bool(checks) and all(c["identical"] and c["printed_same"] for c in checks)
    what = ("The QUICK demo (`anchorviz demo --quick`, smoke-sized splits; the target is about "
            "the full demo)" if args.quick else "The full demo (`anchorviz demo`)")
    intro = (
        f"{what} with `--jobs 1` and with `--jobs 2` (one torch thread per worker, the default), "
        f"{args.rounds} round(s), the order alternating from round to round, each run into a "
        "fresh temporary folder; the demo's zoo models were prepared and read once before the "
        "first round. CPU time is the whole process tree's (the demo and its worker processes). "
        f"Load average during the whole benchmark (1 min, sampled every 5 s): mean "
        f"{_mean(all_loads):.1f}, max {max(all_loads) if all_loads else float('nan'):.1f} on "
        f"{ncores} cores.")
    notes = [
        f"- Target: `--jobs 2` wall time <= {TARGET_RATIO}x `--jobs 1` (median of per-round "
        f"ratios): {common.met(ok_rc and med <= TARGET_RATIO)} ({med:.3f}x; per round "
        + ", ".join(f"{x:.3f}" for x in ratios) + "). CPU time jobs2 / jobs1 per round: "
        + ", ".join(f"{x:.3f}" for x in cpu_ratios) + " (above 1: work the parallel run adds, "
        "e.g. worker processes importing torch and loading models, or slower cores under "
        "contention).",
    ]
    if args.quick:
        notes.append("- This is the quick demo under the load average shown, a check of the "
                     "harness, NOT the measurement the target refers to: that is "
                     "`python bench/bench_jobs.py` (the full demo) on an otherwise idle machine. "
                     "With other jobs on the 2 cores, `--jobs 2`'s second worker competes with "
                     "them, so the ratio is pessimistic; the quick demo's serial part (data "
                     "preparation, teacher) is also a larger share of its wall time.")
    bad = [c for c in checks if not (c["identical"] and c["printed_same"])]
    close = bool(checks) and all(c["close"] and c["printed_same"] for c in checks)
    head = f"- Results check ({len(checks)} run(s) against round 1's `--jobs 1`): "
    if identical:
        notes.append(head + "every `results.parquet` identical (same run ids, every value equal, "
                     "`seconds` ignored) and the same printed results table: **identical**.")
    else:
        verdict = ("**same run ids, same printed table, values equal up to float rounding but "
                   "NOT bit-identical**" if close else "**DIFFERENT**")
        notes.append(head + verdict + ": " + "; ".join(
            f"round {c['round']} `--jobs {c['jobs']}`: run ids "
            f"{'same' if c['run_ids'] else 'DIFFER'}, columns {'same' if c['columns'] else 'DIFFER'}"
            f", differing columns {', '.join(f'`{x}`' for x in c['differing']) or 'none'} (max "
            f"abs diff {c['max_abs_diff']:.3g}), printed table "
            f"{'same' if c['printed_same'] else 'DIFFERS'}" for c in bad) + " (`seconds` ignored).")
    ref = rounds[0][1]
    if ref["printed"]:
        notes.append("- The results table both runs printed:\n\n```\n" + ref["printed"] + "\n```")
    return common.section("bench_jobs", intro, table, "\n".join(notes), command, facts, elapsed)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the quick demo (a harness check)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of (jobs 1, jobs 2), the order alternating (default 1)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per demo run")
    ap.add_argument("--no-write", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    log(f"preparing the demo's models: {', '.join(warm_models(args.quick))}")
    common.publish("bench_jobs", args, argv, lambda: measure(args, log=log), markdown)


if __name__ == "__main__":
    main()
