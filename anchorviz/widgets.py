"""Compatibility alias: the code lives in ``anchorviz.viz.widgets`` (this name is that module)."""

import sys

from anchorviz.viz import widgets as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
