"""Drift figures: how far training moved the student's representations from its frozen
reference, and what that has to do with out-of-distribution accuracy.

- drift by layer: :func:`drift_by_layer_figure` -- linear CKA(student, reference) or cosine
  drift per layer (:data:`DRIFT_METRICS`), one colour per method, one panel per domain;
  :func:`drift_curve` reads one curve of a run's ``drift.parquet``.
- drift vs OOD: :func:`drift_vs_ood_figure` -- drift against OOD gain, one marker per run and
  seed, one panel per target; Spearman rho with its bootstrap interval
  (``anchorviz.analysis.drift.drift_ood_relation``) and a fitted line only from
  :data:`MIN_CORRELATION_N` runs on.
- lambda sweep: :func:`lambda_sweep_figure` -- ID, OOD, NTS and drift against the ANCHOR
  strength lambda.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from anchorviz.analysis.drift import drift_ood_relation
from anchorviz.analysis.drift_inputs import DriftError
from anchorviz.viz.common import (
    ANCHOR_SCALES,
    BOTTOM_LEGEND,
    DOMAIN_DASHES,
    GROUP_KEYS,
    LAYER_DASHES,
    METHOD_COLORS,
    OTHER_ANCHOR_SCALE,
    TEMPLATE,
    TRANSFER_NAMES,
    PathLike,
    captured_mask,
    figure_title,
    group_mask,
    group_table,
    interval_caption,
    layers_label,
    layers_rank,
    load_run_table,
    logger,
    method_label,
    metric_summary,
    resolve_splits,
    results_arg,
    run_path,
    select_condition,
    shared_x_title,
    split_desc,
    split_sort_key,
    summarize_groups,
    sweep_targets,
    target_column,
    unique_values,
)

__all__ = [
    "DRIFT_AXIS_TITLES",
    "DRIFT_METRICS",
    "MIN_CORRELATION_N",
    "drift_by_layer_figure",
    "drift_curve",
    "drift_vs_ood_figure",
    "lambda_sweep_figure",
]

#: metric name -> (drift.parquet column, axis label)
DRIFT_METRICS: dict[str, tuple[str, str]] = {
    "cka": ("cka", "linear CKA(student, reference)"),
    "cka_debiased": ("cka_debiased", "debiased linear CKA(student, reference)"),
    "cosine": ("cosine_mean", "cosine drift 1 - cos (mean over rows)"),
    "cosine_centred": ("cosine_centred_mean",
                       "centred cosine drift 1 - cos (reference mean removed; mean over rows)"),
    "cosine_median": ("cosine_median", "cosine drift 1 - cos (median over rows)"),
    "cosine_p90": ("cosine_p90", "cosine drift 1 - cos (90th percentile)"),
}
#: metric name -> the y-axis title of :func:`drift_by_layer_figure`: short enough to fit the
#: plot's height (a long one ran up into the figure title); the subtitle says the full name
DRIFT_AXIS_TITLES: dict[str, str] = {
    "cka": "linear CKA",
    "cka_debiased": "debiased CKA",
    "cosine": "1 - cos (mean)",
    "cosine_centred": "centred 1 - cos (mean)",
    "cosine_median": "1 - cos (median)",
    "cosine_p90": "1 - cos (90th pct.)",
}


# --------------------------------------------------------------------------- drift by layer


def _drift_metric(metric: str) -> tuple[str, str]:
    if metric not in DRIFT_METRICS:
        raise ValueError(f"unknown drift metric {metric!r}; choose one of {sorted(DRIFT_METRICS)}")
    return DRIFT_METRICS[metric]


def drift_curve(table: pd.DataFrame, metric: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Layers and values of one drift metric on one split of a drift table (layer ascending)."""
    col, _ = _drift_metric(metric)
    part = table[table["split"] == split].sort_values("layer")
    return part["layer"].to_numpy(), part[col].to_numpy(float)


def _drift_tables_for(run_ids: Sequence[str], sweep_dir: PathLike | None,
                      drift_tables: Mapping[str, pd.DataFrame] | None,
                      strict: bool) -> dict[str, pd.DataFrame]:
    out = {}
    for rid in run_ids:
        if drift_tables is not None and rid in drift_tables:
            out[rid] = drift_tables[rid]
            continue
        if sweep_dir is None:
            raise ValueError(f"no drift table for run {rid!r}: pass sweep_dir (or drift_tables=)")
        try:
            out[rid] = load_run_table(run_path(sweep_dir, rid), "drift")
        except FileNotFoundError:
            if strict:
                raise
            logger.warning("run %s has no drift.parquet; left out of the drift figure", rid)
    return out


def _run_series(res: pd.DataFrame, runs: list[str], sweep_dir: PathLike | None,
                drift_tables: Mapping[str, pd.DataFrame] | None
                ) -> tuple[list[tuple[str, str, list[str]]], dict[str, pd.DataFrame]]:
    """``([(label, colour, [run id])], drift tables)`` of :func:`drift_by_layer_figure`'s
    ``runs=[...]``: one line per run."""
    series: list[tuple[str, str, list[str]]] = []  # (label, colour, run ids)
    unknown = [r for r in runs if r not in set(res["run_id"])]
    if unknown:
        have = res.loc[res["kind"] != "teacher", "run_id"].tolist()
        raise ValueError(f"run(s) {unknown} not in the results table; runs with drift: {have}")
    groups = group_table(res)
    for rid in runs:
        row = res[res["run_id"] == rid].iloc[0]
        color = groups.loc[group_mask(groups, row["method"], row["anchor_lambda"],
                                       row["anchor_layers"]), "color"].iloc[0]
        label = method_label(row["method"], row["anchor_lambda"], row["anchor_layers"])
        series.append((f"{label}, seed {row['seed']}", color, [rid]))
    tables = _drift_tables_for(runs, sweep_dir, drift_tables, strict=True)
    return series, tables


def _group_series(res: pd.DataFrame, sweep_dir: PathLike | None,
                  drift_tables: Mapping[str, pd.DataFrame] | None, seed: int | None,
                  methods: Sequence[str] | None, artifact_strength: float | None,
                  source: str | None
                  ) -> tuple[list[tuple[str, str, list[str]]], dict[str, pd.DataFrame], str]:
    """``([(label, colour, run ids)], drift tables, caption)`` of :func:`drift_by_layer_figure`
    with ``runs=None``: one line per method group, its seeds averaged (or only ``seed``)."""
    series: list[tuple[str, str, list[str]]] = []  # (label, colour, run ids)
    rows, caption = select_condition(res, artifact_strength, source)
    rows = rows[rows["kind"] != "teacher"]
    if seed is not None:
        seeds = unique_values(rows["seed"])
        if seed not in seeds:
            raise ValueError(f"seed {seed!r} is not in the sweep; choose one of {seeds}")
        rows = rows[rows["seed"] == seed]
    if methods is not None:
        have = unique_values(rows["method"])
        bad = [m for m in methods if m not in have]
        if bad:
            raise ValueError(f"method(s) {bad} not in the sweep; choose from {have}")
        rows = rows[rows["method"].isin(list(methods))]
    kept = rows[captured_mask(rows)]  # scores-only runs (verdict-only seeds): no drift
    if kept.empty and not rows.empty:
        raise ValueError("every selected run was scored only (capture.enabled false, e.g. "
                         "a verdict-only seed outside grid.detail_seeds): no drift to draw; "
                         "choose a detail seed")
    rows = kept
    if rows.empty:
        raise ValueError("no student or ceiling runs to draw drift for")
    tables = _drift_tables_for(rows["run_id"].tolist(), sweep_dir, drift_tables, strict=False)
    for g in group_table(rows).itertuples(index=False):
        ids = [r for r in rows.loc[group_mask(rows, g.method, g.anchor_lambda,
                                               g.anchor_layers), "run_id"] if r in tables]
        if ids:
            n = len(ids)
            series.append((g.label + (f" (mean of {n} seeds)" if n > 1 else ""), g.color, ids))
    return series, tables, caption


def drift_by_layer_figure(
    sweep_dir: PathLike | None = None,
    metric: str = "cka",
    split: str | Sequence[str] | None = None,
    runs: Sequence[str] | None = None,
    *,
    results: pd.DataFrame | None = None,
    seed: int | None = None,
    methods: Sequence[str] | None = None,
    artifact_strength: float | None = None,
    source: str | None = None,
    drift_tables: Mapping[str, pd.DataFrame] | None = None,
    facet: bool | None = None,
) -> go.Figure:
    """Drift of the student from its frozen reference per layer, source vs each target.

    Colour = method group (darker blue = stronger last-layer ANCHOR, greens = middle layers);
    line style = domain (solid source, dashed / dotted targets). ``runs=None`` draws one line
    per method group and domain, averaged over seeds (or only ``seed``); ``runs=[run_id, ...]``
    draws those runs, one line each. ``metric``: ``"cka"`` (linear CKA, 1 = same
    representation up to rotation and scale), ``"cosine"`` (mean 1 - cos, 0 = unchanged) or
    another key of :data:`DRIFT_METRICS`. ``split``: None (all), ``"source"`` or a target.

    ``facet``: one panel per domain (shared y axis), so that method groups x domains do not
    pile up as a dozen or more overlapping lines in one panel; None (default) facets whenever
    more than one domain is shown, False draws every line in one panel.
    """
    col, ylabel = _drift_metric(metric)
    res = results_arg(sweep_dir, results)
    if runs is not None:
        runs = list(runs)
        series, tables = _run_series(res, runs, sweep_dir, drift_tables)
        caption = ""
    else:
        series, tables, caption = _group_series(res, sweep_dir, drift_tables, seed, methods,
                                                artifact_strength, source)
    if not tables:
        raise ValueError("none of the selected runs has a drift table")
    all_splits = sorted({s for t in tables.values() for s in t["split"].unique()},
                        key=split_sort_key)
    shown = resolve_splits(all_splits, split)
    dashes = {s: DOMAIN_DASHES[i % len(DOMAIN_DASHES)] for i, s in enumerate(all_splits)}
    any_table = next(iter(tables.values()))

    facet = len(shown) > 1 if facet is None else bool(facet)
    if facet:
        fig = make_subplots(rows=1, cols=len(shown), shared_yaxes=True,
                            horizontal_spacing=0.03 if len(shown) > 3 else 0.05,
                            subplot_titles=[split_desc(s, any_table) for s in shown])
    else:
        fig = go.Figure()
    for label, color, ids in series:
        stacked = pd.concat([tables[r] for r in ids], ignore_index=True)
        first = True
        for i, s in enumerate(shown):
            part = stacked[stacked["split"] == s]
            if part.empty:
                continue
            curve = part.groupby("layer", sort=True)[col].mean()
            desc = split_desc(s, any_table)
            tr = go.Scatter(
                x=curve.index.to_numpy(), y=curve.to_numpy(float), mode="lines+markers",
                name=label, legendgroup=label, showlegend=first,
                line={"color": color, "dash": dashes[s], "width": 2}, marker={"size": 5},
                meta={"runs": ids, "split": s, "group": label, "metric": col},
                hovertemplate=(f"{label}<br>{desc}<br>layer %{{x}}<br>{ylabel}: %{{y:.5g}}"
                               "<extra></extra>"))
            if facet:
                fig.add_trace(tr, row=1, col=i + 1)
            else:
                fig.add_trace(tr)
            first = False
    if not facet:
        for s in shown:  # legend entries for the line styles (facets name their domain)
            fig.add_trace(go.Scatter(
                x=[None], y=[None], mode="lines", name=f"line style: {split_desc(s, any_table)}",
                line={"color": "grey", "dash": dashes[s]}, hoverinfo="skip",
                meta={"legend_only": True, "split": s}))
    what = "similarity" if col.startswith("cka") else "drift"
    # the full metric name goes in the subtitle; the y axis gets a short title that fits the
    # plot's height instead of running up into the figure title
    axis_title = DRIFT_AXIS_TITLES.get(metric, ylabel)
    fig.update_layout(
        title=figure_title(f"Representation {what} from the frozen reference, per layer"
                     + (f" ({caption})" if caption else ""),
                     f"y: {ylabel}; " + ("one panel per domain; " if facet else "")
                     + "higher CKA / lower cosine drift = closer to the pretrained student; "
                     "layer 0 = embeddings"),
        template=TEMPLATE, legend={"groupclick": "togglegroup", **BOTTOM_LEGEND},
        margin={"t": 120, "b": 170, "l": 80}, height=600,
    )
    # side by side, each panel's x axis gets the short title (the subtitle says layer 0 is the
    # embeddings): a long one per panel ran into its neighbour's
    fig.update_xaxes(dtick=1, title_text="layer" if facet and len(shown) > 1
                     else "layer (0 = embeddings)")
    if facet:
        fig.update_yaxes(title_text=axis_title, title_standoff=8, row=1, col=1)
    else:
        fig.update_yaxes(title_text=axis_title, title_standoff=8)
    fig.layout.meta = {"facets": list(shown) if facet else []}
    return fig


# --------------------------------------------------------------------------- drift vs OOD


def _is_fraction_col(col: str) -> bool:
    return col.startswith(("acc_", "aog_")) or col in ("wrg", "aog", "nts", "acc_id", "acc_ood")


def _axis_label(col: str) -> str:
    known = {
        "drift_cos_target": "cosine drift 1 - cos on the targets (last layer, mean of targets)",
        "drift_cos_source": "cosine drift 1 - cos on the source (last layer)",
        "drift_cka_target": "linear CKA(student, reference) on the targets (last layer)",
        "drift_cka_source": "linear CKA(student, reference) on the source (last layer)",
        "drift_cos_centred_target": "centred cosine drift 1 - cos on the targets (last layer, "
                                    "mean of targets)",
        "drift_cos_centred_source": "centred cosine drift 1 - cos on the source (last layer)",
        "drift_cka_debiased_target": "debiased linear CKA on the targets (last layer, mean of "
                                     "targets)",
        "drift_cka_debiased_source": "debiased linear CKA on the source (last layer)",
        "aog": "AOG: OOD gain over the teacher (points)",
        "wrg": "WRG: ID gain over the teacher (points)",
        "nts": "NTS: net transfer score (points)",
        "acc_id": "ID pairwise accuracy (%)",
        "acc_ood": "OOD pairwise accuracy (%)",
        "pgr": "PGR: performance gap recovered (fraction)",
    }
    if col in known:
        return known[col]
    if col.startswith("aog_"):
        return f"AOG on {col[4:]} (points)"
    if col.startswith("acc_"):
        return f"pairwise accuracy on {col[4:]} (%)"
    return col


def _table_col_label(table_col: str) -> str:
    """Short axis label of a drift.parquet column (``cosine_mean`` -> ``cosine drift 1 - cos``)."""
    for col, label in DRIFT_METRICS.values():
        if col == table_col:
            return label.split(" (")[0] if not label.startswith(("linear", "debiased")) else label
    return table_col


def _short_label(col: str) -> str:
    table_col = _drift_table_column(col)
    if table_col is not None:
        return _table_col_label(table_col)
    return _axis_label(col)


#: fewest runs for which drift vs OOD shows a Spearman correlation and a fitted line: with
#: fewer, a rank correlation takes a handful of values (n = 3: +-1 or +-0.5) and its bootstrap
#: interval collapses, so the figure shows the points only and says why
MIN_CORRELATION_N = 8

# drift_<key>_target / _source results columns -> drift.parquet column
_DRIFT_TABLE_COLUMNS = {"cos": "cosine_mean", "cka": "cka", "cos_centred": "cosine_centred_mean",
                        "cka_debiased": "cka_debiased", "cos_std": "cosine_standardised_mean"}
_SEED_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star",
                 "triangle-down", "pentagon", "hexagon")


def _drift_table_column(drift_col: str) -> str | None:
    """The drift.parquet column behind a results column such as ``drift_cos_target``."""
    if not (drift_col.startswith("drift_") and drift_col.endswith(("_target", "_source"))):
        return None
    return _DRIFT_TABLE_COLUMNS.get(drift_col[len("drift_"):].rsplit("_", 1)[0])


def _relation_stat(panel: pd.DataFrame, min_n: int, n_boot: int, seed: int,
                   ci_level: float) -> tuple[dict | None, str]:
    """(relation or None, caption) of one panel's points: no statistic below ``min_n`` runs."""
    n = len(panel)
    if n < min_n:
        return None, f"n = {n} run{'s' if n != 1 else ''} (< {min_n}): no correlation shown"
    try:
        rel = drift_ood_relation(panel, drift_col="x", gain_col="y", n_boot=n_boot, seed=seed,
                                 ci_level=ci_level)
    except DriftError as exc:
        return None, f"n = {n}: correlation not defined ({exc})"
    lo, hi = rel["spearman_ci"]
    return rel, (f"Spearman ρ = {rel['spearman']:+.2f} ({ci_level:.0%} bootstrap CI {lo:+.2f} to "
                 f"{hi:+.2f}), n = {rel['n']} runs")


def _drift_gain_panels(rows: pd.DataFrame, by_target: bool, targets: list[str], drift_col: str,
                       gain_col: str, table_col: str | None, gain_prefix: str | None,
                       sweep_dir: PathLike | None,
                       drift_tables: Mapping[str, pd.DataFrame] | None
                       ) -> tuple[dict[str, pd.DataFrame], str, str]:
    """``(panels, x label, y label)`` of :func:`drift_vs_ood_figure`: panel name -> frame with
    x (drift), y (gain, stored units), run_id, seed and the group keys, its points finite."""
    keep = ["run_id", "seed", *GROUP_KEYS]
    panels: dict[str, pd.DataFrame] = {}
    if by_target:
        tables = _drift_tables_for(rows.loc[captured_mask(rows), "run_id"].tolist(), sweep_dir,
                                   drift_tables, strict=False)
        for t in targets:
            split = f"target_test:{t}"
            x = {}
            for rid, tab in tables.items():
                if table_col not in tab.columns:
                    continue
                top = tab[(tab["split"] == split) & (tab["layer"] == tab["layer"].max())]
                if len(top):
                    x[rid] = float(top[table_col].mean())
            part = rows[keep].assign(x=rows["run_id"].map(x).astype(float),
                                     y=rows[f"{gain_prefix}_{t}"].astype(float))
            panels[t] = part
        x_label = f"{_table_col_label(table_col)} on the target (last layer)"
        y_label = ("AOG on the target (points)" if gain_prefix == "aog"
                   else "pairwise accuracy on the target (%)")
    else:
        panels["pooled"] = rows[keep].assign(x=rows[drift_col].astype(float),
                                             y=rows[gain_col].astype(float))
        x_label, y_label = _axis_label(drift_col), _axis_label(gain_col)
    left_out = 0
    for name, part in panels.items():
        finite = np.isfinite(part["x"]) & np.isfinite(part["y"])
        left_out += int((~finite).sum())
        panels[name] = part[finite]
    if left_out:
        logger.info("%d run x panel point(s) without drift / gain left out", left_out)
    return panels, x_label, y_label


def _draw_drift_gain_panel(fig: go.Figure, i: int, name: str, part: pd.DataFrame,
                           groups: pd.DataFrame, symbol: dict, scale: float, gain_col: str,
                           rel: dict | None, by_target: bool) -> None:
    """Panel ``i`` (``name``) of :func:`drift_vs_ood_figure`: one marker per run, a group a
    trace, the least-squares line when ``rel`` (the panel's relation) is given, and 0."""
    where = {"row": 1, "col": i + 1} if by_target else {}
    for g in groups.itertuples(index=False):
        gp = part[group_mask(part, g.method, g.anchor_lambda, g.anchor_layers)]
        if gp.empty:
            continue
        fig.add_trace(go.Scatter(
            x=gp["x"].to_numpy(float), y=gp["y"].to_numpy(float) * scale, mode="markers",
            name=g.label, legendgroup=g.label, showlegend=i == 0,
            marker={"color": g.color, "size": 10, "symbol": [symbol[s] for s in gp["seed"]],
                    "line": {"width": 1, "color": "white"}},
            customdata=np.column_stack([gp["run_id"], gp["seed"].astype(str)]),
            hovertemplate=(g.label + "<br>seed %{customdata[1]}<br>run %{customdata[0]}<br>"
                           + f"drift %{{x:.4f}}<br>{gain_col} %{{y:.2f}}<extra></extra>"),
            meta={"group": g.label, "panel": name}), **where)
    if rel is not None:
        xs = np.linspace(part["x"].min(), part["x"].max(), 2)
        fig.add_trace(go.Scatter(
            x=xs, y=(rel["intercept"] + rel["slope"] * xs) * scale, mode="lines",
            name="least-squares fit", legendgroup="fit", showlegend=False,
            line={"color": "black", "dash": "dash", "width": 1}, hoverinfo="skip",
            meta={"fit": True, "panel": name}), **where)
    if gain_col in ("aog", "wrg", "nts") or gain_col.startswith("aog_"):
        fig.add_hline(y=0, line={"color": "grey", "width": 1}, **where)


def drift_vs_ood_figure(
    sweep_dir: PathLike | None = None,
    drift_col: str = "drift_cos_target",
    gain_col: str = "aog",
    *,
    results: pd.DataFrame | None = None,
    kinds: Sequence[str] = ("student",),
    artifact_strength: float | None = None,
    by_target: bool | None = None,
    drift_tables: Mapping[str, pd.DataFrame] | None = None,
    min_n: int = MIN_CORRELATION_N,
    n_boot: int = 2000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> go.Figure:
    """Drift against OOD gain across the runs of a sweep: one panel per target domain.

    One marker per run (colour = method group, symbol = seed). ``by_target`` (default: when
    the drift tables can be read) draws one panel per target: the run's last-layer drift on
    that target (from its ``drift.parquet``, the measure behind ``drift_col``) against its gain
    there (``aog_<target>`` for ``gain_col="aog"``, ``acc_<target>`` for ``"acc_ood"``);
    otherwise one panel of the pooled columns ``drift_col`` / ``gain_col``. A panel shows the
    Spearman correlation with its bootstrap interval over runs
    (``anchorviz.analysis.drift.drift_ood_relation``) and the least-squares line only from ``min_n``
    runs on (:data:`MIN_CORRELATION_N`); below that, and where the correlation is undefined
    (a constant column), it shows the points and says why. Gains (``aog``, ``wrg``, ``nts``,
    ``acc_*``) are drawn x100; the statistics do not depend on that.
    ``artifact_strength=None`` keeps every strength (the relation across conditions).
    ``fig.layout.meta``: ``{"relations": {panel: relation or None}, "min_n", "by_target"}``.
    """
    res = results_arg(sweep_dir, results)
    for col in (drift_col, gain_col):
        if col not in res.columns:
            cands = [c for c in res.columns if c.startswith(("drift_", "aog", "wrg", "nts", "acc_"))]
            raise ValueError(f"column {col!r} not in the results table; candidates: {cands}")
    if min_n < 3:
        raise ValueError(f"min_n must be at least 3 (a rank correlation needs 3 runs), got {min_n}")
    rows = res[res["kind"].isin(list(kinds))]
    if artifact_strength is not None:
        rows, _ = select_condition(rows, artifact_strength)
    targets = sweep_targets(rows)
    table_col = _drift_table_column(drift_col)
    gain_prefix = {"aog": "aog", "acc_ood": "acc"}.get(gain_col)
    can_split = (table_col is not None and drift_col.endswith("_target") and gain_prefix
                 is not None and bool(targets)
                 and all(f"{gain_prefix}_{t}" in rows.columns for t in targets)
                 and (sweep_dir is not None or drift_tables is not None))
    if by_target and not can_split:
        raise ValueError(f"drift vs {gain_col} per target needs a target drift column "
                         f"(drift_*_target), gain aog or acc_ood with per-target columns, and the "
                         f"runs' drift tables (sweep_dir or drift_tables=)")
    by_target = can_split if by_target is None else bool(by_target)

    panels, x_label, y_label = _drift_gain_panels(rows, by_target, targets, drift_col, gain_col,
                                                  table_col, gain_prefix, sweep_dir, drift_tables)

    scale = 100.0 if _is_fraction_col(gain_col) else 1.0
    # the seeds that have a point in some panel: a seed whose runs drew nothing (scores-only
    # runs keep no drift) gets no legend entry
    drawn = [p["seed"] for p in panels.values() if len(p)]
    seeds = unique_values(pd.concat(drawn)) if drawn else []
    symbol = {s: _SEED_SYMBOLS[i % len(_SEED_SYMBOLS)] for i, s in enumerate(seeds)}
    names = list(panels)
    stats = {n: _relation_stat(panels[n], min_n, n_boot, seed, ci_level) for n in names}
    if by_target:
        fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, horizontal_spacing=0.04,
                            subplot_titles=[f"<b>{n}</b><br><sup>{stats[n][1]}</sup>"
                                            for n in names])
    else:
        fig = go.Figure()
    groups = group_table(rows) if len(rows) else pd.DataFrame(columns=[*GROUP_KEYS, "label",
                                                                        "color"])
    for i, name in enumerate(names):
        _draw_drift_gain_panel(fig, i, name, panels[name], groups, symbol, scale, gain_col,
                               stats[name][0], by_target)
    if len(seeds) > 1:
        for s in seeds:  # legend entries for the seed symbols
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"seed {s}",
                                     marker={"color": "grey", "size": 9, "symbol": symbol[s]},
                                     hoverinfo="skip", meta={"legend_only": True, "seed": s}))
    gain_name = gain_col.upper() if gain_col in TRANSFER_NAMES else gain_col
    rule = (f"one marker per run (colour = method, symbol = seed); correlation and fitted line "
            f"only from n ≥ {min_n} runs")
    if by_target:
        title = figure_title(f"Drift vs {gain_name}, per target domain", rule)
    else:
        title = figure_title(f"Drift vs {gain_name} across runs: {stats['pooled'][1]}", rule)
    fig.update_layout(title=title, template=TEMPLATE, legend=BOTTOM_LEGEND,
                      margin={"t": 130 if by_target else 100, "b": 170}, height=580)
    if by_target and len(names) > 1:  # one x title under the panels, not one per narrow panel
        shared_x_title(fig, x_label)
    else:
        fig.update_xaxes(title_text=x_label)
    if by_target:
        fig.update_yaxes(title_text=y_label, row=1, col=1)
    else:
        fig.update_yaxes(title_text=y_label)
    fig.layout.meta = {"relations": {n: stats[n][0] for n in names}, "min_n": min_n,
                       "by_target": by_target,
                       "relation": None if by_target else stats["pooled"][0]}
    return fig


# --------------------------------------------------------------------------- lambda sweep


def lambda_sweep_figure(
    sweep_dir: PathLike | None = None,
    *,
    results: pd.DataFrame | None = None,
    target: str | None = None,
    drift_col: str = "drift_cos_target",
    artifact_strength: float | None = None,
    source: str | None = None,
    confidence: float = 0.95,
    spread: str = "auto",
) -> go.Figure:
    """ID accuracy, OOD accuracy, NTS and drift against the ANCHOR strength lambda (log axis).

    One line per anchored-layer choice (solid = last layer, dashed = middle layers), mean over
    seeds with error bars; the naive student (no anchor) and, on the accuracy panels, the weak
    teacher are horizontal reference lines. lambda = 0 cannot sit on a log axis: the naive
    line is that point.
    """
    res = results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    anchor = rows[rows["method"] == "anchor"]
    zero = anchor["anchor_lambda"] <= 0
    if zero.any():
        logger.warning("%d ANCHOR run(s) with lambda 0 left out of the log axis", int(zero.sum()))
        anchor = anchor[~zero]
    if anchor.empty:
        raise ValueError("the sweep has no ANCHOR runs with lambda > 0; "
                         f"methods present: {unique_values(rows['method'])}")
    ood_col, ood_desc = target_column(rows, target)
    if drift_col not in rows.columns:
        raise ValueError(f"drift column {drift_col!r} not in the results table; candidates: "
                         f"{[c for c in rows.columns if c.startswith('drift_')]}")
    nts_col = "nts"
    rows = rows.copy()
    anchor = anchor.copy()
    if target is not None:  # NTS against one target, per run
        aog_col, _ = target_column(rows, target, prefix="aog")
        for df in (rows, anchor):
            df["nts_target"] = df[aog_col] - np.maximum(0.0, -df["wrg"])
        nts_col = "nts_target"
    # panel titles short enough for half the figure's width (the long forms go in the subtitle)
    panels = [("acc_id", "ID accuracy (source test)", "pairwise accuracy (%)", 100.0),
              (ood_col, "OOD accuracy" + (f" ({ood_desc})" if target is not None else ""),
               "pairwise accuracy (%)", 100.0),
              (nts_col, "NTS (OOD gain - ID loss)", "NTS (points)", 100.0),
              (drift_col, "drift at the last layer", _short_label(drift_col), 1.0)]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.12, vertical_spacing=0.18)
    lam_min, lam_max = anchor["anchor_lambda"].min(), anchor["anchor_lambda"].max()
    ref_x = [lam_min / 1.5, lam_max * 1.5] if lam_max > lam_min else [lam_min / 3, lam_min * 3]
    shown_legend: set[str] = set()
    for i, (col, _, ylab, scale) in enumerate(panels):
        r, c = i // 2 + 1, i % 2 + 1
        for layers in sorted(anchor["anchor_layers"].unique(), key=layers_rank):
            part = anchor[anchor["anchor_layers"] == layers]
            summ = metric_summary(part, [col], confidence, spread)
            summ = summ.sort_values("anchor_lambda")
            name = f"ANCHOR, {layers_label(layers) or 'anchored layers'}"
            color = sample_colorscale(ANCHOR_SCALES.get(layers, OTHER_ANCHOR_SCALE), [0.8])[0]
            mean = summ["mean"].to_numpy(float) * scale
            fig.add_trace(go.Scatter(
                x=summ["anchor_lambda"].to_numpy(float), y=mean, mode="lines+markers",
                name=name, legendgroup=name, showlegend=name not in shown_legend,
                line={"color": color, "dash": LAYER_DASHES.get(layers, "dashdot"), "width": 2},
                error_y={"type": "data", "symmetric": False,
                         "array": summ["hi"].to_numpy(float) * scale - mean,
                         "arrayminus": mean - summ["lo"].to_numpy(float) * scale},
                customdata=summ[["n", "interval"]].to_numpy(object),
                hovertemplate=(name + "<br>λ = %{x:g}<br>" + ylab + ": %{y:.2f}<br>"
                               "%{customdata[1]}<extra></extra>"),
                meta={"column": col, "anchor_layers": layers}), row=r, col=c)
            shown_legend.add(name)
        refs = [("naive", "naive W2S (no anchor, λ = 0)", METHOD_COLORS["naive"], "dash")]
        if col in ("acc_id", ood_col):
            refs.append(("teacher", "weak teacher", METHOD_COLORS["teacher"], "dot"))
        for method, name, color, dash in refs:
            s = summarize_groups(rows[rows["method"] == method], col, confidence, spread)
            if not np.isfinite(s["mean"]):
                continue
            fig.add_trace(go.Scatter(
                x=ref_x, y=[s["mean"] * scale] * 2, mode="lines", name=name, legendgroup=name,
                showlegend=name not in shown_legend, line={"color": color, "dash": dash},
                hovertemplate=(f"{name}<br>{ylab}: {s['mean'] * scale:.2f}<br>{s['interval']}"
                               "<extra></extra>"),
                meta={"column": col, "reference": method}), row=r, col=c)
            shown_legend.add(name)
        fig.update_xaxes(type="log", title_text="λ (log scale)", row=r, col=c)
        fig.update_yaxes(title_text=ylab, row=r, col=c)
    fig.update_layout(
        title=figure_title(f"What the anchor strength λ does ({caption})",
                     "x: ANCHOR strength λ; OOD = " + ood_desc + "; drift = "
                     + _axis_label(drift_col) + "; "
                     + interval_caption(metric_summary(anchor, ["acc_id"], confidence, spread))),
        template=TEMPLATE, height=820, autosize=True,
        legend=BOTTOM_LEGEND, margin={"t": 110, "b": 170},
    )
    return fig
