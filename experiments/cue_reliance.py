"""How much each stored model follows the planted cue where it misleads (issue 16, point 3).

For every finished teacher / ceiling / student run of a store whose source carried a cue
(``data.artifact_kind`` marker, order or echo), the trained model
(``anchorviz.models.load_run_model``) scores the SAME target test pairs three ways: as they are
(no cue: ``absent``), with the cue on a random side of a fraction ``strength`` of them
(``neutral``) and with the cue on the REJECTED side (``reversed``). Nothing is trained.
Reported per cue kind, per run and averaged per method over seeds:

- accuracy on each version of the targets;
- ``follow`` = on the neutral pairs that carry the marker, the share where the model prefers
  the marked side (0.5 = ignores the cue, 1 = always follows it), minus the same share with
  the marker removed (so a side the model already preferred does not count as following);
- ``reversed drop`` = accuracy(absent) - accuracy(reversed): points lost when the cue points
  the wrong way (the way an inherited bias hurts on data where it is wrong).

The teacher is scored on the full target text (its limited view of the cue in the source is a
property of the source data, not of the targets), so its numbers say what it learned. Where the
teacher read the cue in another form (``data.artifact_teacher_form: marker``: a marker in its
copy where the student's carries an order / echo cue) it is scored on its own form of the same
target pairs (the marker on the same side), which is the cue its labels passed on.

    python experiments/cue_reliance.py runs/vis_0.5 --doc docs/results/hidden_cue/cue_reliance_3seeds.md
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path

import doc_out
import numpy as np
import pandas as pd

from anchorviz.analysis.cues import cue_sides
from anchorviz.config import DataConfig
from anchorviz.data.artifacts import teacher_view
from anchorviz.models.reward_model import ModelError
from anchorviz.models.tokenization import encode_pairs
from anchorviz.paths import read_yaml
from anchorviz.pipeline.prepare import prepare_data
from anchorviz.pipeline.results import results_table
from anchorviz.pipeline.store import load_run_model
from anchorviz.training.loop import score_pairs

logger = logging.getLogger("cue_reliance")


def _data_config(key_data: dict) -> DataConfig:
    d = {k: v for k, v in key_data.items() if k in DataConfig.__dataclass_fields__}
    return DataConfig(**d)


def target_versions(d: DataConfig) -> dict[str, dict[str, pd.DataFrame]]:
    """``{mode: {target split: pairs}}`` for the absent, neutral and reversed target modes."""
    out = {}
    for mode in ("absent", "neutral", "reversed"):
        data = prepare_data(replace(d, artifact_target_mode=mode))
        out[mode] = {k: v for k, v in data.items() if k.startswith("target_test:")}
    return out


def teacher_versions(versions: dict, form: str) -> dict:
    """The teacher's copy of each target version (`artifacts.teacher_view` in ``form``)."""
    if form == "same":
        return versions
    return {mode: {k: teacher_view(v, form) for k, v in splits.items()}
            for mode, splits in versions.items()}


CUE_KINDS = ("marker", "order", "echo")


def _marked_side(df: pd.DataFrame) -> np.ndarray:
    """+1 where a planted cue (marker, order or echo) is on the chosen side, -1 on the rejected
    side, 0 unmarked: read from the text by the cues of `anchorviz.analysis.cues` (a teacher's
    copy in the marker form carries the marker where the student's carries the echo)."""
    sides = cue_sides(df, CUE_KINDS)
    out = np.zeros(len(df), dtype=int)
    for kind in CUE_KINDS:
        out = np.where(out == 0, sides[kind].to_numpy(), out)
    return out


def score_run(run_dir: Path, versions: dict, max_length: int) -> dict:
    model, tok = load_run_model(run_dir)
    row: dict = {}
    margins: dict[str, np.ndarray] = {}
    sides = None
    for mode, splits in versions.items():
        ms, ss = [], []
        for name in sorted(splits):
            enc = encode_pairs(tok, splits[name], max_length=max_length)
            rc, rr = score_pairs(model, enc)
            ms.append(rc - rr)
            ss.append(_marked_side(splits[name]))
        margins[mode] = np.concatenate(ms)
        if mode == "neutral":
            sides = np.concatenate(ss)
        row[f"acc_{mode}"] = float((margins[mode] > 0).mean())
    marked = sides != 0
    prefers_marked = np.sign(margins["neutral"][marked]) == sides[marked]
    prefers_same_side_clean = np.sign(margins["absent"][marked]) == sides[marked]
    row["follow"] = float(prefers_marked.mean() - prefers_same_side_clean.mean())
    row["reversed_drop"] = row["acc_absent"] - row["acc_reversed"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a sweep folder whose runs planted a marker, order or echo cue")
    ap.add_argument("--doc", default=None, help="markdown file to write")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    table = results_table(args.store)
    rows, versions_cache = [], {}
    for _, r in table.iterrows():
        run_dir = Path(args.store) / "runs" / r["run_id"]
        key = read_yaml(run_dir / "config.yaml")
        d = _data_config(key["data"])
        if d.artifact_kind not in CUE_KINDS or not d.artifact_strength:
            continue
        vkey = repr(d)
        if vkey not in versions_cache:
            versions_cache[vkey] = target_versions(d)
        versions = versions_cache[vkey]
        if r["method"] == "teacher":
            versions = teacher_versions(versions, d.artifact_teacher_form)
        try:
            got = score_run(run_dir, versions, d.max_length)
        except ModelError as err:  # e.g. a head-only checkpoint from before full checkpoints
            logger.warning("%s skipped: %s", r["run_id"], err)
            continue
        cue = d.artifact_kind + ("" if d.artifact_teacher_form == "same"
                                 else f" (teacher reads a {d.artifact_teacher_form})")
        rows.append({"run_id": r["run_id"], "cue": cue, "method": r["method"], "seed": r["seed"],
                     "anchor_lambda": r["anchor_lambda"], "anchor_layers": r["anchor_layers"],
                     **got})
    df = pd.DataFrame(rows)
    if df.empty:
        print("no runs with a marker, order or echo cue and a full checkpoint")
        return 1
    g = df.groupby(["cue", "method", "anchor_lambda", "anchor_layers"], sort=False)
    agg = g[["acc_absent", "acc_neutral", "acc_reversed", "follow", "reversed_drop"]].agg(["mean", "std"])
    n = g.size()
    lines = [f"Command: `python {' '.join(sys.argv)}`", "",
             "| cue | method | lambda | layers | seeds | targets as they are | cue on a random side | "
             "cue on the rejected side | follows the cue | drop when reversed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    def cell(a: pd.Series, c: str) -> str:
        m, s = 100 * a[(c, "mean")], 100 * a[(c, "std")]
        return f"{m:.1f}" + ("" if not np.isfinite(s) else f" ± {s:.1f} sd")

    for (cue, meth, lam, lay), a in agg.iterrows():
        lines.append(f"| {cue} | {meth} | {lam:g} | {lay or '-'} | {n[(cue, meth, lam, lay)]} | "
                     f"{cell(a, 'acc_absent')} | {cell(a, 'acc_neutral')} | {cell(a, 'acc_reversed')} | "
                     f"{cell(a, 'follow')} | {cell(a, 'reversed_drop')} |")
    lines += ["", "Accuracies in percent on the store's target test pairs; 'follows the cue' = "
              "points by which the share of cue-carrying neutral pairs where the model prefers the "
              "cue's side exceeds the share with the cue removed; 'drop when reversed' = "
              "accuracy as they are minus accuracy with the cue on the rejected side. Mean "
              "± seed standard deviation. Nothing is trained: each run's stored model scores "
              "the three versions of the same pairs."]
    doc_out.emit(lines, args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
