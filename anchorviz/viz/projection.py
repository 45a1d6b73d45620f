"""UMAP figures: the reference's and the student's hidden states of one run in one shared 2-D
map (``projection.parquet``, fitted on the frozen reference's states).

- :func:`umap_figure` -- the map of one layer, coloured by domain, by response side or by the
  planted marker (marked / hidden from the teacher / clean), with lines from a sample of
  reference points to where the student put them; hovering a point shows its pair id and, for
  runs that stored it, the start of the response's text.
- :func:`umap_groups` / :func:`umap_movement` -- the point groups and movement lines it draws
  (the explorer draws them too).
- :func:`projection_method` -- ``"UMAP"`` or ``"PCA"``: which map a run's table holds.
"""

from __future__ import annotations

import html
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from anchorviz.viz.common import (
    BOTTOM_LEGEND,
    DOMAIN_COLORS,
    OKABE_ITO,
    SIDE_COLORS,
    TEMPLATE,
    PathLike,
    figure_title,
    load_results,
    load_run_table,
    logger,
    method_label,
    resolve_splits,
    split_desc,
    split_sort_key,
)

__all__ = ["ARTIFACT_GROUPS", "COLOR_BY", "artifact_status", "projection_method", "umap_figure",
           "umap_groups", "umap_movement"]

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


#: ``color_by`` values of :func:`umap_figure` / :func:`umap_groups`
COLOR_BY = ("domain", "side", "artifact")
#: the planted marker's groups: (label, colour), in drawing order
ARTIFACT_GROUPS = {
    "clean": ("clean pairs (no marker)", OKABE_ITO["blue"]),
    "seen": ("marked, the teacher read the marker", OKABE_ITO["orange"]),
    "hidden": ("marked, hidden from the teacher", OKABE_ITO["vermillion"]),
    "marked": ("marked pairs", OKABE_ITO["vermillion"]),
}


def artifact_status(scores: pd.DataFrame) -> pd.DataFrame:
    """``split, pair_id, artifact`` from a run's ``scores.parquet``: ``"clean"`` (no planted
    marker), ``"seen"`` / ``"hidden"`` (marked; the teacher's copy did / did not carry it), or
    ``"marked"`` when the teacher saw every marker. Raises ValueError when the table lacks the
    ``artifact_side`` / ``artifact_seen`` columns (a run made before they were stored) or no
    pair carries a marker."""
    missing = [c for c in ("split", "pair_id", "artifact_side", "artifact_seen")
               if c not in scores.columns]
    if missing:
        raise ValueError(f"scores.parquet lacks {missing}: colouring by the planted marker needs "
                         "a run made since scores.parquet stores each pair's artifact_side / "
                         "artifact_seen (older runs: colour by domain or side)")
    side = scores["artifact_side"]
    marked = side.notna() & side.astype(str).isin(["chosen", "rejected"])
    if not marked.any():
        raise ValueError("no pair of this run carries a planted marker (artifact_side is empty): "
                         "nothing to colour by artefact")
    hidden = marked & scores["artifact_seen"].astype("boolean").eq(False).fillna(False)
    if hidden.any():  # the teacher read only some markers: tell those it missed apart
        status = np.where(~marked, "clean", np.where(hidden, "hidden", "seen"))
    else:
        status = np.where(marked, "marked", "clean")
    return pd.DataFrame({"split": scores["split"].astype(str).to_numpy(),
                         "pair_id": scores["pair_id"].astype(str).to_numpy(),
                         "artifact": status}).drop_duplicates(["split", "pair_id"])


def umap_groups(proj: pd.DataFrame, layer: int | None = None, color_by: str = "domain",
                target: str | None = None, *,
                scores: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """Point groups of a projection table for one layer: what one colour of the map shows.

    Returns a list of ``{"label", "color", "reference": DataFrame, "student": DataFrame}``:
    for ``color_by="domain"`` one group per split (source first, then targets, only ``target``
    when given), for ``"side"`` one group per preference side (chosen, rejected), for
    ``"artifact"`` one group per :func:`artifact_status` of the pair (both responses of a pair
    share it; needs the run's ``scores``): clean, marked and read by the teacher, marked and
    hidden from it (or just "marked" when the teacher read every marker). Empty groups are
    left out.
    """
    if color_by not in COLOR_BY:
        raise ValueError(f"color_by must be one of {list(COLOR_BY)}, got {color_by!r}")
    if color_by == "artifact" and scores is None:
        raise ValueError("color_by='artifact' needs the run's scores table (scores=)")
    _check_projection(proj, "")
    lay = _projection_layer(proj, layer)
    part = proj[proj["layer"] == lay]
    splits = sorted(part["split"].unique(), key=split_sort_key)
    if target is not None:
        splits = ["source_test"] + resolve_splits(splits, target)
        splits = [s for s in dict.fromkeys(splits) if s in set(part["split"])]
        part = part[part["split"].isin(splits)]
    model = part["model"].astype(str)
    groups = []
    if color_by == "domain":
        for i, s in enumerate(splits):
            sel = part["split"] == s
            groups.append({"label": split_desc(s, part),
                           "color": DOMAIN_COLORS[i % len(DOMAIN_COLORS)],
                           "reference": part[sel & (model == "reference")],
                           "student": part[sel & (model == "student")]})
    elif color_by == "artifact":
        status = artifact_status(scores)
        keyed = part.assign(_split=part["split"].astype(str), _pair=part["pair_id"].astype(str))
        what = keyed.merge(status, left_on=["_split", "_pair"], right_on=["split", "pair_id"],
                           how="left", suffixes=("", "_s"))["artifact"].fillna("clean")
        what.index = part.index
        for key, (label, color) in ARTIFACT_GROUPS.items():
            sel = what == key
            if sel.any():
                groups.append({"label": label, "color": color,
                               "reference": part[sel & (model == "reference")],
                               "student": part[sel & (model == "student")]})
    else:
        for side, color in SIDE_COLORS.items():
            sel = part["side"] == side
            groups.append({"label": f"{side} responses", "color": color,
                           "reference": part[sel & (model == "reference")],
                           "student": part[sel & (model == "student")]})
    return groups


def subsample(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
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
    stu = subsample(stu, n_lines, seed)
    m = stu.merge(ref, on=["split", "pair_id", "side"], suffixes=("_s", "_r"))
    nan = np.full(len(m), np.nan)
    x = np.column_stack([m["x_r"].to_numpy(float), m["x_s"].to_numpy(float), nan]).ravel()
    y = np.column_stack([m["y_r"].to_numpy(float), m["y_s"].to_numpy(float), nan]).ravel()
    return x, y


def hover_custom(df: pd.DataFrame) -> np.ndarray:
    """Per point: pair id, side, domain and ``"<br>"`` + the start of the response's text (the
    projection table's ``text`` column, escaped; empty for runs made before it was stored)."""
    dom = df["domain"] if "domain" in df.columns else df["split"]
    if "text" in df.columns:
        text = ["" if pd.isna(t) else "<br>“" + html.escape(str(t)) + "”" for t in df["text"]]
    else:
        text = [""] * len(df)
    return np.column_stack([df["pair_id"].astype(str), df["side"].astype(str), dom.astype(str),
                            np.array(text, dtype=object)])


UMAP_HOVER = ("pair %{customdata[0]} (%{customdata[1]})<br>%{customdata[2]}%{customdata[3]}"
              "<extra>%{fullData.name}</extra>")


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
    scores: pd.DataFrame | None = None,
) -> go.Figure:
    """Reference vs student hidden states of one run in one shared 2-D map.

    The map (UMAP, or PCA when UMAP was unavailable; :func:`projection_method` says which, and
    the title and axes name it) was fitted on the frozen reference's states, so the reference's
    points (open circles, drawn on top so that they stay visible) are where the pretrained
    model puts each response and the student's points (filled diamonds) are where training
    moved them; grey lines join the two positions for a seeded sample of ``n_lines``
    responses. ``color_by="domain"`` colours source vs target domains (only ``target`` when
    given), ``"side"`` chosen vs rejected responses, ``"artifact"`` the planted marker's story:
    clean pairs, marked pairs whose marker the teacher read and marked pairs hidden from it
    (from the run's ``scores.parquet`` ``artifact_side`` / ``artifact_seen``, or ``scores``).
    Hovering a point shows its pair id and, when the run stored it (``text``), the first
    characters of the response. ``layer=None`` is the last projected layer. ``max_points``
    subsamples each group (seeded) for large runs.
    """
    if projection is None:
        if run_dir is None:
            raise ValueError("pass a run directory or an already loaded projection table")
        projection = load_run_table(run_dir, "projection")
    _check_projection(projection, str(run_dir or "passed as projection="))
    lay = _projection_layer(projection, layer)
    if color_by == "artifact" and scores is None:
        if run_dir is None:
            raise ValueError("color_by='artifact' needs the run directory or its scores table "
                             "(scores=)")
        scores = load_run_table(run_dir, "scores")
    groups = umap_groups(projection, lay, color_by, target, scores=scores)
    if max_points is not None:
        groups = [{**g, "reference": subsample(g["reference"], max_points, seed),
                   "student": subsample(g["student"], max_points, seed)} for g in groups]
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
            customdata=hover_custom(g["student"]), hovertemplate=UMAP_HOVER,
            meta={"model": "student", "group": g["label"]}))
    for g in groups:
        fig.add_trace(go.Scattergl(
            x=g["reference"]["x"].to_numpy(float), y=g["reference"]["y"].to_numpy(float),
            mode="markers", name=f"reference (pretrained) · {g['label']}", legendgroup=g["label"],
            marker={"color": g["color"], "size": 7, "opacity": 0.9, "symbol": "circle-open",
                    "line": {"width": 1.5}},
            customdata=hover_custom(g["reference"]), hovertemplate=UMAP_HOVER,
            meta={"model": "reference", "group": g["label"]}))
    caption = title or (_run_caption(Path(run_dir)) if run_dir is not None else "")
    what = f"shared {how}" if how != "map" else "shared map"
    fig.update_layout(
        title=figure_title(f"Reference vs student in one {what}, layer {lay}"
                     + (f" — {caption}" if caption else ""),
                     f"{how} fitted on the frozen reference's states; open circles = "
                     "reference, filled diamonds = student, lines = where training moved a "
                     "response"),
        xaxis_title=f"{how} axis 1 (fitted on reference states; unitless)",
        yaxis_title=f"{how} axis 2 (unitless)", template=TEMPLATE,
        legend=BOTTOM_LEGEND, margin={"t": 100, "b": 190}, height=680, autosize=True,
    )
    fig.layout.meta = {"projection_method": how}
    # one unit is as long on both axes; the plot box narrows to the data (constrain="domain")
    # instead of the range widening past it, so the points fill the box and the movement
    # lines stay long enough to see
    pts = [np.concatenate([g[m][c].to_numpy(float) for g in groups for m in ("student",
                                                                             "reference")])
           for c in ("x", "y")]
    for axis, v in zip(("xaxis", "yaxis"), pts):
        v = v[np.isfinite(v)]
        if len(v):
            lo, hi = float(v.min()), float(v.max())
            pad = 0.04 * max(hi - lo, 1e-6)
            fig.layout[axis].update(range=[lo - pad, hi + pad], constrain="domain")
    fig.update_yaxes(scaleanchor="x", scaleratio=1)
    return fig
