"""Prompt-grouped splits: pairs that share a prompt never straddle two splits.

`split_by_prompt` draws named splits of given sizes; `protocol_splits` draws the protocol's
source splits (``teacher_train``, ``w2s_train``, ``val``, ``source_test``) and one target test
per target, leaving out target pairs that share a prompt or a text with the source's training
and validation splits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from anchorviz.data.schema import DataError

logger = logging.getLogger(__name__)

__all__ = [
    "PROTOCOL_SPLITS",
    "protocol_splits",
    "split_by_prompt",
]


PROTOCOL_SPLITS: tuple[str, ...] = ("teacher_train", "w2s_train", "val", "source_test")


# prompt-grouped splits

def _hashable(v: Any) -> Any:
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def _group_keys(df: pd.DataFrame, group_key: str | Callable[[pd.Series], Any] | None) -> list[Any]:
    if group_key is None:
        return list(range(len(df)))
    if callable(group_key):
        keys = [group_key(row) for _, row in df.iterrows()]
    elif isinstance(group_key, str):
        if group_key in df.columns:
            keys = df[group_key].tolist()
        elif "meta" in df.columns and len(df) and all(
            isinstance(m, Mapping) and group_key in m for m in df["meta"].tolist()
        ):
            keys = [m[group_key] for m in df["meta"].tolist()]
        else:
            raise DataError(
                f"group_key {group_key!r} is neither a column ({list(df.columns)}) nor a key of "
                "every row's meta"
            )
    else:
        raise TypeError(f"group_key must be a column / meta key, a callable or None, got {group_key!r}")
    for i, k in enumerate(keys):
        if k is None or (isinstance(k, float) and math.isnan(k)):
            raise DataError(f"group key {group_key!r} is missing for row {i}")
    return [_hashable(k) for k in keys]


def _targets(sizes: Mapping[str, int | float], n: int) -> dict[str, int]:
    if not sizes:
        raise ValueError("sizes must name at least one split")
    out: dict[str, int] = {}
    frac_total = 0.0
    for name, s in sizes.items():
        if isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating)):
            raise ValueError(f"size of split {name!r} must be an int (pairs) or a float (fraction), got {s!r}")
        if isinstance(s, (float, np.floating)):
            if not 0.0 < float(s) <= 1.0:
                raise ValueError(f"fraction for split {name!r} must be in (0, 1], got {s}")
            frac_total += float(s)
            out[name] = int(math.floor(float(s) * n + 1e-9))
        else:
            if s < 0:
                raise ValueError(f"size of split {name!r} must be >= 0, got {s}")
            out[name] = int(s)
    if frac_total > 1.0 + 1e-9:
        raise ValueError(f"fractions add up to {frac_total:.3f} > 1")
    return out


def split_by_prompt(
    df: pd.DataFrame,
    sizes: Mapping[str, int | float],
    seed: int,
    group_key: str | Callable[[pd.Series], Any] | None = "prompt",
) -> dict[str, pd.DataFrame]:
    """Seeded, group-disjoint splits of exactly the requested sizes.

    ``sizes``: split name -> number of pairs (int) or fraction of all pairs (float, floored).
    Rows are grouped by ``group_key`` (a column, else a key of ``meta``; a callable
    ``row -> key``; ``None`` = every pair its own group) and no group is in two splits. Groups
    are shuffled with ``seed`` and placed first-fit in the order of ``sizes``; when no split
    can take a whole group, the group is cut to fill one split exactly and its other rows go
    unused (never into another split). Rows keep their original order within each split.

    Raises :class:`DataError` saying how many pairs and groups are available when the
    request cannot be met.
    """
    targets = _targets(sizes, len(df))
    keys = _group_keys(df, group_key)
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    n, g = len(df), len(groups)
    want = sum(targets.values())
    largest = max((len(v) for v in groups.values()), default=0)
    if want > n:
        raise DataError(
            f"requested {want} pairs ({dict(targets)}) but only {n} pairs in {g} groups "
            f"(group_key={group_key!r}) are available"
        )
    order = list(groups.values())
    perm = np.random.default_rng(seed).permutation(len(order))
    remaining = dict(targets)
    chosen: dict[str, list[int]] = {k: [] for k in targets}
    unused = 0
    for gi in perm:
        if not any(remaining.values()):
            break
        rows = order[gi]
        dest = next((s for s, r in remaining.items() if r >= len(rows)), None)
        if dest is None:
            dest = next(s for s, r in remaining.items() if r > 0)
            unused += len(rows) - remaining[dest]
            rows = rows[: remaining[dest]]
        chosen[dest].extend(rows)
        remaining[dest] -= len(rows)
    short = {s: r for s, r in remaining.items() if r}
    if short:
        raise DataError(
            f"cannot fill splits {dict(targets)} with whole groups: short by {short}. "
            f"Available: {n} pairs in {g} groups (group_key={group_key!r}, largest group "
            f"{largest} pairs); ask for fewer pairs"
        )
    if unused:
        logger.info("split_by_prompt: %d pairs of cut groups left unused", unused)
    return {s: df.iloc[sorted(ix)].reset_index(drop=True) for s, ix in chosen.items()}


def _pair_texts(df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) of every row, sides unordered: the identity of a pair."""
    prompts = df["prompt"].astype(str).tolist() if "prompt" in df else [""] * len(df)
    return [(p, *sorted((str(c), str(r)))) for p, c, r in
            zip(prompts, df["chosen"].tolist(), df["rejected"].tolist())]


def protocol_splits(
    source_df: pd.DataFrame,
    target_dfs: Mapping[str, pd.DataFrame],
    sizes: Mapping[str, int | float],
    target_test_size: int | float | None,
    seed: int,
    group_key: str | Callable[[pd.Series], Any] | None = "prompt",
    dropped: dict[str, int] | None = None,
    clip_targets: bool = False,
) -> dict[str, pd.DataFrame]:
    """The paper protocol: source splits plus one zero-shot test split per target dataset.

    Returns ``{"teacher_train", "w2s_train", "val", "source_test", "target_test:<name>", ...}``.
    ``sizes`` must name the four source splits (see :func:`split_by_prompt`);
    ``target_test_size`` is the size of each target test (int, fraction, or None = all).
    Target rows that also occur in the source's training / validation splits are left out, so a
    target test never contains a prompt (or, without prompt grouping, a pair) the student
    trained on: with a ``group_key`` a row is dropped when its group (prompt) is in those
    splits; in every case a row whose (prompt, chosen, rejected) texts equal a source training /
    validation pair's is dropped. ``dropped`` (optional) receives ``{target name: number of
    rows left out}``. ``clip_targets``: when a target has fewer rows than ``target_test_size``
    after the drop, take them all (logging a warning) instead of raising.
    """
    missing = [s for s in PROTOCOL_SPLITS if s not in sizes]
    if missing:
        raise ValueError(f"sizes lacks the protocol split(s) {missing}; needs {list(PROTOCOL_SPLITS)}")
    out = dict(split_by_prompt(source_df, sizes, seed, group_key))
    seen: set[Any] = set()
    seen_pairs: set[tuple[str, str, str]] = set()
    for s in ("teacher_train", "w2s_train", "val"):
        if group_key is not None:
            seen.update(_group_keys(out[s], group_key))
        seen_pairs.update(_pair_texts(out[s]))
    for name, tdf in target_dfs.items():
        keep = np.ones(len(tdf), dtype=bool)
        if group_key is not None and seen and len(tdf):
            keep &= np.array([k not in seen for k in _group_keys(tdf, group_key)], dtype=bool)
        if len(tdf):
            keep &= np.array([t not in seen_pairs for t in _pair_texts(tdf)], dtype=bool)
        n_drop = int((~keep).sum())
        if dropped is not None:
            dropped[name] = n_drop
        if n_drop:
            logger.warning("target %s: %d of %d pairs share a prompt or pair with the source's "
                           "training / validation splits; left out", name, n_drop, len(tdf))
        tdf = tdf[keep].reset_index(drop=True)
        if target_test_size is None:
            out[f"target_test:{name}"] = tdf
            continue
        size = target_test_size
        if clip_targets and isinstance(size, int) and size > len(tdf):
            logger.warning("target %s has only %d usable pairs (asked %d): using all of them",
                           name, len(tdf), size)
            size = len(tdf)
        if isinstance(size, int) and size > len(tdf):
            raise DataError(f"target {name!r} has only {len(tdf)} usable pairs (asked {size}; "
                            f"{n_drop} more left out as they overlap the source's splits)")
        if len(tdf) == 0:
            raise DataError(f"target {name!r}: no pairs left after removing the {n_drop} that "
                            "occur in the source's training / validation splits (is the target "
                            "the source?)")
        try:
            out[f"target_test:{name}"] = split_by_prompt(
                tdf, {"target_test": size}, seed, group_key)["target_test"]
        except DataError as err:
            raise DataError(f"target {name!r}: {err}") from None
    return out
