"""Figures as a reader sees them (issue 41): the report at 1280 x 800 and the story explorer's
panels at the widths notebook 04 gives them, drawn in headless Chromium, with the boxes of
their titles, subtitles, subplot titles, legends and plot areas read back: no text runs into
other text or out of the figure, no legend sits far below its axes, no axis runs far wider than
its data, and every legend entry has points (`figure_checks`). A first test shows that each
check catches the defect it is for, on figures built with it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from fake_sweep import write_fake_sweep
from figure_checks import (
    FIGURE_FACTS_JS,
    legend_entry_defects,
    legend_gap_defects,
    range_defects,
    text_defects,
)
from plotly.subplots import make_subplots

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # skipped below
    sync_playwright = None

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


def _chromium() -> str | None:
    for cand in (os.environ.get("ANCHORVIZ_CHROMIUM"), "/usr/bin/chromium",
                 shutil.which("chromium"), shutil.which("chromium-browser"),
                 shutil.which("google-chrome")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


CHROMIUM = _chromium()
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (/usr/bin/chromium or "
                                                "$ANCHORVIZ_CHROMIUM) for the browser test"),
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip "
                                                       "install playwright; the system "
                                                       "Chromium is used)"),
]


def _facts(page_file: Path, shot: str | None = None, width: int = 1280,
           height: int = 800) -> list[dict]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(page_file.as_uri())
            page.wait_for_function(
                "() => document.querySelectorAll('.js-plotly-plot').length > 0 && Array.from("
                "document.querySelectorAll('.js-plotly-plot')).every(el => el._fullLayout)",
                timeout=90_000)
            page.wait_for_timeout(300)
            if shot:
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
            return page.evaluate(FIGURE_FACTS_JS)
        finally:
            browser.close()


def _page(tmp_path: Path, figs: list[go.Figure], width: int | None = None,
          name: str = "figures.html") -> Path:
    style = f"width:{width}px" if width else ""
    body = "".join(f"<div style='{style}'>" + f.to_html(
        full_html=False, include_plotlyjs="inline" if i == 0 else False,
        config={"responsive": True}) + "</div>" for i, f in enumerate(figs))
    path = tmp_path / name
    path.write_text("<!doctype html><html><body style='margin:0'>" + body + "</body></html>",
                    encoding="utf-8")
    return path


def _all_defects(facts: list[dict]) -> list[str]:
    out = []
    for f in facts:
        out += (text_defects(f) + legend_gap_defects(f) + range_defects(f)
                + legend_entry_defects(f))
    return out


def test_each_check_catches_its_defect(tmp_path):
    """Figures built with the issue's defects: run-in subplot titles and a cut subtitle (the
    story explorer), a legend 150 px below its axes, a map whose x axis runs far past its data,
    and a seed listed in the legend without points."""
    runin = make_subplots(rows=1, cols=2, subplot_titles=[
        "follows the cue where it misleads (≥183 pairs/seed)",
        "accuracy where the cue agrees (≥124 pairs/seed)"])
    runin.add_trace(go.Scatter(x=[0, 1], y=[1, 2]), row=1, col=1)
    runin.add_trace(go.Scatter(x=[0, 1], y=[1, 2]), row=1, col=2)
    runin.update_layout(title={"text": "Cue 'length'<br><sup>" + "naive − ceiling -5.1 "
                               "[-6.6, -3.6], ANCHOR − naive +1.8 [-4.2, +7.8] points (follow "
                               "rate where it misleads, paired over seeds, 95% t-interval)"
                               "</sup>"})
    gap = go.Figure([go.Scatter(x=[1, 2, 3], y=[1, 3, 2], name="a"),
                     go.Scatter(x=[1, 2, 3], y=[2, 1, 3], name="b")])
    gap.update_layout(legend={"orientation": "h", "yref": "container", "y": 0.0,
                              "yanchor": "bottom"}, margin={"b": 230}, height=600)
    wide = go.Figure(go.Scatter(x=np.linspace(-6, 2, 50), y=np.linspace(-3, 3, 50),
                                mode="markers", name="points"))
    wide.update_yaxes(scaleanchor="x", scaleratio=1)
    wide.update_layout(height=500)
    seeds = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2], mode="markers", name="naive",
                                 marker={"symbol": "circle"}))
    for s, sym in ((0, "circle"), (1, "square")):
        seeds.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"seed {s}",
                                   marker={"symbol": sym}, meta={"legend_only": True}))
    facts = _facts(_page(tmp_path, [runin, gap, seeds], width=480))
    facts.insert(2, _facts(_page(tmp_path, [wide], name="wide.html"))[0])  # 1280 px wide
    assert any("runs into annotation" in d for d in text_defects(facts[0]))
    assert any("title" in d and "cut" in d for d in text_defects(facts[0]))
    assert legend_gap_defects(facts[1])
    assert not legend_gap_defects(facts[0])
    assert range_defects(facts[2]) and "axis x" in range_defects(facts[2])[0]
    assert legend_entry_defects(facts[3]) == [f"{facts[3]['title']!r}: legend entry 'seed 1' "
                                              "has no points"]


# --------------------------------------------------------------------------- the report

TARGETS = ("amazon", "nyt", "tweets")
SPLITS = ("source_test", *(f"target_test:{t}" for t in TARGETS), "ood")


def _cue_entry(rng: np.random.Generator) -> dict:
    iv = lambda n, p: {"n": n, "point": p, "lo": max(0.0, p - 0.1), "hi": min(1.0, p + 0.1)}  # noqa: E731
    return {"length": {"n": 80, "agree": iv(50, 0.8), "disagree": iv(30, rng.uniform(0.2, 0.8)),
                       "follow": iv(80, 0.6), "interval": "cluster"},
            "refusal": {"n": 40, "agree": iv(25, 0.7), "disagree": iv(15, rng.uniform(0.2, 0.8)),
                        "follow": iv(40, 0.5), "interval": "cluster"}}


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> Path:
    """Shaped like the demo's store: five seeds of the hidden-cue scenario, only seed 0's
    students keep hidden states (seeds 1-4 are scores-only, so they draw no drift), cue blocks
    on every run but one naive student's (so groups have 4 and 5 seeds)."""
    root = write_fake_sweep(tmp_path_factory.mktemp("demo_store") / "sweep",
                            seeds=(0, 1, 2, 3, 4), lambdas=(1.0, 10.0), layers=("last",),
                            targets=TARGETS, methods=("naive", "anchor"),
                            artifact_strengths=(0.9,), artifact_kind="marker",
                            projection_layers=(6,), teacher_visibilities=(0.5,))
    res = pd.read_parquet(root / "results.parquet")
    res["captured"] = ~((res["kind"] == "student") & (res["seed"] > 0))
    res.to_parquet(root / "results.parquet")
    rng = np.random.default_rng(0)
    skip = res.loc[(res["method"] == "naive") & (res["seed"] == 4), "run_id"].iloc[0]
    for rid in res["run_id"]:
        if rid == skip:
            continue
        path = root / "runs" / rid / "metrics.json"
        m = json.loads(path.read_text())
        m["cues"] = {s: _cue_entry(rng) for s in SPLITS}
        path.write_text(json.dumps(m))
    return root


def test_the_report_figures_read_at_1280_x_800(demo_store):
    from anchorviz.viz.report import write_report

    report = write_report(demo_store)
    page = report.read_text(encoding="utf-8")
    assert "Which cues each model follows" in page and "Drift vs OOD gain" in page
    facts = _facts(report, shot="report_figures_1280.png")
    titles = [f["title"] for f in facts]
    assert any(t.startswith("Reference vs student") for t in titles)  # the maps are there
    assert any(t.startswith("Which cues") for t in titles)
    assert len(facts) >= 10
    defects = _all_defects(facts)
    assert not defects, "\n".join(defects)
    # the cue figure names its interval once: 4 and 5 seeds in one phrase
    from anchorviz.viz.common import load_results
    from anchorviz.viz.cues import cue_reliance_figure

    text = cue_reliance_figure(demo_store, results=load_results(demo_store)).layout.title.text
    assert text.count("t-interval") == 1 and "4 or 5 seeds" in text, text


def test_the_drift_vs_ood_legend_lists_only_seeds_with_points(demo_store):
    from anchorviz.viz.common import load_results
    from anchorviz.viz.drift import drift_vs_ood_figure

    fig = drift_vs_ood_figure(demo_store, drift_col="drift_cos_centred_target",
                              results=load_results(demo_store))
    drawn = {int(s) for t in fig.data if t.meta and t.meta.get("group")
             for s in t.customdata[:, 1]}
    listed = {t.meta["seed"] for t in fig.data if t.meta and t.meta.get("legend_only")}
    assert drawn == {0} and listed <= drawn


def test_the_map_fills_its_box(demo_store):
    """The map's axes run over its data (equal units on both axes: the box narrows instead)."""
    from anchorviz.viz.common import load_results, run_path
    from anchorviz.viz.projection import umap_figure

    res = load_results(demo_store)
    rid = res.loc[(res["method"] == "naive") & (res["seed"] == 0), "run_id"].iloc[0]
    fig = umap_figure(run_path(demo_store, rid), max_points=600)
    facts = _facts(_page(demo_store.parent, [fig], name="map.html"))
    assert not range_defects(facts[0], slack=0.1), range_defects(facts[0], slack=0.1)


# --------------------------------------------------------------------------- notebook 04

@pytest.mark.parametrize("width", [480, 1000])
def test_the_story_explorer_panels_read_at_their_widths(tmp_path, width):
    """The explorer's two panels as first drawn, each in a box as wide as notebook 04 gives it
    (two side by side at about 480 px, or one under the other at 1000 px)."""
    from anchorviz import StoryExplorer, load_story

    story = load_story(REPO / "notebooks" / "data" / "real_story")
    explorer = StoryExplorer(story)
    figs = [go.Figure(explorer.figures["slices"]), go.Figure(explorer.figures["drift"])]
    facts = _facts(_page(tmp_path, figs, width=width), shot=f"story_panels_{width}.png")
    defects = _all_defects(facts)
    assert not defects, "\n".join(defects)


def test_the_notebook_images_keep_their_text_apart(tmp_path):
    """The figures notebooks 01-04 store as images (`static_layout` at ``NOTEBOOK_WIDTH``), drawn
    in Chromium: besides titles and legends (tests/test_browser.py), the x axes' tick labels,
    turned or not, stay clear of the legend under them, and no legend sits far below its axes
    (notebook 04's slice panel had its turned labels under the legend)."""
    from notebook_figures import demo_like_sweep, notebook_figures

    from anchorviz.viz.export import NOTEBOOK_WIDTH, static_layout

    figs = [static_layout(f) for f in notebook_figures(demo_like_sweep(tmp_path / "s")).values()]
    facts = _facts(_page(tmp_path, figs, width=NOTEBOOK_WIDTH), width=NOTEBOOK_WIDTH + 40,
                   height=900, shot="notebook_images_layout.png")
    defects = [d for f in facts for d in text_defects(f) + legend_gap_defects(f)]
    assert not defects, "\n".join(defects)
