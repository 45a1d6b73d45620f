"""The pipeline on a tiny offline project: one run, sharing, no recomputation, config errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from builders import write_yaml_text
from tiny_project import tiny_config

from anchorviz.config import ConfigError, RunConfig, config_from_dict, load_config, with_overrides
from anchorviz.pipeline.keys import reference_key
from anchorviz.pipeline.prepare import data_config, prepare_data, protocol_report
from anchorviz.pipeline.results import artifact_accuracy
from anchorviz.pipeline.steps import load_backbone
from anchorviz.pipeline.sweep import run, sweep
from anchorviz.sweep_config import SweepConfig, load_sweep


def test_one_run_writes_the_documented_layout(tmp_path, count_training):
    cfg = tiny_config(tmp_path, **{"method.name": "anchor", "method.anchor_lambda": 1.0})
    out = tmp_path / "out"
    results = run(cfg, out)
    assert [r.kind for r in results] == ["teacher", "ceiling", "student"]
    student = results[-1].run_dir
    for name in ("config.yaml", "MANIFEST.json", "metrics.json", "scores.parquet", "labels.parquet",
                 "history.parquet", "drift.parquet", "projection.parquet",
                 "checkpoint/trainable.safetensors", "hidden/student/source_test.safetensors"):
        assert (student / name).is_file(), name
    m = json.loads((student / "metrics.json").read_text())
    assert m["reference"]["strategy"] == "cached"
    tr = m["transfer"]["ood"]
    assert tr["nts"]["point"] <= tr["aog"]["point"] + 1e-12
    table = pd.read_parquet(out / "results.parquet")
    assert set(table["kind"]) == {"teacher", "ceiling", "student"}
    row = table[table.kind == "student"].iloc[0]
    teacher = table[table.kind == "teacher"].iloc[0]
    assert row["wrg"] == pytest.approx(row["acc_id"] - teacher["acc_id"])
    assert row["aog"] == pytest.approx(row["acc_ood"] - teacher["acc_ood"])
    assert 0 <= row["drift_cos_source"] and row["drift_cka_target"] <= 1 + 1e-9
    assert len(count_training) == 3
    drift = pd.read_parquet(student / "drift.parquet")
    assert sorted(drift["layer"].unique()) == [0, 1, 2]


def test_sweep_twice_recomputes_nothing(tmp_path, count_training):
    base = tiny_config(tmp_path)
    sw = SweepConfig(base=base, methods=["naive", "anchor"], anchor_lambdas=[0.5, 2.0],
                     anchor_layers=["last"], seeds=[0])
    out = tmp_path / "sweep"
    first = sweep(sw, out)
    n_first = len(count_training)
    assert n_first == 1 + 1 + 3  # one teacher and one ceiling shared by three students
    second = sweep(sw, out)
    assert len(count_training) == n_first  # nothing trained again
    cols = ["run_id", "acc_id", "acc_ood", "wrg", "aog", "nts"]
    pd.testing.assert_frame_equal(first[cols], second[cols])
    refs = list((out / "shared").glob("reference-*"))
    assert len(refs) == 1  # one reference capture for all students


def test_corrupted_run_is_detected_and_redone(tmp_path, count_training):
    cfg = tiny_config(tmp_path)
    out = tmp_path / "out"
    student = run(cfg, out)[-1].run_dir
    before = len(count_training)
    with open(student / "scores.parquet", "r+b") as f:
        f.truncate(100)
    run(cfg, out)
    assert len(count_training) == before + 1  # only the corrupted student retrained
    assert pd.read_parquet(student / "scores.parquet").shape[0] > 0


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_dict({"data": {"sorce": "x"}})
    with pytest.raises(ConfigError, match="anchor_lambda"):
        config_from_dict({"method": {"name": "anchor", "anchor_lambda": -1}})
    with pytest.raises(ConfigError, match=r"teacher_train\.lr|lr"):
        config_from_dict({"teacher_train": {"lr": "fast"}})
    with pytest.raises(ConfigError, match="artifact_strength"):
        config_from_dict({"data": {"artifact_strength": 1.5}})
    with pytest.raises(ConfigError, match="seam"):  # MiniLM cannot generate principle trees
        config_from_dict({"method": {"name": "seam"}})


def test_example_configs_load():
    from anchorviz.config import load_config
    from anchorviz.paths import REPO_ROOT
    from anchorviz.sweep_config import expand_sweep, load_sweep

    cfg = load_config(REPO_ROOT / "configs" / "run.yaml")
    assert cfg.method.name == "anchor" and cfg.student_train.head_lr == pytest.approx(2e-3)
    configs = expand_sweep(load_sweep(REPO_ROOT / "configs" / "sweep.yaml"))
    assert len(configs) == 2 * 3 * (1 + 1 + 2 * 2)  # strengths x seeds x (naive, confidence, 4 anchor)


def test_run_and_sweep_configs_load_without_torch():
    """Importing the config modules is cheap (the CLI's --help, a notebook's first cell):
    neither imports torch or the training modules at load."""
    import subprocess
    import sys

    code = ("import sys, anchorviz.config, anchorviz.sweep_config\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or "
            "m.startswith('anchorviz.training')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[-1] == "[]", out


def test_seam_runs_through_the_pipeline_with_a_generative_student(tmp_path):
    """Wiring only (tiny random decoder): trees are written and labels stay probabilities."""
    from tiny_project import save_tiny_model
    from transformers import LlamaForCausalLM

    cfg = tiny_config(tmp_path)
    dec = save_tiny_model(tmp_path / "models" / "dec", kind="decoder", layers=2)
    LlamaForCausalLM.from_pretrained(dec).save_pretrained(dec)  # a generative checkpoint
    d = cfg.to_dict()
    d["models"]["student"] = str(dec)
    d["method"]["name"] = "seam"
    d["ceiling"] = False
    d["data"]["w2s_train"] = 12
    seam_cfg = config_from_dict(d)
    res = run(seam_cfg, tmp_path / "out")[-1]
    assert res.metrics["method"] == "seam" and "seam" in res.metrics
    q = pd.read_parquet(res.run_dir / "labels.parquet")["q"]
    assert len(q) == 12 and q.between(0, 1).all()
    assert (res.run_dir / "seam").is_dir()


def test_artifact_accuracy_splits_id_by_the_planted_marker(tmp_path):
    cfg = tiny_config(tmp_path, **{"data.artifact_kind": "marker", "data.artifact_strength": 0.5,
                                   "data.source_test": 20})
    cfg.ceiling = False
    out = tmp_path / "out"
    student = run(cfg, out)[-1].run_dir
    split = artifact_accuracy(student)
    assert set(split) == {"marked", "clean"}
    assert split["marked"][1] == 10 and split["clean"][1] == 10  # round(0.5 * 20) carry it
    # the two groups recombine into the run's ID accuracy
    m = json.loads((student / "metrics.json").read_text())
    whole = (split["marked"][0] * 10 + split["clean"][0] * 10) / 20
    assert whole == pytest.approx(m["accuracy"]["source_test"]["point"])
    row = pd.read_parquet(out / "results.parquet").query("kind == 'student'").iloc[0]
    assert row["acc_id_marked"] == pytest.approx(split["marked"][0])
    # the split is read from the scores, not rebuilt: it gives the same groups without the data
    scores = pd.read_parquet(student / "scores.parquet")
    src = scores[scores["split"] == "source_test"]
    assert src["artifact_side"].notna().sum() == 10
    assert set(src["artifact_side"].dropna()) == {"chosen"}
    assert src["artifact_seen"].dropna().all()  # visibility 1: the teacher saw every marker
    from anchorviz.pipeline import results as results_mod

    def no_data(*a, **k):
        raise AssertionError("artifact_accuracy rebuilt the data")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(results_mod, "prepare_data", no_data)
        assert artifact_accuracy(student) == split
    # a run stored before the columns existed: its split is rebuilt, with the same result
    scores.drop(columns=["artifact_side", "artifact_seen"]).to_parquet(student / "scores.parquet")
    assert artifact_accuracy(student) == split
    # without an artefact there is nothing to split
    plain = tiny_config(tmp_path / "plain")
    plain.ceiling = False
    assert artifact_accuracy(run(plain, tmp_path / "out2")[-1].run_dir) == {}


def test_split_per_seed_draws_a_new_split_for_each_seed(tmp_path):
    assert RunConfig().data.split_per_seed  # the default: seeds vary the split
    cfg = tiny_config(tmp_path, **{"data.split_per_seed": False})
    same = [prepare_data(data_config(with_overrides(cfg, seed=s)))["w2s_train"]
            for s in (0, 1)]
    assert list(same[0]["pair_id"]) == list(same[1]["pair_id"])  # off: one split
    vary = with_overrides(cfg, **{"data.split_per_seed": True})
    per_seed = [prepare_data(data_config(with_overrides(vary, seed=s)))["w2s_train"]
                for s in (0, 1)]
    assert list(per_seed[0]["pair_id"]) == list(same[0]["pair_id"])  # seed 0 keeps split_seed
    assert list(per_seed[0]["pair_id"]) != list(per_seed[1]["pair_id"])
    # the run ids follow: seed 1's teacher and reference capture differ from a shared split's
    keys = [reference_key(with_overrides(c, seed=1)) for c in (cfg, vary)]
    assert keys[0]["data"]["split_seed"] == 0 and keys[1]["data"]["split_seed"] == 1
    # prepare_data hands out copies: a caller's edit does not reach the next caller
    first = prepare_data(data_config(cfg))
    first["w2s_train"].loc[:, "chosen"] = "edited"
    assert (prepare_data(data_config(cfg))["w2s_train"]["chosen"] != "edited").all()


def test_a_target_overlapping_the_source_loses_its_overlap_and_says_how_much(tmp_path):
    """HH -> HH-style: the target shares 60 pairs (and their prompts) with the source; those in
    the source's training / validation splits must not be scored as out-of-distribution."""
    import json

    from tiny_project import write_pairs

    cfg = tiny_config(tmp_path)
    shared = Path(cfg.data.source).read_text().splitlines()[:60]
    own = write_pairs(tmp_path / "own.jsonl", 40, seed=9, domain="book").read_text().splitlines()
    target = tmp_path / "overlapping.jsonl"
    target.write_text("\n".join(shared + own) + "\n")
    over = with_overrides(cfg, **{"data.targets": [str(target)], "data.target_test": "all"})
    data = prepare_data(data_config(over))
    (name,) = [k for k in data if k.startswith("target_test:")]
    seen = set().union(*(set(data[s]["prompt"]) for s in ("teacher_train", "w2s_train", "val")))
    assert not seen & set(data[name]["prompt"])
    expected = sum(json.loads(line)["prompt"] in seen for line in shared)
    assert 0 < expected < 60
    assert protocol_report(data) == {name: expected}
    assert len(data[name]) == 100 - expected  # all that is left ("all": every usable pair)


def test_target_modes_plant_the_cue_in_the_targets_only(tmp_path):
    """neutral / reversed targets (the sensitivity check of a learned cue) once raised in
    prepare_data because the source splits were handed the target mode too."""
    cfg = tiny_config(tmp_path, **{"data.artifact_kind": "marker", "data.artifact_strength": 0.5})
    absent = prepare_data(data_config(cfg))
    rev = prepare_data(data_config(with_overrides(cfg, **{
        "data.artifact_target_mode": "reversed"})))
    (t,) = [k for k in rev if k.startswith("target_test:")]
    sides = [(m or {}).get("artifact_side") for m in rev[t]["meta"]]
    assert sides.count("rejected") == len(sides) // 2 and "chosen" not in sides
    assert not any((m or {}).get("artifact_side") for m in absent[t]["meta"])
    assert list(rev[t]["pair_id"]) == list(absent[t]["pair_id"])  # the same target pairs
    for s in ("teacher_train", "w2s_train", "val", "source_test"):
        assert list(rev[s]["chosen"]) == list(absent[s]["chosen"])


# --------------------------------------------------------------------------- config loader: bad input


@pytest.mark.parametrize("text, match", [
    ("data: [1, 2\n", "not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping of settings, got list"),
    ("just a string\n", "expected a mapping of settings, got str"),
    ("data: 5\n", r"\.data: expected a mapping of settings, got int"),
    ("seed: x\n", r"\.seed: expected int, got 'x'"),
    ("seed: 1.5\n", r"\.seed: expected int, got 1.5"),
    ("seed: true\n", r"\.seed: expected int, got True"),
    ("data: {targets: vader-amazon}\n", r"\.data\.targets: expected list"),
    ("models: {trust_remote_code: maybe}\n", r"\.models\.trust_remote_code: expected bool"),
    ("capture: {n_boot: true}\n", r"\.capture\.n_boot: expected int"),
    ("student_train: {lr: fast}\n", r"\.student_train\.lr: expected float, got 'fast'"),
    ("mehtod: {name: naive}\n", r"unknown key\(s\) \['mehtod'\]"),
    ("method: {name: anchor, anchor_lambda: .nan}\n", "anchor_lambda must be a finite number >= 0"),
    ("method: {name: anchor, anchor_lambda: .inf}\n", "anchor_lambda must be a finite number >= 0"),
    ("method: {name: anchor, anchor_lambda: -1e-4}\n", "anchor_lambda must be a finite number"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: '3,x'}\n", "anchor_layers must be "
     r"'last', 'middle', 'all' or comma-separated layer indices"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: '-1'}\n", "anchor_layers must be"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: ''}\n", "anchor_layers must be"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: 3}\n", r"anchor_layers: expected str"),
    ("method: {name: sft}\n", "method.name must be one of"),
    ("method: {label_temperature: 0}\n", "label_temperature must be > 0"),
    ("data: {artifact_strength: -0.1}\n", r"artifact_strength must be in \[0, 1\]"),
    ("data: {artifact_strength: .nan}\n", r"artifact_strength must be in \[0, 1\]"),
    ("data: {w2s_train: 0}\n", "data.w2s_train must be >= 1 pairs"),
    ("data: {targets: []}\n", "data.targets must list at least one target"),
    ("teacher_train: {lr: .nan}\n", r"teacher_train: invalid training setting\(s\): lr=nan"),
    ("teacher_train: {lr: .inf}\n", r"teacher_train: invalid training setting\(s\): lr=inf"),
    ("student_train: {batch_size: 0}\n", r"student_train: invalid .*batch_size=0"),
    ("student_train: {warmup_frac: 1.0}\n", r"student_train: invalid .*warmup_frac=1.0"),
    ("models: {dtype: float16}\n", "models.dtype must be float32 or bfloat16"),
])
def test_load_config_rejects_bad_values_naming_the_key(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write_yaml_text(tmp_path, text))


def test_load_config_missing_non_utf8_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope\.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path)
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"seed: 0\ndata: {source: caf\xe9}\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="the config file is empty"):  # not a silent default run
        load_config(write_yaml_text(tmp_path, ""))
    assert load_config(write_yaml_text(tmp_path, "{}\n")).seed == 0  # all defaults, on purpose


EVIL_YAML = [
    "!!python/object/apply:os.system ['touch {marker}']\n",
    "seed: 0\ndata: !!python/object/apply:os.system ['touch {marker}']\n",
    "base: !!python/object/apply:subprocess.check_call [['touch', '{marker}']]\n",
    "grid: {{methods: !!python/object/new:os.system ['touch {marker}']}}\n",
    "seed: !!python/name:os.system\n",
]


@pytest.mark.parametrize("template", EVIL_YAML)
@pytest.mark.parametrize("loader", [load_config, load_sweep])
def test_yaml_python_tags_are_rejected_without_executing(tmp_path: Path, template: str,
                                                         loader) -> None:
    marker = tmp_path / "pwned"
    path = write_yaml_text(tmp_path, template.format(marker=marker))
    with pytest.raises(ConfigError, match=r"not valid YAML .*(python|constructor|tag)"):
        loader(path)
    assert not marker.exists()


@pytest.mark.parametrize("sweep, match", [
    ([1, 2], "expected a mapping with 'base' and 'grid'"),
    ({"base": {}, "grid": {"methods": "naive"}}, r"grid\.methods: expected a non-empty list"),
    ({"grid": {"methods": []}}, r"grid\.methods: expected a non-empty list"),
    ({"grid": {"lambdas": [1]}}, r"grid: unknown key\(s\) \['lambdas'\]"),
    ({"grid": {"methods": ["sft"]}}, r"grid\.methods: 'sft' is not one of"),
    ({"grid": {"anchor_lambdas": [-1.0]}}, r"anchor_lambdas: -1.0 must be a finite number >= 0"),
    ({"grid": {"anchor_lambdas": [float("nan")]}}, r"anchor_lambdas: nan must be a finite"),
    ({"grid": {"anchor_lambdas": ["big"]}}, r"anchor_lambdas: 'big' is not a number"),
    ({"grid": {"anchor_layers": ["3,x"]}}, "anchor_layers must be 'last'"),
    ({"grid": {"artifact_strengths": [2.0]}}, r"artifact_strength must be in \[0, 1\]"),
    ({"grid": {"seeds": ["a"]}}, r"grid\.seeds: 'a' is not a whole number"),
    ({"base": {"data": {"sorce": "x"}}}, r"base\.data: unknown key"),
    ({"extra": 1}, r"unknown key\(s\) \['extra'\]"),
])
def test_load_sweep_rejects_bad_grids(tmp_path: Path, sweep: object, match: str) -> None:
    path = write_yaml_text(tmp_path, yaml.safe_dump(sweep), "s.yaml")
    with pytest.raises(ConfigError, match=match):
        load_sweep(path)


def test_config_from_dict_rejects_non_mappings() -> None:
    for bad in ([1], "x", 3):
        with pytest.raises(ConfigError, match="expected a mapping of settings"):
            config_from_dict(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- untrusted files: remote code


def test_trust_remote_code_is_false_unless_the_config_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    seen: list[tuple[str, object, object]] = []
    for cls in (transformers.AutoModel, transformers.AutoTokenizer):
        real = cls.from_pretrained.__func__

        def spy(klass, path, *a, _real=real, _name=cls.__name__, **k):
            seen.append((_name, k.get("trust_remote_code", "unset"), k.get("use_safetensors")))
            return _real(klass, path, *a, **k)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    cfg = tiny_config(tmp_path)
    assert cfg.models.trust_remote_code is False and RunConfig().models.trust_remote_code is False
    load_backbone(cfg, "student")
    assert seen == [("AutoTokenizer", False, None), ("AutoModel", False, True)]
    seen.clear()
    load_backbone(with_overrides(cfg, **{"models.trust_remote_code": True}), "teacher")
    assert [s[1] for s in seen] == [True, True]


def test_the_shared_map_is_stored_once_and_read_back_by_later_runs(tmp_path, monkeypatch):
    """The projector is kept in the store (shared/projection-*), so a later process places its
    student in the same checked map without fitting one of its own."""
    from anchorviz.pipeline import steps

    cfg = tiny_config(tmp_path)
    cfg.ceiling = False
    out = tmp_path / "out"
    first = run(cfg, out)[-1].run_dir
    stored = sorted((out / "shared").glob("projection-*"))
    assert len(stored) == 1 and (stored[0] / "projection.json").is_file()
    monkeypatch.setattr(steps, "_PROJECTORS", {})  # a fresh process

    def no_fit(*a, **k):
        raise AssertionError("the stored projection was fitted again")

    monkeypatch.setattr(steps, "fit_shared_projection", no_fit)
    later = run(with_overrides(cfg, **{"method.name": "anchor", "method.anchor_lambda": 0.5}),
                out)[-1].run_dir
    a, b = (pd.read_parquet(d / "projection.parquet") for d in (first, later))
    ref_a, ref_b = (t[t["model"] == "reference"].reset_index(drop=True) for t in (a, b))
    pd.testing.assert_frame_equal(ref_a, ref_b)
