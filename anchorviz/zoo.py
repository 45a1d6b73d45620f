"""Compatibility alias: the code lives in ``anchorviz.models.zoo`` (this name is that module)."""

import sys

from anchorviz.models import zoo as _home

sys.modules[__name__] = _home
