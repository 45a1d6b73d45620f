"""Accuracy figures of a sweep: how well each method ranks preference pairs, in and out of
distribution.

- :func:`accuracy_figure` -- ID vs OOD pairwise accuracy (%) per method, mean over seeds with
  error bars.
- :func:`shortcut_figure` -- ID accuracy on the source-test pairs with and without the planted
  artefact, next to OOD accuracy: shortcut or skill.
- :func:`transfer_figure` -- WRG / AOG / NTS against the weak teacher, in points.

Each is a function of a sweep directory or its already loaded results table (``results=``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from anchorviz.viz.common import (
    BOTTOM_LEGEND,
    ID_COLOR,
    OI,
    OOD_COLOR,
    TEMPLATE,
    TRANSFER_COLORS,
    TRANSFER_NAMES,
    PathLike,
    bar_arrays,
    figure_title,
    interval_caption,
    metric_summary,
    results_arg,
    select_condition,
    target_column,
)

__all__ = ["accuracy_figure", "shortcut_figure", "transfer_figure"]

def accuracy_figure(
    sweep_dir: PathLike | None = None,
    *,
    results: pd.DataFrame | None = None,
    target: str | None = None,
    artifact_strength: float | None = None,
    source: str | None = None,
    confidence: float = 0.95,
    spread: str = "auto",
) -> go.Figure:
    """In-distribution vs out-of-distribution pairwise accuracy (%) per method.

    One bar pair per method group (teacher, naive, confidence, SEAM, each ANCHOR lambda x
    layers, ceiling): the mean over seeds, error bars from the t-interval across seeds (the
    stored bootstrap CI over test pairs when a method has one seed). ``target=None`` shows the
    mean over targets (``acc_ood``); a target name shows ``acc_<target>``.
    """
    res = results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    ood_col, ood_desc = target_column(rows, target)
    summary = metric_summary(rows, ["acc_id", ood_col], confidence, spread)
    fig = go.Figure()
    src = ", ".join(sorted(rows["source"].unique()))
    names = {"acc_id": f"in-distribution: {src} test split",
             ood_col: f"out-of-distribution: {ood_desc}"}
    colors = {"acc_id": ID_COLOR, ood_col: OOD_COLOR}
    for col in ("acc_id", ood_col):
        part = summary[summary["column"] == col]
        fig.add_trace(go.Bar(
            name=names[col], marker_color=colors[col], meta={"column": col},
            hovertemplate=("%{x}<br>" + names[col] + ": %{y:.1f}%<br>interval %{customdata[0]:.1f}"
                           " to %{customdata[1]:.1f}%<br>%{customdata[3]}<extra></extra>"),
            **bar_arrays(part, 100.0)))
    _accuracy_layout(fig, summary, caption)
    return fig


def _accuracy_layout(fig: go.Figure, summary: pd.DataFrame, caption: str) -> None:
    lo = np.nanmin(summary[["lo", "mean"]].to_numpy(float)) * 100 if len(summary) else 50.0
    hi = np.nanmax(summary[["hi", "mean"]].to_numpy(float)) * 100 if len(summary) else 100.0
    lo = 50.0 if not np.isfinite(lo) or lo >= 52 else max(0.0, math.floor(lo - 5))
    hi = 100.0 if not np.isfinite(hi) else min(100.0, math.ceil(hi + 3))
    fig.update_layout(
        title=figure_title(f"Pairwise accuracy in and out of distribution ({caption})",
                     interval_caption(summary)
                     + ("; axis starts at chance (50%)" if lo == 50.0 else "")),
        barmode="group", xaxis_title="method", yaxis_title="pairwise accuracy (%)",
        yaxis_range=[lo, hi], template=TEMPLATE, height=600,
        # the legend under the method names (above the plot it printed over the title)
        legend=BOTTOM_LEGEND, margin={"t": 100, "b": 210},
    )
    fig.add_hline(y=50, line={"dash": "dot", "color": "grey"})


def shortcut_figure(
    sweep_dir: PathLike | None = None,
    *,
    results: pd.DataFrame | None = None,
    artifact_strength: float | None = None,
    source: str | None = None,
    confidence: float = 0.95,
    spread: str = "auto",
) -> go.Figure:
    """Where the in-distribution accuracy comes from: ID accuracy (%) on the source-test pairs
    that carry the planted artefact, on those that do not ("clean"), and OOD accuracy, per method.

    A model that leans on the shortcut is near 100% on marked pairs while its clean accuracy,
    the skill the targets can use, stays near its OOD accuracy. Needs a sweep with an artefact
    (results columns ``acc_id_marked`` / ``acc_id_clean``, written by ``results_table``). When
    the teacher reads the artefact on only some pairs (``acc_id_seen`` / ``acc_id_hidden``),
    the marked pairs are split the same way: a student that learned the shortcut from the pairs
    the teacher read is right on the hidden ones too, where the teacher was not."""
    res = results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    cols = ["acc_id_marked", "acc_id_clean"]
    if any(c not in rows.columns or rows[c].isna().all() for c in cols):
        raise ValueError(f"no artefact split in these results ({caption}): shortcut_figure needs "
                         "a sweep with data.artifact_kind != 'none' and strength > 0")
    split = [c for c in ("acc_id_seen", "acc_id_hidden")
             if c in rows.columns and rows[c].notna().any()]
    if len(split) == 2:  # the marked pairs, by whether the teacher could read the artefact
        cols = ["acc_id_seen", "acc_id_hidden", "acc_id_clean"]
    summary = metric_summary(rows, cols + ["acc_ood"], confidence, spread)
    names = {"acc_id_marked": "ID, pairs carrying the artefact",
             "acc_id_seen": "ID, marked pairs the teacher read the artefact on",
             "acc_id_hidden": "ID, marked pairs the teacher could not read it on",
             "acc_id_clean": "ID, clean pairs (no artefact)",
             "acc_ood": "OOD (targets: no artefact)"}
    names = {c: names[c] for c in cols + ["acc_ood"]}
    colors = {"acc_id_marked": OI["sky_blue"], "acc_id_seen": OI["sky_blue"],
              "acc_id_hidden": "#a9d5f2", "acc_id_clean": ID_COLOR, "acc_ood": OOD_COLOR}
    fig = go.Figure()
    for col in names:
        part = summary[summary["column"] == col]
        fig.add_trace(go.Bar(
            name=names[col], marker_color=colors[col], meta={"column": col},
            hovertemplate=("%{x}<br>" + names[col] + ": %{y:.1f}%<br>interval %{customdata[0]:.1f}"
                           " to %{customdata[1]:.1f}%<br>%{customdata[3]}<extra></extra>"),
            **bar_arrays(part, 100.0)))
    _accuracy_layout(fig, summary, caption)
    fig.layout.title.text = fig.layout.title.text.replace(
        "Pairwise accuracy in and out of distribution", "Shortcut or skill? ID accuracy with and "
        "without the artefact, and OOD")
    return fig


def transfer_figure(
    sweep_dir: PathLike | None = None,
    *,
    results: pd.DataFrame | None = None,
    target: str | None = None,
    artifact_strength: float | None = None,
    source: str | None = None,
    confidence: float = 0.95,
    spread: str = "auto",
) -> go.Figure:
    """Transfer scores against the weak teacher, in points (x100), per student method.

    WRG = Acc_student(ID) - Acc_teacher(ID); AOG = Acc_student(OOD) - Acc_teacher(OOD);
    NTS = AOG - max(0, Acc_teacher(ID) - Acc_student(ID)). ``target=None``: OOD is the mean over
    targets (stored ``wrg`` / ``aog`` / ``nts``); a target name uses ``aog_<target>`` and its NTS
    (computed per run; no stored interval, so a single seed has no error bar).
    """
    res = results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    rows = rows[rows["kind"] != "teacher"].copy()
    if rows.empty:
        raise ValueError("the sweep has no student or ceiling runs: transfer scores need them")
    aog_col, ood_desc = target_column(rows, target, prefix="aog")
    cols = {"wrg": "wrg", "aog": aog_col, "nts": "nts"}
    if target is not None:
        rows["nts_target"] = rows[aog_col] - np.maximum(0.0, -rows["wrg"])
        cols["nts"] = "nts_target"
    summary = metric_summary(rows, list(cols.values()), confidence, spread)
    colors = TRANSFER_COLORS
    fig = go.Figure()
    for score, col in cols.items():
        part = summary[summary["column"] == col]
        name = TRANSFER_NAMES[score] + ("" if score == "wrg" else f" ({ood_desc})")
        fig.add_trace(go.Bar(
            name=name, marker_color=colors[score], meta={"column": col, "score": score},
            hovertemplate=("%{x}<br>" + name + ": %{y:+.1f} points<br>interval "
                           "%{customdata[0]:+.1f} to %{customdata[1]:+.1f}<br>%{customdata[3]}"
                           "<extra></extra>"),
            **bar_arrays(part, 100.0)))
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    fig.update_layout(
        title=figure_title(f"Transfer scores against the weak teacher ({caption})",
                     "WRG = student - teacher on the source test split; AOG = the same out of "
                     "distribution; NTS = AOG - any ID loss. " + interval_caption(summary)),
        barmode="group", xaxis_title="method", yaxis_title="score (points = accuracy % difference)",
        legend=BOTTOM_LEGEND, margin={"t": 100, "b": 210}, height=600, template=TEMPLATE,
    )
    return fig
