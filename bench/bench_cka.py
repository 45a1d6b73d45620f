"""Benchmark: linear CKA across layers, feature-space (anchorviz) vs Gram-matrix implementations.

Compares, on the same random float32 data (one student / reference pair per layer):

- ``feature``  -- ``anchorviz.analysis.cka.linear_cka``: O(n d^2) time, O(d^2) memory, float64.
- ``gram``     -- ``anchorviz.analysis.cka.gram_linear_cka``: the textbook n x n form in numpy float64
                  (``dtype="float32"`` if the machine's free memory forces it; the table says which).
- ``ckatorch`` -- ``ckatorch.cka_base(x, y)`` from the published ``ckatorch`` package (PyPI),
                  linear kernel, Gram form in torch float64. Used only if importable, e.g. after
                  ``pip install --no-deps --target /tmp/ckapkg ckatorch matplotlib seaborn ...``
                  (never a project dependency); otherwise its rows say "not installed".

Each (method, width) runs in its own subprocess so that its peak memory is its own: the peak
resident set size (VmHWM, reset through /proc/self/clear_refs before each call) minus the
resident size just before the call, plus the tracemalloc peak for the numpy methods. A Gram
method whose predicted peak (measured at a small n, scaled by n^2) does not fit in half the
memory available at that moment is not run at full n; it is run at the largest n that fits and
the table marks that row and gives the feature-space time at that n for the ratio.

Usage (what produced docs/results/benchmarks/linear_cka_implementations.md)::

    python bench/bench_cka.py --n 20000 --dims 384 4096 --layers 7 --gram-layers-wide 1

``--quick`` runs a small smoke version (n = 2000) and writes nothing unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CKAPKG = Path(os.environ.get("ANCHORVIZ_CKAPKG", "/tmp/ckapkg"))


# --------------------------------------------------------------------------------------------
# Worker side: one method, one width, several layers; prints one JSON line
# --------------------------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _layer_data(n: int, d: int, layer: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference states and a drifted student copy, float32 (n, d); drift grows with the layer."""
    rng = np.random.default_rng([seed, layer, d])
    ref = rng.standard_normal((n, d), dtype=np.float32)
    stu = rng.standard_normal((n, d), dtype=np.float32)
    stu *= np.float32(0.25 + 0.25 * layer)
    stu += ref
    return stu, ref


def _method(name: str, gram_dtype: str):
    sys.path.insert(0, str(REPO))
    from anchorviz.analysis.cka import gram_linear_cka, linear_cka

    if name == "feature":
        return lambda x, y: linear_cka(x, y)
    if name == "gram":
        return lambda x, y: gram_linear_cka(x, y, dtype=gram_dtype)
    if name == "ckatorch":
        if CKAPKG.is_dir():
            sys.path.append(str(CKAPKG))  # appended: never shadows the project's packages
        import ckatorch
        import torch

        return lambda x, y: float(ckatorch.cka_base(torch.from_numpy(x), torch.from_numpy(y)))
    raise ValueError(name)


def worker(args: argparse.Namespace) -> None:
    fn = _method(args.worker, args.gram_dtype)
    use_tracemalloc = args.worker in ("feature", "gram")
    out = {"method": args.worker, "n": args.n, "d": args.d, "layers": [], "gram_dtype": args.gram_dtype}
    for layer in range(args.layers):
        x, y = _layer_data(args.n, args.d, layer, args.seed)
        before = _rss()
        hwm_ok = common.reset_peak_rss()
        if use_tracemalloc:
            tracemalloc.start()
        t0 = time.perf_counter()
        value = fn(x, y)
        seconds = time.perf_counter() - t0
        traced = tracemalloc.get_traced_memory()[1] if use_tracemalloc else None
        if use_tracemalloc:
            tracemalloc.stop()
        peak = _hwm()
        out["layers"].append({
            "layer": layer, "seconds": seconds, "cka": value,
            "peak_rss_extra": max(0, peak - before) if hwm_ok else None,
            "tracemalloc_peak": traced,
        })
        del x, y
    print("RESULT " + json.dumps(out), flush=True)


# --------------------------------------------------------------------------------------------
# Driver side
# --------------------------------------------------------------------------------------------


def _available_bytes() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _run_worker(method: str, n: int, d: int, layers: int, seed: int, gram_dtype: str = "float64",
                timeout: float = 3600) -> dict | str:
    cmd = [sys.executable, __file__, "--worker", method, "--n", str(n), "--d", str(d),
           "--layers", str(layers), "--seed", str(seed), "--gram-dtype", gram_dtype]
    print(f"  running {method} n={n} d={d} layers={layers} ({gram_dtype}) ...", flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return f"failed: {tail[0][:200]}"


def _memory_model(method: str, d: int, args: argparse.Namespace) -> tuple[float, float] | str:
    """Fit peak extra memory ~ a n^2 + b n from two small runs (n = probe_n / 2 and probe_n)."""
    ns = (args.probe_n // 2, args.probe_n)
    peaks = []
    for n in ns:
        res = _run_worker(method, n, d, 1, args.seed)
        if isinstance(res, str):
            return res
        peak = res["layers"][0]["peak_rss_extra"]
        peaks.append(peak if peak is not None else 3 * 8 * n * n)  # no VmHWM: assume 3 matrices
    (n1, n2), (p1, p2) = ns, peaks
    a = (p2 / n2 - p1 / n1) / (n2 - n1)
    a = max(a, 8.0)  # at least one float64 n x n matrix
    b = max((p1 - a * n1 * n1) / n1, 0.0)
    print(f"  memory model {method} d={d}: {a / 8:.2f} x 8 n^2 + {b / 2**10:.0f} KiB x n", flush=True)
    return a, b


def _ckatorch_version() -> str | None:
    if CKAPKG.is_dir():
        sys.path.append(str(CKAPKG))
    try:
        from importlib.metadata import version

        import ckatorch  # noqa: F401

        return version("ckatorch")
    except Exception:
        return None


def _fmt_bytes(b: float | None) -> str:
    if b is None:
        return "n/a"
    if b >= 2**30:
        return f"{b / 2**30:.2f} GiB"
    return f"{b / 2**20:.0f} MiB"


CKA_OUT = REPO / "docs" / "results" / "benchmarks" / "linear_cka_implementations.md"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000, help="rows per layer")
    ap.add_argument("--dims", type=int, nargs="+", default=[384, 4096], help="feature widths")
    ap.add_argument("--layers", type=int, default=7, help="layers (student/reference pairs)")
    ap.add_argument("--gram-layers-wide", type=int, default=1,
                    help="layers for the Gram methods at d > 1024 (they take minutes per layer)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mem-frac", type=float, default=0.4,
                    help="run a Gram method at full n only if its predicted peak < this x available")
    ap.add_argument("--probe-n", type=int, default=4000,
                    help="largest n of the two memory probes of each Gram method")
    ap.add_argument("--out", type=Path, default=None,
                    help="markdown output (default "
                         "docs/results/benchmarks/linear_cka_implementations.md)")
    ap.add_argument("--quick", action="store_true", help="smoke run: n=2000, d=64 and 256, 2 layers")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--d", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--gram-dtype", default="float64", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return

    if args.quick:
        args.n, args.dims, args.layers, args.probe_n = 2000, [64, 256], 2, 500
    out_path = args.out if args.out is not None else (None if args.quick else CKA_OUT)
    command = "python bench/bench_cka.py " + " ".join(argv if argv is not None else sys.argv[1:])
    ck_version = _ckatorch_version()
    load_before = os.getloadavg()
    started = time.time()

    results: list[dict] = []
    for d in args.dims:
        gram_layers = args.layers if d <= 1024 else min(args.layers, args.gram_layers_wide)
        for method in ("feature", "gram", "ckatorch"):
            row: dict = {"method": method, "d": d, "note": ""}
            if method == "ckatorch" and ck_version is None:
                row["status"] = "not installed (pip install --target /tmp/ckapkg ckatorch)"
                results.append(row)
                continue
            layers = args.layers if method == "feature" else gram_layers
            n, dtype = args.n, "float64"
            if method != "feature":
                model = _memory_model(method, d, args)
                if isinstance(model, str):
                    row["status"] = f"memory probe {model}"
                    results.append(row)
                    continue
                a, b = model  # peak extra bytes ~ a n^2 + b n
                budget = args.mem_frac * _available_bytes()
                predicted = a * args.n**2 + b * args.n
                row["predicted_peak"] = predicted
                if predicted > budget and method == "gram":
                    dtype, a = "float32", a / 2  # float32 halves the n x n matrices
                    row["note"] = f"float64 would need ~{_fmt_bytes(predicted)}"
                    predicted = a * args.n**2 + b * args.n
                if predicted > budget:
                    fit_n = int((-b + np.sqrt(b * b + 4 * a * budget)) / (2 * a)) // 1000 * 1000
                    row["note"] = (
                        f"predicted peak at n={args.n:,} ~{_fmt_bytes(predicted)} > "
                        f"{args.mem_frac:g} x available memory ({_fmt_bytes(_available_bytes())}),"
                        f" so run at n={fit_n:,}"
                    )
                    n = fit_n
                    if n < 1000:
                        row["status"] = "skipped: not enough free memory even at n=1,000"
                        results.append(row)
                        continue
            res = _run_worker(method, n, d, layers, args.seed, dtype)
            if isinstance(res, str):
                row["status"] = res
            else:
                row.update(status="ok", run=res)
                if n != args.n:  # a fair ratio needs the feature-space time at the same n
                    same = _run_worker("feature", n, d, layers, args.seed)
                    if not isinstance(same, str):
                        row["feature_same_n"] = same
            results.append(row)

    elapsed = time.time() - started
    md = _markdown(results, args, command, ck_version, load_before, os.getloadavg(), elapsed)
    print(md)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(md)
        print(f"wrote {out_path}")


def _markdown(results, args, command, ck_version, load_before, load_after, elapsed) -> str:
    by_key = {(r["d"], r["method"]): r for r in results}
    lines = [
        "# Linear CKA: feature-space vs Gram-matrix implementations",
        "",
        f"Command: `{command}` (from the repository root).",
        "",
        f"Data: random float32, n = {args.n:,} rows per layer (unless a row says otherwise), "
        f"one student / reference pair per layer, seed {args.seed}. Machine: "
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
        f"{_fmt_bytes(_mem_total())} RAM, Python {platform.python_version()}, "
        f"numpy {np.__version__}; load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (the cores are shared, so times carry that noise). "
        f"Whole run: {elapsed / 60:.1f} min.",
        "",
        "- **feature**: `anchorviz.analysis.cka.linear_cka` (float64 statistics X^T X, Y^T Y, X^T Y over "
        "64 MiB row chunks; no n x n matrix).",
        "- **gram**: `anchorviz.analysis.cka.gram_linear_cka`, n x n Gram matrices K = X X^T, L = Y Y^T in "
        "numpy float64 (plain GEMM: numpy's syrk path for `a @ a.T` segfaults in OpenBLAS "
        "0.3.30/0.3.31 on this SkylakeX CPU once n passes ~16,000), centred in place (HKH).",
        f"- **ckatorch**: `ckatorch.cka_base(x, y)` (linear kernel, biased), ckatorch "
        f"{ck_version or 'not installed'} from PyPI, installed outside the project "
        "(`pip install --no-deps --target /tmp/ckapkg ckatorch matplotlib seaborn ...`).",
        "",
        "Time per layer is the mean over the layers run; 'all layers' is measured when every "
        f"layer ran, else per-layer x {args.layers} (marked ~). Peak extra memory: peak resident "
        "set size during the call minus the resident size before it (VmHWM reset per call, one "
        "subprocess per method); tracemalloc peak where numpy allocates. |dCKA| is the largest "
        "difference from the feature-space value over common layers.",
        "",
        "| d | method | n | layers run | s / layer | all layers | x feature | peak extra RSS | "
        "tracemalloc peak | CKA (layer 0) | abs dCKA | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        d, method = r["d"], r["method"]
        if r.get("status") != "ok":
            lines.append(f"| {d} | {method} | | | | | | | | | | {r.get('status', '')} {r['note']} |")
            continue
        run = r["run"]
        secs = [lay["seconds"] for lay in run["layers"]]
        per = float(np.mean(secs))
        full = len(secs) == args.layers
        total = f"{sum(secs):.1f} s" if full else f"~{per * args.layers:.1f} s"
        feat = by_key.get((d, "feature"))
        ratio, dcka = "", ""
        ref_run = r.get("feature_same_n") or (feat["run"] if feat and feat.get("status") == "ok" else None)
        if ref_run is not None and ref_run["n"] == run["n"]:
            fper = float(np.mean([lay["seconds"] for lay in ref_run["layers"]]))
            ratio = f"{per / fper:.1f}x"
            if method != "feature":
                common = min(len(secs), len(ref_run["layers"]))
                dcka = max(abs(a["cka"] - b["cka"]) for a, b in
                           zip(run["layers"][:common], ref_run["layers"][:common]))
                dcka = f"{dcka:.1e}"
            if "feature_same_n" in r:
                ratio += f" (feature at n={run['n']:,}: {fper:.2f} s)"
        peak = max((lay["peak_rss_extra"] or 0) for lay in run["layers"])
        traced = [lay["tracemalloc_peak"] for lay in run["layers"] if lay["tracemalloc_peak"]]
        note = r["note"]
        if method == "gram" and run["gram_dtype"] != "float64":
            note = (note + "; " if note else "") + f"{run['gram_dtype']} Gram"
        lines.append(
            f"| {d} | {method} | {run['n']:,} | {len(secs)} | {per:.2f} | {total} | {ratio} | "
            f"{_fmt_bytes(peak)} | {_fmt_bytes(max(traced)) if traced else 'n/a'} | "
            f"{run['layers'][0]['cka']:.6f} | {dcka} | {note} |"
        )
    lines += [
        "",
        "Input size per layer (student + reference, float32): "
        + ", ".join(f"d={d}: {_fmt_bytes(2 * 4 * args.n * d)}" for d in args.dims)
        + f". A float64 n x n matrix at n = {args.n:,}: {_fmt_bytes(8 * args.n**2)}.",
        "",
    ]
    return "\n".join(lines)


def _mem_total() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    main()
