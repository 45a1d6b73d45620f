"""Runs of different settings are never pooled as if they were seeds.

Three runs at three teacher visibilities (one seed each) are three conditions of one seed, not
one condition of three seeds: no mean over seeds, no seed interval, no repeated table rows
without the setting that tells them apart."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.analysis.summary import (
    failure_mode,
    setting_columns,
    split_by_settings,
    summarize,
    verdict_lines,
)
from anchorviz.viz.accuracy import accuracy_figure
from anchorviz.viz.common import load_results, metric_summary, select_condition
from anchorviz.viz.report import _table_html, verdict_blocks, write_report

VIS = (0.25, 0.5)


@pytest.fixture(scope="module")
def two_settings(tmp_path_factory):
    """One seed at each of two teacher visibilities (what notebook 03 used to leave in
    runs/demo next to the demo's own runs)."""
    root = tmp_path_factory.mktemp("pooling") / "sweep"
    write_fake_sweep(root, seeds=(0,), lambdas=(0.1,), layers=("last",),
                     methods=("naive", "anchor"), artifact_strengths=(0.8,),
                     artifact_kind="marker", teacher_visibilities=VIS)
    return root


def test_the_varying_setting_is_found_and_seed_is_not_one(two_settings):
    res = load_results(two_settings)
    assert setting_columns(res) == ["teacher_visibility"]
    parts = list(split_by_settings(res))
    assert [s["teacher_visibility"] for s, _ in parts] == list(VIS)
    for _, part in parts:
        assert part.groupby(["method", "anchor_lambda", "anchor_layers"]).size().max() == 1


def test_model_differing_between_methods_is_not_a_setting():
    res = pd.DataFrame({"kind": ["teacher", "student", "student"],
                        "method": ["teacher", "naive", "naive"], "anchor_lambda": 0.0,
                        "anchor_layers": "", "seed": [0, 0, 1],
                        "model": ["weak", "strong", "strong"]})
    assert setting_columns(res) == []
    assert setting_columns(res.assign(model=["weak", "strong", "other"])) == ["model"]


def test_no_interval_over_seeds_is_drawn_across_settings(two_settings):
    res = load_results(two_settings)
    with pytest.raises(ValueError, match="teacher_visibility"):
        metric_summary(res, ["acc_id"])
    rows, caption = select_condition(res)
    assert "teacher_visibility 0.25" in caption
    summ = metric_summary(rows, ["acc_id"])
    assert (summ["n"] <= 1).all()
    assert not summ["interval"].str.contains("seeds").any()
    fig = accuracy_figure(results=res)
    assert "teacher_visibility 0.25" in fig.layout.title.text
    assert "t-interval" not in fig.layout.title.text and "seeds" not in fig.layout.title.text


def test_summaries_and_verdicts_keep_settings_apart(two_settings):
    res = load_results(two_settings)
    s = summarize(res)
    assert "teacher_visibility" in s.columns
    assert (s["n_seeds"] == 1).all()
    assert s["acc_id_hw"].isna().all()  # one seed per condition: no interval
    with pytest.raises(ValueError, match="teacher_visibility"):
        failure_mode(res, 0.8)
    lines = verdict_lines(res, 0.8)
    assert sum(line.startswith("Teacher reads the marker on") for line in lines) == 2
    assert not any("over 2 seeds" in line for line in lines)
    blocks = verdict_blocks(res)
    assert [b["setting"]["teacher_visibility"] for b in blocks] == list(VIS)
    assert all(b["status"] == "none" for b in blocks)


def test_report_table_has_a_column_per_setting(two_settings):
    res = load_results(two_settings)
    page = _table_html(res)
    assert "<th>teacher visibility</th>" in page
    for v in VIS:
        assert f"<td>{v:g}</td>" in page
    out = write_report(two_settings, two_settings / "r.html")
    assert "over 2 seeds" not in out.read_text()


def test_report_of_chosen_runs_reads_only_them(two_settings):
    res = load_results(two_settings)
    own = set(res.loc[np.isclose(res["teacher_visibility"], 0.5), "run_id"])
    page = write_report(two_settings, two_settings / "own.html", run_ids=own).read_text()
    assert "id='mixed'" not in page
    assert "<th>teacher visibility</th>" not in page
    with pytest.raises(ValueError, match="none of the 1 requested"):
        write_report(two_settings, two_settings / "x.html", run_ids={"nope"})


def _two_sizes() -> pd.DataFrame:
    """A folder's table after a default split size changed: teachers and a ceiling at two
    source-test sizes, and students that also record their teacher's size (``cfg.teacher.*``,
    a column teachers and ceilings do not have)."""
    rows = []
    for size in ("1500", "750"):
        for kind, method in (("teacher", "teacher"), ("ceiling", "ceiling"),
                             ("student", "naive"), ("student", "naive")):
            rows.append({"kind": kind, "method": method, "anchor_lambda": 0.0,
                         "anchor_layers": "", "seed": 0 if method != "naive" else len(rows) % 2,
                         "source": "src", "artifact_kind": "marker", "artifact_strength": 0.9,
                         "cfg.data.source_test": size,
                         "cfg.teacher.data.source_test": size if kind == "student" else None,
                         "run_id": f"{method}-{size}-{len(rows)}"})
    return pd.DataFrame(rows)


def test_a_setting_a_method_group_lacks_keeps_its_runs():
    """The explorer of notebook 03 failed with an IndexError on such a folder: the missing
    value ("-") of the teachers' `cfg.teacher.*` was chosen first and matched no row."""
    res = _two_sizes()
    assert setting_columns(res) == ["cfg.data.source_test", "cfg.teacher.data.source_test"]
    rows, caption = select_condition(res)
    # one size, and its teacher, ceiling and both students: nothing pooled, nothing lost
    assert set(rows["cfg.data.source_test"]) == {"1500"}
    assert sorted(rows["kind"]) == ["ceiling", "student", "student", "teacher"]
    assert "teacher.data.source_test 1500" in caption
    rows, _ = select_condition(res, settings={"cfg.data.source_test": "750"})
    assert set(rows["cfg.data.source_test"]) == {"750"} and len(rows) == 4
    # prefer: the current grid's values where they exist, else the first
    rows, _ = select_condition(res, prefer={"cfg.data.source_test": "750",
                                            "cfg.teacher.data.source_test": "750"})
    assert set(rows["cfg.data.source_test"]) == {"750"} and len(rows) == 4
    rows, _ = select_condition(res, prefer={"cfg.data.source_test": "300"})
    assert set(rows["cfg.data.source_test"]) == {"1500"} and len(rows) == 4
    # a setting missing on SOME runs of a group is a value of its own, never pooled
    part = res.copy()
    one = part.index[(part["kind"] == "student") & (part["cfg.data.source_test"] == "750")][0]
    part.loc[one, "cfg.teacher.data.source_test"] = None
    pick = {"cfg.data.source_test": "750"}
    for value, student in (("-", one), ("750", one + 1)):
        rows, _ = select_condition(part, settings={**pick, "cfg.teacher.data.source_test": value})
        assert sorted(rows["kind"]) == ["ceiling", "student", "teacher"]
        assert rows.loc[rows["kind"] == "student"].index.tolist() == [student]
    # a setting none of the chosen runs has: skipped, or a clear error when asked for
    none = res.copy()
    none.loc[none["cfg.data.source_test"] == "750", "cfg.teacher.data.source_test"] = None
    rows, _ = select_condition(none, settings=pick)
    assert sorted(rows["kind"]) == ["ceiling", "student", "student", "teacher"]
    with pytest.raises(ValueError, match="cfg.teacher.data.source_test is not set"):
        select_condition(none, settings={**pick, "cfg.teacher.data.source_test": "750"})
