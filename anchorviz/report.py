"""Compatibility alias: the code lives in ``anchorviz.viz.report`` (this name is that module)."""

import sys

from anchorviz.viz import report as _home

sys.modules[__name__] = _home
