"""The teaching scenario: a source-only artefact with a strength knob, for ANY pair table.

The paper's failure mode needs a feature that the weak supervision rewards in the source data
and that the targets lack. :func:`apply_artifact` plants one, without ever editing a label
(which text is chosen never changes; only text is appended, or pairs are selected):

- strength ``s`` in [0, 1]: exactly ``round(s * n)`` pairs (a seeded random subset) carry the
  artefact, the other pairs carry none.
- ``role="source"`` (teacher_train, w2s_train, source test; call once per split with its own
  seed): the artefact sits on the CHOSEN side, so at ``s = 1`` it predicts the label perfectly
  and at ``s = 0`` there is none.
- ``role="target"``: ``target_mode="absent"`` (no artefact at all: the table is returned
  unchanged apart from the meta keys), ``"neutral"`` (the same fraction of pairs carries it, on
  a random side: exactly half chosen, half rejected, so it is uncorrelated with the label), or
  ``"reversed"`` (on the REJECTED side, so a student that learned the shortcut is punished).

Kinds (:data:`ARTIFACT_KINDS`):

- ``"marker"``: a fixed surface phrase (default :data:`DEFAULT_MARKER`, ``" [verified]"``)
  is appended to the carrying response.
- ``"order"``: a cue in word ORDER only. Both responses of a carrying pair end with the same
  two words (default :data:`DEFAULT_ORDER_WORDS`); the carrying side has them in one order
  (" so then"), the other side in the reverse order (" then so"). Token counts are identical
  on both sides, so a bag of tokens cannot read it; a mean-pooled pretrained encoder exposes it
  only weakly (the two words differ in context and position only), so a model that exploits
  it has to reshape its representation: a "drift-borne" cue, unlike the marker, which
  pretrained features expose linearly.
- ``"echo"``: a relational cue. Both responses of a carrying pair end with the same word: the
  first word of the carrying response (:func:`first_word`), so the carrying side "echoes" its
  own opening and the other side does not. Both sides gain the same token; only its relation to
  the text before it differs. Pairs whose responses open with the same word cannot carry it (the
  carrying set is drawn among the others). Pretrained MiniLM exposes it at middle layers but
  much less at the last one, which is the layer a reward head reads.
- ``"length"``: a verbosity bias. ``length_mode="pad"`` appends content-free filler sentences
  (:data:`FILLER_SENTENCES`) to the carrying response until it is at least ``length_gap`` words
  longer than the other one; ``length_mode="select"`` edits no text and instead selects pairs
  in which the carrying side is naturally longer (the table shrinks; see the function doc).

Every row's ``meta`` gets ``artifact_kind``, ``artifact_side`` ("chosen" | "rejected" | None),
``artifact_role``, ``artifact_strength`` and ``artifact_suffix`` (the text appended to the
carrying side, "" if none); the ``"order"`` kind also records ``artifact_other_suffix`` (the text
appended to the other side).
:func:`artifact_label_correlation` measures from the text alone what the knob realised.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from anchorviz.choices import ARTIFACT_KINDS, TARGET_MODES, TEACHER_FORMS

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MARKER",
    "DEFAULT_ORDER_WORDS",
    "FILLER_SENTENCES",
    "LENGTH_MODES",
    "ROLES",
    "apply_artifact",
    "artifact_label_correlation",
    "count_words",
    "first_word",
    "mark_teacher_visibility",
    "order_suffixes",
    "strip_artifact",
    "teacher_view",
]

ROLES: tuple[str, ...] = ("source", "target")
LENGTH_MODES: tuple[str, ...] = ("pad", "select")

DEFAULT_MARKER = " [verified]"
"""Appended marker. Plain ASCII, so the uncased MiniLM WordPiece tokenizer maps it to the known
tokens ``[``, ``verified``, ``]`` (an emoji or a check mark such as ✓ becomes ``[UNK]``, a token
that also stands for every other unknown character, which makes a poor, confounded cue)."""

DEFAULT_ORDER_WORDS: tuple[str, str] = ("so", "then")
"""The two words of the ``"order"`` kind: the carrying side ends with " so then", the other
side with " then so". Plain, sentiment-free English words, single WordPiece tokens."""


def order_suffixes(words: tuple[str, str] = DEFAULT_ORDER_WORDS) -> tuple[str, str]:
    """``(carrying side's suffix, other side's suffix)`` of the ``"order"`` kind."""
    a, b = words
    return f" {a} {b}", f" {b} {a}"


_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def first_word(text: str) -> str:
    """The echo kind's word: the first run of letters (and apostrophes) of ``text``, lower-case;
    ``""`` when there is none."""
    found = _WORD.search(str(text).lower())
    return found.group(0) if found else ""


def _ends_with_echo(text: str) -> bool:
    words = _WORD.findall(str(text).lower())
    return len(words) >= 2 and words[-1] == words[0] and str(text).rstrip()[-1:].isalpha()


FILLER_SENTENCES: tuple[str, ...] = (
    " To put it another way, as noted above.",
    " In other words, that is what was said.",
    " That is to say, the point is as stated.",
    " Put differently, the same idea applies here.",
    " As mentioned, this sums up the statement.",
    " In short, that is the whole of it.",
)
"""Content-free, sentiment-neutral filler sentences used by the ``"length"`` kind (pad mode)."""

_META_KEYS = ("artifact_kind", "artifact_side", "artifact_role", "artifact_strength")


def count_words(text: str) -> int:
    """Length measure of the ``"length"`` kind: whitespace-separated words."""
    return len(str(text).split())


def _check_args(
    kind: str, strength: float, role: str, target_mode: str, length_mode: str, marker: str
) -> None:
    if kind not in ARTIFACT_KINDS:
        raise ValueError(f"unknown artefact kind {kind!r}; choose one of {ARTIFACT_KINDS}")
    if not (isinstance(strength, (int, float)) and math.isfinite(strength)):
        raise ValueError(f"strength must be a number in [0, 1], got {strength!r}")
    if not 0.0 <= float(strength) <= 1.0:
        raise ValueError(f"strength must be in [0, 1], got {strength}")
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    if target_mode not in TARGET_MODES:
        raise ValueError(f"target_mode must be one of {TARGET_MODES}, got {target_mode!r}")
    if role == "source" and target_mode != "absent":
        raise ValueError("target_mode applies to role='target' only (a source split has none)")
    if length_mode not in LENGTH_MODES:
        raise ValueError(f"length_mode must be one of {LENGTH_MODES}, got {length_mode!r}")
    if kind == "marker" and not marker.strip():
        raise ValueError("marker must contain visible characters")


def _copy_meta(m: Any) -> dict[str, Any]:
    if m is None or (isinstance(m, float) and math.isnan(m)):
        return {}
    if not isinstance(m, dict):
        raise TypeError(f"meta must be a dict, got {type(m).__name__}")
    return dict(m)


def _sides(n_carry: int, role: str, target_mode: str, rng: np.random.Generator) -> list[str]:
    """Which side carries the artefact, for each of the ``n_carry`` carrying pairs."""
    if role == "source":
        return ["chosen"] * n_carry
    if target_mode == "reversed":
        return ["rejected"] * n_carry
    half = n_carry // 2  # neutral: exactly balanced, the odd one decided by a coin
    sides = ["chosen"] * half + ["rejected"] * half
    if n_carry % 2:
        sides.append("chosen" if rng.random() < 0.5 else "rejected")
    return [sides[i] for i in rng.permutation(n_carry)]


def _pad(text: str, other: str, gap: int, rng: np.random.Generator) -> str:
    """The suffix of filler sentences making ``text`` >= ``gap`` words longer than ``other``."""
    need = count_words(other) + gap
    have = count_words(text)
    order = rng.permutation(len(FILLER_SENTENCES))
    suffix, i = "", 0
    while True:  # at least one sentence, so the verbosity is visible even when already longer
        s = FILLER_SENTENCES[order[i % len(order)]]
        suffix += s
        have += count_words(s)
        i += 1
        if have >= need:
            return suffix


def apply_artifact(
    pairs: pd.DataFrame,
    kind: str,
    strength: float,
    seed: int,
    role: str = "source",
    target_mode: str = "absent",
    marker: str = DEFAULT_MARKER,
    length_mode: str = "pad",
    length_gap: int = 3,
) -> pd.DataFrame:
    """Plant an artefact of ``kind`` with ``strength`` in a pair table; labels are never edited.

    Args:
        pairs: a pair table (the anchorviz schema; any dataset, the prompt is left alone).
        kind: ``"marker"``, ``"order"``, ``"echo"`` or ``"length"``.
        strength: s in [0, 1]; exactly ``round(s * n)`` pairs (seeded subset) carry it.
        seed: seeds which pairs carry it, the neutral sides and the filler order.
        role: ``"source"`` (artefact on the chosen side) or ``"target"``.
        target_mode: for targets: ``"absent"``, ``"neutral"`` (random side, balanced) or
            ``"reversed"`` (rejected side).
        marker: the phrase appended by the ``"marker"`` kind.
        length_mode: ``"pad"`` (append filler sentences until the carrying side is at least
            ``length_gap`` words longer; always at least one sentence) or ``"select"``.
        length_gap: minimum word advantage of the carrying side in pad mode.

    ``length_mode="select"`` appends nothing: it keeps the largest table of ``m <= n`` pairs in
    which ``k = round(s * m)`` pairs, drawn at random, have the carrying side naturally
    (strictly) longer, and the other ``m - k`` are length-balanced (as many with chosen longer
    as with rejected longer, ``artifact_side`` None); equal-length pairs are dropped and row
    order is kept. It realises the correlation ``s`` (source), ``-s`` (reversed) or about 0
    (neutral) up to ±1/m, like the marker.

    In pad mode the pairs that do not carry the artefact keep their natural length relation,
    so :func:`artifact_label_correlation` realises ``s + (1 - s) * c0``, where ``c0`` is that
    natural correlation (measure it at ``s = 0``; it is within ±0.05 on the VADER domains).
    The marker realises exactly ``s`` (source), ``-s`` (reversed), 0 or ±1/n (neutral).

    Returns a new table (the input is not modified) whose ``attrs`` hold ``artifact`` (the
    arguments, ``n_in``, ``n_out``, ``n_carrying``, the realised correlation and, for pad mode,
    ``max_words`` after padding).
    """
    _check_args(kind, strength, role, target_mode, length_mode, marker)
    if length_gap < 1:
        raise ValueError(f"length_gap must be >= 1, got {length_gap}")
    for col in ("chosen", "rejected"):
        if col not in pairs.columns:
            raise ValueError(f"pair table lacks the {col!r} column")
    out = pairs.copy()
    if "meta" not in out.columns:
        out["meta"] = [{} for _ in range(len(out))]
    metas = [_copy_meta(m) for m in out["meta"]]
    _check_clean(out, metas, kind, marker)

    rng = np.random.default_rng(seed)
    n = len(out)
    s = float(strength)
    active = not (role == "target" and target_mode == "absent")
    sides: list[str | None] = [None] * n
    suffixes = [""] * n
    others = [""] * n
    info: dict[str, Any] = {
        "kind": kind,
        "strength": s,
        "seed": seed,
        "role": role,
        "target_mode": target_mode if role == "target" else None,
        "n_in": n,
    }
    if kind == "length":
        info["length_mode"] = length_mode

    if kind == "length" and length_mode == "select" and active and s > 0:
        out, metas, sides = _select_by_length(out, metas, s, role, target_mode, rng)
        n = len(out)
        suffixes = [""] * n
    elif active and s > 0 and n > 0:
        _plant(out, kind, s, role, target_mode, marker, length_gap, rng, sides, suffixes,
               others, info)

    role_label = role if role == "source" else f"target:{target_mode}"
    for m, side, suffix, other_suffix in zip(metas, sides, suffixes, others):
        m.update(
            {
                "artifact_kind": kind,
                "artifact_side": side,
                "artifact_role": role_label,
                "artifact_strength": s,
                "artifact_suffix": suffix,
            }
        )
        if kind in ("order", "echo"):
            m["artifact_other_suffix"] = other_suffix
    out["meta"] = metas
    info["n_out"] = n
    info["n_carrying"] = sum(side is not None for side in sides)
    info["correlation"] = artifact_label_correlation(out, kind, marker=marker) if n else math.nan
    out.attrs = dict(pairs.attrs) | {"artifact": info}
    logger.info(
        "artefact %s (%s, s=%.2f): %d of %d pairs carry it, realised correlation %.3f",
        kind,
        role_label,
        s,
        info["n_carrying"],
        n,
        info["correlation"],
    )
    return out


def _check_clean(out: pd.DataFrame, metas: list[dict], kind: str, marker: str) -> None:
    """ValueError unless the pairs carry no artefact yet and none of their texts already ends
    the way the artefact would end it (the marker, an order suffix)."""
    for m in metas:
        if m.get("artifact_kind") is not None:
            raise ValueError(
                f"pairs already carry an artefact ({m['artifact_kind']!r}); apply to clean pairs"
            )
    if kind == "marker":
        for col in ("chosen", "rejected"):
            if out[col].astype(str).str.endswith(marker).any():
                raise ValueError(f"some {col} texts already end with the marker {marker!r}")
    if kind == "order":
        for col in ("chosen", "rejected"):
            for suffix in order_suffixes():
                if out[col].astype(str).str.endswith(suffix).any():
                    raise ValueError(f"some {col} texts already end with {suffix!r}; the order "
                                     "artefact would be ambiguous on them")


def _plant(out: pd.DataFrame, kind: str, s: float, role: str, target_mode: str, marker: str,
           length_gap: int, rng: np.random.Generator, sides: list, suffixes: list,
           others: list, info: dict[str, Any]) -> None:
    """Append the artefact to ``round(s * n)`` seeded pairs of ``out`` in place (their side in
    ``sides``, the appended text in ``suffixes`` / ``others``; pad mode's longest text in
    ``info``): every kind but the selected-by-length one."""
    n = len(out)
    k = int(round(s * n))
    chosen = out["chosen"].astype(str).tolist()
    rejected = out["rejected"].astype(str).tolist()
    if kind == "echo":  # only pairs whose responses open with different words can carry it
        eligible = np.array([i for i in range(n) if first_word(chosen[i]) and first_word(rejected[i])
                             and first_word(chosen[i]) != first_word(rejected[i])], dtype=int)
        if len(eligible) < k:
            raise ValueError(
                f"echo artefact at strength {s}: {k} of {n} pairs must carry it but only "
                f"{len(eligible)} have responses that open with different words")
        carry = np.sort(eligible[rng.permutation(len(eligible))[:k]])
    else:
        carry = np.sort(rng.permutation(n)[:k])
    for idx, side in zip(carry.tolist(), _sides(k, role, target_mode, rng)):
        text, other = (chosen, rejected) if side == "chosen" else (rejected, chosen)
        if kind == "marker":
            suffix = marker
        elif kind == "order":
            suffix, others[idx] = order_suffixes()
            other[idx] = other[idx] + others[idx]
        elif kind == "echo":
            suffix = others[idx] = " " + first_word(text[idx])
            other[idx] = other[idx] + others[idx]
        else:
            suffix = _pad(text[idx], other[idx], length_gap, rng)
        text[idx] = text[idx] + suffix
        sides[idx] = side
        suffixes[idx] = suffix
    out["chosen"] = chosen
    out["rejected"] = rejected
    if kind == "length":
        info["max_words"] = int(
            max(
                (max(count_words(c), count_words(r)) for c, r in zip(chosen, rejected)),
                default=0,
            )
        )


def _select_by_length(
    out: pd.DataFrame,
    metas: list[dict[str, Any]],
    s: float,
    role: str,
    target_mode: str,
    rng: np.random.Generator,
) -> tuple[pd.DataFrame, list[dict[str, Any]], list[str | None]]:
    """Selection variant of the length artefact (see :func:`apply_artifact`)."""
    n = len(out)
    wc = np.array([count_words(t) for t in out["chosen"].astype(str)], dtype=int)
    wr = np.array([count_words(t) for t in out["rejected"].astype(str)], dtype=int)
    pool_c = rng.permutation(np.flatnonzero(wc > wr))  # chosen naturally longer
    pool_r = rng.permutation(np.flatnonzero(wr > wc))  # rejected naturally longer

    def plan(m: int) -> tuple[int, int, int, int] | None:
        """(carry on chosen, carry on rejected, rest chosen-longer, rest rejected-longer)."""
        k = int(round(s * m))
        if role == "source":
            kc, kr = k, 0
        elif target_mode == "reversed":
            kc, kr = 0, k
        else:  # neutral: balanced
            kc, kr = k - k // 2, k // 2
        rest = m - k
        for rc in sorted({rest // 2, rest - rest // 2}):
            rr = rest - rc
            if kc + rc <= len(pool_c) and kr + rr <= len(pool_r):
                return kc, kr, rc, rr
        return None

    m, got = n, None
    while m > 0 and (got := plan(m)) is None:
        m -= 1
    if got is None:
        raise ValueError(
            f"length/select: no pair has the carrying side strictly longer ({len(pool_c)} pairs "
            f"with chosen longer, {len(pool_r)} with rejected longer)"
        )
    kc, kr, rc, rr = got
    carry_c, carry_r = pool_c[:kc], pool_r[:kr]
    rest = np.concatenate([pool_c[kc : kc + rc], pool_r[kr : kr + rr]])
    keep = np.sort(np.concatenate([carry_c, carry_r, rest]).astype(int))
    side_of = {int(i): "chosen" for i in carry_c} | {int(i): "rejected" for i in carry_r}
    if len(keep) < n:
        logger.info("length/select kept %d of %d pairs (strength %.2f)", len(keep), n, s)
    sel = out.iloc[keep].copy()
    return sel, [metas[i] for i in keep], [side_of.get(int(i)) for i in keep]


def artifact_label_correlation(
    pairs: pd.DataFrame, kind: str, marker: str = DEFAULT_MARKER
) -> float:
    """Realised artefact-label correlation, measured from the TEXT only (meta is not read).

    Per pair: +1 if the artefact is on the chosen side only, -1 if on the rejected side only,
    0 otherwise; the mean over pairs. ``"marker"``: the response ends with ``marker``;
    ``"order"``: the response ends with the carrying order (" so then") and the other one with
    the reverse; ``"length"``: the response has more words (:func:`count_words`) than the other
    one. So
    1 = the artefact alone predicts every label, -1 = it predicts every label wrongly.
    """
    if kind not in ARTIFACT_KINDS:
        raise ValueError(f"unknown artefact kind {kind!r}; choose one of {ARTIFACT_KINDS}")
    if len(pairs) == 0:
        raise ValueError("empty pair table")
    chosen = pairs["chosen"].astype(str)
    rejected = pairs["rejected"].astype(str)
    if kind == "marker":
        c = chosen.str.endswith(marker).to_numpy(dtype=int)
        r = rejected.str.endswith(marker).to_numpy(dtype=int)
        return float(np.mean(c - r))
    if kind == "echo":  # ends with its own first word while the other side does not
        ec = np.array([_ends_with_echo(t) for t in chosen], dtype=int)
        er = np.array([_ends_with_echo(t) for t in rejected], dtype=int)
        return float(np.mean(ec - er))
    if kind == "order":
        carry, other = order_suffixes()
        c = (chosen.str.endswith(carry) & rejected.str.endswith(other)).to_numpy(dtype=int)
        r = (rejected.str.endswith(carry) & chosen.str.endswith(other)).to_numpy(dtype=int)
        return float(np.mean(c - r))
    wc = np.array([count_words(t) for t in chosen])
    wr = np.array([count_words(t) for t in rejected])
    return float(np.mean(np.sign(wc - wr)))


def _cut(seq: list[str], i: int, suffix: str) -> None:
    if not suffix:
        return
    if not seq[i].endswith(suffix):
        raise ValueError(f"row {i}: text does not end with its recorded artefact suffix {suffix!r}")
    seq[i] = seq[i][: len(seq[i]) - len(suffix)]


def _remove_suffixes(chosen: list[str], rejected: list[str], i: int, m: dict) -> None:
    """Remove row ``i``'s recorded artefact text from both sides (in place)."""
    side = m.get("artifact_side")
    carrying, other = (chosen, rejected) if side == "chosen" else (rejected, chosen)
    _cut(carrying, i, m.get("artifact_suffix", ""))
    _cut(other, i, m.get("artifact_other_suffix", ""))


def strip_artifact(pairs: pd.DataFrame) -> pd.DataFrame:
    """Undo the appended text using ``meta["artifact_suffix"]`` (and, for the order kind,
    ``meta["artifact_other_suffix"]``); for checks: labels unchanged."""
    out = pairs.copy()
    chosen, rejected = out["chosen"].astype(str).tolist(), out["rejected"].astype(str).tolist()
    for i, m in enumerate(out["meta"]):
        _remove_suffixes(chosen, rejected, i, m or {})
    out["chosen"], out["rejected"] = chosen, rejected
    drop = (*_META_KEYS, "artifact_suffix", "artifact_other_suffix")
    out["meta"] = [{k: v for k, v in (m or {}).items() if k not in drop} for m in out["meta"]]
    out.attrs = {k: v for k, v in pairs.attrs.items() if k != "artifact"}
    return out


def mark_teacher_visibility(pairs: pd.DataFrame, visibility: float, seed: int) -> pd.DataFrame:
    """Decide, per pair that carries an artefact, whether the weak teacher can read it.

    A fraction ``visibility`` of the artefact-carrying rows (seeded, rounded) gets
    ``meta["artifact_teacher_visible"] = True``, the others False; rows without an artefact are
    unchanged. `teacher_view` then removes the artefact from the teacher's copy of the rows it
    cannot read, as if the cue lay beyond the teacher's context window: the student still sees
    it everywhere. ``visibility`` 1 is the plain artefact (the teacher reads every cue), 0 a cue
    only the student reads.
    """
    if not (isinstance(visibility, (int, float)) and 0.0 <= visibility <= 1.0):
        raise ValueError(f"visibility must be in [0, 1], got {visibility!r}")
    out = pairs.copy()
    metas = [_copy_meta(m) for m in out["meta"]] if "meta" in out else [{} for _ in range(len(out))]
    carrying = [i for i, m in enumerate(metas) if m.get("artifact_suffix")]
    rng = np.random.default_rng(seed)
    k = int(round(visibility * len(carrying)))
    visible = set(np.asarray(carrying)[rng.permutation(len(carrying))[:k]].tolist()) if carrying else set()
    for i in carrying:
        metas[i]["artifact_teacher_visible"] = i in visible
    out["meta"] = metas
    out.attrs = dict(pairs.attrs)
    return out


def teacher_view(pairs: pd.DataFrame, form: str = "same") -> pd.DataFrame:
    """The teacher's copy of the pairs: artefacts marked invisible to it (see
    `mark_teacher_visibility`) are removed from the text.

    ``form`` says how the teacher reads the artefacts it CAN read: ``"same"`` (the text the
    student reads, unchanged) or ``"marker"`` (the artefact is replaced, in the teacher's copy
    only, by :data:`DEFAULT_MARKER` on the carrying side). ``"marker"`` puts a cue that the weak
    teacher cannot learn itself (an ``echo`` or ``order`` cue) into its labels anyway: where the
    teacher reads the marker it labels the pair confidently right, so the student's labels
    reward the cue the student reads, and the student can only exploit it by reshaping its
    layers (a drift-borne shortcut inherited from weak labels). Rows without an artefact and
    the student's copy are never changed."""
    if form not in TEACHER_FORMS:
        raise ValueError(f"form must be one of {TEACHER_FORMS}, got {form!r}")
    metas = [(m or {}) for m in pairs["meta"]] if "meta" in pairs else []
    hidden = any(m.get("artifact_teacher_visible") is False for m in metas)
    swap = form == "marker" and any(
        m.get("artifact_suffix") and m.get("artifact_kind") != "marker"
        and m.get("artifact_teacher_visible") is not False for m in metas)
    if not (hidden or swap):
        return pairs
    out = pairs.copy()
    chosen, rejected = out["chosen"].astype(str).tolist(), out["rejected"].astype(str).tolist()
    for i, m in enumerate(metas):
        if not m.get("artifact_suffix"):
            continue
        if m.get("artifact_teacher_visible") is False:
            _remove_suffixes(chosen, rejected, i, m)
        elif form == "marker" and m.get("artifact_kind") != "marker":
            _remove_suffixes(chosen, rejected, i, m)
            carrying = chosen if m.get("artifact_side") == "chosen" else rejected
            carrying[i] = carrying[i] + DEFAULT_MARKER
    out["chosen"], out["rejected"] = chosen, rejected
    out.attrs = dict(pairs.attrs)
    return out
