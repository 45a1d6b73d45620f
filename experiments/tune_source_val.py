"""Choose learning rates / epochs on the SOURCE validation split only (never on target data).

Trains the weak teacher (gold labels) and the naive student (teacher's soft labels) for a small
grid and prints source-validation accuracy (gold labels on `val`), the fitted loss and the
teacher's label confidence. Every configuration tried is printed; docs/RESULTS.md records them.

    python experiments/tune_source_val.py --strength 0.8 --out docs/tune_source_val.md
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from anchorviz.analysis.metrics import pairwise_accuracy
from anchorviz.config import TrainConfig
from anchorviz.pipeline.demo import demo_sweep
from anchorviz.pipeline.prepare import prepare_data
from anchorviz.pipeline.steps import _encode, _load, soft_labels
from anchorviz.training.loop import score_pairs, train_reward_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strength", type=float, default=0.8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--teacher-grid", nargs="+", default=["5e-5:5e-5", "5e-5:2e-3", "2e-4:2e-4"],
                    help="lr:head_lr pairs for the teacher")
    ap.add_argument("--student-grid", nargs="+", default=["5e-5:5e-5", "5e-5:2e-3", "2e-4:2e-3"],
                    help="lr:head_lr[:epochs] for the naive student (epochs default 2)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = demo_sweep(strength=args.strength).base
    data = prepare_data(cfg.data)
    lines = ["| role | lr | head_lr | epochs | source val acc (gold) | final train loss | "
             "teacher q confidence | seconds |", "|---|---|---|---|---|---|---|---|"]
    best_teacher, best_acc = None, -1.0
    grid = [tuple(float(x) for x in g.split(":")) for g in args.teacher_grid]
    for lr, head_lr, epochs in [(a, b, 2) for a, b in grid]:
        t0 = time.time()
        model, tok = _load(cfg, "teacher")
        tr = _encode(tok, data["teacher_train"], cfg)
        val = _encode(tok, data["val"], cfg)
        tc = TrainConfig(lr=lr, head_lr=head_lr, epochs=epochs, batch_size=16, progress=False)
        res = train_reward_model(model, tr, np.ones(len(tr)), tc, desc="teacher")
        acc = pairwise_accuracy(*score_pairs(model, val))
        w2s = _encode(tok, data["w2s_train"], cfg)
        rc, rr = score_pairs(model, w2s)
        q = soft_labels(rc - rr, cfg.method)
        conf = float(np.maximum(q, 1 - q).mean())
        lines.append(f"| teacher | {lr:g} | {head_lr or lr:g} | {epochs} | {100 * acc:.1f} | "
                     f"{res.history['total'].iloc[-5:].mean():.3f} | {conf:.3f} | {time.time() - t0:.0f} |")
        print(lines[-1], flush=True)
        if acc > best_acc:
            best_acc, best_teacher, best_margin = acc, (lr, head_lr, epochs), rc - rr
    q = soft_labels(best_margin, cfg.method)
    for g in args.student_grid:
        lr, head_lr, *rest = (float(x) for x in g.split(":"))
        epochs = rest[0] if rest else 2
        t0 = time.time()
        model, tok = _load(cfg, "student")
        tr = _encode(tok, data["w2s_train"], cfg)
        val = _encode(tok, data["val"], cfg)
        tc = TrainConfig(lr=lr, head_lr=head_lr, epochs=epochs, batch_size=16, progress=False)
        res = train_reward_model(model, tr, q, tc, desc="student")
        acc = pairwise_accuracy(*score_pairs(model, val))
        lines.append(f"| naive student (teacher {best_teacher}) | {lr:g} | {head_lr or lr:g} | "
                     f"{epochs:g} | "
                     f"{100 * acc:.1f} | {res.history['total'].iloc[-5:].mean():.3f} | - | "
                     f"{time.time() - t0:.0f} |")
        print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"Source-validation tuning, artefact strength {args.strength}, seed {cfg.seed} "
                    f"(`python {' '.join(sys.argv)}`)\n\n")
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
