"""The demo's statement of how far its seeds can be trusted: its numbers are recomputed from the
committed document of the fresh-seed store it rests on (seeds 40-49, the default scenario and evaluation sizes), and
it is said only for the scenario they measured."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from anchorviz.pipeline.demo import (
    FRESH_SEED_GAP,
    POWER_GOAL,
    demo_sweep,
    power_note,
    verdict_power,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
FRESH = "seed_noise/fresh_seeds40-49_eval_sizes.md"


def _gaps(name: str) -> np.ndarray:
    """The per-seed WRG - AOG column of a seed-noise document (points)."""
    rows = re.findall(r"^\| (\d+) \| [+-][\d.]+ \| [+-][\d.]+ \| ([+-][\d.]+) \|",
                      (DOCS / name).read_text(), flags=re.M)
    assert len(rows) == 10, name
    return np.array([float(g) for _, g in rows])


def _power(mean: float, sd: float, n: int, alpha: float = 0.025) -> float:
    """One-sided paired t-test of WRG - AOG > 0 with ``n`` seeds, by hand (the noncentral t's
    cdf at the test's critical value)."""
    nc = mean / (sd / np.sqrt(n))
    return float(1 - stats.nct.cdf(stats.t.ppf(1 - alpha, n - 1), n - 1, nc))


def test_the_gap_the_demo_states_is_that_of_the_fresh_seeds():
    g = _gaps(FRESH)
    assert FRESH_SEED_GAP["mean"] == pytest.approx(g.mean(), abs=0.01)
    # the document's gaps are rounded to 0.1: its SD to about 0.02
    assert FRESH_SEED_GAP["sd"] == pytest.approx(g.std(ddof=1), abs=0.02)
    text = (DOCS / FRESH).read_text()
    assert re.search(rf"mean \+{FRESH_SEED_GAP['mean']:.2f}, SD over seeds "
                     rf"{FRESH_SEED_GAP['sd']:.2f}", text)
    # the scenario it measured is the demo's default
    d = demo_sweep().base.data
    assert d.artifact_strength == FRESH_SEED_GAP["strength"]
    store_doc = (DOCS / "demo" / "fresh_seeds40-49_eval750x500.md").read_text()  # the command of the store
    assert "--strengths 0.9 " in store_doc and "artifact_teacher_visibility=0.5" in store_doc
    assert "--seeds 40 41 42 43 44 45 46 47 48 49 " in store_doc
    assert d.artifact_teacher_visibility == 0.5
    # ... at the demo's evaluation sizes (the power is that of these sizes)
    assert "--sizes 500 500 150 750 500 " in store_doc
    assert (d.source_test, d.target_test) == (FRESH_SEED_GAP["source_test"],
                                              FRESH_SEED_GAP["target_test"]) == (750, 500)
    assert "750 source-test pairs, 500 pairs per target" in text


def test_verdict_power_is_the_noncentral_t():
    m, s = FRESH_SEED_GAP["mean"], FRESH_SEED_GAP["sd"]
    for n in (2, 3, 5, 10):
        assert verdict_power(n) == pytest.approx(_power(m, s, n), abs=1e-9)
    # the document's own five-seed power at the demo's evaluation sizes (rounded to a percent)
    row = re.search(r"^\| 750 \| 500 \| [\d.]+ \| (\d+)% \|", (DOCS / FRESH).read_text(),
                    flags=re.M)
    assert row and int(row.group(1)) == round(100 * verdict_power(5))
    # a worked value: a gap of one SD with five seeds
    assert verdict_power(5, mean=1.0, sd=1.0) == pytest.approx(_power(1.0, 1.0, 5))
    assert 0.4 < verdict_power(5, mean=1.0, sd=1.0) < 0.5
    assert np.isnan(verdict_power(1))


def test_the_note_is_said_only_where_it_was_measured():
    five = power_note(5)
    assert verdict_power(5) >= POWER_GOAL
    assert "99.7%" in five and "above the 90%" in five and "40-49" in five
    three = power_note(3)  # below the goal: says so, and how many seeds reach it
    assert "below the 90%" in three and "weak evidence" in three and "4 seeds reach 96%" in three
    assert power_note(1) == ""  # one seed: no verdict to qualify
    assert power_note(5, scenario="marker") == ""
    assert power_note(5, strength=0.8) == ""  # the earlier default: not what was measured
    assert power_note(5, visibility=0.25) == ""
    assert power_note(5, visibility=0.5) == power_note(5, strength=0.9) == five
