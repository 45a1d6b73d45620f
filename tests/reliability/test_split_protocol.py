"""Issue 19.4: protocol guards. A target that is the source is refused before any work; a target
that shares pairs with the source's training splits loses them (counted in the teacher's
metrics); runs of two base configs in one output folder are told apart in the results table."""

from __future__ import annotations

import json

import pytest
import yaml
from tiny_project import overlapping_target, tiny_config

from anchorviz.cli import EXIT_CONFIG, main
from anchorviz.config import ConfigError, config_from_dict, with_overrides
from anchorviz.data.entries import target_name
from anchorviz.pipeline.keys import student_key, teacher_key
from anchorviz.pipeline.prepare import data_config, prepare_data, protocol_report
from anchorviz.pipeline.results import base_config_columns, results_table
from anchorviz.pipeline.sweep import run
from anchorviz.sweep_config import expand_sweep


def test_a_target_that_is_the_source_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    cfg = tiny_config(tmp_path)
    src = cfg.data.source
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.jsonl").symlink_to(src)
    spellings = [src, "data/src.jsonl", "./data/../data/src.jsonl", "link.jsonl"]
    for target in spellings:
        d = cfg.to_dict()
        d["data"]["targets"] = [cfg.data.targets[0], target]
        with pytest.raises(ConfigError, match=r"data\.targets: .* is the source dataset"):
            config_from_dict(d)
    with pytest.raises(ConfigError, match=r"'vader-movie' is the source dataset"):
        config_from_dict({"data": {"source": "vader-movie", "targets": ["vader-nyt", "vader-movie"]}})
    d = cfg.to_dict()
    d["data"]["targets"] = [cfg.data.targets[0], cfg.data.targets[0]]
    with pytest.raises(ConfigError, match="are the same target"):
        config_from_dict(d)

    def forbidden(*a, **k):
        raise AssertionError("trained although the target is the source")

    monkeypatch.setattr("anchorviz.pipeline.steps.train_reward_model", forbidden)
    d = cfg.to_dict()
    d["data"]["targets"] = [src]
    path = tmp_path / "self.yaml"
    path.write_text(yaml.safe_dump(d))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == EXIT_CONFIG
    assert "is the source dataset" in capsys.readouterr().err


def test_a_target_sharing_pairs_with_the_source_training_splits_loses_them(tmp_path):
    cfg = tiny_config(tmp_path)
    mixed = overlapping_target(tmp_path, cfg)
    cfg = with_overrides(cfg, **{"data.targets": [str(mixed)]})
    data = prepare_data(data_config(cfg))
    split = f"target_test:{target_name(str(mixed))}"
    dropped = protocol_report(data)[split]
    assert dropped > 0
    pairs, prompts = set(), set()
    for name in ("teacher_train", "w2s_train", "val"):
        pairs |= set(zip(data[name]["prompt"], data[name]["chosen"], data[name]["rejected"]))
        prompts |= set(data[name]["prompt"])
    for _, row in data[split].iterrows():
        assert (row.prompt, row.chosen, row.rejected) not in pairs and row.prompt not in prompts
    teacher = run(cfg, tmp_path / "out", progress=False)[0]
    assert teacher.metrics["protocol_dropped"] == {split: dropped}


def test_two_base_configs_in_one_out_are_told_apart_in_the_table(tmp_path):
    out = tmp_path / "out"
    a = tiny_config(tmp_path)
    run(a, out, progress=False)
    single = results_table(out)
    assert not [c for c in single.columns if c.startswith("cfg.")]  # one base: no extra columns
    b = with_overrides(a, **{"student_train.lr": 3e-3})
    run(b, out, progress=False)
    table = results_table(out)
    assert sorted(table["kind"]) == ["ceiling", "ceiling", "student", "student", "teacher"]
    extra = [c for c in table.columns if c.startswith("cfg.")]
    assert extra == ["cfg.train.lr"]
    students = table[table["kind"] == "student"]
    assert sorted(json.loads(v) for v in students["cfg.train.lr"]) == [1e-3, 3e-3]
    for _, group in table[table["kind"] != "teacher"].groupby("cfg.train.lr"):
        assert sorted(group["kind"]) == ["ceiling", "student"]
    # the columns are in the written table too
    import pandas as pd

    assert "cfg.train.lr" in pd.read_parquet(out / "results.parquet").columns


def test_base_config_columns_ignore_the_grid_and_split_per_seed():
    from anchorviz.pipeline.demo import demo_sweep

    sw = demo_sweep(strength=0.8, seeds=(0, 1, 2))
    sw.methods, sw.anchor_layers, sw.artifact_strengths = ["naive", "confidence", "anchor"], \
        ["last", "middle"], [0.0, 0.8]
    keys = []
    for c in expand_sweep(sw):
        keys += [teacher_key(c), student_key(c, "ceiling"), student_key(c, "student")]
    assert base_config_columns(keys) == {}
    other = with_overrides(expand_sweep(sw)[0], **{"data.w2s_train": 123})
    cols = base_config_columns(keys + [student_key(other, "student")])
    assert "cfg.data.w2s_train" in cols and "cfg.teacher.data.w2s_train" in cols
