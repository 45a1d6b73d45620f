"""Dataset adapters: one source row (HH-RLHF, HelpSteer3, UltraFeedback, PKU-SafeRLHF,
RAIL-HH-10K, generic prompt / chosen / rejected columns) -> one pair of the schema.

`adapt_records` is the driver: records -> pair table + drop report. Multi-turn prompts keep their
turns, as text in ``prompt`` (HH style, ``"\\n\\nHuman: ...\\n\\nAssistant:"``; a single
user turn is its plain content, except for HH-derived datasets which keep the HH form) and as a
list of ``{"role", "content"}`` dicts in ``prompt_turns``.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from anchorviz.data.schema import (
    BAD_LABEL,
    CHOSEN_EQUALS_REJECTED,
    DUPLICATE,
    EMPTY_RESPONSE,
    MALFORMED_DIALOGUE,
    MALFORMED_REASONS,
    MALFORMED_ROW,
    MISSING_FIELD,
    NOT_A_STRING,
    PAIR_COLUMNS,
    TIE,
    DataError,
    DropReport,
    describe_value,
    is_blank,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ADAPTERS",
    "adapt_records",
    "parse_hh_turns",
    "render_turns",
    "split_hh_dialogue",
]


HH_MARK = "\n\nAssistant:"


_HH_STRICT_RE = re.compile(r"\n\n(Human|Assistant):")


_HH_LOOSE_RE = re.compile(r"(?:^|\n)[ \t]*(Human|Assistant):")


_ROLE_LABEL = {"user": "Human", "human": "Human", "assistant": "Assistant", "system": "System"}


_LABEL_ROLE = {"Human": "user", "Assistant": "assistant"}


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
class BadRecord:
    """A source record that could not even be parsed (invalid JSON line, not an object)."""

    message: str


# dialogue helpers


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
    return body + HH_MARK


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
    cut = chosen.rfind(HH_MARK, 0, i)  # the last marker lying wholly inside the common prefix
    if cut == -1:
        raise ValueError('the two transcripts share no dialogue prefix ending in "\\n\\nAssistant:"')
    end = cut + len(HH_MARK)
    return chosen[:end], chosen[end:].strip(), rejected[end:].strip()


# field access (row -> typed values, or a _RowProblem)

_MISSING = object()


def _is_missing(v: Any) -> bool:
    return v is _MISSING or v is None or (isinstance(v, float) and math.isnan(v))


def _get(row: Mapping[str, Any], col: str) -> Any:
    return row.get(col, _MISSING)


def _req_str(row: Mapping[str, Any], col: str, *, empty_ok: bool = False) -> str:
    v = _get(row, col)
    if _is_missing(v):
        raise _RowProblem(MISSING_FIELD, col, "is missing", "a string")
    if not isinstance(v, str):
        raise _RowProblem(NOT_A_STRING, col, f"is a {describe_value(v)}", "a string")
    if not empty_ok and is_blank(v):
        raise _RowProblem(EMPTY_RESPONSE, col, "is empty (or only whitespace / invisible "
                          "characters, no token after tokenisation)", "a non-empty string")
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
        raise _RowProblem(MALFORMED_DIALOGUE, col, f"is a {describe_value(v)}", expected)
    out: list[dict[str, str]] = []
    for k, m in enumerate(v):
        if not isinstance(m, Mapping):
            raise _RowProblem(MALFORMED_DIALOGUE, col, f"message {k} is a {describe_value(m)}", expected)
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise _RowProblem(
                MALFORMED_DIALOGUE, col, f"message {k} has role {role!r}, content {describe_value(content)}",
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
    if is_blank(reply):
        raise _RowProblem(EMPTY_RESPONSE, col, "ends with an empty assistant reply",
                          "a non-empty assistant reply")
    return reply


def _plain_turns(prompt: str) -> list[dict[str, str]] | None:
    return [{"role": "user", "content": prompt}] if prompt.strip() else None


def _looks_hh(prompt: str) -> bool:
    return prompt.startswith("\n\nHuman:") and prompt.endswith(HH_MARK)


# adapters: one source row -> prompt / chosen / rejected / prompt_turns / extra meta

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
        if is_blank(reply):
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


# the driver: records -> pair table + drop report


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


def ordered_columns(records: Sequence[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        if isinstance(r, Mapping):
            for k in r:
                seen.setdefault(str(k), None)
    return list(seen)


def run_adapter(
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
            if isinstance(rec, BadRecord):
                raise _RowProblem(MALFORMED_ROW, "<row>", rec.message, "one JSON object per row")
            if not isinstance(rec, Mapping):
                raise _RowProblem(MALFORMED_ROW, "<row>", f"is a {describe_value(rec)}",
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
    return run_adapter(recs, ordered_columns(recs), adapter=adapter_for(adapter), column_map=column_map,
                options=dict(options or {}), dataset=dataset, domain=domain or dataset,
                split=split, source=source, strict=strict, limit=limit)


def adapter_for(name: str) -> _Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ValueError(
            f"unknown adapter {name!r}; known adapters: {sorted(ADAPTERS)} (and 'vader' via a manifest)"
        ) from None
