"""Losses against hand-computed values, gradients and validation."""

from __future__ import annotations

import math

import pytest
import torch

from anchorviz.training.losses import (
    NonFiniteLossError,
    anchor_loss,
    bt_loss,
    bt_soft_loss,
    check_finite_loss,
    confidence_alpha,
    confidence_loss,
    confidence_targets,
    resolve_anchor_layers,
)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def soft_bt_by_hand(margin: float, target: float) -> float:
    return -(target * math.log(sig(margin)) + (1 - target) * math.log(sig(-margin)))


# --------------------------------------------------------------------------- bt_loss


def test_bt_loss_hand_values():
    # -log s(1) = log(1 + e^-1) = 0.313262, -log s(0) = log 2 = 0.693147
    per_pair = bt_loss(t(1.0, 0.0), t(0.0, 0.0), reduction="none")
    assert per_pair.tolist() == pytest.approx([math.log(1 + math.exp(-1)), math.log(2)], rel=1e-6)
    assert bt_loss(t(1.0, 0.0), t(0.0, 0.0)).item() == pytest.approx(0.5032046, rel=1e-6)


def test_bt_loss_is_stable_for_large_margins():
    loss = bt_loss(t(-200.0, 200.0), t(0.0, 0.0), reduction="none")
    assert torch.isfinite(loss).all()
    assert loss.tolist() == pytest.approx([200.0, 0.0], abs=1e-5)


def test_bt_loss_upcasts_half_precision():
    loss = bt_loss(t(1.0).bfloat16(), t(0.0).bfloat16())
    assert loss.dtype == torch.float32


def test_bt_loss_validation():
    with pytest.raises(ValueError, match="same shape"):
        bt_loss(t(1.0, 2.0), t(0.0))
    with pytest.raises(ValueError, match="empty"):
        bt_loss(t(), t())
    with pytest.raises(ValueError, match="reduction"):
        bt_loss(t(1.0), t(0.0), reduction="sum")


# --------------------------------------------------------------------------- bt_soft_loss


def test_bt_soft_loss_hand_values():
    # pair 0: 0.8 * log(1 + e^-1) + 0.2 * log(1 + e) = 0.513262; pair 1: log 2
    expected0 = 0.8 * math.log(1 + math.exp(-1)) + 0.2 * math.log(1 + math.e)
    assert expected0 == pytest.approx(0.513262, abs=1e-6)
    per_pair = bt_soft_loss(t(1.0, 0.0), t(0.0, 0.0), t(0.8, 0.8), reduction="none")
    assert per_pair.tolist() == pytest.approx([expected0, math.log(2)], rel=1e-6)
    mean = bt_soft_loss(t(1.0, 0.0), t(0.0, 0.0), t(0.8, 0.8))
    assert mean.item() == pytest.approx((expected0 + math.log(2)) / 2, rel=1e-6)


def test_bt_soft_loss_with_hard_labels_is_bt_loss():
    r_a, r_b = t(1.5, -0.3, 0.0, 4.0), t(0.2, 0.7, 0.0, -1.0)
    ones, zeros = torch.ones(4), torch.zeros(4)
    assert torch.allclose(bt_soft_loss(r_a, r_b, ones), bt_loss(r_a, r_b))
    assert torch.allclose(bt_soft_loss(r_a, r_b, zeros), bt_loss(r_b, r_a))


def test_bt_soft_loss_minimum_is_at_q():
    # d loss / d margin = s(margin) - q: zero at margin = logit(q), positive above it
    q = 0.8
    margin = torch.tensor([math.log(q / (1 - q)), 1.0], requires_grad=True)
    bt_soft_loss(margin, torch.zeros(2), t(q, q), reduction="none").sum().backward()
    assert margin.grad[0].item() == pytest.approx(0.0, abs=1e-6)
    assert margin.grad[1].item() == pytest.approx(sig(1.0) - q, rel=1e-5)


@pytest.mark.parametrize("bad", [1.2, -0.1, float("nan"), float("inf")])
def test_bt_soft_loss_rejects_bad_q(bad):
    with pytest.raises(ValueError, match="q"):
        bt_soft_loss(t(1.0, 0.0), t(0.0, 0.0), t(0.5, bad))


def test_bt_soft_loss_q_shape_must_match():
    with pytest.raises(ValueError, match="q must have the same shape"):
        bt_soft_loss(t(1.0, 0.0), t(0.0, 0.0), t(0.5))


# --------------------------------------------------------------------------- confidence


def test_confidence_alpha_ramp():
    kw = dict(total_steps=100, warmup_frac=0.2, aux_coef=0.5)
    assert confidence_alpha(0, **kw) == 0.0
    assert confidence_alpha(10, **kw) == pytest.approx(0.25)  # mid warm-up
    # just before the end: continuous (openai/weak-to-strong's logconf gives 0.19 * 0.5 here)
    assert confidence_alpha(19, **kw) == pytest.approx(0.475)
    assert confidence_alpha(20, **kw) == pytest.approx(0.5)  # end of warm-up
    assert confidence_alpha(60, **kw) == pytest.approx(0.5)
    assert confidence_alpha(150, **kw) == pytest.approx(0.5)


def test_confidence_alpha_without_warmup_and_validation():
    assert confidence_alpha(0, total_steps=10, warmup_frac=0.0, aux_coef=0.3) == 0.3
    with pytest.raises(ValueError, match="total_steps"):
        confidence_alpha(0, total_steps=0, warmup_frac=0.1, aux_coef=0.5)
    with pytest.raises(ValueError, match="step"):
        confidence_alpha(-1, total_steps=10, warmup_frac=0.1, aux_coef=0.5)
    with pytest.raises(ValueError, match="warmup_frac"):
        confidence_alpha(0, total_steps=10, warmup_frac=1.5, aux_coef=0.5)
    with pytest.raises(ValueError, match="aux_coef"):
        confidence_alpha(0, total_steps=10, warmup_frac=0.1, aux_coef=1.5)


# margins r_a - r_b = [-1, 2, -2, 1]: hardened at 0.5 on each pair's own margin, h = [0, 1, 0, 1]
# (pair 0's negative margin hardens towards b whatever the batch's mean q; the old batch-quantile
# rule, t = quantile(p, 1 - mean(q)), gave [1, 1, 0, 1] here to match mean(q) = 0.75)
WORKED_RA = t(-1.0, 2.0, -2.0, 1.0)
WORKED_RB = torch.zeros(4)
WORKED_Q = t(0.9, 0.8, 0.6, 0.7)
WORKED_H = [0.0, 1.0, 0.0, 1.0]
WORKED_TARGETS = [0.45, 0.9, 0.3, 0.85]  # 0.5 * q + 0.5 * h


def test_confidence_targets_worked_batch():
    target = confidence_targets(WORKED_RA, WORKED_RB, WORKED_Q, alpha=0.5)
    expected = [0.5 * q + 0.5 * h for q, h in zip([0.9, 0.8, 0.6, 0.7], WORKED_H)]
    assert expected == pytest.approx(WORKED_TARGETS)
    assert target.tolist() == pytest.approx(expected, rel=1e-6)
    assert not target.requires_grad
    # alpha = 1: the targets are the hardened predictions themselves
    hard = confidence_targets(WORKED_RA, WORKED_RB, WORKED_Q, alpha=1.0)
    assert hard.tolist() == WORKED_H


def test_confidence_targets_harden_each_pair_at_half_and_ties_stay_undecided():
    # the margin's sign alone decides h: 1 above 0, 0 below, 0.5 on an exact tie
    hard = confidence_targets(t(-3.0, 0.0, 0.01, 2.0), t(0.0, 0.0, 0.0, 2.0), t(0.9, 0.9, 0.1, 0.5),
                              alpha=1.0)
    assert hard.tolist() == [0.0, 0.5, 1.0, 0.5]


def test_confidence_targets_agreeing_teacher_and_student_harden_nothing_towards_b():
    # teacher (q > 0.5) and student (r_a > r_b) both prefer side a on every pair: no pair may be
    # hardened towards b (the batch-quantile rule hardened the lowest-p quarter to 0 here)
    r_a, r_b = t(1.0, 2.0, 3.0, 4.0, 0.5, 1.5, 2.5, 3.5), torch.zeros(8)
    q = t(0.9, 0.8, 0.7, 0.6, 0.95, 0.85, 0.75, 0.65)
    hard = confidence_targets(r_a, r_b, q, alpha=1.0)
    assert hard.tolist() == [1.0] * 8
    target = confidence_targets(r_a, r_b, q, alpha=0.75)
    assert (target >= q).all()
    assert target.tolist() == pytest.approx((0.25 * q + 0.75).tolist(), rel=1e-6)


def test_confidence_loss_is_invariant_to_swapping_some_pairs():
    # presenting a subset of the pairs the other way round (r_a <-> r_b, q -> 1 - q) must leave
    # every pair's loss unchanged; swapping ALL pairs would not catch a batch-threshold rule
    gen = torch.Generator().manual_seed(0)
    r_a, r_b = torch.randn(16, generator=gen), torch.randn(16, generator=gen)
    q = torch.rand(16, generator=gen)
    swap = torch.zeros(16, dtype=torch.bool)
    swap[[0, 3, 4, 9, 10, 15]] = True
    r_a2, r_b2 = torch.where(swap, r_b, r_a), torch.where(swap, r_a, r_b)
    q2 = torch.where(swap, 1.0 - q, q)
    kw = dict(aux_coef=0.75, step=50, total_steps=100, warmup_frac=0.2, reduction="none")
    before = confidence_loss(r_a, r_b, q, **kw)
    after = confidence_loss(r_a2, r_b2, q2, **kw)
    assert torch.allclose(before, after, atol=1e-6)
    swapped_targets = confidence_targets(r_a2, r_b2, q2, alpha=0.75)
    targets = confidence_targets(r_a, r_b, q, alpha=0.75)
    assert torch.allclose(torch.where(swap, 1.0 - swapped_targets, swapped_targets), targets)


def test_confidence_loss_hand_values():
    # margins [1, 0.5, -0.5, 0] -> h = [1, 1, 0, 0.5]; alpha = aux_coef = 0.5 after warm-up;
    # targets 0.5 * [0.6, 0.3, 0.2, 0.2] + 0.5 * h = [0.8, 0.65, 0.1, 0.35]
    # pair 0: 0.8 log(1 + e^-1) + 0.2 log(1 + e)           = 0.5132617
    # pair 1: 0.65 log(1 + e^-0.5) + 0.35 log(1 + e^0.5)   = 0.6490770
    # pair 2: 0.1 log(1 + e^0.5) + 0.9 log(1 + e^-0.5)     = 0.5240770
    # pair 3: log 2 (margin 0, whatever the target)          = 0.6931472
    # (the old batch-quantile rule, t = quantile(p, 1 - mean(q)) = quantile(p, 0.675), gave
    # h = [1, 0, 0, 0]: pair 1 hardened towards b although the student's margin prefers a)
    r_a, r_b, q = t(1.0, 0.5, -0.5, 0.0), torch.zeros(4), t(0.6, 0.3, 0.2, 0.2)
    target = confidence_targets(r_a, r_b, q, alpha=0.5)
    assert target.tolist() == pytest.approx([0.8, 0.65, 0.1, 0.35], rel=1e-6)
    kw = dict(aux_coef=0.5, step=10, total_steps=10, warmup_frac=0.5)
    per_pair = confidence_loss(r_a, r_b, q, **kw, reduction="none")
    assert per_pair.tolist() == pytest.approx([0.5132617, 0.6490770, 0.5240770, 0.6931472],
                                              abs=1e-6)
    assert per_pair.tolist() == pytest.approx(
        [soft_bt_by_hand(m, y) for m, y in zip([1.0, 0.5, -0.5, 0.0], [0.8, 0.65, 0.1, 0.35])],
        rel=1e-6)
    assert confidence_loss(r_a, r_b, q, **kw).item() == pytest.approx(0.5948907, abs=1e-6)


def test_confidence_loss_worked_batch():
    loss = confidence_loss(
        WORKED_RA.clone().requires_grad_(True),
        WORKED_RB,
        WORKED_Q,
        aux_coef=0.5,
        step=50,
        total_steps=100,
        warmup_frac=0.1,
    )
    margins = [-1.0, 2.0, -2.0, 1.0]
    expected = sum(soft_bt_by_hand(m, y) for m, y in zip(margins, WORKED_TARGETS)) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert loss.requires_grad


def test_confidence_loss_with_zero_aux_coef_is_bt_soft_loss():
    r_a = torch.randn(16, generator=torch.Generator().manual_seed(0))
    r_b = torch.randn(16, generator=torch.Generator().manual_seed(1))
    q = torch.rand(16, generator=torch.Generator().manual_seed(2))
    for step in (0, 5, 99):
        loss = confidence_loss(r_a, r_b, q, 0.0, step=step, total_steps=100, warmup_frac=0.2)
        assert torch.allclose(loss, bt_soft_loss(r_a, r_b, q))


def test_confidence_loss_at_step_zero_is_bt_soft_loss():
    loss = confidence_loss(WORKED_RA, WORKED_RB, WORKED_Q, 0.75, 0, 100, 0.2)
    assert torch.allclose(loss, bt_soft_loss(WORKED_RA, WORKED_RB, WORKED_Q))


def test_confidence_loss_gradient_treats_targets_as_constants():
    r_a = WORKED_RA.clone().requires_grad_(True)
    confidence_loss(r_a, WORKED_RB, WORKED_Q, 0.5, 50, 100, 0.1).backward()
    r_a2 = WORKED_RA.clone().requires_grad_(True)
    bt_soft_loss(r_a2, WORKED_RB, t(*WORKED_TARGETS)).backward()
    assert torch.allclose(r_a.grad, r_a2.grad)


# --------------------------------------------------------------------------- anchor_loss


def tiny_states():
    # one sequence, 3 tokens (prompt, response, response), d = 2
    student = torch.tensor([[[5.0, 5.0], [1.0, 2.0], [0.0, 0.0]]])
    reference = torch.tensor([[[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]])
    mask = torch.tensor([[0, 1, 1]])
    return student, reference, mask


def test_anchor_loss_hand_value():
    student, reference, mask = tiny_states()
    # response tokens: (1^2 + 2^2) + (1^2 + 1^2) = 7 over 2 tokens * 2 units -> 1.75;
    # the prompt token's difference (50) is ignored
    assert anchor_loss({6: student}, {6: reference}, mask).item() == pytest.approx(1.75)


def test_anchor_loss_averages_layers():
    student, reference, mask = tiny_states()
    # second layer: difference 1 on every unit -> masked MSE 1.0; mean over layers (1.75 + 1) / 2
    loss = anchor_loss([student, reference + 1.0], [reference, reference], mask)
    assert loss.item() == pytest.approx(1.375)


def test_anchor_loss_token_mode_pools_tokens_and_pair_mode_averages_rows():
    # row 0 has one response token with squared error 4 per unit, row 1 three tokens with 0
    student = torch.zeros(2, 3, 1)
    student[0, 2, 0] = 2.0
    mask = torch.tensor([[0, 0, 1], [1, 1, 1]])
    token = anchor_loss(student, torch.zeros(2, 3, 1), mask, normalise="token")
    assert token.item() == pytest.approx(4.0 / 4)  # 4 response tokens in the batch, d = 1
    # per row: 4 / 1 and 0 / 3, then the mean over the two rows
    pair = anchor_loss(student, torch.zeros(2, 3, 1), mask, normalise="pair")
    assert pair.item() == pytest.approx((4.0 + 0.0) / 2)
    assert anchor_loss(student, torch.zeros(2, 3, 1), mask).item() == pair.item()  # default


def uneven_batch():
    """Two preference pairs in a joint batch, rows [chosen_0, chosen_1, rejected_0, rejected_1].

    d = 2, T = 4. Squared errors per response token (sum over units):
    row 0 (pair 0): tokens 1, 2 with diffs (1, 1), (2, 0) -> 2 + 4 = 6 over 2 tokens
    row 1 (pair 1): token 3 with diff (3, 1)             -> 10 over 1 token
    row 2 (pair 0): tokens 1, 2, 3 with diffs 0, 0, (1, 1) -> 2 over 3 tokens
    row 3 (pair 1): no response token (truncated)
    Prompt / padding positions carry large differences that must not count.
    """
    student = torch.full((4, 4, 2), 9.0)
    student[0, 1], student[0, 2] = t(1.0, 1.0), t(2.0, 0.0)
    student[1, 3] = t(3.0, 1.0)
    student[2, 1], student[2, 2], student[2, 3] = t(0.0, 0.0), t(0.0, 0.0), t(1.0, 1.0)
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 1], [0, 1, 1, 1], [0, 0, 0, 0]])
    return student, torch.zeros(4, 4, 2), mask


def test_anchor_loss_hand_values_both_modes_with_uneven_responses():
    student, reference, mask = uneven_batch()
    # token: (6 + 10 + 2) / ((2 + 1 + 3) tokens * 2 units) = 18 / 12
    token = anchor_loss(student, reference, mask, normalise="token")
    assert token.item() == pytest.approx(1.5)
    # pair, one sample per row: 6/4, 10/2, 2/6; row 3 is empty and skipped (not a zero)
    rows = anchor_loss(student, reference, mask, normalise="pair")
    assert rows.item() == pytest.approx((1.5 + 5.0 + 2.0 / 6) / 3)
    # pair, rows grouped by preference pair: pair 0 (6 + 2) / ((2 + 3) * 2) = 0.8, pair 1 10/2
    pairs = anchor_loss(student, reference, mask, normalise="pair", groups=[0, 1, 0, 1])
    assert pairs.item() == pytest.approx((0.8 + 5.0) / 2)
    # any integer ids work; groups play no role in token mode
    relabelled = anchor_loss(student, reference, mask, groups=torch.tensor([7, -2, 7, -2]))
    assert relabelled.item() == pytest.approx(2.9)
    assert anchor_loss(student, reference, mask, normalise="token", groups=[0, 1, 0, 1]) == token
    # a layer average still applies per mode: second layer all-zero error
    two = anchor_loss([student, reference], [reference, reference], mask, groups=[0, 1, 0, 1])
    assert two.item() == pytest.approx(2.9 / 2)


def test_anchor_loss_modes_agree_with_equal_response_lengths():
    gen = torch.Generator().manual_seed(0)
    student, reference = torch.randn(4, 5, 3, generator=gen), torch.randn(4, 5, 3, generator=gen)
    # every row has exactly two response tokens, at different positions
    mask = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 0, 1, 1], [1, 0, 1, 0, 0], [0, 0, 1, 1, 0]])
    token = anchor_loss(student, reference, mask, normalise="token")
    assert anchor_loss(student, reference, mask, normalise="pair").item() == pytest.approx(
        token.item(), rel=1e-6)
    grouped = anchor_loss(student, reference, mask, normalise="pair", groups=[0, 1, 0, 1])
    assert grouped.item() == pytest.approx(token.item(), rel=1e-6)
    # unequal lengths: the modes differ
    mask[0, 3] = 1
    assert anchor_loss(student, reference, mask).item() != pytest.approx(
        anchor_loss(student, reference, mask, normalise="token").item(), rel=1e-4)


def test_anchor_loss_is_zero_when_student_equals_reference():
    states = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]])
    assert anchor_loss({3: states, 6: states}, {3: states.clone(), 6: states.clone()}, mask) == 0


@pytest.mark.parametrize("normalise", ["token", "pair"])
def test_anchor_loss_gradient_only_on_response_tokens(normalise):
    gen = torch.Generator().manual_seed(0)
    student = torch.randn(3, 4, 3, generator=gen).requires_grad_(True)
    reference = torch.randn(3, 4, 3, generator=gen).requires_grad_(True)
    with torch.no_grad():
        reference[1, 3] = float("nan")  # a padding position: must not poison the gradient
    # row 0: prompt, prompt, response, response; row 1: prompt, response, padding, padding;
    # row 2: prompt only (no response token)
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]])
    anchor_loss({6: student}, {6: reference}, mask, normalise=normalise).backward()
    grad = student.grad
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[mask == 0], torch.zeros_like(grad[mask == 0]))
    assert (grad[mask == 1].abs().sum(dim=-1) > 0).all()
    diff = (student - reference).detach()
    if normalise == "token":
        # d/ds of sum (s - r)^2 / (N * d) = 2 (s - r) / (N * d), N = 3 tokens, d = 3
        expected = 2 * diff / 9
    else:
        # mean over the 2 non-empty rows of sum_row (s - r)^2 / (n_row * d): n = 2 and 1, d = 3
        n_row = torch.tensor([2.0, 1.0, 1.0]).reshape(3, 1, 1)
        expected = 2 * diff / (n_row * 3 * 2)
    assert torch.allclose(grad[mask == 1], expected[mask == 1])
    assert reference.grad is None  # the reference is detached


def test_anchor_loss_ignores_non_finite_states_on_masked_positions():
    student, reference, mask = tiny_states()
    reference = reference.clone()
    reference[0, 0] = float("nan")  # prompt position
    assert anchor_loss(student, reference, mask).item() == pytest.approx(1.75)


def test_anchor_loss_accepts_half_precision_reference_and_bool_mask():
    student, reference, mask = tiny_states()
    loss = anchor_loss(student, reference.half(), mask.bool())
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(1.75)


@pytest.mark.parametrize("normalise", ["token", "pair"])
def test_anchor_loss_pooled_states(normalise):
    student = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    reference = torch.zeros(2, 2)
    # (1 + 4 + 0 + 0) / 4 whatever the normalisation
    loss = anchor_loss({6: student}, {6: reference}, normalise=normalise)
    assert loss.item() == pytest.approx(1.25)
    with pytest.raises(ValueError, match="pooled states"):
        anchor_loss(student, reference, torch.ones(2, 2))


@pytest.mark.parametrize("normalise", ["token", "pair"])
def test_anchor_loss_empty_mask(normalise):
    student = torch.randn(2, 3, 4).requires_grad_(True)
    mask = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="no response token"):
        anchor_loss(student, torch.zeros(2, 3, 4), mask, normalise=normalise)
    loss = anchor_loss(student, torch.zeros(2, 3, 4), mask, allow_empty=True, normalise=normalise)
    assert loss.item() == 0.0
    loss.backward()  # keeps the graph
    assert torch.equal(student.grad, torch.zeros_like(student))


def test_anchor_loss_validation():
    student, reference, mask = tiny_states()
    with pytest.raises(ValueError, match="response_mask"):
        anchor_loss(student, reference)  # token states without a mask
    with pytest.raises(ValueError, match="same layers"):
        anchor_loss({3: student}, {6: reference}, mask)
    with pytest.raises(ValueError, match="differ in shape"):
        anchor_loss(student, reference[:, :2], mask)
    with pytest.raises(ValueError, match="does not match"):
        anchor_loss(student, reference, torch.ones(1, 2))
    with pytest.raises(ValueError, match="only 0 and 1"):
        anchor_loss(student, reference, torch.tensor([[0, 2, 1]]))
    with pytest.raises(ValueError, match="empty"):
        anchor_loss({}, {}, mask)
    with pytest.raises(TypeError):
        anchor_loss("states", "states", mask)
    with pytest.raises(ValueError, match=r"normalise must be one of \('pair', 'token'\)"):
        anchor_loss(student, reference, mask, normalise="batch")
    with pytest.raises(ValueError, match="groups must give one unit id per row"):
        anchor_loss(student, reference, mask, groups=[0, 1])
    with pytest.raises(ValueError, match="integer"):
        anchor_loss(student, reference, mask, groups=[0.5])


# --------------------------------------------------------------------------- layers


def test_resolve_anchor_layers_six_layers():
    assert resolve_anchor_layers("last", 6) == [6]
    assert resolve_anchor_layers("middle", 6) == [3, 5]  # 3.0 and 4.5 rounded half up
    assert resolve_anchor_layers("all", 6) == [1, 2, 3, 4, 5, 6]
    assert resolve_anchor_layers([5, 0, 3], 6) == [0, 3, 5]
    assert resolve_anchor_layers(4, 6) == [4]


def test_resolve_anchor_layers_thirty_layers():
    assert resolve_anchor_layers("last", 30) == [30]
    assert resolve_anchor_layers("Middle", 30) == [15, 23]  # 15.0 and 22.5 rounded half up
    assert resolve_anchor_layers("all", 30) == list(range(1, 31))


def test_resolve_anchor_layers_shallow_models():
    assert resolve_anchor_layers("middle", 1) == [1]
    assert resolve_anchor_layers("middle", 2) == [1, 2]


@pytest.mark.parametrize(
    "spec, match",
    [
        ([7], r"anchor layer 7 .*0\.\.6"),
        ([-1], r"anchor layer -1 .*0\.\.6"),
        ([2, 2], "more than once"),
        ([], "empty"),
        ("first", "'last', 'middle', 'all'"),
        ([1.5], "not an integer"),
        ([True], "not an integer"),
    ],
)
def test_resolve_anchor_layers_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        resolve_anchor_layers(spec, 6)


def test_resolve_anchor_layers_needs_positive_depth():
    with pytest.raises(ValueError, match="n_layers"):
        resolve_anchor_layers("last", 0)


# --------------------------------------------------------------------------- NaN guard


def test_check_finite_loss_passes_finite_terms():
    assert check_finite_loss({"w2s": t(0.7)[0], "anchor": 0.01}, step=3, batch_ids=["a"]) is None


def test_check_finite_loss_names_step_terms_and_ids():
    terms = {"w2s": torch.tensor(float("nan")), "anchor": torch.tensor(0.5)}
    with pytest.raises(NonFiniteLossError) as info:
        check_finite_loss(terms, step=12, batch_ids=["hh-17", "hh-42"])
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "step 12" in message
    assert "w2s=nan" in message and "anchor=0.5" in message
    assert "hh-17" in message and "hh-42" in message


def test_check_finite_loss_catches_inf_and_truncates_ids():
    ids = [f"p{i}" for i in range(100)]
    with pytest.raises(NonFiniteLossError, match=r"\+36 more"):
        check_finite_loss({"total": torch.tensor(float("inf"))}, step=0, batch_ids=ids)


def test_layer_specs_as_configs_write_them():
    from anchorviz.choices import is_layer_spec, parse_layer_spec

    assert all(is_layer_spec(s) for s in ("last", "middle", "all", "3", "3,5", " 0 , 6 "))
    assert not any(is_layer_spec(s) for s in ("", "first", "Last", "3,x", "-1", "3,", None, [3]))
    assert parse_layer_spec("middle") == "middle" and parse_layer_spec(" 5 ,3") == [5, 3]
    assert resolve_anchor_layers(parse_layer_spec("5,3"), 6) == [3, 5]
