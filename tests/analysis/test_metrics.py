"""Metrics against worked examples, bootstrap behaviour and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anchorviz.analysis.metrics import (
    Interval,
    bootstrap_accuracy_ci,
    bootstrap_kind,
    paired_bootstrap_transfer,
    pairwise_accuracy,
    per_pair_correct,
    pgr,
    seed_summary,
    transfer_scores,
)

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
accuracy = st.floats(min_value=0.0, max_value=1.0)

# --------------------------------------------------------------------------- accuracy


def test_per_pair_correct_and_ties_count_half():
    chosen = [1.0, 2.0, 3.0, 0.0]
    rejected = [0.0, 2.0, 4.0, -1.0]
    assert per_pair_correct(chosen, rejected).tolist() == [1.0, 0.5, 0.0, 1.0]
    assert pairwise_accuracy(chosen, rejected) == pytest.approx(2.5 / 4)


def test_pairwise_accuracy_accepts_arrays():
    assert pairwise_accuracy(np.array([0.3, 0.1]), np.array([0.2, 0.2])) == 0.5


@pytest.mark.parametrize(
    "chosen, rejected, match",
    [
        ([1.0, float("nan")], [0.0, 0.0], "r_chosen"),
        ([1.0, 0.0], [0.0, float("inf")], "r_rejected"),
        ([1.0, 0.0], [0.0], "same pairs"),
        ([], [], "empty"),
        ([[1.0]], [[0.0]], "1-D"),
        (["a"], ["b"], "numeric"),
    ],
)
def test_pairwise_accuracy_validation(chosen, rejected, match):
    with pytest.raises(ValueError, match=match):
        pairwise_accuracy(chosen, rejected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=40))
def test_pairwise_accuracy_is_bounded_and_symmetric(pairs):
    chosen = [c for c, _ in pairs]
    rejected = [r for _, r in pairs]
    acc = pairwise_accuracy(chosen, rejected)
    assert 0.0 <= acc <= 1.0
    assert acc + pairwise_accuracy(rejected, chosen) == pytest.approx(1.0)


# --------------------------------------------------------------------------- transfer scores


def test_transfer_scores_student_regresses_in_distribution():
    # the 5-point ID regression is charged against the 6-point OOD gain
    scores = transfer_scores(teacher_id=0.80, teacher_ood=0.60, student_id=0.75, student_ood=0.66)
    assert scores["wrg"] == pytest.approx(-0.05)
    assert scores["aog"] == pytest.approx(0.06)
    assert scores["nts"] == pytest.approx(0.01)


def test_transfer_scores_student_gains_in_distribution():
    # an ID gain is not credited: NTS == AOG
    scores = transfer_scores(teacher_id=0.70, teacher_ood=0.60, student_id=0.78, student_ood=0.55)
    assert scores["wrg"] == pytest.approx(0.08)
    assert scores["aog"] == pytest.approx(-0.05)
    assert scores["nts"] == pytest.approx(-0.05)


def test_transfer_scores_validation():
    with pytest.raises(ValueError, match="student_ood"):
        transfer_scores(0.7, 0.6, 0.8, 60.0)  # a percentage, not a fraction
    with pytest.raises(ValueError, match="teacher_id"):
        transfer_scores(float("nan"), 0.6, 0.8, 0.6)


@settings(max_examples=100, deadline=None)
@given(accuracy, accuracy, accuracy, accuracy)
def test_nts_never_exceeds_aog(t_id, t_ood, s_id, s_ood):
    scores = transfer_scores(t_id, t_ood, s_id, s_ood)
    assert scores["nts"] <= scores["aog"]
    assert scores["nts"] == pytest.approx(scores["aog"] - max(0.0, t_id - s_id))


def test_pgr_worked_examples():
    assert pgr(student=0.75, teacher=0.70, ceiling=0.80) == pytest.approx(0.5)
    assert pgr(student=0.65, teacher=0.70, ceiling=0.80) == pytest.approx(-0.5)
    assert pgr(student=0.85, teacher=0.70, ceiling=0.80) == pytest.approx(1.5)


def test_pgr_is_none_without_a_gap():
    assert pgr(student=0.75, teacher=0.70, ceiling=0.70) is None


# --------------------------------------------------------------------------- bootstrap


def pattern(n_correct: int, n: int) -> np.ndarray:
    return np.array([1.0] * n_correct + [0.0] * (n - n_correct))


def test_bootstrap_ci_contains_point_and_is_reproducible():
    correct = np.concatenate([pattern(70, 100), [0.5, 0.5]])
    ci = bootstrap_accuracy_ci(correct, n_boot=1000, seed=3)
    assert isinstance(ci, Interval)
    assert ci.point == pytest.approx(71 / 102)
    assert ci.lo < ci.point < ci.hi
    assert bootstrap_accuracy_ci(correct, n_boot=1000, seed=3) == ci
    assert bootstrap_accuracy_ci(correct, n_boot=1000, seed=4) != ci


def test_bootstrap_ci_matches_the_normal_approximation():
    # 70 / 100 correct: standard error sqrt(0.7 * 0.3 / 100) = 0.0458 -> 95% about +- 0.09
    ci = bootstrap_accuracy_ci(pattern(70, 100), n_boot=2000, seed=0)
    assert ci.hi - ci.lo == pytest.approx(2 * 1.96 * math.sqrt(0.21 / 100), rel=0.15)


def test_bootstrap_ci_narrows_with_more_pairs():
    small = bootstrap_accuracy_ci(pattern(70, 100), n_boot=500)
    large = bootstrap_accuracy_ci(pattern(1750, 2500), n_boot=500)
    assert small.point == large.point == pytest.approx(0.7)
    assert (large.hi - large.lo) < 0.5 * (small.hi - small.lo)


def test_bootstrap_ci_degenerate_and_validation():
    assert bootstrap_accuracy_ci(np.ones(20), n_boot=100) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="0, 0.5 and 1"):
        bootstrap_accuracy_ci([1.0, 0.3])
    with pytest.raises(ValueError, match="empty"):
        bootstrap_accuracy_ci([])
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_accuracy_ci([1.0, 0.0], alpha=0.0)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_accuracy_ci([1.0, 0.0], n_boot=0)


def transfer_example():
    rng = np.random.default_rng(0)
    teacher_id = (rng.random(200) < 0.70).astype(float)
    student_id = teacher_id.copy()
    student_id[:10] = 1.0  # the student fixes some of the teacher's ID errors ...
    teacher_ood = (rng.random(150) < 0.60).astype(float)
    student_ood = teacher_ood.copy()
    student_ood[:30] = 1.0  # ... and more OOD ones
    return teacher_id, student_id, teacher_ood, student_ood


def test_paired_bootstrap_points_match_transfer_scores():
    t_id, s_id, t_ood, s_ood = transfer_example()
    result = paired_bootstrap_transfer(t_id, s_id, t_ood, s_ood, n_boot=500)
    point = transfer_scores(t_id.mean(), t_ood.mean(), s_id.mean(), s_ood.mean())
    assert set(result) == {"wrg", "aog", "nts"}
    for key in ("wrg", "aog", "nts"):
        assert result[key].point == pytest.approx(point[key])
        assert result[key].lo <= result[key].point <= result[key].hi
    # the student only ever fixes errors, so on every paired resample the gains are >= 0
    assert result["wrg"].lo >= 0 and result["aog"].lo >= 0
    assert paired_bootstrap_transfer(t_id, s_id, t_ood, s_ood, n_boot=500) == result


def test_paired_bootstrap_resamples_teacher_and_student_jointly():
    # identical models: every paired resample has WRG == AOG == 0 (an unpaired one would not)
    t_id, _, t_ood, _ = transfer_example()
    result = paired_bootstrap_transfer(t_id, t_id.copy(), t_ood, t_ood.copy(), n_boot=300)
    for key in ("wrg", "aog", "nts"):
        assert result[key] == (0.0, 0.0, 0.0)


def test_paired_bootstrap_pgr():
    t_id, s_id, t_ood, s_ood = transfer_example()
    ceiling_id = t_id.copy()
    ceiling_id[:20] = 1.0
    result = paired_bootstrap_transfer(
        t_id, s_id, t_ood, s_ood, ceiling_correct_id=ceiling_id, n_boot=500
    )
    expected = pgr(s_id.mean(), t_id.mean(), ceiling_id.mean())
    assert result["pgr"].point == pytest.approx(expected)
    assert result["pgr"].lo <= result["pgr"].point <= result["pgr"].hi
    assert "pgr_ood" not in result
    # ceiling == teacher: PGR undefined -> None, never NaN
    same = paired_bootstrap_transfer(
        t_id, s_id, t_ood, s_ood, ceiling_correct_ood=t_ood.copy(), n_boot=100
    )
    assert same["pgr_ood"] is None


def test_paired_bootstrap_validation():
    t_id, s_id, t_ood, s_ood = transfer_example()
    with pytest.raises(ValueError, match="student_correct_id"):
        paired_bootstrap_transfer(t_id, s_id[:-1], t_ood, s_ood)
    with pytest.raises(ValueError, match="ceiling_correct_ood"):
        paired_bootstrap_transfer(t_id, s_id, t_ood, s_ood, ceiling_correct_ood=t_ood[:5])
    bad = s_ood.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="student_correct_ood"):
        paired_bootstrap_transfer(t_id, s_id, t_ood, bad)


# --------------------------------------------------------------------------- clustered pairs


def clustered(n_prompts: int = 200, per_prompt: int = 5, seed: int = 0):
    """``per_prompt`` pairs per prompt whose correctness is shared within the prompt."""
    rng = np.random.default_rng(seed)
    by_prompt = (rng.random(n_prompts) < 0.7).astype(float)
    return np.repeat(by_prompt, per_prompt), np.repeat(np.arange(n_prompts), per_prompt)


def test_cluster_bootstrap_is_wider_when_pairs_share_a_prompt():
    correct, groups = clustered()
    pair = bootstrap_accuracy_ci(correct, n_boot=2000, seed=0)
    cluster = bootstrap_accuracy_ci(correct, n_boot=2000, seed=0, groups=groups)
    assert bootstrap_kind(groups) == "cluster" and bootstrap_kind(None) == "pair"
    assert cluster.point == pair.point
    # 5 identical pairs per prompt carry the information of one: about sqrt(5) = 2.24x wider
    assert (cluster.hi - cluster.lo) > 1.7 * (pair.hi - pair.lo)
    assert cluster.lo <= cluster.point <= cluster.hi
    # the normal approximation over the 200 prompts
    assert cluster.hi - cluster.lo == pytest.approx(
        2 * 1.96 * math.sqrt(correct.mean() * (1 - correct.mean()) / 200), rel=0.15)


def test_singleton_groups_are_the_pair_bootstrap():
    correct, _ = clustered()
    singletons = np.arange(correct.size)[::-1].astype(str)
    assert bootstrap_kind(singletons) == "pair"
    assert bootstrap_accuracy_ci(correct, n_boot=500, seed=2, groups=singletons) == \
        bootstrap_accuracy_ci(correct, n_boot=500, seed=2)


def test_cluster_bootstrap_matches_resampling_groups_by_hand():
    # unequal groups, labels out of order: draws index the sorted labels, a resample keeps
    # every pair of every drawn group (a ratio of sums, not a mean of group means)
    correct = np.array([1, 1, 1, 0, 0, 1, 0.5, 0, 1, 1], dtype=float)
    groups = np.array(["c", "c", "c", "a", "b", "b", "d", "d", "d", "d"])
    labels = np.unique(groups)
    idx = np.random.default_rng(7).integers(0, labels.size, size=(300, labels.size))
    means = [np.concatenate([correct[groups == labels[k]] for k in row]).mean() for row in idx]
    lo, hi = np.quantile(means, [0.025, 0.975])
    iv = bootstrap_accuracy_ci(correct, n_boot=300, seed=7, groups=groups)
    assert iv.point == pytest.approx(correct.mean())
    assert (iv.lo, iv.hi) == (pytest.approx(lo), pytest.approx(hi))


def test_cluster_bootstrap_validation():
    correct, groups = clustered(20, 3)
    with pytest.raises(ValueError, match="one group id per pair"):
        bootstrap_accuracy_ci(correct, groups=groups[:-1])
    with pytest.raises(ValueError, match="one group"):
        bootstrap_accuracy_ci(correct, groups=np.zeros(correct.size))
    with pytest.raises(ValueError, match="non-finite"):
        bootstrap_accuracy_ci(correct, groups=np.where(groups == 0, np.nan, groups))
    with pytest.raises(ValueError, match="groups_ood"):
        paired_bootstrap_transfer(correct, correct, correct, correct, groups_ood=groups[:5])


def test_paired_transfer_cluster_bootstrap_per_split():
    t_id, groups_id = clustered(150, 4, seed=1)
    s_id = t_id.copy()
    s_id[groups_id < 20] = 1.0  # the student fixes whole prompts
    t_ood, s_ood = t_id[::-1].copy(), s_id[::-1].copy()
    plain = paired_bootstrap_transfer(t_id, s_id, t_ood, s_ood, n_boot=1000)
    # no groups, or singleton groups: exactly today's numbers
    assert paired_bootstrap_transfer(t_id, s_id, t_ood, s_ood, n_boot=1000, groups_id=None,
                                     groups_ood=np.arange(t_ood.size)) == plain
    both = paired_bootstrap_transfer(t_id, s_id, t_ood, s_ood, n_boot=1000, groups_id=groups_id,
                                     groups_ood=groups_id[::-1])
    id_only = paired_bootstrap_transfer(t_id, s_id, t_ood, s_ood, n_boot=1000,
                                        groups_id=groups_id)
    for key in ("wrg", "aog", "nts"):
        assert both[key].point == pytest.approx(plain[key].point)
        assert both[key].lo <= both[key].point <= both[key].hi

    def width(iv):
        return iv.hi - iv.lo

    assert width(both["wrg"]) > 1.5 * width(plain["wrg"])
    assert width(both["aog"]) > 1.5 * width(plain["aog"])
    assert width(id_only["wrg"]) > 1.5 * width(plain["wrg"])
    assert width(id_only["aog"]) < 1.3 * width(plain["aog"])  # OOD still resampled by pairs
    assert both["wrg"].lo >= 0  # paired: teacher and student share the drawn prompts


# --------------------------------------------------------------------------- across seeds


def test_seed_summary_worked_example():
    # mean 2, std 1, t_{0.975, 2} = 4.302653 -> half width 4.302653 / sqrt(3) = 2.484138
    summary = seed_summary([1.0, 2.0, 3.0])
    assert summary.mean == pytest.approx(2.0)
    assert summary.std == pytest.approx(1.0)
    assert summary.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)


def test_seed_summary_single_seed_and_validation():
    mean, std, half = seed_summary([0.7])
    assert mean == 0.7 and math.isnan(std) and math.isnan(half)
    with pytest.raises(ValueError, match="values"):
        seed_summary([])
    with pytest.raises(ValueError, match="values"):
        seed_summary([0.7, float("nan")])


def test_accuracy_by_group_worked_example():
    from anchorviz.analysis.metrics import accuracy_by_group

    correct = [1, 1, 0, 0.5, 1, 0]
    groups = ["marked", "marked", "clean", "clean", "clean", "marked"]
    out = accuracy_by_group(correct, groups)
    assert out["marked"] == (pytest.approx(2 / 3), 3)
    assert out["clean"] == (pytest.approx(1.5 / 3), 3)
    with pytest.raises(ValueError, match="one label per pair"):
        accuracy_by_group(correct, groups[:-1])
    with pytest.raises(ValueError, match="0, 0.5 and 1"):
        accuracy_by_group([0.3] * 6, groups)


# --------------------------------------------------------------------------- properties


correct01 = st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(t_id=correct01, s_id=correct01, t_ood=correct01, s_ood=correct01,
       seed=st.integers(0, 2**16))
def test_property_paired_bootstrap_is_ordered_bounded_and_nts_below_aog(
        t_id: list[float], s_id: list[float], t_ood: list[float], s_ood: list[float],
        seed: int) -> None:
    k, m = min(len(t_id), len(s_id)), min(len(t_ood), len(s_ood))
    res = paired_bootstrap_transfer(t_id[:k], s_id[:k], t_ood[:m], s_ood[:m], n_boot=200,
                                    seed=seed)
    point = transfer_scores(np.mean(t_id[:k]), np.mean(t_ood[:m]), np.mean(s_id[:k]),
                            np.mean(s_ood[:m]))
    for key, lowest in (("wrg", -1), ("aog", -1), ("nts", -2)):  # NTS = AOG - an ID loss
        iv = res[key]
        assert all(math.isfinite(v) and lowest - 1e-12 <= v <= 1 + 1e-12 for v in iv)
        assert iv.lo <= iv.hi and iv.point == pytest.approx(point[key])
    # NTS <= AOG on every resample, hence for every quantile
    assert res["nts"].lo <= res["aog"].lo + 1e-12 and res["nts"].hi <= res["aog"].hi + 1e-12
    assert paired_bootstrap_transfer(t_id[:k], s_id[:k], t_ood[:m], s_ood[:m], n_boot=200,
                                     seed=seed) == res


@settings(max_examples=60, deadline=None)
@given(correct=correct01, n_boot=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_property_bootstrap_ci_is_within_the_observed_range(correct: list[float], n_boot: int,
                                                            seed: int) -> None:
    iv = bootstrap_accuracy_ci(correct, n_boot=n_boot, seed=seed)
    assert iv.point == pytest.approx(np.mean(correct))
    assert min(correct) <= iv.lo <= iv.hi <= max(correct)


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=1,
                      max_size=30), a=st.integers(1, 5), b=st.integers(-10, 10))
def test_property_accuracy_is_invariant_to_increasing_maps_and_antisymmetric(
        pairs: list[tuple[int, int]], a: int, b: int) -> None:
    c = np.array([p[0] for p in pairs], dtype=float)
    r = np.array([p[1] for p in pairs], dtype=float)
    assert pairwise_accuracy(a * c + b, a * r + b) == pairwise_accuracy(c, r)
    np.testing.assert_array_equal(per_pair_correct(c, r) + per_pair_correct(r, c), 1.0)


@settings(max_examples=60, deadline=None)
@given(t=st.floats(0, 1), c=st.floats(0, 1), s=st.floats(0, 1))
def test_property_pgr_is_none_only_without_a_gap_and_finite_otherwise(t: float, c: float,
                                                                      s: float) -> None:
    value = pgr(student=s, teacher=t, ceiling=c)
    if abs(c - t) <= 1e-12:
        assert value is None
    else:
        assert value is not None and math.isfinite(value)
        assert pgr(student=t, teacher=t, ceiling=c) == 0.0
        assert pgr(student=c, teacher=t, ceiling=c) == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-1, 1), min_size=1, max_size=10), confidence=st.floats(0.5, 0.99))
def test_property_seed_summary_mean_inside_range_and_order_free(values: list[float],
                                                               confidence: float) -> None:
    s = seed_summary(values, confidence)
    assert min(values) - 1e-12 <= s.mean <= max(values) + 1e-12
    if len(values) >= 2:
        assert s.std >= 0 and s.half_width >= 0
        assert seed_summary(values[::-1], confidence).half_width == pytest.approx(s.half_width)
    else:
        assert math.isnan(s.std) and math.isnan(s.half_width)
