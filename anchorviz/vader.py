"""Compatibility alias: the code lives in ``anchorviz.data.vader`` (this name is that module)."""

import sys

from anchorviz.data import vader as _home

sys.modules[__name__] = _home
