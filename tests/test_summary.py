"""Across-seed summaries and the failure-mode / ANCHOR-vs-naive decisions on worked tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anchorviz.summary import (
    anchor_beats_naive,
    best_on_source_val,
    failure_mode,
    points,
    summarize,
)


def _table(naive_wrg, naive_aog, anchor_nts, naive_nts):
    rows = []
    for seed, (w, a, an, nn) in enumerate(zip(naive_wrg, naive_aog, anchor_nts, naive_nts)):
        base = {"artifact_strength": 0.8, "seed": seed, "acc_id": 0.8, "acc_ood": 0.7}
        rows.append({**base, "kind": "student", "method": "naive", "anchor_lambda": 0.0,
                     "anchor_layers": "", "wrg": w, "aog": a, "nts": nn, "acc_val": 0.7})
        for lam, val in ((1.0, 0.75), (10.0, 0.71)):
            rows.append({**base, "kind": "student", "method": "anchor", "anchor_lambda": lam,
                         "anchor_layers": "last", "wrg": w, "aog": a, "nts": an if lam == 1.0 else 0.0,
                         "acc_val": val})
    return pd.DataFrame(rows)


def test_failure_mode_needs_a_gap_beyond_the_seed_spread():
    clear = _table([0.05, 0.06, 0.05], [-0.02, -0.01, -0.03], [0, 0, 0], [0, 0, 0])
    fm = failure_mode(clear, 0.8)
    assert fm["failure_mode"] and fm["mean"] == pytest.approx(0.0733333, abs=1e-6)
    noisy = _table([0.05, -0.04, 0.02], [0.06, -0.05, 0.0], [0, 0, 0], [0, 0, 0])
    assert not failure_mode(noisy, 0.8)["failure_mode"]


def test_anchor_beats_naive_is_paired_over_seeds():
    t = _table([0.05] * 3, [0.0] * 3, [0.03, 0.04, 0.05], [0.0, 0.01, 0.01])
    res = anchor_beats_naive(t, 0.8, 1.0, "last")
    assert res["per_seed"] == pytest.approx([0.03, 0.03, 0.04])
    assert res["beyond_spread"]
    flat = anchor_beats_naive(_table([0.05] * 3, [0.0] * 3, [0.01, -0.01, 0.0], [0.0] * 3), 0.8, 1.0, "last")
    assert not flat["beyond_spread"]


def test_best_on_source_val_and_summary():
    t = _table([0.05] * 3, [0.0] * 3, [0.0] * 3, [0.0] * 3)
    best = best_on_source_val(t)
    assert best.iloc[0]["anchor_lambda"] == 1.0
    s = summarize(t)
    naive = s[s["method"] == "naive"].iloc[0]
    assert naive["n_seeds"] == 3 and naive["wrg_mean"] == pytest.approx(0.05)
    assert naive["wrg_std"] == pytest.approx(0.0)
    assert points(0.0123, 0.004) == "1.2 ± 0.4" and points(np.nan) == "-"
    with pytest.raises(ValueError, match="empty"):
        summarize(t.iloc[:0])
