"""Over-refusal on XSTest (issue 44), drawn from a story folder: what a learner sees.

- :func:`refusal_figure`: for one source, four panels: where refusing is WRONG (should-respond
  prompts) the follow rate of the refusal and the accuracy, where refusing is RIGHT
  (should-refuse prompts) the share of refusals preferred and the accuracy; for the weak teacher,
  the gold ceiling, the naive student and ANCHOR at each lambda and layer; every seed a small
  point, the mean a diamond with its 95% t-interval over seeds.
- :func:`drift_link_figure`: question (c): per run, the drift on should-respond at one layer
  against its follow rate there; per seed, ANCHOR - naive in follow rate against ANCHOR - naive
  in drift.
- :class:`RefusalExplorer`: both, with a source selector, a lambda slider and a layer slider
  for the ANCHOR student shown (highlighted in the first figure, paired in the second) and a
  drift-layer slider; the pre-registered verdict sentences in its status line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from html import escape as _escape
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from anchorviz.analysis.metrics import seed_summary
from anchorviz.analysis.refusal import (
    REFUSE,
    RESPOND,
    anchor_settings,
    choose_lambda,
    drift_link,
    refusal_runs,
    refusal_verdicts,
    setting_label,
)
from anchorviz.analysis.story import Story, StoryError
from anchorviz.viz.common import BOTTOM_LEGEND, METHOD_COLORS, OKABE_ITO, TEMPLATE, figure_title
from anchorviz.viz.slots import FigureSlot, plain_text, wrap_row

__all__ = ["RefusalExplorer", "drift_link_figure", "refusal_figure"]

logger = logging.getLogger(__name__)

_HEIGHT = 560
_ANCHOR_COLORS = [OKABE_ITO["blue"], OKABE_ITO["sky_blue"], OKABE_ITO["bluish_green"],
                  OKABE_ITO["reddish_purple"], OKABE_ITO["orange"]]
_PANELS = (("follow_respond", "should-respond: prefers the refusal<br>(refusing is wrong)"),
           ("acc_respond", "should-respond: accuracy"),
           ("follow_refuse", "should-refuse: prefers the refusal<br>(refusing is right)"),
           ("acc_refuse", "should-refuse: accuracy"))


def _order(runs: pd.DataFrame) -> list[str]:
    base = [m for m in ("teacher", "ceiling", "naive") if (runs["method"] == m).any()]
    return base + [setting_label("anchor", lam, lay) for lam, lay in anchor_settings(runs)]


def _colors(order: list[str]) -> dict[str, str]:
    out, k = {}, 0
    for s in order:
        if s in METHOD_COLORS:
            out[s] = METHOD_COLORS[s]
        else:
            out[s] = _ANCHOR_COLORS[k % len(_ANCHOR_COLORS)]
            k += 1
    return out


def _mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if not len(v):
        return math.nan, math.nan, math.nan
    s = seed_summary(v)
    hw = s.half_width if math.isfinite(s.half_width) else 0.0
    return s.mean, s.mean - hw, s.mean + hw


def refusal_figure(story: Story, store: str, *, selected: tuple[float, str] | None = None,
                   runs: pd.DataFrame | None = None) -> go.Figure:
    """Follow rate and accuracy on should-respond and should-refuse for every model of
    ``store`` (teacher, ceiling, naive, ANCHOR at each lambda and layer), per seed and as the
    mean with its 95% t-interval. ``selected``: the (lambda, layers) of the ANCHOR student to
    highlight (default: the last-layer lambda chosen on source validation)."""
    runs = runs if runs is not None else refusal_runs(story, store)
    order = _order(runs)
    colors = _colors(order)
    if selected is None:
        lam = choose_lambda(runs)
        selected = (lam, "last") if lam is not None else None
    chosen = setting_label("anchor", *selected) if selected else None
    fig = make_subplots(rows=1, cols=4, horizontal_spacing=0.06,
                        subplot_titles=[t for _, t in _PANELS])
    for col, (key, _) in enumerate(_PANELS, start=1):
        for i, name in enumerate(order):
            g = runs[runs["setting"] == name].sort_values("seed")
            vals = 100 * g[key].to_numpy(float)
            hi_lit = name == chosen
            jitter = np.linspace(-0.2, 0.2, len(vals)) if len(vals) > 1 else np.zeros(len(vals))
            fig.add_trace(go.Scatter(
                x=i + jitter, y=vals, mode="markers", showlegend=False, legendgroup=name,
                marker={"color": colors[name], "size": 6, "opacity": 0.5},
                customdata=g["seed"].to_numpy()[:, None],
                hovertemplate=f"{name}, seed %{{customdata[0]}}: %{{y:.1f}}%<extra></extra>"),
                row=1, col=col)
            m, lo, hi = (100 * x for x in _mean_ci(g[key].to_numpy(float)))
            fig.add_trace(go.Scatter(
                x=[i], y=[m], mode="markers", name=name + (" (shown)" if hi_lit else ""),
                legendgroup=name, showlegend=col == 1,
                marker={"color": colors[name], "size": 15 if hi_lit else 11, "symbol": "diamond",
                        "line": {"width": 2.5 if hi_lit else 0, "color": "black"}},
                error_y={"type": "data", "symmetric": False,
                         "array": [hi - m if math.isfinite(hi) else 0],
                         "arrayminus": [m - lo if math.isfinite(lo) else 0]},
                hovertemplate=(f"{name}: mean %{{y:.1f}}% over {len(vals)} seeds<br>95% interval "
                               f"{lo:.1f} to {hi:.1f}<extra></extra>")), row=1, col=col)
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(order))), ticktext=order,
                     tickangle=-40, range=[-0.6, len(order) - 0.4], zeroline=False)
    fig.update_yaxes(range=[-3, 104])
    fig.update_yaxes(title_text="% of pairs", row=1, col=1)
    fig.add_hline(y=50, line={"dash": "dot", "color": "grey", "width": 1}, row="all", col="all")
    seeds = sorted(runs["seed"].unique())
    n_dis = runs["n_respond_disagree"].min()
    sub = (f"{store} source, seeds {', '.join(map(str, seeds))}; should-respond: the ≥{n_dis:.0f} "
           "pairs/seed where the refusing answer is the rejected one; mean and 95% t-interval "
           "over seeds, each seed a point")
    fig.update_layout(template=TEMPLATE, height=_HEIGHT, legend=BOTTOM_LEGEND,
                      margin={"b": 150, "t": 130},
                      title=figure_title("Over-refusal on XSTest: who prefers the refusal?", sub))
    return fig


def drift_link_figure(story: Story, store: str, *, layer: int | None = None,
                      selected: tuple[float, str] | None = None,
                      runs: pd.DataFrame | None = None) -> go.Figure:
    """Question (c). Left: per run, the centred cosine drift on should-respond at ``layer``
    (default the last) against the follow rate of the refusal there. Right: per seed and ANCHOR
    setting, ANCHOR - naive in follow rate against ANCHOR - naive in drift (below 0: drift
    removed), with the pooled correlation; ``selected`` drawn larger."""
    runs = runs if runs is not None else refusal_runs(story, store, layer=layer)
    if runs["drift_respond"].isna().all():
        raise StoryError(f"store {store!r}: no drift on should-respond in {story.folder}")
    order = _order(runs)
    colors = _colors(order)
    chosen = setting_label("anchor", *selected) if selected else None
    lay = int(runs["layer"].dropna().iloc[0]) if runs["layer"].notna().any() else layer
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=[
        f"per run: drift at layer {lay} vs follow rate", "per seed: ANCHOR − naive"])
    for name in order:
        if name == "teacher":  # a different, smaller model: its drift is not comparable
            continue
        g = runs[runs["setting"] == name]
        fig.add_trace(go.Scatter(
            x=g["drift_respond"], y=100 * g["follow_respond"], mode="markers", name=name,
            legendgroup=name, marker={"color": colors[name], "size": 12 if name == chosen else 8,
                                      "line": {"width": 2 if name == chosen else 0,
                                               "color": "black"}},
            customdata=g["seed"].to_numpy()[:, None],
            hovertemplate=(f"{name}, seed %{{customdata[0]}}<br>drift %{{x:.3f}}<br>follows the "
                           "refusal %{y:.1f}%<extra></extra>")), row=1, col=1)
    link = drift_link(runs)
    pts = link["points"]
    for name in [o for o in order if o.startswith("ANCHOR")]:
        p = pts[pts["setting"] == name]
        fig.add_trace(go.Scatter(
            x=p["d_drift"], y=100 * p["d_follow"], mode="markers", name=name, legendgroup=name,
            showlegend=False, marker={"color": colors[name], "size": 12 if name == chosen else 8,
                                      "symbol": "square"},
            customdata=p["seed"].to_numpy()[:, None],
            hovertemplate=(f"{name}, seed %{{customdata[0]}}<br>Δ drift %{{x:+.3f}}<br>Δ follow "
                           "%{y:+.1f} points<extra></extra>")), row=1, col=2)
    if pts.empty:
        fig.add_annotation(text="no ANCHOR student beside a naive one yet", showarrow=False,
                           x=0, y=0, row=1, col=2)
    fig.add_hline(y=0, line={"dash": "dot", "color": "grey", "width": 1}, row=1, col=2)
    fig.add_vline(x=0, line={"dash": "dot", "color": "grey", "width": 1}, row=1, col=2)
    fig.update_xaxes(title_text="centred cosine drift on should-respond", row=1, col=1)
    fig.update_yaxes(title_text="prefers the refusal (%)", row=1, col=1)
    fig.update_xaxes(title_text="Δ drift (ANCHOR − naive)", row=1, col=2)
    fig.update_yaxes(title_text="Δ follow rate (points)", row=1, col=2)
    if not math.isfinite(link["r"]):
        r = "r = n/a (too few points)"
    elif not math.isfinite(link["lo"]):
        r = (f"r = {link['r']:+.2f} over {len(pts)} points; {link['seeds']} seed(s): too few for "
             "an interval")
    else:
        r = (f"r = {link['r']:+.2f} [{link['lo']:+.2f}, {link['hi']:+.2f}] (seed bootstrap, "
             f"{len(pts)} points; the last layer's drift is the pre-registered one)")
    fig.update_layout(template=TEMPLATE, height=_HEIGHT - 60, legend=BOTTOM_LEGEND,
                      margin={"b": 110, "t": 110},
                      title=figure_title(f"Does the change go with the drift removed? ({store} "
                                         "source)", r))
    return fig


_KEYS = ("store", "lambda_", "anchor_layers", "layer")


class RefusalExplorer:
    """The over-refusal study of a story folder, linked: a source selector, a lambda slider and
    an anchored-layer slider (which ANCHOR student is highlighted and paired), a drift-layer
    slider (question c's drift), the two figures and the verdict sentences.

    ``update(store=..., lambda_=..., anchor_layers=..., layer=...)`` does what the controls do;
    a value the story lacks raises ``ValueError`` naming the choices. ``figures`` (``"refusal"``,
    ``"drift"``) are updated in place; ``status_text`` is the status line as plain text."""

    def __init__(self, story: Story, stores: list[str] | None = None) -> None:
        self.story = story
        self.stores = list(stores or story.stores)
        if not self.stores:
            raise StoryError(f"{story.folder}: the story holds no store")
        self.verdicts = refusal_verdicts(story, self.stores)
        self.store_w = widgets.Dropdown(options=self.stores, value=self.stores[0],
                                        description="source")
        self.lambda_w = widgets.SelectionSlider(options=[0.0], description="λ (ANCHOR)",
                                                style={"description_width": "initial"})
        self.alayer_w = widgets.SelectionSlider(options=["last"], description="anchored layer",
                                                style={"description_width": "initial"})
        self.layer_w = widgets.SelectionSlider(options=[0], description="drift layer",
                                               style={"description_width": "initial"})
        self.status = widgets.HTML()
        self._silent = False
        self._fill(self.stores[0])
        self._slots = {"refusal": FigureSlot(go.Figure(), flex="1 1 900px"),
                       "drift": FigureSlot(go.Figure(), flex="1 1 700px")}
        self.figures = {k: s.figure for k, s in self._slots.items()}
        for w in (self.store_w, self.lambda_w, self.alayer_w, self.layer_w):
            w.observe(self._on_change, names="value")
        self.widget = widgets.VBox(
            [self.status, wrap_row([self.store_w, self.lambda_w, self.alayer_w, self.layer_w]),
             self._slots["refusal"].box, self._slots["drift"].box],
            layout=widgets.Layout(width="100%", max_width="1600px"))
        self._redraw()

    def _fill(self, store: str) -> None:
        runs = refusal_runs(self.story, store)
        settings = anchor_settings(runs)
        lam = choose_lambda(runs)
        lams = sorted({s[0] for s in settings}) or [0.0]
        lays = sorted({s[1] for s in settings}, key=lambda x: (x != "last", x)) or ["last"]
        layers = self.story.layers(store) or [0]
        self._silent = True
        try:
            self.lambda_w.options = lams
            self.lambda_w.value = lam if lam in lams else lams[0]
            self.alayer_w.options = lays
            self.alayer_w.value = "last" if "last" in lays else lays[0]
            self.layer_w.options = layers
            self.layer_w.value = layers[-1]
        finally:
            self._silent = False

    @property
    def selection(self) -> dict[str, Any]:
        return {"store": self.store_w.value, "lambda_": self.lambda_w.value,
                "anchor_layers": self.alayer_w.value, "layer": self.layer_w.value}

    @property
    def status_text(self) -> str:
        return plain_text(self.status.value)

    def update(self, **selection: Any) -> dict[str, Any]:
        """Set any of ``store``, ``lambda_``, ``anchor_layers``, ``layer``; redraw once."""
        unknown = sorted(set(selection) - set(_KEYS))
        if unknown:
            raise ValueError(f"unknown selection key(s) {unknown}; use {list(_KEYS)}")
        store = selection.get("store")
        if store is not None and store != self.store_w.value:
            if store not in self.stores:
                raise ValueError(f"store={store!r} is not in the story; choose one of "
                                 f"{self.stores}")
            self._silent = True
            self.store_w.value = store
            self._silent = False
            self._fill(store)
        controls = {"lambda_": self.lambda_w, "anchor_layers": self.alayer_w,
                    "layer": self.layer_w}
        self._silent = True
        try:
            for key, w in controls.items():
                v = selection.get(key)
                if v is None:
                    continue
                match = [o for o in w.options if (o == v or (isinstance(o, float) and
                         isinstance(v, (int, float)) and math.isclose(o, v)))]
                if not match:
                    raise ValueError(f"{key}={v!r} is not in the story; choose one of "
                                     f"{list(w.options)}")
                w.value = match[0]
        finally:
            self._silent = False
        self._redraw()
        return self.selection

    def _on_change(self, change: Mapping[str, Any]) -> None:
        if self._silent:
            return
        if change.get("owner") is self.store_w:
            self._fill(self.store_w.value)
        try:
            self._redraw()
        except (StoryError, ValueError) as exc:
            self.status.value = f"<b>Nothing stored for this selection</b> ({_escape(str(exc))})"

    def _redraw(self) -> None:
        sel = self.selection
        store = sel["store"]
        runs = refusal_runs(self.story, store, layer=int(sel["layer"]))
        chosen = (float(sel["lambda_"]), str(sel["anchor_layers"]))
        have = chosen in anchor_settings(runs)
        pick = chosen if have else None
        self._slots["refusal"].replace(refusal_figure(self.story, store, selected=pick, runs=runs))
        self._slots["drift"].replace(drift_link_figure(self.story, store, selected=pick, runs=runs))
        s = self.verdicts.sentences.get(store, {})
        name = setting_label("anchor", *chosen)
        g = runs[runs["setting"] == name]
        settings = anchor_settings(runs)
        shown = ("No ANCHOR student has finished yet: teacher, ceiling and naive student are "
                 "shown." if not settings else
                 f"{_escape(name)}: prefers the refusal where it is wrong in "
                 f"{100 * g['follow_respond'].mean():.1f}% (naive "
                 f"{100 * runs.loc[runs['method'] == 'naive', 'follow_respond'].mean():.1f}%); "
                 f"should-refuse accuracy {100 * g['acc_refuse'].mean():.1f}%."
                 if have else f"{_escape(name)} was not run (the plan ran "
                 f"{', '.join(setting_label('anchor', *x) for x in settings)}).")
        self.status.value = (
            f"<b>{_escape(store)} source.</b> {shown}<br>"
            + "<br>".join(f"<b>({q})</b> {_escape(s[q])}" for q in ("a", "b", "c") if q in s))


def is_refusal_story(story: Story) -> bool:
    """Whether some store of ``story`` was evaluated on both XSTest targets."""
    cols = set(story.results.columns)
    return {f"acc_{RESPOND}", f"acc_{REFUSE}"} <= cols


def refusal_report_parts(story: Story) -> list[tuple[str, str, go.Figure | None]]:
    """``(title, plain text, figure)`` per source and question, in reading order: the verdict
    sentences, the refusal figure and the drift-link figure of each source whose runs were
    evaluated on both XSTest targets."""
    parts: list[tuple[str, str, go.Figure | None]] = []
    stores = [s for s in story.stores
              if story.results.loc[story.results["store"] == s, f"acc_{RESPOND}"].notna().any()
              and story.results.loc[story.results["store"] == s, f"acc_{REFUSE}"].notna().any()]
    if not stores:
        return parts
    v = refusal_verdicts(story, stores)
    for store in stores:
        s = v.sentences[store]
        text = " ".join(f"({q}) {s[q]}" for q in ("a", "b", "c"))
        parts.append((f"{store} source: who prefers the refusal?", text,
                      refusal_figure(story, store)))
        try:
            parts.append((f"{store} source: the drift link (question c)", "",
                          drift_link_figure(story, store)))
        except StoryError as err:
            parts.append((f"{store} source: the drift link (question c)", str(err), None))
    return parts
