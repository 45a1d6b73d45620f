"""The demo scenario that ``anchorviz demo`` runs: its banner texts, its scenarios and its sweep.

VADER sentiment pairs, source movie reviews, targets Amazon / NYT / tweets, a source-only marker
planted in the chosen texts; `demo_sweep` builds the `SweepConfig` (teacher, ceiling, naive and
ANCHOR at a small lambda grid) with the settings tuned on source validation. The notebooks, the
bench scripts and the tests build the same sweep (also importable as ``anchorviz.cli.demo_sweep``).
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_SCENARIO",
    "DEMO_NOTE",
    "HIDDEN_NOTE",
    "SCENARIOS",
    "demo_note",
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


def demo_sweep(strength: float = 0.8, seeds: tuple[int, ...] = (0,), quick: bool = False,
               scenario: str = DEFAULT_SCENARIO, visibility: float | None = None):
    """The demo: teacher, ceiling, naive and ANCHOR at a small lambda grid, in one of the
    `SCENARIOS` (``visibility`` overrides the scenario's teacher visibility of the marker)."""
    from anchorviz.config import ConfigError, RunConfig, SweepConfig  # torch: only when used

    if scenario not in SCENARIOS:
        raise ConfigError(f"--scenario must be one of {sorted(SCENARIOS)}, got {scenario!r}")
    base = RunConfig()
    d = base.data
    d.artifact_kind, d.artifact_strength, d.artifact_target_mode = "marker", strength, "absent"
    d.artifact_teacher_visibility = SCENARIOS[scenario] if visibility is None else float(visibility)
    d.max_length = 48
    d.split_per_seed = True  # each seed draws its own split as well as its own training order
    if quick:  # a smoke-sized demo for CI and first looks (~1-2 minutes)
        d.teacher_train, d.w2s_train, d.val, d.source_test, d.target_test = 200, 300, 60, 150, 150
        base.capture.projection = "pca"
    else:
        d.teacher_train, d.w2s_train, d.val, d.source_test, d.target_test = 500, 500, 150, 300, 300
    # chosen on SOURCE validation (docs/RESULTS.md, "Hyper-parameters"): the zero-initialised
    # head needs a larger lr than the backbone, or the soft BT loss barely moves and the
    # teacher's labels stay near q = 0.5
    for tc in (base.teacher_train, base.student_train):
        tc.lr, tc.head_lr, tc.epochs, tc.batch_size = 5e-5, 2e-3, 2, 16
    return SweepConfig(base=base, methods=["naive", "anchor"],
                       anchor_lambdas=[1.0, 10.0] if not quick else [1.0],
                       anchor_layers=["last"], seeds=list(seeds))
