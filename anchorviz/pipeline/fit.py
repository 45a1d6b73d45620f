"""Train and score one reward model on given pairs, kept in a run store: for experiments that
vary what a run's steps fix (a teacher's learning rate, ANCHOR on gold labels).

`fit_and_score` loads the teacher's or the student's backbone of a `RunConfig` as the steps do
(`anchorviz.pipeline.steps`), trains it on the given pairs and target probabilities with the
given `TrainConfig` (the run's seed folded in) and `Objective`, scores every given split, and
keeps the result in the run folder ``fit-<role>-<hash of its key>`` of a `RunStore`
(`fit_key`: the backbone settings, the training settings, the objective, the contents of every
pair table and the targets), so a rerun with the same inputs reads it instead of training.

A fit folder holds ``config.yaml`` (its key), ``metrics.json`` (accuracy per split, training
summary), ``history.parquet`` (one row per optimiser step) and ``scores.parquet`` (split,
pair_id, r_chosen, r_rejected, in each split's row order).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from anchorviz.analysis.metrics import pairwise_accuracy
from anchorviz.config import RunConfig, TrainConfig
from anchorviz.pipeline.keys import TRAINING_CODE_VERSION, local_inputs
from anchorviz.pipeline.steps import (
    RunResult,
    anchor_reference,
    encode_run_pairs,
    load_backbone,
    run_guarded,
    seeded_train,
)
from anchorviz.pipeline.store import RunStore, config_hash
from anchorviz.training.loop import Objective, score_pairs, train_reward_model
from anchorviz.training.losses import resolve_anchor_layers

logger = logging.getLogger(__name__)

__all__ = ["ROLES", "FitResult", "fit_and_score", "fit_key", "pairs_digest"]

#: which backbone of the config a fit trains: ``cfg.models.teacher`` or ``cfg.models.student``
ROLES = ("teacher", "student")

# the pair-table columns the encoding reads (`anchorviz.models.tokenization.encode_pairs`)
_ENCODED_COLUMNS = ("pair_id", "prompt", "chosen", "rejected", "prompt_turns")


def pairs_digest(pairs: pd.DataFrame) -> str:
    """sha256 of what the encoding reads of a pair table (ids, prompts, both sides, prompt
    turns when present), in row order."""
    cols = [c for c in _ENCODED_COLUMNS if c in pairs.columns]
    rows = pairs[cols].to_numpy().tolist()
    text = json.dumps([cols, rows], default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _targets_digest(targets: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(targets, dtype=np.float64).tobytes()).hexdigest()


def _check(role: str, train: pd.DataFrame, targets: np.ndarray,
           splits: Mapping[str, pd.DataFrame]) -> np.ndarray:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    t = np.asarray(targets, dtype=np.float64)
    if t.shape != (len(train),):
        raise ValueError(f"expected one target per training pair ({len(train)}), "
                         f"got shape {t.shape}")
    if not splits:
        raise ValueError("no split to score: give at least one pair table in `splits`")
    return t


def fit_key(cfg: RunConfig, role: str, train: pd.DataFrame, targets: np.ndarray,
            splits: Mapping[str, pd.DataFrame], train_config: TrainConfig,
            objective: Objective | None = None,
            anchor_layers: str | int | Sequence[int] | None = None) -> dict:
    """The key a fit is stored under (its run id is ``fit-<role>-<hash of the key>``): the
    backbone of ``role`` with its pooling / dropout / LoRA / dtype, the run's seed and
    ``max_length``, the seeded training settings, the objective (with ``anchor_layers`` as
    given, before it is resolved on the model), the scoring batch size, the contents of the
    training pairs, targets and every split, and the fingerprint of a local model folder."""
    t = _check(role, train, targets, splits)
    objective = objective or Objective()
    # anchored: layers to resolve with a weight above 0, or layers given in the objective
    anchored = (objective.anchor_lambda > 0 if anchor_layers is not None
                else objective.anchored)
    m = cfg.models
    name = m.teacher if role == "teacher" else m.student
    obj = asdict(objective)
    if anchor_layers is not None:
        obj["anchor_layers"] = anchor_layers if anchored else []  # the spec, unresolved
    key = {"kind": "fit", "code": TRAINING_CODE_VERSION, "role": role, "model": name,
           "pooling": m.pooling,
           "dropout": m.teacher_dropout if role == "teacher" else m.student_dropout,
           "lora": m.student_lora if role == "student" else None, "dtype": m.dtype,
           "seed": cfg.seed, "max_length": cfg.data.max_length,
           "train": asdict(seeded_train(train_config, cfg)), "objective": obj,
           "reference": cfg.method.reference if anchored else None,
           "score_batch_size": cfg.capture.batch_size,
           "pairs": pairs_digest(train), "targets": _targets_digest(t),
           "splits": {s: pairs_digest(df) for s, df in splits.items()}}
    model_input = {k: v for k, v in local_inputs(cfg, name).items() if k == name}
    if model_input:
        key["inputs"] = model_input
    return key


@dataclass
class FitResult:
    """A stored fit: its run (id, folder, metrics, whether this call trained it), the training
    history and the scores of every split."""

    run: RunResult
    history: pd.DataFrame
    scores: pd.DataFrame

    @property
    def computed(self) -> bool:
        return self.run.computed

    @property
    def metrics(self) -> dict:
        return self.run.metrics

    def rewards(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``(r_chosen, r_rejected)`` of ``split``, in the row order of its pair table."""
        if split not in self.metrics["splits"]:
            raise KeyError(f"fit {self.run.run_id} scored no split {split!r}; it scored "
                           f"{list(self.metrics['splits'])}")
        s = self.scores[self.scores["split"] == split]
        return s["r_chosen"].to_numpy(), s["r_rejected"].to_numpy()

    def accuracy(self, split: str) -> float:
        """Pairwise accuracy on ``split`` (the stored gold labels: chosen over rejected)."""
        return float(pairwise_accuracy(*self.rewards(split)))


def fit_and_score(store: RunStore | str | Path, cfg: RunConfig, role: str, train: pd.DataFrame,
                  targets: np.ndarray, splits: Mapping[str, pd.DataFrame],
                  train_config: TrainConfig | None = None, objective: Objective | None = None,
                  anchor_layers: str | int | Sequence[int] | None = None,
                  desc: str | None = None) -> FitResult:
    """Train the ``role`` backbone of ``cfg`` (``"teacher"`` or ``"student"``, loaded as the
    run's steps load it) on the ``train`` pairs with target probabilities ``targets`` (1: the
    chosen side, gold labels; soft labels in [0, 1]), score every pair table of ``splits``,
    and keep the result in ``store``; a finished fit with the same `fit_key` is read instead.

    ``train_config``: the optimiser settings (None: ``cfg.student_train`` or
    ``cfg.teacher_train`` by role), with the run's seed folded in as the steps do.
    ``objective``: the loss (None: Bradley-Terry on ``targets``). ``anchor_layers``: the layers
    ANCHOR compares (as `anchorviz.training.losses.resolve_anchor_layers` takes them, e.g.
    ``"last"``), resolved on the loaded model when ``objective.anchor_lambda > 0`` (none
    otherwise); None keeps ``objective.anchor_layers``. An anchored fit builds its frozen
    reference by ``cfg.method.reference`` (`anchorviz.pipeline.steps.anchor_reference`).
    Scoring uses ``cfg.capture.batch_size`` on the training device.

    Raises:
        ValueError: an unknown role, targets that are not one per training pair, no split.
    """
    store = store if isinstance(store, RunStore) else RunStore(store)
    objective = objective or Objective()
    if train_config is None:
        train_config = cfg.teacher_train if role == "teacher" else cfg.student_train
    key = fit_key(cfg, role, train, targets, splits, train_config, objective, anchor_layers)
    t = np.asarray(targets, dtype=np.float64)
    tc = seeded_train(train_config, cfg)
    run_id = f"fit-{role}-{config_hash(key)}"

    def body(tmp: Path) -> dict:
        t0 = time.perf_counter()
        model, tok = load_backbone(cfg, role)
        obj = objective
        if anchor_layers is not None:
            layers = (resolve_anchor_layers(anchor_layers, model.n_layers)
                      if objective.anchor_lambda > 0 else [])
            obj = dataclasses.replace(objective, anchor_layers=layers)
        enc = encode_run_pairs(tok, train, cfg)
        reference = anchor_reference(model, obj, enc, cfg)[0] if obj.anchored else None
        try:
            res = train_reward_model(model, enc, t, tc, objective=obj, reference=reference,
                                     desc=desc or run_id)
        finally:
            if reference is not None:
                reference.close()
        res.history.to_parquet(tmp / "history.parquet")
        frames, accuracy = [], {}
        for split, df in splits.items():
            s_enc = encode_run_pairs(tok, df, cfg)
            rc, rr = score_pairs(model, s_enc, batch_size=cfg.capture.batch_size,
                                 device=tc.device)
            frames.append(pd.DataFrame({"split": split, "pair_id": s_enc.pair_ids,
                                        "r_chosen": rc, "r_rejected": rr}))
            accuracy[split] = float(pairwise_accuracy(rc, rr)) if len(rc) else float("nan")
        pd.concat(frames, ignore_index=True).to_parquet(tmp / "scores.parquet")
        return {"kind": "fit", "role": role, "model": key["model"], "accuracy": accuracy,
                "splits": {s: len(df) for s, df in splits.items()},
                "anchor_layers": list(obj.anchor_layers),
                "train": {"pairs": len(train), "steps": res.steps, "seconds": res.seconds,
                          "final_loss": float(res.history["total"].iloc[-1]),
                          "first_loss": float(res.history["total"].iloc[0])},
                "seconds": time.perf_counter() - t0}

    run = run_guarded(store, run_id, key, body)
    if not run.computed:
        logger.info("fit %s read from %s (already finished)", run_id, run.run_dir)
    return FitResult(run, pd.read_parquet(run.run_dir / "history.parquet"),
                     pd.read_parquet(run.run_dir / "scores.parquet"))
