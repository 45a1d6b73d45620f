"""What every drift measure takes and how it fails: :class:`DriftError` and the checks on the
(n, d) state arrays shared by :mod:`anchorviz.analysis.cka`, :mod:`anchorviz.analysis.drift` and
:mod:`anchorviz.analysis.ood_risk`.

- :func:`to_numpy` -- a numpy view of an array or torch tensor (bf16 -> float32).
- :func:`as_matrix` / :func:`check_rows` -- a real 2-D (n, d) array; two of them aligned row by row.
- :func:`finite_mean` -- the float64 column mean, or :class:`DriftError` on NaN / inf.
- :func:`chunk_rows` -- rows converted to float64 at a time (bounded memory).
- :func:`where_suffix` -- the " (layer 3, split 'x')" tail of every error message.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "CONSTANT_RTOL",
    "DriftError",
    "DriftValue",
    "as_matrix",
    "check_rows",
    "chunk_rows",
    "finite_mean",
    "to_numpy",
    "where_suffix",
]

# Rows converted to float64 at a time: about 64 MiB per side per chunk.
_CHUNK_BYTES = 64 * 2**20
# Centred variance below this fraction of the raw energy sum ||x_i||^2 counts as constant.
# Identical rows leave ~eps^2 ~ 5e-32 after centring in float64; real data is far above.
CONSTANT_RTOL = 1e-24

DriftValue = Any  # numpy array or torch tensor of shape (n, d)


class DriftError(ValueError):
    """Input that drift measures cannot be computed on (the message says which and where)."""


def where_suffix(layer: Any = None, split: Any = None) -> str:
    """`` (layer 3, split 'x')`` for error messages; empty when neither is given."""
    parts = []
    if layer is not None:
        parts.append(f"layer {layer}")
    if split is not None:
        parts.append(f"split {split!r}")
    return f" ({', '.join(parts)})" if parts else ""


def to_numpy(x: DriftValue) -> np.ndarray:
    """numpy view of ``x``; torch tensors are detached and moved to CPU (bf16 -> float32)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor without importing torch
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            t = t.float()
        return t.numpy()
    return np.asarray(x)


def as_matrix(x: DriftValue, name: str, where: str) -> np.ndarray:
    """Validate that ``x`` is a real 2-D (n, d) array with d >= 1 (finiteness is checked later)."""
    arr = to_numpy(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise DriftError(f"{name} must be a real-valued array, got dtype {arr.dtype}{where}")
    if arr.ndim != 2:
        raise DriftError(f"{name} must be 2-D (n_rows, n_features), got shape {arr.shape}{where}")
    if arr.shape[1] < 1:
        raise DriftError(f"{name} has no features (shape {arr.shape}){where}")
    return arr


def check_rows(x: np.ndarray, y: np.ndarray, names: tuple[str, str], where: str) -> None:
    """:class:`DriftError` unless ``x`` and ``y`` have the same number of rows."""
    if x.shape[0] != y.shape[0]:
        raise DriftError(
            f"{names[0]} and {names[1]} must align row by row, got {x.shape[0]} and "
            f"{y.shape[0]} rows{where}"
        )


def chunk_rows(d: int) -> int:
    """Rows of width ``d`` converted to float64 at a time (about 64 MiB, at least 256)."""
    return max(256, _CHUNK_BYTES // (8 * max(d, 1)))


def finite_mean(x: np.ndarray, name: str, where: str) -> np.ndarray:
    """Column means in float64; :class:`DriftError` if any is NaN or inf."""
    with np.errstate(all="ignore"):
        m = np.mean(x, axis=0, dtype=np.float64)
    if not np.isfinite(m).all():
        raise DriftError(f"{name} contains NaN or inf{where}")
    return m
