"""Interactive explorers for JupyterLab: a sweep explorer and a small run launcher.

:class:`SweepExplorer` reads a finished sweep once (``results.parquet`` and every run's
``drift.parquet`` / ``projection.parquet``) and shows three linked panels -- drift per layer,
the shared reference / student map and the accuracies -- driven by a lambda slider and layer,
method, seed, target-domain (and artefact-strength) selectors, and a teacher-visibility slider
when the sweep holds several ``teacher_visibility`` values (how many of the planted markers the
weak teacher could read: the hidden-cue scenario's knob). A callback only looks tables up
and moves numbers into ``go.FigureWidget`` traces inside ``batch_update``: nothing is trained,
computed or re-read from disk. ``explorer.update(lambda_=0.1, layer="middle")`` does
programmatically what the controls do.

:class:`RunLauncher` is a form (method, lambda, layers, seed) with a Run button that calls
``anchorviz.pipeline.sweep.run`` and reports the run directories (or the error) in its output area.

The layout follows the width of the output area: the controls, the drift panel and the
accuracy panel share one row (at 1280 px side by side, so a slider move shows its effect
without scrolling; the map, with its own two controls, is below them); the row wraps its
panels under each other in a narrow notebook column instead of cutting them off, the figures
autosize (no fixed width), and every colour comes from the Okabe-Ito palette of
`anchorviz.viz.common` (``OKABE_ITO`` / ``TEMPLATE``: no red / green pair). Values
shown in the HTML status lines (run ids, paths, error messages) are HTML-escaped;
``status_text`` gives the same line as plain text for printing.

``go.FigureWidget`` needs the ``anywidget`` package with plotly >= 6. Without it the explorer
falls back to plain figures re-drawn into ``ipywidgets.Output`` areas (slower, same data) and
logs a warning saying so.
"""

from __future__ import annotations

import logging
import math
import re
import time
import traceback
from collections.abc import Mapping
from html import escape as _escape
from html import unescape as _unescape
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from anchorviz.analysis.summary import setting_columns
from anchorviz.viz.common import (
    BOTTOM_LEGEND,
    METHOD_COLORS,
    METHOD_NAMES,
    OKABE_ITO,
    TEMPLATE,
    TOP_LEGEND,
    PathLike,
    bar_arrays,
    captured_mask,
    interval_caption,
    layers_label,
    layers_rank,
    load_results,
    load_run_table,
    method_label,
    method_rank,
    metric_summary,
    normalize_results,
    select_condition,
    sweep_targets,
    target_column,
    unique_values,
)
from anchorviz.viz.drift import DRIFT_METRICS, drift_curve
from anchorviz.viz.projection import (
    UMAP_HOVER,
    hover_custom,
    subsample,
    umap_groups,
    umap_movement,
)

logger = logging.getLogger(__name__)

__all__ = ["RunLauncher", "SweepExplorer", "lambda_label", "select_run"]

#: the explorer's colours, all from the Okabe-Ito palette of anchorviz.viz.common: the selected run
#: blue and the naive W2S reference vermillion (its colour in every other figure), ID / OOD
#: accuracy blue / orange; chosen / rejected come from umap_groups (blue / orange)
_OI = OKABE_ITO
_SELECTED_COLOR = _OI["blue"]
_NAIVE_COLOR = METHOD_COLORS["naive"]
_ACC_COLORS = {"acc_id": _OI["blue"], "ood": _OI["orange"]}
_MOVEMENT_COLOR = "rgba(153,153,153,0.45)"  # Okabe-Ito grey, see-through
#: panel sizes: the heights are fixed, the widths follow the output area (plotly autosize);
#: the drift and accuracy panels sit side by side while each gets at least _PANEL_BASIS
_DRIFT_HEIGHT, _PANEL_HEIGHT, _MAP_HEIGHT = 600, 600, 520
# the drift and accuracy panels share a row of their own under the controls (beside a
# controls column a FigureWidget drew at plotly's 700 px default and was cut at the panel's
# edge in a 1280 px JupyterLab); each grows from this basis and wraps when narrower
_PANEL_BASIS = "440px"
_MAX_WIDTH = "1600px"
_TITLE_FONT = {"size": 15}


def _wrap_row(children: list[widgets.Widget], **layout: Any) -> widgets.HBox:
    """A row that wraps its children onto further lines when the output area is narrow."""
    layout = {"flex_flow": "row wrap", "width": "100%", "max_width": _MAX_WIDTH,
              "align_items": "center", **layout}
    return widgets.HBox(children, layout=widgets.Layout(**layout))


def _plain(html: str) -> str:
    """The text of one of the explorer's own status lines (tags dropped, entities decoded)."""
    return _unescape(re.sub(r"<[^>]+>", "", html.replace("<br>", "\n")))


_SELECTION_KEYS = ("method", "lambda_", "layer", "target", "seed", "artifact_strength",
                   "teacher_visibility", "view_layer", "color_by")


def _with_visibility(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` with a ``teacher_visibility`` column (1.0 = the teacher reads every planted
    artefact: what runs made before the column existed did)."""
    if "teacher_visibility" in results.columns and results["teacher_visibility"].notna().all():
        return results
    out = results.copy()
    col = out["teacher_visibility"] if "teacher_visibility" in out.columns else np.nan
    out["teacher_visibility"] = pd.Series(col, index=out.index, dtype=float).fillna(1.0)
    return out


# --------------------------------------------------------------------------- selection


def _close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def select_run(
    results: pd.DataFrame,
    *,
    method: str,
    lambda_: float | None = None,
    layers: str | None = None,
    seed: int | None = None,
    artifact_strength: float | None = None,
    source: str | None = None,
    teacher_visibility: float | None = None,
) -> str:
    """The run_id of the one run that matches a selection.

    ``lambda_`` and ``layers`` only matter for ``method="anchor"`` (and are then required when
    the sweep has several values). ``seed=None`` takes the smallest seed (seeds are
    replicates). ``artifact_strength``, ``teacher_visibility`` (the fraction of planted
    artefacts the weak teacher could read) and ``source`` may be left out only when the sweep
    has one value of each. Raises ValueError naming the valid choices when nothing matches.
    """
    res = _with_visibility(normalize_results(results, "passed to select_run"))
    methods = sorted(res["method"].unique(), key=method_rank)
    if method not in methods:
        raise ValueError(f"method {method!r} is not in the sweep; choose one of {methods}")
    rows = res[res["method"] == method]
    asked = [f"method={method!r}"]

    def narrow(rows: pd.DataFrame, col: str, value: Any, name: str, required: bool) -> pd.DataFrame:
        values = unique_values(rows[col])
        if value is None:
            if required and len(values) > 1:
                raise ValueError(f"{', '.join(asked)} matches runs with several {name} values "
                                 f"{values}; pass {name}=")
            return rows
        asked.append(f"{name}={value!r}")
        if rows[col].dtype.kind == "f":
            sel = rows[np.isclose(rows[col].astype(float), float(value), rtol=1e-9, atol=1e-12)]
        else:
            sel = rows[rows[col] == value]
        if sel.empty:
            raise ValueError(f"no run matches {', '.join(asked)}; {name} values for this "
                             f"selection: {values}")
        return sel

    rows = narrow(rows, "source", source, "source", required=True)
    rows = narrow(rows, "artifact_strength", artifact_strength, "artifact_strength", required=True)
    rows = narrow(rows, "teacher_visibility", teacher_visibility, "teacher_visibility",
                  required=True)
    if method == "anchor":
        rows = narrow(rows, "anchor_lambda", lambda_, "lambda_", required=True)
        rows = narrow(rows, "anchor_layers", layers, "layers", required=True)
    rows = narrow(rows, "seed", seed, "seed", required=False)
    rows = rows.sort_values("seed", kind="stable")
    if len(rows) > 1 and rows["seed"].nunique() == 1:
        logger.warning("%d runs match %s; using %s", len(rows), ", ".join(asked),
                       rows["run_id"].iloc[0])
    return str(rows["run_id"].iloc[0])


def lambda_label(value: float) -> str:
    """Slider label of a lambda: ``1e-4`` for small powers of ten, else ``0.01``, ``0.5`` ..."""
    if value <= 0:
        return "0"
    exp = math.log10(value)
    if abs(exp - round(exp)) < 1e-9 and abs(round(exp)) >= 3:
        return f"1e{int(round(exp))}"
    return f"{value:g}"


# --------------------------------------------------------------------------- figure widgets


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class _FigureSlot:
    """A figure the explorer updates in place, and the widget that shows it.

    With anywidget installed ``figure`` is a ``go.FigureWidget`` (its own widget); without it
    a plain ``go.Figure`` drawn into an ``Output`` area after every update. ``box`` holds the
    widget and is what the layout places: a column box (so the figure stretches to its width)
    sized by ``layout``; the figure itself has no width and follows the box (plotly autosize,
    ``responsive`` on window resizes).
    """

    _warned = False

    def __init__(self, fig: go.Figure, **layout: Any) -> None:
        try:
            self.figure: go.Figure = go.FigureWidget(fig)
            self.figure._config = {**self.figure._config, "responsive": True}
            self.widget: widgets.Widget = self.figure
            self.live = True
        except ImportError as exc:
            if not _FigureSlot._warned:
                logger.warning("go.FigureWidget unavailable (%s); figures are re-drawn into "
                               "Output widgets instead (pip install anywidget for in-place "
                               "updates)", exc)
                _FigureSlot._warned = True
            self.figure = go.Figure(fig)
            self.widget = widgets.Output()
            self.live = False
        self.box = widgets.VBox([self.widget], layout=widgets.Layout(
            align_items="stretch", min_width="0", **layout))

    def refresh(self) -> None:
        if self.live or not _in_kernel():
            return
        from IPython.display import clear_output, display

        with self.widget:
            clear_output(wait=True)
            display(self.figure)


# --------------------------------------------------------------------------- explorer


class SweepExplorer:
    """Linked drift / map / accuracy panels over one finished sweep.

    Args:
        sweep_dir: the sweep directory (``results.parquet`` and ``runs/``).
        preload_projections: read every run's ``projection.parquet`` at construction (the map
            then never touches the disk); False reads each on first view (then cached).
        max_points: at most this many points per colour group and model in the map (seeded).
        n_lines: reference -> student movement lines drawn in the map.

    Attributes:
        results: the results table (loaded once).
        figures: ``{"drift", "umap", "accuracy"}`` -> the figures updated in place.
        widget: the ``VBox`` to display (as wide as the output area, at most 1600 px; rows
            and panels wrap when it is narrow).
        status: the HTML status line (values HTML-escaped); ``status_text``: the same as
            plain text.
        selection: the current selection (``method``, ``lambda_``, ``layer``, ``target``,
            ``seed``, ``artifact_strength``, ``teacher_visibility``, ``view_layer``,
            ``color_by``).
        run_id: the run the panels show; ``timings``: milliseconds of the last update per panel.
    """

    def __init__(self, sweep_dir: PathLike, *, preload_projections: bool = True,
                 max_points: int = 1500, n_lines: int = 150) -> None:
        self.sweep_dir = Path(sweep_dir)
        self.results = _with_visibility(load_results(self.sweep_dir))
        self.max_points = max_points
        self.n_lines = n_lines
        students = self.results[self.results["kind"] != "teacher"]
        if students.empty:
            raise ValueError(f"sweep {self.sweep_dir} has no student or ceiling runs to explore")
        self._drift: dict[str, pd.DataFrame] = {}
        self._projection: dict[str, pd.DataFrame | None] = {}
        captured = captured_mask(students)
        self._scores_only = set(students.loc[~captured, "run_id"])
        for rid in students.loc[captured, "run_id"]:
            rdir = self.sweep_dir / "runs" / rid
            try:
                self._drift[rid] = load_run_table(rdir, "drift")
            except FileNotFoundError as exc:
                logger.warning("run %s: %s", rid, exc)
            if preload_projections:
                self._load_projection(rid)
        self._summaries: dict[tuple[float, float, str], pd.DataFrame] = {}
        self._grid_values = self._current_grid_values()
        self._silent = False
        self.timings: dict[str, float] = {}
        self.run_id: str | None = None
        self._build_controls(students)
        self.figures: dict[str, go.Figure] = {}
        panel = {"flex": f"1 1 {_PANEL_BASIS}"}  # side by side, or under each other
        self._slots = {"drift": _FigureSlot(self._empty_drift(), **panel),
                       "umap": _FigureSlot(self._empty_umap(), width="100%"),
                       "accuracy": _FigureSlot(self._empty_accuracy(), **panel)}
        self.figures = {k: s.figure for k, s in self._slots.items()}
        self.widget = self._layout()
        self._redraw()

    # ---- data access (memory only after construction)

    def _load_projection(self, run_id: str) -> pd.DataFrame | None:
        if run_id not in self._projection:
            try:
                self._projection[run_id] = load_run_table(
                    self.sweep_dir / "runs" / run_id, "projection")
            except FileNotFoundError as exc:
                logger.info("run %s: %s", run_id, exc)
                self._projection[run_id] = None
        return self._projection[run_id]

    def _condition(self) -> pd.DataFrame:
        res = self.results
        rows = res[np.isclose(res["teacher_visibility"], self.visibility_w.value)]
        # any other setting that varies (model, split sizes ...): its first value, never pooled
        rows, _ = select_condition(rows, float(self.strength_w.value), prefer=self._grid_values)
        return rows

    def _current_grid_values(self) -> dict:
        """``{setting column: value}`` of the settings (split sizes, models ...) that the runs of
        the folder's current grid (its ``sweep.yaml``) share, where the folder also holds runs
        made with other values (an earlier grid, before a default changed): those are what the
        explorer shows first. Empty for a folder without a readable grid."""
        from anchorviz.pipeline.expected import expected_runs

        try:
            ids = expected_runs(self.sweep_dir)
        except (ValueError, OSError) as exc:
            logger.info("%s: no current grid to prefer (%s)", self.sweep_dir, exc)
            return {}
        res = self.results
        cur = res[res["run_id"].isin(ids or {})]
        out = {}
        for col in setting_columns(res, ignore=("source", "artifact_strength",
                                                "teacher_visibility")):
            vals = unique_values(cur[col].dropna())
            if len(vals) == 1:
                out[col] = vals[0]
        return out

    def _summary(self) -> pd.DataFrame:
        key = (float(self.strength_w.value), float(self.visibility_w.value),
               str(self.target_w.value))
        if key not in self._summaries:
            col, _ = target_column(self.results, self.target_w.value)
            self._summaries[key] = metric_summary(self._condition(), ["acc_id", col])
        return self._summaries[key]

    # ---- controls

    def _build_controls(self, students: pd.DataFrame) -> None:
        res = self.results
        methods = sorted(students["method"].unique(), key=method_rank)
        self.method_w = widgets.Dropdown(
            options=[(METHOD_NAMES.get(m, m), m) for m in methods],
            value="anchor" if "anchor" in methods else methods[0], description="method")
        anchor = res[res["method"] == "anchor"]
        lambdas = unique_values(anchor["anchor_lambda"]) or [0.0]
        layers = sorted(anchor["anchor_layers"].unique(), key=layers_rank) or ["last"]
        self.lambda_w = widgets.SelectionSlider(
            options=[(lambda_label(v), float(v)) for v in lambdas],
            value=float(lambdas[len(lambdas) // 2]), description="λ (log steps)",
            continuous_update=True, style={"description_width": "initial"})
        self.layer_w = widgets.Dropdown(
            options=[(layers_label(s) or s, s) for s in layers], value=layers[0],
            description="anchored")
        targets = sweep_targets(res)
        self.target_w = widgets.Dropdown(options=targets, value=targets[0], description="target")
        seeds = sorted(int(s) for s in res["seed"].unique())
        self.seed_w = widgets.Dropdown(options=seeds, value=seeds[0], description="seed")
        strengths = sorted(float(s) for s in res["artifact_strength"].unique())
        self.strength_w = widgets.Dropdown(
            options=[(f"{s:g}", s) for s in strengths], value=strengths[-1],
            description="artefact", layout={"display": None if len(strengths) > 1 else "none"})
        # the hidden-cue knob: on what fraction of the marked source pairs the weak teacher could
        # read the marker (1 = every one); shown only when the sweep holds several values.
        # Starts at the value with the most student runs (the sweep's own scenario), ties: the
        # smallest
        counts = students.groupby("teacher_visibility").size()
        visibilities = sorted(float(v) for v in counts.index)
        start = max(visibilities, key=lambda v: (int(counts.loc[v]), -v))
        self.visibility_w = widgets.SelectionSlider(
            options=[(f"{v:g}", v) for v in visibilities], value=start,
            description="teacher reads marker", continuous_update=True,
            style={"description_width": "initial"},
            layout={"display": None if len(visibilities) > 1 else "none"})
        self.view_layer_w = widgets.Dropdown(options=[], description="map layer")
        # button_width auto: the buttons are as wide as their labels, not a fixed 148 px each
        self.color_by_w = widgets.ToggleButtons(
            options=[("domain", "domain"), ("side", "side")], value="domain",
            description="colour by",
            style={"button_width": "auto", "description_width": "initial"})
        self.status = widgets.HTML()  # its text wraps at the width of the output area
        for w in (self.method_w, self.lambda_w, self.layer_w, self.target_w, self.seed_w,
                  self.strength_w, self.visibility_w, self.view_layer_w, self.color_by_w):
            w.observe(self._on_change, names="value")

    def _controls(self) -> dict[str, widgets.ValueWidget]:
        return {"method": self.method_w, "lambda_": self.lambda_w, "layer": self.layer_w,
                "target": self.target_w, "seed": self.seed_w,
                "artifact_strength": self.strength_w, "teacher_visibility": self.visibility_w,
                "view_layer": self.view_layer_w, "color_by": self.color_by_w}

    def _layout(self) -> widgets.VBox:
        # the status line, a wrapping row of controls, then the drift and accuracy panels side
        # by side (at 1280 px; a slider move shows both without scrolling) in a row that wraps
        # them under each other in a narrow output area instead of cutting them off; the map
        # and its two controls below
        controls = _wrap_row([self.method_w, self.lambda_w, self.layer_w, self.visibility_w,
                              self.target_w, self.seed_w, self.strength_w])
        main = _wrap_row([self._slots["drift"].box, self._slots["accuracy"].box],
                         align_items="flex-start")
        map_controls = _wrap_row([self.view_layer_w, self.color_by_w])
        return widgets.VBox([self.status, controls, main, map_controls,
                             self._slots["umap"].box],
                            layout=widgets.Layout(width="100%", max_width=_MAX_WIDTH))

    @property
    def selection(self) -> dict[str, Any]:
        return {k: w.value for k, w in self._controls().items()}

    def _several_visibilities(self) -> bool:
        return len(self.visibility_w.options) > 1

    def _condition_caption(self) -> str:
        """``, teacher visibility 0.5`` when the sweep holds several values, else ``""``."""
        return (f", teacher visibility {self.visibility_w.value:g}"
                if self._several_visibilities() else "")

    def _on_change(self, change: Mapping[str, Any]) -> None:
        if self._silent:
            return
        try:
            self._redraw()
        except ValueError as exc:  # a combination the sweep did not train: say so, keep panels
            self.run_id = None
            self.status.value = (f"<b>No stored run for this selection</b> ({_escape(str(exc))}"
                                 "); the panels still show the previous one.")

    def update(self, **selection: Any) -> str:
        """Set any of ``method``, ``lambda_``, ``layer`` (anchored layers: ``"last"``,
        ``"middle"`` ...), ``target``, ``seed``, ``artifact_strength``, ``teacher_visibility``
        (fraction of planted markers the weak teacher could read), ``view_layer`` (map layer),
        ``color_by`` and redraw once. Returns the run_id shown.

        Raises ValueError naming the valid choices for a value the sweep does not have.
        """
        if "layers" in selection:
            selection["layer"] = selection.pop("layers")
        unknown = sorted(set(selection) - set(_SELECTION_KEYS))
        if unknown:
            raise ValueError(f"unknown selection key(s) {unknown}; use {list(_SELECTION_KEYS)}")
        controls = self._controls()
        resolved = {}
        for key, value in selection.items():
            if value is None:
                continue
            resolved[key] = self._option_value(key, controls[key], value)
        self._silent = True
        try:
            order = [k for k in _SELECTION_KEYS if k in resolved and k != "view_layer"]
            for key in order:
                controls[key].value = resolved[key]
        finally:
            self._silent = False
        return self._redraw(view_layer=resolved.get("view_layer"))

    def _option_value(self, key: str, w: widgets.ValueWidget, value: Any) -> Any:
        if key == "view_layer":
            return int(value)  # checked against the selected run's map in _redraw
        values = [v for _, v in w.options] if w.options and isinstance(w.options[0], tuple) \
            else list(w.options)
        for v in values:
            if isinstance(v, float) and isinstance(value, (int, float)) and _close(v, value):
                return v
            if v == value:
                return v
        raise ValueError(f"{key}={value!r} is not in the sweep; choose one of {values}")

    # ---- redraw

    def _redraw(self, view_layer: int | None = None) -> str:
        sel = self.selection
        anchored = sel["method"] == "anchor"
        self.lambda_w.disabled = not anchored
        self.layer_w.disabled = not anchored
        cond = self._condition()
        if cond.empty:
            raise ValueError(f"the sweep has no run at artefact strength "
                             f"{sel['artifact_strength']:g} with teacher visibility "
                             f"{sel['teacher_visibility']:g}")
        run_id = select_run(cond, method=sel["method"], lambda_=sel["lambda_"] if anchored else None,
                            layers=sel["layer"] if anchored else None, seed=sel["seed"])
        naive_id = None
        if sel["method"] != "naive" and (cond["method"] == "naive").any():
            try:
                naive_id = select_run(cond, method="naive", seed=sel["seed"])
            except ValueError:
                naive_id = None
        self.run_id = run_id
        row = cond[cond["run_id"] == run_id].iloc[0]
        label = method_label(row["method"], row["anchor_lambda"], row["anchor_layers"])
        t0 = time.perf_counter()
        self._update_drift(run_id, naive_id, label)
        t1 = time.perf_counter()
        self._update_umap(run_id, label, view_layer)
        t2 = time.perf_counter()
        self._update_accuracy(row, label)
        t3 = time.perf_counter()
        self._update_status(row, label)
        self.timings = {"drift": 1e3 * (t1 - t0), "umap": 1e3 * (t2 - t1),
                        "accuracy": 1e3 * (t3 - t2), "total": 1e3 * (t3 - t0)}
        for slot in self._slots.values():
            slot.refresh()
        logger.debug("explorer update %s: %s", run_id, self.timings)
        return run_id

    def _empty_drift(self) -> go.Figure:
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

    def _update_drift(self, run_id: str, naive_id: str | None, label: str) -> None:
        fig = self.figures["drift"]
        target = str(self.target_w.value)
        tsplit = f"target_test:{target}"
        source_dom = self._source_domain(run_id)
        with fig.batch_update():
            for tr in fig.data:
                who, dom, metric = tr.meta["who"], tr.meta["domain"], tr.meta["metric"]
                rid = run_id if who == "selected" else naive_id
                table = self._drift.get(rid) if rid is not None else None
                split = "source_test" if dom == "source" else tsplit
                if table is None or (who == "naive" and rid == run_id):
                    tr.x, tr.y, tr.visible = [], [], who == "selected"
                    continue
                x, y = drift_curve(table, metric, split)
                name = label if who == "selected" else METHOD_NAMES["naive"]
                where = f"source ({source_dom})" if dom == "source" else f"target ({target})"
                tr.x, tr.y, tr.visible = x, y, True
                tr.name = f"{name} · {where}"
                tr.hovertemplate = (f"{name}<br>{where}<br>layer %{{x}}<br>%{{y:.5g}}"
                                    "<extra></extra>")
            # short lines: the panel may be a third of the row wide
            fig.layout.title.text = (f"Drift per layer vs naive W2S<br><sup>{label}, seed "
                                     f"{self.seed_w.value}{self._condition_caption()}<br>"
                                     + ("scored only (a verdict-only seed): no drift"
                                        if run_id in self._scores_only else
                                        f"solid = source, dashed = target {target}") + "</sup>")

    def _source_domain(self, run_id: str) -> str:
        table = self._drift.get(run_id)
        if table is not None and "domain" in table.columns:
            d = table.loc[table["split"] == "source_test", "domain"]
            if len(d):
                return str(d.iloc[0])
        return "source"

    def _empty_umap(self) -> go.Figure:
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

    def _update_umap(self, run_id: str, label: str, view_layer: int | None) -> None:
        fig = self.figures["umap"]
        proj = self._load_projection(run_id)
        if proj is None:
            with fig.batch_update():
                for tr in fig.data:
                    tr.x, tr.y = [], []
                fig.layout.title.text = (
                    f"{label}: scored only (a verdict-only seed): no hidden states, no map"
                    if run_id in self._scores_only else
                    f"{label}: this run has no projection.parquet")
            return
        layers = sorted(int(v) for v in proj["layer"].unique())
        want = view_layer if view_layer is not None else self.view_layer_w.value
        if view_layer is not None and view_layer not in layers:
            raise ValueError(f"view_layer={view_layer!r} has no map in run {run_id}; "
                             f"choose one of {layers}")
        layer = want if want in layers else layers[-1]
        if list(self.view_layer_w.options) != layers or self.view_layer_w.value != layer:
            self._silent = True
            try:
                self.view_layer_w.options = layers
                self.view_layer_w.value = layer
            finally:
                self._silent = False
        groups = umap_groups(proj, layer, self.color_by_w.value, self.target_w.value)
        groups = [{**g, "reference": subsample(g["reference"], self.max_points, 0),
                   "student": subsample(g["student"], self.max_points, 0)}
                  for g in groups[:2]]
        mx, my = umap_movement(groups, self.n_lines, seed=0)
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
                                     f"{self.seed_w.value}<br><sup>faint circles = reference, "
                                     "diamonds = student, lines = movement</sup>")

    def _empty_accuracy(self) -> go.Figure:
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

    def _update_accuracy(self, row: pd.Series, label: str) -> None:
        fig = self.figures["accuracy"]
        summary = self._summary()
        target = str(self.target_w.value)
        col_ood, _ = target_column(self.results, target)
        src = str(row["source"])
        with fig.batch_update():
            for tr in fig.data:
                col = "acc_id" if tr.meta["column"] == "acc_id" else col_ood
                part = summary[summary["column"] == col]
                arrays = bar_arrays(part, 100.0)
                tr.x, tr.y, tr.customdata = arrays["x"], arrays["y"], arrays["customdata"]
                tr.error_y = arrays["error_y"]
                chosen = np.array([lab == label for lab in arrays["x"]])
                tr.marker.opacity = np.where(chosen, 1.0, 0.4)
                tr.marker.line = {"width": np.where(chosen, 2.5, 0.0), "color": "black"}
                tr.name = (f"ID: {src} test split" if col == "acc_id"
                           else f"OOD: target {target}")
            lo = np.nanmin(summary[["lo", "mean"]].to_numpy(float)) * 100
            fig.layout.yaxis.range = [50.0 if lo >= 52 else max(0.0, math.floor(lo - 5)),
                                      min(100.0, math.ceil(np.nanmax(summary["hi"]) * 100 + 3))]
            cond = self._condition_caption()
            fig.layout.title.text = (f"Pairwise accuracy<br><sup>outlined: {label}{cond}<br>"
                                     f"{interval_caption(summary)}</sup>")

    @property
    def status_text(self) -> str:
        """The status line as plain text (no markup), for printing."""
        return _plain(self.status.value)

    @staticmethod
    def _score_parts(row: pd.Series, target: str | None) -> list[str]:
        """The scores of the status line, points vs the teacher. With a target selected and
        its own ``aog_<target>`` column stored, AOG is that target's (the pooled AOG can hide
        a target where the student is below its teacher) and the pooled AOG and NTS (which is
        computed from it) follow as "over all targets"; else WRG, AOG and NTS pooled."""

        def fmt(name: str, v: Any) -> str | None:
            ok = v is not None and not pd.isna(v) and np.isfinite(float(v))
            return f"{name} {100 * float(v):+.1f}" if ok else None

        own = fmt(f"AOG {_escape(str(target))}", row.get(f"aog_{target}")) if target else None
        if own is None:  # no target selected, or runs stored before per-target AOG
            txt = ", ".join(t for t in (fmt(k.upper(), row.get(k)) for k in ("wrg", "aog", "nts"))
                            if t)
            return [txt + " points vs teacher"] if txt else []
        first = ", ".join(t for t in (fmt("WRG", row.get("wrg")), own) if t)
        pooled = ", ".join(t for t in (fmt("AOG", row.get("aog")), fmt("NTS", row.get("nts")))
                           if t)
        return [first + " points vs teacher"] + (["over all targets: " + pooled] if pooled else [])

    def _update_status(self, row: pd.Series, label: str) -> None:
        # every value from the sweep (label, run id, target name) is escaped: a name with
        # "<" or "&" shows as written and never becomes markup
        target = str(self.target_w.value)
        parts = [f"<b>{_escape(label)}</b>, seed {_escape(str(row['seed']))} — run "
                 f"<code>{_escape(str(row['run_id']))}</code>"]
        if self._several_visibilities():
            parts.append(f"teacher read the marker on {row['teacher_visibility']:.0%} of the "
                         "marked source pairs")
        acc = [("ID", row.get("acc_id")),
               ("ID on marked pairs the teacher could not read", row.get("acc_id_hidden")),
               (f"OOD {_escape(target)}", row.get(f"acc_{target}"))]
        parts.append(", ".join(f"{k} {100 * v:.1f}%" for k, v in acc
                               if v is not None and np.isfinite(v)))
        parts.extend(self._score_parts(row, target))
        if not all(slot.live for slot in self._slots.values()):
            parts.append("<i>figures redrawn whole: install anywidget for in-place updates</i>")
        self.status.value = " | ".join(parts)


# --------------------------------------------------------------------------- launcher


def _base_value(base: Any, section: str | None, key: str, default: Any) -> Any:
    """A value of a RunConfig-like object or nested mapping, or ``default``."""
    node = base
    for part in ([section] if section else []) + [key]:
        if isinstance(node, Mapping):
            node = node.get(part)
        else:
            node = getattr(node, part, None)
        if node is None:
            return default
    return node


class RunLauncher:
    """A form that trains one configuration with ``anchorviz.pipeline.sweep.run``.

    Args:
        config_or_path: a ``RunConfig``, a config mapping, or a YAML config file path; the
            form's method / lambda / layers / seed override it.
        out_dir: the run store (sweep-style directory) the runs go to.

    The Run button calls :meth:`launch`: the run happens in the kernel (``tqdm.auto`` bars of
    training show in the output area), the status line (``status``, HTML with the values
    escaped; ``status_text`` as plain text) then names the run directories.
    Errors are shown in the output area and kept in ``last_error``; they never reach the
    kernel.
    """

    def __init__(self, config_or_path: Any, out_dir: PathLike = "runs/notebook") -> None:
        self._base = config_or_path
        base = self._read_base(config_or_path)
        methods = ["naive", "confidence", "anchor"]
        method = _base_value(base, "method", "name", "anchor")
        self.method_w = widgets.Dropdown(options=methods,
                                         value=method if method in methods else "anchor",
                                         description="method")
        lam = float(_base_value(base, "method", "anchor_lambda", 0.0) or 0.1)
        self.lambda_w = widgets.FloatLogSlider(value=lam, base=10, min=-6, max=2, step=0.25,
                                               description="λ", readout_format=".2g")
        self.layers_w = widgets.Combobox(value=str(_base_value(base, "method", "anchor_layers", "last")),
                                         options=["last", "middle", "all"],
                                         description="layers", ensure_option=False,
                                         placeholder="last | middle | all | 3,5")
        self.seed_w = widgets.BoundedIntText(value=int(_base_value(base, None, "seed", 0)),
                                             min=0, max=2**31 - 1, description="seed")
        self.out_dir_w = widgets.Text(value=str(out_dir), description="out dir")
        self.button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="idle",
                                            bar_style="")
        self.status = widgets.HTML()
        self.output = widgets.Output()
        self.result: Any = None
        self.last_error: BaseException | None = None
        self.button.on_click(lambda _button: self.launch())
        self.method_w.observe(lambda _c: self._sync(), names="value")
        self._sync()
        self.widget = widgets.VBox([
            _wrap_row([self.method_w, self.lambda_w, self.layers_w]),
            _wrap_row([self.seed_w, self.out_dir_w, self.button]),
            self.progress, self.status, self.output],
            layout=widgets.Layout(width="100%", max_width=_MAX_WIDTH))

    @staticmethod
    def _read_base(base: Any) -> Any:
        if isinstance(base, (str, Path)):
            import yaml

            path = Path(base)
            if not path.is_file():
                raise FileNotFoundError(f"config file {path} does not exist")
            return yaml.safe_load(path.read_text()) or {}
        return base

    @property
    def status_text(self) -> str:
        """The status line as plain text (no markup), for printing."""
        return _plain(self.status.value)

    @property
    def picture_text(self) -> str:
        """The form's controls and values in one line, for a page that cannot show widgets."""
        anchored = self.method_w.value == "anchor"
        lam = f"{self.lambda_w.value:.2g}" if anchored else "off (not anchor)"
        layers = self.layers_w.value if anchored else "off (not anchor)"
        return (f"method {self.method_w.value}, λ {lam}, layers {layers}, "
                f"seed {self.seed_w.value}, out dir {self.out_dir_w.value}, and a Run button "
                "that trains this configuration (run the notebook to use it).")

    def _sync(self) -> None:
        anchored = self.method_w.value == "anchor"
        self.lambda_w.disabled = not anchored
        self.layers_w.disabled = not anchored

    def overrides(self) -> dict[str, Any]:
        """The form's values as dotted ``anchorviz.config.with_overrides`` keys."""
        anchored = self.method_w.value == "anchor"
        return {"method.name": self.method_w.value,
                "method.anchor_lambda": float(self.lambda_w.value) if anchored else 0.0,
                "method.anchor_layers": (self.layers_w.value.strip() or "last") if anchored
                else "last",
                "seed": int(self.seed_w.value)}

    def config(self) -> Any:
        """The RunConfig the Run button would train (base config + the form's values)."""
        from anchorviz import config as config_mod  # looked up here: tests patch its functions

        base = self._base
        if isinstance(base, (str, Path)):
            cfg = config_mod.load_config(base)
        elif isinstance(base, Mapping):
            cfg = config_mod.config_from_dict(dict(base))
        else:
            cfg = base
        return config_mod.with_overrides(cfg, **self.overrides())

    def launch(self) -> Any:
        """Train the form's configuration now; returns ``anchorviz.pipeline.sweep.run``'s result, or None
        when it failed (the error is shown and kept in ``last_error``)."""
        self.button.disabled = True
        self.last_error, self.result = None, None
        self.progress.value, self.progress.bar_style = 0, "info"
        self.progress.description = "running"
        self.status.value = "running " + _escape(", ".join(f"{k}={v}" for k, v in
                                                           self.overrides().items()))
        t0 = time.perf_counter()
        try:
            with self.output:
                from anchorviz.pipeline import sweep as sweep_mod  # patched by tests

                cfg = self.config()
                self.result = sweep_mod.run(cfg, self.out_dir_w.value)
        except Exception as exc:  # shown in the widget, never raised into the kernel
            self.last_error = exc
            self.progress.bar_style, self.progress.description = "danger", "failed"
            self.status.value = f"<b>failed</b>: {type(exc).__name__}: {_escape(str(exc))}"
            self.output.append_stderr(traceback.format_exc())
            logger.warning("run failed: %s: %s", type(exc).__name__, exc)
            return None
        finally:
            self.button.disabled = False
        self.progress.value, self.progress.bar_style = 1, "success"
        self.progress.description = "done"
        self.status.value = (f"finished in {time.perf_counter() - t0:.0f} s: "
                             + self._describe(self.result))
        return self.result

    @staticmethod
    def _describe(result: Any) -> str:
        items = result if isinstance(result, (list, tuple)) else [result]
        parts = []
        for r in items:
            run_dir = getattr(r, "run_dir", r)
            kind = getattr(r, "kind", "")
            reused = " (already finished, reused)" if getattr(r, "computed", True) is False else ""
            parts.append(f"{_escape(str(kind))} <code>{_escape(str(run_dir))}</code>"
                         f"{reused}".strip())
        return "; ".join(parts)
