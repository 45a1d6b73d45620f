"""Across-seed summaries of a sweep's results table, and the two questions the protocol asks.

- ``setting_columns`` / ``split_by_settings``: the config settings that vary among a table's runs
  of one method (teacher visibility, model, split sizes ...) and the table split by them: every
  mean over seeds is taken within one setting, never across settings as if they were seeds.
- ``summarize``: mean, seed std and 95% t-interval half-width per condition
  (artefact strength x every varying setting x method x lambda x layers) for every metric column.
- ``best_on_source_val``: per artefact strength, the ANCHOR setting with the highest mean GOLD
  accuracy on the SOURCE validation split (never a target number).
- ``failure_mode``: THE failure-mode verdict (results table in, dict out): the naive student's
  WRG interval above 0 and WRG - AOG above 0 beyond the seed interval (strict form: AOG below 0),
  pooled over targets and per target with a Holm correction across targets.
- ``anchor_beats_naive``: NTS(ANCHOR) - NTS(naive), paired over seeds, with its t-interval.
- ``verdict_lines``: both in plain words (the demo CLI prints them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pandas as pd
from scipy import stats

from anchorviz.analysis.metrics import seed_summary

logger = logging.getLogger(__name__)

__all__ = [
    "CONDITION",
    "METHOD_KEYS",
    "METRICS",
    "SETTING_COLUMNS",
    "anchor_beats_naive",
    "best_on_source_val",
    "failure_mode",
    "holm",
    "p_text",
    "points",
    "setting_columns",
    "settings_text",
    "split_by_settings",
    "summarize",
    "target_columns",
    "verdict_lines",
    "setting_key",
]

CONDITION = ["artifact_strength", "kind", "method", "anchor_lambda", "anchor_layers"]
#: the grid's method dimensions: the runs of one method group differ only in seed and setting
METHOD_KEYS = ["kind", "method", "anchor_lambda", "anchor_layers"]
#: results-table columns that describe a run's config (`anchorviz.pipeline.results`), besides
#: the ``cfg.<setting>`` columns of mixed base configs; not settings: ``run_id``, ``seed``, the
#: method keys and every metric
SETTING_COLUMNS = ("source", "targets", "artifact_kind", "artifact_strength",
                   "teacher_visibility", "split_per_seed", "model")


def setting_key(col: pd.Series) -> pd.Series:
    # one comparable value per run (None / NaN / missing are one value, "-")
    return col.astype(object).where(col.notna(), "-").astype(str)


def setting_columns(results: pd.DataFrame, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """The config settings (`SETTING_COLUMNS` and ``cfg.*`` columns) that vary among the runs
    of one method group (`METHOD_KEYS`): runs that a mean over seeds must not pool.

    A setting that differs only between methods (the teacher's model is not the student's)
    is not one: each method's runs share it. ``ignore``: settings the caller handles itself."""
    cands = [c for c in SETTING_COLUMNS if c in results.columns]
    cands += sorted(c for c in results.columns if str(c).startswith("cfg."))
    cands = [c for c in cands if c not in ignore]
    if results.empty or not cands:
        return []
    keys = [k for k in METHOD_KEYS if k in results.columns]
    out = []
    for c in cands:
        vals = setting_key(results[c])
        if keys:
            n = vals.groupby([setting_key(results[k]) for k in keys]).nunique()
            varies = bool((n > 1).any())
        else:
            varies = vals.nunique() > 1
        if varies:
            out.append(c)
    return out


def settings_text(setting: dict) -> str:
    """``"teacher reads the marker on 50% of marked pairs, model m"``: one setting of
    `split_by_settings` in words, for a heading or caption."""
    def one(k: str, v) -> str:
        if k == "teacher_visibility" and isinstance(v, float):
            return f"teacher reads the marker on {v:.0%} of marked pairs"
        name = k.removeprefix('cfg.')
        return f"{name} {v:g}" if isinstance(v, float) else f"{name} {v}"
    return ", ".join(one(k, v) for k, v in setting.items())


def split_by_settings(results: pd.DataFrame, *, ignore: tuple[str, ...] = ()
                      ) -> Iterator[tuple[dict, pd.DataFrame]]:
    """``(setting, rows)`` per combination of the varying settings (`setting_columns`), in
    sorted order; the whole table with ``{}`` when no setting varies. Aggregate each part."""
    cols = setting_columns(results, ignore=ignore)
    if not cols:
        yield {}, results
        return
    keys = [setting_key(results[c]) for c in cols]
    parts = []
    for key, rows in results.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        parts.append(({c: rows[c].iloc[0] if rows[c].notna().iloc[0] else k
                       for c, k in zip(cols, key)}, rows))

    def order(v) -> tuple:  # numbers by value, then text
        try:
            return (0, float(v), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(v))

    yield from sorted(parts, key=lambda p: tuple(order(v) for v in p[0].values()))


def _refuse_pooling(results: pd.DataFrame, what: str, ignore: tuple[str, ...] = ()) -> None:
    cols = setting_columns(results, ignore=ignore)
    if cols:
        vals = {c: sorted(setting_key(results[c]).unique()) for c in cols}
        raise ValueError(f"{what}: the runs differ in {', '.join(f'{c} {vals[c]}' for c in cols)}; "
                         "a mean over seeds would pool different settings as if they were seeds. "
                         "Select one setting (split_by_settings) first")
METRICS = ["acc_val", "acc_id", "acc_id_marked", "acc_id_clean", "acc_id_seen", "acc_id_hidden",
           "acc_ood", "wrg", "aog", "nts", "pgr", "drift_cos_source", "drift_cos_target",
           "drift_cos_centred_source", "drift_cos_centred_target", "drift_cka_source",
           "drift_cka_target", "drift_cka_debiased_source", "drift_cka_debiased_target",
           "q_confidence"]


def _metric_cols(results: pd.DataFrame) -> list[str]:
    per_target = sorted(c for c in results.columns if c.startswith("acc_") and not
                        c.endswith(("_lo", "_hi")) and c not in METRICS)
    return [c for c in METRICS if c in results.columns] + per_target


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """One row per condition with ``<metric>_mean``, ``<metric>_std``, ``<metric>_hw`` and
    ``n_seeds``. Accuracies stay fractions. A condition is `CONDITION` plus every setting that
    varies among the runs (`setting_columns`, e.g. ``teacher_visibility``): one column each."""
    if results.empty:
        raise ValueError("results table is empty: no finished runs to summarise")
    cols = _metric_cols(results)
    by = CONDITION[:1] + setting_columns(results, ignore=tuple(CONDITION)) + CONDITION[1:]
    rows = []
    for key, g in results.groupby(by, sort=True, dropna=False):
        row = dict(zip(by, key))
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
    accuracy across seeds; ties go to the smaller lambda. Raises ValueError when another setting
    varies among the runs (`setting_columns`)."""
    if "acc_val" not in results.columns:
        raise ValueError("results table has no acc_val column (gold source-validation accuracy); "
                         "rerun the sweep with this version to record it")
    _refuse_pooling(results, "best_on_source_val", ignore=("artifact_strength",))
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


def _at_strength(results: pd.DataFrame, strength: float | None) -> pd.DataFrame:
    """The rows at artefact ``strength``; None keeps every row (a table with no artefact)."""
    if strength is None:
        return results
    if "artifact_strength" not in results.columns:
        raise ValueError(f"results table has no artifact_strength column, so strength={strength!r} "
                         "cannot be selected; pass strength=None to use every row")
    s = pd.to_numeric(results["artifact_strength"], errors="coerce").to_numpy(dtype=float)
    return results[np.isclose(s, float(strength))]


def _strengths(results: pd.DataFrame) -> list:
    if "artifact_strength" not in results.columns:
        return []
    return sorted(results["artifact_strength"].dropna().unique().tolist())


def _per_seed(rows: pd.DataFrame, col: str) -> pd.Series:
    # one value per seed: a folder holding several runs of one condition averages them
    return rows.groupby("seed")[col].mean().dropna()


def _interval(values: np.ndarray, confidence: float) -> dict:
    """Mean, std, t half-width and bounds across seeds (NaN spread with fewer than 2 seeds)."""
    if len(values) == 0:
        return {"mean": np.nan, "std": np.nan, "hw": np.nan, "lo": np.nan, "hi": np.nan}
    s = seed_summary(values, confidence)
    hw = float(s.half_width)
    return {"mean": float(s.mean), "std": float(s.std), "hw": hw,
            "lo": float(s.mean - hw), "hi": float(s.mean + hw)}


def _p_greater(values: np.ndarray) -> float:
    """One-sided one-sample t-test of mean > 0 (a paired test when ``values`` are per-seed
    differences); NaN with fewer than 2 values. No spread: 0 if the mean is above 0, else 1."""
    n = len(values)
    if n < 2:
        return np.nan
    mean, sd = float(np.mean(values)), float(np.std(values, ddof=1))
    if sd == 0.0:
        return 0.0 if mean > 0 else 1.0
    return float(stats.t.sf(mean / (sd / np.sqrt(n)), df=n - 1))


def holm(pvalues) -> np.ndarray:
    """Holm step-down adjusted p-values (family = the finite entries; NaN stays NaN):
    with ``p_(1) <= ... <= p_(m)``, ``p_holm_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def target_columns(results: pd.DataFrame) -> dict[str, str]:
    """``{target: column}`` of the per-target AOG columns ``aog_<target>`` (not the pooled
    ``aog``, nor an interval column: ``aog_lo`` / ``aog_hi``, ``aog_<target>_lo`` / ``_hi``)."""
    return {c[4:]: c for c in sorted(results.columns)
            if c.startswith("aog_") and not c.endswith(("_lo", "_hi"))}


def _gap_block(wrg: pd.Series, aog: pd.Series, column: str, confidence: float) -> dict:
    seeds = sorted(set(wrg.index) & set(aog.index))
    w = wrg.loc[seeds].to_numpy(dtype=float)
    a = aog.loc[seeds].to_numpy(dtype=float)
    gap = w - a
    g, ai = _interval(gap, confidence), _interval(a, confidence)
    return {"column": column, "n_seeds": len(seeds), "seeds": list(seeds),
            "per_seed_aog": a.tolist(), "per_seed_gap": gap.tolist(),
            "mean": g["mean"], "std": g["std"], "hw": g["hw"], "lo": g["lo"], "hi": g["hi"],
            "aog": ai,
            "p": _p_greater(gap), "p_strict": _p_greater(-a)}


def failure_mode(results: pd.DataFrame, strength: float | None = None, *, method: str = "naive",
                 confidence: float = 0.95) -> dict:
    """THE failure-mode verdict of a results table (one value per seed, paired over seeds).

    The failure mode needs both, beyond the seed spread (95% t-intervals over seeds, the same
    as one-sided t-tests at ``alpha = (1 - confidence) / 2``):

    * the naive student beats its teacher in distribution: WRG's interval lies above 0;
    * its ID gain does not carry over: WRG - AOG > 0 (its interval above 0). The strict form
      asks more: AOG < 0 (AOG's interval below 0), the student is worse than its teacher OOD.

    Both are judged on the pooled OOD column ``aog`` and on each target's ``aog_<target>``
    separately, so a loss on one target is not hidden by gains on the others; the per-target
    one-sided paired t-tests are Holm-adjusted across targets (``p_holm < alpha``). The pooled
    test is not in that family. ``failure_mode`` is True when the pooled test or any target
    shows it; ``strict`` likewise for the strict form.

    Args:
        results: the results table (`anchorviz.pipeline.results.results_table`).
        strength: artefact strength to select; None uses every row (a table with no artefact).
        method: the student whose runs are judged (``"naive"``).
        confidence: confidence of the seed intervals.

    Returns:
        ``{"strength", "method", "confidence", "alpha", "n_seeds", "seeds", "missing",
        "can_conclude", "reason", "wrg", "pooled", "targets", "failure_mode", "strict",
        "failure_targets", "strict_targets"}``: ``wrg`` holds ``mean, std, hw, lo, hi,
        per_seed, above_zero``; ``pooled`` (None without an ``aog`` column) and each
        ``targets[name]`` hold ``column, n_seeds, seeds, per_seed_aog, per_seed_gap`` and, for
        WRG - AOG, ``mean, std, hw, lo, hi, p, p_holm``, AOG's interval ``aog`` with
        ``p_strict, p_strict_holm`` (one-sided test of AOG < 0) and the verdicts
        ``not_carried_over`` (WRG - AOG > 0), ``aog_below_zero``, ``failure_mode`` (WRG above 0
        and not carried over) and ``strict`` (WRG above 0 and AOG below 0). With one seed there
        is no interval: every verdict is False, ``can_conclude`` is False and ``reason`` says
        why; the same for missing columns (listed in ``missing``).

    Raises:
        ValueError: a setting other than the strength varies among the runs
            (`setting_columns`): judge each part of `split_by_settings` instead.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = round((1.0 - confidence) / 2.0, 12)
    out: dict = {"strength": strength, "method": method, "confidence": confidence,
                 "alpha": alpha, "n_seeds": 0, "seeds": [], "missing": [],
                 "can_conclude": False, "reason": "",
                 "wrg": {**_interval(np.array([]), confidence), "per_seed": [],
                         "above_zero": False},
                 "pooled": None, "targets": {}, "failure_mode": False, "strict": False,
                 "failure_targets": [], "strict_targets": []}
    missing = [c for c in ("method", "seed", "wrg") if c not in results.columns]
    tcols = target_columns(results)
    if "aog" not in results.columns and not tcols:
        missing.append("aog")
    if strength is not None and "artifact_strength" not in results.columns:
        missing.append("artifact_strength")
    out["missing"] = missing
    if missing:
        out["reason"] = (f"the results table has no {', '.join(missing)} column(s): no "
                         "failure-mode verdict")
        return out
    if strength is None and len(_strengths(results)) > 1:
        raise ValueError(f"results table holds artifact strengths {_strengths(results)}: pass "
                         "strength= to judge one of them")
    r = _at_strength(results, strength)
    _refuse_pooling(r, "failure_mode")
    rows = r[r["method"] == method]
    wrg = _per_seed(rows, "wrg")
    w = wrg.to_numpy(dtype=float)
    out["n_seeds"], out["seeds"] = len(w), wrg.index.tolist()
    wi = _interval(w, confidence)
    out["wrg"] = {**wi, "per_seed": w.tolist(), "above_zero": bool(len(w) > 1 and wi["lo"] > 0)}
    if len(w) == 0:
        out["reason"] = f"no {method}-student runs with a WRG" + (
            f" at strength {strength:g}" if strength is not None else "")
        return out

    if "aog" in rows.columns:
        out["pooled"] = _gap_block(wrg, _per_seed(rows, "aog"), "aog", confidence)
    out["targets"] = {t: _gap_block(wrg, _per_seed(rows, c), c, confidence)
                      for t, c in tcols.items()}
    above = out["wrg"]["above_zero"]
    blocks = _judge_blocks(out, above, alpha)

    if len(w) < 2:
        out["reason"] = ("one seed: no seed interval, so one seed cannot separate this from "
                         "noise (run >= 3 seeds)")
        return out
    out["can_conclude"] = True
    where = [n for n, b in blocks if b["failure_mode"]]
    if not above:
        out["reason"] = (f"WRG's {confidence:.0%} seed interval [{points(wi['lo'])}, "
                         f"{points(wi['hi'])}] does not lie above 0: no reliable ID gain")
    elif not where:
        out["reason"] = ("WRG > 0, but WRG - AOG is not above 0 beyond the seed interval, "
                         "pooled or on any target (Holm-adjusted)")
    else:
        strict = [n for n, b in blocks if b["strict"]]
        out["reason"] = ("WRG > 0 and the ID gain does not carry over on: " + ", ".join(where)
                         + ("; strict form (AOG < 0) on: " + ", ".join(strict) if strict else
                            "; AOG is not below 0 beyond the interval anywhere (not strict)"))
    return out


def _judge_blocks(out: dict, above: bool, alpha: float) -> list[tuple[str, dict]]:
    """The verdicts of `failure_mode`'s blocks, written into ``out``: per target the
    Holm-adjusted one-sided tests of WRG - AOG > 0 and AOG < 0, the pooled block's own tests
    (a single test: no family), each block's ``failure_mode`` / ``strict`` given WRG above 0
    (``above``), and the overall verdicts. Returns the ``(name, block)`` pairs, pooled first."""
    names = list(out["targets"])
    p_holm = holm([out["targets"][t]["p"] for t in names])
    ps_holm = holm([out["targets"][t]["p_strict"] for t in names])
    for t, ph, psh in zip(names, p_holm, ps_holm):
        b = out["targets"][t]
        b["p_holm"], b["p_strict_holm"] = float(ph), float(psh)
        b["not_carried_over"] = bool(b["n_seeds"] > 1 and ph < alpha)
        b["aog_below_zero"] = bool(b["n_seeds"] > 1 and psh < alpha)
    if out["pooled"] is not None:
        b = out["pooled"]
        b["p_holm"], b["p_strict_holm"] = b["p"], b["p_strict"]  # a single test: no family
        b["not_carried_over"] = bool(b["n_seeds"] > 1 and b["lo"] > 0)
        b["aog_below_zero"] = bool(b["n_seeds"] > 1 and b["aog"]["hi"] < 0)
    blocks = ([("pooled", out["pooled"])] if out["pooled"] is not None else []) + \
        list(out["targets"].items())
    for _, b in blocks:
        b["failure_mode"] = bool(above and b["not_carried_over"])
        b["strict"] = bool(above and b["aog_below_zero"])
    out["failure_targets"] = [t for t in names if out["targets"][t]["failure_mode"]]
    out["strict_targets"] = [t for t in names if out["targets"][t]["strict"]]
    out["failure_mode"] = any(b["failure_mode"] for _, b in blocks)
    out["strict"] = any(b["strict"] for _, b in blocks)
    return blocks


def anchor_beats_naive(results: pd.DataFrame, strength: float | None, anchor_lambda: float,
                       anchor_layers: str) -> dict:
    """NTS(ANCHOR) - NTS(naive), paired over seeds, at one strength (None: every row) and
    ANCHOR setting; ``beyond_spread``: its t-interval lies above 0 and its mean exceeds its
    seed std. Raises ValueError when another setting varies (`setting_columns`)."""
    r = _at_strength(results, strength)
    _refuse_pooling(r, "anchor_beats_naive")
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


def _signed(x: float, hw: float | None = None) -> str:
    """A fraction as signed points, optionally with its half-width: ``'+2.3 ± 1.1'``."""
    if x is None or not np.isfinite(x):
        return "-"
    v = round(100 * float(x), 1)
    out = f"{v if v != 0 else 0.0:+.1f}"  # no "-0.0"
    if hw is not None and np.isfinite(hw):
        out += f" ± {100 * hw:.1f}"
    return out


def p_text(p: float) -> str:
    """A p-value as the verdict prints it: three decimals, "< 0.001" below, "-" if unknown."""
    return "-" if p is None or not np.isfinite(p) else (f"{p:.3f}" if p >= 0.001 else "< 0.001")


def _seed_lines(fm: dict) -> list[str]:
    lines = []
    pooled, targets = fm["pooled"], fm["targets"]
    for i, seed in enumerate(fm["seeds"]):
        w = fm["wrg"]["per_seed"][i]
        parts = [f"WRG {_signed(w)}"]
        if pooled is not None and seed in pooled["seeds"]:
            a = pooled["per_seed_aog"][pooled["seeds"].index(seed)]
            parts.append(f"AOG {_signed(a)}")
        per_t = [f"{t} {_signed(b['per_seed_aog'][b['seeds'].index(seed)])}"
                 for t, b in targets.items() if seed in b["seeds"]]
        line = f"  seed {seed}: " + ", ".join(parts)
        if per_t:
            line += " (AOG by target: " + ", ".join(per_t) + ")"
        if pooled is not None and seed in pooled["seeds"]:
            line += f"; WRG - AOG {_signed(pooled['per_seed_gap'][pooled['seeds'].index(seed)])}"
        lines.append(line)
    return lines


def _anchor_lines(results: pd.DataFrame, strength: float | None, method: str) -> list[str]:
    r = _at_strength(results, strength)
    if "method" not in r.columns or not (r["method"] == "anchor").any():
        return []
    need = [c for c in ("acc_val", "nts", "anchor_lambda", "anchor_layers", "seed")
            if c not in r.columns]
    if need:
        return [f"ANCHOR vs {method}: the results table has no {', '.join(need)} column(s), so no "
                "ANCHOR setting can be chosen on source validation and compared."]
    if "artifact_strength" not in r.columns:
        r = r.assign(artifact_strength=0.0)
    best = best_on_source_val(r)
    if best.empty or not np.isfinite(best.iloc[0]["acc_val"]):
        return ["ANCHOR: no source-validation accuracy recorded, so no setting can be chosen."]
    lam, lay = float(best.iloc[0]["anchor_lambda"]), best.iloc[0]["anchor_layers"]
    ab = anchor_beats_naive(r, None, lam, lay)
    head = f"ANCHOR chosen on source validation (lambda {lam:g}, layers {lay or '-'})"
    if ab["n_seeds"] == 0:
        return [f"{head}: no seed has both an ANCHOR and a {method} run to compare."]
    if ab["n_seeds"] == 1:
        a = r[(r["method"] == "anchor") & (r["anchor_lambda"] == lam) & (r["anchor_layers"] == lay)]
        n = r[r["method"] == method]
        seed = sorted(set(a["seed"]) & set(n["seed"]))[0]
        return [f"{head}: NTS {_signed(a.loc[a['seed'] == seed, 'nts'].mean())} vs {method} "
                f"{_signed(n.loc[n['seed'] == seed, 'nts'].mean())} points (seed {seed}; one seed "
                "cannot separate this from noise)."]
    return [f"{head}: NTS(ANCHOR) - NTS({method}) {_signed(ab['mean'], ab['hw'])} points, paired "
            f"over {ab['n_seeds']} seeds: beyond the seed spread: "
            f"{'yes' if ab['beyond_spread'] else 'no'}."]


def verdict_lines(results: pd.DataFrame, strength: float | None = None, *, method: str = "naive",
                  confidence: float = 0.95) -> list[str]:
    """The failure-mode verdict (`failure_mode`) and ANCHOR vs naive (`best_on_source_val`,
    `anchor_beats_naive`) in plain words, one string per line, computed from ``results``.

    Per-seed numbers always; with one seed it says that one seed cannot separate them from
    noise and gives no verdict. ``strength`` None: every row, or each strength in turn when the
    table holds several. A table holding several teacher visibilities (``teacher_visibility``)
    is judged per visibility, and likewise for every setting that varies among the runs
    (`split_by_settings`): runs of different settings are never pooled as seeds."""
    parts = list(split_by_settings(results, ignore=("artifact_strength",)))
    if len(parts) > 1:
        lines = []
        for setting, part in parts:
            head = settings_text(setting)
            lines.append(f"{head[:1].upper()}{head[1:]}:")
            lines += ["  " + x for x in verdict_lines(part, strength, method=method,
                                                       confidence=confidence)]
        return lines
    if strength is None and len(_strengths(results)) > 1:
        lines = []
        for s in _strengths(results):
            lines.append(f"Artefact strength {s:g}:")
            lines += ["  " + x for x in verdict_lines(results, s, method=method,
                                                       confidence=confidence)]
        return lines
    fm = failure_mode(results, strength, method=method, confidence=confidence)
    if fm["missing"] or fm["n_seeds"] == 0:
        return [f"No failure-mode verdict: {fm['reason']}."] + _anchor_lines(results, strength, method)
    n = fm["n_seeds"]
    shown = strength if strength is not None else (_strengths(results) or [None])[0]
    at = f" at artefact strength {shown:g}" if shown is not None else ""
    lines = [f"{method.capitalize()} student{at}, {n} seed{'s' if n > 1 else ''} (points, student "
             "minus weak teacher; WRG in distribution, AOG out of distribution):"]
    lines += _seed_lines(fm)
    if n < 2:
        lines.append("One seed cannot separate this from noise (on the default data, WRG and AOG "
                     "move by several points from seed to seed, and one seed gives no interval): "
                     "no failure-mode verdict. `anchorviz demo` without --seeds runs five seeds "
                     "for intervals.")
        return lines + _anchor_lines(results, strength, method)
    w = fm["wrg"]
    lines.append(f"  WRG {_signed(w['mean'], w['hw'])} ({confidence:.0%} t-interval over seeds, "
                 f"{_signed(w['lo'])} to {_signed(w['hi'])}): "
                 + ("above 0, the student beats its teacher in distribution" if w["above_zero"]
                    else "not above 0, no reliable in-distribution gain"))
    blocks = ([("pooled over targets", fm["pooled"])] if fm["pooled"] is not None else []) + \
        list(fm["targets"].items())
    for name, b in blocks:
        if b["n_seeds"] < 2:
            lines.append(f"  {name}: fewer than 2 seeds with a value, no interval")
            continue
        holm_p = "" if b is fm["pooled"] else f", Holm {p_text(b['p_holm'])}"
        lines.append(
            f"  {name}: WRG - AOG {_signed(b['mean'], b['hw'])} (p {p_text(b['p'])}{holm_p}): "
            + ("the ID gain does not carry over" if b["not_carried_over"]
               else "not above 0 beyond the interval")
            + f"; AOG {_signed(b['aog']['mean'], b['aog']['hw'])}: "
            + ("below 0 (strict form)" if b["aog_below_zero"] else "not below 0 beyond the interval"))
    verdict = "YES" if fm["failure_mode"] else "no"
    strict = "YES" if fm["strict"] else "no"
    lines.append(f"Failure mode (WRG > 0 and WRG - AOG > 0 beyond the seed interval; per target "
                 f"Holm-adjusted): {verdict}. Strict form (AOG < 0 too): {strict}. "
                 f"{fm['reason']}.")
    return lines + _anchor_lines(results, strength, method)
