"""Reliability: what `anchorviz analyse` and the training pipeline load is what the checkpoint
holds. Missing head weights, a missing tokenizer, pickle-only weights and a local path that does
not exist are refused with a message that names them, before anything is computed."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from builders import word_tokenizer
from tiny_project import save_tiny_model

from anchorviz.models.reward_model import ModelError, load_backbone, resolve_reference
from anchorviz.pipeline.analyse import load_checkpoint_model


def _bert_rm(folder: Path, tokenizer: bool = True) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    tok = word_tokenizer("encoder")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                     num_labels=1)
    BertForSequenceClassification(cfg).save_pretrained(folder)
    if tokenizer:
        tok.save_pretrained(folder)
    return folder


def test_sequence_classifier_without_its_head_weights_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = _bert_rm(tmp_path / "rm")
    state = load_file(str(folder / "model.safetensors"))
    kept = {k: v for k, v in state.items() if not k.startswith(("classifier.", "pooler.",
                                                                 "bert.pooler."))}
    assert len(kept) < len(state)
    save_file(kept, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"classifier\.weight") as err:
        load_checkpoint_model(str(folder))
    assert "pooler" in str(err.value) and "rm" in str(err.value)


def test_backbone_missing_weights_it_uses_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = save_tiny_model(tmp_path / "m", layers=2)
    state = load_file(str(folder / "model.safetensors"))
    gone = next(k for k in state if "encoder.layer.1." in k)
    save_file({k: v for k, v in state.items() if k != gone}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(ModelError, match=gone.split(".", 1)[-1].replace(".", r"\.")):
        load_backbone(str(folder))


def test_checkpoint_without_tokenizer_files_is_refused(tmp_path: Path) -> None:
    folder = _bert_rm(tmp_path / "rm", tokenizer=False)
    with pytest.raises(ModelError, match=r"no tokenizer files") as err:
        load_checkpoint_model(str(folder))
    assert str(folder) in str(err.value)
    bare = save_tiny_model(tmp_path / "bb", layers=1)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (bare / f).unlink()
    with pytest.raises(ModelError, match=r"no tokenizer files"):
        load_backbone(str(bare))


def test_a_tokenizer_far_smaller_than_the_embedding_is_refused(tmp_path: Path) -> None:
    """A tokenizer file present but of another (tiny) vocabulary: not this model's."""
    from transformers import BertConfig, BertModel

    folder = tmp_path / "big"
    BertModel(BertConfig(vocab_size=4000, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, intermediate_size=64),
              add_pooling_layer=False).save_pretrained(folder)
    word_tokenizer("encoder").save_pretrained(folder)
    with pytest.raises(ModelError, match=r"tokenizer .* \d+ tokens .* 4000"):
        load_backbone(str(folder))


def _pickle_only(folder: Path) -> Path:
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    return folder


def test_pickle_only_weights_need_the_explicit_flag(tmp_path: Path) -> None:
    folder = _pickle_only(_bert_rm(tmp_path / "rm"))
    with pytest.raises(ModelError, match=r"pytorch_model\.bin.*--allow-pickle-weights"):
        load_checkpoint_model(str(folder))
    loaded = load_checkpoint_model(str(folder), allow_pickle_weights=True)
    assert loaded.info["head"] == "classifier"
    bb = _pickle_only(save_tiny_model(tmp_path / "bb", layers=1))
    with pytest.raises(ModelError, match=r"--allow-pickle-weights"):
        load_backbone(str(bb))
    model, _ = load_backbone(str(bb), allow_pickle_weights=True)
    assert model.config.num_hidden_layers == 1


def test_allowed_pickle_weights_are_still_not_unpickled_as_code(tmp_path: Path) -> None:
    folder = save_tiny_model(tmp_path / "m", layers=1)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ModelError):
        load_backbone(str(folder), allow_pickle_weights=True)
    assert not marker.exists()


def _no_hub(monkeypatch) -> list:
    """Record (and refuse) every from_pretrained call: a local-path mistake must not reach it."""
    import transformers

    calls: list = []

    def refuse(*a, **k):
        calls.append(a)
        raise AssertionError(f"from_pretrained called with {a}")

    for cls in (transformers.AutoTokenizer, transformers.AutoModel, transformers.AutoConfig,
                transformers.AutoModelForSequenceClassification):
        monkeypatch.setattr(cls, "from_pretrained", refuse)
    return calls


def test_a_missing_relative_path_under_an_existing_folder_fails_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "item8").mkdir()
    calls = _no_hub(monkeypatch)
    for load in (load_backbone, load_checkpoint_model):
        with pytest.raises(ModelError, match=r"item8/nope.*local folder.*does not exist"):
            load("item8/nope")
    assert calls == []


def test_offline_a_hub_id_that_is_not_cached_fails_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    calls = _no_hub(monkeypatch)
    with pytest.raises(ModelError, match=r"nobody/nope.*no local folder.*HF_HUB_OFFLINE"):
        load_backbone("nobody/nope")
    with pytest.raises(ModelError, match=r"HF_HUB_OFFLINE"):
        load_checkpoint_model("nobody/nope")
    assert calls == []


def test_a_hub_id_stays_a_hub_id_with_network(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert resolve_reference("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    folder = save_tiny_model(tmp_path / "org" / "m", layers=1)
    assert resolve_reference("org/m") == str(folder.relative_to(tmp_path))
    shutil.rmtree(folder)
    with pytest.raises(ModelError, match="does not exist"):
        resolve_reference("org/m")


def test_cli_analyse_refuses_pickle_weights_without_the_flag(tmp_path, capsys) -> None:
    from anchorviz import cli

    folder = _pickle_only(_bert_rm(tmp_path / "rm"))
    code = cli.main(["analyse", "--model", str(folder), "--reference", str(folder),
                     "--source", "vader-movie", "--out", str(tmp_path / "out")])
    assert code != 0
    assert "--allow-pickle-weights" in capsys.readouterr().err
    args = cli.build_parser().parse_args(["analyse", "--model", str(folder), "--reference",
                                          str(folder), "--source", "x", "--allow-pickle-weights"])
    assert args.allow_pickle_weights is True
