"""The frozen reference that ANCHOR pulls the student towards: the pretrained student itself.

Three strategies give the same reference states (tests check it to float tolerance); they differ
in cost:

- ``copy``: a frozen deep copy of the pretrained backbone in eval mode, run on every training
  batch (the paper's way: one extra forward per step, a second copy of the weights in memory);
- ``adapter_off``: a LoRA student run with its adapters disabled (no second copy of the weights,
  still one extra forward per step);
- ``cached``: the reference states of the anchored layers computed ONCE for the training pairs
  (before the first step, while the student still equals its pretrained self) and read back from a
  memory map: no reference forward during training at all.

Dropout is always off in the reference. ``choose_strategy`` picks the cheapest correct one.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from anchorviz.choices import REFERENCES
from anchorviz.models.packed import hidden_states
from anchorviz.models.reward_model import RewardModel, disable_dropout, eval_mode
from anchorviz.models.tokenization import EncodedPairs, SideBatch, length_batches, pad_side

logger = logging.getLogger(__name__)

__all__ = [
    "AdapterOffReference",
    "CachedReference",
    "CopyReference",
    "Reference",
    "ReferenceSetupError",
    "choose_strategy",
    "make_reference",
]



class ReferenceSetupError(ValueError):
    """A reference strategy that cannot be used for this model / configuration."""


def _hidden(backbone, batch: SideBatch, layers: Sequence[int]) -> dict[int, torch.Tensor]:
    states = hidden_states(backbone, batch.input_ids, batch.attention_mask)
    return {layer: states[layer] for layer in layers}


class Reference(ABC):
    """Reference hidden states for a training batch: ``states(index, batch) -> {layer: (B,T,d)}``.

    ``index`` holds the pairs' row numbers in the training set and the side of each row
    (``(pair_row, side)`` with side 0 = chosen, 1 = rejected), which the cached strategy needs.
    """

    strategy = "base"

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = list(layers)

    @abstractmethod
    def states(
        self, index: Sequence[tuple[int, int]], batch: SideBatch
    ) -> dict[int, torch.Tensor]:
        """Reference token states of the anchored layers for the rows of ``batch``."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op unless a strategy holds files
        """Release memory / files (the cached strategy deletes a temporary memmap)."""


class CopyReference(Reference):
    """A frozen deep copy of the pretrained backbone (the paper's reference)."""

    strategy = "copy"

    def __init__(self, model: RewardModel, layers: Sequence[int]) -> None:
        super().__init__(layers)
        self.backbone = copy.deepcopy(model.backbone)
        disable_dropout(self.backbone)
        self.backbone.eval()
        for p in self.backbone.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def states(self, index, batch):
        device = batch.input_ids.device
        if next(self.backbone.parameters()).device != device:  # built before training moved
            self.backbone.to(device)  # the student to its device (e.g. CUDA): follow it once
        return _hidden(self.backbone, batch, self.layers)

    def close(self) -> None:
        self.backbone = None


class AdapterOffReference(Reference):
    """The LoRA student itself with adapters disabled: the pretrained weights, no second copy."""

    strategy = "adapter_off"

    def __init__(self, model: RewardModel, layers: Sequence[int]) -> None:
        super().__init__(layers)
        if not hasattr(model.backbone, "disable_adapter"):
            raise ReferenceSetupError(
                "reference strategy 'adapter_off' needs a LoRA (PEFT) student; this student is "
                "fully fine-tuned: use 'copy' or 'cached'"
            )
        self.model = model

    @torch.no_grad()
    def states(self, index, batch):
        bb = self.model.backbone
        with bb.disable_adapter(), eval_mode(bb):
            return _hidden(bb, batch, self.layers)

    def close(self) -> None:
        self.model = None


class CachedReference(Reference):
    """Reference token states of the anchored layers, computed once, read from a memory map.

    Storage is ragged (no padding): all tokens of all (pair, side) sequences back to back, one
    ``(n_tokens, d)`` array per layer, with row offsets. ``dtype`` float16 halves the disk and
    memory-map traffic; float32 reproduces ``copy`` to float rounding.
    """

    strategy = "cached"

    def __init__(
        self,
        model: RewardModel,
        encoded: EncodedPairs,
        layers: Sequence[int],
        *,
        directory: str | Path | None = None,
        dtype: str = "float32",
        batch_size: int = 32,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(layers)
        if dtype not in ("float16", "float32"):
            raise ReferenceSetupError(f"cached reference dtype must be float16 or float32, got {dtype!r}")
        self.dtype = np.dtype(dtype)
        lengths = np.array(
            [len(x) for pair in zip(encoded.chosen_ids, encoded.rejected_ids) for x in pair],
            dtype=np.int64,
        )  # order: pair 0 chosen, pair 0 rejected, pair 1 chosen, ...
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.lengths = lengths
        d = model.hidden_size
        self._owned_dir = None
        if directory is None:
            self._owned_dir = tempfile.mkdtemp(prefix="anchorviz-ref-")
            directory = self._owned_dir
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        total = int(self.offsets[-1])
        self.arrays = {}
        for layer in self.layers:
            path = self.directory / f"layer{layer}.{dtype}.npy"
            self.arrays[layer] = np.lib.format.open_memmap(
                path, mode="w+", dtype=self.dtype, shape=(total, d)
            )
        self._fill(model, encoded, batch_size, device)
        for layer in self.layers:
            self.arrays[layer].flush()
            path = self.directory / f"layer{layer}.{dtype}.npy"
            self.arrays[layer] = np.load(path, mmap_mode="r")

    @torch.no_grad()
    def _fill(self, model: RewardModel, encoded: EncodedPairs, batch_size: int, device) -> None:
        seqs = [(i, s) for i in range(len(encoded)) for s in (0, 1)]
        bb = model.backbone
        ctx = bb.disable_adapter() if hasattr(bb, "disable_adapter") else nullcontext()
        with ctx, eval_mode(bb):
            for ks in tqdm(length_batches(self.lengths, batch_size), desc="reference cache",
                           leave=False):
                ids = [encoded.chosen_ids[seqs[k][0]] if seqs[k][1] == 0
                       else encoded.rejected_ids[seqs[k][0]] for k in ks]
                spans = [(0, len(x)) for x in ids]
                batch = pad_side(ids, spans, encoded.pad_id).to(device)
                hidden = _hidden(bb, batch, self.layers)
                for layer, h in hidden.items():
                    h = h.float().cpu().numpy()
                    for row, k in enumerate(ks):
                        a, b = self.offsets[k], self.offsets[k + 1]
                        self.arrays[layer][a:b] = h[row, : b - a]

    def states(self, index, batch):
        width = batch.input_ids.shape[1]
        out = {}
        for layer in self.layers:
            arr = self.arrays[layer]
            buf = np.zeros((len(index), width, arr.shape[1]), dtype=np.float32)
            for row, (pair_row, side) in enumerate(index):
                k = 2 * pair_row + side
                a, b = self.offsets[k], self.offsets[k + 1]
                buf[row, : b - a] = arr[a:b]
            out[layer] = torch.from_numpy(buf).to(batch.input_ids.device)
        return out

    def nbytes(self) -> int:
        return int(sum(a.size * a.itemsize for a in self.arrays.values()))

    def close(self) -> None:
        self.arrays = {}
        if self._owned_dir:
            for f in Path(self._owned_dir).glob("*"):
                os.unlink(f)
            os.rmdir(self._owned_dir)
            self._owned_dir = None


def choose_strategy(model: RewardModel, requested: str, n_tokens: int, n_layers: int,
                    max_cache_bytes: int = 2 * 1024**3) -> tuple[str, str]:
    """Resolve ``auto`` to a concrete strategy; returns ``(strategy, reason)`` for the run log.

    ``cached`` is the cheapest (no reference forward during training) whenever its states fit the
    cache budget; otherwise ``adapter_off`` for LoRA students (no second weight copy), else ``copy``.
    """
    if requested not in REFERENCES:
        raise ReferenceSetupError(f"reference strategy must be one of {REFERENCES}, got {requested!r}")
    if requested != "auto":
        return requested, "chosen by the config"
    need = n_tokens * n_layers * model.hidden_size * 4
    if need <= max_cache_bytes:
        return "cached", (
            f"auto: cached reference states need {need / 1e6:.0f} MB (budget "
            f"{max_cache_bytes / 1e6:.0f} MB) and remove the reference forward from every step"
        )
    if hasattr(model.backbone, "disable_adapter"):
        return "adapter_off", (
            f"auto: cache would need {need / 1e9:.1f} GB; LoRA student, so the adapters-off "
            "forward avoids a second copy of the weights"
        )
    return "copy", f"auto: cache would need {need / 1e9:.1f} GB; full fine-tuning needs a copy"


def make_reference(
    strategy: str,
    model: RewardModel,
    layers: Sequence[int],
    encoded: EncodedPairs | None = None,
    **cached_kwargs,
) -> Reference:
    """Build the reference of ``strategy`` for ``model`` (call BEFORE training starts)."""
    if strategy == "copy":
        return CopyReference(model, layers)
    if strategy == "adapter_off":
        return AdapterOffReference(model, layers)
    if strategy == "cached":
        if encoded is None:
            raise ReferenceSetupError("the cached reference needs the encoded training pairs")
        return CachedReference(model, encoded, layers, **cached_kwargs)
    raise ReferenceSetupError(
        f"reference strategy must be one of {REFERENCES[1:]} here, got {strategy!r}"
    )
