"""Compatibility alias: the code lives in ``anchorviz.training.losses`` (this name is that module)."""

import sys

from anchorviz.training import losses as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
