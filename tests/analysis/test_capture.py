"""Capture storage dtype: finite states beyond float16's range (65504) are kept, not turned into
inf; genuinely non-finite states are still refused with the error naming layer and pair."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import tiny_backbone, tiny_model_and_pairs, toy_pairs, word_tokenizer

import anchorviz.analysis.capture as capture_mod
from anchorviz.analysis.capture import (
    Captured,
    CaptureError,
    capture_states,
    load_captured,
    save_captured,
)
from anchorviz.models.reward_model import ModelError, RewardModel, pool_states
from anchorviz.models.tokenization import encode_pairs
from anchorviz.training.loop import joint_batch

F16_MAX = float(np.finfo(np.float16).max)


def _model_and_pairs(kind: str, n: int = 6):
    tok = word_tokenizer(kind)
    model = RewardModel(tiny_backbone(kind, vocab_size=len(tok), layers=2))
    return model, encode_pairs(tok, toy_pairs(n), max_length=16)


@torch.no_grad()
def _expected(model: RewardModel, enc, layers: list[int]) -> dict[str, dict[int, np.ndarray]]:
    """Pooled float32 states of every row, computed directly (one batch, no storage cast)."""
    model.eval()
    idx = list(range(len(enc)))
    batch, _ = joint_batch(enc, idx)
    out = model(batch.input_ids, batch.attention_mask, batch.response_mask, layers=layers)
    rows = np.array([2 * i for i in idx] + [2 * i + 1 for i in idx])
    want: dict[str, dict[int, np.ndarray]] = {"mean": {}, "head": {}}
    for k in layers:
        for kind, pooling in (("mean", "mean"), ("head", model.pooling)):
            arr = np.empty((2 * len(enc), model.hidden_size), np.float32)
            arr[rows] = pool_states(out.hidden[k].float(), batch.response_mask, pooling).numpy()
            want[kind][k] = arr
    return want


def test_encoder_layer_beyond_float16_is_stored_as_float32(tmp_path: Path) -> None:
    model, enc = _model_and_pairs("encoder")
    with torch.no_grad():  # layer 0 (post-LayerNorm embeddings) ~1e5; later layers re-normalise
        model.backbone.embeddings.LayerNorm.weight.mul_(3e5)
    want = _expected(model, enc, [0, 1, 2])
    assert np.abs(want["mean"][0]).max() > 2 * F16_MAX
    assert np.abs(want["mean"][2]).max() < 100.0
    cap = capture_states(model, enc, batch_size=4, progress=False, token_sample=20)
    back = load_captured(save_captured(tmp_path / "c.safetensors", cap))
    for c in (cap, back):
        for k in (0, 1, 2):
            got = c.states(k).astype(np.float32)
            assert np.isfinite(got).all(), f"layer {k} has inf after storage"
            assert np.isfinite(c.tokens[k]).all()
        assert c.mean[0].dtype == np.float32  # promoted: exact
        assert c.mean[2].dtype == np.float16  # in range: unchanged storage
        assert c.tokens[0].dtype == np.float32 and c.tokens[2].dtype == np.float16
        np.testing.assert_allclose(c.states(0).astype(np.float32), want["mean"][0], rtol=1e-5,
                                   atol=0.0)
        np.testing.assert_allclose(c.states(2).astype(np.float32), want["mean"][2], rtol=2e-3,
                                   atol=2e-3)


def test_decoder_head_and_mean_beyond_float16_are_kept(tmp_path: Path) -> None:
    model, enc = _model_and_pairs("decoder")
    assert model.pooling == "last"
    with torch.no_grad():  # a huge residual stream (the final norm brings the last layer back)
        model.backbone.embed_tokens.weight.mul_(1e7)
    want = _expected(model, enc, [0, 1, 2])
    assert np.abs(want["head"][0]).max() > 2 * F16_MAX
    cap = capture_states(model, enc, batch_size=64, progress=False)
    assert cap.head is not cap.mean
    back = load_captured(save_captured(tmp_path / "d.safetensors", cap))
    for c in (cap, back):
        for kind in ("mean", "head"):
            for k in (0, 1, 2):
                got = c.states(k, kind).astype(np.float32)
                assert np.isfinite(got).all(), f"{kind} layer {k} has inf after storage"
                if np.abs(want[kind][k]).max() > F16_MAX:
                    assert c.states(k, kind).dtype == np.float32
                    np.testing.assert_allclose(got, want[kind][k], rtol=1e-5,
                                               atol=1e-6 * np.abs(want[kind][k]).max())


def test_storage_cast_keeps_large_values_and_flags_non_finite() -> None:
    big = np.array([[1.5e5, -2.0], [3.0, 0.25]], np.float32)
    stored, finite = capture_mod._storage(big)
    assert finite and stored.dtype == np.float32
    np.testing.assert_array_equal(stored, big)
    small = np.array([[1.0, -2.0]], np.float32)
    stored, finite = capture_mod._storage(small)
    assert finite and stored.dtype == np.float16
    for bad in (np.nan, np.inf):
        stored, finite = capture_mod._storage(np.array([[1.0, bad]], np.float32))
        assert not finite
    # A float16 buffer is promoted the first time a batch overflows and stays float32 after.
    store = {3: np.zeros((6, 2), np.float16)}
    assert capture_mod._store_rows(store, 3, np.array([0, 1]), small.repeat(2, 0), "t") is None
    assert capture_mod._store_rows(store, 3, np.array([2, 3]), big, "t") is None
    assert store[3].dtype == np.float32
    assert capture_mod._store_rows(store, 3, np.array([4, 5]), big / 1e5, "t") is None
    assert store[3].dtype == np.float32
    np.testing.assert_array_equal(store[3][2:4], big)
    np.testing.assert_array_equal(store[3][4:6], big / 1e5)  # full precision after promotion
    np.testing.assert_array_equal(store[3][0:2], small.repeat(2, 0))
    bad = big.copy()
    bad[1, 0] = np.nan
    assert capture_mod._store_rows(store, 3, np.array([0, 1]), bad, "t") == 1


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_states_are_still_refused(value: float) -> None:
    model, enc = _model_and_pairs("encoder")
    with torch.no_grad():
        model.backbone.embeddings.word_embeddings.weight.fill_(value)
    with pytest.raises(CaptureError, match=r"non-finite hidden states at layer 0 for pair 'toy-"):
        capture_states(model, enc, progress=False)


# --------------------------------------------------------------------------- capture: bad input


def test_capture_rejects_empty_and_out_of_range_layers() -> None:
    model, enc = tiny_model_and_pairs()
    with pytest.raises(CaptureError, match="no pairs to capture"):
        capture_states(model, enc.subset([]), progress=False)
    for layers in ([3], [-1], [0, 7]):
        with pytest.raises(ModelError, match="outside this model"):
            capture_states(model, enc, layers=layers, progress=False)
    with pytest.raises(CaptureError, match="adapters=False needs a LoRA"):
        capture_states(model, enc, adapters=False, progress=False)


def test_capture_refuses_non_finite_states_naming_layer_and_pair() -> None:
    model, enc = tiny_model_and_pairs()
    with torch.no_grad():
        model.backbone.embeddings.word_embeddings.weight.fill_(float("nan"))
    with pytest.raises(CaptureError, match=r"non-finite hidden states at layer 0 for pair 'toy-"):
        capture_states(model, enc, progress=False)


def _small_capture() -> Captured:
    mean = {0: np.zeros((4, 3), np.float16), 1: np.ones((4, 3), np.float16)}
    return Captured(pair_ids=["a", "b"], layers=[0, 1], pooling="mean", mean=mean, head=mean,
                    rewards=np.zeros(4, np.float32), side=np.array([0, 1, 0, 1], np.int8))


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "pickle"])
def test_load_captured_names_a_damaged_file(tmp_path: Path, damage: str) -> None:
    path = save_captured(tmp_path / "c.safetensors", _small_capture())
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                      "garbage": os.urandom(64), "pickle": pickle.dumps({"x": 1})}[damage])
    with pytest.raises(CaptureError, match=rf"{re.escape(str(path))}: not a readable safetensors "
                                           r"capture .*truncated or corrupted"):
        load_captured(path)


def test_load_captured_missing_foreign_and_layer_not_captured(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    with pytest.raises(CaptureError, match="does not exist"):
        load_captured(tmp_path / "none.safetensors")
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": np.zeros(3, np.float32)}, str(foreign))
    with pytest.raises(CaptureError, match="not an anchorviz capture"):
        load_captured(foreign)
    path = save_captured(tmp_path / "c.safetensors", _small_capture())
    with pytest.raises(CaptureError, match=r"layer\(s\) \[5\] not captured; captured: \[0, 1\]"):
        load_captured(path, layers=[5])
    assert load_captured(path, layers=[1]).layers == [1]
