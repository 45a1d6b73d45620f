"""bfloat16 autocast (``TrainConfig.bf16``): one arithmetic for every forward of a run.

The demo trains and scores in bf16 (issue 28). A run whose training, scoring, capture and ANCHOR
reference ran in different arithmetic would show drift that is only rounding, and scores that
are not the model's; these tests pin that they all share one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from builders import tiny_backbone, toy_pairs, word_tokenizer
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


# --------------------------------------------------------------------------- bf16: auto


@pytest.fixture
def fresh_detection(monkeypatch):
    """`native_bf16` asked again (it is cached per process), the overrides cleared."""
    from anchorviz import precision as prec

    for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(k, raising=False)
    prec.native_bf16.cache_clear()
    yield prec
    prec.native_bf16.cache_clear()


def test_auto_resolves_by_the_override_and_explicit_values_stay(monkeypatch, fresh_detection):
    from anchorviz.config import ConfigError, RunConfig, config_from_dict

    prec = fresh_detection
    monkeypatch.setenv("ANCHORVIZ_PRECISION", "bf16")
    assert TrainConfig().bf16 is True and prec.resolve_bf16("auto") is True
    assert TrainConfig(bf16=False).bf16 is False  # an explicit value is never overridden
    monkeypatch.setenv("ANCHORVIZ_PRECISION", "fp32")
    assert TrainConfig().bf16 is False and TrainConfig(bf16=True).bf16 is True
    # a built config, and what a worker receives, hold true / false only
    cfg = config_from_dict({"teacher_train": {"bf16": "auto"}, "student_train": {"bf16": True}})
    assert cfg.to_dict()["teacher_train"]["bf16"] is False
    assert cfg.to_dict()["student_train"]["bf16"] is True
    # a config written `bf16: false` and an `auto` resolving to float32 are the same runs
    from anchorviz.pipeline.keys import run_id_for, teacher_key

    assert run_id_for(teacher_key(cfg)) == run_id_for(teacher_key(
        config_from_dict({"teacher_train": {"bf16": False}})))
    monkeypatch.setenv("ANCHORVIZ_PRECISION", "auto")
    assert TrainConfig().bf16 is prec.native_bf16("cpu")[0]
    monkeypatch.setenv("ANCHORVIZ_PRECISION", "half")
    with pytest.raises(ConfigError, match="ANCHORVIZ_PRECISION must be one of"):
        TrainConfig()
    monkeypatch.setenv("ANCHORVIZ_PRECISION", "fp32")
    with pytest.raises(ConfigError, match="bf16 .*true, false or 'auto'"):
        config_from_dict({"student_train": {"bf16": "yes"}})
    assert RunConfig().teacher_train.bf16 is False


def test_the_overrides_that_reproduce_an_avx2_cpu_take_native_bf16_away(monkeypatch,
                                                                        fresh_detection):
    prec = fresh_detection
    native, why = prec.native_bf16("cpu")
    assert isinstance(native, bool) and why
    for k, v in (("ONEDNN_MAX_CPU_ISA", "AVX2"), ("ATEN_CPU_CAPABILITY", "avx2")):
        prec.native_bf16.cache_clear()
        monkeypatch.setenv(k, v)
        assert prec.native_bf16("cpu")[0] is False
        if native:  # on a CPU with native bfloat16 the override is what is named
            assert k in prec.native_bf16("cpu")[1]
        monkeypatch.delenv(k)
    prec.native_bf16.cache_clear()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")  # not below bfloat16
    assert prec.native_bf16("cpu")[0] is native
    assert prec.native_bf16("mps") == (False, "on Apple GPUs (mps) auto takes float32")
    monkeypatch.setattr(prec.platform, "machine", lambda: "aarch64")
    prec.native_bf16.cache_clear()
    assert prec.native_bf16("cpu")[0] is False and "ARM" in prec.native_bf16("cpu")[1]


def test_forcing_bf16_where_it_is_emulated_says_what_it_costs(monkeypatch, fresh_detection,
                                                             caplog):
    import logging

    prec = fresh_detection
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # an AVX2 CPU, on any machine
    monkeypatch.setattr(prec, "_SAID", set())
    line = prec.describe(True)
    assert line.startswith("arithmetic: bfloat16") and "emulated" in line and "4.5x" in line
    monkeypatch.setenv("ANCHORVIZ_PRECISION", "auto")
    assert prec.describe(False).startswith("arithmetic: float32, this CPU has no native bfloat16")
    from anchorviz.config import RunConfig

    cfg = RunConfig()
    cfg.student_train.bf16 = True
    with caplog.at_level(logging.WARNING, logger="anchorviz.precision"):
        said = prec.warn_emulated([cfg, cfg])
    assert len(said) == 1 and "emulated" in caplog.text
    assert prec.warn_emulated([cfg]) == []  # once per process


def test_the_demo_says_its_arithmetic_first(monkeypatch, capsys, tmp_path):
    """`anchorviz demo`'s first line: the arithmetic and why; --bf16 where bfloat16 is emulated
    says what it costs; the folder is the same whatever the arithmetic."""
    import anchorviz.pipeline.sweep as sweep_mod
    from anchorviz import precision as prec
    from anchorviz.cli import main

    class Stop(Exception):
        pass

    seen = []

    def no_sweep(sw, out, **kw):
        seen.append((out, sw.base.student_train.bf16, sw.base.teacher_train.bf16))
        raise Stop

    monkeypatch.setattr(sweep_mod, "sweep", no_sweep)
    monkeypatch.chdir(tmp_path)  # the demo's default folder (it records its command there)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("ANCHORVIZ_PRECISION", "auto")
    prec.native_bf16.cache_clear()
    try:
        for argv, bf16 in (([], False), (["--bf16"], True), (["--fp32"], False)):
            with pytest.raises(Stop):
                main(["demo", *argv])
            first = capsys.readouterr().out.splitlines()[0]
            assert first.startswith("arithmetic: bfloat16" if bf16 else "arithmetic: float32")
            if bf16:
                assert "emulated" in first and "4.5x slower" in first
            elif not argv:
                assert "this CPU has no native bfloat16" in first
            assert seen[-1] == ("runs/demo", bf16, bf16)
    finally:
        prec.native_bf16.cache_clear()


def test_runs_of_either_arithmetic_in_one_folder_are_other_settings_never_pooled():
    """The demo writes both arithmetics to one folder: the results table gives the runs a
    setting column for it, and the verdict refuses to pool them as seeds."""
    import pandas as pd

    from anchorviz.analysis.summary import failure_mode, setting_columns
    from anchorviz.pipeline.demo import demo_sweep
    from anchorviz.pipeline.keys import student_key
    from anchorviz.pipeline.results import base_config_columns
    from anchorviz.sweep_config import expand_sweep

    keys = [student_key(c, "student") for p in ("fp32", "bf16")
            for c in expand_sweep(demo_sweep(precision=p, seeds=(0, 1)))
            if c.method.name == "naive"]
    cols = base_config_columns(keys)
    assert "cfg.train.bf16" in cols and "cfg.teacher.train.bf16" in cols
    rows = pd.DataFrame({"run_id": [f"r{i}" for i in range(4)], "kind": "student",
                         "method": "naive", "seed": [0, 1, 0, 1], "anchor_lambda": 0.0,
                         "wrg": [0.1, 0.1, 0.1, 0.1], "aog": [0.0, 0.0, 0.0, 0.0], **cols})
    assert "cfg.train.bf16" in setting_columns(rows)
    with pytest.raises(ValueError):
        failure_mode(rows)
