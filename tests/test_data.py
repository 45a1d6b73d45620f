"""The preference-data layer: adapters on fixture rows in each source's real row format,
drop reports, strict mode, name resolution, manifests, schema checks and prompt-grouped splits."""

from __future__ import annotations

import gzip
import json
import math
import re
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import NON_UTF8, pairs_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anchorviz import data
from anchorviz.data import (
    CATEGORIES,
    PAIR_COLUMNS,
    DataError,
    DropReport,
    adapt_records,
    dedupe_pairs,
    list_datasets,
    load_pairs,
    parse_hh_turns,
    protocol_splits,
    render_turns,
    split_by_prompt,
    split_hh_dialogue,
    validate_pairs,
)

# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def by_id(df: pd.DataFrame) -> dict[str, dict]:
    return {r["pair_id"]: r for r in df.to_dict("records")}


# ----------------------------------------------------------------------------------------------
# Anthropic HH-RLHF: {chosen, rejected} full transcripts
# ----------------------------------------------------------------------------------------------

HH_PROMPT = (
    "\n\nHuman: What is a good way to relax after work?"
    "\n\nAssistant: A warm bath helps many people."
    "\n\nHuman: Anything else?"
    "\n\nAssistant:"
)
HH_ROWS = [
    # 0: multi-turn; both replies start with "Reading" (the split must not cut inside a reply)
    {"chosen": HH_PROMPT + " Reading a book or taking a short walk can help.",
     "rejected": HH_PROMPT + " Reading is boring, just go to bed."},
    # 1: single turn
    {"chosen": "\n\nHuman: How do I boil an egg?\n\nAssistant: Put it in boiling water for 8 minutes.",
     "rejected": "\n\nHuman: How do I boil an egg?\n\nAssistant: I don't know."},
    # 2: exact duplicate of row 0
    {"chosen": HH_PROMPT + " Reading a book or taking a short walk can help.",
     "rejected": HH_PROMPT + " Reading is boring, just go to bed."},
    # 3: chosen == rejected
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello.", "rejected": "\n\nHuman: Hi\n\nAssistant: Hello."},
    # 4: no "\n\nAssistant:" at all
    {"chosen": "Human: hi there, Assistant: hello", "rejected": "Human: hi there, Assistant: go away"},
    # 5: chosen not a string
    {"chosen": 5, "rejected": "\n\nHuman: Hi\n\nAssistant: Hello."},
    # 6: rejected missing
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello."},
    # 7: empty final reply
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello there.", "rejected": "\n\nHuman: Hi\n\nAssistant:"},
]


@pytest.fixture
def hh_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "test.jsonl", HH_ROWS)


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


def test_local_hh_file_is_sniffed_without_adapter(hh_file: Path) -> None:
    df, rep = load_pairs(hh_file)
    assert rep.kept == 2 and df["prompt"].iloc[0] == HH_PROMPT
    assert df["pair_id"].iloc[0] == "test:0" and df["dataset"].iloc[0] == "test"


# ----------------------------------------------------------------------------------------------
# HelpSteer3 preference: context turns, response1/2, overall_preference -3..3
# ----------------------------------------------------------------------------------------------

HS3_ROWS = [
    {"domain": "general", "language": "english",
     "context": [{"role": "user", "content": "What is 2+2?"}],
     "response1": "2+2 is 4.", "response2": "It is 5.", "overall_preference": -2},
    {"domain": "general", "language": "english",
     "context": [{"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Hello! How can I help?"},
                 {"role": "user", "content": "Tell me a joke"}],
     "response1": "No.", "response2": "Why did the chicken cross the road? To get to the other side.",
     "overall_preference": 3},
    {"domain": "code", "language": "python", "context": [{"role": "user", "content": "sort a list"}],
     "response1": "sorted(xs)", "response2": "xs.sort()", "overall_preference": 0},
    {"domain": "stem", "language": "english", "context": [{"role": "user", "content": "q"}],
     "response1": "a", "response2": "b", "overall_preference": 5},
    {"domain": "stem", "language": "english", "context": [{"role": "user", "content": "q2"}],
     "response1": "  ", "response2": "b", "overall_preference": -1},
    {"domain": "stem", "language": "english", "context": "just a string",
     "response1": "a", "response2": "b", "overall_preference": 1},
]


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


def test_helpsteer3_hub_call_uses_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load(path, **kwargs):
        calls.append((path, kwargs))
        return datasets.Dataset.from_list(HS3_ROWS[:2])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    df, rep = load_pairs("helpsteer3", split="validation")
    assert calls == [("nvidia/HelpSteer3", {"split": "validation", "name": "preference"})]
    assert rep.kept == 2 and rep.source.startswith("hf://nvidia/HelpSteer3")
    assert df["chosen"].tolist() == ["2+2 is 4.", HS3_ROWS[1]["response2"]]


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

GENERIC = [
    {"question": "Capital of France?", "good": "Paris.", "bad": "Rome.", "id": "a"},
    {"question": "2+2?", "good": "4", "bad": "5", "id": "b"},
    {"question": "2+2?", "good": "4", "bad": "5", "id": "c"},  # duplicate triple
    {"question": "Same?", "good": "x", "bad": "x", "id": "d"},
]
CMAP = {"prompt": "question", "chosen": "good", "rejected": "bad"}


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


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet", "jsonl.gz"])
def test_generic_file_formats(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"pairs.{fmt}"
    rows = GENERIC[:2]
    if fmt == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    elif fmt == "parquet":
        write_parquet(path, rows)
    else:
        import gzip

        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    df, rep = load_pairs(path, column_map=CMAP)
    assert df["chosen"].tolist() == ["Paris.", "4"] and rep.kept == 2
    assert df["dataset"].iloc[0] == "pairs"


def test_generic_message_list_responses() -> None:
    row = {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
           "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go"}]}
    df, _ = adapt_records([row], column_map={"prompt": None})
    assert (df["prompt"].iloc[0], df["chosen"].iloc[0], df["rejected"].iloc[0]) == ("hi", "hello", "go")
    assert df["prompt_turns"].iloc[0] == [{"role": "user", "content": "hi"}]


def test_message_list_file_is_not_mistaken_for_hh(tmp_path: Path) -> None:
    row = {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
           "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go"}]}
    path = write_jsonl(tmp_path / "trl.jsonl", [row])
    with pytest.raises(DataError, match="'prompt'"):  # generic adapter: prompt column expected
        load_pairs(path)
    df, _ = load_pairs(path, column_map={"prompt": None})
    assert df["chosen"].tolist() == ["hello"]


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


def test_non_utf8_bytes_name_file_offset_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    good = (json.dumps(GENERIC[0]) + "\n").encode()
    bad = b'{"question": "caf\xe9", "good": "a", "bad": "b"}\n'
    path.write_bytes(good + bad)
    with pytest.raises(DataError) as ei:
        load_pairs(path, column_map=CMAP)
    msg = str(ei.value)
    assert str(path) in msg and "UTF-8" in msg and "line 2" in msg
    offset = len(good) + bad.index(b"\xe9")
    assert f"byte offset {offset}" in msg
    assert not isinstance(ei.value, UnicodeDecodeError)
    csv = tmp_path / "latin1.csv"
    csv.write_bytes(b"question,good,bad\ncaf\xe9,a,b\n")
    with pytest.raises(DataError, match="byte offset 21 .line 2"):
        load_pairs(csv, column_map=CMAP)


def test_invalid_json_line_is_counted_or_strict_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GENERIC[0]) + "\n{not json\n" + json.dumps(GENERIC[1]) + "\n",
                    encoding="utf-8")
    df, rep = load_pairs(path, column_map=CMAP)
    assert rep.kept == 2 and rep.dropped == {"malformed_row": 1}
    assert rep.examples["malformed_row"][0][0] == 1 and "line 2" in rep.examples["malformed_row"][0][1]
    with pytest.raises(DataError, match="row 1"):
        load_pairs(path, column_map=CMAP, strict=True)


def test_directory_with_split_files(tmp_path: Path) -> None:
    d = tmp_path / "mydata"
    d.mkdir()
    write_jsonl(d / "train.jsonl", GENERIC[:1])
    write_jsonl(d / "test.jsonl", GENERIC[1:2])
    df, rep = load_pairs(d, "test", column_map=CMAP)
    assert df["chosen"].tolist() == ["4"] and df["pair_id"].tolist() == ["mydata:test:0"]
    all_df, _ = load_pairs(d, column_map=CMAP)
    assert len(all_df) == 2
    with pytest.raises(DataError, match="no file for split 'validation'"):
        load_pairs(d, "validation", column_map=CMAP)


def test_limit_and_domain(tmp_path: Path) -> None:
    rows = [{"prompt": f"p{i}", "chosen": "a", "rejected": "b"} for i in range(10)]
    path = write_jsonl(tmp_path / "ten.jsonl", rows)
    df, rep = load_pairs(path, limit=3, domain="toy-domain")
    assert len(df) == 3 and rep.total == 3 and rep.kept == 3
    assert set(df["domain"]) == {"toy-domain"}
    with pytest.raises(ValueError):
        load_pairs(path, limit=-1)


# ----------------------------------------------------------------------------------------------
# name resolution and hub ids
# ----------------------------------------------------------------------------------------------


def test_missing_file_and_unknown_name() -> None:
    with pytest.raises(FileNotFoundError, match="does/not/exist.jsonl"):
        load_pairs("./does/not/exist.jsonl")
    with pytest.raises(ValueError) as ei:
        load_pairs("no-such-dataset")
    assert "hh-rlhf-harmless" in str(ei.value) and "helpsteer3" in str(ei.value)
    assert not isinstance(ei.value, DataError)


def test_hub_id_with_column_map(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load(path, **kwargs):
        calls.append((path, kwargs))
        return datasets.Dataset.from_list(GENERIC)

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    df, rep = load_pairs("someone/prefs", column_map=CMAP)
    assert calls == [("someone/prefs", {"split": "train"})]
    assert df["pair_id"].tolist() == ["someone/prefs:train:0", "someone/prefs:train:1"]
    assert rep.dropped == {"duplicate": 1, "chosen_equals_rejected": 1}


def test_manifest_hub_call_and_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load(path, **kwargs):
        calls.append((path, kwargs))
        return datasets.Dataset.from_list(HH_ROWS[:2])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    df, rep = load_pairs("hh-rlhf-harmless", split="test")
    assert calls[-1] == ("Anthropic/hh-rlhf", {"split": "test", "data_dir": "harmless-base"})
    assert rep.kept == 2 and df["pair_id"].iloc[0] == "hh-rlhf-harmless:test:0"
    load_pairs("hh-rlhf-helpful")
    assert calls[-1] == ("Anthropic/hh-rlhf", {"split": "train", "data_dir": "helpful-base"})
    with pytest.raises(DataError, match="has splits"):
        load_pairs("hh-rlhf-harmless", split="validation")

    def offline(path, **kwargs):
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="Anthropic/hh-rlhf.*hub unreachable"):
        load_pairs("hh-rlhf-harmless", split="test")


def test_vader_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def fake_vader_pairs(domain: str) -> pd.DataFrame:
        seen.append(domain)
        row = {"pair_id": "v-1", "dataset": f"vader-{domain}", "domain": domain, "prompt": "",
               "chosen": "great film", "rejected": "awful film", "prompt_turns": None,
               "meta": {"text_id_a": "1"}}
        return pd.DataFrame([row, {**row, "pair_id": "v-2"}, {**row, "pair_id": "v-3", "chosen": "ok"}])

    fake = types.ModuleType("anchorviz.data.vader")
    fake.vader_pairs = fake_vader_pairs
    monkeypatch.setitem(sys.modules, "anchorviz.data.vader", fake)
    df, rep = load_pairs("vader-movie")
    assert seen == ["movie"] and df["pair_id"].tolist() == ["v-1", "v-3"]
    assert rep.total == 3 and rep.kept == 2 and rep.dropped == {"duplicate": 1}
    load_pairs("vader-nyt")
    assert seen[-1] == "nyt"
    monkeypatch.setitem(sys.modules, "anchorviz.data.vader", None)
    with pytest.raises(ImportError, match="anchorviz.data.vader"):
        load_pairs("vader-tweets")


# ----------------------------------------------------------------------------------------------
# manifests
# ----------------------------------------------------------------------------------------------

EXPECTED_NAMES = {
    "hh-rlhf-helpful", "hh-rlhf-harmless", "helpsteer3", "ultrafeedback",
    "pku-saferlhf-harmless", "pku-saferlhf-helpful", "rail-hh-10k",
    "realdata-hh-harmless", "realdata-pku-safe", "realdata-ultrafeedback", "realdata-pandalm",
    "vader-movie", "vader-amazon", "vader-nyt", "vader-tweets",
}


def test_list_datasets_and_manifest_fields() -> None:
    table = list_datasets()
    assert list(table.columns) == ["name", "hub_id", "category", "licence", "adapter"]
    assert set(table["name"]) == EXPECTED_NAMES
    assert set(table["category"]) <= set(CATEGORIES)
    for name in EXPECTED_NAMES:
        m = data.get_manifest(name)
        assert m["url"] and m["citation"] and m["licence"]
        if m["hub_id"]:
            assert m["splits"] and m["default_split"] in m["splits"]
    vader = table[table["adapter"] == "vader"]
    assert set(vader["name"]) == {f"vader-{d}" for d in ("movie", "amazon", "nyt", "tweets")}
    assert set(vader["licence"]) == {"MIT"} and set(vader["category"]) == {"sentiment"}
    hubs = dict(zip(table["name"], table["hub_id"]))
    assert hubs["helpsteer3"] == "nvidia/HelpSteer3"
    assert hubs["ultrafeedback"] == "HuggingFaceH4/ultrafeedback_binarized"
    assert hubs["pku-saferlhf-harmless"] == hubs["pku-saferlhf-helpful"] == "PKU-Alignment/PKU-SafeRLHF"
    assert hubs["rail-hh-10k"] == "responsible-ai-labs/RAIL-HH-10K"
    assert data.get_manifest("helpsteer3")["config"] == "preference"
    assert data.get_manifest("ultrafeedback")["splits"] == ["train_prefs", "test_prefs"]
    with pytest.raises(ValueError, match="known datasets"):
        data.get_manifest("nope")


# ----------------------------------------------------------------------------------------------
# validate_pairs / dedupe_pairs
# ----------------------------------------------------------------------------------------------


def good_table(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame([
        {"pair_id": f"t:{i}", "dataset": "t", "domain": "t", "prompt": f"p{i}", "chosen": "yes",
         "rejected": "no", "prompt_turns": None, "meta": {}} for i in range(n)
    ], columns=PAIR_COLUMNS)


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
    with pytest.raises(DataError, match=rf"row 2: field '{field}' is empty; expected a non-empty"):
        load_pairs(path, strict=True)
    df, rep = load_pairs(path)
    assert rep.dropped == {"empty_response": 1} and len(df) == 2
    assert all(s.strip() for s in df["chosen"]) and all(s.strip() for s in df["rejected"])


@pytest.mark.parametrize("name, content", [
    ("zero.jsonl", b""), ("blank.jsonl", b"\n\n   \n"), ("list.json", b"[]"),
    ("header.csv", b"prompt,chosen,rejected\n"), ("zero.csv", b""), ("zero.jsonl.gz", None),
    ("obj.json", b'{"a": 1}'), ("scalar.json", b"42"),
])
def test_empty_or_rowless_files_are_errors_naming_the_file(tmp_path: Path, name: str,
                                                           content: bytes | None) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"") if content is None else content)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}: (contains no rows|could not "
                                        r"parse csv|expected a JSON list of row objects)"):
        load_pairs(path)


def test_empty_parquet_and_empty_directory(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    pd.DataFrame({"prompt": [], "chosen": [], "rejected": []}).to_parquet(path)
    with pytest.raises(DataError, match="contains no rows"):
        load_pairs(path)
    d = tmp_path / "nothing"
    d.mkdir()
    (d / "notes.txt").write_text("no data here")
    with pytest.raises(DataError, match="directory holds no data files"):
        load_pairs(d)


def test_a_dataset_whose_every_row_is_dropped_fails_at_the_split_not_later(tmp_path: Path) -> None:
    rows = [{"prompt": f"p{i}", "chosen": "same", "rejected": "same"} for i in range(5)]
    df, rep = load_pairs(write_jsonl(tmp_path / "ties.jsonl", rows))
    assert df.empty and list(df.columns) == PAIR_COLUMNS and rep.dropped == {
        "chosen_equals_rejected": 5}
    with pytest.raises(DataError, match=r"requested 3 pairs .* only 0 pairs in 0 groups"):
        split_by_prompt(df, {"train": 2, "test": 1}, seed=0)


@pytest.mark.parametrize("name, payload", [
    ("latin1.json", b"[" + NON_UTF8.strip() + b"]"),
    ("latin1.tsv", b"prompt\tchosen\trejected\ncaf\xe9\ta\tb\n"),
    ("latin1.jsonl.gz", gzip.compress(NON_UTF8)),
    ("utf16.jsonl", json.dumps({"prompt": "x", "chosen": "a", "rejected": "b"}).encode("utf-16")),
    ("cp1252.csv", "prompt,chosen,rejected\n\u201cquoted\u201d,a,b\n".encode("cp1252")),
])
def test_non_utf8_bytes_in_any_format_name_the_file_and_offset(tmp_path: Path, name: str,
                                                               payload: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(payload)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}: not valid UTF-8 at byte "
                                        r"offset \d+ \(line \d+\).*re-encode the file as UTF-8"):
        load_pairs(path)


def test_non_utf8_file_inside_a_directory(tmp_path: Path) -> None:
    d = tmp_path / "mixed"
    d.mkdir()
    write_jsonl(d / "a.jsonl", pairs_rows(2))
    (d / "b.jsonl").write_bytes(NON_UTF8)
    with pytest.raises(DataError, match=r"b\.jsonl: not valid UTF-8"):
        load_pairs(d)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: load_pairs(123), ValueError, "unknown dataset '123'"),
    (lambda: load_pairs("no-such-name"), ValueError, "unknown dataset 'no-such-name'"),
    (lambda: load_pairs("./missing.jsonl"), FileNotFoundError, "missing.jsonl"),
    (lambda: load_pairs("x.jsonl", column_map=["prompt"]), TypeError,
     "column_map must be a mapping, got list"),
    (lambda: load_pairs("x", adapter="nope", column_map={}), ValueError, "unknown adapter 'nope'"),
])
def test_load_pairs_wrong_argument_types(call, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


def test_load_pairs_bad_limit_and_unknown_column_map_key(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", pairs_rows(3))
    for limit in ("3", 1.5, True):
        with pytest.raises(ValueError, match="limit must be a non-negative int or None"):
            load_pairs(path, limit=limit)
    with pytest.raises(DataError, match=r"column_map key\(s\) \['answer'\] are not fields"):
        load_pairs(path, column_map={"answer": "chosen"})


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
