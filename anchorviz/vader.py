"""Compatibility alias: the code lives in ``anchorviz.data.vader`` (this name is that module)."""

import sys

from anchorviz.data import vader as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
