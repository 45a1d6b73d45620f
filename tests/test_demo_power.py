"""The demo's statement of how far five seeds can be trusted: its numbers are recomputed from the
committed documents of the fresh-seed stores (seeds 10-19, 20-29), and it is said only for the
scenario they measured."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from anchorviz.pipeline.demo import FRESH_SEED_POWER, power_note

DOCS = Path(__file__).resolve().parents[1] / "docs"
FRESH = ("results_seed_noise_fresh28_bf16.md", "results_seed_noise_fresh28_eager.md")


def _gaps(name: str) -> np.ndarray:
    """The per-seed WRG - AOG column of a seed-noise document (points)."""
    rows = re.findall(r"^\| (\d+) \| [+-][\d.]+ \| [+-][\d.]+ \| ([+-][\d.]+) \|",
                      (DOCS / name).read_text(), flags=re.M)
    assert len(rows) == 10, name
    return np.array([float(g) for _, g in rows])


def _power(gaps: np.ndarray, n: int, alpha: float = 0.025) -> float:
    """One-sided paired t-test of WRG - AOG > 0 with ``n`` seeds, at the gaps' mean and SD."""
    nc = gaps.mean() / (gaps.std(ddof=1) / np.sqrt(n))
    return float(1 - stats.nct.cdf(stats.t.ppf(1 - alpha, n - 1), n - 1, nc))


def test_the_power_the_demo_states_is_that_of_the_fresh_seeds():
    a, b = (_gaps(n) for n in FRESH)
    five = sorted([_power(a, 5), _power(b, 5)])
    assert FRESH_SEED_POWER["five_low"] == pytest.approx(five[0], abs=0.01)
    assert FRESH_SEED_POWER["five_high"] == pytest.approx(five[1], abs=0.01)
    assert FRESH_SEED_POWER["five_pooled"] == pytest.approx(_power(np.r_[a, b], 5), abs=0.01)
    assert FRESH_SEED_POWER["ten"] == pytest.approx(_power(b, 10), abs=0.01)
    # and the documents say the same power for five seeds at the demo's evaluation sizes
    for name, p in zip(FRESH, (_power(a, 5), _power(b, 5))):
        row = re.search(r"^\| 1500 \| 1000 \| [\d.]+ \| (\d+)% \|", (DOCS / name).read_text(),
                        flags=re.M)
        assert row and int(row.group(1)) == round(100 * p), name


def test_the_note_is_said_only_where_it_was_measured():
    five = power_note(5)
    assert "66%-97%" in five and "82%" in five and "weak evidence" in five and "98%" in five
    assert "about 98%" in power_note(10) and "66%" not in power_note(10)
    assert power_note(1) == ""  # one seed: no verdict to qualify
    assert power_note(5, scenario="marker") == ""
    assert power_note(5, strength=0.5) == ""
    assert power_note(5, visibility=0.25) == ""
    assert power_note(5, visibility=0.5) == five
