"""A BERT-family encoder's forward pass on the real tokens only (``models.attention: packed``).

A right-padded batch of sequences spends most of its arithmetic on padding: the demo's movie
pairs are 28 tokens long on average, so a training batch of 32 sides padded to its longest side
holds 41% padding. Every per-token operation of an encoder block (the query / key / value and
output projections, the feed-forward, the layer norms: almost all of its arithmetic at these
lengths) gives a real token the same result whether padding is there or not, and attention
never lets a real token see a padded one. So `packed_hidden_states` runs the per-token parts on
the packed ``(n_real_tokens, hidden)`` rows and scatters them into the padded ``(B, T)`` layout
only for attention (plain matmul + softmax, as the transformers "eager" kernel).

On the real tokens the result is the padded forward's, up to float rounding (matrix products of
another shape sum in another order); padded positions hold 0, where the padded forward holds
values nothing reads (pooling, capture and ANCHOR's loss go by the response mask). Because the
rounding differs, a packed run is a different run: ``attention: packed`` joins the run key.

Supported: encoders with BERT's block layout (``embeddings``, ``encoder.layer[i].attention.self``
with ``query`` / ``key`` / ``value``, ``attention.output``, ``intermediate``, ``output``), e.g.
BERT, MiniLM, RoBERTa. `check_packable` names anything else.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["PACKED_FLAG", "PackedError", "check_packable", "hidden_states", "is_packed",
           "mark_packed", "packed_hidden_states", "unpack"]

#: the attribute `mark_packed` sets on a backbone (a deep copy, e.g. ANCHOR's frozen reference,
#: keeps it)
PACKED_FLAG = "anchorviz_packed"


class PackedError(ValueError):
    """The backbone does not have the block layout `packed_hidden_states` runs."""


def _base(backbone: nn.Module) -> nn.Module:
    get = getattr(backbone, "get_base_model", None)  # a PEFT wrapper: its wrapped model
    return get() if callable(get) else backbone


def check_packable(backbone: nn.Module) -> None:
    """Raise `PackedError` unless ``backbone`` is an encoder with BERT's block layout."""
    base = _base(backbone)
    name = type(base).__name__
    config = getattr(base, "config", None)
    why = None
    if config is None or getattr(config, "is_decoder", False) or getattr(
            config, "is_encoder_decoder", False):
        why = "it is not an encoder"
    elif not (hasattr(base, "embeddings") and hasattr(getattr(base, "encoder", None), "layer")):
        why = "it has no embeddings / encoder.layer"
    else:
        for block in base.encoder.layer:
            sa = getattr(getattr(block, "attention", None), "self", None)
            if not (all(hasattr(sa, a) for a in ("query", "key", "value", "num_attention_heads",
                                                 "attention_head_size"))
                    and hasattr(block.attention, "output") and hasattr(block, "intermediate")
                    and hasattr(block, "output")):
                why = "its blocks do not have BERT's layout"
                break
            if getattr(getattr(sa, "config", config), "position_embedding_type",
                       "absolute") not in ("absolute", None):
                why = "its attention uses relative positions"
                break
    if why is not None:
        raise PackedError(
            f"models.attention: packed runs BERT-family encoders (BERT, MiniLM, RoBERTa); "
            f"{name} cannot be packed: {why}. Use attention auto, eager or sdpa")


def _padded(rows: torch.Tensor, where: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """``(n, d)`` rows back into a zero-padded ``(B, T, d)`` tensor (differentiable)."""
    b, t = shape
    out = rows.new_zeros(b * t, rows.shape[-1]).index_copy(0, where, rows)
    return out.view(b, t, -1)


def _attention(block: nn.Module, x: torch.Tensor, where: torch.Tensor, shape: tuple[int, int],
               bias: torch.Tensor) -> torch.Tensor:
    """One block's self-attention on packed rows ``x``: its context vectors, packed."""
    sa = block.attention.self
    b, t = shape
    heads, size = sa.num_attention_heads, sa.attention_head_size

    def split(rows: torch.Tensor) -> torch.Tensor:
        return _padded(rows, where, shape).view(b, t, heads, size).transpose(1, 2)

    q, k, v = split(sa.query(x)), split(sa.key(x)), split(sa.value(x))
    scaling = getattr(sa, "scaling", size ** -0.5)
    scores = torch.matmul(q, k.transpose(2, 3)) * scaling + bias
    probs = nn.functional.softmax(scores, dim=-1)
    p = sa.dropout.p if isinstance(getattr(sa, "dropout", None), nn.Dropout) else 0.0
    probs = nn.functional.dropout(probs, p=p, training=sa.training)
    context = torch.matmul(probs, v).transpose(1, 2).reshape(b * t, heads * size)
    return context.index_select(0, where)


def packed_hidden_states(backbone: nn.Module, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Hidden states of every layer (0 = embeddings), each packed ``(n_real_tokens, hidden)``,
    and the flat indices ``where`` of those tokens in the ``(B, T)`` batch (`unpack` puts a
    layer back into the padded layout). ``attention_mask`` is 1 on real tokens; a sequence may
    not be all padding."""
    base = _base(backbone)
    shape = (int(input_ids.shape[0]), int(input_ids.shape[1]))
    mask = attention_mask.reshape(-1).bool()
    where = mask.nonzero().squeeze(1)
    emb = base.embeddings(input_ids=input_ids)
    x = emb.reshape(shape[0] * shape[1], -1).index_select(0, where)
    # additive key mask, as the transformers eager kernel: 0 on real keys, the dtype's min on pads
    dtype = emb.dtype if not torch.is_autocast_enabled(emb.device.type) else torch.float32
    keys = attention_mask[:, None, None, :].to(dtype)
    bias = (1.0 - keys) * torch.finfo(dtype).min
    states = [x]
    for block in base.encoder.layer:
        context = _attention(block, x, where, shape, bias)
        attended = block.attention.output(context, x)
        x = block.output(block.intermediate(attended), attended)
        states.append(x)
    return states, where


def unpack(rows: torch.Tensor, where: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A packed layer of `packed_hidden_states` in the padded ``(B, T, hidden)`` layout, 0 on
    padded positions."""
    return _padded(rows, where, shape)


def mark_packed(backbone: nn.Module) -> nn.Module:
    """Check ``backbone`` (`check_packable`) and mark it so that `hidden_states` packs it."""
    check_packable(backbone)
    setattr(_base(backbone), PACKED_FLAG, True)
    return backbone


def is_packed(backbone: nn.Module) -> bool:
    return bool(getattr(_base(backbone), PACKED_FLAG, False))


class _Unpacked(Sequence):
    """Every layer's states in the padded layout, each put back only when read."""

    def __init__(self, states: list[torch.Tensor], where: torch.Tensor, shape: tuple[int, int]):
        self.states, self.where, self.shape = states, where, shape
        self.cache: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, layer):  # type: ignore[override]
        if isinstance(layer, slice):
            return [self[i] for i in range(len(self))[layer]]
        i = range(len(self))[layer]
        if i not in self.cache:
            self.cache[i] = unpack(self.states[i], self.where, self.shape)
        return self.cache[i]


def hidden_states(backbone: nn.Module, input_ids: torch.Tensor,
                  attention_mask: torch.Tensor) -> Sequence[torch.Tensor]:
    """Every layer's token states ``(B, T, hidden)`` (0 = embeddings): packed where the backbone
    is marked (`mark_packed`), else the backbone's own forward pass. ``None`` when the backbone
    returns no hidden states."""
    if is_packed(backbone):
        states, where = packed_hidden_states(backbone, input_ids, attention_mask)
        return _Unpacked(states, where, (int(input_ids.shape[0]), int(input_ids.shape[1])))
    out = backbone(input_ids=input_ids, attention_mask=attention_mask,
                   output_hidden_states=True, return_dict=True)
    return getattr(out, "hidden_states", None)
