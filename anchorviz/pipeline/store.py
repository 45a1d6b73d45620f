"""The run store: content-hashed, atomically written run directories under one sweep folder.

A run is written into a temporary folder beside its final place and renamed into place only
when complete, with a ``MANIFEST.json`` holding the config hash, the sha256 of every file
(``files``) and each file's size and modification time (``file_stats``: ``{"size",
"mtime_ns"}``). A run counts as finished only when its manifest says so AND every file is still
the one written: a truncated or corrupted file (or a half-written folder left by a killed
process) makes the run "not finished", so it is redone, never read. A per-run file lock keeps two
processes (two sweeps sharing one store) from writing the same run at once; the second waits and
then finds it done. Layout: see docs/ARCHITECTURE.md.

Two levels of checking (`verify_run_dir`):

* cheap (reading a finished run: the results table, ``is_finished`` on resume): every file
  exists and has its recorded size; a file whose mtime differs from the recorded one (touched,
  rewritten, or copied without ``cp -p`` / ``rsync -t``) is hashed and must still match its
  sha256. Files without a recorded size / mtime are always hashed: those of manifests written
  before ``file_stats`` existed (no record is added to an old manifest: reading never writes
  into a finished run), and "racy" files whose mtime fell in the same file-system clock tick as
  the commit (a change within that tick could leave the mtime unchanged).
* full (``full=True``, or the files named in ``hash_files``): every named file is hashed. A
  file's contents are hashed before they are USED: `load_run_model` hashes the checkpoint and
  ``config.yaml``; a student hashes the teacher files it reads (`anchorviz.pipeline.steps`);
  ``anchorviz verify DIR`` hashes every file of a run or sweep. So a file changed in place with
  its size kept and its mtime put back passes the cheap check but is refused before it is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

from anchorviz.paths import apply_umask, file_sha256, read_yaml, storage_error, write_atomic

logger = logging.getLogger(__name__)

__all__ = [
    "MANIFEST",
    "SHARED_HASHES",
    "RunStore",
    "StoreError",
    "canonical_json",
    "config_hash",
    "load_run_model",
    "safe_name",
    "scan_runs",
    "seal_shared",
    "verify_run_dir",
    "verify_shared_dir",
    "worker_identity",
    "write_json",
]

MANIFEST = "MANIFEST.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class StoreError(RuntimeError):
    """A run directory that conflicts with what is asked (another config under the same name)."""


def safe_name(name: str, what: str = "name") -> str:
    """Reject names that could escape the store (``..``, slashes, absolute paths, odd chars)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            f"{what} {name!r} is not allowed: use letters, digits, '.', '_' and '-' only "
            "(no path separators or '..'), at most 128 characters"
        )
    return name


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def config_hash(obj: Any, length: int = 12) -> str:
    """sha256 of the canonical JSON of a config (dicts, lists, numbers, strings)."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:length]


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


class RunStore:
    """Run directories under ``root/runs``; shared artefacts under ``root/shared``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        try:
            for sub in ("runs", "shared", ".locks"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise storage_error(err, self.root, f"the run folder {self.root}") from err

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / safe_name(run_id, "run id")

    def shared_dir(self, key: str) -> Path:
        path = self.root / "shared" / safe_name(key, "shared key")
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def lock(self, key: str, timeout: float = -1) -> Iterator[None]:
        """An inter-process lock for one run or shared artefact."""
        with FileLock(str(self.root / ".locks" / f"{safe_name(key)}.lock"), timeout=timeout):
            yield

    def manifest(self, run_id: str) -> dict | None:
        path = self.run_dir(run_id) / MANIFEST
        try:
            man = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return man if isinstance(man, dict) else None

    def verify(self, run_dir: Path, *, full: bool = False,
               hash_files: Collection[str] = ()) -> tuple[bool, str]:
        """``(ok, why)``: the manifest says finished and every file is the one written
        (`verify_run_dir`: cheap unless ``full`` or named in ``hash_files``)."""
        return verify_run_dir(run_dir, full=full, hash_files=hash_files)

    def is_finished(self, run_id: str, config_hash_: str | None = None, *, full: bool = False,
                    hash_files: Collection[str] = ()) -> bool:
        """True when the run exists, is complete and uncorrupted (and has this config hash).

        Cheap by default (sizes and mtimes, `verify_run_dir`); ``hash_files`` names the files
        whose contents the caller is about to use, hashed in full; ``full`` hashes every file.
        A finished run under the same id with a DIFFERENT config hash is an error, never
        overwritten silently.
        """
        d = self.run_dir(run_id)
        if not d.exists():
            return False
        ok, why = self.verify(d, full=full, hash_files=hash_files)
        if not ok:
            logger.warning("run %s is not usable (%s): it will be redone", run_id, why)
            return False
        man = self.manifest(run_id) or {}
        if config_hash_ is not None and man.get("config_hash") != config_hash_:
            raise StoreError(
                f"run directory {d} was written by a different config (hash "
                f"{man.get('config_hash')} != {config_hash_}); choose another sweep folder or "
                "delete it"
            )
        return True

    def begin(self, run_id: str) -> Path:
        """A fresh temporary folder (same file system) to write a run into, with the
        permissions of the user's umask (``mkdtemp`` alone makes it 0700, which a store shared
        between users or machines cannot read)."""
        safe_name(run_id, "run id")
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{run_id}-", dir=self.root / "runs"))
        apply_umask(tmp)
        return tmp

    def commit(self, tmp: Path, run_id: str, config_hash_: str, extra: dict | None = None) -> Path:
        """Hash every file, write the manifest (sha256, size and mtime of each file, and the
        ``worker`` that made it: `worker_identity`), and rename ``tmp`` into place atomically."""
        paths = [p for p in sorted(tmp.rglob("*")) if p.is_file() and p.name != MANIFEST]
        files = {str(p.relative_to(tmp)): file_sha256(p) for p in paths}
        stats = {str(p.relative_to(tmp)): _file_stat(p.stat()) for p in paths}
        # a file modified in the file-system clock tick of this commit could change again
        # without its mtime changing: it gets no stats, so every check hashes it ("racy git")
        probe = tmp / f".mtime-probe-{os.getpid()}"
        probe.touch()
        tick = probe.stat().st_mtime_ns
        probe.unlink()
        stats = {rel: st for rel, st in stats.items() if st["mtime_ns"] < tick}
        write_json(tmp / MANIFEST, {"status": "finished", "run_id": run_id,
                                    "config_hash": config_hash_, "files": files,
                                    "file_stats": stats,
                                    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                    "worker": worker_identity(), **(extra or {})})
        _fsync_dir(tmp)
        final = self.run_dir(run_id)
        if final.exists():
            # an unfinished / corrupted earlier attempt: move it aside, never mix the two
            aside = final.with_name(f".old-{run_id}-{os.getpid()}-{time.time_ns()}")
            os.rename(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
        os.rename(tmp, final)
        return final

    def fail(self, tmp: Path, run_id: str, config_hash_: str, error: str) -> Path:
        """Leave the run marked FAILED (never finished) with the error, for the user to read."""
        write_json(tmp / MANIFEST, {"status": "failed", "run_id": run_id,
                                    "config_hash": config_hash_, "error": error, "files": {}})
        final = self.run_dir(run_id)
        if final.exists() and not self.verify(final)[0]:
            shutil.rmtree(final, ignore_errors=True)
        if not final.exists():
            os.rename(tmp, final)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def finished_runs(self) -> list[str]:
        return self.scan()[0]

    def scan(self, *, full: bool = False) -> tuple[list[str], dict[str, str]]:
        """``(finished run ids, {run id: why it is not usable})`` over every run folder
        (temporaries skipped): what a results table can read, and what it cannot. Cheap
        (sizes and mtimes) unless ``full`` (`scan_runs`)."""
        return scan_runs(self.root / "runs", full=full)

    def clean_temporaries(self) -> int:
        """Delete temporary folders left by killed processes (not held by a live writer)."""
        n = 0
        for d in (self.root / "runs").glob(".tmp-*"):
            run_id = d.name[5:].rsplit("-", 1)[0]
            try:
                with FileLock(str(self.root / ".locks" / f"{run_id}.lock"), timeout=0):
                    shutil.rmtree(d, ignore_errors=True)
                    n += 1
            except TimeoutError:  # a live writer holds the run's lock
                continue
        return n


def _file_stat(st: os.stat_result) -> dict[str, int]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def verify_run_dir(run_dir: str | Path, *, full: bool = False,
                   hash_files: Collection[str] = ()) -> tuple[bool, str]:
    """``(ok, why)`` for one run folder: its manifest says finished and every file it lists is
    inside the folder and is the file written.

    Cheap by default: each file exists with its recorded size, and is hashed only when its
    mtime differs from the recorded one or nothing is recorded (an older manifest, a "racy"
    file; module docstring). ``full`` hashes every file against its sha256; ``hash_files``
    (paths relative to the run folder, as in the manifest) hashes those, which must be listed
    in the manifest: use it for the files whose contents the caller is about to use."""
    run_dir = Path(run_dir)
    try:
        man = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        return False, f"no readable manifest ({err.__class__.__name__})"
    if not isinstance(man, dict) or not isinstance(man.get("files", {}), dict):
        return False, "manifest is not a JSON object with a 'files' mapping"
    if man.get("status") != "finished":
        return False, f"status {man.get('status')!r}"
    files: dict = man.get("files", {})
    stats = man.get("file_stats") or {}
    if not isinstance(stats, dict):
        return False, "manifest's 'file_stats' is not a mapping"
    unlisted = sorted(set(hash_files) - set(files))
    if unlisted:
        return False, f"file {unlisted[0]} is not in the manifest"
    for rel, digest in files.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return False, f"manifest lists {rel!r}, outside the run folder"
        p = run_dir / rel
        if not p.is_file():
            return False, f"file {rel} is missing"
        recorded = stats.get(rel)
        must_hash = full or rel in hash_files or not (
            isinstance(recorded, dict) and isinstance(recorded.get("size"), int)
            and isinstance(recorded.get("mtime_ns"), int))
        if not must_hash:
            now = _file_stat(p.stat())
            if now["size"] != recorded["size"]:
                return False, (f"file {rel} does not match its sha256 (size {now['size']} bytes, "
                               f"{recorded['size']} when written: truncated or overwritten)")
            must_hash = now["mtime_ns"] != recorded["mtime_ns"]
        if must_hash and file_sha256(p) != digest:
            return False, f"file {rel} does not match its sha256 (corrupted or truncated)"
    return True, "finished"


def scan_runs(runs_dir: str | Path, *, full: bool = False) -> tuple[list[str], dict[str, str]]:
    """``(finished run ids, {run id: why it is not usable})`` over every run folder in
    ``runs_dir`` (temporaries skipped; failed runs with the first line of their error), each
    checked by `verify_run_dir` (cheap unless ``full``). Reads only: creates nothing."""
    finished, problems = [], {}
    for d in sorted(Path(runs_dir).iterdir()):
        if d.name.startswith("."):
            continue
        if not d.is_dir():
            problems[d.name] = "not a folder"
            continue
        ok, why = verify_run_dir(d, full=full)
        if ok:
            finished.append(d.name)
            continue
        if why == "status 'failed'":  # say why it failed (the first line of its error)
            try:
                error = str(json.loads((d / MANIFEST).read_text()).get("error") or "").strip()
            except (OSError, ValueError, AttributeError):
                error = ""
            why += f": {error.splitlines()[0]}" if error else ""
        problems[d.name] = why
    return finished, problems


#: set by the Ray backend in a task's process: the id of the Ray node running it
RAY_NODE_ENV = "ANCHORVIZ_RAY_NODE"


def worker_identity() -> dict[str, Any]:
    """Where this process runs, for a run's manifest (``worker``): host name, process id and,
    in a Ray task, the Ray node id (`RAY_NODE_ENV`), so a run folder says which node made it."""
    import socket

    out: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    node = os.environ.get(RAY_NODE_ENV)
    if node:
        out["ray_node"] = node
    return out


#: in each ``shared/<key>/`` folder: the sha256 and size of every file in it when it was
#: written (reference captures, the shared projection, SEAM's caches), for `verify_shared_dir`
SHARED_HASHES = "HASHES.json"


def _shared_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and p.name != SHARED_HASHES
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def seal_shared(folder: str | Path) -> Path:
    """Record the sha256 and size of every file of a shared artefact folder in its
    ``HASHES.json`` (atomically; call it under the artefact's lock once its files are written).
    ``anchorviz verify`` and the readers of reference captures check them. Returns the file."""
    folder = Path(folder)
    files = {rel: {"sha256": file_sha256(folder / rel), "size": (folder / rel).stat().st_size}
             for rel in _shared_files(folder)}
    text = json.dumps({"files": files, "sealed_at": time.strftime("%Y-%m-%dT%H:%M:%S")},
                      indent=1, sort_keys=True) + "\n"
    return write_atomic(folder / SHARED_HASHES, lambda tmp: tmp.write_text(text))


def verify_shared_dir(folder: str | Path, *, full: bool = True) -> tuple[str, str]:
    """``(state, why)`` of a shared artefact folder against its ``HASHES.json``: ``ok``;
    ``bad`` (a listed file missing, of another size, or, with ``full``, of another sha256: the
    file is named); ``unchecked`` (no ``HASHES.json``: written by a version before shared
    folders were hashed, or still being written). Files added after the folder was sealed are
    named in the ``ok`` reason, not hashed."""
    folder = Path(folder)
    path = folder / SHARED_HASHES
    if not path.is_file():
        return "unchecked", f"no {SHARED_HASHES} (written before shared folders were hashed)"
    try:
        files = json.loads(path.read_text())["files"]
        if not isinstance(files, dict):
            raise TypeError("'files' is not a mapping")
    except (OSError, ValueError, KeyError, TypeError) as err:
        return "bad", f"{SHARED_HASHES} is not readable ({type(err).__name__}: {err})"
    for rel, rec in sorted(files.items()):
        if Path(rel).is_absolute() or ".." in Path(rel).parts or not isinstance(rec, dict):
            return "bad", f"{SHARED_HASHES} lists {rel!r}, outside the folder or without a hash"
        p = folder / rel
        if not p.is_file():
            return "bad", f"file {rel} is missing"
        if p.stat().st_size != rec.get("size"):
            return "bad", (f"file {rel} does not match its sha256 (size {p.stat().st_size} "
                           f"bytes, {rec.get('size')} when written: truncated or overwritten)")
        if full and file_sha256(p) != rec.get("sha256"):
            return "bad", f"file {rel} does not match its sha256 (changed or corrupted)"
    extra = sorted(set(_shared_files(folder)) - set(files))
    return "ok", ("intact" if not extra else
                  f"intact; {len(extra)} file(s) added since it was sealed, not checked: "
                  + ", ".join(extra[:3]))


def _fsync_dir(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


def load_run_model(run_dir, *, device: str = "cpu", trust_remote_code: bool = False,
                   verify: bool = True):
    """``(RewardModel, tokenizer)``: the trained teacher, ceiling or student of a finished run
    folder, rebuilt from its ``config.yaml`` (base model, pooling, dtype, LoRA) and its
    checkpoint, in eval mode on ``device``. Its rewards are the run's stored scores.

    ``verify`` first checks the run folder against its manifest (finished, every file where it
    was written, and the checkpoint and ``config.yaml`` hashed in full against their sha256:
    these are what is loaded). Raises `ModelError` for an unfinished or damaged run, a base
    model that is not the one trained, or a checkpoint that does not hold the trained
    parameters."""
    # torch: the figures read run folders through this module and never load a model
    import torch

    from anchorviz.models.reward_model import (
        CHECKPOINT_FILE,
        ModelError,
        load_checkpoint,
        load_reward_model,
    )

    run_dir = Path(run_dir)
    if verify:
        ok, why = verify_run_dir(run_dir, hash_files=("config.yaml", CHECKPOINT_FILE))
        if not ok:
            raise ModelError(f"{run_dir} is not a finished, intact run ({why})")
    key = read_yaml(run_dir / "config.yaml")
    kind = key.get("kind") if isinstance(key, dict) else None
    if kind not in ("teacher", "ceiling", "student"):
        raise ModelError(f"{run_dir} is not a teacher, ceiling or student run (kind {kind!r})")
    ckpt = run_dir / CHECKPOINT_FILE
    if not ckpt.is_file():
        raise ModelError(f"{run_dir} has no {CHECKPOINT_FILE}")
    model, tok = load_reward_model(
        key["model"], pooling=key.get("pooling", "auto"),
        dtype=torch.bfloat16 if key.get("dtype") == "bfloat16" else None,
        trust_remote_code=trust_remote_code, dropout=bool(key.get("dropout", True)),
        lora=key.get("lora") if kind != "teacher" else None,
        attention=key.get("attention", "auto"))
    load_checkpoint(model, ckpt)
    model.eval()
    return model.to(device), tok
