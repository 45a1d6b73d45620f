"""Tests for anchorviz.projection.SharedProjection (UMAP + PCA fallback)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from anchorviz import projection
from anchorviz.projection import SharedProjection


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
    with caplog.at_level(logging.INFO, logger="anchorviz.projection"):
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
