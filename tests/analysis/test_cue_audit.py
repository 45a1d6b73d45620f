"""Surface cues (anchorviz.analysis.cues), the `anchorviz cues` audit and a run's cues block:
shares and accuracies on pairs whose answers are counted by hand."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from builders import toy_pairs

from anchorviz.analysis import cues
from anchorviz.analysis.cues import (
    cue_agreement,
    cue_reliance,
    cue_sides,
    known_cues,
    register_cue,
    wilson_interval,
)
from anchorviz.cli import EXIT_CONFIG, EXIT_DATA, EXIT_OK, main


def _words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{k}" for k in range(n))


def audit_pairs() -> pd.DataFrame:
    """Ten pairs, two per prompt. length: pairs 0-3 chosen 20 words vs 10 (+1), pair 4 10 vs
    20 (-1), pairs 5-9 differ by 2 words (0): picks a side in 5 / 10, chosen in 4 / 5.
    refusal: pairs 5, 6 the chosen side refuses (+1), pair 7 the rejected one (-1), pair 8 both
    (0), pair 9 a refusal phrase past the first 100 characters (0): 3 / 10, chosen in 2 / 3."""
    long_opening = " ".join(["abcdefghijk"] * 10)  # 119 characters before "I cannot"
    rows = [
        *[(_words(f"c{i}x", 20), _words(f"r{i}x", 10)) for i in range(4)],
        (_words("c4x", 10), _words("r4x", 20)),
        ("I'm sorry, I can't help with that request at all.", _words("r5x", 12)),
        ("As an AI, " + _words("c6x", 8), _words("r6x", 12)),
        (_words("c7x", 12), "I cannot " + _words("r7x", 8)),
        ("I won't " + _words("c8x", 10), "I\u2019m sorry " + _words("r8x", 8)),
        (long_opening + " I cannot", _words("r9x", 10)),
    ]
    return pd.DataFrame({"prompt": [f"prompt {i // 2}" for i in range(10)],
                         "chosen": [c for c, _ in rows], "rejected": [r for _, r in rows]})


@pytest.fixture
def audit_file(tmp_path):
    path = tmp_path / "audit_pairs.jsonl"
    audit_pairs().to_json(path, orient="records", lines=True)
    return path


def test_length_and_refusal_shares_are_the_counted_ones(audit_file):
    from anchorviz.data.readers import load_pairs

    pairs, _ = load_pairs(str(audit_file))
    sides = cue_sides(pairs, ["length", "refusal"])
    assert sides["length"].tolist() == [1, 1, 1, 1, -1, 0, 0, 0, 0, 0]
    assert sides["refusal"].tolist() == [0, 0, 0, 0, 0, 1, 1, -1, 0, 0]
    t = cue_agreement(sides, n_boot=300, seed=0).set_index("cue")
    assert (t.loc["length", "n"], t.loc["length", "n_side"]) == (10, 5)
    assert t.loc["length", "side_share"] == pytest.approx(0.5)
    assert t.loc["length", "chosen_share"] == pytest.approx(0.8)
    assert t.loc["refusal", "n_side"] == 3
    assert t.loc["refusal", "side_share"] == pytest.approx(0.3)
    assert t.loc["refusal", "chosen_share"] == pytest.approx(2 / 3)
    for col in ("side_share", "chosen_share"):
        assert (t[f"{col}_lo"] <= t[col]).all() and (t[col] <= t[f"{col}_hi"]).all()
    assert t.loc["length", "interval"] == "cluster"  # five prompts, two pairs each


def test_cli_cues_json_gives_the_same_shares(audit_file, capsys):
    assert main(["cues", str(audit_file), "--cues", "length", "refusal", "--json",
                 "--n-boot", "300"]) == EXIT_OK
    got = json.loads(capsys.readouterr().out)
    (res,) = got["datasets"].values()
    assert res["pairs"] == 10 and list(res["cues"]) == ["length", "refusal"]
    length, refusal = res["cues"]["length"], res["cues"]["refusal"]
    assert (length["n_side"], refusal["n_side"]) == (5, 3)
    assert length["side_share"]["point"] == pytest.approx(0.5)
    assert length["chosen_share"]["point"] == pytest.approx(0.8)
    assert refusal["side_share"]["point"] == pytest.approx(0.3)
    assert refusal["chosen_share"]["point"] == pytest.approx(2 / 3)
    # the text table prints the same shares in percent
    assert main(["cues", str(audit_file), "--cues", "length", "--n-boot", "300"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "50.0 [" in out and "80.0 [" in out


def test_cue_reliance_by_hand():
    sides = pd.DataFrame({"length": [1, 1, 1, -1, -1, -1, 0]})
    margins = np.array([1.0, -1.0, 2.0, 1.0, -3.0, 0.0, 5.0])
    (r,) = cue_reliance(sides, margins, groups=None).to_dict("records")
    assert (r["n"], r["agree_n"], r["disagree_n"]) == (6, 3, 3)
    assert r["agree_acc"] == pytest.approx(2 / 3)  # right on 0 and 2
    assert r["disagree_acc"] == pytest.approx(0.5)  # right on 3, wrong on 4, a tie on 5
    # prefers the cue's side on 0, 2 (agree, right) and 4 (disagree, wrong), half on the tie
    assert r["follow"] == pytest.approx(3.5 / 6)
    assert r["interval"] == "wilson"
    assert (r["agree_acc_lo"], r["agree_acc_hi"]) == pytest.approx((0.2077, 0.9385), abs=1e-4)
    assert (r["follow_lo"], r["follow_hi"]) == pytest.approx(wilson_interval(3.5, 6))
    # scores as a table are matched on pair_id, not on row order
    sides_ids = sides.assign(pair_id=[f"p{i}" for i in range(7)])
    scores = pd.DataFrame({"pair_id": [f"p{i}" for i in range(7)][::-1],
                           "r_chosen": margins[::-1], "r_rejected": 0.0})
    (r2,) = cue_reliance(sides_ids, scores, groups=None).to_dict("records")
    assert r2["follow"] == pytest.approx(3.5 / 6) and r2["agree_acc"] == pytest.approx(2 / 3)


def test_run_cues_rebuilds_a_runs_block_from_its_stored_scores(tmp_path):
    from dataclasses import replace

    from anchorviz.config import DataConfig
    from anchorviz.paths import write_yaml
    from anchorviz.pipeline.keys import data_key
    from anchorviz.pipeline.prepare import eval_splits, prepare_data
    from anchorviz.pipeline.results import bootstrap_groups, cue_follow_columns, run_cues

    # the marker on every chosen source pair, on every rejected target pair
    d = replace(DataConfig(), artifact_kind="marker", artifact_strength=1.0,
                artifact_target_mode="reversed")
    data = prepare_data(d)
    run = tmp_path / "naive-x"
    run.mkdir()
    write_yaml(run / "config.yaml", {"kind": "student", "data": data_key(d), "seed": 0,
                                     "capture": {"n_boot": 200}})
    frames = []
    for split in eval_splits(data):  # a model that always prefers the chosen side
        ids = data[split]["pair_id"].tolist()
        frames.append(pd.DataFrame({"split": split, "pair_id": ids, "r_chosen": 1.0,
                                    "r_rejected": 0.0,
                                    "group": bootstrap_groups(data[split], ids, split, "prompt")}))
    pd.concat(frames).to_parquet(run / "scores.parquet")
    block = run_cues(run)
    n_src = len(data["source_test"])
    n_tgt = sum(len(data[s]) for s in eval_splits(data)[1:])
    src, ood = block["source_test"]["marker"], block["ood"]["marker"]
    assert (src["n"], src["agree"]["n"], src["disagree"]["n"]) == (n_src, n_src, 0)
    assert src["agree"]["point"] == 1.0 and src["disagree"]["point"] is None
    assert src["follow"]["point"] == 1.0
    assert (ood["n"], ood["agree"]["n"], ood["disagree"]["n"]) == (n_tgt, 0, n_tgt)
    assert ood["disagree"]["point"] == 1.0 and ood["follow"]["point"] == 0.0
    assert set(block) == {"source_test", "ood", *eval_splits(data)[1:]}
    cols = cue_follow_columns(block)
    assert cols["follow_marker_source"] == 1.0 and cols["follow_marker_target"] == 0.0
    assert not any("order" in c for c in cols)  # a cue that never picks a side has no column
    json.dumps(block)  # metrics.json must be able to hold it


def test_unknown_cue_and_missing_file_are_clear_errors(audit_file, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"unknown cue\(s\) \['lenght'\].*length"):
        cue_sides(audit_pairs(), ["lenght"])
    assert main(["cues", str(audit_file), "--cues", "lenght"]) == EXIT_CONFIG
    assert "known cues" in capsys.readouterr().err
    assert main(["cues", str(tmp_path / "nope.jsonl")]) == EXIT_DATA
    assert "nope.jsonl" in capsys.readouterr().err
    assert main(["cues", "no-such-dataset"]) == EXIT_CONFIG
    assert "unknown dataset" in capsys.readouterr().err
    with pytest.raises(ValueError, match="chosen"):
        cue_sides(pd.DataFrame({"prompt": ["p"], "rejected": ["r"]}))


def test_register_cue(monkeypatch):
    monkeypatch.setattr(cues, "_REGISTRY", dict(cues._REGISTRY))

    def question(prompt: str, chosen: str, rejected: str) -> int:
        return int(chosen.endswith("?")) - int(rejected.endswith("?"))

    register_cue("question", question)
    assert known_cues()[-1] == "question"
    pairs = pd.DataFrame({"prompt": ["a", "b", "c"], "chosen": ["why?", "no", "ok?"],
                          "rejected": ["yes", "how?", "hm?"]})
    assert cue_sides(pairs, ["question"])["question"].tolist() == [1, -1, 0]
    with pytest.raises(ValueError, match="already registered"):
        register_cue("question", question)
    register_cue("question", lambda p, c, r: 2, replace=True)
    with pytest.raises(ValueError, match="returned 2"):
        cue_sides(pairs, ["question"])
    with pytest.raises(ValueError, match="reserved"):
        register_cue("prompt", question)


@pytest.mark.parametrize("kind", ["marker", "order", "echo"])
def test_planted_cue_identifies_the_carrying_side(kind):
    from anchorviz.data.artifacts import apply_artifact

    pairs = toy_pairs(40)
    pairs["chosen"] = [f"alpha {t}" for t in pairs["chosen"]]  # echo: sides open differently
    pairs["rejected"] = [f"beta {t}" for t in pairs["rejected"]]
    planted = apply_artifact(pairs, kind, 0.5, seed=0, role="target", target_mode="neutral")
    meta = [{"chosen": 1, "rejected": -1}.get(m.get("artifact_side"), 0) for m in planted["meta"]]
    assert sorted(set(meta)) == [-1, 0, 1]
    sides = cue_sides(planted, ["marker", "order", "echo"])
    assert sides[kind].tolist() == meta
    assert all((sides[k] == 0).all() for k in ("marker", "order", "echo") if k != kind)
    assert (cue_sides(pairs, [kind])[kind] == 0).all()  # nothing planted: no side


def test_every_run_writes_a_cues_block_that_run_cues_rebuilds(tmp_path):
    from tiny_project import tiny_config

    from anchorviz.pipeline.keys import run_id_for, student_key, teacher_key
    from anchorviz.pipeline.results import run_cues
    from anchorviz.pipeline.sweep import run

    cfg = tiny_config(tmp_path, **{"data.artifact_kind": "marker", "data.artifact_strength": 0.5,
                                   "data.source_test": 20})
    cfg.ceiling = False
    ids = (run_id_for(teacher_key(cfg)), run_id_for(student_key(cfg, "student")))
    out = tmp_path / "out"
    results = run(cfg, out)
    assert {r.run_id for r in results} >= set(ids)  # the block leaves the run ids alone
    for r in results:
        m = json.loads((r.run_dir / "metrics.json").read_text())
        block = m["cues"]
        assert "source_test" in block and "ood" in block
        marker = block["source_test"]["marker"]
        assert marker["n"] == 10 and marker["agree"]["n"] == 10  # round(0.5 * 20), all chosen
        assert marker["follow"]["point"] == pytest.approx(marker["agree"]["point"])
        assert run_cues(r.run_dir) == block  # rebuilt from scores.parquet and config.yaml
    row = pd.read_parquet(out / "results.parquet").query("kind == 'student'").iloc[0]
    student = json.loads((results[-1].run_dir / "metrics.json").read_text())["cues"]
    assert row["follow_marker_source"] == pytest.approx(student["source_test"]["marker"]["follow"]["point"])
