"""Turn preference pairs into token ids, attention masks and RESPONSE masks.

Each side of a pair is encoded as ``prompt + response``. The response mask is 1 on response
tokens only (prompt, special and padding tokens are 0); ANCHOR's loss and the encoders' mean
pooling read it. Prompt and response are tokenised separately and joined, so the response's
tokens are the same whatever the prompt (BPE merges never cross the boundary).

Layouts:
- encoder tokenizers with ``cls``/``sep`` tokens (BERT family):
  ``[CLS] prompt [SEP] response [SEP]`` (``[CLS] response [SEP]`` when the prompt is empty);
- decoder tokenizers: ``[BOS] prompt response [EOS]`` (a BOS only where the tokenizer adds one); the final EOS belongs to the response
  (it is the token a decoder reward model pools) and is never mistaken for padding, even when
  the tokenizer's pad and eos ids coincide: the attention mask comes from lengths, not ids;
- chat templates (optional, decoders with ``tokenizer.chat_template``): the prompt is the template
  rendered with a generation prompt, the response is what the template adds for the assistant
  turn (its end-of-turn tokens included).

Truncation keeps the response: the prompt is cut from the LEFT first (the most recent turns
stay); only when the response alone is too long is it cut from the right.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

logger = logging.getLogger(__name__)

__all__ = [
    "EncodedPairs",
    "SideBatch",
    "TokenizationError",
    "encode_pairs",
    "encode_side",
    "is_encoder_tokenizer",
    "length_batches",
    "pad_side",
    "pad_token_id",
    "special_affixes",
]


class TokenizationError(ValueError):
    """A pair or tokenizer that cannot be encoded; the message names what and why."""


@dataclass
class EncodedPairs:
    """Token ids of both sides of ``n`` pairs, unpadded (lists of int lists).

    ``chosen_ids[i]`` / ``rejected_ids[i]``: ids of pair i's sides; ``*_resp_start[i]`` /
    ``*_resp_end[i]``: the half-open token range ``[start, end)`` of the response.
    """

    pair_ids: list[str]
    chosen_ids: list[list[int]]
    rejected_ids: list[list[int]]
    chosen_resp: list[tuple[int, int]]
    rejected_resp: list[tuple[int, int]]
    pad_id: int
    max_length: int

    def __len__(self) -> int:
        return len(self.pair_ids)

    def subset(self, index: Sequence[int]) -> EncodedPairs:
        idx = list(index)
        return EncodedPairs(
            pair_ids=[self.pair_ids[i] for i in idx],
            chosen_ids=[self.chosen_ids[i] for i in idx],
            rejected_ids=[self.rejected_ids[i] for i in idx],
            chosen_resp=[self.chosen_resp[i] for i in idx],
            rejected_resp=[self.rejected_resp[i] for i in idx],
            pad_id=self.pad_id,
            max_length=self.max_length,
        )

    def lengths(self) -> np.ndarray:
        """Longest side of each pair, in tokens (for length-bucketed evaluation)."""
        return np.array(
            [max(len(c), len(r)) for c, r in zip(self.chosen_ids, self.rejected_ids)], dtype=np.int64
        )


@dataclass
class SideBatch:
    """One padded side of a batch: ``input_ids``, ``attention_mask``, ``response_mask`` (B, T)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor

    def to(self, device: torch.device | str) -> SideBatch:
        return SideBatch(
            self.input_ids.to(device), self.attention_mask.to(device), self.response_mask.to(device)
        )


def _special(tokenizer, name: str) -> int | None:
    return getattr(tokenizer, f"{name}_token_id", None)


def is_encoder_tokenizer(tokenizer) -> bool:
    """True for BERT-style tokenizers (a CLS and a SEP token)."""
    return _special(tokenizer, "cls") is not None and _special(tokenizer, "sep") is not None


def pad_token_id(tokenizer) -> int:
    """The id used for padding: the tokenizer's pad token, else its eos token.

    Raises ``TokenizationError`` when the tokenizer has neither (padding would be undefined).
    """
    pad = _special(tokenizer, "pad")
    if pad is None:
        pad = _special(tokenizer, "eos")
        if pad is None:
            raise TokenizationError(
                f"tokenizer {type(tokenizer).__name__} has no pad token and no eos token: set "
                "tokenizer.pad_token (e.g. tokenizer.add_special_tokens({'pad_token': '[PAD]'}))"
            )
        logger.info("tokenizer has no pad token; padding with its eos id %d", pad)
    return int(pad)


def special_affixes(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids a tokenizer itself puts before / after a text (e.g. a BOS), if any."""
    with_sp = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    bare = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    for pos in range(len(with_sp) - len(bare) + 1):
        if with_sp[pos : pos + len(bare)] == bare:
            return with_sp[:pos], with_sp[pos + len(bare) :]
    return [], []


def _ids(tokenizer, text: str) -> list[int]:
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _chat_parts(tokenizer, turns: list[dict], response: str) -> tuple[list[int], list[int]]:
    prompt_text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    full_text = tokenizer.apply_chat_template(
        [*turns, {"role": "assistant", "content": response}], tokenize=False
    )
    if not full_text.startswith(prompt_text):
        raise TokenizationError(
            "chat template: the rendered conversation does not start with the rendered prompt; "
            "encode with use_chat_template=False for this tokenizer"
        )
    return _ids(tokenizer, prompt_text), _ids(tokenizer, full_text[len(prompt_text) :])


def encode_side(
    tokenizer,
    prompt: str,
    response: str,
    max_length: int,
    *,
    turns: list[dict] | None = None,
    use_chat_template: bool = False,
) -> tuple[list[int], tuple[int, int]]:
    """Encode one side; returns ``(ids, (resp_start, resp_end))``. See the module docstring."""
    if not isinstance(response, str) or not response:
        raise TokenizationError(f"response must be a non-empty string, got {response!r:.60}")
    if use_chat_template:
        chat_turns = turns if turns else ([{"role": "user", "content": prompt}] if prompt else [])
        p_ids, r_ids = _chat_parts(tokenizer, chat_turns, response)
        head, mid, tail = [], [], []
        ends_with_eos = False
    elif is_encoder_tokenizer(tokenizer):
        p_ids, r_ids = _ids(tokenizer, prompt), _ids(tokenizer, response)
        cls, sep = _special(tokenizer, "cls"), _special(tokenizer, "sep")
        head, mid, tail = [cls], ([sep] if p_ids else []), [sep]
        ends_with_eos = False
    else:
        p_ids, r_ids = _ids(tokenizer, prompt), _ids(tokenizer, response)
        eos = _special(tokenizer, "eos")
        prefix, suffix = special_affixes(tokenizer)
        head, mid = prefix, []
        # the EOS closes the response: it counts as a response token (a decoder pools on it)
        closing = suffix or ([eos] if eos is not None else [])
        r_ids = r_ids + closing
        tail = []
        ends_with_eos = bool(closing)
    if not r_ids:
        raise TokenizationError(f"response {response!r:.60} encodes to no tokens")
    budget = max_length - len(head) - len(tail)
    if budget < 1:
        raise TokenizationError(f"max_length={max_length} leaves no room for a response")
    # keep the response; cut the prompt (and its separator) from the left first
    if len(r_ids) >= budget:
        p_ids, mid = [], []
        if len(r_ids) > budget:
            # decoders keep their closing EOS (the pooled token); encoders end with [SEP] anyway
            r_ids = r_ids[: budget - 1] + r_ids[-1:] if ends_with_eos else r_ids[:budget]
    else:
        room = budget - len(r_ids) - len(mid)
        if room <= 0:
            p_ids, mid = [], []
        elif len(p_ids) > room:
            p_ids = p_ids[len(p_ids) - room :]
    ids = head + p_ids + mid + r_ids + tail
    start = len(head) + len(p_ids) + len(mid)
    return ids, (start, start + len(r_ids))


def encode_pairs(
    tokenizer,
    pairs: pd.DataFrame,
    max_length: int = 128,
    *,
    use_chat_template: bool = False,
) -> EncodedPairs:
    """Encode every pair of a pair table (see ``anchorviz.data.PAIR_COLUMNS``)."""
    if max_length < 4:
        raise TokenizationError(f"max_length must be >= 4 tokens, got {max_length}")
    missing = [c for c in ("pair_id", "prompt", "chosen", "rejected") if c not in pairs.columns]
    if missing:
        raise TokenizationError(f"pair table lacks column(s) {missing}; has {list(pairs.columns)}")
    if use_chat_template and not getattr(tokenizer, "chat_template", None):
        raise TokenizationError("use_chat_template=True but the tokenizer has no chat_template")
    pad = pad_token_id(tokenizer)
    has_turns = "prompt_turns" in pairs.columns
    out = EncodedPairs([], [], [], [], [], pad, max_length)
    for i, row in enumerate(pairs.itertuples(index=False)):
        turns = getattr(row, "prompt_turns", None) if has_turns else None
        turns = turns if isinstance(turns, list) and turns else None
        prompt = row.prompt if isinstance(row.prompt, str) else ""
        try:
            c_ids, c_span = encode_side(
                tokenizer, prompt, row.chosen, max_length, turns=turns,
                use_chat_template=use_chat_template,
            )
            r_ids, r_span = encode_side(
                tokenizer, prompt, row.rejected, max_length, turns=turns,
                use_chat_template=use_chat_template,
            )
        except TokenizationError as err:
            raise TokenizationError(f"pair {row.pair_id!r} (row {i}): {err}") from None
        out.pair_ids.append(str(row.pair_id))
        out.chosen_ids.append(c_ids)
        out.rejected_ids.append(r_ids)
        out.chosen_resp.append(c_span)
        out.rejected_resp.append(r_span)
    return out


def pad_side(
    ids: Sequence[list[int]], spans: Sequence[tuple[int, int]], pad_id: int
) -> SideBatch:
    """Right-pad one side of a batch; masks come from lengths and spans, never from ids."""
    width = max(len(x) for x in ids)
    n = len(ids)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    response = torch.zeros((n, width), dtype=torch.long)
    for i, (x, (s, e)) in enumerate(zip(ids, spans)):
        input_ids[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        attention[i, : len(x)] = 1
        response[i, s:e] = 1
    return SideBatch(input_ids, attention, response)


def length_batches(lengths: Sequence[int] | np.ndarray, batch_size: int) -> list[list[int]]:
    """Row numbers in batches of ``batch_size``, shortest rows first (a stable sort, so equal
    lengths keep their order): the one batching of every scoring, capture and reference pass,
    so a batch pads little."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[s : s + batch_size].tolist() for s in range(0, len(order), batch_size)]
