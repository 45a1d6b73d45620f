"""Results on the embedded default (VADER movie -> amazon / nyt / tweets) with the artefact knob.

Runs a sweep (resumable: rerunning recomputes nothing that finished) and writes a markdown
summary: per artefact strength and method, mean over seeds with 95% t-intervals (points), the
failure-mode test for naive and the NTS test for the ANCHOR setting chosen on SOURCE validation.

    python experiments/results_vader.py --strengths 0.0 0.8 --seeds 0 1 2 \
        --methods naive confidence anchor --layers last middle --out runs/results_default \
        --doc docs/results/marker_cue/default_strength0.8.md
"""

from __future__ import annotations

import argparse
import logging
import sys

import doc_out
import pandas as pd
import yaml

from anchorviz.analysis.summary import (
    anchor_beats_naive,
    best_on_source_val,
    failure_mode,
    points,
    summarize,
)
from anchorviz.config import with_overrides
from anchorviz.pipeline.demo import demo_sweep
from anchorviz.pipeline.sweep import sweep


def _p(p: float) -> str:
    return "-" if p is None or pd.isna(p) else (f"p {p:.3f}" if p >= 0.001 else "p < 0.001")


def markdown(results: pd.DataFrame, command: str, note: str = "") -> str:
    s = summarize(results)
    targets = sorted(c[4:] for c in results.columns
                     if c.startswith("acc_") and not c.endswith(("_lo", "_hi"))
                     and c not in ("acc_id", "acc_ood", "acc_val")
                     and not c.startswith("acc_id_"))
    out = [f"Command: `{command}`", ""]
    if note:
        out += [note, ""]
    split_id = "acc_id_clean" in results.columns
    groups = [g for g in ("marked", "clean", "seen", "hidden") if f"acc_id_{g}" in results.columns]
    head = ("| strength | method | lambda | layers | seeds | val (src) | ID | "
            + "".join(f"ID {g} | " for g in groups)
            + " | ".join(targets) + " | OOD | WRG | AOG | NTS | PGR | cos drift src | "
            "cos drift tgt | centred cos drift tgt | CKA tgt | debiased CKA tgt | q conf |")
    out += [head, "|" + "---|" * (head.count("|") - 1)]
    order = {"teacher": 0, "naive": 1, "confidence": 2, "anchor": 3, "ceiling": 4}
    s = s.assign(_o=s["method"].map(order)).sort_values(
        ["artifact_strength", "_o", "anchor_layers", "anchor_lambda"])
    for _, r in s.iterrows():
        cells = [f"{r['artifact_strength']:g}", r["method"],
                 f"{r['anchor_lambda']:g}" if r["method"] == "anchor" else "-",
                 r["anchor_layers"] or "-", str(r["n_seeds"]),
                 points(r.get("acc_val_mean"), r.get("acc_val_hw")),
                 points(r["acc_id_mean"], r["acc_id_hw"])]
        if split_id:
            cells += [points(r.get(f"acc_id_{g}_mean"), r.get(f"acc_id_{g}_hw"))
                      for g in groups]
        cells += [points(r.get(f"acc_{t}_mean"), r.get(f"acc_{t}_hw")) for t in targets]
        cells += [points(r["acc_ood_mean"], r["acc_ood_hw"])]
        for c in ("wrg", "aog", "nts", "pgr"):
            cells.append(points(r.get(f"{c}_mean"), r.get(f"{c}_hw")))
        for c in ("drift_cos_source", "drift_cos_target", "drift_cos_centred_target",
                  "drift_cka_target", "drift_cka_debiased_target", "q_confidence"):
            v = r.get(f"{c}_mean")
            cells.append("-" if v is None or pd.isna(v) else f"{v:.4f}")
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    varies = ("the data split (which pairs land in which split, and which carry the artefact) "
              "and the training order" if "split_per_seed" in results and
              results["split_per_seed"].all() else "the training order only, on one data split")
    out += ["", f"Mean over seeds ± 95% t-interval half-width over seeds, where a seed varies {varies}; "
            "in points (accuracies and transfer "
            "scores); drift and label confidence are unitless means. val (src) = gold accuracy on "
            "the SOURCE validation split, the only number used to choose ANCHOR's setting."
            + (" ID marked / ID clean = ID accuracy on the source-test pairs that carry / lack "
               "the planted artefact (clean is the skill the targets can use)." if split_id else "")
            + (" ID seen / ID hidden = marked pairs whose marker the teacher could / could not "
               "read." if "acc_id_hidden" in results.columns else "")
            + " Drift at the last layer, mean over targets: cosine (uncentred), reference-centred "
              "cosine, linear CKA (biased) and debiased CKA to the pretrained reference.",
            ""]
    best = best_on_source_val(results)
    out += ["| strength | seeds | naive WRG | naive WRG - AOG pooled (p) | per target: WRG - AOG "
            "(Holm p) | failure mode? | strict (AOG < 0)? | ANCHOR chosen on source val | "
            "NTS(ANCHOR) - NTS(naive) (paired) | beyond seed spread? |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for strength in sorted(results["artifact_strength"].unique()):
        fm = failure_mode(results, strength)
        b = best[best["artifact_strength"] == strength]
        if len(b):
            lam, lay = float(b.iloc[0]["anchor_lambda"]), b.iloc[0]["anchor_layers"]
            ab = anchor_beats_naive(results, strength, lam, lay)
            chosen = f"lambda {lam:g}, {lay}"
            diff = points(ab["mean"], ab["hw"])
            beyond = "yes" if ab["beyond_spread"] else "no"
        else:
            chosen, diff, beyond = "-", "-", "-"
        pooled = fm["pooled"]
        pooled_cell = ("-" if pooled is None else
                       f"{points(pooled['mean'], pooled['hw'])} ({_p(pooled['p'])})")
        per_target = "<br>".join(
            f"{t} {points(tb['mean'], tb['hw'])} ({_p(tb['p_holm'])})"
            + (" *" if tb["failure_mode"] else "")
            for t, tb in fm["targets"].items()) or "-"
        if fm["can_conclude"]:
            verdict = "yes" if fm["failure_mode"] else "no"
            strict = "yes" if fm["strict"] else "no"
        else:  # one seed or missing columns: no interval, no verdict
            verdict = strict = "n/a"
        out.append(f"| {strength:g} | {fm['n_seeds']} | {points(fm['wrg']['mean'], fm['wrg']['hw'])} | "
                   f"{pooled_cell} | {per_target} | {verdict} | {strict} | {chosen} | {diff} | "
                   f"{beyond} |")
    out += ["", "Failure mode (`anchorviz.analysis.summary.failure_mode`) = the naive student's WRG has its "
            "95% t-interval over seeds above 0 AND WRG - AOG (paired over seeds) has its interval "
            "above 0, pooled over targets or on some target; per target, the one-sided paired "
            "t-tests of WRG - AOG > 0 are Holm-adjusted across targets (p_holm < 0.025, the level "
            "of the 95% interval's lower bound; * marks a target that shows it). Strict = the same "
            "with AOG itself below 0 beyond the interval. n/a: one seed gives no interval. "
            "ANCHOR beats naive when NTS(ANCHOR) - NTS(naive) has its interval above 0 and its "
            "mean above its seed std.", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.0, 0.8])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=["naive", "confidence", "anchor"])
    ap.add_argument("--lambdas", type=float, nargs="+", default=None,
                    help="ANCHOR lambdas (default: the demo's grid)")
    ap.add_argument("--layers", nargs="+", default=["last", "middle"])
    ap.add_argument("--no-ceiling", action="store_true")
    ap.add_argument("--detail-seeds", type=int, nargs="+", default=None,
                    help="seeds that run every method with hidden-state captures; the others "
                         "run the naive student scored only, as the demo's verdict seeds do "
                         "(default: every seed runs everything)")
    ap.add_argument("--target-mode", default="absent", choices=["absent", "neutral", "reversed"])
    ap.add_argument("--sizes", type=int, nargs=5, default=None,
                    metavar=("TEACHER", "W2S", "VAL", "SOURCE_TEST", "TARGET_TEST"),
                    help="split sizes (default: the demo's)")
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="further config overrides, YAML values, e.g. models.student_dropout=true "
                         "models.student=smollm2-135m student_train.lr=1e-4")
    ap.add_argument("--bf16", action="store_true",
                    help="bfloat16 autocast for teacher and students (the demo's default since "
                         "issue 28); without it float32, the arithmetic of the recorded tables")
    ap.add_argument("--out", default="runs/results_default")
    ap.add_argument("--doc", default=None, help="markdown file to write")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # float32 unless --bf16: every table recorded before the demo moved to bfloat16 is float32
    sw = demo_sweep(strength=args.strengths[0], seeds=tuple(args.seeds), bf16=args.bf16)
    sw.methods = args.methods
    # default: every method (and capture) on every seed, as the tables were made; with
    # --detail-seeds the others get the naive student only, scored without a capture (the demo)
    sw.detail_seeds = args.detail_seeds
    sw.anchor_layers = args.layers
    if args.lambdas:
        sw.anchor_lambdas = args.lambdas
    sw.artifact_strengths = args.strengths
    over = {"ceiling": not args.no_ceiling, "data.artifact_target_mode": args.target_mode}
    if args.sizes:
        for k, v in zip(("teacher_train", "w2s_train", "val", "source_test", "target_test"),
                        args.sizes):
            over[f"data.{k}"] = v
    if args.max_length:
        over["data.max_length"] = args.max_length
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set expects KEY=VALUE, got {item!r}")
        over[key] = yaml.safe_load(value)
    sw.base = with_overrides(sw.base, **over)
    results = sweep(sw, args.out)
    text = markdown(results, "python " + " ".join(sys.argv))
    doc_out.emit([text], args.doc)


if __name__ == "__main__":
    main()
