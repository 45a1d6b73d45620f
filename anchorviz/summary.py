"""Compatibility alias: the code lives in ``anchorviz.analysis.summary`` (this name is that module)."""

import sys

from anchorviz.analysis import summary as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
