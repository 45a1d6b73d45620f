"""Compatibility alias: the code lives in ``anchorviz.training.reference`` (this name is that module)."""

import sys

from anchorviz.training import reference as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
