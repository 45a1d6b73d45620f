"""Where pairs come from: named datasets (manifests), local files and folders, the hub.

`load_pairs` is the entry point::

    pairs, report = load_pairs("hh-rlhf-harmless", split="test")
    print(report)                      # rows read / kept / dropped per reason

* a **manifest name** (``anchorviz/manifests/<name>.yaml``, package data, see
  `list_datasets`): the hub id, config, splits, adapter and column map of a named dataset
  (Anthropic HH-RLHF, HelpSteer3, UltraFeedback, PKU-SafeRLHF, RAIL-HH-10K, the ``realdata-*``
  files, VADER); ``path=`` reads a local copy in the hub's row format instead of the hub;
* a **local file or directory** (``.jsonl``, ``.json``, ``.parquet``, ``.csv``, ``.tsv``,
  optionally gzipped): generic prompt / chosen / rejected columns (renamed with
  ``column_map``), or the row format of a named adapter (``adapter="hh"`` ...);
* a **Hugging Face Hub id** together with a ``column_map`` (or ``adapter``).
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from anchorviz.data.adapters import (
    ADAPTERS,
    HH_MARK,
    BadRecord,
    adapter_for,
    run_adapter,
)
from anchorviz.data.schema import DataError, DropReport, dedupe_pairs, validate_pairs
from anchorviz.data.vader import VADER_SDIST_NAME
from anchorviz.paths import REPO_ROOT, cache_dir, realdata_dir

logger = logging.getLogger(__name__)

__all__ = [
    "CATEGORIES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "MANIFEST_DIR",
    "get_manifest",
    "list_datasets",
    "load_pairs",
    "read_limits",
]


#: the named datasets' manifests: package data (``anchorviz/manifests/*.yaml``), so that a wheel
#: install finds them as well as an editable one
MANIFEST_DIR: Path = Path(__file__).resolve().parent.parent / "manifests"


CATEGORIES: tuple[str, ...] = ("helpful", "harmless", "sentiment")


_TEXT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv")


_LOCAL_SUFFIXES = _TEXT_SUFFIXES + (".parquet", ".pq")


# reading local files


def strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


def file_kind(path: Path) -> str | None:
    name = strip_gz(path.name.lower())
    for suf in _LOCAL_SUFFIXES:
        if name.endswith(suf):
            return suf
    return None


#: the default limits of one dataset read from local files (all its files together): bytes
#: after decompression, and rows (lines / records) parsed, dropped ones included
DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_MAX_ROWS = 2_000_000
MAX_BYTES_ENV = "ANCHORVIZ_MAX_READ_BYTES"
MAX_ROWS_ENV = "ANCHORVIZ_MAX_READ_ROWS"
_CHUNK = 1 << 20


def read_limits(max_bytes: int | None = None, max_rows: int | None = None) -> tuple[int, int]:
    """``(max_bytes, max_rows)`` for reading one dataset from local files: the arguments when
    given, else ``$ANCHORVIZ_MAX_READ_BYTES`` / ``$ANCHORVIZ_MAX_READ_ROWS``, else
    `DEFAULT_MAX_BYTES` (1 GiB after decompression) / `DEFAULT_MAX_ROWS` (2,000,000)."""
    import os

    def pick(arg: int | None, env: str, default: int, name: str) -> int:
        if arg is None:
            text = os.environ.get(env, "").strip().replace("_", "")
            if not text:
                return default
            try:
                arg = int(float(text)) if "e" in text.lower() else int(text)
            except ValueError:
                raise ValueError(f"${env} must be a positive whole number, got {text!r}") from None
            where = f"${env}"
        else:
            where = name
        if isinstance(arg, bool) or not isinstance(arg, int) or arg <= 0:
            raise ValueError(f"{where} must be a positive whole number, got {arg!r}")
        return arg

    return (pick(max_bytes, MAX_BYTES_ENV, DEFAULT_MAX_BYTES, "max_bytes"),
            pick(max_rows, MAX_ROWS_ENV, DEFAULT_MAX_ROWS, "max_rows"))


class _Budget:
    """Bytes and rows read so far from one dataset's files, against its limits."""

    def __init__(self, max_bytes: int, max_rows: int, source: Path) -> None:
        self.max_bytes, self.max_rows, self.source = max_bytes, max_rows, source
        self.bytes = self.rows = 0

    def add_bytes(self, n: int, path: Path) -> None:
        self.bytes += n
        if self.bytes > self.max_bytes:
            unpacked = " after decompression" if path.name.lower().endswith(".gz") else ""
            raise DataError(
                f"{path}: more than {self.max_bytes:,} bytes{unpacked} (the read limit for one "
                f"dataset); reading stopped there. If the file is genuine, raise the limit with "
                f"${MAX_BYTES_ENV} (or load_pairs(..., max_bytes=N))")

    def add_rows(self, n: int, path: Path) -> None:
        self.rows += n
        if self.rows > self.max_rows:
            raise DataError(
                f"{path}: more than {self.max_rows:,} rows (the read limit for one dataset); "
                f"reading stopped there. If the data is genuine, raise the limit with "
                f"${MAX_ROWS_ENV} (or load_pairs(..., max_rows=N))")


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _bounded_chunks(path: Path, budget: _Budget):
    """The file's bytes (decompressed) in blocks of at most 1 MiB; stops with a `DataError`
    as soon as the dataset's byte limit is passed, before the rest is decompressed."""
    try:
        with _open_binary(path) as fh:
            while True:
                block = fh.read(_CHUNK)
                if not block:
                    return
                budget.add_bytes(len(block), path)
                yield block
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise DataError(f"{path}: could not read: {type(err).__name__}: {err}") from None


def _bounded_lines(path: Path, budget: _Budget):
    """``(byte offset, line number, line bytes)`` of each line, streamed (`_bounded_chunks`)."""
    offset, lineno, rest = 0, 0, b""
    for block in _bounded_chunks(path, budget):
        data = rest + block
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            lineno += 1
            yield offset, lineno, line
            offset += len(line) + 1
    if rest:
        yield offset, lineno + 1, rest


def _bad_utf8(path: Path, err: UnicodeDecodeError, offset: int, line: int, data: bytes) -> DataError:
    return DataError(
        f"{path}: not valid UTF-8 at byte offset {offset + err.start} (line {line}): "
        f"{err.reason} (byte {data[err.start:err.start + 1]!r}); re-encode the file as UTF-8")


def _read_bytes(path: Path, budget: _Budget) -> bytes:
    return b"".join(_bounded_chunks(path, budget))


def _decode(data: bytes, path: Path) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise _bad_utf8(path, err, 0, line, data) from None
    return text[1:] if text.startswith("\ufeff") else text


def _json_line(line: str, lineno: int, path: Path) -> Any:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        return BadRecord(f"{path.name} line {lineno} is not valid JSON: {err.msg}")
    if isinstance(obj, dict):
        return obj
    kind = {list: "an array", str: "a string", bool: "a boolean"}.get(
        type(obj), "a number" if isinstance(obj, (int, float)) else "null")
    return BadRecord(f"{path.name} line {lineno} is not a JSON object (it is "
                     f"{kind}, {line.strip()[:40]!r}); each line of a JSON lines "
                     "file must be one object such as {\"prompt\": ..., "
                     "\"chosen\": ..., \"rejected\": ...}")


def _parse_jsonl(text: str, path: Path) -> list[Any]:
    out = [_json_line(line, lineno, path) for lineno, line in enumerate(text.splitlines(), 1)
           if line.strip()]
    if out and not any(isinstance(r, dict) for r in out):
        raise DataError(f"{path}: no line is a JSON object: {out[0].message}")
    return out


def _stream_jsonl(path: Path, budget: _Budget):
    """The records of a JSON lines file, one line at a time: memory holds one line, not the
    file (a line repeated a million times costs one line)."""
    for offset, lineno, raw in _bounded_lines(path, budget):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _bad_utf8(path, err, offset, lineno, raw) from None
        if lineno == 1 and line.startswith("\ufeff"):
            line = line[1:]
        if not line.strip():
            continue
        budget.add_rows(1, path)
        yield _json_line(line, lineno, path)


def _parse_json(text: str, path: Path) -> list[Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # JSON lines in a .json file
            return _parse_jsonl(text, path)
        raise DataError(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}): {err.msg}") from None
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        lists = {k: v for k, v in obj.items() if isinstance(v, list)}
        if len(lists) == 1 and all(isinstance(r, dict) for r in next(iter(lists.values()))):
            return next(iter(lists.values()))
        if obj and len(lists) == len(obj) and len({len(v) for v in lists.values()}) == 1:
            keys = list(lists)
            return [dict(zip(keys, vals)) for vals in zip(*lists.values())]
    raise DataError(
        f"{path}: expected a JSON list of row objects (or {{column: [values]}}), "
        f"got a {type(obj).__name__}"
    )


def _check_utf8(path: Path, budget: _Budget) -> None:
    """Stream the file once through an incremental UTF-8 decoder (the byte limit applies)."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")()
    offset = line = 0
    for block in _bounded_chunks(path, budget):
        try:
            dec.decode(block)
        except UnicodeDecodeError as err:
            raise _bad_utf8(path, err, offset, line + block.count(b"\n", 0, err.start) + 1,
                            block) from None
        offset += len(block)
        line += block.count(b"\n")
    try:
        dec.decode(b"", final=True)
    except UnicodeDecodeError as err:
        raise _bad_utf8(path, err, offset, line + 1, b"") from None


class _Capped(io.RawIOBase):
    """A binary stream of the file's (decompressed) bytes that enforces the byte limit."""

    def __init__(self, path: Path, budget: _Budget) -> None:
        self._it = _bounded_chunks(path, budget)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            block = next(self._it, None)
            if block is None:
                return 0
            self._buf = block
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _stream_csv(path: Path, kind: str, budget: _Budget, check: bool = True):
    if check:  # pandas would only say "could not parse": name the offset and line instead
        _check_utf8(path, _Budget(budget.max_bytes, budget.max_rows, budget.source))
    text = io.TextIOWrapper(io.BufferedReader(_Capped(path, budget)), encoding="utf-8-sig",
                            newline="")
    try:
        chunks = pd.read_csv(text, sep="\t" if kind == ".tsv" else ",", dtype=str,
                             keep_default_na=False, chunksize=20_000)
        for frame in chunks:
            budget.add_rows(len(frame), path)
            yield from frame.to_dict("records")
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - pandas parser errors
        raise DataError(f"{path}: could not parse {kind[1:]}: {err}") from None


def _stream_parquet(path: Path, budget: _Budget):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        meta = pf.metadata
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    except Exception as err:  # noqa: BLE001 - arrow raises several types
        raise DataError(f"{path}: could not read parquet: {type(err).__name__}: {err}") from None
    budget.add_bytes(size, path)  # the uncompressed size its metadata records, before reading
    budget.add_rows(meta.num_rows, path)
    try:
        for batch in pf.iter_batches(batch_size=20_000):
            yield from batch.to_pylist()
    except Exception as err:  # noqa: BLE001
        raise DataError(f"{path}: could not read parquet: {type(err).__name__}: {err}") from None


def _stream_file(path: Path, budget: _Budget, check: bool = True):
    kind = file_kind(path)
    if kind in (".parquet", ".pq"):
        return _stream_parquet(path, budget)
    if kind in (".jsonl", ".ndjson"):
        return _stream_jsonl(path, budget)
    if kind in (".csv", ".tsv"):
        return _stream_csv(path, kind, budget, check)
    if kind == ".json":  # one JSON document: parsed whole, within the byte limit
        records = _parse_json(_decode(_read_bytes(path, budget), path), path)
        budget.add_rows(len(records), path)
        return iter(records)
    raise DataError(f"{path}: unsupported file type; use one of {list(_LOCAL_SUFFIXES)} (optionally .gz)")


def _read_file(path: Path, max_bytes: int | None = None, max_rows: int | None = None) -> list[Any]:
    """Every record of one file, in a list (small files; `load_pairs` streams instead)."""
    mb, mr = read_limits(max_bytes, max_rows)
    return list(_stream_file(path, _Budget(mb, mr, path)))


class LocalRecords:
    """The records of a local dataset (a file or a folder of files), read lazily: each
    iteration streams the files again under the read limits (`read_limits`), so memory holds
    what the consumer keeps, not the files' contents. Built by one checking pass that finds
    the columns and the first row and counts the rows."""

    def __init__(self, files: list[Path], root: Path, max_bytes: int | None = None,
                 max_rows: int | None = None) -> None:
        self.files, self.root = files, root
        self.max_bytes, self.max_rows = read_limits(max_bytes, max_rows)
        seen: dict[str, None] = {}
        self.first: Mapping[str, Any] | None = None
        n = 0
        budget = self._budget()
        for f in files:
            good = False
            first_bad = None
            for rec in _stream_file(f, budget):
                n += 1
                if isinstance(rec, Mapping):
                    good = True
                    if self.first is None:
                        self.first = rec
                    for k in rec:
                        seen.setdefault(str(k), None)
                elif first_bad is None and isinstance(rec, BadRecord):
                    first_bad = rec
            if not good and first_bad is not None:
                raise DataError(f"{f}: no line is a JSON object: {first_bad.message}")
        self.columns = list(seen)
        self.n = n

    def _budget(self) -> _Budget:
        return _Budget(self.max_bytes, self.max_rows, self.root)

    def __iter__(self):
        budget = self._budget()
        for f in self.files:  # checked for UTF-8 by the first pass
            yield from _stream_file(f, budget, check=False)

    def __len__(self) -> int:
        return self.n


def _split_matches(rel: Path, split: str) -> bool:
    rx = re.compile(rf"^{re.escape(split)}(?:[-.]|$)")
    return bool(rx.match(rel.name)) or split in rel.parts[:-1]


def _local_files(path: Path, split: str | None) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and file_kind(p) is not None
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not files:
        raise DataError(f"{path}: directory holds no data files ({list(_LOCAL_SUFFIXES)}, optionally .gz)")
    if split is None:
        return files
    picked = [p for p in files if _split_matches(p.relative_to(path), split)]
    if not picked:
        names = [str(p.relative_to(path)) for p in files]
        raise DataError(f"{path}: no file for split {split!r} (files: {names})")
    return picked


def _read_local(path: Path, split: str | None, max_bytes: int | None = None,
                max_rows: int | None = None) -> tuple[LocalRecords, list[str], str]:
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {str(path)!r}")
    files = _local_files(path, split)
    records = LocalRecords(files, path, max_bytes, max_rows)
    if not len(records):
        raise DataError(f"{path}: contains no rows")
    source = str(path) if len(files) == 1 else f"{path} ({len(files)} files)"
    return records, records.columns, source


def _read_hub(
    hub_id: str, config: str | None, data_dir: str | None, split: str, revision: str | None = None
) -> tuple[Any, list[str], str]:
    import datasets

    kwargs: dict[str, Any] = {"split": split}
    if config is not None:
        kwargs["name"] = config
    if data_dir is not None:
        kwargs["data_dir"] = data_dir
    if revision is not None:
        kwargs["revision"] = revision
    where = f"{hub_id}" + (f" (config {config})" if config else "") + (f" ({data_dir})" if data_dir else "")
    try:
        ds = datasets.load_dataset(hub_id, **kwargs)
    except Exception as err:  # noqa: BLE001 - network, auth, missing split ...
        raise DataError(
            f"could not load {where}, split {split!r}, from the Hugging Face Hub: "
            f"{type(err).__name__}: {err}. Without network access pass a local copy "
            f"(load_pairs(name, path=...))."
        ) from err
    return ds, list(ds.column_names), f"hf://{where}"


# manifests

_MANIFEST_REQUIRED = ("name", "adapter", "category", "licence")


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        m = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: unreadable manifest: {err}") from None
    if not isinstance(m, dict):
        raise DataError(f"{path}: a manifest must be a YAML mapping")
    missing = [k for k in _MANIFEST_REQUIRED if not m.get(k)]
    if missing:
        raise DataError(f"{path}: manifest lacks {missing}")
    if m["name"] != path.stem:
        raise DataError(f"{path}: manifest name {m['name']!r} must match the file name")
    if m["adapter"] != "vader" and m["adapter"] not in ADAPTERS:
        raise DataError(f"{path}: unknown adapter {m['adapter']!r}; known: {sorted(ADAPTERS)} + vader")
    if m["category"] not in CATEGORIES:
        raise DataError(f"{path}: category {m['category']!r} not in {CATEGORIES}")
    if m["adapter"] != "vader" and not (m.get("hub_id") or m.get("local_file")):
        raise DataError(f"{path}: manifest needs a hub_id or a local_file")
    m.setdefault("splits", [])
    m["splits"] = list(m["splits"] or [])
    m.setdefault("default_split", m["splits"][0] if m["splits"] else None)
    m["columns"] = dict(m.get("columns") or {})
    m["options"] = dict(m.get("options") or {})
    m["manifest_path"] = str(path)
    return m


_WARNED_NO_MANIFESTS: list[bool] = []


def known_manifests() -> dict[str, dict[str, Any]]:
    if not MANIFEST_DIR.is_dir():  # an install without its package data: say so, once
        if not _WARNED_NO_MANIFESTS:
            _WARNED_NO_MANIFESTS.append(True)
            logger.warning("no dataset manifests at %s: the named datasets are unknown "
                           "(an install without anchorviz's package data?)", MANIFEST_DIR)
        return {}
    return {p.stem: _read_manifest(p) for p in sorted(MANIFEST_DIR.glob("*.yaml"))}


def get_manifest(name: str) -> dict[str, Any]:
    """The parsed manifest of a named dataset (ValueError listing the known names if unknown)."""
    ms = known_manifests()
    if name not in ms:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {sorted(ms)}")
    return ms[name]


def list_datasets(local: bool = False) -> pd.DataFrame:
    """The named datasets: one row per manifest (name, hub_id, category, licence, adapter).

    ``local=True`` adds ``cached`` (whether it can be read on this machine without network:
    its local file, the VADER source archive in anchorviz's cache, or a Hugging Face datasets /
    hub cache entry) and ``local_path`` (that file or cache folder; where it would be for a
    local file that is missing). Nothing is downloaded or created."""
    cols = ["name", "hub_id", "category", "licence", "adapter"]
    rows = []
    for m in known_manifests().values():
        row = {"name": m["name"], "hub_id": m.get("hub_id"), "category": m["category"],
               "licence": m["licence"], "adapter": m["adapter"]}
        if local:
            row["cached"], row["local_path"] = _local_copy(m)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols + (["cached", "local_path"] if local else []))


def _local_copy(m: Mapping[str, Any]) -> tuple[bool, str | None]:
    """``(readable offline, path)`` of a manifest's data on this machine (see `list_datasets`)."""
    if m["adapter"] == "vader":
        path = cache_dir(create=False) / "datasets" / "vader" / VADER_SDIST_NAME
        return path.is_file(), str(path) if path.is_file() else None
    if m.get("local_file"):
        try:
            path = manifest_local_path(m)
        except FileNotFoundError:  # the shared real-data folder is not on this machine
            return False, None
        return path.exists(), str(path)
    hub_id = m.get("hub_id")
    if not hub_id:
        return False, None
    try:
        from huggingface_hub import constants
    except ImportError:
        return False, None
    datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets")
    for path in (datasets_cache / hub_id.replace("/", "___"),
                 Path(constants.HF_HUB_CACHE) / ("datasets--" + hub_id.replace("/", "--"))):
        if path.is_dir():
            return True, str(path)
    return False, None


def manifest_local_path(m: Mapping[str, Any]) -> Path:
    root_kind = m.get("local_root", "repo")
    if root_kind == "realdata":
        root = realdata_dir()
        if root is None:
            raise FileNotFoundError(
                f"dataset {m['name']!r} reads {m['local_file']!r} from the shared real-data folder, "
                "which is not present (expected ../shared/realdata beside the checkout, or set "
                "$ANCHORVIZ_REALDATA)"
            )
    elif root_kind == "repo":
        root = REPO_ROOT
    else:
        raise DataError(f"{m['manifest_path']}: local_root must be 'realdata' or 'repo', got {root_kind!r}")
    return Path(root) / m["local_file"]


# main entry


def looks_like_path(s: str) -> bool:
    return (s.startswith(("/", ".", "~")) or "\\" in s or file_kind(Path(s)) is not None
            or s.lower().endswith(".gz"))


def _dataset_name_from_path(p: Path) -> str:
    name = strip_gz(p.name)
    kind = file_kind(Path(name))
    return name[: -len(kind)] if kind and p.is_file() else name


def _sniff_adapter(records: Sequence[Any], columns: Sequence[str]) -> str:
    """HelpSteer3 rows and HH transcripts are recognised by their columns; else generic."""
    cols = set(columns)
    if {"context", "response1", "response2", "overall_preference"} <= cols:
        return "helpsteer3"
    if {"chosen", "rejected"} <= cols and "prompt" not in cols:
        first = getattr(records, "first", None) or next(
            (r for r in records if isinstance(r, Mapping)), {})
        if isinstance(first.get("chosen"), str) and HH_MARK in first["chosen"]:
            return "hh"
    return "pairs"


def load_pairs(
    name_or_path: str | Path,
    split: str | None = None,
    *,
    column_map: Mapping[str, Any] | None = None,
    limit: int | None = None,
    domain: str | None = None,
    strict: bool = False,
    adapter: str | None = None,
    path: str | Path | None = None,
    max_bytes: int | None = None,
    max_rows: int | None = None,
) -> tuple[pd.DataFrame, DropReport]:
    """Load a preference dataset as a pair table (:data:`PAIR_COLUMNS`) and its drop report.

    ``name_or_path`` is resolved in this order:

    1. a manifest name (:func:`list_datasets`): read from the Hugging Face Hub (its hub id,
       config and ``split``, default the manifest's ``default_split``), from its local file
       (``realdata-*``), from ``path`` (a local copy in the hub's row format), or, for the
       ``vader`` adapter, from :func:`anchorviz.data.vader.vader_pairs` (``domain`` picks the VADER
       domain);
    2. an existing local file or directory (``split`` selects files of a directory, e.g.
       ``test.jsonl`` or ``data/test-00000.parquet``), with the generic ``pairs`` adapter
       unless ``adapter`` is given (or the columns are plainly HH / HelpSteer3 rows);
    3. a Hugging Face Hub id, if ``column_map`` or ``adapter`` is given.

    Anything else is a ValueError listing the known names; a path that does not exist is a
    FileNotFoundError.

    ``column_map``: adapter field -> source column (e.g. ``{"prompt": "question", "chosen":
    "good", "rejected": "bad"}``; ``{"prompt": None}`` for data without prompts). ``limit``:
    stop after this many kept pairs. ``domain``: the ``domain`` label (default: the dataset
    name). ``strict``: raise :class:`DataError` on the first malformed row instead of dropping
    and counting it.

    Local files are streamed (memory holds the pairs kept, not the file) and read under two
    limits per dataset (`read_limits`): ``max_bytes`` after decompression (default 1 GiB, or
    ``$ANCHORVIZ_MAX_READ_BYTES``) and ``max_rows`` parsed (default 2,000,000, or
    ``$ANCHORVIZ_MAX_READ_ROWS``); passing one stops the reading with a `DataError` naming the
    limit and how to raise it (a 2 MB gzip can unpack to gigabytes).
    """
    read_limits(max_bytes, max_rows)  # bad limits fail before anything is read
    if column_map is not None and not isinstance(column_map, Mapping):
        raise TypeError(f"column_map must be a mapping, got {type(column_map).__name__}")
    name = str(name_or_path)
    manifests = known_manifests()
    if name in manifests:
        m = manifests[name]
        if m["adapter"] == "vader":
            return _load_vader(m, domain, limit)
        spec = adapter_for(adapter or m["adapter"])
        cmap = {**m["columns"], **dict(column_map or {})}
        dom = domain or m.get("domain") or m["name"]
        if path is not None:
            records, columns, source = _read_local(Path(path).expanduser(), split,
                                                   max_bytes, max_rows)
            use_split = split
        elif m.get("local_file"):
            records, columns, source = _read_local(manifest_local_path(m), None, max_bytes,
                                                   max_rows)
            use_split = None
        else:
            use_split = split or m["default_split"]
            if m["splits"] and use_split not in m["splits"]:
                raise DataError(f"dataset {name!r} has splits {m['splits']}, not {use_split!r}")
            records, columns, source = _read_hub(m["hub_id"], m.get("config"), m.get("data_dir"),
                                                 use_split, m.get("revision"))
        return run_adapter(records, columns, adapter=spec, column_map=cmap, options=m["options"],
                    dataset=m["name"], domain=dom, split=use_split, source=source,
                    strict=strict, limit=limit)
    if path is not None:
        raise ValueError(f"path= is for manifest names; {name!r} is not one (known: {sorted(manifests)})")
    p = Path(name).expanduser()
    if p.exists() or looks_like_path(name):
        records, columns, source = _read_local(p, split, max_bytes, max_rows)
        spec = adapter_for(adapter or ("pairs" if column_map else _sniff_adapter(records, columns)))
        ds_name = _dataset_name_from_path(p)
        return run_adapter(records, columns, adapter=spec, column_map=column_map, options={},
                    dataset=ds_name, domain=domain or ds_name, split=split, source=source,
                    strict=strict, limit=limit)
    if column_map is not None or adapter is not None:
        spec = adapter_for(adapter or "pairs")
        use_split = split or "train"
        records, columns, source = _read_hub(name, None, None, use_split)
        return run_adapter(records, columns, adapter=spec, column_map=column_map, options={},
                    dataset=name, domain=domain or name, split=use_split, source=source,
                    strict=strict, limit=limit)
    raise ValueError(
        f"unknown dataset {name!r}: not a manifest name, not an existing file or directory, and "
        f"no column_map given to read it as a Hugging Face Hub id. Known datasets: {sorted(manifests)}"
    )


def _load_vader(m: Mapping[str, Any], domain: str | None, limit: int | None) -> tuple[pd.DataFrame, DropReport]:
    vdomain = domain or m.get("vader_domain")
    try:  # imported here so that a broken install names the module (test_readers stands in one)
        from anchorviz.data.vader import vader_pairs
    except ImportError as err:
        raise ImportError(
            f"dataset {m['name']!r} uses the 'vader' adapter, which is anchorviz.data.vader.vader_pairs; "
            f"importing it failed: {err}"
        ) from err
    out = vader_pairs(vdomain)
    df = out[0] if isinstance(out, tuple) else out
    source = f"anchorviz.data.vader.vader_pairs({vdomain!r})"
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{source} returned a {type(df).__name__}, expected a pair table")
    report = DropReport(dataset=m["name"], source=source, total=len(df))
    df = dedupe_pairs(df, report)
    if limit is not None:
        df = df.iloc[:limit].reset_index(drop=True)
    df = validate_pairs(df, source)
    report.kept = len(df)
    logger.info("%s", report)
    return df, report
