"""Representation drift between a student and its frozen reference.

What this module computes (all in float64, numpy in / numpy out; torch tensors are accepted
and converted):

- :func:`linear_cka` -- linear CKA (Kornblith et al. 2019) in its *feature-space* form
  ``||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)``: O(n d^2) time and O(d^2) memory, never
  an n x n Gram matrix, so it scales to millions of rows. ``debiased=True`` uses the unbiased
  HSIC estimator (Song et al. 2012; "debiased CKA", Nguyen et al. 2021), rewritten in feature
  space (derivation below).
- :class:`StreamingCKA` -- the same quantities from sufficient statistics accumulated batch by
  batch (``update`` / ``merge`` / ``compute``), bounded memory.
- :func:`gram_linear_cka` -- the textbook n x n Gram-matrix implementation, kept as a reference
  for tests and the benchmark only.
- :func:`cosine_drift` -- per-row ``1 - cos(s_i, r_i)``.
- :func:`centred_cosine_drift` -- the same about the reference's per-dimension mean (optionally
  standardised by its per-dimension std), so shared huge dimensions do not hide the drift.
- :func:`drift_table` -- a tidy table, one row per (split, layer).
- :func:`drift_ood_relation` and :class:`OODRiskEstimator` -- how drift relates to OOD gain
  across runs, and a label-free estimate of the OOD gain of a new domain from its drift.

Bad input (row counts that differ, NaN / inf, too few rows, a constant representation) raises
:class:`DriftError` -- never a silent NaN.

Feature-space form of the unbiased HSIC
---------------------------------------
With Gram matrices ``K = X X^T`` and ``L = Y Y^T`` and ``K~``, ``L~`` the same with their
diagonals set to zero, the unbiased estimator is::

    HSIC_1 = [tr(K~ L~) + (1^T K~ 1)(1^T L~ 1) / ((n-1)(n-2)) - 2/(n-2) 1^T K~ L~ 1] / (n(n-3))

Write ``p_i = ||x_i||^2`` and ``q_i = ||y_i||^2`` (the Gram diagonals) and ``a = X^T 1``,
``b = Y^T 1`` (column sums). Then, without any n x n matrix::

    tr(K~ L~)    = ||X^T Y||_F^2 - sum_i p_i q_i
    1^T K~ 1     = ||a||^2 - sum_i p_i
    1^T K~ L~ 1  = (X a - p)^T (Y b - q)
                 = a^T (X^T Y) b - a^T (X^T q) - b^T (Y^T p) + sum_i p_i q_i

so the statistics ``n, X^T 1, X^T X, X^T Y, sum p, sum p^2, sum p q, X^T p, X^T q`` (and their
``Y`` counterparts) determine both the biased and the unbiased CKA. HSIC_1 is invariant to a
constant shift of the rows, so the statistics are accumulated about a shift (the exact mean for
:func:`linear_cka`, the first batch's mean for :class:`StreamingCKA`) to avoid cancellation,
and re-expressed about the exact mean before evaluation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

logger = logging.getLogger(__name__)

__all__ = [
    "DriftError",
    "OODRiskEstimator",
    "OODRiskPrediction",
    "StreamingCKA",
    "centred_cosine_drift",
    "cosine_drift",
    "drift_ood_relation",
    "drift_table",
    "gram_linear_cka",
    "linear_cka",
]

# Rows converted to float64 at a time: about 64 MiB per side per chunk.
_CHUNK_BYTES = 64 * 2**20
# Centred variance below this fraction of the raw energy sum ||x_i||^2 counts as constant.
# Identical rows leave ~eps^2 ~ 5e-32 after centring in float64; real data is far above.
_CONSTANT_RTOL = 1e-24

DriftValue = Any  # numpy array or torch tensor of shape (n, d)


class DriftError(ValueError):
    """Input that drift measures cannot be computed on (the message says which and where)."""


def _where(layer: Any = None, split: Any = None) -> str:
    parts = []
    if layer is not None:
        parts.append(f"layer {layer}")
    if split is not None:
        parts.append(f"split {split!r}")
    return f" ({', '.join(parts)})" if parts else ""


def _to_numpy(x: DriftValue) -> np.ndarray:
    """numpy view of ``x``; torch tensors are detached and moved to CPU (bf16 -> float32)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor without importing torch
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            t = t.float()
        return t.numpy()
    return np.asarray(x)


def _as_matrix(x: DriftValue, name: str, where: str) -> np.ndarray:
    """Validate that ``x`` is a real 2-D (n, d) array with d >= 1 (finiteness is checked later)."""
    arr = _to_numpy(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise DriftError(f"{name} must be a real-valued array, got dtype {arr.dtype}{where}")
    if arr.ndim != 2:
        raise DriftError(f"{name} must be 2-D (n_rows, n_features), got shape {arr.shape}{where}")
    if arr.shape[1] < 1:
        raise DriftError(f"{name} has no features (shape {arr.shape}){where}")
    return arr


def _check_rows(x: np.ndarray, y: np.ndarray, names: tuple[str, str], where: str) -> None:
    if x.shape[0] != y.shape[0]:
        raise DriftError(
            f"{names[0]} and {names[1]} must align row by row, got {x.shape[0]} and "
            f"{y.shape[0]} rows{where}"
        )


def _chunk_rows(d: int) -> int:
    return max(256, _CHUNK_BYTES // (8 * max(d, 1)))


# --------------------------------------------------------------------------------------------
# Sufficient statistics
# --------------------------------------------------------------------------------------------


@dataclass
class _Side:
    """Statistics of one representation about a shift ``c``: ``u_i = x_i - c``, ``p_i = ||u_i||^2``.

    Shapes: ``c, s1, up`` (d,); ``g`` (d, d); ``p1, p2`` scalars.
    """

    c: np.ndarray  # shift
    s1: np.ndarray  # sum_i u_i
    g: np.ndarray  # U^T U
    p1: float  # sum_i p_i
    p2: float  # sum_i p_i^2
    up: np.ndarray  # U^T p

    @classmethod
    def zeros(cls, c: np.ndarray) -> _Side:
        d = c.shape[0]
        return cls(c, np.zeros(d), np.zeros((d, d)), 0.0, 0.0, np.zeros(d))

    def copy(self) -> _Side:
        return _Side(self.c.copy(), self.s1.copy(), self.g.copy(), self.p1, self.p2, self.up.copy())


@dataclass
class _Cross:
    """Cross statistics: ``guv = U^T V`` (dx, dy), ``pq = sum p_i q_i``, ``uq = U^T q`` (dx,),
    ``vp = V^T p`` (dy,)."""

    guv: np.ndarray
    pq: float
    uq: np.ndarray
    vp: np.ndarray

    def copy(self) -> _Cross:
        return _Cross(self.guv.copy(), self.pq, self.uq.copy(), self.vp.copy())


def _shift_side(s: _Side, n: int, new_c: np.ndarray) -> tuple[_Side, np.ndarray, float, np.ndarray]:
    """Re-express side statistics about ``new_c``. Returns (new side, delta, ||delta||^2, G delta).

    With ``u' = u + delta`` (``delta = c - new_c``) and ``p' = p + 2 u^T delta + k``, ``k = ||delta||^2``.
    """
    delta = s.c - new_c
    k = float(delta @ delta)
    g_delta = s.g @ delta
    s1_delta = float(s.s1 @ delta)
    p1 = s.p1 + 2.0 * s1_delta + n * k
    p2 = (
        s.p2
        + 4.0 * float(delta @ g_delta)
        + n * k * k
        + 4.0 * float(s.up @ delta)
        + 2.0 * k * s.p1
        + 4.0 * k * s1_delta
    )
    up = s.up + 2.0 * g_delta + k * s.s1 + delta * (s.p1 + 2.0 * s1_delta + n * k)
    # s1 delta^T + delta s1^T + n delta delta^T = w delta^T + delta w^T with w = s1 + n delta / 2
    rank1 = np.outer(s.s1 + 0.5 * n * delta, delta)
    g = s.g + rank1
    g += rank1.T
    del rank1
    s1 = s.s1 + n * delta
    return _Side(new_c.copy(), s1, g, p1, p2, up), delta, k, g_delta


def _shift_cross(
    cr: _Cross, n: int, x: _Side, y: _Side, dx: np.ndarray, kx: float, dy: np.ndarray, ky: float
) -> _Cross:
    """Re-express cross statistics for shifts ``dx`` / ``dy`` (old side statistics ``x``, ``y``)."""
    sx_dx = float(x.s1 @ dx)
    sy_dy = float(y.s1 @ dy)
    guv_dy = cr.guv @ dy
    guvt_dx = cr.guv.T @ dx
    pq = (
        cr.pq
        + 2.0 * float(cr.vp @ dy)
        + ky * x.p1
        + 2.0 * float(cr.uq @ dx)
        + 4.0 * float(dx @ guv_dy)
        + 2.0 * ky * sx_dx
        + kx * y.p1
        + 2.0 * kx * sy_dy
        + n * kx * ky
    )
    uq = cr.uq + 2.0 * guv_dy + ky * x.s1 + dx * (y.p1 + 2.0 * sy_dy + n * ky)
    vp = cr.vp + 2.0 * guvt_dx + kx * y.s1 + dy * (x.p1 + 2.0 * sx_dx + n * kx)
    guv = cr.guv + np.outer(x.s1 + n * dx, dy)
    guv += np.outer(dx, y.s1)
    return _Cross(guv, pq, uq, vp)


def _hsic_unbiased(
    n: int, s1x: np.ndarray, s1y: np.ndarray, gxy: np.ndarray, pq: float,
    xq: np.ndarray, yp: np.ndarray, p1: float, q1: float,
) -> float:
    """Unbiased HSIC from feature-space statistics (see the module docstring)."""
    tr = float(np.vdot(gxy, gxy)) - pq
    sum_k = float(s1x @ s1x) - p1
    sum_l = float(s1y @ s1y) - q1
    one_kl_one = float(s1x @ gxy @ s1y) - float(s1x @ xq) - float(s1y @ yp) + pq
    return (tr + sum_k * sum_l / ((n - 1) * (n - 2)) - 2.0 * one_kl_one / (n - 2)) / (n * (n - 3))


class StreamingCKA:
    """Linear CKA (biased and debiased) from statistics accumulated batch by batch.

    Memory is O(dx^2 + dy^2 + dx*dy) float64 whatever the number of rows, so CKA over millions
    of token states works: feed ``update`` batches of aligned rows, combine accumulators from
    several workers with ``merge``, read the result with ``compute``.

    Args:
        layer, split: optional labels added to error messages.

    Example::

        acc = StreamingCKA(layer=12)
        for s, r in batches:            # s: (b, dx) student, r: (b, dy) reference
            acc.update(s, r)
        acc.compute(), acc.compute(debiased=True)
    """

    def __init__(self, layer: Any = None, split: Any = None) -> None:
        self.layer = layer
        self.split = split
        self.n_ = 0
        self._x: _Side | None = None
        self._y: _Side | None = None
        self._xy: _Cross | None = None

    @property
    def _where(self) -> str:
        return _where(self.layer, self.split)

    def update(
        self, X_batch: DriftValue, Y_batch: DriftValue, *, shift: tuple[np.ndarray, np.ndarray] | None = None
    ) -> StreamingCKA:
        """Add a batch of aligned rows.

        Args:
            X_batch: (b, dx) array (or torch tensor), e.g. student states.
            Y_batch: (b, dy) array, the matching reference states (same row order).
            shift: internal use -- the (dx,), (dy,) shift to accumulate about on the first batch
                (default: that batch's mean).

        Returns:
            self.
        """
        where = self._where
        x = _as_matrix(X_batch, "X", where)
        y = _as_matrix(Y_batch, "Y", where)
        _check_rows(x, y, ("X", "Y"), where)
        if x.shape[0] == 0:
            return self
        if self._x is None:
            if shift is None:
                cx = _finite_mean(x, "X", where)
                cy = _finite_mean(y, "Y", where)
            else:
                cx, cy = (np.asarray(s, dtype=np.float64) for s in shift)
            self._x, self._y = _Side.zeros(cx), _Side.zeros(cy)
            self._xy = _Cross(np.zeros((x.shape[1], y.shape[1])), 0.0, np.zeros(x.shape[1]),
                              np.zeros(y.shape[1]))
        sx, sy, sxy = self._x, self._y, self._xy
        assert sy is not None and sxy is not None
        if x.shape[1] != sx.c.shape[0] or y.shape[1] != sy.c.shape[0]:
            raise DriftError(
                f"batch has {x.shape[1]} / {y.shape[1]} features, earlier batches had "
                f"{sx.c.shape[0]} / {sy.c.shape[0]}{where}"
            )
        step = _chunk_rows(max(x.shape[1], y.shape[1]))
        for lo in range(0, x.shape[0], step):
            u = np.asarray(x[lo : lo + step], dtype=np.float64) - sx.c
            v = np.asarray(y[lo : lo + step], dtype=np.float64) - sy.c
            if not np.isfinite(u).all():
                raise DriftError(f"X contains NaN or inf{where}")
            if not np.isfinite(v).all():
                raise DriftError(f"Y contains NaN or inf{where}")
            p = np.einsum("ij,ij->i", u, u)
            q = np.einsum("ij,ij->i", v, v)
            sx.s1 += u.sum(axis=0)
            sy.s1 += v.sum(axis=0)
            sx.g += u.T @ u
            sy.g += v.T @ v
            sxy.guv += u.T @ v
            sx.p1 += float(p.sum())
            sy.p1 += float(q.sum())
            sx.p2 += float(p @ p)
            sy.p2 += float(q @ q)
            sxy.pq += float(p @ q)
            sx.up += u.T @ p
            sy.up += v.T @ q
            sxy.uq += u.T @ q
            sxy.vp += v.T @ p
        self.n_ += x.shape[0]
        return self

    def merge(self, other: StreamingCKA) -> StreamingCKA:
        """Fold another accumulator (over different rows, same features) into this one.

        Returns:
            self.
        """
        if not isinstance(other, StreamingCKA):
            raise TypeError(f"can only merge a StreamingCKA, got {type(other).__name__}")
        if other._x is None:
            return self
        if self._x is None:
            self.n_ = other.n_
            self._x, self._y = other._x.copy(), other._y.copy()  # type: ignore[union-attr]
            self._xy = other._xy.copy()  # type: ignore[union-attr]
            return self
        assert self._y is not None and self._xy is not None
        assert other._y is not None and other._xy is not None
        if other._x.c.shape != self._x.c.shape or other._y.c.shape != self._y.c.shape:
            raise DriftError(
                f"cannot merge accumulators over {other._x.c.shape[0]} / {other._y.c.shape[0]} "
                f"features into one over {self._x.c.shape[0]} / {self._y.c.shape[0]}{self._where}"
            )
        ox, dx, kx, _ = _shift_side(other._x, other.n_, self._x.c)
        oy, dy, ky, _ = _shift_side(other._y, other.n_, self._y.c)
        oxy = _shift_cross(other._xy, other.n_, other._x, other._y, dx, kx, dy, ky)
        for mine, theirs in ((self._x, ox), (self._y, oy)):
            mine.s1 += theirs.s1
            mine.g += theirs.g
            mine.p1 += theirs.p1
            mine.p2 += theirs.p2
            mine.up += theirs.up
        self._xy.guv += oxy.guv
        self._xy.pq += oxy.pq
        self._xy.uq += oxy.uq
        self._xy.vp += oxy.vp
        self.n_ += other.n_
        return self

    def compute(self, debiased: bool = False) -> float:
        """Linear CKA of the rows seen so far.

        Args:
            debiased: use the unbiased HSIC estimator (needs n >= 4); otherwise the usual
                (biased) CKA, which needs n >= 2.

        Returns:
            CKA as a float: in [0, 1] for the biased form; the debiased form is near 0 for
            independent representations and may be slightly negative.

        Raises:
            DriftError: too few rows, or a constant representation.
        """
        where = self._where
        n = self.n_
        need = 4 if debiased else 2
        if n < need:
            kind = "debiased CKA" if debiased else "CKA"
            raise DriftError(f"{kind} needs at least {need} rows, got {n}{where}")
        assert self._x is not None and self._y is not None and self._xy is not None
        # Re-express about the exact mean: centred statistics, no cancellation in what follows.
        old_x, old_y = self._x, self._y
        x, dx, kx, _ = _shift_side(old_x, n, old_x.c + old_x.s1 / n)
        y, dy, ky, _ = _shift_side(old_y, n, old_y.c + old_y.s1 / n)
        xy = _shift_cross(self._xy, n, old_x, old_y, dx, kx, dy, ky)
        for side, name in ((x, "X"), (y, "Y")):
            var = float(np.trace(side.g)) - float(side.s1 @ side.s1) / n
            energy = var + n * float(side.c @ side.c)  # sum_i ||x_i||^2
            if var <= 0.0 or var <= _CONSTANT_RTOL * energy:
                raise DriftError(f"{name} is a constant (zero-variance) representation{where}")
        if not debiased:
            # ||G - a b^T / n||_F^2 without forming the centred matrix (a, b ~ 0 after the shift).
            def centred_sq(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
                return (float(np.vdot(g, g)) - 2.0 * float(a @ g @ b) / n
                        + float(a @ a) * float(b @ b) / (n * n))

            num = centred_sq(xy.guv, x.s1, y.s1)
            den = math.sqrt(centred_sq(x.g, x.s1, x.s1)) * math.sqrt(centred_sq(y.g, y.s1, y.s1))
            return _finite_cka(num / den if den > 0 else math.nan, where, bounded=True)
        h_xy = _hsic_unbiased(n, x.s1, y.s1, xy.guv, xy.pq, xy.uq, xy.vp, x.p1, y.p1)
        h_xx = _hsic_unbiased(n, x.s1, x.s1, x.g, x.p2, x.up, x.up, x.p1, x.p1)
        h_yy = _hsic_unbiased(n, y.s1, y.s1, y.g, y.p2, y.up, y.up, y.p1, y.p1)
        for h, name in ((h_xx, "X"), (h_yy, "Y")):
            if not h > 0.0:
                raise DriftError(
                    f"debiased HSIC({name}, {name}) is not positive ({h:.3g}): too few rows "
                    f"(n={n}) or a near-constant {name}{where}"
                )
        den = math.sqrt(h_xx * h_yy)
        return _finite_cka(h_xy / den if den > 0 else math.nan, where)


def _finite_cka(value: float, where: str, bounded: bool = False) -> float:
    """``value`` unless float64 sums of squares over- or underflowed (inputs with |x| above
    ~1e150 or far below 1): NaN, inf, or a biased CKA outside [0, 1] is an error, never returned."""
    if not math.isfinite(value) or (bounded and not -1e-6 <= value <= 1 + 1e-6):
        raise DriftError(
            f"CKA could not be computed accurately (got {value}): the inputs' scale is outside "
            f"what float64 sums of squares hold (|x| above ~1e150 or below ~1e-75); rescale "
            f"them (CKA is scale invariant){where}"
        )
    return value


def _finite_mean(x: np.ndarray, name: str, where: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        m = np.mean(x, axis=0, dtype=np.float64)
    if not np.isfinite(m).all():
        raise DriftError(f"{name} contains NaN or inf{where}")
    return m


def linear_cka(
    X: DriftValue, Y: DriftValue, debiased: bool = False, *, layer: Any = None, split: Any = None
) -> float:
    """Linear CKA between two representations of the same rows, in feature space.

    ``CKA = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)`` with ``Xc``, ``Yc`` column-centred;
    O(n (dx + dy)^2) time, O(dx^2 + dy^2 + dx dy) memory, float64 throughout (inputs are
    converted chunk by chunk, never all at once).

    Args:
        X: (n, dx) array or torch tensor (e.g. student states).
        Y: (n, dy) array or torch tensor (reference states, same row order).
        debiased: use the unbiased HSIC estimator (Song et al. 2012 / Nguyen et al. 2021).
        layer, split: optional labels for error messages.

    Returns:
        CKA as a float.

    Raises:
        DriftError: rows differ in number, NaN / inf, n < 2 (n < 4 debiased), constant X or Y.
    """
    where = _where(layer, split)
    x = _as_matrix(X, "X", where)
    y = _as_matrix(Y, "Y", where)
    _check_rows(x, y, ("X", "Y"), where)
    need = 4 if debiased else 2
    if x.shape[0] < need:
        kind = "debiased CKA" if debiased else "CKA"
        raise DriftError(f"{kind} needs at least {need} rows, got {x.shape[0]}{where}")
    acc = StreamingCKA(layer=layer, split=split)
    acc.update(x, y, shift=(_finite_mean(x, "X", where), _finite_mean(y, "Y", where)))
    return acc.compute(debiased=debiased)


def gram_linear_cka(
    X: DriftValue, Y: DriftValue, debiased: bool = False, *, layer: Any = None, split: Any = None
) -> float:
    """Reference linear CKA through n x n Gram matrices (tests and benchmarks only).

    Builds ``K = X X^T`` and ``L = Y Y^T`` in float64 (2 * 8 n^2 bytes: 6.4 GB at n = 20,000)
    from column-centred inputs, centres them (``HKH``) for the biased form or zeroes their
    diagonals for the unbiased HSIC.

    Args:
        X: (n, dx); Y: (n, dy); debiased: unbiased HSIC estimator.

    Returns:
        CKA as a float.
    """
    where = _where(layer, split)
    x = _as_matrix(X, "X", where)
    y = _as_matrix(Y, "Y", where)
    _check_rows(x, y, ("X", "Y"), where)
    n = x.shape[0]
    need = 4 if debiased else 2
    if n < need:
        raise DriftError(f"CKA needs at least {need} rows, got {n}{where}")
    grams = []
    for a, name in ((x, "X"), (y, "Y")):
        a64 = np.asarray(a, dtype=np.float64)
        if not np.isfinite(a64).all():
            raise DriftError(f"{name} contains NaN or inf{where}")
        if np.ptp(a64, axis=0).max() == 0.0:
            raise DriftError(f"{name} is a constant (zero-variance) representation{where}")
        # Both estimators are invariant to a shift of the rows; centring the columns first
        # keeps the raw Gram entries small (large offsets cancel badly in the unbiased form).
        a64 = a64 - a64.mean(axis=0)
        # A plain GEMM on a transposed copy: numpy sends ``a @ a.T`` to BLAS syrk, and
        # OpenBLAS 0.3.30/0.3.31's SkylakeX syrk segfaults for outputs past ~16,000 rows.
        k = a64 @ np.ascontiguousarray(a64.T)
        del a64
        if debiased:
            np.fill_diagonal(k, 0.0)
        else:  # HKH in place
            k -= k.mean(axis=0, keepdims=True)
            k -= k.mean(axis=1, keepdims=True)
        grams.append(k)
    k, lm = grams

    def hsic(a: np.ndarray, b: np.ndarray) -> float:
        if not debiased:
            return float(np.vdot(a, b))
        ra, rb = a.sum(axis=0), b.sum(axis=0)
        return (
            float(np.vdot(a, b))
            + float(ra.sum()) * float(rb.sum()) / ((n - 1) * (n - 2))
            - 2.0 * float(ra @ rb) / (n - 2)
        ) / (n * (n - 3))

    h_xx, h_yy = hsic(k, k), hsic(lm, lm)
    if not (h_xx > 0.0 and h_yy > 0.0):
        raise DriftError(f"HSIC(X, X) or HSIC(Y, Y) is not positive{where}")
    return hsic(k, lm) / math.sqrt(h_xx * h_yy)


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
    where = _where(layer, split)
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
    where = _where(layer, split)
    s, r = _cosine_inputs(S, R, on_zero, where)
    if r.shape[0] == 0:
        raise DriftError(f"centred cosine drift needs at least 1 row, got 0{where}")
    mu = _finite_mean(r, "reference", where)
    # Per-dimension variance about mu, accumulated chunk by chunk in float64.
    ss = np.zeros(r.shape[1])
    step = _chunk_rows(r.shape[1])
    for lo in range(0, r.shape[0], step):
        b = np.asarray(r[lo : lo + step], dtype=np.float64) - mu
        ss += np.einsum("ij,ij->j", b, b)
    sd = np.sqrt(ss / r.shape[0])
    var, energy = float(ss.sum()), float(ss.sum() + r.shape[0] * float(mu @ mu))
    if var <= 0.0 or var <= _CONSTANT_RTOL * energy:
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
    s = _as_matrix(S, "student", where)
    r = _as_matrix(R, "reference", where)
    _check_rows(s, r, ("student", "reference"), where)
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
    step = _chunk_rows(s.shape[1])
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
                raise DriftError(f"layer {layer} missing from {side} states{_where(None, split)}")
            where = _where(layer, split)
            s = _as_matrix(st[layer], "student", where)
            r = _as_matrix(rf[layer], "reference", where)
            _check_rows(s, r, ("student", "reference"), where)
            n = s.shape[0]
            if n < 4:
                raise DriftError(f"debiased CKA needs at least 4 rows, got {n}{where}")
            acc = StreamingCKA(layer=layer, split=split)
            acc.update(s, r, shift=(_finite_mean(s, "student", where),
                                    _finite_mean(r, "reference", where)))
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


def _xy_pairs(x: Any, y: Any, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(_to_numpy(x), dtype=np.float64)
    b = np.asarray(_to_numpy(y), dtype=np.float64)
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


def _boot_spearman(
    x: np.ndarray, y: np.ndarray, n_boot: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap (resampling pairs) Spearman r and the resample indices; NaN for degenerate ones."""
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    rx = stats.rankdata(x[idx], axis=1)
    ry = stats.rankdata(y[idx], axis=1)
    return _rowwise_pearson(rx, ry), idx


def _ci(values: np.ndarray, level: float) -> tuple[float, float]:
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
    x, y = _xy_pairs(runs[drift_col].to_numpy(), runs[gain_col].to_numpy(), (drift_col, gain_col))
    n = x.size
    if n < 3:
        raise DriftError(f"need at least 3 runs to relate {drift_col} to {gain_col}, got {n}")
    for v, col in ((x, drift_col), (y, gain_col)):
        if np.ptp(v) == 0.0:
            raise DriftError(f"column {col!r} is constant across runs; no correlation is defined")
    sp = stats.spearmanr(x, y)
    pe = stats.pearsonr(x, y)
    fit = stats.linregress(x, y)
    boot, _ = _boot_spearman(x, y, n_boot, np.random.default_rng(seed))
    return {
        "n": int(n),
        "spearman": float(sp.statistic),
        "spearman_p": float(sp.pvalue),
        "spearman_ci": _ci(boot, ci_level),
        "ci_level": ci_level,
        "n_boot_valid": int(np.isfinite(boot).sum()),
        "pearson": float(pe.statistic),
        "pearson_p": float(pe.pvalue),
        "slope": float(fit.slope),
        "intercept": float(fit.intercept),
        "drift_col": drift_col,
        "gain_col": gain_col,
    }


@dataclass(frozen=True)
class OODRiskPrediction:
    """Result of :meth:`OODRiskEstimator.predict`.

    ``gain``, ``lower``, ``upper`` have the shape of the drift input (floats for a scalar) and
    are ``None`` when the relation is unreliable; ``status`` is ``"ok"`` or
    ``"relation too weak to predict: <reason>"``.
    """

    drift: Any
    gain: Any
    lower: Any
    upper: Any
    level: float
    reliable: bool
    status: str


class OODRiskEstimator:
    """Label-free OOD risk: predict the OOD gain of a new target domain from its drift alone.

    Fit on target domains that have labels (one value per run x domain: drift, OOD gain), then
    predict the gain for a domain where only hidden states -- hence drift -- are available.
    The fit is ordinary least squares ``gain ~ intercept + slope * drift``; the prediction
    interval comes from refitting on bootstrap resamples of the runs plus a resampled residual
    (so it covers a new observation, not just the mean). The relation is trusted
    (``reliable_``) only when n >= ``min_runs`` and the bootstrap interval of the Spearman
    correlation excludes 0; otherwise ``predict`` returns no numbers and says why.

    Args:
        n_boot: bootstrap resamples.
        level: coverage of the Spearman interval and of the prediction interval.
        min_runs: smallest number of runs to trust (default 4).
        seed: seed of all resampling (fit and predict are deterministic).

    Attributes (after ``fit``):
        slope_, intercept_: the least-squares line.
        spearman_: Spearman correlation of drift and gain.
        ci_: (lo, hi) bootstrap interval of the Spearman correlation.
        n_: number of runs.
        reliable_: whether predictions are returned.
        reason_: why not (empty when reliable).
        boot_coef_: (n_boot_valid, 2) bootstrap (intercept, slope) pairs.
    """

    def __init__(self, n_boot: int = 2000, level: float = 0.95, min_runs: int = 4, seed: int = 0):
        self.n_boot = n_boot
        self.level = level
        self.min_runs = min_runs
        self.seed = seed

    def fit(self, drift_values: Any, ood_gains: Any) -> OODRiskEstimator:
        """Fit on labelled domains.

        Args:
            drift_values: (n,) or (n, 1) drift per run x domain.
            ood_gains: (n,) OOD gain (e.g. AOG) of the same runs.

        Returns:
            self.

        Raises:
            DriftError: lengths differ, non-finite values, n < 2, constant drift or gains.
        """
        x, y = _xy_pairs(drift_values, ood_gains, ("drift_values", "ood_gains"))
        n = x.size
        if n < 2:
            raise DriftError(f"need at least 2 runs to fit, got {n}")
        if np.ptp(x) == 0.0:
            raise DriftError("drift_values are constant; the slope is undefined")
        if np.ptp(y) == 0.0:
            raise DriftError("ood_gains are constant; there is no relation to learn")
        rng = np.random.default_rng(self.seed)
        fit = stats.linregress(x, y)
        self.slope_, self.intercept_ = float(fit.slope), float(fit.intercept)
        self.n_ = int(n)
        self.spearman_ = float(stats.spearmanr(x, y).statistic) if n >= 3 else float(
            np.sign(fit.slope)
        )
        boot_r, idx = _boot_spearman(x, y, self.n_boot, rng)
        self.ci_ = _ci(boot_r, self.level)
        # Bootstrap OLS fits (resamples with constant drift have no slope and are dropped).
        bx, by = x[idx], y[idx]
        bxc = bx - bx.mean(axis=1, keepdims=True)
        sxx = (bxc * bxc).sum(axis=1)
        ok = sxx > 0
        slope_b = (bxc[ok] * (by[ok] - by[ok].mean(axis=1, keepdims=True))).sum(axis=1) / sxx[ok]
        icpt_b = by[ok].mean(axis=1) - slope_b * bx[ok].mean(axis=1)
        self.boot_coef_ = np.column_stack([icpt_b, slope_b])
        resid = y - (self.intercept_ + self.slope_ * x)
        dof = max(n - 2, 1)
        self._resid_draw = rng.choice(resid, size=len(slope_b)) * math.sqrt(n / dof)
        reasons = []
        if n < self.min_runs:
            reasons.append(f"only {n} runs (need at least {self.min_runs})")
        lo, hi = self.ci_
        if lo <= 0.0 <= hi:
            reasons.append(
                f"the {self.level:.0%} bootstrap interval of the Spearman correlation "
                f"[{lo:.2f}, {hi:.2f}] includes 0"
            )
        if len(slope_b) == 0:
            reasons.append("no bootstrap resample had varying drift")
        self.reliable_ = not reasons
        self.reason_ = "; ".join(reasons)
        if not self.reliable_:
            logger.info("OOD risk relation not reliable: %s", self.reason_)
        return self

    def predict(self, drift_value: Any) -> OODRiskPrediction:
        """Predicted OOD gain for drift value(s) with a bootstrap prediction interval.

        Args:
            drift_value: a float or an array of drift values (any shape).

        Returns:
            :class:`OODRiskPrediction`; numbers are ``None`` when ``reliable_`` is False.
        """
        if not hasattr(self, "reliable_"):
            raise RuntimeError("OODRiskEstimator is not fitted; call fit() first")
        d = np.asarray(_to_numpy(drift_value), dtype=np.float64)
        if not np.isfinite(d).all():
            raise DriftError("drift_value contains NaN or inf")
        scalar = d.ndim == 0
        if not self.reliable_:
            return OODRiskPrediction(
                drift=float(d) if scalar else d, gain=None, lower=None, upper=None,
                level=self.level, reliable=False,
                status=f"relation too weak to predict: {self.reason_}",
            )
        flat = d.reshape(-1)
        point = self.intercept_ + self.slope_ * flat
        sims = (self.boot_coef_[:, :1] + self.boot_coef_[:, 1:] * flat[None, :]
                + self._resid_draw[:, None])
        lo, hi = np.quantile(sims, [(1 - self.level) / 2, (1 + self.level) / 2], axis=0)

        def shape(a: np.ndarray) -> Any:
            return float(a[0]) if scalar else a.reshape(d.shape)

        return OODRiskPrediction(
            drift=float(d) if scalar else d, gain=shape(point), lower=shape(lo), upper=shape(hi),
            level=self.level, reliable=True, status="ok",
        )
