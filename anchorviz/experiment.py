"""Run configs, the whole pipeline for one run, and sweeps that share the expensive parts.

Data flow:

    data (source splits + target tests, optional artefact)
      -> teacher (weak backbone, gold labels on teacher_train) -> soft labels q on w2s_train
      -> ceiling (strong backbone, gold labels on w2s_train)     [optional]
      -> student (strong backbone, q on w2s_train, method naive | confidence | anchor)
      -> evaluate + capture (one pass per split) -> drift vs the shared reference capture
      -> projection (shared UMAP fitted on the reference) -> metrics with paired bootstrap CIs

Every run is a directory in a ``RunStore`` keyed by a hash of its config: a finished run is
never recomputed, a half-written one is redone, and a sweep resumes where it stopped. Teachers,
ceilings and reference captures are shared by all the students that need them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import time
import traceback
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from anchorviz.analysis.metrics import pairwise_accuracy
from anchorviz.training.loop import Objective, TrainConfig, score_pairs, train_reward_model
from anchorviz.training.losses import is_layer_spec

logger = logging.getLogger(__name__)

METHODS = ("naive", "confidence", "anchor", "seam")


class ConfigError(ValueError):
    """A config value or key that is not allowed; the message names the key and what is expected."""


# --------------------------------------------------------------------------- config


@dataclass
class DataConfig:
    """Source / target datasets, split sizes and the optional source-only artefact.

    ``source`` and each of ``targets``: a dataset name (``anchorviz datasets``), a local file or
    folder (jsonl / json / parquet / csv / tsv), a hub id, or a mapping ``{path: ..., name: ...,
    column_map: {...}}`` (`DATASET_ENTRY_KEYS`; docs/YOUR_DATA.md): ``column_map`` renames the
    file's columns (``{chosen: good, rejected: bad, prompt: question}``), ``name`` is the short
    name used in split, column and file names and as the domain label."""

    source: str | dict = "vader-movie"
    targets: list[str | dict] = field(
        default_factory=lambda: ["vader-amazon", "vader-nyt", "vader-tweets"])
    teacher_train: int = 600
    w2s_train: int = 1200
    val: int = 200
    source_test: int = 500
    target_test: int = 500
    max_length: int = 64
    split_seed: int = 0
    # True: run seed k uses split seed split_seed + k, so seeds vary the data split (which pairs
    # land in which split, where the artefact goes) as well as the training order
    split_per_seed: bool = False
    group_key: str = "auto"  # "auto" (prompt unless all prompts are equal), "prompt" or "none"
    artifact_kind: str = "none"  # "none" | "marker" | "order" | "echo" | "length"
    artifact_strength: float = 0.0
    artifact_target_mode: str = "absent"  # "absent" | "neutral" | "reversed"
    # fraction of the source's artefact-carrying pairs on which the weak TEACHER can read the
    # artefact (elsewhere its copy of the pair lacks it, as if the cue lay beyond its context
    # window); the student always sees it. 1 = the plain artefact
    artifact_teacher_visibility: float = 1.0
    # how the teacher reads the artefacts it can read: "same" (the student's text) or "marker"
    # (its copy carries the marker " [verified]" instead of an order / echo cue: a cue the weak
    # teacher cannot learn reaches its labels, and the student must drift to read it)
    artifact_teacher_form: str = "same"


@dataclass
class ModelsConfig:
    teacher: str = "minilm-l3"
    student: str = "minilm-l6"
    pooling: str = "auto"
    teacher_dropout: bool = True
    # off: the reference runs in eval mode, so student dropout alone would leave an anchor MSE
    # floor that lambda also penalises; off, lambda acts only on real drift
    student_dropout: bool = False
    student_lora: dict | None = None  # PEFT LoraConfig kwargs, e.g. {"r": 8}
    trust_remote_code: bool = False
    dtype: str = "float32"  # "float32" | "bfloat16"


@dataclass
class MethodConfig:
    name: str = "naive"  # naive | confidence | anchor | seam
    anchor_lambda: float = 0.0
    anchor_layers: str = "last"  # "last" | "middle" | "all" | "3,5"
    # "pair": L_anchor(i) per preference pair (mean over its response tokens), then the batch
    # mean, as in the paper's L(i) = L_w2s(i) + lambda L_anchor(i); "token": one mean over every
    # response token of the batch (long responses weigh more)
    anchor_normalise: str = "pair"
    reference: str = "auto"  # auto | copy | adapter_off | cached
    aux_coef: float = 0.75
    aux_warmup_frac: float = 0.2
    label_temperature: float = 1.0  # q = sigmoid((r_c - r_r) / T); T < 1 sharpens
    hard_labels: bool = False  # q in {0, 1}: the teacher's argmax instead of its probability


@dataclass
class CaptureConfig:
    layers: str = "all"
    batch_size: int = 64
    save_hidden: bool = True
    token_sample: int = 0
    projection: str = "auto"  # auto | umap | pca | none
    projection_fit_rows: int = 1500
    n_boot: int = 1000


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    teacher_train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=1e-4, epochs=2))
    student_train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=5e-5, epochs=2))
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    seed: int = 0
    ceiling: bool = True  # also train the gold-label ceiling (for PGR)
    # experiment tracking, as TRL's report_to: [tensorboard, mlflow, wandb] ("all" / "none");
    # off by default and never part of a run key (anchorviz.tracking)
    report_to: list[str] | str = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> RunConfig:
        d, m = self.data, self.method
        if m.name not in METHODS:
            raise ConfigError(f"method.name must be one of {METHODS}, got {m.name!r}")
        if m.name == "seam":
            from anchorviz.training.seam import check_generative

            try:
                check_generative(self.models.student)
            except ValueError as err:
                raise ConfigError(f"method 'seam': {err}") from None
        if not (isinstance(m.anchor_lambda, (int, float)) and math.isfinite(m.anchor_lambda)
                and m.anchor_lambda >= 0):
            raise ConfigError(f"method.anchor_lambda must be a finite number >= 0, got {m.anchor_lambda!r}")
        if m.name == "anchor" and m.anchor_lambda == 0:
            logger.warning("method anchor with anchor_lambda 0 trains exactly like naive")
        if not m.label_temperature > 0:
            raise ConfigError(f"method.label_temperature must be > 0, got {m.label_temperature!r}")
        if not is_layer_spec(m.anchor_layers):
            raise ConfigError("method.anchor_layers must be 'last', 'middle', 'all' or comma-separated "
                              f"layer indices >= 0 such as '3,5', got {m.anchor_layers!r}")
        if m.anchor_normalise not in ("pair", "token"):
            raise ConfigError(f"method.anchor_normalise must be pair|token, got {m.anchor_normalise!r}")
        if m.reference not in ("auto", "copy", "adapter_off", "cached"):
            raise ConfigError(f"method.reference must be auto|copy|adapter_off|cached, got {m.reference!r}")
        if d.artifact_kind not in ("none", "marker", "order", "echo", "length"):
            raise ConfigError("data.artifact_kind must be none|marker|order|echo|length, got "
                              f"{d.artifact_kind!r}")
        if not (isinstance(d.artifact_teacher_visibility, (int, float))
                and 0 <= d.artifact_teacher_visibility <= 1):
            raise ConfigError("data.artifact_teacher_visibility must be in [0, 1], got "
                              f"{d.artifact_teacher_visibility!r}")
        if d.artifact_teacher_visibility < 1 and d.artifact_kind == "none":
            raise ConfigError("data.artifact_teacher_visibility < 1 needs an artefact "
                              "(data.artifact_kind marker, order, echo or length)")
        if d.artifact_teacher_form not in ("same", "marker"):
            raise ConfigError("data.artifact_teacher_form must be same|marker, got "
                              f"{d.artifact_teacher_form!r}")
        if d.artifact_teacher_form == "marker" and d.artifact_kind not in ("order", "echo"):
            raise ConfigError("data.artifact_teacher_form 'marker' replaces an order or echo cue "
                              "in the teacher's copy: set data.artifact_kind to order or echo, got "
                              f"{d.artifact_kind!r}")
        if not 0 <= d.artifact_strength <= 1:
            raise ConfigError(f"data.artifact_strength must be in [0, 1], got {d.artifact_strength!r}")
        if d.artifact_target_mode not in ("absent", "neutral", "reversed"):
            raise ConfigError("data.artifact_target_mode must be absent|neutral|reversed, got "
                              f"{d.artifact_target_mode!r}")
        if not (isinstance(d.split_seed, int) and d.split_seed >= 0):
            raise ConfigError(f"data.split_seed must be an integer >= 0, got {d.split_seed!r}")
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise ConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        if d.group_key not in ("auto", "prompt", "none"):
            raise ConfigError(f"data.group_key must be auto|prompt|none, got {d.group_key!r}")
        for k in ("teacher_train", "w2s_train", "val", "source_test", "target_test"):
            if getattr(d, k) < 1:
                raise ConfigError(f"data.{k} must be >= 1 pairs, got {getattr(d, k)!r}")
        if not d.targets:
            raise ConfigError("data.targets must list at least one target dataset")
        if self.models.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"models.dtype must be float32 or bfloat16, got {self.models.dtype!r}")
        if self.capture.projection not in ("auto", "umap", "pca", "none"):
            raise ConfigError(f"capture.projection must be auto|umap|pca|none, got {self.capture.projection!r}")
        from anchorviz.training.loop import TrainError

        for name in ("teacher_train", "student_train"):
            try:
                getattr(self, name).validate()
            except TrainError as err:  # say which of the two sections
                raise ConfigError(f"{name}: {err}") from None
        self._validate_more()
        from anchorviz.training.tracking import TrackingError, check_report_to

        try:
            self.report_to = check_report_to(self.report_to)
        except TrackingError as err:
            raise ConfigError(str(err)) from None
        return self

    def _validate_more(self) -> None:
        """The checks that once passed validation and failed only after the teacher had trained
        (or passed silently): devices, capture settings, sizes, names, the protocol's inputs."""
        from anchorviz.models.reward_model import POOLINGS

        d, m, c = self.data, self.method, self.capture
        for name in ("teacher_train", "student_train"):
            t = getattr(self, name)
            _check_device(t.device, f"{name}.device")
            _check_int(t.eval_every, f"{name}.eval_every", 0, "(optimiser steps between "
                       "validations; 0 = once per epoch)")
        _check_int(d.max_length, "data.max_length", 4, "tokens")
        _check_int(c.batch_size, "capture.batch_size", 1, "pairs")
        _check_int(c.token_sample, "capture.token_sample", 0, "(0 = no token sample)")
        _check_int(c.projection_fit_rows, "capture.projection_fit_rows", 2, "rows")
        _check_int(c.n_boot, "capture.n_boot", 1, "bootstrap resamples")
        if not is_layer_spec(c.layers):
            raise ConfigError("capture.layers must be 'all', 'last', 'middle' or comma-separated "
                              f"layer indices >= 0 such as '0,3,6', got {c.layers!r}")
        if self.models.pooling not in POOLINGS:
            raise ConfigError(f"models.pooling must be one of {POOLINGS}, got {self.models.pooling!r}")
        for k in ("teacher", "student"):
            v = getattr(self.models, k)
            if not (isinstance(v, str) and v.strip()):
                raise ConfigError(f"models.{k} must name a zoo model, a local folder or a hub id, "
                                  f"got {v!r}")
            _check_model_name(v, f"models.{k}")
        if not (isinstance(m.aux_coef, (int, float)) and 0 <= m.aux_coef <= 1):
            raise ConfigError(f"method.aux_coef must be in [0, 1], got {m.aux_coef!r}")
        if not (isinstance(m.aux_warmup_frac, (int, float)) and 0 <= m.aux_warmup_frac <= 1):
            raise ConfigError(f"method.aux_warmup_frac must be in [0, 1], got {m.aux_warmup_frac!r}")
        check_dataset_entry(d.source, "data.source")
        if not isinstance(d.targets, list):
            raise ConfigError(f"data.targets must be a list of datasets, got {d.targets!r}")
        names: dict[str, Any] = {}
        for i, t in enumerate(d.targets):
            check_dataset_entry(t, f"data.targets[{i}]")
            if _same_dataset(dataset_path(t), dataset_path(d.source)):
                raise ConfigError(
                    f"data.targets: {t!r} is the source dataset ({d.source!r}); a target must be "
                    "another dataset, or its 'out-of-distribution' accuracy is in-distribution")
            short = target_name(t)
            if short in names:
                raise ConfigError(
                    f"data.targets: {t!r} and {names[short]!r} are the same target (both named "
                    f"{short!r}); give one a short name of its own: {{path: ..., name: ...}}")
            names[short] = t


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def _check_model_name(name: str, where: str) -> None:
    """`ConfigError` naming ``where`` unless ``name`` is a zoo model, an existing local folder
    or a plausible hub id (``org/name``): checked before anything trains, so a misspelt student
    fails now, not after the teacher has trained. Nothing is downloaded or prepared here."""
    from anchorviz.models.zoo import ZOO, _unknown_message

    if name in ZOO:
        return
    path = Path(name).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"{where}: {name!r} is a file; a model must be a folder (config.json "
                          "+ weights), a zoo name or a hub id")
    if path.is_absolute() or name.startswith((".", "~")) or "\\" in name:
        raise ConfigError(f"{where}: model folder {name!r} does not exist")
    if _HUB_ID.fullmatch(name) and ".." not in name:
        return
    if "/" in name:
        raise ConfigError(f"{where}: {name!r} is neither a local folder nor an 'org/name' hub id")
    raise ConfigError(f"{where}: {_unknown_message(name)}")

#: the keys of a dataset given as a mapping in ``data.source`` / ``data.targets``
DATASET_ENTRY_KEYS = ("path", "name", "column_map")
_SHORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENTRY_FORM = ("a dataset name, a local file / folder, a hub id, or a mapping "
               "{path: ..., name: ..., column_map: {field: column}}")


def dataset_path(entry: str | dict) -> str:
    """The dataset name, local path or hub id of a ``data.source`` / ``data.targets`` entry."""
    return entry["path"] if isinstance(entry, dict) else entry


def dataset_label(entry: str | dict) -> str:
    """How tables name an entry: its ``name``, else its path or dataset name."""
    if isinstance(entry, dict):
        return str(entry.get("name") or entry.get("path"))
    return str(entry)


def normalise_dataset_entry(entry: str | dict) -> str | dict:
    """The canonical form of an entry: a mapping that only gives ``path`` (no name, no column
    map) is the path itself, so ``{path: x}`` and ``x`` make the same run ids; empty settings
    are dropped."""
    if not isinstance(entry, dict):
        return entry
    out = {k: v for k, v in entry.items() if v not in (None, {}, "")}
    return out["path"] if set(out) == {"path"} else out


def check_dataset_entry(entry: Any, where: str) -> None:
    """`ConfigError` naming ``where`` unless ``entry`` is a dataset of `_ENTRY_FORM`; a
    ``column_map`` must name fields of the adapter that will read the data."""
    if isinstance(entry, str):
        if not entry.strip():
            raise ConfigError(f"{where} must be {_ENTRY_FORM}, got {entry!r}")
        return
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be {_ENTRY_FORM}, got {entry!r}")
    unknown = sorted(set(entry) - set(DATASET_ENTRY_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {list(DATASET_ENTRY_KEYS)}")
    path = entry.get("path")
    if not (isinstance(path, str) and path.strip()):
        raise ConfigError(f"{where}.path must name a dataset, a local file or a hub id, got "
                          f"{path!r}")
    name = entry.get("name")
    if name is not None and not (isinstance(name, str) and _SHORT_NAME.fullmatch(name)):
        raise ConfigError(f"{where}.name must be a short name (letters, digits, '.', '_', '-'; "
                          f"at most 64 characters, no '/'), got {name!r}")
    cmap = entry.get("column_map")
    if cmap is None:
        return
    if not isinstance(cmap, dict):
        raise ConfigError(f"{where}.column_map must map fields to column names, e.g. "
                          f"{{chosen: good, rejected: bad}}, got {cmap!r}")
    for k, v in cmap.items():
        ok = v is None or isinstance(v, str) or (isinstance(v, list) and v
                                                 and all(isinstance(c, str) for c in v))
        if not ok:
            raise ConfigError(f"{where}.column_map.{k}: expected a column name (or null: no "
                              f"such column, or a list of candidate names), got {v!r}")
    from anchorviz.data.pairs import ADAPTERS

    manifests = _dataset_manifests()
    adapter = manifests[path]["adapter"] if path in manifests else "pairs"
    if adapter not in ADAPTERS:
        raise ConfigError(f"{where}.column_map: dataset {path!r} has no columns to map")
    fields = sorted(ADAPTERS[adapter].fields)
    bad = sorted(set(cmap) - set(fields))
    if bad:
        raise ConfigError(f"{where}.column_map: {bad} are not fields of the {adapter!r} reader; "
                          f"its fields: {fields} (map each field to your file's column)")


def load_dataset_entry(entry: str | dict):
    """``(pairs, drop report)`` of a ``data.source`` / ``data.targets`` entry through
    `anchorviz.data.load_pairs`, with the entry's ``column_map`` and its ``name`` as the domain
    label. A file whose columns do not fit says how to write the ``column_map`` in a config."""
    from anchorviz.data.pairs import DataError, load_pairs

    path = dataset_path(entry)
    kwargs: dict[str, Any] = {}
    if isinstance(entry, dict) and entry.get("column_map"):
        kwargs["column_map"] = entry["column_map"]
    try:
        df, report = load_pairs(path, **kwargs)
        if isinstance(entry, dict) and entry.get("name"):
            # set after loading: load_pairs' own domain= picks a VADER domain
            df = df.assign(domain=str(entry["name"]))
        return df, report
    except DataError as err:
        if "column_map" not in str(err) and "not found" not in str(err):
            raise
        raise DataError(
            f"{err} In a run config, give the dataset as a mapping: {{path: {path}, name: "
            "<short name>, column_map: {prompt: <column>, chosen: <column>, rejected: "
            "<column>}} (docs/YOUR_DATA.md)") from None


def _check_int(value: Any, where: str, low: int, unit: str) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise ConfigError(f"{where} must be an integer >= {low} {unit}, got {value!r}")


def _check_device(device: Any, where: str) -> None:
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


_MANIFESTS: dict[str, dict] = {}


def _dataset_manifests() -> dict[str, dict]:
    """The named datasets' manifests (read once per process: keys and validation ask often)."""
    if not _MANIFESTS:
        from anchorviz.data.pairs import _manifests

        _MANIFESTS.update(_manifests())
    return _MANIFESTS


def _dataset_identity(name: str) -> str:
    """A dataset's name, or the resolved file behind a local path (or a manifest's local file)."""
    from anchorviz.data.pairs import _manifest_local_path

    manifests = _dataset_manifests()
    if name in manifests:
        if manifests[name].get("local_file"):
            try:
                return str(_manifest_local_path(manifests[name]).resolve())
            except Exception:  # realdata folder absent ...: the name alone
                return name
        return name
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def _same_dataset(a: str, b: str) -> bool:
    """Same name, or the same file under another spelling of its path. (A copy under another
    name is not refused: its pairs that overlap the source's training splits are dropped and
    counted by the split protocol, `data.protocol_splits`.)"""
    return a == b or _dataset_identity(a) == _dataset_identity(b)


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list)
    if origin is dict:
        return isinstance(value, dict)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _from_dict(cls, data: Any, where: str):
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(names)}")
    kwargs = {}
    for k, v in data.items():
        tp = hints[k]
        if dataclasses.is_dataclass(tp):
            kwargs[k] = _from_dict(tp, v, f"{where}.{k}")
            continue
        if tp is float and isinstance(v, str):
            try:  # YAML reads 1e-4 as a string
                v = float(v)
            except ValueError:
                pass
        if not _type_ok(v, tp):
            raise ConfigError(f"{where}.{k}: expected {getattr(tp, '__name__', tp)}, got {v!r}")
        kwargs[k] = float(v) if tp is float else v
    return cls(**kwargs)


def config_from_dict(data: dict, where: str = "config") -> RunConfig:
    """Build and validate a ``RunConfig``; unknown keys and wrong types are errors."""
    return _from_dict(RunConfig, data, where).validate()


def load_config(path: str | Path) -> RunConfig:
    from anchorviz.pipeline.store import read_yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = read_yaml(path)  # a duplicate key is an error, not "the last one wins"
    except Exception as err:  # yaml.YAMLError and friends
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
    if data is None:  # an empty file (or only comments) would start a long default run
        raise ConfigError(f"{path}: the config file is empty; write the settings to change "
                          "(or '{}' to run every default on purpose)")
    return config_from_dict(data, where=str(path))


def with_overrides(cfg: RunConfig, **overrides: Any) -> RunConfig:
    """A copy of ``cfg`` with dotted overrides, e.g. ``**{"method.anchor_lambda": 0.1}``."""
    d = cfg.to_dict()
    for key, value in overrides.items():
        node = d
        parts = key.split(".")
        for p in parts[:-1]:
            if p not in node or not isinstance(node[p], dict):
                raise ConfigError(f"override {key!r}: no section {p!r}")
            node = node[p]
        if parts[-1] not in node:
            raise ConfigError(f"override {key!r}: unknown key {parts[-1]!r}")
        node[parts[-1]] = value
    return config_from_dict(d)


# --------------------------------------------------------------------------- data


_DATA_CACHE: dict[str, dict[str, pd.DataFrame]] = {}


def _group_key(df: pd.DataFrame, setting: str):
    if setting == "none":
        return None
    if setting == "prompt":
        return "prompt"
    return None if df["prompt"].nunique() <= 1 else "prompt"


def target_name(dataset: str | dict) -> str:
    """Short name of a target dataset for split / column / file names: a named dataset keeps its
    name (``vader-amazon`` -> ``amazon``), a local file or folder its stem (``/data/t.jsonl`` ->
    ``t``, ``/data/books/`` -> ``books``), an entry ``{path: ..., name: books}`` its ``name``, a
    hub id ``org/name`` -> ``org_name``. Not part of any run key (the key holds the entry itself).
    It becomes part of file names (captures, drift), so it goes through the one sanitiser,
    `anchorviz.paths.safe_component`: ``vader-../../t.jsonl`` cannot name a file outside the
    run folder."""
    from anchorviz.paths import safe_component

    if isinstance(dataset, dict):
        if dataset.get("name"):
            return safe_component(str(dataset["name"]))
        dataset = dataset_path(dataset)
    if dataset.startswith("vader-"):
        short = dataset.split("vader-", 1)[-1]
    elif dataset not in _dataset_manifests() and _names_a_path(dataset):
        from anchorviz.data.pairs import _kind, _strip_gz

        short = _strip_gz(Path(dataset).expanduser().name)
        kind = _kind(Path(short))
        if kind and len(short) > len(kind):
            short = short[: -len(kind)]
    else:
        short = dataset.replace("/", "_")
    return safe_component(short)


def _names_a_path(name: str) -> bool:
    """A dataset string that is a local file or folder (or written as one: absolute, ``./``,
    ``~``, or a data file's extension), not a dataset name or a hub id."""
    from anchorviz.data.pairs import _looks_like_path

    return Path(name).expanduser().exists() or _looks_like_path(name)


def data_config(cfg: RunConfig) -> DataConfig:
    """The data settings one run actually uses: with ``data.split_per_seed`` the split seed is
    ``split_seed + seed``, so each training seed also draws its own split."""
    d = cfg.data
    if d.split_per_seed and cfg.seed:
        return dataclasses.replace(d, split_seed=d.split_seed + cfg.seed)
    return d


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


def prepare_data(cfg: DataConfig) -> dict[str, pd.DataFrame]:
    """Source splits (``teacher_train``, ``w2s_train``, ``val``, ``source_test``) and one
    ``target_test:<name>`` per target (``data.protocol_splits``: a target pair that shares its
    prompt, or its texts, with the source's training / validation splits is left out; the
    count is in each target frame's ``attrs["protocol_dropped"]``), with the artefact applied
    when configured. Pass ``data_config(run_config)``, not ``run_config.data``, when the run's
    seed should pick the split. Cached per process by config and by the content fingerprint of
    local data files (an edited file is read again); every call returns fresh copies."""
    from anchorviz.paths import fingerprint

    paths = [dataset_path(e) for e in [cfg.source, *cfg.targets]]
    local = {n: fingerprint(n) for n in paths if _is_local_data(n)}
    key = json.dumps([asdict(cfg), local], sort_keys=True)
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = _build_data(cfg)
    out = {}
    for name, df in _DATA_CACHE[key].items():
        out[name] = df.copy()
        out[name].attrs = dict(df.attrs)
    return out


def _build_data(cfg: DataConfig) -> dict[str, pd.DataFrame]:
    from anchorviz.data.pairs import protocol_splits

    # load_pairs logs each dataset's report once (INFO, WARNING when rows were malformed);
    # the role is at DEBUG so that an INFO log does not say everything twice
    src, report = load_dataset_entry(cfg.source)
    logger.debug("source %s: %s", dataset_label(cfg.source), report)
    targets = {}
    for t in cfg.targets:
        df, rep = load_dataset_entry(t)
        logger.debug("target %s: %s", dataset_label(t), rep)
        targets[target_name(t)] = df
    sizes = {"teacher_train": cfg.teacher_train, "w2s_train": cfg.w2s_train, "val": cfg.val,
             "source_test": cfg.source_test}
    dropped: dict[str, int] = {}
    splits = protocol_splits(src, targets, sizes, cfg.target_test, seed=cfg.split_seed,
                             group_key=_group_key(src, cfg.group_key), dropped=dropped,
                             clip_targets=True)
    for name, n in dropped.items():
        splits[f"target_test:{name}"].attrs["protocol_dropped"] = n
    if cfg.artifact_kind != "none" and cfg.artifact_strength > 0:
        from anchorviz.data.artifacts import apply_artifact

        for i, (name, df) in enumerate(sorted(splits.items())):
            role = "target" if name.startswith("target_test:") else "source"
            attrs = dict(df.attrs)
            try:
                splits[name] = apply_artifact(
                    df, kind=cfg.artifact_kind, strength=cfg.artifact_strength,
                    seed=cfg.split_seed * 1000 + i, role=role,
                    target_mode=cfg.artifact_target_mode if role == "target" else "absent")
            except ValueError as err:  # e.g. too few pairs can carry the echo cue
                raise ConfigError(f"data.artifact_kind {cfg.artifact_kind!r} with "
                                  f"data.artifact_strength {cfg.artifact_strength} on split {name} "
                                  f"of {dataset_label(cfg.source)}: {err}") from err
            splits[name].attrs.update(attrs)
        if cfg.artifact_teacher_visibility < 1:
            from anchorviz.data.artifacts import mark_teacher_visibility

            for i, name in enumerate(sorted(splits)):
                if not name.startswith("target_test:"):
                    splits[name] = mark_teacher_visibility(
                        splits[name], cfg.artifact_teacher_visibility,
                        seed=cfg.split_seed * 1000 + 500 + i)
    return splits


def teacher_data(data: dict[str, pd.DataFrame], form: str = "same") -> dict[str, pd.DataFrame]:
    """What the weak teacher reads of every split (`artifacts.teacher_view`; ``form`` is
    ``data.artifact_teacher_form``)."""
    from anchorviz.data.artifacts import teacher_view

    return {k: teacher_view(v, form) for k, v in data.items()}


def protocol_report(data: dict[str, pd.DataFrame]) -> dict[str, int]:
    """``{target split: pairs left out because they overlap the source's training splits}``."""
    return {k: int(v.attrs.get("protocol_dropped", 0)) for k, v in data.items()
            if k.startswith("target_test:")}


def eval_splits(data: dict[str, pd.DataFrame]) -> list[str]:
    return ["source_test"] + sorted(k for k in data if k.startswith("target_test:"))


def split_domain(split: str, data: dict[str, pd.DataFrame]) -> str:
    df = data[split]
    return str(df["domain"].iloc[0]) if "domain" in df and len(df) else split


# --------------------------------------------------------------------------- pieces


def _dtype(cfg: RunConfig):
    return torch.bfloat16 if cfg.models.dtype == "bfloat16" else None


def _seeded(train: TrainConfig, cfg: RunConfig) -> TrainConfig:
    """The training settings with the run's seed folded in (shuffling, dropout): runs of a
    sweep's ``seeds`` grid differ; seed 0 keeps ``train.seed`` unchanged."""
    return dataclasses.replace(train, seed=train.seed + cfg.seed)


def _load(cfg: RunConfig, which: str):
    from anchorviz.models.reward_model import load_reward_model

    m = cfg.models
    name = m.teacher if which == "teacher" else m.student
    dropout = m.teacher_dropout if which == "teacher" else m.student_dropout
    lora = m.student_lora if which != "teacher" else None
    torch.manual_seed(cfg.seed)
    return load_reward_model(name, pooling=m.pooling, dtype=_dtype(cfg),
                             trust_remote_code=m.trust_remote_code, dropout=dropout, lora=lora)


def _encode(tok, df: pd.DataFrame, cfg: RunConfig):
    from anchorviz.models.tokenization import encode_pairs

    return encode_pairs(tok, df, max_length=cfg.data.max_length)


def _is_local_data(name: str) -> bool:
    return Path(name).expanduser().exists() and name not in _dataset_manifests()


def _is_local_model(name: str) -> bool:
    from anchorviz.models.zoo import ZOO

    return name not in ZOO and Path(name).expanduser().is_dir()


def local_inputs(cfg: RunConfig, model: str) -> dict[str, str]:
    """``{path: content fingerprint}`` of the run's local inputs (`anchorviz.paths.fingerprint`):
    data files / folders given as paths, and ``model`` when it is a local folder. Named
    datasets, zoo models and hub ids are not local: they have none, so their run keys (and
    ids) are what they were before fingerprints existed."""
    from anchorviz.paths import fingerprint

    d = cfg.data
    paths = [dataset_path(e) for e in [d.source, *d.targets]]
    out = {n: fingerprint(n) for n in paths if _is_local_data(n)}
    if _is_local_model(model):
        out[model] = fingerprint(model)
    return out


def _with_inputs(key: dict, cfg: RunConfig, model: str) -> dict:
    inputs = local_inputs(cfg, model)
    if inputs:  # only for local paths: a key of named inputs stays as it was
        key["inputs"] = inputs
    return key


def teacher_key(cfg: RunConfig) -> dict:
    return _with_inputs(
        {"kind": "teacher", "code": TRAINING_CODE_VERSION, "data": data_key(data_config(cfg)),
         "model": cfg.models.teacher,
         "pooling": cfg.models.pooling, "dropout": cfg.models.teacher_dropout,
         "dtype": cfg.models.dtype, "train": asdict(cfg.teacher_train), "seed": cfg.seed},
        cfg, cfg.models.teacher)


def student_key(cfg: RunConfig, kind: str) -> dict:
    m = cfg.models
    key = {"kind": kind, "code": TRAINING_CODE_VERSION, "data": data_key(data_config(cfg)),
           "model": m.student, "pooling": m.pooling,
           "dropout": m.student_dropout, "lora": m.student_lora, "dtype": m.dtype,
           "train": asdict(cfg.student_train), "seed": cfg.seed,
           "capture": asdict(cfg.capture)}
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
    return _with_inputs(
        {"kind": "reference", "data": data_key(data_config(cfg)), "model": m.student,
         "pooling": m.pooling, "dtype": m.dtype, "capture_layers": cfg.capture.layers},
        cfg, m.student)


def run_id_for(key: dict) -> str:
    from anchorviz.pipeline.store import config_hash

    label = key["kind"] if key["kind"] != "student" else key["method"]["name"]
    return f"{label}-{config_hash(key)}"


def evaluate_model(model, tok, data, cfg: RunConfig, capture: bool):
    """Score every eval split (and capture its states when asked) in one pass per split.

    Returns ``(scores DataFrame, {split: Captured})``."""
    from anchorviz.analysis.capture import capture_states, resolve_capture_layers

    rows, caps = [], {}
    dev = cfg.student_train.device
    for split in eval_splits(data):
        enc = _encode(tok, data[split], cfg)
        if capture:
            cap = capture_states(model, enc, layers=resolve_capture_layers(model, cfg.capture.layers),
                                 batch_size=cfg.capture.batch_size, device=dev,
                                 token_sample=cfg.capture.token_sample, seed=cfg.seed,
                                 desc=f"capture {split}")
            rc, rr = cap.rewards_by_side()
            caps[split] = cap
        else:
            rc, rr = score_pairs(model, enc, batch_size=cfg.capture.batch_size, device=dev)
        rows.append(pd.DataFrame({"split": split, "domain": split_domain(split, data),
                                  "pair_id": enc.pair_ids, "r_chosen": rc, "r_rejected": rr,
                                  "group": _bootstrap_groups(data[split], enc.pair_ids, split,
                                                             cfg.data.group_key)}))
    return pd.concat(rows, ignore_index=True), caps


def _bootstrap_groups(df: pd.DataFrame, pair_ids: list, split: str, group_key: str) -> list[str]:
    """The resampling unit of each scored pair: its prompt (prefixed by the split) when the split
    holds several pairs per prompt, else the pair itself (see `metrics.bootstrap_kind`)."""
    if group_key != "none" and "prompt" in df and df["prompt"].nunique() > 1:
        prompt_of = dict(zip(df["pair_id"].astype(str), df["prompt"].astype(str)))
        return [f"{split}\x00{prompt_of.get(str(p), str(p))}" for p in pair_ids]
    return [f"{split}\x00pair\x00{p}" for p in pair_ids]


def _groups(scores: pd.DataFrame, splits: list[str] | None = None) -> list | None:
    """Bootstrap groups in `_correct`'s order (None for scores stored before groups were)."""
    if "group" not in scores:
        return None
    g = scores if splits is None else scores[scores["split"].isin(splits)]
    return g.sort_values(["split", "pair_id"])["group"].tolist()


def _accuracy_block(scores: pd.DataFrame, n_boot: int, seed: int) -> dict:
    from anchorviz.analysis.metrics import bootstrap_accuracy_ci, bootstrap_kind, per_pair_correct

    out = {}
    ood = scores[scores["split"] != "source_test"]
    parts = list(scores.groupby("split", sort=False)) + ([("ood", ood)] if len(ood) else [])
    for split, g in parts:
        c = per_pair_correct(g["r_chosen"].to_numpy(), g["r_rejected"].to_numpy())
        groups = g["group"].tolist() if "group" in g else None
        iv = bootstrap_accuracy_ci(c, n_boot=n_boot, seed=seed, groups=groups)
        out[split] = {"point": float(iv[0]), "lo": float(iv[1]), "hi": float(iv[2]), "n": len(c),
                      "bootstrap": bootstrap_kind(groups)}
    return out


def _correct(scores: pd.DataFrame, splits: list[str] | None) -> np.ndarray:
    from anchorviz.analysis.metrics import per_pair_correct

    g = scores if splits is None else scores[scores["split"].isin(splits)]
    g = g.sort_values(["split", "pair_id"])
    return per_pair_correct(g["r_chosen"].to_numpy(), g["r_rejected"].to_numpy())


def _transfer_block(student: pd.DataFrame, teacher: pd.DataFrame, ceiling: pd.DataFrame | None,
                    n_boot: int, seed: int, only_ood: bool = False) -> dict:
    from anchorviz.analysis.metrics import paired_bootstrap_transfer

    targets = sorted(s for s in student["split"].unique() if s != "source_test")
    out = {}
    per_target = [] if only_ood else [(t, [t]) for t in targets]
    for name, tsplits in [("ood", targets)] + per_target:
        res = paired_bootstrap_transfer(
            _correct(teacher, ["source_test"]), _correct(student, ["source_test"]),
            _correct(teacher, tsplits), _correct(student, tsplits),
            ceiling_correct_id=None if ceiling is None else _correct(ceiling, ["source_test"]),
            ceiling_correct_ood=None if ceiling is None else _correct(ceiling, tsplits),
            n_boot=n_boot, seed=seed, groups_id=_groups(student, ["source_test"]),
            groups_ood=_groups(student, tsplits))
        out[name] = {k: (None if v is None else {"point": float(v[0]), "lo": float(v[1]),
                                                 "hi": float(v[2])}) for k, v in res.items()}
    return out


def _label_stats(q: np.ndarray) -> dict:
    conf = np.maximum(q, 1 - q)
    hist, edges = np.histogram(q, bins=10, range=(0, 1))
    return {"q_mean": float(q.mean()), "q_confidence": float(conf.mean()),
            "q_hist": hist.tolist(), "q_edges": edges.tolist(),
            "frac_confident_0.7": float((conf >= 0.7).mean())}


# --------------------------------------------------------------------------- shared artefacts


_PROJECTORS: dict[str, Any] = {}


def reference_capture_stored(store, cfg: RunConfig) -> bool:
    """Whether the store holds a finished reference capture for ``cfg`` (its DONE marker names
    this key's hash; a truncated or corrupted marker counts as not finished)."""
    from anchorviz.pipeline.store import config_hash

    h = config_hash(reference_key(cfg))
    done = store.shared_dir(f"reference-{h}") / "DONE.json"
    try:
        return done.is_file() and json.loads(done.read_text()).get("hash") == h
    except (OSError, ValueError, AttributeError):
        return False


def ensure_reference_capture(store, cfg: RunConfig, data) -> dict:
    """The pretrained student's captures of every eval split: computed once per (backbone,
    data), shared by every run of a sweep."""
    from anchorviz.analysis.capture import load_captured, save_captured
    from anchorviz.pipeline.store import config_hash

    key = reference_key(cfg)
    name = f"reference-{config_hash(key)}"
    folder = store.shared_dir(name)
    splits = eval_splits(data)
    with store.lock(name):
        done = folder / "DONE.json"
        if reference_capture_stored(store, cfg):
            try:
                return {s: load_captured(folder / f"{_fname(s)}.safetensors") for s in splits}
            except Exception as err:  # corrupted: recompute
                logger.warning("reference capture %s unreadable (%s): recomputing", name, err)
        model, tok = _load(cfg, "student")
        caps = {}
        for s in splits:
            from anchorviz.analysis.capture import capture_states, resolve_capture_layers

            enc = _encode(tok, data[s], cfg)
            caps[s] = capture_states(model, enc, layers=resolve_capture_layers(model, cfg.capture.layers),
                                     batch_size=cfg.capture.batch_size,
                                     device=cfg.student_train.device, desc=f"reference {s}")
            save_captured(folder / f"{_fname(s)}.safetensors", caps[s])
        done.write_text(json.dumps({"hash": config_hash(key), "key": key}, default=str))
        del model
        return caps


def _fname(split: str) -> str:
    return split.replace(":", "__")


def fit_shared_projection(ref_caps: dict, layer: int, method: str, fit_rows: int):
    """``(projection, reference xy)``: a `SharedProjection` fitted on a seeded sample of at most
    ``fit_rows`` reference states (head pooling, all splits) at ``layer``, and every reference
    state projected with it."""
    from anchorviz.analysis.projection import SharedProjection

    X = np.concatenate([ref_caps[s].states(layer, "head").astype(np.float32) for s in ref_caps])
    rng = np.random.default_rng(0)
    rows = rng.choice(len(X), size=min(len(X), fit_rows), replace=False)
    proj = SharedProjection(method=method, seed=0).fit(X[np.sort(rows)])
    return proj, proj.transform(X)


def _projector(store, cfg: RunConfig, ref_caps: dict, layer: int):
    from anchorviz.pipeline.store import config_hash

    k = f"{config_hash(reference_key(cfg))}-{layer}-{cfg.capture.projection}"
    if k not in _PROJECTORS:
        _PROJECTORS[k] = fit_shared_projection(ref_caps, layer, cfg.capture.projection,
                                               cfg.capture.projection_fit_rows)
    return _PROJECTORS[k]


def _projection_table(store, cfg, data, ref_caps, caps) -> pd.DataFrame:
    layer = max(ref_caps[next(iter(ref_caps))].layers)
    proj, ref_xy = _projector(store, cfg, ref_caps, layer)
    stu = np.concatenate([caps[s].states(layer, "head").astype(np.float32) for s in ref_caps])
    stu_xy = proj.transform(stu)
    return projection_frame(ref_caps, data, layer, ref_xy, stu_xy)


def projection_frame(ref_caps: dict, data, layer: int, ref_xy: np.ndarray,
                     stu_xy: np.ndarray) -> pd.DataFrame:
    """The long table of a shared projection: one row per (model, split, pair, side) with its
    2-D coordinates, reference rows first (the layout of ``projection.parquet``)."""
    meta = []
    for s in ref_caps:
        c = ref_caps[s]
        meta.append(pd.DataFrame({"split": s, "domain": split_domain(s, data),
                                  "pair_id": np.repeat(c.pair_ids, 2),
                                  "side": np.where(c.side == 0, "chosen", "rejected")}))
    meta = pd.concat(meta, ignore_index=True)
    out = []
    for model_name, xy in (("reference", ref_xy), ("student", stu_xy)):
        t = meta.copy()
        t.insert(0, "model", model_name)
        t.insert(1, "layer", layer)
        t["x"], t["y"] = xy[:, 0], xy[:, 1]
        out.append(t)
    return pd.concat(out, ignore_index=True)


def _drift(caps: dict, ref_caps: dict, data) -> pd.DataFrame:
    from anchorviz.analysis.drift import drift_table

    stu = {s: {k: caps[s].mean[k].astype(np.float32) for k in caps[s].layers} for s in caps}
    ref = {s: {k: ref_caps[s].mean[k].astype(np.float32) for k in ref_caps[s].layers} for s in caps}
    table = drift_table(stu, ref)
    table.insert(1, "domain", [split_domain(s, data) for s in table["split"]])
    return table


# --------------------------------------------------------------------------- runs


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    kind: str
    metrics: dict
    computed: bool  # False when it was already finished in the store


@contextlib.contextmanager
def _run_log(path: Path):
    """Copy the package's log records (INFO and up) into the run folder while a run computes."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    pkg = logging.getLogger("anchorviz")
    old_level = pkg.level
    if pkg.getEffectiveLevel() > logging.INFO:
        pkg.setLevel(logging.INFO)
    extra = []
    if not logging.getLogger().handlers and not pkg.handlers:
        # nobody configured logging: keep warnings on stderr as Python's last resort would
        extra.append(logging.StreamHandler())
        extra[0].setLevel(logging.WARNING)
    for h in (handler, *extra):
        pkg.addHandler(h)
    try:
        yield
    finally:
        for h in (handler, *extra):
            pkg.removeHandler(h)
        pkg.setLevel(old_level)
        handler.close()


def _run_guarded(store, run_id: str, key: dict, body) -> RunResult:
    """Run ``body(tmp_dir) -> (kind, metrics)`` unless finished; commit atomically or mark failed."""
    from anchorviz.pipeline.store import config_hash

    h = config_hash(key)
    with store.lock(run_id):
        if store.is_finished(run_id, h):
            metrics = json.loads((store.run_dir(run_id) / "metrics.json").read_text())
            return RunResult(run_id, store.run_dir(run_id), key["kind"], metrics, computed=False)
        tmp = store.begin(run_id)
        try:
            from anchorviz.pipeline.store import write_yaml

            write_yaml(tmp / "config.yaml", json.loads(json.dumps(key, default=str)))
            with _run_log(tmp / "run.log"):
                metrics = body(tmp)
            from anchorviz.pipeline.store import write_json

            write_json(tmp / "metrics.json", metrics)
            final = store.commit(tmp, run_id, h)
        except BaseException as err:
            store.fail(tmp, run_id, h, f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
            raise
        return RunResult(run_id, final, key["kind"], metrics, computed=True)


def _tracked(body, cfg: RunConfig, store, run_id: str, key: dict):
    """``body`` with the run's tracker open when ``cfg.report_to`` asks (`anchorviz.tracking`:
    the training loop logs each step and validation to it; the final accuracies and transfer
    scores are logged when the run ends). Only runs that are computed are tracked."""
    if not cfg.report_to:
        return body
    from anchorviz.training.tracking import tracked_run

    def with_tracker(tmp: Path) -> dict:
        with tracked_run(cfg.report_to, store.root, run_id, params=key,
                         tags={"kind": key["kind"]}) as tracker:
            metrics = body(tmp)
            if tracker is not None:
                tracker.log_final(metrics, step=int((metrics.get("train") or {}).get("steps", 0)))
            return metrics

    return with_tracker


def ensure_teacher(store, cfg: RunConfig, data) -> RunResult:
    key = teacher_key(cfg)
    run_id = run_id_for(key)

    full_data = data
    # the teacher reads only the artefacts visible to it, in its own form
    data = teacher_data(data, cfg.data.artifact_teacher_form)

    def body(tmp: Path) -> dict:
        t0 = time.perf_counter()
        model, tok = _load(cfg, "teacher")
        train = _encode(tok, data["teacher_train"], cfg)
        val = _encode(tok, data["val"], cfg)
        res = train_reward_model(model, train, np.ones(len(train)), _seeded(cfg.teacher_train, cfg),
                                 val=val, desc="teacher")
        w2s = _encode(tok, data["w2s_train"], cfg)
        rc, rr = score_pairs(model, w2s, batch_size=cfg.capture.batch_size,
                             device=cfg.teacher_train.device)
        margin = rc - rr
        pd.DataFrame({"pair_id": w2s.pair_ids, "margin": margin}).to_parquet(tmp / "labels.parquet")
        vc, vr = score_pairs(model, val, device=cfg.teacher_train.device)
        pd.DataFrame({"pair_id": val.pair_ids, "margin": vc - vr}).to_parquet(tmp / "val_labels.parquet")
        acc_val = float(pairwise_accuracy(vc, vr))
        scores, _ = evaluate_model(model, tok, data, cfg, capture=False)
        scores.to_parquet(tmp / "scores.parquet")
        res.history.to_parquet(tmp / "history.parquet")
        _save_weights(model, tmp, full=True)  # the whole trained teacher (SEAM re-scores with it)
        return {"kind": "teacher", "method": "teacher", "model": cfg.models.teacher,
                "accuracy": _accuracy_block(scores, cfg.capture.n_boot, cfg.seed),
                "train": {"steps": res.steps, "seconds": res.seconds,
                          "final_loss": float(res.history["total"].iloc[-1]),
                          "val": res.evals.to_dict("records")},
                "labels_raw": _label_stats(1 / (1 + np.exp(-margin))),
                "protocol_dropped": protocol_report(full_data),
                "acc_val": acc_val,
                "seconds": time.perf_counter() - t0}

    return _run_guarded(store, run_id, key, _tracked(body, cfg, store, run_id, key))


def soft_labels(margin: np.ndarray, method: MethodConfig) -> np.ndarray:
    """Teacher margins -> the student's target probabilities (temperature, optional hardening)."""
    if method.hard_labels:
        return np.where(margin > 0, 1.0, np.where(margin < 0, 0.0, 0.5))
    return 1.0 / (1.0 + np.exp(-margin / method.label_temperature))


def _save_weights(model, tmp: Path, full: bool = True) -> None:
    """Save the trained model as ``checkpoint/trainable.safetensors``: the reward head plus the
    LoRA adapters, or every backbone weight of a full fine-tune, with the base model's identity
    in the metadata (`anchorviz.models.save_checkpoint`; `load_run_model` reads it back).
    ``full`` is ignored: the checkpoint always covers what was trained (it once chose a
    head-only file, which made a fully fine-tuned student's checkpoint not the student)."""
    from anchorviz.models.reward_model import CHECKPOINT_FILE, save_checkpoint

    save_checkpoint(model, tmp / CHECKPOINT_FILE)


def _seam_labels(store, cfg: RunConfig, data, teacher: RunResult, q: np.ndarray, tmp: Path):
    """SEAM label refinement (anchorviz.seam, docs/SEAM.md): the pretrained generative student
    writes principle trees; the trained weak teacher annotates the informative nodes."""
    from safetensors.torch import load_file

    from anchorviz.models.reward_model import load_trainable_state
    from anchorviz.pipeline.store import config_hash
    from anchorviz.training.seam import refine_labels, reward_score_fn

    state = load_file(str(teacher.run_dir / "checkpoint" / "trainable.safetensors"))
    if not any(k.startswith("backbone.") for k in state):
        raise RuntimeError(f"teacher run {teacher.run_id} saved only its head; SEAM needs the "
                           "trained teacher: delete that run directory and rerun")
    tmodel, ttok = _load(cfg, "teacher")
    load_trainable_state(tmodel, state)
    dev = cfg.teacher_train.device
    tmodel.to(dev)
    score = reward_score_fn(tmodel, ttok, max_length=cfg.data.max_length,
                            batch_size=cfg.capture.batch_size, device=dev)
    cache = store.shared_dir("seam") / (
        f"trees-{config_hash({'data': data_key(data_config(cfg)), 'generator': cfg.models.student})}.json")
    res = refine_labels(data["w2s_train"], q, score, cfg.models.student,
                        temperature=cfg.method.label_temperature, seed=cfg.seed,
                        device=cfg.student_train.device,
                        num_threads=1 if cfg.student_train.device == "cpu" else None,
                        cache_path=cache)
    res.save(tmp / "seam")
    del tmodel
    return res.q, res.counts


def anchor_reference(model, objective, train, cfg: RunConfig):
    """The frozen reference ANCHOR compares ``model`` with on the ``train`` pairs, by the
    strategy ``cfg.method.reference`` resolves to; returns ``(reference, info)`` (strategy, why,
    set-up seconds). The caller closes the reference."""
    from anchorviz.training.reference import choose_strategy, make_reference

    n_tok = sum(len(x) for x in train.chosen_ids) + sum(len(x) for x in train.rejected_ids)
    strategy, why = choose_strategy(model, cfg.method.reference, n_tok, len(objective.anchor_layers))
    logger.info("reference strategy %s (%s)", strategy, why)
    t_ref = time.perf_counter()
    reference = make_reference(strategy, model, objective.anchor_layers, train,
                               **({"device": cfg.student_train.device}
                                  if strategy == "cached" else {}))
    return reference, {"strategy": strategy, "reason": why,
                       "setup_seconds": time.perf_counter() - t_ref}


def run_student(store, cfg: RunConfig, data, kind: str = "student",
                teacher: RunResult | None = None, ceiling: RunResult | None = None) -> RunResult:
    """Train and analyse one student (``kind="student"``) or the gold ceiling (``"ceiling"``)."""
    from anchorviz.analysis.capture import save_captured
    from anchorviz.training.losses import parse_layer_spec, resolve_anchor_layers

    key = student_key(cfg, kind)
    run_id = run_id_for(key)

    def body(tmp: Path) -> dict:
        t0 = time.perf_counter()
        model, tok = _load(cfg, "student")
        train = _encode(tok, data["w2s_train"], cfg)
        val = _encode(tok, data["val"], cfg)
        info: dict[str, Any] = {"kind": kind, "model": cfg.models.student}
        if kind == "ceiling":
            q, val_q, method = np.ones(len(train)), np.ones(len(val)), "ceiling"
            objective = Objective()
        else:
            labels = pd.read_parquet(teacher.run_dir / "labels.parquet")
            vlabels = pd.read_parquet(teacher.run_dir / "val_labels.parquet")
            if list(labels["pair_id"]) != train.pair_ids:
                raise RuntimeError("teacher labels do not line up with the w2s_train pairs")
            q = soft_labels(labels["margin"].to_numpy(), cfg.method)
            val_q = soft_labels(vlabels["margin"].to_numpy(), cfg.method)
            if cfg.method.name == "seam":
                q, info["seam"] = _seam_labels(store, cfg, data, teacher, q, tmp)
            method = cfg.method.name
            layers = []
            if method == "anchor":
                layers = resolve_anchor_layers(parse_layer_spec(cfg.method.anchor_layers),
                                               model.n_layers)
            objective = Objective(kind="confidence" if method == "confidence" else "bt",
                                  aux_coef=cfg.method.aux_coef,
                                  aux_warmup_frac=cfg.method.aux_warmup_frac,
                                  anchor_lambda=cfg.method.anchor_lambda if layers else 0.0,
                                  anchor_layers=layers,
                                  anchor_normalise=cfg.method.anchor_normalise)
            info["labels"] = _label_stats(q)
            pd.DataFrame({"pair_id": train.pair_ids, "q": q}).to_parquet(tmp / "labels.parquet")
        reference = None
        if objective.anchored:
            reference, info["reference"] = anchor_reference(model, objective, train, cfg)
        try:
            res = train_reward_model(model, train, q, _seeded(cfg.student_train, cfg), objective=objective,
                                     reference=reference, val=val, val_targets=val_q, desc=run_id)
        finally:
            if reference is not None:
                reference.close()
        res.history.to_parquet(tmp / "history.parquet")
        # gold accuracy on the SOURCE validation split: for choosing hyper-parameters (lambda,
        # layers, lr) without looking at any target; training itself never sees these labels
        vc, vr = score_pairs(model, val, batch_size=cfg.capture.batch_size,
                             device=cfg.student_train.device)
        info["acc_val"] = float(pairwise_accuracy(vc, vr))
        scores, caps = evaluate_model(model, tok, data, cfg, capture=True)
        scores.to_parquet(tmp / "scores.parquet")
        ref_caps = ensure_reference_capture(store, cfg, data)
        _drift(caps, ref_caps, data).to_parquet(tmp / "drift.parquet")
        if cfg.capture.projection != "none":
            _projection_table(store, cfg, data, ref_caps, caps).to_parquet(tmp / "projection.parquet")
        if cfg.capture.save_hidden:
            for s, c in caps.items():
                save_captured(tmp / "hidden" / "student" / f"{_fname(s)}.safetensors", c)
        _save_weights(model, tmp, full=cfg.models.student_lora is not None)
        teacher_scores = pd.read_parquet(teacher.run_dir / "scores.parquet")
        info.update({
            "method": method,
            "accuracy": _accuracy_block(scores, cfg.capture.n_boot, cfg.seed),
            # PGR needs the ceiling, which trains in parallel: the results table computes it
            # from the stored scores of the three runs (`pgr_from_runs`)
            "transfer": _transfer_block(scores, teacher_scores, None,
                                        cfg.capture.n_boot, cfg.seed),
            "train": {"steps": res.steps, "seconds": res.seconds,
                      "final_loss": float(res.history["total"].iloc[-1]),
                      "first_loss": float(res.history["total"].iloc[0]),
                      "val": res.evals.to_dict("records")},
            "teacher_run": teacher.run_id,
            "ceiling_run": (run_id_for(student_key(cfg, "ceiling"))
                            if cfg.ceiling and kind == "student" else None),
            "seconds": time.perf_counter() - t0,
        })
        return info

    return _run_guarded(store, run_id, key, _tracked(body, cfg, store, run_id, key))


def run(cfg: RunConfig, out_dir: str | Path = "runs/default", jobs: int | None = None,
        threads: int = 1, progress: bool = True, backend: str = "local",
        address: str | None = None) -> list[RunResult]:
    """The whole pipeline for one config: teacher, (ceiling), the student. Returns their results
    (already-finished parts are read, not recomputed) and refreshes the results table.
    ``jobs``: local worker processes (see `anchorviz.runner.run_graph`; the ceiling and the
    student train in parallel with 2); ``threads``: torch threads per worker; ``backend``:
    ``"local"`` or ``"ray"`` (each node a Ray task on the cluster at ``address``, or on a local
    Ray instance; ``out_dir`` must then be on a filesystem every worker sees)."""
    from anchorviz.pipeline.runner import build_graph, check_backend, run_graph
    from anchorviz.pipeline.store import RunStore

    cfg.validate()
    check_backend(out_dir, backend, address)
    store = RunStore(out_dir)
    store.clean_temporaries()
    data = prepare_data(data_config(cfg))
    done = run_graph(build_graph([cfg]), out_dir, jobs=jobs, threads=threads, progress=progress,
                     backend=backend, address=address)
    teacher = ensure_teacher(store, cfg, data)  # all finished now: these read the store
    out = [teacher]
    if cfg.ceiling:
        out.append(run_student(store, cfg, data, kind="ceiling", teacher=teacher))
    out.append(run_student(store, cfg, data, teacher=teacher))
    results_table(out_dir)
    # computed = trained by this call (the graph's report), not by an earlier one
    return [dataclasses.replace(r, computed=bool(done.get(r.run_id, {}).get("computed", False)))
            for r in out]


# --------------------------------------------------------------------------- sweeps


@dataclass
class SweepConfig:
    base: RunConfig
    methods: list[str] = field(default_factory=lambda: ["naive", "anchor"])
    anchor_lambdas: list[float] = field(default_factory=lambda: [0.1, 1.0])
    anchor_layers: list[str] = field(default_factory=lambda: ["last"])
    seeds: list[int] = field(default_factory=lambda: [0])
    artifact_strengths: list[float] | None = None  # None: the base config's strength


def sweep_from_dict(d: dict, where: str = "sweep") -> SweepConfig:
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping with 'base' and 'grid'")
    unknown = sorted(set(d) - {"base", "grid"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: ['base', 'grid']")
    base = config_from_dict(d.get("base") or {}, f"{where}.base")
    grid = d.get("grid") or {}
    allowed = {"methods", "anchor_lambdas", "anchor_layers", "seeds", "artifact_strengths"}
    unknown = sorted(set(grid) - allowed)
    if unknown:
        raise ConfigError(f"{where}.grid: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"{where}.grid.{k}: expected a non-empty list, got {v!r}")
    sw = SweepConfig(base=base, **grid)
    for m in sw.methods:
        if m not in METHODS:
            raise ConfigError(f"{where}.grid.methods: {m!r} is not one of {METHODS}")
    for lam in sw.anchor_lambdas:
        if not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
            raise ConfigError(f"{where}.grid.anchor_lambdas: {lam!r} must be a finite number >= 0")
    for c in expand_sweep(sw):  # validates every expanded config (layers, strengths ...)
        c.validate()
    return sw


def load_sweep(path: str | Path) -> SweepConfig:
    from anchorviz.pipeline.store import read_yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep file {path} does not exist")
    try:
        data = read_yaml(path)  # a duplicate key is an error, not "the last one wins"
    except Exception as err:  # yaml.YAMLError (python tags included), UnicodeDecodeError
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
    if data is None:  # an empty file (or only comments) would start the default grid
        raise ConfigError(f"{path}: the sweep file is empty; give 'base' and 'grid' "
                          "(or '{}' to run the default grid on purpose)")
    return sweep_from_dict(data, str(path))


def expand_sweep(sw: SweepConfig) -> list[RunConfig]:
    """Every student config of the grid (teacher / ceiling are implied and shared)."""
    out = []
    strengths = sw.artifact_strengths or [sw.base.data.artifact_strength]
    for strength in strengths:
        for seed in sw.seeds:
            for m in sw.methods:
                grid = ([(lam, lay) for lam in sw.anchor_lambdas for lay in sw.anchor_layers]
                        if m == "anchor" else [(0.0, "last")])
                for lam, lay in grid:
                    out.append(with_overrides(sw.base, **{
                        "seed": seed, "data.artifact_strength": float(strength),
                        "method.name": m, "method.anchor_lambda": float(lam),
                        "method.anchor_layers": lay}))
    return out


def sweep(sw: SweepConfig, out_dir: str | Path, jobs: int | None = None, threads: int = 1,
          progress: bool = True, backend: str = "local",
          address: str | None = None) -> pd.DataFrame:
    """Run every config of a sweep (sharing teachers, ceilings, reference captures); resumes.

    The grid becomes a run graph (`anchorviz.runner`) executed by ``jobs`` local worker
    processes (None: ``$ANCHORVIZ_JOBS`` or the number of cores), each running torch on
    ``threads`` threads; the run ids and metrics do not depend on ``jobs``. ``backend="ray"``
    runs each node as a Ray task instead (on the cluster at ``address``, else a running or new
    local Ray instance); ``out_dir`` must then be on a filesystem every worker sees."""
    from anchorviz.pipeline.runner import build_graph, check_backend, run_graph
    from anchorviz.pipeline.store import RunStore, write_yaml

    check_backend(out_dir, backend, address)
    store = RunStore(out_dir)
    store.clean_temporaries()
    write_yaml(Path(out_dir) / "sweep.yaml", {
        "base": sw.base.to_dict(), "grid": {k: v for k, v in asdict(sw).items() if k != "base"}})
    configs = expand_sweep(sw)
    for d in {json.dumps(asdict(data_config(c)), sort_keys=True): data_config(c)
              for c in configs}.values():
        prepare_data(d)  # load / build every dataset once here, before the workers start
    run_graph(build_graph(configs), out_dir, jobs=jobs, threads=threads, progress=progress,
              backend=backend, address=address)
    return results_table(out_dir)


def results_table(out_dir: str | Path) -> pd.DataFrame:
    """One row per finished run (columns: docs/ARCHITECTURE.md), always rebuilt from the run
    folders; written as parquet and CSV (removed when no run can be read).

    Run folders that cannot be read (not finished, failed, corrupted, unparseable) are left
    out, logged, and listed in ``df.attrs["unreadable"]`` (``{run id: why}``). Runs of
    different base configs in one folder (another lr, split size, model ...) get ``cfg.<key>``
    columns holding the settings that tell them apart (`base_config_columns`)."""
    from anchorviz.paths import write_atomic
    from anchorviz.pipeline.store import RunStore, read_yaml

    store = RunStore(out_dir)
    rows, keys = [], []
    finished, unreadable = store.scan()
    for run_id in finished:
        d = store.run_dir(run_id)
        try:
            m = json.loads((d / "metrics.json").read_text())
            key = read_yaml(d / "config.yaml")
            rows.append(_result_row(run_id, key, m, d))
            keys.append(key)
        except Exception as err:  # verified, but not readable by this version of the code
            unreadable[run_id] = f"{type(err).__name__}: {err}"
    for run_id, why in unreadable.items():
        logger.warning("results table of %s: run %s left out (%s)", out_dir, run_id, why)
    df = pd.DataFrame(rows)
    sort = ["artifact_strength", "seed", "kind", "method", "anchor_lambda", "anchor_layers"]
    if len(df):
        extra = base_config_columns(keys)
        if extra:
            logger.warning("results table of %s: runs of %d different base configs; the columns "
                           "%s tell them apart", out_dir,
                           len({tuple(v) for v in zip(*extra.values())}), sorted(extra))
            for col, values in extra.items():
                df[col] = values
            sort = sorted(extra) + sort
        df = df.sort_values(sort).reset_index(drop=True)
        write_atomic(Path(out_dir) / "results.parquet", df.to_parquet)
        write_atomic(Path(out_dir) / "results.csv", lambda tmp: df.to_csv(tmp, index=False))
    else:  # a table left by an earlier call must not outlive the runs it listed
        for name in ("results.parquet", "results.csv"):
            (Path(out_dir) / name).unlink(missing_ok=True)
    df.attrs["unreadable"] = dict(unreadable)
    return df


# dotted run-key settings that a sweep's grid varies (they have their own table columns)
_GRID_SETTINGS = {"kind", "seed", "method.name", "method.anchor_lambda", "method.anchor_layers",
                  "data.artifact_strength", "data.artifact_teacher_visibility"}


def _base_settings(key: dict) -> dict[str, str]:
    """A run key flattened to ``{dotted setting: JSON value}`` without the grid's dimensions;
    with ``data.split_per_seed`` the split seed is given as the base's (``split_seed - seed``)."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        rel = prefix[len("teacher."):] if prefix.startswith("teacher.") else prefix
        if rel not in _GRID_SETTINGS:
            flat[prefix] = json.dumps(value, sort_keys=True, default=str)

    walk("", key)
    for pre in ("", "teacher."):
        data = key.get("teacher", {}).get("data") if pre else key.get("data")
        seed = key.get("teacher", {}).get("seed") if pre else key.get("seed")
        if isinstance(data, dict) and data.get("split_per_seed") and isinstance(seed, int):
            flat[f"{pre}data.split_seed"] = json.dumps(data.get("split_seed", 0) - seed)
    return flat


def base_config_columns(keys: list[dict]) -> dict[str, list[str | None]]:
    """``{"cfg.<setting>": value per run}`` for every setting (other than the grid's: seed,
    method, lambda, layers, artefact strength) that differs between runs of the same kind and
    method, i.e. between base configs; ``{}`` when one base config made every run. Values are
    JSON text (None where a run's key lacks the setting, e.g. one made by older code)."""
    flats = [_base_settings(k) for k in keys]
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        meth = (k.get("method") or {}).get("name") if isinstance(k.get("method"), dict) else None
        groups.setdefault((k.get("kind"), meth), []).append(i)
    differ: set[str] = set()
    for idx in groups.values():
        names = set().union(*(flats[i] for i in idx))
        differ |= {n for n in names if len({flats[i].get(n) for i in idx}) > 1}
    return {f"cfg.{n}": [f.get(n) for f in flats] for n in sorted(differ)}


def artifact_accuracy(run_dir: str | Path) -> dict[str, tuple[float, int]]:
    """ID (``source_test``) accuracy of a finished run split by whether the pair carries the
    planted artefact: ``{"marked": (acc, n), "clean": (acc, n)}``; ``{}`` without an artefact.

    A pure function of the run folder (its ``config.yaml`` rebuilds the split deterministically,
    ``scores.parquet`` holds the rewards). ``clean`` accuracy is the skill the targets can use;
    a model whose ID accuracy rests on the shortcut is high on ``marked`` and low on ``clean``."""
    from anchorviz.analysis.metrics import accuracy_by_group, per_pair_correct
    from anchorviz.pipeline.store import read_yaml

    run_dir = Path(run_dir)
    data = dict(read_yaml(run_dir / "config.yaml")["data"])
    if data.get("artifact_kind", "none") == "none" or not data.get("artifact_strength"):
        return {}
    if data.pop("split_protocol", None) != SPLIT_PROTOCOL:
        logger.warning("%s was made with an older split protocol: its marked / clean split "
                       "cannot be rebuilt", run_dir)
        return {}
    src = prepare_data(DataConfig(**data))["source_test"]
    side = {pid: (m or {}).get("artifact_side") for pid, m in zip(src["pair_id"], src["meta"])}
    seen = {pid: (m or {}).get("artifact_teacher_visible") for pid, m in zip(src["pair_id"], src["meta"])}
    scores = pd.read_parquet(run_dir / "scores.parquet")
    scores = scores[scores["split"] == "source_test"]
    correct = per_pair_correct(scores["r_chosen"].to_numpy(), scores["r_rejected"].to_numpy())
    groups = ["marked" if side.get(p) else "clean" for p in scores["pair_id"]]
    out = accuracy_by_group(correct, groups)
    if any(v is False for v in seen.values()):  # the teacher reads only some of the cues
        marked = np.array([side.get(p) is not None for p in scores["pair_id"]])
        vis = ["seen" if seen.get(p) else "hidden" for p in scores["pair_id"][marked]]
        out.update(accuracy_by_group(correct[marked], vis))
    return out


def pgr_from_runs(student_dir: Path, ceiling_dir: Path, teacher_dir: Path, n_boot: int = 1000,
                  seed: int = 0) -> dict | None:
    """PGR on the ID split (``{"point", "lo", "hi"}``, paired bootstrap) from the stored scores of
    a student, its gold ceiling and its teacher; None when the ceiling has not finished or PGR
    is undefined (ceiling and teacher equally accurate)."""
    paths = [Path(d) / "scores.parquet" for d in (teacher_dir, student_dir, ceiling_dir)]
    try:
        finished = json.loads((Path(ceiling_dir) / "MANIFEST.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        finished = None
    if finished != "finished" or not all(p.is_file() for p in paths):
        return None
    teacher, student, ceiling = (pd.read_parquet(p) for p in paths)
    block = _transfer_block(student, teacher, ceiling, n_boot, seed, only_ood=True)["ood"]
    return block.get("pgr")


def _result_row(run_id: str, key: dict, m: dict, run_dir: Path) -> dict:
    data = key["data"]
    meth = key.get("method", {})
    row: dict[str, Any] = {
        "run_id": run_id, "kind": key["kind"], "method": m["method"],
        "anchor_lambda": float(meth.get("anchor_lambda") or 0.0),
        "anchor_layers": meth.get("anchor_layers") or "",
        "seed": key["seed"], "artifact_kind": data["artifact_kind"],
        "artifact_strength": float(data["artifact_strength"]),
        "teacher_visibility": float(data.get("artifact_teacher_visibility", 1.0)),
        "split_per_seed": bool(data.get("split_per_seed", False)),
        "source": dataset_label(data["source"]),
        "targets": ",".join(target_name(t) for t in data["targets"]),
        "model": m.get("model"),
    }
    acc = m["accuracy"]
    for name, block in acc.items():
        col = {"source_test": "acc_id", "ood": "acc_ood"}.get(name, "acc_" + name.split(":", 1)[-1])
        row[col], row[col + "_lo"], row[col + "_hi"] = block["point"], block["lo"], block["hi"]
    tr = dict(m.get("transfer", {}).get("ood", {}))
    if tr.get("pgr") is None and m.get("ceiling_run"):
        tr["pgr"] = pgr_from_runs(run_dir, run_dir.parent / m["ceiling_run"],
                                  run_dir.parent / m["teacher_run"],
                                  n_boot=int(key.get("capture", {}).get("n_boot", 1000)),
                                  seed=int(key["seed"]))
    for k in ("wrg", "aog", "nts", "pgr"):
        b = tr.get(k)
        row[k], row[k + "_lo"], row[k + "_hi"] = ((b["point"], b["lo"], b["hi"]) if b else
                                                  (np.nan, np.nan, np.nan))
    # per target: AOG and NTS with their paired-bootstrap intervals (a pooled OOD number can
    # hide opposite moves on two targets); WRG is an ID quantity, the same for every target
    for t, block in m.get("transfer", {}).items():
        name = t.split(":", 1)[-1]
        for k in ("aog", "nts"):
            if t != "ood" and block.get(k):
                row[f"{k}_{name}"] = block[k]["point"]
                row[f"{k}_{name}_lo"], row[f"{k}_{name}_hi"] = block[k]["lo"], block[k]["hi"]
    drift = run_dir / "drift.parquet"
    if drift.is_file():
        dt = pd.read_parquet(drift)
        last = dt[dt["layer"] == dt["layer"].max()]
        src, tgt = last[last["split"] == "source_test"], last[last["split"] != "source_test"]
        row["drift_cos_source"] = float(src["cosine_mean"].mean())
        row["drift_cos_target"] = float(tgt["cosine_mean"].mean())
        row["drift_cka_source"] = float(src["cka"].mean())
        row["drift_cka_target"] = float(tgt["cka"].mean())
        # reference-centred cosine (not dominated by a few huge dimensions) and debiased CKA
        # (biased CKA is inflated when rows are few next to the width); older runs lack them
        for col, name in (("cosine_centred_mean", "drift_cos_centred"),
                          ("cosine_standardised_mean", "drift_cos_std"),
                          ("cka_debiased", "drift_cka_debiased")):
            if col in dt:
                row[f"{name}_source"] = float(src[col].mean())
                row[f"{name}_target"] = float(tgt[col].mean())
    lab = m.get("labels") or m.get("labels_raw") or {}
    row["q_mean"] = lab.get("q_mean", np.nan)
    row["q_confidence"] = lab.get("q_confidence", np.nan)
    row["acc_val"] = m.get("acc_val", np.nan)
    row["seconds"] = m.get("seconds", np.nan)
    if (run_dir / "scores.parquet").is_file():
        for group, (acc, _) in artifact_accuracy(run_dir).items():
            row[f"acc_id_{group}"] = acc
    return row
