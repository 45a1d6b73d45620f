"""Choose learning rates / epochs on the SOURCE validation split only (never on target data).

Trains the weak teacher (gold labels) and the naive student (teacher's soft labels) for a small
grid and prints source-validation accuracy (gold labels on `val`), the fitted loss and the
teacher's label confidence. Every configuration tried is printed; docs/RESULTS.md records them.
Each fit is kept in a run store (``--store``, `anchorviz.pipeline.fit.fit_and_score`): a rerun
reads the finished ones instead of training them again.

    python experiments/tune_source_val.py --strength 0.8 --out docs/results/tuning/source_val_learning_rates.md
"""

from __future__ import annotations

import argparse
import logging
import sys

import doc_out
import numpy as np
import pandas as pd

from anchorviz.config import RunConfig, TrainConfig
from anchorviz.pipeline.demo import demo_sweep
from anchorviz.pipeline.fit import fit_and_score
from anchorviz.pipeline.prepare import prepare_data
from anchorviz.pipeline.steps import soft_labels
from anchorviz.pipeline.store import RunStore


def tuning_lines(cfg: RunConfig, data: dict[str, pd.DataFrame], store: RunStore,
                 teacher_grid: list[str], student_grid: list[str]) -> list[str]:
    """The markdown table rows: each teacher of ``teacher_grid`` (``lr:head_lr``, 2 epochs) on
    gold labels, then each naive student of ``student_grid`` (``lr:head_lr[:epochs]``) on the
    soft labels of the teacher best on source val; every fit is kept in ``store``."""
    scored = {"val": data["val"], "w2s_train": data["w2s_train"]}
    lines = ["| role | lr | head_lr | epochs | source val acc (gold) | final train loss | "
             "teacher q confidence | seconds |", "|---|---|---|---|---|---|---|---|"]
    best_teacher, best_acc = None, -1.0
    grid = [tuple(float(x) for x in g.split(":")) for g in teacher_grid]
    for lr, head_lr, epochs in [(a, b, 2) for a, b in grid]:
        tc = TrainConfig(lr=lr, head_lr=head_lr, epochs=epochs, batch_size=16, progress=False)
        fit = fit_and_score(store, cfg, "teacher", data["teacher_train"],
                            np.ones(len(data["teacher_train"])), scored, tc, desc="teacher")
        acc = fit.accuracy("val")
        rc, rr = fit.rewards("w2s_train")
        q = soft_labels(rc - rr, cfg.method)
        conf = float(np.maximum(q, 1 - q).mean())
        lines.append(f"| teacher | {lr:g} | {head_lr or lr:g} | {epochs} | {100 * acc:.1f} | "
                     f"{fit.history['total'].iloc[-5:].mean():.3f} | {conf:.3f} | "
                     f"{fit.metrics['seconds']:.0f} |")
        print(lines[-1], flush=True)
        if acc > best_acc:
            best_acc, best_teacher, best_margin = acc, (lr, head_lr, epochs), rc - rr
    q = soft_labels(best_margin, cfg.method)
    for g in student_grid:
        lr, head_lr, *rest = (float(x) for x in g.split(":"))
        epochs = rest[0] if rest else 2
        tc = TrainConfig(lr=lr, head_lr=head_lr, epochs=epochs, batch_size=16, progress=False)
        fit = fit_and_score(store, cfg, "student", data["w2s_train"], q, {"val": data["val"]},
                            tc, desc="student")
        acc = fit.accuracy("val")
        lines.append(f"| naive student (teacher {best_teacher}) | {lr:g} | {head_lr or lr:g} | "
                     f"{epochs:g} | "
                     f"{100 * acc:.1f} | {fit.history['total'].iloc[-5:].mean():.3f} | - | "
                     f"{fit.metrics['seconds']:.0f} |")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strength", type=float, default=0.8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--store", default="runs/tune_source_val",
                    help="run store of the fits (a rerun reads the finished ones)")
    ap.add_argument("--teacher-grid", nargs="+", default=["5e-5:5e-5", "5e-5:2e-3", "2e-4:2e-4"],
                    help="lr:head_lr pairs for the teacher")
    ap.add_argument("--student-grid", nargs="+", default=["5e-5:5e-5", "5e-5:2e-3", "2e-4:2e-3"],
                    help="lr:head_lr[:epochs] for the naive student (epochs default 2)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cfg = demo_sweep(strength=args.strength, bf16=False).base  # float32, as recorded
    data = prepare_data(cfg.data)
    lines = tuning_lines(cfg, data, RunStore(args.store), args.teacher_grid, args.student_grid)
    doc_out.emit(lines, args.out, echo=False,
                 header=(f"Source-validation tuning, artefact strength {args.strength}, seed "
                         f"{cfg.seed} (`python {' '.join(sys.argv)}`)\n\n"))


if __name__ == "__main__":
    main()
