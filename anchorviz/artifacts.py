"""Compatibility alias: the code lives in ``anchorviz.data.artifacts`` (this name is that module)."""

import sys

from anchorviz.data import artifacts as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
