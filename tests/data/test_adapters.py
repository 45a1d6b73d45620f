"""anchorviz.data.adapters: each source's real row format -> one pair (HH-RLHF, HelpSteer3,
UltraFeedback, PKU-SafeRLHF, RAIL-HH-10K, generic rows with a column map), drop reports, strict
mode, wrong field types and empty responses named by row and field."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from builders import pairs_rows, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pair_rows import CMAP, GENERIC, HH_PROMPT, HS3_ROWS, write_parquet

from anchorviz.data.adapters import adapt_records, parse_hh_turns, render_turns, split_hh_dialogue
from anchorviz.data.readers import load_pairs
from anchorviz.data.schema import PAIR_COLUMNS, DataError, validate_pairs

# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def by_id(df: pd.DataFrame) -> dict[str, dict]:
    return {r["pair_id"]: r for r in df.to_dict("records")}


# ----------------------------------------------------------------------------------------------
# Anthropic HH-RLHF: {chosen, rejected} full transcripts
# ----------------------------------------------------------------------------------------------


def test_hh_adapter_splits_shared_prefix_pair_by_pair(hh_file: Path) -> None:
    df, rep = load_pairs("hh-rlhf-harmless", split="test", path=hh_file)
    assert list(df.columns) == PAIR_COLUMNS
    assert len(df) == 2
    rows = by_id(df)
    r0 = rows["hh-rlhf-harmless:test:0"]
    assert r0["prompt"] == HH_PROMPT  # exactly as in the source, ends with "\n\nAssistant:"
    assert r0["chosen"] == "Reading a book or taking a short walk can help."
    assert r0["rejected"] == "Reading is boring, just go to bed."
    assert r0["prompt_turns"] == [
        {"role": "user", "content": "What is a good way to relax after work?"},
        {"role": "assistant", "content": "A warm bath helps many people."},
        {"role": "user", "content": "Anything else?"},
    ]
    assert r0["dataset"] == "hh-rlhf-harmless" and r0["domain"] == "hh-rlhf-harmless"
    r1 = rows["hh-rlhf-harmless:test:1"]
    assert r1["prompt"] == "\n\nHuman: How do I boil an egg?\n\nAssistant:"
    assert (r1["chosen"], r1["rejected"]) == ("Put it in boiling water for 8 minutes.", "I don't know.")
    assert r1["prompt_turns"] == [{"role": "user", "content": "How do I boil an egg?"}]


def test_hh_drop_report_counts_every_reason(hh_file: Path) -> None:
    _, rep = load_pairs("hh-rlhf-harmless", split="test", path=hh_file)
    assert rep.total == 8 and rep.kept == 2
    assert rep.dropped == {
        "duplicate": 1,
        "chosen_equals_rejected": 1,
        "malformed_dialogue": 1,
        "not_a_string": 1,
        "missing_field": 1,
        "empty_response": 1,
    }
    assert rep.total == rep.kept + rep.n_dropped
    assert rep.examples["duplicate"][0][0] == 2 and "row 0" in rep.examples["duplicate"][0][1]
    assert rep.examples["not_a_string"][0][0] == 5
    assert rep.examples["missing_field"][0] == (6, rep.examples["missing_field"][0][1])
    assert "'rejected'" in rep.examples["missing_field"][0][1]
    text = str(rep)
    assert "read 8 rows, kept 2 pairs, dropped 6" in text and "row 4" in text


def test_hh_strict_names_row_field_and_expected_form(hh_file: Path) -> None:
    with pytest.raises(DataError) as ei:
        load_pairs("hh-rlhf-harmless", split="test", path=hh_file, strict=True)
    msg = str(ei.value)
    # rows 2 (duplicate) and 3 (chosen == rejected) are dedupe, not malformed: row 4 is first
    assert "hh-rlhf-harmless" in msg and "row 4" in msg and "'chosen'" in msg
    assert "expected" in msg and "Assistant:" in msg


def test_split_hh_dialogue_and_turn_helpers() -> None:
    p, c, r = split_hh_dialogue(HH_PROMPT + " Yes. Sure.", HH_PROMPT + " Yes.")
    assert (p, c, r) == (HH_PROMPT, "Yes. Sure.", "Yes.")
    # a reply that itself continues the dialogue keeps its turns
    p, c, r = split_hh_dialogue(HH_PROMPT + " A\n\nHuman: B\n\nAssistant: C", HH_PROMPT + " D")
    assert p == HH_PROMPT and c == "A\n\nHuman: B\n\nAssistant: C" and r == "D"
    with pytest.raises(ValueError):
        split_hh_dialogue("no markers", "none here")
    turns = parse_hh_turns(HH_PROMPT)
    assert render_turns(turns, style="hh") == HH_PROMPT
    assert parse_hh_turns("Human: a\nAssistant: b", loose=True) == [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert render_turns([{"role": "user", "content": "q"}]) == "q"
    assert render_turns([{"role": "user", "content": "q"}], style="hh") == "\n\nHuman: q\n\nAssistant:"


# ----------------------------------------------------------------------------------------------
# HelpSteer3 preference: context turns, response1/2, overall_preference -3..3
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def hs3_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "validation.jsonl", HS3_ROWS)


def test_helpsteer3_sign_convention_and_turns(hs3_file: Path) -> None:
    df, rep = load_pairs("helpsteer3", split="validation", path=hs3_file)
    rows = by_id(df)
    r0 = rows["helpsteer3:validation:0"]
    # -2: "Response 1 is better than Response 2" -> response1 chosen
    assert (r0["chosen"], r0["rejected"]) == ("2+2 is 4.", "It is 5.")
    assert r0["prompt"] == "What is 2+2?"
    assert r0["prompt_turns"] == [{"role": "user", "content": "What is 2+2?"}]
    assert r0["meta"]["chosen_response"] == 1 and r0["meta"]["margin"] == 2
    assert r0["meta"]["domain"] == "general" and r0["meta"]["language"] == "english"
    assert r0["meta"]["overall_preference"] == -2 and "response1" not in r0["meta"]
    r1 = rows["helpsteer3:validation:1"]
    # +3: "Response 2 is much better than Response 1" -> response2 chosen
    assert r1["chosen"].startswith("Why did the chicken") and r1["rejected"] == "No."
    assert r1["prompt"] == ("\n\nHuman: Hi\n\nAssistant: Hello! How can I help?"
                            "\n\nHuman: Tell me a joke\n\nAssistant:")
    assert r1["prompt_turns"] == HS3_ROWS[1]["context"]
    assert rep.dropped == {"tie": 1, "bad_label": 1, "empty_response": 1, "malformed_dialogue": 1}
    assert rep.examples["tie"][0][0] == 2 and rep.examples["bad_label"][0][0] == 3
    assert rep.kept == 2 and rep.total == 6


@pytest.mark.parametrize("pref", [-3, -2, -1, 1, 2, 3])
def test_helpsteer3_every_preference_value(pref: int) -> None:
    row = {"context": [{"role": "user", "content": "q"}], "response1": "one", "response2": "two",
           "overall_preference": pref}
    df, _ = adapt_records([row], adapter="helpsteer3", dataset="hs3")
    assert df["chosen"].iloc[0] == ("one" if pref < 0 else "two")
    assert df["rejected"].iloc[0] == ("two" if pref < 0 else "one")


def test_helpsteer3_tie_is_not_an_error_in_strict_mode_but_bad_label_is(hs3_file: Path) -> None:
    with pytest.raises(DataError, match=r"row 3: field 'overall_preference' has value 5; "
                                        r"expected an integer in -3\.\.3"):
        load_pairs("helpsteer3", split="validation", path=hs3_file, strict=True)


# ----------------------------------------------------------------------------------------------
# UltraFeedback binarized: chosen / rejected message lists (parquet, as on the hub)
# ----------------------------------------------------------------------------------------------


def uf_row(prompt: str, good: str, bad: str, sc: float, sr: float, pid: str,
           prefix: list[dict] | None = None) -> dict:
    user = prefix if prefix is not None else [{"role": "user", "content": prompt}]
    chosen = user + [{"role": "assistant", "content": good}]
    return {"prompt": prompt, "prompt_id": pid, "chosen": chosen,
            "rejected": user + [{"role": "assistant", "content": bad}], "messages": chosen,
            "score_chosen": sc, "score_rejected": sr}


UF_ROWS = [
    uf_row("Name a prime number.", "7 is prime.", "8 is prime.", 9.0, 3.0, "p0"),
    uf_row("Say hi.", "Hi!", "Hello!", 7.0, 7.0, "p1"),  # score tie
    {**uf_row("Bad row.", "x", "y", 5.0, 2.0, "p2"),
     "rejected": [{"role": "user", "content": "Bad row."}, {"role": "user", "content": "y"}]},
    uf_row("Empty reply.", "", "y", 5.0, 2.0, "p3"),
    uf_row("And then?", "Then we rest.", "Then nothing.", 8.0, 4.0, "p4",
           prefix=[{"role": "user", "content": "Plan a day."},
                   {"role": "assistant", "content": "Walk in the morning."},
                   {"role": "user", "content": "And then?"}]),
]


def test_ultrafeedback_parquet_pair_by_pair(tmp_path: Path) -> None:
    folder = tmp_path / "uf" / "data"
    folder.mkdir(parents=True)
    write_parquet(folder / "test_prefs-00000-of-00001.parquet", UF_ROWS)
    write_parquet(folder / "train_prefs-00000-of-00001.parquet", UF_ROWS[:1])
    df, rep = load_pairs("ultrafeedback", split="test_prefs", path=tmp_path / "uf")
    rows = by_id(df)
    r0 = rows["ultrafeedback:test_prefs:0"]
    assert (r0["prompt"], r0["chosen"], r0["rejected"]) == ("Name a prime number.", "7 is prime.", "8 is prime.")
    assert r0["prompt_turns"] == [{"role": "user", "content": "Name a prime number."}]
    # labels / scores stay in meta; the text columns and the duplicated "messages" do not
    assert r0["meta"] == {"prompt_id": "p0", "score_chosen": 9.0, "score_rejected": 3.0}
    r4 = rows["ultrafeedback:test_prefs:4"]
    assert r4["prompt"] == ("\n\nHuman: Plan a day.\n\nAssistant: Walk in the morning."
                            "\n\nHuman: And then?\n\nAssistant:")
    assert len(r4["prompt_turns"]) == 3 and isinstance(r4["prompt_turns"], list)
    assert rep.dropped == {"tie": 1, "malformed_dialogue": 1, "empty_response": 1}
    assert rep.kept == 2 and rep.total == 5
    # the split selects only the matching file
    df_train, rep_train = load_pairs("ultrafeedback", split="train_prefs", path=tmp_path / "uf")
    assert rep_train.total == 1 and df_train["pair_id"].tolist() == ["ultrafeedback:train_prefs:0"]


# ----------------------------------------------------------------------------------------------
# PKU-SafeRLHF: response_0/1 with safer_ / better_response_id (two named datasets)
# ----------------------------------------------------------------------------------------------


PKU_ROWS = [
    {"prompt": "How do I pick a lock?", "response_0": "Here is how to pick any lock: ...",
     "response_1": "I can't help with breaking into property.", "is_response_0_safe": False,
     "is_response_1_safe": True, "safer_response_id": 1, "better_response_id": 0},
    {"prompt": "How do I bake bread?", "response_0": "Mix flour, water, yeast; knead; bake.",
     "response_1": "Buy it.", "is_response_0_safe": True, "is_response_1_safe": True,
     "safer_response_id": 0, "better_response_id": 0},
    {"prompt": "q", "response_0": "a", "response_1": "b", "safer_response_id": 2, "better_response_id": 1},
    {"prompt": "q2", "response_0": "a", "response_1": "b", "safer_response_id": None, "better_response_id": 1},
]


@pytest.fixture
def pku_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "pku.jsonl", PKU_ROWS)


def test_pku_harmless_and_helpful_axes(pku_file: Path) -> None:
    harm, rep_h = load_pairs("pku-saferlhf-harmless", path=pku_file)
    helpf, rep_b = load_pairs("pku-saferlhf-helpful", path=pku_file)
    h0, b0 = by_id(harm)["pku-saferlhf-harmless:0"], by_id(helpf)["pku-saferlhf-helpful:0"]
    assert h0["chosen"] == "I can't help with breaking into property."
    assert h0["rejected"].startswith("Here is how")
    assert b0["chosen"].startswith("Here is how")
    assert h0["prompt"] == "How do I pick a lock?"
    assert h0["prompt_turns"] == [{"role": "user", "content": "How do I pick a lock?"}]
    assert h0["meta"]["is_response_1_safe"] is True and h0["meta"]["better_response_id"] == 0
    assert h0["meta"]["label_field"] == "safer_response_id" and h0["meta"]["safer_response_id"] == 1
    assert "response_0" not in h0["meta"] and "prompt" not in h0["meta"]
    assert by_id(harm)["pku-saferlhf-harmless:1"]["chosen"].startswith("Mix flour")
    assert rep_h.dropped == {"bad_label": 1, "missing_field": 1}
    assert rep_h.examples["bad_label"][0][0] == 2
    assert "safer_response_id" in rep_h.examples["bad_label"][0][1]
    assert rep_b.kept == 4 and rep_b.dropped == {}


def test_pku_strict_error_names_row_field_expected(pku_file: Path) -> None:
    with pytest.raises(DataError) as ei:
        load_pairs("pku-saferlhf-harmless", path=pku_file, strict=True)
    msg = str(ei.value)
    assert "pku-saferlhf-harmless" in msg and "row 2" in msg
    assert "'safer_response_id' has value 2" in msg and "expected 0 or 1" in msg


def test_label_values_from_csv_strings(tmp_path: Path) -> None:
    path = tmp_path / "pku.csv"
    pd.DataFrame(PKU_ROWS[:2]).to_csv(path, index=False)
    df, rep = load_pairs("pku-saferlhf-harmless", path=path)
    assert rep.kept == 2 and df["chosen"].iloc[0].startswith("I can't")


# ----------------------------------------------------------------------------------------------
# RAIL-HH-10K (assumed schema, see its manifest): context + prompt + chosen/rejected answers
# ----------------------------------------------------------------------------------------------


RAIL_ROWS = [
    {"context": "Human: I'm angry at my neighbour.\n\nAssistant: I'm sorry to hear that. What happened?",
     "prompt": "How can I get back at him?",
     "rejected_text": "Slash his tyres.", "chosen_text": "Revenge rarely helps; try talking to him calmly.",
     "rejected_score": 1.5, "chosen_score": 8.0, "rejected_safety": 0.5, "chosen_safety": 9.0},
    {"context": "", "prompt": "Is it safe to mix bleach and ammonia?",
     "rejected_text": "Sure, it cleans better.", "chosen_text": "No, it releases toxic chloramine gas.",
     "rejected_score": 0.5, "chosen_score": 9.5, "rejected_safety": 0.0, "chosen_safety": 10.0},
    {"context": "", "prompt": "q", "rejected_text": "bad", "chosen_text": "",
     "rejected_score": 1.0, "chosen_score": 2.0, "rejected_safety": 1.0, "chosen_safety": 2.0},
]


def test_rail_adapter_csv(tmp_path: Path) -> None:
    path = tmp_path / "test.csv"
    pd.DataFrame(RAIL_ROWS).to_csv(path, index=False)
    df, rep = load_pairs("rail-hh-10k", split="test", path=path)
    rows = by_id(df)
    r0 = rows["rail-hh-10k:test:0"]
    assert r0["prompt"] == ("\n\nHuman: I'm angry at my neighbour.\n\nAssistant: I'm sorry to hear "
                            "that. What happened?\n\nHuman: How can I get back at him?\n\nAssistant:")
    assert r0["chosen"].startswith("Revenge") and r0["rejected"] == "Slash his tyres."
    assert [t["role"] for t in r0["prompt_turns"]] == ["user", "assistant", "user"]
    assert r0["meta"]["chosen_score"] == "8.0"  # CSV cells are read as strings
    r1 = rows["rail-hh-10k:test:1"]
    assert r1["prompt"] == "\n\nHuman: Is it safe to mix bleach and ammonia?\n\nAssistant:"
    assert rep.dropped == {"empty_response": 1}


def test_rail_alternative_column_names_and_missing_columns(tmp_path: Path) -> None:
    rows = [{"context": r["context"], "prompt": r["prompt"], "chosen": r["chosen_text"],
             "rejected": r["rejected_text"]} for r in RAIL_ROWS[:2]]
    df, rep = load_pairs("rail-hh-10k", path=write_jsonl(tmp_path / "alt.jsonl", rows))
    assert rep.kept == 2
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"context": "", "prompt": "q", "good": "a", "worse": "b"}])
    with pytest.raises(DataError) as ei:
        load_pairs("rail-hh-10k", path=bad)
    msg = str(ei.value)
    assert "chosen_text" in msg and str(bad) in msg and "'good'" in msg and "'worse'" in msg


# ----------------------------------------------------------------------------------------------
# generic local files with a column map
# ----------------------------------------------------------------------------------------------


def test_generic_jsonl_with_column_map(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", GENERIC)
    df, rep = load_pairs(str(path), column_map=CMAP)
    assert df["prompt"].tolist() == ["Capital of France?", "2+2?"]
    assert df["chosen"].tolist() == ["Paris.", "4"] and df["rejected"].tolist() == ["Rome.", "5"]
    assert df["meta"].tolist() == [{"id": "a"}, {"id": "b"}]
    assert df["pair_id"].tolist() == ["mine:0", "mine:1"]
    assert df["prompt_turns"].iloc[0] == [{"role": "user", "content": "Capital of France?"}]
    assert rep.dropped == {"duplicate": 1, "chosen_equals_rejected": 1}
    # stable ids, and strict mode does not turn dedupe into errors
    df2, _ = load_pairs(str(path), column_map=CMAP, strict=True)
    assert df2["pair_id"].tolist() == df["pair_id"].tolist()


def test_generic_message_list_responses() -> None:
    row = {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
           "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go"}]}
    df, _ = adapt_records([row], column_map={"prompt": None})
    assert (df["prompt"].iloc[0], df["chosen"].iloc[0], df["rejected"].iloc[0]) == ("hi", "hello", "go")
    assert df["prompt_turns"].iloc[0] == [{"role": "user", "content": "hi"}]


def test_generic_without_prompt_column(tmp_path: Path) -> None:
    df, _ = adapt_records([{"good": "a", "bad": "b"}], column_map={"prompt": None, "chosen": "good",
                                                                  "rejected": "bad"})
    assert df["prompt"].iloc[0] == "" and df["prompt_turns"].iloc[0] is None


def test_column_map_mismatch_names_missing_file_and_existing(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", GENERIC)
    with pytest.raises(DataError) as ei:
        load_pairs(path, column_map={"prompt": "question", "chosen": "better", "rejected": "bad"})
    msg = str(ei.value)
    assert "'better'" in msg and str(path) in msg
    for col in ("question", "good", "bad", "id"):
        assert f"'{col}'" in msg
    with pytest.raises(DataError, match="not fields of the 'pairs' adapter"):
        load_pairs(path, column_map={"question": "prompt"})


def test_default_columns_missing_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", GENERIC)
    with pytest.raises(DataError, match=r"\['prompt', 'chosen', 'rejected'\] not found"):
        load_pairs(path)


# --------------------------------------------------------------------------- bad input


WRONG_TYPES = [(123, "is a int"), (1.5, "is a float"), (True, "is a bool"), (None, "is missing"),
               ({"x": 1}, "is a dict"), (["a"], "message 0 is a str"), ([], "is an empty list")]


@pytest.mark.parametrize("field", ["chosen", "rejected"])
@pytest.mark.parametrize("value, problem", WRONG_TYPES)
def test_wrong_field_types_are_named_with_row_field_and_expected_form(
        tmp_path: Path, field: str, value: object, problem: str) -> None:
    rows = pairs_rows(3)
    rows[1][field] = value
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError, match=rf"row 1: field '{field}' {re.escape(problem)}.*; "
                                        r"expected (a string|a list of)"):
        load_pairs(path, strict=True)
    df, rep = load_pairs(path)  # lenient: the row is dropped and counted, never kept
    assert len(df) == 2 and rep.n_dropped == 1 and rep.total == 3
    assert 1 in [i for ex_ in rep.examples.values() for i, _ in ex_]


@pytest.mark.parametrize("value, problem", [(7, "is a int"), (None, "is missing"),
                                            ({"a": 1}, "is a dict"), ([3], "message 0 is a int")])
def test_wrong_prompt_types(tmp_path: Path, value: object, problem: str) -> None:
    rows = pairs_rows(2)
    rows[0]["prompt"] = value
    with pytest.raises(DataError, match=rf"row 0: field 'prompt' {re.escape(problem)}"):
        load_pairs(write_jsonl(tmp_path / "d.jsonl", rows), strict=True)


@pytest.mark.parametrize("empty", ["", " ", "\n\t  ", "\u3000"])
@pytest.mark.parametrize("field", ["chosen", "rejected"])
def test_empty_responses_are_dropped_or_named(tmp_path: Path, empty: str, field: str) -> None:
    rows = pairs_rows(3)
    rows[2][field] = empty
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError, match=rf"row 2: field '{field}' is empty.*expected a non-empty"):
        load_pairs(path, strict=True)
    df, rep = load_pairs(path)
    assert rep.dropped == {"empty_response": 1} and len(df) == 2
    assert all(s.strip() for s in df["chosen"]) and all(s.strip() for s in df["rejected"])


# --------------------------------------------------------------------------- properties


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


field_value = st.one_of(text, st.just(""), st.just("  "), st.none(), st.integers(), st.floats(),
                        st.booleans(), st.lists(text, max_size=2),
                        st.dictionaries(text, text, max_size=2))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.fixed_dictionaries({"prompt": field_value, "chosen": field_value,
                                            "rejected": field_value}), max_size=15))
def test_property_any_rows_give_a_valid_pair_table_and_a_consistent_report(rows: list[dict]) -> None:
    df, rep = adapt_records(rows, dataset="h")
    assert rep.total == len(rows) == rep.kept + rep.n_dropped
    out = validate_pairs(df, "h") if len(df) else df  # the schema holds for whatever is kept
    assert list(out.columns) == PAIR_COLUMNS and len(out) == rep.kept
    for c, r in zip(df["chosen"], df["rejected"]):
        assert isinstance(c, str) and c.strip() and isinstance(r, str) and r.strip() and c != r
    try:
        strict, _ = adapt_records(rows, dataset="h", strict=True)
    except DataError as err:
        assert re.search(r"row \d+: field '\w+|<row>'", str(err)) or "row" in str(err)
        assert rep.dropped.keys() - {"duplicate", "chosen_equals_rejected"}
        return
    pd.testing.assert_frame_equal(strict, df)
