"""The training stage's check of a run config (`check_training_settings`: registered with
`anchorviz.config` by ``anchorviz/__init__.py``, so `RunConfig.validate` runs it before anything
loads or trains): the devices, SEAM's generative student, the experiment trackers.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from anchorviz.config import ConfigError, RunConfig
from anchorviz.training.seam import check_generative
from anchorviz.training.tracking import TrackingError, check_report_to

__all__ = ["check_device", "check_training_settings"]


def check_device(device: Any, where: str) -> None:
    """A device torch knows and this machine has: ``cpu``, ``cuda[:i]`` or ``mps``.
    ``$ANCHORVIZ_REMOTE_DEVICES=1`` skips the "this machine has it" part, for a driver that
    only hands the runs to other machines (e.g. GPU workers of a Ray cluster)."""
    if not isinstance(device, str) or not device.strip():
        raise ConfigError(f"{where} must be a device name such as 'cpu' or 'cuda', got {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{where}: {device!r} is not a device; use 'cpu', 'cuda', "
                          "'cuda:<index>' or 'mps'") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"{where}: device type {dev.type!r} is not supported (cpu, cuda, mps)")
    if dev.type == "cpu" or os.environ.get("ANCHORVIZ_REMOTE_DEVICES", "") in ("1", "true", "yes"):
        return
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            built = f"CUDA {torch.version.cuda}" if torch.version.cuda else "without CUDA"
            raise ConfigError(f"{where} is {device!r} but CUDA is not available here (torch "
                              f"{torch.__version__}, built {built}); set {where}: cpu (or "
                              "ANCHORVIZ_REMOTE_DEVICES=1 when other machines run the work)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"{where} is {device!r} but this machine has "
                              f"{torch.cuda.device_count()} CUDA device(s)")
        return
    if dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"{where} is {device!r} but MPS is not available here; set {where}: cpu")


def check_training_settings(cfg: RunConfig) -> None:
    """``teacher_train.device`` / ``student_train.device`` (`check_device`), a generative student
    for ``method.name: seam`` (`anchorviz.training.seam.check_generative`) and ``report_to``
    (normalised to a list of installed trackers). `ConfigError` naming the key."""
    for name in ("teacher_train", "student_train"):
        check_device(getattr(cfg, name).device, f"{name}.device")
    if cfg.method.name == "seam":
        try:
            check_generative(cfg.models.student)
        except ValueError as err:
            raise ConfigError(f"method 'seam': {err}") from None
    try:
        cfg.report_to = check_report_to(cfg.report_to)
    except TrackingError as err:
        raise ConfigError(str(err)) from None
