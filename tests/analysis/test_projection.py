"""Tests for anchorviz.analysis.projection.SharedProjection (UMAP + PCA fallback)."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import torch
from builders import related_states, with_value

from anchorviz.analysis import projection
from anchorviz.analysis.projection import SharedProjection


def _clusters(n_per: int = 40, d: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated Gaussian clusters in d dimensions, and their labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, d)) * 6.0
    x = np.vstack([c + rng.normal(size=(n_per, d)) for c in centres]).astype(np.float32)
    return x, np.repeat(np.arange(3), n_per)


@pytest.fixture(scope="module")
def fitted_umap() -> tuple[SharedProjection, np.ndarray]:
    x, _ = _clusters()
    return SharedProjection(method="umap", pca_dim=20, n_neighbors=10, seed=3).fit(x), x


def test_umap_fit_attributes_and_reproducibility(fitted_umap):
    proj, x = fitted_umap
    assert proj.method_ == "umap" and proj.fallback_reason_ is None
    assert proj.n_features_in_ == 64
    assert proj.pca_ is not None and proj.pca_.n_components_ == 20  # d = 64 > pca_dim = 20
    assert proj.umap_ is not None
    assert proj.embedding_.shape == (120, 2)
    again = SharedProjection(method="umap", pca_dim=20, n_neighbors=10, seed=3).fit_transform(x)
    np.testing.assert_array_equal(again, proj.embedding_)
    np.testing.assert_array_equal(proj.transform(x[:7]), proj.transform(x[:7]))


def test_transform_of_fit_data_lands_near_fit_embedding(fitted_umap):
    proj, x = fitted_umap
    placed = proj.transform(x)
    spread = np.linalg.norm(proj.embedding_ - proj.embedding_.mean(axis=0), axis=1).mean()
    moved = np.linalg.norm(placed - proj.embedding_, axis=1)
    assert np.median(moved) < 0.15 * spread


def test_drifted_states_move_away(fitted_umap):
    proj, x = fitted_umap
    _, labels = _clusters()
    centres = np.stack([proj.embedding_[labels == k].mean(axis=0) for k in range(3)])
    # Move cluster 0's states onto cluster 1 in feature space: they should land near cluster 1.
    shift = x[labels == 1].mean(axis=0) - x[labels == 0].mean(axis=0)
    placed = proj.transform(x[labels == 0] + shift).mean(axis=0)
    assert np.linalg.norm(placed - centres[1]) < np.linalg.norm(placed - centres[0])


def test_pca_method_and_auto_fallback_on_tiny_n(caplog):
    x, _ = _clusters(n_per=3, d=8)  # 9 rows < max(n_neighbors + 2, 10)
    with caplog.at_level(logging.INFO, logger="anchorviz.analysis.projection"):
        proj = SharedProjection(method="auto", n_neighbors=15).fit(x)
    assert proj.method_ == "pca" and proj.umap_ is None
    assert "only 9 rows" in proj.fallback_reason_
    assert "using PCA instead of UMAP" in caplog.text
    emb = proj.embedding_
    assert emb.shape == (9, 2)
    np.testing.assert_allclose(proj.transform(x), emb, atol=1e-5)
    pca = SharedProjection(method="pca", n_components=3).fit(x)
    assert pca.method_ == "pca" and pca.fallback_reason_ is None
    assert pca.transform(x[:2]).shape == (2, 3)


def test_auto_falls_back_when_umap_missing(monkeypatch):
    monkeypatch.setattr(projection, "_umap_module", lambda: None)
    x, _ = _clusters(n_per=10, d=8)
    proj = SharedProjection(method="auto").fit(x)
    assert proj.method_ == "pca" and proj.fallback_reason_ == "umap-learn is not importable"
    with pytest.raises(ImportError, match="needs umap-learn"):
        SharedProjection(method="umap").fit(x)


def test_validation_errors(fitted_umap):
    proj, x = fitted_umap
    with pytest.raises(ValueError, match=r"expected 64 features \(as in fit\), got 63"):
        proj.transform(x[:, :63])
    with pytest.raises(ValueError, match="expected a 2-D array"):
        proj.transform(x[0])
    bad = x[:5].copy()
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"1 row\(s\) contain NaN or inf"):
        proj.transform(bad)
    with pytest.raises(ValueError, match="real-valued"):
        SharedProjection().fit(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(ValueError, match="method must be"):
        SharedProjection(method="tsne").fit(x)
    with pytest.raises(ValueError, match="needs at least 17 rows"):
        SharedProjection(method="umap").fit(x[:9])
    with pytest.raises(RuntimeError, match="not fitted"):
        SharedProjection().transform(x)


def test_precomputed_distances_give_umaps_own_exact_neighbour_graph(fitted_umap):
    """UMAP is fed Euclidean distances computed by anchorviz (umap-learn's per-pair Python path
    was ~90% of a student's projection time); its fuzzy neighbour graph must be the one umap-learn
    builds from the points themselves, and a new row's distances must be to the fitted rows."""
    import umap

    proj, x = fitted_umap
    assert proj.umap_.metric == "precomputed" and proj.fit_points_.shape == (120, 20)
    own = umap.UMAP(n_neighbors=10, min_dist=proj.min_dist, random_state=3, n_jobs=1).fit(
        proj.fit_points_)
    np.testing.assert_allclose(proj.umap_.graph_.toarray(), own.graph_.toarray(), atol=1e-5)
    # a fitted row placed again lands among its own cluster's rows
    _, labels = _clusters()
    xy = proj.transform(x[:1])
    dist = np.linalg.norm(proj.embedding_ - xy, axis=1)
    assert set(labels[np.argsort(dist)[:10]]) == {labels[0]}


def test_many_rows_let_umap_search_its_own_neighbours(monkeypatch):
    monkeypatch.setattr(projection, "SMALL_DATA", 50)
    x, _ = _clusters(n_per=30, d=16)
    proj = SharedProjection(method="umap", n_neighbors=10, seed=0).fit(x)
    assert proj.umap_.metric == "euclidean" and proj.fit_points_ is None
    assert proj.transform(x[:3]).shape == (3, 2)


@pytest.mark.slow  # over 5 s on 2 busy cores: a fresh interpreter importing umap
def test_a_projection_leaves_torchs_thread_count_alone():
    """umap-learn's numba OpenMP layer used to reset torch's intra-op threads to every core when
    it first started (hence a fresh process): a worker pinned to one thread then trained on
    two (four threads on two cores with --jobs 2), and one process and a worker summed floats
    differently."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    code = (
        "import numpy as np, torch\n"
        "torch.set_num_threads(1)\n"
        # an OpenMP-parallel torch op first (a matmul alone goes to BLAS): torch's OpenMP
        # runtime must be started for numba's to override its thread count
        "lin, z = torch.nn.Linear(384, 1536), torch.randn(1024, 384, requires_grad=True)\n"
        "torch.nn.functional.gelu(lin(z)).sum().backward()\n"
        "from anchorviz.analysis.projection import SharedProjection\n"
        "x = np.random.default_rng(0).normal(size=(60, 16)).astype(np.float32)\n"
        "p = SharedProjection(method='umap', n_neighbors=10, seed=0).fit(x)\n"
        "a = torch.get_num_threads()\n"
        "p.transform(x[:5])\n"
        "print(a, torch.get_num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"}
    env["NUMBA_NUM_THREADS"] = "2"  # as on a 2-core machine: numba's pool is wider than torch's
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1"]


# --------------------------------------------------------------------------- projection: bad input


X, Y = related_states()

PROJECTION_CASES = [
    ("fit nan", lambda: SharedProjection(method="pca").fit(with_value(X, np.nan)),
     r"fit\(X_reference\): 1 row\(s\) contain NaN or inf"),
    ("fit inf", lambda: SharedProjection(method="pca").fit(with_value(X, np.inf)), "contain NaN or inf"),
    ("fit overflow", lambda: SharedProjection(method="pca").fit(X * 1e300), "contain NaN or inf"),
    ("fit torch nan", lambda: SharedProjection(method="pca").fit(torch.tensor(with_value(X, np.nan))),
     "contain NaN or inf"),
    ("fit empty", lambda: SharedProjection(method="pca").fit(np.zeros((0, 4))),
     r"expected a non-empty array, got shape \(0, 4\)"),
    ("fit no features", lambda: SharedProjection(method="pca").fit(np.zeros((5, 0))),
     "non-empty array"),
    ("fit 1-D", lambda: SharedProjection().fit(np.zeros(5)), "expected a 2-D array"),
    ("too many components", lambda: SharedProjection(method="pca", n_components=8).fit(X),
     r"n_components=8 needs at least that many rows and features, got shape \(20, 5\)"),
    ("zero components", lambda: SharedProjection(n_components=0).fit(X),
     "n_components must be a positive integer"),
    ("one neighbour", lambda: SharedProjection(n_neighbors=1).fit(X), "n_neighbors must be at least 2"),
    ("negative min_dist", lambda: SharedProjection(min_dist=-1.0).fit(X), "min_dist must be >= 0"),
    ("transform nan", lambda: SharedProjection(method="pca").fit(X).transform(with_value(X, np.nan)),
     r"transform\(X\): 1 row\(s\) contain NaN or inf"),
    ("transform width", lambda: SharedProjection(method="pca").fit(X).transform(X[:, :3]),
     r"expected 5 features \(as in fit\), got 3"),
]


@pytest.mark.parametrize("name, call, match", PROJECTION_CASES,
                         ids=[c[0] for c in PROJECTION_CASES])
def test_projection_bad_input(name: str, call, match: str) -> None:
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=match):
        call()


def test_projection_output_is_finite_for_extreme_but_finite_states() -> None:
    proj = SharedProjection(method="pca").fit(X * 1e15)
    assert np.isfinite(proj.transform(Y * 1e15)).all() and np.isfinite(proj.embedding_).all()
    with pytest.raises(RuntimeError, match="not fitted"):
        SharedProjection().transform(X)


@pytest.mark.parametrize("method", ["umap", "pca"])
def test_a_saved_projection_comes_back_as_the_same_map(tmp_path, method):
    X, _ = _clusters()
    proj = SharedProjection(method=method, seed=0).fit(X)
    new = X[:7] + 0.5
    ref_xy = proj.transform(X)
    proj.save(tmp_path / "p", extra={"reference_xy": ref_xy})
    back, extra = SharedProjection.load(tmp_path / "p")
    assert back.method_ == method
    np.testing.assert_array_equal(back.embedding_, proj.embedding_)
    np.testing.assert_array_equal(back.transform(new), proj.transform(new))
    np.testing.assert_array_equal(extra["reference_xy"], ref_xy)
    with pytest.raises(ValueError, match="reserved"):
        proj.save(tmp_path / "q", extra={"embedding": ref_xy})


def test_a_stored_projection_that_does_not_refit_to_its_map_is_refused(tmp_path):
    from safetensors.numpy import load_file, save_file

    X, _ = _clusters()
    folder = SharedProjection(method="pca", seed=0).fit(X).save(tmp_path / "p")
    arrays = load_file(str(folder / "projection.safetensors"))
    arrays["embedding"] = arrays["embedding"] + 1.0  # coordinates that this map does not give
    save_file(arrays, str(folder / "projection.safetensors"))
    # the recorded array hashes catch it first ...
    with pytest.raises(projection.ProjectionMismatch, match=r"\['embedding'\] differ from the sha256"):
        SharedProjection.load(folder)
    # ... and with the hashes rewritten to match, the refit to the stored rows still does
    meta = json.loads((folder / "projection.json").read_text())
    meta["sha256"]["embedding"] = projection.array_sha256(arrays["embedding"])
    (folder / "projection.json").write_text(json.dumps(meta))
    with pytest.raises(projection.ProjectionMismatch, match="does not give the stored map"):
        SharedProjection.load(folder)
    (folder / "projection.safetensors").write_bytes(b"truncated")
    with pytest.raises(projection.ProjectionMismatch, match="no readable stored projection"):
        SharedProjection.load(folder)
    with pytest.raises(projection.ProjectionMismatch, match="no readable stored projection"):
        SharedProjection.load(tmp_path / "nothing")
