"""Reliability, point 5: a listing never calls a zoo folder verified that it did not verify.

``anchorviz models`` checks sizes only and says when the contents were last verified;
``anchorviz models --verify`` hashes every file, and a byte flipped in a prepared folder (size
kept) is named there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anchorviz.cli import EXIT_DATA, EXIT_OK, main
from anchorviz.models import wheels, zoo
from anchorviz.models.convert import CONVERTERS


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """Preparing ``smollm2-135m`` writes a small fake folder (as in test_reliability_inputs)."""
    monkeypatch.setenv("ANCHORVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "_installed_files", lambda spec: None)

    def convert(entry, out):
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 64)
        (out / "config.json").write_text("{}")
        return {"verification": {"passed": True}}

    monkeypatch.setitem(CONVERTERS, "smollm2-135m", convert)
    return zoo.prepare_model("smollm2-135m")


def _block(out: str, name: str) -> str:
    """The lines of one model in a listing: its row and its indented detail lines."""
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(name + " "))
    j = i + 1
    while j < len(lines) and lines[j].startswith("    "):
        j += 1
    return " ".join(" ".join(lines[i:j]).split())


def _flip_a_byte(folder: Path) -> None:
    with open(folder / "model.safetensors", "r+b") as f:  # same size
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 0xFF]))


def test_the_listing_never_calls_an_unhashed_folder_verified(fake_zoo, capsys):
    _flip_a_byte(fake_zoo)
    rows = {r["name"]: r for r in zoo.list_models()}
    assert rows["smollm2-135m"]["verified"] is False  # sizes only: it cannot know
    assert rows["smollm2-135m"]["last_verified"]
    assert main(["models"]) == EXIT_OK
    out = capsys.readouterr().out
    block = _block(out, "smollm2-135m")
    assert "not verified since" in block and "--verify" in block, block
    assert "verified in the cache" not in out  # the old footnote's claim
    assert "verified just now" not in out


def test_models_verify_hashes_every_file_and_names_the_corrupt_one(fake_zoo, capsys):
    assert main(["models", "--verify"]) == EXIT_OK
    block = _block(capsys.readouterr().out, "smollm2-135m")
    assert block.split()[4] == "yes" and "verified just now" in block, block
    _flip_a_byte(fake_zoo)
    rows = {r["name"]: r for r in zoo.list_models(verify=True)}
    assert rows["smollm2-135m"]["verified"] is False and not rows["smollm2-135m"]["prepared"]
    assert main(["models", "--verify"]) == EXIT_DATA  # issue 43: an unusable entry is not exit 0
    block = _block(capsys.readouterr().out, "smollm2-135m")
    assert block.split()[4] == "no", block
    assert "model.safetensors" in block and "sha256" in block and "verified just" not in block
    assert zoo.prepare_model("smollm2-135m") == fake_zoo  # prepared again on first use
    assert zoo.list_models(verify=True)[2]["verified"] is True
