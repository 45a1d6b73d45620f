"""The one pair schema: its columns, the drop reasons and report, schema checks and dedupe.

Every dataset, whatever its source format, becomes one pair table: a `pandas.DataFrame` with
columns `PAIR_COLUMNS` (docs/ARCHITECTURE.md, "The pair schema"). Rows are never dropped
silently: malformed rows, ties, duplicates and ``chosen == rejected`` pairs are counted per
reason in a `DropReport`; ``strict=True`` turns a malformed row into a `DataError`.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

__all__ = [
    "BAD_LABEL",
    "CHOSEN_EQUALS_REJECTED",
    "DUPLICATE",
    "EMPTY_RESPONSE",
    "MALFORMED_DIALOGUE",
    "MALFORMED_REASONS",
    "MALFORMED_ROW",
    "MISSING_FIELD",
    "NOT_A_STRING",
    "PAIR_COLUMNS",
    "TIE",
    "DataError",
    "DropReport",
    "dedupe_pairs",
    "is_blank",
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


class DataError(ValueError):
    """A data source does not have the form it should (names the source, row, field, expectation)."""


# drop report


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


def describe_value(v: Any) -> str:
    s = repr(v)
    return f"{type(v).__name__} {s[:60]}{'...' if len(s) > 60 else ''}"


# schema checks and dedupe on tables


def _is_turn_list(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(t, Mapping) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str)
        for t in v
    )


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing a tokenizer keeps: only whitespace and invisible
    format / control characters (a lone zero-width space U+200B, a BOM, U+200D ...), which
    BERT-style tokenizers drop, leaving a response of no tokens."""
    return all(ch.isspace() or unicodedata.category(ch) in ("Cf", "Cc", "Zs", "Zl", "Zp")
               for ch in text)


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
            f"got {describe_value(value)}"
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
            if not isinstance(v, str) or is_blank(v):
                raise bad(i, col, "a non-empty str", v)  # is_blank: no visible character
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
