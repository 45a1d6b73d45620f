"""Interactive explorers for JupyterLab: a sweep explorer and a small run launcher.

:class:`SweepExplorer` shows one finished sweep in three linked panels -- drift per layer, the
shared reference / student map and the accuracies -- driven by a lambda slider, a teacher-
visibility slider (when the sweep holds several ``teacher_visibility`` values: how many of the
planted markers the weak teacher could read, the hidden-cue scenario's knob) and method, layer,
target-domain, seed (and artefact-strength) selectors. It is the view of a selection model,
`anchorviz.viz.selection.ExplorerModel` (which runs the folder holds, what each control may
choose, which run a selection picks; no widgets), drawn by `anchorviz.viz.explorer_panels`. A
callback only looks tables up and moves numbers into ``go.FigureWidget`` traces inside
``batch_update``: nothing is trained, computed or re-read from disk.
``explorer.update(lambda_=0.1, layer="middle")`` does programmatically what the controls do.

:class:`RunLauncher` is a form (method, lambda, layers, seed) with a Run button that calls
``anchorviz.pipeline.sweep.run`` and reports the run directories (or the error) in its output
area.

The layout keeps the controls in view of the panels they change: a column of controls beside a
grid of compact panels (at 1280 x 800 the controls, the drift and the accuracy panels fit the
screen together; the map follows in the grid); in a narrow output area the grid wraps its
panels under each other instead of cutting them off, the figures autosize (no fixed width),
and every colour comes from the Okabe-Ito palette of `anchorviz.viz.common`. Values shown in
the HTML status lines (run ids, paths, error messages) are HTML-escaped; ``status_text`` gives
the same line as plain text for printing.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping
from html import escape as _escape
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
import yaml

from anchorviz import config as config_mod  # module attributes: tests patch its functions
from anchorviz.viz import explorer_panels as panels
from anchorviz.viz.common import PathLike
from anchorviz.viz.selection import SELECTION_KEYS, ExplorerModel
from anchorviz.viz.slots import MAX_WIDTH, FigureSlot, plain_text, wrap_row

logger = logging.getLogger(__name__)

__all__ = ["RunLauncher", "SweepExplorer"]

#: the controls column beside the panels, and the basis each panel of the grid grows from (two
#: side by side beside the controls at 1280 px; under each other when narrower)
_CONTROLS_WIDTH = "330px"
# plotly draws a panel 700 px wide before it can measure its box, so a narrower grid cut it
# off (tests/test_browser.py: 1280 px with the file browser open); below 330 + 700 px of
# output area the grid goes under the controls
_PANEL_BASIS = "700px"


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
        model: the selection model (`anchorviz.viz.selection.ExplorerModel`).
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
        self.model = ExplorerModel(sweep_dir, preload_projections=preload_projections)
        self.sweep_dir = self.model.sweep_dir
        self.results = self.model.results
        self.max_points = max_points
        self.n_lines = n_lines
        self._silent = False
        self.timings: dict[str, float] = {}
        self.run_id: str | None = None
        self._build_controls()
        panel = {"flex": f"1 1 {_PANEL_BASIS}"}  # side by side, or under each other
        self._slots = {"drift": FigureSlot(panels.empty_drift(), **panel),
                       "accuracy": FigureSlot(panels.empty_accuracy(), **panel),
                       "umap": FigureSlot(panels.empty_umap(), **panel)}
        self.figures: dict[str, go.Figure] = {k: s.figure for k, s in self._slots.items()}
        self.widget = self._layout()
        self._redraw()

    # ---- controls

    def _build_controls(self) -> None:
        opts, start = self.model.options(), self.model.start()
        wide = {"width": "100%"}
        self.method_w = widgets.Dropdown(options=opts["method"], value=start["method"],
                                         description="method", layout=wide)
        self.lambda_w = widgets.SelectionSlider(
            options=opts["lambda_"], value=start["lambda_"], description="λ (log steps)",
            continuous_update=True, style={"description_width": "initial"}, layout=wide)
        self.layer_w = widgets.Dropdown(options=opts["layer"], value=start["layer"],
                                        description="anchored", layout=wide)
        self.target_w = widgets.Dropdown(options=opts["target"], value=start["target"],
                                         description="target", layout=wide)
        self.seed_w = widgets.Dropdown(options=opts["seed"], value=start["seed"],
                                       description="seed", layout=wide)
        several = {k: len(opts[k]) > 1 for k in ("artifact_strength", "teacher_visibility")}
        self.strength_w = widgets.Dropdown(
            options=opts["artifact_strength"], value=start["artifact_strength"],
            description="artefact",
            layout={**wide, "display": None if several["artifact_strength"] else "none"})
        # the hidden-cue knob: on what fraction of the marked source pairs the weak teacher
        # could read the marker (1 = every one); shown only when the sweep holds several values
        self.visibility_w = widgets.SelectionSlider(
            options=opts["teacher_visibility"], value=start["teacher_visibility"],
            description="teacher reads marker", continuous_update=True,
            style={"description_width": "initial"},
            layout={**wide, "display": None if several["teacher_visibility"] else "none"})
        self.view_layer_w = widgets.Dropdown(options=[], description="map layer", layout=wide)
        # button_width auto: the buttons are as wide as their labels, not a fixed 148 px each
        self.color_by_w = widgets.ToggleButtons(
            options=opts["color_by"], value=start["color_by"], description="colour by",
            style={"button_width": "auto", "description_width": "initial"})
        self.status = widgets.HTML()  # its text wraps at the width of the output area
        for w in self._controls().values():
            w.observe(self._on_change, names="value")

    def _controls(self) -> dict[str, widgets.ValueWidget]:
        return {"method": self.method_w, "lambda_": self.lambda_w, "layer": self.layer_w,
                "target": self.target_w, "seed": self.seed_w,
                "artifact_strength": self.strength_w, "teacher_visibility": self.visibility_w,
                "view_layer": self.view_layer_w, "color_by": self.color_by_w}

    def _layout(self) -> widgets.VBox:
        # the status line, then a column of controls beside a grid of the three panels (drift
        # and accuracy side by side, the map after them): a slider move shows its effect next
        # to the slider at 1280 x 800. Narrow, the grid goes under the controls and wraps its
        # panels under each other instead of cutting them off
        controls = widgets.VBox(
            [self.method_w, self.lambda_w, self.layer_w, self.visibility_w, self.target_w,
             self.seed_w, self.strength_w, self.view_layer_w, self.color_by_w],
            layout=widgets.Layout(flex=f"0 1 {_CONTROLS_WIDTH}", min_width="0"))
        grid = wrap_row([self._slots[k].box for k in ("drift", "accuracy", "umap")],
                        align_items="flex-start", flex=f"1 1 {_PANEL_BASIS}", min_width="0")
        main = wrap_row([controls, grid], align_items="flex-start")
        return widgets.VBox([self.status, main],
                            layout=widgets.Layout(width="100%", max_width=MAX_WIDTH))

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
        unknown = sorted(set(selection) - set(SELECTION_KEYS))
        if unknown:
            raise ValueError(f"unknown selection key(s) {unknown}; use {list(SELECTION_KEYS)}")
        controls = self._controls()
        resolved = {}
        for key, value in selection.items():
            if value is None:
                continue
            resolved[key] = (int(value) if key == "view_layer"  # checked in _redraw
                             else self.model.option_value(key, list(controls[key].options),
                                                          value))
        self._silent = True
        try:
            for key in [k for k in SELECTION_KEYS if k in resolved and k != "view_layer"]:
                controls[key].value = resolved[key]
        finally:
            self._silent = False
        return self._redraw(view_layer=resolved.get("view_layer"))

    # ---- redraw

    def _redraw(self, view_layer: int | None = None) -> str:
        sel = self.selection
        anchored = sel["method"] == "anchor"
        self.lambda_w.disabled = not anchored
        self.layer_w.disabled = not anchored
        pick = self.model.pick(sel)
        self.run_id = pick.run_id
        target, caption = str(sel["target"]), self._condition_caption()
        t0 = time.perf_counter()
        panels.update_drift(self.figures["drift"], self.model, pick, sel["seed"], target, caption)
        t1 = time.perf_counter()
        self._update_umap(pick, view_layer)
        t2 = time.perf_counter()
        summary = self.model.summary(sel["artifact_strength"], sel["teacher_visibility"], target)
        panels.update_accuracy(self.figures["accuracy"], summary, self.results, pick, target,
                               caption)
        t3 = time.perf_counter()
        self.status.value = panels.status_html(
            pick, target, self._several_visibilities(),
            all(slot.live for slot in self._slots.values()))
        self.timings = {"drift": 1e3 * (t1 - t0), "umap": 1e3 * (t2 - t1),
                        "accuracy": 1e3 * (t3 - t2), "total": 1e3 * (t3 - t0)}
        for slot in self._slots.values():
            slot.refresh()
        logger.debug("explorer update %s: %s", pick.run_id, self.timings)
        return pick.run_id

    def _update_umap(self, pick, view_layer: int | None) -> None:
        """The map of the picked run at ``view_layer`` (None: the map-layer control's, else
        its last layer); the map-layer control offers the layers this run has a map of."""
        proj = self.model.projection(pick.run_id)
        if proj is None:
            panels.clear_umap(self.figures["umap"], self.model, pick)
            return
        layers = sorted(int(v) for v in proj["layer"].unique())
        want = view_layer if view_layer is not None else self.view_layer_w.value
        if view_layer is not None and view_layer not in layers:
            raise ValueError(f"view_layer={view_layer!r} has no map in run {pick.run_id}; "
                             f"choose one of {layers}")
        layer = want if want in layers else layers[-1]
        if list(self.view_layer_w.options) != layers or self.view_layer_w.value != layer:
            self._silent = True
            try:
                self.view_layer_w.options = layers
                self.view_layer_w.value = layer
            finally:
                self._silent = False
        panels.update_umap(self.figures["umap"], proj, layer, pick.label, self.seed_w.value,
                           self.color_by_w.value, self.target_w.value, self.max_points,
                           self.n_lines)

    @property
    def status_text(self) -> str:
        """The status line as plain text (no markup), for printing."""
        return plain_text(self.status.value)


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
            wrap_row([self.method_w, self.lambda_w, self.layers_w]),
            wrap_row([self.seed_w, self.out_dir_w, self.button]),
            self.progress, self.status, self.output],
            layout=widgets.Layout(width="100%", max_width=MAX_WIDTH))

    @staticmethod
    def _read_base(base: Any) -> Any:
        if isinstance(base, (str, Path)):
            path = Path(base)
            if not path.is_file():
                raise FileNotFoundError(f"config file {path} does not exist")
            return yaml.safe_load(path.read_text()) or {}
        return base

    @property
    def status_text(self) -> str:
        """The status line as plain text (no markup), for printing."""
        return plain_text(self.status.value)

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
                # torch: the explorer reads stored runs; only the Run button trains
                from anchorviz.pipeline import sweep as sweep_mod

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
