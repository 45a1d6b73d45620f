"""Compatibility alias: the code lives in ``anchorviz.viz.plots`` (this name is that module)."""

import sys

from anchorviz.viz import plots as _home

sys.modules[__name__] = _home
