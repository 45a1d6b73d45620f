"""The stored notebooks' images read on GitHub: every figure the notebooks show is laid out
for the export width (legend below the plot with room for its rows, titles wrapped to fit,
side-by-side panels without colliding x titles), exported at that width and twice its pixels,
and the explorer widget gets a static picture. Layout numbers only: no browser needed (the
rendered check is tests/test_browser.py)."""

from __future__ import annotations

import base64
import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from notebook_figures import demo_like_sweep, notebook_figures

from anchorviz.viz import export
from anchorviz.viz.export import (
    NOTEBOOK_SCALE,
    NOTEBOOK_WIDTH,
    NotebookPngRenderer,
    static_layout,
)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> dict[str, go.Figure]:
    return notebook_figures(demo_like_sweep(tmp_path_factory.mktemp("nbfig") / "sweep"))


def _lines(text: str) -> list[str]:
    return re.split(r"<br\s*/?>", text or "")


def _line_px(line: str, font_px: float) -> float:
    sup = line.strip().startswith("<sup>")
    return 0.56 * font_px * (0.7 if sup else 1.0) * len(re.sub(r"<[^>]+>", "", line))


def test_export_width_is_githubs_column_at_twice_the_pixels():
    assert 780 <= NOTEBOOK_WIDTH <= 900 and 1.5 <= NOTEBOOK_SCALE <= 2


def test_every_notebook_figure_fits_the_export_width(figures):
    for name, fig in figures.items():
        s = static_layout(fig)
        lay, nums = s.layout, s.layout.meta["static_layout"]
        assert lay.width == NOTEBOOK_WIDTH and lay.autosize is False, name
        # the title: every line fits, pinned to the top, in a top margin that holds it
        title = lay.title.text
        assert all(_line_px(ln, 17) <= NOTEBOOK_WIDTH - 30 for ln in _lines(title)), (name, title)
        assert lay.title.yref == "container" and lay.title.yanchor == "top", name
        assert lay.margin.t >= len(_lines(title)) * 17 * 1.3 + nums["above_plot_px"], name
        # the legend: right under the plot area's axes (not at the foot of the image, which
        # left 100-150 px empty above it; issue 41), with room for its rows
        if nums["legend_px"]:
            leg = lay.legend
            assert (leg.orientation, leg.yref, leg.yanchor) == ("h", "paper", "top"), name
            below = -leg.y * nums["plot_height"]  # px under the plot area's bottom
            assert 20 <= below <= lay.margin.b - nums["legend_px"], (name, below, nums)
            assert lay.margin.b >= nums["legend_px"] + 40, (name, nums)
        # the plot area keeps a readable height
        assert lay.height - lay.margin.t - lay.margin.b >= 250, (name, nums)
        # x titles of panels side by side fit their panel: no run-in titles
        plot_w = NOTEBOOK_WIDTH - lay.margin.l - lay.margin.r
        for k in lay:
            if k.startswith("xaxis") and lay[k].title.text:
                d = lay[k].domain or (0, 1)
                assert 0.58 * 14 * len(lay[k].title.text) <= (d[1] - d[0]) * plot_w, (name, k)
        # subplot titles fit their panel
        for a in lay.annotations:
            if a.yref == "paper" and a.name != "shared x title" and a.text:
                assert all(_line_px(ln, 16) <= plot_w for ln in _lines(a.text)), (name, a.text)


def test_notebook_01_legends_are_below_not_over_the_title(figures):
    for name in ("01 accuracy", "01 shortcut", "01 transfer"):
        leg = figures[name].layout.legend  # the interactive figure too, not only the image
        assert leg.yref == "container" and leg.y < 0.5 and leg.yanchor == "bottom", name


def test_notebook_02_side_by_side_panels_share_short_x_titles(figures):
    drift = figures["02 drift cka"].layout
    titles = [drift[k].title.text for k in drift if k.startswith("xaxis")]
    assert len(titles) == 4 and set(titles) == {"layer"}  # not "layer (0 = embeddings)" x 4
    dvo = figures["02 drift vs ood"].layout
    assert not any(dvo[k].title.text for k in dvo if k.startswith("xaxis"))
    assert [a.text for a in dvo.annotations if a.name == "shared x title"]


def test_renderer_exports_the_static_layout_at_the_export_width(figures, monkeypatch):
    seen = {}

    def fake_to_image(fig_dict, **kw):
        seen.update(kw, fig=fig_dict)
        return b"\x89PNG"

    monkeypatch.setattr("plotly.io._base_renderers.to_image", fake_to_image)
    bundle = NotebookPngRenderer().to_mimebundle(figures["01 accuracy"].to_dict())
    assert base64.b64decode(bundle["image/png"]) == b"\x89PNG"
    assert seen["width"] == NOTEBOOK_WIDTH and seen["scale"] == NOTEBOOK_SCALE
    assert seen["height"] == seen["fig"]["layout"]["height"]
    assert seen["fig"]["layout"]["meta"]["static_layout"]["width"] == NOTEBOOK_WIDTH


def test_use_notebook_images_replaces_the_png_renderer(monkeypatch):
    before = pio.renderers["png"], pio.renderers.default
    try:
        export.use_notebook_images()  # outside a kernel: the renderer only
        assert isinstance(pio.renderers["png"], NotebookPngRenderer)
        assert pio.renderers.default == "png"
    finally:
        pio.renderers["png"], pio.renderers.default = before


def test_widget_picture_shows_each_panel_at_the_export_width(figures, monkeypatch):
    shown = []
    monkeypatch.setattr(export, "static_png", lambda fig, width, scale: b"png")
    monkeypatch.setattr("IPython.display.display",
                        lambda data, raw, metadata: shown.append((data, metadata)))

    class Explorer:  # what the hook reads of SweepExplorer: figures and the status line
        status_text = "naive W2S, seed 0"

    explorer = Explorer()
    explorer.figures = {"umap": figures["02 map anchor"], "drift": figures["02 drift cka"],
                        "accuracy": figures["01 accuracy"]}
    assert export.show_widget_picture(explorer) == 3
    note, *images = shown
    assert "Static picture" in note[0]["text/plain"] and "naive W2S" in note[0]["text/plain"]
    assert [m[export.PICTURE_MARK] for _, m in images] == ["drift", "accuracy", "umap"]
    assert all(m["image/png"]["width"] == NOTEBOOK_WIDTH for _, m in images)


def _script():
    spec = importlib.util.spec_from_file_location("execute_notebooks",
                                                  REPO / "scripts" / "execute_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("execute_notebooks", mod)
    spec.loader.exec_module(mod)
    return mod


def test_execute_notebooks_pictures_the_widget_and_says_so():
    mod = _script()
    assert "use_notebook_images" in mod.KERNEL_SETUP and mod.PICTURE_MARK == export.PICTURE_MARK
    widget = nbformat.v4.new_output("execute_result", data={
        mod.WIDGET_MIME: {"model_id": "x", "version_major": 2, "version_minor": 0},
        "text/plain": "VBox(children=(HBox(children=(Dropdown(..."}, execution_count=1)
    picture = nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"},
                                     metadata={mod.PICTURE_MARK: "drift"})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("explorer.widget")])
    nb.cells[0].outputs = [widget, picture]
    assert mod.widget_pictures(nb) == []
    assert "VBox" not in widget["data"]["text/plain"]
    assert "static picture" in widget["data"]["text/plain"]
    nb.cells[0].outputs = [nbformat.v4.new_output("execute_result", data={
        mod.WIDGET_MIME: {}, "text/plain": "VBox()"}, execution_count=1)]
    assert mod.widget_pictures(nb) == ["cell 0: a widget output without a static picture after it"]


def test_execute_notebooks_takes_a_form_note_for_a_form_widget_and_refuses_tracebacks():
    mod = _script()
    widget = nbformat.v4.new_output("execute_result", data={
        mod.WIDGET_MIME: {"model_id": "y", "version_major": 2, "version_minor": 0},
        "text/plain": "VBox(children=(HBox(..."}, execution_count=1)
    note = nbformat.v4.new_output("display_data", data={"text/markdown": "*form*"},
                                  metadata={mod.PICTURE_MARK: "form"})
    other = nbformat.v4.new_output("display_data", data={"text/markdown": "*x*"},
                                   metadata={mod.PICTURE_MARK: "drift"})  # a panel needs a PNG
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("launcher.widget")])
    nb.cells[0].outputs = [widget, note]
    assert mod.widget_pictures(nb) == [] and mod.stored_tracebacks(nb) == []
    nb.cells[0].outputs = [widget, other]
    assert mod.widget_pictures(nb) == ["cell 0: a widget output without a static picture after it"]
    noise = nbformat.v4.new_output("stream", name="stderr", text=(
        "ERROR:choreographer.channels.pipe:JSONError decoding message. Ignoring\n"
        "Traceback (most recent call last):\n  File \"/x.py\", line 1\n"))
    nb.cells[0].outputs = [noise]
    assert mod.stored_tracebacks(nb) == ["cell 0: a traceback in its stderr output"]


def test_form_picture_says_what_the_launcher_holds(monkeypatch):
    from anchorviz.viz.widgets import RunLauncher

    shown = []
    monkeypatch.setattr("IPython.display.display",
                        lambda data, raw, metadata: shown.append((data, metadata)))
    launcher = RunLauncher({"method": {"name": "anchor", "anchor_lambda": 3.0}, "seed": 7},
                           out_dir="runs/x")
    export.show_form_picture(launcher)
    (data, meta), = shown
    assert meta[export.PICTURE_MARK] == "form"
    text = data["text/plain"]
    assert "method anchor" in text and "λ 3" in text and "seed 7" in text and "runs/x" in text
    launcher.method_w.value = "naive"
    assert "λ off" in launcher.picture_text


def test_browser_pipe_noise_is_filtered_and_other_records_are_not():
    import logging

    export.quiet_browser_noise()
    export.quiet_browser_noise()  # once only
    pipe = logging.getLogger("choreographer.channels.pipe")
    assert sum(isinstance(f, export._IgnoredBrowserNoise) for f in pipe.filters) == 1
    noise = logging.LogRecord("choreographer.channels.pipe", logging.ERROR, "f", 1,
                              "JSONError decoding message. Ignoring", None, None)
    real = logging.LogRecord("choreographer.channels.pipe", logging.ERROR, "f", 1,
                             "browser closed", None, None)
    assert not pipe.filter(noise) and pipe.filter(real)
