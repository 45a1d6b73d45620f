"""anchorviz: weak-to-strong reward models, representation drift and ANCHOR.

The package is laid out by the stage a preference pair goes through (docs/ARCHITECTURE.md):
``data`` (load, split, artefact) -> ``models`` (reward model, tokenization, zoo) -> ``training``
(losses, reference, the loop) -> ``analysis`` (capture, drift, projection, metrics, summaries)
-> ``pipeline`` (store, steps, sweeps, the results table) -> ``viz`` (figures, widgets, report);
``config`` holds the run and sweep configs and ``cli`` the command line.

The names a user imports first are here, loaded on first use (``import anchorviz`` stays cheap)::

    from anchorviz import RunConfig, run, plots
"""

import importlib
import logging

__version__ = "0.2.0"  # also the package version (pyproject: dynamic); CHANGELOG.md

# name -> the module that holds it (a module itself where the name is the module's last part)
_PUBLIC = {
    "RunConfig": "anchorviz.config",
    "SweepConfig": "anchorviz.config",
    "load_config": "anchorviz.config",
    "load_sweep": "anchorviz.config",
    "run": "anchorviz.pipeline.sweep",
    "sweep": "anchorviz.pipeline.sweep",
    "results_table": "anchorviz.pipeline.results",
    "load_pairs": "anchorviz.data.readers",
    "linear_cka": "anchorviz.analysis.drift",
    "SweepExplorer": "anchorviz.viz.widgets",
    "plots": "anchorviz.viz.plots",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'anchorviz' has no attribute {name!r}")
    module = importlib.import_module(_PUBLIC[name])
    value = module if module.__name__.endswith("." + name) else getattr(module, name)
    globals()[name] = value  # once: later look-ups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


logging.getLogger(__name__).addHandler(logging.NullHandler())
