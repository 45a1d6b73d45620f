"""Compatibility alias: the code lives in ``anchorviz.pipeline.analyse`` (this name is that module)."""

import sys

from anchorviz.pipeline import analyse as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
