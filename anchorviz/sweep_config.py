"""Sweep configs: a base `RunConfig` and a grid (methods, ANCHOR lambdas and layers, seeds,
artefact strengths, detail seeds), read from YAML / dicts and validated, with ``--set``
overrides; `expand_sweep` turns one into the student configs of its grid. The run config itself
is `anchorviz.config`; `anchorviz.pipeline.sweep.sweep` runs a sweep.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from anchorviz.choices import METHODS
from anchorviz.config import (
    ConfigError,
    RunConfig,
    coerce_number,
    config_from_dict,
    parse_sets,
    read_settings_file,
    set_dotted,
    with_overrides,
)

__all__ = ["SweepConfig", "apply_sweep_sets", "expand_sweep", "load_sweep", "sweep_from_dict"]


@dataclass
class SweepConfig:
    base: RunConfig
    methods: list[str] = field(default_factory=lambda: ["naive", "anchor"])
    anchor_lambdas: list[float] = field(default_factory=lambda: [0.1, 1.0])
    anchor_layers: list[str] = field(default_factory=lambda: ["last"])
    seeds: list[int] = field(default_factory=lambda: [0])
    artifact_strengths: list[float] | None = None  # None: the base config's strength
    # seeds on which the whole grid (every method, the ceiling) runs; on the other seeds only
    # the naive student and its teacher, the runs the failure-mode verdict needs, scored
    # without a hidden-state capture. None: every seed runs the whole grid, captures included
    detail_seeds: list[int] | None = None


# the grid lists of numbers, with the type of each list's items
_NUMERIC_GRID = {"anchor_lambdas": float, "seeds": int, "artifact_strengths": float,
                 "detail_seeds": int}
_NUMBER_WORD = {float: "a number", int: "a whole number (1e3 reads as 1000)"}


def sweep_from_dict(d: dict, where: str = "sweep") -> SweepConfig:
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping with 'base' and 'grid'")
    if "overlay" in d:  # demo-quick.yaml, demo-echo.yaml: settings laid over another file
        raise ConfigError(f"{where}: an overlay of {d.get('of', 'another file')}, not a sweep file "
                          "on its own; `anchorviz demo` (--quick, --scenario) lays it over that "
                          "file")
    unknown = sorted(set(d) - {"base", "grid"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: ['base', 'grid']")
    base = config_from_dict(d.get("base") or {}, f"{where}.base")
    # a key left at None means its default (the sweep.yaml a sweep writes holds
    # artifact_strengths / detail_seeds: null), so a sweep's own file reads back
    grid = {k: v for k, v in (d.get("grid") or {}).items() if v is not None}
    allowed = {"methods", "anchor_lambdas", "anchor_layers", "seeds", "artifact_strengths",
               "detail_seeds"}
    unknown = sorted(set(grid) - allowed)
    if unknown:
        raise ConfigError(f"{where}.grid: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"{where}.grid.{k}: expected a non-empty list, got {v!r}")
        if k in _NUMERIC_GRID:  # the config fields' coercion: '2e-2' -> 0.02, 1e3 -> 1000
            tp = _NUMERIC_GRID[k]
            grid[k] = [coerce_number(x, tp) for x in v]
            for x in grid[k]:
                if isinstance(x, bool) or not isinstance(x, (float, int) if tp is float else int):
                    raise ConfigError(f"{where}.grid.{k}: {x!r} is not {_NUMBER_WORD[tp]}")
    sw = SweepConfig(base=base, **grid)
    for m in sw.methods:
        if m not in METHODS:
            raise ConfigError(f"{where}.grid.methods: {m!r} is not one of {METHODS}")
    for lam in sw.anchor_lambdas:
        if not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
            raise ConfigError(f"{where}.grid.anchor_lambdas: {lam!r} must be a finite number >= 0")
    if sw.detail_seeds is not None:
        extra = sorted(set(sw.detail_seeds) - set(sw.seeds))
        if extra:
            raise ConfigError(f"{where}.grid.detail_seeds: {extra} not among grid.seeds "
                              f"{sw.seeds}; detail seeds are the seeds that also run the whole "
                              "grid")
    for c in expand_sweep(sw):  # validates every expanded config (layers, strengths ...)
        c.validate()
    return sw


def load_sweep(path: str | Path) -> SweepConfig:
    data, path = read_settings_file(path, "sweep", "give 'base' and 'grid' (or '{}' to run "
                                     "the default grid on purpose)")
    return sweep_from_dict(data, str(path))


def expand_sweep(sw: SweepConfig) -> list[RunConfig]:
    """Every student config of the grid (teacher / ceiling are implied and shared). With
    ``detail_seeds``, seeds outside it get only the naive student (and its teacher), no
    ceiling, scored without a hidden-state capture (``capture.enabled`` False: what a
    failure-mode verdict reads is scores; drift and projections are the detail seeds')."""
    out = []
    strengths = sw.artifact_strengths or [sw.base.data.artifact_strength]
    detail = None if sw.detail_seeds is None else set(sw.detail_seeds)
    for strength in strengths:
        for seed in sw.seeds:
            full = detail is None or seed in detail
            for m in sw.methods if full else [m for m in sw.methods if m == "naive"]:
                grid = ([(lam, lay) for lam in sw.anchor_lambdas for lay in sw.anchor_layers]
                        if m == "anchor" else [(0.0, "last")])
                for lam, lay in grid:
                    over = {"seed": seed, "data.artifact_strength": float(strength),
                            "method.name": m, "method.anchor_lambda": float(lam),
                            "method.anchor_layers": lay, "ceiling": sw.base.ceiling and full}
                    if not full:
                        over["capture.enabled"] = False
                    out.append(with_overrides(sw.base, **over))
    return out


def apply_sweep_sets(sw: SweepConfig, items: list[str] | None) -> SweepConfig:
    """A `SweepConfig` with ``--set`` overrides: a key names a setting of the base run config
    (``method.anchor_lambda``, also written ``base.method.anchor_lambda``), or ``grid.<name>``
    a list of the grid (``grid.seeds=[0,1,2]``)."""
    sets = parse_sets(items)
    if not sets:
        return sw
    base = sw.base.to_dict()
    grid = {f.name: getattr(sw, f.name) for f in dataclasses.fields(sw)
            if f.name != "base" and getattr(sw, f.name) is not None}
    for key, value in sets:
        if key.startswith("grid."):
            name = key[len("grid."):]
            allowed = [f.name for f in dataclasses.fields(sw) if f.name != "base"]
            if name not in allowed:
                raise ConfigError(f"--set {key}: unknown grid key {name!r}. Known: "
                                  f"{', '.join(allowed)}")
            grid[name] = value if isinstance(value, list) else [value]
        else:
            prefix = "base." if key.startswith("base.") else ""
            set_dotted(base, RunConfig, key[len(prefix):], value, root=prefix)
    return sweep_from_dict({"base": base, "grid": grid}, where="--set")
