"""The sweep explorer's selection model, without any widget: what each control offers (only
values the stored runs hold; seeds without hidden states say so), where it starts, and which
run a selection picks."""

from __future__ import annotations

import pandas as pd
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.viz.selection import ExplorerModel


@pytest.fixture
def sweep(tmp_path):
    path = write_fake_sweep(tmp_path / "s", seeds=(0, 1, 2), lambdas=(0.1, 1.0),
                            layers=("last",), methods=("naive", "anchor"),
                            projection_layers=(6,), n_pairs=20)
    res = pd.read_parquet(path / "results.parquet")
    res["captured"] = res["seed"] == 0  # seeds 1 and 2: verdict-only, scored without states
    res.to_parquet(path / "results.parquet")
    return path


def test_options_hold_only_stored_values_and_name_seeds_without_hidden_states(sweep):
    model = ExplorerModel(sweep, preload_projections=False)
    opts = model.options()
    res = model.results
    assert {v for _, v in opts["method"]} == set(res.loc[res["kind"] != "teacher", "method"])
    assert [v for _, v in opts["lambda_"]] == [0.1, 1.0]
    assert opts["seed"] == [("0", 0), ("1 (scores only)", 1), ("2 (scores only)", 2)]
    assert model.hidden_state_seeds() == [0]
    assert model.scores_only == set(res.loc[(res["seed"] > 0) & (res["kind"] != "teacher"),
                                            "run_id"])
    start = model.start()
    assert start["seed"] == 0 and start["method"] == "anchor" and start["lambda_"] == 1.0
    with pytest.raises(ValueError, match=r"seed=7 is not in the sweep; choose one of \[0, 1, 2\]"):
        model.option_value("seed", opts["seed"], 7)
    assert model.option_value("lambda_", opts["lambda_"], 0.1 + 1e-12) == 0.1


def test_a_selection_picks_one_run_and_its_naive_partner(sweep):
    model = ExplorerModel(sweep, preload_projections=False)
    sel = {**model.start(), "lambda_": 0.1, "seed": 1}
    pick = model.pick(sel)
    row = model.results.set_index("run_id").loc[pick.run_id]
    assert (row["method"], row["anchor_lambda"], row["seed"]) == ("anchor", 0.1, 1)
    naive = model.results.set_index("run_id").loc[pick.naive_id]
    assert (naive["method"], naive["seed"]) == ("naive", 1)
    assert pick.run_id in model.scores_only and pick.run_id not in model.drift
    assert model.pick({**sel, "seed": 0}).run_id in model.drift  # seed 0 kept its states
    assert model.pick({**sel, "method": "naive"}).naive_id is None  # itself: no partner
    with pytest.raises(ValueError, match="artifact_strength 0.5 is not in the sweep"):
        model.pick({**sel, "artifact_strength": 0.5})
