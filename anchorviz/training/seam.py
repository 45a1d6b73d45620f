"""SEAM baseline: label refinement with principle trees (strong writes, weak masters).

SEAM ("Strong Empowered and Aligned Weak Mastered", OpenReview ``jF4rnVgWlN``) is a LABEL
REFINEMENT method, not a loss. For every pair to be annotated:

1. the PRETRAINED STRONG model (a causal LM: the student's checkpoint with its LM head) writes a
   principle *fast-and-frugal tree* (FFT): an ordered chain of principles (cues) for judging
   the two responses, most important first (:func:`build_trees`);
2. the ALIGNED WEAK model (the trained weak teacher reward model) annotates every cue node: it
   scores both responses with the principle appended to the prompt, giving a node preference
   ``p_k = sigmoid((r_chosen - r_rejected) / T)`` (:func:`annotate_trees`);
3. the weak model picks the INFORMATIVE nodes from the tree's information distribution: a node
   is informative when it reduces the weak model's uncertainty relative to the root (the
   plain, unconditioned annotation ``q``): ``gain_k = H(q) - H(p_k)`` bits, kept when
   ``gain_k >= min_gain``, at most ``top_k`` of them (:func:`select_nodes`);
4. the selected annotations are aggregated into the refined label ``q'`` in [0, 1]
   (:func:`aggregate_labels`): ``pool`` averages root and selected nodes in logit space with
   weights ``1 - H`` (each annotation's information in bits); ``fft`` exits at the first
   informative cue in the strong model's order (the fast-and-frugal reading). With no
   informative node the label stays exactly ``q`` (the tree's default exit is the root).

docs/SEAM.md lists what was taken from the paper and every gap to it (the full text was not
available; only its abstract). :func:`check_generative` rejects backbones that cannot write.

Typical use (``teacher`` a trained :class:`~anchorviz.models.RewardModel`)::

    score = reward_score_fn(teacher, teacher_tok, max_length=64)
    res = refine_labels(w2s_pairs, q, score, "smollm2-135m")  # zoo name or a local folder
    q_refined = res.q
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from anchorviz.models.reward_model import eval_mode
from anchorviz.models.tokenization import encode_side, length_batches, pad_side, pad_token_id
from anchorviz.models.zoo import ZOO, resolve_model
from anchorviz.paths import file_sha256, write_atomic

logger = logging.getLogger(__name__)

__all__ = [
    "AGGREGATES",
    "SeamError",
    "SeamResult",
    "aggregate_labels",
    "annotate_trees",
    "binary_entropy",
    "build_trees",
    "check_generative",
    "generate_texts",
    "generator_prompt",
    "parse_principles",
    "principle_prompt",
    "refine_labels",
    "reward_score_fn",
    "select_nodes",
]

AGGREGATES = ("pool", "fft")

#: The generator's answer is prefilled with this, so it must continue a numbered list of
#: criteria (a 135M model asked for "principles" mostly writes verdicts; this steers it).
LIST_PREFIX = "1. A good response"

_EPS = 1e-6
_MAX_PROMPT_CHARS = 600
_MAX_RESPONSE_CHARS = 500
_MAX_PRINCIPLE_CHARS = 160

_ENCODER_TYPES = {
    "bert", "roberta", "xlm-roberta", "camembert", "electra", "deberta", "deberta-v2",
    "distilbert", "albert", "mpnet", "ernie", "megatron-bert", "roformer", "data2vec-text",
    "xlm-roberta-xl", "modernbert",
}

_INSTRUCTION = ("What qualities make a response to this task good? List {n} short qualities, "
                "one per line, numbered.")


class SeamError(ValueError):
    """SEAM cannot run with these inputs (the message says what was expected)."""


# ----------------------------------------------------------------------------- backbone check


def check_generative(model_dir: str | os.PathLike[str]) -> None:
    """Raise ``ValueError`` unless ``model_dir`` is a causal LM that can write principle trees.

    ``model_dir`` is a local Hugging Face folder or a zoo name (decided from the zoo table, so
    config validation never prepares or downloads a model). Needs a ``config.json`` whose ``architectures`` name a causal-LM
    head (``*ForCausalLM`` / ``*LMHeadModel``) of a decoder model type, and a tokenizer.
    Encoders such as MiniLM / BERT (``BertModel``) and headless decoders (``LlamaModel``) fail.
    """
    ref = os.fspath(model_dir)
    hint = ("SEAM needs a generative strong backbone (a decoder with its causal-LM head, e.g. "
            "the zoo model 'smollm2-135m'); use method naive, confidence or anchor for encoder "
            "students")
    if ref in ZOO:  # decided from the zoo table: nothing is prepared or downloaded here
        entry = ZOO[ref]
        if entry.kind != "decoder":
            raise ValueError(f"model {ref!r} is a zoo {entry.kind} ({entry.upstream}) and cannot "
                             f"generate text: {hint}")
        return  # zoo decoders are written as *ForCausalLM folders with their tokenizer
    path = Path(ref).expanduser()
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"model {ref!r} is not a local model folder with a config.json: {hint}")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"model {ref!r}: config.json is unreadable ({err}): {hint}") from None
    mtype = str(cfg.get("model_type", ""))
    archs = [str(a) for a in (cfg.get("architectures") or [])]
    head = [a for a in archs if a.endswith(("ForCausalLM", "LMHeadModel"))]
    if cfg.get("is_encoder_decoder"):
        raise ValueError(f"model {ref!r} ({mtype}) is an encoder-decoder: {hint}")
    if mtype in _ENCODER_TYPES:
        raise ValueError(f"model {ref!r} is an encoder ({mtype}, architectures {archs}) with no "
                         f"causal-LM head: {hint}")
    if not head:
        raise ValueError(f"model {ref!r} has no causal-LM head (architectures {archs or 'unset'};"
                         f" model_type {mtype!r}): {hint}")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if mtype not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ValueError(f"model {ref!r}: model_type {mtype!r} has no causal-LM class in this "
                         f"transformers: {hint}")
    tok_files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if not any((path / f).is_file() for f in tok_files):
        raise ValueError(f"model {ref!r} has no tokenizer files ({', '.join(tok_files)}): "
                         "SEAM's generator needs its tokenizer in the same folder")


# ----------------------------------------------------------------------------- prompts / parsing


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3].rsplit(" ", 1)[0] + "..."


def generator_prompt(prompt: str, response_1: str, response_2: str, n_principles: int,
                     tokenizer=None) -> str:
    """The text the strong model continues: instruction, task, both responses, then ``1.``.

    With a chat tokenizer (``tokenizer.chat_template``) the request is a user turn rendered
    with the generation prompt; otherwise plain text. Either way the answer is prefilled with
    :data:`LIST_PREFIX` so the model continues a numbered list. Texts are clipped (prompt 600,
    responses 500 characters) to bound the cost.
    """
    task = _clip(prompt, _MAX_PROMPT_CHARS) if prompt and str(prompt).strip() else (
        "(no instruction given: judge which text is better)")
    user = (f"Task: {task}\n\nResponse 1: {_clip(response_1, _MAX_RESPONSE_CHARS)}\n\n"
            f"Response 2: {_clip(response_2, _MAX_RESPONSE_CHARS)}\n\n"
            f"{_INSTRUCTION.format(n=n_principles)}")
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                             add_generation_prompt=True)
        return text + LIST_PREFIX
    return f"{user}\n\nQualities of a good response:\n{LIST_PREFIX}"


_ITEM = re.compile(r"^\s*(?:\(?\d{1,2}\s*[.):]|[-*\u2022])\s*(.*)$")
_LEADS = (
    re.compile(r"^(?:the\s+)?(?:first|second|third|fourth|fifth|sixth|next|last|final|most "
               r"important|main|key|\d+(?:st|nd|rd|th)?)?\s*(?:principle|criterion|rule|quality)"
               r"\s*\d*\s*(?:is\s+(?:that\s+)?(?:to\s+)?|[:.\-]\s*)", re.IGNORECASE),
    re.compile(r"^(?:a|the)\s+good\s+(?:response|answer)(?:\s+to\s+this\s+task)?\s*"
               r"(?:is\s+one\s+that\s+is\s+|is\s+one\s+that\s+|is\s+to\s+|is\s+|should\s+be\s+|"
               r"should\s+|must\s+be\s+|must\s+|will\s+|has\s+|[:\-]\s*)?", re.IGNORECASE),
    re.compile(r"^it\s+(?:is\s+|should\s+be\s+|should\s+|must\s+be\s+|must\s+|has\s+)",
               re.IGNORECASE),
)
_VERDICT = re.compile(
    r"\b(?:response|answer|text|option|candidate)\s*(?:#\s*)?[12ab]\b|"
    r"\b(?:first|second|third|former|latter|other|1st|2nd|3rd)\s+"
    r"(?:response|answer|text|one|option|candidate)\b", re.IGNORECASE)
_BARE_VERDICT = re.compile(r"\b(?:better|worse|best|worst|wins|preferred)\b", re.IGNORECASE)


def _clean_principle(raw: str) -> str:
    text = raw.replace("**", "").replace("__", "").strip().strip("\"'`").strip()
    text = re.split(r"(?<=[.!?])\s+", text, maxsplit=1)[0]  # first sentence
    for _ in range(3):
        for lead in _LEADS:
            text = lead.sub("", text).strip()
    text = " ".join(text.split()).strip(" .;:,-")
    if len(text) > _MAX_PRINCIPLE_CHARS:
        text = text[:_MAX_PRINCIPLE_CHARS].rsplit(" ", 1)[0]
    return text[:1].upper() + text[1:]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", str(text).lower())


def _copies(principle: str, responses: Sequence[str], share: float = 0.8) -> bool:
    """True when ``principle`` is (nearly) a copy of one of the responses, not a criterion."""
    words = _words(principle)
    if len(words) < 3:
        return False
    for r in responses:
        vocab = set(_words(r))
        if vocab and sum(w in vocab for w in words) / len(words) >= share:
            return True
    return False


def parse_principles(text: str, n_principles: int, responses: Sequence[str] = ()) -> list[str]:
    """Principles (cue texts) out of a generated list, in the order written, at most ``n``.

    ``text`` is the generator's whole answer including the prefilled ``1.``. Numbered or
    bulleted lines are read (plain non-empty lines when there are none); each keeps its first
    sentence without lead-ins ("The first principle is to", "A good response is one that",
    "It is"). Dropped: lines that name a response by position ("Response 1", "the second
    response": verdicts, not principles), short verdicts without a criterion ("The text is
    better"),
    lines that copy one of ``responses`` (80% of their words), fragments under two words and
    duplicates.
    """
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    items = [m.group(1) for ln in lines if (m := _ITEM.match(ln))]
    candidates = items if items else lines
    out: list[str] = []
    seen: set[str] = set()
    for raw in candidates:
        if _VERDICT.search(raw):
            continue
        p = _clean_principle(raw)
        key = " ".join(_words(p))
        n_words = len(re.findall(r"[A-Za-z]{2,}", p))
        if n_words < 2 or key in seen or _copies(p, responses):
            continue
        if n_words <= 4 and _BARE_VERDICT.search(p):  # "The text is better": no criterion
            continue
        seen.add(key)
        out.append(p)
        if len(out) >= n_principles:
            break
    return out


def principle_prompt(prompt: str, principle: str) -> str:
    """The prompt the weak teacher reads for one cue node: the task, then the principle.

    The principle goes LAST (next to the response) so that left truncation of long prompts
    (``anchorviz.models.tokenization``) never removes it.
    """
    head = str(prompt).rstrip() if prompt and str(prompt).strip() else ""
    return (head + "\n\n" if head else "") + f"Principle: {principle}\n"


def _swap(pair_id: str) -> bool:
    """Whether the generator sees (rejected, chosen) instead of (chosen, rejected): a stable
    coin per pair, so position never tells the generator which side was chosen (and the same
    pair gives the same generator prompt under every seed, so a cache is shared by seeds)."""
    return hashlib.sha256(f"seam:{pair_id}".encode()).digest()[0] & 1 == 1


# ----------------------------------------------------------------------------- generation


class _ListDone:
    """Stopping criterion: a sequence is done once its answer holds ``n`` finished lines or a
    blank line after the first item (the list is over)."""

    def __init__(self, tokenizer, prompt_len: int, n_items: int) -> None:
        self.tokenizer, self.prompt_len, self.n_items = tokenizer, prompt_len, n_items

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for i, row in enumerate(input_ids[:, self.prompt_len:].tolist()):
            text = LIST_PREFIX + self.tokenizer.decode(row, skip_special_tokens=True)
            finished = text.split("\n")[:-1]
            filled = [ln for ln in finished if ln.strip()]
            blank_after_item = bool(filled) and any(not ln.strip() for ln in finished[1:])
            done[i] = len(filled) >= self.n_items or blank_after_item
        return done


def generate_texts(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int = 64,
                   batch_size: int = 8, do_sample: bool = False, temperature: float = 0.7,
                   top_p: float = 0.9, seed: int = 0, n_items: int | None = None,
                   add_special_tokens: bool = True, device: str = "cpu",
                   num_threads: int | None = None, desc: str = "seam principles") -> list[str]:
    """Continue every prompt with ``model`` (batched, LEFT padded, ``torch.inference_mode``).

    Greedy by default (deterministic); ``do_sample=True`` samples under a forked RNG seeded with
    ``seed + batch index`` (reproducible for the same prompts and batch size). Prompts are
    batched longest first. ``n_items`` stops a sequence once its list has that many lines.
    ``num_threads`` sets torch's CPU threads for the call (restored after): on a shared CPU,
    ``1`` is often several times faster than oversubscribed threads. Returns the new text of each prompt (special tokens removed), in input order.
    """
    from transformers import StoppingCriteriaList

    n = len(prompts)
    out: list[str] = [""] * n
    if n == 0:
        return out
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise SeamError("the generator's tokenizer has neither a pad nor an eos token")
    lengths = [len(tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"])
               for p in prompts]
    order = sorted(range(n), key=lambda i: -lengths[i])
    was_training = model.training
    old_threads = torch.get_num_threads()
    if num_threads:
        torch.set_num_threads(num_threads)
    model.eval()
    try:
        batches = [order[s: s + batch_size] for s in range(0, n, batch_size)]
        for b, idx in enumerate(tqdm(batches, desc=desc, unit="batch", leave=False)):
            enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True,
                            add_special_tokens=add_special_tokens)
            enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
            width = enc["input_ids"].shape[1]
            kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample,
                                          pad_token_id=pad)
            if do_sample:
                kwargs.update(temperature=temperature, top_p=top_p)
            else:  # silence the "temperature is set but do_sample=False" warnings
                kwargs.update(temperature=None, top_p=None, top_k=None)
            if n_items:
                kwargs["stopping_criteria"] = StoppingCriteriaList(
                    [_ListDone(tokenizer, width, n_items)])
            with torch.random.fork_rng(devices=[]), torch.inference_mode():
                torch.manual_seed(seed + b)
                gen = model.generate(**enc, **kwargs)
            for row, i in zip(gen[:, width:].tolist(), idx):
                out[i] = tokenizer.decode(row, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)
        torch.set_num_threads(old_threads)
    return out


def _load_generator(generator_dir: str, device: str, dtype: torch.dtype | None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_generative(generator_dir)
    tok = AutoTokenizer.from_pretrained(generator_dir)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    kwargs = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(generator_dir, **kwargs).to(device)
    model.eval()
    return model, tok


def _generator_identity(generator_dir: str) -> str:
    cfg = Path(generator_dir) / "config.json"
    digest = file_sha256(cfg)[:16] if cfg.is_file() else "?"
    return f"{Path(generator_dir).resolve()}#{digest}"


# ----------------------------------------------------------------------------- trees


def build_trees(pairs: pd.DataFrame, generator_dir: str | os.PathLike[str], *,
                n_principles: int = 3, max_new_tokens: int = 64, batch_size: int = 8,
                seed: int = 0, do_sample: bool = False, device: str = "cpu",
                dtype: torch.dtype | None = None, num_threads: int | None = None,
                cache_path: str | os.PathLike[str] | None = None) -> list[dict]:
    """One principle fast-and-frugal tree per pair, written by the strong generator.

    Depends only on the pairs, the generator and these settings (not on the teacher), so it
    can be shared by every student of a sweep; ``cache_path`` (a JSON file) stores each raw
    generation under a hash of (generator, settings, prompt text) and is reused on reruns.

    Tree (JSON-able)::

        {"pair_id", "swapped": bool (generator saw rejected as Response 1), "raw": generated text,
         "root": {"id": 0, "kind": "task", "prompt": clipped prompt},
         "nodes": [{"id": k, "parent": k - 1, "depth": k, "kind": "cue", "principle": str}, ...]}

    The chain order is the generator's ranking (most important first); a pair whose answer
    holds no usable principle gets ``nodes == []`` (its label will stay the teacher's).
    """
    missing = [c for c in ("pair_id", "prompt", "chosen", "rejected") if c not in pairs.columns]
    if missing:
        raise SeamError(f"pair table lacks column(s) {missing}; has {list(pairs.columns)}")
    if n_principles < 1:
        raise SeamError(f"n_principles must be >= 1, got {n_principles}")
    check_generative(generator_dir)

    generator_dir = os.fspath(resolve_model(generator_dir))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(generator_dir)
    chat = bool(getattr(tok, "chat_template", None))
    rows = list(pairs.itertuples(index=False))
    swapped, texts = [], []
    for r in rows:
        prompt = r.prompt if isinstance(r.prompt, str) else ""
        s = _swap(str(r.pair_id))
        a, b = (r.rejected, r.chosen) if s else (r.chosen, r.rejected)
        swapped.append(s)
        texts.append(generator_prompt(prompt, a, b, n_principles, tok))
    settings = {"n": n_principles, "max_new_tokens": max_new_tokens, "do_sample": do_sample,
                "seed": seed if do_sample else None, "gen": _generator_identity(generator_dir)}
    keys = [hashlib.sha256(json.dumps([settings, t], sort_keys=True).encode()).hexdigest()
            for t in texts]
    cache: dict[str, str] = {}
    cache_file = Path(cache_path) if cache_path is not None else None
    if cache_file is not None and cache_file.is_file():
        try:
            cache = json.loads(cache_file.read_text())
        except (OSError, json.JSONDecodeError) as err:
            logger.warning("SEAM cache %s unreadable (%s): regenerating", cache_file, err)
    todo = [i for i, k in enumerate(keys) if k not in cache]
    t0 = time.perf_counter()
    if todo:
        model, gtok = _load_generator(generator_dir, device, dtype)
        try:
            # the prompts of a chat template already hold their special tokens
            chunk = max(batch_size * 8, 1)
            for s in range(0, len(todo), chunk):
                part = todo[s: s + chunk]
                gen = generate_texts(model, gtok, [texts[i] for i in part],
                                     max_new_tokens=max_new_tokens, batch_size=batch_size,
                                     do_sample=do_sample, seed=seed + s, n_items=n_principles,
                                     add_special_tokens=not chat, device=device,
                                     num_threads=num_threads)
                for i, g in zip(part, gen):
                    cache[keys[i]] = LIST_PREFIX + g
                if cache_file is not None:
                    _write_json_atomic(cache_file, cache)
        finally:
            del model
    seconds = time.perf_counter() - t0
    logger.info("SEAM trees: %d pairs, %d generated (%.1fs, %.2fs/pair), %d from cache",
                len(rows), len(todo), seconds, seconds / max(len(todo), 1), len(rows) - len(todo))
    generated = {keys[i] for i in todo}
    trees = []
    for r, s, k in zip(rows, swapped, keys):
        raw = cache[k]
        principles = parse_principles(raw, n_principles, (r.chosen, r.rejected))
        prompt = r.prompt if isinstance(r.prompt, str) else ""
        trees.append({
            "pair_id": str(r.pair_id), "swapped": bool(s), "raw": raw,
            "root": {"id": 0, "kind": "task", "prompt": _clip(prompt, _MAX_PROMPT_CHARS)},
            "nodes": [{"id": j + 1, "parent": j, "depth": j + 1, "kind": "cue", "principle": p}
                      for j, p in enumerate(principles)],
            "generation": {"seconds_per_pair": seconds / max(len(todo), 1),
                           "cached": k not in generated},
        })
    return trees


def _write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(obj)))


# ----------------------------------------------------------------------------- selection


def binary_entropy(p: np.ndarray | float) -> np.ndarray:
    """Entropy of a Bernoulli(p) in bits (0 at p in {0, 1}, 1 at p = 0.5)."""
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return -(p * np.log2(p) + (1 - p) * np.log2(1 - p))


def _logit(p: np.ndarray | float) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def _sigmoid(x: np.ndarray | float) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -x))


def select_nodes(q: float, node_p: Sequence[float], *, min_gain: float = 0.05,
                 top_k: int = 2) -> tuple[list[int], np.ndarray]:
    """Indices (into ``node_p``, tree order) of the informative nodes, and every node's gain.

    ``gain_k = H(q) - H(p_k)`` (bits): how much the principle reduced the weak model's
    uncertainty relative to its plain annotation ``q``. Nodes with ``gain >= min_gain`` are
    informative; the ``top_k`` largest are kept (ties: earlier in the tree first), returned in
    tree order.
    """
    p = np.asarray(node_p, dtype=np.float64)
    gains = binary_entropy(q) - binary_entropy(p) if len(p) else np.zeros(0)
    ok = [k for k in range(len(p)) if gains[k] >= min_gain]
    ok = sorted(ok, key=lambda k: (-gains[k], k))[: max(top_k, 0)]
    return sorted(ok), gains


def aggregate_labels(q: float, node_p: Sequence[float], selected: Sequence[int],
                     aggregate: str = "pool") -> float:
    """The refined label from the root ``q`` and the selected nodes' annotations.

    ``pool``: ``sigmoid(sum_j w_j logit(p_j) / sum_j w_j)`` over the root and the selected
    nodes with ``w = 1 - H(p)`` (each annotation's information in bits); ``fft``: the first
    selected node's ``p`` (the fast-and-frugal exit). No selected node: ``q`` unchanged.
    """
    if aggregate not in AGGREGATES:
        raise SeamError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}")
    if not len(selected):
        return float(q)
    p = np.asarray(node_p, dtype=np.float64)[list(selected)]
    if aggregate == "fft":
        return float(p[0])
    probs = np.concatenate([[q], p])
    w = 1.0 - binary_entropy(probs)
    if w.sum() <= 0:
        return float(q)
    return float(_sigmoid(np.sum(w * _logit(probs)) / w.sum()))


# ----------------------------------------------------------------------------- annotation


@dataclass
class SeamResult:
    """``q``: refined labels (n,), in the pairs' order; ``trees``: the annotated trees
    (JSON-able dicts); ``diagnostics``: one row per pair; ``counts``: totals and timings;
    ``params``: the settings used."""

    q: np.ndarray
    trees: list[dict]
    diagnostics: pd.DataFrame
    counts: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)

    def save(self, folder: str | os.PathLike[str]) -> None:
        """Write ``seam_trees.json``, ``seam_diagnostics.parquet`` and ``seam_counts.json``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "seam_trees.json").write_text(json.dumps(self.trees, indent=1))
        self.diagnostics.to_parquet(folder / "seam_diagnostics.parquet")
        (folder / "seam_counts.json").write_text(
            json.dumps({"counts": self.counts, "params": self.params}, indent=2, default=str))


def annotate_trees(pairs: pd.DataFrame, trees: list[dict], q: np.ndarray,
                   teacher_score_fn: Callable[[list[str], list[str]], np.ndarray], *,
                   temperature: float = 1.0, min_gain: float = 0.05, top_k: int = 2,
                   aggregate: str = "pool", score_batch_size: int = 512) -> SeamResult:
    """The weak teacher annotates every node, picks the informative ones, refines ``q``.

    ``teacher_score_fn(prompts, responses)`` returns the teacher's reward for each text pair;
    the root is scored on the plain prompt (diagnostic: ``root_margin``), each cue node on
    :func:`principle_prompt`. ``temperature`` must be the one that turned the teacher's
    margins into ``q`` (``q = sigmoid(margin / T)``), so that nodes and root share a scale.
    """
    t0 = time.perf_counter()
    q = np.asarray(q, dtype=np.float64)
    n = len(pairs)
    if q.shape != (n,) or len(trees) != n:
        raise SeamError(f"expected {n} labels and {n} trees, got q {q.shape} and {len(trees)} trees")
    if not np.all(np.isfinite(q)) or q.min() < 0 or q.max() > 1:
        raise SeamError("q must be finite probabilities in [0, 1]")
    if not temperature > 0:
        raise SeamError(f"temperature must be > 0, got {temperature!r}")
    if aggregate not in AGGREGATES:
        raise SeamError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}")
    if np.mean((q == 0) | (q == 1)) > 0.5:
        logger.warning("SEAM: most labels are hard (0/1): no node can reduce their entropy, so "
                       "SEAM leaves them unchanged; pass soft labels")
    ids = [str(x) for x in pairs["pair_id"]]
    if [t["pair_id"] for t in trees] != ids:
        raise SeamError("trees do not line up with the pairs (pair_id order differs)")
    # every (prompt, response) the teacher reads: root chosen/rejected, then each node's
    prompts, responses, where = [], [], []
    for i, (r, tree) in enumerate(zip(pairs.itertuples(index=False), trees)):
        base = r.prompt if isinstance(r.prompt, str) else ""
        for k, pr in [(0, base)] + [(nd["id"], principle_prompt(base, nd["principle"]))
                                    for nd in tree["nodes"]]:
            prompts += [pr, pr]
            responses += [r.chosen, r.rejected]
            where.append((i, k))
    rewards = np.zeros(len(prompts), dtype=np.float64)
    for s in tqdm(range(0, len(prompts), score_batch_size), desc="seam annotate",
                  unit="chunk", leave=False):
        r_ = np.asarray(teacher_score_fn(prompts[s: s + score_batch_size],
                                         responses[s: s + score_batch_size]), dtype=np.float64)
        if r_.shape != (min(score_batch_size, len(prompts) - s),):
            raise SeamError(f"teacher_score_fn returned shape {r_.shape} for "
                            f"{min(score_batch_size, len(prompts) - s)} texts")
        rewards[s: s + len(r_)] = r_
    if not np.all(np.isfinite(rewards)):
        raise SeamError("teacher_score_fn returned non-finite rewards")
    margins: dict[tuple[int, int], float] = {
        w: float(rewards[2 * j] - rewards[2 * j + 1]) for j, w in enumerate(where)}
    score_seconds = time.perf_counter() - t0

    q_new = q.copy()
    out_trees, diag = [], []
    for i, tree in enumerate(trees):
        qi = float(q[i])
        node_m = np.array([margins[(i, nd["id"])] for nd in tree["nodes"]], dtype=np.float64)
        node_p = _sigmoid(node_m / temperature)
        sel, gains = select_nodes(qi, node_p, min_gain=min_gain, top_k=top_k)
        if aggregate == "fft":  # the fast-and-frugal exit: the FIRST informative cue in order
            sel = [k for k in range(len(node_p)) if gains[k] >= min_gain][:1]
        q_new[i] = aggregate_labels(qi, node_p, sel, aggregate) if sel else qi
        info = 1.0 - binary_entropy(node_p) if len(node_p) else np.zeros(0)
        nodes = []
        for k, nd in enumerate(tree["nodes"]):
            nodes.append({**nd, "margin": float(node_m[k]), "p": float(node_p[k]),
                          "info": float(info[k]), "gain": float(gains[k]),
                          "exit": "chosen" if node_p[k] >= 0.5 else "rejected",
                          "selected": k in sel})
        root_m = margins[(i, 0)]
        out_trees.append({**tree, "root": {**tree["root"], "q": qi, "margin": root_m,
                                           "info": float(1.0 - binary_entropy(qi))},
                          "nodes": nodes, "selected": [tree["nodes"][k]["id"] for k in sel],
                          "q_refined": float(q_new[i]), "aggregate": aggregate})
        diag.append({
            "pair_id": ids[i], "q": qi, "q_refined": float(q_new[i]),
            "delta": float(q_new[i] - qi), "root_margin": root_m,
            "n_nodes": len(nodes), "n_selected": len(sel),
            "selected": ",".join(str(tree["nodes"][k]["id"]) for k in sel),
            "max_gain": float(gains.max()) if len(gains) else float("nan"),
            "mean_node_shift": float(np.mean(node_m - root_m)) if len(node_m) else float("nan"),
            "flipped": bool(sel) and (q_new[i] - 0.5) * (qi - 0.5) < 0,
            "swapped": bool(tree.get("swapped", False)),
        })
    diagnostics = pd.DataFrame(diag)
    # a sanity check on the label scale: q should be sigmoid(root margin / T)
    implied = _sigmoid(diagnostics["root_margin"].to_numpy() / temperature) if n else np.zeros(0)
    scale_gap = float(np.median(np.abs(implied - q))) if n else 0.0
    if scale_gap > 0.05:
        logger.warning("SEAM: q differs from sigmoid(teacher root margin / T) by %.3f (median): "
                       "pass the temperature that produced q, or the node and root labels are "
                       "on different scales", scale_gap)
    counts = {
        "n_pairs": n,
        "n_trees_with_nodes": int((diagnostics["n_nodes"] > 0).sum()) if n else 0,
        "n_nodes": int(diagnostics["n_nodes"].sum()) if n else 0,
        "n_refined": int((diagnostics["n_selected"] > 0).sum()) if n else 0,
        "n_flipped": int(diagnostics["flipped"].sum()) if n else 0,
        "mean_abs_change": float(np.abs(q_new - q).mean()) if n else 0.0,
        "q_mean": float(q.mean()) if n else float("nan"),
        "q_refined_mean": float(q_new.mean()) if n else float("nan"),
        "label_scale_gap": scale_gap,
        "n_teacher_texts": len(prompts),
        "seconds_annotate": time.perf_counter() - t0,
        "seconds_score": score_seconds,
    }
    params = {"temperature": temperature, "min_gain": min_gain, "top_k": top_k,
              "aggregate": aggregate}
    logger.info("SEAM annotate: %d/%d labels refined (%d flipped), mean |dq| %.4f",
                counts["n_refined"], n, counts["n_flipped"], counts["mean_abs_change"])
    return SeamResult(q=q_new, trees=out_trees, diagnostics=diagnostics, counts=counts,
                      params=params)


def refine_labels(pairs: pd.DataFrame, q: np.ndarray,
                  teacher_score_fn: Callable[[list[str], list[str]], np.ndarray],
                  generator_dir: str | os.PathLike[str], *, max_new_tokens: int = 64,
                  n_principles: int = 3, seed: int = 0, batch_size: int = 8,
                  temperature: float = 1.0, min_gain: float = 0.05, top_k: int = 2,
                  aggregate: str = "pool", do_sample: bool = False, device: str = "cpu",
                  dtype: torch.dtype | None = None, num_threads: int | None = None,
                  cache_path: str | os.PathLike[str] | None = None) -> SeamResult:
    """SEAM: strong-written principle trees, weak-mastered annotation -> refined labels.

    ``pairs``: the pair table whose soft labels ``q`` (P(chosen preferred), in its row order)
    are refined; ``teacher_score_fn(prompts, responses)``: the aligned weak teacher's rewards
    (see :func:`reward_score_fn`); ``generator_dir``: the pretrained strong causal LM. See
    :func:`build_trees` (generation settings, cache) and :func:`annotate_trees` (selection and
    aggregation settings). Deterministic for a seed (greedy decoding by default).
    """
    t0 = time.perf_counter()
    trees = build_trees(pairs, generator_dir, n_principles=n_principles,
                        max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed,
                        do_sample=do_sample, device=device, dtype=dtype, num_threads=num_threads,
                        cache_path=cache_path)
    t_gen = time.perf_counter() - t0
    res = annotate_trees(pairs, trees, q, teacher_score_fn, temperature=temperature,
                         min_gain=min_gain, top_k=top_k, aggregate=aggregate)
    n_cached = sum(bool(t["generation"]["cached"]) for t in trees)
    n_gen = len(trees) - n_cached
    res.counts.update({
        "n_no_principles": sum(not t["nodes"] for t in trees),
        "n_generated": n_gen, "n_cached": n_cached,
        "seconds_generate": t_gen,
        "seconds_per_generated_pair": t_gen / n_gen if n_gen else float("nan"),
        "seconds_total": time.perf_counter() - t0,
    })
    res.params.update({"generator": os.fspath(generator_dir), "n_principles": n_principles,
                       "max_new_tokens": max_new_tokens, "seed": seed, "batch_size": batch_size,
                       "do_sample": do_sample})
    return res


# ----------------------------------------------------------------------------- teacher scores


def reward_score_fn(model, tokenizer, *, max_length: int = 128, batch_size: int = 64,
                    device: str = "cpu") -> Callable[[list[str], list[str]], np.ndarray]:
    """A ``teacher_score_fn`` over a trained :class:`~anchorviz.models.RewardModel`.

    Each (prompt, response) is encoded exactly like one side of a pair in
    :func:`anchorviz.models.tokenization.encode_pairs` (same truncation, same response mask), batched
    by length, scored in eval mode under ``torch.inference_mode``.
    """
    pad = pad_token_id(tokenizer)

    def score(prompts: list[str], responses: list[str]) -> np.ndarray:
        if len(prompts) != len(responses):
            raise SeamError(f"{len(prompts)} prompts but {len(responses)} responses")
        enc = [encode_side(tokenizer, p if isinstance(p, str) else "", r, max_length)
               for p, r in zip(prompts, responses)]
        out = np.zeros(len(enc), dtype=np.float64)
        with eval_mode(model), torch.inference_mode():
            for idx in length_batches([len(ids) for ids, _ in enc], batch_size):
                batch = pad_side([enc[i][0] for i in idx], [enc[i][1] for i in idx], pad)
                batch = batch.to(device)
                r = model(batch.input_ids, batch.attention_mask, batch.response_mask).rewards
                out[idx] = r.float().cpu().numpy()
        return out

    return score
