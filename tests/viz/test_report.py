"""The HTML report leads with the answer: smoke disclaimer, scenario, the one verdict function,
the label warning, then a readable table and the figures."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.analysis import summary
from anchorviz.pipeline.demo import DEMO_NOTE, demo_sweep
from anchorviz.viz.report import _pick_runs, smoke_reasons, write_report


def _sizes(quick: bool) -> dict:
    d = demo_sweep(quick=quick).base.data
    return {k: getattr(d, k) for k in ("teacher_train", "w2s_train", "val", "source_test",
                                       "target_test")}


@pytest.fixture(scope="module")
def demo_like(tmp_path_factory) -> Path:
    """Three seeds, the demo's marker artefact at 0.8 and the demo's full split sizes."""
    return write_fake_sweep(tmp_path_factory.mktemp("demo_like"), seeds=(0, 1, 2),
                            lambdas=(1.0, 10.0), layers=("last",), methods=("naive", "anchor"),
                            artifact_strengths=(0.8,), artifact_kind="marker",
                            projection_layers=(6,), data_settings=_sizes(quick=False))


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Path:
    """One seed at the sizes of `anchorviz demo --quick`: three students, a smoke run."""
    return write_fake_sweep(tmp_path_factory.mktemp("quick"), seeds=(0,), lambdas=(1.0, 10.0),
                            layers=("last",), methods=("naive", "anchor"),
                            artifact_strengths=(0.8,), artifact_kind="marker",
                            projection_layers=(6,), data_settings=_sizes(quick=True))


def _page(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _pos(page: str, needle: str) -> int:
    i = page.find(needle)
    assert i >= 0, f"{needle!r} not in the report"
    return i


def _first_figure(page: str) -> int:
    return _pos(page, 'class="plotly-graph-div"')


def test_report_leads_with_scenario_and_the_verdict_of_summary(demo_like):
    page = _page(write_report(demo_like))
    results = pd.read_parquet(demo_like / "results.parquet")
    # the scenario is the banner the demo CLI prints; the verdict is summary's, line by line
    assert html.escape(DEMO_NOTE.format(s=0.8, mode="absent")) in page
    for line in summary.verdict_lines(results):
        assert html.escape(line) in page
    fm = summary.failure_mode(results)
    assert fm["can_conclude"]
    assert ("Failure mode: YES" in page) == fm["failure_mode"]
    # the verdict in one sentence, then the verdict figure (issues 28 and 41), then the
    # scenario and the verdict in detail, all before the table; no smoke block at full sizes
    scenario, verdict = _pos(page, "id='scenario'"), _pos(page, "id='verdict'")
    assert _pos(page, "id='verdict-sentence'") < _pos(page, "id='lead-figure'") \
        < _first_figure(page) < scenario < verdict < _pos(page, "<h2>Results</h2>")
    assert "id='smoke'" not in page
    n_src = _sizes(quick=False)["source_test"]
    assert "seeds 0, 1, 2" in page and f"tested on {n_src} source pairs" in page


def test_a_quick_run_says_at_the_top_that_it_is_not_a_result(quick, demo_like):
    reasons = smoke_reasons(quick)
    assert any("demo --quick" in r for r in reasons) and any("150 source" in r for r in reasons)
    assert smoke_reasons(demo_like) == []
    page = _page(write_report(quick))
    assert _pos(page, "id='smoke'") < _pos(page, "id='scenario'")
    assert "these numbers are not a result" in page
    # one seed: the verdict says that it gives none, instead of reading a result into it
    assert "No failure-mode verdict" in page and "Failure mode: YES" not in page


def test_uninformative_labels_are_warned_about_before_the_figures(demo_like, tmp_path):
    root = tmp_path / "low_q"
    shutil.copytree(demo_like, root)
    res = pd.read_parquet(root / "results.parquet")
    res.loc[res["kind"] == "student", "q_confidence"] = 0.52
    res.to_parquet(root / "results.parquet")
    page = _page(write_report(root))
    warn = _pos(page, "id='label-warning'")
    assert _pos(page, "id='verdict'") < warn < _pos(page, "<h2>Results</h2>")
    assert "nearly uninformative" in page and "0.520" in page
    assert "id='label-warning'" not in _page(write_report(demo_like))


def _table(page: str) -> tuple[list[str], list[list[str]]]:
    table = page[_pos(page, "<table class='results'>"):]
    table = table[: table.index("</table>")]
    head = re.findall(r"<th>(.*?)</th>", table)
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    return [html.unescape(h) for h in head], [[html.unescape(c) for c in r] for r in rows]


def test_results_table_is_readable(demo_like):
    head, rows = _table(_page(write_report(demo_like)))
    assert head[:2] == ["run", "seed"] and "anchor_lambda" not in head and "acc_id" not in head
    assert len(head) <= 14  # fits 1280 px at 12.5 px type
    runs = [r[0] for r in rows]
    assert "naive W2S" in runs and "ANCHOR λ=10 (last layer)" in runs
    assert not any("λ" in r for r in runs if not r.startswith("ANCHOR"))  # no lambda 0
    fmt = {"ID %": r"\d+\.\d", "WRG": r"[+-]\d+\.\d", "drift 1-cos": r"\d\.\d{3}",
           "label conf.": r"\d\.\d{3}"}
    for col, pattern in fmt.items():
        values = [r[head.index(col)] for r in rows]
        assert all(v == "–" or re.fullmatch(pattern, v) for v in values), (col, values)
        assert any(v != "–" for v in values)


def test_degenerate_figures_are_not_drawn(quick):
    """Three students (one seed): the drift-vs-OOD panels show the points and no rho / line;
    the drift-by-layer figure is one panel per domain."""
    page = _page(write_report(quick))
    assert "Spearman ρ =" not in page
    assert "no correlation shown" in page
    assert "one panel per domain" in page


def test_pick_runs_takes_the_largest_strength_and_anchor_chosen_on_source_validation(tmp_path):
    root = write_fake_sweep(tmp_path / "two", seeds=(0, 1), lambdas=(1.0, 10.0),
                            layers=("last",), methods=("naive", "anchor"),
                            artifact_strengths=(0.0, 0.8), artifact_kind="marker",
                            projection_layers=(6,))
    res = pd.read_parquet(root / "results.parquet")
    anchor = res["method"] == "anchor"
    # validation prefers lambda 1; NTS (a target number) would pick lambda 10
    res["acc_val"] = np.where(anchor & np.isclose(res["anchor_lambda"], 1.0), 0.9, 0.7)
    res.loc[anchor & np.isclose(res["anchor_lambda"], 10.0), "nts"] = 0.5
    picks = _pick_runs(res)
    chosen = res.set_index("run_id").loc[[rid for _, rid in picks]]
    assert (chosen["artifact_strength"] == 0.8).all() and (chosen["seed"] == 0).all()
    assert list(chosen["method"]) == ["naive", "anchor"]
    assert chosen["anchor_lambda"].iloc[1] == 1.0 and "source validation" in picks[1][0]


def test_some_smoke_runs_and_mixed_configs_are_named_at_the_top(demo_like, tmp_path):
    """A folder where `anchorviz demo --quick` and `anchorviz demo` both wrote (their default
    --out is the same): the smoke runs are counted, and the mixed base configs are said."""
    from anchorviz.paths import read_yaml, write_yaml
    from anchorviz.viz.report import smoke_status

    root = tmp_path / "mixed"
    shutil.copytree(demo_like, root)
    res = pd.read_parquet(root / "results.parquet")
    rid = res.loc[res["method"] == "naive", "run_id"].iloc[0]
    cfg = read_yaml(root / "runs" / rid / "config.yaml")
    cfg["data"].update(_sizes(quick=True))
    write_yaml(root / "runs" / rid / "config.yaml", cfg)
    status = smoke_status(root)
    assert status["smoke"] == [rid] and status["total"] == len(res)
    res["cfg.data.source_test"] = np.where(res["run_id"] == rid, "150", "300")
    res.to_parquet(root / "results.parquet")
    page = _page(write_report(root))
    assert f"1 of {len(res)} runs are smoke-sized" in page
    assert "id='mixed'" in page and "data.source_test" in page
    head, rows = _table(page)
    assert "source_test" in head
    assert sorted({r[head.index("source_test")] for r in rows}) == ["150", "300"]


def test_warnings_the_runs_logged_are_listed_at_the_top_once_each(demo_like, tmp_path):
    root = tmp_path / "warned"
    shutil.copytree(demo_like, root)
    runs = sorted(p.name for p in (root / "runs").iterdir() if p.is_dir()
                  and not p.name.startswith("."))[:2]
    msg = "bf16: this CPU has neither avx512_bf16 nor AMX, so bfloat16 autocast is emulated"
    for rid in runs:
        (root / "runs" / rid / "run.log").write_text(
            "2026-12-07 04:00:00,000 INFO anchorviz.training.loop: an info line\n"
            f"2026-12-07 04:00:01,000 WARNING anchorviz.training.loop: {msg}\n",
            encoding="utf-8")
    page = _page(write_report(root))
    box = page[_pos(page, "id='run-warnings'"):]
    box = box[: box.index("</div>")]
    assert _pos(page, "id='run-warnings'") < _pos(page, "id='verdict'")
    assert box.count(html.escape(msg)) == 1 and "2 runs" in box
    assert all(rid in box for rid in runs) and "an info line" not in page
    assert "id='run-warnings'" not in _page(write_report(demo_like))
