"""Issue 44: where anchoring helps, or does not, on real data: the refusal shift on XSTest.

A harmlessness source (HH-RLHF harmless or PKU-SafeRLHF) teaches "prefer the refusal"; on
XSTest's should-respond prompts (safe prompts that only look unsafe) the refusing response is the
rejected one, on its should-refuse prompts the chosen one. Both XSTest files are zero-shot
TARGETS only (150 pairs of each per seed, drawn by prompt, split-varying seeds). Per seed and
source: the weak teacher (minilm-l3, gold source labels), the gold ceiling (minilm-l6, gold
labels), the naive student (minilm-l6 on the teacher's soft labels) and three ANCHOR students:
lambda 0.3 and 3 at the last layer, lambda 3 at the middle layer. The plan, the questions and
the tests were fixed in docs/RESULTS.md ("Over-refusal on XSTest (issue 44): pre-registration")
before any run on these targets.

    python experiments/xstest_refusal.py run --sources hh --out runs/xstest --jobs 1   # the plan,
    python experiments/xstest_refusal.py run --sources pku --out runs/xstest --jobs 1  # side by side
    python experiments/xstest_refusal.py probe --out /tmp/xstest_probe        # timing probe
    python experiments/xstest_refusal.py analyse --out runs/xstest \\
        --doc docs/results/realdata/xstest_refusal.md

``run`` goes seed by seed (both sources per seed when given both; the plan runs one process per
source side by side), so that whatever finishes holds whole seeds; it is resumable (content-hashed runs): run the same command again. The
real-data files are found as ``anchorviz.paths.realdata_dir`` says (``$ANCHORVIZ_REALDATA``).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time
from pathlib import Path

from results_realdata import base_config as realdata_base

from anchorviz.config import RunConfig
from anchorviz.paths import realdata_dir
from anchorviz.pipeline.sweep import sweep
from anchorviz.sweep_config import SweepConfig

SOURCES = {"hh": "realdata-hh-harmless", "pku": "realdata-pku-safe"}
RESPOND, REFUSE = "realdata-xstest-respond", "realdata-xstest-refuse"
TARGETS = [RESPOND, REFUSE]
# (teacher_train, w2s_train, val, source_test, target_test): cut from issue 27's (500, 700, 150,
# 400, 400) to fit the CPU of one session (docs/RESULTS.md, the pre-registration says why); 150
# pairs of each XSTest file per seed, prompt-grouped and drawn again on every seed
SIZES = (400, 500, 100, 300, 150)
MAX_LENGTH = 64
SEEDS = [80, 81, 82, 83, 84]
# ANCHOR settings (lambda, layer): two lambdas at the last layer (question b, the lambda chosen
# on source validation), lambda 3 at the middle layer (question c: drift across layers)
ANCHOR_SETTINGS = [(0.3, "last"), (3.0, "last"), (3.0, "middle")]
PROBE_SEED = 999


def base_config(source: str, targets: list[str], sizes=SIZES, max_length: int = MAX_LENGTH
                ) -> RunConfig:
    """The real-data protocol (`results_realdata.base_config`: split by prompt, the demo's tuned
    optimiser) with the XSTest targets, split-varying seeds, the gold ceiling, bfloat16 autocast
    pinned, and a capture of every layer's drift without saved hidden states or projections."""
    cfg = realdata_base(SOURCES[source], targets[0], sizes[:4] + (400,), max_length)
    cfg.data.targets = list(targets)
    cfg.data.target_test = sizes[4]
    cfg.data.split_per_seed = True
    cfg.ceiling = True
    cfg.teacher_train.bf16 = cfg.student_train.bf16 = True
    cfg.capture.layers = "all"
    cfg.capture.save_hidden = False
    cfg.capture.projection = "none"
    return cfg


def sweeps(source: str, seeds: list[int], base: RunConfig | None = None) -> list[SweepConfig]:
    """One run graph per source: the naive student and ANCHOR at the last layer (both lambdas),
    and ANCHOR at the middle layer (lambda 3); teacher and ceiling implied and shared."""
    base = base or base_config(source, TARGETS)
    by_layer: dict[str, list[float]] = {}
    for lam, layer in ANCHOR_SETTINGS:
        by_layer.setdefault(layer, []).append(lam)
    out = [SweepConfig(base=base, methods=["naive", "anchor"], anchor_lambdas=by_layer["last"],
                       anchor_layers=["last"], seeds=list(seeds))]
    for layer, lams in by_layer.items():
        if layer != "last":
            out.append(SweepConfig(base=base, methods=["anchor"], anchor_lambdas=lams,
                                   anchor_layers=[layer], seeds=list(seeds)))
    return out


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime + me.ru_utime + me.ru_stime


def question_a_sweep(source: str, seeds: list[int]) -> SweepConfig:
    """The runs question (a) needs (teacher, ceiling, naive student): the same configs, hence the
    same run ids, as in `sweeps`."""
    base = base_config(source, TARGETS)
    return SweepConfig(base=base, methods=["naive"], anchor_lambdas=[0.0],
                       anchor_layers=["last"], seeds=list(seeds))


def run(out: Path, sources: list[str], seeds: list[int], jobs: int | None,
        order: str = "seeds") -> None:
    """Seed by seed, source by source; then each source's whole table once (all resumed).
    ``order="a-first"``: first every seed's teacher, ceiling and naive student (question a),
    then every seed's ANCHOR students; the same runs either way."""
    stages = ([("a", seed) for seed in seeds] if order == "a-first" else []) + \
        [("all", seed) for seed in seeds]
    for stage, seed in stages:
        for source in sources:
            t0, c0 = time.time(), _cpu_s()
            grid = [question_a_sweep(source, [seed])] if stage == "a" else sweeps(source, [seed])
            sweep(grid, out / source, jobs=jobs, progress=False)
            print(f"[xstest] {time.strftime('%H:%M:%S', time.gmtime())} UTC source {source} "
                  f"seed {seed} ({stage}): {time.time() - t0:.0f} s wall, {_cpu_s() - c0:.0f} CPU-s, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    for source in sources:
        sweep(sweeps(source, seeds), out / source, jobs=jobs, progress=False)
    print(f"[xstest] done: {sources} x seeds {seeds}", flush=True)


def probe(out: Path, jobs: int | None, max_length: int) -> None:
    """The timing probe: one teacher and one naive student on the PKU source with the HH
    harmless target (975 pairs, the two XSTest files' total) at issue 27's source sizes, seed
    999 (never a study seed), and the reference capture its drift needs. Touches no XSTest
    file."""
    base = base_config("pku", ["realdata-hh-harmless"], (500, 700, 150, 400, 975), max_length)
    base.ceiling = False
    sw = SweepConfig(base=base, methods=["naive"], anchor_lambdas=[0.0], anchor_layers=["last"],
                     seeds=[PROBE_SEED])
    t0, c0 = time.time(), _cpu_s()
    sweep(sw, out, jobs=jobs, progress=False)
    print(f"[probe] max_length {max_length}: {time.time() - t0:.0f} s wall, "
          f"{_cpu_s() - c0:.0f} CPU-s, load {os.getloadavg()[0]:.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["run", "probe", "analyse"])
    ap.add_argument("--out", default="runs/xstest")
    ap.add_argument("--sources", nargs="+", default=list(SOURCES), choices=list(SOURCES))
    ap.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--order", choices=["seeds", "a-first"], default="seeds",
                    help="run: seed by seed (default), or every seed's teacher / ceiling / naive "
                         "first (question a), then the ANCHOR students; the same runs")
    ap.add_argument("--max-length", type=int, default=MAX_LENGTH, help="probe only")
    ap.add_argument("--doc", default=None)
    ap.add_argument("--story", default="notebooks/data/xstest_story",
                    help="analyse: the story folder to write (numbers only)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if realdata_dir() is None and args.mode != "analyse":
        sys.exit("the real-data folder is not present: nothing to run (set ANCHORVIZ_REALDATA)")
    out = Path(args.out)
    if args.mode == "probe":
        probe(out, args.jobs, args.max_length)
    elif args.mode == "run":
        run(out, args.sources, args.seeds, args.jobs, args.order)
    else:
        from xstest_analysis import analyse

        analyse(out, args.sources, args.seeds, args.doc, "python " + " ".join(sys.argv),
                Path(args.story))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
