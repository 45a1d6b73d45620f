"""Where the seed-to-seed spread of the failure-mode gap (WRG - AOG) comes from, and how many
seeds detect it.

Reads a finished store (a naive student and its weak teacher per seed, as
``experiments/results_vader.py --methods naive`` writes) and, per seed, resamples the evaluation
pairs (a paired bootstrap over the source-test pairs and, separately, over each target's pairs,
holding both trained models fixed). That gives the part of each seed's WRG - AOG variance that
comes from which pairs were evaluated; the rest of the spread over seeds is training and split
noise (teacher quality, which pairs are marked, training order). From the two parts it predicts
the spread at other evaluation sizes (evaluation variance ~ 1 / pairs) and the power of the
demo's verdict test (one-sided paired t-test at alpha 0.025, the 95% interval of
`anchorviz.analysis.summary.failure_mode`) for a number of seeds.

    python experiments/seed_noise.py runs/pilot28_eval --doc docs/results/seed_noise/pilot_seeds0-4.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import doc_out
import numpy as np
import pandas as pd

from anchorviz.analysis.metrics import per_pair_correct
from anchorviz.pipeline.results import results_table
from anchorviz.viz.common import run_path


def correct_by_split(run_dir: Path) -> dict[str, np.ndarray]:
    """Per-pair correctness (1, 0.5, 0) per evaluated split, in pair order."""
    scores = pd.read_parquet(run_dir / "scores.parquet").sort_values(["split", "pair_id"])
    return {split: per_pair_correct(g["r_chosen"].to_numpy(), g["r_rejected"].to_numpy())
            for split, g in scores.groupby("split", sort=True)}


def gap_parts(teacher: dict[str, np.ndarray], student: dict[str, np.ndarray],
              n_boot: int, rng: np.random.Generator) -> dict:
    """WRG, AOG and WRG - AOG of one seed (points), with the bootstrap variance of each part
    over evaluation pairs: ``var_source`` (WRG's) and ``var_target`` (AOG's, the mean over
    targets of independent per-target resamples)."""
    d_src = (student["source_test"] - teacher["source_test"]) * 100
    targets = sorted(s for s in teacher if s.startswith("target_test:"))
    d_tgt = [(student[t] - teacher[t]) * 100 for t in targets]
    wrg = float(d_src.mean())
    aog = float(np.mean([d.mean() for d in d_tgt]))
    boot_src = np.array([d_src[rng.integers(0, len(d_src), len(d_src))].mean()
                         for _ in range(n_boot)])
    boot_tgt = np.mean([[d[rng.integers(0, len(d), len(d))].mean() for _ in range(n_boot)]
                        for d in d_tgt], axis=0)
    return {"wrg": wrg, "aog": aog, "gap": wrg - aog, "n_source": len(d_src),
            "n_target": int(np.mean([len(d) for d in d_tgt])),
            "var_source": float(boot_src.var(ddof=1)), "var_target": float(boot_tgt.var(ddof=1))}


def power(effect: float, sd: float, n_seeds: int, alpha: float = 0.025) -> float:
    """Power of the one-sided one-sample t-test of mean > 0 at ``alpha`` with ``n_seeds`` (the
    demo's own `verdict_power`, one implementation)."""
    from anchorviz.pipeline.demo import verdict_power

    return verdict_power(n_seeds, mean=effect, sd=sd, alpha=alpha)


def decompose(store: str | Path, n_boot: int = 2000, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    res = results_table(store)
    rng = np.random.default_rng(seed)
    rows = []
    for s in sorted(res["seed"].unique()):
        t = res[(res["seed"] == s) & (res["kind"] == "teacher")]
        n = res[(res["seed"] == s) & (res["method"] == "naive")]
        if len(t) != 1 or len(n) != 1:
            continue
        parts = gap_parts(correct_by_split(run_path(store, t["run_id"].iloc[0])),
                          correct_by_split(run_path(store, n["run_id"].iloc[0])), n_boot, rng)
        rows.append({"seed": int(s), **parts})
    df = pd.DataFrame(rows)
    if len(df) < 2:
        raise SystemExit(f"{store}: fewer than 2 seeds with a teacher and a naive student")
    between = float(df["gap"].var(ddof=1))
    eval_var = float((df["var_source"] + df["var_target"]).mean())
    summary = {"n_seeds": len(df), "mean_gap": float(df["gap"].mean()), "sd_between": between ** 0.5,
               "sd_eval": eval_var ** 0.5, "sd_train": max(0.0, between - eval_var) ** 0.5,
               "share_eval": min(1.0, eval_var / between),
               "var_source": float(df["var_source"].mean()),
               "var_target": float(df["var_target"].mean()),
               "n_source": int(df["n_source"].iloc[0]), "n_target": int(df["n_target"].iloc[0])}
    return df, summary


def predicted_sd(summary: dict, n_source: int, n_target: int) -> float:
    """SD of WRG - AOG over seeds at other evaluation sizes (evaluation variance ~ 1 / pairs)."""
    v = (summary["sd_train"] ** 2 + summary["var_source"] * summary["n_source"] / n_source
         + summary["var_target"] * summary["n_target"] / n_target)
    return v ** 0.5


def window_verdicts(store: str | Path, size: int) -> list[dict]:
    """The failure-mode verdict (`anchorviz.analysis.summary.failure_mode`) on the whole seed set
    and on consecutive windows of ``size`` seeds (e.g. the two five-seed halves of ten)."""
    from anchorviz.analysis.summary import failure_mode

    res = results_table(store)
    seeds = sorted(int(s) for s in res.loc[res["method"] == "naive", "seed"].unique())
    windows = [seeds] + ([seeds[i:i + size] for i in range(0, len(seeds), size)]
                         if size and len(seeds) > size else [])
    out = []
    for w in windows:
        fm = failure_mode(res[res["seed"].isin(w)])
        p = fm["pooled"]
        out.append({"seeds": w, "wrg": fm["wrg"], "pooled": p, "failure_mode": fm["failure_mode"],
                    "strict": fm["strict"], "targets": fm["failure_targets"]})
    return out


def windows_markdown(rows: list[dict]) -> str:
    out = ["| seeds | WRG (95% seed interval) | WRG - AOG pooled (interval, p) | failure mode | "
           "targets on their own (Holm) | strict (AOG < 0) |", "|---|---|---|---|---|---|"]
    for r in rows:
        w, p = r["wrg"], r["pooled"]
        s = r["seeds"]
        out.append(f"| {s[0]}-{s[-1]} ({len(s)}) | {100 * w['mean']:+.1f} [{100 * w['lo']:+.1f}, "
                   f"{100 * w['hi']:+.1f}] | {100 * p['mean']:+.1f} [{100 * p['lo']:+.1f}, "
                   f"{100 * p['hi']:+.1f}], p {p['p']:.3f} | "
                   f"{'YES' if r['failure_mode'] else 'no'} | {', '.join(r['targets']) or '-'} | "
                   f"{'YES' if r['strict'] else 'no'} |")
    return "\n".join(out)


def markdown(df: pd.DataFrame, s: dict, command: str, sizes: list[tuple[int, int]]) -> str:
    out = [f"Command: `{command}`", "",
           "| seed | WRG | AOG | WRG - AOG | eval SD of WRG (source pairs) | eval SD of AOG "
           "(target pairs) |", "|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        out.append(f"| {int(r['seed'])} | {r['wrg']:+.1f} | {r['aog']:+.1f} | {r['gap']:+.1f} | "
                   f"{r['var_source'] ** 0.5:.2f} | {r['var_target'] ** 0.5:.2f} |")
    out += ["", f"{s['n_seeds']} seeds, {s['n_source']} source-test pairs, {s['n_target']} pairs "
            f"per target. WRG - AOG mean {s['mean_gap']:+.2f}, SD over seeds "
            f"{s['sd_between']:.2f}; of its variance, evaluation pairs explain "
            f"{s['share_eval']:.0%} (SD {s['sd_eval']:.2f}), training and split the rest (SD "
            f"{s['sd_train']:.2f}).", "",
            "| source-test pairs | pairs per target | predicted SD of WRG - AOG | power, 5 seeds "
            "| power, 10 seeds |", "|---|---|---|---|---|"]
    for ns, nt in sizes:
        sd = predicted_sd(s, ns, nt)
        out.append(f"| {ns} | {nt} | {sd:.2f} | {power(s['mean_gap'], sd, 5):.0%} | "
                   f"{power(s['mean_gap'], sd, 10):.0%} |")
    out += ["", "Power: one-sided paired t-test of WRG - AOG > 0 at alpha 0.025 (the 95% seed "
            "interval of the verdict), at the measured mean gap; an estimate, since mean and SD "
            "are themselves estimated from these seeds."]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--sizes", nargs="+", default=["300x300", "1500x1000", "3000x1500"],
                    help="SOURCExTARGET evaluation sizes to predict the spread at")
    ap.add_argument("--windows", type=int, default=5,
                    help="also give the verdict on consecutive windows of this many seeds")
    ap.add_argument("--doc", default=None)
    args = ap.parse_args()
    df, s = decompose(args.store, args.n_boot)
    sizes = [tuple(int(x) for x in v.split("x")) for v in args.sizes]
    text = markdown(df, s, "python " + " ".join(sys.argv), sizes)
    text += ("\n\nThe failure-mode verdict on all seeds and on windows of "
             f"{args.windows}:\n\n" + windows_markdown(window_verdicts(args.store, args.windows)))
    doc_out.emit([text], args.doc)


if __name__ == "__main__":
    main()
