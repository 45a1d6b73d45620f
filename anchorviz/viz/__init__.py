"""Stage 6, the views: plotly figures of stored results, the JupyterLab explorers and the HTML
report.

Nothing here trains or computes representations: every figure is one function of a run or sweep
directory (the files the pipeline wrote; layout: docs/ARCHITECTURE.md, "Sweep and run
directories") and returns a ``plotly.graph_objects.Figure``. Functions of a sweep also accept an
already loaded results table (``results=``) and per-run tables, so the widgets redraw without
touching the disk. One module per figure family:

- ``common`` -- reading the results table and run tables (cached by modification time), the
  Okabe-Ito palette and template, method labels and colours, selections (condition, targets,
  splits), summaries over seeds.
- ``accuracy`` -- ``accuracy_figure`` (ID vs OOD per method), ``shortcut_figure`` (ID on pairs
  with and without the planted artefact, next to OOD), ``transfer_figure`` (WRG / AOG / NTS).
- ``drift`` -- ``drift_by_layer_figure`` (CKA or cosine drift per layer and domain),
  ``drift_vs_ood_figure`` (Spearman rho with its bootstrap interval), ``lambda_sweep_figure``.
- ``cues`` -- ``cue_reliance_figure``: how often each model prefers a surface cue's side
  (length, refusal, format, the planted cues) where the cue disagrees with the label, per target.
- ``projection`` -- ``umap_figure``: reference and student states of one run in one shared map.
- ``training`` -- ``label_confidence_figure`` (the teacher's soft labels), ``loss_curve_figure``.
- ``export`` -- ``export_figure`` (self-contained ``.html`` or static images) and paper style.
- ``widgets`` -- ``SweepExplorer`` and ``RunLauncher``; ``report`` -- the HTML report.

Accuracies are stored as fractions and shown in percent; transfer scores are differences of
fractions, shown x100 as points. The figure functions are also importable from ``anchorviz``.
"""

__all__: list[str] = []
