"""Compatibility alias: the code lives in ``anchorviz.data.artifacts`` (this name is that module)."""

import sys

from anchorviz.data import artifacts as _home

sys.modules[__name__] = _home
