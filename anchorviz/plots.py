"""Compatibility alias: the code lives in ``anchorviz.viz.plots`` (this name is that module)."""

import sys

from anchorviz.viz import plots as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
