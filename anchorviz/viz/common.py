"""What every figure shares: reading the stored tables, the palette, method labels and colours,
choosing what to show, and the mean-over-seeds summaries.

- reading: :func:`load_results` (a sweep's ``results.parquet``, grouping columns filled and
  typed) and :func:`load_run_table` (one run's parquet table, :data:`RUN_TABLES`), both cached
  by file modification time; :func:`run_path`.
- colours: the Okabe-Ito palette (:data:`OKABE_ITO`), the colours of methods, ANCHOR strengths,
  domains and response sides, and :data:`TEMPLATE`.
- labels: :func:`method_label` and the method groups (method, lambda, layers) in reading order
  with their colours.
- selections: one condition of a sweep (:func:`select_condition`), its targets
  (:func:`sweep_targets`, :func:`target_column`) and the splits of drift / projection tables.
- summaries: :func:`metric_summary`, the mean over seeds with its interval (:data:`SPREADS`).

The figure families (``accuracy``, ``drift``, ``projection``, ``training``, ``export``) build on
this module.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Sequence
from os import PathLike as OsPathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import sample_colorscale

from anchorviz.analysis.metrics import seed_summary
from anchorviz.analysis.summary import METHOD_KEYS, setting_columns, setting_key

#: one logger for every figure module (their warnings: missing tables, dropped runs)
logger = logging.getLogger("anchorviz.viz")

#: a directory or file path
PathLike = str | OsPathLike

__all__ = [
    "captured_mask",
    "METHOD_COLORS",
    "METHOD_NAMES",
    "METHOD_ORDER",
    "MIN_CEILING_DELTA_E",
    "OKABE_ITO",
    "PathLike",
    "RESULTS_FILE",
    "RUN_TABLES",
    "SPREADS",
    "TEMPLATE",
    "color_distance",
    "load_results",
    "load_run_table",
    "method_label",
    "metric_summary",
    "run_path",
    "select_condition",
    "sweep_targets",
    "target_column",
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
OI = OKABE_ITO
METHOD_COLORS = {
    "teacher": OI["grey"],
    "naive": OI["vermillion"],
    "confidence": OI["orange"],
    "seam": OI["reddish_purple"],
    "ceiling": OI["black"],
}
# ANCHOR: one light-to-dark ramp of an Okabe-Ito hue per layer choice, darker = stronger
# lambda (line style tells the layer choices apart as well). Each ramp stops well before
# near-black, so that the strongest lambda is never mistaken for the ceiling's black: every
# shade stays at least MIN_CEILING_DELTA_E (CIELAB distance, `color_distance`) from it
ANCHOR_SCALES = {
    "last": [[0.0, "#cfe6f5"], [0.5, OI["blue"]], [1.0, "#005a8c"]],
    "middle": [[0.0, "#c2ebde"], [0.5, OI["bluish_green"]], [1.0, "#005c43"]],
    "all": [[0.0, "#f3d9e7"], [0.5, OI["reddish_purple"]], [1.0, "#763560"]],
}
OTHER_ANCHOR_SCALE = [[0.0, "#d9d9d9"], [1.0, "#666666"]]
#: the least CIELAB distance (CIE76 delta E) between the ceiling's colour and any ANCHOR shade;
#: about 2.3 is just noticeable side by side, thin lines and small markers need far more
MIN_CEILING_DELTA_E = 40.0
LAYER_DASHES = {"last": "solid", "middle": "dash", "all": "dot"}
DOMAIN_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
DOMAIN_COLORS = (OI["blue"], OI["orange"], OI["bluish_green"], OI["reddish_purple"],
                  OI["sky_blue"], OI["vermillion"], OI["black"])
# chosen / rejected: blue / orange (a pair that colour-blind readers tell apart), not green / red
SIDE_COLORS = {"chosen": OI["blue"], "rejected": OI["orange"]}
#: in / out of distribution in the accuracy figures; the transfer scores
ID_COLOR, OOD_COLOR = OI["blue"], OI["orange"]
TRANSFER_COLORS = {"wrg": OI["blue"], "aog": OI["orange"], "nts": OI["bluish_green"]}
GROUP_KEYS = ["method", "anchor_lambda", "anchor_layers"]
TRANSFER_NAMES = {
    "wrg": "WRG: ID gain",
    "aog": "AOG: OOD gain",
    "nts": "NTS: OOD gain - ID loss",
}
TOP_LEGEND = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0}
# below the axis titles, in the figure's own bottom margin (container coordinates)
BOTTOM_LEGEND = {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.01,
                  "xanchor": "left", "x": 0.0}

def _template() -> go.layout.Template:
    t = go.layout.Template(pio.templates["plotly_white"])
    t.layout.colorway = [OKABE_ITO[k] for k in ("blue", "orange", "bluish_green", "vermillion",
                                                 "reddish_purple", "sky_blue", "black", "yellow")]
    return t


#: plotly_white with the Okabe-Ito colours as the colour cycle (traces without an explicit
#: colour get them too); the explorer's panels use it as well
TEMPLATE = _template()


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


def normalize_results(df: pd.DataFrame, where: str) -> pd.DataFrame:
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
    return normalize_results(_read_parquet(path), str(path))


def results_arg(sweep_dir: PathLike | None, results: pd.DataFrame | None) -> pd.DataFrame:
    if results is not None:
        return normalize_results(results, "passed as results=")
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


def layers_label(spec: str) -> str:
    if spec in ("", "nan"):
        return ""
    return {"last": "last layer", "middle": "middle layers", "all": "all layers"}.get(
        spec, f"layers {spec}")


def method_label(method: str, anchor_lambda: float = 0.0, anchor_layers: str = "") -> str:
    """A reader's name for a method (``"ANCHOR λ=0.1 (last layer)"``, ``"naive W2S"`` ...)."""
    if method == "anchor":
        layers = layers_label(str(anchor_layers))
        return f"ANCHOR λ={anchor_lambda:g}" + (f" ({layers})" if layers else "")
    return METHOD_NAMES.get(method, method)


def method_rank(method: str) -> int:
    return METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER) - 1


def layers_rank(spec: str) -> tuple[int, str]:
    order = {"last": 0, "middle": 1, "all": 2}
    return (order.get(spec, 3), spec)


def group_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, lambda, layers) with ``label`` and ``color``, in reading order."""
    groups = rows[GROUP_KEYS].drop_duplicates().reset_index(drop=True)
    groups["_rank"] = [(method_rank(m), layers_rank(la), lam)
                       for m, lam, la in groups[GROUP_KEYS].itertuples(index=False)]
    groups = groups.sort_values("_rank", kind="stable").drop(columns="_rank").reset_index(drop=True)
    groups["label"] = [method_label(m, lam, la)
                       for m, lam, la in groups[GROUP_KEYS].itertuples(index=False)]
    groups["color"] = [_group_color(m, lam, la, rows) for m, lam, la in
                       groups[GROUP_KEYS].itertuples(index=False)]
    return groups


def _group_color(method: str, anchor_lambda: float, anchor_layers: str,
                 rows: pd.DataFrame) -> str:
    if method != "anchor":
        return METHOD_COLORS.get(method, OI["sky_blue"])
    lams = unique_values(rows.loc[rows["method"] == "anchor", "anchor_lambda"])
    frac = 0.85 if len(lams) < 2 else 0.4 + 0.55 * lams.index(anchor_lambda) / (len(lams) - 1)
    scale = ANCHOR_SCALES.get(anchor_layers, OTHER_ANCHOR_SCALE)
    return sample_colorscale(scale, [frac])[0]


def _rgb(color: str) -> tuple[float, float, float]:
    """(r, g, b) in [0, 1] of ``"#rrggbb"`` or ``"rgb(r, g, b)"`` (what plotly's colour scales
    give)."""
    c = color.strip()
    if c.startswith("#") and len(c) == 7:
        return tuple(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]
    m = re.fullmatch(r"rgba?\(\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*(?:,[^)]*)?\)", c)
    if not m:
        raise ValueError(f"not a colour of the form '#rrggbb' or 'rgb(r, g, b)': {color!r}")
    return tuple(float(v) / 255 for v in m.groups())  # type: ignore[return-value]


def _lab(color: str) -> np.ndarray:
    """CIELAB (D65) coordinates of an sRGB colour."""
    rgb = np.array(_rgb(color))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                    [0.0193, 0.1192, 0.9505]]) @ lin / np.array([0.95047, 1.0, 1.08883])
    d = 6 / 29
    f = np.where(xyz > d ** 3, np.cbrt(xyz), xyz / (3 * d * d) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def color_distance(a: str, b: str) -> float:
    """How far apart two colours look: the CIE76 delta E, the Euclidean distance in CIELAB
    (0 = the same colour; black to white is 100)."""
    return float(np.linalg.norm(_lab(a) - _lab(b)))


def group_mask(rows: pd.DataFrame, method: str, anchor_lambda: float,
                anchor_layers: str) -> pd.Series:
    return ((rows["method"] == method) & np.isclose(rows["anchor_lambda"], anchor_lambda)
            & (rows["anchor_layers"] == anchor_layers))


# --------------------------------------------------------------------------- selections


def captured_mask(rows: pd.DataFrame) -> pd.Series:
    """True for the rows of runs that kept hidden states (drift, maps): False for a scores-only
    run (``capture.enabled`` false, a sweep's verdict-only seed); tables made before the
    ``captured`` column existed count every run as captured."""
    if "captured" not in rows:
        return pd.Series(True, index=rows.index)
    return rows["captured"].fillna(True).astype(bool)


def unique_values(col: pd.Series) -> list[Any]:
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


def _setting_mask(col: pd.Series, value: Any) -> pd.Series:
    if pd.api.types.is_numeric_dtype(col) and isinstance(value, (int, float)):
        return pd.Series(np.isclose(col.astype(float), float(value)), index=col.index)
    return col.astype(str) == str(value)


def _setting_applies(rows: pd.DataFrame, col: str) -> tuple[pd.Series, pd.Series]:
    """``(present, applies)`` per row: the setting ``col`` has a value, and some run of the
    row's method group (`METHOD_KEYS`) has one (where none does, it does not apply)."""
    present = rows[col].notna()
    keys = [k for k in METHOD_KEYS if k in rows.columns]
    if not keys:
        return present, pd.Series(True, index=rows.index)
    groups = [setting_key(rows[k]) for k in keys]
    return present, present.groupby(groups).transform("any").astype(bool)


def select_condition(results: pd.DataFrame, artifact_strength: float | None = None,
                     source: str | None = None, settings: dict[str, Any] | None = None,
                     prefer: dict[str, Any] | None = None) -> tuple[pd.DataFrame, str]:
    """The rows of one experimental condition: one source dataset, one artefact strength and
    one value of every other setting that varies among the runs (`setting_columns`: teacher
    visibility, model, split sizes ...), so that a mean over seeds never pools settings.

    Unset, the largest artefact strength (the strongest shortcut), the first source and the
    first value of every other setting are chosen (``settings``: ``{column: value}`` chooses;
    ``prefer``: values taken where that setting varies and has them, else the first, e.g. the
    values of a folder's current grid); the returned caption names each choice, for figure
    titles. A setting that a whole method group lacks (a teacher's row has no ``cfg.teacher.*``)
    does not tell its runs apart: they are kept whichever value is chosen.
    """
    if results.empty:
        raise ValueError("the results table has no runs")
    src = _pick_value(unique_values(results["source"]), source, "source", "first")
    rows = results[results["source"] == src]
    strength = _pick_value(unique_values(rows["artifact_strength"]), artifact_strength,
                           "artifact_strength", "max")
    rows = rows[np.isclose(rows["artifact_strength"], strength)]
    wanted = dict(settings or {})
    chosen = []
    for col in setting_columns(rows, ignore=("source", "artifact_strength")):
        # a run whose whole method group lacks the setting (a teacher has no `cfg.teacher.*`)
        # is not told apart by it: it stays whichever value is chosen
        present, applies = _setting_applies(rows, col)
        col_values = rows.loc[applies, col].astype(object).where(present[applies], "-")
        try:
            values = unique_values(col_values)
        except TypeError:  # a missing value ("-") among numbers
            values = sorted(col_values.unique(), key=str)
        want = wanted.pop(col, None)
        if not values:  # no run left that has the setting: it no longer tells them apart
            if want is not None:
                raise ValueError(f"{col} is not set on any of the runs chosen by the other "
                                 f"settings ({', '.join(chosen) or 'none'})")
            continue
        if want is None and prefer and col in prefer and prefer[col] in values:
            want = prefer[col]
        value = _pick_value(values, want, col, "first")
        same = ~present if value == "-" else present & _setting_mask(rows[col], value)
        rows = rows[same | ~applies]
        chosen.append(f"{col.removeprefix('cfg.')} {value:g}" if isinstance(value, float)
                      else f"{col.removeprefix('cfg.')} {value}")
    if wanted:
        raise ValueError(f"settings {sorted(wanted)} do not vary among these runs (varying: "
                         f"{setting_columns(results)})")
    parts = [f"source {src}"] if src else []
    kinds = [k for k in rows["artifact_kind"].unique() if k not in ("none", "")]
    if kinds or results["artifact_strength"].nunique() > 1:
        parts.append(f"artefact {'/'.join(kinds) or 'none'} strength {strength:g}")
    return rows, ", ".join(parts + chosen)


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


def split_sort_key(split: str) -> tuple[int, str]:
    return (0 if split == "source_test" else 1, split)


def resolve_splits(available: Sequence[str], split: str | Sequence[str] | None) -> list[str]:
    """Splits to show: None = all; ``"source"``, a target name or an exact split name."""
    avail = sorted(set(available), key=split_sort_key)
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


def split_desc(split: str, table: pd.DataFrame) -> str:
    dom = ""
    if "domain" in table.columns:
        doms = table.loc[table["split"] == split, "domain"].astype(str).unique()
        dom = doms[0] if len(doms) else ""
    if split == "source_test":
        return f"source ({dom})" if dom else "source"
    name = _target_name(split)
    return f"target ({dom})" if dom and dom != name else f"target ({name})"


# --------------------------------------------------------------------------- summaries


SPREADS = ("auto", "t", "minmax")


def summarize_groups(rows: pd.DataFrame, col: str, confidence: float,
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

    Raises:
        ValueError: the runs differ in a setting (`setting_columns`, e.g. the teacher
            visibility): choose one with :func:`select_condition` first.
    """
    varying = setting_columns(results)
    if varying:
        vals = {c: unique_values(results[c].astype(str)) for c in varying}
        raise ValueError("these runs differ in " + ", ".join(f"{c} {v}" for c, v in vals.items())
                         + ": a mean over seeds would pool different settings as if they were "
                         "seeds; select one (select_condition(..., settings={...}))")
    out = []
    for g in group_table(results).itertuples(index=False):
        rows = results[group_mask(results, g.method, g.anchor_lambda, g.anchor_layers)]
        for col in columns:
            out.append({"method": g.method, "anchor_lambda": g.anchor_lambda,
                        "anchor_layers": g.anchor_layers, "label": g.label, "color": g.color,
                        "column": col, **summarize_groups(rows, col, confidence, spread)})
    return pd.DataFrame(out, columns=["method", "anchor_lambda", "anchor_layers", "label", "color",
                                      "column", "mean", "lo", "hi", "n", "interval"])


def interval_caption(summary: pd.DataFrame) -> str:
    """What the error bars are, once each: "95% t-interval over 4 seeds" and "... over 5
    seeds" read "95% t-interval over 4 or 5 seeds"."""
    import re

    kinds = sorted(set(summary.loc[summary["n"] > 0, "interval"]))
    if not kinds:
        return "no values"
    merged: dict[str, list[int]] = {}
    for k in kinds:
        m = re.fullmatch(r"(.*) over (\d+) seeds?", str(k))
        if m:
            merged.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            merged.setdefault(str(k), [])
    def seeds(ns: list[int]) -> str:
        ns = sorted(set(ns))
        if len(ns) == 1:
            return f"{ns[0]} seed{'s' if ns[0] != 1 else ''}"
        return ", ".join(map(str, ns[:-1])) + f" or {ns[-1]} seeds"

    kinds = [head if not ns else f"{head} over {seeds(ns)}" for head, ns in merged.items()]
    ns = [int(n) for n in summary.loc[summary["n"] > 0, "n"]]
    head = f"mean over {seeds(ns)}; " if max(ns) > 1 else ""
    return head + "error bars: " + "; ".join(kinds)


def bar_arrays(summary: pd.DataFrame, scale: float) -> dict[str, Any]:
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


def shared_x_title(fig: go.Figure, text: str, standoff: float = 30.0) -> None:
    """One x-axis title centred under side-by-side panels, in place of one per panel (those run
    into each other when the panels are narrow): an annotation named ``"shared x title"``,
    ``standoff`` px below the plot area (under the tick labels)."""
    fig.update_xaxes(title_text=None)
    fig.add_annotation(text=text, name="shared x title", xref="paper", x=0.5, xanchor="center",
                       yref="paper", y=0.0, yanchor="top", yshift=-standoff, showarrow=False,
                       font={"size": 14})


def figure_title(main: str, sub: str = "") -> dict[str, Any]:
    text = main + (f"<br><sup>{sub}</sup>" if sub else "")
    return {"text": text, "x": 0.01, "xanchor": "left"}
