"""Compatibility alias: the code lives in ``anchorviz.training.tracking`` (this name is that module)."""

import sys

from anchorviz.training import tracking as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
