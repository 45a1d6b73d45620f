"""A compact, committable store of a real-data cue study: the data audit, every run's slices and
its drift per target, without checkpoints, hidden states or any text of the data.

A full run store holds about 100 MB per run (checkpoint, captured states); what the real-data
story needs of it is a few kilobytes: the results table, each run's ``cues`` block (accuracy on
the pairs where a cue agrees / disagrees with the label, and the follow rate) and its drift per
split and layer. `anchorviz.viz.story.export_story` writes those from one or more sweep folders
(one per source, e.g. the stores of ``experiments/real_cues.py``) into a *story folder*:

``story.json``
    ``{"format": 1, "stores": {label: {"source", "targets", "runs"}}, "note": ..., "files": [...],
    "sha256": {file: hex digest}}``: the manifest, with the sha256 of every other file
``results.csv``
    one row per run: ``store``, ``run_id``, ``method``, ``anchor_lambda``, ``seed``, the
    accuracies (``acc_val``, ``acc_id``, ``acc_<target>``) and WRG / AOG.
``slices.csv``
    one row per (run, split, cue): ``n_agree`` / ``n_disagree``, ``acc_agree`` /
    ``acc_disagree`` and ``follow`` (the share of the cue's pairs where the model prefers the
    cue's side), as the run's ``metrics.json`` holds them.
``drift.csv``
    one row per (run, split, layer): linear CKA and the centred cosine drift of the student
    against its frozen pretrained reference (`anchorviz.analysis.drift`).
``audit.csv`` (optional)
    the data audit of `anchorviz.analysis.cues.cue_agreement` per dataset and cue.

`load_story` reads a story folder back (and says which file is missing or malformed). Like a
run folder, a story folder is checked before its numbers are used: every file must still have
the sha256 recorded in ``story.json`` (a file edited after the export is refused, naming it),
and every number must be in its range (accuracies, shares and follow rates in [0, 1], counts
and layers non-negative whole numbers, no infinities), errors naming file, column and row.
The one way to accept an edit is explicit: export again (`anchorviz.viz.story.export_story`,
``experiments/real_story.py``), or `seal_story` on the edited folder, which checks the ranges
and records the new hashes.
`slice_summary`, `slice_contrast` and `drift_summary` are the pure functions the figures of
`anchorviz.viz.story` and notebook 04 read it through: means over seeds with 95% t-intervals,
and paired per-seed differences (naive minus ceiling on the disagree slice: a cue inherited
from weak labels; ANCHOR minus naive: what anchoring changes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from anchorviz.analysis.metrics import seed_summary
from anchorviz.paths import file_sha256, write_atomic

__all__ = [
    "MIN_SLICE",
    "STORY_FILES",
    "STORY_FORMAT",
    "SLICE_COLUMNS",
    "DRIFT_COLUMNS",
    "RESULT_COLUMNS",
    "Story",
    "StoryError",
    "drift_summary",
    "load_story",
    "seal_story",
    "slice_contrast",
    "slice_summary",
]

#: bumped when a file's columns change meaning; a story of another format is refused
STORY_FORMAT = 1
STORY_FILES = ("story.json", "results.csv", "slices.csv", "drift.csv")
RESULT_COLUMNS = ("run_id", "kind", "method", "anchor_lambda", "anchor_layers", "seed", "source",
                "acc_val", "acc_id", "acc_ood", "wrg", "aog")
SLICE_COLUMNS = ("store", "run_id", "split", "cue", "n", "n_agree", "n_disagree", "acc_agree",
               "acc_disagree", "follow")
DRIFT_COLUMNS = ("store", "run_id", "split", "layer", "cka", "cosine_centred_mean", "n_rows")
#: a disagree slice with fewer pairs than this on some seed is too small to read (the rule the
#: real-data study fixed before its runs, docs/RESULTS.md)
MIN_SLICE = 20
#: the methods a slice figure compares, in this order (ANCHOR at the chosen lambda)
METHODS = ("teacher", "ceiling", "naive", "anchor")


class StoryError(ValueError):
    """A story folder or a store that cannot be read as one; the message names the file."""


@dataclass
class Story:
    """A story folder read back: its tables and the note of what made it."""

    folder: Path
    meta: dict
    results: pd.DataFrame
    slices: pd.DataFrame
    drift: pd.DataFrame
    audit: pd.DataFrame | None

    @property
    def stores(self) -> list[str]:
        return list(self.meta.get("stores", {}))

    def targets(self, store: str) -> list[str]:
        """The store's evaluated splits other than the source test, as slice split names
        (``target_test:<name>``)."""
        self._check_store(store)
        s = self.slices[self.slices["store"] == store]["split"].unique().tolist()
        return sorted(x for x in s if x.startswith("target_test:"))

    def lambdas(self, store: str) -> list[float]:
        """The ANCHOR lambdas the store holds (ascending)."""
        self._check_store(store)
        r = self.results[(self.results["store"] == store) & (self.results["method"] == "anchor")]
        return sorted(float(v) for v in r["anchor_lambda"].unique())

    def layers(self, store: str) -> list[int]:
        self._check_store(store)
        return sorted(int(v) for v in self.drift[self.drift["store"] == store]["layer"].unique())

    def _check_store(self, store: str) -> None:
        if store not in self.stores:
            raise StoryError(f"{self.folder}: no store {store!r}; expected one of {self.stores}")


def _read_csv(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    if not path.is_file():
        raise StoryError(f"{path}: missing; a story folder holds {', '.join(STORY_FILES)}")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise StoryError(f"{path}: not a readable CSV table ({err})") from err
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise StoryError(f"{path}: columns {missing} missing; expected at least {list(required)}")
    return df


#: a story table's columns and their allowed ranges: ``unit`` = [0, 1] (accuracies, shares,
#: follow rates and their interval ends), ``count`` = a non-negative whole number, ``signed``
#: = [-1, 1] (accuracy gaps), ``finite`` = any finite number; a column that matches none of
#: these is not checked
_UNIT = ("acc_", "side_share", "chosen_share", "follow")
_COUNTS = ("n", "n_agree", "n_disagree", "n_side", "pairs", "n_rows", "layer", "seed", "runs")
_SIGNED = ("wrg", "aog")


def _column_range(column: str) -> str | None:
    if column in _COUNTS:
        return "count"
    if column.startswith(_UNIT) or column == "cka":
        return "unit"
    if column.startswith(_SIGNED):
        return "signed"
    if column in ("anchor_lambda",):
        return "nonneg"
    if column in ("cosine_centred_mean",):
        return "finite"
    return None


_RANGE_TEXT = {"unit": "in [0, 1] (an accuracy, share or rate)",
               "count": "a non-negative whole number (a count)",
               "signed": "in [-1, 1] (a difference of accuracies)",
               "nonneg": "a non-negative number", "finite": "a finite number"}


def _check_ranges(path: Path, df: pd.DataFrame) -> None:
    """Refuse a value outside its column's range (`_column_range`), naming the file, the
    column, the row (1 = the first data row, line 2 of the file) and the run when there is one."""
    for col in df.columns:
        kind = _column_range(str(col))
        if kind is None:
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        bad_text = df[col].notna() & values.isna()
        v = values.to_numpy(float)
        with np.errstate(invalid="ignore"):
            if kind == "unit":
                bad = (v < -1e-9) | (v > 1 + 1e-9)
            elif kind == "signed":
                bad = (v < -1 - 1e-9) | (v > 1 + 1e-9)
            elif kind == "count":
                bad = (v < 0) | (np.isfinite(v) & (v != np.round(v)))
            elif kind == "nonneg":
                bad = v < 0
            else:
                bad = np.zeros(len(v), bool)
        bad = bad | np.isinf(v) | bad_text.to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            run = f" (run {df['run_id'].iloc[i]})" if "run_id" in df.columns else ""
            raise StoryError(
                f"{path}: column {col!r}, row {i + 1} (line {i + 2}){run}: "
                f"{df[col].iloc[i]} is not {_RANGE_TEXT[kind]}"
                + (f"; {int(bad.sum())} row(s) in all" if bad.sum() > 1 else ""))


def _read_tables(folder: Path) -> tuple[dict, dict[str, pd.DataFrame | None]]:
    if not folder.is_dir():
        raise StoryError(f"{folder}: no such story folder (expected {', '.join(STORY_FILES)})")
    mpath = folder / "story.json"
    if not mpath.is_file():
        raise StoryError(f"{mpath}: missing; a story folder holds {', '.join(STORY_FILES)}")
    try:
        meta = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise StoryError(f"{mpath}: not JSON ({err})") from err
    if not isinstance(meta, dict) or meta.get("format") != STORY_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise StoryError(f"{mpath}: format {got!r}; this anchorviz reads format {STORY_FORMAT}")
    tables: dict[str, pd.DataFrame | None] = {
        "results": _read_csv(folder / "results.csv", ("store", "run_id", "method",
                                                      "anchor_lambda", "seed")),
        "slices": _read_csv(folder / "slices.csv", SLICE_COLUMNS),
        "drift": _read_csv(folder / "drift.csv", DRIFT_COLUMNS[:4]),
        "audit": (_read_csv(folder / "audit.csv", ("dataset", "cue", "chosen_share"))
                  if (folder / "audit.csv").is_file() else None)}
    for name, df in tables.items():
        if df is not None:
            _check_ranges(folder / f"{name}.csv", df)
    unknown = sorted(set(tables["slices"]["run_id"]) - set(tables["results"]["run_id"]))
    if unknown:
        raise StoryError(f"{folder / 'slices.csv'}: runs {unknown[:3]} are not in results.csv")
    return meta, tables


def _story_files(folder: Path, meta: Mapping) -> list[str]:
    files = [f for f in meta.get("files") or STORY_FILES if f != "story.json"]
    if (folder / "audit.csv").is_file() and "audit.csv" not in files:
        files.append("audit.csv")
    for f in files:
        if not isinstance(f, str) or "/" in f or "\\" in f or f.startswith("."):
            raise StoryError(f"{folder / 'story.json'}: lists {f!r}; expected plain file names")
    return files


def _verify_hashes(folder: Path, meta: Mapping) -> None:
    mpath = folder / "story.json"
    recorded = meta.get("sha256")
    if not isinstance(recorded, dict) or not recorded:
        raise StoryError(
            f"{mpath}: records no sha256 of its files, so an edit could not be seen; export the "
            "folder again (anchorviz.viz.story.export_story, experiments/real_story.py) or "
            "accept its current files with anchorviz.analysis.story.seal_story")
    for name in _story_files(folder, meta):
        want = recorded.get(name)
        if want is None:
            raise StoryError(f"{folder / name}: no sha256 recorded in {mpath}; export again or "
                             "seal_story the folder to accept it")
        if not (folder / name).is_file():
            raise StoryError(f"{folder / name}: missing; {mpath.name} lists it")
        got = file_sha256(folder / name)
        if got != want:
            raise StoryError(
                f"{folder / name}: changed since the story was exported (sha256 {got[:12]}..., "
                f"{mpath.name} records {want[:12]}...). A story's numbers are accepted only "
                "from an export: run the export again (experiments/real_story.py, "
                "anchorviz.viz.story.export_story), or, to accept a deliberate edit, "
                "anchorviz.analysis.story.seal_story(folder)")


def seal_story(folder: str | Path, meta: Mapping | None = None) -> Path:
    """Check a story folder's tables (columns, ranges, runs) and record the sha256 of each file
    in its ``story.json``: the last step of `anchorviz.viz.story.export_story`, and the explicit
    way to accept a hand edit. ``meta``: the manifest to write (default: the folder's own);
    its ``sha256`` is replaced. Returns the folder.

    Raises:
        StoryError: a file, column or value that a story cannot hold (named).
    """
    folder = Path(folder)
    if meta is not None:
        write_atomic(folder / "story.json", lambda p: p.write_text(
            json.dumps({**meta, "sha256": {}}, indent=2) + "\n"))
    meta, _ = _read_tables(folder)
    files = _story_files(folder, meta)
    out = {k: v for k, v in meta.items() if k != "sha256"}
    out["files"] = ["story.json", *files]
    out["sha256"] = {name: file_sha256(folder / name) for name in files}
    text = json.dumps(out, indent=2) + "\n"
    write_atomic(folder / "story.json", lambda p: p.write_text(text))
    return folder


def load_story(folder: str | Path, *, verify: bool = True) -> Story:
    """Read a story folder written by `export_story`: each file is checked against the sha256
    its ``story.json`` records (``verify=False`` skips that, e.g. to look at an edited folder
    before `seal_story`), and every number against its column's range.

    Raises:
        StoryError: the folder, a file or a column is missing, a file changed since the export
            (named), a value is out of range (file, column and row named), or the format is
            another one.
    """
    folder = Path(folder)
    if verify and (folder / "story.json").is_file():
        try:
            meta = json.loads((folder / "story.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise StoryError(f"{folder / 'story.json'}: not JSON ({err})") from err
        if isinstance(meta, dict) and meta.get("format") == STORY_FORMAT:
            _verify_hashes(folder, meta)
    meta, t = _read_tables(folder)
    results = t["results"]
    results["anchor_lambda"] = results["anchor_lambda"].fillna(0.0).astype(float)
    return Story(folder, meta, results, t["slices"], t["drift"], t["audit"])


# --------------------------------------------------------------------------- summaries


def _method_runs(story: Story, store: str, method: str, anchor_lambda: float) -> pd.DataFrame:
    r = story.results[story.results["store"] == store]
    if method == "anchor":
        return r[(r["method"] == "anchor") & np.isclose(r["anchor_lambda"], anchor_lambda)]
    return r[r["method"] == method]


def _per_seed(story: Story, store: str, method: str, anchor_lambda: float, split: str,
              cue: str) -> pd.DataFrame:
    runs = _method_runs(story, store, method, anchor_lambda)[["run_id", "seed"]]
    s = story.slices
    s = s[(s["store"] == store) & (s["split"] == split) & (s["cue"] == cue)]
    return runs.merge(s, on="run_id").sort_values("seed")


def _interval(values: np.ndarray) -> dict:
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if not len(values):
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan, "seeds": 0}
    s = seed_summary(values)
    hw = s.half_width
    return {"mean": s.mean, "lo": s.mean - hw, "hi": s.mean + hw, "seeds": int(len(values))}


def slice_summary(story: Story, store: str, split: str, cue: str, anchor_lambda: float
                  ) -> pd.DataFrame:
    """Per method (teacher, ceiling, naive, ANCHOR at ``anchor_lambda``): the follow rate on the
    disagree slice and the accuracy on the agree slice, mean over seeds with a 95% t-interval
    (``follow``, ``follow_lo``, ``follow_hi``, ``agree``, ...), the per-seed values
    (``follow_seeds``, ``agree_seeds``) and the smallest slice sizes over seeds."""
    rows = []
    for method in METHODS:
        g = _per_seed(story, store, method, anchor_lambda, split, cue)
        follow_dis = 1.0 - g["acc_disagree"].to_numpy(float)
        f, a = _interval(follow_dis), _interval(g["acc_agree"].to_numpy(float))
        rows.append({"method": method, "seeds": f["seeds"],
                     "follow": f["mean"], "follow_lo": f["lo"], "follow_hi": f["hi"],
                     "agree": a["mean"], "agree_lo": a["lo"], "agree_hi": a["hi"],
                     "follow_seeds": follow_dis.tolist(),
                     "agree_seeds": g["acc_agree"].tolist(), "seed_list": g["seed"].tolist(),
                     "n_disagree_min": int(g["n_disagree"].min()) if len(g) else 0,
                     "n_agree_min": int(g["n_agree"].min()) if len(g) else 0})
    return pd.DataFrame(rows)


def slice_contrast(story: Story, store: str, split: str, cue: str, anchor_lambda: float
                   ) -> dict:
    """The paired per-seed differences on the disagree slice's follow rate: ``inherited`` =
    naive minus ceiling (above 0: the student follows the misleading cue more than a model
    trained on gold labels, i.e. it got it from its weak labels) and ``anchor`` = ANCHOR minus
    naive (below 0: anchoring follows it less); each ``{"mean", "lo", "hi", "seeds"}``."""
    per = {m: _per_seed(story, store, m, anchor_lambda, split, cue).set_index("seed")
           for m in ("ceiling", "naive", "anchor")}

    def diff(a: str, b: str) -> dict:
        seeds = per[a].index.intersection(per[b].index)
        d = (per[b].loc[seeds, "acc_disagree"].to_numpy(float)
             - per[a].loc[seeds, "acc_disagree"].to_numpy(float))  # follow = 1 - acc_disagree
        return _interval(d)

    return {"inherited": diff("naive", "ceiling"), "anchor": diff("anchor", "naive")}


def drift_summary(story: Story, store: str, layer: int, anchor_lambda: float,
                  metric: str = "cosine_centred_mean") -> pd.DataFrame:
    """Per evaluated split and method (naive, ANCHOR at ``anchor_lambda``, ceiling): the drift
    ``metric`` at ``layer`` (mean over seeds with a 95% t-interval) and the accuracy on that
    split (mean over seeds), one row each."""
    if metric not in story.drift.columns:
        raise StoryError(f"drift metric {metric!r} not in {story.folder / 'drift.csv'}; "
                         f"expected one of {[c for c in DRIFT_COLUMNS[4:6] if c in story.drift]}")
    layers = story.layers(store)
    if layer not in layers:
        raise StoryError(f"layer {layer} not in store {store!r}; expected one of {layers}")
    d = story.drift[(story.drift["store"] == store) & (story.drift["layer"] == layer)]
    rows = []
    for method in ("naive", "anchor", "ceiling"):
        runs = _method_runs(story, store, method, anchor_lambda)
        g = runs[["run_id", "seed"] + [c for c in runs.columns if c.startswith("acc_")]].merge(
            d, on="run_id")
        for split, gs in g.groupby("split", sort=True):
            iv = _interval(gs[metric].to_numpy(float))
            col = "acc_id" if split == "source_test" else f"acc_{split.split(':', 1)[-1]}"
            acc = float(gs[col].mean()) if col in gs else math.nan
            rows.append({"method": method, "split": split, "drift": iv["mean"],
                         "drift_lo": iv["lo"], "drift_hi": iv["hi"], "seeds": iv["seeds"],
                         "accuracy": acc})
    return pd.DataFrame(rows)
