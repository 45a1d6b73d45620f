"""Writing an experiment's markdown: printed, and written to ``--doc`` when one is given."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["emit"]


def emit(lines: Sequence[str], doc: str | Path | None) -> str:
    """Print a result's markdown lines and write them to ``doc`` when one is given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if doc:
        Path(doc).write_text(text)
    return text
