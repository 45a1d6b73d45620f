"""Issue 19.3: check everything before training anything. Each bad value that used to pass
validation (and fail after the teacher had trained, or pass silently) is a `ConfigError` naming
the key, and no training function is ever called."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from tiny_project import tiny_config

from anchorviz.cli import EXIT_CONFIG, main
from anchorviz.config import ConfigError, config_from_dict, load_config
from anchorviz.pipeline.sweep import run
from anchorviz.sweep_config import load_sweep

BAD_VALUES = [
    # (section, key, value, what the message must say)
    ("student_train", "device", "tpu9", r"student_train\.device: 'tpu9' is not a device"),
    ("teacher_train", "device", "tpu9", r"teacher_train\.device: 'tpu9' is not a device"),
    ("student_train", "device", "", r"student_train\.device must be a device name"),
    ("capture", "batch_size", 0, r"capture\.batch_size must be an integer >= 1"),
    ("capture", "layers", "foo", r"capture\.layers must be 'all', 'last', 'middle'"),
    ("capture", "layers", "1,x", r"capture\.layers must be"),
    ("capture", "projection_fit_rows", -1, r"capture\.projection_fit_rows must be an integer >= 2"),
    ("capture", "token_sample", -5, r"capture\.token_sample must be an integer >= 0"),
    ("capture", "n_boot", 0, r"capture\.n_boot must be an integer >= 1"),
    ("data", "split_seed", -1, r"data\.split_seed must be an integer >= 0"),
    ("data", "max_length", 2, r"data\.max_length must be an integer >= 4"),
    ("student_train", "eval_every", -1, r"student_train\.eval_every must be an integer >= 0"),
    ("teacher_train", "eval_every", -1, r"teacher_train\.eval_every must be an integer >= 0"),
    ("models", "pooling", "max", r"models\.pooling must be one of"),
    ("models", "student", " ", r"models\.student must name a zoo model"),
    ("method", "aux_coef", 2.0, r"method\.aux_coef must be in \[0, 1\]"),
    ("method", "aux_warmup_frac", -0.5, r"method\.aux_warmup_frac must be in \[0, 1\]"),
]
if not torch.cuda.is_available():
    BAD_VALUES.append(("student_train", "device", "cuda",
                       r"student_train\.device is 'cuda' but CUDA is not available here"))
    BAD_VALUES.append(("teacher_train", "device", "cuda:0",
                       r"teacher_train\.device is 'cuda:0' but CUDA is not available"))


@pytest.fixture
def no_training(monkeypatch):
    """Any call of the training loop (or of a run's body) fails the test."""

    def forbidden(*a, **k):
        raise AssertionError("training started although the config is invalid")

    monkeypatch.setattr("anchorviz.pipeline.steps.train_reward_model", forbidden)
    monkeypatch.setattr("anchorviz.pipeline.steps.ensure_teacher", forbidden)
    monkeypatch.setattr("anchorviz.pipeline.steps.run_student", forbidden)


@pytest.mark.parametrize("section, key, value, match", BAD_VALUES,
                         ids=[f"{s}.{k}={v!r}" for s, k, v, _ in BAD_VALUES])
def test_bad_values_fail_in_validation_naming_the_key(tmp_path, no_training, capsys,
                                                      section, key, value, match):
    good = tiny_config(tmp_path).to_dict()
    good[section][key] = value
    # the command line: exit 2, the key named, no run folder written
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(good))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    with pytest.raises(ConfigError, match=match):
        load_config(path)
    assert not (out / "runs").exists()
    # the Python API: a RunConfig changed after it was built is checked by run() first
    cfg = tiny_config(tmp_path)
    setattr(getattr(cfg, section), key, value)
    with pytest.raises(ConfigError, match=match):
        run(cfg, out, progress=False)
    # and a sweep over it
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(yaml.safe_dump({"base": good, "grid": {"methods": ["naive"]}}))
    with pytest.raises(ConfigError, match=match):
        load_sweep(sweep_file)


@pytest.mark.parametrize("text, where", [
    ("student_train:\n  lr: 1.0e-3\n  lr: 1.0e-5\n", "lr"),
    ("seed: 0\nseed: 1\n", "seed"),
    ("data: {targets: [a]}\nmodels: {student: x}\ndata: {source: b}\n", "data"),
])
def test_duplicate_yaml_keys_are_an_error_not_last_wins(tmp_path, no_training, text, where):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"(?s)not valid YAML .*duplicate key '{where}' "
                                          r"\(first given on line \d+\)"):
        load_config(path)
    sweep = tmp_path / "dup_sweep.yaml"
    sweep.write_text("base:\n  seed: 0\n  seed: 1\n")
    with pytest.raises(ConfigError, match="duplicate key 'seed'"):
        load_sweep(sweep)


def test_yaml_merge_keys_may_still_be_overridden(tmp_path):
    from anchorviz.paths import read_yaml

    path = tmp_path / "merge.yaml"
    path.write_text("a: &c {lr: 1.0, epochs: 1}\nb:\n  <<: *c\n  lr: 2.0\n")
    assert read_yaml(path)["b"] == {"lr": 2.0, "epochs": 1}


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_config_file_is_an_error_not_a_default_run(tmp_path, no_training, capsys, text):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="the config file is empty"):
        load_config(path)
    with pytest.raises(ConfigError, match="the sweep file is empty"):
        load_sweep(path)
    out = tmp_path / "out"
    for cmd in ("run", "sweep"):
        assert main([cmd, str(path), "--out", str(out)]) == EXIT_CONFIG
        assert "is empty" in capsys.readouterr().err
    assert not (out / "runs").exists()
    Path(path).write_text("{}\n")  # all defaults, asked for explicitly
    assert load_config(path).data.source == "vader-movie"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_driver_for_remote_gpus_may_opt_out_of_the_local_device_check(tmp_path, monkeypatch):
    d = tiny_config(tmp_path).to_dict()
    d["student_train"]["device"] = "cuda"
    with pytest.raises(ConfigError, match="ANCHORVIZ_REMOTE_DEVICES=1"):
        config_from_dict(d)
    monkeypatch.setenv("ANCHORVIZ_REMOTE_DEVICES", "1")
    assert config_from_dict(d).student_train.device == "cuda"
    d["student_train"]["device"] = "tpu9"  # still not a device at all
    with pytest.raises(ConfigError, match="'tpu9' is not a device"):
        config_from_dict(d)


def test_an_artefact_the_data_cannot_carry_is_a_config_error_naming_field_split_and_file(tmp_path):
    # the tiny pairs all open with the same word, so none can carry the echo cue
    from anchorviz.config import with_overrides
    from anchorviz.pipeline.prepare import data_config, prepare_data

    cfg = with_overrides(tiny_config(tmp_path), **{"data.artifact_kind": "echo",
                                                   "data.artifact_strength": 1.0})
    with pytest.raises(ConfigError, match=r"data\.artifact_strength 1\.0 on split \w+ of .*src\.jsonl"):
        prepare_data(data_config(cfg))


# --------------------------------------------------------------------------- settings that
# need the model or the data: checked at validation / loading, before anything trains


@pytest.mark.parametrize("key, value, match", [
    ("method.anchor_layers", "7", r"method\.anchor_layers '7': layer 7 is outside the student"),
    ("method.anchor_layers", "0,99", r"method\.anchor_layers '0,99': layer 99 .* 0 \(embeddings\) "
                                     r"\.\. 2"),
    ("capture.layers", "9", r"capture\.layers '9': layer 9 is outside the student"),
])
def test_layer_indices_beyond_the_model_fail_in_validation(tmp_path, key, value, match):
    with pytest.raises(ConfigError, match=match) as err:
        tiny_config(tmp_path, **{key: value})
    assert "anchor layer" not in str(err.value) or key.startswith("method")


def test_layer_indices_inside_the_model_pass(tmp_path):
    cfg = tiny_config(tmp_path, **{"method.anchor_layers": "0,2", "capture.layers": "1,2"})
    assert cfg.method.anchor_layers == "0,2"


def test_max_length_beyond_the_models_positions_fails_in_validation(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.max_length 100000 .* 128 positions"):
        tiny_config(tmp_path, **{"data.max_length": 100000})


@pytest.mark.parametrize("text", ["head_lr: 2e-2\n", "head_lr: '2e-2'\n", "head_lr: 0.02\n"])
def test_numbers_in_exponent_form_are_numbers_everywhere(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text("student_train:\n  " + text.replace("\n", "\n  ").rstrip() + "\nseed: 1e3\n"
                    "data:\n  max_length: 4.8e1\n")
    cfg = load_config(path)
    assert cfg.student_train.head_lr == pytest.approx(0.02)
    assert cfg.seed == 1000 and type(cfg.seed) is int
    assert cfg.data.max_length == 48 and type(cfg.data.max_length) is int
    from anchorviz.config import RunConfig, apply_sets

    cfg = apply_sets(RunConfig(), ["teacher_train.head_lr=2e-2", "seed=1e3",
                                   "teacher_train.batch_size=8.0"])
    assert cfg.teacher_train.head_lr == pytest.approx(0.02) and cfg.seed == 1000
    assert type(cfg.teacher_train.batch_size) is int


@pytest.mark.parametrize("key, value", [("seed", 1.5), ("seed", "1.5e0"), ("data.val", "ten")])
def test_non_integral_values_of_int_fields_are_refused(key, value):
    from anchorviz.config import RunConfig, apply_sets

    with pytest.raises(ConfigError, match=key.split(".")[-1] + r".*expected int"):
        apply_sets(RunConfig(), [f"{key}={value}"])


def test_a_target_test_larger_than_the_target_is_refused_naming_field_and_count(tmp_path):
    from anchorviz.data.schema import DataError
    from anchorviz.pipeline.prepare import data_config, prepare_data

    cfg = tiny_config(tmp_path, **{"data.target_test": 500})
    with pytest.raises((DataError, ConfigError),
                       match=r"data\.target_test 500.*tgt.* \d+ usable pairs"):
        prepare_data(data_config(cfg))
    cfg = tiny_config(tmp_path, **{"data.target_test": "all"})
    data = prepare_data(data_config(cfg))
    assert 0 < len(data["target_test:tgt"]) <= 40


def test_a_json_array_line_is_named_as_not_an_object(tmp_path):
    from anchorviz.data.readers import load_pairs
    from anchorviz.data.schema import DataError

    path = tmp_path / "rows.jsonl"
    path.write_text('["a", "b", "c"]\n["d", "e", "f"]\n')
    with pytest.raises(DataError, match=r"rows\.jsonl line 1 is not a JSON object .*array"):
        load_pairs(str(path))
    path.write_text('{"prompt": "p", "chosen": "good", "rejected": "bad"}\n[1, 2]\n')
    df, report = load_pairs(str(path))
    assert len(df) == 1 and "line 2 is not a JSON object" in str(report.to_dict())


def test_a_response_empty_after_tokenisation_is_dropped_and_counted(tmp_path):
    from anchorviz.data.readers import load_pairs

    path = tmp_path / "zw.jsonl"
    rows = [{"prompt": "p", "chosen": "good", "rejected": "\u200b"},
            {"prompt": "q", "chosen": " \u200b\u200d\n", "rejected": "bad"},
            {"prompt": "r", "chosen": "great", "rejected": "awful"}]
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    df, report = load_pairs(str(path))
    assert list(df["chosen"]) == ["great"]
    assert report.dropped.get("empty_response") == 2
