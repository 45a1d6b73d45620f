"""Issue 44, item 4: what raises the gold ceilings of the XSTest study's sources, at what CPU cost.

The gold ceiling is the student's backbone (minilm-l6) trained on the GOLD labels of the
weak-to-strong training pairs; the study reads a source's weak-to-strong numbers only if this
ceiling reaches 60% on the source test (docs/RESULTS.md, "Over-refusal on XSTest (issue 44)").
Here it is fitted alone (no teacher, no weak labels, no XSTest pair scored) at the study's
settings (`experiments/xstest_refusal.py`: 64 tokens, 2 epochs, lr 5e-5, bfloat16 autocast) and
at one change each:

- ``pairs 1000``: twice the training pairs from the same file (w2s_train 1,000 instead of 500;
  the split draws all its parts at once, so the test pairs differ from the plan's too);
- ``epochs 4``;
- ``256 tokens``;
- ``lr 2e-5`` / ``lr 1e-4`` (the backbone's learning rate; the study's 5e-5 is the third
  candidate): the learning rate is chosen on SOURCE VALIDATION, per source, over the seeds.

Per fit: source-validation and source-test accuracy (%) and the CPU-seconds of the fit
(training and scoring, one thread). Each fit is kept in a run store
(`anchorviz.pipeline.fit.fit_and_score`): a rerun reads it instead of training.

    python experiments/xstest_ceilings.py --sources hh --out runs/xstest_ceilings
    python experiments/xstest_ceilings.py --sources pku --out runs/xstest_ceilings
    python experiments/xstest_ceilings.py --out runs/xstest_ceilings \\
        --doc docs/results/realdata/xstest_source_ceilings.md      # every fit, read back

The pre-registration (variants, seeds, what is read) is in docs/RESULTS.md, "Item 4: what raises
the sources' ceilings".
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys

import doc_out
import numpy as np
import pandas as pd
import torch
from scipy import stats
from xstest_refusal import SOURCES, TARGETS, base_config

from anchorviz.analysis.metrics import per_pair_correct
from anchorviz.config import with_overrides
from anchorviz.paths import realdata_dir
from anchorviz.pipeline.fit import fit_and_score
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.pipeline.store import RunStore

#: variant -> the settings it changes (dotted RunConfig fields)
VARIANTS: dict[str, dict] = {
    "plan": {},
    "pairs 1000": {"data.w2s_train": 1000},
    "epochs 4": {"student_train.epochs": 4},
    "256 tokens": {"data.max_length": 256},
    "lr 2e-5": {"student_train.lr": 2e-5},
    "lr 1e-4": {"student_train.lr": 1e-4},
}
LR_CANDIDATES = {"lr 2e-5": 2e-5, "plan": 5e-5, "lr 1e-4": 1e-4}
SEEDS = [85, 86]
BAR = 60.0


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def ceiling_fit(store: RunStore, source: str, variant: str, seed: int) -> dict:
    """Fit (or read) one gold ceiling; its accuracies and the CPU-seconds the fit took (those of
    its first fit, kept beside the store's run so that a read-back reports them too)."""
    cfg = with_overrides(base_config(source, TARGETS), seed=seed, **VARIANTS[variant])
    data = prepare_data(data_config(cfg))
    train = data["w2s_train"]
    scored = {k: data[k] for k in ("val", "source_test")}
    cost = store.root / "cpu_seconds.csv"  # key, cpu_s: each fit's first (computing) run
    key = f"{source}|{variant}|{seed}"
    known = pd.read_csv(cost) if cost.exists() else pd.DataFrame({"key": [], "cpu_s": []})
    c0 = _cpu_s()
    fit = fit_and_score(store, cfg, "student", train, np.ones(len(train)), scored,
                        desc=f"ceiling {source} {variant} seed {seed}")
    if key not in set(known["key"]):
        # a fit read back from the store costs nothing: its first run's CPU-s are kept here
        known = pd.concat([known, pd.DataFrame({"key": [key], "cpu_s": [_cpu_s() - c0]})])
        known.to_csv(cost, index=False)
    row = {"source": source, "variant": variant, "seed": seed, "pairs": len(train),
           "cpu_s": float(known.set_index("key").loc[key, "cpu_s"])}
    for split in scored:
        row[split] = 100 * float(per_pair_correct(*fit.rewards(split)).mean())
    return row


def _iv(x: pd.Series) -> str:
    x = x.dropna().to_numpy(float)
    if len(x) < 2:
        return f"{x.mean():.1f}" if len(x) else "-"
    h = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return f"{x.mean():.1f} ± {h:.1f}"


def markdown(df: pd.DataFrame, command: str) -> str:
    lines = [f"Command: `{command}`", "",
             "Gold ceilings (minilm-l6 on the gold labels of the weak-to-strong training pairs) of "
             "the XSTest study's sources, at the study's settings (`plan`: 500 training pairs, 2 "
             "epochs, 64 tokens, lr 5e-5, bf16) and at one change each. Accuracy in %, mean over "
             "seeds ± 95% t-interval half-width; CPU-min per fit (training and scoring of source "
             f"validation and test, one thread). Bar: {BAR:.0f}% on the source test.", ""]
    for source, g in df.groupby("source", sort=False):
        plan = g[g.variant == "plan"].set_index("seed")
        lines += [f"## Source {source} ({SOURCES[source]})", "",
                  "| variant | seeds | source val | source test | test - plan (paired) | "
                  "CPU-min per fit | passes the bar |",
                  "|---|---|---|---|---|---|---|"]
        for variant in VARIANTS:
            v = g[g.variant == variant]
            if v.empty:
                continue
            diff = v.set_index("seed")["source_test"] - plan["source_test"]
            lines.append(
                f"| {variant} | {len(v)} | {_iv(v['val'])} | {_iv(v['source_test'])} | "
                f"{_iv(diff) if variant != 'plan' else '-'} | {v['cpu_s'].mean() / 60:.1f} | "
                f"{'yes' if v['source_test'].mean() >= BAR else 'no'} |")
        lr = {n: g[g.variant == n]["val"].mean() for n in LR_CANDIDATES if (g.variant == n).any()}
        if len(lr) == len(LR_CANDIDATES):
            best = max(lr, key=lambda n: (round(lr[n], 6), -LR_CANDIDATES[n]))
            test = g[g.variant == best]["source_test"].mean()
            lines += ["", f"Learning rate chosen on source validation: **{LR_CANDIDATES[best]:g}** "
                      f"(mean source val {lr[best]:.1f}; {', '.join(f'{LR_CANDIDATES[n]:g}: {lr[n]:.1f}' for n in lr)}); "
                      f"its source test {test:.1f}."]
        lines += ["", "Every fit:", "", "| variant | seed | training pairs | source val | "
                  "source test | CPU-s |", "|---|---|---|---|---|---|"]
        for _, r in g.iterrows():
            lines.append(f"| {r['variant']} | {r['seed']} | {r['pairs']} | {r['val']:.1f} | "
                         f"{r['source_test']:.1f} | {r['cpu_s']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", nargs="+", default=list(SOURCES), choices=list(SOURCES))
    ap.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--out", default="runs/xstest_ceilings")
    ap.add_argument("--doc", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if realdata_dir() is None:
        sys.exit("the real-data folder is not present: nothing to run (set ANCHORVIZ_REALDATA)")
    torch.set_num_threads(1)
    store = RunStore(args.out)
    rows = [ceiling_fit(store, source, variant, seed) for seed in args.seeds
            for source in args.sources for variant in args.variants]
    text = markdown(pd.DataFrame(rows), "python " + " ".join(sys.argv))
    doc_out.emit([text.rstrip("\n")], args.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
