"""Response masks, truncation and padding, token by token."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import toy_pairs, word_tokenizer

from anchorviz.tokenization import TokenizationError, encode_pairs, encode_side, pad_side


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
    from anchorviz.train import joint_batch

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
    from anchorviz.tokenization import length_batches

    assert length_batches([3, 1, 2, 1, 5], 2) == [[1, 3], [2, 0], [4]]
    assert length_batches([], 4) == []
