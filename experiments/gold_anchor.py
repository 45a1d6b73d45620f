"""Does ANCHOR stop a strong model from taking a drift-borne shortcut when its labels are GOLD?

The echo cue (`anchorviz.data.artifacts`, kind ``echo``) is learned by a MiniLM-L6 trained on gold
labels with lr 1e-4 for 4 epochs (the ceiling of ``docs/results/echo_cue/pilot_lr1e-4_4epochs.md``: 97.9% on
echo-marked source pairs, 77.5% on clean ones, OOD 73.8), but not by the weak teacher, so the
weak-to-strong pipeline never gets to test anchoring against it. This script trains the same
model on the same gold labels with the ANCHOR term added (lambda > 0 on the given layers; lambda
0 is the ceiling itself) and reports accuracy on echo-marked and clean source-test pairs and on
the targets. Each model is kept in a run store (``--store``,
`anchorviz.pipeline.fit.fit_and_score`): a rerun reads it instead of training it again.

    python experiments/gold_anchor.py --seeds 0 --lambdas 0 1 10 --doc docs/results/echo_cue/gold_labels_with_and_without_anchor.md
"""

from __future__ import annotations

import argparse
import logging
import sys

import doc_out
import numpy as np
import pandas as pd
import torch

from anchorviz.analysis.metrics import per_pair_correct
from anchorviz.pipeline.fit import fit_and_score
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.pipeline.store import RunStore
from anchorviz.training.loop import Objective

logger = logging.getLogger("gold_anchor")


def echo_config(seed: int):
    """The echo scenario of docs/results/echo_cue/pilot_lr1e-4_4epochs.md for one seed."""
    from anchorviz.config import with_overrides
    from anchorviz.pipeline.demo import demo_sweep

    # float32 at strength 0.8: the arithmetic and the scenario of its recorded tables
    base = demo_sweep(strength=0.8, bf16=False).base
    return with_overrides(base, **{"data.artifact_kind": "echo",
                                   "data.artifact_teacher_visibility": 0.5,
                                   "student_train.lr": 1e-4, "student_train.epochs": 4,
                                   "seed": seed})


def run_one(seed: int, lam: float, layers: str, store: RunStore) -> dict:
    cfg = echo_config(seed)
    data = prepare_data(data_config(cfg))
    train = data["w2s_train"]
    scored = {k: v for k, v in data.items() if k not in ("teacher_train", "w2s_train")}
    fit = fit_and_score(store, cfg, "student", train, np.ones(len(train)), scored,
                        objective=Objective(anchor_lambda=lam, anchor_normalise="pair"),
                        anchor_layers=layers, desc=f"gold λ={lam:g}")
    row = {"seed": seed, "lambda": lam, "layers": layers if lam > 0 else "-"}
    ood = []
    for split, df in scored.items():
        correct = per_pair_correct(*fit.rewards(split))
        if split == "source_test":
            marked = np.array([(m or {}).get("artifact_side") is not None for m in df["meta"]])
            row["ID"] = 100 * correct.mean()
            row["ID marked"] = 100 * correct[marked].mean()
            row["ID clean"] = 100 * correct[~marked].mean()
        elif split == "val":
            row["val (src)"] = 100 * correct.mean()
        else:
            row[split.split(":", 1)[1]] = 100 * correct.mean()
            ood.append(correct)
    row["OOD"] = 100 * np.concatenate(ood).mean()
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--lambdas", nargs="+", type=float, default=[0.0, 1.0, 10.0])
    ap.add_argument("--layers", default="last")
    ap.add_argument("--doc", default=None, help="markdown file to write (rows are appended)")
    ap.add_argument("--store", default="runs/gold_anchor",
                    help="run store of the fits (a rerun reads the finished ones)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    store = RunStore(args.store)
    rows = [run_one(s, lam, args.layers, store) for s in args.seeds for lam in args.lambdas]
    df = pd.DataFrame(rows)
    cols = ["seed", "lambda", "layers", "val (src)", "ID", "ID marked", "ID clean", "amazon",
            "nyt", "tweets", "OOD"]
    lines = [f"<!-- python {' '.join(sys.argv)} -->"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    print("| " + " | ".join(cols) + " |")
    doc_out.emit(lines, args.doc, append=True,
                 header=("Gold labels on the echo scenario (lr 1e-4, 4 epochs), with and "
                         "without ANCHOR (`experiments/gold_anchor.py`).\n\n"
                         "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
