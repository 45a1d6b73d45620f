"""Builders the tests share: tiny random backbones and word-level tokenizers, toy pairs,
bad-input rows and files (imported by name: ``from builders import toy_pairs``, by the
tests, the other support modules and the worker processes the tests start)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

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

MB = 1_000_000

#: a JSONL row with a Latin-1 byte: not UTF-8
NON_UTF8 = b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n'

def pairs_rows(n: int = 6) -> list[dict]:
    return [{"prompt": f"p{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(n)]

def write_jsonl(path: Path, rows: list[dict]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path

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
