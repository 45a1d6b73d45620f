"""Issue 19.6: fetching the VADER sdist runs nothing of the package before (or after) its sha256
matched. A local package index serves a fake ``vaderSentiment-3.3.2.tar.gz`` whose in-tree
build backend writes a marker file when imported, as ``pip download`` would (it prepares the
metadata of an sdist, i.e. runs its build code): the download must fail on the hash and the
marker must not exist.

And nothing in the package deserialises untrusted bytes or runs remote code: a grep of its
source (strings and comments blanked) for pickle loads, torch.load without weights_only, unsafe
YAML loaders, hard-coded trust_remote_code=True, eval/exec and shell=True."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import re
import tarfile
import threading
import tokenize
from pathlib import Path

import numpy as np
import pytest

import anchorviz
from anchorviz.data import vader
from anchorviz.data.vader import (
    VADER_SDIST_NAME,
    VADER_SDIST_SHA256,
    VaderDataError,
    ensure_vader_sdist,
)
from anchorviz.paths import file_sha256


def _fake_sdist(path: Path, marker: Path) -> Path:
    root = "vaderSentiment-3.3.2"
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                          'backend-path = ["."]\n',
        "backend.py": (
            f"open({str(marker)!r}, 'w').write('the package ran code')\n"
            "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
            "def prepare_metadata_for_build_wheel(d, config_settings=None):\n"
            "    import os\n    p = os.path.join(d, 'vaderSentiment-3.3.2.dist-info')\n"
            "    os.makedirs(p)\n    open(os.path.join(p, 'METADATA'), 'w').write("
            "'Metadata-Version: 2.1\\nName: vaderSentiment\\nVersion: 3.3.2\\n')\n"
            "    return 'vaderSentiment-3.3.2.dist-info'\n"),
        "setup.py": f"open({str(marker)!r}, 'w').write('setup.py ran')\n",
        "PKG-INFO": "Metadata-Version: 2.1\nName: vaderSentiment\nVersion: 3.3.2\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def index(tmp_path, monkeypatch):
    """``serve(sdist, json_hash=None)`` -> the URL of a local simple index (PEP 503 HTML, or
    PEP 691 JSON listing ``json_hash``) serving ``sdist`` as vaderSentiment 3.3.2; the cache is
    isolated and pip / anchorviz are pointed at the index."""
    monkeypatch.setenv("ANCHORVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ANCHORVIZ_OFFLINE", raising=False)
    monkeypatch.delenv("ANCHORVIZ_INDEX_URL", raising=False)
    servers = []

    def serve(sdist: Path, json_hash: str | None = None) -> str:
        root = tmp_path / f"index{len(servers)}"
        (root / "files").mkdir(parents=True)
        (root / "files" / VADER_SDIST_NAME).write_bytes(sdist.read_bytes())
        page = root / "simple" / "vadersentiment"
        page.mkdir(parents=True)
        if json_hash is None:
            (page / "index.html").write_text(
                f'<html><body><a href="../../files/{VADER_SDIST_NAME}">{VADER_SDIST_NAME}</a>'
                "</body></html>")
        else:  # SimpleHTTPRequestHandler serves index.json as application/json
            (page / "index.json").write_text(json.dumps({"files": [{
                "filename": VADER_SDIST_NAME, "url": f"../../files/{VADER_SDIST_NAME}",
                "hashes": {"sha256": json_hash}}]}))

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def send_head(self):
                if json_hash is not None and self.path.rstrip("/").endswith("vadersentiment"):
                    self.path = self.path.rstrip("/") + "/index.json"
                return super().send_head()

        srv = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        url = f"http://127.0.0.1:{srv.server_address[1]}/simple"
        monkeypatch.setenv("PIP_INDEX_URL", url)  # what pip download would read, too
        return url

    yield serve
    for srv in servers:
        srv.shutdown()


def test_a_fake_sdist_is_refused_on_its_hash_and_none_of_its_code_runs(tmp_path, index):
    marker = tmp_path / "ran"
    index(_fake_sdist(tmp_path / "fake.tar.gz", marker))
    with pytest.raises(VaderDataError, match=f"has sha256 .*, expected {VADER_SDIST_SHA256}"):
        ensure_vader_sdist(download=True)
    assert not marker.exists(), "code of the downloaded package ran"
    folder = vader.vader_cache_dir()
    assert not (folder / VADER_SDIST_NAME).exists()
    assert not list(folder.glob(".download-*"))


def test_an_index_listing_another_hash_is_refused_before_downloading(tmp_path, index):
    marker = tmp_path / "ran"
    fake = _fake_sdist(tmp_path / "fake.tar.gz", marker)
    index(fake, json_hash=hashlib.sha256(fake.read_bytes()).hexdigest())
    with pytest.raises(VaderDataError, match="lists .* with sha256 .*not downloaded"):
        ensure_vader_sdist(download=True)
    assert not marker.exists()


@pytest.fixture(scope="module")
def genuine_sdist(tmp_path_factory) -> Path:
    """The real vaderSentiment 3.3.2 sdist: from the cache when it is there, else downloaded from
    the package index into a temporary cache (the same verified path users take)."""
    cached = vader.vader_cache_dir() / VADER_SDIST_NAME
    if cached.is_file() and file_sha256(cached) == VADER_SDIST_SHA256:
        return cached
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANCHORVIZ_CACHE", str(tmp_path_factory.mktemp("genuine-cache")))
        try:
            return ensure_vader_sdist(download=True)
        except VaderDataError as err:  # no route to the package index from this machine
            pytest.skip(f"the genuine sdist is neither cached nor downloadable here: {err}")


@pytest.mark.parametrize("as_json", [False, True], ids=["pep503-html", "pep691-json"])
def test_the_genuine_sdist_is_downloaded_verified_and_cached(tmp_path, genuine_sdist, index,
                                                             as_json):
    index(genuine_sdist, json_hash=VADER_SDIST_SHA256 if as_json else None)
    got = ensure_vader_sdist(download=True)
    assert got == vader.vader_cache_dir() / VADER_SDIST_NAME
    assert file_sha256(got) == VADER_SDIST_SHA256


def test_no_pip_and_no_subprocess_in_the_download_path():
    import inspect

    src = inspect.getsource(vader)
    assert "subprocess" not in src and "sys.executable" not in src  # no pip is ever started


# --------------------------------------------------------------------------- no unsafe deserialisation or remote code in the package


PACKAGE = Path(anchorviz.__file__).parent


def _code_without_strings_and_comments(path: Path) -> str:
    """The source with every string literal and comment blanked (docstrings may name APIs)."""
    src = path.read_text(encoding="utf-8")
    lines = src.splitlines(keepends=True)
    offsets = np.cumsum([0] + [len(x) for x in lines])
    chars = list(src)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            a = offsets[tok.start[0] - 1] + tok.start[1]
            b = offsets[tok.end[0] - 1] + tok.end[1]
            for i in range(a, b):
                if chars[i] != "\n":
                    chars[i] = " "
    return "".join(chars)


FORBIDDEN = {
    "pickle / dill / joblib loads": r"\b(c?pickle|dill|cloudpickle|joblib)\s*\.\s*loads?\s*\(",
    "torch.load without weights_only=True": r"torch\s*\.\s*load\s*\((?![^)]*weights_only\s*=\s*True)",
    "torch.save (pickles)": r"torch\s*\.\s*save\s*\(",
    # paths._StrictLoader is a SafeLoader subclass (checked below) that refuses duplicate keys
    "yaml.load without a safe loader":
        r"yaml\s*\.\s*load\s*\((?![^)]*Loader\s*=\s*((yaml\.)?C?SafeLoader|_StrictLoader)\b)",
    "yaml.unsafe_load / full_load": r"yaml\s*\.\s*(unsafe_load|full_load|load_all)\s*\(",
    "hard-coded trust_remote_code=True": r"trust_remote_code\s*=\s*True",
    "numpy allow_pickle=True": r"allow_pickle\s*=\s*True",
    "pandas read_pickle": r"read_pickle\s*\(",
    "eval / exec": r"(?<![\w.])(eval|exec)\s*\(",
    "shell=True": r"shell\s*=\s*True",
}


def test_no_unsafe_deserialisation_or_remote_code_in_the_package() -> None:
    import yaml

    from anchorviz.paths import _StrictLoader

    assert issubclass(_StrictLoader, yaml.SafeLoader)
    assert _StrictLoader.yaml_constructors.get("tag:yaml.org,2002:python/object/apply") is None
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 10
    hits = []
    for path in files:
        code = _code_without_strings_and_comments(path)
        for what, rx in FORBIDDEN.items():
            for m in re.finditer(rx, code):
                line = code.count("\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert hits == []


def test_the_grep_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('"""torch.load(x) in a docstring is fine"""\nimport torch, yaml, pickle\n'
                   "a = torch.load(p)\nb = yaml.load(s)\nc = pickle.loads(d)\n"
                   "m = f(trust_remote_code=True)\nok = torch.load(p, weights_only=True)\n"
                   "ok2 = yaml.load(s, Loader=yaml.SafeLoader)\n")
    code = _code_without_strings_and_comments(bad)
    found = {what for what, rx in FORBIDDEN.items() if re.search(rx, code)}
    assert found == {"torch.load without weights_only=True", "yaml.load without a safe loader",
                     "pickle / dill / joblib loads", "hard-coded trust_remote_code=True"}
