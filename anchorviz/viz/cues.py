"""Which surface cues each model follows, per target: :func:`cue_reliance_figure`.

Every run's ``metrics.json`` holds a ``cues`` block (`anchorviz.pipeline.results.cue_block`):
per evaluated split (``source_test``, each ``target_test:<name>``, ``ood`` = the targets
pooled) and per cue (`anchorviz.analysis.cues`: length, refusal, format, the planted
marker / order / echo), the model's accuracy where the cue's side is the chosen response
(``agree``), where it is the rejected one (``disagree``), and its ``follow`` rate: the share of
the cue's pairs on which the model prefers the cue's side, each with a 95% interval. Runs made
before the block existed are read with `anchorviz.pipeline.results.run_cues` (from their stored
scores; nothing is retrained).

What matters is the follow rate where the cue DISAGREES with the label: there, following the
cue is an error, and a model that learned the task instead of the cue rarely does. That rate
is ``1 - disagree accuracy`` (ties count half on both sides), and its interval is ``[1 - hi,
1 - lo]`` of the stored one (a percentile bootstrap or a Wilson interval: both map exactly under
``p -> 1 - p``). A block without the disagree slice falls back to the overall follow rate, and
the title says which one is shown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from anchorviz.analysis.cues import known_cues
from anchorviz.pipeline.results import run_cues
from anchorviz.viz.common import (
    BOTTOM_LEGEND,
    TEMPLATE,
    PathLike,
    figure_title,
    group_mask,
    interval_caption,
    logger,
    metric_summary,
    results_arg,
    select_condition,
)

__all__ = ["CUE_SLICES", "MIN_PAIRS", "cue_reliance_figure", "cue_value", "has_cue_blocks",
           "load_cue_blocks"]

#: a bar whose slice holds fewer pairs than this (in any seed) is faded and hatched
MIN_PAIRS = 10

#: what the bars show: ``"disagree"`` the follow rate on the pairs where the cue's side is the
#: rejected response (falls back to ``"all"`` per run where the block lacks it); ``"all"`` the
#: follow rate on every pair where the cue picks a side
CUE_SLICES = ("disagree", "all")

_TINY_OPACITY = 0.3


def _stored_block(run_dir: Path) -> dict | None:
    """The ``cues`` block of a run's metrics.json, None when it has none (or no metrics)."""
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    block = metrics.get("cues") if isinstance(metrics, dict) else None
    return block if isinstance(block, dict) and block else None


def has_cue_blocks(sweep_dir: PathLike, run_ids: Sequence[str]) -> bool:
    """Whether any of these runs of ``sweep_dir`` stores a ``cues`` block in its metrics.json
    (reads the files only; rebuilds nothing)."""
    root = Path(sweep_dir) / "runs"
    return any(_stored_block(root / str(r)) is not None for r in run_ids)


def load_cue_blocks(sweep_dir: PathLike, run_ids: Sequence[str], rebuild: bool = True
                    ) -> dict[str, dict]:
    """``{run_id: cues block}`` of these runs of ``sweep_dir``: the block stored in the run's
    metrics.json or, with ``rebuild``, `anchorviz.pipeline.results.run_cues` for a run without
    one. A run with neither is left out (logged)."""
    root = Path(sweep_dir) / "runs"
    out: dict[str, dict] = {}
    for rid in run_ids:
        run_dir = root / str(rid)
        block = _stored_block(run_dir)
        if block is None and rebuild:
            try:
                block = run_cues(run_dir)
            except Exception as err:  # an old or foreign run: shown without it
                logger.warning("cues: run %s has no cues block and none could be rebuilt "
                               "(%s); left out of the cue figure", rid, err)
        if block:
            out[str(rid)] = block
    return out


def _num(v: Any) -> float:
    return np.nan if v is None else float(v)


def cue_value(block: dict, split: str, cue: str, on: str = "disagree") -> dict[str, Any] | None:
    """What the figure shows for one run, split and cue: ``{"point", "lo", "hi", "n",
    "slice"}`` as fractions (NaN where undefined). ``on="disagree"``: the follow rate on the
    pairs where the cue's side is the rejected response, ``1 - disagree accuracy`` with the
    interval ``[1 - hi, 1 - lo]`` (``slice`` ``"disagree"``), or the overall follow rate when
    the block lacks that slice (``slice`` ``"all"``); ``on="all"``: the overall follow rate.
    None when the block has no entry for the split and cue."""
    if on not in CUE_SLICES:
        raise ValueError(f"on must be one of {CUE_SLICES}, got {on!r}")
    entry = (block.get(split) or {}).get(cue)
    if not isinstance(entry, dict):
        return None
    dis = entry.get("disagree")
    if on == "disagree" and isinstance(dis, dict) and "point" in dis:
        return {"point": 1.0 - _num(dis["point"]), "lo": 1.0 - _num(dis.get("hi")),
                "hi": 1.0 - _num(dis.get("lo")), "n": int(dis.get("n") or 0),
                "slice": "disagree"}
    fol = entry.get("follow") or {}
    return {"point": _num(fol.get("point")), "lo": _num(fol.get("lo")),
            "hi": _num(fol.get("hi")), "n": int(fol.get("n", entry.get("n")) or 0),
            "slice": "all"}


def _resolve_panels(available: Sequence[str], split: str | Sequence[str] | None) -> list[str]:
    """The block splits to draw, one panel each: None = every target (the source when the runs
    have no target); else ``"source"``, ``"ood"`` (targets pooled), target names or split
    names."""
    avail = list(dict.fromkeys(available))
    targets = [s for s in avail if s.startswith("target_test:")]
    if split is None:
        if targets:
            return targets
        return [s for s in avail if s == "source_test"] or avail[:1]
    out = []
    for w in [split] if isinstance(split, str) else list(split):
        name = {"source": "source_test", "targets": "ood", "pooled": "ood"}.get(w, w)
        if name not in avail and f"target_test:{name}" in avail:
            name = f"target_test:{name}"
        if name not in avail:
            choices = ([s for s in ("source", "ood") if {"source": "source_test"}.get(s, s)
                        in avail] + [t.split(":", 1)[1] for t in targets])
            raise ValueError(f"split {w!r} is not in the runs' cues blocks; choose from "
                             f"{choices}")
        out.append(name)
    return out


def _split_title(split: str) -> str:
    if split == "source_test":
        return "source test split"
    if split == "ood":
        return "targets pooled"
    return f"target {split.split(':', 1)[-1]}"


def _resolve_cues(blocks: dict[str, dict], panels: Sequence[str],
                  cue: str | Sequence[str] | None) -> list[str]:
    present = list(dict.fromkeys(c for b in blocks.values() for s in panels
                                 for c in (b.get(s) or {})))
    if cue is None:
        order = {c: i for i, c in enumerate(known_cues())}
        return sorted(present, key=lambda c: (order.get(c, len(order)), present.index(c)))
    wanted = [cue] if isinstance(cue, str) else list(cue)
    unknown = [c for c in wanted if c not in present]
    if unknown:
        raise ValueError(f"cue(s) {unknown} are not in the runs' cues blocks; they hold "
                         f"{present}")
    return list(dict.fromkeys(wanted))


def _cue_columns(rows: pd.DataFrame, blocks: dict[str, dict], panels: Sequence[str],
                 cues: Sequence[str], on: str
                 ) -> tuple[pd.DataFrame, dict[str, dict[str, dict[str, Any]]],
                            dict[tuple[str, str], str], set[str]]:
    """``(rows with a column per (panel, cue), {column: {run id: value}}, {(panel, cue):
    column}, the slices seen)``: one column per (panel, cue) holding the value each run shows
    (and its ``_lo``, ``_hi``, ``_n``), so metric_summary averages seeds."""
    values: dict[str, dict[str, dict[str, Any]]] = {}
    cols: dict[tuple[str, str], str] = {}
    slices: set[str] = set()
    for sp in panels:
        for c in cues:
            col = cols[(sp, c)] = f"{sp}|{c}"
            values[col] = {}
            for rid in rows["run_id"]:
                v = cue_value(blocks[rid], sp, c, on)
                if v is not None:
                    values[col][rid] = v
                    if np.isfinite(v["point"]):
                        slices.add(v["slice"])
    extra = {}
    for col, per_run in values.items():
        for key in ("point", "lo", "hi", "n"):
            name = col if key == "point" else f"{col}_{key}"
            extra[name] = rows["run_id"].map(
                {r: v[key] for r, v in per_run.items()}).astype(float).to_numpy()
    rows = pd.concat([rows.reset_index(drop=True),
                      pd.DataFrame(extra, index=range(len(rows)))], axis=1)
    return rows, values, cols, slices


def _cue_notes(slices: set[str], on: str, summary: pd.DataFrame,
               tiny_any: dict[str, list[str]], min_pairs: int, dropped: list[str]) -> list[str]:
    """The subtitle lines of :func:`cue_reliance_figure`: what a bar is, the interval, the
    faded bars and the cues left out."""
    if slices == {"disagree"}:
        what = ("bar = % of the pairs where the cue favours the REJECTED response on which the "
                "model prefers the cue's side anyway (100 - its accuracy there; 0 = never misled)")
    elif slices == {"all"}:
        what = ("bar = overall follow rate: % of the pairs where the cue picks a side on which "
                "the model prefers that side (whether or not the label does)"
                + ("; the blocks hold no disagree slice" if on == "disagree" else ""))
    else:
        what = ("bar = follow rate where the cue favours the rejected response; runs whose "
                "block lacks that slice show their overall follow rate")
    notes = [what, interval_caption(summary) + "; dotted line: a coin flip"]
    if tiny_any:
        notes.append(f"faded, hatched bars: fewer than {min_pairs} pairs (too few to read): "
                     + "; ".join(f"{c} ({', '.join(where)})" for c, where in tiny_any.items()))
    if dropped:
        notes.append("not shown (no pair of these splits" + (" where the cue disagrees with "
                     "the label" if on == "disagree" else " where the cue picks a side")
                     + "): " + ", ".join(dropped))
    return notes


def cue_reliance_figure(
    sweep_dir: PathLike | None = None,
    *,
    results: pd.DataFrame | None = None,
    cue: str | Sequence[str] | None = None,
    split: str | Sequence[str] | None = None,
    on: str = "disagree",
    blocks: dict[str, dict] | None = None,
    artifact_strength: float | None = None,
    source: str | None = None,
    min_pairs: int = MIN_PAIRS,
    confidence: float = 0.95,
    spread: str = "auto",
) -> go.Figure:
    """How often each model prefers the side a surface cue favours, per cue and target (%).

    One panel per split (``split=None``: every target; ``"source"``, ``"ood"`` for the targets
    pooled, or target names), x = cue (``cue``: a name or names; default every cue in the
    blocks), one bar per method group (teacher, naive, ..., each ANCHOR lambda x layers,
    ceiling): the mean over seeds, with the stored 95% interval for one seed and the interval
    over seeds for several (`common.metric_summary`, ``spread``). ``on="disagree"`` (default)
    shows the follow rate on the pairs where the cue's side is the rejected response (lower =
    less misled; see the module docstring); ``on="all"`` the follow rate on every pair where
    the cue picks a side.

    Blocks come from each run's metrics.json, or `run_cues` for runs without one (``blocks``:
    ``{run_id: block}`` already loaded). A bar whose slice holds fewer than ``min_pairs``
    pairs (in any of its seeds) is faded and hatched, and the subtitle says so; cues with no
    value in any panel are left out and named.

    Raises:
        ValueError: no run of the condition has a cues block, or an unknown split / cue.
    """
    if on not in CUE_SLICES:
        raise ValueError(f"on must be one of {CUE_SLICES}, got {on!r}")
    res = results_arg(sweep_dir, results)
    rows, caption = select_condition(res, artifact_strength, source)
    if blocks is None:
        if sweep_dir is None:
            raise ValueError("pass the sweep directory (the cues blocks live in its runs' "
                             "metrics.json) or blocks={run_id: block}")
        blocks = load_cue_blocks(sweep_dir, rows["run_id"].tolist())
    blocks = {str(k): v for k, v in blocks.items() if str(k) in set(rows["run_id"]) and v}
    if not blocks:
        raise ValueError(f"no run of this condition ({caption}) has a cues block (metrics.json "
                         "'cues', written since the cue audit; anchorviz.pipeline.results."
                         "run_cues rebuilds it for a run)")
    rows = rows[rows["run_id"].isin(blocks)].copy()
    panels = _resolve_panels([s for b in blocks.values() for s in b], split)
    cues = _resolve_cues(blocks, panels, cue)

    rows, values, cols, slices = _cue_columns(rows, blocks, panels, cues, on)
    summary = metric_summary(rows, list(values), confidence, spread)
    # the smallest slice over a group's seeds decides whether its bar is readable
    pairs = []
    for r in summary.itertuples(index=False):
        part = rows[group_mask(rows, r.method, r.anchor_lambda, r.anchor_layers)]
        ok = np.isfinite(part[r.column].to_numpy(float))
        pairs.append(int(part[f"{r.column}_n"].to_numpy(float)[ok].min()) if ok.any() else 0)
    summary["pairs"] = pairs
    shown = [c for c in cues if any(np.isfinite(summary.loc[summary["column"] == cols[(sp, c)],
                                                            "mean"]).any() for sp in panels)]
    dropped = [c for c in cues if c not in shown]
    if not shown:
        raise ValueError(f"no cue picks a side on these splits ({', '.join(panels)}) in any "
                         "run" + (" where it disagrees with the label" if on == "disagree"
                                  else ""))

    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=False,
                        subplot_titles=[_split_title(sp) for sp in panels],
                        vertical_spacing=min(0.12, 0.3 / max(1, len(panels) - 1)))
    labels = list(dict.fromkeys(summary["label"]))
    tiny_any: dict[str, list[str]] = {}
    for label in labels:
        grp = summary[summary["label"] == label]
        color = grp["color"].iloc[0]
        for i, sp in enumerate(panels, start=1):
            part = grp.set_index("column").loc[[cols[(sp, c)] for c in shown]]
            mean = 100 * part["mean"].to_numpy(float)
            lo, hi = 100 * part["lo"].to_numpy(float), 100 * part["hi"].to_numpy(float)
            pairs = part["pairs"].to_numpy(int)
            tiny = [bool(np.isfinite(m) and n < min_pairs) for m, n in zip(mean, pairs)]
            for c, t in zip(shown, tiny):
                if t and _split_title(sp) not in tiny_any.setdefault(c, []):
                    tiny_any[c].append(_split_title(sp))
            custom = np.empty((len(shown), 4), dtype=object)
            custom[:, 0], custom[:, 1], custom[:, 2] = lo, hi, pairs
            custom[:, 3] = part["interval"].to_numpy()
            fig.add_trace(go.Bar(
                x=shown, y=mean, name=label, legendgroup=label, showlegend=i == 1,
                error_y={"type": "data", "symmetric": False, "array": hi - mean,
                         "arrayminus": mean - lo, "visible": True},
                marker={"color": color,
                        "opacity": [_TINY_OPACITY if t else 1.0 for t in tiny],
                        "pattern": {"shape": ["/" if t else "" for t in tiny]}},
                customdata=custom,
                meta={"split": sp, "cues": shown, "pairs": pairs.tolist(), "tiny": tiny},
                hovertemplate=(f"{label}<br>cue %{{x}}: follows %{{y:.1f}}%<br>interval "
                               "%{customdata[0]:.1f} to %{customdata[1]:.1f}%<br>%{customdata[2]}"
                               " pairs<br>%{customdata[3]}<extra></extra>")),
                row=i, col=1)
    fig.add_hline(y=50, line={"dash": "dot", "color": "grey", "width": 1}, row="all", col=1)
    fig.update_yaxes(range=[0, 100], title_text="follows the cue (%)")
    fig.update_xaxes(title_text="cue", row=len(panels), col=1)

    notes = _cue_notes(slices, on, summary, tiny_any, min_pairs, dropped)
    main = ("Which cues each model follows where the cue disagrees with the label"
            if slices == {"disagree"} else "Which cues each model follows")
    fig.update_layout(
        title=figure_title(f"{main} ({caption})", "<br>".join(notes)),
        barmode="group", legend=BOTTOM_LEGEND, template=TEMPLATE,
        margin={"t": 110 + 18 * len(notes), "b": 150},
        height=260 + 18 * len(notes) + 280 * len(panels),
    )
    return fig
