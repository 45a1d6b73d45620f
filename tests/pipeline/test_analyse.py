"""``anchorviz analyse`` on reward models trained elsewhere (issue 21.1), offline:

* a tiny Llama trained by TRL's ``RewardTrainer`` on VADER pairs (pad == eos, as TRL sets it:
  the score is read on the token before the closing EOS), analysed against its base: the
  rewards equal the framework's own forward, accuracy / drift / map land in a run folder that
  the results table and the HTML report read;
* a PEFT LoRA adapter (``SEQ_CLS``, ``score`` in ``modules_to_save``) on the same base;
* an encoder (BERT ``classifier`` on the pooler) and a backbone saved with a value head.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
import torch
from builders import word_tokenizer
from tiny_project import save_tiny_model, write_pairs

from anchorviz.data.readers import load_pairs
from anchorviz.models.tokenization import encode_pairs
from anchorviz.pipeline.analyse import analyse, load_checkpoint_model, summary_lines

trl = pytest.importorskip("trl")  # a dev dependency (pyproject); CI has it


def _vader_tokenizer(texts):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(
        vocab_size=4000, special_tokens=["<unk>", "<s>", "</s>"]))
    # no pad token: TRL pads with the eos token and records it as config.pad_token_id
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")


@pytest.fixture(scope="module")
def trl_checkpoint(tmp_path_factory):
    """(base folder, RewardTrainer checkpoint folder): a 2-layer Llama trained 12 steps."""
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaModel
    from trl import RewardConfig, RewardTrainer

    root = tmp_path_factory.mktemp("trl")
    df = load_pairs("vader-movie")[0].iloc[:96]
    texts = [t for d in ("vader-movie", "vader-amazon", "vader-nyt")
             for t in pd.concat([load_pairs(d)[0].iloc[:200][c] for c in ("chosen", "rejected")])]
    tok = _vader_tokenizer(texts)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                      max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
    base = root / "base"
    LlamaModel(cfg).save_pretrained(base)
    tok.save_pretrained(base)
    args = RewardConfig(output_dir=str(root / "trainer"), max_steps=12,
                        per_device_train_batch_size=8, learning_rate=2e-3, report_to="none",
                        save_strategy="no", logging_steps=1000, use_cpu=True, max_length=64,
                        seed=0, disable_tqdm=True, bf16=False, fp16=False)
    ds = Dataset.from_dict({"chosen": list(df["chosen"]), "rejected": list(df["rejected"])})
    trainer = RewardTrainer(model=str(base), args=args, train_dataset=ds,
                            processing_class=type(tok).from_pretrained(base))
    try:
        trainer.train()
        ckpt = root / "rm"
        trainer.save_model(str(ckpt))
    finally:
        # the Trainer's process-wide Accelerate state would refuse anchorviz's own Accelerator
        # (another mixed-precision setting) in the tests that run after this one
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
    return base, ckpt


def _framework_scores(folder, tok, pairs, max_length):
    """Rewards from transformers' own class, one unpadded sequence at a time."""
    from transformers import AutoModelForSequenceClassification

    fw = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    enc = encode_pairs(tok, pairs, max_length=max_length)
    out = []
    with torch.no_grad():
        for ids in (*enc.chosen_ids, *enc.rejected_ids):
            out.append(float(fw(input_ids=torch.tensor([ids])).logits[0, 0]))
    n = len(enc)
    return np.array(out[:n]), np.array(out[n:])


def test_trl_reward_trainer_checkpoint_round_trip(trl_checkpoint, tmp_path):
    base, ckpt = trl_checkpoint
    cfgj = json.loads((ckpt / "config.json").read_text())
    assert cfgj["architectures"] == ["LlamaForSequenceClassification"]
    assert cfgj["pad_token_id"] == cfgj["eos_token_id"]  # TRL's convention, the tricky one
    out = tmp_path / "an"
    res = analyse(str(ckpt), str(base), "vader-movie", ["vader-amazon"], ["vader-nyt"], out,
                  name="trl-rm", pairs=40, max_length=48, projection="pca", n_boot=200)
    ck = res.metrics["checkpoint"]
    assert ck["kind"] == "sequence-classification" and ck["head"] == "score"
    v = ck["verification"]
    assert v["checked"] and v["convention"] == "last_non_pad" and v["max_abs_diff"] <= 1e-5
    # the naive reading (the closing EOS, which equals the pad id) is not what TRL trained
    assert v["tried"] == {"last_non_pad": v["max_abs_diff"]}

    # stored rewards are transformers' own, recomputed independently
    scores = pd.read_parquet(res.run_dir / "scores.parquet")
    src = scores[scores["split"] == "source_test"].sort_values("pair_id")
    pairs = load_pairs("vader-movie")[0].set_index("pair_id").loc[src["pair_id"].head(6)]
    rc, rr = _framework_scores(ckpt, load_checkpoint_model(str(ckpt)).tokenizer,
                               pairs.reset_index(), 48)
    np.testing.assert_allclose(src["r_chosen"].head(6), rc, atol=1e-5)
    np.testing.assert_allclose(src["r_rejected"].head(6), rr, atol=1e-5)
    assert set(scores["split"]) == {"source_test", "target_test:amazon"}
    assert (res.run_dir / "scores_unlabelled.parquet").is_file()

    # accuracy per labelled domain with intervals; drift per layer for every domain
    acc = res.metrics["accuracy"]
    assert set(acc) == {"source_test", "target_test:amazon", "ood"}
    for b in acc.values():
        assert 0 <= b["lo"] <= b["point"] <= b["hi"] <= 1
    drift = pd.read_parquet(res.run_dir / "drift.parquet")
    assert set(drift["split"]) == {"source_test", "target_test:amazon", "target_test:nyt"}
    assert sorted(drift["layer"].unique()) == [0, 1, 2]
    last = drift[drift["layer"] == 2]
    assert (last["cosine_centred_mean"] > 0).all()  # trained: it moved away from its base
    assert np.isfinite(last["cka_debiased"]).all()
    proj = pd.read_parquet(res.run_dir / "projection.parquet")
    assert set(proj["model"]) == {"reference", "student"}

    # the results table, the label-free estimate and the report read it
    row = res.results[res.results["run_id"] == res.run_id].iloc[0]
    assert row["kind"] == "external" and row["method"] == "checkpoint:trl-rm"
    assert row["acc_id"] == pytest.approx(acc["source_test"]["point"])
    assert row["acc_amazon"] == pytest.approx(acc["target_test:amazon"]["point"])
    assert np.isfinite(row["drift_cka_debiased_target"])
    risk = pd.read_csv(out / "ood_risk.csv")
    assert list(risk["target"]) == ["nyt"] and not risk["reliable"].iloc[0]
    assert "only 2 labelled domains" in risk["status"].iloc[0]  # 2 labelled domains: says so, no number
    text = "\n".join(summary_lines(res))
    assert "read as trained" in text and "nyt (unlabelled)" in text

    from anchorviz.viz.report import write_report

    html = write_report(out).read_text()
    assert "checkpoint:trl-rm" in html
    assert "Representation drift by layer" in html and "not available" not in \
        html.split("Representation drift by layer")[1][:400]

    again = analyse(str(ckpt), str(base), "vader-movie", ["vader-amazon"], ["vader-nyt"], out,
                    name="trl-rm", pairs=40, max_length=48, projection="pca", n_boot=200)
    assert not again.computed and again.run_id == res.run_id


def test_peft_adapter_checkpoint(trl_checkpoint, tmp_path):
    """A LoRA adapter of a sequence classifier on the base: merged and read; its rewards are
    the merged model's; the reference fills in for an adapter base that is not on disk."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    base, _ = trl_checkpoint
    torch.manual_seed(1)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    model.config.pad_token_id = 2
    peft = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8,
                                            target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a "trained" adapter: nonzero B, a non-trivial score head
        for n, p in peft.named_parameters():
            if "lora_B" in n or "score" in n:
                p.normal_(0, 0.2)
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "someone/not-downloaded"  # as on another machine
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    merged = peft.merge_and_unload().eval()

    res = analyse(str(adapter), str(base), "vader-movie", ["vader-amazon"], [],
                  tmp_path / "an", pairs=24, max_length=48, projection="none", n_boot=100)
    ck = res.metrics["checkpoint"]
    assert ck["kind"] == "peft" and ck["base"] == str(base) and ck["verification"]["checked"]
    scores = pd.read_parquet(res.run_dir / "scores.parquet").sort_values(["split", "pair_id"])
    tok = load_checkpoint_model(str(adapter), str(base)).tokenizer
    pairs = load_pairs("vader-movie")[0].set_index("pair_id").loc[
        scores[scores["split"] == "source_test"]["pair_id"].head(4)].reset_index()
    enc = encode_pairs(tok, pairs, max_length=48)
    with torch.no_grad():
        want = [float(merged(input_ids=torch.tensor([ids])).logits[0, 0])
                for ids in enc.chosen_ids]
    got = scores[scores["split"] == "source_test"]["r_chosen"].head(4).to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    drift = pd.read_parquet(res.run_dir / "drift.parquet")
    assert (drift.loc[drift["layer"] == 2, "cosine_centred_mean"] > 0).all()


def test_encoder_classifier_and_value_head(tmp_path):
    """BERT's classifier reads the pooler (found by the check); a backbone saved with a
    ``value_head`` is read on the last attended token, without a framework to check against."""
    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertForSequenceClassification

    data = tmp_path / "data"
    data.mkdir()
    src = write_pairs(data / "src.jsonl", 30, seed=0, domain="movie")
    tgt = write_pairs(data / "tgt.jsonl", 30, seed=5, domain="book")

    tok = word_tokenizer("encoder")
    torch.manual_seed(0)
    bcfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                      num_labels=1)
    rm = BertForSequenceClassification(bcfg)
    enc_dir, enc_base = tmp_path / "bert-rm", tmp_path / "bert-base"
    rm.save_pretrained(enc_dir)
    tok.save_pretrained(enc_dir)
    rm.bert.save_pretrained(enc_base)
    tok.save_pretrained(enc_base)
    res = analyse(str(enc_dir), str(enc_base), str(src), [f"books={tgt}"], [], tmp_path / "an",
                  pairs=20, max_length=16, projection="none", n_boot=50)
    v = res.metrics["checkpoint"]["verification"]
    assert res.metrics["checkpoint"]["head"] == "classifier"
    assert v["checked"] and v["convention"] == "pooler"
    assert "target_test:books" in set(pd.read_parquet(res.run_dir / "drift.parquet")["split"])
    # the same weights as the base: no drift at all
    drift = pd.read_parquet(res.run_dir / "drift.parquet")
    assert drift["cosine_centred_mean"].abs().max() < 1e-3

    vh = save_tiny_model(tmp_path / "vh", kind="decoder", layers=2, seed=3)
    state = load_file(str(vh / "model.safetensors"))
    torch.manual_seed(2)
    head = torch.randn(1, 32)
    save_file({**state, "value_head.weight": head}, str(vh / "model.safetensors"))
    res = analyse(str(vh), str(vh), str(src), [str(tgt)], [], tmp_path / "an2", pairs=20,
                  max_length=16, projection="none", n_boot=50)
    ck = res.metrics["checkpoint"]
    assert ck["kind"] == "value-head" and ck["head"] == "value_head"
    assert not ck["verification"]["checked"]
    loaded = load_checkpoint_model(str(vh))
    dtok = loaded.tokenizer
    pairs = pd.read_json(src, lines=True).head(1)
    pairs["pair_id"] = ["p"]
    ids = encode_pairs(dtok, pairs, max_length=16).chosen_ids[0]
    with torch.no_grad():
        h = loaded.model.backbone(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        want = float(h @ head[0])
        got = float(loaded.model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long),
                                 torch.ones(1, len(ids), dtype=torch.long)).rewards[0])
    assert got == pytest.approx(want, abs=1e-5)


def test_refusals(trl_checkpoint, tmp_path):
    from anchorviz.models.reward_model import ModelError
    from anchorviz.pipeline.analyse import AnalyseError

    base, ckpt = trl_checkpoint
    with pytest.raises(ModelError, match="no value head"):  # a bare backbone is no reward model
        analyse(str(base), str(base), "vader-movie", [], [], tmp_path / "a", pairs=8)
    other = save_tiny_model(tmp_path / "other", kind="decoder", layers=3)
    with pytest.raises(AnalyseError, match="tokenizes"):  # another vocabulary
        analyse(str(ckpt), str(other), "vader-movie", [], [], tmp_path / "a", pairs=8)
    with pytest.raises(AnalyseError, match="both named"):
        analyse(str(ckpt), str(base), "vader-movie", ["t=vader-nyt"], ["t=vader-amazon"],
                tmp_path / "a", pairs=8)


def test_cli_analyse(trl_checkpoint, tmp_path, capsys):
    from anchorviz import cli

    base, ckpt = trl_checkpoint
    out = tmp_path / "cli"
    code = cli.main(["analyse", "--model", str(ckpt), "--reference", str(base), "--source",
                     "vader-movie", "--targets", "vader-amazon", "--unlabelled", "vader-tweets",
                     "--out", str(out), "--pairs", "24", "--max-length", "40",
                     "--projection", "none", "--report"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "Pairwise accuracy" in text and "tweets (unlabelled)" in text
    assert "HTML report" in text and (out / "report.html").is_file()
    assert os.path.isfile(out / "results.csv")
    code = cli.main(["analyse", "--model", str(tmp_path / "nope"), "--reference", str(base),
                     "--source", "vader-movie", "--out", str(out)])
    assert code == cli.EXIT_DATA


def test_label_free_estimate_from_the_folders_checkpoints(tmp_path):
    """`ood_risk_table` fits accuracy ~ last-layer drift over every labelled domain of the
    folder's checkpoints (same base) and predicts the unlabelled targets, with an interval;
    checkpoints of another base are fitted apart."""
    from anchorviz.paths import write_yaml
    from anchorviz.pipeline.analyse import ood_risk_table
    from anchorviz.pipeline.store import RunStore, write_json

    store = RunStore(tmp_path)
    rng = np.random.default_rng(0)

    def fake_run(i, ref, drifts, accs, unlabelled):
        tmp = store.begin(f"checkpoint-{i:012d}")
        write_yaml(tmp / "config.yaml", {"kind": "external", "reference": ref, "seed": 0})
        splits = ["source_test"] + [f"target_test:t{j}" for j in range(1, len(accs))]
        acc = {s: {"point": a, "lo": a, "hi": a, "n": 50} for s, a in zip(splits, accs)}
        rows = [(s, d) for s, d in zip(splits, drifts)] + [
            (f"target_test:{k}", d) for k, d in unlabelled.items()]
        pd.DataFrame({"split": [s for s, _ in rows], "layer": 2,
                      "cosine_centred_mean": [d for _, d in rows]}).to_parquet(
            tmp / "drift.parquet")
        write_json(tmp / "metrics.json", {"kind": "external", "method": f"checkpoint:m{i}",
                                          "accuracy": acc,
                                          "unlabelled": [f"target_test:{k}" for k in unlabelled]})
        store.commit(tmp, f"checkpoint-{i:012d}", "h")

    for i in range(3):  # accuracy falls with drift: acc = 0.9 - drift (+ a little noise)
        d = rng.uniform(0.05, 0.5, size=3)
        fake_run(i, "base-a", d, list(0.9 - d + rng.normal(0, 0.005, 3)),
                 {"new": 0.3} if i == 0 else {})
    fake_run(9, "base-b", [0.1, 0.2], [0.8, 0.7], {"other": 0.2})
    risk = ood_risk_table(tmp_path, n_boot=500).set_index("target")
    new = risk.loc["new"]
    assert new["reliable"] and new["n_fit"] == 9
    assert new["est_acc"] == pytest.approx(0.6, abs=0.03)
    assert new["est_lo"] < new["est_acc"] < new["est_hi"]
    other = risk.loc["other"]  # base-b: 2 labelled domains only
    assert not other["reliable"] and other["n_fit"] == 2 and "2 labelled domains" in \
        other["status"]
    assert (tmp_path / "ood_risk.csv").is_file()
