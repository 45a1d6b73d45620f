"""The real-data story: the cue audit, each cue's slices per model and drift per target, read from
a story folder (`anchorviz.analysis.story`), and :class:`StoryExplorer`, their linked view.

`export_story` writes a story folder from finished sweep folders (read as every view reads
them, `anchorviz.viz.common.load_results`). Figures are pure functions of a `Story`:

- :func:`cue_audit_figure`: per dataset and cue, where the cue picks a side, how often that side
  is the chosen response (the preference shift in the data itself, before any model).
- :func:`slice_figure`: for one source, split and cue, the follow rate where the cue misleads
  (its side is the rejected one) and the accuracy where it agrees, for the weak teacher, the
  gold ceiling, the naive student and ANCHOR at one lambda; every seed as a point, the mean
  with its 95% t-interval over seeds.
- :func:`target_drift_figure`: the drift of the naive, ANCHOR and ceiling students from their
  frozen pretrained reference at one layer, per evaluated split, with each split's accuracy.

:class:`StoryExplorer` drives the last two with the controls the other notebooks use: a lambda
slider, a layer slider, and source / split / cue selectors; ``update(lambda_=3, layer=4)``
does programmatically what the controls do. It follows the explorer contract of
`anchorviz.viz.widgets` (``widget``, ``figures``, ``status_text``), so a stored notebook shows a
static picture of it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from html import escape as _escape
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from anchorviz.analysis.story import (
    DRIFT_COLUMNS,
    METHODS,
    MIN_SLICE,
    RESULT_COLUMNS,
    SLICE_COLUMNS,
    STORY_FILES,
    STORY_FORMAT,
    Story,
    StoryError,
    drift_summary,
    load_story,
    seal_story,
    slice_contrast,
    slice_summary,
)
from anchorviz.paths import write_atomic
from anchorviz.viz.common import (
    BOTTOM_LEGEND,
    METHOD_COLORS,
    OKABE_ITO,
    TEMPLATE,
    figure_title,
    load_results,
)
from anchorviz.viz.export import wrap_html
from anchorviz.viz.refusal import is_refusal_story, refusal_report_parts
from anchorviz.viz.selection import lambda_label
from anchorviz.viz.slots import FigureSlot, plain_text, wrap_row

__all__ = ["StoryExplorer", "cue_audit_figure", "export_story", "slice_figure", "split_label",
           "target_drift_figure", "write_story_report"]

logger = logging.getLogger(__name__)

_CUE_COLORS = {"length": OKABE_ITO["blue"], "refusal": OKABE_ITO["vermillion"],
               "format": OKABE_ITO["bluish_green"]}
_ANCHOR_COLOR = OKABE_ITO["blue"]
_COLORS = {**METHOD_COLORS, "anchor": _ANCHOR_COLOR}
_HEIGHT = 480


# --------------------------------------------------------------------------- export


def _cues_rows(label: str, run_id: str, metrics: dict) -> list[dict]:
    rows = []
    for split, block in (metrics.get("cues") or {}).items():
        if split == "ood":  # the pooled targets: each target is its own split
            continue
        for cue, b in block.items():
            if not isinstance(b, dict) or not b.get("n"):
                continue
            rows.append({"store": label, "run_id": run_id, "split": split, "cue": cue,
                         "n": int(b["n"]), "n_agree": int(b["agree"]["n"]),
                         "n_disagree": int(b["disagree"]["n"]),
                         "acc_agree": b["agree"]["point"], "acc_disagree": b["disagree"]["point"],
                         "follow": b["follow"]["point"]})
    return rows


def _store_tables(label: str, sweep_dir: Path) -> tuple[pd.DataFrame, list[dict], list[pd.DataFrame]]:
    try:
        results = load_results(sweep_dir)
    except (FileNotFoundError, ValueError) as err:
        raise StoryError(f"store {label!r}: {err}") from err
    cols = [c for c in results.columns if c in RESULT_COLUMNS or c.startswith(("acc_", "aog_"))]
    res = results[cols].copy()
    res.insert(0, "store", label)
    slices: list[dict] = []
    drift: list[pd.DataFrame] = []
    for run_id in results["run_id"]:
        run = sweep_dir / "runs" / run_id
        mpath = run / "metrics.json"
        try:
            metrics = json.loads(mpath.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise StoryError(f"{mpath}: unreadable ({err}); expected the run's metrics.json") from err
        slices += _cues_rows(label, run_id, metrics)
        dpath = run / "drift.parquet"
        if dpath.is_file():
            d = pd.read_parquet(dpath)
            keep = [c for c in DRIFT_COLUMNS if c in d.columns]
            d = d[keep].copy()
            d.insert(0, "run_id", run_id)
            d.insert(0, "store", label)
            drift.append(d)
    return res, slices, drift


def export_story(stores: Mapping[str, str | Path], out: str | Path, *,
                 audit: pd.DataFrame | None = None, note: str = "") -> Path:
    """Write the story folder ``out`` from sweep folders ``stores`` (label -> folder).

    ``audit``: a data-audit table (`anchorviz.analysis.cues.cue_agreement` rows with a
    ``dataset`` column) to keep beside the runs. Runs without a ``cues`` block in their
    metrics (made before it existed) are exported without slices: compute it first with
    `anchorviz.pipeline.results.run_cues`. Returns ``out``.

    The folder's ``story.json`` records the sha256 of every file (`seal_story`), and its
    numbers are range-checked before it is sealed: `load_story` refuses a file edited later.
    To accept an edit, export again (or call `seal_story` on the folder).

    Raises:
        StoryError: no store, a store that is not a finished sweep folder, an unreadable run,
            a value out of its range.
    """
    if not stores:
        raise StoryError("export_story: no store given; expected {label: sweep folder}")
    out = Path(out)
    results, slices, drift, meta = [], [], [], {}
    for label, folder in stores.items():
        res, sl, dr = _store_tables(str(label), Path(folder))
        if not sl:
            logger.warning("store %r: no run holds a cues block (older runs: run_cues first)", label)
        results.append(res)
        slices += sl
        drift += dr
        meta[str(label)] = {
            "source": str(res["source"].iloc[0]) if "source" in res and len(res) else None,
            "targets": sorted({r["split"].split(":", 1)[1] for r in sl
                               if r["split"].startswith("target_test:")}),
            "runs": int(len(res))}
    out.mkdir(parents=True, exist_ok=True)
    res_all = pd.concat(results, ignore_index=True)
    sl_all = pd.DataFrame(slices, columns=list(SLICE_COLUMNS))
    dr_all = (pd.concat(drift, ignore_index=True) if drift
              else pd.DataFrame(columns=list(DRIFT_COLUMNS)))
    for name, table in (("results.csv", res_all), ("slices.csv", sl_all), ("drift.csv", dr_all)):
        _write_csv(out / name, table)
    files = list(STORY_FILES)
    if audit is not None:
        _write_csv(out / "audit.csv", audit)
        files.append("audit.csv")
    # range-checked, then each file's sha256 recorded: a later edit is refused by load_story
    return seal_story(out, {"format": STORY_FORMAT, "stores": meta, "note": note,
                            "files": files})


def _write_csv(path: Path, table: pd.DataFrame) -> None:
    write_atomic(path, lambda p: table.to_csv(p, index=False, float_format="%.6g"))


# --------------------------------------------------------------------------- figures


def split_label(split: str) -> str:
    """``source_test`` -> ``source test``; ``target_test:realdata-pandalm`` -> ``pandalm``."""
    if split == "source_test":
        return "source test"
    name = split.split(":", 1)[-1]
    return name.removeprefix("realdata-")


def _method_name(method: str, anchor_lambda: float) -> str:
    return {"teacher": "weak teacher", "ceiling": "gold ceiling", "naive": "naive student",
            "anchor": f"ANCHOR λ={lambda_label(anchor_lambda)}"}[method]


def _pt(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.1f}"


def _interval_text(d: Mapping[str, float]) -> str:
    if not d.get("seeds"):
        return "n/a"
    if d["seeds"] < 2:
        return f"{_pt(d['mean'])} (one seed)"
    return f"{_pt(d['mean'])} [{_pt(d['lo'])}, {_pt(d['hi'])}]"


def cue_audit_figure(audit: pd.DataFrame | Story) -> go.Figure:
    """Where each cue picks a side, how often that side is the human-chosen response (%), per
    dataset (x) and cue (colour), with the stored 95% intervals; 50 = the cue says nothing about
    the label. A point from fewer than 20 pairs is drawn hollow. Pure function of the audit
    table (``dataset``, ``cue``, ``n_side``, ``chosen_share`` and its ``_lo`` / ``_hi``)."""
    table = audit.audit if isinstance(audit, Story) else audit
    if table is None or table.empty:
        raise StoryError("no audit table in this story (export it with audit=...)")
    fig = go.Figure()
    datasets = list(dict.fromkeys(table["dataset"]))
    labels = [d.removeprefix("realdata-") for d in datasets]
    cues = list(dict.fromkeys(table["cue"]))
    for cue in cues:
        t = table[table["cue"] == cue].set_index("dataset").reindex(datasets)
        y = 100 * t["chosen_share"].to_numpy(float)
        lo, hi = 100 * t["chosen_share_lo"].to_numpy(float), 100 * t["chosen_share_hi"].to_numpy(float)
        n = t["n_side"].fillna(0).to_numpy(int)
        small = n < 20
        fig.add_trace(go.Scatter(
            x=labels, y=y, mode="markers", name=cue,
            offsetgroup=cue, marker={"color": _CUE_COLORS.get(cue, OKABE_ITO["grey"]), "size": 11,
                                     "symbol": ["circle-open" if s else "circle" for s in small],
                                     "line": {"width": 2}},
            error_y={"type": "data", "symmetric": False, "array": hi - y, "arrayminus": y - lo},
            customdata=np.stack([n, lo, hi], axis=1),
            hovertemplate=(f"{cue}<br>%{{x}}: the cue's side is chosen in %{{y:.1f}}%<br>"
                           "interval %{customdata[1]:.1f} to %{customdata[2]:.1f}<br>"
                           "%{customdata[0]} pairs where it picks a side<extra></extra>")))
    fig.add_hline(y=50, line={"dash": "dot", "color": "grey", "width": 1})
    fig.update_layout(
        template=TEMPLATE, height=_HEIGHT, scattermode="group",
        title=figure_title("Where a cue picks a side, is that side the chosen one?",
                           "% of the pairs where the cue picks a side; 95% interval over prompts; "
                           "hollow: fewer than 20 pairs"),
        yaxis={"title": "cue's side is chosen (%)", "range": [0, 100]},
        xaxis={"title": "dataset"}, legend={**BOTTOM_LEGEND, "title": {"text": "cue"}})
    return fig


def slice_figure(story: Story, store: str, split: str, cue: str, anchor_lambda: float, *,
                 summary: pd.DataFrame | None = None, contrast: dict | None = None
                 ) -> go.Figure:
    """Two panels for one source (``store``), split and cue: the follow rate on the disagree
    slice (the cue's side is the rejected response: following it is an error) and the accuracy
    on the agree slice, per model; each seed a small point, the mean a large one with its 95%
    t-interval over seeds. The subtitle gives the paired differences (naive minus ceiling:
    inherited from weak labels when above 0; ANCHOR minus naive). ``summary`` / ``contrast``:
    `slice_summary` / `slice_contrast` of the same selection, when the caller has them."""
    summ = summary if summary is not None else slice_summary(story, store, split, cue,
                                                              anchor_lambda)
    if not summ["seeds"].any():
        raise StoryError(f"store {store!r} has no {cue!r} slice on {split!r}; splits: "
                         f"{sorted(story.slices['split'].unique())}")
    con = contrast if contrast is not None else slice_contrast(story, store, split, cue,
                                                               anchor_lambda)
    names = [_method_name(m, anchor_lambda) for m in summ["method"]]
    # titles in short lines: the explorer's panel may be 440 px wide, two subplots in it
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=[
        f"follows the cue<br>where it misleads<br>(≥{int(summ['n_disagree_min'].min())} "
        "pairs per seed)",
        f"accuracy<br>where the cue agrees<br>(≥{int(summ['n_agree_min'].min())} pairs per "
        "seed)"])
    fig.update_annotations(font_size=12)
    for col, key in ((1, "follow"), (2, "agree")):
        for r, name in zip(summ.itertuples(index=False), names):
            color = _COLORS[r.method]
            seeds = np.asarray(getattr(r, f"{key}_seeds"), float) * 100
            jitter = np.linspace(-0.18, 0.18, len(seeds)) if len(seeds) > 1 else np.zeros(1)
            fig.add_trace(go.Scatter(
                x=[names.index(name) + j for j in jitter[:len(seeds)]], y=seeds, mode="markers",
                marker={"color": color, "size": 6, "opacity": 0.45}, showlegend=False,
                legendgroup=r.method, customdata=np.asarray(r.seed_list)[:, None],
                hovertemplate=f"{name}, seed %{{customdata[0]}}: %{{y:.1f}}%<extra></extra>"),
                row=1, col=col)
            mean = 100 * getattr(r, key)
            lo, hi = 100 * getattr(r, f"{key}_lo"), 100 * getattr(r, f"{key}_hi")
            fig.add_trace(go.Scatter(
                x=[names.index(name)], y=[mean], mode="markers", name=name,
                marker={"color": color, "size": 13, "symbol": "diamond"},
                error_y={"type": "data", "symmetric": False,
                         "array": [hi - mean if math.isfinite(hi) else 0],
                         "arrayminus": [mean - lo if math.isfinite(lo) else 0]},
                legendgroup=r.method, showlegend=col == 1,
                hovertemplate=(f"{name}: mean %{{y:.1f}}% over {r.seeds} seeds<br>95% interval "
                               f"{lo:.1f} to {hi:.1f}<extra></extra>")), row=1, col=col)
    ticks = {"tickmode": "array", "tickvals": list(range(len(names))), "ticktext": names,
             "range": [-0.6, len(names) - 0.4]}
    fig.update_xaxes(**ticks)
    fig.update_yaxes(range=[0, 100], title_text="%", row=1, col=1)
    fig.update_yaxes(range=[0, 100], row=1, col=2)
    fig.add_hline(y=50, line={"dash": "dot", "color": "grey", "width": 1}, row="all", col="all")

    sub = (f"naive − ceiling {_interval_text(con['inherited'])}, ANCHOR − naive "
           f"{_interval_text(con['anchor'])} points (follow rate where it misleads, paired over "
           "seeds, 95% t-interval)")
    title = wrap_html(f"Cue '{cue}' on {split_label(split)} ({store} source)<br><sup>{sub}</sup>",
                       400, 17)  # lines that fit the narrowest panel
    lines = title.count("<br") + 1
    fig.update_layout(
        template=TEMPLATE, height=_HEIGHT + 16 * lines,
        title={"text": title, "x": 0.01, "xanchor": "left", "yref": "container", "y": 1.0,
               "yanchor": "top", "pad": {"t": 27}},  # room for the first line (export.py)
        legend=BOTTOM_LEGEND, margin={"t": 34 + 17 * lines + 52, "b": 90})
    return fig


def target_drift_figure(story: Story, store: str, layer: int, anchor_lambda: float,
                        metric: str = "cosine_centred_mean") -> go.Figure:
    """Drift from the frozen pretrained reference at ``layer`` per evaluated split (x), for the
    naive student, ANCHOR at ``anchor_lambda`` and the gold ceiling: bars of the mean over seeds
    with the 95% t-interval; hover gives each split's mean accuracy. ``metric``:
    ``cosine_centred_mean`` (default) or ``cka`` (similarity: 1 = no drift)."""
    d = drift_summary(story, store, layer, anchor_lambda, metric)
    fig = go.Figure()
    splits = sorted(d["split"].unique(), key=lambda s: (s != "source_test", s))
    for method in ("naive", "anchor", "ceiling"):
        t = d[d["method"] == method].set_index("split").reindex(splits)
        if t["drift"].isna().all():
            continue
        y = t["drift"].to_numpy(float)
        lo, hi = t["drift_lo"].to_numpy(float), t["drift_hi"].to_numpy(float)
        name = _method_name(method, anchor_lambda)
        fig.add_trace(go.Bar(
            x=[split_label(s) for s in splits], y=y, name=name,
            marker={"color": _COLORS[method]},
            error_y={"type": "data", "symmetric": False, "array": np.nan_to_num(hi - y),
                     "arrayminus": np.nan_to_num(y - lo)},
            customdata=np.stack([100 * t["accuracy"].to_numpy(float), t["seeds"].to_numpy(float)],
                                axis=1),
            hovertemplate=(f"{name}<br>%{{x}}: drift %{{y:.3f}}<br>accuracy %{{customdata[0]:.1f}}%"
                           " (mean over %{customdata[1]} seeds)<extra></extra>")))
    what = ("centred cosine distance (0 = unchanged)" if metric == "cosine_centred_mean"
            else "linear CKA (1 = unchanged)")
    fig.update_layout(
        template=TEMPLATE, height=_HEIGHT, barmode="group",
        title=figure_title(f"Drift from the pretrained student at layer {layer} ({store} source)",
                           f"{what}; mean over seeds with 95% t-interval"),
        yaxis={"title": "cosine drift" if metric == "cosine_centred_mean" else "CKA"},
        xaxis={"title": "evaluated split"}, legend=BOTTOM_LEGEND)
    return fig


_KEYS = ("store", "split", "cue", "lambda_", "layer")


class StoryExplorer:
    """Linked slice and drift panels over a story folder.

    Controls: source (``store``), evaluated split, cue, a lambda slider (ANCHOR's lambda; the
    naive, teacher and ceiling runs do not depend on it) and a layer slider (the drift panel's
    layer). ``update(**selection)`` sets any of them and redraws once; a value the story does
    not hold raises ``ValueError`` naming the choices. ``figures`` (``"slices"``, ``"drift"``)
    are updated in place; ``status_text`` says what is shown and the paired differences.
    """

    def __init__(self, story: Story) -> None:
        if not story.stores:
            raise StoryError(f"{story.folder}: the story holds no store")
        self.story = story
        first = story.stores[0]
        self.store_w = widgets.Dropdown(options=story.stores, value=first, description="source")
        self.split_w = widgets.Dropdown(description="split")
        self.cue_w = widgets.Dropdown(description="cue")
        self.lambda_w = widgets.SelectionSlider(
            options=[("0", 0.0)], description="λ (ANCHOR)", continuous_update=True,
            style={"description_width": "initial"})
        self.layer_w = widgets.SelectionSlider(options=[0], description="drift layer",
                                               continuous_update=True,
                                               style={"description_width": "initial"})
        self.status = widgets.HTML()
        self._silent = False
        self._fill_options(first)
        panel = {"flex": "1 1 440px"}
        self._slots = {"slices": FigureSlot(go.Figure(), **panel),
                       "drift": FigureSlot(go.Figure(), **panel)}
        self.figures = {k: s.figure for k, s in self._slots.items()}
        for w in (self.store_w, self.split_w, self.cue_w, self.lambda_w, self.layer_w):
            w.observe(self._on_change, names="value")
        self.widget = widgets.VBox(
            [self.status, wrap_row([self.store_w, self.split_w, self.cue_w, self.lambda_w,
                                     self.layer_w]),
             wrap_row([self._slots["slices"].box, self._slots["drift"].box],
                       align_items="flex-start")],
            layout=widgets.Layout(width="100%", max_width="1600px"))
        self._redraw()

    def _fill_options(self, store: str) -> None:
        s = self.story
        splits = ["source_test", *s.targets(store)]
        cues = sorted(s.slices[s.slices["store"] == store]["cue"].unique())
        lambdas = s.lambdas(store) or [0.0]
        layers = s.layers(store) or [0]
        self._silent = True
        try:
            self.split_w.options = [(split_label(x), x) for x in splits]
            self.split_w.value = splits[1] if len(splits) > 1 else splits[0]
            self.cue_w.options = cues
            self.cue_w.value = "length" if "length" in cues else cues[0]
            self.lambda_w.options = [(lambda_label(v), float(v)) for v in lambdas]
            self.lambda_w.value = float(lambdas[0])
            self.layer_w.options = layers
            self.layer_w.value = layers[-1]
        finally:
            self._silent = False

    @property
    def selection(self) -> dict[str, Any]:
        return {"store": self.store_w.value, "split": self.split_w.value, "cue": self.cue_w.value,
                "lambda_": self.lambda_w.value, "layer": self.layer_w.value}

    @property
    def status_text(self) -> str:
        return plain_text(self.status.value)

    def _controls(self) -> dict[str, widgets.ValueWidget]:
        return {"store": self.store_w, "split": self.split_w, "cue": self.cue_w,
                "lambda_": self.lambda_w, "layer": self.layer_w}

    def update(self, **selection: Any) -> dict[str, Any]:
        """Set any of ``store``, ``split`` (``"source_test"``, ``"target_test:<name>"`` or its
        short label), ``cue``, ``lambda_``, ``layer``; redraw once; return the selection."""
        unknown = sorted(set(selection) - set(_KEYS))
        if unknown:
            raise ValueError(f"unknown selection key(s) {unknown}; use {list(_KEYS)}")
        if selection.get("store") is not None and selection["store"] != self.store_w.value:
            if selection["store"] not in self.story.stores:
                raise ValueError(f"store={selection['store']!r} is not in the story; choose one "
                                 f"of {self.story.stores}")
            self._silent = True
            self.store_w.value = selection["store"]
            self._silent = False
            self._fill_options(selection["store"])
        controls = self._controls()
        self._silent = True
        try:
            for key in _KEYS[1:]:
                if selection.get(key) is None:
                    continue
                controls[key].value = self._option_value(key, controls[key], selection[key])
        finally:
            self._silent = False
        self._redraw()
        return self.selection

    @staticmethod
    def _option_value(key: str, w: widgets.ValueWidget, value: Any) -> Any:
        pairs = [(o if isinstance(o, tuple) else (str(o), o)) for o in w.options]
        for label, v in pairs:
            if isinstance(v, float) and isinstance(value, (int, float)) and math.isclose(v, value):
                return v
            if v == value or (isinstance(value, str) and label == value):
                return v
        raise ValueError(f"{key}={value!r} is not in the story; choose one of "
                         f"{[v for _, v in pairs]}")

    def _on_change(self, change: Mapping[str, Any]) -> None:
        if self._silent:
            return
        if change.get("owner") is self.store_w:
            self._fill_options(self.store_w.value)
        try:
            self._redraw()
        except (StoryError, ValueError) as exc:
            self.status.value = (f"<b>Nothing stored for this selection</b> "
                                 f"({_escape(str(exc))}); the panels show the previous one.")

    def _redraw(self) -> None:
        sel = self.selection
        st, lam = sel["store"], float(sel["lambda_"])
        summary = slice_summary(self.story, st, sel["split"], sel["cue"], lam)
        con = slice_contrast(self.story, st, sel["split"], sel["cue"], lam)
        self._slots["slices"].replace(slice_figure(self.story, st, sel["split"], sel["cue"], lam,
                                                   summary=summary, contrast=con))
        self._slots["drift"].replace(target_drift_figure(self.story, st, int(sel["layer"]), lam))
        summ = summary.set_index("method")
        follows = ", ".join(f"{_method_name(m, lam)} {100 * summ.loc[m, 'follow']:.1f}%"
                            for m in METHODS if math.isfinite(summ.loc[m, "follow"]))
        self.status.value = (
            f"<b>{_escape(st)} source, {_escape(split_label(sel['split']))}, cue "
            f"'{_escape(sel['cue'])}'</b>: follows it where it misleads: {_escape(follows)}. "
            f"Naive − ceiling {_escape(_interval_text(con['inherited']))}, ANCHOR − naive "
            f"{_escape(_interval_text(con['anchor']))} points (paired over seeds).")
        small = int(summ["n_disagree_min"].min())
        if small < MIN_SLICE:
            self.status.value += (f" <b>Only {small} misleading pair(s) on some seed: too few to "
                                  f"read</b> (the study reads slices of at least {MIN_SLICE}).")


def write_story_report(folder: str | Path, path: str | Path | None = None) -> Path:
    """``anchorviz report <story folder>``: one HTML page of a story folder's study (the
    over-refusal study of issue 44 when its stores hold the XSTest targets: the verdict in words
    and its figures per source; the cue audit when the folder holds one). Returns the page's
    path (default ``<folder>/report.html``).

    Raises:
        StoryError: the folder is not a readable story folder, or holds nothing to show.
    """
    story = load_story(folder)
    parts: list[tuple[str, str, go.Figure | None]] = []
    if is_refusal_story(story):
        parts += refusal_report_parts(story)
    if story.audit is not None and len(story.audit):
        parts.append(("The data audit: where a cue picks a side, is it the chosen one?", "",
                      cue_audit_figure(story)))
    if not parts:
        raise StoryError(f"{story.folder}: nothing to report (no XSTest targets, no audit)")
    out = Path(path) if path else Path(folder) / "report.html"
    body = [f"<h1>Story: {_escape(Path(folder).name)}</h1>",
            f"<p>{_escape(str(story.meta.get('note', '')))}</p>"]
    first = True
    for title, text, fig in parts:
        body.append(f"<h2>{_escape(title)}</h2>")
        if text:
            body.append(f"<p>{_escape(text)}</p>")
        if fig is not None:
            body.append(fig.to_html(full_html=False, include_plotlyjs="inline" if first else False,
                                    default_width="100%"))
            first = False
    html = ("<!doctype html><html><head><meta charset='utf-8'><title>anchorviz story</title>"
            "<style>body{font-family:sans-serif;max-width:1500px;margin:auto;padding:1em}"
            "</style></head><body>" + "\n".join(body) + "</body></html>")
    write_atomic(out, lambda p: p.write_text(html, encoding="utf-8"))
    return out
