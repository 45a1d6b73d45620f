"""anchorviz.pipeline.fit: one reward model trained and scored on given pairs, kept in a run store
(what experiments/tune_source_val.py and experiments/gold_anchor.py build on)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from tiny_project import tiny_config

from anchorviz.models.reward_model import load_reward_model
from anchorviz.models.tokenization import encode_pairs
from anchorviz.pipeline.fit import fit_and_score, fit_key
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.pipeline.store import RunStore
from anchorviz.training.loop import Objective, score_pairs, train_reward_model


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    cfg = tiny_config(tmp_path_factory.mktemp("fit"))
    return cfg, prepare_data(data_config(cfg))


def _by_hand(cfg, data, targets, splits):
    """The same training without the store: load as the steps do, train, score."""
    m = cfg.models
    torch.manual_seed(cfg.seed)
    model, tok = load_reward_model(m.student, pooling=m.pooling, dropout=m.student_dropout)
    train = encode_pairs(tok, data["w2s_train"], max_length=cfg.data.max_length)
    train_reward_model(model, train, targets, cfg.student_train, objective=Objective())
    return {s: score_pairs(model, encode_pairs(tok, data[s], max_length=cfg.data.max_length),
                           batch_size=cfg.capture.batch_size) for s in splits}


def test_a_fit_is_stored_reused_and_scores_as_a_direct_evaluation(project, tmp_path):
    cfg, data = project
    n = len(data["w2s_train"])
    q = np.linspace(0.2, 1.0, n)  # soft labels, as a student's
    splits = {"val": data["val"], "source_test": data["source_test"]}
    first = fit_and_score(tmp_path / "store", cfg, "student", data["w2s_train"], q, splits)
    assert first.computed and first.run.run_id.startswith("fit-student-")
    assert (first.run.run_dir / "MANIFEST.json").is_file()
    assert len(first.history) == first.metrics["train"]["steps"] > 0
    for s, (rc, rr) in _by_hand(cfg, data, q, splits).items():
        got_c, got_r = first.rewards(s)
        np.testing.assert_allclose(got_c, rc, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_r, rr, rtol=1e-5, atol=1e-6)
        assert first.accuracy(s) == pytest.approx(np.mean(rc > rr))
        assert first.metrics["accuracy"][s] == pytest.approx(first.accuracy(s))
    again = fit_and_score(RunStore(tmp_path / "store"), cfg, "student", data["w2s_train"], q,
                          splits)
    assert not again.computed and again.run.run_id == first.run.run_id
    assert again.scores.equals(first.scores) and again.history.equals(first.history)
    with pytest.raises(KeyError, match="scored no split 'target'"):
        first.rewards("target")


def test_the_key_follows_every_input(project):
    cfg, data = project
    train, splits = data["w2s_train"], {"val": data["val"]}
    ones = np.ones(len(train))
    base = fit_key(cfg, "student", train, ones, splits, cfg.student_train)
    assert base == fit_key(cfg, "student", train.copy(), ones.copy(), dict(splits),
                           cfg.student_train)
    changed = [
        fit_key(cfg, "teacher", train, ones, splits, cfg.student_train),
        fit_key(cfg, "student", train, 0.9 * ones, splits, cfg.student_train),
        fit_key(cfg, "student", train.iloc[::-1], ones, splits, cfg.student_train),
        fit_key(cfg, "student", train, ones, {"val": data["source_test"]}, cfg.student_train),
        fit_key(cfg, "student", train, ones, splits, replace(cfg.student_train, lr=2e-3)),
        fit_key(cfg, "student", train, ones, splits, cfg.student_train,
                Objective(anchor_lambda=1.0), "last"),
    ]
    assert all(k != base for k in changed)
    # ANCHOR with weight 0 is no ANCHOR, whatever the layers say
    assert fit_key(cfg, "student", train, ones, splits, cfg.student_train, Objective(),
                   "last") == fit_key(cfg, "student", train, ones, splits, cfg.student_train,
                                      Objective(), "middle")
    with pytest.raises(ValueError, match="one target per training pair"):
        fit_key(cfg, "student", train, ones[1:], splits, cfg.student_train)
    with pytest.raises(ValueError, match="role must be one of"):
        fit_key(cfg, "critic", train, ones, splits, cfg.student_train)


def test_an_anchored_fit_resolves_its_layers_on_the_model(project, tmp_path):
    cfg, data = project
    train = data["w2s_train"]
    fit = fit_and_score(tmp_path, cfg, "student", train, np.ones(len(train)),
                        {"val": data["val"]}, objective=Objective(anchor_lambda=1.0),
                        anchor_layers="last")
    assert fit.metrics["anchor_layers"] == [2]  # the tiny student's last block
    assert fit.history["anchor"].abs().sum() > 0
