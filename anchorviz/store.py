"""Compatibility alias: the code lives in ``anchorviz.pipeline.store`` (this name is that module)."""

import sys

from anchorviz.pipeline import store as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
