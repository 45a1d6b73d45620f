"""Reliability (issue 43, point 4): one store, several grids.

Before: two sweeps with different grids on one ``--out`` both finished, but ``sweep.yaml`` was
last-writer-wins (and written in place): a later report knew only the last grid, so a run of
the first grid that went missing raised no notice (the cause of the report that printed no
missing-runs notice during two sweeps), and the console table called the first grid's rows
"older rows". An ``anchorviz run`` folder recorded no grid at all: a deleted run went unnoticed.

Now every sweep and run records its own grid file (``grids/<kind>-<hash>.yaml``); the report
names the missing runs of every grid, says that it shows the runs of every grid and lists each
grid's runs; the console says "another grid", not "older".
"""

from __future__ import annotations

import shutil

import pytest
import yaml
from tiny_project import tiny_config

from anchorviz.cli import EXIT_OK, main
from anchorviz.pipeline.expected import grids, missing_runs
from anchorviz.viz.report import write_report

GRID_A = {"methods": ["naive"], "anchor_lambdas": [1.0], "anchor_layers": ["last"],
          "seeds": [0]}
GRID_B = {"methods": ["anchor"], "anchor_lambdas": [1.0], "anchor_layers": ["last"],
          "seeds": [0]}


@pytest.fixture
def two_grids(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    monkeypatch.setattr("anchorviz.pipeline.steps._PROJECTORS", {})
    cfg = tiny_config(tmp_path)
    files = {}
    for name, grid in (("a", GRID_A), ("b", GRID_B)):
        files[name] = tmp_path / f"sweep_{name}.yaml"
        files[name].write_text(yaml.safe_dump({"base": cfg.to_dict(), "grid": grid},
                                              sort_keys=False))
    out = tmp_path / "out"
    assert main(["sweep", str(files["a"]), "--out", str(out), "--jobs", "1"]) == EXIT_OK
    capsys.readouterr()
    assert main(["sweep", str(files["b"]), "--out", str(out), "--jobs", "1"]) == EXIT_OK
    return out, capsys.readouterr().out


@pytest.mark.slow  # trains a tiny sweep, then a second grid sharing its teacher and ceiling
def test_two_grids_on_one_folder_are_recorded_side_by_side(two_grids):
    out, console = two_grids
    found = grids(out)
    assert [g.kind for g in found] == ["sweep", "sweep"] and len({g.id for g in found}) == 2
    kinds = [sorted(g.run_ids.values()) for g in found]
    assert kinds == [["ceiling", "student", "teacher"]] * 2
    naive = next(r for r in found[0].run_ids if r.startswith("naive"))
    anchor = next(r for r in found[1].run_ids if r.startswith("anchor"))
    # the console after the second sweep: the first grid's row is another grid's, not older
    assert "older row(s)" not in console, console
    assert "1 row(s) of another grid on this folder, sweep grid" in console, console
    # the report: both grids named with their runs, shown, nothing missing
    html = write_report(out).read_text()
    assert "id='grids'" in html and "holds the runs of 2 grids" in html
    assert naive in html and anchor in html and "missing-runs" not in html
    # a finished run of the FIRST grid deleted: the report names it (before: no notice, the
    # last sweep.yaml was the second grid, all of whose runs were there)
    shutil.rmtree(out / "runs" / naive)
    assert missing_runs(out) == {naive: f"student: missing (no finished run folder) "
                                        f"[{found[0].label}]"}
    html = write_report(out).read_text()
    assert "missing-runs" in html and naive in html and "student: missing" in html
    # a half-written sweep.yaml (as the old in-place write could leave it for a reader) does
    # not hide the notice: the grid files are read
    (out / "sweep.yaml").write_text((out / "sweep.yaml").read_text()[:40])
    assert naive in missing_runs(out)


@pytest.mark.slow  # trains one tiny run
def test_a_run_folder_names_its_missing_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    monkeypatch.setattr("anchorviz.pipeline.steps._PROJECTORS", {})
    cfg = tiny_config(tmp_path)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == EXIT_OK
    assert not (out / "sweep.yaml").exists()
    (grid,) = grids(out)
    assert grid.kind == "run" and sorted(grid.run_ids.values()) == ["ceiling", "student",
                                                                     "teacher"]
    student = next(r for r, k in grid.run_ids.items() if k == "student")
    shutil.rmtree(out / "runs" / student)
    capsys.readouterr()
    assert main(["report", str(out)]) == EXIT_OK
    html = (out / "report.html").read_text()
    assert "missing-runs" in html and student in html and "student: missing" in html
