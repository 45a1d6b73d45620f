"""Writing an experiment's markdown, the one way every script here does it: printed, and
written to ``--doc`` when one is given (its folder made if needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["emit"]


def emit(lines: Sequence[str], doc: str | Path | None, *, echo: bool = True,
         header: str | None = None, append: bool = False) -> str:
    """Print a result's markdown lines (unless ``echo`` is False) and write them to ``doc``
    when one is given. ``append``: add them to the end of ``doc`` if it exists (a table
    growing run by run); ``header`` (not printed) opens a new ``doc``. Returns the text."""
    text = "\n".join(lines) + "\n"
    if echo:
        print(text)
    if doc:
        path = Path(doc)
        path.parent.mkdir(parents=True, exist_ok=True)
        if append and path.exists():
            with path.open("a") as f:
                f.write(text)
        else:
            path.write_text((header or "") + text)
    return text
