"""Compatibility alias: the code lives in ``anchorviz.training.tracking`` (this name is that module)."""

import sys

from anchorviz.training import tracking as _home

sys.modules[__name__] = _home
