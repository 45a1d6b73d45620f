"""Surface cues of a preference pair, and how far labels and models go along with them.

Real preference shift lives in slices: a reward model picks up surface cues (which response is
longer, which one refuses, which one uses lists or markdown) whose relation to the label differs
between datasets. A *cue* is one idea here: a function ``fn(prompt, chosen, rejected) -> int``
that reads the texts alone and says which side it favours: ``+1`` the chosen response, ``-1``
the rejected one, ``0`` neither (the cue is absent, or present on both sides).

Built-in cues (:data:`BUILTIN_CUES`; every threshold below is a documented default fixed before
looking at any dataset, not a tuned value):

- ``length``: favours the LONGER response. Length is counted in whitespace-separated words
  (`anchorviz.data.artifacts.count_words`, the measure the planted length artefact uses). The
  cue picks a side only when the difference is one a reader notices:
  ``|a - b| >= max(LENGTH_MIN_WORDS, LENGTH_MIN_RELATIVE * max(a, b))``, i.e. at least 5 words
  AND at least 10% of the longer response.
- ``refusal``: favours the side that REFUSES, when exactly one side does. A response refuses
  when one of :data:`REFUSAL_PHRASES` ("I'm sorry", "I cannot", "I can't", "As an AI",
  "I won't", ...) starts a word within its first :data:`REFUSAL_WINDOW` characters,
  case-insensitive, with typographic apostrophes read as ``'``. A general list, so it also
  fires on an apology that is not a refusal ("I'm sorry to hear that"): the cue is the surface
  form, which is what a reward model can pick up.
- ``format``: favours the FORMATTED side, when exactly one side is. A response is formatted
  when it has a markdown header (a line ``#`` .. ``######`` then a space), a fenced code block
  (a line starting with three backticks or tildes), or a list of at least two items (lines
  starting with ``-``, ``*``, ``+`` or ``•`` then a space, or with ``1.`` / ``1)`` then a
  space): :data:`FORMAT_PATTERNS`.
- ``marker`` / ``order`` / ``echo``: the cues that `anchorviz.data.artifacts.apply_artifact`
  plants, read from their textual signature: ``marker``: exactly one side ends with
  :data:`~anchorviz.data.artifacts.DEFAULT_MARKER`; ``order``: one side ends with the carrying
  order (" so then") and the other with the reverse (" then so"); ``echo``: both sides end with
  the same word ``w`` (after a space, as a word of letters), and ``w`` is the first word
  (`anchorviz.data.artifacts.first_word`) of exactly one side, the side that echoes its own
  opening. Each favours the carrying side.

`register_cue` adds a cue of your own; `cue_sides` applies cues to a pair table;
`cue_agreement` says how often each cue picks a side and how often that side is the chosen
one (the data audit, before any model: ``anchorviz cues``); `cue_reliance` says, for a model's
scores, its accuracy where the cue agrees with the label and where it disagrees, and how often
the model prefers the cue's side. Intervals resample prompts, not pairs (a prompt-cluster
bootstrap, `anchorviz.analysis.metrics.bootstrap_accuracy_ci`), since prompts repeat; without
prompt groups they are Wilson score intervals.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from anchorviz.analysis.metrics import bootstrap_accuracy_ci, bootstrap_kind, per_pair_correct
from anchorviz.data.artifacts import DEFAULT_MARKER, count_words, first_word, order_suffixes
from anchorviz.data.readers import load_pairs
from anchorviz.data.schema import DataError

logger = logging.getLogger(__name__)

__all__ = [
    "BUILTIN_CUES",
    "FORMAT_PATTERNS",
    "LENGTH_MIN_RELATIVE",
    "LENGTH_MIN_WORDS",
    "REFUSAL_PHRASES",
    "REFUSAL_WINDOW",
    "CueFn",
    "audit_datasets",
    "cue_agreement",
    "cue_columns",
    "cue_reliance",
    "cue_sides",
    "formatted",
    "known_cues",
    "refuses",
    "register_cue",
    "resolve_cues",
    "share_interval",
    "wilson_interval",
]

CueFn = Callable[[str, str, str], int]
"""A cue: ``fn(prompt, chosen, rejected) -> +1 (favours chosen) | -1 (rejected) | 0 (neither)``."""

LENGTH_MIN_WORDS = 5
"""The ``length`` cue's minimum absolute difference, in whitespace-separated words."""

LENGTH_MIN_RELATIVE = 0.10
"""The ``length`` cue's minimum difference relative to the longer response's length."""

REFUSAL_PHRASES: tuple[str, ...] = (
    "i'm sorry", "i am sorry", "i apologize", "i apologise", "sorry, but", "sorry, i",
    "i cannot", "i can't", "i can not", "i won't", "i will not", "i'm not able to",
    "i am not able to", "i'm unable to", "i am unable to", "i must decline",
    "i'm not comfortable", "i am not comfortable", "i don't feel comfortable",
    "i do not feel comfortable", "as an ai", "as a language model", "as an assistant",
)
"""Phrases that mark a refusal (lower-case, straight apostrophes), matched at a word start."""

REFUSAL_WINDOW = 100
"""The ``refusal`` cue reads a response's first this many characters (after leading space)."""

FORMAT_PATTERNS: dict[str, re.Pattern[str]] = {
    "header": re.compile(r"^ {0,3}#{1,6} +\S", re.MULTILINE),
    "code_block": re.compile(r"^ {0,3}(?:```|~~~)", re.MULTILINE),
    "list_item": re.compile(r"^[ \t]*(?:[-*+\u2022]|\d{1,3}[.)]) +\S", re.MULTILINE),
}
"""The ``format`` cue's patterns: a header or a code fence marks a formatted response, and so
do two or more list items."""

_REFUSAL = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in REFUSAL_PHRASES) + r")")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")
_META_COLUMNS = ("pair_id", "prompt")


def _side(chosen: bool, rejected: bool) -> int:
    """+1 when only the chosen side has the property, -1 when only the rejected side has it."""
    return int(chosen) - int(rejected)


def length_cue(prompt: str, chosen: str, rejected: str) -> int:
    """The longer side, when the difference passes the documented minimum (module doc)."""
    a, b = count_words(chosen), count_words(rejected)
    if abs(a - b) < max(LENGTH_MIN_WORDS, LENGTH_MIN_RELATIVE * max(a, b)):
        return 0
    return 1 if a > b else -1


def refuses(text: str) -> bool:
    """Whether ``text`` opens with a refusal phrase (:data:`REFUSAL_PHRASES`)."""
    head = str(text).lstrip()[:REFUSAL_WINDOW].lower().replace("\u2019", "'")
    return _REFUSAL.search(head) is not None


def refusal_cue(prompt: str, chosen: str, rejected: str) -> int:
    """The refusing side, when exactly one side refuses."""
    return _side(refuses(chosen), refuses(rejected))


def formatted(text: str) -> bool:
    """Whether ``text`` uses a header, a code block or a list of two or more items."""
    t = str(text)
    if FORMAT_PATTERNS["header"].search(t) or FORMAT_PATTERNS["code_block"].search(t):
        return True
    return len(FORMAT_PATTERNS["list_item"].findall(t)) >= 2


def format_cue(prompt: str, chosen: str, rejected: str) -> int:
    """The formatted side, when exactly one side is formatted."""
    return _side(formatted(chosen), formatted(rejected))


def marker_cue(prompt: str, chosen: str, rejected: str) -> int:
    """The side ending with the planted marker (:data:`DEFAULT_MARKER`), when only one does."""
    return _side(str(chosen).endswith(DEFAULT_MARKER), str(rejected).endswith(DEFAULT_MARKER))


def order_cue(prompt: str, chosen: str, rejected: str) -> int:
    """The side ending with the carrying word order while the other ends with the reverse."""
    carry, other = order_suffixes()
    c, r = str(chosen), str(rejected)
    return _side(c.endswith(carry) and r.endswith(other), r.endswith(carry) and c.endswith(other))


def _last_word(text: str) -> str:
    """The last whitespace-separated token of ``text``, lower-case, when it is a word of letters
    (and apostrophes); ``""`` otherwise (e.g. it ends with punctuation)."""
    tokens = str(text).lower().split()
    return tokens[-1] if tokens and _WORD.fullmatch(tokens[-1]) else ""


def echo_cue(prompt: str, chosen: str, rejected: str) -> int:
    """The side whose first word both sides end with (the planted echo), when only one opens
    with it."""
    w = _last_word(chosen)
    if not w or _last_word(rejected) != w:
        return 0
    return _side(first_word(chosen) == w, first_word(rejected) == w)


BUILTIN_CUES: dict[str, CueFn] = {
    "length": length_cue,
    "refusal": refusal_cue,
    "format": format_cue,
    "marker": marker_cue,
    "order": order_cue,
    "echo": echo_cue,
}
"""The built-in cues, in their default order."""

_REGISTRY: dict[str, CueFn] = dict(BUILTIN_CUES)


def known_cues() -> list[str]:
    """The names of the registered cues (built-ins first, then your own in the order added)."""
    return list(_REGISTRY)


def register_cue(name: str, fn: CueFn, *, replace: bool = False) -> None:
    """Register ``fn(prompt, chosen, rejected) -> -1 | 0 | 1`` as the cue ``name``.

    A name already registered is refused unless ``replace=True``."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise ValueError(f"cue name must be a word (letters, digits, '_' or '-', starting with a "
                         f"letter), got {name!r}")
    if name in _META_COLUMNS:
        raise ValueError(f"cue name {name!r} is reserved (a column of the pair table)")
    if not callable(fn):
        raise TypeError(f"cue {name!r} must be a function (prompt, chosen, rejected) -> int, "
                        f"got {type(fn).__name__}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"cue {name!r} is already registered (pass replace=True to replace it)")
    _REGISTRY[name] = fn


def resolve_cues(cues: Sequence[str] | None) -> list[str]:
    """``cues`` as a list of registered names (None: all); unknown names are a ValueError
    listing the known ones."""
    if cues is None:
        return known_cues()
    if isinstance(cues, str):
        cues = [cues]
    names = list(dict.fromkeys(cues))
    unknown = [c for c in names if c not in _REGISTRY]
    if unknown:
        raise ValueError(f"unknown cue(s) {unknown}; known cues: {known_cues()} "
                         "(add your own with anchorviz.analysis.cues.register_cue)")
    if not names:
        raise ValueError(f"no cues given; known cues: {known_cues()}")
    return names


def cue_sides(pairs: pd.DataFrame, cues: Sequence[str] | None = None) -> pd.DataFrame:
    """The side each cue favours in each pair of ``pairs`` (a pair table: ``chosen``,
    ``rejected`` and, if present, ``prompt`` and ``pair_id``).

    Returns a DataFrame on ``pairs``' index with ``pair_id`` and ``prompt`` (when ``pairs`` has
    them) and one int column per cue (``cues``: names, default every registered cue) holding
    +1 / -1 / 0."""
    names = resolve_cues(cues)
    for col in ("chosen", "rejected"):
        if col not in pairs.columns:
            raise ValueError(f"pair table lacks the {col!r} column (expected the pair schema: "
                             "prompt, chosen, rejected)")
    prompts = (pairs["prompt"].fillna("").astype(str).tolist() if "prompt" in pairs
               else [""] * len(pairs))
    chosen = pairs["chosen"].astype(str).tolist()
    rejected = pairs["rejected"].astype(str).tolist()
    out = pd.DataFrame(index=pairs.index)
    for col in _META_COLUMNS:
        if col in pairs:
            out[col] = pairs[col].to_numpy()
    for name in names:
        fn = _REGISTRY[name]
        vals = [fn(p, c, r) for p, c, r in zip(prompts, chosen, rejected)]
        bad = next((i for i, v in enumerate(vals) if v not in (-1, 0, 1)), None)
        if bad is not None:
            where = pairs["pair_id"].iloc[bad] if "pair_id" in pairs else bad
            raise ValueError(f"cue {name!r} returned {vals[bad]!r} for pair {where!r}; a cue "
                             "must return +1 (chosen), -1 (rejected) or 0 (neither)")
        out[name] = np.asarray(vals, dtype=np.int64)
    return out


def cue_columns(sides: pd.DataFrame) -> list[str]:
    """The cue columns of a `cue_sides` table (every column but ``pair_id`` and ``prompt``)."""
    return [c for c in sides.columns if c not in _META_COLUMNS]


# --------------------------------------------------------------------------- intervals


def wilson_interval(successes: float, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``successes / n`` (``n >= 1``)."""
    from scipy import stats

    z = float(stats.norm.ppf(1 - alpha / 2))
    p = successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def share_interval(values: ArrayLike, groups: ArrayLike | None = None, n_boot: int = 2000,
                   seed: int = 0, alpha: float = 0.05) -> dict[str, Any]:
    """A share of 0 / 0.5 / 1 values with its interval: ``{"point", "lo", "hi", "n",
    "interval"}``. With ``groups`` (one prompt per value) spanning two or more prompts, a
    bootstrap over prompts (`metrics.bootstrap_accuracy_ci`; ``interval`` is ``"cluster"``, or
    ``"pair"`` when every prompt has one value); otherwise a Wilson interval (``"wilson"``).
    No values: point and bounds are None."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    n = int(v.size)
    if n == 0:
        return {"point": None, "lo": None, "hi": None, "n": 0, "interval": None}
    g = None if groups is None else np.asarray(groups).reshape(-1)
    if g is not None and len(pd.unique(g)) >= 2:
        iv = bootstrap_accuracy_ci(v, n_boot=n_boot, alpha=alpha, seed=seed, groups=g)
        return {"point": iv.point, "lo": iv.lo, "hi": iv.hi, "n": n,
                "interval": bootstrap_kind(g)}
    lo, hi = wilson_interval(float(v.sum()), n, alpha)
    return {"point": float(v.mean()), "lo": lo, "hi": hi, "n": n, "interval": "wilson"}


def _groups_of(sides: pd.DataFrame, groups: ArrayLike | str | None) -> np.ndarray | None:
    if isinstance(groups, str):
        if groups not in sides:
            raise ValueError(f"groups column {groups!r} is not in the sides table "
                             f"(columns: {list(sides.columns)})")
        return sides[groups].astype(str).to_numpy()
    if groups is None:
        return None
    g = np.asarray(groups).reshape(-1)
    if g.size != len(sides):
        raise ValueError(f"groups must give one id per pair: {g.size} ids for {len(sides)} pairs")
    return g


def cue_agreement(sides: pd.DataFrame, groups: ArrayLike | str | None = "prompt",
                  n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> pd.DataFrame:
    """Per cue of a `cue_sides` table: how often it picks a side and how often that side is the
    chosen one (the label), from the data alone.

    ``groups``: one prompt id per pair, or the name of a column of ``sides`` (default
    ``"prompt"``; None, or a table without prompts, gives Wilson intervals). Returns one row per
    cue: ``cue``, ``n`` (pairs), ``n_side`` (pairs where the cue picks a side), ``side_share``
    (= n_side / n) and ``chosen_share`` (share of those where the cue's side is chosen; None
    when it never picks a side), each with ``_lo`` / ``_hi`` bounds, and ``interval`` (how the
    bounds were made)."""
    if groups == "prompt" and "prompt" not in sides:
        groups = None
    g = _groups_of(sides, groups)
    rows = []
    for cue in cue_columns(sides):
        s = sides[cue].to_numpy()
        picks = s != 0
        side = share_interval(picks.astype(float), g, n_boot, seed, alpha)
        chosen = share_interval((s[picks] == 1).astype(float), None if g is None else g[picks],
                                n_boot, seed, alpha)
        rows.append({"cue": cue, "n": int(s.size), "n_side": int(picks.sum()),
                     "side_share": side["point"], "side_share_lo": side["lo"],
                     "side_share_hi": side["hi"], "chosen_share": chosen["point"],
                     "chosen_share_lo": chosen["lo"], "chosen_share_hi": chosen["hi"],
                     "interval": chosen["interval"] or side["interval"]})
    return pd.DataFrame(rows)


def _margins(sides: pd.DataFrame, scores: pd.DataFrame | ArrayLike) -> np.ndarray:
    """Per pair of ``sides``: the model's reward margin (chosen - rejected)."""
    if not isinstance(scores, pd.DataFrame):
        m = np.asarray(scores, dtype=np.float64).reshape(-1)
        if m.size != len(sides):
            raise ValueError(f"scores must give one margin per pair: {m.size} for {len(sides)} "
                             "pairs")
        return m
    if "margin" in scores:
        col = scores["margin"]
    elif {"r_chosen", "r_rejected"} <= set(scores.columns):
        col = scores["r_chosen"] - scores["r_rejected"]
    else:
        raise ValueError("scores must have a 'margin' column or 'r_chosen' and 'r_rejected' "
                         f"columns, got {list(scores.columns)}")
    if "pair_id" in scores and "pair_id" in sides:
        by_id = pd.Series(col.to_numpy(dtype=np.float64), index=scores["pair_id"].astype(str))
        if by_id.index.duplicated().any():
            raise ValueError("scores hold a pair_id more than once; pass one split's scores")
        missing = sorted(set(sides["pair_id"].astype(str)) - set(by_id.index))
        if missing:
            raise ValueError(f"scores lack {len(missing)} pair(s) of the sides table, e.g. "
                             f"{missing[:3]}")
        return by_id.loc[sides["pair_id"].astype(str)].to_numpy()
    if len(scores) != len(sides):
        raise ValueError(f"scores must score the pairs of the sides table: {len(scores)} rows "
                         f"for {len(sides)} pairs (or give both a pair_id column)")
    return col.to_numpy(dtype=np.float64)


def cue_reliance(sides: pd.DataFrame, scores: pd.DataFrame | ArrayLike,
                 groups: ArrayLike | str | None = "prompt", n_boot: int = 2000, seed: int = 0,
                 alpha: float = 0.05) -> pd.DataFrame:
    """Per cue of a `cue_sides` table: how a model's scores go along with it.

    ``scores``: the model's margins (reward of chosen - reward of rejected) in ``sides``' order,
    or a DataFrame with ``margin`` or ``r_chosen`` / ``r_rejected`` (matched on ``pair_id``
    when both tables have it). A pair is correct when its margin is positive; a tie counts half
    (`metrics.per_pair_correct`). ``groups`` as in `cue_agreement`.

    Returns one row per cue: ``n`` (pairs where the cue picks a side), ``agree_n`` /
    ``agree_acc`` (accuracy where the cue's side is the chosen one), ``disagree_n`` /
    ``disagree_acc`` (where it is the rejected one) and ``follow`` (share of the cue's pairs
    where the model prefers the cue's side: ``agree`` pairs it gets right and ``disagree``
    pairs it gets wrong), each accuracy / share with ``_lo`` / ``_hi`` bounds, and
    ``interval``. A model that ignores the cue has equal agree and disagree accuracy; one that
    follows it is high on agree and low on disagree."""
    if groups == "prompt" and "prompt" not in sides:
        groups = None
    g = _groups_of(sides, groups)
    margin = _margins(sides, scores)
    if not np.isfinite(margin).all():
        raise ValueError("scores contain non-finite margins (NaN or inf)")
    correct = per_pair_correct(margin, np.zeros_like(margin))
    rows = []
    for cue in cue_columns(sides):
        s = sides[cue].to_numpy()
        row: dict[str, Any] = {"cue": cue, "n": int((s != 0).sum())}
        kinds = []
        for name, mask, vals in (("agree", s == 1, correct), ("disagree", s == -1, correct),
                                 ("follow", s != 0, np.where(s == 1, correct, 1 - correct))):
            iv = share_interval(vals[mask], None if g is None else g[mask], n_boot, seed, alpha)
            key = name if name == "follow" else f"{name}_acc"
            if name != "follow":
                row[f"{name}_n"] = iv["n"]
            row[key], row[f"{key}_lo"], row[f"{key}_hi"] = iv["point"], iv["lo"], iv["hi"]
            kinds.append(iv["interval"])
        row["interval"] = kinds[-1]
        rows.append(row)
    return pd.DataFrame(rows)


def audit_datasets(datasets: Sequence[str], cues: Sequence[str] | None = None,
                   n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The data audit of several datasets (names or files `anchorviz.data.readers.load_pairs`
    reads): `cue_agreement` of each, one row per (dataset, cue), with ``dataset`` and ``pairs``
    (the pairs kept after the reader's drops) first. What ``anchorviz cues`` prints.

    Raises:
        DataError: a dataset with no pair left to audit (or any reader error).
    """
    cues = resolve_cues(cues)  # an unknown cue fails before any data is read
    parts = []
    for name in datasets:
        pairs, report = load_pairs(name)  # its drop report is logged by the reader
        if not len(pairs):
            raise DataError(f"{name}: no pairs left to audit (drop report: {report})")
        table = cue_agreement(cue_sides(pairs, cues), n_boot=n_boot, seed=seed)
        table.insert(0, "pairs", len(pairs))
        table.insert(0, "dataset", str(name))
        parts.append(table)
    return pd.concat(parts, ignore_index=True)
