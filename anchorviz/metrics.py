"""Compatibility alias: the code lives in ``anchorviz.analysis.metrics`` (this name is that module)."""

import sys

from anchorviz.analysis import metrics as _home

sys.modules[__name__] = _home
