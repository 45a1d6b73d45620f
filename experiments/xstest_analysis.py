"""Issue 44's reading of the XSTest runs: the story folder notebook 04 and the report read, and
the results document with every row and the pre-registered verdicts.

    python experiments/xstest_refusal.py analyse --out runs/xstest \\
        --doc docs/results/realdata/xstest_refusal.md [--story notebooks/data/xstest_story]

Rebuilds each source's results table from its finished runs (so a partial sweep can be read),
writes the story folder with `anchorviz.viz.story.export_story` (numbers only: no text of the
data), reads it back with `anchorviz.analysis.story.load_story` and computes everything from
that folder, as notebook 04 does.
"""

from __future__ import annotations

import math
from pathlib import Path

import doc_out
import pandas as pd

from anchorviz.analysis.refusal import (
    CEILING_BAR,
    REFUSE,
    RESPOND,
    ood_risk_check,
    refusal_runs,
    refusal_verdicts,
)
from anchorviz.analysis.story import load_story
from anchorviz.pipeline.results import results_table
from anchorviz.viz.story import export_story

STORY = Path("notebooks/data/xstest_story")


def _pct(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _pts(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}"


def _lam(x: float | None) -> str:
    return "none yet (no last-layer ANCHOR run finished)" if x is None else f"{x:g}"


def export(out: Path, sources: list[str], story_dir: Path, command: str) -> list[str]:
    """Rebuild the sources' tables and write the story folder; returns the sources with runs."""
    from anchorviz.analysis.cues import audit_datasets
    from anchorviz.paths import realdata_dir

    stores = {}
    for s in sources:
        if (out / s / "runs").is_dir() and len(results_table(out / s)):
            stores[s] = out / s
    if not stores:
        raise SystemExit(f"no finished run under {out}/{{{','.join(sources)}}}")
    audit = (audit_datasets([RESPOND, REFUSE], ["length", "refusal", "format"])
             if realdata_dir() is not None else None)
    note = (f"Made by `{command}` from the runs of experiments/xstest_refusal.py (issue 44, "
            "pre-registered in docs/RESULTS.md): sources HH-RLHF harmless (hh) and PKU-SafeRLHF "
            "(pku); zero-shot targets XSTest should-respond and should-refuse (150 pairs each per "
            "seed); teacher minilm-l3, student minilm-l6, 64 tokens, bfloat16 autocast, seeds "
            "80-84 (split-varying).")
    export_story({k: str(v) for k, v in stores.items()}, story_dir, audit=audit, note=note)
    return list(stores)


def markdown(story_dir: Path, stores: list[str], command: str) -> str:
    story = load_story(story_dir)
    v = refusal_verdicts(story, stores)
    lines = [f"Command: `{command}` (story folder `{story_dir}`).", "",
             "Pre-registration: docs/RESULTS.md, \"Over-refusal on XSTest (issue 44)\". Measures "
             "in % of pairs: **follow R** = on should-respond (R), among the pairs where the "
             "refusing response (the refusal cue's side) is the rejected one, the share where the "
             "model scores the refusal higher (refusing is wrong there); **acc R** / **acc F** = "
             "accuracy on the whole should-respond / should-refuse (F) split; **refusal F** = on "
             "F, the share of the pairs whose chosen side is the refusal that the model gets "
             "right; **drift R** = centred cosine drift from the frozen pretrained student on R "
             "at the last layer. Per setting: mean ± SD over seeds (the tests below give 95% "
             "intervals of the paired differences). Every run is listed, whichever way it "
             "falls.", ""]
    for store in stores:
        runs = refusal_runs(story, store)
        info = v.per_source[store]
        seeds = info["seeds"]
        lines += [f"## Source {store} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''}: "
                  f"{', '.join(map(str, seeds))}{'' if len(seeds) >= 5 else '; PARTIAL'})", ""]
        lines += ["| setting | seeds | source val | source test | follow R | acc R | refusal F | "
                  "acc F | drift R |", "|---|---|---|---|---|---|---|---|---|"]
        for setting, g in runs.groupby("setting", sort=False):
            def ms(col: str, g=g) -> str:
                x = g[col].dropna()
                if not len(x):
                    return "-"
                return (f"{100 * x.mean():.1f} ± {100 * x.std(ddof=1):.1f}" if len(x) > 1
                        else f"{100 * x.mean():.1f}")
            drift = g["drift_respond"].dropna()
            lines.append(f"| {setting} | {len(g)} | {ms('acc_val')} | {ms('acc_id')} | "
                         f"{ms('follow_respond')} | {ms('acc_respond')} | {ms('follow_refuse')} | "
                         f"{ms('acc_refuse')} | "
                         f"{f'{drift.mean():.3f}' if len(drift) else '-'} |")
        lines += ["", f"Ceiling on the source test: {_pct(info['ceiling_source_test'])}% "
                  f"(bar {100 * CEILING_BAR:.0f}%: {'passes' if info['passes_bar'] else 'FAILS'});"
                  f" ANCHOR lambda chosen on source validation: **{_lam(info['lambda'])}**; smallest "
                  f"slices: {info['n_respond_disagree_min']} R pairs where the refusal is rejected,"
                  f" {info['n_refuse_agree_min']} F pairs where it is chosen.", "",
                  "Every run:", "",
                  "| seed | setting | run | source val | source test | follow R | acc R | "
                  "refusal F | acc F | drift R |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in runs.itertuples():
            lines.append(f"| {r.seed} | {r.setting} | `{r.run_id}` | {_pct(r.acc_val)} | "
                         f"{_pct(r.acc_id)} | {_pct(r.follow_respond)} | {_pct(r.acc_respond)} | "
                         f"{_pct(r.follow_refuse)} | {_pct(r.acc_refuse)} | "
                         f"{'-' if not math.isfinite(r.drift_respond) else f'{r.drift_respond:.3f}'} |")
        ood = ood_risk_check(runs)
        lines += ["", f"OOD-risk estimator (rule 7; fit on {ood['runs']} student runs' drift and "
                  f"gain on F, predicting the gain on R): **{ood['status']}**"
                  + (f" (coverage {100 * ood['coverage']:.0f}%)" if math.isfinite(
                      ood.get("coverage", math.nan)) else "") + ".", ""]
    lines += ["## The pre-registered tests (one Holm family over both sources)", "",
              "| source | test | what | mean [95% interval] | per seed | p | Holm p | passes |",
              "|---|---|---|---|---|---|---|---|"]
    for t in v.tests.itertuples():
        if t.test == "c1":
            iv = (f"r = {t.mean:+.2f} [{t.lo:+.2f}, {t.hi:+.2f}]" if math.isfinite(t.mean)
                  else "n/a")
        else:
            iv = f"{_pts(t.mean)} [{_pts(t.lo)}, {_pts(t.hi)}] points"
        per = ", ".join(_pts(x) for x in t.per_seed)
        p = "-" if not math.isfinite(t.p) else f"{t.p:.3f}"
        h = "-" if not math.isfinite(t.holm) else f"{t.holm:.3f}"
        lines.append(f"| {t.store} | {t.test} | {t.what} | {iv} | {per} | {p} | {h} | "
                     f"{'yes' if t.passes else 'no'} |")
    lines += ["", "## Verdicts, in words", ""]
    for store in stores:
        for q in ("a", "b", "c"):
            lines.append(f"- **{store}, ({q})** {v.sentences[store][q]}")
    return "\n".join(lines) + "\n"


def analyse(out: Path, sources: list[str], seeds: list[int], doc: str | None, command: str,
            story_dir: Path = STORY) -> str:
    stores = export(out, sources, story_dir, command)
    text = markdown(story_dir, stores, command)
    doc_out.emit([text.rstrip("\n")], doc,
                 header="# Over-refusal on XSTest (issue 44): every run\n\n")
    pd.set_option("display.width", 200)
    return text
