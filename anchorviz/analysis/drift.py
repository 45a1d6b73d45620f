"""Representation drift between a student and its frozen reference: cosine drift, the drift
table, and how drift relates to OOD gain across runs.

What this module computes (float64, numpy in / numpy out; torch tensors are accepted and
converted):

- :func:`cosine_drift` -- per-row ``1 - cos(s_i, r_i)``.
- :func:`centred_cosine_drift` -- the same about the reference's per-dimension mean (optionally
  standardised by its per-dimension std), so shared huge dimensions do not hide the drift.
- :func:`drift_table` -- a tidy table, one row per (split, layer), with the linear CKA of
  :mod:`anchorviz.analysis.cka` and the cosine drifts.
- :func:`drift_ood_relation` -- how drift relates to OOD gain across runs (the label-free
  estimate of a new domain's gain from its drift is :mod:`anchorviz.analysis.ood_risk`).

Bad input (row counts that differ, NaN / inf, too few rows, a constant representation) raises
:class:`~anchorviz.analysis.drift_inputs.DriftError` -- never a silent NaN.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from anchorviz.analysis.cka import StreamingCKA
from anchorviz.analysis.drift_inputs import (
    CONSTANT_RTOL,
    DriftError,
    DriftValue,
    as_matrix,
    check_rows,
    chunk_rows,
    finite_mean,
    to_numpy,
    where_suffix,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DRIFT_COLUMNS",
    "boot_spearman",
    "centred_cosine_drift",
    "cosine_drift",
    "drift_ood_relation",
    "drift_table",
    "percentile_ci",
    "xy_pairs",
]


# --------------------------------------------------------------------------------------------
# Cosine drift and the drift table
# --------------------------------------------------------------------------------------------


def cosine_drift(
    S: DriftValue,
    R: DriftValue,
    *,
    on_zero: Literal["raise", "orthogonal"] = "raise",
    layer: Any = None,
    split: Any = None,
) -> np.ndarray:
    """Per-row cosine drift ``1 - cos(s_i, r_i)`` between student and reference states.

    Zero vectors: a row where both ``s_i`` and ``r_i`` are zero has drift 0 (identical). A row
    where exactly one is zero has no defined cosine: ``on_zero="raise"`` (default) raises
    :class:`DriftError`; ``on_zero="orthogonal"`` treats the cosine as 0 (drift 1).

    Uncentred: on decoder hidden states a few huge, nearly constant dimensions dominate every
    norm and dot product, so this is close to 0 whatever the other dimensions do; see
    :func:`centred_cosine_drift`.

    Args:
        S: (n, d) student states; R: (n, d) reference states, same rows and width.

    Returns:
        (n,) float64 array in [0, 2].
    """
    where = where_suffix(layer, split)
    s, r = _cosine_inputs(S, R, on_zero, where)
    return _row_cosine_drift(s, r, on_zero, where)


def centred_cosine_drift(
    S: DriftValue,
    R: DriftValue,
    *,
    standardise: bool = False,
    on_zero: Literal["raise", "orthogonal"] = "raise",
    layer: Any = None,
    split: Any = None,
) -> np.ndarray:
    """Per-row reference-centred cosine drift ``1 - cos(s_i - mu, r_i - mu)``.

    ``mu`` is the reference's per-dimension mean over the rows given (one split and layer), and
    the same ``mu`` is subtracted from the student, so a shared offset -- e.g. the few huge,
    nearly constant dimensions of decoder hidden states, which make :func:`cosine_drift` ~0 --
    cancels and the drift reflects how the student moved relative to the reference's spread.
    ``standardise=True`` also divides both by the reference's per-dimension standard deviation
    ``sigma`` (population, ddof 0), so every dimension counts by its reference variability
    rather than its raw scale; a dimension where the reference is constant (``sigma`` at float
    round-off of its mean) is left unscaled.

    Properties: 0 for identical states; unchanged when the same vector is added to every row of
    both; the standardised form is also unchanged by the same per-dimension rescaling of both.
    Zero rows after centring follow ``on_zero`` as in :func:`cosine_drift`.

    Args:
        S: (n, d) student states; R: (n, d) reference states, same rows and width.
        standardise: divide by the reference per-dimension std after centring.
        on_zero: ``"raise"`` or ``"orthogonal"`` (see :func:`cosine_drift`).
        layer, split: optional labels for error messages.

    Returns:
        (n,) float64 array in [0, 2].

    Raises:
        DriftError: rows or widths differ, NaN / inf, no rows, a constant reference (every
            centred reference row is zero), or a zero row under ``on_zero="raise"``.
    """
    where = where_suffix(layer, split)
    s, r = _cosine_inputs(S, R, on_zero, where)
    if r.shape[0] == 0:
        raise DriftError(f"centred cosine drift needs at least 1 row, got 0{where}")
    mu = finite_mean(r, "reference", where)
    # Per-dimension variance about mu, accumulated chunk by chunk in float64.
    ss = np.zeros(r.shape[1])
    step = chunk_rows(r.shape[1])
    for lo in range(0, r.shape[0], step):
        b = np.asarray(r[lo : lo + step], dtype=np.float64) - mu
        ss += np.einsum("ij,ij->j", b, b)
    sd = np.sqrt(ss / r.shape[0])
    var, energy = float(ss.sum()), float(ss.sum() + r.shape[0] * float(mu @ mu))
    if var <= 0.0 or var <= CONSTANT_RTOL * energy:
        raise DriftError(
            f"reference is a constant (zero-variance) representation: its centred rows are all "
            f"zero, so the centred cosine is undefined{where}"
        )
    scale = None
    if standardise:
        # float64 round-off of a constant column is ~1e-16 |mu|; anything that small is "constant".
        floor = 1e-12 * (np.abs(mu) + float(sd.max()))
        scale = np.where(sd > floor, sd, 1.0)
    return _row_cosine_drift(s, r, on_zero, where, shift=mu, scale=scale,
                             kind="reference-centred ")


def _cosine_inputs(
    S: DriftValue, R: DriftValue, on_zero: str, where: str
) -> tuple[np.ndarray, np.ndarray]:
    s = as_matrix(S, "student", where)
    r = as_matrix(R, "reference", where)
    check_rows(s, r, ("student", "reference"), where)
    if s.shape[1] != r.shape[1]:
        raise DriftError(
            f"cosine drift needs the same width, got {s.shape[1]} and {r.shape[1]} features{where}"
        )
    if on_zero not in ("raise", "orthogonal"):
        raise ValueError(f"on_zero must be 'raise' or 'orthogonal', got {on_zero!r}")
    return s, r


def _row_cosine_drift(
    s: np.ndarray,
    r: np.ndarray,
    on_zero: str,
    where: str,
    *,
    shift: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    kind: str = "",
) -> np.ndarray:
    """``1 - cos`` row by row of ``(s - shift) / scale`` and ``(r - shift) / scale``, float64,
    chunk by chunk (bounded memory)."""
    out = np.empty(s.shape[0], dtype=np.float64)
    step = chunk_rows(s.shape[1])
    for lo in range(0, s.shape[0], step):
        a = np.asarray(s[lo : lo + step], dtype=np.float64)
        b = np.asarray(r[lo : lo + step], dtype=np.float64)
        if not np.isfinite(a).all():
            raise DriftError(f"student contains NaN or inf{where}")
        if not np.isfinite(b).all():
            raise DriftError(f"reference contains NaN or inf{where}")
        if shift is not None:
            a = a - shift
            b = b - shift
        if scale is not None:
            a = a / scale
            b = b / scale
        # Scale each row by its max-abs entry first so that squares neither overflow nor underflow.
        sa = np.abs(a).max(axis=1)
        sb = np.abs(b).max(axis=1)
        za, zb = sa == 0.0, sb == 0.0
        a = a / np.where(za, 1.0, sa)[:, None]
        b = b / np.where(zb, 1.0, sb)[:, None]
        na = np.sqrt(np.einsum("ij,ij->i", a, a))
        nb = np.sqrt(np.einsum("ij,ij->i", b, b))
        one = za ^ zb
        if one.any() and on_zero == "raise":
            i = lo + int(np.flatnonzero(one)[0])
            raise DriftError(
                f"row {i}: exactly one of the {kind}student / reference is a zero vector, so its "
                f"cosine is undefined (pass on_zero='orthogonal' to count it as drift 1){where}"
            )
        denom = np.where(za | zb, 1.0, na * nb)
        cos = np.einsum("ij,ij->i", a, b) / denom
        cos = np.where(za & zb, 1.0, np.where(one, 0.0, cos))
        out[lo : lo + step] = 1.0 - np.clip(cos, -1.0, 1.0)
    return out


DRIFT_COLUMNS = [
    "split", "layer", "cka", "cka_debiased", "cosine_mean", "cosine_median", "cosine_p90", "n_rows",
    "cosine_centred_mean", "cosine_centred_median", "cosine_centred_p90",
    "cosine_standardised_mean",
]


def drift_table(
    student: Mapping[str, Mapping[int, DriftValue]],
    reference: Mapping[str, Mapping[int, DriftValue]],
    *,
    splits: list[str] | None = None,
    layers: list[int] | None = None,
    on_zero: Literal["raise", "orthogonal"] = "raise",
) -> pd.DataFrame:
    """Drift of the student from its reference, per (split, layer), as a tidy table.

    Args:
        student: ``student[split][layer]`` is an (n, d) array of pooled student states.
        reference: the same keys, arrays aligned row by row with ``student``.
        splits: splits to include (default: every split of ``student``, in its order).
        layers: layers to include (default: every layer of each split, ascending).
        on_zero: how :func:`cosine_drift` / :func:`centred_cosine_drift` treat a row where one
            vector is zero.

    Returns:
        DataFrame with columns ``split, layer, cka, cka_debiased, cosine_mean, cosine_median,
        cosine_p90, n_rows, cosine_centred_mean, cosine_centred_median, cosine_centred_p90,
        cosine_standardised_mean`` (one row per pair of split and layer). ``cka`` is the biased
        linear CKA (inflated when rows are few relative to the width, e.g. 600 x 384),
        ``cka_debiased`` the unbiased-HSIC one; ``cosine_*`` summarise :func:`cosine_drift`
        (uncentred, ~0 when a few huge dimensions dominate), ``cosine_centred_*``
        :func:`centred_cosine_drift` about the reference mean of that split and layer, and
        ``cosine_standardised_mean`` the same also divided by the reference per-dimension std.
        No NaN: bad input raises :class:`DriftError` naming the split and layer.
    """
    rows = []
    for split in splits if splits is not None else list(student):
        if split not in student:
            raise DriftError(f"split {split!r} not in student states (has {list(student)})")
        if split not in reference:
            raise DriftError(f"split {split!r} not in reference states (has {list(reference)})")
        st, rf = student[split], reference[split]
        for layer in layers if layers is not None else sorted(st):
            if layer not in st or layer not in rf:
                side = "student" if layer not in st else "reference"
                raise DriftError(f"layer {layer} missing from {side} states{where_suffix(None, split)}")
            where = where_suffix(layer, split)
            s = as_matrix(st[layer], "student", where)
            r = as_matrix(rf[layer], "reference", where)
            check_rows(s, r, ("student", "reference"), where)
            n = s.shape[0]
            if n < 4:
                raise DriftError(f"debiased CKA needs at least 4 rows, got {n}{where}")
            acc = StreamingCKA(layer=layer, split=split)
            acc.update(s, r, shift=(finite_mean(s, "student", where),
                                    finite_mean(r, "reference", where)))
            cos = cosine_drift(s, r, on_zero=on_zero, layer=layer, split=split)
            cen = centred_cosine_drift(s, r, on_zero=on_zero, layer=layer, split=split)
            std = centred_cosine_drift(s, r, standardise=True, on_zero=on_zero, layer=layer,
                                       split=split)
            rows.append({
                "split": split,
                "layer": layer,
                "cka": acc.compute(debiased=False),
                "cka_debiased": acc.compute(debiased=True),
                "cosine_mean": float(cos.mean()),
                "cosine_median": float(np.median(cos)),
                "cosine_p90": float(np.quantile(cos, 0.9)),
                "n_rows": n,
                "cosine_centred_mean": float(cen.mean()),
                "cosine_centred_median": float(np.median(cen)),
                "cosine_centred_p90": float(np.quantile(cen, 0.9)),
                "cosine_standardised_mean": float(std.mean()),
            })
            logger.debug("drift %s layer %s: %s", split, layer, rows[-1])
    return pd.DataFrame(rows, columns=DRIFT_COLUMNS)


# --------------------------------------------------------------------------------------------
# Drift vs OOD gain
# --------------------------------------------------------------------------------------------


def xy_pairs(x: Any, y: Any, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Two finite 1-D float64 columns of equal length (an (n, 1) ``x`` is flattened); ``names``
    label the error."""
    a = np.asarray(to_numpy(x), dtype=np.float64)
    b = np.asarray(to_numpy(y), dtype=np.float64)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1 or b.ndim != 1:
        raise DriftError(f"{names[0]} and {names[1]} must be 1-D, got shapes {a.shape}, {b.shape}")
    if a.shape != b.shape:
        raise DriftError(f"{names[0]} and {names[1]} differ in length: {a.size} vs {b.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise DriftError(f"{names[0]} / {names[1]} contain NaN or inf")
    return a, b


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r per row of (B, n) arrays; NaN where a row is constant."""
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def boot_spearman(
    x: np.ndarray, y: np.ndarray, n_boot: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap (resampling pairs) Spearman r and the resample indices; NaN for degenerate ones."""
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    rx = stats.rankdata(x[idx], axis=1)
    ry = stats.rankdata(y[idx], axis=1)
    return _rowwise_pearson(rx, ry), idx


def percentile_ci(values: np.ndarray, level: float) -> tuple[float, float]:
    """Central percentile interval of the finite ``values``; (-1, 1) when there are none."""
    ok = values[np.isfinite(values)]
    if ok.size == 0:
        return (-1.0, 1.0)
    lo, hi = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


def drift_ood_relation(
    runs: pd.DataFrame,
    drift_col: str = "cosine_mean",
    gain_col: str = "aog",
    n_boot: int = 2000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> dict[str, Any]:
    """How drift relates to OOD gain across runs (e.g. across lambdas, layers and methods).

    Args:
        runs: one row per run (or per run x target domain) with a drift and a gain column.
        drift_col: column with the drift measure (e.g. ``cosine_mean``, ``cka``).
        gain_col: column with the OOD gain (e.g. ``aog``).
        n_boot: bootstrap resamples of the runs for the Spearman interval.
        seed: seed of the resampling.
        ci_level: coverage of the percentile interval.

    Returns:
        dict with ``n``, ``spearman``, ``spearman_p``, ``spearman_ci`` (lo, hi), ``ci_level``,
        ``n_boot_valid`` (resamples with a defined correlation), ``pearson``, ``pearson_p``,
        ``slope``, ``intercept`` (least-squares ``gain ~ intercept + slope * drift``),
        ``drift_col``, ``gain_col``.

    Raises:
        DriftError: a column missing, non-finite values, fewer than 3 runs, or a constant column.
    """
    for col in (drift_col, gain_col):
        if col not in runs.columns:
            raise DriftError(f"column {col!r} not in runs (has {list(runs.columns)})")
    x, y = xy_pairs(runs[drift_col].to_numpy(), runs[gain_col].to_numpy(), (drift_col, gain_col))
    n = x.size
    if n < 3:
        raise DriftError(f"need at least 3 runs to relate {drift_col} to {gain_col}, got {n}")
    for v, col in ((x, drift_col), (y, gain_col)):
        if np.ptp(v) == 0.0:
            raise DriftError(f"column {col!r} is constant across runs; no correlation is defined")
    sp = stats.spearmanr(x, y)
    pe = stats.pearsonr(x, y)
    fit = stats.linregress(x, y)
    boot, _ = boot_spearman(x, y, n_boot, np.random.default_rng(seed))
    return {
        "n": int(n),
        "spearman": float(sp.statistic),
        "spearman_p": float(sp.pvalue),
        "spearman_ci": percentile_ci(boot, ci_level),
        "ci_level": ci_level,
        "n_boot_valid": int(np.isfinite(boot).sum()),
        "pearson": float(pe.statistic),
        "pearson_p": float(pe.pvalue),
        "slope": float(fit.slope),
        "intercept": float(fit.intercept),
        "drift_col": drift_col,
        "gain_col": gain_col,
    }
