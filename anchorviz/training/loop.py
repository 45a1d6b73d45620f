"""One training loop for the weak teacher, the gold ceiling and every student.

Read top to bottom: shuffle pairs (seeded), for each batch run ONE forward over both sides,
compute the loss terms (Bradley-Terry on gold or soft labels, optional confidence term, optional
ANCHOR term against the reference, by default a per-pair mean as in the paper), step AdamW under
a warm-up + linear-decay schedule with gradient clipping and accumulation, and evaluate on a
held-out SOURCE slice. Every step's loss terms are recorded; a non-finite loss stops the run with
the step, the terms and the batch named.

Targets are probabilities ``q_i`` that the pair's ``chosen`` side is preferred: ``1.0`` for gold
labels (teacher, ceiling), the teacher's soft label for students (who never see gold labels).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from anchorviz.choices import ANCHOR_NORMALISATIONS, OPTIMIZERS
from anchorviz.config import TrainConfig, TrainError
from anchorviz.models.reward_model import RewardModel, eval_mode
from anchorviz.models.tokenization import EncodedPairs, length_batches, pad_side
from anchorviz.paths import bars_off
from anchorviz.precision import EMULATED_COST, native_bf16
from anchorviz.training.losses import (
    anchor_loss,
    bt_soft_loss,
    check_finite_loss,
    confidence_loss,
)
from anchorviz.training.reference import Reference
from anchorviz.training.tracking import current

logger = logging.getLogger(__name__)

__all__ = [
    "OBJECTIVES",
    "Objective",
    "TrainResult",
    "joint_batch",
    "lr_factor",
    "make_optimizer",
    "precision",
    "score_pairs",
    "train_reward_model",
]

OBJECTIVES = ("bt", "confidence")


def precision(bf16: bool, device: str = "cpu"):
    """The autocast context of a run's forwards: bfloat16 autocast on ``device`` when ``bf16``,
    else a no-op. Training, validation, scoring, hidden-state capture and the ANCHOR reference
    of a ``bf16`` run all use it, so every number of the run comes from the same arithmetic (a
    reference captured in float32 beside a student in bfloat16 would show drift that is only
    rounding)."""
    if not bf16:
        return nullcontext()
    kind = torch.device(device).type
    if kind == "cpu":
        _warn_emulated_bf16()
    return torch.autocast(device_type=kind, dtype=torch.bfloat16)


_BF16_WARNED: list[bool] = []


def _warn_emulated_bf16() -> None:
    """Once per process: a CPU without avx512_bf16 or AMX runs bfloat16 by emulation (slower
    than float32)."""
    if _BF16_WARNED:
        return
    _BF16_WARNED.append(True)

    native, why = native_bf16("cpu")  # the overrides that reproduce an AVX2 CPU count too
    if not native:
        logger.warning("bf16: %s, so bfloat16 autocast is emulated, about %gx slower than "
                       "float32 or more (anchorviz demo --fp32, or bf16: false / auto)", why,
                       EMULATED_COST)


def make_optimizer(groups: list[dict], lr: float, name: str = "adamw_fused") -> torch.optim.AdamW:
    """AdamW with the named implementation (see `TrainConfig.optimizer`). A fused kernel that
    this torch build or device lacks is an error naming the setting, not a silent fallback:
    the choice is part of the run key."""
    if name not in OPTIMIZERS:
        raise TrainError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
    kwargs = {"adamw_fused": {"fused": True}, "adamw_foreach": {"foreach": True},
              "adamw": {"foreach": False}}[name]
    try:
        return torch.optim.AdamW(groups, lr=lr, **kwargs)
    except (RuntimeError, TypeError, ValueError) as err:
        raise TrainError(f"optimizer {name!r} is not available here ({err}); set "
                         "student_train.optimizer / teacher_train.optimizer to 'adamw_foreach'") from None


@dataclass
class Objective:
    """What the loss is: BT (soft or gold targets), optional confidence term, optional ANCHOR."""

    kind: str = "bt"  # "bt" | "confidence"
    aux_coef: float = 0.75  # confidence: final weight of the hardened student predictions
    aux_warmup_frac: float = 0.2
    anchor_lambda: float = 0.0
    anchor_layers: Sequence[int] = field(default_factory=list)
    # "pair": L_anchor(i) per preference pair i (mean over the response tokens of its two
    # sides), then a mean over pairs, as in the paper's L(i) = L_w2s(i) + lambda * L_anchor(i);
    # "token": every response token of the batch pooled (long responses weigh more)
    anchor_normalise: str = "pair"

    def validate(self, model: RewardModel) -> None:
        if self.kind not in OBJECTIVES:
            raise TrainError(f"objective must be one of {OBJECTIVES}, got {self.kind!r}")
        if not (self.anchor_lambda >= 0 and math.isfinite(self.anchor_lambda)):
            raise TrainError(f"anchor_lambda must be a finite number >= 0, got {self.anchor_lambda}")
        if not 0 <= self.aux_coef <= 1:
            raise TrainError(f"aux_coef must be in [0, 1], got {self.aux_coef}")
        if self.anchor_normalise not in ANCHOR_NORMALISATIONS:
            raise TrainError(
                f"anchor_normalise must be one of {ANCHOR_NORMALISATIONS}, "
                f"got {self.anchor_normalise!r}"
            )
        model.check_layers(list(self.anchor_layers))

    @property
    def anchored(self) -> bool:
        return len(self.anchor_layers) > 0


@dataclass
class TrainResult:
    history: pd.DataFrame  # one row per optimiser step: loss terms, lr, grad norm
    evals: pd.DataFrame  # one row per validation: step, val loss, val accuracy
    steps: int
    best_step: int | None
    seconds: float
    config: dict


def _accelerator(config: TrainConfig):
    """Accelerate's Accelerator for ``config``. Its state is one per process and refuses another
    mixed precision once set, so training with ``bf16`` after a float32 run (or the reverse) in
    one process (a notebook, a benchmark) resets that state first; the process group (a
    distributed launch) is kept."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    kwargs = {"cpu": config.device == "cpu", "mixed_precision": "bf16" if config.bf16 else "no"}
    try:
        return Accelerator(**kwargs)
    except ValueError as err:
        if "already been initialized" not in str(err):
            raise
        AcceleratorState._reset_state(False)
        return Accelerator(**kwargs)


def joint_batch(encoded: EncodedPairs, idx: Sequence[int]):
    """One padded batch holding both sides: rows ``[chosen_0..chosen_B-1, rejected_0..]``.

    Returns the batch and the reference index ``[(pair_row, side)]`` of each row.
    """
    ids = [encoded.chosen_ids[i] for i in idx] + [encoded.rejected_ids[i] for i in idx]
    spans = [encoded.chosen_resp[i] for i in idx] + [encoded.rejected_resp[i] for i in idx]
    index = [(i, 0) for i in idx] + [(i, 1) for i in idx]
    return pad_side(ids, spans, encoded.pad_id), index


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up to 1 over ``warmup`` steps, then linear decay to 0 at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


@torch.no_grad()
def score_pairs(
    model: RewardModel, encoded: EncodedPairs, batch_size: int = 64, device: str = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """Rewards ``(r_chosen, r_rejected)`` of every pair (eval mode, length-bucketed batches)."""
    rc = np.zeros(len(encoded), dtype=np.float64)
    rr = np.zeros(len(encoded), dtype=np.float64)
    with eval_mode(model):
        for idx in length_batches(encoded.lengths(), batch_size):
            batch, _ = joint_batch(encoded, idx)
            batch = batch.to(device)
            out = model(batch.input_ids, batch.attention_mask, batch.response_mask)
            r = out.rewards.float().cpu().numpy()
            rc[idx], rr[idx] = r[: len(idx)], r[len(idx) :]
    return rc, rr


def _validate_targets(targets: np.ndarray, n: int, name: str) -> np.ndarray:
    t = np.asarray(targets, dtype=np.float64)
    if t.shape != (n,):
        raise TrainError(f"{name}: expected {n} target probabilities, got shape {t.shape}")
    if not np.all(np.isfinite(t)) or t.min() < 0 or t.max() > 1:
        raise TrainError(f"{name}: target probabilities must be finite and in [0, 1]")
    return t


def train_reward_model(
    model: RewardModel,
    train: EncodedPairs,
    targets: np.ndarray,
    config: TrainConfig,
    objective: Objective | None = None,
    reference: Reference | None = None,
    val: EncodedPairs | None = None,
    val_targets: np.ndarray | None = None,
    desc: str = "train",
    tracker=None,
) -> TrainResult:
    """Train ``model`` in place on ``train`` pairs with target probabilities ``targets``.

    ``objective.anchor_lambda * anchor_loss`` is added when ANCHOR layers are set; ``reference``
    must then give the frozen reference states of those layers. With
    ``objective.anchor_normalise == "pair"`` the ANCHOR term is a mean over the batch's pairs of
    each pair's masked MSE over the response tokens of both its sides (the two rows of the joint
    batch that hold pair ``i`` share the group id ``i``). Validation (if ``val`` is given)
    uses ``val_targets``: mean soft-BT loss and agreement with the hard targets (q > 0.5).

    ``tracker`` (an `anchorviz.training.tracking.Tracker`; default: the one `anchorviz.training.tracking.tracked_run`
    made current, else none) receives each step's history row and each validation; it only
    reads numbers the loop has computed.
    """
    if tracker is None:
        tracker = current()
    objective = objective or Objective()
    q_all, val_q = _checked_inputs(model, train, targets, config, objective, reference, val,
                                   val_targets, desc)
    # Accelerate: one process on a CPU or GPU as is; `accelerate launch` runs DDP, each process
    # taking its own share of every batch (gradients are averaged by DDP)
    accelerator = _accelerator(config)
    device = accelerator.device
    rank, world = accelerator.process_index, accelerator.num_processes
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model.to(device)
    model.train()
    if config.gradient_checkpointing and hasattr(model.backbone, "gradient_checkpointing_enable"):
        model.backbone.gradient_checkpointing_enable()
    optimizer = _optimizer(model, config)
    n = len(train)
    sched = _Schedule.of(n, config)
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, sched.total_steps, sched.warmup)
    )
    layers = list(objective.anchor_layers)

    order: list[int] = []
    history, evals = [], []
    keeper = _BestKeeper(config, desc)
    step, t0 = 0, time.perf_counter()
    bar = tqdm(total=sched.total_steps, desc=desc, disable=bars_off(config.progress), leave=False)
    optimizer.zero_grad(set_to_none=True)
    acc_terms: dict[str, float] = {}
    for b in range(sched.total_batches):
        if not order:
            order = rng.permutation(n).tolist()
        idx, order = order[: config.batch_size], order[config.batch_size :]
        if world > 1:  # this process's share of the global batch
            idx = idx[rank::world] or idx[:1]
        batch, index = joint_batch(train, idx)
        batch = batch.to(device)
        q = torch.as_tensor(q_all[idx], dtype=torch.float32, device=device)
        terms = _batch_terms(wrapped, accelerator, batch, index, q, objective, reference,
                             layers, config, device, step, sched.total_steps)
        check_finite_loss(terms, step=step, batch_ids=[train.pair_ids[i] for i in idx])
        accelerator.backward(terms["total"] / config.grad_accum)
        for k, v in terms.items():
            acc_terms[k] = acc_terms.get(k, 0.0) + float(v.detach()) / config.grad_accum
        if (b + 1) % config.grad_accum and b + 1 < sched.total_batches:
            continue
        grad_norm = _optimizer_step(model, accelerator, optimizer, scheduler, config, terms,
                                    step, [train.pair_ids[i] for i in idx])
        history.append({"step": step, **acc_terms, "lr": optimizer.param_groups[0]["lr"],
                        "grad_norm": float(grad_norm)})
        if tracker is not None:
            tracker.log_train_step(history[-1], anchor_lambda=objective.anchor_lambda)
        acc_terms = {}
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{history[-1]['total']:.4f}")
        if val is not None and (step % sched.eval_every == 0 or step == sched.total_steps):
            vloss, vacc = _evaluate(model, val, val_q, config)
            evals.append({"step": step, "val_loss": vloss, "val_acc": vacc})
            if tracker is not None:
                tracker.log_eval(evals[-1])
            if keeper.after_eval(model, vloss, step):
                break
    bar.close()
    keeper.restore(model)
    logger.info("%s: %d steps in %.1fs%s", desc, step, time.perf_counter() - t0,
                " (early stopped)" if keeper.stopped else "")
    return TrainResult(
        history=pd.DataFrame(history),
        evals=pd.DataFrame(evals, columns=["step", "val_loss", "val_acc"]),
        steps=step,
        best_step=keeper.best_step,
        seconds=time.perf_counter() - t0,
        config={**asdict(config), "objective": {**asdict(objective),
                                               "anchor_layers": list(objective.anchor_layers)}},
    )


def _checked_inputs(model: RewardModel, train: EncodedPairs, targets: np.ndarray,
                    config: TrainConfig, objective: Objective, reference: Reference | None,
                    val: EncodedPairs | None, val_targets: np.ndarray | None,
                    desc: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The training and validation target probabilities, after every check of the inputs
    (`TrainError` naming ``desc``): settings, objective, an empty set, targets, a reference."""
    config.validate()
    objective.validate(model)
    if len(train) == 0:
        raise TrainError(f"{desc}: the training set is empty")
    q_all = _validate_targets(targets, len(train), f"{desc} targets")
    if objective.anchored and reference is None:
        raise TrainError(f"{desc}: ANCHOR layers {list(objective.anchor_layers)} need a reference")
    val_q = None
    if val is not None:
        val_q = _validate_targets(
            np.ones(len(val)) if val_targets is None else val_targets, len(val), f"{desc} val"
        )
    return q_all, val_q


def _optimizer(model: RewardModel, config: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser: weight decay on the backbone's matrices only (not on biases and norms),
    and the zero-initialised head at its own lr (``head_lr``, else ``lr``)."""
    decay, no_decay = [], []
    head = [p for p in model.head.parameters() if p.requires_grad]
    head_ids = {id(p) for p in head}
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in head_ids:
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return make_optimizer(
        [{"params": decay, "weight_decay": config.weight_decay},
         {"params": no_decay, "weight_decay": 0.0},
         {"params": head, "weight_decay": 0.0, "lr": config.head_lr or config.lr}],
        lr=config.lr, name=config.optimizer,
    )


@dataclass(frozen=True)
class _Schedule:
    """How many batches and optimiser steps a training run takes, its warm-up steps and the
    optimiser steps between validations."""

    total_batches: int
    total_steps: int
    warmup: int
    eval_every: int

    @classmethod
    def of(cls, n: int, config: TrainConfig) -> _Schedule:
        batches_per_epoch = math.ceil(n / config.batch_size)
        total_batches = max(1, round(batches_per_epoch * config.epochs))
        total_steps = math.ceil(total_batches / config.grad_accum)
        eval_every = config.eval_every or max(1, math.ceil(batches_per_epoch / config.grad_accum))
        return cls(total_batches, total_steps, int(config.warmup_frac * total_steps), eval_every)


def _batch_terms(wrapped, accelerator, batch, index, q: torch.Tensor, objective: Objective,
                 reference: Reference | None, layers: list[int], config: TrainConfig, device,
                 step: int, total_steps: int) -> dict[str, torch.Tensor]:
    """The loss terms of one joint batch: ``fit`` (soft Bradley-Terry, or the confidence
    loss), ``anchor`` when ANCHOR layers are set, and their weighted sum ``total``."""
    n = len(q)
    with accelerator.autocast():
        out = wrapped(batch.input_ids, batch.attention_mask, batch.response_mask,
                      layers=layers or None)
    r = out.rewards.float()
    r_a, r_b = r[:n], r[n:]
    if objective.kind == "confidence":
        fit = confidence_loss(r_a, r_b, q, aux_coef=objective.aux_coef, step=step,
                              total_steps=total_steps, warmup_frac=objective.aux_warmup_frac)
    else:
        fit = bt_soft_loss(r_a, r_b, q)
    terms = {"fit": fit}
    loss = fit
    if objective.anchored:
        with precision(config.bf16, device):  # the reference in the student's arithmetic
            ref = reference.states(index, batch)
        # group the joint batch's rows by pair (index[j] = (pair_row, side)), so "pair"
        # normalisation averages each pair's two sides' response tokens as one sample
        anch = anchor_loss({k: out.hidden[k].float() for k in layers},
                           {k: ref[k].float() for k in layers}, batch.response_mask,
                           normalise=objective.anchor_normalise,
                           groups=[pair_row for pair_row, _ in index])
        terms["anchor"] = anch
        loss = loss + objective.anchor_lambda * anch
    terms["total"] = loss
    return terms


def _optimizer_step(model: RewardModel, accelerator, optimizer, scheduler, config: TrainConfig,
                    terms: dict[str, torch.Tensor], step: int,
                    batch_ids: list[str]) -> torch.Tensor:
    """Clip the gradients (a non-finite norm is a `NonFiniteLossError` naming the batch), step
    the optimiser and the lr schedule, clear the gradients; returns the gradient norm."""
    grad_norm = accelerator.clip_grad_norm_(
        [p for p in model.parameters() if p.requires_grad], config.max_grad_norm
    )
    if not torch.isfinite(grad_norm):
        check_finite_loss({**terms, "grad_norm": grad_norm}, step=step, batch_ids=batch_ids)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


class _BestKeeper:
    """The best validation so far (its step, and with ``early_stopping`` its weights) and
    the patience count: `after_eval` says when to stop, `restore` loads the best weights."""

    def __init__(self, config: TrainConfig, desc: str) -> None:
        self.config, self.desc = config, desc
        self.loss, self.best_step, self.state = math.inf, None, None
        self.bad_evals, self.stopped = 0, False

    def after_eval(self, model: RewardModel, vloss: float, step: int) -> bool:
        if vloss < self.loss - 1e-6:
            self.state = ({k: v.detach().clone() for k, v in model.state_dict().items()}
                          if self.config.early_stopping else None)
            self.loss, self.best_step, self.bad_evals = vloss, step, 0
            return False
        self.bad_evals += 1
        if self.config.early_stopping and self.bad_evals >= self.config.patience:
            logger.info("%s: early stop at step %d (best step %s)", self.desc, step,
                        self.best_step)
            self.stopped = True
        return self.stopped

    def restore(self, model: RewardModel) -> None:
        if self.config.early_stopping and self.state is not None:
            model.load_state_dict(self.state)


def _evaluate(model, val, val_q, config) -> tuple[float, float]:
    with precision(config.bf16, config.device):
        rc, rr = score_pairs(model, val, batch_size=max(32, config.batch_size),
                             device=config.device)
    diff = torch.as_tensor(rc - rr)
    q = torch.as_tensor(val_q)
    loss = float(bt_soft_loss(diff, torch.zeros_like(diff), q))
    hard = val_q > 0.5
    agree = np.where(rc == rr, 0.5, ((rc > rr) == hard).astype(float))
    return loss, float(agree.mean())


