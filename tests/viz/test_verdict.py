"""The demo's lead figure (`anchorviz.viz.verdict`): per-seed WRG / AOG, the mean gap with its
seed interval, and the shortcut's share of WRG, checked against hand-computed values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from fake_sweep import write_fake_sweep

from anchorviz.analysis.summary import failure_mode
from anchorviz.viz.common import load_results
from anchorviz.viz.verdict import shortcut_share, verdict_figure


def _trace(fig, name_start: str):
    (tr,) = [t for t in fig.data if (t.name or "").startswith(name_start)]
    return tr


def test_per_seed_points_and_the_mean_gap_are_the_verdicts_numbers(tmp_path: Path) -> None:
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0, 1, 2), methods=("naive",), lambdas=(),
                             layers=())
    res = load_results(sweep)
    fig = verdict_figure(results=res)
    naive = res[res["method"] == "naive"].sort_values("seed")
    np.testing.assert_allclose(_trace(fig, "WRG (in").x, 100 * naive["wrg"].to_numpy())
    np.testing.assert_allclose(_trace(fig, "AOG (out").x, 100 * naive["aog"].to_numpy())
    fm = failure_mode(res)
    gap = _trace(fig, "WRG - AOG")
    pooled = {k: 100 * fm["pooled"][k] for k in ("mean", "lo", "hi")}  # fractions -> points
    assert gap.x[0] == pytest.approx(pooled["mean"])
    assert gap.error_x.array[0] == pytest.approx(pooled["hi"] - pooled["mean"])
    assert gap.error_x.arrayminus[0] == pytest.approx(pooled["mean"] - pooled["lo"])
    # the gap is the mean of the per-seed WRG - AOG
    assert gap.x[0] == pytest.approx(float(np.mean(100 * (naive["wrg"] - naive["aog"]))))
    assert "failure mode" in fig.layout.title.text


def test_one_seed_draws_no_interval(tmp_path: Path) -> None:
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0,), methods=("naive",), lambdas=(),
                             layers=())
    fig = verdict_figure(results=load_results(sweep))
    assert not [t for t in fig.data if (t.name or "").startswith("WRG - AOG")]
    assert "one seed" in fig.layout.title.text


def test_no_student_runs_is_an_error(tmp_path: Path) -> None:
    sweep = write_fake_sweep(tmp_path / "s", seeds=(0, 1), methods=("confidence",), lambdas=(),
                             layers=())
    with pytest.raises(ValueError, match="no naive-student runs"):
        verdict_figure(results=load_results(sweep))


def _run(root: Path, name: str, correct: list[int], side: list, seen: list) -> Path:
    """A run folder holding only what `artifact_accuracy` reads: source-test scores with each
    pair's artefact side and whether the teacher saw it."""
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(
        {"data": {"artifact_kind": "marker", "artifact_strength": 0.8}}))
    n = len(correct)
    pd.DataFrame({"split": "source_test", "pair_id": [f"p{i}" for i in range(n)],
                  "r_chosen": [1.0 if c else 0.0 for c in correct], "r_rejected": [0.5] * n,
                  "artifact_side": side, "artifact_seen": pd.array(seen, dtype="boolean")}
                 ).to_parquet(d / "scores.parquet")
    return d


def test_shortcut_share_splits_wrg_by_pair_group(tmp_path: Path) -> None:
    # 10 pairs: 4 hidden-marked (teacher could not read), 2 seen-marked, 4 clean
    side = ["chosen"] * 6 + [None] * 4
    seen = [False] * 4 + [True] * 2 + [None] * 4
    teacher = _run(tmp_path, "t", [1, 0, 0, 0] + [1, 1] + [1, 1, 0, 0], side, seen)
    student = _run(tmp_path, "s", [1, 1, 1, 1] + [1, 1] + [1, 1, 1, 0], side, seen)
    share = shortcut_share(teacher, student)
    # hidden: teacher 1/4, student 4/4 -> +75 points on 4 of 10 pairs = +30
    assert share["hidden"] == pytest.approx(30.0)
    # WRG: teacher 5/10, student 9/10 -> +40; the rest +10 (one more clean pair right)
    assert share["hidden"] + share["other"] == pytest.approx(40.0)
    assert share["other"] == pytest.approx(10.0)


def test_shortcut_share_is_empty_without_hidden_markers(tmp_path: Path) -> None:
    side = ["chosen"] * 2 + [None] * 2
    seen = [True] * 2 + [None] * 2
    t = _run(tmp_path, "t", [1, 1, 0, 0], side, seen)
    s = _run(tmp_path, "s", [1, 1, 1, 0], side, seen)
    assert shortcut_share(t, s) == {}


def test_the_report_opens_with_the_verdict_figure(tmp_path: Path) -> None:
    from anchorviz.viz.report import write_report

    sweep = write_fake_sweep(tmp_path / "s", seeds=(0, 1, 2), methods=("naive", "anchor"),
                             lambdas=(1.0,), layers=("last",))
    html = write_report(sweep).read_text()
    lead = html.index("id='lead-figure'")
    assert lead < html.index("<h2>Results</h2>")  # on the first screen, before the table
    assert html.count("plotly.js v") >= 1 and html.index("plotly.js v") > lead  # js loads once


def test_no_lead_figure_without_naive_students(tmp_path: Path) -> None:
    from anchorviz.viz.report import write_report

    sweep = write_fake_sweep(tmp_path / "s", seeds=(0, 1), methods=("confidence",), lambdas=(),
                             layers=())
    assert "id='lead-figure'" not in write_report(sweep).read_text()


def test_the_demos_verdict_sentence_quotes_failure_modes_numbers(tmp_path: Path,
                                                                 monkeypatch) -> None:
    from anchorviz.pipeline.demo import verdict_sentence

    sweep = write_fake_sweep(tmp_path / "s", seeds=(0, 1, 2), methods=("naive",), lambdas=(),
                             layers=())
    res = load_results(sweep)
    fm = failure_mode(res)
    text = verdict_sentence(res)
    p = fm["pooled"]
    assert text.startswith("VERDICT over 3 seeds")
    assert f"WRG - AOG {100 * p['mean']:+.1f} [{100 * p['lo']:+.1f}, {100 * p['hi']:+.1f}]" in text
    p_text = "< 0.001" if p["p"] < 0.001 else f"{p['p']:.3f}"  # as the detailed lines say it
    assert f"(p {p_text})" in text and "strict form" in text and "p 0.000" not in text
    assert ("failure mode: YES" in text) == fm["failure_mode"]
    one = load_results(write_fake_sweep(tmp_path / "one", seeds=(0,), methods=("naive",),
                                        lambdas=(), layers=()))
    assert verdict_sentence(one).startswith("One seed") and "no verdict" in verdict_sentence(one)
    # a p below 0.001 reads "p < 0.001", never "p 0.000" (seen in the demo's output)
    import anchorviz.analysis.summary as summary_mod
    real = summary_mod.failure_mode

    def tiny_p(*args, **kwargs):
        out = real(*args, **kwargs)
        out["pooled"] = {**out["pooled"], "p": 2e-5}
        return out

    monkeypatch.setattr(summary_mod, "failure_mode", tiny_p)
    assert "(p < 0.001)" in verdict_sentence(res)
    two = load_results(write_fake_sweep(tmp_path / "two", seeds=(0, 1), methods=("naive",),
                                        lambdas=(), layers=(), artifact_strengths=(0.0, 0.8),
                                        artifact_kind="marker"))
    assert verdict_sentence(two).startswith("No single verdict")
