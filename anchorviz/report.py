"""A self-contained HTML report of a sweep folder (figures + results table), offline-viewable.

Every figure is a function of the folder (see ``plots.py``); plotly.js is embedded once.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path

import pandas as pd

logger = logging.getLogger(__name__)


def _pick_runs(results: pd.DataFrame) -> list[tuple[str, str]]:
    """(title, run_id) of the runs whose UMAP panels the report shows: naive and the ANCHOR run
    with the best NTS (seed with the lowest number; first artefact strength)."""
    out = []
    students = results[results["kind"] == "student"]
    if students.empty:
        return out
    students = students[students["seed"] == students["seed"].min()]
    if "artifact_strength" in students:
        students = students[students["artifact_strength"] == students["artifact_strength"].max()]
    naive = students[students["method"] == "naive"]
    if len(naive):
        out.append(("naive W2S student", naive.iloc[0]["run_id"]))
    anchor = students[students["method"] == "anchor"]
    if len(anchor):
        best = anchor.sort_values("nts", ascending=False).iloc[0]
        out.append((f"ANCHOR student (lambda {best['anchor_lambda']:g}, {best['anchor_layers']}, "
                    "best NTS)", best["run_id"]))
    return out


def _table_html(results: pd.DataFrame) -> str:
    cols = ["method", "anchor_lambda", "anchor_layers", "seed", "artifact_strength", "acc_id",
            "acc_ood", "wrg", "aog", "nts", "pgr", "drift_cos_source", "drift_cos_target",
            "drift_cka_target", "q_confidence"]
    t = results[[c for c in cols if c in results.columns]].copy()
    for c in ("acc_id", "acc_ood", "wrg", "aog", "nts"):
        if c in t:
            t[c] = (100 * t[c]).round(1)
    return t.to_html(index=False, na_rep="-", float_format=lambda x: f"{x:.3g}", border=0,
                     classes="results")


def write_report(sweep_dir: str | Path, path: str | Path | None = None) -> Path:
    """Write ``report.html`` (or ``path``) for a sweep folder; returns the path."""
    from anchorviz import plots

    sweep_dir = Path(sweep_dir)
    results = plots.load_results(sweep_dir)
    path = Path(path) if path else sweep_dir / "report.html"
    sections: list[tuple[str, object]] = []

    def add(title: str, make) -> None:
        try:
            sections.append((title, make()))
        except Exception as err:  # one missing piece must not lose the rest of the report
            logger.warning("report: figure %r skipped (%s)", title, err)
            sections.append((title, f"<p class='skip'>not available: {html.escape(str(err))}</p>"))

    add("In-distribution vs out-of-distribution accuracy",
        lambda: plots.accuracy_figure(results=results))
    add("Transfer scores (WRG, AOG, NTS)", lambda: plots.transfer_figure(results=results))
    add("Representation drift by layer: CKA(student, reference)",
        lambda: plots.drift_by_layer_figure(sweep_dir, metric="cka", results=results))
    add("Representation drift by layer: cosine drift",
        lambda: plots.drift_by_layer_figure(sweep_dir, metric="cosine", results=results))
    for title, run_id in _pick_runs(results):
        run_dir = sweep_dir / "runs" / run_id
        add(f"Shared UMAP: {title}", lambda d=run_dir: plots.umap_figure(d, color_by="domain"))
    add("Drift vs OOD gain across runs", lambda: plots.drift_vs_ood_figure(results=results))
    if (results["method"] == "anchor").any():
        add("Lambda sweep", lambda: plots.lambda_sweep_figure(results=results))
    students = results[results["kind"] == "student"]
    if len(students):
        d = sweep_dir / "runs" / students.iloc[0]["run_id"]
        add("Teacher soft-label confidence", lambda: plots.label_confidence_figure(d))

    parts = []
    first = True
    for title, obj in sections:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if isinstance(obj, str):
            parts.append(obj)
        else:
            parts.append(obj.to_html(full_html=False, include_plotlyjs="inline" if first else False))
            first = False
    body = "\n".join(parts)
    doc = f"""<!doctype html><html><head><meta charset="utf-8">
<title>anchorviz report: {html.escape(sweep_dir.name)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}}
table.results{{border-collapse:collapse;font-size:13px}} table.results td,table.results th{{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}}
.skip{{color:#a00}}</style></head><body>
<h1>anchorviz report: {html.escape(str(sweep_dir))}</h1>
<p>Accuracies and transfer scores in points (percent). WRG = Acc_student(ID) - Acc_teacher(ID);
AOG = Acc_student(OOD) - Acc_teacher(OOD); NTS = AOG - max(0, Acc_teacher(ID) - Acc_student(ID)).
OOD = all target test pairs pooled. Drift: last layer, mean-pooled response states of the student
vs its frozen pretrained reference.</p>
<h2>Results</h2>{_table_html(results)}
{body}
</body></html>"""
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
    return path
