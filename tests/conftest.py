"""Shared fixtures: tiny random backbones and word-level tokenizers (fast, offline)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("ANCHORVIZ_JOBS", "1")  # sweeps run in-process unless a test asks for workers
# `bf16: auto` (the default of run configs and of the demo) resolves to float32 in tests on any
# machine, so that run ids and numbers do not depend on the CPU the suite runs on; a test of
# the bfloat16 path sets it (ANCHORVIZ_PRECISION=bf16 runs the whole suite that way)
os.environ.setdefault("ANCHORVIZ_PRECISION", "fp32")
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"

WORDS = (
    "the a good bad movie film great awful plot acting is was very not and it i liked hated "
    "story fun boring love terrible fine ok best worst ever really so this that"
).split()


def word_tokenizer(kind: str = "encoder"):
    """A word-level fast tokenizer: BERT-like specials (encoder) or bos/eos with pad == eos."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] if kind == "encoder" else ["<unk>", "<s>", "</s>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials[1] if kind == "encoder" else "<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if kind == "encoder":
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                       cls_token="[CLS]", sep_token="[SEP]")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="</s>")


def tiny_backbone(kind: str = "encoder", vocab_size: int = 64, layers: int = 2, seed: int = 0,
                  dropout: float = 0.0):
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

    torch.manual_seed(seed)
    if kind == "encoder":
        cfg = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=layers,
                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                         hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        return BertModel(cfg, add_pooling_layer=False)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                      max_position_embeddings=128)
    return LlamaModel(cfg)


def toy_pairs(n: int = 24, seed: int = 0) -> pd.DataFrame:
    """Sentiment-like pairs over WORDS: chosen says good things, rejected bad ones."""
    import random

    rnd = random.Random(seed)
    pos, neg = ["good", "great", "fun", "best", "love", "liked"], ["bad", "awful", "boring", "worst", "hated", "terrible"]
    rows = []
    for i in range(n):
        subj = rnd.choice(["movie", "film", "plot", "story", "acting"])
        rows.append({
            "pair_id": f"toy-{i}", "dataset": "toy", "domain": "toy",
            "prompt": rnd.choice(["", "the movie", "i liked it"]),
            "chosen": f"the {subj} was {rnd.choice(pos)}" + (" really" if rnd.random() < 0.5 else ""),
            "rejected": f"the {subj} was {rnd.choice(neg)}",
            "prompt_turns": None, "meta": {},
        })
    return pd.DataFrame(rows)


@pytest.fixture
def enc_tok():
    return word_tokenizer("encoder")


@pytest.fixture
def dec_tok():
    return word_tokenizer("decoder")


@pytest.fixture
def count_training(monkeypatch):
    """The ``desc`` of every ``train_reward_model`` call the pipeline makes (in this process)."""
    from anchorviz.training.loop import train_reward_model

    calls = []
    real = train_reward_model

    def counting(*a, **k):
        calls.append(k.get("desc"))
        return real(*a, **k)

    monkeypatch.setattr("anchorviz.pipeline.steps.train_reward_model", counting)
    return calls


# --------------------------------------------------------------------------- smoke sweeps

#: a bound on training the smoke sweeps (a hang, not a slow machine: on 2 busy cores it takes
#: tens of minutes)
SMOKE_TRAIN_LIMIT_S = 3 * 3600

_TRAIN_SMOKE_SWEEPS = """
import sys
sys.path.insert(0, sys.argv[1])
import _smoke
# notebook 03's sweeps in smoke mode (one per teacher visibility, two lambdas): their runs
# hold those of the demo sweep that notebooks 01 and 02 read, and the launcher's run of 03
sweeps = _smoke.explorer_configs(True, visibilities=sorted(_smoke.explorer_visibilities(True)),
                                 anchor_lambdas=[1.0, 10.0])
assert _smoke.sweep_run_ids(_smoke.demo_config(True)) <= _smoke.sweep_run_ids(sweeps)
_smoke.ensure_sweep(sweeps, _smoke.sweep_dir(sys.argv[2], True))
"""


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory) -> Path:
    """The runs folder (``ANCHORVIZ_NOTEBOOK_RUNS``) of the notebook and browser tests, with
    the smoke sweeps of notebooks 01-03 trained once per test session, before any of them runs.

    A test using it should time only its own call (``@pytest.mark.timeout(..., func_only=True)``)
    so that no per-test timeout is spent training: the training runs in a subprocess of its own
    bounded by ``SMOKE_TRAIN_LIMIT_S``. ``$ANCHORVIZ_TEST_NOTEBOOK_RUNS`` reuses a folder across
    sessions instead (a local shortcut: runs of older code in it would be reused too)."""
    env_runs = os.environ.get("ANCHORVIZ_TEST_NOTEBOOK_RUNS")
    runs = Path(env_runs) if env_runs else tmp_path_factory.mktemp("notebook-runs", numbered=False)
    runs.mkdir(parents=True, exist_ok=True)
    log_path = runs / "smoke-training.log"
    env = dict(os.environ, ANCHORVIZ_SMOKE="1", TQDM_DISABLE="1")
    t0 = time.perf_counter()
    with open(log_path, "a") as log:
        proc = subprocess.Popen([sys.executable, "-c", _TRAIN_SMOKE_SWEEPS, str(NOTEBOOK_DIR),
                                 str(runs)], cwd=runs, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=SMOKE_TRAIN_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    if code != 0:
        tail = log_path.read_text()[-4000:]
        why = f"did not finish in {SMOKE_TRAIN_LIMIT_S} s" if code is None else f"exited {code}"
        pytest.fail(f"training the smoke sweeps {why} (log {log_path}):\n{tail}", pytrace=False)
    print(f"smoke sweeps ready in {time.perf_counter() - t0:.0f} s")
    return runs


# --------------------------------------------------------------------------- bad-input helpers

MB = 1_000_000
#: a JSONL row with a Latin-1 byte: not UTF-8
NON_UTF8 = b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n'


def pairs_rows(n: int = 6) -> list[dict]:
    return [{"prompt": f"p{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def hh_file(tmp_path: Path) -> Path:
    """The HH-RLHF rows of tests/pair_rows.py as a local ``test.jsonl`` (adapter and reader tests)."""
    from pair_rows import HH_ROWS

    return write_jsonl(tmp_path / "test.jsonl", HH_ROWS)


def write_yaml_text(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def tiny_model_and_pairs(n: int = 8):
    """A tiny encoder reward model and ``n`` toy pairs encoded for it (max_length 16)."""
    from anchorviz.models.reward_model import RewardModel
    from anchorviz.models.tokenization import encode_pairs

    tok = word_tokenizer("encoder")
    model = RewardModel(tiny_backbone("encoder", vocab_size=len(tok), layers=2))
    return model, encode_pairs(tok, toy_pairs(n), max_length=16)


def related_states(n: int = 20, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two related state matrices (Y a noisy linear map of X), for the bad-input tables."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return x, x @ rng.normal(size=(d, d)) + 0.1 * rng.normal(size=(n, d))


def with_value(x: np.ndarray, value: float) -> np.ndarray:
    """A copy of ``x`` with one entry (row 3, column 1) set to ``value`` (NaN, inf ...)."""
    y = x.copy()
    y[3, 1] = value
    return y
