"""Stored shared state is checked in full: every array of a stored projection (the reference
coordinates a run reads too, not only the refitted embedding) and the files' modes."""

from __future__ import annotations

import logging
import os
import stat

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from tiny_project import tiny_config

from anchorviz.analysis.projection import ProjectionMismatch, SharedProjection
from anchorviz.pipeline import steps
from anchorviz.pipeline.store import RunStore


class _Cap:
    def __init__(self, X: np.ndarray) -> None:
        self.X = X

    def states(self, layer: int, pooling: str) -> np.ndarray:  # noqa: ARG002 - the capture API
        return self.X


def _edit(path, name: str, delta: float) -> None:
    arrays = load_file(str(path))
    arrays[name] = arrays[name] + np.float32(delta)
    save_file(arrays, str(path))


def test_an_edited_extra_array_is_refused_naming_the_file(tmp_path):
    X = np.random.default_rng(0).normal(size=(60, 8)).astype(np.float32)
    proj = SharedProjection(method="pca", seed=0).fit(X)
    proj.save(tmp_path, extra={"reference_xy": proj.transform(X)})
    SharedProjection.load(tmp_path)  # as written: read back
    _edit(tmp_path / "projection.safetensors", "reference_xy", 14.6)
    with pytest.raises(ProjectionMismatch, match=r"projection\.safetensors.*reference_xy"):
        SharedProjection.load(tmp_path)


@pytest.mark.parametrize("method", ["pca"])
def test_the_next_run_refits_an_edited_stored_reference_map_and_warns(tmp_path, caplog,
                                                                      monkeypatch, method):
    monkeypatch.setattr(steps, "_PROJECTORS", {})
    cfg = tiny_config(tmp_path)
    cfg.capture.projection = method
    store = RunStore(tmp_path / "store")
    caps = {"a": _Cap(np.random.default_rng(1).normal(size=(80, 8)).astype(np.float32))}
    _, want = steps._projector(store, cfg, caps, 1)
    (folder,) = (store.root / "shared").glob("projection-*")
    _edit(folder / "projection.safetensors", "reference_xy", 14.6)
    monkeypatch.setattr(steps, "_PROJECTORS", {})  # a new process
    with caplog.at_level(logging.WARNING):
        _, got = steps._projector(store, cfg, caps, 1)
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert any("projection.safetensors" in r.getMessage() and "reference_xy" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_stored_projection_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        X = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
        SharedProjection(method="pca", seed=0).fit(X).save(tmp_path)
    finally:
        os.umask(old)
    for name in ("projection.safetensors", "projection.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
