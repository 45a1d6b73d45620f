"""Benchmark: reading a finished sweep with and without re-hashing every file of every run.

Builds a run store of ``--seeds`` x 10 finished runs (`tests/support/fake_sweep.py`'s runs: per seed a
teacher, a ceiling, naive, confidence and ANCHOR at 3 lambdas x 2 layer sets), each with a
``checkpoint/trainable.safetensors`` of ``--ckpt-mb`` MB (random bytes: only their size matters
here), committed through `RunStore.commit` so the manifests are the store's own. The files are
back-dated by a minute before the commit, as a trained run's are written well before it is read.

Timed, interleaved in one process (`common.interleaved`), the page cache warm (every file read
once before the first timed round; from a cold disk a full hash is slower still):

* ``results_table(store)``: what ``anchorviz report`` and every notebook read;
* a no-op resume: what ``execute_node`` checks for each node of a finished sweep (the node's
  teacher with the files its students read, `TEACHER_OUTPUTS`, then the run itself);

each as the old behaviour (every file of every run hashed against its sha256: `verify_run_dir`
with ``full=True``) and the new cheap check (sizes and mtimes; only the named teacher files
hashed). Also reported: the bytes each variant hashes (one untimed pass, counting), and whether
both variants give the same answer.

Usage (what produced docs/BENCHMARKS.md)::

    python bench/bench_rehash.py                          # 30 runs x 90 MB
    python bench/bench_rehash.py --quick --no-write       # 10 runs x 1 MB (a check of the harness)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TESTS = common.REPO / "tests"
CHECKPOINT = "checkpoint/trainable.safetensors"


def build_store(root: Path, seeds: int = 3, ckpt_mb: float = 90.0, log=print) -> dict:
    """A finished store under ``root / "sweep"``; returns ``{"root", "runs": {run_id: (config
    hash, teacher run id)}, "bytes"}``."""
    import yaml

    from anchorviz.pipeline.store import MANIFEST, RunStore

    sys.path.insert(0, str(TESTS))
    from fake_sweep import write_fake_sweep

    staging = write_fake_sweep(root / "staging", seeds=tuple(range(seeds)),
                               lambdas=(0.1, 1.0, 3.0), layers=("last", "middle"), n_pairs=100)
    store = RunStore(root / "sweep")
    rng = np.random.default_rng(0)
    ckpt_bytes = int(ckpt_mb * 1e6)
    old = time.time_ns() - 60 * 10**9
    runs, teachers, total = {}, {}, 0
    for src in sorted((staging / "runs").iterdir()):
        man = json.loads((src / MANIFEST).read_text())
        key = yaml.safe_load((src / "config.yaml").read_text())
        tmp = store.begin(src.name)
        for p in src.rglob("*"):
            if p.is_file() and p.name != MANIFEST:
                (tmp / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, tmp / p.relative_to(src))
        if key["kind"] == "teacher":  # what a real teacher also writes
            shutil.copyfile(src / "labels.parquet", tmp / "val_labels.parquet")
            teachers[key["seed"]] = src.name
        (tmp / CHECKPOINT).parent.mkdir(parents=True, exist_ok=True)
        (tmp / CHECKPOINT).write_bytes(rng.bytes(ckpt_bytes))
        for p in tmp.rglob("*"):
            if p.is_file():
                os.utime(p, ns=(old, old))
                total += p.stat().st_size
        store.commit(tmp, src.name, man["config_hash"])
        runs[src.name] = (man["config_hash"], key["seed"])
    shutil.rmtree(staging)
    runs = {rid: (h, teachers[seed]) for rid, (h, seed) in runs.items()}
    log(f"store: {len(runs)} runs, {total / 1e9:.2f} GB")
    return {"root": root / "sweep", "runs": runs, "bytes": total}


@contextlib.contextmanager
def full_hashing() -> Iterator[None]:
    """The old behaviour: every check of a run folder hashes every file (``full=True``)."""
    import anchorviz.pipeline.store as store_mod

    real = store_mod.verify_run_dir

    def full(run_dir, **kw):
        return real(run_dir, **{**kw, "full": True})

    store_mod.verify_run_dir = full
    try:
        yield
    finally:
        store_mod.verify_run_dir = real


def resume_check(root: Path, runs: dict) -> int:
    """What a resumed, finished sweep checks (`anchorviz.pipeline.runner.execute_node`): per
    node its teacher (with the files students read hashed) and, for a student / ceiling, the
    run itself. Returns the number of finished runs (every one, when the store is intact)."""
    from anchorviz.pipeline.steps import TEACHER_OUTPUTS
    from anchorviz.pipeline.store import RunStore

    store = RunStore(root)
    hashes = {rid: h for rid, (h, _) in runs.items()}
    n = 0
    for run_id, (h, teacher) in runs.items():
        ok = store.is_finished(teacher, hashes[teacher], hash_files=TEACHER_OUTPUTS)
        if run_id != teacher:
            ok = store.is_finished(run_id, h) and ok
        n += ok
    return n


def variants(built: dict) -> dict:
    from anchorviz.pipeline.results import results_table

    root, runs = built["root"], built["runs"]

    def table_full():
        with full_hashing():
            results_table(root)

    def table_cheap():
        results_table(root)

    def resume_full():
        with full_hashing():
            resume_check(root, runs)

    def resume_cheap():
        resume_check(root, runs)

    return {"table full": table_full, "table cheap": table_cheap,
            "resume full": resume_full, "resume cheap": resume_cheap}


def hashed_bytes(fn) -> int:
    """Bytes hashed by one call of ``fn`` (the store's hash function, counted)."""
    import anchorviz.pipeline.store as store_mod

    real, seen = store_mod.file_sha256, []

    def counting(path, *a, **k):
        seen.append(Path(path).stat().st_size)
        return real(path, *a, **k)

    store_mod.file_sha256 = counting
    try:
        fn()
    finally:
        store_mod.file_sha256 = real
    return sum(seen)


def same_answers(built: dict) -> bool:
    from anchorviz.pipeline.results import results_table

    root, runs = built["root"], built["runs"]
    cheap = (results_table(root).drop(columns="seconds"), resume_check(root, runs))
    with full_hashing():
        full = (results_table(root).drop(columns="seconds"), resume_check(root, runs))
    return cheap[0].equals(full[0]) and cheap[1] == full[1] == len(runs)


def measure(args, log=print) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-rehash-", dir=args.tmp) as tmp:
        t0 = time.perf_counter()
        built = build_store(Path(tmp), seeds=args.seeds, ckpt_mb=args.ckpt_mb, log=log)
        build_s = time.perf_counter() - t0
        fns = variants(built)
        same = same_answers(built)  # also reads every file once: the page cache is warm
        hashed = {name: hashed_bytes(fn) for name, fn in fns.items()}
        times = common.interleaved(fns, repeats=args.rounds, warmup=1,
                                   on_round=lambda r, t: log(
                                       f"round {r + 1}: " + ", ".join(
                                           f"{k} {v:.3f} s" for k, v in t.items())))
    return {"times": times, "hashed": hashed, "same": same, "n_runs": len(built["runs"]),
            "store_bytes": built["bytes"], "build_s": build_s}


def _x(r: float) -> str:
    return f"{r:,.0f}x" if r >= 10 else f"{r:.2f}x"


def markdown(res, args, command, facts, elapsed) -> str:
    t, rows = res["times"], []
    for what in ("table", "resume"):
        full, cheap = t[f"{what} full"], t[f"{what} cheap"]
        ratio, lo, hi = common.ratio_summary(full, cheap)
        rows.append([
            "`results_table`" if what == "table" else "no-op resume (`is_finished` per node)",
            f"{common.median(full):.3f}", f"{res['hashed'][f'{what} full'] / 1e9:.2f}",
            f"{common.median(cheap) * 1e3:.1f}", f"{res['hashed'][f'{what} cheap'] / 1e6:.2f}",
            f"{_x(ratio)} ({_x(lo)}-{_x(hi)})"])
    table = common.md_table(["what", "full hash: s (median)", "GB hashed", "cheap check: ms",
                             "MB hashed", "speed-up full / cheap (min-max)"], rows)
    quick = " QUICK (smoke-sized, not the demo's)" if args.quick else ""
    intro = (
        f"Store{quick}: {res['n_runs']} finished runs (`tests/support/fake_sweep.py`'s runs, {args.seeds} "
        f"seed(s)), each with a {args.ckpt_mb:g} MB checkpoint: {res['store_bytes'] / 1e9:.2f} GB "
        f"in all, built in {res['build_s']:.0f} s (not timed). {args.rounds} interleaved round(s) "
        "after one warm-up, page cache warm. \"Full hash\" is the old behaviour (every file of "
        "every run read checked against its sha256, `verify_run_dir(full=True)`); \"cheap "
        "check\" is the new default (existence, size and mtime; the teacher files a student "
        "reads, `TEACHER_OUTPUTS`, still hashed on resume)."
    )
    notes = "\n".join([
        f"- Both variants give the same table and the same finished runs: "
        f"{'yes' if res['same'] else '**NO**'}.",
        "- What still hashes a file in full: loading its contents (`load_run_model`: the "
        "checkpoint and `config.yaml`; a student: its teacher's labels and scores; SEAM: the "
        "teacher checkpoint) and `anchorviz verify DIR` (every file).",
        "- The resume's remaining hashing is the teachers' label / score files, once per node.",
    ])
    return common.section("bench_rehash", intro, table, notes, command, facts, elapsed)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="10 runs per seed (default 3: 30 runs)")
    ap.add_argument("--ckpt-mb", type=float, default=90.0,
                    help="checkpoint size per run in MB (default 90, the demo's student)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 seed, 1 MB checkpoints, 1 round")
    ap.add_argument("--tmp", default=None, help="folder for the temporary store")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/BENCHMARKS.md")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.seeds, args.ckpt_mb, args.rounds = 1, 1.0, 1
    logging.basicConfig(level=logging.WARNING)
    common.publish("bench_rehash", args, argv,
                   lambda: measure(args, log=lambda m: print(m, file=sys.stderr, flush=True)),
                   markdown)


if __name__ == "__main__":
    main()
