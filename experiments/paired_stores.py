"""Two stores of the same grid computed two ways (SDPA vs eager attention, bfloat16 vs float32
...), paired run by run: the naive student's WRG, AOG and WRG - AOG per seed in both and their
differences, the largest accuracy difference of any pair of runs, the 5-seed verdict of each,
and the ANCHOR setting each would choose on source validation.

Runs are paired by what the grid varies (kind, method, lambda, layers, seed, artefact
strength); rows of either store without a partner are counted, not read.

    python experiments/paired_stores.py runs/demo-sdpa runs/demo --names SDPA eager \\
        --doc docs/results/demo/eager_vs_sdpa_paired_seeds0-4.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import doc_out
import numpy as np
import pandas as pd

from anchorviz.analysis.summary import best_on_source_val, failure_mode
from anchorviz.pipeline.demo import verdict_sentence
from anchorviz.pipeline.results import results_table

PAIR_KEYS = ["kind", "method", "anchor_lambda", "anchor_layers", "seed", "artifact_strength"]
ACC_COLS = ["acc_val", "acc_id", "acc_ood"]
DRIFT_COL = "drift_cos_centred_target"


def paired(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, int, int]:
    """Rows of ``a`` and ``b`` joined on `PAIR_KEYS` (suffixes ``_a`` / ``_b``), and how many
    rows of each found no partner."""
    m = a.merge(b, on=PAIR_KEYS, suffixes=("_a", "_b"), how="outer", indicator=True)
    return (m[m["_merge"] == "both"].drop(columns="_merge").reset_index(drop=True),
            int((m["_merge"] == "left_only").sum()), int((m["_merge"] == "right_only").sum()))


def per_seed_gaps(fm: dict) -> pd.DataFrame:
    """The naive students' WRG, AOG (pooled over targets) and WRG - AOG per seed, in points,
    as the verdict (`failure_mode`) read them."""
    p = fm["pooled"]
    return pd.DataFrame({"seed": p["seeds"], "wrg": 100 * (np.array(p["per_seed_gap"])
                                                            + np.array(p["per_seed_aog"])),
                         "aog": 100 * np.array(p["per_seed_aog"]),
                         "gap": 100 * np.array(p["per_seed_gap"])})


def compare(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str]) -> str:
    na, nb = names
    both, only_a, only_b = paired(a, b)
    fa, fb = failure_mode(a), failure_mode(b)
    ga, gb = per_seed_gaps(fa), per_seed_gaps(fb)
    g = ga.merge(gb, on="seed", suffixes=("_a", "_b"))
    out = [f"# {nb} against {na}, run by run", "",
           f"{len(both)} runs paired; {only_a} only in {na}, {only_b} only in {nb}.", "",
           "## The naive student per seed (points)", "",
           f"| seed | WRG {na} | WRG {nb} | AOG {na} | AOG {nb} | WRG - AOG {na} | "
           f"WRG - AOG {nb} | difference ({nb} - {na}) |", "|---|---|---|---|---|---|---|---|"]
    for r in g.itertuples(index=False):
        out.append(f"| {r.seed} | {r.wrg_a:+.2f} | {r.wrg_b:+.2f} | {r.aog_a:+.2f} | "
                   f"{r.aog_b:+.2f} | {r.gap_a:+.2f} | {r.gap_b:+.2f} | {r.gap_b - r.gap_a:+.2f} |")
    out.append("")
    for col, label in (("wrg", "WRG"), ("aog", "AOG"), ("gap", "WRG - AOG")):
        d = g[f"{col}_b"] - g[f"{col}_a"]
        sd = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
        out.append(f"- mean difference of {label} over {len(d)} seeds: {d.mean():+.2f} points "
                   f"(SD {sd:.2f}; per seed {', '.join(f'{x:+.2f}' for x in d)})")
    sd_a = float(g["gap_a"].std(ddof=1)) if len(g) > 1 else float("nan")
    out.append(f"- seed SD of WRG - AOG in {na}: {sd_a:.2f} points")
    for col in ACC_COLS:
        if f"{col}_a" in both and f"{col}_b" in both:
            d = (100 * (both[f"{col}_b"] - both[f"{col}_a"])).abs()
            worst = both.loc[d.idxmax()]
            out.append(f"- largest |difference| of {col} over the paired runs: {d.max():.2f} "
                       f"points ({worst['kind']} {worst['method']} seed {worst['seed']})")
    if f"{DRIFT_COL}_a" in both and f"{DRIFT_COL}_b" in both:
        d = (both[f"{DRIFT_COL}_b"] - both[f"{DRIFT_COL}_a"]).abs().dropna()
        if len(d):
            out.append(f"- largest |difference| of the last layer's centred cosine drift on the "
                       f"targets: {d.max():.4f} ({len(d)} runs with drift in both)")
    out += ["", "## Verdicts", ""]
    for name, df, fm in ((na, a, fa), (nb, b, fb)):
        out.append(f"- **{name}**: failure mode {'YES' if fm['failure_mode'] else 'no'}, strict "
                   f"{'YES' if fm['strict'] else 'no'}. {verdict_sentence(df)}")
        best = best_on_source_val(df)  # empty without ANCHOR runs
        if len(best):
            lam = sorted({float(x) for x in best["anchor_lambda"]})
            out.append(f"  ANCHOR chosen on source validation: lambda {', '.join(f'{x:g}' for x in lam)}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="the reference store (a sweep folder)")
    ap.add_argument("b", type=Path, help="the store compared with it")
    ap.add_argument("--names", nargs=2, default=("A", "B"))
    ap.add_argument("--doc", type=Path, default=None, help="markdown file to write")
    args = ap.parse_args(argv)
    a, b = (results_table(p) for p in (args.a, args.b))
    for p, df in ((args.a, a), (args.b, b)):
        if df.empty:
            sys.exit(f"{p}: no finished runs")
    text = compare(a, b, tuple(args.names))
    text += f"\nCommand: `python experiments/paired_stores.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n"
    doc_out.emit([text.rstrip("\n")], args.doc)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
