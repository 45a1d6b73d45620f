"""Compatibility alias: the code lives in ``anchorviz.training.loop`` (this name is that module)."""

import sys

from anchorviz.training import loop as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
