"""Shared fixtures: tiny random backbones and word-level tokenizers (fast, offline)."""

from __future__ import annotations

import os

import pandas as pd
import pytest
import torch

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("ANCHORVIZ_JOBS", "1")  # sweeps run in-process unless a test asks for workers
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

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
    import anchorviz.experiment as ex

    calls = []
    real = ex.train_reward_model

    def counting(*a, **k):
        calls.append(k.get("desc"))
        return real(*a, **k)

    monkeypatch.setattr(ex, "train_reward_model", counting)
    return calls
