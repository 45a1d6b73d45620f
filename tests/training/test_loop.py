"""Reward model, reference strategies and the training loop on tiny random backbones."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from builders import tiny_backbone, tiny_model_and_pairs, toy_pairs, word_tokenizer
from tiny_project import save_tiny_model

from anchorviz.analysis.capture import capture_states
from anchorviz.config import TrainConfig, TrainError
from anchorviz.data.schema import PAIR_COLUMNS
from anchorviz.models.reward_model import ModelError, RewardModel, disable_dropout, pool_states
from anchorviz.models.tokenization import encode_pairs
from anchorviz.training.loop import (
    Objective,
    joint_batch,
    lr_factor,
    score_pairs,
    train_reward_model,
)
from anchorviz.training.losses import NonFiniteLossError, anchor_loss
from anchorviz.training.reference import (
    AdapterOffReference,
    CachedReference,
    CopyReference,
    ReferenceSetupError,
    choose_strategy,
)


def _setup(kind="encoder", n=24, seed=0, dropout=0.0, layers=2):
    tok = word_tokenizer(kind)
    model = RewardModel(tiny_backbone(kind, vocab_size=len(tok), layers=layers, seed=seed,
                                      dropout=dropout))
    enc = encode_pairs(tok, toy_pairs(n, seed=seed), max_length=24)
    return model, tok, enc


def test_head_is_zero_initialised_and_pooling_per_architecture():
    enc_model, _, enc = _setup("encoder")
    dec_model, _, _ = _setup("decoder")
    assert enc_model.pooling == "mean" and dec_model.pooling == "last"
    assert torch.count_nonzero(enc_model.head.weight) == 0 and float(enc_model.head.bias) == 0
    rc, rr = score_pairs(enc_model, enc)
    assert np.all(rc == 0) and np.all(rr == 0)


def test_pool_states_mean_and_last():
    states = torch.arange(2 * 4 * 1, dtype=torch.float32).reshape(2, 4, 1)
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 1]])
    assert pool_states(states, mask, "mean")[:, 0].tolist() == [1.5, 7.0]
    assert pool_states(states, mask, "last")[:, 0].tolist() == [2.0, 7.0]
    assert pool_states(states, mask, "cls")[:, 0].tolist() == [0.0, 4.0]
    with pytest.raises(ModelError, match="no response tokens"):
        pool_states(states, torch.zeros(2, 4), "mean")


def test_hidden_states_come_from_the_same_forward():
    model, _, enc = _setup("decoder")
    batch, _ = joint_batch(enc, [0, 1])
    out = model(batch.input_ids, batch.attention_mask, batch.response_mask, layers=[0, 2])
    assert set(out.hidden) == {0, 2}
    assert torch.allclose(pool_states(out.hidden[2], batch.response_mask, "last"), out.pooled)
    with pytest.raises(ModelError, match="outside this model"):
        model(batch.input_ids, batch.attention_mask, batch.response_mask, layers=[3])


def test_dropout_off_makes_train_mode_deterministic():
    model, _, enc = _setup("encoder", dropout=0.3)
    batch, _ = joint_batch(enc, [0, 1, 2])
    model.train()
    a = model.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    b = model.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    assert not torch.equal(a, b)
    assert disable_dropout(model) > 0
    a = model.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    b = model.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    assert torch.equal(a, b)


def test_lr_schedule():
    assert lr_factor(0, 10, 2) == 0.5 and lr_factor(1, 10, 2) == 1.0
    assert lr_factor(2, 10, 2) == 1.0 and lr_factor(6, 10, 2) == 0.5 and lr_factor(10, 10, 2) == 0.0


@pytest.mark.slow  # over 5 s on 2 busy cores: trains until the toy pairs are learnt
def test_gold_training_learns_toy_pairs():
    model, _, enc = _setup("encoder", n=48)
    cfg = TrainConfig(lr=3e-3, epochs=6, batch_size=8, seed=0, progress=False)
    res = train_reward_model(model, enc, np.ones(len(enc)), cfg, val=enc)
    rc, rr = score_pairs(model, enc)
    assert (rc > rr).mean() >= 0.9
    assert res.history["total"].iloc[-5:].mean() < res.history["total"].iloc[:5].mean()
    assert {"fit", "total", "lr", "grad_norm"} <= set(res.history.columns)
    assert len(res.evals) == 6


def _train(strategy, kind="encoder", lam=1.0, lora=False, seed=0, epochs=1.0):
    model, tok, enc = _setup(kind, n=16)
    if lora:
        from anchorviz.models.reward_model import apply_lora

        model = RewardModel(apply_lora(model.backbone, {"r": 4, "target_modules": ["query", "value"]}))
    ref = None
    if strategy == "copy":
        ref = CopyReference(model, [2])
    elif strategy == "adapter_off":
        ref = AdapterOffReference(model, [2])
    elif strategy == "cached":
        ref = CachedReference(model, enc, [2])
    cfg = TrainConfig(lr=1e-3, epochs=epochs, batch_size=4, seed=seed, progress=False)
    obj = Objective(anchor_lambda=lam, anchor_layers=[2] if ref else [])
    q = np.linspace(0.3, 0.9, len(enc))
    res = train_reward_model(model, enc, q, cfg, objective=obj, reference=ref)
    return model, ref, res, enc


def test_anchor_lambda_zero_reproduces_naive_exactly():
    naive, _, res_naive, enc = _train(None)
    anch, _, res_anch, _ = _train("copy", lam=0.0)
    assert res_anch.history["anchor"].max() > 0  # the anchor term was computed...
    for (k, a), b in zip(naive.state_dict().items(), anch.state_dict().values()):
        assert torch.equal(a, b), k  # ...but lambda 0 changes nothing, bit for bit


def test_reference_weights_unchanged_by_training():
    model, tok, enc = _setup("encoder", n=16)
    ref = CopyReference(model, [2])
    before = {k: v.clone() for k, v in ref.backbone.state_dict().items()}
    cfg = TrainConfig(lr=1e-2, epochs=1, batch_size=4, progress=False)
    train_reward_model(model, enc, np.full(len(enc), 0.8), cfg,
                       objective=Objective(anchor_lambda=1.0, anchor_layers=[2]), reference=ref)
    assert any(not torch.equal(a, b) for a, b in zip(model.backbone.state_dict().values(), before.values()))
    for k, v in ref.backbone.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_three_reference_strategies_agree():
    model, tok, enc = _setup("encoder", n=12)
    from anchorviz.models.reward_model import apply_lora

    lora_model = RewardModel(apply_lora(model.backbone, {"r": 4, "target_modules": ["query", "value"]}))
    copy_ref = CopyReference(lora_model, [1, 2])
    cached = CachedReference(lora_model, enc, [1, 2])
    off = AdapterOffReference(lora_model, [1, 2])
    # make the adapters non-trivial so "adapter off" really differs from "adapter on"
    with torch.no_grad():
        for n, p in lora_model.named_parameters():
            if "lora_B" in n:
                p.normal_()
    batch, index = joint_batch(enc, [3, 1, 7])
    student = lora_model(batch.input_ids, batch.attention_mask, batch.response_mask, layers=[2])
    a, b, c = (r.states(index, batch) for r in (copy_ref, cached, off))
    for layer in (1, 2):
        assert torch.allclose(a[layer], c[layer], atol=1e-5)
        m = batch.attention_mask.bool()
        assert torch.allclose(a[layer][m], b[layer][m], atol=1e-5)
    losses = [float(anchor_loss({2: student.hidden[2]}, {2: r[2]}, batch.response_mask)) for r in (a, b, c)]
    assert max(losses) - min(losses) < 1e-5 and losses[0] > 0
    cached.close()


def test_trained_lora_anchor_matches_across_strategies():
    m1, _, r1, _ = _train("adapter_off", lora=True)
    m2, _, r2, _ = _train("cached", lora=True)
    assert np.allclose(r1.history["anchor"], r2.history["anchor"], atol=1e-5)
    assert np.allclose(r1.history["total"], r2.history["total"], atol=1e-5)


def test_adapter_off_needs_lora_and_auto_choice():
    model, _, _ = _setup("encoder")
    with pytest.raises(ReferenceSetupError, match="LoRA"):
        AdapterOffReference(model, [2])
    assert choose_strategy(model, "auto", 10_000, 1)[0] == "cached"
    assert choose_strategy(model, "auto", 10**9, 1)[0] == "copy"
    assert choose_strategy(model, "copy", 10, 1) == ("copy", "chosen by the config")


def test_same_seed_same_weights_different_seed_differs():
    a, _, _, _ = _train(None, seed=1)
    b, _, _, _ = _train(None, seed=1)
    c, _, _, _ = _train(None, seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_bf16_then_float32_training_in_one_process():
    """Accelerate keeps one mixed-precision state per process; a bf16 run followed by a float32
    one (a notebook, bench/bench_flops.py) once failed with 'AcceleratorState has already been
    initialized', and every later run in that process with it."""
    for bf16 in (True, False, True):
        model, _, enc = _setup("encoder", n=8)
        res = train_reward_model(model, enc, np.full(len(enc), 0.8),
                                 TrainConfig(progress=False, epochs=1, batch_size=4, bf16=bf16))
        assert res.steps == 2 and np.isfinite(res.history["total"]).all()


def test_objective_rejects_unknown_anchor_normalise():
    model, _, enc = _setup("encoder", n=8)
    assert Objective().anchor_normalise == "pair"
    with pytest.raises(TrainError, match=r"anchor_normalise must be one of \('pair', 'token'\), "
                       r"got 'batch'"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False),
                           objective=Objective(anchor_normalise="batch"))


@pytest.mark.parametrize("normalise", ["pair", "token"])
def test_anchor_normalise_reaches_anchor_loss_with_pairs_grouped(monkeypatch, normalise):
    import anchorviz.training.loop as train_mod

    calls = []

    def spy(student, reference, mask, **kw):
        calls.append({"kw": kw, "student": {k: v.detach() for k, v in student.items()},
                      "reference": reference, "mask": mask})
        return anchor_loss(student, reference, mask, **kw)

    monkeypatch.setattr(train_mod, "anchor_loss", spy)
    model, _, enc = _setup("encoder", n=8)
    ref = CopyReference(model, [2])
    with torch.no_grad():  # move the student away from the reference so the term is non-zero
        w = model.backbone.embeddings.word_embeddings.weight
        w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(0)))
    cfg = TrainConfig(lr=1e-3, epochs=1, batch_size=4, seed=0, progress=False)
    obj = Objective(anchor_lambda=1.0, anchor_layers=[2], anchor_normalise=normalise)
    res = train_reward_model(model, enc, np.full(len(enc), 0.7), cfg, objective=obj, reference=ref)
    assert res.config["objective"]["anchor_normalise"] == normalise
    assert len(calls) == 2
    for call in calls:
        assert call["kw"]["normalise"] == normalise
        groups = list(call["kw"]["groups"])
        # joint batch rows [chosen_0..chosen_3, rejected_0..rejected_3]: each pair's two sides
        # share one id, different pairs different ids
        assert len(groups) == 8 and groups[:4] == groups[4:] and len(set(groups)) == 4
        # the term recorded is the requested normalisation, and here the two differ (the toy
        # responses have different lengths)
        args = (call["student"], call["reference"], call["mask"])
        pair = anchor_loss(*args, normalise="pair", groups=groups)
        token = anchor_loss(*args, normalise="token")
        assert float(pair) != pytest.approx(float(token), rel=1e-4)
    first = anchor_loss(*(calls[0][k] for k in ("student", "reference", "mask")),
                        normalise=normalise, groups=list(calls[0]["kw"]["groups"]))
    assert res.history["anchor"].iloc[0] == pytest.approx(float(first), rel=1e-5)


def test_bad_settings_and_nan_guard():
    model, _, enc = _setup("encoder", n=8)
    with pytest.raises(TrainError, match="lr"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(lr=-1, progress=False))
    with pytest.raises(TrainError, match="anchor_lambda"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False),
                           objective=Objective(anchor_lambda=-1.0))
    with pytest.raises(TrainError, match="targets"):
        train_reward_model(model, enc, np.ones(3), TrainConfig(progress=False))
    with pytest.raises(ModelError, match="outside"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False),
                           objective=Objective(anchor_lambda=1.0, anchor_layers=[9]))
    with torch.no_grad():
        model.head.weight.fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="step 0"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False))


def test_optimizer_implementations_agree_and_bad_names_are_refused():
    import torch

    from anchorviz.config import TrainConfig, TrainError
    from anchorviz.training.loop import make_optimizer

    def steps(name: str) -> torch.Tensor:
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(8, 4))
        opt = make_optimizer([{"params": [w], "weight_decay": 0.01}], lr=1e-2, name=name)
        for i in range(5):
            opt.zero_grad()
            (w.sin() * (i + 1)).sum().backward()
            opt.step()
        return w.detach().clone()

    fused, foreach, loop = steps("adamw_fused"), steps("adamw_foreach"), steps("adamw")
    assert torch.allclose(fused, loop, atol=1e-6) and torch.allclose(foreach, loop, atol=1e-6)
    with pytest.raises(TrainError, match="optimizer must be one of"):
        make_optimizer([{"params": [torch.nn.Parameter(torch.zeros(1))]}], lr=1.0, name="sgd")
    with pytest.raises(TrainError, match="optimizer"):
        TrainConfig(optimizer="adam").validate()


# --------------------------------------------------------------------------- training: bad input


class NoHiddenBackbone(torch.nn.Module):
    """A torch module shaped like a backbone whose forward returns no hidden_states."""

    def __init__(self, returns: str = "object") -> None:
        super().__init__()
        self.config = SimpleNamespace(hidden_size=8, num_hidden_layers=1, model_type="bert")
        self.emb = torch.nn.Embedding(64, 8)
        self.returns = returns

    def forward(self, input_ids, attention_mask=None, **kwargs):
        h = self.emb(input_ids)
        if self.returns == "tensor":
            return h
        if self.returns == "none":
            return SimpleNamespace(last_hidden_state=h, hidden_states=None)
        return SimpleNamespace(last_hidden_state=h)


BAD_SETTINGS = [
    (dict(lr=float("nan")), "lr=nan"), (dict(lr=float("inf")), "lr=inf"), (dict(lr=0.0), "lr=0.0"),
    (dict(epochs=0), "epochs=0"), (dict(batch_size=0), "batch_size=0"),
    (dict(grad_accum=0), "grad_accum=0"), (dict(warmup_frac=-0.5), "warmup_frac=-0.5"),
    (dict(max_grad_norm=0.0), "max_grad_norm=0.0"), (dict(head_lr=float("nan")), "head_lr=nan"),
]


@pytest.mark.parametrize("settings_, match", BAD_SETTINGS)
def test_train_rejects_bad_settings(settings_: dict, match: str) -> None:
    model, enc = tiny_model_and_pairs()
    with pytest.raises(TrainError, match=rf"invalid training setting\(s\): {re.escape(match)}"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False, **settings_))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1.5, -0.1])
def test_train_rejects_non_finite_or_out_of_range_targets(bad: float) -> None:
    model, enc = tiny_model_and_pairs()
    q = np.full(len(enc), 0.7)
    q[3] = bad
    with pytest.raises(TrainError, match="targets: target probabilities must be finite and in"):
        train_reward_model(model, enc, q, TrainConfig(progress=False))
    with pytest.raises(TrainError, match="val: target probabilities must be finite"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False), val=enc,
                           val_targets=q)


@pytest.mark.parametrize("objective, exc, match", [
    (Objective(anchor_lambda=float("nan")), TrainError, "anchor_lambda must be a finite number"),
    (Objective(anchor_lambda=float("inf")), TrainError, "anchor_lambda must be a finite number"),
    (Objective(anchor_lambda=1.0, anchor_layers=[3]), ModelError,
     r"layer 3 is outside this model: valid hidden-state indices are 0 \(embeddings\) \.\. 2"),
    (Objective(anchor_lambda=1.0, anchor_layers=[-1]), ModelError, "layer -1 is outside"),
    (Objective(anchor_lambda=1.0, anchor_layers=["last"]), ModelError, "layer 'last' is outside"),
    (Objective(anchor_lambda=1.0, anchor_layers=[1]), TrainError, r"ANCHOR layers \[1\] need a "
                                                                  "reference"),
    (Objective(kind="mse"), TrainError, "objective must be one of"),
    (Objective(kind="confidence", aux_coef=2.0), TrainError, r"aux_coef must be in \[0, 1\]"),
])
def test_train_rejects_bad_objectives(objective: Objective, exc: type, match: str) -> None:
    model, enc = tiny_model_and_pairs()
    with pytest.raises(exc, match=match):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False),
                           objective=objective)


def test_train_rejects_an_empty_training_set() -> None:
    model, _ = tiny_model_and_pairs()
    empty = encode_pairs(word_tokenizer(), pd.DataFrame(columns=PAIR_COLUMNS), max_length=16)
    with pytest.raises(TrainError, match="the training set is empty"):
        train_reward_model(model, empty, np.ones(0), TrainConfig(progress=False), desc="student")


@pytest.mark.parametrize("returns", ["object", "none", "tensor"])
def test_a_model_without_hidden_states_is_named(returns: str) -> None:
    _, enc = tiny_model_and_pairs()
    model = RewardModel(NoHiddenBackbone(returns))
    with pytest.raises(ModelError, match=r"backbone NoHiddenBackbone returned no hidden_states: "
                                         r".*output_hidden_states=True"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False))
    with pytest.raises(ModelError, match="returned no hidden_states"):
        capture_states(model, enc, progress=False)


def test_a_backbone_without_a_config_is_named() -> None:
    with pytest.raises(ModelError, match=r"has no config.hidden_size: pass a Hugging Face AutoModel"):
        RewardModel(torch.nn.Linear(3, 3))


# --------------------------------------------------------------------------- untrusted files: pickled weights


def test_pickled_weights_are_refused_without_being_unpickled(tmp_path: Path) -> None:
    from anchorviz.models.reward_model import load_backbone

    folder = save_tiny_model(tmp_path / "m", layers=1)
    for f in folder.glob("*.safetensors"):
        f.unlink()
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ModelError, match=r"weights only as pickle .*no model\.safetensors"):
        load_backbone(str(folder))
    assert not marker.exists()
