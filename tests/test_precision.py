"""bfloat16 autocast (``TrainConfig.bf16``): one arithmetic for every forward of a run.

The demo trains and scores in bf16 (issue 28). A run whose training, scoring, capture and ANCHOR
reference ran in different arithmetic would show drift that is only rounding, and scores that
are not the model's; these tests pin that they all share one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_backbone, toy_pairs, word_tokenizer
from tiny_project import tiny_config

from anchorviz.config import TrainConfig
from anchorviz.models.reward_model import RewardModel
from anchorviz.models.tokenization import encode_pairs
from anchorviz.training.loop import Objective, precision, score_pairs, train_reward_model
from anchorviz.training.reference import CachedReference, CopyReference


def _model_and_pairs(n: int = 8):
    tok = word_tokenizer("encoder")
    model = RewardModel(tiny_backbone("encoder", vocab_size=len(tok), layers=2, seed=0))
    with torch.no_grad():  # a head that is not zero, so rewards differ between arithmetics
        model.head.weight.normal_(0, 1.0)
    return model, tok, encode_pairs(tok, toy_pairs(n, seed=0), max_length=24)


def _first_anchor_term(reference_for, bf16: bool) -> float:
    model, _, enc = _model_and_pairs()
    ref = reference_for(model, enc)
    res = train_reward_model(model, enc, np.full(len(enc), 0.8),
                             TrainConfig(progress=False, epochs=1, batch_size=4, bf16=bf16),
                             objective=Objective(anchor_lambda=1.0, anchor_layers=[2]),
                             reference=ref)
    ref.close()
    return float(res.history["anchor"].iloc[0])


@pytest.mark.parametrize("strategy", ["copy", "cached"])
def test_a_bf16_student_starts_at_its_reference(strategy):
    """Before the first update the student IS its reference: the ANCHOR term of step 0 is 0 in
    bf16 as in float32, for a reference computed in the loop (copy) and one cached beforehand
    under `precision` (as the pipeline does)."""
    def make(model, enc):
        if strategy == "copy":
            return CopyReference(model, [2])
        with precision(True):
            return CachedReference(model, enc, [2])

    assert _first_anchor_term(make, bf16=True) == 0.0


def test_a_float32_reference_beside_a_bf16_student_is_not_zero():
    """The failure the shared arithmetic prevents: a reference cached in float32 next to a
    student run in bf16 shows an ANCHOR term (drift) at step 0 that is only rounding."""
    assert _first_anchor_term(lambda m, e: CachedReference(m, e, [2]), bf16=True) > 0


def test_bf16_scores_come_from_the_autocast_forward():
    model, _, enc = _model_and_pairs(12)
    rc32, rr32 = score_pairs(model, enc)
    with precision(True):
        rc16, rr16 = score_pairs(model, enc)
    assert not np.array_equal(rc32, rc16)  # another arithmetic ...
    assert np.allclose(rc32, rc16, atol=0.1) and np.allclose(rr32, rr16, atol=0.1)  # ... close
    with precision(False):  # a no-op
        assert np.array_equal(score_pairs(model, enc)[0], rc32)


def test_the_pipeline_scores_captures_and_keys_in_the_runs_arithmetic(tmp_path):
    """`evaluate_model` scores and captures under the training settings' bf16; the reference
    capture's key names bf16 only when set, so float32 stores keep their ids."""
    from anchorviz.pipeline.keys import reference_key
    from anchorviz.pipeline.prepare import data_config, prepare_data
    from anchorviz.pipeline.steps import encode_run_pairs, evaluate_model, load_backbone

    cfg16 = tiny_config(tmp_path, **{"student_train.bf16": True, "teacher_train.bf16": True})
    cfg32 = tiny_config(tmp_path)
    assert reference_key(cfg16)["bf16"] is True and "bf16" not in reference_key(cfg32)
    data = prepare_data(data_config(cfg16))
    model, tok = load_backbone(cfg16, "student")
    with torch.no_grad():
        model.head.weight.normal_(0, 1.0)
    s16, caps = evaluate_model(model, tok, data, cfg16, capture=True)
    s32, _ = evaluate_model(model, tok, data, cfg32, capture=False)
    enc = encode_run_pairs(tok, data["source_test"], cfg16)
    with precision(True):
        rc, _ = score_pairs(model, enc)
    got16 = s16[s16["split"] == "source_test"]["r_chosen"].to_numpy()
    got32 = s32[s32["split"] == "source_test"]["r_chosen"].to_numpy()
    assert np.array_equal(got16, rc) and not np.array_equal(got32, rc)
    # the teacher's settings decide for the teacher (evaluate_model's ``train``)
    t16, _ = evaluate_model(model, tok, data, cfg32, capture=False, train=cfg16.teacher_train)
    assert np.array_equal(t16["r_chosen"].to_numpy(), s16["r_chosen"].to_numpy())
    assert set(caps) == {"source_test", *[s for s in data if s.startswith("target_test")]}
