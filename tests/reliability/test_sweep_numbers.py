"""A sweep file's grid lists take numbers the way the config fields do: ``2e-2`` (a string to
YAML 1.1) is 0.02, ``1e3`` for a seed is 1000, a non-integral seed is refused naming the field;
from the file and from ``--set grid.<name>=[...]`` alike."""

from __future__ import annotations

import pytest
import yaml

from anchorviz.cli import EXIT_CONFIG, main
from anchorviz.config import ConfigError
from anchorviz.sweep_config import apply_sweep_sets, load_sweep, sweep_from_dict


def test_grid_lists_coerce_numbers_like_config_fields():
    sw = sweep_from_dict({"grid": {"methods": ["anchor"], "anchor_lambdas": ["2e-2", 1],
                                   "seeds": ["1e3", 2.0], "artifact_strengths": ["5e-1", 0],
                                   "detail_seeds": [1e3]}})
    assert sw.anchor_lambdas == [0.02, 1.0] and all(type(x) is float for x in sw.anchor_lambdas)
    assert sw.seeds == [1000, 2] and all(type(x) is int for x in sw.seeds)
    assert sw.artifact_strengths == [0.5, 0.0]
    assert sw.detail_seeds == [1000] and type(sw.detail_seeds[0]) is int


@pytest.mark.parametrize("key, bad", [("seeds", 1.5), ("seeds", "x"), ("detail_seeds", 0.5),
                                      ("anchor_lambdas", "abc"), ("artifact_strengths", "a")])
def test_a_grid_value_that_is_no_number_is_refused_naming_the_field(key, bad):
    grid = {"seeds": [0], key: [bad]}
    with pytest.raises(ConfigError, match=rf"grid\.{key}"):
        sweep_from_dict({"grid": grid})


def test_yaml_1_1_exponents_in_a_sweep_file(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("grid:\n  methods: [anchor]\n  anchor_lambdas: [2e-2, 1e-1]\n"
                    "  seeds: [1e3]\n")
    assert yaml.safe_load(path.read_text())["grid"]["anchor_lambdas"] == ["2e-2", "1e-1"]
    sw = load_sweep(path)
    assert sw.anchor_lambdas == [0.02, 0.1] and sw.seeds == [1000]


class _Stop(BaseException):
    pass


def test_set_grid_lists_on_the_sweep_command(tmp_path, monkeypatch):
    sw = sweep_from_dict({"grid": {"methods": ["anchor"]}})
    assert apply_sweep_sets(sw, ["grid.anchor_lambdas=[1e-1, 2e-2]", "grid.seeds=[1e3]"]) \
        .anchor_lambdas == [0.1, 0.02]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"grid": {"methods": ["anchor"]}}))
    seen = []

    def fake_sweep(sw, *args, **kwargs):
        seen.append(sw)
        raise _Stop  # nothing is trained: the grid as the command read it is what is checked

    monkeypatch.setattr("anchorviz.pipeline.sweep.sweep", fake_sweep)
    with pytest.raises(_Stop):
        main(["sweep", str(path), "--out", str(tmp_path / "out"),
              "--set", "grid.anchor_lambdas=[1e-1, 2e-2]", "--set", "grid.seeds=[1e3]"])
    assert seen[0].anchor_lambdas == [0.1, 0.02] and seen[0].seeds == [1000]
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"),
                 "--set", "grid.seeds=[0.5]"]) == EXIT_CONFIG
