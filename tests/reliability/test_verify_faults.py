"""Reliability (issue 43, point 5): ``anchorviz verify`` covers everything the store holds.

Before: ``verify`` hashed the run folders only; a tampered ``reference_xy`` in the stored shared
projection (``shared/projection-*``) was caught only when the projection was loaded, and the
shared reference captures carried a ``DONE.json`` marker, no hashes. Now every shared folder
records the sha256 of its files when written (``HASHES.json``, `seal_shared`), ``verify``
hashes them, names the damaged file and exits 3, and a damaged reference capture is recomputed
instead of read.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tiny_project import tiny_config

from anchorviz.cli import EXIT_DATA, EXIT_OK, main
from anchorviz.pipeline.store import RunStore, seal_shared, verify_shared_dir


def _flip(path: Path, at: int = 200) -> None:
    with open(path, "r+b") as f:  # one byte, same size
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def test_verify_hashes_shared_folders_and_names_the_damaged_file(tmp_path, capsys):
    store = RunStore(tmp_path / "out")
    proj = store.shared_dir("projection-abc-6-pca-1500")
    (proj / "projection.safetensors").write_bytes(bytes(range(256)) * 8)
    (proj / "projection.json").write_text("{}")
    seal_shared(proj)
    old = store.shared_dir("reference-old")  # written before shared folders were hashed
    (old / "DONE.json").write_text("{}")
    assert main(["verify", str(tmp_path / "out")]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "1 shared folder(s) intact, 0 not, 1 without recorded hashes" in out, out
    assert "UNCHECKED shared/reference-old" in err
    _flip(proj / "projection.safetensors")
    assert verify_shared_dir(proj, full=False)[0] == "ok"  # sizes only: cannot see it
    assert main(["verify", str(tmp_path / "out")]) == EXIT_DATA
    err = capsys.readouterr().err
    assert ("BAD shared/projection-abc-6-pca-1500: file projection.safetensors does not match "
            "its sha256") in err, err
    (proj / "projection.json").unlink()
    assert verify_shared_dir(proj)[1] == "file projection.json is missing"


@pytest.mark.slow  # trains one tiny run
def test_a_run_folder_s_shared_captures_and_projection_are_verified(tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    monkeypatch.setattr("anchorviz.pipeline.steps._PROJECTORS", {})
    cfg = tiny_config(tmp_path)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == EXIT_OK
    shared = {d.name: d for d in (out / "shared").iterdir()}
    ref = next(d for n, d in shared.items() if n.startswith("reference-"))
    proj = next(d for n, d in shared.items() if n.startswith("projection-"))
    capsys.readouterr()
    assert main(["verify", str(out)]) == EXIT_OK
    assert "shared folder(s) intact, 0 not, 0 without" in capsys.readouterr().out
    _flip(proj / "projection.safetensors", at=-300 % (proj / "projection.safetensors")
          .stat().st_size)
    capture = sorted(ref.glob("*.safetensors"))[0]
    _flip(capture, at=capture.stat().st_size - 50)
    assert main(["verify", str(out)]) == EXIT_DATA
    err = capsys.readouterr().err
    assert f"BAD shared/{proj.name}: file projection.safetensors does not match" in err, err
    assert f"BAD shared/{ref.name}: file {capture.name} does not match" in err, err
    # the damaged capture is recomputed, not read, by the next run that needs it
    from anchorviz.pipeline.prepare import data_config, prepare_data
    from anchorviz.pipeline.steps import ensure_reference_capture

    ensure_reference_capture(RunStore(out), cfg, prepare_data(data_config(cfg)))
    assert verify_shared_dir(ref)[0] == "ok"
