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

Where the code lives (one module per figure family; import from here, this module re-exports
every name, public and private, that it held before the split):

- ``anchorviz/viz/_common.py`` -- reading the results table and run tables, the palette and
  template, method labels and colours, selections (condition, targets, splits), summaries.
- ``anchorviz/viz/accuracy.py`` -- accuracy, shortcut and transfer figures.
- ``anchorviz/viz/drift.py`` -- drift by layer, drift vs OOD, lambda sweep.
- ``anchorviz/viz/projection.py`` -- the UMAP / PCA map of one run.
- ``anchorviz/viz/training.py`` -- label confidence, training loss.
- ``anchorviz/viz/export.py`` -- paper style and export to files.

Every figure module logs as ``anchorviz.viz.plots``, as before.
"""

# ruff: noqa: F401 -- a re-export module: every name below is imported to be importable from
# here (``from anchorviz.viz.plots import X``, ``anchorviz.plots.X``), not used

from __future__ import annotations

from anchorviz.viz._common import (
    _ANCHOR_SCALES,
    _BOTTOM_LEGEND,
    _DOMAIN_COLORS,
    _DOMAIN_DASHES,
    _GROUP_KEYS,
    _ID_COLOR,
    _LAYER_DASHES,
    _OI,
    _OOD_COLOR,
    _OTHER_ANCHOR_SCALE,
    _SIDE_COLORS,
    _TOP_LEGEND,
    _TRANSFER_COLORS,
    _TRANSFER_NAMES,
    METHOD_COLORS,
    METHOD_NAMES,
    METHOD_ORDER,
    OKABE_ITO,
    RESULTS_FILE,
    RUN_TABLES,
    SPREADS,
    TEMPLATE,
    PathLike,
    _bar_arrays,
    _existing_dir,
    _group_color,
    _group_mask,
    _group_table,
    _interval_caption,
    _layers_label,
    _layers_rank,
    _method_rank,
    _normalize_results,
    _pick_value,
    _read_parquet,
    _read_parquet_cached,
    _resolve_splits,
    _results_arg,
    _split_desc,
    _split_sort_key,
    _summarize,
    _target_name,
    _template,
    _title,
    _unique,
    load_results,
    load_run_table,
    logger,
    method_label,
    metric_summary,
    run_path,
    select_condition,
    sweep_targets,
    target_column,
)
from anchorviz.viz.accuracy import (
    _accuracy_layout,
    accuracy_figure,
    shortcut_figure,
    transfer_figure,
)
from anchorviz.viz.drift import (
    _DRIFT_TABLE_COLUMNS,
    _SEED_SYMBOLS,
    DRIFT_METRICS,
    MIN_CORRELATION_N,
    _axis_label,
    _drift_metric,
    _drift_table_column,
    _drift_tables_for,
    _is_fraction_col,
    _relation_stat,
    _short_label,
    _table_col_label,
    drift_by_layer_figure,
    drift_curve,
    drift_vs_ood_figure,
    lambda_sweep_figure,
)
from anchorviz.viz.export import (
    _HTML_SUFFIXES,
    _IMAGE_SUFFIXES,
    _PAPER_FONT,
    CSS_DPI,
    PAPER_WIDTHS,
    ExportError,
    _axis_domains,
    _fix_svg_size,
    _legend_columns,
    _legend_entries,
    _pt,
    _wrap_html,
    _wrap_line,
    export_figure,
    export_paper_figures,
    figure_caption,
    paper_style,
    paper_width_inches,
    wrap_title,
)
from anchorviz.viz.projection import (
    _PROJECTION_COLUMNS,
    _UMAP_HOVER,
    _check_projection,
    _hover_custom,
    _projection_layer,
    _run_caption,
    _subsample,
    projection_method,
    umap_figure,
    umap_groups,
    umap_movement,
)
from anchorviz.viz.training import (
    UNINFORMATIVE_BELOW,
    _smooth,
    label_confidence_figure,
    loss_curve_figure,
)

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
