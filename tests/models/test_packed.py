"""The packed encoder forward (`models.attention: packed`): the eager forward's numbers on real
tokens, gradients equal to rounding, zeros on padding, and a clear refusal for other models."""

from __future__ import annotations

import pytest
import torch

from anchorviz.config import RunConfig
from anchorviz.models.packed import PackedError, check_packable, hidden_states, is_packed
from anchorviz.models.reward_model import ModelError, load_reward_model
from anchorviz.pipeline.keys import run_id_for, student_key, teacher_key


def _batch(b: int = 6, t: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 20000, (b, t), generator=g)
    lens = torch.randint(3, t + 1, (b,), generator=g)
    lens[0] = t  # the longest row sets the width, as in a padded batch
    lens[1] = 1  # a one-token row
    mask = (torch.arange(t)[None] < lens[:, None]).long()
    response = mask.clone()
    response[:, 0] = 0
    response[1, 0] = 1
    return ids * mask, mask, response


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    eager, _ = load_reward_model("minilm-l3", attention="eager", dropout=False)
    packed, _ = load_reward_model("minilm-l3", attention="packed", dropout=False)
    torch.nn.init.normal_(eager.head.weight, std=0.1)
    packed.head.load_state_dict(eager.head.state_dict())
    return eager, packed


def test_the_packed_forward_is_the_eager_forward_on_real_tokens_and_zero_on_padding(pair):
    eager, packed = pair
    assert is_packed(packed.backbone) and not is_packed(eager.backbone)
    ids, mask, response = _batch()
    layers = list(range(eager.n_layers + 1))
    a = eager(ids, mask, response, layers=layers)
    b = packed(ids, mask, response, layers=layers)
    assert torch.equal(a.rewards, b.rewards)  # float32: bit for bit
    assert torch.equal(a.pooled, b.pooled)
    real = mask.bool()
    for layer in layers:
        assert torch.equal(a.hidden[layer][real], b.hidden[layer][real]), layer
        assert (b.hidden[layer][~real] == 0).all()
        assert (a.hidden[layer][~real] != 0).any()  # the padded forward computes padding


def test_packed_gradients_equal_the_eager_ones_up_to_rounding(pair):
    eager, packed = pair
    ids, mask, response = _batch(seed=1)
    grads = []
    for model in (eager, packed):
        model.zero_grad()
        out = model(ids, mask, response, layers=[1])
        # the states of real tokens only: padding is what the two forwards may differ on
        (out.rewards.square().sum()
         + (out.hidden[1] * mask[..., None]).square().mean()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None})
    assert set(grads[0]) == set(grads[1])
    for name, g in grads[0].items():
        if name.endswith("attention.self.key.bias"):
            # softmax ignores a per-query constant: this gradient is 0 up to rounding noise
            assert g.abs().max() < 1e-5 and grads[1][name].abs().max() < 1e-5
            continue
        rel = (g - grads[1][name]).norm() / g.norm().clamp_min(1e-12)
        assert rel < 1e-4, (name, float(rel))


def test_packed_under_bfloat16_autocast_stays_close_to_eager(pair):
    eager, packed = pair
    ids, mask, response = _batch(seed=2)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        a = eager(ids, mask, response).rewards.float()
        b = packed(ids, mask, response).rewards.float()
    assert torch.allclose(a, b, atol=0.05 * a.abs().max().item() + 1e-3)


def test_hidden_states_of_a_packed_backbone_read_any_layer_in_the_padded_layout(pair):
    eager, packed = pair
    ids, mask, _ = _batch(seed=3)
    states = hidden_states(packed.backbone, ids, mask)
    ref = hidden_states(eager.backbone, ids, mask)
    assert len(states) == len(ref) == eager.n_layers + 1
    assert states[-1].shape == ref[-1].shape == (*ids.shape, eager.hidden_size)
    assert torch.equal(states[-1][mask.bool()], ref[-1][mask.bool()])
    assert [s.shape for s in states[0:2]] == [ref[0].shape] * 2


def test_a_model_without_berts_block_layout_is_refused_by_name():
    from transformers import GPT2Config, GPT2Model

    gpt = GPT2Model(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=50, n_positions=16))
    with pytest.raises(PackedError, match=r"GPT2Model cannot be packed.*auto, eager or sdpa"):
        check_packable(gpt)
    with pytest.raises(PackedError, match="not an encoder"):
        check_packable(torch.nn.Linear(2, 2))


def test_packed_is_a_setting_of_its_own_in_every_run_key():
    cfg = RunConfig()
    ids = {}
    for attention in ("auto", "eager", "packed"):
        cfg.models.attention = attention
        cfg.validate()
        ids[attention] = (run_id_for(teacher_key(cfg)), run_id_for(student_key(cfg, "student")))
    assert len({v for pair in ids.values() for v in pair}) == 6
    assert teacher_key(cfg)["attention"] == "packed"
    cfg.models.attention = "packd"
    with pytest.raises(Exception, match=r"models.attention must be one of .*packed"):
        cfg.validate()


def test_a_packed_load_of_a_decoder_names_the_model(monkeypatch):
    from transformers import GPT2Config, GPT2Model

    import anchorviz.models.reward_model as rm

    gpt = GPT2Model(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=50, n_positions=16))
    with pytest.raises(ModelError, match=r"model 'tiny-gpt'.*cannot be packed"):
        rm._mark_or_refuse(gpt, "tiny-gpt")
