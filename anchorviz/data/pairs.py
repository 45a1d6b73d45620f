"""Preference-pair data layer: one pair schema, dataset adapters, drop reports, prompt-grouped splits.

Every dataset, whatever its source format, is turned into one pair table (a
:class:`pandas.DataFrame` with columns :data:`PAIR_COLUMNS`, see ``docs/ARCHITECTURE.md``)::

    pairs, report = load_pairs("hh-rlhf-harmless", split="test")
    print(report)                      # rows read / kept / dropped per reason
    splits = split_by_prompt(pairs, {"teacher_train": 1000, "w2s_train": 2000,
                                     "val": 300, "source_test": 1000}, seed=0)

Where the data comes from
    * a **manifest name** (``anchorviz/manifests/<name>.yaml``, package data, see
      :func:`list_datasets`): the hub id, config, splits, adapter and column map of a named
      dataset (Anthropic HH-RLHF, HelpSteer3, UltraFeedback, PKU-SafeRLHF, RAIL-HH-10K, the
      ``realdata-*`` files, VADER);
      ``path=`` reads a local copy in the hub's row format instead of the hub;
    * a **local file or directory** (``.jsonl``, ``.json``, ``.parquet``, ``.csv``, ``.tsv``,
      optionally gzipped): generic prompt / chosen / rejected columns (renamed with
      ``column_map``), or the row format of a named adapter (``adapter="hh"`` ...);
    * a **Hugging Face Hub id** together with a ``column_map`` (or ``adapter``).

Rows are never dropped silently: malformed rows (missing or non-string fields, empty responses,
unknown label values, broken dialogues), ties, exact duplicates and ``chosen == rejected`` pairs
are counted per reason in a :class:`DropReport`, with the first row indices. ``strict=True``
turns a malformed row into a :class:`DataError` naming the dataset, row, field and the
expected form.

Prompts: multi-turn prompts keep their turns, as text in ``prompt`` (HH style,
``"\\n\\nHuman: ...\\n\\nAssistant: ...\\n\\nAssistant:"``; a single user turn is its plain
content, except for HH-derived datasets which keep the HH form) and as a list of
``{"role", "content"}`` dicts in ``prompt_turns``.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from anchorviz.paths import REPO_ROOT, realdata_dir

logger = logging.getLogger(__name__)

__all__ = [
    "ADAPTERS",
    "CATEGORIES",
    "MANIFEST_DIR",
    "PAIR_COLUMNS",
    "PROTOCOL_SPLITS",
    "DataError",
    "DropReport",
    "adapt_records",
    "dedupe_pairs",
    "get_manifest",
    "list_datasets",
    "load_pairs",
    "parse_hh_turns",
    "protocol_splits",
    "render_turns",
    "split_by_prompt",
    "split_hh_dialogue",
    "validate_pairs",
]

PAIR_COLUMNS: list[str] = [
    "pair_id",
    "dataset",
    "domain",
    "prompt",
    "chosen",
    "rejected",
    "prompt_turns",
    "meta",
]

#: the named datasets' manifests: package data (``anchorviz/manifests/*.yaml``), so that a wheel
#: install finds them as well as an editable one
MANIFEST_DIR: Path = Path(__file__).resolve().parent.parent / "manifests"
CATEGORIES: tuple[str, ...] = ("helpful", "harmless", "sentiment")
PROTOCOL_SPLITS: tuple[str, ...] = ("teacher_train", "w2s_train", "val", "source_test")

# Drop reasons. The first group marks malformed rows (an error under ``strict=True``); the
# second group is removed by design (ties, dedupe) and only counted.
MISSING_FIELD = "missing_field"
NOT_A_STRING = "not_a_string"
EMPTY_RESPONSE = "empty_response"
BAD_LABEL = "bad_label"
MALFORMED_DIALOGUE = "malformed_dialogue"
MALFORMED_ROW = "malformed_row"
TIE = "tie"
DUPLICATE = "duplicate"
CHOSEN_EQUALS_REJECTED = "chosen_equals_rejected"
MALFORMED_REASONS: frozenset[str] = frozenset(
    {MISSING_FIELD, NOT_A_STRING, EMPTY_RESPONSE, BAD_LABEL, MALFORMED_DIALOGUE, MALFORMED_ROW}
)

_TEXT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv")
_LOCAL_SUFFIXES = _TEXT_SUFFIXES + (".parquet", ".pq")
_HH_MARK = "\n\nAssistant:"
_HH_STRICT_RE = re.compile(r"\n\n(Human|Assistant):")
_HH_LOOSE_RE = re.compile(r"(?:^|\n)[ \t]*(Human|Assistant):")
_ROLE_LABEL = {"user": "Human", "human": "Human", "assistant": "Assistant", "system": "System"}
_LABEL_ROLE = {"Human": "user", "Assistant": "assistant"}


class DataError(ValueError):
    """A data source does not have the form it should (names the source, row, field, expectation)."""


# ----------------------------------------------------------------------------------------------
# drop report
# ----------------------------------------------------------------------------------------------


@dataclass
class DropReport:
    """What a loader read, kept and dropped (per reason, with the first examples)."""

    dataset: str
    source: str = ""
    split: str | None = None
    total: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    max_examples: int = 5

    def add(self, reason: str, index: int, message: str) -> None:
        """Count one dropped row (``index`` = its position in the source)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < self.max_examples:
            ex.append((int(index), message))

    @property
    def n_dropped(self) -> int:
        """Rows dropped for any reason."""
        return sum(self.dropped.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able summary."""
        return {
            "dataset": self.dataset,
            "source": self.source,
            "split": self.split,
            "total": self.total,
            "kept": self.kept,
            "dropped": dict(self.dropped),
            "examples": {k: [list(e) for e in v] for k, v in self.examples.items()},
        }

    def __str__(self) -> str:
        where = f" [{self.split}]" if self.split else ""
        src = f" from {self.source}" if self.source else ""
        head = (
            f"{self.dataset}{where}{src}: read {self.total} rows, kept {self.kept} pairs, "
            f"dropped {self.n_dropped}"
        )
        if not self.dropped:
            return head
        parts = ", ".join(f"{k}: {v}" for k, v in sorted(self.dropped.items()))
        lines = [f"{head} ({parts})"]
        for reason in sorted(self.examples):
            for idx, msg in self.examples[reason]:
                lines.append(f"  {reason}: row {idx}: {msg}")
        return "\n".join(lines)


class _RowProblem(Exception):
    """A malformed row (dropped and counted, or a DataError when strict)."""

    def __init__(self, reason: str, fieldname: str, problem: str, expected: str) -> None:
        super().__init__(problem)
        self.reason, self.field, self.problem, self.expected = reason, fieldname, problem, expected

    def message(self) -> str:
        return f"field {self.field!r} {self.problem}; expected {self.expected}"


class _RowSkip(Exception):
    """A well-formed row removed by design (e.g. a tie): always counted, never an error."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.msg = reason, message


@dataclass(frozen=True)
class _BadRecord:
    """A source record that could not even be parsed (invalid JSON line, not an object)."""

    message: str


# ----------------------------------------------------------------------------------------------
# dialogue helpers
# ----------------------------------------------------------------------------------------------


def parse_hh_turns(text: str, *, loose: bool = False) -> list[dict[str, str]]:
    """Turns of an HH-style transcript ``"\\n\\nHuman: ...\\n\\nAssistant: ..."``.

    Roles become ``user`` / ``assistant``; contents are stripped; a trailing empty
    ``Assistant:`` (the generation slot) is left out. Text before the first marker becomes a
    leading user turn. ``loose=True`` also accepts markers after a single newline or at the
    start of the text (``"Human: ...\\nAssistant: ..."``).
    """
    rx = _HH_LOOSE_RE if loose else _HH_STRICT_RE
    parts = rx.split(text)
    turns: list[dict[str, str]] = []
    lead = parts[0].strip()
    if lead:
        turns.append({"role": "user", "content": lead})
    for label, content in zip(parts[1::2], parts[2::2]):
        turns.append({"role": _LABEL_ROLE[label], "content": content.strip()})
    if turns and turns[-1]["role"] == "assistant" and not turns[-1]["content"]:
        turns.pop()
    return turns


def render_turns(turns: Sequence[Mapping[str, str]], style: str = "auto") -> str:
    """Render turns as prompt text.

    ``style="hh"``: ``"\\n\\nHuman: ...\\n\\nAssistant: ...\\n\\nAssistant:"`` (ends with the
    generation slot). ``style="auto"``: a single user turn is its plain content, anything
    longer is HH style.
    """
    if style not in ("auto", "hh"):
        raise ValueError(f"style must be 'auto' or 'hh', got {style!r}")
    if not turns:
        return ""
    if style == "auto" and len(turns) == 1 and turns[0]["role"] == "user":
        return turns[0]["content"]
    body = "".join(
        f"\n\n{_ROLE_LABEL.get(t['role'], t['role'].capitalize())}: {t['content']}" for t in turns
    )
    return body + _HH_MARK


def split_hh_dialogue(chosen: str, rejected: str) -> tuple[str, str, str]:
    """Split two full HH transcripts into ``(prompt, chosen_reply, rejected_reply)``.

    The prompt is the shared prefix of both transcripts up to and including its last
    ``"\\n\\nAssistant:"`` (kept exactly as in the source); the replies are what follows,
    stripped. Raises ValueError when the transcripts share no ``"\\n\\nAssistant:"`` prefix.
    """
    n = min(len(chosen), len(rejected))
    i = 0
    while i < n and chosen[i] == rejected[i]:
        i += 1
    cut = chosen.rfind(_HH_MARK, 0, i)  # the last marker lying wholly inside the common prefix
    if cut == -1:
        raise ValueError('the two transcripts share no dialogue prefix ending in "\\n\\nAssistant:"')
    end = cut + len(_HH_MARK)
    return chosen[:end], chosen[end:].strip(), rejected[end:].strip()


# ----------------------------------------------------------------------------------------------
# field access (row -> typed values, or a _RowProblem)
# ----------------------------------------------------------------------------------------------

_MISSING = object()


def _is_missing(v: Any) -> bool:
    return v is _MISSING or v is None or (isinstance(v, float) and math.isnan(v))


def _describe(v: Any) -> str:
    s = repr(v)
    return f"{type(v).__name__} {s[:60]}{'...' if len(s) > 60 else ''}"


def _get(row: Mapping[str, Any], col: str) -> Any:
    return row.get(col, _MISSING)


def _req_str(row: Mapping[str, Any], col: str, *, empty_ok: bool = False) -> str:
    v = _get(row, col)
    if _is_missing(v):
        raise _RowProblem(MISSING_FIELD, col, "is missing", "a string")
    if not isinstance(v, str):
        raise _RowProblem(NOT_A_STRING, col, f"is a {_describe(v)}", "a string")
    if not empty_ok and not v.strip():
        raise _RowProblem(EMPTY_RESPONSE, col, "is empty", "a non-empty string")
    return v


def _is_seq(v: Any) -> bool:
    return isinstance(v, (list, tuple, np.ndarray))


def _req_messages(row: Mapping[str, Any], col: str, *, allow_empty: bool = False) -> list[dict]:
    v = _get(row, col)
    expected = "a list of {role, content} messages"
    if _is_missing(v):
        raise _RowProblem(MISSING_FIELD, col, "is missing", expected)
    return _as_messages(v, col, allow_empty=allow_empty)


def _as_messages(v: Any, col: str, *, allow_empty: bool = False) -> list[dict[str, str]]:
    expected = "a list of {role, content} messages (role and content strings)"
    if not _is_seq(v):
        raise _RowProblem(MALFORMED_DIALOGUE, col, f"is a {_describe(v)}", expected)
    out: list[dict[str, str]] = []
    for k, m in enumerate(v):
        if not isinstance(m, Mapping):
            raise _RowProblem(MALFORMED_DIALOGUE, col, f"message {k} is a {_describe(m)}", expected)
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise _RowProblem(
                MALFORMED_DIALOGUE, col, f"message {k} has role {role!r}, content {_describe(content)}",
                expected,
            )
        out.append({"role": role, "content": content})
    if not out and not allow_empty:
        raise _RowProblem(MALFORMED_DIALOGUE, col, "is an empty list", expected)
    return out


def _req_label(row: Mapping[str, Any], col: str, allowed: Iterable[int]) -> int:
    """An integer label (ints, integral floats, numpy ints, integer strings from CSV)."""
    allowed = sorted(allowed)
    expected = f"an integer in {allowed[0]}..{allowed[-1]}" if len(allowed) > 2 else (
        " or ".join(str(a) for a in allowed)
    )
    v = _get(row, col)
    if _is_missing(v):
        raise _RowProblem(MISSING_FIELD, col, "is missing", expected)
    out: int | None = None
    if isinstance(v, (bool, np.bool_)):
        out = None
    elif isinstance(v, (int, np.integer)):
        out = int(v)
    elif isinstance(v, (float, np.floating)) and float(v).is_integer():
        out = int(v)
    elif isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d+\s*", v):
        out = int(v)
    if out is None or out not in allowed:
        raise _RowProblem(BAD_LABEL, col, f"has value {v!r}", expected)
    return out


def _final_reply(msgs: list[dict[str, str]], col: str) -> str:
    if msgs[-1]["role"] != "assistant":
        raise _RowProblem(
            MALFORMED_DIALOGUE, col, f"ends with a {msgs[-1]['role']!r} message",
            "a conversation whose last message is the assistant reply",
        )
    reply = msgs[-1]["content"]
    if not reply.strip():
        raise _RowProblem(EMPTY_RESPONSE, col, "ends with an empty assistant reply",
                          "a non-empty assistant reply")
    return reply


def _plain_turns(prompt: str) -> list[dict[str, str]] | None:
    return [{"role": "user", "content": prompt}] if prompt.strip() else None


def _looks_hh(prompt: str) -> bool:
    return prompt.startswith("\n\nHuman:") and prompt.endswith(_HH_MARK)


# ----------------------------------------------------------------------------------------------
# adapters: one source row -> prompt / chosen / rejected / prompt_turns / extra meta
# ----------------------------------------------------------------------------------------------

_Cols = dict[str, Any]  # canonical field -> source column name (or None)
_Converted = dict[str, Any]


def _convert_hh(row: Mapping[str, Any], cols: _Cols, opts: Mapping[str, Any]) -> _Converted:
    chosen_t = _req_str(row, cols["chosen"])
    rejected_t = _req_str(row, cols["rejected"])
    try:
        prompt, chosen, rejected = split_hh_dialogue(chosen_t, rejected_t)
    except ValueError as err:
        raise _RowProblem(
            MALFORMED_DIALOGUE, cols["chosen"], f"and {cols['rejected']!r}: {err}",
            'two HH transcripts "\\n\\nHuman: ...\\n\\nAssistant: ..." sharing all but the last reply',
        ) from None
    for col, reply in ((cols["chosen"], chosen), (cols["rejected"], rejected)):
        if not reply:
            raise _RowProblem(EMPTY_RESPONSE, col, "has an empty final assistant reply",
                              "a non-empty reply after the shared prefix")
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected,
            "prompt_turns": parse_hh_turns(prompt) or None, "meta": {}}


def _convert_helpsteer3(row: Mapping[str, Any], cols: _Cols, opts: Mapping[str, Any]) -> _Converted:
    turns = _req_messages(row, cols["context"])
    r1 = _req_str(row, cols["response1"])
    r2 = _req_str(row, cols["response2"])
    pref = _req_label(row, cols["overall_preference"], range(-3, 4))
    if pref == 0:
        raise _RowSkip(TIE, f"{cols['overall_preference']} is 0 (tie)")
    # dataset card: -3 = "Response 1 is much better than Response 2", 3 = the reverse
    chosen, rejected, which = (r1, r2, 1) if pref < 0 else (r2, r1, 2)
    return {"prompt": render_turns(turns), "chosen": chosen, "rejected": rejected,
            "prompt_turns": turns,
            "meta": {"chosen_response": which, "margin": abs(pref)}}


def _convert_ultrafeedback(row: Mapping[str, Any], cols: _Cols, opts: Mapping[str, Any]) -> _Converted:
    c_msgs = _req_messages(row, cols["chosen"])
    r_msgs = _req_messages(row, cols["rejected"])
    chosen = _final_reply(c_msgs, cols["chosen"])
    rejected = _final_reply(r_msgs, cols["rejected"])
    if c_msgs[:-1] != r_msgs[:-1]:
        raise _RowProblem(
            MALFORMED_DIALOGUE, cols["chosen"], f"and {cols['rejected']!r} differ before the final reply",
            "two conversations with the same prompt messages",
        )
    turns = c_msgs[:-1]
    prompt_text = None
    if cols.get("prompt"):
        prompt_text = _req_str(row, cols["prompt"], empty_ok=True)
    if not turns and prompt_text:
        turns = [{"role": "user", "content": prompt_text}]
    prompt = render_turns(turns) if turns else (prompt_text or "")
    if opts.get("drop_score_ties"):
        sc, sr = row.get(cols.get("score_chosen") or ""), row.get(cols.get("score_rejected") or "")
        if isinstance(sc, (int, float)) and isinstance(sr, (int, float)) and sc == sr:
            raise _RowSkip(TIE, f"score_chosen == score_rejected == {sc}")
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected,
            "prompt_turns": turns or None, "meta": {}}


def _convert_pku(row: Mapping[str, Any], cols: _Cols, opts: Mapping[str, Any]) -> _Converted:
    prompt = _req_str(row, cols["prompt"], empty_ok=True)
    r0 = _req_str(row, cols["response_0"])
    r1 = _req_str(row, cols["response_1"])
    label = _req_label(row, cols["label"], (0, 1))
    chosen, rejected = (r0, r1) if label == 0 else (r1, r0)
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected,
            "prompt_turns": _plain_turns(prompt),
            "meta": {"label_field": cols["label"], "chosen_response_id": label}}


def _convert_rail(row: Mapping[str, Any], cols: _Cols, opts: Mapping[str, Any]) -> _Converted:
    context = ""
    if cols.get("context"):
        v = _get(row, cols["context"])
        if not _is_missing(v):
            context = _req_str(row, cols["context"], empty_ok=True)
    user = _req_str(row, cols["prompt"])
    chosen = _req_str(row, cols["chosen"])
    rejected = _req_str(row, cols["rejected"])
    turns = parse_hh_turns(context, loose=True) if context.strip() else []
    if not (turns and turns[-1]["role"] == "user" and turns[-1]["content"] == user.strip()):
        turns.append({"role": "user", "content": user.strip()})
    return {"prompt": render_turns(turns, style="hh"), "chosen": chosen.strip(),
            "rejected": rejected.strip(), "prompt_turns": turns, "meta": {}}


def _side(row: Mapping[str, Any], col: str) -> tuple[str, list[dict[str, str]] | None]:
    """A generic response: a string, or a message list whose last message is the reply."""
    v = _get(row, col)
    if _is_seq(v):
        msgs = _as_messages(v, col)
        return _final_reply(msgs, col), msgs[:-1]
    return _req_str(row, col), None


def _convert_pairs(row: Mapping[str, Any], cols: _Cols, opts: Mapping[str, Any]) -> _Converted:
    chosen, c_prefix = _side(row, cols["chosen"])
    rejected, r_prefix = _side(row, cols["rejected"])
    turns: list[dict[str, str]] | None = None
    prompt = ""
    if cols.get("prompt"):
        v = _get(row, cols["prompt"])
        if _is_seq(v):
            turns = _as_messages(v, cols["prompt"], allow_empty=True)
            prompt = render_turns(turns)
        else:
            prompt = _req_str(row, cols["prompt"], empty_ok=True)
    if cols.get("prompt_turns"):
        v = _get(row, cols["prompt_turns"])
        if not _is_missing(v):
            turns = _as_messages(v, cols["prompt_turns"], allow_empty=True)
    if turns is None and (c_prefix or r_prefix):
        if c_prefix != r_prefix:
            raise _RowProblem(
                MALFORMED_DIALOGUE, cols["chosen"], f"and {cols['rejected']!r} differ before the final reply",
                "two conversations with the same prompt messages",
            )
        turns = c_prefix
        if not prompt:
            prompt = render_turns(turns or [])
    if turns is None:
        turns = parse_hh_turns(prompt) if _looks_hh(prompt) else _plain_turns(prompt)
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected,
            "prompt_turns": turns or None, "meta": {}}


@dataclass(frozen=True)
class _Adapter:
    """Canonical fields (-> default source column(s)), the required ones, and the converter."""

    name: str
    fields: Mapping[str, str | tuple[str, ...] | None]
    required: frozenset[str]
    convert: Callable[[Mapping[str, Any], _Cols, Mapping[str, Any]], _Converted]
    doc: str
    # fields whose text ends up in prompt / chosen / rejected: their columns are not copied into
    # meta (labels and scores are, under their source names)
    text_fields: frozenset[str] = frozenset({"prompt", "chosen", "rejected", "prompt_turns"})


ADAPTERS: dict[str, _Adapter] = {
    a.name: a
    for a in (
        _Adapter("hh", {"chosen": "chosen", "rejected": "rejected"},
                 frozenset({"chosen", "rejected"}), _convert_hh,
                 "Anthropic HH-RLHF: two full transcripts; the shared prefix is the prompt"),
        _Adapter("helpsteer3",
                 {"context": "context", "response1": "response1", "response2": "response2",
                  "overall_preference": "overall_preference"},
                 frozenset({"context", "response1", "response2", "overall_preference"}),
                 _convert_helpsteer3,
                 "HelpSteer3 preference: context turns, response1/2, overall_preference -3..3 "
                 "(negative: response1 better; 0: tie, dropped)",
                 frozenset({"context", "response1", "response2"})),
        _Adapter("ultrafeedback",
                 {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected",
                  "score_chosen": "score_chosen", "score_rejected": "score_rejected"},
                 frozenset({"chosen", "rejected"}), _convert_ultrafeedback,
                 "UltraFeedback binarized: chosen / rejected message lists ending in the reply"),
        _Adapter("pku",
                 {"prompt": "prompt", "response_0": "response_0", "response_1": "response_1",
                  "label": "safer_response_id"},
                 frozenset({"prompt", "response_0", "response_1", "label"}), _convert_pku,
                 "PKU-SafeRLHF: response_0/1 and a 0/1 label column (safer_ or better_response_id)",
                 frozenset({"prompt", "response_0", "response_1"})),
        _Adapter("rail",
                 {"context": "context", "prompt": "prompt",
                  "chosen": ("chosen_text", "chosen", "chosen_response", "chosen_answer"),
                  "rejected": ("rejected_text", "rejected", "rejected_response", "rejected_answer")},
                 frozenset({"prompt", "chosen", "rejected"}), _convert_rail,
                 "RAIL-HH-10K: HH-style context + final user prompt, chosen / rejected answers",
                 frozenset({"context", "prompt", "chosen", "rejected"})),
        _Adapter("pairs",
                 {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected",
                  "prompt_turns": "prompt_turns"},
                 frozenset({"prompt", "chosen", "rejected"}), _convert_pairs,
                 "generic prompt / chosen / rejected columns (strings or message lists)"),
    )
}


def _resolve_columns(
    adapter: _Adapter,
    overrides: Mapping[str, Any] | None,
    available: Sequence[str],
    source: str,
) -> _Cols:
    """Canonical field -> the source column that holds it (None: not present)."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(adapter.fields))
    if unknown:
        raise DataError(
            f"{source}: column_map key(s) {unknown} are not fields of the {adapter.name!r} adapter "
            f"(its fields: {sorted(adapter.fields)})"
        )
    have = set(available)
    out: _Cols = {}
    missing: list[str] = []
    for fname, default in adapter.fields.items():
        spec = overrides.get(fname, default)
        if spec is None:
            out[fname] = None
            continue
        cands = [spec] if isinstance(spec, str) else list(spec)
        hit = next((c for c in cands if c in have), None)
        if hit is None and fname in adapter.required:
            missing.append(cands[0] if len(cands) == 1 else f"{fname} (one of {cands})")
        out[fname] = hit
    if missing:
        raise DataError(
            f"{source}: column(s) {missing} not found (adapter {adapter.name!r}); "
            f"the source has columns {list(available)}. Pass column_map={{field: column}} to "
            f'rename ({{"prompt": None}} for data without prompts).'
        )
    return out


# ----------------------------------------------------------------------------------------------
# the driver: records -> pair table + drop report
# ----------------------------------------------------------------------------------------------


def _native(v: Any) -> Any:
    """numpy / arrow values -> plain Python (JSON-able meta)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return [_native(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [_native(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _native(x) for k, x in v.items()}
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _ordered_columns(records: Sequence[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        if isinstance(r, Mapping):
            for k in r:
                seen.setdefault(str(k), None)
    return list(seen)


def _run(
    records: Iterable[Any],
    columns: Sequence[str],
    *,
    adapter: _Adapter,
    column_map: Mapping[str, Any] | None,
    options: Mapping[str, Any],
    dataset: str,
    domain: str,
    split: str | None,
    source: str,
    strict: bool,
    limit: int | None,
) -> tuple[pd.DataFrame, DropReport]:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    cols = _resolve_columns(adapter, column_map, columns, source)
    used = {c for f, c in cols.items() if c and f in adapter.text_fields}
    exclude = set(options.get("meta_exclude", ()))
    report = DropReport(dataset=dataset, source=source, split=split)
    seen: dict[tuple[str, str, str], int] = {}
    rows: list[dict[str, Any]] = []
    prefix = f"{dataset}:{split}:" if split else f"{dataset}:"
    for index, rec in enumerate(records):
        if limit is not None and len(rows) >= limit:
            break
        report.total += 1
        try:
            if isinstance(rec, _BadRecord):
                raise _RowProblem(MALFORMED_ROW, "<row>", rec.message, "one JSON object per row")
            if not isinstance(rec, Mapping):
                raise _RowProblem(MALFORMED_ROW, "<row>", f"is a {_describe(rec)}",
                                  "a mapping of column -> value")
            conv = adapter.convert(rec, cols, options)
        except _RowProblem as prob:
            if strict:
                raise DataError(f"{dataset} ({source}): row {index}: {prob.message()}") from None
            report.add(prob.reason, index, prob.message())
            continue
        except _RowSkip as skip:
            report.add(skip.reason, index, skip.msg)
            continue
        chosen, rejected, prompt = conv["chosen"], conv["rejected"], conv["prompt"]
        if chosen == rejected:
            report.add(CHOSEN_EQUALS_REJECTED, index, "chosen and rejected are identical")
            continue
        key = (prompt, chosen, rejected)
        if key in seen:
            report.add(DUPLICATE, index, f"exact duplicate of row {seen[key]}")
            continue
        seen[key] = index
        meta = {k: _native(v) for k, v in rec.items() if k not in used and k not in exclude}
        meta.update(conv["meta"])
        rows.append({
            "pair_id": f"{prefix}{index}",
            "dataset": dataset,
            "domain": domain,
            "prompt": prompt,
            "chosen": chosen,
            "rejected": rejected,
            "prompt_turns": conv["prompt_turns"],
            "meta": meta,
        })
    report.kept = len(rows)
    df = pd.DataFrame.from_records(rows, columns=PAIR_COLUMNS)
    log = logger.warning if report.dropped.keys() & MALFORMED_REASONS else logger.info
    log("%s", report)
    return df, report


def adapt_records(
    records: Iterable[Mapping[str, Any]],
    *,
    adapter: str = "pairs",
    dataset: str = "records",
    column_map: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    domain: str | None = None,
    split: str | None = None,
    strict: bool = False,
    limit: int | None = None,
    source: str = "<records>",
) -> tuple[pd.DataFrame, DropReport]:
    """Turn in-memory rows (dicts in a source's row format) into a pair table + drop report.

    The same path :func:`load_pairs` takes after reading a file or hub split; useful for
    tests and for data that is already in memory.
    """
    recs = list(records)
    if not recs:
        report = DropReport(dataset=dataset, source=source, split=split)
        return pd.DataFrame(columns=PAIR_COLUMNS), report
    return _run(recs, _ordered_columns(recs), adapter=_adapter(adapter), column_map=column_map,
                options=dict(options or {}), dataset=dataset, domain=domain or dataset,
                split=split, source=source, strict=strict, limit=limit)


def _adapter(name: str) -> _Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ValueError(
            f"unknown adapter {name!r}; known adapters: {sorted(ADAPTERS)} (and 'vader' via a manifest)"
        ) from None


# ----------------------------------------------------------------------------------------------
# reading local files
# ----------------------------------------------------------------------------------------------


def _strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


def _kind(path: Path) -> str | None:
    name = _strip_gz(path.name.lower())
    for suf in _LOCAL_SUFFIXES:
        if name.endswith(suf):
            return suf
    return None


def _read_bytes(path: Path) -> bytes:
    if path.name.lower().endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return fh.read()
    return path.read_bytes()


def _decode(data: bytes, path: Path) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}: not valid UTF-8 at byte offset {err.start} (line {line}): {err.reason} "
            f"(byte {data[err.start:err.start + 1]!r}); re-encode the file as UTF-8"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def _parse_jsonl(text: str, path: Path) -> list[Any]:
    out: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            out.append(_BadRecord(f"{path.name} line {lineno} is not valid JSON: {err.msg}"))
    return out


def _parse_json(text: str, path: Path) -> list[Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # JSON lines in a .json file
            return _parse_jsonl(text, path)
        raise DataError(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}): {err.msg}") from None
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        lists = {k: v for k, v in obj.items() if isinstance(v, list)}
        if len(lists) == 1 and all(isinstance(r, dict) for r in next(iter(lists.values()))):
            return next(iter(lists.values()))
        if obj and len(lists) == len(obj) and len({len(v) for v in lists.values()}) == 1:
            keys = list(lists)
            return [dict(zip(keys, vals)) for vals in zip(*lists.values())]
    raise DataError(
        f"{path}: expected a JSON list of row objects (or {{column: [values]}}), "
        f"got a {type(obj).__name__}"
    )


def _read_file(path: Path) -> list[Any]:
    kind = _kind(path)
    if kind in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # noqa: BLE001 - arrow raises several types
            raise DataError(f"{path}: could not read parquet: {type(err).__name__}: {err}") from None
    text = _decode(_read_bytes(path), path)
    if kind in (".jsonl", ".ndjson"):
        return _parse_jsonl(text, path)
    if kind == ".json":
        return _parse_json(text, path)
    if kind in (".csv", ".tsv"):
        try:
            frame = pd.read_csv(io.StringIO(text), sep="\t" if kind == ".tsv" else ",",
                                dtype=str, keep_default_na=False)
        except Exception as err:  # noqa: BLE001 - pandas parser errors
            raise DataError(f"{path}: could not parse {kind[1:]}: {err}") from None
        return frame.to_dict("records")
    raise DataError(f"{path}: unsupported file type; use one of {list(_LOCAL_SUFFIXES)} (optionally .gz)")


def _split_matches(rel: Path, split: str) -> bool:
    rx = re.compile(rf"^{re.escape(split)}(?:[-.]|$)")
    return bool(rx.match(rel.name)) or split in rel.parts[:-1]


def _local_files(path: Path, split: str | None) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and _kind(p) is not None
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not files:
        raise DataError(f"{path}: directory holds no data files ({list(_LOCAL_SUFFIXES)}, optionally .gz)")
    if split is None:
        return files
    picked = [p for p in files if _split_matches(p.relative_to(path), split)]
    if not picked:
        names = [str(p.relative_to(path)) for p in files]
        raise DataError(f"{path}: no file for split {split!r} (files: {names})")
    return picked


def _read_local(path: Path, split: str | None) -> tuple[list[Any], list[str], str]:
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {str(path)!r}")
    files = _local_files(path, split)
    records: list[Any] = []
    for f in files:
        records.extend(_read_file(f))
    if not records:
        raise DataError(f"{path}: contains no rows")
    source = str(path) if len(files) == 1 else f"{path} ({len(files)} files)"
    return records, _ordered_columns(records), source


def _read_hub(
    hub_id: str, config: str | None, data_dir: str | None, split: str, revision: str | None = None
) -> tuple[Any, list[str], str]:
    import datasets

    kwargs: dict[str, Any] = {"split": split}
    if config is not None:
        kwargs["name"] = config
    if data_dir is not None:
        kwargs["data_dir"] = data_dir
    if revision is not None:
        kwargs["revision"] = revision
    where = f"{hub_id}" + (f" (config {config})" if config else "") + (f" ({data_dir})" if data_dir else "")
    try:
        ds = datasets.load_dataset(hub_id, **kwargs)
    except Exception as err:  # noqa: BLE001 - network, auth, missing split ...
        raise DataError(
            f"could not load {where}, split {split!r}, from the Hugging Face Hub: "
            f"{type(err).__name__}: {err}. Without network access pass a local copy "
            f"(load_pairs(name, path=...))."
        ) from err
    return ds, list(ds.column_names), f"hf://{where}"


# ----------------------------------------------------------------------------------------------
# manifests
# ----------------------------------------------------------------------------------------------

_MANIFEST_REQUIRED = ("name", "adapter", "category", "licence")


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        m = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: unreadable manifest: {err}") from None
    if not isinstance(m, dict):
        raise DataError(f"{path}: a manifest must be a YAML mapping")
    missing = [k for k in _MANIFEST_REQUIRED if not m.get(k)]
    if missing:
        raise DataError(f"{path}: manifest lacks {missing}")
    if m["name"] != path.stem:
        raise DataError(f"{path}: manifest name {m['name']!r} must match the file name")
    if m["adapter"] != "vader" and m["adapter"] not in ADAPTERS:
        raise DataError(f"{path}: unknown adapter {m['adapter']!r}; known: {sorted(ADAPTERS)} + vader")
    if m["category"] not in CATEGORIES:
        raise DataError(f"{path}: category {m['category']!r} not in {CATEGORIES}")
    if m["adapter"] != "vader" and not (m.get("hub_id") or m.get("local_file")):
        raise DataError(f"{path}: manifest needs a hub_id or a local_file")
    m.setdefault("splits", [])
    m["splits"] = list(m["splits"] or [])
    m.setdefault("default_split", m["splits"][0] if m["splits"] else None)
    m["columns"] = dict(m.get("columns") or {})
    m["options"] = dict(m.get("options") or {})
    m["manifest_path"] = str(path)
    return m


_WARNED_NO_MANIFESTS: list[bool] = []


def _manifests() -> dict[str, dict[str, Any]]:
    if not MANIFEST_DIR.is_dir():  # an install without its package data: say so, once
        if not _WARNED_NO_MANIFESTS:
            _WARNED_NO_MANIFESTS.append(True)
            logger.warning("no dataset manifests at %s: the named datasets are unknown "
                           "(an install without anchorviz's package data?)", MANIFEST_DIR)
        return {}
    return {p.stem: _read_manifest(p) for p in sorted(MANIFEST_DIR.glob("*.yaml"))}


def get_manifest(name: str) -> dict[str, Any]:
    """The parsed manifest of a named dataset (ValueError listing the known names if unknown)."""
    ms = _manifests()
    if name not in ms:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {sorted(ms)}")
    return ms[name]


def list_datasets(local: bool = False) -> pd.DataFrame:
    """The named datasets: one row per manifest (name, hub_id, category, licence, adapter).

    ``local=True`` adds ``cached`` (whether it can be read on this machine without network:
    its local file, the VADER source archive in anchorviz's cache, or a Hugging Face datasets /
    hub cache entry) and ``local_path`` (that file or cache folder; where it would be for a
    local file that is missing). Nothing is downloaded or created."""
    cols = ["name", "hub_id", "category", "licence", "adapter"]
    rows = []
    for m in _manifests().values():
        row = {"name": m["name"], "hub_id": m.get("hub_id"), "category": m["category"],
               "licence": m["licence"], "adapter": m["adapter"]}
        if local:
            row["cached"], row["local_path"] = _local_copy(m)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols + (["cached", "local_path"] if local else []))


def _local_copy(m: Mapping[str, Any]) -> tuple[bool, str | None]:
    """``(readable offline, path)`` of a manifest's data on this machine (see `list_datasets`)."""
    import os

    if m["adapter"] == "vader":
        from anchorviz.data.vader import VADER_SDIST_NAME
        from anchorviz.paths import cache_dir

        path = cache_dir() / "datasets" / "vader" / VADER_SDIST_NAME
        return path.is_file(), str(path) if path.is_file() else None
    if m.get("local_file"):
        try:
            path = _manifest_local_path(m)
        except FileNotFoundError:  # the shared real-data folder is not on this machine
            return False, None
        return path.exists(), str(path)
    hub_id = m.get("hub_id")
    if not hub_id:
        return False, None
    try:
        from huggingface_hub import constants
    except ImportError:
        return False, None
    datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets")
    for path in (datasets_cache / hub_id.replace("/", "___"),
                 Path(constants.HF_HUB_CACHE) / ("datasets--" + hub_id.replace("/", "--"))):
        if path.is_dir():
            return True, str(path)
    return False, None


def _manifest_local_path(m: Mapping[str, Any]) -> Path:
    root_kind = m.get("local_root", "repo")
    if root_kind == "realdata":
        root = realdata_dir()
        if root is None:
            raise FileNotFoundError(
                f"dataset {m['name']!r} reads {m['local_file']!r} from the shared real-data folder, "
                "which is not present (expected ../shared/realdata beside the checkout, or set "
                "$ANCHORVIZ_REALDATA)"
            )
    elif root_kind == "repo":
        root = REPO_ROOT
    else:
        raise DataError(f"{m['manifest_path']}: local_root must be 'realdata' or 'repo', got {root_kind!r}")
    return Path(root) / m["local_file"]


# ----------------------------------------------------------------------------------------------
# main entry
# ----------------------------------------------------------------------------------------------


def _looks_like_path(s: str) -> bool:
    return (s.startswith(("/", ".", "~")) or "\\" in s or _kind(Path(s)) is not None
            or s.lower().endswith(".gz"))


def _dataset_name_from_path(p: Path) -> str:
    name = _strip_gz(p.name)
    kind = _kind(Path(name))
    return name[: -len(kind)] if kind and p.is_file() else name


def _sniff_adapter(records: Sequence[Any], columns: Sequence[str]) -> str:
    """HelpSteer3 rows and HH transcripts are recognised by their columns; else generic."""
    cols = set(columns)
    if {"context", "response1", "response2", "overall_preference"} <= cols:
        return "helpsteer3"
    if {"chosen", "rejected"} <= cols and "prompt" not in cols:
        first = next((r for r in records if isinstance(r, Mapping)), {})
        if isinstance(first.get("chosen"), str) and _HH_MARK in first["chosen"]:
            return "hh"
    return "pairs"


def load_pairs(
    name_or_path: str | Path,
    split: str | None = None,
    *,
    column_map: Mapping[str, Any] | None = None,
    limit: int | None = None,
    domain: str | None = None,
    strict: bool = False,
    adapter: str | None = None,
    path: str | Path | None = None,
) -> tuple[pd.DataFrame, DropReport]:
    """Load a preference dataset as a pair table (:data:`PAIR_COLUMNS`) and its drop report.

    ``name_or_path`` is resolved in this order:

    1. a manifest name (:func:`list_datasets`): read from the Hugging Face Hub (its hub id,
       config and ``split``, default the manifest's ``default_split``), from its local file
       (``realdata-*``), from ``path`` (a local copy in the hub's row format), or, for the
       ``vader`` adapter, from :func:`anchorviz.data.vader.vader_pairs` (``domain`` picks the VADER
       domain);
    2. an existing local file or directory (``split`` selects files of a directory, e.g.
       ``test.jsonl`` or ``data/test-00000.parquet``), with the generic ``pairs`` adapter
       unless ``adapter`` is given (or the columns are plainly HH / HelpSteer3 rows);
    3. a Hugging Face Hub id, if ``column_map`` or ``adapter`` is given.

    Anything else is a ValueError listing the known names; a path that does not exist is a
    FileNotFoundError.

    ``column_map``: adapter field -> source column (e.g. ``{"prompt": "question", "chosen":
    "good", "rejected": "bad"}``; ``{"prompt": None}`` for data without prompts). ``limit``:
    stop after this many kept pairs. ``domain``: the ``domain`` label (default: the dataset
    name). ``strict``: raise :class:`DataError` on the first malformed row instead of dropping
    and counting it.
    """
    if column_map is not None and not isinstance(column_map, Mapping):
        raise TypeError(f"column_map must be a mapping, got {type(column_map).__name__}")
    name = str(name_or_path)
    manifests = _manifests()
    if name in manifests:
        m = manifests[name]
        if m["adapter"] == "vader":
            return _load_vader(m, domain, limit)
        spec = _adapter(adapter or m["adapter"])
        cmap = {**m["columns"], **dict(column_map or {})}
        dom = domain or m.get("domain") or m["name"]
        if path is not None:
            records, columns, source = _read_local(Path(path).expanduser(), split)
            use_split = split
        elif m.get("local_file"):
            records, columns, source = _read_local(_manifest_local_path(m), None)
            use_split = None
        else:
            use_split = split or m["default_split"]
            if m["splits"] and use_split not in m["splits"]:
                raise DataError(f"dataset {name!r} has splits {m['splits']}, not {use_split!r}")
            records, columns, source = _read_hub(m["hub_id"], m.get("config"), m.get("data_dir"),
                                                 use_split, m.get("revision"))
        return _run(records, columns, adapter=spec, column_map=cmap, options=m["options"],
                    dataset=m["name"], domain=dom, split=use_split, source=source,
                    strict=strict, limit=limit)
    if path is not None:
        raise ValueError(f"path= is for manifest names; {name!r} is not one (known: {sorted(manifests)})")
    p = Path(name).expanduser()
    if p.exists() or _looks_like_path(name):
        records, columns, source = _read_local(p, split)
        spec = _adapter(adapter or ("pairs" if column_map else _sniff_adapter(records, columns)))
        ds_name = _dataset_name_from_path(p)
        return _run(records, columns, adapter=spec, column_map=column_map, options={},
                    dataset=ds_name, domain=domain or ds_name, split=split, source=source,
                    strict=strict, limit=limit)
    if column_map is not None or adapter is not None:
        spec = _adapter(adapter or "pairs")
        use_split = split or "train"
        records, columns, source = _read_hub(name, None, None, use_split)
        return _run(records, columns, adapter=spec, column_map=column_map, options={},
                    dataset=name, domain=domain or name, split=use_split, source=source,
                    strict=strict, limit=limit)
    raise ValueError(
        f"unknown dataset {name!r}: not a manifest name, not an existing file or directory, and "
        f"no column_map given to read it as a Hugging Face Hub id. Known datasets: {sorted(manifests)}"
    )


def _load_vader(m: Mapping[str, Any], domain: str | None, limit: int | None) -> tuple[pd.DataFrame, DropReport]:
    vdomain = domain or m.get("vader_domain")
    try:
        from anchorviz.data.vader import vader_pairs
    except ImportError as err:
        raise ImportError(
            f"dataset {m['name']!r} uses the 'vader' adapter, which is anchorviz.data.vader.vader_pairs; "
            f"importing it failed: {err}"
        ) from err
    out = vader_pairs(vdomain)
    df = out[0] if isinstance(out, tuple) else out
    source = f"anchorviz.data.vader.vader_pairs({vdomain!r})"
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{source} returned a {type(df).__name__}, expected a pair table")
    report = DropReport(dataset=m["name"], source=source, total=len(df))
    df = dedupe_pairs(df, report)
    if limit is not None:
        df = df.iloc[:limit].reset_index(drop=True)
    df = validate_pairs(df, source)
    report.kept = len(df)
    logger.info("%s", report)
    return df, report


# ----------------------------------------------------------------------------------------------
# schema checks and dedupe on tables
# ----------------------------------------------------------------------------------------------


def _is_turn_list(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(t, Mapping) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str)
        for t in v
    )


def validate_pairs(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check a table against the pair schema; returns it with :data:`PAIR_COLUMNS` first.

    Raises :class:`DataError` naming ``source``, the column and the first offending row.
    Extra columns are kept (after the schema columns).
    """
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in PAIR_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{source}: missing column(s) {missing}; has {list(df.columns)}")
    ids = df["pair_id"].tolist()

    def bad(row: int, col: str, what: str, value: Any) -> DataError:
        return DataError(
            f"{source}: row {row} (pair_id={ids[row]!r}): column {col!r} must be {what}, "
            f"got {_describe(value)}"
        )

    for col in ("pair_id", "dataset", "domain"):
        for i, v in enumerate(df[col].tolist()):
            if not isinstance(v, str) or not v:
                raise bad(i, col, "a non-empty str", v)
    for i, v in enumerate(df["prompt"].tolist()):
        if not isinstance(v, str):
            raise bad(i, "prompt", "a str (may be empty)", v)
    chosen, rejected = df["chosen"].tolist(), df["rejected"].tolist()
    for col, vals in (("chosen", chosen), ("rejected", rejected)):
        for i, v in enumerate(vals):
            if not isinstance(v, str) or not v.strip():
                raise bad(i, col, "a non-empty str", v)
    for i, (c, r) in enumerate(zip(chosen, rejected)):
        if c == r:
            raise bad(i, "rejected", "different from chosen", r)
    for i, v in enumerate(df["prompt_turns"].tolist()):
        if v is not None and not _is_turn_list(v):
            raise bad(i, "prompt_turns", "None or a list of {role, content} dicts", v)
    for i, v in enumerate(df["meta"].tolist()):
        if not isinstance(v, Mapping):
            raise bad(i, "meta", "a dict", v)
    dup = pd.Series(ids).duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise DataError(f"{source}: row {i}: column 'pair_id' must be unique, {ids[i]!r} repeats")
    extra = [c for c in df.columns if c not in PAIR_COLUMNS]
    return df[PAIR_COLUMNS + extra]


def dedupe_pairs(df: pd.DataFrame, report: DropReport | None = None) -> pd.DataFrame:
    """Drop exact duplicate (prompt, chosen, rejected) rows (first kept) and chosen == rejected.

    Every removed row is counted in ``report`` (reasons ``duplicate`` and
    ``chosen_equals_rejected``, with the row position). Returns a re-indexed copy.
    """
    keep: list[int] = []
    seen: dict[tuple[Any, Any, Any], int] = {}
    for i, (p, c, r) in enumerate(zip(df["prompt"].tolist(), df["chosen"].tolist(),
                                      df["rejected"].tolist())):
        if c == r:
            if report is not None:
                report.add(CHOSEN_EQUALS_REJECTED, i, "chosen and rejected are identical")
            continue
        key = (p, c, r)
        if key in seen:
            if report is not None:
                report.add(DUPLICATE, i, f"exact duplicate of row {seen[key]}")
            continue
        seen[key] = i
        keep.append(i)
    return df.iloc[keep].reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# prompt-grouped splits
# ----------------------------------------------------------------------------------------------

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
