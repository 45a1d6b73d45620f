"""Across-seed summaries and the failure-mode / ANCHOR-vs-naive decisions on worked tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from anchorviz.analysis.summary import (
    anchor_beats_naive,
    best_on_source_val,
    failure_mode,
    holm,
    points,
    summarize,
    verdict_lines,
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
    assert fm["failure_mode"] and fm["pooled"]["mean"] == pytest.approx(0.0733333, abs=1e-6)
    assert fm["can_conclude"] and fm["n_seeds"] == 3
    assert fm["pooled"]["per_seed_gap"] == pytest.approx([0.07, 0.07, 0.08])
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


# --------------------------------------------------------------------------- the one verdict


def _naive(wrg, aog=None, targets=None, strength=0.8):
    """Naive-student rows only: one per seed, with pooled ``aog`` and per-target ``aog_<t>``."""
    rows = []
    for seed, w in enumerate(wrg):
        row = {"artifact_strength": strength, "seed": seed, "kind": "student", "method": "naive",
               "anchor_lambda": 0.0, "anchor_layers": "", "wrg": w, "nts": 0.0, "acc_val": 0.7}
        if aog is not None:
            row["aog"] = aog[seed]
        for t, vals in (targets or {}).items():
            row[f"aog_{t}"] = vals[seed]
        rows.append(row)
    return pd.DataFrame(rows)


def test_wrg_interval_must_lie_above_zero():
    # mean WRG +3 points but its seed interval includes 0; WRG - AOG is a clean +10: the old
    # rule (mean WRG > 0) called this the failure mode
    wrg = [0.10, -0.02, 0.01]
    aog = [w - g for w, g in zip(wrg, [0.10, 0.10, 0.11])]
    fm = failure_mode(_naive(wrg, aog), 0.8)
    assert fm["wrg"]["mean"] == pytest.approx(0.03) and fm["wrg"]["lo"] < 0 < fm["wrg"]["hi"]
    assert not fm["wrg"]["above_zero"]
    assert fm["pooled"]["not_carried_over"]  # the gap itself is beyond the interval ...
    assert not fm["failure_mode"] and not fm["pooled"]["failure_mode"]  # ... but no ID gain
    assert fm["can_conclude"] and "does not lie above 0" in fm["reason"]


def test_a_loss_on_one_target_hidden_by_pooling_is_flagged_per_target():
    wrg = [0.03, 0.035, 0.025]
    targets = {"amazon": [-0.11, -0.10, -0.12], "nyt": [0.10, 0.11, 0.09],
               "tweets": [0.10, 0.09, 0.11]}
    aog = [np.mean([targets[t][s] for t in targets]) for s in range(3)]  # pooled = WRG
    t = _naive(wrg, aog, targets)
    t["aog_lo"], t["aog_hi"] = -0.5, 0.5  # the pooled interval columns are not a target
    fm = failure_mode(t, 0.8)
    assert set(fm["targets"]) == {"amazon", "nyt", "tweets"}
    assert fm["pooled"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert not fm["pooled"]["not_carried_over"] and not fm["pooled"]["failure_mode"]
    amazon = fm["targets"]["amazon"]
    assert amazon["mean"] == pytest.approx(0.14) and amazon["aog"]["mean"] == pytest.approx(-0.11)
    assert amazon["p_holm"] < fm["alpha"] and amazon["failure_mode"] and amazon["strict"]
    assert fm["failure_targets"] == ["amazon"] and fm["strict_targets"] == ["amazon"]
    assert fm["failure_mode"] and fm["strict"]
    assert not fm["targets"]["nyt"]["failure_mode"] and not fm["targets"]["tweets"]["failure_mode"]
    text = "\n".join(verdict_lines(t, 0.8))
    assert "amazon -11.0" in text and "Failure mode" in text and ": YES." in text


def test_holm_step_down_by_hand():
    # sorted 0.01, 0.012, 0.04 -> 3 * 0.01 = 0.03, max(0.03, 2 * 0.012) = 0.03, max(0.03, 0.04)
    assert holm([0.01, 0.04, 0.012]) == pytest.approx([0.03, 0.04, 0.03])
    assert holm([0.2, 0.5]) == pytest.approx([0.4, 0.5])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1
    out = holm([0.01, np.nan, 0.02])  # NaN (no interval) is not in the family
    assert out[0] == pytest.approx(0.02) and np.isnan(out[1]) and out[2] == pytest.approx(0.02)


def test_per_target_holm_p_values_match_a_hand_computation():
    wrg = [0.05, 0.06, 0.05, 0.06]
    gaps = {"a": [0.10, 0.12, 0.11, 0.13], "b": [0.02, 0.05, 0.01, 0.04],
            "c": [0.05, -0.03, 0.02, -0.01]}
    targets = {t: [w - d for w, d in zip(wrg, g)] for t, g in gaps.items()}
    fm = failure_mode(_naive(wrg, None, targets))  # strength None: every row; no pooled column
    assert fm["pooled"] is None and fm["wrg"]["above_zero"]

    def p_one_sided(d):  # paired t statistic mean / (sd / sqrt(n)), upper tail, n - 1 df
        d = np.asarray(d)
        return stats.t.sf(d.mean() / (d.std(ddof=1) / np.sqrt(len(d))), len(d) - 1)

    p = {t: p_one_sided(g) for t, g in gaps.items()}
    assert p["a"] < p["b"] < p["c"]
    hand = {"a": 3 * p["a"], "b": max(3 * p["a"], 2 * p["b"]), "c": max(3 * p["a"], 2 * p["b"], p["c"])}
    for t in gaps:
        assert fm["targets"][t]["p"] == pytest.approx(p[t], rel=1e-9)
        assert fm["targets"][t]["p"] == pytest.approx(
            stats.ttest_1samp(gaps[t], 0.0, alternative="greater").pvalue, rel=1e-9)
        assert fm["targets"][t]["p_holm"] == pytest.approx(min(1.0, hand[t]), rel=1e-9)
    assert fm["targets"]["b"]["p"] == pytest.approx(0.02310, abs=5e-5)
    assert fm["targets"]["b"]["p_holm"] == pytest.approx(0.04620, abs=1e-4)
    # b passes uncorrected (p < 0.025) but not after Holm: only a is flagged
    assert fm["targets"]["b"]["p"] < fm["alpha"] < fm["targets"]["b"]["p_holm"]
    assert fm["failure_targets"] == ["a"] and fm["failure_mode"]


def test_strict_form_is_told_apart_from_a_gain_that_does_not_carry_over():
    wrg = [0.05, 0.06, 0.05]
    smaller = failure_mode(_naive(wrg, [0.01, 0.02, 0.015]), 0.8)
    assert smaller["failure_mode"] and not smaller["strict"]
    assert smaller["pooled"]["not_carried_over"] and not smaller["pooled"]["aog_below_zero"]
    assert "not strict" in smaller["reason"]
    loss = failure_mode(_naive(wrg, [-0.03, -0.02, -0.04]), 0.8)
    assert loss["failure_mode"] and loss["strict"] and loss["pooled"]["aog_below_zero"]
    assert loss["pooled"]["aog"]["hi"] < 0


def test_one_seed_cannot_conclude_and_says_so():
    t = _naive([0.05], [-0.02], {"amazon": [-0.11]})
    fm = failure_mode(t, 0.8)
    assert fm["n_seeds"] == 1 and not fm["can_conclude"]
    assert not fm["failure_mode"] and not fm["strict"] and np.isnan(fm["wrg"]["hw"])
    assert "one seed" in fm["reason"]
    text = "\n".join(verdict_lines(t))
    assert "seed 0: WRG +5.0, AOG -2.0" in text and "amazon -11.0" in text
    assert "One seed cannot separate this from noise" in text


def test_missing_columns_and_strength_selection():
    t = _naive([0.05, 0.06, 0.05], [0.01, 0.02, 0.015])
    no_wrg = failure_mode(t.drop(columns="wrg"), 0.8)
    assert no_wrg["missing"] == ["wrg"] and not no_wrg["can_conclude"] and "wrg" in no_wrg["reason"]
    no_aog = failure_mode(t.drop(columns="aog"), 0.8)
    assert no_aog["missing"] == ["aog"] and not no_aog["failure_mode"]
    assert "No failure-mode verdict" in verdict_lines(t.drop(columns="aog"))[0]
    # no artefact column: strength None uses every row; a strength cannot be selected
    bare = t.drop(columns="artifact_strength")
    assert failure_mode(bare)["failure_mode"]
    assert "artifact_strength" in failure_mode(bare, 0.8)["missing"]
    assert failure_mode(t, 0.5)["n_seeds"] == 0 and not failure_mode(t, 0.5)["failure_mode"]
    both = pd.concat([t, _naive([0.0, 0.0, 0.01], [0.0, 0.0, 0.0], strength=0.0)])
    with pytest.raises(ValueError, match="strength"):
        failure_mode(both)
    lines = verdict_lines(both)  # several strengths: each in turn
    assert lines[0] == "Artefact strength 0:" and "Artefact strength 0.8:" in lines


def test_verdict_lines_and_the_cli_use_the_one_verdict():
    from anchorviz.cli import _verdict

    t = _table([0.05, 0.06, 0.05], [-0.02, -0.01, -0.03], [0.03, 0.04, 0.05], [0.0, 0.01, 0.01])
    lines = verdict_lines(t)
    text = "\n".join(lines)
    assert _verdict(t) == text
    assert "WRG +5.3 ± 1.4" in text and "pooled over targets: WRG - AOG +7.3 ± 1.4" in text
    assert "Strict form (AOG < 0 too): no" in text and ": YES." in text
    assert ("ANCHOR chosen on source validation (lambda 1, layers last): NTS(ANCHOR) - NTS(naive) "
            "+3.3 ± 1.4 points, paired over 3 seeds: beyond the seed spread: yes.") in text
    one = "\n".join(verdict_lines(t[t["seed"] == 0]))
    assert "NTS +3.0 vs naive +0.0 points (seed 0; one seed" in one


def test_verdict_lines_never_pool_two_teacher_visibilities():
    shows = _table([0.05, 0.06, 0.05], [-0.02, -0.01, -0.03], [0, 0, 0], [0, 0, 0])
    flat = _table([0.0, 0.01, -0.01], [0.0, 0.01, -0.01], [0, 0, 0], [0, 0, 0])
    both = pd.concat([shows.assign(teacher_visibility=0.5), flat.assign(teacher_visibility=1.0)])
    text = "\n".join(verdict_lines(both))
    assert "on 50% of marked pairs" in text and "on 100% of marked pairs" in text
    # each scenario keeps its own verdict (the first block is exactly the 50% table's)
    assert verdict_lines(both)[1:1 + len(verdict_lines(shows))] == [
        "  " + x for x in verdict_lines(shows)]
