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
import math
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import anchorviz
from anchorviz.analysis import summary
from anchorviz.analysis.summary import best_on_source_val, setting_columns
from anchorviz.paths import COMMANDS_FILE, read_yaml, recorded_commands, write_atomic
from anchorviz.pipeline.demo import demo_note, demo_sweep
from anchorviz.pipeline.expected import grids, missing_runs
from anchorviz.viz.accuracy import accuracy_figure, shortcut_figure, transfer_figure
from anchorviz.viz.common import (
    GROUP_KEYS,
    group_mask,
    group_table,
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
from anchorviz.viz.training import UNINFORMATIVE_BELOW, label_confidence_figure, loss_curve_figure
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

#: fewer test pairs per split than this makes a smoke run: one run's 95% interval is then wider
#: than about +-7 points, more than the effects the protocol looks for
SMOKE_TEST_PAIRS = 200
#: fewer training pairs (teacher or student) than this makes a smoke run
SMOKE_TRAIN_PAIRS = 400

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


#: every abbreviation the report uses: ``{abbreviation: (spelled out, what it means)}``; the
#: terms line under the lead figure spells each out before its first use, the glossary at the
#: end of the page lists them all
GLOSSARY: dict[str, tuple[str, str]] = {
    "ID": ("in distribution", "the source domain's own test pairs, from the domain the models "
                              "were trained on"),
    "OOD": ("out of distribution", "the target domains' test pairs, never trained on"),
    "W2S": ("weak-to-strong", "a strong student trained on a weak teacher's labels instead of "
                              "gold labels"),
    "WRG": ("weak-to-strong raw gain", "student minus weak-teacher accuracy in distribution, in "
                                       "points"),
    "AOG": ("absolute out-of-distribution gain", "student minus weak-teacher accuracy out of "
                                                 "distribution, in points"),
    "NTS": ("net transfer score", "AOG minus any loss in distribution: AOG - max(0, teacher ID "
                                  "- student ID), in points; below 0 is a net loss"),
    "PGR": ("performance gap recovered", "WRG / (gold ceiling ID - teacher ID): the share of "
                                         "the gap to a model trained on gold labels that the "
                                         "student closes"),
    "CKA": ("centred kernel alignment", "the similarity of two sets of hidden states, 1 = the "
                                        "same up to rotation and scale; here student vs its "
                                        "frozen pretrained copy"),
    "ANCHOR": ("representation anchoring", "a penalty, weighted by lambda, on the distance "
                                           "between the student's hidden states and its "
                                           "pretrained ones"),
}


def terms_line() -> str:
    """One line spelling out every abbreviation of :data:`GLOSSARY` ("WRG = weak-to-strong raw
    gain ..."), for the top of the page."""
    return "; ".join(f"{k} = {v[0]}" for k, v in GLOSSARY.items()) + "."


# --------------------------------------------------------------------------- configs


def _run_configs(sweep_dir: Path, results: pd.DataFrame) -> dict[str, dict]:
    """``{run_id: config.yaml}`` of the runs in the results table (unreadable ones left out)."""
    out = {}
    for rid in results["run_id"].astype(str):
        path = sweep_dir / "runs" / rid / "config.yaml"
        try:
            out[rid] = read_yaml(path) or {}
        except Exception as err:  # a missing config must not lose the report
            logger.debug("report: cannot read %s (%s)", path, err)
    return out


def _data_settings(configs: dict[str, dict], sweep_dir: Path) -> list[dict]:
    """The ``data`` block of every run config (the sweep.yaml base when there is none)."""
    blocks = [c["data"] for c in configs.values() if isinstance(c.get("data"), dict)]
    if blocks:
        return blocks
    try:
        base = (read_yaml(sweep_dir / "sweep.yaml") or {}).get("base") or {}
        return [base["data"]] if isinstance(base.get("data"), dict) else []
    except Exception:
        return []


def _quick_sizes() -> dict[str, int]:
    d = demo_sweep(quick=True).base.data
    return {k: getattr(d, k) for k in ("teacher_train", "w2s_train", "val", "source_test",
                                       "target_test")}


def _is_smoke(data: dict) -> bool:
    def small(key: str, limit: int) -> bool:
        v = data.get(key)
        return isinstance(v, (int, float)) and v < limit

    return (small("source_test", SMOKE_TEST_PAIRS) or small("target_test", SMOKE_TEST_PAIRS)
            or small("teacher_train", SMOKE_TRAIN_PAIRS) or small("w2s_train", SMOKE_TRAIN_PAIRS))


def smoke_status(sweep_dir: str | Path, results: pd.DataFrame | None = None) -> dict[str, Any]:
    """Which runs of a folder are smoke-sized, and why: ``{"smoke": [run ids], "total": n,
    "reasons": [...]}`` (``smoke`` empty when none is).

    Read from the run configs (``runs/<id>/config.yaml``; the folder's ``sweep.yaml`` when
    there are none): test splits under :data:`SMOKE_TEST_PAIRS` pairs or training splits under
    :data:`SMOKE_TRAIN_PAIRS`; the reasons also say whether the sizes are those of
    ``anchorviz demo --quick`` (which the notebooks' ``ANCHORVIZ_SMOKE=1`` mode also uses)."""
    sweep_dir = Path(sweep_dir)
    if results is None:
        results = load_results(sweep_dir)
    configs = _run_configs(sweep_dir, results)
    by_run = {rid: c["data"] for rid, c in configs.items() if isinstance(c.get("data"), dict)}
    if not by_run:  # no run config: judge the folder by its sweep.yaml
        blocks = _data_settings({}, sweep_dir)
        by_run = {rid: blocks[0] for rid in results["run_id"]} if blocks else {}
    smoke = sorted(rid for rid, d in by_run.items() if _is_smoke(d))
    out: dict[str, Any] = {"smoke": smoke, "total": len(results), "reasons": []}
    if not smoke:
        return out
    blocks = [by_run[r] for r in smoke]

    def smallest(key: str) -> int | None:
        vals = [int(b[key]) for b in blocks if isinstance(b.get(key), (int, float))]
        return min(vals) if vals else None

    reasons = out["reasons"]
    src, tgt = smallest("source_test"), smallest("target_test")
    small_test = [n for n in (src, tgt) if n is not None and n < SMOKE_TEST_PAIRS]
    if small_test:
        hw = 100 * 1.96 * math.sqrt(0.25 / min(small_test))
        reasons.append(f"test splits of {src} source / {tgt} target pairs (under "
                       f"{SMOKE_TEST_PAIRS}): one run's 95% interval is about ±{hw:.0f} points")
    small_train = {k: v for k in ("teacher_train", "w2s_train")
                   if (v := smallest(k)) is not None and v < SMOKE_TRAIN_PAIRS}
    if small_train:
        reasons.append("training splits of " + ", ".join(f"{v} {k}" for k, v in
                                                         small_train.items())
                       + f" pairs (under {SMOKE_TRAIN_PAIRS})")
    try:
        quick = _quick_sizes()
        if any(all(b.get(k) == v for k, v in quick.items()) for b in blocks):
            reasons.append("the split sizes of `anchorviz demo --quick` (also the notebooks' "
                           "ANCHORVIZ_SMOKE=1 mode)")
    except Exception as err:  # the CLI's demo settings are a hint, not a requirement
        logger.debug("report: demo --quick sizes unavailable (%s)", err)
    return out


def smoke_reasons(sweep_dir: str | Path, results: pd.DataFrame | None = None) -> list[str]:
    """Why runs of a folder are smoke runs whose numbers are not a result ([] if none is);
    see :func:`smoke_status`."""
    return smoke_status(sweep_dir, results)["reasons"]


def mixed_configs(results: pd.DataFrame) -> list[str]:
    """The settings other than the artefact strength (results columns such as
    ``teacher_visibility``, ``model``, ``cfg.<setting>``) that differ between runs of one method
    in this folder (`anchorviz.analysis.summary.setting_columns`); [] when they share one."""
    return [c.removeprefix("cfg.") for c in setting_columns(results, ignore=("artifact_strength",))]


def made_by(sweep_dir: str | Path) -> str:
    """What made a folder, for the report's header: the last command line ``anchorviz demo /
    run / sweep / analyse`` recorded in its ``commands.log`` (`anchorviz.paths.record_command`)
    with its time, and how many earlier ones wrote there. A folder made from Python records
    none: then the file that holds its settings, ``sweep.yaml`` (written by
    `anchorviz.pipeline.sweep.sweep`) with its grid, else the runs' own
    ``runs/<id>/config.yaml``."""
    sweep_dir = Path(sweep_dir)
    commands = recorded_commands(sweep_dir)
    if commands:
        when, cmd = commands[-1]
        earlier = len(commands) - 1
        return (f"{cmd} ({when})" + (f"; {earlier} earlier command(s) wrote here too, listed in "
                                     f"{COMMANDS_FILE}" if earlier else ""))
    try:
        sw = read_yaml(sweep_dir / "sweep.yaml") or {}
    except Exception as err:  # a missing or unreadable file: say so, do not lose the report
        logger.debug("report: cannot read sweep.yaml (%s)", err)
        sw = None
    if not isinstance(sw, dict):
        return ("no command line is recorded (the folder was made from Python, or by a version "
                "that did not record one) and there is no readable sweep.yaml: each run's "
                "settings are in runs/<id>/config.yaml")
    grid = sw.get("grid") if isinstance(sw.get("grid"), dict) else {}
    data = ((sw.get("base") or {}).get("data") or {}) if isinstance(sw.get("base"), dict) else {}
    parts = []
    if data.get("source"):
        parts.append(f"source {data['source']}")
    names = {"methods": "methods", "anchor_lambdas": "lambdas", "anchor_layers": "layers",
             "seeds": "seeds", "artifact_strengths": "artefact strengths",
             "teacher_visibilities": "teacher visibilities"}
    for key, name in names.items():
        v = grid.get(key)
        if isinstance(v, (list, tuple)) and v:
            parts.append(f"{name} {', '.join(f'{x:g}' if isinstance(x, float) else str(x) for x in v)}")
    return ("no command line is recorded (the folder was made from Python, or by a version "
            "that did not record one); the settings are in sweep.yaml"
            + (": " + "; ".join(parts) if parts else ""))


# --------------------------------------------------------------------------- top of the page


def _pct_list(values) -> str:
    return ", ".join(f"{v:.0%}" for v in values)


def scenario_lines(sweep_dir: str | Path, results: pd.DataFrame) -> list[str]:
    """The scenario in plain words: the banner ``anchorviz demo`` prints (``anchorviz.pipeline.demo.demo_note``,
    with how much of the marker the teacher reads) for the demo's constructed marker artefact
    on VADER, otherwise source, targets and any artefact; then the models, split sizes and
    seeds, read from the run configs."""
    sweep_dir = Path(sweep_dir)
    configs = _run_configs(sweep_dir, results)
    blocks = _data_settings(configs, sweep_dir)
    data = blocks[0] if blocks else {}
    kind = str(data.get("artifact_kind", "none"))
    strengths = sorted(float(s) for s in results["artifact_strength"].dropna().unique()
                       if float(s) > 0) if "artifact_strength" in results else []
    mode = str(data.get("artifact_target_mode", "absent"))
    source = data.get("source") or ", ".join(sorted(results["source"].astype(str).unique()))
    targets = data.get("targets") or []
    lines = []
    visibility = float(data.get("artifact_teacher_visibility", 1.0))
    form = str(data.get("artifact_teacher_form", "same"))
    if (kind == "marker" or (kind, form) == ("echo", "marker")) and str(source).startswith(
            "vader-") and strengths:
        line = demo_note(max(strengths), mode, visibility, kind, form)
        if len(strengths) > 1:
            line += (f" This folder holds runs at artefact strengths {_pct_list(strengths)}; "
                     "each has its own verdict below, and the figures show the strongest.")
        lines.append(line)
    else:
        line = f"Source {source}; targets {', '.join(map(str, targets)) or '-'}. "
        if kind in ("none", "") or not strengths:
            line += ("No planted artefact: whatever shift there is between source and targets "
                     "is the data's own.")
        else:
            line += (f"A constructed source-only artefact ({kind}) is planted on the chosen side "
                     f"of {_pct_list(strengths)} of source pairs and is {mode} in the targets: "
                     "a shortcut built on purpose, not a property of the data.")
            if visibility < 1:
                line += (f" The weak teacher reads it on only {visibility:.0%} of the marked "
                         "pairs; the student reads all of them.")
        lines.append(line)
    teacher = student = None
    for key in configs.values():
        if key.get("kind") == "student":
            student = student or key.get("model")
            teacher = teacher or (key.get("teacher") or {}).get("model")
        elif key.get("kind") == "teacher":
            teacher = teacher or key.get("model")
        elif key.get("kind") == "ceiling":
            student = student or key.get("model")
    sizes = []
    if all(isinstance(data.get(k), int) for k in ("teacher_train", "w2s_train", "source_test",
                                                   "target_test")):
        sizes.append(f"teacher trained on {data.get('teacher_train')} gold-labelled pairs, students "
                     f"on the teacher's soft labels of {data.get('w2s_train')} pairs; tested on "
                     f"{data.get('source_test')} source pairs and {data.get('target_test')} "
                     "pairs per target")
    seeds = sorted(int(s) for s in results["seed"].dropna().unique())
    lines.append(f"Weak teacher {teacher or '?'}, strong student {student or '?'}"
                 + (f"; {sizes[0]}" if sizes else "")
                 + f"; seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}.")
    return lines


def _strengths(results: pd.DataFrame) -> list[float | None]:
    if "artifact_strength" not in results.columns:
        return [None]
    vals = sorted(float(s) for s in results["artifact_strength"].dropna().unique())
    return vals if len(vals) > 1 else [None]


def verdict_blocks(results: pd.DataFrame) -> list[dict[str, Any]]:
    """Per setting (`anchorviz.analysis.summary.split_by_settings`: runs of different teacher
    visibilities, models ... are never pooled) and artefact strength: ``{"setting",
    "strength", "status", "headline", "lines"}`` from
    `anchorviz.analysis.summary.failure_mode` and `anchorviz.analysis.summary.verdict_lines` (what the CLI
    prints). ``status``: ``"yes"`` (failure mode shown), ``"no"`` or ``"none"`` (no verdict:
    one seed, or missing runs / columns)."""
    out = []
    for setting, part in summary.split_by_settings(results, ignore=("artifact_strength",)):
        out += _verdict_blocks(part, setting)
    return out


def _verdict_blocks(results: pd.DataFrame, setting: dict) -> list[dict[str, Any]]:
    out = []
    where = f" ({summary.settings_text(setting)})" if setting else ""
    for s in _strengths(results):
        fm = summary.failure_mode(results, s)
        lines = summary.verdict_lines(results, s)
        at = (f" at artefact strength {s:g}" if s is not None else "") + where
        if fm["missing"] or fm["n_seeds"] == 0:
            status, head = "none", f"No failure-mode verdict{at}: {fm['reason']}."
        elif not fm["can_conclude"]:
            status, head = "none", (f"No failure-mode verdict{at}: {fm['reason']}. The numbers "
                                    "below are one seed's.")
        elif fm["failure_mode"]:
            strict = " — strict form too: AOG < 0" if fm["strict"] else ""
            status, head = "yes", (f"Failure mode{at}: YES, beyond the seed interval{strict}. "
                                   f"{fm['reason']}.")
        else:
            status, head = "no", f"Failure mode{at}: no. {fm['reason']}."
        out.append({"setting": setting, "strength": s, "status": status, "headline": head,
                    "lines": lines, "plain": plain_verdict(fm, at)})
    return out


def plain_verdict(fm: dict, where: str = "") -> str:
    """One sentence in plain words from a `anchorviz.analysis.summary.failure_mode` result:
    what the student gained in and out of distribution and whether the gap passes its seed
    interval; abbreviations spelled out. ``where``: e.g. " at artefact strength 0.9"."""
    n, method = fm["n_seeds"], fm.get("method", "naive")
    if fm["missing"] or n == 0:
        return f"No verdict{where}: {fm['reason']}."
    wrg = 100.0 * fm["wrg"]["mean"]

    def vs_teacher(x: float) -> str:
        return (f"beats its weak teacher by {x:.1f} points" if x >= 0 else
                f"falls {-x:.1f} points behind its weak teacher")

    p = fm["pooled"]
    if n < 2 or p is None:
        return (f"One seed{where}: the {method} student {vs_teacher(wrg)} in distribution (ID), "
                "but one seed gives no interval, so there is no verdict; run three or more.")
    aog = 100.0 * p["aog"]["mean"]
    head = (f"Over {n} seeds{where}, the {method} student {vs_teacher(wrg)} in distribution "
            "(ID: the source's own test pairs) ")
    if aog >= 0 and wrg >= 0:
        head += "but by only" if aog < wrg else "and by"
        head += f" {aog:.1f}"
    elif aog >= 0:
        head += f"and beats it by {aog:.1f}"
    else:
        head += f"{'but' if wrg >= 0 else 'and'} falls {-aog:.1f} behind it"
    head += " out of distribution (OOD: the new domains)"
    if fm["failure_mode"]:
        where_t = ("" if p.get("failure_mode") else
                   f" on {', '.join(fm['failure_targets'])}")
        tail = (f": {100.0 * p['mean']:.1f} points of its gain do not carry over{where_t}, more "
                "than the spread over seeds explains, the failure mode"
                + (" in its strict form (worse than the teacher on the new domains)."
                   if fm["strict"] else "."))
    elif not fm["wrg"]["above_zero"]:
        tail = ("; its gain in distribution is not reliably above 0 over these seeds, so there "
                "is no failure mode to show.")
    else:
        tail = ("; within the spread over seeds the gain carries over, so this folder does not "
                "show the failure mode.")
    return head + tail


def label_warning(results: pd.DataFrame) -> str | None:
    """A warning when the labels the students trained on are nearly uninformative: mean
    confidence max(q, 1 - q) below `anchorviz.viz.training.UNINFORMATIVE_BELOW` (teacher rows when
    no student has it); None otherwise."""
    if "q_confidence" not in results.columns:
        return None
    for kinds in (("student",), ("teacher",)):
        q = results.loc[results["kind"].isin(kinds), "q_confidence"].astype(float).dropna()
        if len(q):
            break
    else:
        return None
    conf = float(q.mean())
    if conf >= UNINFORMATIVE_BELOW:
        return None
    return (f"The teacher's labels are nearly uninformative: mean confidence max(q, 1 - q) = "
            f"{conf:.3f} (0.5 is a coin flip; warned below {UNINFORMATIVE_BELOW}). A student "
            "learns little from such labels, so the differences below say little about "
            "weak-to-strong learning.")


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


#: one line under each report figure: what to look for. Keyed by the figure's title, or by a
#: part of it for titles that name a metric or a run (:func:`figure_caption_for`)
FIGURE_CAPTIONS: dict[str, str] = {
    "In-distribution vs out-of-distribution accuracy":
        "Look at the drop from each method's ID bar to its OOD bar: a student that gains over "
        "the teacher in distribution but not out of it learned something that does not travel.",
    "Shortcut or skill: ID accuracy on pairs with and without the artefact":
        "The gap between the bars is the shortcut: a model far more accurate on marked pairs "
        "than on clean ones reads the marker, not the preference.",
    "Transfer scores (WRG, AOG, NTS)":
        "Compare each method's WRG with its AOG: the part of the ID gain (WRG) that is missing "
        "from the OOD gain (AOG) did not carry over; NTS below 0 is a net loss.",
    "Which cues each model follows, per target":
        "Look for bars above the teacher's: a student that follows a cue where it disagrees "
        "with the label learned the cue, and loses accuracy wherever the cue misleads.",
    "Representation drift by layer":
        "Look at where the lines part: the layer from which a student's curve leaves the "
        "reference (CKA below 1, drift above 0) is where training rewrote its representation. "
        "Whether anchoring held the representation, and whether that bought transfer, is read "
        "from this folder's numbers below.",
    "of reference and student states":
        "Follow the grey lines: long ones are responses training moved far from where the "
        "pretrained model put them; target points that leave the open circles show drift where "
        "the student was never trained.",
    "Drift vs OOD gain, per target":
        "Each point is one run: its drift on a target against its OOD gain there. The method's "
        "premise is that drift costs transfer, which would show as points falling to the right; "
        "what this folder shows is computed below.",
    "Lambda sweep":
        "Read each panel from left to right: what a stronger anchor (larger lambda) does to "
        "accuracy in and out of distribution, to NTS and to drift, against the naive student "
        "(dashed) and the weak teacher (dotted).",
    "Teacher soft-label confidence":
        "Look at how far the labels sit from 0.5: labels piled near 0.5 teach the student little.",
    "Training loss per step: fit and ANCHOR terms":
        "Check that the fit loss falls and levels off; a large or growing ANCHOR term means the "
        "student is being pulled back from where the fit wants to take it.",
}


def _condition_students(results: pd.DataFrame) -> pd.DataFrame:
    """The student rows of the figures' condition (`select_condition`'s default: the largest
    artefact strength, the first value of every other varying setting)."""
    students = results[results["kind"] == "student"]
    return select_condition(students)[0] if len(students) else students


def _group_means(rows: pd.DataFrame, cols: list[str], seeds: list | None = None) -> pd.DataFrame:
    """Mean of ``cols`` per (method, lambda, layers) group over ``seeds`` (all when None), with
    the groups' labels in reading order and the seeds each mean used."""
    out = []
    for g in group_table(rows).itertuples(index=False):
        part = rows[group_mask(rows, g.method, g.anchor_lambda, g.anchor_layers)]
        if seeds is not None:
            part = part[part["seed"].isin(seeds)]
        part = part.dropna(subset=cols)
        if part.empty:
            continue
        out.append({**{k: getattr(g, k) for k in GROUP_KEYS}, "label": g.label,
                    "seeds": sorted(part["seed"].unique().tolist()),
                    **{c: float(part[c].mean()) for c in cols}})
    return pd.DataFrame(out)


def _seeds_text(seeds: list) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else (
        f"the mean over seeds {', '.join(map(str, seeds))}")


def drift_caption(results: pd.DataFrame, drift_col: str) -> str | None:
    """What this folder shows about ANCHOR and drift, from its numbers: each ANCHOR setting's
    last-layer target drift (``drift_col``, a results column) and NTS against the naive
    student's on the seeds both have, and whether less drift came with better transfer. None
    without naive and ANCHOR students that have both numbers."""
    rows = _condition_students(results)
    if drift_col not in rows or "nts" not in rows:
        return None
    rows = rows.dropna(subset=[drift_col, "nts"])
    naive_seeds = set(rows.loc[rows["method"] == "naive", "seed"])
    anchor = rows[rows["method"] == "anchor"]
    if not naive_seeds or anchor.empty:
        return None
    similarity = "cka" in drift_col  # CKA: higher = closer to the reference
    name = ("CKA with the reference" if similarity else "drift from the reference")
    parts, better, closer = [], 0, 0
    groups = _group_means(anchor, [drift_col, "nts"])
    if len(groups) > 3:  # the weakest and the strongest anchor, per layer choice
        groups = pd.concat([g.iloc[[0, -1]] if len(g) > 1 else g
                            for _, g in groups.groupby("anchor_layers", sort=False)])
    for g in groups.itertuples(index=False):
        seeds = sorted(naive_seeds & set(g.seeds))
        if not seeds:
            continue
        a = _group_means(anchor[np.isclose(anchor["anchor_lambda"], g.anchor_lambda)
                                & (anchor["anchor_layers"] == g.anchor_layers)],
                         [drift_col, "nts"], seeds).iloc[0]
        n = _group_means(rows[rows["method"] == "naive"], [drift_col, "nts"], seeds).iloc[0]
        held = a[drift_col] > n[drift_col] if similarity else a[drift_col] < n[drift_col]
        closer += bool(held)
        better += bool(a["nts"] > n["nts"])
        parts.append(f"{g.label}: {name} {a[drift_col]:.2f} against the naive student's "
                     f"{n[drift_col]:.2f}, NTS {100 * a['nts']:+.1f} against "
                     f"{100 * n['nts']:+.1f} ({_seeds_text(seeds)})")
    if not parts:
        return None
    k = len(parts)
    if closer == k and better == 0:
        verdict = ("anchoring held the representation closer to the pretrained one, but that did "
                   "not buy transfer: every anchored setting has a lower NTS than the naive "
                   "student")
    elif closer == k and better == k:
        verdict = ("anchoring held the representation closer to the pretrained one, and every "
                   "anchored setting has a higher NTS than the naive student")
    elif closer < k:
        verdict = (f"anchoring held the representation closer than the naive student in only "
                   f"{closer} of {k} settings, and {better} of {k} have a higher NTS")
    else:
        verdict = (f"anchoring held the representation closer to the pretrained one, and {better} "
                   f"of {k} anchored settings have a higher NTS than the naive student")
    return ("In this folder (last layer, mean over targets), " + verdict + ". "
            + "; ".join(parts) + ". These are means, not tests: the verdict box tests the ANCHOR "
            "setting chosen on source validation against the naive student.")


def drift_vs_ood_caption(fig) -> str | None:
    """What the drift-vs-OOD figure shows, from the relations it computed
    (``fig.layout.meta["relations"]``): per panel the direction of the Spearman correlation
    and whether its interval excludes 0, or that there are too few runs for one."""
    meta = getattr(getattr(fig, "layout", None), "meta", None)
    if not isinstance(meta, dict) or "relations" not in meta:
        return None
    rels, min_n = meta["relations"], meta.get("min_n")
    shown = {k: r for k, r in rels.items() if r}
    if not shown:
        return (f"In this folder there are too few runs per panel for a correlation (fewer than "
                f"{min_n}): nothing can be read from the slope yet. More seeds, or an ANCHOR "
                "grid over lambda, give each panel enough points.")
    up, down, flat = [], [], []
    for name, r in shown.items():
        lo, hi = r["spearman_ci"]
        text = f"{name} {r['spearman']:+.2f} [{lo:+.2f}, {hi:+.2f}], n = {r['n']}"
        (up if lo > 0 else down if hi < 0 else flat).append(text)
    out = ["In this folder (Spearman ρ with its 95% bootstrap interval over runs)"]
    if up:
        out.append("more drift goes with MORE OOD gain on " + "; ".join(up)
                   + ", the opposite of the premise")
    if down:
        out.append("more drift goes with less OOD gain on " + "; ".join(down)
                   + ", as the premise says")
    if flat:
        out.append("no relation beyond the interval on " + "; ".join(flat))
    missing = [k for k, r in rels.items() if not r]
    text = out[0] + ": " + "; ".join(out[1:]) + "."
    if missing:
        text += f" Too few runs for a correlation on {', '.join(missing)}."
    return text


def lambda_caption(results: pd.DataFrame) -> str | None:
    """What the lambda sweep shows in this folder: per anchored-layer choice, OOD and ID
    accuracy at the smallest and the largest lambda (mean over seeds), against the naive
    student's. None with fewer than two lambdas."""
    rows = _condition_students(results)
    need = ["acc_id", "acc_ood"]
    if not set(need) <= set(rows.columns):
        return None
    anchor = rows[rows["method"] == "anchor"]
    naive = _group_means(rows[rows["method"] == "naive"], need)
    parts, rises = [], []
    for layers, part in anchor.groupby("anchor_layers", sort=False):
        g = _group_means(part, need).sort_values("anchor_lambda")
        if len(g) < 2:
            continue
        lo, hi = g.iloc[0], g.iloc[-1]
        d_ood, d_id = 100 * (hi["acc_ood"] - lo["acc_ood"]), 100 * (hi["acc_id"] - lo["acc_id"])
        rises.append(d_ood > 0)
        parts.append(f"anchoring the {layers_label(str(layers)) or layers}, from lambda {lo['anchor_lambda']:g} to "
                     f"{hi['anchor_lambda']:g} OOD accuracy goes {100 * lo['acc_ood']:.1f} -> "
                     f"{100 * hi['acc_ood']:.1f} ({d_ood:+.1f}) and ID accuracy "
                     f"{100 * lo['acc_id']:.1f} -> {100 * hi['acc_id']:.1f} ({d_id:+.1f})")
    if not parts:
        return None
    head = ("In this folder (mean over seeds), stronger anchoring "
            + ("raised OOD accuracy" if all(rises) else "did not raise OOD accuracy"
               if not any(rises) else "raised OOD accuracy in some settings, not in others")
            + ": " + "; ".join(parts))
    if len(naive):
        head += (f". The naive student (no anchor): OOD {100 * naive.iloc[0]['acc_ood']:.1f}, "
                 f"ID {100 * naive.iloc[0]['acc_id']:.1f}")
    return head + "."


def observed_caption(title: str, fig, results: pd.DataFrame) -> str | None:
    """The part of a figure's caption computed from this folder (:func:`drift_caption`,
    :func:`drift_vs_ood_caption`, :func:`lambda_caption`); None for figures whose caption is
    a reading guide only. Never raises: a caption that cannot be computed is left out."""
    try:
        if title.startswith("Representation drift by layer"):
            col = ("drift_cka_debiased_target" if "CKA" in title.upper() else
                   "drift_cos_centred_target" if "centred" in title else "drift_cos_target")
            if col not in results or results[col].isna().all():
                col = {"drift_cka_debiased_target": "drift_cka_target",
                       "drift_cos_centred_target": "drift_cos_target"}.get(col, col)
            return drift_caption(results, col)
        if title.startswith("Drift vs OOD gain"):
            return drift_vs_ood_caption(fig)
        if title == "Lambda sweep":
            return lambda_caption(results)
    except Exception as err:  # the figure stands without its computed line
        logger.warning("report: caption of %r not computed (%s)", title, err)
    return None


def figure_caption_for(title: str) -> str | None:
    """The :data:`FIGURE_CAPTIONS` line of a report figure: its title's own, else the one of
    the longest key the title contains (titles that name a metric or a run); None if none."""
    if title in FIGURE_CAPTIONS:
        return FIGURE_CAPTIONS[title]
    keys = [k for k in FIGURE_CAPTIONS if k in title]
    return FIGURE_CAPTIONS[max(keys, key=len)] if keys else None


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
        n, total = len(smoke["smoke"]), smoke["total"]
        head = ("Smoke run: these numbers are not a result." if n >= total else
                f"Smoke runs mixed in: {n} of {total} runs are smoke-sized; their numbers are "
                "not a result, and the verdict and figures below pool them with the others.")
        top.append(f"<div class='box smoke' id='smoke'><b>{esc(head)}</b> Smoke-sized runs only "
                   "show that the pipeline runs: " + "; ".join(esc(r) for r in smoke["reasons"])
                   + ". For a result: larger splits (<code>anchorviz demo</code> without "
                   "<code>--quick</code>, the notebooks without ANCHORVIZ_SMOKE=1) and several "
                   "seeds.</div>")
    mixed = mixed_configs(results)
    if mixed:
        top.append("<div class='box warn' id='mixed'><b>Mixed settings.</b> This folder "
                   "holds runs of different settings (they differ in "
                   + esc(", ".join(mixed)) + "); they are never pooled as seeds: the table has "
                   "a column for each, the verdict is given per setting, and each figure shows "
                   "one setting, named in its title. Give each setting its own folder to see "
                   "them all in figures.</div>")
    blocks = verdict_blocks(results)
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
    top.append("<div class='box scenario' id='scenario'><b>Scenario.</b> "
               + "<br>".join(esc(x) for x in scenario_lines(sweep_dir, results)) + "</div>")
    verdict = ["<div class='box verdict' id='verdict'><b>Verdict</b> (computed from the "
               "results table by <code>anchorviz.analysis.summary.failure_mode</code>, the same function "
               "<code>anchorviz demo</code> prints):"]
    for b in blocks:
        verdict.append(f"<p class='headline {b['status']}'>{esc(b['headline'])}</p>"
                       f"<pre>{esc(chr(10).join(b['lines']))}</pre>")
    verdict.append("</div>")
    top.append("".join(verdict))
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
    # contents: every block at the top that has an id, the table, then each figure

    names = {"missing-runs": "Missing runs", "smoke": "Smoke run", "mixed": "Mixed settings",
             "scenario": "Scenario",
             "verdict": "Verdict", "lead-figure": "The verdict, seed by seed",
             "label-warning": "Label warning", "run-warnings": "Warnings the runs logged"}
    toc = [("lead-figure", names["lead-figure"])] if lead is not None else []
    toc += [(m, names[m]) for block in top for m in re.findall(r"id='([\w-]+)'", block)
            if m in names]
    toc += [("results", "Results"), *fig_toc, ("glossary", "Glossary")]
    toc_html = ("<nav class='toc' id='contents'><b>Contents</b><ol>"
                + "".join(f"<li><a href='#{a}'>{esc(t)}</a></li>" for a, t in toc)
                + "</ol></nav>")
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
