"""Data preparation for a run: the splits of the source and the target tests, with the artefact.

`prepare_data(data_config(cfg))` loads every dataset of the config (`anchorviz.data`), draws the
protocol's prompt-grouped splits and applies the source-only artefact; the result is cached per
process by config and by the content fingerprint of local files, and every call hands out fresh
copies (the cached frames are never shared with a caller).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from anchorviz.config import ConfigError, DataConfig, RunConfig
from anchorviz.data.artifacts import apply_artifact, mark_teacher_visibility, teacher_view
from anchorviz.data.entries import dataset_label, dataset_manifests, dataset_path, target_name
from anchorviz.data.readers import known_manifests, load_pairs
from anchorviz.data.schema import DataError
from anchorviz.data.splits import protocol_splits
from anchorviz.paths import fingerprint

logger = logging.getLogger(__name__)

# the drop reason of a target pair the split protocol leaves out (it overlaps the source)
OVERLAPS_SOURCE = "overlaps_source"

__all__ = [
    "data_config",
    "data_drop_report",
    "eval_splits",
    "load_dataset_entry",
    "prepare_data",
    "protocol_report",
    "split_domain",
    "teacher_data",
]


def load_dataset_entry(entry: str | dict):
    """``(pairs, drop report)`` of a ``data.source`` / ``data.targets`` entry through
    `anchorviz.data.load_pairs`, with the entry's ``column_map`` and its ``name`` as the domain
    label. A file whose columns do not fit says how to write the ``column_map`` in a config."""
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


_DATA_CACHE: dict[str, dict[str, pd.DataFrame]] = {}


def _group_key(df: pd.DataFrame, setting: str):
    if setting == "none":
        return None
    if setting == "prompt":
        return "prompt"
    return None if df["prompt"].nunique() <= 1 else "prompt"


def data_config(cfg: RunConfig) -> DataConfig:
    """The data settings one run actually uses: with ``data.split_per_seed`` the split seed is
    ``split_seed + seed``, so each training seed also draws its own split."""
    d = cfg.data
    if d.split_per_seed and cfg.seed:
        return dataclasses.replace(d, split_seed=d.split_seed + cfg.seed)
    return d


def prepare_data(cfg: DataConfig) -> dict[str, pd.DataFrame]:
    """Source splits (``teacher_train``, ``w2s_train``, ``val``, ``source_test``) and one
    ``target_test:<name>`` per target (``data.protocol_splits``: a target pair that shares its
    prompt, or its texts, with the source's training / validation splits is left out; the
    count is in each target frame's ``attrs["protocol_dropped"]``), with the artefact applied
    when configured. Pass ``data_config(run_config)``, not ``run_config.data``, when the run's
    seed should pick the split. Every frame's ``attrs["data_dropped"]`` holds the per-dataset
    drop report (`data_drop_report`). Cached per process by config and by the content
    fingerprint of local data files (an edited file is read again); every call returns fresh
    copies."""
    paths = [dataset_path(e) for e in [cfg.source, *cfg.targets]]
    local = {n: fingerprint(n) for n in paths if is_local_data(n)}
    key = json.dumps([asdict(cfg), local], sort_keys=True)
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = _build_data(cfg)
    out = {}
    for name, df in _DATA_CACHE[key].items():
        out[name] = df.copy()
        out[name].attrs = copy.deepcopy(df.attrs)
    return out


def _refuse_target_only_source(entry: str | dict) -> None:
    """A named dataset whose manifest says ``target_only: true`` (XSTest: a few prompts with many
    pairs each, made to be evaluated, not trained on) is refused as ``data.source``."""
    if not isinstance(entry, str):
        return
    m = known_manifests().get(entry)
    if m and m.get("target_only"):
        raise DataError(f"data.source: {entry!r} is a zero-shot target only (its manifest "
                        f"{m['manifest_path']} sets target_only: true); use it in data.targets "
                        "and train on another source")


def _build_data(cfg: DataConfig) -> dict[str, pd.DataFrame]:
    # load_pairs logs each dataset's report once (INFO, WARNING when rows were malformed);
    # the role is at DEBUG so that an INFO log does not say everything twice
    # the reports are also kept: every split carries them (attrs["data_dropped"]) and the
    # teacher's metrics.json counts them (data_dropped)
    _refuse_target_only_source(cfg.source)
    src, report = load_dataset_entry(cfg.source)
    logger.debug("source %s: %s", dataset_label(cfg.source), report)
    reports = {dataset_label(cfg.source): report.to_dict()}
    targets = {}
    for t in cfg.targets:
        df, rep = load_dataset_entry(t)
        logger.debug("target %s: %s", dataset_label(t), rep)
        targets[target_name(t)] = df
        reports[dataset_label(t)] = rep.to_dict()
    sizes = {"teacher_train": cfg.teacher_train, "w2s_train": cfg.w2s_train, "val": cfg.val,
             "source_test": cfg.source_test}
    dropped: dict[str, int] = {}

    try:
        splits = protocol_splits(src, targets, sizes,
                                 None if cfg.target_test == "all" else cfg.target_test,
                                 seed=cfg.split_seed, group_key=_group_key(src, cfg.group_key),
                                 dropped=dropped)
    except DataError as err:
        if "usable pairs" not in str(err):
            raise
        raise ConfigError(f"data.target_test {cfg.target_test}: {err}. Lower data.target_test, "
                          "or set it to 'all' to test on every usable pair") from None
    for name, n in dropped.items():
        splits[f"target_test:{name}"].attrs["protocol_dropped"] = n
        if n:  # target pairs left out because they overlap the source's training splits
            t = next(t for t in cfg.targets if target_name(t) == name)
            reports[dataset_label(t)]["dropped"][OVERLAPS_SOURCE] = n
    if cfg.artifact_kind != "none" and cfg.artifact_strength > 0:
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
            for i, name in enumerate(sorted(splits)):
                if not name.startswith("target_test:"):
                    splits[name] = mark_teacher_visibility(
                        splits[name], cfg.artifact_teacher_visibility,
                        seed=cfg.split_seed * 1000 + 500 + i)
    for df in splits.values():
        df.attrs["data_dropped"] = copy.deepcopy(reports)
    return splits


def teacher_data(data: dict[str, pd.DataFrame], form: str = "same") -> dict[str, pd.DataFrame]:
    """What the weak teacher reads of every split (`artifacts.teacher_view`; ``form`` is
    ``data.artifact_teacher_form``)."""
    return {k: teacher_view(v, form) for k, v in data.items()}


def protocol_report(data: dict[str, pd.DataFrame]) -> dict[str, int]:
    """``{target split: pairs left out because they overlap the source's training splits}``."""
    return {k: int(v.attrs.get("protocol_dropped", 0)) for k, v in data.items()
            if k.startswith("target_test:")}


def data_drop_report(data: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """``{dataset label: drop report}`` of the datasets behind prepared data: rows read
    (``total``) and ``kept``, ``dropped`` counts by reason (`anchorviz.data.schema`'s reasons,
    and ``overlaps_source`` for target pairs the split protocol left out) and the first
    ``examples`` per reason; ``{}`` for frames that do not carry it."""
    for df in data.values():
        if "data_dropped" in df.attrs:
            return copy.deepcopy(df.attrs["data_dropped"])
    return {}


def eval_splits(data: dict[str, pd.DataFrame]) -> list[str]:
    return ["source_test"] + sorted(k for k in data if k.startswith("target_test:"))


def split_domain(split: str, data: dict[str, pd.DataFrame]) -> str:
    df = data[split]
    return str(df["domain"].iloc[0]) if "domain" in df and len(df) else split


def is_local_data(name: str) -> bool:
    return Path(name).expanduser().exists() and name not in dataset_manifests()
