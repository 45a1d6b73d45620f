"""Figures for papers: `anchorviz report DIR --figures pdf|svg|png` writes every figure of the
report in a paper style (no in-figure title, column widths in inches, colour-blind palette),
with the training-loss curves from the runs' history, and the files open at the size asked for.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest
from fake_sweep import write_fake_sweep

from anchorviz.cli import EXIT_OK, main
from anchorviz.viz.accuracy import accuracy_figure, transfer_figure
from anchorviz.viz.common import OKABE_ITO, load_results, load_run_table
from anchorviz.viz.drift import drift_by_layer_figure, lambda_sweep_figure
from anchorviz.viz.export import CSS_DPI, export_paper_figures, paper_style, wrap_title
from anchorviz.viz.projection import umap_figure, umap_groups
from anchorviz.viz.report import write_figures
from anchorviz.viz.training import loss_curve_figure


def _browser() -> str | None:
    """The Chrome / Chromium kaleido would use (its own download, the system's), or None."""
    try:
        from choreographer.browsers.chromium import Chromium

        return Chromium.find_browser(skip_local=False)
    except Exception:  # kaleido < 1 / choreographer missing: no static export at all
        return None


needs_exporter = pytest.mark.skipif(
    _browser() is None,
    reason="static export needs kaleido and a Chrome/Chromium browser; none found (Debian: "
           "apt-get install chromium, or run plotly_get_chrome); .ci/run installs chromium")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return write_fake_sweep(tmp_path_factory.mktemp("paper"), seeds=(0, 1), lambdas=(1.0, 10.0),
                            layers=("last",), methods=("naive", "anchor"),
                            artifact_strengths=(0.8,), artifact_kind="marker",
                            projection_layers=(6,))


def _pdf_width_pt(path: Path) -> float:
    data = path.read_bytes()
    assert data.startswith(b"%PDF"), f"{path} is not a PDF"
    box = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", data)
    assert box, f"{path} has no MediaBox"
    x0, _, x1, _ = (float(v) for v in box.groups())
    return x1 - x0


def _svg_width(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<svg"), f"{path} is not an SVG"
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)  # parses: a well-formed document
    return root.attrib["width"]


def _png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:
        im.verify()  # a complete, uncorrupted PNG
    with Image.open(path) as im:
        return im.size


# --------------------------------------------------------------------------- no browser needed


def test_paper_style_has_no_title_print_fonts_and_the_column_width(sweep):
    fig = accuracy_figure(sweep)
    title = fig.layout.title.text
    paper = paper_style(fig, "single")
    assert fig.layout.title.text == title  # the figure passed in is not changed
    assert not paper.layout.title.text
    assert paper.layout.meta["caption"].startswith("Pairwise accuracy in and out of distribution")
    assert paper.layout.width == pytest.approx(3.5 * CSS_DPI)
    assert paper_style(fig, "double").layout.width == pytest.approx(7.2 * CSS_DPI)
    assert paper.layout.font.size == pytest.approx(8 * 96 / 72)  # 8 pt once printed
    # colours of the Okabe-Ito palette, no red / green pair
    colours = {tr.marker.color for tr in paper.data}
    assert colours <= set(OKABE_ITO.values())
    with pytest.raises(ValueError, match="single"):
        paper_style(fig, "triple")


def test_paper_style_puts_the_legend_where_it_is_not_cut(sweep):
    fig = paper_style(drift_by_layer_figure(sweep, metric="cka"), "single")
    lg = fig.layout.legend
    assert lg.orientation == "h" and lg.yref == "container" and lg.y == 1.0
    # the top margin holds every legend row: one row per entry at most
    n = sum(1 for tr in fig.data if tr.showlegend is not False)
    assert fig.layout.margin.t >= min(n, 2) * fig.layout.font.size
    assert all(tr.type != "scattergl" for tr in paper_style(
        umap_figure(next((sweep / "runs").glob("anchor-*"))), "single").data)


def test_no_red_green_pair_for_chosen_and_rejected(sweep):
    run = next((sweep / "runs").glob("naive-*"))
    groups = umap_groups(load_run_table(run, "projection"), color_by="side")
    colours = {g["label"]: g["color"] for g in groups}
    assert colours == {"chosen responses": OKABE_ITO["blue"],
                       "rejected responses": OKABE_ITO["orange"]}


def test_loss_curves_are_the_stored_history(sweep):
    res = load_results(sweep)
    fig = loss_curve_figure(sweep, smooth=1)
    anchor = res[(res["method"] == "anchor") & (res["anchor_lambda"] == 10.0)]
    hist = [load_run_table(sweep / "runs" / r, "history") for r in anchor["run_id"]]
    mean_fit = pd.concat(hist).groupby("step")["fit"].mean().to_numpy()
    mean_anchor = pd.concat(hist).groupby("step")["anchor"].mean().to_numpy() * 10.0
    fit = [tr for tr in fig.data if tr.meta["term"] == "fit" and "λ=10" in tr.meta["group"]]
    anc = [tr for tr in fig.data if tr.meta["term"] == "anchor" and "λ=10" in tr.meta["group"]]
    assert len(fit) == len(anc) == 1
    assert list(fit[0].y) == pytest.approx(mean_fit)
    assert list(anc[0].y) == pytest.approx(mean_anchor)  # lambda x the stored unweighted MSE
    assert fig.layout.meta["anchored"]
    naive = [tr for tr in fig.data if tr.meta["group"] == "naive W2S"]
    assert [tr.meta["term"] for tr in naive] == ["fit"]  # no anchor term without an anchor


def test_export_wraps_a_long_title_instead_of_cutting_it(sweep):
    fig = transfer_figure(sweep)
    narrow = wrap_title(fig, 500)
    assert narrow.layout.title.text.count("<br>") > fig.layout.title.text.count("<br>")
    assert narrow.layout.margin.t > fig.layout.margin.t
    assert re.sub(r"<[^>]+>", " ", narrow.layout.title.text).split() == \
        re.sub(r"<[^>]+>", " ", fig.layout.title.text).split()  # same words, only wrapped


# --------------------------------------------------------------------------- exported files


@pytest.mark.slow  # over 5 s on 2 busy cores: Kaleido renders every figure
@needs_exporter
def test_report_figures_pdf_single_column(sweep, capsys):
    assert main(["report", str(sweep), "--figures", "pdf"]) == EXIT_OK
    out = capsys.readouterr().out
    folder = sweep / "figures"
    assert str(folder) in out and (sweep / "report.html").is_file()
    pdfs = sorted(folder.glob("*.pdf"))
    captions = (folder / "captions.txt").read_text(encoding="utf-8")
    assert len(pdfs) >= 8 and any("training-loss" in p.name for p in pdfs)
    for pdf in pdfs:
        assert pdf.name in captions  # its title and subtitle are in the caption list
        assert _pdf_width_pt(pdf) == pytest.approx(3.5 * 72, abs=1.0)


@pytest.mark.slow  # Kaleido starts Chromium for each of 3 figures (4 s; under load it can time out)
@needs_exporter
def test_exported_files_open_at_the_requested_size(sweep, tmp_path):
    figs = [accuracy_figure(sweep), loss_curve_figure(sweep),
            lambda_sweep_figure(sweep)]
    paths = [tmp_path / "acc.svg", tmp_path / "loss.png", tmp_path / "lam.pdf"]
    export_paper_figures(figs, paths, width="double", dpi=150)
    assert _svg_width(paths[0]) == "7.2in"
    width, height = _png_size(paths[1])
    assert width == round(7.2 * 150) and height > 200
    assert _pdf_width_pt(paths[2]) == pytest.approx(7.2 * 72, abs=1.0)


@pytest.mark.slow  # over 5 s on 2 busy cores: Kaleido renders every figure
@needs_exporter
def test_write_figures_png_at_dpi(sweep, tmp_path):
    files = write_figures(sweep, "png", "single", out_dir=tmp_path / "f", dpi=200)
    assert files and all(_png_size(p)[0] == 3.5 * 200 for p in files)
    with pytest.raises(ValueError, match="figure format"):
        write_figures(sweep, "gif")


def test_a_figure_kaleido_did_not_write_is_written_again_or_reported(tmp_path, monkeypatch):
    """kaleido's browser session can return without writing some files (seen under load): the
    missing ones are written once more, and a file still missing is an ExportError, never a
    path returned for a file that is not there."""
    import plotly.io as pio

    from anchorviz.viz.export import ExportError, export_paper_figures

    calls = []

    def flaky(figs, paths, **kw):  # writes nothing for the first path on its first call
        calls.append([Path(p).name for p in paths])
        for p in paths[1:] if len(calls) == 1 else paths:
            Path(p).write_bytes(b"%PDF-1.4 fake")

    monkeypatch.setattr(pio, "write_images", flaky)
    figs = [go.Figure(go.Bar(x=[1], y=[1])) for _ in range(3)]
    paths = [tmp_path / f"f{i}.pdf" for i in range(3)]
    assert export_paper_figures(figs, paths) == paths
    assert calls == [["f0.pdf", "f1.pdf", "f2.pdf"], ["f0.pdf"]]  # only the missing one again
    assert all(p.is_file() for p in paths)

    monkeypatch.setattr(pio, "write_images", lambda figs, paths, **kw: None)  # never writes
    with pytest.raises(ExportError, match="wrote no file for .*f0.pdf"):
        export_paper_figures(figs, paths)  # the files of the call before do not count
