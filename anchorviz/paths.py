"""Where anchorviz keeps things it downloads or converts (never inside the git tree); the one
sanitiser for names that become file names (`safe_component`); folder permissions that follow
the umask (`apply_umask`); content fingerprints of local inputs for run keys (`fingerprint`);
the one file hash (`file_sha256`) and the one atomic file write (`write_atomic`)."""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "COMMANDS_FILE",
    "FULL_HASH_BELOW",
    "REPO_ROOT",
    "StorageError",
    "apply_umask",
    "bars_off",
    "cache_dir",
    "cache_problem",
    "cache_subdir",
    "file_sha256",
    "fingerprint",
    "full_fingerprints",
    "realdata_dir",
    "record_command",
    "recorded_commands",
    "safe_component",
    "storage_errno",
    "storage_error",
    "write_atomic",
]

REPO_ROOT = Path(__file__).resolve().parent.parent


def _cache_root() -> Path:
    root = os.environ.get("ANCHORVIZ_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "anchorviz"


def cache_dir(create: bool = True) -> Path:
    """The cache root: ``$ANCHORVIZ_CACHE`` if set, else ``~/.cache/anchorviz``. Created on use
    (``create=False``: only named, for listings that must work on a read-only HOME); a root
    that cannot be created is a `StorageError` saying how to set ``$ANCHORVIZ_CACHE``."""
    path = _cache_root()
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StorageError(err.errno or 0, (
                f"cannot create the anchorviz cache folder {path}: {err.strerror or err}. "
                "Set $ANCHORVIZ_CACHE to a writable folder (e.g. export "
                "ANCHORVIZ_CACHE=/tmp/anchorviz-cache)")) from err
    return path


def cache_subdir(name: str, create: bool = True) -> Path:
    """A named folder under the cache root (``models``, ``datasets``, ``wheels`` ...); created
    unless ``create=False``."""
    if not name or "/" in name or "\\" in name or name in {".", ".."}:
        raise ValueError(f"cache sub-folder name must be a plain name, got {name!r}")
    path = cache_dir(create) / name
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StorageError(err.errno or 0, (
                f"cannot create the anchorviz cache folder {path}: {err.strerror or err}. "
                "Set $ANCHORVIZ_CACHE to a writable folder")) from err
    return path


def cache_problem() -> str | None:
    """None when the cache root exists and is writable (or can be created); else a sentence
    saying where the cache would go, why it cannot, and how to set ``$ANCHORVIZ_CACHE``.
    Creates nothing."""
    path = _cache_root()
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_dir() and os.access(probe, os.W_OK | os.X_OK) and not _read_only_fs(probe):
        return None
    why = "read-only file system" if _read_only_fs(probe) else f"{probe} is not writable"
    return (f"the anchorviz cache would go in {path}, which cannot be written ({why}): models "
            "and datasets cannot be prepared there. Set $ANCHORVIZ_CACHE to a writable folder "
            "(e.g. export ANCHORVIZ_CACHE=/tmp/anchorviz-cache)")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def realdata_dir() -> Path | None:
    """``../shared/realdata`` beside the checkout (or ``$ANCHORVIZ_REALDATA``), if it exists."""
    env = os.environ.get("ANCHORVIZ_REALDATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared" / "realdata")
    for c in candidates:
        if c.is_dir():
            return c
    return None


# --------------------------------------------------------------------------- names -> paths

_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_MAX_COMPONENT = 128


def safe_component(name: str) -> str:
    """The one sanitiser for a name that becomes a single file or folder name (a target's
    short name, hence its split and capture file names ...).

    Any string maps to ``[A-Za-z0-9._-]`` characters with no ``..``, no leading ``.`` and at
    most 128 characters, so the result can never leave the folder it is joined to. Names that
    are already plain (``amazon``, ``_data_tgt.jsonl``) are returned unchanged; a name that had
    to be shortened keeps a hash of the original so two long names stay apart."""
    if not isinstance(name, str):
        raise TypeError(f"a name must be a string, got {type(name).__name__}")
    out = _UNSAFE_CHARS.sub("_", name)
    out = re.sub(r"\.{2,}", "_", out)
    if out.startswith("."):
        out = "_" + out[1:]
    if not out:
        out = "_"
    if len(out) > _MAX_COMPONENT:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        out = f"{out[:_MAX_COMPONENT - 13]}-{digest}"
    return out


def apply_umask(path: Path, mode: int = 0o777) -> None:
    """Give ``path`` the permissions a plain ``mkdir`` would have: ``tempfile.mkdtemp`` creates
    folders 0700, which a store or cache shared between users or machines cannot use."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, mode & ~mask)


# --------------------------------------------------------------------------- hashes, writes


def file_sha256(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in ``chunk``-sized blocks: the one file hash (run
    manifests, pinned downloads, fingerprints)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


class StorageError(OSError):
    """A write that the file system refused (``ENOSPC``, ``EDQUOT``, ``EROFS``): its message is a sentence naming the path and what was
    being written, and that nothing finished was lost."""

    def __str__(self) -> str:
        return str(self.strerror)


#: errors of the file system rather than of the data: room, quota, read-only
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
_ERRNO_WORDS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "the file system is read-only"}


_ERRNO_TEXTS = ((errno.ENOSPC, ("No space left on device", "os error 28")),
                (errno.EDQUOT, ("Disk quota exceeded", "os error 122")),
                (errno.EROFS, ("Read-only file system", "os error 30")))


def storage_errno(err: BaseException) -> int | None:
    """The storage errno (`STORAGE_ERRNOS`) behind ``err``: an `OSError`'s own, or, for the
    errors writers in other languages raise (safetensors' ``SafetensorError: ... No space left
    on device (os error 28)``), the one its message names; None for any other error."""
    for e in (err, err.__cause__, err.__context__):
        if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
            return e.errno
    text = str(err)
    for code, needles in _ERRNO_TEXTS:
        if any(n in text for n in needles):
            return code
    return None


def storage_error(err: BaseException, path: str | os.PathLike[str], what: str) -> BaseException:
    """``err`` as a `StorageError` naming ``path`` (the file or folder being written) and
    ``what`` (e.g. ``run teacher-ab12``) when it is a storage error (`STORAGE_ERRNOS`), else
    ``err`` unchanged. A `StorageError` already naming ``what`` passes through untouched."""
    if isinstance(err, StorageError):
        if what in str(err):
            return err
        out = StorageError(err.errno, f"{err.strerror} (part of {what})")
        out.filename = err.filename
        return out
    code = storage_errno(err)
    if code is None:
        return err
    where = getattr(err, "filename", None) or path
    out = StorageError(code, (
        f"{_ERRNO_WORDS[code]} while writing {what} ({where}): nothing already finished "
        "was lost; free space or choose a writable folder, then run the same command again to "
        "resume"))
    out.filename = str(where)
    return out


def write_atomic(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Write the file ``path`` whole or not at all: ``write(tmp)`` fills a temporary file beside
    it (``.<name>.<pid>.tmp``: the same folder, so the same file system, and one per process),
    which then replaces ``path`` in one rename. A reader sees the old file or the new one, never
    a half-written one; on an error the temporary is removed and ``path`` is left as it was. A
    full disk or read-only file system is a `StorageError` naming ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        apply_umask(tmp, 0o666)  # some writers (safetensors) create 0600: a plain file's mode
        os.replace(tmp, path)
    except Exception as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        out = storage_error(err, path, f"the file {path.name}")
        if out is err:
            raise
        raise out from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


# --------------------------------------------------------------------------- commands

#: in a folder ``anchorviz demo / run / sweep / analyse`` wrote to: one line per command that
#: wrote there, ``<UTC time>\t<command line>`` (the report's "made by")
COMMANDS_FILE = "commands.log"


def record_command(folder: str | os.PathLike[str], argv: list[str]) -> None:
    """Append ``anchorviz <argv>`` with the UTC time to ``folder/commands.log`` (created with the
    folder). A folder that cannot be written is logged and skipped: the command still runs
    (its own writes will say what is wrong)."""
    import shlex

    line = (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") + "\t"
            + shlex.join(["anchorviz", *argv]).replace("\n", " ") + "\n")
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with open(Path(folder) / COMMANDS_FILE, "a", encoding="utf-8") as f:
            f.write(line)
    except OSError as err:
        logging.getLogger(__name__).debug("cannot record the command in %s (%s)", folder, err)


def recorded_commands(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """``[(time, command line), ...]`` from ``folder/commands.log``, oldest first; [] when there
    is none (a folder made from Python, or by a version that did not record commands)."""
    try:
        text = (Path(folder) / COMMANDS_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        when, sep, cmd = line.partition("\t")
        if sep and cmd.strip():
            out.append((when.strip(), cmd.strip()))
    return out


# --------------------------------------------------------------------------- fingerprints

#: files up to this size are hashed whole even in the cheap form (no mtime in the fingerprint)
FULL_HASH_BELOW = 16 << 20
_SAMPLE_BLOCK = 1 << 16
_SAMPLES = 32
_FP_MEMO: dict[tuple, str] = {}


def full_fingerprints() -> bool:
    """True when ``$ANCHORVIZ_FINGERPRINT`` is ``full``: every local input is hashed whole."""
    return os.environ.get("ANCHORVIZ_FINGERPRINT", "").strip().lower() == "full"


def _file_fingerprint(path: Path, full: bool) -> str:
    st = path.stat()
    memo_key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, full)
    hit = _FP_MEMO.get(memo_key)
    if hit is not None:
        return hit
    if full or st.st_size <= FULL_HASH_BELOW:
        out = f"sha256:{file_sha256(path)}"
    else:  # size + mtime + evenly spaced blocks (first and last included)
        h = hashlib.sha256()
        step = (st.st_size - _SAMPLE_BLOCK) / (_SAMPLES - 1)
        with open(path, "rb") as f:
            for i in range(_SAMPLES):
                f.seek(int(i * step))
                h.update(f.read(_SAMPLE_BLOCK))
        out = f"sampled:{st.st_size}:{st.st_mtime_ns}:{h.hexdigest()}"
    _FP_MEMO[memo_key] = out
    return out


def fingerprint(path: str | os.PathLike[str], full: bool | None = None) -> str:
    """A content fingerprint of a local file or folder, for run keys (HF datasets style).

    Files up to 16 MiB: their sha256. Larger files, cheap form: size + modification time + the
    sha256 of 32 evenly spaced 64 KiB blocks (an edit in place changes the modification time;
    copying the file elsewhere does too, so the runs are redone); ``full=True`` (or
    ``$ANCHORVIZ_FINGERPRINT=full``): the sha256 of every byte, which is the same on every
    machine. A folder: the fingerprints of its files (hidden ones skipped) with their relative
    paths. Computed once per process per (file, size, mtime)."""
    if full is None:
        full = full_fingerprints()
    p = Path(path).expanduser()
    if p.is_file():
        return _file_fingerprint(p, full)
    if p.is_dir():
        h = hashlib.sha256()
        n = 0
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.startswith("."):
                    continue
                f = Path(root) / name
                if not f.is_file():
                    continue
                rel = f.relative_to(p).as_posix()
                h.update(f"{rel}\0{_file_fingerprint(f, full)}\n".encode("utf-8", "surrogatepass"))
                n += 1
        return f"dir:{n}:{h.hexdigest()}"
    raise FileNotFoundError(f"{p} does not exist: cannot fingerprint it")


def bars_off(progress: bool) -> bool:
    """Whether a progress bar stays hidden: asked off, or ``TQDM_DISABLE`` set (worker processes
    of a parallel sweep set it, so that only the parent draws progress lines)."""
    return not progress or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")


def write_yaml(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(obj, sort_keys=False))


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with the same key twice (PyYAML keeps the
    last one silently, so ``lr: 1e-3`` then ``lr: 1e-5`` would run with 1e-5 without a word)."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base' may be overridden
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: SafeLoader names it below
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r} (first given on line {first + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def read_yaml(path: Path) -> Any:
    """YAML through a safe loader only (a file from elsewhere cannot construct objects); a
    mapping with a duplicate key is an error, not "the last one wins"."""
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
