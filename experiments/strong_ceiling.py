"""Issue 27, point 5: does a larger student learn a real preference source that MiniLM-L6 does not?

The gold ceiling (the student's backbone trained on the GOLD labels of the weak-to-strong training
pairs) of each given student, on the splits of `experiments/real_cues.py`'s plan for the source
(same sizes, targets, 128 tokens, real-data optimiser settings, bfloat16 autocast,
split-varying seeds). Nothing else is trained: no teacher, no weak labels. Each fit is kept in a
run store (`anchorviz.pipeline.fit.fit_and_score`): a rerun reads it instead of training.

    python experiments/strong_ceiling.py --source uf --seeds 0 1 \\
        --students minilm-l6 ~/.cache/anchorviz/local/all-mpnet-base-v2 \\
        --store runs/strong_ceiling --doc docs/results/realdata/stronger_student_gold_ceiling.md

A student is a zoo name or a local Hugging Face folder. Accuracies in %, each with its
prompt-cluster bootstrap interval over the split's pairs; the mean over seeds is what the
pre-registered bar (docs/RESULTS.md, issue 27) reads.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import doc_out
import numpy as np
import pandas as pd
import torch
from real_cues import PLANS, SETS, base_config

from anchorviz.analysis.metrics import per_pair_correct
from anchorviz.config import with_overrides
from anchorviz.paths import realdata_dir
from anchorviz.pipeline.fit import fit_and_score
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.pipeline.store import RunStore

logger = logging.getLogger("strong_ceiling")


def ceiling_row(store: RunStore, source: str, student: str, seed: int, max_length: int) -> dict:
    """Train (or read) one gold ceiling and return its accuracy on every scored split."""
    targets, sizes = PLANS[source]
    cfg = base_config(source, targets, sizes, max_length)
    cfg = with_overrides(cfg, **{"seed": seed, "models.student": student})
    data = prepare_data(data_config(cfg))
    train = data["w2s_train"]
    scored = {k: v for k, v in data.items() if k not in ("teacher_train", "w2s_train")}
    fit = fit_and_score(store, cfg, "student", train, np.ones(len(train)), scored,
                        desc=f"ceiling {Path(student).name} seed {seed}")
    row: dict = {"student": Path(student).name, "seed": seed,
                 "seconds": fit.metrics.get("seconds")}
    for split in scored:
        correct = per_pair_correct(*fit.rewards(split))
        name = {"val": "val", "source_test": "source test"}.get(split, split.split(":", 1)[-1])
        row[name] = 100 * float(correct.mean())
        row[f"{name} n"] = int(len(correct))
    return row


def markdown(df: pd.DataFrame, command: str, source: str) -> str:
    cols = [c for c in df.columns if c not in ("student", "seed", "seconds")
            and not c.endswith(" n")]
    lines = [f"Command: `{command}`", "",
             f"Gold ceilings on source **{SETS[source]}** (the plan of `experiments/real_cues.py`: "
             f"sizes {PLANS[source][1]}, 128 tokens, bf16). Pairwise accuracy in %; n pairs per "
             "split in the header.", "",
             "| student | seed | " + " | ".join(f"{c} (n {int(df[c + ' n'].iloc[0])})"
                                                for c in cols) + " | train + score, s |",
             "|" + "---|" * (len(cols) + 3)]
    for _, r in df.iterrows():
        sec = f"{r['seconds']:.0f}" if pd.notna(r.get("seconds")) else "-"
        cells = " | ".join(f"{r[c]:.1f}" for c in cols)
        lines.append(f"| {r['student']} | {r['seed']} | {cells} | {sec} |")
    lines += ["", "Mean over seeds:", "", "| student | seeds | " + " | ".join(cols) + " |",
              "|" + "---|" * (len(cols) + 2)]
    for student, g in df.groupby("student", sort=False):
        lines.append(f"| {student} | {len(g)} | "
                     + " | ".join(f"{g[c].mean():.1f}" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="uf", choices=list(PLANS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--students", nargs="+", default=["minilm-l6"],
                    help="zoo names or local Hugging Face folders")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--store", default="runs/strong_ceiling")
    ap.add_argument("--doc", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if realdata_dir() is None:
        sys.exit("the real-data folder is not present: nothing to run (set ANCHORVIZ_REALDATA)")
    torch.set_num_threads(args.threads)
    store = RunStore(args.store)
    students = [str(Path(s).expanduser()) if Path(s).expanduser().exists() else s
                for s in args.students]
    rows = [ceiling_row(store, args.source, s, seed, args.max_length)
            for s in students for seed in args.seeds]
    text = markdown(pd.DataFrame(rows), "python " + " ".join(sys.argv), args.source)
    doc_out.emit([text.rstrip("\n")], args.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
