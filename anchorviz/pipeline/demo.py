"""The demo scenario that ``anchorviz demo`` runs: its banner texts, its scenarios and its sweep.

VADER sentiment pairs, source movie reviews, targets Amazon / NYT / tweets, a source-only marker
planted in the chosen texts. Its settings live in one file shipped with the package,
``anchorviz/configs/demo.yaml`` (`demo_file`; a sweep file that ``anchorviz sweep`` also runs);
`demo_sweep` reads it into the `SweepConfig` (teacher, ceiling, naive and ANCHOR at a small lambda
grid). The notebooks, the experiment scripts and the tests build the same sweep (also importable
as ``anchorviz.cli.demo_sweep``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DEFAULT_SCENARIO",
    "DEMO_NOTE",
    "HIDDEN_NOTE",
    "SCENARIOS",
    "demo_file",
    "demo_note",
    "demo_settings",
    "demo_sweep",
]

DEMO_NOTE = (
    "DEMO SCENARIO (constructed): VADER human sentiment ratings, source = movie reviews, targets = "
    "Amazon / NYT / tweets. A source-only artefact is planted: the marker ' [verified]' is appended "
    "to the CHOSEN text of a fraction {s:.0%} of source pairs (teacher_train, w2s_train, val, "
    "source_test) and is {mode} in the targets. It is a constructed shortcut, not a property of "
    "the data."
)
HIDDEN_NOTE = (
    " The weak teacher can read the marker on only {v:.0%} of the marked pairs (on the others its "
    "copy of the text lacks it, as if the marker lay beyond its context window); the strong "
    "student reads every marker. Where the teacher reads the marker its labels follow it, so a "
    "student can learn the marker from those pairs and apply it to the marked pairs the teacher "
    "got wrong: an in-distribution gain made of the shortcut, which the targets (no marker) "
    "cannot use."
)
# scenario -> (teacher visibility of the marker, what it shows)
SCENARIOS = {
    "hidden-cue": 0.5,  # the teacher reads half of the markers
    "marker": 1.0,      # the teacher reads every marker (the contrast: it learns the shortcut too)
}
DEFAULT_SCENARIO = "hidden-cue"  # the one that shows the failure mode (docs/RESULTS.md)


def demo_note(strength: float, mode: str, visibility: float) -> str:
    """The banner the demo prints first: what is planted and how the teacher sees it."""
    note = DEMO_NOTE.format(s=strength, mode=mode)
    if visibility < 1:
        note += HIDDEN_NOTE.format(v=visibility)
    return note


def demo_file(quick: bool = False) -> Path:
    """The YAML file that holds the demo's settings (``demo.yaml``, shipped inside the package),
    or the smoke-size settings that ``--quick`` lays over it (``demo-quick.yaml``)."""
    return Path(__file__).resolve().parent.parent / "configs" / (
        "demo-quick.yaml" if quick else "demo.yaml")


def _merged(base: dict, over: dict) -> dict:
    """``base`` with ``over`` laid on it, mapping by mapping (a value that is not a mapping
    replaces the one below it)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def demo_settings(quick: bool = False) -> dict:
    """The demo's sweep file as a mapping (``base`` and ``grid``): `demo_file`, with
    ``demo-quick.yaml`` laid over it when ``quick``."""
    from anchorviz.pipeline.store import read_yaml

    settings = read_yaml(demo_file())
    return _merged(settings, read_yaml(demo_file(quick=True))) if quick else settings


def demo_sweep(strength: float = 0.8, seeds: tuple[int, ...] = (0,), quick: bool = False,
               scenario: str = DEFAULT_SCENARIO, visibility: float | None = None):
    """The demo (`demo_settings`): teacher, ceiling, naive and ANCHOR at a small lambda grid, in
    one of the `SCENARIOS` (``visibility`` overrides the scenario's teacher visibility of the
    marker; ``strength`` the fraction of marked source pairs)."""
    from anchorviz.config import ConfigError, sweep_from_dict  # torch: only when used

    if scenario not in SCENARIOS:
        raise ConfigError(f"--scenario must be one of {sorted(SCENARIOS)}, got {scenario!r}")
    settings = demo_settings(quick)
    data = settings["base"]["data"]
    data["artifact_strength"] = float(strength)
    data["artifact_teacher_visibility"] = (SCENARIOS[scenario] if visibility is None
                                           else float(visibility))
    settings["grid"]["seeds"] = [int(s) for s in seeds]
    return sweep_from_dict(settings, str(demo_file(quick)))
