"""The command line: listing, a tiny run from YAML, report, and exit codes that mean something."""

from __future__ import annotations

import yaml
from tiny_project import tiny_config

from anchorviz.cli import EXIT_CONFIG, EXIT_OK, main


def test_datasets_and_models_list(capsys):
    assert main(["datasets"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "hh-rlhf-harmless" in out and "vader-movie" in out and "CC-BY-NC" in out.upper().replace("_", "-")
    assert main(["models"]) == EXIT_OK
    assert "minilm-l6" in capsys.readouterr().out


def test_run_and_report_from_yaml(tmp_path, capsys):
    cfg = tiny_config(tmp_path, **{"method.name": "anchor", "method.anchor_lambda": 1.0})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == EXIT_OK
    table = capsys.readouterr().out
    assert "anchor" in table and "teacher" in table
    assert main(["report", str(out)]) == EXIT_OK
    html = (out / "report.html").read_text()
    assert "plotly" in html and "Results" in html


def test_exit_codes(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.yaml")]) == EXIT_CONFIG
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: {name: anchor, anchor_lambda: -3}\n")
    assert main(["run", str(bad)]) == EXIT_CONFIG
    assert "anchor_lambda" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == EXIT_CONFIG


def test_demo_scenarios_and_bad_knobs_fail_before_any_work(tmp_path, capsys, monkeypatch):
    import pytest

    import anchorviz.experiment as ex
    from anchorviz.cli import SCENARIOS, demo_note, demo_sweep
    from anchorviz.experiment import ConfigError

    hidden = demo_sweep(scenario="hidden-cue").base.data
    assert hidden.artifact_teacher_visibility == SCENARIOS["hidden-cue"] < 1
    assert hidden.split_per_seed  # demo seeds vary the split as well as the training order
    assert demo_sweep(scenario="marker").base.data.artifact_teacher_visibility == 1.0
    assert demo_sweep(scenario="marker", visibility=0.25).base.data.artifact_teacher_visibility == 0.25
    assert "only 50% of the marked pairs" in demo_note(0.8, "absent", 0.5)
    assert "can read the marker on only" not in demo_note(0.8, "absent", 1.0)
    with pytest.raises(ConfigError, match="--scenario"):
        demo_sweep(scenario="nope")
    monkeypatch.setattr(ex, "sweep", lambda *a, **k: pytest.fail("no work may start"))
    assert main(["demo", "--visibility", "1.5", "--out", str(tmp_path / "d")]) == EXIT_CONFIG
    assert "artifact_teacher_visibility" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--jobs", "0"])
    assert "positive integer" in capsys.readouterr().err
