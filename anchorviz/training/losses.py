"""Training losses: Bradley-Terry (hard and soft labels), the confidence baseline, ANCHOR.

Every loss is a small pure function of tensors. Rewards are per-pair scalars of shape ``(B,)``
(any shape works as long as both sides match); the soft label ``q`` has the same shape and is the
teacher's probability that side ``a`` (the pair table's ``chosen`` column) is preferred.
Losses are computed in float32 whatever the input dtype (bf16 / fp16 rewards are upcast), and
returned as float32 tensors. ``s`` below is the logistic sigmoid.

Hidden-state indices follow ``transformers``' ``output_hidden_states``: index 0 is the embedding
output, index ``n_layers`` the output of the last transformer block.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from anchorviz.choices import ANCHOR_NORMALISATIONS

Reduction = Literal["mean", "none"]

__all__ = [
    "NonFiniteLossError",
    "anchor_loss",
    "check_anchor_inputs",
    "bt_loss",
    "bt_soft_loss",
    "check_finite_loss",
    "confidence_alpha",
    "confidence_loss",
    "confidence_targets",
    "resolve_anchor_layers",
]


class NonFiniteLossError(RuntimeError):
    """A loss term became NaN or infinite during training (raised by `check_finite_loss`)."""


# --------------------------------------------------------------------------- validation helpers


def _check_pair(r_a: torch.Tensor, r_b: torch.Tensor, name_a: str, name_b: str) -> None:
    if r_a.shape != r_b.shape:
        raise ValueError(
            f"{name_a} and {name_b} must have the same shape, got "
            f"{tuple(r_a.shape)} and {tuple(r_b.shape)}"
        )
    if r_a.numel() == 0:
        raise ValueError(f"{name_a} is empty: a loss needs at least one pair")


def _check_probability(q: torch.Tensor, like: torch.Tensor, name: str = "q") -> torch.Tensor:
    """``q`` as a float32 tensor on ``like``'s device; ValueError unless finite and in [0, 1]."""
    q = torch.as_tensor(q, device=like.device).float()
    if q.shape != like.shape:
        raise ValueError(
            f"{name} must have the same shape as the rewards {tuple(like.shape)}, "
            f"got {tuple(q.shape)}"
        )
    if not bool(torch.isfinite(q).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    if bool((q < 0).any()) or bool((q > 1).any()):
        raise ValueError(
            f"{name} must be a probability in [0, 1], got values in "
            f"[{q.min().item():.4g}, {q.max().item():.4g}]"
        )
    return q


def _reduce(loss: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")


def _soft_bt(margin: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-pair ``-[target log s(margin) + (1 - target) log s(-margin)]`` (float32)."""
    return -(target * F.logsigmoid(margin) + (1.0 - target) * F.logsigmoid(-margin))


# --------------------------------------------------------------------------- Bradley-Terry


def bt_loss(
    r_chosen: torch.Tensor, r_rejected: torch.Tensor, reduction: Reduction = "mean"
) -> torch.Tensor:
    """Bradley-Terry loss against hard gold labels (chosen is preferred).

    ``loss_i = -log s(r_chosen_i - r_rejected_i)``, computed with ``logsigmoid`` so large
    margins neither overflow nor underflow.

    Args:
        r_chosen, r_rejected: rewards of shape ``(B,)`` (any equal shapes).
        reduction: ``"mean"`` -> scalar; ``"none"`` -> per-pair losses of the input shape.
    """
    _check_pair(r_chosen, r_rejected, "r_chosen", "r_rejected")
    margin = r_chosen.float() - r_rejected.float()
    return _reduce(-F.logsigmoid(margin), reduction)


def bt_soft_loss(
    r_a: torch.Tensor, r_b: torch.Tensor, q: torch.Tensor, reduction: Reduction = "mean"
) -> torch.Tensor:
    """Bradley-Terry cross-entropy against soft labels (the naive W2S loss).

    ``loss_i = -[ q_i log s(r_a_i - r_b_i) + (1 - q_i) log s(r_b_i - r_a_i) ]``

    With ``q == 1`` this is `bt_loss` (a preferred), with ``q == 0`` it is `bt_loss` with the
    sides swapped. Its minimum over the margin is at ``s(r_a - r_b) = q``.

    Args:
        r_a, r_b: rewards of shape ``(B,)``; side ``a`` is the pair table's ``chosen`` column.
        q: shape ``(B,)``, the teacher's probability that ``a`` is preferred; must be finite and
            in [0, 1] (ValueError naming ``q`` otherwise).
        reduction: ``"mean"`` -> scalar; ``"none"`` -> per-pair losses.
    """
    _check_pair(r_a, r_b, "r_a", "r_b")
    q = _check_probability(q, r_a)
    return _reduce(_soft_bt(r_a.float() - r_b.float(), q), reduction)


# --------------------------------------------------------------------------- confidence baseline


def confidence_alpha(step: int, total_steps: int, warmup_frac: float, aux_coef: float) -> float:
    """Weight ``alpha`` of the hardened student predictions in the confidence loss at ``step``.

    ``alpha = aux_coef * min(1, step / (warmup_frac * total_steps))``: a linear ramp from 0 at
    step 0 to ``aux_coef`` at the end of warm-up, then constant. ``warmup_frac == 0`` means no
    warm-up (``alpha == aux_coef`` from step 0). ``step`` counts optimiser steps from 0; steps
    past ``total_steps`` keep ``aux_coef``.

    Note: openai/weak-to-strong's ``logconf_loss_fn`` uses ``coef = step_frac * aux_coef``
    during warm-up and ``aux_coef`` after, so its ramp only reaches ``warmup_frac * aux_coef``
    and then jumps; this ramp is continuous.
    """
    step = operator.index(step)
    total_steps = operator.index(total_steps)
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if not (math.isfinite(warmup_frac) and 0.0 <= warmup_frac <= 1.0):
        raise ValueError(f"warmup_frac must be in [0, 1], got {warmup_frac}")
    if not (math.isfinite(aux_coef) and 0.0 <= aux_coef <= 1.0):
        # alpha > 1 would push the mixed target outside [0, 1]
        raise ValueError(f"aux_coef must be in [0, 1], got {aux_coef}")
    warmup_steps = warmup_frac * total_steps
    if warmup_steps <= 0:
        return float(aux_coef)
    return float(aux_coef * min(1.0, step / warmup_steps))


def confidence_targets(
    r_a: torch.Tensor, r_b: torch.Tensor, q: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Mixed targets of the confidence loss (no gradient): ``(1 - alpha) * q + alpha * h``.

    ``h`` is the student's own prediction hardened at 0.5, pair by pair, on the margin
    ``m = r_a - r_b`` (as in EleutherAI w2s's pairwise confidence loss)::

        h_i = 1 if m_i > 0,  0 if m_i < 0,  0.5 if m_i == 0

    i.e. ``h = 1[s(m) > 0.5]`` with an exact tie kept undecided at 0.5. The rule is
    side-symmetric: presenting a pair the other way round (``r_a <-> r_b``, ``q -> 1 - q``) maps
    ``h -> 1 - h`` and the target to ``1 - target``, so the per-pair loss is unchanged; and it
    involves no batch statistic, so a pair's target does not depend on the rest of the batch.

    (Burns et al.'s classification loss thresholds at the batch quantile ``1 - mean(q)`` to
    balance classes; in a preference pair side ``a`` is always the gold-chosen text, so
    ``mean(q)`` is the teacher's mean P(chosen), not a class prior, and that threshold would
    harden some pairs towards ``b`` even when teacher and student both prefer ``a``.)

    Args:
        r_a, r_b, q: shape ``(B,)`` as in `bt_soft_loss`.
        alpha: weight of ``h``, in [0, 1].

    Returns:
        float32 tensor of the input shape, detached.
    """
    _check_pair(r_a, r_b, "r_a", "r_b")
    q = _check_probability(q, r_a)
    if not (math.isfinite(alpha) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    with torch.no_grad():
        margin = r_a.detach().float() - r_b.detach().float()
        # sign(m) in {-1, 0, 1} -> h in {0, 0.5, 1}: the tie m == 0 stays undecided
        hard = 0.5 * (torch.sign(margin) + 1.0)
        return (1.0 - alpha) * q + alpha * hard


def confidence_loss(
    r_a: torch.Tensor,
    r_b: torch.Tensor,
    q: torch.Tensor,
    aux_coef: float,
    step: int,
    total_steps: int,
    warmup_frac: float,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Burns et al. (2023)'s auxiliary confidence loss, adapted to preference pairs.

    With ``h = 1[r_a - r_b > 0]`` (the student's prediction hardened at 0.5, pair by pair, 0.5 on
    an exact tie; no gradient; see `confidence_targets`) and ``alpha = confidence_alpha(step,
    total_steps, warmup_frac, aux_coef)``::

        target_i = (1 - alpha) * q_i + alpha * h_i
        loss_i   = -[ target_i log s(r_a_i - r_b_i) + (1 - target_i) log s(r_b_i - r_a_i) ]

    i.e. `bt_soft_loss` against the mixed target; with ``aux_coef == 0`` it equals
    `bt_soft_loss`. Unlike Burns et al.'s classification version (threshold at the batch quantile
    ``1 - mean(q)``), the hardening is per pair and side-symmetric: swapping a pair's sides
    (``r_a <-> r_b``, ``q -> 1 - q``) leaves its loss unchanged, whatever the rest of the batch.
    The warm-up ramps ``alpha`` linearly to ``aux_coef`` (unlike openai/weak-to-strong's
    ``logconf`` loss, which ramps to ``warmup_frac * aux_coef`` and then jumps; see
    `confidence_alpha`).

    Args:
        r_a, r_b, q: shape ``(B,)`` as in `bt_soft_loss`.
        aux_coef: final weight of the hardened predictions, in [0, 1].
        step, total_steps, warmup_frac: the optimiser step (from 0), the run's step count and
            the warm-up fraction of it.
        reduction: ``"mean"`` -> scalar; ``"none"`` -> per-pair losses.
    """
    alpha = confidence_alpha(step, total_steps, warmup_frac, aux_coef)
    target = confidence_targets(r_a, r_b, q, alpha)
    return _reduce(_soft_bt(r_a.float() - r_b.float(), target), reduction)


# --------------------------------------------------------------------------- ANCHOR

StateSet = Mapping[int, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor


def _as_layer_dict(states: StateSet, name: str) -> dict[object, torch.Tensor]:
    if isinstance(states, torch.Tensor):
        return {0: states}
    if isinstance(states, Mapping):
        return dict(states)
    if isinstance(states, Sequence) and not isinstance(states, (str, bytes)):
        return dict(enumerate(states))
    raise TypeError(
        f"{name} must be a dict layer -> tensor, a sequence of tensors or a tensor, "
        f"got {type(states).__name__}"
    )


def _row_units(groups, n_rows: int) -> torch.Tensor:
    """``groups`` as contiguous unit ids ``0..G-1`` of shape ``(B,)`` (None: one unit per row)."""
    if groups is None:
        return torch.arange(n_rows)
    g = torch.as_tensor(groups)
    if g.dim() != 1 or g.numel() != n_rows:
        raise ValueError(
            f"groups must give one unit id per row, shape ({n_rows},), got {tuple(g.shape)}"
        )
    if g.dtype.is_floating_point or g.dtype.is_complex or g.dtype == torch.bool:
        raise ValueError(f"groups must hold integer unit ids, got dtype {g.dtype}")
    return torch.unique(g, return_inverse=True)[1]


def anchor_loss(
    student_states: StateSet,
    reference_states: StateSet,
    response_mask: torch.Tensor | None = None,
    allow_empty: bool = False,
    normalise: str = "pair",
    groups: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """ANCHOR regulariser: masked MSE between student and frozen-reference hidden states.

    Token states (``(B, T, d)`` per layer, ``response_mask`` of shape ``(B, T)``, 1 on response
    tokens, 0 on prompt and padding), with ``e_l[b,t] = ||s_l[b,t] - r_l[b,t]||^2``:

    ``normalise="pair"`` (default; the paper's per-sample ``L(i) = L_w2s(i) + lambda *
    L_anchor(i)``): a per-sample mean, then a mean over samples, so every sample weighs the same
    whatever its response length::

        L_anchor_l(u) = sum_{b in u, t} m_bt * e_l[b,t] / (sum_{b in u, t} m_bt * d)
        mse_l         = mean of L_anchor_l(u) over the samples u with >= 1 response token

    A sample ``u`` is one row by default. ``groups`` (shape ``(B,)``, integer ids) joins rows into
    one sample: the training loop feeds a preference pair's two sides as two rows of a joint
    batch (`anchorviz.training.loop.joint_batch`) and passes the pair index as ``groups``, so
    ``L_anchor(i)`` is per preference pair ``i``: the mean over the response tokens of both its
    sides (pooled: a longer side weighs more within its pair, each pair weighs the same).
    Samples with no response token are skipped (not counted as zeros).

    ``normalise="token"``: every (response token, hidden unit) entry of the batch pooled
    (long responses weigh more than short ones; ``groups`` plays no role)::

        mse_l = sum_{b,t} m_bt * e_l[b,t] / (sum_{b,t} m_bt * d)

    The two agree when every sample has the same number of response tokens. In both,
    ``loss = mean over anchored layers l of mse_l`` (unweighted, so the strength ``lambda`` does
    not grow with the number of anchored layers). Masked positions are removed by indexing, not
    multiplied by zero, so their gradient is exactly zero even where the states there are not
    finite.

    Pooled states (``(B, d)`` per layer) take ``response_mask=None``: ``mse_l`` is the plain
    mean over ``B * d`` entries whatever ``normalise`` and ``groups``.

    The reference states are detached here (no gradient reaches the reference), and may have a
    different dtype (e.g. float16 from the ``cached`` strategy); the loss is float32.

    Args:
        student_states, reference_states: dicts ``layer -> tensor`` with the same keys, or
            sequences of the same length (a single tensor is one layer).
        response_mask: ``(B, T)`` of 0/1 (bool or numeric) for token states; None for pooled.
        allow_empty: what to do when the mask has no response token at all. False (default):
            ValueError, since an empty mask usually means the prompt truncated every response.
            True: return ``0 * sum(student states)``, a zero that keeps the graph (zero
            gradient).
        normalise: ``"pair"`` (per-sample mean, then mean over samples) or ``"token"``
            (batch-pooled); see above.
        groups: optional ``(B,)`` integer sample id of each row for ``"pair"`` (rows sharing an
            id form one sample); None: each row is its own sample.

    Returns:
        scalar float32 tensor.

    The inputs are checked first, apart from the maths (`check_anchor_inputs`: ValueError /
    TypeError naming what is wrong); ``normalise`` and the anchored layers are also checked
    once, before training starts, by `RunConfig.validate` and `Objective.validate`.
    """
    student, reference, mask, units = check_anchor_inputs(
        student_states, reference_states, response_mask, allow_empty, normalise, groups)
    if mask is not None and not mask.any():  # allow_empty: a zero that keeps the graph
        return 0.0 * torch.stack([s.float().sum() for s in student.values()]).sum()
    return torch.stack([_layer_mse(s, reference[k].detach(), mask, units)
                        for k, s in student.items()]).mean()


def _layer_mse(s: torch.Tensor, r: torch.Tensor, mask: torch.Tensor | None,
               units: torch.Tensor | None) -> torch.Tensor:
    """One layer's term of `anchor_loss`: the mean squared student - reference distance."""
    r = r.to(s.device)
    if mask is None:  # pooled states (B, d): the plain mean over B * d entries
        return (s.float() - r.float()).pow(2).mean()
    m = mask.to(s.device)
    diff = s[m].float() - r[m].float()  # (N_response_tokens, d): masked rows removed
    if units is None:  # "token": every response entry of the batch pooled
        return diff.pow(2).mean()
    # "pair": per-sample sums and entry counts, then a mean over the non-empty samples
    unit = units.to(s.device)[m.nonzero()[:, 0]]  # sample id of each response token
    n_units = int(units.max()) + 1
    sums = torch.zeros(n_units, device=s.device, dtype=torch.float32)
    sums = sums.index_add(0, unit, diff.pow(2).sum(dim=-1))
    counts = torch.bincount(unit, minlength=n_units).float() * diff.shape[-1]
    seen = counts > 0
    return (sums[seen] / counts[seen]).mean()


def check_anchor_inputs(
    student_states: StateSet,
    reference_states: StateSet,
    response_mask: torch.Tensor | None = None,
    allow_empty: bool = False,
    normalise: str = "pair",
    groups: torch.Tensor | Sequence[int] | None = None,
) -> tuple[dict, dict, torch.Tensor | None, torch.Tensor | None]:
    """`anchor_loss`'s inputs checked and put in one form: ``(student, reference, mask, units)``
    with the states as dicts ``layer -> tensor``, the mask as a bool ``(B, T)`` tensor (None for
    pooled states) and ``units`` the contiguous sample id of each row (None unless token
    states are normalised per ``"pair"``). Raises ValueError / TypeError naming what is wrong:
    an unknown ``normalise``, no layer, other layers on the two sides, a mask that is not 0/1,
    not ``(B, T)`` or has no response token (unless ``allow_empty``), states of other shapes
    on the two sides, token states without a mask or pooled states with one."""
    if normalise not in ANCHOR_NORMALISATIONS:
        raise ValueError(
            f"normalise must be one of {ANCHOR_NORMALISATIONS}, got {normalise!r}"
        )
    student = _as_layer_dict(student_states, "student_states")
    reference = _as_layer_dict(reference_states, "reference_states")
    if not student:
        raise ValueError("student_states is empty: anchor at least one layer")
    if set(student) != set(reference):
        raise ValueError(
            f"student_states and reference_states must cover the same layers, got "
            f"{sorted(student, key=str)} and {sorted(reference, key=str)}"
        )

    mask: torch.Tensor | None = None
    units: torch.Tensor | None = None
    if response_mask is not None:
        mask = torch.as_tensor(response_mask)
        if mask.dim() != 2:
            raise ValueError(f"response_mask must have shape (B, T), got {tuple(mask.shape)}")
        if mask.dtype != torch.bool:
            if not bool(((mask == 0) | (mask == 1)).all()):
                raise ValueError("response_mask must contain only 0 and 1")
            mask = mask != 0
        if normalise == "pair":
            units = _row_units(groups, mask.shape[0])
    if mask is not None and not bool(mask.any()) and not allow_empty:
        raise ValueError(
            "response_mask has no response token (all zeros); pass allow_empty=True "
            "to get a zero loss instead"
        )

    for layer, s in student.items():
        r = reference[layer]
        if s.shape != r.shape:
            raise ValueError(
                f"layer {layer}: student states {tuple(s.shape)} and reference states "
                f"{tuple(r.shape)} differ in shape"
            )
        if s.dim() == 3:
            if mask is None:
                raise ValueError(
                    f"layer {layer}: token states (B, T, d) need a response_mask of shape "
                    f"(B, T) so prompt and padding tokens are excluded"
                )
            if tuple(mask.shape) != tuple(s.shape[:2]):
                raise ValueError(
                    f"layer {layer}: response_mask {tuple(mask.shape)} does not match the "
                    f"states' (B, T) = {tuple(s.shape[:2])}"
                )
        elif s.dim() == 2:
            if mask is not None:
                raise ValueError(
                    f"layer {layer}: pooled states (B, d) take response_mask=None, "
                    f"got a mask of shape {tuple(mask.shape)}"
                )
        else:
            raise ValueError(
                f"layer {layer}: states must be (B, T, d) token states or (B, d) pooled "
                f"states, got shape {tuple(s.shape)}"
            )
    return student, reference, mask, units


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def resolve_anchor_layers(spec: str | int | Sequence[int], n_layers: int) -> list[int]:
    """Hidden-state indices to anchor, for a model with ``n_layers`` transformer blocks.

    Indices follow ``output_hidden_states``: 0 = embeddings, ``n_layers`` = last block output.

    - ``"last"``: ``[n_layers]`` (the representation the reward head reads).
    - ``"middle"``: the layers at 50% and 75% of depth, ``round(0.5 * n_layers)`` and
      ``round(0.75 * n_layers)`` with halves rounded UP (6 layers -> ``[3, 5]``, 30 -> ``[15,
      23]``), at least 1, duplicates merged (1 layer -> ``[1]``).
    - ``"all"``: ``[1, ..., n_layers]``.
    - an int or a list of ints: validated to lie in ``0..n_layers``, no duplicates; returned
      sorted.

    Raises:
        ValueError: unknown name, empty list, duplicates, or a layer outside ``0..n_layers``
            (the message names the layer and the valid range).
    """
    if isinstance(n_layers, bool):
        raise ValueError(f"n_layers must be an int >= 1, got {n_layers!r}")
    n_layers = operator.index(n_layers)
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    if isinstance(spec, str):
        name = spec.strip().lower()
        if name == "last":
            return [n_layers]
        if name == "middle":
            picks = {max(1, _round_half_up(f * n_layers)) for f in (0.5, 0.75)}
            return sorted(picks)
        if name == "all":
            return list(range(1, n_layers + 1))
        raise ValueError(
            f"anchor layer spec must be 'last', 'middle', 'all' or a list of layer indices, "
            f"got {spec!r}"
        )
    items = [spec] if not isinstance(spec, Sequence) else list(spec)
    if not items:
        raise ValueError("anchor layer list is empty: give at least one layer index")
    layers: list[int] = []
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"anchor layer {item!r} is not an integer layer index")
        try:
            layer = operator.index(item)
        except TypeError:
            raise ValueError(f"anchor layer {item!r} is not an integer layer index") from None
        if not 0 <= layer <= n_layers:
            raise ValueError(
                f"anchor layer {layer} is out of range: valid hidden-state indices are "
                f"0..{n_layers} (0 = embeddings, {n_layers} = last block)"
            )
        if layer in layers:
            raise ValueError(f"anchor layer {layer} is listed more than once")
        layers.append(layer)
    return sorted(layers)


# --------------------------------------------------------------------------- NaN guard

_MAX_IDS_SHOWN = 64


def check_finite_loss(
    terms: Mapping[str, torch.Tensor | float], step: int, batch_ids: Sequence[object]
) -> None:
    """Raise `NonFiniteLossError` if any loss term is NaN or infinite.

    The message names the step, every term's value (finite ones too, to show which term broke)
    and the batch's pair ids (the first 64, then a count), so the offending pairs can be found.

    Args:
        terms: name -> loss value (scalar tensors or floats), e.g. ``{"w2s": ..., "anchor": ...}``.
        step: the optimiser step.
        batch_ids: the batch's ``pair_id`` values.
    """
    values: dict[str, float] = {}
    bad = False
    for name, term in terms.items():
        t = torch.as_tensor(term).detach()
        finite = bool(torch.isfinite(t).all())
        bad = bad or not finite
        values[name] = float(t.float().mean().item()) if t.numel() else float("nan")
    if not bad:
        return
    ids = [str(i) for i in batch_ids]
    shown = ", ".join(ids[:_MAX_IDS_SHOWN])
    if len(ids) > _MAX_IDS_SHOWN:
        shown += f", ... (+{len(ids) - _MAX_IDS_SHOWN} more)"
    term_text = ", ".join(f"{k}={v:.6g}" for k, v in values.items())
    raise NonFiniteLossError(
        f"non-finite loss at step {step}: {term_text}; batch pair_ids: [{shown}]"
    )
