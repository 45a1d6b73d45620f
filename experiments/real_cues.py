"""Issue 27: which surface cues a weak-to-strong reward model follows on real preference data,
and whether ANCHOR stops it following them where they mislead.

One source, several targets: the within-category target (the other harmlessness set) and the
cross-category ones (the helpfulness sets), where refusal and length point the other way
(docs/RESULTS.md, the data audit). Per seed: the weak teacher (minilm-l3, gold labels), the gold
ceiling (minilm-l6, gold labels), the naive student (minilm-l6 on the teacher's soft labels) and
ANCHOR students at each lambda of ``--lambdas`` (last layer); split-varying seeds; bfloat16
autocast (the demo's arithmetic). The ANCHOR lambda is chosen on SOURCE validation only (the
highest mean source-validation accuracy over the seeds; a tie goes to the smaller lambda).

Read per target and cue, on the pairs where the cue picks the REJECTED side (the disagree slice,
where following the cue is wrong): the naive student's follow rate minus the gold ceiling's
(inherited from weak labels when above 0), ANCHOR's minus naive's, and ANCHOR's cost on the
agree slice and on the whole target; means over seeds with 95% t-intervals, Holm over targets x
cues. A slice enters only with at least ``--min-slice`` pairs on every seed.

    python experiments/real_cues.py --source hh --seeds 0 1 2 3 4 --out runs/real_cues \
        --doc docs/results/realdata/inherited_cues_hh_harmless_source.md

Resumable (content-hashed runs); the real-data files are found as ``anchorviz.paths.realdata_dir``
says (``$ANCHORVIZ_REALDATA``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import doc_out
import numpy as np
import pandas as pd
from results_realdata import base_config as realdata_base
from scipy import stats

from anchorviz.config import RunConfig
from anchorviz.paths import realdata_dir
from anchorviz.pipeline.sweep import sweep
from anchorviz.sweep_config import SweepConfig

SETS = {"hh": "realdata-hh-harmless", "pku": "realdata-pku-safe",
        "uf": "realdata-ultrafeedback", "pandalm": "realdata-pandalm"}
# source -> targets (within category first), split sizes (teacher_train, w2s_train, val,
# source_test, target_test), fixed before any run
PLANS = {
    "hh": (["pku", "uf", "pandalm"], (500, 700, 150, 400, 400)),
    "pku": (["hh", "uf", "pandalm"], (500, 700, 150, 400, 400)),
    "uf": (["pandalm", "hh", "pku"], (300, 400, 80, 250, 400)),
}
CUES = ("length", "refusal", "format")


def base_config(source: str, targets: list[str], sizes, max_length: int) -> RunConfig:
    """`results_realdata.base_config` (the real-data protocol) with several targets, split-varying
    seeds, the gold ceiling, and bfloat16 autocast."""
    cfg = realdata_base(SETS[source], SETS[targets[0]], sizes, max_length)
    cfg.data.targets = [SETS[t] for t in targets]
    cfg.data.split_per_seed = True
    cfg.ceiling = True
    cfg.teacher_train.bf16 = cfg.student_train.bf16 = True
    return cfg


def _metrics(out: Path, run_id: str) -> dict:
    return json.loads((out / "runs" / run_id / "metrics.json").read_text())


def slice_table(results: pd.DataFrame, out: Path) -> pd.DataFrame:
    """One row per (run, split, cue): n, accuracy on the agree / disagree slices, follow rate."""
    rows = []
    for r in results.itertuples():
        cues = _metrics(out, r.run_id).get("cues") or {}
        for split, block in cues.items():
            if split == "ood":
                continue
            for cue, b in block.items():
                if cue not in CUES or not b.get("n"):
                    continue
                rows.append({"run_id": r.run_id, "method": r.method,
                             "anchor_lambda": float(r.anchor_lambda), "seed": int(r.seed),
                             "split": split, "cue": cue, "n": b["n"],
                             "n_agree": b["agree"]["n"], "n_disagree": b["disagree"]["n"],
                             "acc_agree": b["agree"]["point"],
                             "acc_disagree": b["disagree"]["point"],
                             "follow": b["follow"]["point"]})
    return pd.DataFrame(rows)


def choose_lambda(results: pd.DataFrame) -> float:
    """The ANCHOR lambda with the highest mean SOURCE-validation accuracy over seeds (ties: the
    smaller lambda)."""
    a = results[results["method"] == "anchor"]
    means = a.groupby("anchor_lambda")["acc_val"].mean()
    best = means.max()
    return float(min(lam for lam, v in means.items() if np.isclose(v, best)))


def _t(diffs: np.ndarray) -> tuple[float, float, float, float]:
    """mean, 95% t-interval and two-sided p of a paired difference over seeds."""
    d = np.asarray(diffs, float)
    m = float(d.mean())
    if len(d) < 2 or np.allclose(d, d[0]):
        return m, m, m, float("nan") if len(d) < 2 else (0.0 if m else 1.0)
    se = d.std(ddof=1) / np.sqrt(len(d))
    h = float(stats.t.ppf(0.975, len(d) - 1) * se)
    p = float(2 * stats.t.sf(abs(m) / se, len(d) - 1))
    return m, m - h, m + h, p


def holm(p: list[float]) -> list[float]:
    """Holm-adjusted p-values (NaN stays NaN and is not counted)."""
    p = np.asarray(p, float)
    ok = np.flatnonzero(~np.isnan(p))
    out = np.full(len(p), np.nan)
    order = ok[np.argsort(p[ok])]
    m, run = len(ok), 0.0
    for i, j in enumerate(order):
        run = max(run, min(1.0, (m - i) * p[j]))
        out[j] = run
    return out.tolist()


def verdicts(results: pd.DataFrame, slices: pd.DataFrame, lam: float, min_slice: int
             ) -> pd.DataFrame:
    """Per (split, cue): the paired differences over seeds of the follow rate on the disagree
    slice (naive - ceiling, ANCHOR - naive) and ANCHOR's cost (agree slice, whole split)."""
    def pick(method: str, lam_: float = 0.0) -> pd.DataFrame:
        s = slices[(slices["method"] == method) & np.isclose(slices["anchor_lambda"], lam_)]
        return s[["split", "cue", "seed", "n_agree", "n_disagree", "acc_agree", "acc_disagree"]]

    keys = ["split", "cue", "seed"]
    wide = (pick("naive").merge(pick("ceiling"), on=keys, suffixes=("", "_ceiling"))
            .merge(pick("anchor", lam), on=keys, suffixes=("", "_anchor"))
            .merge(pick("teacher"), on=keys, how="left", suffixes=("", "_teacher")))
    acc = {m: results[(results["method"] == m) & np.isclose(results["anchor_lambda"], l_)]
           .set_index("seed") for m, l_ in (("naive", 0.0), ("anchor", lam))}
    rows = []
    for (split, cue), g in wide.groupby(["split", "cue"]):
        row = {"split": split, "cue": cue, "seeds": len(g),
               "n_disagree_min": int(g["n_disagree"].min()), "n_agree_min": int(g["n_agree"].min())}
        if len(g) < 2 or row["n_disagree_min"] < min_slice:
            rows.append({**row, "entered": False})
            continue
        follow = {k: 1 - g[f"acc_disagree{suf}"].to_numpy()
                  for k, suf in (("naive", ""), ("ceiling", "_ceiling"), ("anchor", "_anchor"),
                                 ("teacher", "_teacher"))}
        col = "acc_id" if split == "source_test" else f"acc_{split.split(':', 1)[1]}"
        seeds = g["seed"].to_numpy()
        parts = {"inherit": follow["naive"] - follow["ceiling"],
                 "anchor": follow["anchor"] - follow["naive"],
                 "agree": g["acc_agree_anchor"].to_numpy() - g["acc_agree"].to_numpy(),
                 "whole": (acc["anchor"].loc[seeds, col].to_numpy()
                           - acc["naive"].loc[seeds, col].to_numpy())}
        for name, d in parts.items():
            m, lo, hi, p = _t(d)
            row.update({name: m, f"{name}_lo": lo, f"{name}_hi": hi, f"{name}_p": p})
        row.update({"entered": True, **{f"follow_{k}": float(np.nanmean(f))
                                        for k, f in follow.items()}})
        rows.append(row)
    v = pd.DataFrame(rows)
    if v.empty or "inherit_p" not in v:
        return v
    tgt = v["entered"] & (v["split"] != "source_test")
    for name in ("inherit", "anchor"):
        v[f"{name}_holm"] = np.nan
        v.loc[tgt, f"{name}_holm"] = holm(v.loc[tgt, f"{name}_p"].tolist())
    return v


def _pt(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:+.1f}"


def markdown(results: pd.DataFrame, v: pd.DataFrame, lam: float, command: str, note: str) -> str:
    lines = [f"Command: `{command}`", "", note, ""]
    lines += ["| method | lambda | seeds | source val | ID (source test) | " + " | ".join(
        c.replace("acc_", "") for c in results.columns if c.startswith("acc_") and not
        c.endswith(("_lo", "_hi")) and c not in ("acc_val", "acc_id", "acc_ood", "acc_id_clean",
                                                  "acc_id_hidden", "acc_id_marked")) + " |"]
    tcols = [c for c in results.columns if c.startswith("acc_") and not c.endswith(("_lo", "_hi"))
             and c not in ("acc_val", "acc_id", "acc_ood", "acc_id_clean", "acc_id_hidden",
                           "acc_id_marked")]
    lines.append("|" + "---|" * (5 + len(tcols)))
    for (m, lam_), g in results.groupby(["method", "anchor_lambda"], sort=False):
        cells = [f"{100 * g[c].mean():.1f} ± {100 * g[c].std(ddof=1):.1f}" if len(g) > 1 else
                 f"{100 * g[c].mean():.1f}" for c in ["acc_val", "acc_id", *tcols]]
        lines.append(f"| {m} | {lam_:g} | {len(g)} | " + " | ".join(cells) + " |")
    lines += ["", f"ANCHOR lambda chosen on source validation: **{lam:g}**.", ""]
    if v.empty:
        return "\n".join(lines + ["No slice has enough pairs on every seed."])
    lines += ["Follow rate on the disagree slice (the cue picks the rejected side; following it is "
              "wrong), in points; differences are means over seeds with 95% t-intervals, Holm over "
              "the target x cue rows:", "",
              "| split | cue | min pairs (disagree / agree) | teacher | ceiling | naive | ANCHOR | "
              "naive - ceiling (inherited) | Holm p | ANCHOR - naive | Holm p | ANCHOR cost, agree "
              "slice | ANCHOR cost, whole split |", "|" + "---|" * 13]
    for r in v.itertuples():
        if not r.entered:
            lines.append(f"| {r.split} | {r.cue} | {r.n_disagree_min} / {r.n_agree_min} | too "
                         "few pairs on some seed: not entered |" + " |" * 9)
            continue
        hp = "-" if pd.isna(r.inherit_holm) else f"{r.inherit_holm:.3f}"
        ap = "-" if pd.isna(r.anchor_holm) else f"{r.anchor_holm:.3f}"
        lines.append(
            f"| {r.split} | {r.cue} | {r.n_disagree_min} / {r.n_agree_min} | "
            f"{100 * r.follow_teacher:.1f} | {100 * r.follow_ceiling:.1f} | "
            f"{100 * r.follow_naive:.1f} | {100 * r.follow_anchor:.1f} | "
            f"{_pt(r.inherit)} [{_pt(r.inherit_lo)}, {_pt(r.inherit_hi)}] | {hp} | "
            f"{_pt(r.anchor)} [{_pt(r.anchor_lo)}, {_pt(r.anchor_hi)}] | {ap} | "
            f"{_pt(r.agree)} [{_pt(r.agree_lo)}, {_pt(r.agree_hi)}] | "
            f"{_pt(r.whole)} [{_pt(r.whole_lo)}, {_pt(r.whole_hi)}] |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="hh", choices=list(PLANS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--lambdas", type=float, nargs="+", default=[0.3, 3.0])
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--min-slice", type=int, default=20,
                    help="pairs a disagree slice needs on every seed to enter (default 20)")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--out", default="runs/real_cues")
    ap.add_argument("--doc", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if realdata_dir() is None:
        sys.exit("the real-data folder is not present: nothing to run (set ANCHORVIZ_REALDATA)")
    targets, sizes = PLANS[args.source]
    base = base_config(args.source, targets, sizes, args.max_length)
    sw = SweepConfig(base=base, methods=["naive", "anchor"], anchor_lambdas=args.lambdas,
                     anchor_layers=["last"], seeds=args.seeds)
    out = Path(args.out) / args.source
    results = sweep(sw, out, jobs=args.jobs)
    lam = choose_lambda(results)
    slices = slice_table(results, out)
    v = verdicts(results, slices, lam, args.min_slice)
    note = (f"Source **{SETS[args.source]}**, targets {', '.join(SETS[t] for t in targets)}; "
            f"sizes (teacher_train, w2s_train, val, source_test, target_test) = {sizes}; prompt + "
            f"response up to {args.max_length} tokens; teacher minilm-l3, student minilm-l6, "
            f"bfloat16 autocast; seeds {args.seeds} (split-varying); ANCHOR lambda in "
            f"{args.lambdas}, last layer. Accuracies in %, mean ± SD over seeds.")
    text = markdown(results, v, lam, "python " + " ".join(sys.argv), note)
    v.to_csv(out / "verdicts.csv", index=False)
    doc_out.emit([text], args.doc)


if __name__ == "__main__":
    main()
