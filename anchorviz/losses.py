"""Compatibility alias: the code lives in ``anchorviz.training.losses`` (this name is that module)."""

import sys

from anchorviz.training import losses as _home

sys.modules[__name__] = _home
