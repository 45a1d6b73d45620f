"""The sweep explorer's selection model: which runs a sweep folder holds, which choices each
control offers (only values the stored runs have; seeds that hold no hidden states say so), and
which run a selection picks. No widgets and no figures: `anchorviz.viz.widgets.SweepExplorer`
shows it (controls, `anchorviz.viz.explorer_panels`), and tests drive it directly.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anchorviz.analysis.summary import setting_columns
from anchorviz.pipeline.expected import expected_runs
from anchorviz.viz.common import (
    METHOD_NAMES,
    PathLike,
    captured_mask,
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

logger = logging.getLogger(__name__)

__all__ = ["SELECTION_KEYS", "ExplorerModel", "Pick", "close", "lambda_label", "select_run",
           "with_visibility"]

#: what a selection sets (`ExplorerModel.options` offers each but ``view_layer``, which depends
#: on the run shown)
SELECTION_KEYS = ("method", "lambda_", "layer", "target", "seed", "artifact_strength",
                  "teacher_visibility", "view_layer", "color_by")


def with_visibility(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` with a ``teacher_visibility`` column (1.0 = the teacher reads every planted
    artefact: what runs made before the column existed did)."""
    if "teacher_visibility" in results.columns and results["teacher_visibility"].notna().all():
        return results
    out = results.copy()
    col = out["teacher_visibility"] if "teacher_visibility" in out.columns else np.nan
    out["teacher_visibility"] = pd.Series(col, index=out.index, dtype=float).fillna(1.0)
    return out


def close(a: float, b: float) -> bool:
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
    res = with_visibility(normalize_results(results, "passed to select_run"))
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


@dataclass
class Pick:
    """The run a selection shows: its id, the naive student of the same condition and seed
    (None when there is none, or it is the run itself), its results row, its label and the
    condition's rows (one artefact strength and teacher visibility)."""

    run_id: str
    naive_id: str | None
    row: pd.Series
    label: str
    condition: pd.DataFrame


class ExplorerModel:
    """A finished sweep, read once, and what each of the explorer's controls may choose.

    Args:
        sweep_dir: the sweep directory (``results.parquet`` and ``runs/``).
        preload_projections: read every run's ``projection.parquet`` now (the map then never
            touches the disk); False reads each on first use (then cached).

    Attributes:
        results: the results table; ``students``: its student and ceiling rows.
        drift: run id -> its ``drift.parquet`` (runs with hidden states).
        scores_only: the runs scored without a hidden-state capture (verdict-only seeds).
        grid_values: the settings the folder's current grid (``sweep.yaml``) shares, which the
            explorer shows first where the folder also holds runs of other settings.
    """

    def __init__(self, sweep_dir: PathLike, *, preload_projections: bool = True) -> None:
        self.sweep_dir = Path(sweep_dir)
        self.results = with_visibility(load_results(self.sweep_dir))
        self.students = self.results[self.results["kind"] != "teacher"]
        if self.students.empty:
            raise ValueError(f"sweep {self.sweep_dir} has no student or ceiling runs to explore")
        self.drift: dict[str, pd.DataFrame] = {}
        self._projection: dict[str, pd.DataFrame | None] = {}
        captured = captured_mask(self.students)
        self.scores_only = set(self.students.loc[~captured, "run_id"])
        for rid in self.students.loc[captured, "run_id"]:
            try:
                self.drift[rid] = load_run_table(self.sweep_dir / "runs" / rid, "drift")
            except FileNotFoundError as exc:
                logger.warning("run %s: %s", rid, exc)
            if preload_projections:
                self.projection(rid)
        self._summaries: dict[tuple[float, float, str], pd.DataFrame] = {}
        self.grid_values = self._current_grid_values()

    # ---- data (memory only after construction, but for projections read on first use)

    def projection(self, run_id: str) -> pd.DataFrame | None:
        """The run's ``projection.parquet`` (None: it has none)."""
        if run_id not in self._projection:
            try:
                self._projection[run_id] = load_run_table(
                    self.sweep_dir / "runs" / run_id, "projection")
            except FileNotFoundError as exc:
                logger.info("run %s: %s", run_id, exc)
                self._projection[run_id] = None
        return self._projection[run_id]

    def source_domain(self, run_id: str) -> str:
        """The source's domain label in the run's drift table ("source" when unknown)."""
        table = self.drift.get(run_id)
        if table is not None and "domain" in table.columns:
            d = table.loc[table["split"] == "source_test", "domain"]
            if len(d):
                return str(d.iloc[0])
        return "source"

    def _current_grid_values(self) -> dict:
        """``{setting column: value}`` of the settings (split sizes, models ...) that the runs of
        the folder's current grid (its ``sweep.yaml``) share, where the folder also holds runs
        made with other values (an earlier grid, before a default changed): those are what the
        explorer shows first. Empty for a folder without a readable grid."""
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

    # ---- what the controls offer

    def hidden_state_seeds(self) -> list[int]:
        """The seeds with at least one student run that kept its hidden states (drift, map)."""
        held = self.students[~self.students["run_id"].isin(self.scores_only)]
        return sorted(int(s) for s in held["seed"].unique())

    def options(self) -> dict[str, list]:
        """Each control's choices, as ``(label, value)`` pairs (the target: plain names): only
        values the stored runs hold. A seed whose runs were scored only (a verdict-only seed of
        the demo: accuracies, but no hidden states, so no drift and no map) says so."""
        res, students = self.results, self.students
        methods = sorted(students["method"].unique(), key=method_rank)
        anchor = res[res["method"] == "anchor"]
        lambdas = unique_values(anchor["anchor_lambda"]) or [0.0]
        layers = sorted(anchor["anchor_layers"].unique(), key=layers_rank) or ["last"]
        held = set(self.hidden_state_seeds())
        seeds = sorted(int(s) for s in res["seed"].unique())
        return {
            "method": [(METHOD_NAMES.get(m, m), m) for m in methods],
            "lambda_": [(lambda_label(v), float(v)) for v in lambdas],
            "layer": [(layers_label(s) or s, s) for s in layers],
            "target": sweep_targets(res),
            "seed": [(str(s) if s in held or not held else f"{s} (scores only)", s)
                     for s in seeds],
            "artifact_strength": [(f"{s:g}", s) for s in
                                  sorted(float(s) for s in res["artifact_strength"].unique())],
            "teacher_visibility": [(f"{v:g}", v) for v in sorted(
                float(v) for v in students["teacher_visibility"].unique())],
            "color_by": [("domain", "domain"), ("side", "side")],
        }

    def start(self) -> dict[str, Any]:
        """The first selection: ANCHOR (else the first method), the middle lambda, the first
        layer, target and seed with hidden states, the largest strength, and the teacher
        visibility with the most student runs (the sweep's own scenario; ties: the smallest)."""
        opts = self.options()
        values = {k: [v for _, v in o] if k != "target" else list(o) for k, o in opts.items()}
        counts = self.students.groupby("teacher_visibility").size()
        held = self.hidden_state_seeds()
        return {
            "method": "anchor" if "anchor" in values["method"] else values["method"][0],
            "lambda_": values["lambda_"][len(values["lambda_"]) // 2],
            "layer": values["layer"][0],
            "target": values["target"][0],
            "seed": held[0] if held else values["seed"][0],
            "artifact_strength": values["artifact_strength"][-1],
            "teacher_visibility": max(values["teacher_visibility"],
                                      key=lambda v: (int(counts.loc[v]), -v)),
            "color_by": "domain",
        }

    @staticmethod
    def option_value(key: str, options: list, value: Any) -> Any:
        """``value`` as the control for ``key`` holds it (a float matched within rounding);
        ValueError naming the choices when it has no such value."""
        values = [v for _, v in options] if options and isinstance(options[0], tuple) \
            else list(options)
        for v in values:
            if isinstance(v, float) and isinstance(value, (int, float)) and close(v, value):
                return v
            if v == value:
                return v
        raise ValueError(f"{key}={value!r} is not in the sweep; choose one of {values}")

    # ---- what a selection shows

    def condition(self, strength: float, visibility: float) -> pd.DataFrame:
        """The rows at one artefact strength and teacher visibility; any other setting that
        varies (model, split sizes ...): the current grid's value, never pooled."""
        res = self.results
        rows = res[np.isclose(res["teacher_visibility"], visibility)]
        rows, _ = select_condition(rows, float(strength), prefer=self.grid_values)
        return rows

    def summary(self, strength: float, visibility: float, target: str) -> pd.DataFrame:
        """ID and target accuracies per method of the condition, over seeds (cached)."""
        key = (float(strength), float(visibility), str(target))
        if key not in self._summaries:
            col, _ = target_column(self.results, target)
            self._summaries[key] = metric_summary(self.condition(strength, visibility),
                                                  ["acc_id", col])
        return self._summaries[key]

    def pick(self, selection: dict[str, Any]) -> Pick:
        """The run ``selection`` shows (ValueError naming the choices when none is stored)."""
        anchored = selection["method"] == "anchor"
        cond = self.condition(selection["artifact_strength"], selection["teacher_visibility"])
        if cond.empty:
            raise ValueError(f"the sweep has no run at artefact strength "
                             f"{selection['artifact_strength']:g} with teacher visibility "
                             f"{selection['teacher_visibility']:g}")
        run_id = select_run(cond, method=selection["method"],
                            lambda_=selection["lambda_"] if anchored else None,
                            layers=selection["layer"] if anchored else None,
                            seed=selection["seed"])
        naive_id = None
        if selection["method"] != "naive" and (cond["method"] == "naive").any():
            try:
                naive_id = select_run(cond, method="naive", seed=selection["seed"])
            except ValueError:
                naive_id = None
        row = cond[cond["run_id"] == run_id].iloc[0]
        label = method_label(row["method"], row["anchor_lambda"], row["anchor_layers"])
        return Pick(run_id, naive_id, row, label, cond)
