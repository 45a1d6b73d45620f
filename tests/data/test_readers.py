"""anchorviz.data.readers: load_pairs on local files (every format, directories, non-UTF-8
bytes, empty files), the adapter sniffed from the rows, named datasets, hub ids, the VADER
dispatch and the manifests (list_datasets)."""

from __future__ import annotations

import gzip
import json
import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from builders import NON_UTF8, pairs_rows, write_jsonl
from pair_rows import CMAP, GENERIC, HH_PROMPT, HH_ROWS, HS3_ROWS, write_parquet

from anchorviz.data.readers import CATEGORIES, get_manifest, list_datasets, load_pairs
from anchorviz.data.schema import DataError

# ----------------------------------------------------------------------------------------------
# Anthropic HH-RLHF: {chosen, rejected} full transcripts
# ----------------------------------------------------------------------------------------------


def test_local_hh_file_is_sniffed_without_adapter(hh_file: Path) -> None:
    df, rep = load_pairs(hh_file)
    assert rep.kept == 2 and df["prompt"].iloc[0] == HH_PROMPT
    assert df["pair_id"].iloc[0] == "test:0" and df["dataset"].iloc[0] == "test"


# ----------------------------------------------------------------------------------------------
# HelpSteer3 preference: context turns, response1/2, overall_preference -3..3
# ----------------------------------------------------------------------------------------------


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
# generic local files with a column map
# ----------------------------------------------------------------------------------------------


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


def test_message_list_file_is_not_mistaken_for_hh(tmp_path: Path) -> None:
    row = {"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
           "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go"}]}
    path = write_jsonl(tmp_path / "trl.jsonl", [row])
    with pytest.raises(DataError, match="'prompt'"):  # generic adapter: prompt column expected
        load_pairs(path)
    df, _ = load_pairs(path, column_map={"prompt": None})
    assert df["chosen"].tolist() == ["hello"]


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
    "realdata-xstest-respond", "realdata-xstest-refuse",
    "vader-movie", "vader-amazon", "vader-nyt", "vader-tweets",
}


def test_list_datasets_and_manifest_fields() -> None:
    table = list_datasets()
    assert list(table.columns) == ["name", "hub_id", "category", "licence", "adapter"]
    assert set(table["name"]) == EXPECTED_NAMES
    assert set(table["category"]) <= set(CATEGORIES)
    for name in EXPECTED_NAMES:
        m = get_manifest(name)
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
    assert get_manifest("helpsteer3")["config"] == "preference"
    assert get_manifest("ultrafeedback")["splits"] == ["train_prefs", "test_prefs"]
    with pytest.raises(ValueError, match="known datasets"):
        get_manifest("nope")


def test_target_only_dataset_is_refused_as_a_source() -> None:
    """XSTest's manifests say target_only (issue 44): as data.source the run stops before
    reading any file, naming the field and the manifest; the same name as a target is fine."""
    from anchorviz.config import DataConfig
    from anchorviz.pipeline.prepare import _refuse_target_only_source, prepare_data

    for name in ("realdata-xstest-respond", "realdata-xstest-refuse"):
        assert get_manifest(name)["target_only"] is True
        with pytest.raises(DataError, match=r"data\.source: .*zero-shot target only"):
            prepare_data(DataConfig(source=name, targets=["realdata-hh-harmless"]))
    _refuse_target_only_source("realdata-hh-harmless")  # an ordinary source passes
    assert not get_manifest("realdata-hh-harmless").get("target_only")


# --------------------------------------------------------------------------- bad input


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
