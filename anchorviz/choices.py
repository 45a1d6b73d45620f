"""The allowed values of every setting that has a fixed list, in one place.

The run config (`anchorviz.config`) checks a setting against these lists, and the stage that acts
on the setting (data, models, training, analysis) reads the same list: one list per option, no
copies. Standard library only (no torch, no pandas), so any module may import it, the config
and the command line included.
"""

from __future__ import annotations

import re

__all__ = [
    "ANCHOR_NORMALISATIONS",
    "ARTIFACT_KINDS",
    "ATTENTION",
    "DTYPES",
    "GROUP_KEYS",
    "LAYER_NAMES",
    "METHODS",
    "OPTIMIZERS",
    "POOLINGS",
    "PROJECTIONS",
    "REFERENCES",
    "TARGET_MODES",
    "TEACHER_FORMS",
    "is_layer_spec",
    "parse_layer_spec",
]

#: ``method.name``: the students' training methods
METHODS = ("naive", "confidence", "anchor", "seam")

#: ``method.anchor_normalise``: "pair" (L_anchor per preference pair, then the batch mean, as in
#: the paper's L(i) = L_w2s(i) + lambda L_anchor(i)) or "token" (one mean over the batch's
#: response tokens)
ANCHOR_NORMALISATIONS = ("pair", "token")

#: ``method.reference``: how the frozen reference ANCHOR pulls towards is kept
#: (anchorviz.training.reference)
REFERENCES = ("auto", "copy", "adapter_off", "cached")

#: ``data.artifact_kind`` (besides "none"): the source-only cues (anchorviz.data.artifacts)
ARTIFACT_KINDS: tuple[str, ...] = ("marker", "length", "order", "echo")

#: ``data.artifact_target_mode``: the artefact in the targets
TARGET_MODES: tuple[str, ...] = ("absent", "neutral", "reversed")

#: ``data.artifact_teacher_form``: how the teacher reads the artefacts it can read
TEACHER_FORMS: tuple[str, ...] = ("same", "marker")

#: ``data.group_key``: what prompt-grouped splits group by
GROUP_KEYS = ("auto", "prompt", "none")

#: ``models.pooling`` (anchorviz.models.reward_model)
POOLINGS = ("auto", "mean", "last", "cls")

#: ``models.dtype``
DTYPES = ("float32", "bfloat16")

#: ``models.attention`` (transformers' ``attn_implementation``; "auto": its own; "packed": the
#: per-token arithmetic on real tokens only, anchorviz.models.packed)
ATTENTION = ("auto", "eager", "sdpa", "packed")

#: ``teacher_train.optimizer`` / ``student_train.optimizer`` (anchorviz.training.loop builds them)
OPTIMIZERS = ("adamw_fused", "adamw_foreach", "adamw")

#: ``capture.projection`` (and ``anchorviz analyse --projection``)
PROJECTIONS = ("auto", "umap", "pca", "none")

#: the layer names a config may give instead of indices (``method.anchor_layers``,
#: ``capture.layers``; `anchorviz.training.losses.resolve_anchor_layers` says which)
LAYER_NAMES = ("last", "middle", "all")
_LAYER_SPEC = re.compile(r"last|middle|all| *\d+ *(, *\d+ *)*")


def is_layer_spec(text: object) -> bool:
    """Whether ``text`` is a layer spec as a config writes it (``method.anchor_layers``,
    ``capture.layers``): ``"last"``, ``"middle"``, ``"all"`` or comma-separated hidden-state
    indices >= 0 such as ``"3,5"`` (spaces allowed)."""
    return isinstance(text, str) and _LAYER_SPEC.fullmatch(text) is not None


def parse_layer_spec(text: str) -> str | list[int]:
    """A config's layer spec (checked by `is_layer_spec`) as `resolve_anchor_layers` takes it: a
    name as it is, ``"3,5"`` as ``[3, 5]``."""
    return text if text in LAYER_NAMES else [int(x) for x in text.split(",")]
