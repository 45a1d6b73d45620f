"""Compatibility alias: the code lives in ``anchorviz.pipeline.analyse`` (this name is that module)."""

import sys

from anchorviz.pipeline import analyse as _home

sys.modules[__name__] = _home
