"""The sweep explorer's three panels (drift per layer, the shared map, the accuracies) and its
status line, as plotly figures filled from the selection model (`anchorviz.viz.selection`): each
``update_*`` moves numbers into the figure's traces inside ``batch_update``; nothing is trained,
computed or re-read from disk. No widgets here (`anchorviz.viz.widgets` places them).
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from anchorviz.viz.common import (
    BOTTOM_LEGEND,
    METHOD_COLORS,
    METHOD_NAMES,
    OKABE_ITO,
    TEMPLATE,
    TOP_LEGEND,
    bar_arrays,
    interval_caption,
    target_column,
)
from anchorviz.viz.drift import DRIFT_METRICS, drift_curve
from anchorviz.viz.projection import (
    UMAP_HOVER,
    hover_custom,
    subsample,
    umap_groups,
    umap_movement,
)
from anchorviz.viz.selection import ExplorerModel, Pick

__all__ = ["empty_accuracy", "empty_drift", "empty_umap", "score_parts", "status_html",
           "update_accuracy", "update_drift", "update_umap"]

#: the explorer's colours, all from the Okabe-Ito palette of anchorviz.viz.common: the selected
#: run blue and the naive W2S reference vermillion (its colour in every other figure), ID / OOD
#: accuracy blue / orange; chosen / rejected come from umap_groups (blue / orange)
_OI = OKABE_ITO
_SELECTED_COLOR = _OI["blue"]
_NAIVE_COLOR = METHOD_COLORS["naive"]
_ACC_COLORS = {"acc_id": _OI["blue"], "ood": _OI["orange"]}
_MOVEMENT_COLOR = "rgba(153,153,153,0.45)"  # Okabe-Ito grey, see-through
#: panel heights (the widths follow the output area: plotly autosize): compact, so that the
#: drift and accuracy panels and the controls beside them fit a 1280 x 800 screen together
_DRIFT_HEIGHT, _PANEL_HEIGHT, _MAP_HEIGHT = 500, 500, 480
_TITLE_FONT = {"size": 15}


def empty_drift() -> go.Figure:
    """The drift panel before any run: CKA and cosine drift over one layer axis, per
    selected / naive run and source / target."""
    # the two metrics stacked over one layer axis: the panel is a column of the row
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16,
                        subplot_titles=["linear CKA(student, reference): 1 = unchanged",
                                        "cosine drift 1 - cos: 0 = unchanged"])
    styles = [("selected", "source", _SELECTED_COLOR, "solid"),
              ("selected", "target", _SELECTED_COLOR, "dash"),
              ("naive", "source", _NAIVE_COLOR, "solid"),
              ("naive", "target", _NAIVE_COLOR, "dash")]
    for r, metric in ((1, "cka"), (2, "cosine")):
        for who, dom, color, dash in styles:
            fig.add_trace(go.Scatter(
                x=[], y=[], mode="lines+markers", line={"color": color, "dash": dash},
                legendgroup=f"{who}-{dom}", showlegend=r == 1,
                meta={"who": who, "domain": dom, "metric": metric}), row=r, col=1)
        fig.update_xaxes(dtick=1, showticklabels=True, row=r, col=1)
    fig.update_xaxes(title_text="layer (0 = embeddings)", row=2, col=1)
    # short axis titles: the subplot titles above each say what is drawn
    fig.update_yaxes(title_text=DRIFT_METRICS["cka"][0].upper(), row=1, col=1)
    fig.update_yaxes(title_text="1 - cos", row=2, col=1)
    fig.update_annotations(font_size=12)  # the subplot titles, within a narrow panel
    # no width: the figure fills its box (autosize); the legend goes below the axis titles
    # in the figure's own bottom margin (its long trace names wrap there, nothing is cut)
    fig.update_layout(height=_DRIFT_HEIGHT, autosize=True, template=TEMPLATE,
                      title_font=_TITLE_FONT, margin={"t": 110, "b": 160, "l": 60, "r": 20},
                      legend=BOTTOM_LEGEND)
    return fig


def update_drift(fig: go.Figure, model: ExplorerModel, pick: Pick, seed: int, target: str,
                 caption: str) -> None:
    """The selected run's and the naive student's drift per layer, source and ``target``."""
    tsplit = f"target_test:{target}"
    source_dom = model.source_domain(pick.run_id)
    with fig.batch_update():
        for tr in fig.data:
            who, dom, metric = tr.meta["who"], tr.meta["domain"], tr.meta["metric"]
            rid = pick.run_id if who == "selected" else pick.naive_id
            table = model.drift.get(rid) if rid is not None else None
            split = "source_test" if dom == "source" else tsplit
            if table is None or (who == "naive" and rid == pick.run_id):
                tr.x, tr.y, tr.visible = [], [], who == "selected"
                continue
            x, y = drift_curve(table, metric, split)
            name = pick.label if who == "selected" else METHOD_NAMES["naive"]
            where = f"source ({source_dom})" if dom == "source" else f"target ({target})"
            tr.x, tr.y, tr.visible = x, y, True
            tr.name = f"{name} · {where}"
            tr.hovertemplate = (f"{name}<br>{where}<br>layer %{{x}}<br>%{{y:.5g}}"
                                "<extra></extra>")
        # short lines: the panel may be a third of the row wide
        fig.layout.title.text = (f"Drift per layer vs naive W2S<br><sup>{pick.label}, seed "
                                 f"{seed}{caption}<br>"
                                 + ("scored only (a verdict-only seed): no drift"
                                    if pick.run_id in model.scores_only else
                                    f"solid = source, dashed = target {target}") + "</sup>")


def empty_umap() -> go.Figure:
    """The map panel before any run: reference and student points, movement lines."""
    fig = go.Figure()
    for model in ("reference", "student"):
        for i in range(2):
            fig.add_trace(go.Scattergl(
                x=[], y=[], mode="markers",
                marker={"size": 5 if model == "reference" else 6,
                        "opacity": 0.25 if model == "reference" else 0.85,
                        "symbol": "circle" if model == "reference" else "diamond"},
                hovertemplate=UMAP_HOVER, meta={"model": model, "slot": i}))
    fig.add_trace(go.Scattergl(x=[], y=[], mode="lines", hoverinfo="skip",
                               line={"color": _MOVEMENT_COLOR, "width": 1},
                               meta={"model": "movement"}))
    fig.update_layout(height=_MAP_HEIGHT, autosize=True, template=TEMPLATE,
                      title_font=_TITLE_FONT, margin={"t": 80, "b": 150, "l": 60, "r": 20},
                      xaxis_title="map axis 1 (shared map of reference states)",
                      yaxis_title="map axis 2", legend=BOTTOM_LEGEND)
    fig.update_yaxes(scaleanchor="x", scaleratio=1)
    return fig


def clear_umap(fig: go.Figure, model: ExplorerModel, pick: Pick) -> None:
    """The map of a run without a projection: empty, and its title says why."""
    with fig.batch_update():
        for tr in fig.data:
            tr.x, tr.y = [], []
        fig.layout.title.text = (
            f"{pick.label}: scored only (a verdict-only seed): no hidden states, no map"
            if pick.run_id in model.scores_only else
            f"{pick.label}: this run has no projection.parquet")


def update_umap(fig: go.Figure, proj: pd.DataFrame, layer: int, label: str, seed: int,
                color_by: str, target: str, max_points: int, n_lines: int) -> None:
    """The shared map of one layer: reference and student points coloured by ``color_by``
    (at most ``max_points`` per group and model, seeded) and ``n_lines`` movement lines."""
    groups = umap_groups(proj, layer, color_by, target)
    groups = [{**g, "reference": subsample(g["reference"], max_points, 0),
               "student": subsample(g["student"], max_points, 0)}
              for g in groups[:2]]
    mx, my = umap_movement(groups, n_lines, seed=0)
    with fig.batch_update():
        for tr in fig.data:
            model = tr.meta["model"]
            if model == "movement":
                tr.x, tr.y = mx, my
                tr.name = f"movement reference → student ({len(mx) // 3} sampled)"
                continue
            i = tr.meta["slot"]
            if i >= len(groups):
                tr.x, tr.y, tr.visible = [], [], False
                continue
            g = groups[i]
            df = g[model]
            tr.x, tr.y = df["x"].to_numpy(float), df["y"].to_numpy(float)
            tr.customdata = hover_custom(df)
            tr.marker.color = g["color"]
            tr.visible = True
            who = "reference (pretrained)" if model == "reference" else "student (trained)"
            tr.name = f"{who} · {g['label']}"
        fig.layout.title.text = (f"Shared map, layer {layer}: {label}, seed "
                                 f"{seed}<br><sup>faint circles = reference, "
                                 "diamonds = student, lines = movement</sup>")


def empty_accuracy() -> go.Figure:
    """The accuracy panel before any run: ID and target bars per method."""
    fig = go.Figure()
    for col, color in _ACC_COLORS.items():
        fig.add_trace(go.Bar(x=[], y=[], marker={"color": color}, meta={"column": col},
                             hovertemplate=("%{x}<br>%{y:.1f}%<br>interval %{customdata[0]:.1f}"
                                            " to %{customdata[1]:.1f}%<br>%{customdata[3]}"
                                            "<extra></extra>")))
    fig.update_layout(height=_PANEL_HEIGHT, autosize=True, barmode="group",
                      template=TEMPLATE, title_font=_TITLE_FONT,
                      yaxis_title="pairwise accuracy (%)",
                      margin={"t": 150, "b": 60, "l": 60, "r": 20},
                      legend=TOP_LEGEND)  # above the bars: the method names
    # below them take as much room as their (rotated) labels need
    fig.add_hline(y=50, line={"dash": "dot", "color": "grey"})
    return fig


def update_accuracy(fig: go.Figure, summary: pd.DataFrame, results: pd.DataFrame, pick: Pick,
                    target: str, caption: str) -> None:
    """ID and ``target`` accuracy bars per method, the selected run's outlined."""
    col_ood, _ = target_column(results, target)
    src = str(pick.row["source"])
    with fig.batch_update():
        for tr in fig.data:
            col = "acc_id" if tr.meta["column"] == "acc_id" else col_ood
            part = summary[summary["column"] == col]
            arrays = bar_arrays(part, 100.0)
            tr.x, tr.y, tr.customdata = arrays["x"], arrays["y"], arrays["customdata"]
            tr.error_y = arrays["error_y"]
            chosen = np.array([lab == pick.label for lab in arrays["x"]])
            tr.marker.opacity = np.where(chosen, 1.0, 0.4)
            tr.marker.line = {"width": np.where(chosen, 2.5, 0.0), "color": "black"}
            tr.name = (f"ID: {src} test split" if col == "acc_id"
                       else f"OOD: target {target}")
        lo = np.nanmin(summary[["lo", "mean"]].to_numpy(float)) * 100
        fig.layout.yaxis.range = [50.0 if lo >= 52 else max(0.0, math.floor(lo - 5)),
                                  min(100.0, math.ceil(np.nanmax(summary["hi"]) * 100 + 3))]
        fig.layout.title.text = (f"Pairwise accuracy<br><sup>outlined: {pick.label}{caption}<br>"
                                 f"{interval_caption(summary)}</sup>")


def score_parts(row: pd.Series, target: str | None) -> list[str]:
    """The scores of the status line, points vs the teacher. With a target selected and
    its own ``aog_<target>`` column stored, AOG is that target's (the pooled AOG can hide
    a target where the student is below its teacher) and the pooled AOG and NTS (which is
    computed from it) follow as "over all targets"; else WRG, AOG and NTS pooled."""

    def fmt(name: str, v: Any) -> str | None:
        ok = v is not None and not pd.isna(v) and np.isfinite(float(v))
        return f"{name} {100 * float(v):+.1f}" if ok else None

    own = fmt(f"AOG {escape(str(target))}", row.get(f"aog_{target}")) if target else None
    if own is None:  # no target selected, or runs stored before per-target AOG
        txt = ", ".join(t for t in (fmt(k.upper(), row.get(k)) for k in ("wrg", "aog", "nts"))
                        if t)
        return [txt + " points vs teacher"] if txt else []
    first = ", ".join(t for t in (fmt("WRG", row.get("wrg")), own) if t)
    pooled = ", ".join(t for t in (fmt("AOG", row.get("aog")), fmt("NTS", row.get("nts")))
                       if t)
    return [first + " points vs teacher"] + (["over all targets: " + pooled] if pooled else [])


def status_html(pick: Pick, target: str, several_visibilities: bool, live: bool) -> str:
    """The status line: the run, its accuracies and scores vs the teacher. Every value from
    the sweep (label, run id, target name) is escaped: a name with "<" or "&" shows as
    written and never becomes markup."""
    row = pick.row
    parts = [f"<b>{escape(pick.label)}</b>, seed {escape(str(row['seed']))} — run "
             f"<code>{escape(str(row['run_id']))}</code>"]
    if several_visibilities:
        parts.append(f"teacher read the marker on {row['teacher_visibility']:.0%} of the "
                     "marked source pairs")
    acc = [("ID", row.get("acc_id")),
           ("ID on marked pairs the teacher could not read", row.get("acc_id_hidden")),
           (f"OOD {escape(target)}", row.get(f"acc_{target}"))]
    parts.append(", ".join(f"{k} {100 * v:.1f}%" for k, v in acc
                           if v is not None and np.isfinite(v)))
    parts.extend(score_parts(row, target))
    if not live:
        parts.append("<i>figures redrawn whole: install anywidget for in-place updates</i>")
    return " | ".join(parts)
