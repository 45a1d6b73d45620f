"""A command line that fits habits (issue 21.5): --set overrides, -v anywhere, model names and
demo knobs checked before any work, listings with headers, short names of local targets, quiet
model loading, and a sweep bar that counts every kind of node with an overall ETA."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from tiny_project import save_tiny_model, tiny_config

from anchorviz.cli import EXIT_CONFIG, EXIT_OK, build_parser, main
from anchorviz.config import ConfigError, RunConfig, with_overrides
from anchorviz.data.entries import target_name
from anchorviz.pipeline.demo import demo_sweep
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.sweep_config import expand_sweep


def _no_work(monkeypatch, seen: dict | None = None):
    def fake_run(cfg, out, **kw):
        if seen is None:
            pytest.fail("no work may start")
        seen["cfg"] = cfg

    def fake_sweep(sw, out, **kw):
        if seen is None:
            pytest.fail("no work may start")
        seen["sweep"] = sw
        return pd.DataFrame({"method": []})

    monkeypatch.setattr("anchorviz.pipeline.sweep.run", fake_run)
    monkeypatch.setattr("anchorviz.pipeline.sweep.sweep", fake_sweep)
    monkeypatch.setattr("anchorviz.pipeline.results.results_table", lambda out: pd.DataFrame({"method": []}))


def _write(path, data):
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_set_overrides_a_run_config_with_yaml_values(tmp_path, monkeypatch):
    seen: dict = {}
    _no_work(monkeypatch, seen)
    cfg = _write(tmp_path / "run.yaml", {"method": {"name": "anchor"}})
    assert main(["run", cfg, "--out", str(tmp_path / "o"), "--set", "method.anchor_lambda=0.3",
                 "--set", "data.targets=[vader-nyt, vader-tweets]", "--set",
                 "student_train.lr=1e-4", "--set", "ceiling=false", "-v"]) == EXIT_OK
    c = seen["cfg"]
    assert c.method.name == "anchor" and c.method.anchor_lambda == 0.3
    assert c.data.targets == ["vader-nyt", "vader-tweets"]
    assert c.student_train.lr == 1e-4 and c.ceiling is False


@pytest.mark.parametrize("item, words", [
    ("method.anchor_lamda=1", ["method.anchor_lamda", "'anchor_lamda'", "method.anchor_lambda"]),
    ("nosuch.key=1", ["nosuch.key", "'nosuch'"]),
    ("data.max_length.x=1", ["data.max_length.x", "is a value"]),
    ("method.anchor_lambda", ["key=value"]),
    ("method.anchor_lambda=[1", ["not valid YAML"]),
    ("method.anchor_lambda=-1", ["anchor_lambda must be"]),
])
def test_set_errors_name_the_key(tmp_path, monkeypatch, capsys, item, words):
    _no_work(monkeypatch)
    cfg = _write(tmp_path / "run.yaml", {})
    assert main(["run", cfg, "--set", item]) == EXIT_CONFIG
    err = capsys.readouterr().err
    for w in words:
        assert w in err, err


def test_set_on_a_sweep_changes_the_base_and_the_grid(tmp_path, monkeypatch, capsys):
    seen: dict = {}
    _no_work(monkeypatch, seen)
    sw = _write(tmp_path / "sweep.yaml", {"base": {"data": {"teacher_train": 100}},
                                         "grid": {"methods": ["naive"], "seeds": [0]}})
    assert main(["sweep", sw, "--out", str(tmp_path / "o"), "--set", "data.val=77",
                 "--set", "base.student_train.epochs=1", "--set", "grid.seeds=[0, 1, 2]"]) == EXIT_OK
    got = seen["sweep"]
    assert got.base.data.val == 77 and got.base.data.teacher_train == 100
    assert got.base.student_train.epochs == 1 and got.seeds == [0, 1, 2]
    assert got.methods == ["naive"]
    assert main(["sweep", sw, "--set", "grid.sedes=[1]"]) == EXIT_CONFIG
    assert "grid.sedes" in capsys.readouterr().err


def test_verbose_after_the_subcommand():
    p = build_parser()
    assert p.parse_args(["models"]).verbose is False
    assert p.parse_args(["-v", "models"]).verbose is True
    assert p.parse_args(["models", "-v"]).verbose is True
    assert p.parse_args(["sweep", "s.yaml", "--verbose"]).verbose is True


@pytest.mark.parametrize("name, words", [
    ("minilm_l6", ["models.student", "Did you mean 'minilm-l6'"]),
    ("/no/such/folder", ["models.student", "does not exist"]),
    ("a/b/c", ["models.student", "hub id"]),
])
def test_an_unknown_student_fails_before_the_teacher_trains(tmp_path, monkeypatch, capsys, name,
                                                            words):
    _no_work(monkeypatch)
    cfg = _write(tmp_path / "run.yaml", {"models": {"student": name}})
    assert main(["run", cfg]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert main(["run", _write(tmp_path / "ok.yaml", {}), "--set",
                 f"models.teacher={name}"]) == EXIT_CONFIG


def test_model_names_accepted(tmp_path):
    base = RunConfig().validate()
    folder = save_tiny_model(tmp_path / "m", layers=1)
    for name in ("minilm-l3", "smollm2-135m", "Qwen/Qwen2.5-0.5B", str(folder)):
        with_overrides(base, **{"models.student": name})
    with pytest.raises(ConfigError, match="is a file"):
        with_overrides(base, **{"models.student": str(folder / "config.json")})


def test_demo_rejects_bad_knobs_before_its_banner(tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    for args in (["--strength", "1.5"], ["--strength", "-0.1"], ["--visibility", "2"],
                 ["--seeds", "-1"]):
        assert main(["demo", "--out", str(tmp_path / "d"), *args]) == EXIT_CONFIG
        cap = capsys.readouterr()
        assert cap.out == "" and cap.err.startswith("error: "), (args, cap)


def test_listings_have_headers_paths_and_cached_status(capsys):
    assert main(["models"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "LAYERS", "LICENCE", "CACHED"]
    i = next(i for i, line in enumerate(lines) if line.startswith("minilm-l6 "))
    assert lines[i].split()[-1] in ("yes", "no")
    path = next(line for line in lines[i + 1:] if line.strip().startswith("path: "))
    assert "minilm-l6" in path
    assert main(["datasets"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "CATEGORY", "LICENCE", "ADAPTER", "CACHED"]
    assert any("hub id: " in line and "local path: " in line for line in lines)
    assert any(line.startswith("vader-amazon ") for line in lines)
    assert "nan" not in " ".join(lines)
    from anchorviz.data.readers import list_datasets

    t = list_datasets(local=True)
    assert {"cached", "local_path"} <= set(t.columns)
    assert t["cached"].map(type).eq(bool).all()


def test_local_targets_get_short_names(tmp_path):
    assert target_name("vader-amazon") == "amazon"
    assert target_name("/data/books.jsonl") == "books"
    assert target_name("./x/reviews.csv.gz") == "reviews"
    assert target_name({"path": "/data/t.jsonl", "name": "forum"}) == "forum"
    assert target_name({"path": "/data/t.parquet"}) == "t"
    assert target_name("org/name") == "org_name"  # a hub id
    cfg = tiny_config(tmp_path)
    data = prepare_data(data_config(cfg))
    assert "target_test:tgt" in data
    # two files with one stem: the config says to name one
    other = tmp_path / "other"
    other.mkdir()
    (other / "tgt.jsonl").write_text(open(cfg.data.targets[0]).read())
    with pytest.raises(ConfigError, match="name"):
        with_overrides(cfg, **{"data.targets": [cfg.data.targets[0], str(other / "tgt.jsonl")]})


def test_run_ids_of_named_datasets_are_unchanged():
    """Recorded before short names and model checks existed (at strength 0.8, the demo's default
    then): the run ids stay."""
    from anchorviz.pipeline.runner import build_graph

    sw = demo_sweep(strength=0.8, quick=True, seeds=(0, 1), scenario="marker")
    sw.detail_seeds = None  # the whole grid on both seeds, as the ids were recorded
    ids = [n.id for n in build_graph(expand_sweep(sw))]
    assert ids == ["teacher-7a8938844866", "teacher-2ea86c5e33c1", "reference-a0a0ff57c6c5",
                   "reference-8e021ae5db45", "ceiling-6df0757964f3", "ceiling-76ffa76b8fab",
                   "naive-1886ffe11916", "anchor-c281b139a593", "naive-b2c7228d2a85",
                   "anchor-c711d77257fd"]


def test_model_loading_is_quiet(tmp_path, capsys, caplog):
    import logging

    from anchorviz.models.reward_model import load_reward_model

    folder = save_tiny_model(tmp_path / "m", layers=1)
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        for _ in range(2):
            load_reward_model(str(folder))
    cap = capsys.readouterr()
    assert "Loading weights" not in cap.err + cap.out
    assert "LOAD REPORT" not in cap.err + cap.out + caplog.text
    # the unused pooler is not a warning
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()  # restored


def test_sweep_bar_counts_every_kind_and_gives_an_eta(monkeypatch):
    from anchorviz.pipeline import runner
    from anchorviz.pipeline.runner import Node, _Progress

    nodes = [Node("t", "teacher", {}), Node("r", "reference", {}),
             Node("c", "ceiling", {}, ("t", "r")), Node("s1", "student", {}, ("t", "r")),
             Node("s2", "student", {}, ("t", "r"))]
    clock = [0.0]
    monkeypatch.setattr(runner.time, "perf_counter", lambda: clock[0])
    prog = _Progress(nodes, 1, enabled=False)
    assert prog.totals == {"teacher": 1, "reference": 1, "ceiling": 1, "student": 2}
    assert prog.eta() is None  # nothing measured yet
    prog.started(nodes[0])
    prog.finished(nodes[0], {"computed": True, "seconds": 100.0})
    prog.started(nodes[1])
    prog.finished(nodes[1], {"computed": False, "seconds": 0.1})  # read from the store
    assert prog.done["teacher"] == 1 and prog.done["reference"] == 1
    assert prog.eta() == pytest.approx(300.0)  # 3 nodes left at the only mean known
    assert "ETA >5m00s" in prog.bar.postfix  # a teacher's time only bounds a student's from below
    prog.started(nodes[3])
    clock[0] = 20.0
    prog.finished(nodes[3], {"computed": True, "seconds": 20.0})
    # the ceiling trains the student's model on the same pairs: the student's time (20) stands
    # for it; student 2: 20
    assert prog.eta() == pytest.approx(40.0)
    assert "student 1/2" in prog.bar.postfix and "ETA 40s" in prog.bar.postfix
    prog.close()


# --------------------------------------------------------------------------- helping the next step


def test_no_prefix_matching_and_did_you_mean(capsys):
    for argv, hint in ((["demo", "--seed", "1"], "did you mean --seeds?"),
                       (["dmeo"], "did you mean 'demo'?"),
                       (["demo", "--scenario", "hiden-cue"], "did you mean 'hidden-cue'?")):
        with pytest.raises(SystemExit) as ei:
            build_parser().parse_args(argv)
        assert ei.value.code == 2
        assert hint in capsys.readouterr().err, argv
    p = build_parser()
    subs = next(a for a in p._actions if a.choices and "demo" in a.choices).choices
    assert p.allow_abbrev is False and all(not s.allow_abbrev for s in subs.values())


def test_missing_config_names_the_examples(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nofile.yaml")]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "does not exist" in err and "demo.yaml" in err and "run.yaml" in err


def test_report_of_a_missing_folder_says_so_and_help_describes_dir(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nodir")]) == EXIT_CONFIG
    assert "does not exist" in capsys.readouterr().err
    text = build_parser()._subparsers._group_actions[0].choices["report"].format_help()
    assert "DIR" in text and "runs/" in text


def test_report_output_into_a_new_folder_makes_the_folder(tmp_path, capsys):
    """`anchorviz report <story> --output reports/x.html` with no reports/ yet: the folder is made
    (it was an error naming a hidden temporary file); a folder that cannot be made is named."""
    from pathlib import Path

    story = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "xstest_story"
    out = tmp_path / "reports" / "deeper" / "x.html"
    assert main(["report", str(story), "--output", str(out)]) == EXIT_OK
    assert out.is_file() and "XSTest" in out.read_text()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["report", str(story), "--output", str(blocker / "x.html")]) == EXIT_CONFIG
    assert f"cannot make its folder {blocker}" in capsys.readouterr().err


def test_demo_help_says_a_verdict_needs_seeds_and_their_cost():
    text = build_parser()._subparsers._group_actions[0].choices["demo"].format_help()
    assert "several seeds" in text and "CPU-minutes" in text


@pytest.mark.parametrize("command", ["datasets", "models"])
def test_listings_fit_100_columns(command, capsys):
    assert main([command]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100


def test_every_help_text_fits_100_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to this; raw descriptions it does not
    parser = build_parser()
    texts = {"anchorviz": parser.format_help()}
    texts.update({name: sub.format_help() for name, sub in
                  parser._subparsers._group_actions[0].choices.items()})
    wide = {name: max(len(line) for line in text.splitlines()) for name, text in texts.items()}
    assert all(w <= 100 for w in wide.values()), wide


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["demo", "--help"]])
def test_version_and_help_import_no_heavy_library(argv):
    import subprocess
    import sys

    code = ("import sys\nfrom anchorviz.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'pandas', 'plotly', 'transformers', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[-1] == "[]", out
