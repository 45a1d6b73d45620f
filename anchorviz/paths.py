"""Where anchorviz keeps things it downloads or converts (never inside the git tree)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """The cache root: ``$ANCHORVIZ_CACHE`` if set, else ``~/.cache/anchorviz``. Created on use."""
    root = os.environ.get("ANCHORVIZ_CACHE")
    path = Path(root).expanduser() if root else Path.home() / ".cache" / "anchorviz"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_subdir(name: str) -> Path:
    """A named folder under the cache root (``models``, ``datasets``, ``wheels`` ...)."""
    if not name or "/" in name or "\\" in name or name in {".", ".."}:
        raise ValueError(f"cache sub-folder name must be a plain name, got {name!r}")
    path = cache_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def realdata_dir() -> Path | None:
    """``../shared/realdata`` beside the checkout (or ``$ANCHORVIZ_REALDATA``), if it exists."""
    env = os.environ.get("ANCHORVIZ_REALDATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared" / "realdata")
    for c in candidates:
        if c.is_dir():
            return c
    return None
