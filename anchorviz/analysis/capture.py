"""Hidden-state capture: pooled states of every layer, both sides of every pair, in one pass.

The same pass gives the rewards, so evaluating a split and capturing it cost one forward.
Memory is bounded by one batch plus the pooled output (``2n x d`` per layer, float16), whatever
the dataset size. float16 tops out at 65504: a layer with any pooled (or sampled token) value
beyond that -- decoders' massive activations -- is stored as float32 from then on, so nothing
becomes inf on the way to disk. Student and reference captures of the same encoded pairs line up
row by row: rows are ``pair 0 chosen, pair 0 rejected, pair 1 chosen, ...``.

File layout (``hidden/<model_key>/<split>.safetensors``): tensors ``mean.<layer>`` (mean over
response tokens; float16, float32 where float16 would overflow) and, when the reward head pools
differently (decoders: last response token), ``head.<layer>``; ``side`` (int8, 0 chosen /
1 rejected), ``rewards`` (float32, 2n); metadata ``pair_ids``, ``layers``, ``pooling`` (JSON).
Optional ``tokens.<layer>`` holds a bounded random sample of token-level states with
``token_rows`` (which row each came from).
"""

from __future__ import annotations

import json
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from tqdm.auto import tqdm

from anchorviz.choices import parse_layer_spec
from anchorviz.models.reward_model import RewardModel, eval_mode, pool_states
from anchorviz.models.tokenization import EncodedPairs, length_batches
from anchorviz.paths import bars_off
from anchorviz.training.loop import joint_batch
from anchorviz.training.losses import resolve_anchor_layers

logger = logging.getLogger(__name__)

__all__ = [
    "CaptureError",
    "Captured",
    "capture_states",
    "load_captured",
    "resolve_capture_layers",
    "save_captured",
]

#: Largest finite float16 (65504).
_F16_MAX = float(np.finfo(np.float16).max)


class CaptureError(ValueError):
    """Bad capture request or a capture file that does not match what was asked."""


@dataclass
class Captured:
    """Pooled states of one model on one split. Arrays are (2n, d) per layer: float16, or float32
    for a layer with values beyond float16's range (``.astype(np.float32)`` reads either)."""

    pair_ids: list[str]
    layers: list[int]
    pooling: str
    mean: dict[int, np.ndarray]
    head: dict[int, np.ndarray]  # the head's pooling; same arrays as ``mean`` for mean pooling
    rewards: np.ndarray  # (2n,) float32
    side: np.ndarray  # (2n,) int8
    tokens: dict[int, np.ndarray] = field(default_factory=dict)
    token_rows: np.ndarray | None = None

    @property
    def n_pairs(self) -> int:
        return len(self.pair_ids)

    def rewards_by_side(self) -> tuple[np.ndarray, np.ndarray]:
        """``(r_chosen, r_rejected)``, each (n,)."""
        return self.rewards[0::2].astype(np.float64), self.rewards[1::2].astype(np.float64)

    def states(self, layer: int, kind: str = "mean") -> np.ndarray:
        if layer not in self.layers:
            raise CaptureError(f"layer {layer} was not captured; captured layers: {self.layers}")
        if kind not in ("mean", "head"):
            raise CaptureError(f"kind must be 'mean' or 'head', got {kind!r}")
        return (self.mean if kind == "mean" else self.head)[layer]


def resolve_capture_layers(model: RewardModel, spec: str) -> list[int] | str:
    """The ``layers`` argument of `capture_states` for a config's ``capture.layers``: ``"all"``
    stays ``"all"`` (every hidden state, the embeddings included, unlike the anchor's
    ``"all"``); ``"last"``, ``"middle"`` and ``"3,5"`` resolve as the anchor's layers do."""
    if spec == "all":
        return "all"
    return resolve_anchor_layers(parse_layer_spec(spec), model.n_layers)


@torch.no_grad()
def capture_states(
    model: RewardModel,
    encoded: EncodedPairs,
    *,
    layers: list[int] | str = "all",
    batch_size: int = 64,
    device: str = "cpu",
    token_sample: int = 0,
    seed: int = 0,
    adapters: bool = True,
    desc: str = "capture",
    progress: bool = True,
) -> Captured:
    """Forward every pair (both sides) once; pool every requested layer over response tokens.

    ``adapters=False`` runs a LoRA model with its adapters disabled (the pretrained reference).
    ``token_sample`` > 0 keeps that many random response-token states per layer (reservoir-free:
    a fixed per-row quota, so memory stays bounded).
    """
    if len(encoded) == 0:
        raise CaptureError(f"{desc}: no pairs to capture")
    if layers == "all":
        layer_list = list(range(model.n_layers + 1))
    else:
        layer_list = model.check_layers(list(layers))
    n_rows = 2 * len(encoded)
    d = model.hidden_size
    mean = {k: np.zeros((n_rows, d), dtype=np.float16) for k in layer_list}
    separate_head = model.pooling != "mean"
    head = {k: np.zeros((n_rows, d), dtype=np.float16) for k in layer_list} if separate_head else mean
    rewards = np.zeros(n_rows, dtype=np.float32)
    rng = np.random.default_rng(seed)
    per_row = 0 if token_sample <= 0 else max(1, int(np.ceil(token_sample / n_rows)))
    tok_states: dict[int, list[np.ndarray]] = {k: [] for k in layer_list}
    tok_rows: list[np.ndarray] = []

    bb = model.backbone
    ctx = bb.disable_adapter() if (not adapters and hasattr(bb, "disable_adapter")) else nullcontext()
    if not adapters and not hasattr(bb, "disable_adapter"):
        raise CaptureError("adapters=False needs a LoRA (PEFT) model")
    model.to(device)

    with eval_mode(model), ctx:
        for idx in tqdm(length_batches(encoded.lengths(), batch_size), desc=desc,
                        disable=bars_off(progress), leave=False):
            batch, _ = joint_batch(encoded, idx)
            batch = batch.to(device)
            out = model(batch.input_ids, batch.attention_mask, batch.response_mask,
                        layers=layer_list)
            rows = np.array([2 * i for i in idx] + [2 * i + 1 for i in idx])
            rewards[rows] = out.rewards.float().cpu().numpy()
            for k in layer_list:
                h = out.hidden[k].float()
                # Finiteness is checked on what is stored (pooled, after the cast), not on
                # every token state: a NaN / inf among the pooled tokens makes the mean
                # non-finite, and it is a fraction of the cost.
                pooled = [(mean, pool_states(h, batch.response_mask, "mean"))]
                if separate_head:
                    pooled.append((head, pool_states(h, batch.response_mask, model.pooling)))
                for store, p in pooled:
                    stored = _store_rows(store, k, rows, p.cpu().numpy(), desc)
                    if stored is not None:
                        raise CaptureError(
                            f"{desc}: non-finite hidden states at layer {k} for pair "
                            f"{encoded.pair_ids[idx[stored % len(idx)]]!r}"
                        )
            if per_row:
                mask = batch.response_mask.bool().cpu().numpy()
                picks = []
                for j in range(mask.shape[0]):
                    pos = np.flatnonzero(mask[j])
                    take = rng.choice(pos, size=min(per_row, len(pos)), replace=False)
                    picks.append((j, np.sort(take)))
                for k in layer_list:
                    h = out.hidden[k].float().cpu().numpy()
                    # float16 chunks, or float32 ones where float16 overflows; the final
                    # concatenate promotes the layer to float32 if any chunk is.
                    tok_states[k].append(
                        _storage(np.concatenate([h[j, t] for j, t in picks]))[0])
                tok_rows.append(np.concatenate([np.full(len(t), rows[j]) for j, t in picks]))
    cap = Captured(
        pair_ids=list(encoded.pair_ids), layers=layer_list, pooling=model.pooling, mean=mean,
        head=head, rewards=rewards, side=np.tile(np.array([0, 1], dtype=np.int8), len(encoded)),
    )
    if per_row:
        cap.tokens = {k: np.concatenate(v)[:token_sample] for k, v in tok_states.items()}
        cap.token_rows = np.concatenate(tok_rows)[:token_sample].astype(np.int64)
    return cap


def _storage(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """``values`` cast to the storage dtype, and whether every stored value is finite.

    float16 when every value survives the cast; otherwise float32 (exact for float32 input), so
    a finite value beyond float16's +-65504 is kept rather than turned into inf. The check runs
    on the cast result, i.e. on exactly what is stored: a non-finite stored value means a
    non-finite input.
    """
    with np.errstate(over="ignore"):  # the overflow is what the check below is for
        half = values.astype(np.float16)
    if np.isfinite(half).all():
        return half, True
    full = values.astype(np.float32, copy=False)
    return full, bool(np.isfinite(full).all())


def _store_rows(store: dict[int, np.ndarray], k: int, rows: np.ndarray, values: np.ndarray,
                desc: str) -> int | None:
    """Write pooled ``values`` (b, d) to ``store[k][rows]``, switching that layer's buffer to
    float32 the first time a value exceeds float16's range (rows already stored were float16,
    exact in float32). Returns the index into ``values`` of the first non-finite row (nothing is
    stored then), or None."""
    if store[k].dtype == np.float16:
        stored, finite = _storage(values)
    else:  # already float32: keep full precision from here on
        stored = values.astype(store[k].dtype, copy=False)
        finite = bool(np.isfinite(stored).all())
    if not finite:
        return int(np.flatnonzero(~np.isfinite(stored).all(axis=1))[0])
    if stored.dtype != store[k].dtype:  # float16 buffer, float32 values: promote the layer
        logger.info(
            "%s: layer %s has pooled values up to %.4g, beyond float16's %g: storing it as %s",
            desc, k, float(np.abs(values).max()), _F16_MAX, stored.dtype)
        store[k] = store[k].astype(stored.dtype)
    store[k][rows] = stored
    return None


def save_captured(path: str | Path, cap: Captured) -> Path:
    """Write a capture as safetensors (no pickle). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {"side": cap.side, "rewards": cap.rewards}
    for k in cap.layers:
        tensors[f"mean.{k}"] = np.ascontiguousarray(cap.mean[k])
        if cap.head is not cap.mean:
            tensors[f"head.{k}"] = np.ascontiguousarray(cap.head[k])
        if k in cap.tokens:
            tensors[f"tokens.{k}"] = np.ascontiguousarray(cap.tokens[k])
    if cap.token_rows is not None:
        tensors["token_rows"] = cap.token_rows
    meta = {"pair_ids": json.dumps(cap.pair_ids), "layers": json.dumps(cap.layers),
            "pooling": cap.pooling}
    save_file(tensors, str(path), metadata=meta)
    return path


def load_captured(path: str | Path, layers: list[int] | None = None) -> Captured:
    """Read a capture written by ``save_captured`` (optionally only some layers)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CaptureError(f"capture file {path} does not exist")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
    except Exception as err:  # SafetensorError: truncated, empty or not a safetensors file
        raise CaptureError(
            f"{path}: not a readable safetensors capture ({type(err).__name__}: {err}); the file "
            "is truncated or corrupted: delete it (or its run) to have it recomputed"
        ) from None
    try:
        pair_ids = json.loads(meta["pair_ids"])
        all_layers = json.loads(meta["layers"])
        pooling = meta["pooling"]
    except (KeyError, json.JSONDecodeError) as err:
        raise CaptureError(f"{path}: not an anchorviz capture (metadata {err})") from None
    want = all_layers if layers is None else layers
    missing = [k for k in want if k not in all_layers]
    if missing:
        raise CaptureError(f"{path}: layer(s) {missing} not captured; captured: {all_layers}")
    try:
        t = load_file(str(path))
    except Exception as err:  # a header that reads but data that does not
        raise CaptureError(f"{path}: unreadable capture data ({type(err).__name__}: {err})") from None
    mean = {k: t[f"mean.{k}"] for k in want}
    head = {k: t[f"head.{k}"] for k in want} if f"head.{want[0]}" in t else mean
    tokens = {k: t[f"tokens.{k}"] for k in want if f"tokens.{k}" in t}
    return Captured(pair_ids=pair_ids, layers=list(want), pooling=pooling, mean=mean, head=head,
                    rewards=t["rewards"], side=t["side"], tokens=tokens,
                    token_rows=t.get("token_rows"))
