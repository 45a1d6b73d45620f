"""Compatibility alias: the code lives in ``anchorviz.analysis.capture`` (this name is that module)."""

import sys

from anchorviz.analysis import capture as _home

sys.modules[__name__] = _home
