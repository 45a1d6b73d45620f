"""Linear CKA between a student and its frozen reference, in feature space.

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

Bad input (row counts that differ, NaN / inf, too few rows, a constant representation) raises
:class:`~anchorviz.analysis.drift_inputs.DriftError` -- never a silent NaN.

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

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from anchorviz.analysis.drift_inputs import (
    CONSTANT_RTOL,
    DriftError,
    DriftValue,
    as_matrix,
    check_rows,
    chunk_rows,
    finite_mean,
    where_suffix,
)

__all__ = ["StreamingCKA", "gram_linear_cka", "linear_cka"]


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
        return where_suffix(self.layer, self.split)

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
        x = as_matrix(X_batch, "X", where)
        y = as_matrix(Y_batch, "Y", where)
        check_rows(x, y, ("X", "Y"), where)
        if x.shape[0] == 0:
            return self
        if self._x is None:
            if shift is None:
                cx = finite_mean(x, "X", where)
                cy = finite_mean(y, "Y", where)
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
        step = chunk_rows(max(x.shape[1], y.shape[1]))
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
            if var <= 0.0 or var <= CONSTANT_RTOL * energy:
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
    where = where_suffix(layer, split)
    x = as_matrix(X, "X", where)
    y = as_matrix(Y, "Y", where)
    check_rows(x, y, ("X", "Y"), where)
    need = 4 if debiased else 2
    if x.shape[0] < need:
        kind = "debiased CKA" if debiased else "CKA"
        raise DriftError(f"{kind} needs at least {need} rows, got {x.shape[0]}{where}")
    acc = StreamingCKA(layer=layer, split=split)
    acc.update(x, y, shift=(finite_mean(x, "X", where), finite_mean(y, "Y", where)))
    return acc.compute(debiased=debiased)


def gram_linear_cka(
    X: DriftValue,
    Y: DriftValue,
    debiased: bool = False,
    *,
    layer: Any = None,
    split: Any = None,
    dtype: Literal["float64", "float32"] = "float64",
) -> float:
    """Reference linear CKA through n x n Gram matrices (tests and benchmarks only).

    Builds ``K = X X^T`` and ``L = Y Y^T`` in float64 (2 * 8 n^2 bytes: 6.4 GB at n = 20,000)
    from column-centred inputs, centres them (``HKH``) for the biased form or zeroes their
    diagonals for the unbiased HSIC.

    Args:
        X: (n, dx); Y: (n, dy); debiased: unbiased HSIC estimator.
        dtype: of the inputs and the Gram matrices; ``"float32"`` halves the n x n memory at
            float32 accuracy (the benchmark's memory-forced variant).

    Returns:
        CKA as a float.
    """
    where = where_suffix(layer, split)
    x = as_matrix(X, "X", where)
    y = as_matrix(Y, "Y", where)
    check_rows(x, y, ("X", "Y"), where)
    n = x.shape[0]
    need = 4 if debiased else 2
    if n < need:
        raise DriftError(f"CKA needs at least {need} rows, got {n}{where}")
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    grams = []
    for a, name in ((x, "X"), (y, "Y")):
        arr = np.asarray(a, dtype=dtype)
        if not np.isfinite(arr).all():
            raise DriftError(f"{name} contains NaN or inf{where}")
        if np.ptp(arr, axis=0).max() == 0.0:
            raise DriftError(f"{name} is a constant (zero-variance) representation{where}")
        # Both estimators are invariant to a shift of the rows; centring the columns first
        # keeps the raw Gram entries small (large offsets cancel badly in the unbiased form).
        arr = arr - arr.mean(axis=0)
        # A plain GEMM on a transposed copy: numpy sends ``a @ a.T`` to BLAS syrk, and
        # OpenBLAS 0.3.30/0.3.31's SkylakeX syrk segfaults for outputs past ~16,000 rows.
        k = arr @ np.ascontiguousarray(arr.T)
        del arr
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
