"""The figure the demo leads with: the failure-mode verdict, seed by seed.

Per seed, the naive student's in-distribution gain over its weak teacher (WRG) and its
out-of-distribution gain (AOG) side by side on one axis, where the teacher sits at 0; the gap
between the two points is WRG - AOG, the gain that did not carry over. A last row gives the
mean gap with its 95% t-interval over seeds (`anchorviz.analysis.summary.failure_mode`, the
same numbers the command line prints). A second panel splits each seed's WRG into the part
earned on the marked source pairs the teacher could not read (the shortcut) and the part earned
on the other pairs, so a learner sees where the gain comes from.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from anchorviz.analysis import summary
from anchorviz.pipeline.results import artifact_accuracy
from anchorviz.viz.common import (
    ID_COLOR,
    OI,
    OOD_COLOR,
    TEMPLATE,
    PathLike,
    figure_title,
    results_arg,
    run_path,
)

__all__ = ["shortcut_share", "verdict_figure"]


def shortcut_share(teacher_dir: PathLike, student_dir: PathLike) -> dict[str, float]:
    """WRG of one seed split by source-test pair group, in points: ``{"hidden": x, "other":
    y}`` with x + y = WRG, where x = (student - teacher accuracy on the marked pairs the teacher
    could not read) x their share of the source-test pairs. ``{}`` for runs without a
    teacher-visibility split (no planted cue, or a teacher that reads every marker)."""
    t, s = artifact_accuracy(teacher_dir), artifact_accuracy(student_dir)
    if "hidden" not in t or "hidden" not in s:
        return {}
    n_all = sum(n for g, (_, n) in s.items() if g in ("marked", "clean"))
    if n_all == 0:
        return {}
    (acc_t, n_h), (acc_s, _) = t["hidden"], s["hidden"]
    hidden = 100.0 * (acc_s - acc_t) * n_h / n_all
    wrg = 100.0 * sum((s[g][0] - t[g][0]) * s[g][1] for g in ("marked", "clean")) / n_all
    return {"hidden": hidden, "other": wrg - hidden}


def verdict_figure(sweep_dir: PathLike | None = None, *, results: pd.DataFrame | None = None,
                   method: str = "naive", strength: float | None = None,
                   confidence: float = 0.95) -> go.Figure:
    """Per seed, the ``method`` student's WRG and AOG against its teacher (at 0), the mean
    WRG - AOG with its t-interval over seeds, and (with ``sweep_dir``) the shortcut's share of
    each seed's WRG. The title is the verdict in words (`failure_mode`). One setting only:
    pass ``strength`` when the table holds several artefact strengths."""
    res = results_arg(sweep_dir, results)
    fm = summary.failure_mode(res, strength, method=method, confidence=confidence)
    if fm["n_seeds"] == 0:
        raise ValueError(f"no {method}-student runs to draw a verdict from ({fm['reason']})")
    pooled = fm["pooled"]
    seeds = fm["seeds"]
    wrg = [100.0 * v for v in fm["wrg"]["per_seed"]]  # fractions -> points
    aog = [100.0 * v for v in pooled["per_seed_aog"]] if pooled else [np.nan] * len(seeds)
    labels = [f"seed {s}" for s in seeds]
    shares: list[dict[str, float]] = []
    if sweep_dir is not None:
        rows = res if strength is None else res[np.isclose(res["artifact_strength"], strength)]
        for s in seeds:
            t = rows[(rows["seed"] == s) & (rows["kind"] == "teacher")]
            n = rows[(rows["seed"] == s) & (rows["method"] == method)]
            shares.append(shortcut_share(run_path(sweep_dir, t["run_id"].iloc[0]),
                                         run_path(sweep_dir, n["run_id"].iloc[0]))
                          if len(t) == 1 and len(n) == 1 else {})
    with_share = any(shares)
    fig = make_subplots(rows=1, cols=2 if with_share else 1, shared_yaxes=True,
                        column_widths=[0.62, 0.38] if with_share else None,
                        horizontal_spacing=0.06,
                        subplot_titles=(["WRG and AOG per seed (points vs the teacher)",
                                         "where WRG comes from"] if with_share else None))
    for y, w, a in zip(labels, wrg, aog):  # the dumbbell: the gap that did not carry over
        fig.add_trace(go.Scatter(x=[a, w], y=[y, y], mode="lines", showlegend=False,
                                 line={"color": OI["grey"], "width": 3}, hoverinfo="skip"),
                      row=1, col=1)
    fig.add_trace(go.Scatter(x=wrg, y=labels, mode="markers", name="WRG (in distribution)",
                             marker={"color": ID_COLOR, "size": 12, "symbol": "diamond"},
                             hovertemplate="%{y}: WRG %{x:+.1f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=aog, y=labels, mode="markers", name="AOG (out of distribution)",
                             marker={"color": OOD_COLOR, "size": 12},
                             hovertemplate="%{y}: AOG %{x:+.1f}<extra></extra>"), row=1, col=1)
    mean_label = f"WRG - AOG, mean of {len(seeds)}"
    if pooled is not None and pooled["n_seeds"] > 1:
        mean, lo, hi = (100.0 * pooled[k] for k in ("mean", "lo", "hi"))
        fig.add_trace(go.Scatter(
            x=[mean], y=[mean_label], mode="markers", name=f"WRG - AOG ({confidence:.0%} "
            "interval over seeds)", marker={"color": OI["black"], "size": 12, "symbol": "square"},
            error_x={"type": "data", "symmetric": False, "array": [hi - mean],
                     "arrayminus": [mean - lo], "thickness": 2, "width": 8},
            hovertemplate=(f"WRG - AOG %{{x:+.1f}} [{lo:+.1f}, {hi:+.1f}], "
                           f"p {pooled['p']:.3f}<extra></extra>")), row=1, col=1)
    # the teacher's line is named in the axis title: a label above the plot ran into the
    # subplot title at narrow widths (800 px)
    fig.add_vline(x=0, line={"color": OI["black"], "width": 1, "dash": "dot"}, row=1, col=1)
    if with_share:
        hid = [sh.get("hidden", np.nan) for sh in shares]
        oth = [sh.get("other", np.nan) for sh in shares]
        fig.add_trace(go.Bar(x=hid, y=labels, orientation="h", name="on marked pairs the teacher "
                             "could not read (the shortcut)", marker_color=OI["vermillion"],
                             hovertemplate="%{y}: %{x:+.1f} from hidden-marked pairs"
                             "<extra></extra>"), row=1, col=2)
        fig.add_trace(go.Bar(x=oth, y=labels, orientation="h", name="on the other pairs",
                             marker_color=OI["sky_blue"],
                             hovertemplate="%{y}: %{x:+.1f} from the other pairs<extra></extra>"),
                      row=1, col=2)
        fig.update_layout(barmode="relative")
        fig.update_xaxes(title_text="points of WRG", row=1, col=2)
    order = [mean_label] + labels[::-1] if pooled is not None and pooled["n_seeds"] > 1 \
        else labels[::-1]
    fig.update_yaxes(categoryorder="array", categoryarray=order)
    fig.update_xaxes(title_text="points (student minus weak teacher; dotted line: the teacher)",
                     zeroline=False, row=1, col=1)
    sub = fm["reason"] if not fm["can_conclude"] else (
        "failure mode: " + ("YES" if fm["failure_mode"] else "no") + "; strict form (AOG < 0): "
        + ("YES" if fm["strict"] else "no"))
    fig.update_layout(template=TEMPLATE, height=230 + 38 * len(order),
                      title=figure_title(f"{method.capitalize()} student vs its teacher, "
                                         f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}", sub),
                      legend={"orientation": "h", "yref": "container", "yanchor": "bottom",
                              "y": 0.0, "x": 0},
                      margin={"t": 90, "b": 170})
    return fig

