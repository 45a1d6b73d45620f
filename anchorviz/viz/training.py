"""Training figures: what a run was trained on and how its loss went.

- labels: :func:`label_confidence_figure` -- the teacher's soft labels q; uninformative labels
  (mean confidence below :data:`UNINFORMATIVE_BELOW`) show.
- training loss: :func:`loss_curve_figure` -- the fit term and the ANCHOR term per optimiser
  step, from the runs' ``history.parquet``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from anchorviz.viz.common import (
    BOTTOM_LEGEND,
    LAYER_DASHES,
    OI,
    TEMPLATE,
    PathLike,
    figure_title,
    group_mask,
    group_table,
    load_run_table,
    logger,
    results_arg,
    run_path,
    select_condition,
)

__all__ = ["UNINFORMATIVE_BELOW", "label_confidence_figure", "loss_curve_figure"]

#: mean label confidence max(q, 1 - q) below which the teacher's labels count as nearly
#: uninformative (0.5 = a coin flip): the label histogram and the report warn about them
UNINFORMATIVE_BELOW = 0.6


# --------------------------------------------------------------------------- labels


def label_confidence_figure(
    run_dir: PathLike | None = None,
    *,
    labels: pd.DataFrame | None = None,
    bins: int = 40,
    uninformative_below: float | None = None,
) -> go.Figure:
    """Histogram of the teacher's soft labels q = P(chosen preferred) on the w2s training pairs.

    Reads ``labels.parquet`` of a teacher run (``margin``; q = sigmoid(margin), the raw teacher
    probability) or of a student run (``q``, the labels it was trained on, after any temperature
    or hardening). The title flags labels whose mean confidence max(q, 1 - q) is below
    ``uninformative_below`` (default :data:`UNINFORMATIVE_BELOW`): a student trained on them
    learns next to nothing, since labels near q = 0.5 leave the soft Bradley-Terry loss near
    ln 2 whatever the student predicts.
    """
    if uninformative_below is None:
        uninformative_below = UNINFORMATIVE_BELOW
    if labels is None:
        if run_dir is None:
            raise ValueError("pass a run directory or an already loaded labels table (labels=)")
        labels = load_run_table(run_dir, "labels")
    if "q" in labels.columns:
        q = labels["q"].to_numpy(float)
        what = "soft labels q the student was trained on"
    elif "margin" in labels.columns:
        q = 1.0 / (1.0 + np.exp(-labels["margin"].to_numpy(float)))
        what = "teacher probabilities q = sigmoid(r_chosen - r_rejected)"
    else:
        raise ValueError(f"labels table has neither 'q' nor 'margin' (has {list(labels.columns)})")
    q = q[np.isfinite(q)]
    if q.size == 0:
        raise ValueError("labels table has no finite labels")
    if (q < 0).any() or (q > 1).any():
        raise ValueError(f"soft labels must lie in [0, 1], got range [{q.min():.3g}, {q.max():.3g}]")
    conf = np.maximum(q, 1 - q)
    near = float((np.abs(q - 0.5) < 0.05).mean())
    flagged = conf.mean() < uninformative_below
    stats_line = (f"mean q {q.mean():.3f}, mean confidence max(q, 1-q) {conf.mean():.3f}, "
                  f"{near:.0%} of {q.size} labels within 0.45-0.55")
    main = ("⚠ Teacher labels are nearly uninformative: the student gets almost no signal"
            if flagged else "Teacher soft labels")
    fig = go.Figure(go.Histogram(
        x=q, xbins={"start": 0.0, "end": 1.0, "size": 1.0 / bins}, name=what,
        marker_color=OI["vermillion"] if flagged else OI["blue"],
        hovertemplate="q %{x}<br>%{y} pairs<extra></extra>"))
    fig.add_vline(x=0.5, line={"dash": "dash", "color": "black"},
                  annotation_text="q = 0.5: no preference", annotation_position="top")
    fig.update_layout(
        title=figure_title(main, f"{what}: {stats_line}"),
        xaxis_title="soft label q = P(chosen preferred)", yaxis_title="pairs",
        xaxis_range=[0, 1], bargap=0.02, template=TEMPLATE, showlegend=False,
    )
    fig.layout.meta = {"q_mean": float(q.mean()), "q_confidence": float(conf.mean()),
                       "uninformative": bool(flagged)}
    if flagged:
        fig.update_layout(title_font_color=OI["vermillion"])
    return fig


# --------------------------------------------------------------------------- training loss


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or values.size < 2:
        return values
    return pd.Series(values).rolling(window, min_periods=1, center=True).mean().to_numpy(float)


def loss_curve_figure(
    sweep_dir: PathLike | None = None,
    *,
    results: pd.DataFrame | None = None,
    histories: Mapping[str, pd.DataFrame] | None = None,
    kinds: Sequence[str] = ("student", "ceiling"),
    artifact_strength: float | None = None,
    source: str | None = None,
    smooth: int | None = None,
) -> go.Figure:
    """Training loss per optimiser step from the runs' stored ``history.parquet``.

    Left panel: the fit term (soft Bradley-Terry loss on the teacher's labels; the ceiling's on
    gold labels), with ln 2, the loss of a model with no preference. Right panel (when any run
    is anchored): the ANCHOR term as it enters the total loss, lambda x MSE(student states,
    frozen reference states) -- ``history`` stores the unweighted MSE in ``anchor`` and lambda
    is the run's. One line per method group (colours as in the other figures), the mean over
    seeds at each step, smoothed by a centred rolling mean over ``smooth`` steps (default:
    about 1/40 of the run, at least 1; the subtitle says how many).
    ``histories``: ``{run_id: history table}`` instead of reading the run folders.
    """
    res = results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    rows = rows[rows["kind"].isin(list(kinds))]
    if rows.empty:
        raise ValueError(f"no runs of kind {list(kinds)} to draw training loss for")
    tables: dict[str, pd.DataFrame] = {}
    for rid in rows["run_id"]:
        if histories is not None and rid in histories:
            tables[rid] = histories[rid]
            continue
        if sweep_dir is None:
            raise ValueError(f"no history for run {rid!r}: pass sweep_dir (or histories=)")
        try:
            tables[rid] = load_run_table(run_path(sweep_dir, rid), "history")
        except FileNotFoundError:
            logger.warning("run %s has no history.parquet; left out of the loss figure", rid)
    tables = {r: t for r, t in tables.items() if {"step", "fit"} <= set(t.columns) and len(t)}
    if not tables:
        raise ValueError("none of the selected runs has a history table with step and fit columns")
    rows = rows[rows["run_id"].isin(list(tables))]
    lam = dict(zip(rows["run_id"], rows["anchor_lambda"].astype(float), strict=True))
    anchored = any("anchor" in tables[r].columns and lam.get(r, 0) > 0
                   and np.isfinite(tables[r]["anchor"].astype(float)).any() for r in tables)
    n_steps = max(len(t) for t in tables.values())
    window = max(1, round(n_steps / 40)) if smooth is None else max(1, int(smooth))
    panels = [("fit", "fit loss (soft Bradley-Terry)")]
    if anchored:
        panels.append(("anchor", "ANCHOR term λ × MSE to the reference"))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.1) if len(panels) > 1 else go.Figure()
    for g in group_table(rows).itertuples(index=False):
        ids = list(rows.loc[group_mask(rows, g.method, g.anchor_lambda, g.anchor_layers),
                            "run_id"])
        n = len(ids)
        label = g.label + (f" (mean of {n} seeds)" if n > 1 else "")
        for i, (term, _) in enumerate(panels):
            parts = []
            for rid in ids:
                t = tables[rid]
                if term == "fit":
                    val = t["fit"].astype(float)
                elif "anchor" in t.columns and lam.get(rid, 0) > 0:
                    val = t["anchor"].astype(float) * lam[rid]
                else:
                    continue
                parts.append(pd.DataFrame({"step": t["step"].to_numpy(), "v": val.to_numpy()}))
            if not parts:
                continue
            curve = pd.concat(parts).groupby("step", sort=True)["v"].mean()
            tr = go.Scatter(
                x=curve.index.to_numpy(), y=_smooth(curve.to_numpy(float), window), mode="lines",
                name=label, legendgroup=label, showlegend=i == 0,
                line={"color": g.color, "width": 1.8,
                      "dash": LAYER_DASHES.get(g.anchor_layers, "solid")
                      if g.method == "anchor" else "solid"},
                meta={"term": term, "runs": ids, "group": g.label, "window": window},
                hovertemplate=f"{label}<br>step %{{x}}<br>{term}: %{{y:.4f}}<extra></extra>")
            if len(panels) > 1:
                fig.add_trace(tr, row=1, col=i + 1)
            else:
                fig.add_trace(tr)
    where = {"row": 1, "col": 1} if len(panels) > 1 else {}
    fig.add_hline(y=math.log(2), line={"color": "grey", "dash": "dot", "width": 1},
                  annotation_text="ln 2: no preference", annotation_position="top right", **where)
    sm = f"rolling mean over {window} steps" if window > 1 else "per step, unsmoothed"
    fig.update_layout(
        title=figure_title("Training loss per step" + (f" ({caption})" if caption else ""),
                     f"mean over seeds, {sm}; from each run's history.parquet"
                     + ("; ANCHOR term = λ × the stored unweighted MSE" if anchored else "")),
        template=TEMPLATE, legend=BOTTOM_LEGEND, margin={"t": 110, "b": 150}, height=520,
        autosize=True)
    fig.update_xaxes(title_text="optimiser step")
    if len(panels) > 1:
        fig.update_yaxes(title_text="loss", row=1, col=1)
        fig.update_yaxes(title_text="λ × MSE", row=1, col=2)
    else:
        fig.update_yaxes(title_text="fit loss")
    fig.layout.meta = {"window": window, "anchored": anchored, "runs": sorted(tables)}
    return fig
