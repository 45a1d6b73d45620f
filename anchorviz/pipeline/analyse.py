"""Analyse a reward model trained elsewhere against its base: ``anchorviz analyse``.

Any reward-model checkpoint -- TRL's ``RewardTrainer`` output, a PEFT adapter on top of a base,
any ``AutoModelForSequenceClassification`` folder or hub id with one label, a backbone saved with
a value head (``v_head`` / ``value_head``, OpenRLHF style) -- is read as it was trained:

* its own score head (``score`` for decoders, ``classifier`` for encoders, ``v_head`` /
  ``value_head``), never a new one;
* its padding and pooling convention: for decoders the last token that is not the padding id
  (what ``*ForSequenceClassification`` reads: with pad == eos, as TRL sets it, the token before
  a closing EOS), for encoders the pooler output, the CLS state or the sequence the head takes;
* checked: on the first source pairs its rewards must equal the framework's own forward
  (``AutoModelForSequenceClassification``) within `TOLERANCE`; the convention that matches is
  the one used, and a checkpoint that no convention matches is refused.

Then, on pairs of the source and of each target (the same token ids for model and base):
pairwise accuracy per labelled domain with bootstrap intervals; linear CKA (biased and
debiased) and cosine drift (raw, centred, standardised) per layer against the BASE model's
states; the shared 2-D map (UMAP, PCA fallback) fitted on the base's states; and for targets
given without labels, `anchorviz.analysis.ood_risk.OODRiskEstimator`'s label-free estimate of the accuracy
from the drift, fitted on every labelled domain of every checkpoint analysed into the same
folder against the same base (it says when the relation is too weak to predict).

The output is a run folder of the ordinary store (``<out>/runs/checkpoint-<hash>/``: config,
metrics, scores, drift, projection, hidden states; kind ``external``), so ``anchorviz report
<out>``, the figures (`anchorviz.viz`) and the widgets read it like a trained run; plus
``<out>/ood_risk.csv`` for the unlabelled targets. Analysing the same checkpoint on the same
data again reads the finished run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from anchorviz.analysis.capture import (
    capture_states,
    load_captured,
    resolve_capture_layers,
    save_captured,
)
from anchorviz.analysis.drift_inputs import DriftError
from anchorviz.analysis.ood_risk import OODRiskEstimator
from anchorviz.choices import PROJECTIONS
from anchorviz.data.entries import check_dataset_entry, normalise_dataset_entry, target_name
from anchorviz.models.reward_model import (
    LOAD_ERRORS,
    TOKENIZER_FILES,
    ModelError,
    RewardModel,
    RewardOutput,
    base_identity,
    check_loading,
    check_tokenizer,
    check_vocab_fits,
    is_decoder_config,
    load_reward_model,
    quiet_transformers,
    resolve_reference,
    weights_kwargs,
)
from anchorviz.models.tokenization import encode_pairs
from anchorviz.models.zoo import ZOO
from anchorviz.paths import fingerprint, read_yaml, safe_component
from anchorviz.pipeline.prepare import load_dataset_entry
from anchorviz.pipeline.results import accuracy_block, bootstrap_groups, cue_block, results_table
from anchorviz.pipeline.steps import (
    drift_blocks,
    fit_shared_projection,
    projection_frame,
    run_guarded,
)
from anchorviz.pipeline.store import RunStore, config_hash, seal_shared, verify_shared_dir
from anchorviz.training.loop import joint_batch

logger = logging.getLogger(__name__)

__all__ = [
    "ANALYSE_VERSION",
    "AnalyseError",
    "AnalyseOptions",
    "AnalyseResult",
    "CheckpointRewardModel",
    "DECODER_CONVENTIONS",
    "DRIFT_FOR_RISK",
    "ENCODER_CONVENTIONS",
    "HEAD_NAMES",
    "LoadedCheckpoint",
    "TOLERANCE",
    "analyse",
    "analysis_data",
    "cue_lines",
    "load_checkpoint_model",
    "ood_risk_table",
    "summary_lines",
    "verify_checkpoint",
]

#: largest |reward - framework reward| accepted when reading a checkpoint (float32)
TOLERANCE = 1e-5
#: bumped when what an analysis computes from the same inputs changes (part of the run key)
ANALYSE_VERSION = 1
#: head attribute names looked for, in order
HEAD_NAMES = ("score", "classifier", "v_head", "value_head")
# how the head reads the backbone's output; the first that matches the framework's forward wins
DECODER_CONVENTIONS = ("last_non_pad", "last_attention")
ENCODER_CONVENTIONS = ("pooler", "sequence", "cls")
_VALUE_HEAD_KEYS = ("v_head.summary", "v_head", "value_head", "score")


class AnalyseError(ValueError):
    """An analysis request that cannot work (the message says what was expected)."""


# --------------------------------------------------------------------------- the checkpoint


class CheckpointRewardModel(RewardModel):
    """A reward model trained elsewhere behind anchorviz's `RewardModel` interface: the
    checkpoint's backbone, its own score head, its pooling convention.

    ``convention``: ``last_non_pad`` (decoders: the last token whose id is not
    ``pad_token_id``), ``last_attention`` (the last attended token), ``pooler`` (the backbone's
    pooler output, BERT), ``sequence`` (the head takes the whole sequence, RoBERTa), ``cls``
    (the first token's state). ``normalise``: OpenRLHF's ``(reward - mean) / std``."""

    def __init__(self, backbone: nn.Module, head: nn.Module, convention: str,
                 pad_token_id: int | None, head_name: str,
                 normalise: tuple[float, float] | None = None) -> None:
        super().__init__(backbone, pooling="auto")
        # capture's "head" states: the last response token for decoders, token 0 for encoders
        self.pooling = "last" if self.is_decoder else "cls"
        self.head = head
        self.convention = convention
        self.pad_token_id = pad_token_id
        self.head_name = head_name
        self.normalise = normalise

    def _pool(self, out, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        last = out.hidden_states[-1]
        rows = torch.arange(last.shape[0], device=last.device)
        pos = torch.arange(last.shape[1], device=last.device).expand_as(attention_mask)
        if self.convention in ("last_non_pad", "last_attention"):
            keep = attention_mask.bool()
            if self.convention == "last_non_pad" and self.pad_token_id is not None:
                keep = keep & (input_ids != self.pad_token_id)
            idx = torch.where(keep, pos, torch.full_like(pos, -1)).amax(1).clamp(min=0)
            return last[rows, idx]
        if self.convention == "pooler":
            pooled = getattr(out, "pooler_output", None)
            if pooled is None:
                raise ModelError("the backbone has no pooler output")
            return pooled
        if self.convention in ("cls", "sequence"):
            return last[:, 0]
        raise ModelError(f"unknown pooling convention {self.convention!r}")

    def encode(self, input_ids, attention_mask, response_mask, layers=None) -> RewardOutput:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                            output_hidden_states=True, return_dict=True)
        if getattr(out, "hidden_states", None) is None:
            raise ModelError(f"backbone {type(self.backbone).__name__} returned no hidden_states")
        pooled = self._pool(out, input_ids, attention_mask)
        x = out.hidden_states[-1] if self.convention == "sequence" else pooled
        logits = self.head(x.to(_dtype_of(self.head, x)))
        rewards = logits.reshape(logits.shape[0], -1)[:, 0].float()
        if self.normalise is not None:
            rewards = (rewards - self.normalise[0]) / self.normalise[1]
        hidden = None
        if layers:
            hidden = {k: out.hidden_states[k] for k in self.check_layers(list(layers))}
        return RewardOutput(rewards=rewards, pooled=pooled, hidden=hidden)


def _dtype_of(module: nn.Module, default: torch.Tensor) -> torch.dtype:
    p = next(module.parameters(), None)
    return p.dtype if p is not None else default.dtype


@dataclass
class LoadedCheckpoint:
    """A checkpoint read for analysis: the model, its tokenizer, the framework's model (the
    reference for the check) and what was read."""

    model: CheckpointRewardModel
    tokenizer: Any
    framework: nn.Module | None  # the *ForSequenceClassification module (shares weights)
    info: dict = field(default_factory=dict)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ModelError(f"{path}: not readable JSON ({err})") from None


def _local_or_hub(name: str) -> str:
    """A folder, a zoo name (its verified folder) or a hub id, as ``from_pretrained`` takes it;
    a local path that does not exist fails at once (`resolve_reference`)."""
    return resolve_reference(name)


def _resolvable_locally(name: str) -> bool:
    return name in ZOO or Path(name).expanduser().is_dir()


def _tokenizer(*candidates: str, config=None, trust_remote_code: bool = False):
    """The tokenizer of the first candidate (the checkpoint, then its named base) that holds
    one: a local folder without tokenizer files is skipped (transformers would build an empty
    default tokenizer for it), and the tokenizer read must fit ``config``'s embedding
    (`check_tokenizer`). `ModelError` says which candidates were tried and why."""
    from transformers import AutoTokenizer

    why = []
    for c in candidates:
        if Path(c).is_dir() and not any((Path(c) / f).is_file() for f in TOKENIZER_FILES):
            why.append(f"{c}: no tokenizer files ({', '.join(TOKENIZER_FILES[:3])} ...)")
            continue
        try:
            tok = AutoTokenizer.from_pretrained(c, trust_remote_code=trust_remote_code)
        except (OSError, ValueError, TypeError) as err:
            why.append(f"{c}: {err}")
            continue
        if config is not None:
            check_tokenizer(tok, c, config)
        logger.info("tokenizer read from %s", c)
        return tok
    raise ModelError("no tokenizer for the checkpoint: " + "; ".join(why)
                     + ". Save the tokenizer the model was trained with into its folder")


def _seqcls(path: str, trust_remote_code: bool, allow_pickle_weights: bool = False,
            unused: tuple[str, ...] = (), **kwargs):
    """The checkpoint as ``AutoModelForSequenceClassification``: every weight it computes with
    (the pooler and score head included) must come from the checkpoint (`check_loading`), but
    for the prefixes in ``unused`` (a PEFT adapter's base: the adapter gives the head)."""
    from transformers import AutoModelForSequenceClassification

    try:
        with quiet_transformers():
            model, info = AutoModelForSequenceClassification.from_pretrained(
                path, trust_remote_code=trust_remote_code, dtype=torch.float32,
                output_loading_info=True, **weights_kwargs(path, allow_pickle_weights),
                **kwargs)
    except LOAD_ERRORS as err:
        raise ModelError(f"could not load {path!r} as a sequence-classification reward model: "
                         f"{err}") from None
    check_loading(path, info, unused=unused, head=not unused)
    return model


def _head_of(framework: nn.Module) -> tuple[str, nn.Module]:
    for name in HEAD_NAMES:
        mod = getattr(framework, name, None)
        if isinstance(mod, nn.Module):
            return name, mod
    raise ModelError(f"{type(framework).__name__} has none of the score heads {HEAD_NAMES}")


def _backbone_of(framework: nn.Module) -> nn.Module:
    prefix = getattr(framework, "base_model_prefix", "")
    bb = getattr(framework, prefix, None) if prefix else None
    if not isinstance(bb, nn.Module):
        raise ModelError(f"cannot find the backbone of {type(framework).__name__} "
                         f"(base_model_prefix {prefix!r})")
    return bb


def _check_one_label(config, where: str) -> None:
    n = getattr(config, "num_labels", 1)
    if n != 1:
        raise ModelError(f"{where} has num_labels={n}; a reward model outputs one score "
                         "(num_labels=1)")


def _pad_id(config, tokenizer) -> int | None:
    pad = getattr(config, "pad_token_id", None)
    if pad is None:  # TRL's convention when the config does not say: the tokenizer's pad / eos
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else \
            tokenizer.eos_token_id
    return None if pad is None else int(pad)


def load_checkpoint_model(model: str, reference: str | None = None, *,
                          trust_remote_code: bool = False,
                          allow_pickle_weights: bool = False) -> LoadedCheckpoint:
    """Read a reward-model checkpoint (see the module docstring) without checking it yet;
    `verify_checkpoint` picks and checks the pooling convention. Refused (`ModelError`): a
    checkpoint lacking weights its reward path uses, a tokenizer that is not the checkpoint's
    or its named base's, pickled weights unless ``allow_pickle_weights``, a local path that
    does not exist."""
    from transformers import AutoConfig

    path = _local_or_hub(model)
    folder = Path(path)
    info: dict[str, Any] = {"model": str(model)}
    if folder.is_dir() and (folder / "adapter_config.json").is_file():
        from peft import PeftModel

        acfg = _read_json(folder / "adapter_config.json")
        base = acfg.get("base_model_name_or_path") or ""
        if not (base and _resolvable_locally(base)) and reference:
            if base:
                logger.info("adapter base %r is not here; using the reference %r as its base",
                            base, reference)
            base = reference
        if not base:
            raise ModelError(f"{model}: adapter_config.json names no base model; pass --reference")
        task = acfg.get("task_type")
        if task not in (None, "SEQ_CLS"):
            raise ModelError(f"{model}: a PEFT adapter of task {task!r}; a reward model's "
                             "adapter is SEQ_CLS (a score head on a sequence classifier)")
        # as TRL builds it: the base as a one-label sequence classifier, whose score head the
        # adapter replaces (modules_to_save)
        framework = _seqcls(_local_or_hub(base), trust_remote_code, allow_pickle_weights,
                            unused=tuple(f"{h}." for h in HEAD_NAMES), num_labels=1)
        framework = PeftModel.from_pretrained(framework, path).merge_and_unload()
        tok = _tokenizer(path, _local_or_hub(base), config=framework.config,
                         trust_remote_code=trust_remote_code)
        info.update(kind="peft", base=str(base), adapter=acfg.get("peft_type", "LORA"))
        if getattr(framework.config, "pad_token_id", None) is None:
            framework.config.pad_token_id = _pad_id(framework.config, tok)
    else:
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as err:
            raise ModelError(f"could not read the config of {model!r}: {err}") from None
        archs = list(getattr(config, "architectures", None) or [])
        tok = _tokenizer(path, config=config, trust_remote_code=trust_remote_code)
        if any(a.endswith("ForSequenceClassification") for a in archs):
            framework = _seqcls(path, trust_remote_code, allow_pickle_weights)
            _check_one_label(framework.config, str(model))
            info.update(kind="sequence-classification", architecture=archs[0])
            if getattr(framework.config, "pad_token_id", None) is None:
                framework.config.pad_token_id = _pad_id(framework.config, tok)
        else:
            return _value_head_checkpoint(path, config, tok, info, trust_remote_code,
                                          allow_pickle_weights)
    check_vocab_fits(tok, framework, repr(str(model)))
    head_name, head = _head_of(framework)
    backbone = _backbone_of(framework)
    decoder = is_decoder_config(framework.config)
    conv = DECODER_CONVENTIONS[0] if decoder else ENCODER_CONVENTIONS[0]
    wrapped = CheckpointRewardModel(backbone, head, conv, _pad_id(framework.config, tok),
                                    head_name)
    framework.eval()
    wrapped.eval()
    info.update(head=head_name, decoder=decoder, pad_token_id=wrapped.pad_token_id)
    return LoadedCheckpoint(wrapped, tok, framework, info)


def _state_keys(folder: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():
                out[k] = f
    return out


def _value_head_checkpoint(path: str, config, tok, info: dict, trust_remote_code: bool,
                           allow_pickle_weights: bool = False):
    """A backbone saved together with a linear value head (``v_head.summary`` as TRL's value-head
    models, ``value_head`` / ``score`` as OpenRLHF's reward models), pooled on the last attended
    token, with OpenRLHF's reward normalisation (``mean`` / ``std``) when the config asks."""
    from safetensors import safe_open
    from transformers import AutoModel

    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"{path}: a hub checkpoint that is not a sequence classifier; "
                         "download it and pass the folder")
    keys = _state_keys(folder)
    prefix = next((p for p in _VALUE_HEAD_KEYS if f"{p}.weight" in keys), None)
    if prefix is None:
        raise ModelError(
            f"{path}: not a reward model anchorviz can read: its architectures are "
            f"{getattr(config, 'architectures', None)} (not *ForSequenceClassification) and its "
            f"weights hold no value head ({', '.join(p + '.weight' for p in _VALUE_HEAD_KEYS)})")

    def tensor(name: str) -> torch.Tensor:
        with safe_open(str(keys[name]), framework="pt") as st:
            return st.get_tensor(name).float()

    w = tensor(f"{prefix}.weight")
    if w.ndim != 2 or w.shape[0] != 1:
        raise ModelError(f"{path}: {prefix}.weight has shape {tuple(w.shape)}; a reward head "
                         "maps the hidden state to one score")
    head = nn.Linear(w.shape[1], 1, bias=f"{prefix}.bias" in keys)
    with torch.no_grad():
        head.weight.copy_(w)
        if head.bias is not None:
            head.bias.copy_(tensor(f"{prefix}.bias").reshape(1))
    try:
        with quiet_transformers():
            backbone, loading = AutoModel.from_pretrained(
                path, trust_remote_code=trust_remote_code, dtype=torch.float32,
                output_loading_info=True, **weights_kwargs(path, allow_pickle_weights))
    except LOAD_ERRORS as err:
        raise ModelError(f"could not load the backbone of {path!r}: {err}") from None
    check_loading(path, loading)
    check_vocab_fits(tok, backbone, repr(str(path)))
    norm = None
    if getattr(config, "normalize_reward", False) and "mean" in keys and "std" in keys:
        norm = (float(tensor("mean").reshape(-1)[0]), float(tensor("std").reshape(-1)[0]))
    wrapped = CheckpointRewardModel(backbone, head, "last_attention", _pad_id(config, tok),
                                    prefix.split(".")[0], normalise=norm)
    wrapped.eval()
    info.update(kind="value-head", head=prefix, decoder=wrapped.is_decoder,
                pad_token_id=wrapped.pad_token_id, normalised=norm is not None)
    return LoadedCheckpoint(wrapped, tok, None, info)


@torch.no_grad()
def _framework_rewards(framework: nn.Module, batch, pad_id: int | None) -> torch.Tensor:
    """The framework's own rewards for a padded batch: on the batch as is when the model knows
    its padding id, else one unpadded sequence at a time."""
    if pad_id is not None:
        out = framework(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        return out.logits.reshape(len(batch.input_ids), -1)[:, 0].float()
    rewards = []
    for ids, mask in zip(batch.input_ids, batch.attention_mask):
        n = int(mask.sum())
        out = framework(input_ids=ids[None, :n], attention_mask=mask[None, :n])
        rewards.append(out.logits.reshape(-1)[0].float())
    return torch.stack(rewards)


@torch.no_grad()
def verify_checkpoint(ckpt: LoadedCheckpoint, encoded, n_pairs: int = 8) -> dict:
    """Pick the pooling convention whose rewards match the framework's forward within
    `TOLERANCE` on the first ``n_pairs`` pairs (both sides, one padded batch); returns what was
    checked and sets it on the model. Raises `ModelError` when no convention matches."""
    model = ckpt.model
    if ckpt.framework is None:
        info = {"checked": False, "convention": model.convention,
                "why": "no framework class to compare with (value-head checkpoint)"}
        ckpt.info["verification"] = info
        return info
    idx = list(range(min(n_pairs, len(encoded))))
    batch, _ = joint_batch(encoded, idx)
    ref = _framework_rewards(ckpt.framework, batch, ckpt.framework.config.pad_token_id)
    tried = {}
    conventions = DECODER_CONVENTIONS if model.is_decoder else ENCODER_CONVENTIONS
    for conv in conventions:
        model.convention = conv
        try:
            got = model(batch.input_ids, batch.attention_mask, batch.response_mask).rewards
        except (ModelError, RuntimeError) as err:  # e.g. no pooler, head shape mismatch
            tried[conv] = f"fails ({type(err).__name__})"
            continue
        diff = float((got - ref).abs().max())
        tried[conv] = diff
        if diff <= TOLERANCE * max(1.0, float(ref.abs().max())):
            info = {"checked": True, "convention": conv, "max_abs_diff": diff,
                    "sequences": int(len(ref)), "tolerance": TOLERANCE,
                    "tried": {k: v for k, v in tried.items()}}
            ckpt.info["verification"] = info
            logger.info("checkpoint read with pooling %s: max |reward - framework| = %.2e on "
                        "%d sequences", conv, diff, len(ref))
            return info
    raise ModelError(
        f"{ckpt.info.get('model')}: no pooling convention reproduces the framework's own "
        f"rewards within {TOLERANCE:g} (max |difference| per convention: {tried}); anchorviz "
        "cannot read this checkpoint faithfully")


# --------------------------------------------------------------------------- data


def _parse_entry(entry: Any) -> Any:
    """``NAME=PATH`` on the command line -> ``{path: PATH, name: NAME}``; else as given."""
    if isinstance(entry, str):
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]{0,63})=(.+)", entry)
        if m and not Path(entry).expanduser().exists():
            return {"path": m.group(2), "name": m.group(1)}
    return entry


def _sample(df: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    if len(df) <= n:
        return df.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(df), size=n, replace=False))
    return df.iloc[keep].reset_index(drop=True)


def analysis_data(source: Any, targets: list, unlabelled: list, n: int, seed: int) -> dict:
    """``{"source_test": pairs, "target_test:<name>": pairs, ...}``: at most ``n`` pairs per
    dataset (a seeded sample), read like the run configs' datasets
    (`anchorviz.pipeline.prepare.load_dataset_entry`: names, paths, ``{path, name, column_map}``)."""
    check_dataset_entry(source, "source")
    data = {"source_test": _sample(load_dataset_entry(source)[0], n, seed)}
    seen: dict[str, str] = {}
    for what, entries in (("targets", targets), ("unlabelled", unlabelled)):
        for i, e in enumerate(entries):
            check_dataset_entry(e, f"{what}[{i}]")
            short = target_name(e)
            if short in seen:
                raise AnalyseError(f"{what}[{i}] and {seen[short]} are both named {short!r}; "
                                   "give one a name (NAME=PATH)")
            seen[short] = f"{what}[{i}]"
            data[f"target_test:{short}"] = _sample(load_dataset_entry(e)[0], n, seed)
    for k, df in data.items():
        if len(df) < 4:
            raise AnalyseError(f"{k}: {len(df)} pairs; drift needs at least 4")
    return data


# --------------------------------------------------------------------------- the analysis


@dataclass
class AnalyseResult:
    run_id: str
    run_dir: Path
    metrics: dict
    computed: bool
    ood_risk: pd.DataFrame
    results: pd.DataFrame


def _label(model: str) -> str:
    p = Path(str(model).rstrip("/"))
    return safe_component(p.name or str(model))


def _inputs(*names: str) -> dict[str, str]:
    out = {}
    for n in names:
        p = Path(n).expanduser()
        if p.exists():
            out[n] = fingerprint(p)
    return out


def _ids_hash(encoded: dict) -> str:
    return config_hash({k: [e.chosen_ids, e.rejected_ids, e.chosen_resp, e.rejected_resp]
                        for k, e in sorted(encoded.items())}, length=16)


def _reference_captures(store, reference: str, pooling: str, encoded: dict, layers, batch_size,
                        device, trust_remote_code, ckpt_layers: int, hidden: int,
                        allow_pickle_weights: bool = False) -> dict:
    """The base model's captures of the encoded pairs, shared by every checkpoint analysed
    with this base on the same token ids (``shared/analyse-reference-<hash>``)."""
    key = {"kind": "analyse-reference", "version": ANALYSE_VERSION,
           "base": base_identity(reference), "pooling": pooling, "ids": _ids_hash(encoded),
           "layers": layers if isinstance(layers, str) else list(layers)}
    name = f"analyse-reference-{config_hash(key)}"
    folder = store.shared_dir(name)
    with store.lock(name):
        done = folder / "DONE.json"
        damaged = verify_shared_dir(folder)[0] == "bad"
        if damaged:
            logger.warning("reference capture %s is damaged: recomputing", name)
        if done.is_file() and not damaged:
            try:
                return {s: load_captured(folder / f"{s.replace(':', '__')}.safetensors")
                        for s in encoded}
            except Exception as err:  # damaged: recompute
                logger.warning("reference capture %s unreadable (%s): recomputing", name, err)
        torch.manual_seed(0)
        ref, _ = load_reward_model(reference, pooling=pooling, dropout=False,
                                   trust_remote_code=trust_remote_code,
                                   allow_pickle_weights=allow_pickle_weights)
        if ref.n_layers != ckpt_layers or ref.hidden_size != hidden:
            raise ModelError(f"the reference {reference!r} has {ref.n_layers} layers of width "
                             f"{ref.hidden_size}, the checkpoint {ckpt_layers} of width {hidden}: "
                             "the reference must be the checkpoint's base model")
        caps = {}
        for s, enc in encoded.items():
            caps[s] = capture_states(ref, enc, layers=layers, batch_size=batch_size,
                                     device=device, desc=f"reference {s}")
            save_captured(folder / f"{s.replace(':', '__')}.safetensors", caps[s])
        done.write_text(json.dumps({"key": key}, default=str))
        seal_shared(folder)  # every capture's sha256: `anchorviz verify` checks them
        return caps


def _check_same_tokens(ckpt_tok, reference: str, data: dict, trust_remote_code: bool) -> None:
    """The base must read the pairs as the same token ids as the checkpoint."""
    try:
        ref_tok = _tokenizer(_local_or_hub(reference), trust_remote_code=trust_remote_code)
    except ModelError:
        return  # a zoo / hub base without a tokenizer folder: the layer check still applies
    texts = []
    for df in data.values():
        texts += list(df["chosen"].head(8)) + list(df["rejected"].head(8))
    differ = sum(ckpt_tok(t, add_special_tokens=False)["input_ids"]
                 != ref_tok(t, add_special_tokens=False)["input_ids"] for t in texts)
    if differ:
        raise AnalyseError(
            f"the reference {reference!r} tokenizes {differ} of {len(texts)} sample texts "
            "differently from the checkpoint (added tokens or another vocabulary): drift is only "
            "defined for the same token ids; pass the checkpoint's base model as --reference")


def _accuracy(scores: pd.DataFrame, labelled: list[str], n_boot: int, seed: int) -> dict:
    """The pipeline's accuracy block over the labelled splits only."""
    return accuracy_block(scores[scores["split"].isin(labelled)], n_boot, seed)


def _cues(scores: pd.DataFrame, data: dict, labelled: list[str], n_boot: int, seed: int
          ) -> dict:
    """The pipeline's ``cues`` block (`anchorviz.pipeline.results.cue_block`) over the labelled
    splits only: an unlabelled pair's order is not a preference."""
    lab = scores[scores["split"].isin(labelled)]
    return cue_block(lab, {s: data[s] for s in labelled}, n_boot, seed)


def _projection(ref_caps: dict, caps: dict, data: dict, method: str, fit_rows: int):
    layer = max(ref_caps[next(iter(ref_caps))].layers)
    proj, ref_xy = fit_shared_projection(ref_caps, layer, method, fit_rows)
    stu_xy = proj.transform(np.concatenate(
        [caps[s].states(layer, "head").astype(np.float32) for s in ref_caps]))
    return projection_frame(ref_caps, data, layer, ref_xy, stu_xy)


@dataclass(frozen=True)
class AnalyseOptions:
    """How `analyse` samples, reads, captures and scores (``anchorviz analyse``'s flags); any
    field may also be passed to `analyse` by name (``analyse(..., pairs=200)``)."""

    name: str | None = None  # the model's short name in tables (None: from its path)
    pairs: int = 500  # pairs per dataset, a seeded sample (>= 4)
    max_length: int = 256  # tokens per side
    batch_size: int = 16
    device: str = "cpu"
    seed: int = 0
    layers: str = "all"  # the hidden-state layers captured (a layer spec)
    projection: str = "auto"  # one of anchorviz.choices.PROJECTIONS
    projection_fit_rows: int = 1500
    n_boot: int = 1000
    use_chat_template: bool = False  # render prompts and responses with the chat template
    trust_remote_code: bool = False
    allow_pickle_weights: bool = False  # read .bin / .pt weights (pickles): trusted files only


def analyse(model: str, reference: str, source: Any, targets: list | tuple = (),
            unlabelled: list | tuple = (), out: str | Path = "runs/analyse",
            options: AnalyseOptions | None = None, **settings: Any) -> AnalyseResult:
    """Analyse the reward model ``model`` (folder, hub id or PEFT adapter folder) against its
    base ``reference`` on ``source`` and ``targets`` (labelled) and ``unlabelled`` targets
    (pairs whose order is not a preference: only drift, and the label-free estimate).

    Datasets are anything a run config takes (names, files, ``{path, name, column_map}``;
    ``NAME=PATH`` names a file). Writes a run folder under ``out`` (see the module
    docstring) and ``out/ood_risk.csv``; returns an `AnalyseResult`."""
    o = dataclasses.replace(options or AnalyseOptions(), **settings)
    if not (isinstance(o.pairs, int) and o.pairs >= 4):
        raise AnalyseError(f"pairs must be an integer >= 4, got {o.pairs!r}")
    if o.projection not in PROJECTIONS:
        raise AnalyseError(f"projection must be {'|'.join(PROJECTIONS)}, got {o.projection!r}")
    source = _parse_entry(source)
    targets = [_parse_entry(t) for t in targets]
    unlabelled = [_parse_entry(t) for t in unlabelled]
    label = o.name or _label(model)
    data = analysis_data(source, targets, unlabelled, o.pairs, o.seed)

    unl_splits = [f"target_test:{target_name(t)}" for t in unlabelled]
    lab_splits = [s for s in data if s not in unl_splits]

    ckpt = load_checkpoint_model(model, reference, trust_remote_code=o.trust_remote_code,
                                 allow_pickle_weights=o.allow_pickle_weights)
    tok = ckpt.tokenizer
    encoded = {s: encode_pairs(tok, df, max_length=o.max_length,
                               use_chat_template=o.use_chat_template) for s, df in data.items()}
    verification = verify_checkpoint(ckpt, encoded["source_test"])
    _check_same_tokens(tok, reference, data, o.trust_remote_code)
    capture_layers = resolve_capture_layers(ckpt.model, o.layers)

    norm = normalise_dataset_entry
    key = {
        "kind": "external", "analyse": ANALYSE_VERSION, "model": str(model),
        # one method group per checkpoint (plots and the report group runs by method)
        "method": {"name": f"checkpoint:{label}"},
        "reference": str(reference), "name": label,
        "inputs": _inputs(str(model), str(reference)),
        "data": {"source": norm(source), "targets": [norm(t) for t in targets],
                 "unlabelled": [norm(t) for t in unlabelled], "pairs": o.pairs,
                 "max_length": o.max_length, "use_chat_template": o.use_chat_template,
                 "artifact_kind": "none", "artifact_strength": 0.0,
                 # what was read: the token ids of every sampled pair (an edited file, another
                 # sample or another tokenizer is another analysis)
                 "ids": _ids_hash(encoded)},
        "capture": {"layers": o.layers, "projection": o.projection,
                    "projection_fit_rows": o.projection_fit_rows, "n_boot": o.n_boot},
        "convention": verification["convention"], "seed": o.seed,
    }

    run_id = f"checkpoint-{config_hash(key)}"
    store = RunStore(out)
    store.clean_temporaries()

    def body(tmp: Path) -> dict:
        t0 = time.perf_counter()
        model_ = ckpt.model.to(o.device)
        caps, rows = {}, []
        for s, enc in encoded.items():
            caps[s] = capture_states(model_, enc, layers=capture_layers, batch_size=o.batch_size,
                                     device=o.device, seed=o.seed, desc=f"capture {s}")
            rc, rr = caps[s].rewards_by_side()
            rows.append(pd.DataFrame({
                "split": s, "domain": str(data[s]["domain"].iloc[0]), "pair_id": enc.pair_ids,
                "r_chosen": rc, "r_rejected": rr,
                "group": bootstrap_groups(data[s], enc.pair_ids, s, "auto")}))
        scores = pd.concat(rows, ignore_index=True)
        scores[scores["split"].isin(lab_splits)].reset_index(drop=True).to_parquet(
            tmp / "scores.parquet")
        if unl_splits:
            scores[scores["split"].isin(unl_splits)].reset_index(drop=True).to_parquet(
                tmp / "scores_unlabelled.parquet")
        ref_caps = _reference_captures(store, reference, ckpt.model.pooling, encoded,
                                       capture_layers, o.batch_size, o.device, o.trust_remote_code,
                                       ckpt.model.n_layers, ckpt.model.hidden_size,
                                       o.allow_pickle_weights)
        drift_blocks(caps, ref_caps, data).to_parquet(tmp / "drift.parquet")
        if o.projection != "none":
            _projection(ref_caps, caps, data, o.projection, o.projection_fit_rows).to_parquet(
                tmp / "projection.parquet")
        for s, c in caps.items():
            save_captured(tmp / "hidden" / "student" / f"{s.replace(':', '__')}.safetensors", c)
        return {"kind": "external", "method": f"checkpoint:{label}", "model": str(model),
                "reference": str(reference), "checkpoint": _jsonable(ckpt.info),
                "accuracy": _accuracy(scores, lab_splits, o.n_boot, o.seed),
                # reliance on surface cues, on the labelled splits (as a trained run stores it)
                "cues": _cues(scores, data, lab_splits, o.n_boot, o.seed),
                "unlabelled": unl_splits, "seconds": time.perf_counter() - t0}

    res = run_guarded(store, run_id, key, body)
    table = results_table(out)
    risk = ood_risk_table(out)
    return AnalyseResult(res.run_id, res.run_dir, res.metrics, res.computed, risk, table)


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


# --------------------------------------------------------------------------- label-free risk


DRIFT_FOR_RISK = ("cosine_centred_mean", "cosine_mean")


def ood_risk_table(out: str | Path, n_boot: int = 2000, min_runs: int = 4) -> pd.DataFrame:
    """`anchorviz.analysis.ood_risk.OODRiskEstimator` over the checkpoints analysed into ``out``: fitted on
    (last-layer centred cosine drift, accuracy) of every labelled domain of every checkpoint
    with the same reference, it predicts the accuracy of each unlabelled target from its
    drift, with a prediction interval, or says why the relation is too weak. Written to
    ``out/ood_risk.csv`` (one row per checkpoint x unlabelled target)."""
    store = RunStore(out)
    finished, _ = store.scan()
    points, wanted = [], []
    for run_id in finished:
        d = store.run_dir(run_id)
        try:
            key = read_yaml(d / "config.yaml")
            if key.get("kind") != "external":
                continue
            m = json.loads((d / "metrics.json").read_text())
            drift = pd.read_parquet(d / "drift.parquet")
        except Exception as err:  # unreadable run: left out of the fit
            logger.warning("ood risk: run %s left out (%s)", run_id, err)
            continue
        col = next(c for c in DRIFT_FOR_RISK if c in drift)
        last = drift[drift["layer"] == drift["layer"].max()].set_index("split")[col]
        for split, block in m.get("accuracy", {}).items():
            if split != "ood" and split in last:
                points.append((key["reference"], float(last[split]), block["point"]))
        for split in m.get("unlabelled", []):
            if split in last:
                wanted.append((run_id, m.get("method", ""), key["reference"],
                               split.split(":", 1)[-1], float(last[split])))
    rows = []
    for ref in sorted({w[2] for w in wanted}):
        xs = [p[1] for p in points if p[0] == ref]
        ys = [p[2] for p in points if p[0] == ref]
        est, why = None, ""
        try:
            est = OODRiskEstimator(n_boot=n_boot, min_runs=min_runs).fit(xs, ys)
        except DriftError as err:
            why = f"cannot fit: {err}"
        for run_id, method, _, target, x in (w for w in wanted if w[2] == ref):
            row = {"run_id": run_id, "model": method, "reference": ref, "target": target,
                   "drift": x, "n_fit": len(xs), "est_acc": np.nan, "est_lo": np.nan,
                   "est_hi": np.nan, "reliable": False, "status": why}
            if est is not None:
                pred = est.predict(x)
                # the estimator counts "runs": here each point is a labelled domain
                status = re.sub(r"\b(\d+) runs\b", r"\1 labelled domains", pred.status)
                row.update(reliable=bool(pred.reliable), status=status)
                if pred.reliable:
                    row.update(est_acc=float(np.clip(pred.gain, 0, 1)),
                               est_lo=float(np.clip(pred.lower, 0, 1)),
                               est_hi=float(np.clip(pred.upper, 0, 1)))
            rows.append(row)
    cols = ["run_id", "model", "reference", "target", "drift", "est_acc", "est_lo", "est_hi",
            "reliable", "n_fit", "status"]
    df = pd.DataFrame(rows, columns=cols)
    path = Path(out) / "ood_risk.csv"
    if len(df):
        df.to_csv(path, index=False)
    else:
        path.unlink(missing_ok=True)
    return df


def cue_lines(block: dict) -> list[str]:
    """The ``cues`` block as ``anchorviz analyse`` prints it: per cue, on the source and the
    targets pooled, how often the model prefers the cue's side where the cue favours the
    REJECTED response (``100 - accuracy`` there, 95% interval, pairs); cues that never
    disagree with the label there are named on one line."""
    splits = [s for s in ("source_test", "ood") if s in block]
    if not splits:
        return []
    lines = ["Surface cues: % of the pairs where the cue favours the rejected response on which "
             "the model prefers the cue's side anyway (0 = never misled; 95% interval, pairs):"]
    quiet = []
    cues = list(dict.fromkeys(c for s in splits for c in block[s]))
    for cue in cues:
        parts = []
        for s in splits:
            d = ((block[s].get(cue) or {}).get("disagree") or {})
            if d.get("n") and d.get("point") is not None:
                name = "source" if s == "source_test" else "targets pooled"
                parts.append(f"{name} {100 * (1 - d['point']):5.1f} [{100 * (1 - d['hi']):5.1f}, "
                             f"{100 * (1 - d['lo']):5.1f}] n={d['n']}")
        if parts:
            lines.append(f"  {cue:10s} " + "   ".join(parts))
        else:
            quiet.append(cue)
    if quiet:
        lines.append("  never against the label here: " + ", ".join(quiet))
    return lines


def summary_lines(result: AnalyseResult) -> list[str]:
    """What ``anchorviz analyse`` prints: the reading of the checkpoint, accuracy per domain,
    the surface cues it follows (`cue_lines`), drift per domain at the last layer, the
    label-free estimates."""
    m = result.metrics
    v = (m.get("checkpoint") or {}).get("verification") or {}
    ck = m.get("checkpoint") or {}
    lines = [f"Checkpoint {m.get('model')} ({ck.get('kind')}, head {ck.get('head')!r}, "
             f"pooling {v.get('convention')}) vs base {m.get('reference')}"]
    if v.get("checked"):
        lines.append(f"  read as trained: rewards match the framework's forward to "
                     f"{v['max_abs_diff']:.1e} (<= {v['tolerance']:g}) on {v['sequences']} "
                     "sequences")
    else:
        lines.append(f"  not checked against a framework forward: {v.get('why', '?')}")
    lines.append("Pairwise accuracy (95% bootstrap interval):")
    for split, b in m.get("accuracy", {}).items():
        nm = {"source_test": "source", "ood": "targets pooled"}.get(split, split.split(":")[-1])
        lines.append(f"  {nm:16s} {100 * b['point']:5.1f}  [{100 * b['lo']:5.1f}, "
                     f"{100 * b['hi']:5.1f}]  n={b['n']}")
    lines += cue_lines(m.get("cues") or {})
    drift = pd.read_parquet(result.run_dir / "drift.parquet")
    last = drift[drift["layer"] == drift["layer"].max()]
    lines.append(f"Drift from the base at the last layer ({int(last['layer'].iloc[0])}): "
                 "debiased CKA (1 = same), centred cosine 1 - cos (0 = unchanged)")
    for r in last.itertuples(index=False):
        nm = "source" if r.split == "source_test" else r.split.split(":")[-1]
        tag = " (unlabelled)" if r.split in m.get("unlabelled", []) else ""
        lines.append(f"  {nm + tag:28s} CKA {r.cka_debiased:6.3f}   cosine "
                     f"{r.cosine_centred_mean:6.3f}")
    mine = result.ood_risk[result.ood_risk["run_id"] == result.run_id]
    for r in mine.itertuples(index=False):
        if r.reliable:
            lines.append(f"Label-free accuracy estimate on {r.target}: {100 * r.est_acc:.1f} "
                         f"[{100 * r.est_lo:.1f}, {100 * r.est_hi:.1f}] (from drift; fitted on "
                         f"{r.n_fit} labelled domains)")
        else:
            lines.append(f"Label-free estimate on {r.target}: none -- {r.status}")
    return lines
