"""Compatibility alias: the code lives in ``anchorviz.analysis.drift`` (this name is that module)."""

import sys

from anchorviz.analysis import drift as _home

sys.modules[__name__] = _home
