"""Experiment tracking: ``report_to: [tensorboard, mlflow, wandb]`` in a run config, as TRL's
``report_to``. Off by default (``report_to: []``); each backend is an optional extra
(``pip install "anchorviz[tensorboard]"``, ``[mlflow]``, ``[wandb]``, or ``[tracking]`` for all).

Every run that is computed (teacher, ceiling, student; a finished run read from the store logs
nothing) is one tracked run named by its run id, with:

* per optimiser step: ``train/fit_loss``, ``train/anchor_loss`` (the ANCHOR MSE),
  ``train/anchor_weighted`` (lambda x MSE), ``train/anchor_share`` (lambda x MSE / fit),
  ``train/total_loss``, ``train/learning_rate``, ``train/grad_norm``;
* per validation: ``eval/val_loss``, ``eval/val_accuracy`` (agreement with the run's own
  labels on the SOURCE validation split, the only accuracy training looks at);
* when the run ends: ``final/acc_id``, ``final/acc_ood``, ``final/acc_<target>`` and, for
  students, ``final/wrg``, ``final/aog``, ``final/nts``, ``final/aog_<target>``,
  ``final/nts_<target>``, ``final/acc_val``; the run key (every setting) as parameters.

Where it goes, under the run store ``OUT`` (the ``--out`` folder):

* TensorBoard: ``OUT/tensorboard/<run id>/`` (``tensorboard --logdir OUT/tensorboard``);
* MLflow: ``$MLFLOW_TRACKING_URI`` if set, else the local file store ``OUT/mlruns``
  (``mlflow ui --backend-store-uri OUT/mlruns``); experiment ``$MLFLOW_EXPERIMENT_NAME``,
  else ``anchorviz-<OUT folder name>``. MLflow >= 3.7 refuses file stores unless
  ``MLFLOW_ALLOW_FILE_STORE=true``, which anchorviz sets for the file stores it chooses;
* Weights & Biases: project ``$WANDB_PROJECT`` (else ``anchorviz``), files under ``OUT/wandb``;
  ``WANDB_MODE=offline`` keeps everything local.

Training numerics do not depend on tracking: the loop hands the tracker numbers it has already
computed (`anchorviz.training.loop.train_reward_model`'s ``tracker``, or the one `tracked_run` opens).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "Tracker",
    "TrackingError",
    "check_report_to",
    "current",
    "final_metrics",
    "flatten",
    "mlflow_uri",
    "open_tracker",
    "step_metrics",
    "tracked_run",
]

BACKENDS = ("tensorboard", "mlflow", "wandb")
# the module each backend needs, and the extra that installs it
_NEEDS = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow"),
          "wandb": ("wandb", "wandb")}

_CURRENT: contextvars.ContextVar[Tracker | None] = contextvars.ContextVar(
    "anchorviz_tracker", default=None)


class TrackingError(ValueError):
    """A ``report_to`` setting that cannot work (unknown backend, package not installed)."""


def check_report_to(value: Any, where: str = "report_to") -> list[str]:
    """``report_to`` as a list of backends: a list, one name, ``"all"`` (every installed
    backend) or ``"none"`` / ``[]`` (off). Raises `TrackingError` for an unknown backend or one
    whose package is missing (naming the extra that installs it)."""
    if value is None or value == "none" or value == []:
        return []
    if value == "all":
        return [b for b in BACKENDS if _installed(b)]
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise TrackingError(f"{where} must be a list of {list(BACKENDS)} (or 'all' / 'none'), "
                            f"got {value!r}")
    out: list[str] = []
    for b in items:
        if b not in BACKENDS:
            raise TrackingError(f"{where}: unknown backend {b!r}; choose from {list(BACKENDS)}")
        if not _installed(b):
            module, extra = _NEEDS[b]
            raise TrackingError(f"{where}: {b} needs the {module!r} package: "
                                f'pip install "anchorviz[{extra}]"')
        if b not in out:
            out.append(b)
    return out


def _installed(backend: str) -> bool:
    return importlib.util.find_spec(_NEEDS[backend][0]) is not None


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """A nested mapping as ``{dotted.key: JSON text}`` (the parameters a tracker records)."""
    out: dict[str, str] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    return out


def step_metrics(row: Mapping[str, Any], anchor_lambda: float = 0.0) -> dict[str, float]:
    """What one optimiser step logs, from the training loop's history row."""
    names = {"fit": "train/fit_loss", "anchor": "train/anchor_loss", "total": "train/total_loss",
             "lr": "train/learning_rate", "grad_norm": "train/grad_norm"}
    out = {names[k]: float(v) for k, v in row.items() if k in names}
    if "anchor" in row:
        weighted = anchor_lambda * float(row["anchor"])
        out["train/anchor_weighted"] = weighted
        fit = float(row.get("fit", math.nan))
        if fit != 0 and math.isfinite(fit):
            out["train/anchor_share"] = weighted / fit
    return out


def final_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """What a run logs when it ends, from its ``metrics.json`` content."""
    out: dict[str, float] = {}
    for split, b in (metrics.get("accuracy") or {}).items():
        name = {"source_test": "acc_id", "ood": "acc_ood"}.get(split, "acc_" + split.split(":")[-1])
        if isinstance(b, Mapping) and b.get("point") is not None:
            out[f"final/{name}"] = float(b["point"])
    for split, block in (metrics.get("transfer") or {}).items():
        suffix = "" if split == "ood" else "_" + split.split(":")[-1]
        for k in ("wrg", "aog", "nts", "pgr"):
            if k in ("wrg", "pgr") and split != "ood":  # ID quantities: one per run
                continue
            b = (block or {}).get(k)
            if b and b.get("point") is not None:
                out[f"final/{k}{suffix}"] = float(b["point"])
    if isinstance(metrics.get("acc_val"), (int, float)):
        out["final/acc_val"] = float(metrics["acc_val"])
    return {k: v for k, v in out.items() if math.isfinite(v)}


# --------------------------------------------------------------------------- backends


class Tracker:
    """One tracked run in one or more backends. ``log`` takes ``{name: number}`` at a step."""

    def __init__(self, backends: list) -> None:
        self._backends = backends

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        if not metrics:
            return
        for b in self._backends:
            try:
                b.log(dict(metrics), int(step))
            except Exception as err:  # tracking never stops a run
                logger.warning("%s: logging failed (%s)", type(b).__name__, err)

    def log_train_step(self, row: Mapping[str, Any], anchor_lambda: float = 0.0) -> None:
        """A training-loop history row (``step, fit, anchor, total, lr, grad_norm``), logged
        at the number of optimiser steps done (``step + 1``, the x axis of validations too)."""
        self.log(step_metrics(row, anchor_lambda), int(row.get("step", 0)) + 1)

    def log_eval(self, row: Mapping[str, Any]) -> None:
        """A validation row (``step, val_loss, val_acc``)."""
        self.log({"eval/val_loss": float(row["val_loss"]),
                  "eval/val_accuracy": float(row["val_acc"])}, int(row["step"]))

    def log_final(self, metrics: Mapping[str, Any], step: int = 0) -> None:
        self.log(final_metrics(metrics), step)

    def close(self, failed: bool = False) -> None:
        for b in self._backends:
            try:
                b.close(failed)
            except Exception as err:
                logger.warning("%s: closing failed (%s)", type(b).__name__, err)


class _TensorBoard:
    def __init__(self, out: Path, run_name: str, params: dict[str, str]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = out / "tensorboard" / run_name
        if self.dir.exists():  # a run computed again (e.g. after a failure) starts afresh
            shutil.rmtree(self.dir)
        self.writer = SummaryWriter(log_dir=str(self.dir))
        table = "\n".join(f"| {k} | {v} |" for k, v in sorted(params.items()))
        self.writer.add_text("config", "| setting | value |\n|---|---|\n" + table, 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)

    def close(self, failed: bool) -> None:
        self.writer.flush()
        self.writer.close()


def mlflow_uri(out: Path) -> str:
    """``$MLFLOW_TRACKING_URI``, else the file store ``OUT/mlruns``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or (out / "mlruns").resolve().as_uri()


class _MLflow:
    def __init__(self, out: Path, run_name: str, params: dict[str, str], tags: dict) -> None:
        uri = mlflow_uri(out)
        if uri.startswith("file:") or "://" not in uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow import MlflowClient
        from mlflow.entities import Param

        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or f"anchorviz-{out.resolve().name}"
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                exp_id = self.client.create_experiment(name)
            except Exception:  # another worker created it first
                exp_id = self.client.get_experiment_by_name(name).experiment_id
        else:
            exp_id = exp.experiment_id
        self.run_id = self.client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
        items = [Param(k[:250], str(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), ts, step)
                                                    for k, v in metrics.items()])

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class _WandB:
    def __init__(self, out: Path, run_name: str, params: dict[str, str], tags: dict) -> None:
        import wandb

        out.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "anchorviz",
                              name=run_name, config=params, dir=str(out),
                              tags=[str(v) for v in tags.values()])

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


def open_tracker(report_to: list[str], out: str | Path, run_name: str,
                 params: Mapping[str, Any] | None = None,
                 tags: Mapping[str, str] | None = None) -> Tracker | None:
    """A `Tracker` logging to every backend of ``report_to`` (None when it is empty)."""
    backends = check_report_to(report_to)
    if not backends:
        return None
    out = Path(out)
    flat = flatten(dict(params or {}))
    tags = {k: str(v) for k, v in (tags or {}).items()}
    made = []
    for b in backends:
        if b == "tensorboard":
            made.append(_TensorBoard(out, run_name, flat))
        elif b == "mlflow":
            made.append(_MLflow(out, run_name, flat, tags))
        else:
            made.append(_WandB(out, run_name, flat, tags))
    logger.info("tracking %s with %s", run_name, ", ".join(backends))
    return Tracker(made)


def current() -> Tracker | None:
    """The tracker of the run being computed in this thread (set by `tracked_run`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def tracked_run(report_to: list[str], out: str | Path, run_name: str,
                params: Mapping[str, Any] | None = None,
                tags: Mapping[str, str] | None = None) -> Iterator[Tracker | None]:
    """Open a tracker for one run and make it `current` (the training loop logs to it) until
    the block ends; closes it as failed when the block raises."""
    tracker = open_tracker(report_to, out, run_name, params, tags)
    token = _CURRENT.set(tracker)
    failed = True
    try:
        yield tracker
        failed = False
    finally:
        _CURRENT.reset(token)
        if tracker is not None:
            tracker.close(failed=failed)
