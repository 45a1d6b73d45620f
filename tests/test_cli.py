"""The command line: listing, a tiny run from YAML, report, and exit codes that mean something."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from builders import NON_UTF8, write_jsonl, write_yaml_text
from tiny_project import tiny_config

from anchorviz.cli import EXIT_CONFIG, EXIT_DATA, EXIT_OK, EXIT_OTHER, main


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

    from anchorviz.config import ConfigError
    from anchorviz.pipeline.demo import SCENARIOS, demo_note, demo_sweep

    hidden_sw = demo_sweep(scenario="hidden-cue")
    hidden = hidden_sw.base.data
    assert hidden.artifact_teacher_visibility == SCENARIOS["hidden-cue"] < 1
    assert hidden.split_per_seed  # demo seeds vary the split as well as the training order
    assert demo_sweep(scenario="marker").base.data.artifact_teacher_visibility == 1.0
    assert demo_sweep(scenario="marker", visibility=0.25).base.data.artifact_teacher_visibility == 0.25
    assert "only 50% of the marked pairs" in demo_note(0.8, "absent", 0.5)
    assert "can read the marker on only" not in demo_note(0.8, "absent", 1.0)
    # the drift-borne contrast: demo-echo.yaml laid over the demo's settings
    echo = demo_sweep(scenario="echo")
    e = echo.base.data
    assert (e.artifact_kind, e.artifact_teacher_form) == ("echo", "marker")
    assert e.artifact_teacher_visibility == SCENARIOS["echo"] == 0.75
    assert (echo.base.student_train.lr, echo.base.student_train.epochs) == (1e-4, 4.0)
    # the teacher as in the demo, in float32 (the arithmetic of the echo scenario's results)
    assert echo.base.teacher_train == demo_sweep(bf16=False).base.teacher_train
    assert not echo.base.student_train.bf16  # the echo file says false, whatever the CPU
    assert demo_sweep(scenario="echo", precision="bf16").base.student_train.bf16
    assert e.w2s_train == hidden.w2s_train and echo.anchor_lambdas == [1.0, 10.0]
    quick_echo = demo_sweep(scenario="echo", quick=True).base
    assert quick_echo.data.w2s_train == 300 and quick_echo.data.artifact_kind == "echo"
    from anchorviz.cli import demo_out

    assert [demo_out(sc, q) for sc, q in (("hidden-cue", False), ("marker", True), ("echo", False),
                                          ("echo", True))] == [
        "runs/demo", "runs/demo-quick", "runs/demo-echo", "runs/demo-echo-quick"]
    # one folder whatever the arithmetic: its runs of either are other settings, never pooled
    note = demo_note(0.8, "absent", 0.75, "echo", "marker")
    assert "drift-borne" in note and "75% of the marked pairs" in note
    with pytest.raises(ConfigError, match="--scenario"):
        demo_sweep(scenario="nope")
    monkeypatch.setattr("anchorviz.pipeline.sweep.sweep", lambda *a, **k: pytest.fail("no work may start"))
    assert main(["demo", "--visibility", "1.5", "--out", str(tmp_path / "d")]) == EXIT_CONFIG
    assert "artifact_teacher_visibility" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--jobs", "0"])
    assert "positive integer" in capsys.readouterr().err


# --------------------------------------------------------------------------- CLI exit codes on bad input


@pytest.fixture
def project_yaml(tmp_path: Path):
    """A valid run config over the tiny project, as a YAML file (with optional overrides)."""
    def make(name: str = "run.yaml", **overrides) -> Path:
        d = tiny_config(tmp_path).to_dict()
        for key, value in overrides.items():
            sec, k = key.split(".")
            d[sec][k] = value
        path = tmp_path / name
        path.write_text(yaml.safe_dump(d))
        return path
    return make


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def test_cli_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    cases = {
        "missing": (tmp_path / "missing.yaml", "does not exist"),
        "syntax": (write_yaml_text(tmp_path, "data: [1,\n", "s.yaml"), "not valid YAML"),
        "python tag": (write_yaml_text(tmp_path, f"!!python/object/apply:os.system ['touch "
                                                 f"{marker}']\n", "p.yaml"), "not valid YAML"),
        "unknown key": (write_yaml_text(tmp_path, "sede: 1\n", "u.yaml"), "unknown key"),
        "nan lr": (write_yaml_text(tmp_path, "student_train: {lr: .nan}\n", "n.yaml"), "lr=nan"),
    }
    for name, (path, match) in cases.items():
        for cmd in ("run", "sweep"):
            if cmd == "sweep" and name in ("unknown key", "nan lr"):
                continue
            code, err = _cli([cmd, str(path), "--out", str(tmp_path / "out")], capsys)
            assert code == EXIT_CONFIG, (name, cmd, err)
            assert "error: " in err and match in err, (name, err)
            assert "Traceback" not in err
    assert not marker.exists()
    sweep_bad = write_yaml_text(tmp_path, "grid: {anchor_lambdas: [-1]}\n", "g.yaml")
    code, err = _cli(["sweep", str(sweep_bad), "--out", str(tmp_path / "out")], capsys)
    assert code == EXIT_CONFIG and "anchor_lambdas" in err
    code, err = _cli(["report", str(tmp_path / "nowhere")], capsys)
    assert code == EXIT_CONFIG and "does not exist" in err
    with pytest.raises(SystemExit) as ei:
        main(["frobnicate"])
    assert ei.value.code == 2


def test_cli_data_errors_exit_3(tmp_path: Path, project_yaml,
                                capsys: pytest.CaptureFixture[str]) -> None:
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(NON_UTF8 * 3)
    empty = write_jsonl(tmp_path / "empty_resp.jsonl",
                        [{"prompt": f"p{i}", "chosen": " ", "rejected": "b"} for i in range(5)])
    cases = {
        "missing data": (project_yaml("a.yaml", **{"data.source": str(tmp_path / "nope.jsonl")}),
                         "no such file or directory"),
        "non-utf8 data": (project_yaml("b.yaml", **{"data.source": str(latin1)}),
                          "not valid UTF-8 at byte offset"),
        "all responses empty": (project_yaml("c.yaml", **{"data.source": str(empty)}),
                                "only 0 pairs"),
    }
    for name, (path, match) in cases.items():
        code, err = _cli(["run", str(path), "--out", str(tmp_path / f"out-{name[:4]}")], capsys)
        assert code == EXIT_DATA, (name, err)
        assert match in err and "Traceback" not in err, (name, err)
    # a missing model folder is caught by config validation, naming the key, before any work
    path = project_yaml("d.yaml", **{"models.teacher": str(tmp_path / "nomodel")})
    code, err = _cli(["run", str(path), "--out", str(tmp_path / "out-d")], capsys)
    assert code == EXIT_CONFIG and "models.teacher" in err and "does not exist" in err, err
    assert not (tmp_path / "out-d" / "runs").exists() or not any((tmp_path / "out-d" / "runs").iterdir())


def test_cli_out_is_a_file_exits_1_with_a_message(tmp_path: Path, project_yaml,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a_file"
    out.write_text("not a folder")
    code, err = _cli(["run", str(project_yaml()), "--out", str(out)], capsys)
    last = err.strip().splitlines()[-1]
    assert code == EXIT_OTHER and last.startswith("error: ") and "Not a directory" in last
    assert "Traceback" not in err


def test_out_of_range_anchor_layer_fails_the_run_with_a_named_error(
        tmp_path: Path, project_yaml, capsys: pytest.CaptureFixture[str]) -> None:
    path = project_yaml(**{"method.name": "anchor", "method.anchor_lambda": 1.0,
                           "method.anchor_layers": "0,9"})
    code, err = _cli(["run", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == EXIT_CONFIG
    # checked at validation, before any training, naming the field (issue 30)
    assert "method.anchor_layers '0,9': layer 9 is outside the student" in err
    assert "hidden states are 0 (embeddings) .. 2" in err
    assert not (tmp_path / "out" / "runs").exists() or not any((tmp_path / "out" / "runs").iterdir())
