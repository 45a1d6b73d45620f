"""Tests for anchorviz.analysis.cka (feature-space, Gram, streaming CKA),
anchorviz.analysis.drift (cosine drift, drift tables, the drift-OOD relation) and
anchorviz.analysis.ood_risk (the label-free OOD risk estimator)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest
import torch
from builders import related_states, with_value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import ortho_group

import anchorviz.analysis.drift as drift_mod
from anchorviz.analysis.cka import StreamingCKA, gram_linear_cka, linear_cka
from anchorviz.analysis.drift import cosine_drift, drift_ood_relation, drift_table
from anchorviz.analysis.drift_inputs import DriftError
from anchorviz.analysis.ood_risk import OODRiskEstimator


def _pair(n: int = 120, dx: int = 12, dy: int = 9, noise: float = 1.5, seed: int = 0):
    """X and a noisy linear image of it, with offsets so that centring matters."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dx)) * rng.uniform(0.5, 3.0, size=dx) + 4.0
    y = x @ rng.normal(size=(dx, dy)) + noise * rng.normal(size=(n, dy)) - 7.0
    return x, y


# --- CKA properties --------------------------------------------------------------------------


@pytest.mark.parametrize("debiased", [False, True])
def test_cka_of_identical_representations_is_one(debiased):
    x, _ = _pair()
    assert linear_cka(x, x, debiased) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("debiased", [False, True])
def test_cka_invariant_to_orthogonal_maps_and_isotropic_scaling(debiased):
    x, y = _pair()
    q = ortho_group.rvs(x.shape[1], random_state=1)
    base = linear_cka(x, y, debiased)
    assert linear_cka(x @ q, y, debiased) == pytest.approx(base, abs=1e-10)
    assert linear_cka(3.7 * x, 0.01 * y, debiased) == pytest.approx(base, abs=1e-10)
    assert linear_cka(x + 100.0, y, debiased) == pytest.approx(base, abs=1e-10)


def test_cka_not_invariant_to_general_invertible_map():
    x, y = _pair(dx=8)
    # Well-conditioned enough to be invertible, anisotropic enough to change CKA.
    a = np.diag(np.geomspace(0.05, 20.0, 8)) @ ortho_group.rvs(8, random_state=2)
    assert abs(np.linalg.det(a)) > 1e-6
    base = linear_cka(x, y)
    moved = linear_cka(x @ a, y)
    assert abs(moved - base) > 0.1


@pytest.mark.parametrize("debiased", [False, True])
def test_feature_gram_and_streaming_agree(debiased):
    x, y = _pair(n=90, dx=15, dy=6)
    feat = linear_cka(x, y, debiased)
    gram = gram_linear_cka(x, y, debiased)
    acc = StreamingCKA()
    for lo in range(0, 90, 13):
        acc.update(x[lo : lo + 13], y[lo : lo + 13])
    # Two accumulators with different shifts (their first batches differ), then merged.
    a, b = StreamingCKA(), StreamingCKA()
    a.update(x[:30], y[:30])
    b.update(x[60:], y[60:]).update(x[30:60], y[30:60])
    a.merge(b)
    assert acc.n_ == a.n_ == 90
    assert feat == pytest.approx(gram, abs=1e-6)
    assert acc.compute(debiased) == pytest.approx(gram, abs=1e-6)
    assert a.compute(debiased) == pytest.approx(gram, abs=1e-6)


def test_streaming_precision_with_large_offset():
    x, y = _pair(n=400, dx=6, dy=5)
    x, y = x + 1e4, y - 3e3
    acc = StreamingCKA()
    for lo in range(0, 400, 50):
        acc.update(x[lo : lo + 50].astype(np.float32), y[lo : lo + 50].astype(np.float32))
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    for debiased in (False, True):
        assert acc.compute(debiased) == pytest.approx(gram_linear_cka(x32, y32, debiased), abs=1e-6)


def test_gram_cka_in_float32_matches_float64():
    x, y = _pair(n=200, dx=10, dy=7)
    ref = gram_linear_cka(x, y)
    assert gram_linear_cka(x, y, dtype="float32") == pytest.approx(ref, abs=1e-5)
    assert gram_linear_cka(x, y, True, dtype="float32") == pytest.approx(
        gram_linear_cka(x, y, True), abs=1e-4)
    with pytest.raises(ValueError, match="dtype"):
        gram_linear_cka(x, y, dtype="float16")


def test_debiased_cka_near_zero_for_independent_features():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 50)), rng.normal(size=(200, 50))
    assert abs(linear_cka(x, y, debiased=True)) < 0.05
    assert linear_cka(x, y) > 0.15


def test_torch_tensors_accepted():
    x, y = _pair()
    expected = linear_cka(x, y)
    assert linear_cka(torch.tensor(x), torch.tensor(y)) == pytest.approx(expected, abs=1e-12)
    got = linear_cka(torch.tensor(x).to(torch.bfloat16), torch.tensor(y).to(torch.bfloat16))
    assert got == pytest.approx(expected, abs=0.02)


# --- cosine drift ------------------------------------------------------------------------------


def test_cosine_drift_values():
    x, _ = _pair(dy=12)
    assert np.all(cosine_drift(x, x) < 1e-12)
    assert np.allclose(cosine_drift(x, 5.0 * x), 0.0, atol=1e-12)
    assert np.allclose(cosine_drift(x, -x), 2.0)
    s = np.array([[1.0, 0.0], [0.0, 0.0], [1e-200, 1e-200], [3e200, 0.0]])
    r = np.array([[0.0, 2.0], [0.0, 0.0], [1e-200, 1e-200], [1e200, 1e200]])
    d = cosine_drift(s, r)
    assert np.allclose(d, [1.0, 0.0, 0.0, 1 - np.sqrt(0.5)])
    assert np.isfinite(d).all()


def test_cosine_drift_one_zero_vector():
    s = np.array([[1.0, 2.0], [0.0, 0.0]])
    r = np.array([[1.0, 2.0], [3.0, 1.0]])
    with pytest.raises(DriftError, match=r"row 1: exactly one .* zero vector.*layer 4"):
        cosine_drift(s, r, layer=4)
    assert np.allclose(cosine_drift(s, r, on_zero="orthogonal"), [0.0, 1.0])


# --- reference-centred cosine drift ------------------------------------------------------------


def _offset_dominated(n: int, d: int, offset: float, seed: int):
    """Reference: ``d`` (even) N(0, 1) dimensions plus one huge constant dimension ``offset``,
    like the few massive dimensions of decoder hidden states. Student: the same rows rotated by
    90 degrees in each plane (2j, 2j+1) of the ordinary dimensions, the offset kept. The
    ordinary dimensions have mean 0, so the rotation also maps the centred rows to orthogonal
    ones."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, d))
    z -= z.mean(axis=0)
    rot = np.empty_like(z)
    rot[:, 0::2], rot[:, 1::2] = -z[:, 1::2], z[:, 0::2]
    col = np.full((n, 1), offset)
    return np.hstack([rot, col]), np.hstack([z, col])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(8, 120), half=st.integers(2, 12), offset=st.floats(300.0, 1e4),
       seed=st.integers(0, 2**16))
def test_centred_drift_sees_what_a_huge_shared_offset_hides(n, half, offset, seed):
    stu, ref = _offset_dominated(n, 2 * half, offset, seed)
    # Uncentred, the offset dominates every norm: the rotation is almost invisible ...
    assert cosine_drift(stu, ref).mean() < 0.01
    # ... centred on the reference mean, the rows are orthogonal: drift 1 exactly.
    cen = drift_mod.centred_cosine_drift(stu, ref)
    np.testing.assert_allclose(cen, 1.0, atol=1e-9)
    table = drift_table({"s": {0: stu}}, {"s": {0: ref}})
    assert table["cosine_mean"].iloc[0] < 0.01
    assert table["cosine_centred_mean"].iloc[0] == pytest.approx(1.0, abs=1e-9)
    assert table["cosine_centred_median"].iloc[0] == pytest.approx(1.0, abs=1e-9)
    assert table["cosine_standardised_mean"].iloc[0] > 0.5


def test_centred_drift_zero_for_identical_and_invariant_to_a_shared_shift():
    x, _ = _pair(dy=12)
    rng = np.random.default_rng(5)
    y = x + 0.7 * rng.normal(size=x.shape)
    for standardise in (False, True):
        f = functools.partial(drift_mod.centred_cosine_drift, standardise=standardise)
        assert np.all(f(x, x) < 1e-12)
        assert np.all(f(x.astype(np.float32), x.astype(np.float32)) < 1e-12)
        base = f(y, x)
        assert base.shape == (x.shape[0],) and base.dtype == np.float64
        assert base.mean() > 0.05
        shift = rng.normal(size=x.shape[1]) * 1e3
        np.testing.assert_allclose(f(y + shift, x + shift), base, atol=1e-9)
        np.testing.assert_allclose(f(torch.tensor(y), torch.tensor(x)), base, atol=1e-12)
    # The standardised form also ignores the same per-dimension rescaling of both.
    scale = np.geomspace(1e-3, 1e3, x.shape[1])
    np.testing.assert_allclose(
        drift_mod.centred_cosine_drift(y * scale, x * scale, standardise=True),
        drift_mod.centred_cosine_drift(y, x, standardise=True), atol=1e-9)


def test_standardised_drift_sees_what_a_high_variance_shared_dimension_hides():
    stu, ref = _offset_dominated(400, 8, 0.0, seed=2)
    loud = np.random.default_rng(3).normal(size=(400, 1)) * 1e3  # varies, identical in both
    stu, ref = np.hstack([stu, loud]), np.hstack([ref, loud])
    assert drift_mod.centred_cosine_drift(stu, ref).mean() < 0.01
    assert drift_mod.centred_cosine_drift(stu, ref, standardise=True).mean() > 0.5


def test_centred_drift_errors():
    x, y = _pair(dy=12)
    const = np.ones((10, 4))
    with pytest.raises(DriftError, match=r"reference is a constant .*layer 3"):
        drift_mod.centred_cosine_drift(np.arange(40.0).reshape(10, 4), const, layer=3)
    with pytest.raises(DriftError, match=r"same width"):
        drift_mod.centred_cosine_drift(x, y[:, :5])
    bad = x.copy()
    bad[3, 1] = np.inf
    with pytest.raises(DriftError, match=r"student contains NaN or inf.*split 'a'"):
        drift_mod.centred_cosine_drift(bad, x, split="a")
    with pytest.raises(DriftError, match=r"reference contains NaN or inf"):
        drift_mod.centred_cosine_drift(x, bad)
    # A student row equal to the reference mean is a zero vector after centring.
    ref = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]]) + 5.0
    stu = ref.copy()
    stu[1] = 5.0
    with pytest.raises(DriftError, match=r"row 1: exactly one of the reference-centred"):
        drift_mod.centred_cosine_drift(stu, ref)
    d = drift_mod.centred_cosine_drift(stu, ref, on_zero="orthogonal")
    np.testing.assert_allclose(d, [0.0, 1.0, 0.0, 0.0], atol=1e-12)


def test_drift_table_columns_match_the_functions():
    x, y = _pair(n=60, dy=12)
    table = drift_table({"t": {4: y}}, {"t": {4: x}})
    row = table.iloc[0]
    assert row["cka"] == pytest.approx(linear_cka(y, x), abs=1e-12)
    assert row["cka_debiased"] == pytest.approx(linear_cka(y, x, debiased=True), abs=1e-12)
    assert row["cka_debiased"] < row["cka"]
    cen = drift_mod.centred_cosine_drift(y, x)
    assert row["cosine_centred_mean"] == pytest.approx(cen.mean(), abs=1e-12)
    assert row["cosine_centred_median"] == pytest.approx(np.median(cen), abs=1e-12)
    assert row["cosine_centred_p90"] == pytest.approx(np.quantile(cen, 0.9), abs=1e-12)
    std = drift_mod.centred_cosine_drift(y, x, standardise=True)
    assert row["cosine_standardised_mean"] == pytest.approx(std.mean(), abs=1e-12)
    assert row["cosine_mean"] == pytest.approx(cosine_drift(y, x).mean(), abs=1e-12)


# --- drift table -------------------------------------------------------------------------------


def test_drift_table_on_synthetic_states():
    rng = np.random.default_rng(3)
    ref, stu = {}, {}
    for split, n in (("source_test", 80), ("target_test", 60)):
        ref[split] = {layer: rng.normal(size=(n, 16)) for layer in (0, 1, 2)}
        # Layer 0 unchanged, deeper layers drift more.
        stu[split] = {
            layer: ref[split][layer] + layer * 0.8 * rng.normal(size=(n, 16)) for layer in (0, 1, 2)
        }
    table = drift_table(stu, ref)
    assert list(table.columns) == [
        "split", "layer", "cka", "cka_debiased", "cosine_mean", "cosine_median", "cosine_p90",
        "n_rows", "cosine_centred_mean", "cosine_centred_median", "cosine_centred_p90",
        "cosine_standardised_mean",
    ]
    assert len(table) == 6
    assert not table.isna().any().any()
    assert table["n_rows"].tolist() == [80, 80, 80, 60, 60, 60]
    for _, part in table.groupby("split"):
        part = part.sort_values("layer")
        assert part["cka"].iloc[0] == pytest.approx(1.0)
        assert part["cosine_mean"].iloc[0] == pytest.approx(0.0, abs=1e-12)
        assert part["cosine_centred_mean"].iloc[0] == pytest.approx(0.0, abs=1e-12)
        assert part["cosine_standardised_mean"].iloc[0] == pytest.approx(0.0, abs=1e-12)
        assert part["cka"].is_monotonic_decreasing
        assert part["cka_debiased"].is_monotonic_decreasing
        assert part["cosine_mean"].is_monotonic_increasing
        assert part["cosine_centred_mean"].is_monotonic_increasing
        assert (part["cosine_p90"] >= part["cosine_median"]).all()
        assert (part["cosine_centred_p90"] >= part["cosine_centred_median"]).all()
    sub = drift_table(stu, ref, splits=["target_test"], layers=[2])
    assert sub[["split", "layer"]].values.tolist() == [["target_test", 2]]


def test_drift_table_errors_name_split_and_layer():
    rng = np.random.default_rng(0)
    good = rng.normal(size=(10, 4))
    with pytest.raises(DriftError, match=r"10 and 9 rows.*layer 3, split 'ood'"):
        drift_table({"ood": {3: good}}, {"ood": {3: good[:9]}})
    bad = good.copy()
    bad[2, 1] = np.nan
    with pytest.raises(DriftError, match=r"student contains NaN or inf.*layer 1, split 'id'"):
        drift_table({"id": {1: bad}}, {"id": {1: good}})
    with pytest.raises(DriftError, match=r"at least 4 rows, got 3.*layer 0, split 'id'"):
        drift_table({"id": {0: good[:3]}}, {"id": {0: good[:3]}})
    with pytest.raises(DriftError, match=r"split 'x' not in reference"):
        drift_table({"x": {0: good}}, {"id": {0: good}})
    with pytest.raises(DriftError, match=r"layer 5 missing from reference"):
        drift_table({"id": {5: good}}, {"id": {0: good}})


# --- input errors ---------------------------------------------------------------------------------


def test_cka_errors():
    x, y = _pair(n=20)
    with pytest.raises(DriftError, match=r"20 and 19 rows.*layer 7, split 'src'"):
        linear_cka(x, y[:19], layer=7, split="src")
    with pytest.raises(DriftError, match=r"needs at least 2 rows, got 1"):
        linear_cka(x[:1], y[:1])
    with pytest.raises(DriftError, match=r"debiased CKA needs at least 4 rows, got 3"):
        linear_cka(x[:3], y[:3], debiased=True)
    assert np.isfinite(linear_cka(x[:3], y[:3]))
    for bad_value in (np.nan, np.inf):
        bad = x.copy()
        bad[4, 2] = bad_value
        with pytest.raises(DriftError, match=r"X contains NaN or inf.*layer 2"):
            linear_cka(bad, y, layer=2)
    const = np.full((20, 5), 0.1, dtype=np.float32)
    with pytest.raises(DriftError, match=r"Y is a constant \(zero-variance\).*split 'tgt'"):
        linear_cka(x, const, split="tgt")
    with pytest.raises(DriftError, match=r"constant"):
        linear_cka(const, y, debiased=True)
    with pytest.raises(DriftError, match=r"must be 2-D"):
        linear_cka(x[:, 0], y)
    acc = StreamingCKA(layer=1).update(x[:5], y[:5])
    with pytest.raises(DriftError, match=r"batch has 3 / 9 features.*layer 1"):
        acc.update(x[5:, :3], y[5:])
    with pytest.raises(DriftError, match=r"at least 2 rows, got 0"):
        StreamingCKA().compute()


# --- drift vs OOD gain ---------------------------------------------------------------------------


def _runs(n: int, rho_noise: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    drift = rng.uniform(0.0, 0.4, size=n)
    aog = 5.0 - 20.0 * drift + rho_noise * rng.normal(size=n)
    return pd.DataFrame({"cosine_mean": drift, "aog": aog, "lam": np.arange(n)})


def test_drift_ood_relation_recovers_known_relation():
    runs = _runs(30, rho_noise=0.5, seed=0)
    rel = drift_ood_relation(runs, n_boot=500)
    assert rel["n"] == 30
    assert rel["spearman"] < -0.8
    lo, hi = rel["spearman_ci"]
    assert lo <= rel["spearman"] <= hi < 0
    assert rel["pearson"] < -0.8
    assert rel["slope"] == pytest.approx(-20.0, rel=0.15)
    assert rel["intercept"] == pytest.approx(5.0, abs=0.5)
    assert rel == drift_ood_relation(runs, n_boot=500)  # seeded
    with pytest.raises(DriftError, match="constant"):
        drift_ood_relation(runs.assign(aog=1.0))
    with pytest.raises(DriftError, match="'missing' not in runs"):
        drift_ood_relation(runs, drift_col="missing")


def test_ood_risk_estimator_reliable_on_linear_relation():
    runs = _runs(25, rho_noise=0.5, seed=1)
    est = OODRiskEstimator(n_boot=500).fit(runs["cosine_mean"], runs["aog"])
    assert est.reliable_ and est.reason_ == ""
    assert est.slope_ == pytest.approx(-20.0, rel=0.15)
    assert est.spearman_ < -0.8 and est.ci_[1] < 0
    pred = est.predict(0.2)
    assert pred.status == "ok" and pred.reliable
    assert pred.lower < pred.gain < pred.upper
    assert pred.gain == pytest.approx(1.0, abs=0.5)
    # The interval covers new observations from the same process most of the time.
    new = _runs(200, rho_noise=0.5, seed=9)
    many = est.predict(new["cosine_mean"].to_numpy())
    assert many.gain.shape == (200,)
    inside = (new["aog"] >= many.lower) & (new["aog"] <= many.upper)
    assert inside.mean() > 0.8


def test_ood_risk_estimator_unreliable_on_random_data():
    rng = np.random.default_rng(4)
    est = OODRiskEstimator(n_boot=500).fit(rng.normal(size=12), rng.normal(size=12))
    assert est.reliable_ is False
    assert "includes 0" in est.reason_
    pred = est.predict(0.3)
    assert pred.gain is None and pred.lower is None and not pred.reliable
    assert pred.status.startswith("relation too weak to predict: ")
    few = OODRiskEstimator(n_boot=200).fit([0.1, 0.2, 0.3], [3.0, 2.0, 1.0])
    assert few.reliable_ is False and "only 3 runs" in few.reason_
    with pytest.raises(DriftError, match="differ in length"):
        OODRiskEstimator().fit([0.1, 0.2], [1.0])
    with pytest.raises(RuntimeError, match="not fitted"):
        OODRiskEstimator().predict(0.1)


# --------------------------------------------------------------------------- drift: bad input


X, Y = related_states()

DRIFT_CASES = [
    ("cka +inf", lambda: linear_cka(with_value(X, np.inf), Y), r"X contains NaN or inf"),
    ("cka -inf in Y", lambda: linear_cka(X, with_value(Y, -np.inf), split="t"),
     r"Y contains NaN or inf \(split 't'\)"),
    ("cka torch NaN", lambda: linear_cka(torch.tensor(with_value(X, np.nan)), torch.tensor(Y)),
     "X contains NaN or inf"),
    ("cka strings", lambda: linear_cka(np.array([["a"] * 3] * 4), Y[:4]), "real-valued array"),
    ("cka objects", lambda: linear_cka(np.array([[1, None]] * 4, dtype=object), Y[:4, :2]),
     "real-valued array, got dtype object"),
    ("cka 3-D", lambda: linear_cka(X.reshape(4, 5, 5), Y[:4]), "must be 2-D"),
    ("cka no features", lambda: linear_cka(np.zeros((5, 0)), Y[:5]), "has no features"),
    ("cka zero rows", lambda: linear_cka(np.zeros((0, 5)), np.zeros((0, 5))),
     "needs at least 2 rows, got 0"),
    ("cka huge", lambda: linear_cka(X * 1e200, Y), r"(could not be computed accurately|constant)"),
    ("cka huge debiased", lambda: linear_cka(X * 1e200, Y, debiased=True),
     r"(could not be computed accurately|not positive|constant)"),
    ("streaming inf", lambda: StreamingCKA(layer=4).update(with_value(X, np.inf), Y),
     r"X contains NaN or inf \(layer 4\)"),
    ("cosine nan", lambda: cosine_drift(with_value(X, np.nan), Y, layer=2),
     r"student contains NaN or inf \(layer 2\)"),
    ("cosine inf ref", lambda: cosine_drift(X, with_value(Y, np.inf)), r"reference contains NaN or inf"),
    ("cosine rows", lambda: cosine_drift(X, Y[:5]), r"must align row by row, got 20 and 5 rows"),
    ("table inf", lambda: drift_table({"tgt": {2: X}}, {"tgt": {2: with_value(Y, np.inf)}}),
     r"reference contains NaN or inf \(layer 2, split 'tgt'\)"),
    ("table nan student", lambda: drift_table({"src": {0: with_value(X, np.nan)}}, {"src": {0: Y}}),
     r"student contains NaN or inf \(layer 0, split 'src'\)"),
]


@pytest.mark.parametrize("name, call, match", DRIFT_CASES, ids=[c[0] for c in DRIFT_CASES])
def test_drift_measures_raise_instead_of_returning_nan(name: str, call, match: str) -> None:
    with np.errstate(all="ignore"), pytest.raises(DriftError, match=match):
        call()


def _relation_runs(n: int = 6) -> pd.DataFrame:
    return pd.DataFrame({"cosine_mean": np.linspace(0.1, 0.5, n), "aog": np.linspace(0.05, -0.05, n)})


RELATION_CASES = [
    ("nan drift", lambda: drift_ood_relation(_relation_runs().assign(cosine_mean=[0.1, np.nan, .2, .3, .4,
                                                                          .5])),
     "contain NaN or inf"),
    ("inf gain", lambda: drift_ood_relation(_relation_runs().assign(aog=[0, 1, np.inf, 2, 3, 4])),
     "contain NaN or inf"),
    ("missing column", lambda: drift_ood_relation(_relation_runs(), drift_col="cka"),
     r"column 'cka' not in runs"),
    ("two runs", lambda: drift_ood_relation(_relation_runs(2)), "need at least 3 runs"),
    ("constant", lambda: drift_ood_relation(_relation_runs().assign(aog=0.0)), "is constant across runs"),
    ("fit nan", lambda: OODRiskEstimator().fit([0.1, np.nan, 0.3], [1, 2, 3]), "contain NaN or inf"),
    ("fit lengths", lambda: OODRiskEstimator().fit([0.1, 0.2, 0.3], [1, 2]), "differ in length"),
    ("fit one run", lambda: OODRiskEstimator().fit([0.1], [1.0]), "need at least 2 runs"),
    ("predict inf", lambda: OODRiskEstimator(n_boot=50).fit([.1, .2, .3, .4], [4, 3, 2, 1])
     .predict(np.inf), "drift_value contains NaN or inf"),
]


@pytest.mark.parametrize("name, call, match", RELATION_CASES, ids=[c[0] for c in RELATION_CASES])
def test_drift_ood_relation_bad_input(name: str, call, match: str) -> None:
    with pytest.raises(DriftError, match=match):
        call()


def test_ood_risk_predict_before_fit_and_unreliable_gives_none_not_nan() -> None:
    with pytest.raises(RuntimeError, match="not fitted; call fit"):
        OODRiskEstimator().predict(0.1)
    weak = OODRiskEstimator(n_boot=100, seed=0).fit([0.1, 0.2, 0.3], [1.0, -1.0, 0.5])
    pred = weak.predict(0.2)
    assert not pred.reliable and pred.gain is None and "too weak" in pred.status


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 12), d=st.integers(1, 4), log_scale=st.integers(-300, 300),
       seed=st.integers(0, 2**16), debiased=st.booleans())
def test_cka_is_finite_in_range_or_an_error_at_any_scale(n: int, d: int, log_scale: int,
                                                         seed: int, debiased: bool) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * 10.0 ** log_scale
    y = rng.normal(size=(n, d))
    try:
        with np.errstate(all="ignore"):
            value = linear_cka(x, y, debiased=debiased)
    except DriftError:
        return
    assert math.isfinite(value)
    if not debiased:
        assert -1e-9 <= value <= 1 + 1e-9
