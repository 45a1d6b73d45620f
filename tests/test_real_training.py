"""A short real training run: minilm-l3 teacher and minilm-l6 student on a few hundred VADER pairs
(the embedded default, offline after the first fetch) reach above-chance held-out accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from anchorviz.analysis.metrics import pairwise_accuracy
from anchorviz.config import TrainConfig
from anchorviz.data.readers import load_pairs
from anchorviz.data.splits import split_by_prompt
from anchorviz.models.reward_model import load_reward_model
from anchorviz.models.tokenization import encode_pairs
from anchorviz.training.loop import score_pairs, train_reward_model


@pytest.mark.slow
def test_teacher_then_student_beat_chance_on_held_out_pairs():
    pairs, _ = load_pairs("vader-movie")
    splits = split_by_prompt(pairs, {"teacher": 160, "w2s": 160, "test": 150}, seed=0,
                             group_key=None)
    cfg = TrainConfig(lr=5e-5, head_lr=2e-3, epochs=1, batch_size=16, progress=False)
    teacher, ttok = load_reward_model("minilm-l3")
    t_train = encode_pairs(ttok, splits["teacher"], max_length=40)
    train_reward_model(teacher, t_train, np.ones(len(t_train)), cfg)
    t_test = encode_pairs(ttok, splits["test"], max_length=40)
    teacher_acc = pairwise_accuracy(*score_pairs(teacher, t_test))
    rc, rr = score_pairs(teacher, encode_pairs(ttok, splits["w2s"], max_length=40))
    q = 1 / (1 + np.exp(-(rc - rr)))  # the student sees only the teacher's soft labels
    student, stok = load_reward_model("minilm-l6", dropout=False)
    s_train = encode_pairs(stok, splits["w2s"], max_length=40)
    train_reward_model(student, s_train, q, cfg)
    student_acc = pairwise_accuracy(*score_pairs(student, encode_pairs(stok, splits["test"],
                                                                       max_length=40)))
    # 150 held-out pairs: chance is 0.5 with a standard error of about 0.04
    assert teacher_acc > 0.6, teacher_acc
    assert student_acc > 0.6, student_acc
