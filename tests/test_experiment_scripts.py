"""Smoke tests of the experiment scripts in experiments/ (the scripts behind docs/RESULTS.md):
each core function runs on tiny sizes or a fake sweep."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from builders import toy_pairs
from tiny_project import save_tiny_model

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("experiments") / "student", layers=2, seed=0)


def test_anchor_scale_reads_the_stored_histories(tmp_path):
    import anchor_scale
    import pandas as pd
    from tiny_project import tiny_config

    from anchorviz.pipeline.results import results_table
    from anchorviz.pipeline.sweep import sweep
    from anchorviz.sweep_config import SweepConfig

    base = tiny_config(tmp_path)
    base.ceiling = False
    out = tmp_path / "sweep"
    sweep(SweepConfig(base=base, methods=["naive", "anchor"], anchor_lambdas=[0.5, 2.0],
                      seeds=[0]), out)
    t = anchor_scale.anchor_scale(str(out)).set_index("anchor_lambda")
    assert sorted(t.index) == [0.5, 2.0]
    res = results_table(out)
    for r in res[res["method"] == "anchor"].itertuples(index=False):
        h = pd.read_parquet(out / "runs" / r.run_id / "history.parquet")
        tail = h.iloc[-max(1, len(h) // 4):]  # the last quarter of the steps
        row = t.loc[r.anchor_lambda]
        assert row["fit"] == pytest.approx(tail["fit"].mean())
        assert row["anchor_mse"] == pytest.approx(tail["anchor"].mean())
        assert row["weighted_over_fit"] == pytest.approx(
            r.anchor_lambda * tail["anchor"].mean() / tail["fit"].mean())


def test_drift_vs_ood_on_a_fake_sweep(tmp_path):
    import drift_vs_ood
    from fake_sweep import write_fake_sweep
    from scipy import stats

    store = write_fake_sweep(tmp_path / "sweep", seeds=(0, 1, 2), targets=("amazon", "nyt", "tweets"))
    import pandas as pd

    table = pd.read_parquet(store / "results.parquet")  # the fake's metrics carry no per-target block
    df = drift_vs_ood.drift_aog_frame(store, table)
    students = table[table["kind"] == "student"]
    assert len(df) == 3 * len(students)  # one row per student x target
    row = df.iloc[0]
    src = students[students["run_id"] == row["run_id"]].iloc[0]
    assert row["aog"] == pytest.approx(100 * src[f"aog_{row['target']}"])
    sp = {(r["measure"], r["target"]): r for r in drift_vs_ood.spearman_rows(df)}
    amazon = df[df["target"] == "amazon"]
    want = stats.spearmanr(amazon["centred cosine"], amazon["aog"]).statistic
    assert sp[("centred cosine", "amazon")]["spearman"] == pytest.approx(want)
    assert sp[("centred cosine", "pooled")]["n"] == len(df)
    loto = drift_vs_ood.loto_rows(df)
    assert {r["held out"] for r in loto} == {"amazon", "nyt", "tweets"}
    for r in loto:
        assert r["n fit"] == 2 * len(students)
        if r["trusted"]:
            assert 0.0 <= r["coverage"] <= 1.0 and r["mae"] >= 0.0
    assert drift_vs_ood.main([str(tmp_path / "empty")]) == 1  # no students: says so, no table


def test_cue_readability_probe():
    import cue_readability

    rng = np.random.default_rng(0)
    w = rng.normal(size=16)
    readable = rng.normal(size=(200, 16)) + 0.8 * w  # one direction carries the cue's sign
    noise = rng.normal(size=(200, 16))
    assert cue_readability.probe_accuracy(readable[:100], readable[100:]) > 0.95
    assert 0.35 < cue_readability.probe_accuracy(noise[:100], noise[100:]) < 0.65
    # rows whose cue was truncated away (x = 0) are left out instead of counted as misses
    with_cut = np.vstack([readable[100:], np.zeros((50, 16))])
    assert cue_readability.probe_accuracy(readable[:100], with_cut) > 0.95


def test_cue_effects_with_a_tiny_model(tiny_model):
    import cue_readability

    from anchorviz.models.reward_model import load_reward_model

    model, tok = load_reward_model(str(tiny_model), dropout=False)
    model.eval()
    pairs = toy_pairs(6)
    fx = cue_readability.cue_effects(model, tok, pairs, "marker", max_length=64)
    assert sorted(fx) == list(range(model.n_layers + 1))
    assert all(v.shape == (6, model.hidden_size) for v in fx.values())
    assert np.abs(fx[model.n_layers]).sum() > 0  # the marker changes the chosen side's state
    cut = cue_readability.cue_effects(model, tok, pairs, "marker", max_length=4)
    assert np.abs(cut[model.n_layers]).sum() == 0  # truncated before the marker: no effect


def test_gold_anchor_scenario_is_the_echo_tables():
    import gold_anchor

    cfg = gold_anchor.echo_config(3)
    assert cfg.seed == 3 and cfg.data.artifact_kind == "echo"
    assert cfg.data.artifact_teacher_visibility == 0.5 and cfg.data.split_per_seed
    assert (cfg.student_train.lr, cfg.student_train.epochs) == (1e-4, 4)


def test_tune_source_val_tables_the_stored_fits(tmp_path):
    import tune_source_val
    from tiny_project import tiny_config

    from anchorviz.pipeline.prepare import data_config, prepare_data
    from anchorviz.pipeline.store import RunStore

    cfg = tiny_config(tmp_path)
    data = prepare_data(data_config(cfg))
    store = RunStore(tmp_path / "store")
    lines = tune_source_val.tuning_lines(cfg, data, store, ["1e-3:1e-3"], ["1e-3:2e-3:1"])
    assert len(lines) == 4 and lines[2].startswith("| teacher | 0.001 | 0.001 | 2 |")
    assert lines[3].startswith("| naive student (teacher (0.001, 0.001, 2)) | 0.001 | 0.002 | 1 |")
    fits = sorted(p.name for p in (tmp_path / "store" / "runs").iterdir())
    assert [f.rsplit("-", 1)[0] for f in fits] == ["fit-student", "fit-teacher"]
    # a rerun reads the two fits: the same table, no new run
    assert tune_source_val.tuning_lines(cfg, data, store, ["1e-3:1e-3"], ["1e-3:2e-3:1"]) == lines
    assert sorted(p.name for p in (tmp_path / "store" / "runs").iterdir()) == fits


def test_cue_reliance_scores_a_marker_reading_teacher_on_its_own_form():
    import cue_reliance

    from anchorviz.data.artifacts import DEFAULT_MARKER, apply_artifact

    pairs = toy_pairs(40)
    pairs["chosen"] = [f"alpha {t}" for t in pairs["chosen"]]  # sides open with other words
    pairs["rejected"] = [f"beta {t}" for t in pairs["rejected"]]
    neutral = apply_artifact(pairs, "echo", 0.5, seed=0, role="target", target_mode="neutral")
    versions = {"neutral": {"target_test:t": neutral}}
    assert cue_reliance.teacher_versions(versions, "same") is versions
    seen = cue_reliance.teacher_versions(versions, "marker")["neutral"]["target_test:t"]
    sides = cue_reliance._marked_side(neutral)
    assert sorted(set(sides)) == [-1, 0, 1] and (sides != 0).sum() == 20
    for s, c0, r0, c, r in zip(sides, pairs["chosen"], pairs["rejected"], seen["chosen"],
                               seen["rejected"]):
        # the marker sits where the echo cue was, and no echo remains
        assert (c, r) == ((c0 + DEFAULT_MARKER, r0) if s == 1 else
                          (c0, r0 + DEFAULT_MARKER) if s == -1 else (c0, r0))
    assert (cue_reliance._marked_side(seen) == sides).all()


def test_real_cues_verdicts_by_hand():
    """experiments/real_cues.py: follow rate on the disagree slice = 1 - accuracy there; the
    inherited part is naive minus ceiling, paired by seed; lambda chosen on source validation;
    Holm over the target rows only; a slice with too few pairs is not entered."""
    import pandas as pd
    import real_cues

    rows = []
    acc_dis = {"ceiling": [0.8, 0.7, 0.9], "naive": [0.6, 0.6, 0.7], "anchor": [0.7, 0.6, 0.8],
               "teacher": [0.5, 0.5, 0.5]}
    for method, accs in acc_dis.items():
        for seed, a in enumerate(accs):
            for split, n_dis in (("target_test:uf", 30), ("source_test", 30), ("target_test:pk", 5)):
                rows.append({"run_id": f"{method}{seed}", "method": method,
                             "anchor_lambda": 3.0 if method == "anchor" else 0.0, "seed": seed,
                             "split": split, "cue": "refusal", "n": 60, "n_agree": 30,
                             "n_disagree": n_dis, "acc_agree": 0.9 if method == "anchor" else 0.95,
                             "acc_disagree": a, "follow": np.nan})
    slices = pd.DataFrame(rows)
    results = pd.DataFrame({
        "method": ["naive"] * 3 + ["anchor"] * 6, "seed": [0, 1, 2] * 3,
        "anchor_lambda": [0.0] * 3 + [0.3] * 3 + [3.0] * 3,
        "acc_val": [0.6] * 3 + [0.60, 0.61, 0.62] + [0.64, 0.65, 0.60],
        "acc_uf": [0.50, 0.52, 0.54] + [0.5] * 3 + [0.51, 0.52, 0.53],
        "acc_id": [0.7] * 9, "acc_pk": [0.6] * 9})
    lam = real_cues.choose_lambda(results)
    assert lam == 3.0  # mean 0.63 beats 0.61
    v = real_cues.verdicts(results, slices, lam, min_slice=20).set_index("split")
    uf = v.loc["target_test:uf"]
    # naive follows the cue on 40 / 40 / 30 %, the ceiling on 20 / 30 / 10 %: +20 / +10 / +20
    assert uf["inherit"] == pytest.approx(50 / 3 / 100)
    assert uf["anchor"] == pytest.approx(-(0.1 + 0.0 + 0.1) / 3)  # ANCHOR follows less
    assert uf["agree"] == pytest.approx(-0.05)
    assert uf["whole"] == pytest.approx((0.01 + 0.0 - 0.01) / 3)
    assert uf["follow_teacher"] == pytest.approx(0.5)
    assert not v.loc["target_test:pk", "entered"]  # 5 disagree pairs < 20
    assert np.isnan(v.loc["source_test", "inherit_holm"])  # Holm over the targets only
    assert uf["inherit_holm"] == pytest.approx(uf["inherit_p"])  # one target row entered
    assert real_cues.holm([0.01, 0.04, np.nan, 0.03]) == pytest.approx([0.03, 0.06, np.nan, 0.06],
                                                                       nan_ok=True)


def test_xstest_ceilings_table_by_hand():
    """experiments/xstest_ceilings.py: the learning rate is chosen on source validation only
    (a tie goes to the smaller), each lever is read as its paired difference from the plan on
    the same seeds, and the 60% bar is read on the mean source test."""
    import pandas as pd
    import xstest_ceilings as xc

    rows = []
    val = {"plan": (60, 62), "lr 2e-5": (58, 58), "lr 1e-4": (61, 61), "pairs 1000": (65, 65),
           "epochs 4": (60, 60), "256 tokens": (60, 60)}
    test = {"plan": (59, 60), "lr 2e-5": (70, 70), "lr 1e-4": (57, 58), "pairs 1000": (62, 64),
            "epochs 4": (59, 59), "256 tokens": (61, 60)}
    for variant in xc.VARIANTS:
        for i, seed in enumerate((85, 86)):
            rows.append({"source": "hh", "variant": variant, "seed": seed, "cpu_s": 120.0,
                         "pairs": 500, "val": val[variant][i], "source_test": test[variant][i]})
    text = xc.markdown(pd.DataFrame(rows), "cmd")
    # 5e-5 and 1e-4 tie on source val (61.0); the tie goes to the smaller; 2e-5's test (70) is
    # the best but its val is the lowest, so it is not chosen
    assert "Learning rate chosen on source validation: **5e-05** (mean source val 61.0" in text
    plan = next(line for line in text.splitlines() if line.startswith("| plan |"))
    assert "| 59.5 ± 6.4 |" in plan and plan.endswith("| no |")  # 59.5 < 60
    pairs = next(line for line in text.splitlines() if line.startswith("| pairs 1000 |"))
    assert "| 63.0 ± 12.7 | 3.5 ± 6.4 | 2.0 | yes |" in pairs  # (3 + 4) / 2 above plan
