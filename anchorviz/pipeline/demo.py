"""The demo scenario that ``anchorviz demo`` runs: its banner texts, its scenarios and its sweep.

VADER sentiment pairs, source movie reviews, targets Amazon / NYT / tweets, a source-only marker
planted in the chosen texts. Its settings live in one file shipped with the package,
``anchorviz/configs/demo.yaml`` (`demo_file`; a sweep file that ``anchorviz sweep`` also runs);
`demo_sweep` reads it into the `SweepConfig` (teacher, ceiling, naive and ANCHOR at a small lambda
grid). Its options (strength, seeds, scenario, precision ...) and their defaults live in
`DemoOptions`, which the command line, the notebooks and the run planning
(`anchorviz.pipeline.plan`) read; the notebooks, the experiment scripts and the tests build the
same sweep.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from anchorviz.config import ConfigError
from anchorviz.paths import read_yaml
from anchorviz.precision import PRECISIONS, resolve_bf16
from anchorviz.sweep_config import SweepConfig, sweep_from_dict

__all__ = [
    "DEFAULT_SCENARIO",
    "DemoOptions",
    "DEMO_NOTE",
    "EarlyVerdict",
    "FLOAT32_ATTENTION",
    "ECHO_NOTE",
    "HIDDEN_NOTE",
    "OVERLAYS",
    "SCENARIOS",
    "demo_file",
    "demo_note",
    "demo_settings",
    "demo_sweep",
    "power_note",
    "verdict_power",
    "verdict_nodes",
    "verdict_sentence",
    "FRESH_SEED_GAP",
    "POWER_GOAL",
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
ECHO_NOTE = (
    "DEMO SCENARIO (constructed, a drift-borne cue): VADER human sentiment ratings, source = movie "
    "reviews, targets = Amazon / NYT / tweets. On {s:.0%} of the source pairs (teacher_train, "
    "w2s_train, val, source_test) the CHOSEN response's first word is appended to both texts (the "
    "'echo' cue; {mode} in the targets): which side it echoes tells the chosen one, a relation the "
    "pretrained student's last layer reads only partly, so a student that uses it has to drift. "
    "The weak teacher cannot learn the echo: on {v:.0%} of the marked pairs its copy carries the "
    "marker ' [verified]' on the chosen side instead (elsewhere nothing), so its labels follow the "
    "cue there, and the student can inherit it. Students and ceiling train longer (lr 1e-4, 4 "
    "epochs) to be able to learn the echo. It is a constructed shortcut, not a property of the "
    "data: the contrast in which ANCHOR, by holding the representation, could block the cue."
)
# scenario -> the teacher's visibility of the cue (what each shows: docs/RESULTS.md)
SCENARIOS = {
    "hidden-cue": 0.5,  # the teacher reads half of the markers: the failure mode
    "marker": 1.0,      # the teacher reads every marker (the contrast: it learns the shortcut too)
    "echo": 0.75,       # a drift-borne cue, passed on by a marker-reading teacher (demo-echo.yaml)
}
# scenarios with more settings than the visibility: the file laid over demo.yaml
OVERLAYS = {"echo": "demo-echo.yaml"}
DEFAULT_SCENARIO = "hidden-cue"  # the one that shows the failure mode (docs/RESULTS.md)


@dataclass(frozen=True)
class DemoOptions:
    """The options of ``anchorviz demo``, in one place: the command line builds its ``demo``
    arguments from these fields and their defaults (`from_args` reads them back), the notebooks
    read them (`anchorviz.pipeline.plan`), so a notebook that asks for the demo gets the demo's
    run ids. A new option is a new field here (with its command-line argument in
    ``anchorviz.cli``)."""

    #: fraction of source pairs whose chosen text carries the cue, in [0, 1] (None: the
    #: settings file's, 0.9)
    strength: float | None = None
    #: split-varying seeds (None: the settings file's, five; one with ``quick``); the first one
    #: runs the whole grid
    seeds: tuple[int, ...] | None = None
    quick: bool = False  # smoke-sized splits (``demo-quick.yaml``)
    scenario: str = DEFAULT_SCENARIO  # one of `SCENARIOS`
    #: fraction of the cue-carrying pairs on which the teacher reads the cue (None: the
    #: scenario's)
    visibility: float | None = None
    #: the arithmetic: None = the settings file's ("auto" in the default demo: bfloat16 autocast
    #: where the device runs it natively), or one of `anchorviz.precision.PRECISIONS`
    #: (``--fp32`` / ``--bf16``)
    precision: str | None = None

    @classmethod
    def from_args(cls, args) -> DemoOptions:
        """The options of a parsed ``anchorviz demo`` command line (its fields by name)."""
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
        if values["seeds"] is not None:
            values["seeds"] = tuple(int(s) for s in values["seeds"])
        return cls(**values)

    def sweep(self) -> SweepConfig:
        """The demo's sweep with these options (`demo_sweep`)."""
        return demo_sweep(strength=self.strength, seeds=self.seeds, quick=self.quick,
                          scenario=self.scenario, visibility=self.visibility,
                          precision=self.precision)

    def out_dir(self) -> str:
        """The demo's default folder: ``runs/demo`` (the marker scenarios share it, so notebook
        03 finds every teacher visibility there), ``runs/demo-<scenario>`` for a scenario with
        another cue (`OVERLAYS`), ``-quick`` after either with ``quick``; the same folder
        whatever the arithmetic (its runs have other run ids, never pooled)."""
        return ("runs/demo" + (f"-{self.scenario}" if self.scenario in OVERLAYS else "")
                + ("-quick" if self.quick else ""))


def demo_note(strength: float, mode: str, visibility: float, kind: str = "marker",
              teacher_form: str = "same") -> str:
    """The banner the demo prints first: what is planted and how the teacher sees it (``kind``
    and ``teacher_form``: the scenario's ``data.artifact_kind`` / ``artifact_teacher_form``)."""
    if kind == "echo" and teacher_form == "marker":
        return ECHO_NOTE.format(s=strength, mode=mode, v=visibility)
    note = DEMO_NOTE.format(s=strength, mode=mode)
    if visibility < 1:
        note += HIDDEN_NOTE.format(v=visibility)
    return note


def demo_file(quick: bool = False, scenario: str | None = None) -> Path:
    """The YAML file that holds the demo's settings (``demo.yaml``, shipped inside the package),
    the smoke-size settings that ``--quick`` lays over it (``demo-quick.yaml``), or a scenario's
    overlay (`OVERLAYS`)."""
    name = OVERLAYS[scenario] if scenario else "demo-quick.yaml" if quick else "demo.yaml"
    return Path(__file__).resolve().parent.parent / "configs" / name


def _merged(base: dict, over: dict) -> dict:
    """``base`` with ``over`` laid on it, mapping by mapping (a value that is not a mapping
    replaces the one below it)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def demo_settings(quick: bool = False, scenario: str | None = None) -> dict:
    """The demo's sweep file as a mapping (``base`` and ``grid``): `demo_file`, with
    ``demo-quick.yaml`` laid over it when ``quick``, and the scenario's overlay when it has one."""
    settings = read_yaml(demo_file())
    if quick:
        settings = _merged(settings, read_yaml(demo_file(quick=True))["overlay"])
    if scenario in OVERLAYS:
        settings = _merged(settings, read_yaml(demo_file(scenario=scenario))["overlay"])
    return settings


def demo_sweep(strength: float | None = None, seeds: tuple[int, ...] | None = None,
               quick: bool = False,
               scenario: str = DEFAULT_SCENARIO, visibility: float | None = None,
               bf16: bool | None = None, precision: str | None = None):
    """The demo (`demo_settings`): per seed a teacher and a naive student (the failure-mode
    verdict), and on the first seed also the gold ceiling and ANCHOR at a small lambda grid, in
    one of the `SCENARIOS` (``visibility`` overrides the scenario's teacher visibility of the
    marker; ``strength`` the fraction of marked source pairs, None: the file's, 0.9). ``seeds``
    None: the file's
    (five; one with ``quick``); given, the first of them is the one with the whole grid.
    ``bf16`` None: the file's arithmetic (bfloat16 autocast and eager attention for the default
    demo, float32 and the library's attention kernel for ``quick`` and the echo scenario); True
    / False sets it for teacher and students alike (the experiment scripts pass False: the
    arithmetic of the tables they reproduce; False also sets ``models.attention`` to "auto",
    the kernel those tables were computed with). ``precision`` (``anchorviz demo``'s
    ``--fp32`` / ``--bf16``; None: the file's, "auto" in the default demo): "fp32", "bf16" or
    "auto" (bfloat16 autocast where the device runs it natively, `anchorviz.precision`),
    resolved here as ``bf16`` is, so that a forced choice and an ``auto`` that resolves to it
    give the same runs: bfloat16 with the file's eager attention (the bfloat16 demo store's
    ids), float32 with `FLOAT32_ATTENTION`, the packed forward (`anchorviz.models.packed`;
    checked on fresh seeds 70-79, docs/RESULTS.md, issue 40)."""
    if scenario not in SCENARIOS:
        raise ConfigError(f"--scenario must be one of {sorted(SCENARIOS)}, got {scenario!r}")
    settings = demo_settings(quick, scenario)
    data = settings["base"]["data"]
    if strength is not None:
        data["artifact_strength"] = float(strength)
    data["artifact_teacher_visibility"] = (SCENARIOS[scenario] if visibility is None
                                           else float(visibility))
    chosen = False  # the demo's own choice of arithmetic (not the scripts' `bf16=`)
    if bf16 is None:
        # the demo's arithmetic, decided here once: forced, or the file's `auto` resolved
        # (`anchorviz.precision`); float32 takes `FLOAT32_ATTENTION`
        if precision is not None and precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        st = settings["base"].get("student_train") or {}
        value = ({"auto": "auto", "fp32": False, "bf16": True}[precision]
                 if precision is not None else st.get("bf16", "auto"))
        if precision is not None or value == "auto":
            try:
                bf16 = resolve_bf16(value, str(st.get("device", "cpu")))
            except ValueError as err:
                raise ConfigError(f"{demo_file()}: {err}") from None
            chosen = True
    if bf16 is not None:
        for part in ("teacher_train", "student_train"):
            settings["base"].setdefault(part, {})["bf16"] = bool(bf16)
        if not bf16:
            settings["base"].setdefault("models", {})["attention"] = (
                FLOAT32_ATTENTION if chosen else "auto")
    if seeds is not None:
        settings["grid"]["seeds"] = [int(s) for s in seeds]
        if "detail_seeds" in settings["grid"]:
            settings["grid"]["detail_seeds"] = [int(seeds[0])]
    return sweep_from_dict(settings, str(demo_file(quick, scenario if scenario in OVERLAYS else None)))


#: the attention setting of the demo where it computes in float32 (`auto` resolving to float32,
#: or ``--fp32``): the per-token arithmetic on real tokens only (`anchorviz.models.packed`), by
#: the rule pre-registered in docs/RESULTS.md and checked on fresh seeds 70-79 (issue 40)
FLOAT32_ATTENTION = "packed"


#: How far a few seeds can be trusted in the default scenario, measured on seeds nobody tuned on
#: (docs/RESULTS.md, issue 28): the mean and SD over seeds 40-49 of the naive student's WRG - AOG
#: (points) at the scenario and evaluation sizes they ran (the demo's defaults: 750 source-test
#: pairs, 500 per target). tests/pipeline/test_demo.py recomputes them from the committed document
#: that store wrote.
FRESH_SEED_GAP = {"mean": 6.92, "sd": 2.35, "seeds": "40-49", "strength": 0.9,
                  "source_test": 750, "target_test": 500, "scenario": DEFAULT_SCENARIO}
#: the power the demo aims for: five seeds should detect the failure mode this often
POWER_GOAL = 0.9


def verdict_power(n_seeds: int, mean: float | None = None, sd: float | None = None,
                  alpha: float = 0.025) -> float:
    """Estimated power of the ``n_seeds`` verdict (one-sided paired t-test of WRG - AOG > 0 at
    ``alpha``, the verdict's 95% interval) at a mean gap and seed SD (default: the fresh seeds'
    `FRESH_SEED_GAP`); an estimate, since both are themselves estimated."""
    from scipy import stats

    mean = FRESH_SEED_GAP["mean"] if mean is None else mean
    sd = FRESH_SEED_GAP["sd"] if sd is None else sd
    if n_seeds < 2 or sd <= 0:
        return float("nan")
    df = n_seeds - 1
    return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, mean / sd * n_seeds ** 0.5))


def _share(p: float) -> str:
    return f"{p:.1%}" if 0.99 <= p < 0.9995 else (">99.9%" if p >= 0.9995 else f"{p:.0%}")


def power_note(n_seeds: int, scenario: str = DEFAULT_SCENARIO, strength: float | None = None,
               visibility: float | None = None) -> str:
    """What the verdict of ``n_seeds`` seeds is worth in the scenario it was measured on (the
    default hidden-cue scenario at its default strength and visibility; ``strength`` None is
    that default); "" for any other setting, or one seed (which gives no verdict at all)."""
    g = FRESH_SEED_GAP
    vis = SCENARIOS[DEFAULT_SCENARIO] if visibility is None else visibility
    st = g["strength"] if strength is None else strength
    if (scenario != g["scenario"] or abs(st - g["strength"]) > 1e-9
            or abs(vis - SCENARIOS[DEFAULT_SCENARIO]) > 1e-9 or n_seeds < 2):
        return ""
    p = verdict_power(n_seeds)
    head = (f"How far {n_seeds} seeds can be trusted here: on ten seeds nobody tuned on "
            f"({g['seeds']}: WRG - AOG {g['mean']:+.1f}, SD {g['sd']:.1f} over seeds), "
            f"{n_seeds} seeds detect this failure mode with an estimated power of {_share(p)}")
    if p >= POWER_GOAL:
        return head + f", above the {POWER_GOAL:.0%} the demo aims for (docs/RESULTS.md)."
    more = next(n for n in range(n_seeds + 1, 100) if verdict_power(n) >= POWER_GOAL)
    return (head + f", below the {POWER_GOAL:.0%} the demo aims for, so a 'no' from "
            f"{n_seeds} seeds is weak evidence that it is absent; {more} seeds reach "
            f"{_share(verdict_power(more))} (about 2 CPU-minutes per added seed; docs/RESULTS.md).")


def verdict_sentence(results, method: str = "naive") -> str:
    """The demo's verdict in one plain sentence, from the same `failure_mode` the detailed
    lines use: WRG with its seed interval, WRG - AOG with its interval and p (pooled over the
    targets, and per target after Holm), the strict form beside it. Points throughout."""
    # pandas: the CLI imports this module for `anchorviz --help`, which loads no pandas
    from anchorviz.analysis.summary import failure_mode, p_text

    try:
        fm = failure_mode(results, method=method)
    except ValueError as err:  # several strengths or settings: the detailed lines go per setting
        return f"No single verdict: {err}."
    n = fm["n_seeds"]
    if fm["missing"] or n == 0:
        return f"No verdict: {fm['reason']}."
    w, p = fm["wrg"], fm["pooled"]

    def iv(b: dict) -> str:
        return f"{100 * b['mean']:+.1f} [{100 * b['lo']:+.1f}, {100 * b['hi']:+.1f}]"

    if n < 2 or p is None:
        return (f"One seed (WRG {100 * w['per_seed'][0]:+.1f}): no verdict, since one seed gives "
                "no interval over seeds; the default runs five (about 2 CPU-minutes each).")
    per_t = [t for t, b in fm["targets"].items() if b.get("not_carried_over")]
    head = f"VERDICT over {n} seeds (95% t-intervals over seeds): "
    gain = (f"the {method} student beats its weak teacher in distribution, WRG {iv(w)}, "
            if w["above_zero"] else f"the {method} student does not reliably beat its teacher "
            f"in distribution (WRG {iv(w)}), ")
    carry = (f"and that gain does not carry over out of distribution: WRG - AOG {iv(p)} "
             f"(p {p_text(p['p'])}) pooled over the targets" if p["not_carried_over"] else
             f"and WRG - AOG {iv(p)} (p {p_text(p['p'])}) is not above 0 beyond the interval "
             "pooled over the targets")
    carry += (f", and on {', '.join(per_t)} on its own after Holm" if per_t else
              ", on no target on its own after Holm")
    verdict = "the failure mode: YES" if fm["failure_mode"] else "the failure mode: no"
    strict = (f"; strict form (AOG {iv(p['aog'])} below 0): "
              + ("YES" if fm["strict"] else "no, the student still transfers better than its "
                 "teacher, by less than it gains at home"))
    return head + gain + carry + ". So " + verdict + strict + "."


def verdict_nodes(nodes) -> set[str]:
    """The ids of the nodes the demo's verdict reads: every naive student and what it needs
    (its teacher, the reference capture of a captured one). The first seed's gold ceiling and
    ANCHOR students are its illustration: the verdict does not wait for them."""
    by_id = {n.id: n for n in nodes}
    want: set[str] = set()
    todo = [n.id for n in nodes
            if n.kind == "student" and n.config.get("method", {}).get("name") == "naive"]
    while todo:
        nid = todo.pop()
        if nid not in want:
            want.add(nid)
            todo.extend(d for d in by_id[nid].deps if d in by_id)
    return want


class EarlyVerdict:
    """``on_done`` for the demo's sweep (`anchorviz.pipeline.runner.run_graph`): once every
    verdict node (`verdict_nodes`) is done and other nodes are still to come, ``say`` gets the
    verdict sentence of those runs (read from the store ``out``), with the time since ``start``.
    The demo runs the verdict's nodes first (``first=`` `wanted`), so a CPU that needs long for
    the whole demo prints its verdict early; no number depends on this order."""

    def __init__(self, nodes, out, say, start: float) -> None:
        self.want = verdict_nodes(nodes)
        self.others = {n.id for n in nodes} - self.want
        self.students = {n.id for n in nodes if n.id in self.want and n.kind == "student"}
        self.out, self.say, self.start = out, say, start
        self.done: set[str] = set()
        self.told = False

    def wanted(self, node) -> bool:
        return node.id in self.want

    def __call__(self, node, result) -> None:  # noqa: ARG002 - run_graph's on_done signature
        import time

        self.done.add(node.id)
        if self.told or len(self.students) < 2 or not self.want <= self.done \
                or self.others <= self.done:
            # not yet; one seed (no verdict to tell); or nothing left to wait for: the full
            # table comes now anyway
            return
        self.told = True
        from anchorviz.pipeline.plan import run_finished
        from anchorviz.pipeline.results import results_table

        if all(run_finished(self.out, r) for r in self.others - self.done):
            return  # the rest is in the store already (a demo run again): the table comes now

        df = results_table(self.out)
        df = df[df["run_id"].isin(self.students)].reset_index(drop=True)
        minutes = (time.monotonic() - self.start) / 60
        self.say(f"\n{verdict_sentence(df)}\n(after {minutes:.1f} min, from the teachers and "
                 "naive students; the first seed's gold ceiling and ANCHOR students are still "
                 "running, then the full table and the report follow)\n")
