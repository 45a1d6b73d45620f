"""Issue 19.2: results follow their inputs. Local data files and model folders carry a content
fingerprint in the run key (named datasets and zoo models do not: their run ids are unchanged),
and a zoo folder whose bytes changed is detected by its recorded sha256, not by its sizes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tiny_project import save_tiny_model, tiny_config

from anchorviz import paths
from anchorviz.config import RunConfig
from anchorviz.models import zoo
from anchorviz.models.convert import CONVERTERS
from anchorviz.pipeline.demo import demo_sweep
from anchorviz.pipeline.keys import (
    local_inputs,
    reference_key,
    run_id_for,
    student_key,
    teacher_key,
)
from anchorviz.pipeline.prepare import _DATA_CACHE
from anchorviz.pipeline.results import results_table
from anchorviz.pipeline.sweep import run
from anchorviz.sweep_config import expand_sweep


def _invert_labels(path: Path) -> None:
    """Swap chosen and rejected on every line, in place (same size)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    before = path.stat().st_size
    with open(path, "w") as f:
        for r in rows:
            r["chosen"], r["rejected"] = r["rejected"], r["chosen"]
            f.write(json.dumps(r) + "\n")
    assert path.stat().st_size == before


def test_inverting_the_labels_of_a_local_data_file_in_place_retrains(tmp_path, count_training):
    cfg = tiny_config(tmp_path)
    out = tmp_path / "out"
    first = {r.kind: r for r in run(cfg, out, progress=False)}
    assert len(count_training) == 3
    _invert_labels(Path(cfg.data.source))
    # this process's prepared-data cache is keyed by the config, not by the file's content
    _DATA_CACHE.clear()
    second = {r.kind: r for r in run(cfg, out, progress=False)}
    assert len(count_training) == 6  # teacher, ceiling and student all trained again
    for kind in ("teacher", "ceiling", "student"):
        assert second[kind].computed and second[kind].run_id != first[kind].run_id
    key = teacher_key(cfg)
    assert key["inputs"][cfg.data.source].startswith("sha256:")
    # both generations stay in the store; the table tells them apart by the fingerprint
    table = results_table(out)
    assert len(table) == 6
    col = f"cfg.inputs.{cfg.data.source}"
    assert col in table.columns and table[col].nunique() == 2


def test_a_changed_local_model_folder_changes_the_keys_that_use_it(tmp_path):
    cfg = tiny_config(tmp_path)
    t, s, r = teacher_key(cfg), student_key(cfg, "student"), reference_key(cfg)
    save_tiny_model(Path(cfg.models.student), layers=2, seed=9)  # other weights, same place
    assert teacher_key(cfg) == t  # the teacher does not read the student's folder
    assert run_id_for(student_key(cfg, "student")) != run_id_for(s)
    assert reference_key(cfg) != r


def test_named_datasets_and_zoo_models_add_nothing_to_the_key():
    for cfg in expand_sweep(demo_sweep(seeds=(0, 1))):
        for key in (teacher_key(cfg), student_key(cfg, "student"),
                    student_key(cfg, "ceiling"), reference_key(cfg)):
            assert "inputs" not in key and "inputs" not in key.get("teacher", {})
    assert local_inputs(RunConfig(), "minilm-l6") == {}


def test_fingerprints_cheap_and_full(tmp_path, monkeypatch):
    small = tmp_path / "small.jsonl"
    small.write_text("abc\n")
    fp = paths.fingerprint(small)
    assert fp.startswith("sha256:")
    os.utime(small, ns=(1, 1))  # a touch alone does not change a small file's fingerprint
    assert paths.fingerprint(small) == fp
    monkeypatch.setattr(paths, "FULL_HASH_BELOW", 1024)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(300_000))
    cheap = paths.fingerprint(big)
    assert cheap.startswith(f"sampled:{300_000}:")
    with open(big, "r+b") as f:  # 4 bytes changed in place
        f.seek(150_001)
        f.write(b"\x00\x01\x02\x03")
    assert paths.fingerprint(big) != cheap  # size + mtime + sampled blocks
    full = paths.fingerprint(big, full=True)
    assert full.startswith("sha256:")
    monkeypatch.setenv("ANCHORVIZ_FINGERPRINT", "full")
    assert paths.fingerprint(big) == full
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("1")
    (folder / ".hidden").write_text("ignored")
    fd = paths.fingerprint(folder)
    (folder / ".hidden").write_text("still ignored")
    assert paths.fingerprint(folder) == fd
    (folder / "a.txt").write_text("2")
    assert paths.fingerprint(folder) != fd
    with pytest.raises(FileNotFoundError):
        paths.fingerprint(tmp_path / "missing")


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """An isolated cache where preparing ``smollm2-135m`` writes a small fake folder."""
    monkeypatch.setenv("ANCHORVIZ_CACHE", str(tmp_path / "cache"))
    built = []

    def convert(entry, out):
        built.append(entry.name)
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 64)
        (out / "config.json").write_text("{}")
        return {"verification": {"passed": True}}

    monkeypatch.setitem(CONVERTERS, "smollm2-135m", convert)
    return built


def test_a_zoo_folder_with_four_bytes_overwritten_is_detected_and_prepared_again(fake_zoo):
    folder = zoo.prepare_model("smollm2-135m")
    assert zoo.is_prepared("smollm2-135m") and fake_zoo == ["smollm2-135m"]
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as f:  # same size: a size check cannot see it
        f.seek(1000)
        f.write(b"\xff\xff\x7f\x7f")  # float32 3.4e38 at offset 1000
    assert not zoo.is_prepared("smollm2-135m")
    assert zoo.is_prepared("smollm2-135m", content=False)  # what a size check would say
    meta = zoo.read_meta(folder)
    assert set(meta["file_sha256"]) == set(meta["files"]) == {"model.safetensors", "config.json"}
    assert zoo.prepare_model("smollm2-135m") == folder
    assert fake_zoo == ["smollm2-135m", "smollm2-135m"]  # prepared again from its source
    assert weights.read_bytes() == bytes(range(256)) * 64


def test_a_zoo_folder_prepared_before_hashes_were_recorded_gets_them_once(fake_zoo):
    folder = zoo.prepare_model("smollm2-135m")
    meta = zoo.read_meta(folder)
    del meta["file_sha256"]
    (folder / zoo.META_FILE).write_text(json.dumps(meta))
    assert not zoo.is_prepared("smollm2-135m")
    assert zoo.prepare_model("smollm2-135m") == folder
    assert fake_zoo == ["smollm2-135m"]  # not converted again: the hashes were recorded
    assert "file_sha256" in zoo.read_meta(folder) and zoo.is_prepared("smollm2-135m")
