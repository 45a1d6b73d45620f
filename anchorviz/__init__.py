"""anchorviz: weak-to-strong reward models, representation drift and ANCHOR.

The package is laid out by pipeline stage (see README, "Python API"):
data -> models -> losses / train -> capture -> drift / projection -> plots / widgets,
with experiment / store / cli orchestrating whole runs and sweeps.
"""

import logging

__all__ = ["__version__"]

__version__ = "0.2.0"  # also the package version (pyproject: dynamic); CHANGELOG.md

logging.getLogger(__name__).addHandler(logging.NullHandler())
