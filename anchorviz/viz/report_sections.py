"""The text sections of the sweep report (`anchorviz.viz.report`): the glossary and its terms
line, the smoke-run status, who made the runs, the scenario lines, the plain verdicts and the
label warning."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from anchorviz.analysis import summary
from anchorviz.analysis.summary import setting_columns
from anchorviz.paths import COMMANDS_FILE, read_yaml, recorded_commands
from anchorviz.pipeline.demo import demo_note, demo_sweep
from anchorviz.viz.common import (
    load_results,
)
from anchorviz.viz.training import UNINFORMATIVE_BELOW

logger = logging.getLogger(__name__)

#: fewer test pairs per split than this makes a smoke run: one run's 95% interval is then wider
#: than about +-7 points, more than the effects the protocol looks for
SMOKE_TEST_PAIRS = 200
#: fewer training pairs (teacher or student) than this makes a smoke run
SMOKE_TRAIN_PAIRS = 400


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
