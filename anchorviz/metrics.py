"""Compatibility alias: the code lives in ``anchorviz.analysis.metrics`` (this name is that module)."""

import sys

from anchorviz.analysis import metrics as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
