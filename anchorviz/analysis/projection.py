"""One shared 2-D (or k-D) map of hidden states, so that drift shows as movement.

:class:`SharedProjection` is fitted once on the *reference* (frozen, pretrained) states of the
source and target domains together; student states of any run are then placed in that same
space with :meth:`SharedProjection.transform`. A student that drifted lands away from where
its reference rows sit; one that stayed anchored lands on top of them.

Pipeline: optional PCA pre-reduction to ``pca_dim`` (when there are more features than that),
then UMAP (umap-learn). ``method="pca"`` uses PCA alone; ``method="auto"`` falls back to PCA
(and logs why) when umap-learn is not importable or there are too few rows for a neighbour
graph. Everything is seeded: UMAP with a ``random_state`` is deterministic (it then runs
single-threaded, which is fine at the sizes plotted).

UMAP is given the Euclidean distances, computed here (`scipy.spatial.distance.cdist`, float64),
as a precomputed matrix: below `SMALL_DATA` (4,096) fitted rows umap-learn would otherwise compute every distance of
the fit and of each transform by calling its compiled metric once per pair from Python
(scikit-learn's generic path), which took ~28 of the ~30 s of a 2,400 x 1,500 transform. The
neighbour graph is the same exact-kNN graph umap-learn builds at these sizes.

A fitted projection is kept on disk with :meth:`SharedProjection.save` (the rows it was fitted
on, its settings and its fitted coordinates: safetensors and JSON, no pickle) and brought back
with :meth:`SharedProjection.load`, which refits on the stored rows (UMAP is deterministic at a
fixed seed) and checks that it lands on the stored coordinates, so every process that loads it
places states in the same map. The pipeline stores one per sweep store (``shared/projection-*``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np

from anchorviz.paths import write_atomic

logger = logging.getLogger(__name__)

__all__ = ["ProjectionMismatch", "SharedProjection"]

Method = Literal["umap", "pca", "auto"]

SMALL_DATA = 4096  # umap-learn's own threshold between exact and approximate neighbours


def _umap_module() -> Any | None:
    """The ``umap`` module, or None when umap-learn cannot be imported."""
    try:
        import umap  # heavy (numba): imported only when used
    except Exception as exc:  # ImportError, or numba failing at import time
        logger.debug("umap-learn not importable: %s", exc)
        return None
    return umap


@contextlib.contextmanager
def _torch_threads_kept():
    """Keep torch's intra-op thread count across a umap-learn call.

    umap-learn's compiled functions run on numba's OpenMP threading layer, which sets the
    OpenMP thread count of the calling thread to numba's own (every core) and thereby torch's
    too: after the first projection a worker pinned to one torch thread trained on two, so
    two workers ran four threads on two cores (3.9x slower training) and a one-process run
    gave other float sums than a worker (drift differing in the 4th decimal). Numba is kept to
    torch's count while inside, and torch's count is put back after."""
    torch = sys.modules.get("torch")
    numba = sys.modules.get("numba")  # imported by the umap import that chose the method
    before = torch.get_num_threads() if torch is not None else None
    if numba is not None and before is not None:
        numba.set_num_threads(max(1, min(before, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        if torch is not None and torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``A`` and of ``B`` (float64 sums, exact: no
    ``|a|^2 + |b|^2 - 2ab`` cancellation), as float32 for umap-learn."""
    from scipy.spatial.distance import cdist

    return cdist(A.astype(np.float64), B.astype(np.float64), "euclidean").astype(np.float32)


def _as_states(X: Any, what: str) -> np.ndarray:
    """Validate an (n, d) array of finite numbers; torch tensors are converted."""
    if hasattr(X, "detach") and hasattr(X, "cpu"):
        X = X.detach().cpu().float().numpy()
    arr = np.asarray(X)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise ValueError(f"{what}: expected a real-valued array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D array (n_rows, n_features), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{what}: expected a non-empty array, got shape {arr.shape}")
    arr = arr.astype(np.float32, copy=False)
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).any(axis=1).sum())
        raise ValueError(f"{what}: {bad} row(s) contain NaN or inf")
    return arr


PROJECTION_FORMAT = 2  # bumped when the files written by SharedProjection.save change
_PARAMS = ("method", "n_components", "pca_dim", "n_neighbors", "min_dist", "seed")
_LOAD_ATOL = 1e-4  # refitted coordinates must match the stored ones this closely


def array_sha256(arr: np.ndarray) -> str:
    """Hex sha256 of an array's dtype, shape and bytes (C order): what ``projection.json``
    records for each stored array, so an edit of any of them is seen on read."""
    a = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


class ProjectionMismatch(ValueError):
    """A stored projection that cannot be brought back as it was: its files are missing or
    unreadable, or refitting on its rows lands elsewhere than its stored coordinates."""


class SharedProjection:
    """PCA (+ UMAP) fitted on reference states, reused to place student states.

    Args:
        method: ``"umap"``, ``"pca"`` or ``"auto"`` (UMAP when possible, else PCA).
        n_components: output dimensions (2 for plots).
        pca_dim: PCA pre-reduction width used before UMAP when the input has more features.
        n_neighbors: UMAP neighbourhood size (capped at n - 1).
        min_dist: UMAP minimum distance in the embedding.
        seed: random state of PCA and UMAP (fit and transform).

    Attributes (after ``fit``):
        method_: the method actually used (``"umap"`` or ``"pca"``).
        fallback_reason_: why ``"auto"`` fell back to PCA (None otherwise).
        n_features_in_: width d of the fitted states.
        pca_: the fitted ``sklearn.decomposition.PCA`` (None when UMAP runs on raw features).
        umap_: the fitted ``umap.UMAP`` (None for PCA-only).
        fit_points_: the (PCA-reduced) rows UMAP was fitted on, which `transform` measures new
            rows' distances to (None when UMAP computes its own distances: PCA-only, or
            ``SMALL_DATA`` rows or more).
        embedding_: (n, n_components) float32 coordinates of the fitted rows.

    Example::

        proj = SharedProjection(seed=0).fit(np.vstack([ref_source, ref_target]))
        ref_xy = proj.embedding_
        student_xy = proj.transform(np.vstack([stu_source, stu_target]))
    """

    def __init__(
        self,
        method: Method = "auto",
        n_components: int = 2,
        pca_dim: int = 50,
        n_neighbors: int = 15,
        min_dist: float = 0.1,
        seed: int = 0,
    ) -> None:
        self.method = method
        self.n_components = n_components
        self.pca_dim = pca_dim
        self.n_neighbors = n_neighbors
        self.min_dist = min_dist
        self.seed = seed

    # -- helpers ---------------------------------------------------------------------------

    def _check_params(self) -> None:
        if self.method not in ("umap", "pca", "auto"):
            raise ValueError(f"method must be 'umap', 'pca' or 'auto', got {self.method!r}")
        for name in ("n_components", "pca_dim", "n_neighbors"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.n_neighbors < 2:
            raise ValueError(f"n_neighbors must be at least 2, got {self.n_neighbors}")
        if not 0.0 <= float(self.min_dist):
            raise ValueError(f"min_dist must be >= 0, got {self.min_dist!r}")

    def _min_rows_for_umap(self) -> int:
        return max(self.n_neighbors + 2, 10)

    def _choose_method(self, n: int) -> tuple[str, str | None]:
        """Return (method, fallback reason)."""
        if self.method == "pca":
            return "pca", None
        need = self._min_rows_for_umap()
        umap_mod = _umap_module()
        if self.method == "umap":
            if umap_mod is None:
                raise ImportError(
                    "method='umap' needs umap-learn (pip install umap-learn); "
                    "use method='auto' or 'pca' to fall back to PCA"
                )
            if n < need:
                raise ValueError(
                    f"method='umap' needs at least {need} rows for n_neighbors="
                    f"{self.n_neighbors}, got {n}; use method='auto' or 'pca'"
                )
            return "umap", None
        if umap_mod is None:
            return "pca", "umap-learn is not importable"
        if n < need:
            return "pca", f"only {n} rows (UMAP needs at least {need} for n_neighbors={self.n_neighbors})"
        return "umap", None

    def _check_fitted(self) -> None:
        if not hasattr(self, "method_"):
            raise RuntimeError("SharedProjection is not fitted; call fit() first")

    # -- API -------------------------------------------------------------------------------

    def fit(self, X_reference: Any, y: Any = None) -> SharedProjection:
        """Fit the projection on reference states (source and target domains stacked).

        Args:
            X_reference: (n, d) reference hidden states.
            y: ignored (scikit-learn convention).

        Returns:
            self.
        """
        from sklearn.decomposition import PCA

        self._check_params()
        X = _as_states(X_reference, "fit(X_reference)")
        n, d = X.shape
        if self.n_components > min(n, d):
            raise ValueError(
                f"n_components={self.n_components} needs at least that many rows and features, "
                f"got shape {X.shape}"
            )
        method, reason = self._choose_method(n)
        if reason is not None:
            logger.info("SharedProjection: using PCA instead of UMAP: %s", reason)
        self.method_ = method
        self.fallback_reason_ = reason
        self.n_features_in_ = d
        self.fit_input_ = X  # kept so that `save` can store what the map was fitted on
        self.umap_ = None
        self.fit_points_ = None
        if method == "pca":
            self.pca_ = PCA(n_components=self.n_components, random_state=self.seed).fit(X)
            self.embedding_ = self.pca_.transform(X).astype(np.float32)
            return self
        Z = X
        self.pca_ = None
        if d > self.pca_dim:
            self.pca_ = PCA(n_components=min(self.pca_dim, n), random_state=self.seed).fit(X)
            Z = self.pca_.transform(X).astype(np.float32)
        umap_mod = _umap_module()
        assert umap_mod is not None  # _choose_method checked
        # below SMALL_DATA rows umap-learn uses exact distances: give them precomputed (fast);
        # above, its approximate neighbour search is fast on its own and a matrix would be large
        small = n < SMALL_DATA
        self.fit_points_ = np.ascontiguousarray(Z, dtype=np.float32) if small else None
        self.umap_ = umap_mod.UMAP(
            n_components=self.n_components,
            n_neighbors=min(self.n_neighbors, n - 1),
            min_dist=self.min_dist,
            metric="precomputed" if small else "euclidean",
            random_state=self.seed,
            transform_seed=self.seed,
            n_jobs=1,  # what random_state implies anyway; saying it silences umap's warning
        )
        with _torch_threads_kept(), warnings.catch_warnings():  # no inverse_transform: not used
            warnings.filterwarnings("ignore", message=".*precomputed.*", category=UserWarning)
            self.umap_.fit(_distances(self.fit_points_, self.fit_points_) if small else Z)
        self.embedding_ = np.asarray(self.umap_.embedding_, dtype=np.float32)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Place new states (e.g. the student's) in the fitted space.

        Args:
            X: (m, d) states with the same width d as the fitted reference.

        Returns:
            (m, n_components) float32 coordinates.
        """
        self._check_fitted()
        arr = _as_states(X, "transform(X)")
        if arr.shape[1] != self.n_features_in_:
            raise ValueError(
                f"transform(X): expected {self.n_features_in_} features (as in fit), "
                f"got {arr.shape[1]}"
            )
        if self.method_ == "pca":
            return self.pca_.transform(arr).astype(np.float32)
        Z = self.pca_.transform(arr).astype(np.float32) if self.pca_ is not None else arr
        with _torch_threads_kept(), warnings.catch_warnings():  # "assuming ... distances"
            warnings.filterwarnings("ignore", message=".*precomputed.*", category=UserWarning)
            out = self.umap_.transform(
                Z if self.fit_points_ is None else _distances(Z, self.fit_points_))
        return np.asarray(out, dtype=np.float32)

    def fit_transform(self, X_reference: Any, y: Any = None) -> np.ndarray:
        """``fit(X_reference)`` and return the fitted coordinates ``embedding_``, (n, n_components)."""
        return self.fit(X_reference).embedding_

    def save(self, folder: str | Path, extra: dict[str, np.ndarray] | None = None) -> Path:
        """Store the fitted projection in ``folder``: ``projection.safetensors`` (the fitted rows
        ``fit_input``, the coordinates ``embedding``, and any ``extra`` float arrays, e.g. the
        caller's projected reference) and ``projection.json`` (settings, the method used, the
        umap-learn version). No pickle. Returns the folder."""
        from safetensors.numpy import save_file

        self._check_fitted()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {"fit_input": np.ascontiguousarray(self.fit_input_, dtype=np.float32),
                  "embedding": np.ascontiguousarray(self.embedding_, dtype=np.float32)}
        for name, arr in (extra or {}).items():
            if name in arrays:
                raise ValueError(f"save(extra=...): {name!r} is a reserved array name")
            arrays[name] = np.ascontiguousarray(arr, dtype=np.float32)
        umap_mod = _umap_module()
        meta = {"format": PROJECTION_FORMAT, "params": {k: getattr(self, k) for k in _PARAMS},
                "method_": self.method_, "fallback_reason_": self.fallback_reason_,
                "n_features_in_": int(self.n_features_in_),
                "umap_learn": getattr(umap_mod, "__version__", None) if umap_mod else None,
                "sha256": {name: array_sha256(arr) for name, arr in arrays.items()}}
        write_atomic(folder / "projection.safetensors", lambda t: save_file(arrays, str(t)))
        write_atomic(folder / "projection.json", lambda t: t.write_text(json.dumps(meta, indent=1)))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> tuple[SharedProjection, dict[str, np.ndarray]]:
        """``(projection, extra arrays)`` from a folder written by `save`: refitted on the stored
        rows and checked against the stored coordinates (to 1e-4); a `ProjectionMismatch` when
        the files are missing or unreadable, the format is another, or the refit lands elsewhere
        (another umap-learn, another BLAS)."""
        from safetensors.numpy import load_file

        folder = Path(folder)
        try:
            meta = json.loads((folder / "projection.json").read_text())
            arrays = load_file(str(folder / "projection.safetensors"))
            params, fit_input, stored = meta["params"], arrays.pop("fit_input"), arrays.pop("embedding")
        except Exception as err:  # OSError, ValueError, KeyError, SafetensorError
            raise ProjectionMismatch(f"{folder}: no readable stored projection ({err})") from None
        if meta.get("format") != PROJECTION_FORMAT:
            raise ProjectionMismatch(f"{folder}: projection format {meta.get('format')!r}, this "
                                     f"code reads {PROJECTION_FORMAT}")
        # every array a caller reads (the extras too, e.g. the stored reference coordinates) must
        # be the one written: the refit below checks only the embedding
        want = meta.get("sha256")
        got = {"fit_input": fit_input, "embedding": stored, **arrays}
        if not isinstance(want, dict) or set(want) != set(got):
            raise ProjectionMismatch(
                f"{folder / 'projection.json'}: 'sha256' must map each array of "
                f"projection.safetensors ({sorted(got)}) to its hash, got "
                f"{sorted(want) if isinstance(want, dict) else want!r}")
        changed = sorted(k for k, arr in got.items() if array_sha256(arr) != want[k])
        if changed:
            raise ProjectionMismatch(
                f"{folder / 'projection.safetensors'}: array(s) {changed} differ from the "
                f"sha256 recorded in projection.json (edited or corrupted)")
        proj = cls(**{k: params[k] for k in _PARAMS}).fit(fit_input)
        if proj.method_ != meta["method_"] or proj.embedding_.shape != stored.shape or not np.allclose(
                proj.embedding_, stored, atol=_LOAD_ATOL, rtol=0):
            raise ProjectionMismatch(
                f"{folder}: refitting on the stored rows does not give the stored map (method "
                f"{proj.method_} vs {meta['method_']}; umap-learn "
                f"{getattr(_umap_module(), '__version__', None)} vs {meta.get('umap_learn')})")
        return proj, arrays
