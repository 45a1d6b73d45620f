"""Run configs: the dataclasses, loading from YAML / dicts, validation, overrides.

A `RunConfig` says everything one run computes from (data, models, method, the two training
sections, capture); `RunConfig.validate` checks every value before anything loads or trains, so a
bad setting fails at once with a `ConfigError` naming the key. ``--set key=value`` overrides go
through `parse_sets` / `apply_sets`. Sweep configs (a base config and a grid) are
`anchorviz.sweep_config`; the pipeline that runs them is `anchorviz.pipeline` (`run`, `sweep`).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from anchorviz.choices import (
    ANCHOR_NORMALISATIONS,
    ARTIFACT_KINDS,
    ATTENTION,
    DTYPES,
    GROUP_KEYS,
    METHODS,
    OPTIMIZERS,
    POOLINGS,
    PROJECTIONS,
    REFERENCES,
    TARGET_MODES,
    TEACHER_FORMS,
    is_layer_spec,
)
from anchorviz.paths import read_yaml
from anchorviz.precision import resolve_bf16

logger = logging.getLogger(__name__)

__all__ = [
    "TrainConfig",
    "TrainError",
    "CaptureConfig",
    "ConfigError",
    "DataConfig",
    "MethodConfig",
    "ModelsConfig",
    "RunConfig",
    "TUNED_TRAIN",
    "add_stage_check",
    "coerce_number",
    "config_from_dict",
    "apply_sets",
    "load_config",
    "parse_sets",
    "read_settings_file",
    "set_dotted",
    "with_overrides",
]


class ConfigError(ValueError):
    """A config value or key that is not allowed; the message names the key and what is expected."""


class TrainError(ValueError):
    """A training configuration or input that cannot work."""


@dataclass
class TrainConfig:
    """Optimiser and loop settings (one flat set of named values)."""

    lr: float = 5e-5
    head_lr: float | None = None  # the zero-initialised reward head's lr (None: same as lr)
    epochs: float = 2.0
    batch_size: int = 16
    grad_accum: int = 1
    warmup_frac: float = 0.1
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0
    eval_every: int = 0  # optimiser steps between validations; 0 = once per epoch
    early_stopping: bool = False  # keep the weights of the best validation and stop on patience
    patience: int = 2
    device: str = "cpu"
    # autocast to bfloat16: training through Accelerate, and every scoring / capture forward of
    # the run (`anchorviz.training.loop.precision`). "auto": where the device runs it natively
    # (a CPU with avx512_bf16 / AMX, CUDA with bf16 support), else float32; resolved when the
    # config is built (`anchorviz.precision.resolve_bf16`, $ANCHORVIZ_PRECISION overrides it),
    # so a built config, its run keys and run ids hold true / false only
    bf16: bool | str = "auto"
    gradient_checkpointing: bool = False
    progress: bool = True
    # AdamW implementation: "adamw_fused" (one fused kernel per step; CPU and CUDA, torch >= 2.4),
    # "adamw_foreach" (multi-tensor), "adamw" (the per-parameter loop). Same maths; the float
    # rounding differs, so it is part of every run key
    optimizer: str = "adamw_fused"

    def __post_init__(self) -> None:
        if not isinstance(self.bf16, bool):  # "auto": the arithmetic this device runs natively

            try:
                self.bf16 = resolve_bf16(self.bf16, self.device)
            except ValueError as err:
                raise ConfigError(f"teacher_train / student_train: {err}") from None

    def validate(self) -> None:
        checks = {
            "lr": self.lr > 0 and math.isfinite(self.lr),
            "head_lr": self.head_lr is None or (self.head_lr > 0 and math.isfinite(self.head_lr)),
            "epochs": self.epochs > 0,
            "batch_size": self.batch_size >= 1,
            "grad_accum": self.grad_accum >= 1,
            "warmup_frac": 0 <= self.warmup_frac < 1,
            "weight_decay": self.weight_decay >= 0,
            "max_grad_norm": self.max_grad_norm > 0,
            "patience": self.patience >= 1,
            "optimizer": self.optimizer in OPTIMIZERS,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise TrainError(
                "invalid training setting(s): "
                + ", ".join(f"{k}={getattr(self, k)!r}" for k in bad)
                + " (lr > 0, epochs > 0, batch_size >= 1, grad_accum >= 1, 0 <= warmup_frac < 1, "
                f"weight_decay >= 0, max_grad_norm > 0, patience >= 1, optimizer one of {OPTIMIZERS})"
            )


@dataclass
class DataConfig:
    """Source / target datasets, split sizes and the optional source-only artefact.

    ``source`` and each of ``targets``: a dataset name (``anchorviz datasets``), a local file or
    folder (jsonl / json / parquet / csv / tsv), a hub id, or a mapping ``{path: ..., name: ...,
    column_map: {...}}`` (`anchorviz.data.entries.DATASET_ENTRY_KEYS`; docs/YOUR_DATA.md):
    ``column_map`` renames the file's columns (``{chosen: good, rejected: bad, prompt:
    question}``), ``name`` is the short name used in split, column and file names and as the
    domain label. The data stage checks them (`anchorviz.data.entries.check_data_settings`)."""

    source: str | dict = "vader-movie"
    targets: list[str | dict] = field(
        default_factory=lambda: ["vader-amazon", "vader-nyt", "vader-tweets"])
    # split sizes and length: the demo's (sized for 2 CPU cores; anchorviz/configs/demo.yaml)
    teacher_train: int = 500
    w2s_train: int = 500
    val: int = 150
    source_test: int = 300
    target_test: int | str = 300  # pairs per target test, or "all" (every usable pair)
    max_length: int = 48
    split_seed: int = 0
    # True: run seed k uses split seed split_seed + k, so seeds vary the data split (which pairs
    # land in which split, where the artefact goes) as well as the training order; False: every
    # seed trains on one split (its intervals are training noise on that split)
    split_per_seed: bool = True
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
    # the attention kernel: "auto" = the transformers default (PyTorch's fused SDPA where the
    # model has it), "eager" = plain matmul + softmax, "sdpa" = SDPA required. On a CPU under
    # bfloat16 autocast SDPA's backward is slow for short sequences: a MiniLM-L6 training step
    # of 16 pairs x 48 tokens takes 0.71x the time with "eager" (bench/bench_flops.py)
    attention: str = "auto"


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
    # False: the run is scored only (no hidden states, no drift, no projection, and no reference
    # capture for it); a sweep's verdict-only seeds (outside ``grid.detail_seeds``) run this way
    enabled: bool = True
    layers: str = "all"
    batch_size: int = 64
    save_hidden: bool = True
    token_sample: int = 0
    projection: str = "auto"  # auto | umap | pca | none
    projection_fit_rows: int = 1500
    n_boot: int = 1000


# The checks that need a stage's knowledge live in those stages, and config imports none of
# them (config is the foundation every stage builds on): the data stage checks the dataset
# entries (anchorviz.data.entries), the models stage the model names and shapes
# (anchorviz.models.checks), the training stage the devices, SEAM's backbone and the trackers
# (anchorviz.training.checks). `anchorviz/__init__.py` registers them, so every
# `RunConfig.validate` runs them after the config's own checks, before anything loads or trains.
_STAGE_CHECKS: list[Callable[[RunConfig], None]] = []


def add_stage_check(check: Callable[[RunConfig], None]) -> None:
    """Run ``check(cfg)`` (raising `ConfigError`) at the end of every `RunConfig.validate`."""
    if check not in _STAGE_CHECKS:
        _STAGE_CHECKS.append(check)


# RunConfig's training defaults for teacher, ceiling and student (chosen on the demo's source
# validation split; docs/RESULTS.md, "Hyper-parameters")
TUNED_TRAIN = {"lr": 5e-5, "head_lr": 2e-3, "epochs": 2.0, "batch_size": 16}


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    # the optimiser settings chosen on the demo's SOURCE validation: the zero-initialised reward
    # head needs a larger lr than the backbone, or the soft Bradley-Terry loss barely moves it
    teacher_train: TrainConfig = field(default_factory=lambda: TrainConfig(**TUNED_TRAIN))
    student_train: TrainConfig = field(default_factory=lambda: TrainConfig(**TUNED_TRAIN))
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    seed: int = 0
    ceiling: bool = True  # also train the gold-label ceiling (for PGR)
    # experiment tracking, as TRL's report_to: [tensorboard, mlflow, wandb] ("all" / "none");
    # off by default and never part of a run key (anchorviz.training.tracking)
    report_to: list[str] | str = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> RunConfig:
        d, m = self.data, self.method
        if m.name not in METHODS:
            raise ConfigError(f"method.name must be one of {METHODS}, got {m.name!r}")
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
        if m.anchor_normalise not in ANCHOR_NORMALISATIONS:
            raise ConfigError(f"method.anchor_normalise must be {'|'.join(ANCHOR_NORMALISATIONS)}, "
                              f"got {m.anchor_normalise!r}")
        if m.reference not in REFERENCES:
            raise ConfigError(f"method.reference must be {'|'.join(REFERENCES)}, got {m.reference!r}")
        if d.artifact_kind not in ("none", *ARTIFACT_KINDS):
            raise ConfigError(f"data.artifact_kind must be {'|'.join(('none', *ARTIFACT_KINDS))}, "
                              f"got {d.artifact_kind!r}")
        if not (isinstance(d.artifact_teacher_visibility, (int, float))
                and 0 <= d.artifact_teacher_visibility <= 1):
            raise ConfigError("data.artifact_teacher_visibility must be in [0, 1], got "
                              f"{d.artifact_teacher_visibility!r}")
        if d.artifact_teacher_visibility < 1 and d.artifact_kind == "none":
            raise ConfigError("data.artifact_teacher_visibility < 1 needs an artefact "
                              "(data.artifact_kind marker, order, echo or length)")
        if d.artifact_teacher_form not in TEACHER_FORMS:
            raise ConfigError(f"data.artifact_teacher_form must be {'|'.join(TEACHER_FORMS)}, got "
                              f"{d.artifact_teacher_form!r}")
        if d.artifact_teacher_form == "marker" and d.artifact_kind not in ("order", "echo"):
            raise ConfigError("data.artifact_teacher_form 'marker' replaces an order or echo cue "
                              "in the teacher's copy: set data.artifact_kind to order or echo, got "
                              f"{d.artifact_kind!r}")
        if not 0 <= d.artifact_strength <= 1:
            raise ConfigError(f"data.artifact_strength must be in [0, 1], got {d.artifact_strength!r}")
        if d.artifact_target_mode not in TARGET_MODES:
            raise ConfigError(f"data.artifact_target_mode must be {'|'.join(TARGET_MODES)}, got "
                              f"{d.artifact_target_mode!r}")
        if not (isinstance(d.split_seed, int) and d.split_seed >= 0):
            raise ConfigError(f"data.split_seed must be an integer >= 0, got {d.split_seed!r}")
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise ConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        if d.group_key not in GROUP_KEYS:
            raise ConfigError(f"data.group_key must be {'|'.join(GROUP_KEYS)}, got {d.group_key!r}")
        if isinstance(d.target_test, str) and d.target_test != "all":
            raise ConfigError("data.target_test must be a number of pairs >= 1 or 'all', got "
                              f"{d.target_test!r}")
        for k in ("teacher_train", "w2s_train", "val", "source_test", "target_test"):
            if getattr(d, k) != "all" and getattr(d, k) < 1:
                raise ConfigError(f"data.{k} must be >= 1 pairs, got {getattr(d, k)!r}")
        if not d.targets:
            raise ConfigError("data.targets must list at least one target dataset")
        if self.models.dtype not in DTYPES:
            raise ConfigError(f"models.dtype must be {' or '.join(DTYPES)}, got {self.models.dtype!r}")
        if self.models.attention not in ATTENTION:
            raise ConfigError(f"models.attention must be one of {', '.join(ATTENTION)}, got "
                              f"{self.models.attention!r}")
        if self.capture.projection not in PROJECTIONS:
            raise ConfigError(f"capture.projection must be {'|'.join(PROJECTIONS)}, got "
                              f"{self.capture.projection!r}")
        for name in ("teacher_train", "student_train"):
            try:
                getattr(self, name).validate()
            except TrainError as err:  # say which of the two sections
                raise ConfigError(f"{name}: {err}") from None
        self._validate_more()
        if not _STAGE_CHECKS:
            raise RuntimeError("no stage checks registered: import anchorviz registers them")
        for check in _STAGE_CHECKS:
            check(self)
        return self

    def _validate_more(self) -> None:
        """The checks that once passed validation and failed only after the teacher had trained
        (or passed silently): capture settings, sizes, names."""
        d, m, c = self.data, self.method, self.capture
        for name in ("teacher_train", "student_train"):
            _check_int(getattr(self, name).eval_every, f"{name}.eval_every", 0, "(optimiser "
                       "steps between validations; 0 = once per epoch)")
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
        if not (isinstance(m.aux_coef, (int, float)) and 0 <= m.aux_coef <= 1):
            raise ConfigError(f"method.aux_coef must be in [0, 1], got {m.aux_coef!r}")
        if not (isinstance(m.aux_warmup_frac, (int, float)) and 0 <= m.aux_warmup_frac <= 1):
            raise ConfigError(f"method.aux_warmup_frac must be in [0, 1], got {m.aux_warmup_frac!r}")
        if not isinstance(d.targets, list):
            raise ConfigError(f"data.targets must be a list of datasets, got {d.targets!r}")



def _check_int(value: Any, where: str, low: int, unit: str) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise ConfigError(f"{where} must be an integer >= {low} {unit}, got {value!r}")


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


def coerce_number(v: Any, tp: Any) -> Any:
    """One coercion for every numeric setting, from a YAML file or ``--set`` alike: YAML 1.1
    reads ``2e-2`` (no dot) as a string and ``1e3`` may come as a float. A float field (also
    ``float | None``) takes a numeric string and an int as a float; an int field takes an
    integral float or numeric string (``1e3`` -> 1000). Anything else is returned unchanged,
    for `_type_ok` to refuse (``1.5`` for an int field). The sweep grid's lists use it too
    (`anchorviz.sweep_config.sweep_from_dict`)."""
    args = set(typing.get_args(tp)) if typing.get_origin(tp) in (typing.Union, types.UnionType) \
        else {tp}
    if v is None or isinstance(v, bool) or not ({int, float} & args):
        return v
    if isinstance(v, str):
        try:
            num = float(v.strip())
        except ValueError:
            return v
        if not math.isfinite(num):
            return v
    elif isinstance(v, (int, float)):
        num = v
    else:
        return v
    if float in args:
        return float(num)
    if isinstance(num, int):
        return num
    return int(num) if float(num).is_integer() else v


def _from_dict(cls, data: Any, where: str, default: Any = None):
    """``cls`` from a mapping of settings; a key left out keeps its value in ``default`` (the
    enclosing config's default for this section: ``teacher_train: {epochs: 3}`` keeps
    RunConfig's tuned lr), or ``cls``'s own default."""
    if data is None:
        return default if default is not None else cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(names)}")
    defaults = default if default is not None else cls()
    kwargs = {}
    for k, v in data.items():
        tp = hints[k]
        if dataclasses.is_dataclass(tp):
            kwargs[k] = _from_dict(tp, v, f"{where}.{k}", getattr(defaults, k))
            continue
        v = coerce_number(v, tp)
        if not _type_ok(v, tp):
            raise ConfigError(f"{where}.{k}: expected {getattr(tp, '__name__', tp)}, got {v!r}")
        kwargs[k] = v
    return dataclasses.replace(defaults, **kwargs) if default is not None else cls(**kwargs)


def config_from_dict(data: dict, where: str = "config") -> RunConfig:
    """Build and validate a ``RunConfig``; unknown keys and wrong types are errors."""
    return _from_dict(RunConfig, data, where).validate()


def read_settings_file(path: str | Path, what: str, empty_hint: str) -> tuple[Any, Path]:
    """``(parsed YAML, path)`` of a config or sweep file; a missing, invalid or empty file is a
    `ConfigError` naming it (an empty file, or one of comments only, would otherwise start a
    long default run)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} file {path} does not exist")
    try:
        data = read_yaml(path)  # a duplicate key is an error, not "the last one wins"
    except Exception as err:  # yaml.YAMLError (python tags included), UnicodeDecodeError
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
    if data is None:
        raise ConfigError(f"{path}: the {what} file is empty; {empty_hint}")
    return data, path


def load_config(path: str | Path) -> RunConfig:
    data, path = read_settings_file(path, "config", "write the settings to change (or '{}' to "
                                     "run every default on purpose)")
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


# overrides given as key=value strings (the command line's --set)


def parse_sets(items: list[str] | None) -> list[tuple[str, object]]:
    """``--set key=value`` items as ``(dotted key, value)``; the value is read as YAML (``1e-4``,
    ``true``, ``[vader-nyt, vader-amazon]``, ``{r: 8}``), so it has the type a config file
    would give it."""
    out = []
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise ConfigError(f"--set expects key=value with a dotted key such as "
                              f"method.anchor_lambda=0.1, got {item!r}")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {key}: the value {text!r} is not valid YAML ({err})") from None
        out.append((key, value))
    return out


def set_dotted(tree: dict, cls, key: str, value: object, root: str = "") -> None:
    """Set dotted ``key`` in ``tree`` (the ``asdict`` of dataclass ``cls``); a key that is not a
    setting is a `ConfigError` naming it (with the close matches and the section's keys). A
    free-form mapping setting (``models.student_lora``) takes any sub-key."""
    node, tp, parts = tree, cls, key.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[:i]) or root.rstrip(".")
        last = i == len(parts) - 1
        if tp is not None and dataclasses.is_dataclass(tp):
            names = [f.name for f in dataclasses.fields(tp)]
            if part not in names:
                close = difflib.get_close_matches(part, names, n=1)
                hint = f" Did you mean {'.'.join([*parts[:i], close[0]])!r}?" if close else ""
                raise ConfigError(
                    f"--set {root}{key}: unknown key {part!r}"
                    f"{' in ' + repr(where) if where else ''}.{hint} Known: {', '.join(names)}")
            sub = typing.get_type_hints(tp)[part]
        elif isinstance(node, dict) or node is None:
            sub = None  # a free-form mapping
        else:
            raise ConfigError(f"--set {root}{key}: {'.'.join(parts[:i])!r} is a value, not a "
                              "section")
        if last:
            node[part] = value
            return
        if node.get(part) is None and not (sub is not None and dataclasses.is_dataclass(sub)):
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ConfigError(f"--set {root}{key}: {'.'.join(parts[:i + 1])!r} is a value, not "
                              "a section")
        node, tp = node[part], sub


def apply_sets(cfg, items: list[str] | None, where: str = "--set"):
    """``cfg`` (a `RunConfig`) with ``--set key=value`` overrides, validated again."""
    sets = parse_sets(items)
    if not sets:
        return cfg
    tree = cfg.to_dict()
    for key, value in sets:
        set_dotted(tree, RunConfig, key, value)
    return config_from_dict(tree, where=where)
