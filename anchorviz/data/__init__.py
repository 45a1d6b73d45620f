"""Stage 1, the pairs: one schema, adapters and readers, prompt-grouped splits, the embedded VADER
data and the teaching artefact.

``pairs`` (schema, adapters, readers, splits), ``vader`` (the default data), ``artifacts`` (the
source-only cue). The named datasets' manifests are package data in ``anchorviz/manifests/``.
``anchorviz.data`` was one module before the package was laid out by stage: its names are
re-exported here, so ``from anchorviz.data import load_pairs`` keeps working.
"""

from anchorviz.data import pairs
from anchorviz.data.pairs import *  # noqa: F403  (the former anchorviz.data module's names)

__all__ = list(pairs.__all__)
