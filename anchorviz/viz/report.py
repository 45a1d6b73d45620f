"""A self-contained HTML report of a sweep folder, offline-viewable, that leads with the answer.

Top of the page: a header (anchorviz version, when the report was written, what made the
folder: :func:`made_by`) and a table of contents; then, before any figure, a smoke-run
disclaimer when the runs are smoke-sized
(:func:`smoke_reasons`), the scenario (the same banner ``anchorviz demo`` prints for the demo),
the failure-mode verdict of ``anchorviz.analysis.summary.failure_mode`` / ``verdict_lines`` (the
function the CLI prints, never a second rule), and a warning when the teacher's labels are
nearly uninformative. Then the results table (readable names, fixed decimals, WRG - AOG;
sorted by a click on a header, a few lines of inline script) and the figures, each a function
of the folder with one line under it saying what to look for (:data:`FIGURE_CAPTIONS`);
plotly.js is embedded once.
"""

from __future__ import annotations

import datetime
import html
import logging
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import anchorviz
from anchorviz.analysis.summary import best_on_source_val, setting_columns
from anchorviz.paths import write_atomic
from anchorviz.pipeline.expected import grids, missing_runs
from anchorviz.viz.accuracy import accuracy_figure, shortcut_figure, transfer_figure
from anchorviz.viz.common import (
    layers_label,
    load_results,
    load_run_table,
    method_label,
    method_rank,
    select_condition,
    sweep_targets,
)
from anchorviz.viz.cues import cue_reliance_figure, has_cue_blocks
from anchorviz.viz.drift import (
    DRIFT_METRICS,
    drift_by_layer_figure,
    drift_vs_ood_figure,
    lambda_sweep_figure,
)
from anchorviz.viz.export import (
    export_paper_figures,
    figure_caption,
    paper_width_inches,
    static_layout,
)
from anchorviz.viz.projection import projection_method, umap_figure
from anchorviz.viz.report_captions import (
    FIGURE_CAPTIONS,
    drift_caption,
    drift_vs_ood_caption,
    figure_caption_for,
    lambda_caption,
    observed_caption,
)
from anchorviz.viz.report_sections import (
    GLOSSARY,
    SMOKE_TEST_PAIRS,
    SMOKE_TRAIN_PAIRS,
    label_warning,
    made_by,
    mixed_configs,
    plain_verdict,
    scenario_lines,
    smoke_reasons,
    smoke_status,
    terms_line,
    verdict_blocks,
)
from anchorviz.viz.training import label_confidence_figure, loss_curve_figure
from anchorviz.viz.verdict import verdict_figure

logger = logging.getLogger(__name__)

__all__ = [
    "FIGURE_CAPTIONS",
    "GLOSSARY",
    "FIGURE_FORMATS",
    "SMOKE_TEST_PAIRS",
    "SMOKE_TRAIN_PAIRS",
    "drift_caption",
    "drift_vs_ood_caption",
    "figure_caption_for",
    "lambda_caption",
    "observed_caption",
    "plain_verdict",
    "label_warning",
    "made_by",
    "mixed_configs",
    "scenario_lines",
    "smoke_reasons",
    "smoke_status",
    "table_columns",
    "terms_line",
    "verdict_blocks",
    "write_figures",
    "write_report",
]

# (results column, header, format): "pct" accuracy in percent, "pts" signed points,
# "unit" a unitless number in [0, 1] with 3 decimals
_TABLE_COLUMNS: list[tuple[str, str, str]] = [
    ("acc_id", "ID %", "pct"),
    ("acc_id_clean", "ID clean %", "pct"),
    ("acc_id_hidden", "ID hidden %", "pct"),
    ("acc_ood", "OOD %", "pct"),
    ("wrg", "WRG", "pts"),
    ("aog", "AOG", "pts"),
    ("wrg_minus_aog", "WRG - AOG", "pts"),  # derived: the ID gain that did not carry over
    ("nts", "NTS", "pts"),
    ("pgr", "PGR %", "pct"),
    ("drift_cos_target", "drift 1-cos", "unit"),
    ("drift_cos_centred_target", "centred drift", "unit"),
    ("drift_cka_debiased_target", "CKA (debiased)", "unit"),
    ("q_confidence", "label conf.", "unit"),
]




# --------------------------------------------------------------------------- table, runs


def _pick_runs(results: pd.DataFrame) -> list[tuple[str, str]]:
    """(title, run_id) of the runs whose map panels the report shows, at the LARGEST artefact
    strength (the clearest shortcut, as the figures' default condition) and the lowest seed
    number: the naive student, and the ANCHOR setting chosen on gold SOURCE-validation
    accuracy (`anchorviz.analysis.summary.best_on_source_val`, never a target number; the largest
    lambda when no validation accuracy is stored)."""
    out = []
    students = results[results["kind"] == "student"]
    if students.empty:
        return out
    # the figures' condition: largest strength, first value of every other varying setting
    students, _ = select_condition(students)
    seed = students["seed"].min()
    naive = students[(students["method"] == "naive") & (students["seed"] == seed)]
    if len(naive):
        out.append(("naive W2S student", naive.iloc[0]["run_id"]))
    anchor = students[students["method"] == "anchor"]
    if anchor.empty:
        return out
    how = "chosen on source validation"
    try:
        best = best_on_source_val(anchor.assign(artifact_strength=0.0))
        ok = len(best) and np.isfinite(best.iloc[0]["acc_val"])
    except ValueError:
        ok = False
    if ok:
        lam, lay = float(best.iloc[0]["anchor_lambda"]), best.iloc[0]["anchor_layers"]
    else:
        how = "largest lambda (no source-validation accuracy stored)"
        top = anchor.sort_values("anchor_lambda").iloc[-1]
        lam, lay = float(top["anchor_lambda"]), top["anchor_layers"]
    pick = anchor[np.isclose(anchor["anchor_lambda"], lam) & (anchor["anchor_layers"] == lay)]
    pick = pick[pick["seed"] == pick["seed"].min()]

    out.append((f"ANCHOR student (lambda {lam:g}, {layers_label(str(lay)) or lay}; {how})",
                pick.iloc[0]["run_id"]))
    return out


def _fmt(value: Any, how: str) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "–"
    if not np.isfinite(v):
        return "–"
    if how == "pct":
        return f"{100 * v:.1f}"
    if how == "pts":
        r = round(100 * v, 1)
        return f"{r if r != 0 else 0.0:+.1f}"
    return f"{v:.3f}"


def table_columns(results: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The (column, header, format) triples the report's results table shows for ``results``:
    the readable subset of the results columns that hold any value (debiased CKA replaced by
    plain linear CKA on results written before it existed)."""
    cols = []
    for col, head, how in _TABLE_COLUMNS:
        if col == "drift_cka_debiased_target" and (col not in results
                                                   or results[col].isna().all()):
            col, head = "drift_cka_target", "CKA"
        if col in results and results[col].notna().any():
            cols.append((col, head, how))
    return cols


def _table_html(results: pd.DataFrame) -> str:
    """The results table: one row per run, a reader's method name (lambda and layers only for
    ANCHOR), accuracies in percent and scores in points with 1 decimal, unitless measures with
    3 decimals."""
    if {"wrg", "aog"} <= set(results.columns):  # the ID gain that did not carry over
        results = results.assign(wrg_minus_aog=results["wrg"].astype(float)
                                 - results["aog"].astype(float))
    rows = results.copy()
    rows["_rank"] = [method_rank(m) for m in rows["method"]]
    # one column per setting that varies among the runs (strength, teacher visibility, model,
    # cfg.<setting> ...): rows of different settings are told apart, never read as seeds
    set_cols = setting_columns(results)
    rows = rows.sort_values([*set_cols, "seed", "_rank", "anchor_lambda", "anchor_layers"],
                            kind="stable")
    cols = table_columns(results)
    names = {"artifact_strength": "strength", "teacher_visibility": "teacher visibility"}
    head = (["run", "seed"] + [names.get(c, c.rsplit(".", 1)[-1]) for c in set_cols]
            + [h for _, h, _ in cols])

    def setting_cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and not np.isfinite(v)):
            return "–"
        return f"{v:g}" if isinstance(v, float) else str(v)

    body = []
    for rd in rows.to_dict("records"):
        cells = [method_label(rd["method"], rd["anchor_lambda"], rd["anchor_layers"]),
                 str(rd["seed"])]
        cells += [setting_cell(rd.get(c)) for c in set_cols]
        cells += [_fmt(rd.get(c), how) for c, _, how in cols]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    thead = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
    return (f"<div class='tablewrap'><table class='results'><thead>{thead}</thead><tbody>"
            + "\n".join(body) + "</tbody></table></div>" + _SORT_SCRIPT)


#: sorts the results table (table.results) by the clicked column (numbers as numbers, "–" last; a second click
#: reverses); inline and dependency-free so that the report works offline
_SORT_SCRIPT = r"""<script>
document.querySelectorAll('table.results').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th) {
    th.style.cursor = 'pointer';
    th.addEventListener('click', function () {
      var col = th.cellIndex, asc = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(r) {
        var t = r.cells[col].textContent.trim(), v = parseFloat(t.replace('\u2212', '-'));
        return isNaN(v) || !/^[-+\u2212]?[0-9.]/.test(t) ? t : v;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), nx = typeof x !== 'number', ny = typeof y !== 'number';
        if (x === '\u2013' || y === '\u2013') return (x === '\u2013') - (y === '\u2013');
        if (nx !== ny) return nx - ny;
        var c = nx ? String(x).localeCompare(String(y), undefined, {numeric: true}) : x - y;
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
</script>"""


# --------------------------------------------------------------------------- figures


def _drift_columns(sweep_dir: Path, results: pd.DataFrame) -> set[str]:
    for rid in results.loc[results["kind"] != "teacher", "run_id"]:
        try:
            return set(load_run_table(sweep_dir / "runs" / rid, "drift").columns)
        except (FileNotFoundError, ValueError):
            continue
    return set()


#: the width the report's figures are laid out for: the page's content column at 1280 px (the
#: body's max-width); they still follow the window (plotly autosize) when it is narrower
REPORT_FIGURE_WIDTH = 1200


def report_layout(fig):
    """``fig`` laid out for the report (`anchorviz.viz.export.static_layout` at
    :data:`REPORT_FIGURE_WIDTH`: the title and subplot titles wrapped, the legend right under the
    x axes, margins that hold each), then left to follow the page's width."""
    out = static_layout(fig, width=REPORT_FIGURE_WIDTH)
    out.update_layout(width=None, autosize=True)
    return out


def _lead_figure(sweep_dir: Path, results: pd.DataFrame):
    """The verdict figure (`anchorviz.viz.verdict.verdict_figure`) when the folder holds naive
    students of one setting; None otherwise (mixed settings are shown per setting below)."""
    if "method" not in results or not (results["method"] == "naive").any():
        return None
    try:
        fig = verdict_figure(sweep_dir, results=results)
    except Exception as err:  # e.g. several settings: the verdict box says why
        logger.info("report: no lead verdict figure (%s)", err)
        return None
    return report_layout(fig)



def _figures(sweep_dir: Path, results: pd.DataFrame) -> list[tuple[str, object]]:
    sections: list[tuple[str, object]] = []

    def add(title: str, make) -> None:
        try:
            sections.append((title, make()))
        except Exception as err:  # one missing piece must not lose the rest of the report
            logger.warning("report: figure %r skipped (%s)", title, err)
            sections.append((title, f"<p class='skip'>not available: {html.escape(str(err))}</p>"))

    add("In-distribution vs out-of-distribution accuracy",
        lambda: accuracy_figure(results=results))
    if {"acc_id_marked", "acc_id_clean"} <= set(results.columns) and \
            results["acc_id_clean"].notna().any():
        add("Shortcut or skill: ID accuracy on pairs with and without the artefact",
            lambda: shortcut_figure(results=results))
    add("Transfer scores (WRG, AOG, NTS)", lambda: transfer_figure(results=results))
    if has_cue_blocks(sweep_dir, results["run_id"].tolist()):
        add("Which cues each model follows, per target",
            lambda: cue_reliance_figure(sweep_dir, results=results))
    have = _drift_columns(sweep_dir, results)
    cka = "cka_debiased" if "cka_debiased" in have else "cka"
    cos = "cosine_centred" if "cosine_centred_mean" in have else "cosine"
    add(f"Representation drift by layer: {DRIFT_METRICS[cka][1]}",
        lambda: drift_by_layer_figure(sweep_dir, metric=cka, results=results))
    add(f"Representation drift by layer: {DRIFT_METRICS[cos][1]}",
        lambda: drift_by_layer_figure(sweep_dir, metric=cos, results=results))
    for title, run_id in _pick_runs(results):
        run_dir = sweep_dir / "runs" / run_id
        how = projection_method(run_dir)
        add(f"Shared {how if how != 'map' else 'map'} of reference and student states: {title}",
            lambda d=run_dir: umap_figure(d, color_by="domain", max_points=600))
    drift_col = ("drift_cos_centred_target" if "drift_cos_centred_target" in results
                 and results["drift_cos_centred_target"].notna().any() else "drift_cos_target")
    add("Drift vs OOD gain, per target",
        lambda: drift_vs_ood_figure(sweep_dir, drift_col=drift_col, results=results))
    if (results["method"] == "anchor").any():
        add("Lambda sweep", lambda: lambda_sweep_figure(results=results))
    teacher = results[results["kind"] == "teacher"]
    if len(teacher):
        d = sweep_dir / "runs" / teacher.sort_values("seed").iloc[0]["run_id"]
        add("Teacher soft-label confidence", lambda: label_confidence_figure(d))
    if (results["kind"] != "teacher").any():
        add("Training loss per step: fit and ANCHOR terms",
            lambda: loss_curve_figure(sweep_dir, results=results))
    return sections


# --------------------------------------------------------------------------- paper figures

#: formats of ``anchorviz report DIR --figures``
FIGURE_FORMATS = ("pdf", "svg", "png")


def _slug(title: str, limit: int = 60) -> str:
    text = unicodedata.normalize("NFKD", title.replace("λ", "lambda"))
    text = text.encode("ascii", "ignore").decode().lower()
    text = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    return text[:limit].rstrip("-") or "figure"


def write_figures(sweep_dir: str | Path, fmt: str = "pdf", width: str | float = "single",
                  *, out_dir: str | Path | None = None, dpi: int = 300,
                  results: pd.DataFrame | None = None) -> list[Path]:
    """The report's figures as paper figures: ``DIR/figures/NN-<title>.<fmt>`` + ``captions.txt``.

    Every figure of the report (and the training-loss curves) in
    `anchorviz.viz.export.paper_style`: no in-figure title -- the title is the file name and,
    with the subtitle that says what the error bars are, a line of ``captions.txt`` --,
    ``width`` ``"single"`` (3.5 in) or ``"double"`` (7.2 in) column, 8 pt text, the
    Okabe-Ito colours. ``fmt``: ``pdf`` / ``svg`` (vector, physical size) or ``png``
    (``dpi``). A figure that cannot be drawn from this folder is listed in captions.txt as
    skipped, with why. Returns the written image paths. Raises `anchorviz.viz.export.ExportError`
    when no static exporter works (kaleido needs Chrome / Chromium).
    """
    fmt = fmt.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"figure format must be one of {list(FIGURE_FORMATS)}, got {fmt!r}")
    inches = paper_width_inches(width)
    sweep_dir = Path(sweep_dir)
    if results is None:
        results = load_results(sweep_dir)
    folder = Path(out_dir) if out_dir is not None else sweep_dir / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    figs, paths, lines = [], [], []
    for i, (title, obj) in enumerate(_figures(sweep_dir, results), start=1):
        name = f"{i:02d}-{_slug(title)}.{fmt}"
        if isinstance(obj, str):
            why = html.unescape(re.sub(r"<[^>]+>", "", obj))
            lines.append(f"{name}: skipped -- {title}: {why}")
            continue
        figs.append(obj)
        paths.append(folder / name)
        caption = figure_caption(obj)
        lines.append(f"{name}: {title}. {caption}")
    written = export_paper_figures(figs, paths, width=width, dpi=dpi)
    size = (f"{inches:g} in wide ({width} column)" if isinstance(width, str) else
            f"{inches:g} in wide")
    head = (f"Figures of {sweep_dir} for a paper: {fmt.upper()}, {size}"
            + (f", {dpi} dpi" if fmt == "png" else "") + "; titles are here, not in the "
            "figures.\n\n")
    (folder / "captions.txt").write_text(head + "\n".join(lines) + "\n", encoding="utf-8")
    return written


# --------------------------------------------------------------------------- page


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:.8em auto;padding:0 1em;
  line-height:1.4;color:#222}
h1{font-size:1.4em;margin:.2em 0;overflow-wrap:anywhere}
.box{border-radius:6px;padding:.7em 1em;margin:.8em 0}
.smoke{background:#fff4ce;border:2px solid #b8860b}
.warn{background:#fdecea;border:1px solid #c0392b}
.scenario{background:#f3f6fa;border:1px solid #c9d6e3}
.verdict{border:1px solid #999}
.verdict .yes{color:#8b1a1a} .verdict .no{color:#1f4e79} .verdict .none{color:#555}
.headline{font-weight:600;margin:.2em 0 .4em}
p.lead{font-size:1.1em;font-weight:600;margin:.3em 0 .4em}
p.lead.yes{color:#8b1a1a} p.lead.no{color:#1f4e79} p.lead.none{color:#555}
p.terms{font-size:13.5px;color:#333;margin:.3em 0 .8em}
dl.glossary dt{font-weight:600;float:left;clear:left;width:5.5em}
dl.glossary dd{margin:0 0 .3em 6em}
pre{white-space:pre-wrap;font-size:12.5px;margin:.2em 0;overflow-wrap:anywhere}
.tablewrap{overflow-x:auto;max-width:100%}
table.results{border-collapse:collapse;font-size:12.5px;font-variant-numeric:tabular-nums}
table.results td,table.results th{padding:2px 6px;border-bottom:1px solid #ddd;text-align:right;
  white-space:nowrap}
table.results td:first-child,table.results th:first-child{text-align:left}
table.results th{position:sticky;top:0;background:#fff}
.skip{color:#a00}
.plotly-graph-div{max-width:100%}
.meta{color:#555;font-size:13px;margin:.2em 0 .6em}
nav.toc{font-size:13.5px;margin:.6em 0 1em}
nav.toc ol{margin:.2em 0;padding-left:1.6em;columns:2}
.caption{margin:.3em 0 1.4em;font-style:italic;color:#333}
.caption.observed{margin-top:-1em;font-style:normal;color:#222}
table.results th[aria-sort=ascending]::after{content:" \\25B2"}
table.results th[aria-sort=descending]::after{content:" \\25BC"}
"""


def _missing_html(sweep_dir: Path) -> str | None:
    """A box listing every run the sweep's grid (its ``sweep.yaml``) expects that the folder
    lacks or cannot read (`anchorviz.pipeline.expected.missing_runs`); None when none is."""
    try:
        missing = missing_runs(sweep_dir)
    except ValueError as err:
        missing = {"(grid)": str(err)}
    if not missing:
        return None
    logger.warning("report: %d run(s) of the folder's grid(s) missing or unreadable in %s",
                   len(missing), sweep_dir)
    items = "".join(f"<li><code>{html.escape(r)}</code>: {html.escape(w)}</li>"
                    for r, w in sorted(missing.items()))
    return (f"<div class='box warn' id='missing-runs'><b>⚠ {len(missing)} run(s) of this "
            "folder's grid are missing or unreadable</b> and are not in the table, the verdict "
            f"or the figures (rerun the sweep to redo them):<ul>{items}</ul></div>")


def _grids_html(sweep_dir: Path, results: pd.DataFrame) -> str | None:
    """When several grids were asked for on the folder (two sweeps with different grids on one
    ``--out``; `anchorviz.pipeline.expected.grids`): a box saying that the report shows the
    runs of every grid, each grid with its runs (finished / expected), and how many rows
    belong to no recorded grid (older inputs). None for a folder of one grid."""
    found = [g for g in grids(sweep_dir) if not g.error]
    if len(found) < 2:
        return None
    have = set(results["run_id"]) if "run_id" in results else set()
    esc = html.escape
    items, claimed = [], set()
    for g in found:
        ids = set(g.run_ids)
        claimed |= ids
        done = sorted(have & ids)
        cmd = f" by <code>{esc(g.command)}</code>" if g.command else ""
        shown = ", ".join(f"<code>{esc(r)}</code>" for r in done) or "none yet"
        items.append(f"<li><b>{esc(g.label)}</b> (<code>{esc(g.path.name)}</code>, asked for "
                     f"{esc(g.written_at or 'at an unknown time')}{cmd}): {len(done)} of "
                     f"{len(ids)} runs finished: {shown}</li>")
    stale = len(have - claimed)
    tail = (f" {stale} row(s) belong to no recorded grid (made from older inputs) and are shown "
            "too." if stale else "")
    return (f"<div class='box' id='grids'><b>This folder holds the runs of {len(found)} grids"
            f"</b> (one file per sweep or run in <code>grids/</code>): this report shows the "
            f"finished runs of every grid, and runs of different settings are never pooled as "
            f"seeds.{tail}<ul>{''.join(items)}</ul></div>")


_LOG_LINE = re.compile(r"^\S+ \S+ (WARNING|ERROR|CRITICAL) (\S+): (.*)$")


def run_warnings(sweep_dir: str | Path, run_ids: set[str] | None = None) -> list[dict[str, Any]]:
    """The WARNING-or-above lines the runs of a folder logged while they computed (each run's
    ``run.log``; a sweep's workers also show them on the console as they happen), one entry
    per distinct message: ``{"level", "message", "runs"}``, runs sorted. ``run_ids``: only
    these runs and the teachers / references they were trained against (the folder holds no
    record of that tie, so a teacher's warnings are kept whenever ``run_ids`` is given)."""
    found: dict[tuple[str, str], set[str]] = {}
    root = Path(sweep_dir) / "runs"
    for log in sorted(root.glob("*/run.log")) if root.is_dir() else ():
        rid = log.parent.name
        if rid.startswith(".tmp-"):
            continue
        if run_ids is not None and rid not in run_ids and not rid.startswith("teacher"):
            continue
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = _LOG_LINE.match(line)
            if m:
                found.setdefault((m.group(1), m.group(3).strip()), set()).add(rid)
    return [{"level": level, "message": msg, "runs": sorted(runs)}
            for (level, msg), runs in found.items()]


def _warnings_html(sweep_dir: Path, run_ids: set[str] | None) -> str | None:
    items = run_warnings(sweep_dir, run_ids)
    if not items:
        return None
    esc = html.escape
    lines = []
    for w in items:
        runs = w["runs"]
        named = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
        lines.append(f"<li>{esc(w['level'])} ({len(runs)} run{'s' if len(runs) > 1 else ''}: "
                     f"{esc(named)}): {esc(w['message'])}</li>")
    return ("<div class='box warn' id='run-warnings'><b>Warnings the runs logged.</b> "
            "Each distinct message once, with the runs that logged it (their "
            "<code>run.log</code> holds the context):<ul>" + "".join(lines) + "</ul></div>")


def _smoke_html(smoke: dict) -> str:
    """The smoke-run disclaimer box of :func:`write_report` (``smoke``: :func:`smoke_status`)."""
    esc = html.escape
    n, total = len(smoke["smoke"]), smoke["total"]
    head = ("Smoke run: these numbers are not a result." if n >= total else
            f"Smoke runs mixed in: {n} of {total} runs are smoke-sized; their numbers are "
            "not a result, and the verdict and figures below pool them with the others.")
    return (f"<div class='box smoke' id='smoke'><b>{esc(head)}</b> Smoke-sized runs only "
            "show that the pipeline runs: " + "; ".join(esc(r) for r in smoke["reasons"])
            + ". For a result: larger splits (<code>anchorviz demo</code> without "
            "<code>--quick</code>, the notebooks without ANCHORVIZ_SMOKE=1) and several "
            "seeds.</div>")


def _mixed_html(mixed: list[str]) -> str:
    """The mixed-settings box of :func:`write_report` (``mixed``: :func:`mixed_configs`)."""
    return ("<div class='box warn' id='mixed'><b>Mixed settings.</b> This folder "
            "holds runs of different settings (they differ in "
            + html.escape(", ".join(mixed)) + "); they are never pooled as seeds: the table has "
            "a column for each, the verdict is given per setting, and each figure shows "
            "one setting, named in its title. Give each setting its own folder to see "
            "them all in figures.</div>")


def _plain_sentence(blocks: list[dict], smoke: dict) -> tuple[str, str]:
    """``(status, plain sentence)`` of the page's first line, from :func:`verdict_blocks`."""
    if len(blocks) == 1:
        status, plain = blocks[0]["status"], blocks[0]["plain"]
    else:
        shown = sum(b["status"] == "yes" for b in blocks)
        status = "yes" if shown else ("no" if any(b["status"] == "no" for b in blocks) else
                                      "none")
        plain = (f"This folder holds {len(blocks)} settings, never pooled: the failure mode shows "
                 f"in {shown} of them (each one's verdict is below, the figure shows one).")
    if smoke["smoke"] and len(smoke["smoke"]) >= smoke["total"]:
        plain = "Smoke run, not a result. " + plain
    return status, plain


def _verdict_html(blocks: list[dict]) -> str:
    """The verdict-in-detail box of :func:`write_report`: one headline and its lines a setting."""
    esc = html.escape
    verdict = ["<div class='box verdict' id='verdict'><b>Verdict</b> (computed from the "
               "results table by <code>anchorviz.analysis.summary.failure_mode</code>, the same function "
               "<code>anchorviz demo</code> prints):"]
    for b in blocks:
        verdict.append(f"<p class='headline {b['status']}'>{esc(b['headline'])}</p>"
                       f"<pre>{esc(chr(10).join(b['lines']))}</pre>")
    verdict.append("</div>")
    return "".join(verdict)


def _figure_sections(sweep_dir: Path, results: pd.DataFrame,
                     first: bool) -> tuple[list[str], list[tuple[str, str]]]:
    """``(html parts, [(anchor, title)])`` of the report's figures, each with its captions;
    ``first``: plotly.js is not on the page yet (the first figure embeds it)."""
    esc = html.escape
    parts = []
    fig_toc: list[tuple[str, str]] = []
    for title, obj in _figures(sweep_dir, results):
        anchor = f"fig-{_slug(title)}"
        while anchor in {a for a, _ in fig_toc}:
            anchor += "-"
        fig_toc.append((anchor, title))
        parts.append(f"<section id='{anchor}'><h2>{esc(title)}</h2>")
        if isinstance(obj, str):
            parts.append(obj + "</section>")
            continue
        observed = observed_caption(title, obj, results)
        obj = report_layout(obj)
        height = obj.layout.height or 520
        parts.append(obj.to_html(full_html=False, include_plotlyjs="inline" if first else False,
                                 default_width="100%", default_height=f"{height}px",
                                 config={"responsive": True}))
        caption = figure_caption_for(title)
        if caption:
            parts.append(f"<p class='caption'>{esc(caption)}</p>")
        if observed:
            parts.append(f"<p class='caption observed'>{esc(observed)}</p>")
        parts.append("</section>")
        first = False
    return parts, fig_toc


def _toc_html(top: list[str], fig_toc: list[tuple[str, str]], lead: bool) -> str:
    """The contents: the lead figure, every block at the top that has an id, the table, then
    each figure and the glossary."""
    names = {"missing-runs": "Missing runs", "smoke": "Smoke run", "mixed": "Mixed settings",
             "scenario": "Scenario",
             "verdict": "Verdict", "lead-figure": "The verdict, seed by seed",
             "label-warning": "Label warning", "run-warnings": "Warnings the runs logged"}
    toc = [("lead-figure", names["lead-figure"])] if lead else []
    toc += [(m, names[m]) for block in top for m in re.findall(r"id='([\w-]+)'", block)
            if m in names]
    toc += [("results", "Results"), *fig_toc, ("glossary", "Glossary")]
    return ("<nav class='toc' id='contents'><b>Contents</b><ol>"
            + "".join(f"<li><a href='#{a}'>{html.escape(t)}</a></li>" for a, t in toc)
            + "</ol></nav>")


def write_report(sweep_dir: str | Path, path: str | Path | None = None, *,
                 run_ids: set[str] | None = None, command: list[str] | None = None) -> Path:
    """Write ``report.html`` (or ``path``) for a sweep folder; returns the path.

    ``run_ids``: only these runs of the folder (``anchorviz demo``: its own runs, not those of
    another scenario or a notebook in the same folder); None: every finished run.
    ``command``: the arguments of the ``anchorviz`` command writing this page (``anchorviz
    report``), named in the header beside what made the runs.

    Order: the first screen (at 1280 x 800) holds the title, the verdict in one plain sentence
    (:func:`plain_verdict`) and the verdict figure; then what the figure shows with every
    abbreviation spelled out (:data:`GLOSSARY`), the header (version, date, :func:`made_by`),
    contents, the runs' warnings (:func:`run_warnings`), smoke
    disclaimer (:func:`smoke_reasons`), scenario (:func:`scenario_lines`),
    verdict in detail (:func:`verdict_blocks`), label warning (:func:`label_warning`), results
    table, figures (each with its :func:`figure_caption_for` line) and the glossary."""
    sweep_dir = Path(sweep_dir)
    results = load_results(sweep_dir)
    if run_ids is not None:
        results = results[results["run_id"].isin(set(run_ids))].reset_index(drop=True)
        if results.empty:
            raise ValueError(f"none of the {len(run_ids)} requested runs is finished in "
                             f"{sweep_dir}")
    path = Path(path) if path else sweep_dir / "report.html"
    esc = html.escape

    top = []
    missing = _missing_html(sweep_dir)
    if missing:
        top.append(missing)
    several = _grids_html(sweep_dir, results) if run_ids is None else None
    if several:
        top.append(several)
    warned = _warnings_html(sweep_dir, None if run_ids is None else set(run_ids))
    if warned:
        top.append(warned)
    smoke = smoke_status(sweep_dir, results)
    if smoke["smoke"]:
        top.append(_smoke_html(smoke))
    mixed = mixed_configs(results)
    if mixed:
        top.append(_mixed_html(mixed))
    blocks = verdict_blocks(results)
    status, plain = _plain_sentence(blocks, smoke)
    top.append("<div class='box scenario' id='scenario'><b>Scenario.</b> "
               + "<br>".join(esc(x) for x in scenario_lines(sweep_dir, results)) + "</div>")
    top.append(_verdict_html(blocks))
    first = True
    lead_html = ""
    lead = _lead_figure(sweep_dir, results)
    if lead is not None:  # the verdict, seed by seed: what a learner should see first
        lead_html = ("<div id='lead-figure'>"
                     + lead.to_html(full_html=False, include_plotlyjs="inline",
                                    default_width="100%",
                                    default_height=f"{lead.layout.height or 420}px",
                                    config={"responsive": True}) + "</div>")
        first = False
    terms = ("<p class='terms' id='terms'>" + ((
        "<b>The figure.</b> Each row is one seed: the diamond is how much the naive "
        "weak-to-strong (W2S) student beats its weak teacher in distribution, its weak-to-strong "
        "raw gain (WRG); the circle how much out of distribution, its absolute out-of-distribution "
        "gain (AOG); the teacher sits at 0. The grey bar between them is the gain that did not "
        "carry over; the last row is its mean with the 95% interval over seeds. A right panel, "
        "when there is one, splits each WRG: the red part is earned on marked pairs the teacher "
        "could not read (the shortcut). ") if lead is not None else "")
        + "<b>Terms</b> (glossary at the end): " + esc(terms_line()) + "</p>")
    warn = label_warning(results)
    if warn:
        top.append(f"<div class='box warn' id='label-warning'><b>⚠ Labels.</b> {esc(warn)}</div>")

    targets = sweep_targets(results)
    parts, fig_toc = _figure_sections(sweep_dir, results, first)
    toc_html = _toc_html(top, fig_toc, lead is not None)
    written = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z").strip()
    import shlex

    page_by = (f" · this page by: {esc(shlex.join(['anchorviz', *command]))}" if command else "")
    header = (f"<p class='meta' id='header'>folder {esc(str(sweep_dir))} · anchorviz "
              f"{esc(anchorviz.__version__)} · report written {esc(written)} · runs made by: "
              f"{esc(made_by(sweep_dir))}{page_by}</p>")
    glossary = ("<section id='glossary'><h2>Glossary</h2><dl class='glossary'>"
                + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v[0])}: {esc(v[1])}.</dd>"
                          for k, v in GLOSSARY.items()) + "</dl></section>")
    doc = f"""<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>anchorviz report: {esc(sweep_dir.name)}</title>
<style>{_CSS}</style></head><body>
<h1>anchorviz report: {esc(sweep_dir.name)}</h1>
<p class='lead {status}' id='verdict-sentence'>{esc(plain)}</p>
{lead_html}
{terms}
{header}
{toc_html}
{chr(10).join(top)}
<section id='results'><h2>Results</h2>
<p>One row per run. Accuracies in percent and transfer scores in points, 1 decimal; drift, CKA
and label confidence are unitless in [0, 1], 3 decimals. WRG = Acc_student(ID) -
Acc_teacher(ID); AOG = Acc_student(OOD) - Acc_teacher(OOD); NTS = AOG - max(0, Acc_teacher(ID) -
Acc_student(ID)); WRG - AOG = the in-distribution gain that did not carry over out of
distribution; PGR = WRG / (Acc_ceiling(ID) - Acc_teacher(ID)). Click a header to sort by
it. ID clean: the source test
pairs without the planted artefact; ID hidden: the marked ones whose marker the teacher could not
read (when it reads only some). OOD = all target test pairs pooled
({esc(", ".join(targets)) or "-"}). Drift and CKA: last layer, student vs its frozen pretrained
reference, mean over the targets. Label conf. = mean max(q, 1 - q) of the labels the run
trained on.</p>
{_table_html(results)}</section>
{chr(10).join(parts)}
{glossary}
</body></html>"""
    write_atomic(path, lambda tmp: tmp.write_text(doc, encoding="utf-8"))
    return path
