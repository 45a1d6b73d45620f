"""Issue 19.1: a run's checkpoint is the trained model (head + whole backbone, or head + LoRA
adapters), reloaded by `load_run_model` it gives the stored scores and metrics on every split,
and a checkpoint that does not cover the trained parameters is refused."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from safetensors.torch import save_file
from tiny_project import save_tiny_model, tiny_config

from anchorviz.analysis.metrics import pairwise_accuracy
from anchorviz.models.reward_model import (
    CHECKPOINT_FILE,
    ModelError,
    checkpoint_metadata,
    head_state,
    load_checkpoint,
    load_reward_model,
    load_trainable_state,
    save_checkpoint,
)
from anchorviz.pipeline.prepare import data_config, eval_splits, prepare_data
from anchorviz.pipeline.steps import encode_run_pairs
from anchorviz.pipeline.store import load_run_model
from anchorviz.pipeline.sweep import run
from anchorviz.training.loop import score_pairs

LORA = {"r": 4, "target_modules": ["query", "value"]}


def _rescored(run_dir, cfg):
    """Scores of the model reloaded from ``run_dir`` on every eval split: {split: (rc, rr)}."""
    model, tok = load_run_model(run_dir)
    data = prepare_data(data_config(cfg))
    out = {}
    for split in eval_splits(data):
        enc = encode_run_pairs(tok, data[split], cfg)
        rc, rr = score_pairs(model, enc, batch_size=cfg.capture.batch_size)
        out[split] = (enc.pair_ids, rc, rr)
    return out


@pytest.mark.parametrize("lora", [None, LORA], ids=["full-fine-tune", "lora"])
def test_stored_metrics_equal_those_of_the_reloaded_model_on_every_split(tmp_path, lora):
    over = {"models.student_lora": lora} if lora else {}
    # a larger lr moves the backbone far from its pretrained weights, so a head-only
    # checkpoint (the old behaviour) gives visibly different rewards
    over.update({"student_train.lr": 5e-3, "student_train.epochs": 2})
    cfg = tiny_config(tmp_path, **over)
    results = run(cfg, tmp_path / "out", progress=False)
    assert [r.kind for r in results] == ["teacher", "ceiling", "student"]
    for res in results:
        metrics = json.loads((res.run_dir / "metrics.json").read_text())
        stored = pd.read_parquet(res.run_dir / "scores.parquet")
        meta = checkpoint_metadata(res.run_dir / CHECKPOINT_FILE)
        assert meta["trained"] == ("lora" if lora and res.kind != "teacher" else "full")
        assert meta["checkpoint"] == "2"
        base = meta["base"]
        model_name = cfg.models.teacher if res.kind == "teacher" else cfg.models.student
        assert base["name"] == model_name and base["fingerprint"].startswith("dir:")
        all_c, all_r = [], []
        for split, (pair_ids, rc, rr) in _rescored(res.run_dir, cfg).items():
            s = stored[stored["split"] == split].set_index("pair_id").loc[pair_ids]
            np.testing.assert_allclose(rc, s["r_chosen"].to_numpy(), rtol=0, atol=1e-5,
                                       err_msg=f"{res.kind} {split}")
            np.testing.assert_allclose(rr, s["r_rejected"].to_numpy(), rtol=0, atol=1e-5,
                                       err_msg=f"{res.kind} {split}")
            assert pairwise_accuracy(rc, rr) == metrics["accuracy"][split]["point"], (res.kind, split)
            if split != "source_test":
                all_c.append(rc)
                all_r.append(rr)
        ood = pairwise_accuracy(np.concatenate(all_c), np.concatenate(all_r))
        assert ood == metrics["accuracy"]["ood"]["point"]


def test_a_head_only_checkpoint_of_a_fine_tuned_model_is_refused(tmp_path):
    folder = save_tiny_model(tmp_path / "m", layers=2, seed=3)
    model, _ = load_reward_model(str(folder))
    path = tmp_path / "head_only.safetensors"
    save_file(head_state(model), str(path))  # what a full fine-tune's student used to save
    fresh, _ = load_reward_model(str(folder))
    with pytest.raises(ModelError, match=r"does not cover the trained parameters: \d+ of \d+ "
                                         r"missing .*fine-tuned backbone weights"):
        load_checkpoint(fresh, path)
    with pytest.raises(ModelError, match="does not cover the trained parameters"):
        load_trainable_state(fresh, head_state(model))
    # LoRA: adapters are what was trained; a head alone is refused too
    lora_model, _ = load_reward_model(str(folder), lora=LORA)
    with pytest.raises(ModelError, match="LoRA adapters"):
        load_trainable_state(lora_model, head_state(lora_model))


def test_a_checkpoint_is_refused_by_another_base_model_or_another_fine_tune(tmp_path):
    a = save_tiny_model(tmp_path / "a", layers=2, seed=3)
    model, _ = load_reward_model(str(a))
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(model, path)
    other = save_tiny_model(tmp_path / "b", layers=2, seed=4)
    with pytest.raises(ModelError, match="another base model"):
        load_checkpoint(load_reward_model(str(other))[0], path)
    # the same folder with changed weights is another base model as well
    save_tiny_model(a, layers=2, seed=5)
    with pytest.raises(ModelError, match="fingerprint"):
        load_checkpoint(load_reward_model(str(a))[0], path)
    # a full backbone cannot go into a LoRA model, nor adapters into a plain one
    b_model, _ = load_reward_model(str(other), lora=LORA)
    save_checkpoint(b_model, tmp_path / "lora.safetensors")
    with pytest.raises(ModelError, match="does not cover|adapters"):
        load_checkpoint(load_reward_model(str(other))[0], tmp_path / "lora.safetensors")


def test_load_run_model_refuses_a_damaged_or_unfinished_run(tmp_path):
    cfg = tiny_config(tmp_path)
    student = run(cfg, tmp_path / "out", progress=False)[-1].run_dir
    ckpt = student / CHECKPOINT_FILE
    st = ckpt.stat()
    data = bytearray(ckpt.read_bytes())
    data[-10] ^= 0xFF
    ckpt.write_bytes(bytes(data))
    os.utime(ckpt, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: only a hash sees it
    with pytest.raises(ModelError, match="not a finished, intact run .*trainable.safetensors"):
        load_run_model(student)
    with pytest.raises(ModelError, match="not a finished"):
        load_run_model(tmp_path / "out" / "runs" / "nothing-here")
