"""Across-seed summaries of a sweep's results table, and the two questions the protocol asks.

- ``summarize``: mean, seed std and 95% t-interval half-width per condition
  (artefact strength x method x lambda x layers) for every metric column.
- ``best_on_source_val``: per artefact strength, the ANCHOR setting with the highest mean GOLD
  accuracy on the SOURCE validation split (never a target number).
- ``failure_mode`` / ``anchor_beats_naive``: paired per-seed differences with their t-interval, so a
  claim holds only beyond the seed spread.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anchorviz.metrics import seed_summary

CONDITION = ["artifact_strength", "kind", "method", "anchor_lambda", "anchor_layers"]
METRICS = ["acc_val", "acc_id", "acc_id_marked", "acc_id_clean", "acc_ood", "wrg", "aog", "nts", "pgr", "drift_cos_source",
           "drift_cos_target", "drift_cka_source", "drift_cka_target", "q_confidence"]


def _metric_cols(results: pd.DataFrame) -> list[str]:
    per_target = sorted(c for c in results.columns if c.startswith("acc_") and not
                        c.endswith(("_lo", "_hi")) and c not in METRICS)
    return [c for c in METRICS if c in results.columns] + per_target


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """One row per condition with ``<metric>_mean``, ``<metric>_std``, ``<metric>_hw`` and
    ``n_seeds``. Accuracies stay fractions."""
    if results.empty:
        raise ValueError("results table is empty: no finished runs to summarise")
    cols = _metric_cols(results)
    rows = []
    for key, g in results.groupby(CONDITION, sort=True, dropna=False):
        row = dict(zip(CONDITION, key))
        row["n_seeds"] = int(g["seed"].nunique())
        for c in cols:
            v = g[c].dropna().to_numpy(dtype=float)
            if len(v) == 0:
                row[f"{c}_mean"] = row[f"{c}_std"] = row[f"{c}_hw"] = np.nan
                continue
            s = seed_summary(v) if len(v) > 1 else None
            row[f"{c}_mean"] = float(v.mean())
            row[f"{c}_std"] = float(s.std) if s else np.nan
            row[f"{c}_hw"] = float(s.half_width) if s else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def best_on_source_val(results: pd.DataFrame) -> pd.DataFrame:
    """Per artefact strength, the ANCHOR (lambda, layers) with the best mean gold source-val
    accuracy across seeds; ties go to the smaller lambda."""
    if "acc_val" not in results.columns:
        raise ValueError("results table has no acc_val column (gold source-validation accuracy); "
                         "rerun the sweep with this version to record it")
    a = results[results["method"] == "anchor"]
    if a.empty:
        return pd.DataFrame(columns=["artifact_strength", "anchor_lambda", "anchor_layers", "acc_val"])
    m = (a.groupby(["artifact_strength", "anchor_lambda", "anchor_layers"])["acc_val"].mean()
         .reset_index())
    m = m.sort_values(["artifact_strength", "acc_val", "anchor_lambda"],
                      ascending=[True, False, True])
    return m.groupby("artifact_strength").head(1).reset_index(drop=True)


def _paired(results: pd.DataFrame, a_mask, b_mask, col_a: str, col_b: str) -> dict:
    # one value per seed (a folder holding several runs of one condition averages them)
    a = results[a_mask].groupby("seed")[col_a].mean()
    b = results[b_mask].groupby("seed")[col_b].mean()
    seeds = sorted(set(a.index) & set(b.index))
    d = np.array([a.loc[s] - b.loc[s] for s in seeds], dtype=float)
    if len(d) == 0:
        return {"n_seeds": 0, "mean": np.nan, "std": np.nan, "hw": np.nan, "beyond_spread": False}
    if len(d) == 1:
        return {"n_seeds": 1, "mean": float(d[0]), "std": np.nan, "hw": np.nan,
                "beyond_spread": False}
    s = seed_summary(d)
    beyond = bool(s.mean - s.half_width > 0 and s.mean > s.std)
    return {"n_seeds": len(d), "mean": float(s.mean), "std": float(s.std),
            "hw": float(s.half_width), "beyond_spread": beyond, "per_seed": d.tolist()}


def failure_mode(results: pd.DataFrame, strength: float) -> dict:
    """Naive student: mean WRG > 0 and WRG - AOG > 0 beyond the seed spread (paired over seeds:
    the 95% t-interval of WRG - AOG excludes 0 and its mean exceeds its seed std)."""
    r = results[(results["artifact_strength"] == strength)]
    naive = r["method"] == "naive"
    gap = _paired(r, naive, naive, "wrg", "aog")
    wrg = r.loc[naive, "wrg"].to_numpy(dtype=float)
    gap["wrg_mean"] = float(wrg.mean()) if len(wrg) else np.nan
    gap["failure_mode"] = bool(len(wrg) and wrg.mean() > 0 and gap["beyond_spread"])
    return gap


def anchor_beats_naive(results: pd.DataFrame, strength: float, anchor_lambda: float,
                       anchor_layers: str) -> dict:
    """NTS(ANCHOR) - NTS(naive), paired over seeds, at one strength and ANCHOR setting."""
    r = results[results["artifact_strength"] == strength]
    anchor = ((r["method"] == "anchor") & (r["anchor_lambda"] == anchor_lambda)
              & (r["anchor_layers"] == anchor_layers))
    return _paired(r, anchor, r["method"] == "naive", "nts", "nts")


def points(x: float, hw: float | None = None) -> str:
    """A fraction as points with an optional +- half-width: ``'+2.3 ± 1.1'``."""
    if x is None or not np.isfinite(x):
        return "-"
    s = f"{100 * x:.1f}"
    if hw is not None and np.isfinite(hw):
        s += f" ± {100 * hw:.1f}"
    return s
