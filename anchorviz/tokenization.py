"""Compatibility alias: the code lives in ``anchorviz.models.tokenization`` (this name is that module)."""

import sys

from anchorviz.models import tokenization as _home

__all__ = list(_home.__all__)

sys.modules[__name__] = _home
