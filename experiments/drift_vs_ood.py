"""Does target drift predict the OOD gain? Spearman per target and a leave-one-target-out check.

For every finished student of a store (naive and ANCHOR, every lambda, layer and seed; teachers
and ceilings are left out) and every target domain, the last-layer drift of the student from its
pretrained reference on that target's test pairs (``drift.parquet``: reference-centred cosine
drift, and 1 - debiased CKA) is paired with the student's AOG on that target (points).

- **Spearman per target and pooled**, with the bootstrap interval of
  `anchorviz.analysis.ood_risk.OODRiskEstimator` (over runs; the runs of one target share nothing but the
  seed's split, so the interval is optimistic where seeds repeat).
- **Leave one target out**: `OODRiskEstimator` is fitted on the other targets' (drift, AOG)
  pairs and predicts the held-out target's AOG from its drift alone, as a user without labels on
  a new domain would; reported: whether the fit was trusted, the mean absolute error of the
  predictions, and how often the prediction interval covers the measured AOG.

    python experiments/drift_vs_ood.py runs/vis_0.5 --doc docs/results/hidden_cue/drift_vs_ood.md
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import doc_out
import numpy as np
import pandas as pd

from anchorviz.analysis.ood_risk import OODRiskEstimator
from anchorviz.pipeline.results import results_table

MEASURES = {"centred cosine": "cosine_centred_mean", "1 - debiased CKA": "cka_debiased"}


def drift_aog_frame(store: str | Path, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (student run, target): method, lambda, layers, seed, target, drift measures
    at the last captured layer, AOG on that target (points). ``table``: the store's results
    table (default: rebuilt from its runs by `results_table`)."""
    table = results_table(store) if table is None else table
    rows: list[dict] = []
    if table.empty:
        return pd.DataFrame(rows)
    for _, r in table[table["kind"] == "student"].iterrows():
        drift = pd.read_parquet(Path(store) / "runs" / r["run_id"] / "drift.parquet")
        last = drift[drift["layer"] == drift["layer"].max()]
        for _, d in last[last["split"].str.startswith("target_test:")].iterrows():
            target = d["split"].split(":", 1)[1]
            col = f"aog_{target}"
            if col not in r or not np.isfinite(r[col]):
                continue
            rows.append({"run_id": r["run_id"], "method": r["method"],
                         "anchor_lambda": r["anchor_lambda"], "anchor_layers": r["anchor_layers"],
                         "seed": r["seed"], "target": target,
                         "centred cosine": float(d["cosine_centred_mean"]),
                         "1 - debiased CKA": 1.0 - float(d["cka_debiased"]),
                         "aog": 100 * float(r[col])})
    return pd.DataFrame(rows)


def spearman_rows(df: pd.DataFrame) -> list[dict]:
    out = []
    for measure in MEASURES:
        for target, sub in [*df.groupby("target"), ("pooled", df)]:
            est = OODRiskEstimator(seed=0).fit(sub[measure].to_numpy(), sub["aog"].to_numpy())
            out.append({"measure": measure, "target": target, "n": est.n_,
                        "spearman": est.spearman_, "lo": est.ci_[0], "hi": est.ci_[1],
                        "slope": est.slope_})
    return out


def loto_rows(df: pd.DataFrame) -> list[dict]:
    out = []
    for measure in MEASURES:
        for target in sorted(df["target"].unique()):
            train, test = df[df["target"] != target], df[df["target"] == target]
            est = OODRiskEstimator(seed=0).fit(train[measure].to_numpy(), train["aog"].to_numpy())
            pred = est.predict(test[measure].to_numpy())
            row = {"measure": measure, "held out": target, "n fit": est.n_,
                   "trusted": est.reliable_, "why not": est.reason_ or "-"}
            if pred.reliable:
                y = test["aog"].to_numpy()
                row["mae"] = float(np.mean(np.abs(pred.gain - y)))
                row["coverage"] = float(np.mean((pred.lower <= y) & (y <= pred.upper)))
                row["predicted"] = float(np.mean(pred.gain))
                row["measured"] = float(np.mean(y))
            out.append(row)
    return out


def _fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("--doc", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    df = drift_aog_frame(args.store)
    if df.empty:
        print("no finished students with per-target AOG in", args.store)
        return 1
    runs = df["run_id"].nunique()
    lines = [f"Command: `python {' '.join(sys.argv)}`", "",
             f"{runs} students ({', '.join(f'{k} {v}' for k, v in df.drop_duplicates('run_id')['method'].value_counts().items())}), "
             f"{df['seed'].nunique()} seeds, {df['target'].nunique()} targets; drift at the last "
             "layer on each target's test pairs; AOG in points.", "",
             "| drift measure | target | n | Spearman | 95% interval | slope (AOG points per unit drift) |",
             "|---|---|---|---|---|---|"]
    for r in spearman_rows(df):
        lines.append(f"| {r['measure']} | {r['target']} | {r['n']} | {_fmt(r['spearman'])} | "
                     f"[{_fmt(r['lo'])}, {_fmt(r['hi'])}] | {_fmt(r['slope'], '.1f')} |")
    lines += ["", "Leave one target out (`OODRiskEstimator` fitted on the other targets, "
              "predicting the held-out target's AOG from its drift):", "",
              "| drift measure | held out | runs fitted | trusted? | mean predicted | mean measured "
              "| mean abs. error | interval covers |",
              "|---|---|---|---|---|---|---|---|"]
    for r in loto_rows(df):
        trusted = "yes" if r["trusted"] else f"no ({r['why not']})"
        lines.append(f"| {r['measure']} | {r['held out']} | {r['n fit']} | {trusted} | "
                     f"{_fmt(r.get('predicted'), '.1f')} | {_fmt(r.get('measured'), '.1f')} | "
                     f"{_fmt(r.get('mae'), '.1f')} | {_fmt(r.get('coverage'), '.0%')} |")
    doc_out.emit(lines, args.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
