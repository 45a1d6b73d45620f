"""How large is the ANCHOR term next to the fit loss? (lambda scale, read from stored runs)

For every finished ANCHOR student of a sweep folder: the mean over the last quarter of training
steps of the soft Bradley-Terry fit loss, of the unweighted anchor MSE and of lambda * MSE / fit,
then the mean over seeds per (artefact strength, lambda, layers). Reads ``history.parquet`` only;
trains nothing.

    python experiments/anchor_scale.py runs/results_vader
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from anchorviz.pipeline.results import results_table
from anchorviz.viz.common import load_run_table, run_path


def anchor_scale(sweep_dir: str) -> pd.DataFrame:
    res = results_table(sweep_dir)
    rows = []
    for r in res[res["method"] == "anchor"].itertuples(index=False):
        h = load_run_table(run_path(sweep_dir, r.run_id), "history")
        tail = h.iloc[-max(1, len(h) // 4):]
        fit, mse = float(tail["fit"].mean()), float(tail["anchor"].mean())
        rows.append({"artifact_strength": r.artifact_strength, "anchor_lambda": r.anchor_lambda,
                     "anchor_layers": r.anchor_layers, "seed": r.seed, "fit": fit,
                     "anchor_mse": mse, "weighted_over_fit": r.anchor_lambda * mse / fit})
    if not rows:
        raise SystemExit(f"{sweep_dir}: no finished ANCHOR runs")
    per_run = pd.DataFrame(rows)
    return (per_run.groupby(["artifact_strength", "anchor_lambda", "anchor_layers"])
            .agg(seeds=("seed", "nunique"), fit=("fit", "mean"), anchor_mse=("anchor_mse", "mean"),
                 weighted_over_fit=("weighted_over_fit", "mean")).reset_index())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep_dir")
    args = ap.parse_args()
    t = anchor_scale(args.sweep_dir)
    print(f"Command: `python {' '.join(sys.argv)}`\n")
    print("| strength | lambda | layers | seeds | fit loss (last quarter) | anchor MSE | "
          "lambda x MSE / fit |")
    print("|---|---|---|---|---|---|---|")
    for r in t.itertuples(index=False):
        print(f"| {r.artifact_strength:g} | {r.anchor_lambda:g} | {r.anchor_layers} | {r.seeds} | "
              f"{r.fit:.4f} | {r.anchor_mse:.4f} | {r.weighted_over_fit:.3f} |")


if __name__ == "__main__":
    main()
