"""anchorviz.data.schema: the pair table's checks (validate_pairs names the row, column and
expected form) and dedupe_pairs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pair_rows import good_table

from anchorviz.data.adapters import adapt_records
from anchorviz.data.schema import PAIR_COLUMNS, DataError, DropReport, dedupe_pairs, validate_pairs

# ----------------------------------------------------------------------------------------------
# validate_pairs / dedupe_pairs
# ----------------------------------------------------------------------------------------------


def test_validate_pairs_accepts_and_rejects() -> None:
    df = good_table()
    out = validate_pairs(df.assign(extra=1)[["extra"] + PAIR_COLUMNS], "unit")
    assert list(out.columns) == PAIR_COLUMNS + ["extra"]
    with pytest.raises(DataError, match=r"unit: missing column\(s\) \['meta'\]"):
        validate_pairs(df.drop(columns="meta"), "unit")
    bad = df.copy()
    bad.loc[1, "chosen"] = ""
    with pytest.raises(DataError, match=r"unit: row 1 \(pair_id='t:1'\): column 'chosen'"):
        validate_pairs(bad, "unit")
    bad = df.copy()
    bad.loc[2, "rejected"] = "yes"
    with pytest.raises(DataError, match="row 2.*different from chosen"):
        validate_pairs(bad, "unit")
    bad = df.copy()
    bad["pair_id"] = ["a", "b", "a"]
    with pytest.raises(DataError, match="row 2: column 'pair_id' must be unique"):
        validate_pairs(bad, "unit")
    bad = df.copy()
    bad["prompt_turns"] = [None, [{"role": "user"}], None]
    with pytest.raises(DataError, match="row 1.*prompt_turns"):
        validate_pairs(bad, "unit")
    bad = df.copy()
    bad["meta"] = [{}, {}, "x"]
    with pytest.raises(DataError, match="row 2.*'meta'"):
        validate_pairs(bad, "unit")


def test_dedupe_pairs_counts() -> None:
    df = pd.concat([good_table(2), good_table(1)], ignore_index=True)
    df.loc[2, "pair_id"] = "t:dup"
    same = good_table(1).assign(pair_id="t:same", rejected="yes")
    rep = DropReport("t")
    out = dedupe_pairs(pd.concat([df, same], ignore_index=True), rep)
    assert out["pair_id"].tolist() == ["t:0", "t:1"]
    assert rep.dropped == {"duplicate": 1, "chosen_equals_rejected": 1}


# ----------------------------------------------------------------------------------------------
# property tests
# ----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(
    st.tuples(st.sampled_from(["", "p", "q"]), st.sampled_from(["a", "b", "c"]),
              st.sampled_from(["a", "b", "c"])),
    min_size=0, max_size=40,
))
def test_property_dedupe(rows: list[tuple[str, str, str]]) -> None:
    recs = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in rows]
    df, rep = adapt_records(recs, dataset="h")
    kept = list(zip(df["prompt"], df["chosen"], df["rejected"]))
    assert len(kept) == len(set(kept))
    assert all(c != r for _, c, r in kept)
    valid = [t for t in rows if t[1] != t[2]]
    assert set(kept) == set(valid)
    first = {}
    for i, t in enumerate(rows):
        first.setdefault(t, i)
    assert df["pair_id"].tolist() == [f"h:{first[t]}" for t in kept]
    assert rep.total == len(rows) == rep.kept + rep.n_dropped
    assert rep.dropped.get("chosen_equals_rejected", 0) == sum(c == r for _, c, r in rows)
    assert rep.dropped.get("duplicate", 0) == len(valid) - len(set(valid))
    # the table-level dedupe agrees
    raw = pd.DataFrame(recs, columns=["prompt", "chosen", "rejected"])
    assert list(dedupe_pairs(raw).itertuples(index=False, name=None)) == kept


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.assign(chosen=[np.nan, "yes", "yes"]), r"row 0 .*'chosen' must be a non-empty "
                                                         r"str, got float nan"),
    (lambda d: d.assign(rejected=["no", "  ", "no"]), r"row 1 .*'rejected' must be a non-empty"),
    (lambda d: d.assign(prompt=pd.Series(["p", None, "p"], dtype=object)),
     r"row 1 .*'prompt' must be a str \(may be empty\), got NoneType"),
    (lambda d: d.assign(prompt=["p", np.nan, "p"]), r"row 1 .*'prompt' must be a str .*float nan"),
    (lambda d: d.assign(pair_id=[1, 2, 3]), r"row 0 .*'pair_id' must be a non-empty str, got int"),
    (lambda d: d.assign(dataset=["t", "", "t"]), r"row 1 .*'dataset' must be a non-empty str"),
    (lambda d: d.assign(chosen=[b"yes", "yes", "yes"]), r"row 0 .*'chosen'.*got bytes"),
    (lambda d: d.assign(prompt_turns=pd.Series([None, None, "user: hi"], dtype=object)),
     r"row 2 .*'prompt_turns' must be None or a list of \{role, content\} dicts"),
    (lambda d: d.assign(prompt_turns=[np.nan, None, None]), r"row 0 .*'prompt_turns'.*float nan"),
])
def test_validate_pairs_names_row_column_and_expected_form(mutate, match: str) -> None:
    with pytest.raises(DataError, match="^unit: " + match):
        validate_pairs(mutate(good_table()), "unit")


@pytest.mark.parametrize("obj", [None, [{"pair_id": "a"}], {"pair_id": ["a"]}, "table", 5])
def test_validate_pairs_needs_a_dataframe(obj: object) -> None:
    with pytest.raises(DataError, match=r"unit: expected a pandas DataFrame, got"):
        validate_pairs(obj, "unit")  # type: ignore[arg-type]


def test_validate_pairs_accepts_an_empty_table_with_the_schema() -> None:
    assert validate_pairs(pd.DataFrame(columns=PAIR_COLUMNS), "unit").empty


# --------------------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 8), row=st.integers(0, 7),
       column=st.sampled_from(["pair_id", "dataset", "domain", "prompt", "chosen", "rejected",
                               "prompt_turns", "meta"]),
       bad=st.sampled_from([None, 3, 2.5, float("nan"), b"x", ["x"]]))
def test_property_one_bad_cell_is_always_named(n: int, row: int, column: str, bad: object) -> None:
    row = row % n
    df = good_table(n)
    if column == "prompt_turns" and bad is None:
        return  # None is a valid prompt_turns
    df[column] = df[column].astype(object)
    df.at[row, column] = bad
    with pytest.raises(DataError, match=rf"unit: row {row} .*column '{column}'"):
        validate_pairs(df, "unit")
