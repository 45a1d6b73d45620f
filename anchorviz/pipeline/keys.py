"""Run keys and run ids: what a run's content hash is made of.

A run is stored under ``<kind>-<hash of its key>`` (`run_id_for`); the key holds everything the
run computes from, so a finished run is found again and never recomputed, and a changed setting
gives a new run. The ids of existing runs must not change: settings added later stay out of the
key at their old defaults (`_KEY_DEFAULTS`), and `TRAINING_CODE_VERSION` / `SPLIT_PROTOCOL` are
bumped only when the same config would compute something else.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from anchorviz.config import DataConfig, RunConfig
from anchorviz.data.entries import dataset_path, normalise_dataset_entry
from anchorviz.models.zoo import ZOO
from anchorviz.paths import fingerprint
from anchorviz.pipeline.prepare import data_config, is_local_data
from anchorviz.pipeline.store import config_hash

__all__ = [
    "SPLIT_PROTOCOL",
    "TRAINING_CODE_VERSION",
    "capture_key",
    "data_key",
    "local_inputs",
    "reference_key",
    "run_id_for",
    "student_key",
    "teacher_key",
]


# Bumped when the training or evaluation code changes what a run computes from the same config
# (2: side-symmetric confidence hardening, per-pair ANCHOR mean, PGR from stored scores), so
# results made by older code are recomputed instead of being read as current
TRAINING_CODE_VERSION = 2


# Bumped when the same DataConfig would give other splits (2: targets drawn by
# data.protocol_splits, which leaves out pairs that overlap the source's training splits)
SPLIT_PROTOCOL = 2


# settings added after runs were stored: left out of the key at these values, so that the runs
# made before they existed keep their ids
_KEY_DEFAULTS = {"artifact_teacher_visibility": 1.0, "artifact_teacher_form": "same"}


def data_key(d: DataConfig) -> dict:
    """The data part of every run key."""
    key = {k: v for k, v in asdict(d).items() if not (k in _KEY_DEFAULTS and v == _KEY_DEFAULTS[k])}
    # a dataset named by a string keeps its string (the run ids made before mappings existed)
    key["source"] = normalise_dataset_entry(key["source"])
    key["targets"] = [normalise_dataset_entry(t) for t in key["targets"]]
    return {**key, "split_protocol": SPLIT_PROTOCOL}


def _is_local_model(name: str) -> bool:
    return name not in ZOO and Path(name).expanduser().is_dir()


def local_inputs(cfg: RunConfig, model: str) -> dict[str, str]:
    """``{path: content fingerprint}`` of the run's local inputs (`anchorviz.paths.fingerprint`):
    data files / folders given as paths, and ``model`` when it is a local folder. Named
    datasets, zoo models and hub ids are not local: they have none, so their run keys (and
    ids) are what they were before fingerprints existed."""
    d = cfg.data
    paths = [dataset_path(e) for e in [d.source, *d.targets]]
    out = {n: fingerprint(n) for n in paths if is_local_data(n)}
    if _is_local_model(model):
        out[model] = fingerprint(model)
    return out


def _with_inputs(key: dict, cfg: RunConfig, model: str) -> dict:
    inputs = local_inputs(cfg, model)
    if inputs:  # only for local paths: a key of named inputs stays as it was
        key["inputs"] = inputs
    return key


def _with_attention(key: dict, cfg: RunConfig) -> dict:
    """The attention kernel joins a key only when it is not the library's own ("auto"): the ids
    of runs made before the setting existed stay as they were."""
    if cfg.models.attention != "auto":
        key["attention"] = cfg.models.attention
    return key


def teacher_key(cfg: RunConfig) -> dict:
    return _with_inputs(_with_attention(
        {"kind": "teacher", "code": TRAINING_CODE_VERSION, "data": data_key(data_config(cfg)),
         "model": cfg.models.teacher,
         "pooling": cfg.models.pooling, "dropout": cfg.models.teacher_dropout,
         "dtype": cfg.models.dtype, "train": asdict(cfg.teacher_train), "seed": cfg.seed}, cfg),
        cfg, cfg.models.teacher)


def capture_key(cfg: RunConfig) -> dict:
    """The capture settings in a student's key: ``enabled`` joins only when False (runs made
    before the setting existed captured, and keep their ids)."""
    key = asdict(cfg.capture)
    if key.pop("enabled", True) is False:
        key["enabled"] = False
    return key


def student_key(cfg: RunConfig, kind: str) -> dict:
    m = cfg.models
    key = {"kind": kind, "code": TRAINING_CODE_VERSION, "data": data_key(data_config(cfg)),
           "model": m.student, "pooling": m.pooling,
           "dropout": m.student_dropout, "lora": m.student_lora, "dtype": m.dtype,
           "train": asdict(cfg.student_train), "seed": cfg.seed,
           "capture": capture_key(cfg)}
    _with_attention(key, cfg)
    if kind == "student":
        key["teacher"] = teacher_key(cfg)
        meth = asdict(cfg.method)
        if cfg.method.name != "anchor":
            meth.update(anchor_lambda=0.0, anchor_layers="", reference="", anchor_normalise="")
        if cfg.method.name != "confidence":
            meth.update(aux_coef=0.0, aux_warmup_frac=0.0)
        else:  # the side-symmetric hardening (h = 1[r_a > r_b]) replaced the batch quantile
            meth["confidence_hardening"] = "margin"
        key["method"] = meth
    return _with_inputs(key, cfg, m.student)


def reference_key(cfg: RunConfig) -> dict:
    m = cfg.models
    key = {"kind": "reference", "data": data_key(data_config(cfg)), "model": m.student,
           "pooling": m.pooling, "dtype": m.dtype, "capture_layers": cfg.capture.layers}
    if cfg.student_train.bf16:  # captured under bfloat16 autocast; float32 keys stay as they were
        key["bf16"] = True
    return _with_inputs(_with_attention(key, cfg), cfg, m.student)


def run_id_for(key: dict) -> str:
    label = key["kind"] if key["kind"] != "student" else key["method"]["name"]
    return f"{label}-{config_hash(key)}"
