"""anchorviz.data.splits: prompt-grouped splits (split_by_prompt: disjoint, exact, seeded,
fractions, group keys, bad sizes) and the protocol's splits (protocol_splits)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from builders import write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pair_rows import good_table

from anchorviz.data.readers import load_pairs
from anchorviz.data.schema import PAIR_COLUMNS, DataError
from anchorviz.data.splits import protocol_splits, split_by_prompt

# ----------------------------------------------------------------------------------------------
# splits
# ----------------------------------------------------------------------------------------------


def grouped_table(group_sizes: list[int]) -> pd.DataFrame:
    rows = []
    for g, size in enumerate(group_sizes):
        for j in range(size):
            rows.append({"pair_id": f"g{g}-{j}", "dataset": "t", "domain": "t", "prompt": f"prompt {g}",
                         "chosen": f"good {g} {j}", "rejected": f"bad {g} {j}", "prompt_turns": None,
                         "meta": {"text_id": f"x{g}"}})
    return pd.DataFrame(rows)


SIZES = {"teacher_train": 20, "w2s_train": 30, "val": 6, "source_test": 15}


def prompts(d: dict[str, pd.DataFrame]) -> dict[str, set[str]]:
    return {k: set(v["prompt"]) for k, v in d.items()}


def test_split_by_prompt_disjoint_exact_and_seeded() -> None:
    df = grouped_table([(i % 4) + 1 for i in range(60)])  # 150 pairs, 60 prompts
    a = split_by_prompt(df, SIZES, seed=0)
    assert {k: len(v) for k, v in a.items()} == SIZES
    ps = prompts(a)
    names = list(ps)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            assert not ps[x] & ps[y], (x, y)
    ids = [pid for v in a.values() for pid in v["pair_id"]]
    assert len(ids) == len(set(ids))
    b = split_by_prompt(df, SIZES, seed=0)
    for k in SIZES:
        pd.testing.assert_frame_equal(a[k], b[k])
    c = split_by_prompt(df, SIZES, seed=1)
    assert any(set(a[k]["pair_id"]) != set(c[k]["pair_id"]) for k in SIZES)


def test_split_fractions_group_key_variants_and_too_small() -> None:
    df = grouped_table([2] * 50)  # 100 pairs
    out = split_by_prompt(df, {"train": 0.5, "test": 0.25}, seed=3)
    assert (len(out["train"]), len(out["test"])) == (50, 25)
    # VADER-like tables: empty prompts, group by a meta key, a callable, or per pair
    vad = df.assign(prompt="")
    by_meta = split_by_prompt(vad, {"a": 40, "b": 40}, seed=0, group_key="text_id")
    ta = {m["text_id"] for m in by_meta["a"]["meta"]}
    tb = {m["text_id"] for m in by_meta["b"]["meta"]}
    assert not ta & tb
    by_fn = split_by_prompt(vad, {"a": 40, "b": 40}, seed=0, group_key=lambda r: r["meta"]["text_id"])
    assert {m["text_id"] for m in by_fn["a"]["meta"]} == ta
    per_pair = split_by_prompt(vad, {"a": 99, "b": 1}, seed=0, group_key=None)
    assert len(per_pair["a"]) == 99
    with pytest.raises(DataError, match=r"requested 101 pairs .* only 100 pairs in 50 groups"):
        split_by_prompt(df, {"a": 60, "b": 41}, seed=0)
    with pytest.raises(DataError, match="largest group 2 pairs"):
        split_by_prompt(df, {"a": 50, "b": 49, "c": 1}, seed=0)
    with pytest.raises(DataError, match="neither a column"):
        split_by_prompt(df, {"a": 1}, seed=0, group_key="nope")
    with pytest.raises(ValueError):
        split_by_prompt(df, {"a": 1.5}, seed=0)


def test_protocol_splits() -> None:
    source = grouped_table([3] * 40)  # 120 pairs
    target = grouped_table([2] * 30).assign(dataset="u")  # prompts "prompt 0..29" overlap source
    target_only = target.assign(prompt=lambda d: "target " + d["prompt"])
    out = protocol_splits(source, {"u": target, "v": target_only},
                          {"teacher_train": 30, "w2s_train": 30, "val": 9, "source_test": 30},
                          target_test_size=10, seed=0)
    assert set(out) == {"teacher_train", "w2s_train", "val", "source_test", "target_test:u", "target_test:v"}
    assert len(out["target_test:u"]) == 10 and len(out["target_test:v"]) == 10
    trained = set().union(*(set(out[s]["prompt"]) for s in ("teacher_train", "w2s_train", "val")))
    assert not trained & set(out["target_test:u"]["prompt"])
    with pytest.raises(ValueError, match="source_test"):
        protocol_splits(source, {}, {"teacher_train": 1, "w2s_train": 1, "val": 1}, 1, 0)


# ----------------------------------------------------------------------------------------------
# property tests
# ----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    group_sizes=st.lists(st.integers(1, 5), min_size=1, max_size=30),
    sizes=st.lists(st.integers(0, 25), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_property_split_by_prompt(group_sizes: list[int], sizes: list[int], seed: int) -> None:
    df = grouped_table(group_sizes)
    req = {f"s{i}": s for i, s in enumerate(sizes)}
    n, want, k, m = len(df), sum(sizes), len(sizes), max(group_sizes)
    try:
        out = split_by_prompt(df, req, seed=seed)
    except DataError as err:
        assert want > n or n < want + k * (m - 1), err  # only fails when it may have to
        return
    assert {s: len(v) for s, v in out.items()} == req
    owner: dict[str, str] = {}
    for s, v in out.items():
        for p in v["prompt"]:
            assert owner.setdefault(p, s) == s  # no prompt in two splits
    ids = [pid for v in out.values() for pid in v["pair_id"]]
    assert len(ids) == len(set(ids))
    again = split_by_prompt(df, req, seed=seed)
    assert all(again[s]["pair_id"].tolist() == out[s]["pair_id"].tolist() for s in req)


# --------------------------------------------------------------------------- bad input


def test_a_dataset_whose_every_row_is_dropped_fails_at_the_split_not_later(tmp_path: Path) -> None:
    rows = [{"prompt": f"p{i}", "chosen": "same", "rejected": "same"} for i in range(5)]
    df, rep = load_pairs(write_jsonl(tmp_path / "ties.jsonl", rows))
    assert df.empty and list(df.columns) == PAIR_COLUMNS and rep.dropped == {
        "chosen_equals_rejected": 5}
    with pytest.raises(DataError, match=r"requested 3 pairs .* only 0 pairs in 0 groups"):
        split_by_prompt(df, {"train": 2, "test": 1}, seed=0)


@pytest.mark.parametrize("sizes, exc, match", [
    ({}, ValueError, "sizes must name at least one split"),
    ({"a": -1}, ValueError, "size of split 'a' must be >= 0, got -1"),
    ({"a": True}, ValueError, "size of split 'a' must be an int"),
    ({"a": "10"}, ValueError, "size of split 'a' must be an int"),
    ({"a": None}, ValueError, "size of split 'a' must be an int"),
    ({"a": 0.0}, ValueError, r"fraction for split 'a' must be in \(0, 1\]"),
    ({"a": 1.5}, ValueError, r"fraction for split 'a' must be in \(0, 1\]"),
    ({"a": float("nan")}, ValueError, r"fraction for split 'a' must be in \(0, 1\]"),
    ({"a": 0.6, "b": 0.6}, ValueError, r"fractions add up to 1.200 > 1"),
    ({"a": 10**9}, DataError, r"requested 1000000000 pairs"),
])
def test_split_by_prompt_bad_sizes(sizes: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        split_by_prompt(good_table(6), sizes, seed=0)


def test_split_by_prompt_bad_group_keys() -> None:
    df = good_table(4)
    with pytest.raises(DataError, match="group_key 'nope' is neither a column"):
        split_by_prompt(df, {"a": 1}, seed=0, group_key="nope")
    with pytest.raises(TypeError, match="group_key must be a column / meta key, a callable or None"):
        split_by_prompt(df, {"a": 1}, seed=0, group_key=5)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="group key 'prompt' is missing for row 2"):
        split_by_prompt(df.assign(prompt=["a", "b", None, "c"]), {"a": 1}, seed=0)
    with pytest.raises(DataError, match="requested 1 pairs .* only 0 pairs"):
        split_by_prompt(pd.DataFrame(columns=PAIR_COLUMNS), {"a": 1}, seed=0)


# --------------------------------------------------------------------------- properties


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 40), fracs=st.lists(st.floats(0.01, 0.5), min_size=1, max_size=3),
       seed=st.integers(0, 2**16))
def test_property_fraction_splits_have_floored_sizes_and_keep_row_order(
        n: int, fracs: list[float], seed: int) -> None:
    if sum(fracs) > 1:
        fracs = [f / (sum(fracs) + 1e-6) for f in fracs]
    df = good_table(n)
    sizes = {f"s{i}": f for i, f in enumerate(fracs)}
    out = split_by_prompt(df, sizes, seed=seed, group_key=None)
    for name, f in sizes.items():
        assert len(out[name]) == math.floor(f * n + 1e-9)
        pos = [int(p.split(":")[1]) for p in out[name]["pair_id"]]
        assert pos == sorted(pos)  # original order within a split
    ids = [p for v in out.values() for p in v["pair_id"]]
    assert len(ids) == len(set(ids)) and set(ids) <= set(df["pair_id"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(src=st.lists(st.integers(0, 6), min_size=8, max_size=30),
       tgt=st.lists(st.integers(0, 12), min_size=1, max_size=20), seed=st.integers(0, 999))
def test_property_protocol_target_tests_never_share_a_training_prompt(
        src: list[int], tgt: list[int], seed: int) -> None:
    def table(prompts: list[int], name: str) -> pd.DataFrame:
        return good_table(len(prompts)).assign(
            pair_id=[f"{name}:{i}" for i in range(len(prompts))],
            prompt=[f"prompt {p}" for p in prompts])

    sizes = {"teacher_train": 1, "w2s_train": 1, "val": 1, "source_test": 1}
    try:
        out = protocol_splits(table(src, "s"), {"t": table(tgt, "t")}, sizes, None, seed)
    except DataError:
        return  # too few whole prompt groups for the four splits
    seen = {p for s in ("teacher_train", "w2s_train", "val") for p in out[s]["prompt"]}
    assert not seen & set(out["target_test:t"]["prompt"])
    assert set(out["target_test:t"]["prompt"]) == {f"prompt {p}" for p in tgt} - seen
