"""The datasets of a run config's ``data.source`` / ``data.targets``: each entry is a dataset
name, a local file or folder, a hub id, or a mapping ``{path: ..., name: ..., column_map:
{...}}`` (docs/YOUR_DATA.md). Their forms, short names and identities, and the data stage's
check of a run config (`check_data_settings`: registered with `anchorviz.config` by
``anchorviz/__init__.py``, so `RunConfig.validate` runs it before anything loads).
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

from anchorviz.config import ConfigError, RunConfig
from anchorviz.data.adapters import ADAPTERS
from anchorviz.data.readers import (
    file_kind,
    known_manifests,
    looks_like_path,
    manifest_local_path,
    strip_gz,
)
from anchorviz.paths import safe_component

__all__ = [
    "DATASET_ENTRY_KEYS",
    "check_data_settings",
    "check_dataset_entry",
    "dataset_label",
    "dataset_manifests",
    "dataset_path",
    "normalise_dataset_entry",
    "same_dataset",
    "target_name",
]


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
    manifests = dataset_manifests()
    adapter = manifests[path]["adapter"] if path in manifests else "pairs"
    if adapter not in ADAPTERS:
        raise ConfigError(f"{where}.column_map: dataset {path!r} has no columns to map")
    fields = sorted(ADAPTERS[adapter].fields)
    bad = sorted(set(cmap) - set(fields))
    if bad:
        raise ConfigError(f"{where}.column_map: {bad} are not fields of the {adapter!r} reader; "
                          f"its fields: {fields} (map each field to your file's column)")


_MANIFESTS: dict[str, dict] = {}


def dataset_manifests() -> typing.Mapping[str, dict]:
    """The named datasets' manifests (read once per process: keys and validation ask often), as
    a read-only view: no caller can change what the next one reads."""
    if not _MANIFESTS:
        _MANIFESTS.update(known_manifests())
    return types.MappingProxyType(_MANIFESTS)


def _dataset_identity(name: str) -> str:
    """A dataset's name, or the resolved file behind a local path (or a manifest's local file)."""
    manifests = dataset_manifests()
    if name in manifests:
        if manifests[name].get("local_file"):
            try:
                return str(manifest_local_path(manifests[name]).resolve())
            except Exception:  # realdata folder absent ...: the name alone
                return name
        return name
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def same_dataset(a: str, b: str) -> bool:
    """Same name, or the same file under another spelling of its path. (A copy under another
    name is not refused: its pairs that overlap the source's training splits are dropped and
    counted by the split protocol, `data.protocol_splits`.)"""
    return a == b or _dataset_identity(a) == _dataset_identity(b)


def target_name(dataset: str | dict) -> str:
    """Short name of a target dataset for split / column / file names: a named dataset keeps its
    name (``vader-amazon`` -> ``amazon``), a local file or folder its stem (``/data/t.jsonl`` ->
    ``t``, ``/data/books/`` -> ``books``), an entry ``{path: ..., name: books}`` its ``name``, a
    hub id ``org/name`` -> ``org_name``. Not part of any run key (the key holds the entry itself).
    It becomes part of file names (captures, drift), so it goes through the one sanitiser,
    `anchorviz.paths.safe_component`: ``vader-../../t.jsonl`` cannot name a file outside the
    run folder."""
    if isinstance(dataset, dict):
        if dataset.get("name"):
            return safe_component(str(dataset["name"]))
        dataset = dataset_path(dataset)
    if dataset.startswith("vader-"):
        short = dataset.split("vader-", 1)[-1]
    elif dataset not in dataset_manifests() and _names_a_path(dataset):
        short = strip_gz(Path(dataset).expanduser().name)
        kind = file_kind(Path(short))
        if kind and len(short) > len(kind):
            short = short[: -len(kind)]
    else:
        short = dataset.replace("/", "_")
    return safe_component(short)


def _names_a_path(name: str) -> bool:
    """A dataset string that is a local file or folder (or written as one: absolute, ``./``,
    ``~``, or a data file's extension), not a dataset name or a hub id."""
    return Path(name).expanduser().exists() or looks_like_path(name)


def check_data_settings(cfg: RunConfig) -> None:
    """The data stage's check of a run config: ``data.source`` and each of ``data.targets`` is
    a dataset entry (`check_dataset_entry`), no target is the source (under any spelling of its
    path), and no two targets share a short name (`target_name`). `ConfigError` naming the key."""
    d = cfg.data
    check_dataset_entry(d.source, "data.source")
    names: dict[str, Any] = {}
    for i, t in enumerate(d.targets):
        check_dataset_entry(t, f"data.targets[{i}]")
        if same_dataset(dataset_path(t), dataset_path(d.source)):
            raise ConfigError(
                f"data.targets: {t!r} is the source dataset ({d.source!r}); a target must be "
                "another dataset, or its 'out-of-distribution' accuracy is in-distribution")
        short = target_name(t)
        if short in names:
            raise ConfigError(
                f"data.targets: {t!r} and {names[short]!r} are the same target (both named "
                f"{short!r}); give one a short name of its own: {{path: ..., name: ...}}")
        names[short] = t
