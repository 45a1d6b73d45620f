"""Plotly figures of stored results: each figure is one function of a run or sweep directory.

Nothing here trains or computes representations: every function reads the files that
the pipeline (``anchorviz.pipeline``) wrote (layout: docs/ARCHITECTURE.md, "Sweep and run directories") and
returns a ``plotly.graph_objects.Figure``. Functions of a sweep also accept an already loaded
results table (``results=``) and per-run tables, so the widgets can redraw without touching the
disk.

Figures:

- :func:`accuracy_figure` -- ID vs OOD pairwise accuracy (%) per method, mean over seeds with
  error bars (t-interval across seeds, the stored bootstrap CI when there is one seed).
- :func:`transfer_figure` -- WRG / AOG / NTS against the weak teacher, in points.
- :func:`drift_by_layer_figure` -- linear CKA(student, reference) or cosine drift per layer,
  one colour per method, one panel per domain (source / each target).
- :func:`shortcut_figure` -- ID accuracy on the source-test pairs with and without the planted
  artefact, next to OOD accuracy: shortcut or skill.
- :func:`umap_figure` -- reference and student states of one run in one shared 2-D map (UMAP or
  PCA, named in the figure), with lines from a sample of reference points to where the student
  put them.
- :func:`drift_vs_ood_figure` -- drift against OOD gain, one panel per target, one marker per
  run and seed; Spearman rho with its bootstrap interval
  (``anchorviz.analysis.drift.drift_ood_relation``) and a fitted line only from
  :data:`MIN_CORRELATION_N` runs on.
- :func:`lambda_sweep_figure` -- ID, OOD, NTS and drift against the ANCHOR strength lambda.
- :func:`label_confidence_figure` -- the teacher's soft labels q: uninformative labels show.
- :func:`export_figure` -- ``.html`` (self-contained, works offline) or static images.

Accuracies are stored as fractions and shown in percent; transfer scores are differences of
fractions, shown x100 as points. Readers (:func:`load_results`, :func:`load_run_table`) cache
by file modification time, so repeated figures do not re-read the disk and a rewritten file is
read again.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping, Sequence
from os import PathLike as OsPathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from anchorviz.analysis.metrics import seed_summary

logger = logging.getLogger(__name__)

#: a directory or file path
PathLike = str | OsPathLike

__all__ = [
    "DRIFT_METRICS",
    "ExportError",
    "RUN_TABLES",
    "SPREADS",
    "accuracy_figure",
    "drift_by_layer_figure",
    "drift_curve",
    "drift_vs_ood_figure",
    "export_figure",
    "export_paper_figures",
    "figure_caption",
    "loss_curve_figure",
    "OKABE_ITO",
    "PAPER_WIDTHS",
    "paper_style",
    "paper_width_inches",
    "TEMPLATE",
    "label_confidence_figure",
    "lambda_sweep_figure",
    "load_results",
    "load_run_table",
    "MIN_CORRELATION_N",
    "method_label",
    "metric_summary",
    "projection_method",
    "run_path",
    "select_condition",
    "shortcut_figure",
    "sweep_targets",
    "target_column",
    "transfer_figure",
    "UNINFORMATIVE_BELOW",
    "umap_figure",
    "umap_groups",
    "umap_movement",
    "wrap_title",
]

RESULTS_FILE = "results.parquet"

#: per-run parquet tables and who writes them (for error messages)
RUN_TABLES: dict[str, str] = {
    "scores": "every run",
    "labels": "teacher runs (pair_id, margin) and students (pair_id, q)",
    "val_labels": "teacher runs",
    "history": "every trained run",
    "drift": "students and the ceiling",
    "projection": "students and the ceiling (unless capture.projection is 'none')",
}

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

METHOD_ORDER = ("teacher", "naive", "confidence", "seam", "anchor", "ceiling")
METHOD_NAMES = {
    "teacher": "weak teacher (gold labels)",
    "naive": "naive W2S",
    "confidence": "confidence W2S",
    "seam": "SEAM",
    "anchor": "ANCHOR",
    "ceiling": "strong ceiling (gold labels)",
}
#: the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"): eight colours that stay
#: apart under the common colour-vision deficiencies; every colour of these figures comes from
#: it (or from a light-to-dark ramp of one of its hues), never a red / green pair
OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7", "grey": "#999999",
}
_OI = OKABE_ITO
METHOD_COLORS = {
    "teacher": _OI["grey"],
    "naive": _OI["vermillion"],
    "confidence": _OI["orange"],
    "seam": _OI["reddish_purple"],
    "ceiling": _OI["black"],
}
# ANCHOR: one light-to-dark ramp of an Okabe-Ito hue per layer choice, darker = stronger
# lambda (line style tells the layer choices apart as well)
_ANCHOR_SCALES = {
    "last": [[0.0, "#cfe6f5"], [0.5, _OI["blue"]], [1.0, "#00324f"]],
    "middle": [[0.0, "#c2ebde"], [0.5, _OI["bluish_green"]], [1.0, "#003d2c"]],
    "all": [[0.0, "#f3d9e7"], [0.5, _OI["reddish_purple"]], [1.0, "#5e2447"]],
}
_OTHER_ANCHOR_SCALE = [[0.0, "#d9d9d9"], [1.0, "#333333"]]
_LAYER_DASHES = {"last": "solid", "middle": "dash", "all": "dot"}
_DOMAIN_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_DOMAIN_COLORS = (_OI["blue"], _OI["orange"], _OI["bluish_green"], _OI["reddish_purple"],
                  _OI["sky_blue"], _OI["vermillion"], _OI["black"])
# chosen / rejected: blue / orange (a pair that colour-blind readers tell apart), not green / red
_SIDE_COLORS = {"chosen": _OI["blue"], "rejected": _OI["orange"]}
#: in / out of distribution in the accuracy figures; the transfer scores
_ID_COLOR, _OOD_COLOR = _OI["blue"], _OI["orange"]
_TRANSFER_COLORS = {"wrg": _OI["blue"], "aog": _OI["orange"], "nts": _OI["bluish_green"]}
_GROUP_KEYS = ["method", "anchor_lambda", "anchor_layers"]
_TRANSFER_NAMES = {
    "wrg": "WRG: ID gain",
    "aog": "AOG: OOD gain",
    "nts": "NTS: OOD gain - ID loss",
}
_TOP_LEGEND = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0}
# below the axis titles, in the figure's own bottom margin (container coordinates)
_BOTTOM_LEGEND = {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.01,
                  "xanchor": "left", "x": 0.0}

def _template() -> go.layout.Template:
    t = go.layout.Template(pio.templates["plotly_white"])
    t.layout.colorway = [OKABE_ITO[k] for k in ("blue", "orange", "bluish_green", "vermillion",
                                                 "reddish_purple", "sky_blue", "black", "yellow")]
    return t


#: plotly_white with the Okabe-Ito colours as the colour cycle (traces without an explicit
#: colour get them too); the explorer's panels use it as well
TEMPLATE = _template()
_IMAGE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".webp")
_HTML_SUFFIXES = (".html", ".htm")


class ExportError(RuntimeError):
    """A figure could not be written in the requested format (the message says why and how)."""


# --------------------------------------------------------------------------- reading


def _existing_dir(path: PathLike, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} {p} does not exist")
    if not p.is_dir():
        raise FileNotFoundError(f"{what} {p} is not a directory")
    return p


@functools.lru_cache(maxsize=512)
def _read_parquet_cached(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    # mtime and size are part of the key: a rewritten file is read again
    logger.debug("reading %s", path)
    return pd.read_parquet(path)


def _read_parquet(path: Path) -> pd.DataFrame:
    st = path.stat()
    return _read_parquet_cached(str(path.resolve()), st.st_mtime_ns, st.st_size)


def _normalize_results(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """A copy of a results table with the grouping columns filled and typed."""
    required = ["run_id", "kind", "method", "seed", "acc_id"]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"results table {where} lacks column(s) {missing} "
                         f"(has {list(df.columns)}); see docs/ARCHITECTURE.md")
    out = df.copy()
    defaults: dict[str, Any] = {"anchor_lambda": 0.0, "anchor_layers": "", "artifact_kind": "none",
                                "artifact_strength": 0.0, "source": "", "targets": ""}
    for col, value in defaults.items():
        if col not in out.columns:
            out[col] = value
        out[col] = out[col].fillna(value)
    out["anchor_lambda"] = out["anchor_lambda"].astype(float)
    out["artifact_strength"] = out["artifact_strength"].astype(float)
    for col in ("anchor_layers", "artifact_kind", "source", "targets", "method", "kind", "run_id"):
        out[col] = out[col].astype(str)
    not_anchor = out["method"] != "anchor"
    out.loc[not_anchor, "anchor_lambda"] = 0.0
    out.loc[not_anchor, "anchor_layers"] = ""
    return out


def load_results(sweep_dir: PathLike) -> pd.DataFrame:
    """The sweep's results table (``results.parquet``; one row per finished run).

    Returns a fresh copy (safe to modify) with ``anchor_lambda`` / ``anchor_layers`` /
    ``artifact_strength`` filled (0 / "" for runs that are not anchored or have no artefact).

    Raises:
        FileNotFoundError: the sweep directory or its results file does not exist.
        ValueError: the table lacks the documented key columns.
    """
    root = _existing_dir(sweep_dir, "sweep directory")
    path = root / RESULTS_FILE
    if not path.is_file():
        runs = root / "runs"
        hint = (f"; {runs} exists: the sweep may still be running (results.parquet is written "
                "when runs finish)" if runs.is_dir() else
                "; is this a sweep directory? (expected results.parquet and runs/)")
        raise FileNotFoundError(f"no results table {path}{hint}")
    return _normalize_results(_read_parquet(path), str(path))


def _results_arg(sweep_dir: PathLike | None, results: pd.DataFrame | None) -> pd.DataFrame:
    if results is not None:
        return _normalize_results(results, "passed as results=")
    if sweep_dir is None:
        raise ValueError("pass a sweep directory or an already loaded results table (results=)")
    return load_results(sweep_dir)


def run_path(sweep_dir: PathLike, run_id: str) -> Path:
    """``<sweep_dir>/runs/<run_id>`` (FileNotFoundError naming it when it does not exist)."""
    return _existing_dir(Path(sweep_dir) / "runs" / run_id, f"run {run_id!r}: directory")


def load_run_table(run_dir: PathLike, name: str) -> pd.DataFrame:
    """One per-run parquet table (``scores``, ``labels``, ``history``, ``drift``, ``projection``).

    Cached by path and modification time: do not modify the returned frame in place (copy it).

    Raises:
        ValueError: ``name`` is not a known table.
        FileNotFoundError: the run directory or the table does not exist.
    """
    key = name[: -len(".parquet")] if name.endswith(".parquet") else name
    if key not in RUN_TABLES:
        raise ValueError(f"unknown run table {name!r}; choose one of {sorted(RUN_TABLES)}")
    root = _existing_dir(run_dir, "run directory")
    path = root / f"{key}.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist ({key}.parquet is written by "
                                f"{RUN_TABLES[key]})")
    return _read_parquet(path)


# --------------------------------------------------------------------------- labels, colours


def _layers_label(spec: str) -> str:
    if spec in ("", "nan"):
        return ""
    return {"last": "last layer", "middle": "middle layers", "all": "all layers"}.get(
        spec, f"layers {spec}")


def method_label(method: str, anchor_lambda: float = 0.0, anchor_layers: str = "") -> str:
    """A reader's name for a method (``"ANCHOR λ=0.1 (last layer)"``, ``"naive W2S"`` ...)."""
    if method == "anchor":
        layers = _layers_label(str(anchor_layers))
        return f"ANCHOR λ={anchor_lambda:g}" + (f" ({layers})" if layers else "")
    return METHOD_NAMES.get(method, method)


def _method_rank(method: str) -> int:
    return METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER) - 1


def _layers_rank(spec: str) -> tuple[int, str]:
    order = {"last": 0, "middle": 1, "all": 2}
    return (order.get(spec, 3), spec)


def _group_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, lambda, layers) with ``label`` and ``color``, in reading order."""
    groups = rows[_GROUP_KEYS].drop_duplicates().reset_index(drop=True)
    groups["_rank"] = [(_method_rank(m), _layers_rank(la), lam)
                       for m, lam, la in groups[_GROUP_KEYS].itertuples(index=False)]
    groups = groups.sort_values("_rank", kind="stable").drop(columns="_rank").reset_index(drop=True)
    groups["label"] = [method_label(m, lam, la)
                       for m, lam, la in groups[_GROUP_KEYS].itertuples(index=False)]
    groups["color"] = [_group_color(m, lam, la, rows) for m, lam, la in
                       groups[_GROUP_KEYS].itertuples(index=False)]
    return groups


def _group_color(method: str, anchor_lambda: float, anchor_layers: str,
                 rows: pd.DataFrame) -> str:
    if method != "anchor":
        return METHOD_COLORS.get(method, _OI["sky_blue"])
    lams = _unique(rows.loc[rows["method"] == "anchor", "anchor_lambda"])
    frac = 0.85 if len(lams) < 2 else 0.4 + 0.55 * lams.index(anchor_lambda) / (len(lams) - 1)
    scale = _ANCHOR_SCALES.get(anchor_layers, _OTHER_ANCHOR_SCALE)
    return sample_colorscale(scale, [frac])[0]


def _group_mask(rows: pd.DataFrame, method: str, anchor_lambda: float,
                anchor_layers: str) -> pd.Series:
    return ((rows["method"] == method) & np.isclose(rows["anchor_lambda"], anchor_lambda)
            & (rows["anchor_layers"] == anchor_layers))


# --------------------------------------------------------------------------- selections


def _unique(col: pd.Series) -> list[Any]:
    """Sorted distinct values as plain Python scalars (so messages read ``[0.1, 1.0]``)."""
    return sorted(v.item() if isinstance(v, np.generic) else v for v in col.unique())


def _pick_value(values: Sequence[Any], wanted: Any, what: str, default: str) -> Any:
    if wanted is None:
        if len(values) > 1:
            choice = max(values) if default == "max" else values[0]
            logger.info("sweep has several %s %s; showing %s (pass %s= to choose)",
                        what, list(values), choice, what)
            return choice
        return values[0]
    for v in values:
        if (isinstance(v, float) and isinstance(wanted, (int, float))
                and math.isclose(v, float(wanted), rel_tol=1e-9, abs_tol=1e-12)) or v == wanted:
            return v
    raise ValueError(f"{what} {wanted!r} is not in the sweep; choose one of {list(values)}")


def select_condition(results: pd.DataFrame, artifact_strength: float | None = None,
                     source: str | None = None) -> tuple[pd.DataFrame, str]:
    """The rows of one experimental condition (one source dataset, one artefact strength).

    Unset, the largest artefact strength (the strongest shortcut) and the first source are
    chosen; the returned caption names the choice, for figure titles.
    """
    if results.empty:
        raise ValueError("the results table has no runs")
    src = _pick_value(_unique(results["source"]), source, "source", "first")
    rows = results[results["source"] == src]
    strength = _pick_value(_unique(rows["artifact_strength"]), artifact_strength,
                           "artifact_strength", "max")
    rows = rows[np.isclose(rows["artifact_strength"], strength)]
    parts = [f"source {src}"] if src else []
    kinds = [k for k in rows["artifact_kind"].unique() if k not in ("none", "")]
    if kinds or results["artifact_strength"].nunique() > 1:
        parts.append(f"artefact {'/'.join(kinds) or 'none'} strength {strength:g}")
    return rows, ", ".join(parts)


def sweep_targets(results: pd.DataFrame) -> list[str]:
    """Target names of the sweep (``amazon``, ``nyt`` ...), in the order the sweep lists them."""
    names: list[str] = []
    if "targets" in results.columns:
        for cell in results["targets"].astype(str):
            for t in cell.split(","):
                t = t.strip()
                if t and t != "nan" and t not in names:
                    names.append(t)
    if not names:  # fall back to the per-target accuracy columns
        skip = {"id", "ood", "val", "id_marked", "id_clean"}
        names = [c[4:] for c in results.columns if c.startswith("acc_")
                 and not c.endswith(("_lo", "_hi")) and c[4:] not in skip]
    return names


def _target_name(target: str) -> str:
    return target.split(":", 1)[1] if target.startswith("target_test:") else target


def target_column(results: pd.DataFrame, target: str | None, prefix: str = "acc") -> tuple[str, str]:
    """Column and description of an OOD quantity: ``target=None`` is the mean over targets.

    ``prefix="acc"`` gives ``acc_ood`` / ``acc_<target>``; ``"aog"`` gives ``aog`` /
    ``aog_<target>``. Raises ValueError listing the sweep's targets when ``target`` is unknown.
    """
    targets = sweep_targets(results)
    if target is None:
        col = "acc_ood" if prefix == "acc" else prefix
        desc = "mean over targets " + ", ".join(targets) if targets else "mean over targets"
        return col, desc
    name = _target_name(str(target))
    col = f"{prefix}_{name}"
    if col not in results.columns:
        raise ValueError(f"target {target!r} is not in the sweep; choose one of {targets} "
                         f"(or None for the mean over targets)")
    return col, f"target {name}"


# --------------------------------------------------------------------------- summaries


SPREADS = ("auto", "t", "minmax")


def _summarize(rows: pd.DataFrame, col: str, confidence: float,
               spread: str = "auto") -> dict[str, Any]:
    """Mean over seeds and its interval.

    One seed: the stored interval (``<col>_lo`` / ``_hi``, a bootstrap CI over test pairs).
    Several seeds: ``spread="t"`` the t-interval of the mean, ``"minmax"`` the range over
    seeds, ``"auto"`` the range for 2 seeds (a 2-seed t-interval is +-12.7 standard errors)
    and the t-interval from 3 seeds on.
    """
    if spread not in SPREADS:
        raise ValueError(f"spread must be one of {SPREADS}, got {spread!r}")
    nothing = {"mean": np.nan, "lo": np.nan, "hi": np.nan, "n": 0, "interval": "no value"}
    if col not in rows.columns:
        return nothing
    ok = rows[np.isfinite(rows[col].astype(float))]
    n = len(ok)
    if n == 0:
        return nothing
    vals = ok[col].astype(float).to_numpy()
    if n == 1:
        lo = float(ok[col + "_lo"].iloc[0]) if col + "_lo" in ok.columns else np.nan
        hi = float(ok[col + "_hi"].iloc[0]) if col + "_hi" in ok.columns else np.nan
        how = ("bootstrap CI over test pairs (1 seed)" if np.isfinite(lo) and np.isfinite(hi)
               else "1 seed, no interval stored")
        return {"mean": float(vals[0]), "lo": lo, "hi": hi, "n": 1, "interval": how}
    if spread == "minmax" or (spread == "auto" and n < 3):
        return {"mean": float(vals.mean()), "lo": float(vals.min()), "hi": float(vals.max()),
                "n": n, "interval": f"min to max over {n} seeds"}
    s = seed_summary(vals, confidence=confidence)
    return {"mean": s.mean, "lo": s.mean - s.half_width, "hi": s.mean + s.half_width, "n": n,
            "interval": f"{confidence:.0%} t-interval over {n} seeds"}


def metric_summary(results: pd.DataFrame, columns: Sequence[str], confidence: float = 0.95,
                   spread: str = "auto") -> pd.DataFrame:
    """Mean over seeds with an interval, per method group (method, lambda, layers) and column.

    ``spread``: how several seeds give the interval (see ``SPREADS``): ``"t"`` t-interval,
    ``"minmax"`` range, ``"auto"`` range for 2 seeds, t-interval from 3.

    Returns a long table: ``method, anchor_lambda, anchor_layers, label, color, column, mean,
    lo, hi, n, interval`` (values in the stored units: fractions), groups in reading order.
    """
    out = []
    for g in _group_table(results).itertuples(index=False):
        rows = results[_group_mask(results, g.method, g.anchor_lambda, g.anchor_layers)]
        for col in columns:
            out.append({"method": g.method, "anchor_lambda": g.anchor_lambda,
                        "anchor_layers": g.anchor_layers, "label": g.label, "color": g.color,
                        "column": col, **_summarize(rows, col, confidence, spread)})
    return pd.DataFrame(out, columns=["method", "anchor_lambda", "anchor_layers", "label", "color",
                                      "column", "mean", "lo", "hi", "n", "interval"])


def _interval_caption(summary: pd.DataFrame) -> str:
    kinds = sorted(set(summary.loc[summary["n"] > 0, "interval"]))
    if not kinds:
        return "no values"
    ns = sorted(set(summary.loc[summary["n"] > 0, "n"]))
    head = f"mean over {ns[-1]} seeds; " if ns[-1] > 1 else ""
    return head + "error bars: " + "; ".join(kinds)


def _bar_arrays(summary: pd.DataFrame, scale: float) -> dict[str, Any]:
    """Trace properties of one bar series from :func:`metric_summary` rows of one column."""
    mean = summary["mean"].to_numpy(float) * scale
    lo = summary["lo"].to_numpy(float) * scale
    hi = summary["hi"].to_numpy(float) * scale
    custom = np.empty((len(summary), 4), dtype=object)
    custom[:, 0], custom[:, 1] = lo, hi
    custom[:, 2], custom[:, 3] = summary["n"].to_numpy(), summary["interval"].to_numpy()
    return {
        "x": summary["label"].tolist(),
        "y": mean,
        "error_y": {"type": "data", "symmetric": False, "array": hi - mean,
                    "arrayminus": mean - lo, "visible": True},
        "customdata": custom,
    }


def _title(main: str, sub: str = "") -> dict[str, Any]:
    text = main + (f"<br><sup>{sub}</sup>" if sub else "")
    return {"text": text, "x": 0.01, "xanchor": "left"}


# --------------------------------------------------------------------------- accuracy


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
    res = _results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    ood_col, ood_desc = target_column(rows, target)
    summary = metric_summary(rows, ["acc_id", ood_col], confidence, spread)
    fig = go.Figure()
    src = ", ".join(sorted(rows["source"].unique()))
    names = {"acc_id": f"in-distribution: {src} test split",
             ood_col: f"out-of-distribution: {ood_desc}"}
    colors = {"acc_id": _ID_COLOR, ood_col: _OOD_COLOR}
    for col in ("acc_id", ood_col):
        part = summary[summary["column"] == col]
        fig.add_trace(go.Bar(
            name=names[col], marker_color=colors[col], meta={"column": col},
            hovertemplate=("%{x}<br>" + names[col] + ": %{y:.1f}%<br>interval %{customdata[0]:.1f}"
                           " to %{customdata[1]:.1f}%<br>%{customdata[3]}<extra></extra>"),
            **_bar_arrays(part, 100.0)))
    _accuracy_layout(fig, summary, caption)
    return fig


def _accuracy_layout(fig: go.Figure, summary: pd.DataFrame, caption: str) -> None:
    lo = np.nanmin(summary[["lo", "mean"]].to_numpy(float)) * 100 if len(summary) else 50.0
    hi = np.nanmax(summary[["hi", "mean"]].to_numpy(float)) * 100 if len(summary) else 100.0
    lo = 50.0 if not np.isfinite(lo) or lo >= 52 else max(0.0, math.floor(lo - 5))
    hi = 100.0 if not np.isfinite(hi) else min(100.0, math.ceil(hi + 3))
    fig.update_layout(
        title=_title(f"Pairwise accuracy in and out of distribution ({caption})",
                     _interval_caption(summary)
                     + ("; axis starts at chance (50%)" if lo == 50.0 else "")),
        barmode="group", xaxis_title="method", yaxis_title="pairwise accuracy (%)",
        yaxis_range=[lo, hi], legend=_TOP_LEGEND, margin={"t": 120}, template=TEMPLATE,
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
    res = _results_arg(sweep_dir, results)
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
    colors = {"acc_id_marked": _OI["sky_blue"], "acc_id_seen": _OI["sky_blue"],
              "acc_id_hidden": "#a9d5f2", "acc_id_clean": _ID_COLOR, "acc_ood": _OOD_COLOR}
    fig = go.Figure()
    for col in names:
        part = summary[summary["column"] == col]
        fig.add_trace(go.Bar(
            name=names[col], marker_color=colors[col], meta={"column": col},
            hovertemplate=("%{x}<br>" + names[col] + ": %{y:.1f}%<br>interval %{customdata[0]:.1f}"
                           " to %{customdata[1]:.1f}%<br>%{customdata[3]}<extra></extra>"),
            **_bar_arrays(part, 100.0)))
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
    res = _results_arg(sweep_dir, results)
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
    colors = _TRANSFER_COLORS
    fig = go.Figure()
    for score, col in cols.items():
        part = summary[summary["column"] == col]
        name = _TRANSFER_NAMES[score] + ("" if score == "wrg" else f" ({ood_desc})")
        fig.add_trace(go.Bar(
            name=name, marker_color=colors[score], meta={"column": col, "score": score},
            hovertemplate=("%{x}<br>" + name + ": %{y:+.1f} points<br>interval "
                           "%{customdata[0]:+.1f} to %{customdata[1]:+.1f}<br>%{customdata[3]}"
                           "<extra></extra>"),
            **_bar_arrays(part, 100.0)))
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    fig.update_layout(
        title=_title(f"Transfer scores against the weak teacher ({caption})",
                     "WRG = student - teacher on the source test split; AOG = the same out of "
                     "distribution; NTS = AOG - any ID loss. " + _interval_caption(summary)),
        barmode="group", xaxis_title="method", yaxis_title="score (points = accuracy % difference)",
        legend=_TOP_LEGEND, margin={"t": 120}, template=TEMPLATE,
    )
    return fig


# --------------------------------------------------------------------------- drift by layer


def _drift_metric(metric: str) -> tuple[str, str]:
    if metric not in DRIFT_METRICS:
        raise ValueError(f"unknown drift metric {metric!r}; choose one of {sorted(DRIFT_METRICS)}")
    return DRIFT_METRICS[metric]


def _split_sort_key(split: str) -> tuple[int, str]:
    return (0 if split == "source_test" else 1, split)


def _resolve_splits(available: Sequence[str], split: str | Sequence[str] | None) -> list[str]:
    """Splits to show: None = all; ``"source"``, a target name or an exact split name."""
    avail = sorted(set(available), key=_split_sort_key)
    if split is None:
        return avail
    wanted = [split] if isinstance(split, str) else list(split)
    out = []
    for w in wanted:
        name = "source_test" if w in ("source", "source_test") else (
            w if w.startswith("target_test:") else f"target_test:{w}")
        if name not in avail:
            choices = ["source"] + [_target_name(s) for s in avail if s != "source_test"]
            raise ValueError(f"split {w!r} is not in the drift tables; choose from {choices} "
                             f"(or the split names {avail})")
        out.append(name)
    return out


def _split_desc(split: str, table: pd.DataFrame) -> str:
    dom = ""
    if "domain" in table.columns:
        doms = table.loc[table["split"] == split, "domain"].astype(str).unique()
        dom = doms[0] if len(doms) else ""
    if split == "source_test":
        return f"source ({dom})" if dom else "source"
    name = _target_name(split)
    return f"target ({dom})" if dom and dom != name else f"target ({name})"


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
    res = _results_arg(sweep_dir, results)
    series: list[tuple[str, str, list[str]]] = []  # (label, colour, run ids)
    caption = ""
    if runs is not None:
        runs = list(runs)
        unknown = [r for r in runs if r not in set(res["run_id"])]
        if unknown:
            have = res.loc[res["kind"] != "teacher", "run_id"].tolist()
            raise ValueError(f"run(s) {unknown} not in the results table; runs with drift: {have}")
        groups = _group_table(res)
        for rid in runs:
            row = res[res["run_id"] == rid].iloc[0]
            color = groups.loc[_group_mask(groups, row["method"], row["anchor_lambda"],
                                           row["anchor_layers"]), "color"].iloc[0]
            label = method_label(row["method"], row["anchor_lambda"], row["anchor_layers"])
            series.append((f"{label}, seed {row['seed']}", color, [rid]))
        tables = _drift_tables_for(runs, sweep_dir, drift_tables, strict=True)
    else:
        rows, caption = select_condition(res, artifact_strength, source)
        rows = rows[rows["kind"] != "teacher"]
        if seed is not None:
            seeds = _unique(rows["seed"])
            if seed not in seeds:
                raise ValueError(f"seed {seed!r} is not in the sweep; choose one of {seeds}")
            rows = rows[rows["seed"] == seed]
        if methods is not None:
            have = _unique(rows["method"])
            bad = [m for m in methods if m not in have]
            if bad:
                raise ValueError(f"method(s) {bad} not in the sweep; choose from {have}")
            rows = rows[rows["method"].isin(list(methods))]
        if rows.empty:
            raise ValueError("no student or ceiling runs to draw drift for")
        tables = _drift_tables_for(rows["run_id"].tolist(), sweep_dir, drift_tables, strict=False)
        for g in _group_table(rows).itertuples(index=False):
            ids = [r for r in rows.loc[_group_mask(rows, g.method, g.anchor_lambda,
                                                   g.anchor_layers), "run_id"] if r in tables]
            if ids:
                n = len(ids)
                series.append((g.label + (f" (mean of {n} seeds)" if n > 1 else ""), g.color, ids))
    if not tables:
        raise ValueError("none of the selected runs has a drift table")
    all_splits = sorted({s for t in tables.values() for s in t["split"].unique()},
                        key=_split_sort_key)
    shown = _resolve_splits(all_splits, split)
    dashes = {s: _DOMAIN_DASHES[i % len(_DOMAIN_DASHES)] for i, s in enumerate(all_splits)}
    any_table = next(iter(tables.values()))

    facet = len(shown) > 1 if facet is None else bool(facet)
    if facet:
        fig = make_subplots(rows=1, cols=len(shown), shared_yaxes=True,
                            horizontal_spacing=0.03 if len(shown) > 3 else 0.05,
                            subplot_titles=[_split_desc(s, any_table) for s in shown])
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
            desc = _split_desc(s, any_table)
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
                x=[None], y=[None], mode="lines", name=f"line style: {_split_desc(s, any_table)}",
                line={"color": "grey", "dash": dashes[s]}, hoverinfo="skip",
                meta={"legend_only": True, "split": s}))
    what = "similarity" if col.startswith("cka") else "drift"
    fig.update_layout(
        title=_title(f"Representation {what} from the frozen reference, per layer"
                     + (f" ({caption})" if caption else ""),
                     ("one panel per domain; " if facet else "")
                     + "higher CKA / lower cosine drift = closer to the pretrained student; "
                     "layer 0 = embeddings"),
        template=TEMPLATE, legend={"groupclick": "togglegroup", **_BOTTOM_LEGEND},
        margin={"t": 110, "b": 170}, height=580,
    )
    fig.update_xaxes(dtick=1, title_text="layer (0 = embeddings)")
    if facet:
        fig.update_yaxes(title_text=ylabel, row=1, col=1)
    else:
        fig.update_yaxes(title_text=ylabel)
    fig.layout.meta = {"facets": list(shown) if facet else []}
    return fig


# --------------------------------------------------------------------------- UMAP


_PROJECTION_COLUMNS = ("model", "layer", "split", "pair_id", "side", "x", "y")


def _check_projection(proj: pd.DataFrame, where: str) -> None:
    missing = [c for c in _PROJECTION_COLUMNS if c not in proj.columns]
    if missing:
        raise ValueError(f"projection table {where} lacks column(s) {missing} "
                         f"(has {list(proj.columns)})")


def _projection_layer(proj: pd.DataFrame, layer: int | None) -> int:
    layers = sorted(int(v) for v in proj["layer"].unique())
    if not layers:
        raise ValueError("the projection table is empty")
    if layer is None:
        return layers[-1]
    if int(layer) not in layers:
        raise ValueError(f"layer {layer!r} has no projection; choose one of {layers}")
    return int(layer)


def umap_groups(proj: pd.DataFrame, layer: int | None = None, color_by: str = "domain",
                target: str | None = None) -> list[dict[str, Any]]:
    """Point groups of a projection table for one layer: what one colour of the map shows.

    Returns a list of ``{"label", "color", "reference": DataFrame, "student": DataFrame}``:
    for ``color_by="domain"`` one group per split (source first, then targets, only ``target``
    when given), for ``"side"`` one group per preference side (chosen, rejected).
    """
    if color_by not in ("domain", "side"):
        raise ValueError(f"color_by must be 'domain' or 'side', got {color_by!r}")
    _check_projection(proj, "")
    lay = _projection_layer(proj, layer)
    part = proj[proj["layer"] == lay]
    splits = sorted(part["split"].unique(), key=_split_sort_key)
    if target is not None:
        splits = ["source_test"] + _resolve_splits(splits, target)
        splits = [s for s in dict.fromkeys(splits) if s in set(part["split"])]
        part = part[part["split"].isin(splits)]
    model = part["model"].astype(str)
    groups = []
    if color_by == "domain":
        for i, s in enumerate(splits):
            sel = part["split"] == s
            groups.append({"label": _split_desc(s, part),
                           "color": _DOMAIN_COLORS[i % len(_DOMAIN_COLORS)],
                           "reference": part[sel & (model == "reference")],
                           "student": part[sel & (model == "student")]})
    else:
        for side, color in _SIDE_COLORS.items():
            sel = part["side"] == side
            groups.append({"label": f"{side} responses", "color": color,
                           "reference": part[sel & (model == "reference")],
                           "student": part[sel & (model == "student")]})
    return groups


def _subsample(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    if n is None or len(df) <= n:
        return df
    return df.iloc[np.sort(np.random.default_rng(seed).choice(len(df), size=n, replace=False))]


def umap_movement(groups: Sequence[Mapping[str, Any]], n_lines: int = 150,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x / y arrays of line segments from reference to student position for a seeded sample.

    Rows are matched on (split, pair_id, side); segments are separated by NaN (a gap).
    """
    ref = pd.concat([g["reference"] for g in groups], ignore_index=True)
    stu = pd.concat([g["student"] for g in groups], ignore_index=True)
    if ref.empty or stu.empty or n_lines <= 0:
        return np.array([], dtype=float), np.array([], dtype=float)
    stu = _subsample(stu, n_lines, seed)
    m = stu.merge(ref, on=["split", "pair_id", "side"], suffixes=("_s", "_r"))
    nan = np.full(len(m), np.nan)
    x = np.column_stack([m["x_r"].to_numpy(float), m["x_s"].to_numpy(float), nan]).ravel()
    y = np.column_stack([m["y_r"].to_numpy(float), m["y_s"].to_numpy(float), nan]).ravel()
    return x, y


def _hover_custom(df: pd.DataFrame) -> np.ndarray:
    dom = df["domain"] if "domain" in df.columns else df["split"]
    return np.column_stack([df["pair_id"].astype(str), df["side"].astype(str), dom.astype(str)])


_UMAP_HOVER = "pair %{customdata[0]} (%{customdata[1]})<br>%{customdata[2]}<extra>%{fullData.name}</extra>"


def _run_caption(run_dir: Path) -> str:
    """'ANCHOR λ=0.1 (last layer), seed 0' from the sweep's results (else config.yaml)."""
    sweep = run_dir.parent.parent
    try:
        res = load_results(sweep)
        row = res[res["run_id"] == run_dir.name]
        if len(row):
            r = row.iloc[0]
            return f"{method_label(r['method'], r['anchor_lambda'], r['anchor_layers'])}, seed {r['seed']}"
    except (FileNotFoundError, ValueError):
        pass
    cfg = run_dir / "config.yaml"
    if cfg.is_file():
        try:
            import yaml

            key = yaml.safe_load(cfg.read_text()) or {}
            meth = key.get("method") if isinstance(key.get("method"), dict) else {}
            name = str(meth.get("name") or key.get("kind") or run_dir.name)
            label = method_label(name, float(meth.get("anchor_lambda") or 0.0),
                                 str(meth.get("anchor_layers") or ""))
            return f"{label}, seed {key.get('seed', '?')}"
        except Exception as exc:  # a caption is never worth failing a figure for
            logger.debug("could not read %s: %s", cfg, exc)
    return run_dir.name


def projection_method(run_dir: PathLike | None = None,
                      projection: pd.DataFrame | None = None) -> str:
    """``"UMAP"`` or ``"PCA"``: the map a run's ``projection.parquet`` was made with.

    A ``projection_method`` column of the table says it directly. Otherwise the run's
    ``config.yaml`` does: ``capture.projection`` ``"pca"`` or ``"umap"``; ``"auto"`` is UMAP
    when umap-learn is installed (as `anchorviz.analysis.projection.SharedProjection` decides; it
    falls back to PCA only without umap-learn or with fewer than ~17 reference rows, far
    fewer than any test split) and PCA when it is not. ``"map"`` when neither can be read.
    """
    if projection is not None and "projection_method" in projection.columns:
        vals = projection["projection_method"].dropna().astype(str).unique()
        if len(vals) == 1:
            return vals[0].upper()
    spec = None
    if run_dir is not None and (Path(run_dir) / "config.yaml").is_file():
        try:
            import yaml

            key = yaml.safe_load((Path(run_dir) / "config.yaml").read_text()) or {}
            spec = str((key.get("capture") or {}).get("projection") or "")
        except Exception as exc:  # a caption is never worth failing a figure for
            logger.debug("could not read %s: %s", run_dir, exc)
    if spec in ("pca", "umap"):
        return spec.upper()
    if spec == "auto":
        import importlib.util

        return "UMAP" if importlib.util.find_spec("umap") is not None else "PCA"
    return "map"


def umap_figure(
    run_dir: PathLike | None = None,
    layer: int | None = None,
    color_by: str = "domain",
    *,
    projection: pd.DataFrame | None = None,
    target: str | None = None,
    n_lines: int = 150,
    max_points: int | None = None,
    seed: int = 0,
    title: str | None = None,
) -> go.Figure:
    """Reference vs student hidden states of one run in one shared 2-D map.

    The map (UMAP, or PCA when UMAP was unavailable; :func:`projection_method` says which, and
    the title and axes name it) was fitted on the frozen reference's states, so the reference's
    points (open circles, drawn on top so that they stay visible) are where the pretrained
    model puts each response and the student's points (filled diamonds) are where training
    moved them; grey lines join the two positions for a seeded sample of ``n_lines``
    responses. ``color_by="domain"`` colours source vs target domains (only ``target`` when
    given), ``"side"`` chosen vs rejected responses. ``layer=None`` is the last projected
    layer. ``max_points`` subsamples each group (seeded) for large runs.
    """
    if projection is None:
        if run_dir is None:
            raise ValueError("pass a run directory or an already loaded projection table")
        projection = load_run_table(run_dir, "projection")
    _check_projection(projection, str(run_dir or "passed as projection="))
    lay = _projection_layer(projection, layer)
    groups = umap_groups(projection, lay, color_by, target)
    if max_points is not None:
        groups = [{**g, "reference": _subsample(g["reference"], max_points, seed),
                   "student": _subsample(g["student"], max_points, seed)} for g in groups]
    how = projection_method(run_dir, projection)
    fig = go.Figure()
    # students first, the reference on top as open circles: the pretrained positions stay
    # visible under a student cloud that landed on them
    mx, my = umap_movement(groups, n_lines, seed)
    fig.add_trace(go.Scattergl(
        x=mx, y=my, mode="lines", line={"color": "rgba(90,90,90,0.35)", "width": 1},
        name=f"movement reference → student ({len(mx) // 3} sampled)", hoverinfo="skip",
        meta={"model": "movement"}))
    for g in groups:
        fig.add_trace(go.Scattergl(
            x=g["student"]["x"].to_numpy(float), y=g["student"]["y"].to_numpy(float),
            mode="markers", name=f"student (trained) · {g['label']}", legendgroup=g["label"],
            marker={"color": g["color"], "size": 6, "opacity": 0.55, "symbol": "diamond"},
            customdata=_hover_custom(g["student"]), hovertemplate=_UMAP_HOVER,
            meta={"model": "student", "group": g["label"]}))
    for g in groups:
        fig.add_trace(go.Scattergl(
            x=g["reference"]["x"].to_numpy(float), y=g["reference"]["y"].to_numpy(float),
            mode="markers", name=f"reference (pretrained) · {g['label']}", legendgroup=g["label"],
            marker={"color": g["color"], "size": 7, "opacity": 0.9, "symbol": "circle-open",
                    "line": {"width": 1.5}},
            customdata=_hover_custom(g["reference"]), hovertemplate=_UMAP_HOVER,
            meta={"model": "reference", "group": g["label"]}))
    caption = title or (_run_caption(Path(run_dir)) if run_dir is not None else "")
    what = f"shared {how}" if how != "map" else "shared map"
    fig.update_layout(
        title=_title(f"Reference vs student in one {what}, layer {lay}"
                     + (f" — {caption}" if caption else ""),
                     f"{how} fitted on the frozen reference's states; open circles = "
                     "reference, filled diamonds = student, lines = where training moved a "
                     "response"),
        xaxis_title=f"{how} axis 1 (fitted on reference states; unitless)",
        yaxis_title=f"{how} axis 2 (unitless)", template=TEMPLATE,
        legend=_BOTTOM_LEGEND, margin={"t": 100, "b": 190}, height=680, autosize=True,
    )
    fig.layout.meta = {"projection_method": how}
    fig.update_yaxes(scaleanchor="x", scaleratio=1)
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


#: mean label confidence max(q, 1 - q) below which the teacher's labels count as nearly
#: uninformative (0.5 = a coin flip): the label histogram and the report warn about them
UNINFORMATIVE_BELOW = 0.6

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
    from anchorviz.analysis.drift import DriftError, drift_ood_relation

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
    res = _results_arg(sweep_dir, results)
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

    # panels: name -> frame with x (drift), y (gain, stored units), run_id, seed, group keys
    keep = ["run_id", "seed", *_GROUP_KEYS]
    panels: dict[str, pd.DataFrame] = {}
    if by_target:
        tables = _drift_tables_for(rows["run_id"].tolist(), sweep_dir, drift_tables, strict=False)
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

    scale = 100.0 if _is_fraction_col(gain_col) else 1.0
    seeds = _unique(rows["seed"]) if len(rows) else []
    symbol = {s: _SEED_SYMBOLS[i % len(_SEED_SYMBOLS)] for i, s in enumerate(seeds)}
    names = list(panels)
    stats = {n: _relation_stat(panels[n], min_n, n_boot, seed, ci_level) for n in names}
    if by_target:
        fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, horizontal_spacing=0.04,
                            subplot_titles=[f"<b>{n}</b><br><sup>{stats[n][1]}</sup>"
                                            for n in names])
    else:
        fig = go.Figure()
    groups = _group_table(rows) if len(rows) else pd.DataFrame(columns=[*_GROUP_KEYS, "label",
                                                                        "color"])
    for i, name in enumerate(names):
        part = panels[name]
        where = {"row": 1, "col": i + 1} if by_target else {}
        for g in groups.itertuples(index=False):
            gp = part[_group_mask(part, g.method, g.anchor_lambda, g.anchor_layers)]
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
        rel = stats[name][0]
        if rel is not None:
            xs = np.linspace(part["x"].min(), part["x"].max(), 2)
            fig.add_trace(go.Scatter(
                x=xs, y=(rel["intercept"] + rel["slope"] * xs) * scale, mode="lines",
                name="least-squares fit", legendgroup="fit", showlegend=False,
                line={"color": "black", "dash": "dash", "width": 1}, hoverinfo="skip",
                meta={"fit": True, "panel": name}), **where)
        if gain_col in ("aog", "wrg", "nts") or gain_col.startswith("aog_"):
            fig.add_hline(y=0, line={"color": "grey", "width": 1}, **where)
    if len(seeds) > 1:
        for s in seeds:  # legend entries for the seed symbols
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"seed {s}",
                                     marker={"color": "grey", "size": 9, "symbol": symbol[s]},
                                     hoverinfo="skip", meta={"legend_only": True, "seed": s}))
    gain_name = gain_col.upper() if gain_col in _TRANSFER_NAMES else gain_col
    rule = (f"one marker per run (colour = method, symbol = seed); correlation and fitted line "
            f"only from n ≥ {min_n} runs")
    if by_target:
        title = _title(f"Drift vs {gain_name}, per target domain", rule)
    else:
        title = _title(f"Drift vs {gain_name} across runs: {stats['pooled'][1]}", rule)
    fig.update_layout(title=title, template=TEMPLATE, legend=_BOTTOM_LEGEND,
                      margin={"t": 130 if by_target else 100, "b": 170}, height=580)
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
    res = _results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    anchor = rows[rows["method"] == "anchor"]
    zero = anchor["anchor_lambda"] <= 0
    if zero.any():
        logger.warning("%d ANCHOR run(s) with lambda 0 left out of the log axis", int(zero.sum()))
        anchor = anchor[~zero]
    if anchor.empty:
        raise ValueError("the sweep has no ANCHOR runs with lambda > 0; "
                         f"methods present: {_unique(rows['method'])}")
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
    panels = [("acc_id", "ID accuracy (source test)", "pairwise accuracy (%)", 100.0),
              (ood_col, f"OOD accuracy ({ood_desc})", "pairwise accuracy (%)", 100.0),
              (nts_col, "NTS: OOD gain - ID loss vs teacher", "NTS (points)", 100.0),
              (drift_col, _axis_label(drift_col), _short_label(drift_col), 1.0)]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in panels],
                        horizontal_spacing=0.1, vertical_spacing=0.16)
    lam_min, lam_max = anchor["anchor_lambda"].min(), anchor["anchor_lambda"].max()
    ref_x = [lam_min / 1.5, lam_max * 1.5] if lam_max > lam_min else [lam_min / 3, lam_min * 3]
    shown_legend: set[str] = set()
    for i, (col, _, ylab, scale) in enumerate(panels):
        r, c = i // 2 + 1, i % 2 + 1
        for layers in sorted(anchor["anchor_layers"].unique(), key=_layers_rank):
            part = anchor[anchor["anchor_layers"] == layers]
            summ = metric_summary(part, [col], confidence, spread)
            summ = summ.sort_values("anchor_lambda")
            name = f"ANCHOR, {_layers_label(layers) or 'anchored layers'}"
            color = sample_colorscale(_ANCHOR_SCALES.get(layers, _OTHER_ANCHOR_SCALE), [0.8])[0]
            mean = summ["mean"].to_numpy(float) * scale
            fig.add_trace(go.Scatter(
                x=summ["anchor_lambda"].to_numpy(float), y=mean, mode="lines+markers",
                name=name, legendgroup=name, showlegend=name not in shown_legend,
                line={"color": color, "dash": _LAYER_DASHES.get(layers, "dashdot"), "width": 2},
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
            s = _summarize(rows[rows["method"] == method], col, confidence, spread)
            if not np.isfinite(s["mean"]):
                continue
            fig.add_trace(go.Scatter(
                x=ref_x, y=[s["mean"] * scale] * 2, mode="lines", name=name, legendgroup=name,
                showlegend=name not in shown_legend, line={"color": color, "dash": dash},
                hovertemplate=(f"{name}<br>{ylab}: {s['mean'] * scale:.2f}<br>{s['interval']}"
                               "<extra></extra>"),
                meta={"column": col, "reference": method}), row=r, col=c)
            shown_legend.add(name)
        fig.update_xaxes(type="log", title_text="ANCHOR strength λ (log scale)", row=r, col=c)
        fig.update_yaxes(title_text=ylab, row=r, col=c)
    fig.update_layout(
        title=_title(f"What the anchor strength λ does ({caption})",
                     _interval_caption(metric_summary(anchor, ["acc_id"], confidence, spread))),
        template=TEMPLATE, height=820, autosize=True,
        legend=_BOTTOM_LEGEND, margin={"t": 110, "b": 170},
    )
    return fig


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
        marker_color=_OI["vermillion"] if flagged else _OI["blue"],
        hovertemplate="q %{x}<br>%{y} pairs<extra></extra>"))
    fig.add_vline(x=0.5, line={"dash": "dash", "color": "black"},
                  annotation_text="q = 0.5: no preference", annotation_position="top")
    fig.update_layout(
        title=_title(main, f"{what}: {stats_line}"),
        xaxis_title="soft label q = P(chosen preferred)", yaxis_title="pairs",
        xaxis_range=[0, 1], bargap=0.02, template=TEMPLATE, showlegend=False,
    )
    fig.layout.meta = {"q_mean": float(q.mean()), "q_confidence": float(conf.mean()),
                       "uninformative": bool(flagged)}
    if flagged:
        fig.update_layout(title_font_color=_OI["vermillion"])
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
    res = _results_arg(sweep_dir, results)
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
    for g in _group_table(rows).itertuples(index=False):
        ids = list(rows.loc[_group_mask(rows, g.method, g.anchor_lambda, g.anchor_layers),
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
                      "dash": _LAYER_DASHES.get(g.anchor_layers, "solid")
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
        title=_title("Training loss per step" + (f" ({caption})" if caption else ""),
                     f"mean over seeds, {sm}; from each run's history.parquet"
                     + ("; ANCHOR term = λ × the stored unweighted MSE" if anchored else "")),
        template=TEMPLATE, legend=_BOTTOM_LEGEND, margin={"t": 110, "b": 150}, height=520,
        autosize=True)
    fig.update_xaxes(title_text="optimiser step")
    if len(panels) > 1:
        fig.update_yaxes(title_text="loss", row=1, col=1)
        fig.update_yaxes(title_text="λ × MSE", row=1, col=2)
    else:
        fig.update_yaxes(title_text="fit loss")
    fig.layout.meta = {"window": window, "anchored": anchored, "runs": sorted(tables)}
    return fig


# --------------------------------------------------------------------------- paper style

#: column widths of a two-column paper, in inches (ACL / NeurIPS / IEEE are 3.3-3.5 single,
#: 6.9-7.2 double)
PAPER_WIDTHS: dict[str, float] = {"single": 3.5, "double": 7.2}
#: CSS pixels per inch: plotly lays figures out in CSS px, kaleido writes PDF / SVG at 96 px/in
CSS_DPI = 96
_PAPER_FONT = "Arial, Helvetica, 'Liberation Sans', 'DejaVu Sans', sans-serif"


def _pt(points: float) -> float:
    """A font size in printed points as CSS px (what plotly takes)."""
    return points * CSS_DPI / 72


def paper_width_inches(width: str | float) -> float:
    """``"single"`` (3.5 in), ``"double"`` (7.2 in) or a number of inches."""
    if isinstance(width, str):
        if width not in PAPER_WIDTHS:
            raise ValueError(f"paper width must be one of {sorted(PAPER_WIDTHS)} or inches, "
                             f"got {width!r}")
        return PAPER_WIDTHS[width]
    w = float(width)
    if not 1.0 <= w <= 20.0:
        raise ValueError(f"paper width {w} in is not a plausible figure width (1-20 in)")
    return w


def figure_caption(fig: go.Figure) -> str:
    """The figure's title and subtitle as plain text (for a caption list or a file name)."""
    import html as _html
    import re

    text = fig.layout.title.text or ""
    text = re.sub(r"<br\s*/?>", " — ", text, count=1)
    text = re.sub(r"<br\s*/?>", " ", text)
    return _html.unescape(re.sub(r"<[^>]+>", "", text)).strip(" —")


def _legend_entries(fig: go.Figure) -> list[str]:
    if fig.layout.showlegend is False:
        return []
    names, groups = [], set()
    for tr in fig.data:
        if tr.showlegend is False or not tr.name:
            continue
        key = tr.legendgroup or tr.name
        if key in groups:
            continue
        groups.add(key)
        names.append(str(tr.name))
    return names if len(names) > 1 or any(t.showlegend for t in fig.data) else []


def _legend_columns(names: Sequence[str], width_px: float, font_px: float) -> int:
    """How many equal columns a legend of ``names`` can take in ``width_px`` (an upper
    estimate of each entry: wide fonts, plotly's 40 px symbol and gap)."""
    longest = 40 + 0.62 * font_px * max((len(n) for n in names), default=0)
    return max(1, min(4, len(names), int(width_px // longest)))


def _wrap_html(text: str, width_px: float, font_px: float) -> str:
    """Wrap a plotly label (lines split by ``<br>``, a line may be one ``<sup>...</sup>``) to
    ``width_px``; lines with other markup are kept whole."""
    import re

    out = []
    for part in re.split(r"<br\s*/?>", text):
        sup = re.fullmatch(r"\s*<sup>(.*)</sup>\s*", part, flags=re.S)
        inner = sup.group(1) if sup else part
        f = font_px * (0.7 if sup else 1.0)
        if len(inner) * 0.56 * f <= width_px or "<" in inner:
            out.append(part)
            continue
        for line in _wrap_line(inner, max(12, int(width_px / (0.56 * f)))):
            out.append(f"<sup>{line}</sup>" if sup else line)
    return "<br>".join(out)


def _axis_domains(layout: go.Layout, prefix: str) -> dict[str, tuple[float, float]]:
    return {k: tuple(layout[k].domain) for k in layout
            if k.startswith(prefix) and layout[k].domain is not None}


def paper_style(fig: go.Figure, width: str | float = "single", *, aspect: float | None = None,
                font_pt: float = 8.0) -> go.Figure:
    """A copy of ``fig`` styled for a paper: returns the figure to export at ``width``.

    No in-figure title (:func:`figure_caption` gives it as text for the caption; it is kept in
    ``layout.meta["caption"]``), white background, Arial/Helvetica at ``font_pt`` points (tick
    labels 1 pt smaller) once printed at the column width, the Okabe-Ito colours of these
    figures, WebGL scatter traces drawn as vector scatter, and the legend in horizontal rows
    above the plot, in a top margin sized for the rows it wraps to, so that no legend entry
    is cut and none overlaps the axis titles. ``width``: ``"single"`` (3.5 in), ``"double"``
    (7.2 in) or inches; the plot area's height is ``aspect`` x its width (default 0.62 for one
    panel row, 0.9 for two). ``layout.width`` / ``height`` are in CSS px (96 per inch): export
    with :func:`export_paper_figure` to get the physical size in every format.
    """
    inches = paper_width_inches(width)
    out = go.Figure(fig)
    caption = figure_caption(fig)
    font_px, tick_px = _pt(font_pt), _pt(font_pt - 1)
    width_px = inches * CSS_DPI  # may be fractional (7.2 in = 691.2 px): exact sizes
    # WebGL traces are rasterised in a PDF / SVG: draw them as vector scatter
    data = []
    for tr in out.data:
        if tr.type == "scattergl":
            spec = tr.to_plotly_json()
            spec.pop("type", None)
            data.append(go.Scatter(**spec))
        else:
            data.append(tr)
    out = go.Figure(data=data, layout=out.layout)
    # panel rows and columns: the distinct domains of the axes
    xdoms, ydoms = _axis_domains(out.layout, "xaxis"), _axis_domains(out.layout, "yaxis")
    n_rows, n_cols = max(1, len(set(ydoms.values()))), max(1, len(set(xdoms.values())))
    if aspect is None:
        aspect = 0.62 if n_rows == 1 else 0.95
    names = _legend_entries(out)
    left, right = _pt(font_pt) * 4.5, _pt(font_pt) * 1.2
    plot_w = width_px - left - right
    cols = _legend_columns(names, plot_w, font_px)
    legend_rows = -(-len(names) // cols)
    legend_h = legend_rows * (font_px * 1.45 + 4) + (6 if legend_rows else 0)
    # subplot titles (and labels of lines at the top) sit above their panel, in the top
    # margin: wrap them to the panel's width and make room for the lines they take
    panel_w = plot_w / n_cols * 0.95
    sub_lines = 0
    for ann in out.layout.annotations:
        if not ann.text or not (ann.yref or "").endswith(("paper", "domain")):
            continue
        if ann.yanchor == "bottom" or (ann.y or 0) >= 0.99:
            ann.text = _wrap_html(str(ann.text), panel_w, font_px)
        if (ann.y or 0) >= 0.99:
            sub_lines = max(sub_lines, 1 + str(ann.text).count("<br"))
    # one x title under all panels when they share it, not one per panel run together
    xtitles = {out.layout[k].title.text for k in xdoms}
    shared_x = len(xdoms) > 1 and len(xtitles) == 1 and None not in xtitles
    if shared_x:
        bottom_dom = min(d[0] for d in ydoms.values()) if ydoms else 0.0
        for k in xdoms:
            out.layout[k].title.text = None
        out.add_annotation(text=xtitles.pop(), xref="paper", yref="paper", x=0.5,
                           y=bottom_dom, yanchor="top", yshift=-(font_px * 1.6 + 6),
                           showarrow=False, font={"size": font_px})
    top = legend_h + sub_lines * font_px * 1.35 + 6
    bottom = font_px * 4.2
    plot_h = (width_px - left - right) * aspect
    height_px = round(plot_h + top + bottom)
    out.update_layout(
        title=None, template=TEMPLATE, width=width_px, height=height_px, autosize=False,
        font={"family": _PAPER_FONT, "size": font_px, "color": "black"},
        paper_bgcolor="white", plot_bgcolor="white",
        margin={"l": left, "r": right, "t": top, "b": bottom, "pad": 0, "autoexpand": True},
        legend={"orientation": "h", "yref": "container", "y": 1.0, "yanchor": "top",
                "xref": "paper", "x": 0.0, "xanchor": "left", "font": {"size": font_px},
                "itemwidth": 30, "tracegroupgap": 0, "bgcolor": "rgba(0,0,0,0)",
                "title": {"text": ""},
                **({"entrywidth": 0.999 / cols, "entrywidthmode": "fraction"} if cols > 1
                   else {})},
        hoverlabel={"font": {"size": font_px}},
    )
    out.update_xaxes(automargin=True, tickfont={"size": tick_px}, title_font={"size": font_px},
                     title_standoff=4, showline=True, linecolor="black", ticks="outside",
                     ticklen=3, gridcolor="#e5e5e5", zeroline=False)
    out.update_yaxes(automargin=True, tickfont={"size": tick_px}, title_font={"size": font_px},
                     title_standoff=4, showline=True, linecolor="black", ticks="outside",
                     ticklen=3, gridcolor="#e5e5e5", zeroline=False)
    out.update_annotations(font_size=font_px)
    out.update_xaxes(dtick=1, selector={"type": "log"})  # decades, not 2 3 4 ... 9 between
    for tr in out.data:  # thinner markers and lines at print size
        if tr.type == "scatter" and tr.marker is not None and tr.marker.size is not None:
            size = tr.marker.size
            tr.marker.size = (max(3, size * 0.6) if isinstance(size, (int, float))
                              else [max(3, s * 0.6) for s in size])
    meta = dict(out.layout.meta) if isinstance(out.layout.meta, dict) else {}
    meta.update({"caption": caption, "width_in": inches, "font_pt": font_pt})
    out.layout.meta = meta
    return out


def _fix_svg_size(path: Path, width_in: float, height_in: float) -> None:
    """Give an SVG its physical size (``width="3.5in"``), keeping its viewBox in CSS px."""
    import re

    text = path.read_text(encoding="utf-8")
    head_end = text.index(">")
    head = text[:head_end]
    head = re.sub(r'\swidth="[^"]*"', f' width="{width_in:g}in"', head, count=1)
    head = re.sub(r'\sheight="[^"]*"', f' height="{height_in:.4g}in"', head, count=1)
    path.write_text(head + text[head_end:], encoding="utf-8")


def export_paper_figures(figs: Sequence[go.Figure], paths: Sequence[PathLike], *,
                         width: str | float = "single", dpi: int = 300,
                         aspect: float | None = None, font_pt: float = 8.0) -> list[Path]:
    """Write figures in :func:`paper_style` at their physical size, in one browser session.

    The format is each path's suffix (``.pdf``, ``.svg``, ``.png``): a PDF's page (MediaBox)
    is the column width in points (3.5 in = 252 pt), an SVG's ``width`` is in inches (its
    viewBox in CSS px), a PNG is ``inches x dpi`` pixels wide. Needs kaleido and a
    Chrome / Chromium browser; raises :class:`ExportError` saying how to get one otherwise
    (no HTML fallback: a paper needs the image).
    """
    figs, paths = list(figs), [Path(p).expanduser() for p in paths]
    if len(figs) != len(paths):
        raise ValueError(f"{len(figs)} figures but {len(paths)} paths")
    for p in paths:
        if p.suffix.lower() not in (".pdf", ".svg", ".png"):
            raise ValueError(f"paper figures are .pdf, .svg or .png, not {p.name!r}")
        p.parent.mkdir(parents=True, exist_ok=True)
    if dpi < 72 or dpi > 1200:
        raise ValueError(f"dpi must be between 72 and 1200, got {dpi}")
    styled = [paper_style(f, width, aspect=aspect, font_pt=font_pt) for f in figs]
    scales = [dpi / CSS_DPI if p.suffix.lower() == ".png" else 1.0 for p in paths]
    try:
        pio.write_images(styled, paths, scale=scales, width=[f.layout.width for f in styled],
                         height=[f.layout.height for f in styled])
    except Exception as exc:  # kaleido missing, no browser, browser crash ...
        raise ExportError(f"paper figure export failed ({type(exc).__name__}: {exc}). kaleido "
                          "needs a Chrome/Chromium browser: install one (Debian: apt-get install "
                          "chromium) or run plotly_get_chrome") from exc
    for f, p in zip(styled, paths, strict=True):
        if p.suffix.lower() == ".svg":
            _fix_svg_size(p, f.layout.meta["width_in"], f.layout.height / CSS_DPI)
    return paths


# --------------------------------------------------------------------------- export


def _wrap_line(text: str, max_chars: int) -> list[str]:
    words, lines, cur = text.split(" "), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > max_chars:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return lines + ([cur] if cur else [])


def wrap_title(fig: go.Figure, width_px: float) -> go.Figure:
    """A copy of ``fig`` whose title (main line and ``<sup>`` subtitle) is wrapped to fit
    ``width_px`` CSS px, with the top margin grown by the added lines (static images cannot
    reflow a long title: it would be cut at the right edge)."""
    import re

    text = fig.layout.title.text or ""
    out = go.Figure(fig)
    if not text:
        return out
    size = (fig.layout.title.font.size if fig.layout.title.font and fig.layout.title.font.size
            else 17)
    wrapped = _wrap_html(text, max(100.0, width_px - 30), size)
    added = len(re.split(r"<br\s*/?>", wrapped)) - len(re.split(r"<br\s*/?>", text))
    if added > 0:
        top = fig.layout.margin.t if fig.layout.margin.t is not None else 100
        out.update_layout(title_text=wrapped,
                          margin_t=top + added * size * 1.1)
    return out


def export_figure(fig: go.Figure, path: PathLike, *, fallback: bool = True, scale: float = 2.0,
                  width: int | None = None, height: int | None = None) -> Path:
    """Write ``fig`` to ``path`` by its suffix; returns the path actually written.

    ``.html`` / ``.htm``: a standalone page with plotly.js inline (opens offline).
    ``.png`` / ``.svg`` / ``.pdf`` / ``.jpg`` / ``.webp``: a static image through kaleido, which
    needs a Chrome / Chromium browser (Debian: ``apt-get install chromium``; or
    ``plotly_get_chrome``). When that fails and ``fallback`` is true, a standalone ``.html``
    is written next to the requested path instead (a warning says why); with
    ``fallback=False`` an :class:`ExportError` is raised.

    ``width`` / ``height`` are CSS px (default: the figure's own, else kaleido's 700 x 500);
    ``scale`` multiplies them for PNG / JPG / WEBP pixels (and, by kaleido, the SVG / PDF page
    size too). A static image cannot reflow, so a title longer than the image is wide is
    wrapped onto more lines (and the top margin grown to hold them) instead of being cut.
    The figure passed in is not changed. For a paper (no title, column width in inches,
    print font sizes) use :func:`paper_style` / :func:`export_paper_figures`, or
    ``anchorviz report DIR --figures pdf``.
    """
    out = Path(path).expanduser()
    suffix = out.suffix.lower()
    if suffix not in _HTML_SUFFIXES + _IMAGE_SUFFIXES:
        raise ValueError(f"cannot export to {out}: unknown suffix {out.suffix!r}; use one of "
                         f"{list(_HTML_SUFFIXES + _IMAGE_SUFFIXES)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix in _HTML_SUFFIXES:
        fig.write_html(out, include_plotlyjs=True, full_html=True)
        return out
    try:
        static = wrap_title(fig, width or fig.layout.width or 700)
        static.write_image(out, scale=scale, width=width, height=height)
        return out
    except Exception as exc:  # kaleido missing, no browser, browser crash ...
        reason = (f"static export to {out} failed ({type(exc).__name__}: {exc}). kaleido needs "
                  "a Chrome/Chromium browser: install one (Debian: apt-get install chromium) "
                  "or run plotly_get_chrome")
        if not fallback:
            raise ExportError(reason) from exc
        html = out.with_suffix(".html")
        fig.write_html(html, include_plotlyjs=True, full_html=True)
        logger.warning("%s; wrote a standalone HTML page %s instead", reason, html)
        return html
