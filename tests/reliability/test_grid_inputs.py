"""Nothing half-said about a sweep's grid: the report names every run the grid expects that is
missing or unreadable, and the console table after an input edit shows only the current runs."""

from __future__ import annotations

import shutil

import pytest
import yaml
from tiny_project import tiny_config, write_pairs

from anchorviz.cli import EXIT_OK, main
from anchorviz.pipeline.expected import expected_runs
from anchorviz.viz.report import write_report

GRID = {"methods": ["naive"], "anchor_lambdas": [1.0], "anchor_layers": ["last"], "seeds": [0]}


@pytest.fixture
def swept(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    monkeypatch.setattr("anchorviz.pipeline.steps._PROJECTORS", {})
    cfg = tiny_config(tmp_path)
    sweep_yaml = tmp_path / "sweep.yaml"
    sweep_yaml.write_text(yaml.safe_dump({"base": cfg.to_dict(), "grid": GRID}, sort_keys=False))
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_yaml), "--out", str(out), "--jobs", "1"]) == EXIT_OK
    capsys.readouterr()
    return tmp_path, sweep_yaml, out


@pytest.mark.slow  # trains a tiny sweep (teacher, ceiling, student)
def test_report_names_deleted_runs_of_the_grid(swept):
    _, _, out = swept
    want = expected_runs(out)
    assert want and sorted(want.values()) == ["ceiling", "student", "teacher"]
    teacher = next(r for r, k in want.items() if k == "teacher")
    student = next(r for r, k in want.items() if k == "student")
    shutil.rmtree(out / "runs" / student)
    html = write_report(out).read_text()
    assert "missing-runs" in html and student in html and "student: missing" in html
    shutil.rmtree(out / "runs" / teacher)
    html = write_report(out).read_text()
    assert teacher in html and student in html and "teacher: missing" in html


@pytest.mark.slow  # trains a tiny sweep twice
def test_after_an_input_edit_the_console_table_shows_only_the_current_runs(swept, capsys,
                                                                         monkeypatch):
    tmp_path, sweep_yaml, out = swept
    monkeypatch.setattr("anchorviz.pipeline.prepare._DATA_CACHE", {})
    write_pairs(tmp_path / "data" / "tgt.jsonl", 40, seed=6, domain="book")  # new run ids
    assert main(["sweep", str(sweep_yaml), "--out", str(out), "--jobs", "1"]) == EXIT_OK
    text = capsys.readouterr().out
    table = [line for line in text.splitlines() if line.strip().startswith(("naive", "ceiling",
                                                                           "teacher"))]
    assert len(table) == 3, text  # teacher, ceiling, naive of the current grid only
    assert "older row(s)" in text, text
