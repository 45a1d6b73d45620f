"""The real preference files in ../shared/realdata through the manifest names (generic adapter):
exact counts, drop reasons, schema, the HH prefix split on real dialogues, prompt-grouped splits."""

from __future__ import annotations

import pandas as pd
import pytest

from anchorviz.data.adapters import adapt_records
from anchorviz.data.readers import get_manifest, load_pairs
from anchorviz.data.schema import PAIR_COLUMNS, validate_pairs
from anchorviz.data.splits import protocol_splits, split_by_prompt
from anchorviz.paths import realdata_dir

pytestmark = [
    pytest.mark.realdata,
    pytest.mark.skipif(
        realdata_dir() is None,
        reason="../shared/realdata not present (set $ANCHORVIZ_REALDATA to run the real-data tests)",
    ),
]

# name -> (pairs kept, distinct prompts, category). The files are already cleaned (README):
# the loader reads every row and drops none, except one UltraFeedback pair whose response is a
# lone zero-width space (U+200B): no token after tokenisation, dropped and counted at load.
EXPECTED = {
    "realdata-hh-harmless": (2308, 2306, "harmless"),
    "realdata-pku-safe": (3590, 930, "harmless"),
    "realdata-ultrafeedback": (1058, 1058, "helpful"),
    "realdata-pandalm": (762, 153, "helpful"),
    "realdata-xstest-respond": (456, 113, "harmless"),
    "realdata-xstest-refuse": (519, 131, "harmless"),
}
DROPPED = {"realdata-ultrafeedback": {"empty_response": 1}}


@pytest.fixture(scope="module")
def loaded() -> dict[str, tuple[pd.DataFrame, object]]:
    return {name: load_pairs(name) for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_and_drop_reasons(loaded, name: str) -> None:
    df, rep = loaded[name]
    pairs, prompts, category = EXPECTED[name]
    dropped = DROPPED.get(name, {})
    assert rep.kept == pairs and rep.total == pairs + sum(dropped.values())
    assert {k: v for k, v in rep.dropped.items()} == dropped
    assert len(df) == pairs and df["prompt"].nunique() == prompts
    assert list(df.columns) == PAIR_COLUMNS
    validate_pairs(df, name)
    assert df["pair_id"].is_unique and df["pair_id"].iloc[0] == f"{name}:0"
    assert set(df["dataset"]) == {name}
    assert all(isinstance(m.get("source"), str) for m in df["meta"])  # the "source" column
    m = get_manifest(name)
    assert m["category"] == category and (realdata_dir() / m["local_file"]).is_file()


def test_hh_prompts_keep_their_turns(loaded) -> None:
    df, _ = loaded["realdata-hh-harmless"]
    assert df["prompt"].str.startswith("\n\nHuman:").all()
    assert df["prompt"].str.endswith("\n\nAssistant:").all()
    turns = df["prompt_turns"].tolist()
    assert all(isinstance(t, list) and t[0]["role"] == "user" and t[-1]["role"] == "user" for t in turns)
    assert max(len(t) for t in turns) > 1  # multi-turn dialogues are there


def test_hh_adapter_recovers_real_dialogues(loaded) -> None:
    """Rebuild the hub's {chosen, rejected} transcripts and split them again."""
    df, _ = loaded["realdata-hh-harmless"]
    recs = [{"chosen": f"{p} {c}", "rejected": f"{p} {r}"}
            for p, c, r in zip(df["prompt"], df["chosen"], df["rejected"])]
    out, rep = adapt_records(recs, adapter="hh", dataset="hh-rebuilt")
    assert rep.kept == len(df) and rep.dropped == {}
    assert out["prompt"].tolist() == df["prompt"].tolist()
    assert out["chosen"].tolist() == df["chosen"].tolist()
    assert out["rejected"].tolist() == df["rejected"].tolist()


@pytest.mark.parametrize("name,sizes", [
    ("realdata-pku-safe", {"teacher_train": 1000, "w2s_train": 1500, "val": 300, "source_test": 600}),
    ("realdata-pandalm", {"teacher_train": 200, "w2s_train": 300, "val": 50, "source_test": 150}),
])
def test_prompt_grouped_splits_on_multi_pair_prompts(loaded, name: str, sizes: dict) -> None:
    df, _ = loaded[name]
    a = split_by_prompt(df, sizes, seed=0)
    assert {k: len(v) for k, v in a.items()} == sizes
    owner: dict[str, str] = {}
    for split, part in a.items():
        for p in part["prompt"]:
            assert owner.setdefault(p, split) == split, f"prompt in {owner[p]} and {split}"
    b = split_by_prompt(df, sizes, seed=0)
    assert all(a[k]["pair_id"].tolist() == b[k]["pair_id"].tolist() for k in sizes)
    c = split_by_prompt(df, sizes, seed=1)
    assert any(set(a[k]["pair_id"]) != set(c[k]["pair_id"]) for k in sizes)


@pytest.mark.parametrize("source,target", [
    ("realdata-pku-safe", "realdata-hh-harmless"),
    ("realdata-ultrafeedback", "realdata-pandalm"),
])
def test_protocol_splits_on_natural_pairs(loaded, source: str, target: str) -> None:
    src, tgt = loaded[source][0], loaded[target][0]
    sizes = {"teacher_train": 200, "w2s_train": 300, "val": 50, "source_test": 200}
    out = protocol_splits(src, {target: tgt}, sizes, target_test_size=300, seed=0)
    assert set(out) == set(sizes) | {f"target_test:{target}"}
    assert len(out[f"target_test:{target}"]) == 300
    assert set(out[f"target_test:{target}"]["dataset"]) == {target}


@pytest.mark.parametrize("name,refusal_chosen", [("realdata-xstest-respond", False),
                                                 ("realdata-xstest-refuse", True)])
def test_xstest_targets_hold_the_refusal_shift(loaded, name: str, refusal_chosen: bool) -> None:
    """XSTest (issue 44): every prompt has several pairs (so split and bootstrap by prompt), and
    the refusing side is the rejected one on should-respond prompts, the chosen one on
    should-refuse prompts (the data audit in docs/RESULTS.md)."""
    from anchorviz.analysis.cues import cue_agreement, cue_sides

    df, _ = loaded[name]
    per_prompt = df.groupby("prompt").size()
    assert per_prompt.max() > 1 and per_prompt.mean() > 3
    row = cue_agreement(cue_sides(df, ["refusal"]), n_boot=200).set_index("cue").loc["refusal"]
    assert row["n_side"] > 300
    assert (row["chosen_share"] > 0.9) if refusal_chosen else (row["chosen_share"] < 0.1)
    assert get_manifest(name)["target_only"] is True
