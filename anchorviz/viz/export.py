"""Writing figures to files: for the screen, the web or a paper.

- paper style: :func:`paper_style` (no title, a column's width in inches, print font sizes,
  vector traces) and :func:`export_paper_figures` (PDF / SVG / PNG at their physical size);
  :func:`figure_caption` gives the title as caption text.
- export: :func:`export_figure` -- ``.html`` (self-contained, works offline) or static images,
  with long titles wrapped (:func:`wrap_title`) and an HTML fallback without a browser.

Static images need kaleido and a Chrome / Chromium browser; :class:`ExportError` says how to
get one.
"""

from __future__ import annotations

import base64
import html as _html
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from anchorviz.viz.common import TEMPLATE, PathLike, logger

__all__ = [
    "CSS_DPI",
    "NOTEBOOK_SCALE",
    "NOTEBOOK_WIDTH",
    "ExportError",
    "NotebookPngRenderer",
    "PAPER_WIDTHS",
    "export_figure",
    "export_paper_figures",
    "figure_caption",
    "paper_style",
    "paper_width_inches",
    "show_widget_picture",
    "static_layout",
    "static_png",
    "use_notebook_images",
    "wrap_title",
    "wrap_html",
]

_IMAGE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".webp")
_HTML_SUFFIXES = (".html", ".htm")


class ExportError(RuntimeError):
    """A figure could not be written in the requested format (the message says why and how)."""


# --------------------------------------------------------------------------- paper style

#: column widths of a two-column paper, in inches (ACL / NeurIPS / IEEE are 3.3-3.5 single,
#: 6.9-7.2 double)
PAPER_WIDTHS: dict[str, float] = {"single": 3.5, "double": 7.2}
#: CSS pixels per inch: plotly lays figures out in CSS px, kaleido writes PDF / SVG at 96 px/in
CSS_DPI = 96
_PAPER_FONT = "Arial, Helvetica, 'Liberation Sans', 'DejaVu Sans', sans-serif"


def _pt(points: float) -> float:
    """A font size in printed points as CSS px (what plotly takes)."""
    return points * CSS_DPI / 72


def paper_width_inches(width: str | float) -> float:
    """``"single"`` (3.5 in), ``"double"`` (7.2 in) or a number of inches."""
    if isinstance(width, str):
        if width not in PAPER_WIDTHS:
            raise ValueError(f"paper width must be one of {sorted(PAPER_WIDTHS)} or inches, "
                             f"got {width!r}")
        return PAPER_WIDTHS[width]
    w = float(width)
    if not 1.0 <= w <= 20.0:
        raise ValueError(f"paper width {w} in is not a plausible figure width (1-20 in)")
    return w


def figure_caption(fig: go.Figure) -> str:
    """The figure's title and subtitle as plain text (for a caption list or a file name)."""
    text = fig.layout.title.text or ""
    text = re.sub(r"<br\s*/?>", " — ", text, count=1)
    text = re.sub(r"<br\s*/?>", " ", text)
    return _html.unescape(re.sub(r"<[^>]+>", "", text)).strip(" —")


def _legend_entries(fig: go.Figure) -> list[str]:
    if fig.layout.showlegend is False:
        return []
    names, groups = [], set()
    for tr in fig.data:
        if tr.showlegend is False or not tr.name:
            continue
        key = tr.legendgroup or tr.name
        if key in groups:
            continue
        groups.add(key)
        names.append(str(tr.name))
    return names if len(names) > 1 or any(t.showlegend for t in fig.data) else []


def _legend_columns(names: Sequence[str], width_px: float, font_px: float) -> int:
    """How many equal columns a legend of ``names`` can take in ``width_px`` (an upper
    estimate of each entry: wide fonts, plotly's 40 px symbol and gap)."""
    longest = 40 + 0.62 * font_px * max((len(n) for n in names), default=0)
    return max(1, min(4, len(names), int(width_px // longest)))


def wrap_html(text: str, width_px: float, font_px: float) -> str:
    """Wrap a plotly label (lines split by ``<br>``, a line may be one ``<sup>...</sup>``) to
    ``width_px``; lines with other markup are kept whole."""
    out = []
    for part in re.split(r"<br\s*/?>", text):
        sup = re.fullmatch(r"\s*<sup>(.*)</sup>\s*", part, flags=re.S)
        inner = sup.group(1) if sup else part
        f = font_px * (0.7 if sup else 1.0)
        if len(inner) * 0.56 * f <= width_px or "<" in inner:
            out.append(part)
            continue
        for line in _wrap_line(inner, max(12, int(width_px / (0.56 * f)))):
            out.append(f"<sup>{line}</sup>" if sup else line)
    return "<br>".join(out)


def _axis_domains(layout: go.Layout, prefix: str) -> dict[str, tuple[float, float]]:
    return {k: tuple(layout[k].domain) for k in layout
            if k.startswith(prefix) and layout[k].domain is not None}


def paper_style(fig: go.Figure, width: str | float = "single", *, aspect: float | None = None,
                font_pt: float = 8.0) -> go.Figure:
    """A copy of ``fig`` styled for a paper: returns the figure to export at ``width``.

    No in-figure title (:func:`figure_caption` gives it as text for the caption; it is kept in
    ``layout.meta["caption"]``), white background, Arial/Helvetica at ``font_pt`` points (tick
    labels 1 pt smaller) once printed at the column width, the Okabe-Ito colours of these
    figures, WebGL scatter traces drawn as vector scatter, and the legend in horizontal rows
    above the plot, in a top margin sized for the rows it wraps to, so that no legend entry
    is cut and none overlaps the axis titles. ``width``: ``"single"`` (3.5 in), ``"double"``
    (7.2 in) or inches; the plot area's height is ``aspect`` x its width (default 0.62 for one
    panel row, 0.9 for two). ``layout.width`` / ``height`` are in CSS px (96 per inch): export
    with :func:`export_paper_figure` to get the physical size in every format.
    """
    inches = paper_width_inches(width)
    out = go.Figure(fig)
    caption = figure_caption(fig)
    font_px, tick_px = _pt(font_pt), _pt(font_pt - 1)
    width_px = inches * CSS_DPI  # may be fractional (7.2 in = 691.2 px): exact sizes
    # WebGL traces are rasterised in a PDF / SVG: draw them as vector scatter
    data = []
    for tr in out.data:
        if tr.type == "scattergl":
            spec = tr.to_plotly_json()
            spec.pop("type", None)
            data.append(go.Scatter(**spec))
        else:
            data.append(tr)
    out = go.Figure(data=data, layout=out.layout)
    # panel rows and columns: the distinct domains of the axes
    xdoms, ydoms = _axis_domains(out.layout, "xaxis"), _axis_domains(out.layout, "yaxis")
    n_rows, n_cols = max(1, len(set(ydoms.values()))), max(1, len(set(xdoms.values())))
    if aspect is None:
        aspect = 0.62 if n_rows == 1 else 0.95
    names = _legend_entries(out)
    left, right = _pt(font_pt) * 4.5, _pt(font_pt) * 1.2
    plot_w = width_px - left - right
    cols = _legend_columns(names, plot_w, font_px)
    legend_rows = -(-len(names) // cols)
    legend_h = legend_rows * (font_px * 1.45 + 4) + (6 if legend_rows else 0)
    # subplot titles (and labels of lines at the top) sit above their panel, in the top
    # margin: wrap them to the panel's width and make room for the lines they take
    panel_w = plot_w / n_cols * 0.95
    sub_lines = 0
    for ann in out.layout.annotations:
        if not ann.text or not (ann.yref or "").endswith(("paper", "domain")):
            continue
        if ann.yanchor == "bottom" or (ann.y or 0) >= 0.99:
            ann.text = wrap_html(str(ann.text), panel_w, font_px)
        if (ann.y or 0) >= 0.99:
            sub_lines = max(sub_lines, 1 + str(ann.text).count("<br"))
    # one x title under all panels when they share it, not one per panel run together
    xtitles = {out.layout[k].title.text for k in xdoms}
    shared_x = len(xdoms) > 1 and len(xtitles) == 1 and None not in xtitles
    if shared_x:
        bottom_dom = min(d[0] for d in ydoms.values()) if ydoms else 0.0
        for k in xdoms:
            out.layout[k].title.text = None
        out.add_annotation(text=xtitles.pop(), xref="paper", yref="paper", x=0.5,
                           y=bottom_dom, yanchor="top", yshift=-(font_px * 1.6 + 6),
                           showarrow=False, font={"size": font_px})
    top = legend_h + sub_lines * font_px * 1.35 + 6
    bottom = font_px * 4.2
    plot_h = (width_px - left - right) * aspect
    height_px = round(plot_h + top + bottom)
    out.update_layout(
        title=None, template=TEMPLATE, width=width_px, height=height_px, autosize=False,
        font={"family": _PAPER_FONT, "size": font_px, "color": "black"},
        paper_bgcolor="white", plot_bgcolor="white",
        margin={"l": left, "r": right, "t": top, "b": bottom, "pad": 0, "autoexpand": True},
        legend={"orientation": "h", "yref": "container", "y": 1.0, "yanchor": "top",
                "xref": "paper", "x": 0.0, "xanchor": "left", "font": {"size": font_px},
                "itemwidth": 30, "tracegroupgap": 0, "bgcolor": "rgba(0,0,0,0)",
                "title": {"text": ""},
                **({"entrywidth": 0.999 / cols, "entrywidthmode": "fraction"} if cols > 1
                   else {})},
        hoverlabel={"font": {"size": font_px}},
    )
    out.update_xaxes(automargin=True, tickfont={"size": tick_px}, title_font={"size": font_px},
                     title_standoff=4, showline=True, linecolor="black", ticks="outside",
                     ticklen=3, gridcolor="#e5e5e5", zeroline=False)
    out.update_yaxes(automargin=True, tickfont={"size": tick_px}, title_font={"size": font_px},
                     title_standoff=4, showline=True, linecolor="black", ticks="outside",
                     ticklen=3, gridcolor="#e5e5e5", zeroline=False)
    out.update_annotations(font_size=font_px)
    out.update_xaxes(dtick=1, selector={"type": "log"})  # decades, not 2 3 4 ... 9 between
    for tr in out.data:  # thinner markers and lines at print size
        if tr.type == "scatter" and tr.marker is not None and tr.marker.size is not None:
            size = tr.marker.size
            tr.marker.size = (max(3, size * 0.6) if isinstance(size, (int, float))
                              else [max(3, s * 0.6) for s in size])
    meta = dict(out.layout.meta) if isinstance(out.layout.meta, dict) else {}
    meta.update({"caption": caption, "width_in": inches, "font_pt": font_pt})
    out.layout.meta = meta
    return out


def _fix_svg_size(path: Path, width_in: float, height_in: float) -> None:
    """Give an SVG its physical size (``width="3.5in"``), keeping its viewBox in CSS px."""
    text = path.read_text(encoding="utf-8")
    head_end = text.index(">")
    head = text[:head_end]
    head = re.sub(r'\swidth="[^"]*"', f' width="{width_in:g}in"', head, count=1)
    head = re.sub(r'\sheight="[^"]*"', f' height="{height_in:.4g}in"', head, count=1)
    path.write_text(head + text[head_end:], encoding="utf-8")


def export_paper_figures(figs: Sequence[go.Figure], paths: Sequence[PathLike], *,
                         width: str | float = "single", dpi: int = 300,
                         aspect: float | None = None, font_pt: float = 8.0) -> list[Path]:
    """Write figures in :func:`paper_style` at their physical size, in one browser session.

    The format is each path's suffix (``.pdf``, ``.svg``, ``.png``): a PDF's page (MediaBox)
    is the column width in points (3.5 in = 252 pt), an SVG's ``width`` is in inches (its
    viewBox in CSS px), a PNG is ``inches x dpi`` pixels wide. Needs kaleido and a
    Chrome / Chromium browser; raises :class:`ExportError` saying how to get one otherwise
    (no HTML fallback: a paper needs the image).
    """
    figs, paths = list(figs), [Path(p).expanduser() for p in paths]
    if len(figs) != len(paths):
        raise ValueError(f"{len(figs)} figures but {len(paths)} paths")
    for p in paths:
        if p.suffix.lower() not in (".pdf", ".svg", ".png"):
            raise ValueError(f"paper figures are .pdf, .svg or .png, not {p.name!r}")
        p.parent.mkdir(parents=True, exist_ok=True)
    if dpi < 72 or dpi > 1200:
        raise ValueError(f"dpi must be between 72 and 1200, got {dpi}")
    styled = [paper_style(f, width, aspect=aspect, font_pt=font_pt) for f in figs]
    scales = [dpi / CSS_DPI if p.suffix.lower() == ".png" else 1.0 for p in paths]
    for p in paths:  # so that a file left from before cannot pass for a written one
        p.unlink(missing_ok=True)
    todo = list(range(len(paths)))
    # kaleido's browser session can return without having written some files (seen under heavy
    # load): the missing ones are written again once, then their absence is an error
    for attempt in range(2):
        try:
            pio.write_images([styled[i] for i in todo], [paths[i] for i in todo],
                             scale=[scales[i] for i in todo],
                             width=[styled[i].layout.width for i in todo],
                             height=[styled[i].layout.height for i in todo])
        except Exception as exc:  # kaleido missing, no browser, browser crash ...
            raise ExportError(f"paper figure export failed ({type(exc).__name__}: {exc}). kaleido "
                              "needs a Chrome/Chromium browser: install one (Debian: apt-get "
                              "install chromium) or run plotly_get_chrome") from exc
        todo = [i for i in todo if not paths[i].is_file() or paths[i].stat().st_size == 0]
        if not todo:
            break
        if attempt == 0:
            logger.warning("kaleido did not write %s; writing them again",
                           ", ".join(paths[i].name for i in todo))
    if todo:
        raise ExportError("paper figure export wrote no file for "
                          + ", ".join(str(paths[i]) for i in todo) + " (kaleido returned without "
                          "an error); try again, or export fewer figures at a time")
    for f, p in zip(styled, paths, strict=True):
        if p.suffix.lower() == ".svg":
            _fix_svg_size(p, f.layout.meta["width_in"], f.layout.height / CSS_DPI)
    return paths


# --------------------------------------------------------------------------- export


def _wrap_line(text: str, max_chars: int) -> list[str]:
    words, lines, cur = text.split(" "), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > max_chars:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return lines + ([cur] if cur else [])


def wrap_title(fig: go.Figure, width_px: float) -> go.Figure:
    """A copy of ``fig`` whose title (main line and ``<sup>`` subtitle) is wrapped to fit
    ``width_px`` CSS px, with the top margin grown by the added lines (static images cannot
    reflow a long title: it would be cut at the right edge)."""
    text = fig.layout.title.text or ""
    out = go.Figure(fig)
    if not text:
        return out
    size = (fig.layout.title.font.size if fig.layout.title.font and fig.layout.title.font.size
            else 17)
    wrapped = wrap_html(text, max(100.0, width_px - 30), size)
    added = len(re.split(r"<br\s*/?>", wrapped)) - len(re.split(r"<br\s*/?>", text))
    if added > 0:
        top = fig.layout.margin.t if fig.layout.margin.t is not None else 100
        out.update_layout(title_text=wrapped,
                          margin_t=top + added * size * 1.1)
    return out


def export_figure(fig: go.Figure, path: PathLike, *, fallback: bool = True, scale: float = 2.0,
                  width: int | None = None, height: int | None = None) -> Path:
    """Write ``fig`` to ``path`` by its suffix; returns the path actually written.

    ``.html`` / ``.htm``: a standalone page with plotly.js inline (opens offline).
    ``.png`` / ``.svg`` / ``.pdf`` / ``.jpg`` / ``.webp``: a static image through kaleido, which
    needs a Chrome / Chromium browser (Debian: ``apt-get install chromium``; or
    ``plotly_get_chrome``). When that fails and ``fallback`` is true, a standalone ``.html``
    is written next to the requested path instead (a warning says why); with
    ``fallback=False`` an :class:`ExportError` is raised.

    ``width`` / ``height`` are CSS px (default: the figure's own, else kaleido's 700 x 500);
    ``scale`` multiplies them for PNG / JPG / WEBP pixels (and, by kaleido, the SVG / PDF page
    size too). A static image cannot reflow, so a title longer than the image is wide is
    wrapped onto more lines (and the top margin grown to hold them) instead of being cut.
    The figure passed in is not changed. For a paper (no title, column width in inches,
    print font sizes) use :func:`paper_style` / :func:`export_paper_figures`, or
    ``anchorviz report DIR --figures pdf``.
    """
    out = Path(path).expanduser()
    suffix = out.suffix.lower()
    if suffix not in _HTML_SUFFIXES + _IMAGE_SUFFIXES:
        raise ValueError(f"cannot export to {out}: unknown suffix {out.suffix!r}; use one of "
                         f"{list(_HTML_SUFFIXES + _IMAGE_SUFFIXES)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix in _HTML_SUFFIXES:
        fig.write_html(out, include_plotlyjs=True, full_html=True)
        return out
    try:
        static = wrap_title(fig, width or fig.layout.width or 700)
        static.write_image(out, scale=scale, width=width, height=height)
        return out
    except Exception as exc:  # kaleido missing, no browser, browser crash ...
        reason = (f"static export to {out} failed ({type(exc).__name__}: {exc}). kaleido needs "
                  "a Chrome/Chromium browser: install one (Debian: apt-get install chromium) "
                  "or run plotly_get_chrome")
        if not fallback:
            raise ExportError(reason) from exc
        html = out.with_suffix(".html")
        fig.write_html(html, include_plotlyjs=True, full_html=True)
        logger.warning("%s; wrote a standalone HTML page %s instead", reason, html)
        return html


# --------------------------------------------------------------------------- notebook images

#: the width (CSS px) at which the stored notebooks' figures are laid out and exported: about
#: the width GitHub shows a notebook's outputs at in a 1280 px window (its column is 800-900
#: px); the PNG has ``NOTEBOOK_SCALE`` times the pixels, so it stays sharp, and the stored
#: output says it is shown ``NOTEBOOK_WIDTH`` px wide
NOTEBOOK_WIDTH = 800
NOTEBOOK_SCALE = 1.5  # 1,200 px PNGs: sharp on most screens, and notebook 02 (7 maps) under 3 MB
_TITLE_PX, _SUBPLOT_TITLE_PX, _LEGEND_PX, _TICK_PX, _AXIS_TITLE_PX = 17, 16, 12, 12, 14
_LEGEND_ROW_PX = 24  # one row of a horizontal legend at 12 px (symbol and padding)


def _n_lines(text: str) -> int:
    return len(re.split(r"<br\s*/?>", text)) if text else 0


def _text_px(text: str, font_px: float) -> float:
    """An upper estimate of a one-line label's width (plain text, markup dropped)."""
    return 0.58 * font_px * len(re.sub(r"<[^>]+>", "", text))


def _legend_groups(fig: go.Figure) -> list[list[str]]:
    """The legend's entries, by legend group, in trace order (every trace shown in the
    legend is an entry; a group's entries stack)."""
    if fig.layout.showlegend is False:
        return []
    shown = [t for t in fig.data if t.name and t.showlegend is not False]
    if len(shown) < 2 and not any(t.showlegend for t in shown):
        return []  # plotly shows no legend for a single trace unless asked
    groups: dict[str, list[str]] = {}
    for i, t in enumerate(shown):
        groups.setdefault(t.legendgroup or f"\0{i}", []).append(str(t.name))
    return list(groups.values())


def _category_ticks(fig: go.Figure, plot_w: float) -> tuple[bool, float] | None:
    """For a figure with category x labels: (whether they are turned, the longest label's
    width); None without category labels. Turned when they may not fit side by side (an upper
    estimate of their widths); :func:`static_layout` then turns them by 30 degrees itself, so
    that the room it leaves matches what is drawn."""
    widths = []
    for t in fig.data:
        xs = getattr(t, "x", None)
        if xs is None or not len(xs) or not all(isinstance(v, str) for v in xs):
            continue
        longest = max(_text_px(v, _TICK_PX) for v in xs)
        widths.append((longest > 0.9 * plot_w / len(xs), longest))
    for k in fig.layout:  # labels given as ticktext at numeric positions, per panel
        ax = fig.layout[k] if k.startswith("xaxis") else None
        if ax is None or not ax.ticktext:
            continue
        d = ax.domain or (0, 1)
        longest = max(_text_px(str(v), _TICK_PX) for v in ax.ticktext)
        widths.append((longest > 0.9 * (d[1] - d[0]) * plot_w / len(ax.ticktext), longest))
    if not widths:
        return None
    return any(r for r, _ in widths), max(w for _, w in widths)


def _bottom_axis_px(fig: go.Figure, plot_w: float) -> float:
    """Room under the plot area for the lowest x axes' tick labels and titles (category labels
    turned by 30 degrees when they do not fit side by side, :func:`_category_ticks`)."""
    tick = _TICK_PX + 10.0
    cat = _category_ticks(fig, plot_w)
    if cat is not None and cat[0]:
        tick = max(tick, 0.5 * cat[1] + _TICK_PX + 10)
    title = 0.0
    for k in fig.layout:
        if k.startswith("xaxis") and fig.layout[k].title.text:
            title = max(title, 1.35 * _AXIS_TITLE_PX * _n_lines(fig.layout[k].title.text) + 8)
    for a in fig.layout.annotations:
        if a.name == "shared x title":
            title = max(title, abs(a.yshift or 0) - tick + 1.35 * _AXIS_TITLE_PX + 8)
    return tick + title


def static_layout(fig: go.Figure, width: int = NOTEBOOK_WIDTH) -> go.Figure:
    """A copy of ``fig`` laid out for a static image ``width`` CSS px wide (a stored notebook's
    PNG: it cannot reflow): the title wrapped to the width and pinned to the top, subplot
    titles wrapped to their panel's width, the legend in rows of equal columns right under the
    plot area and the x axes' labels, and the margins grown to hold each of them, so that no title,
    legend or axis title runs into another or is cut. The plot area keeps its height.
    ``layout.meta["static_layout"]`` records the numbers (width, margins, legend rows)."""
    out = go.Figure(fig)
    lay = out.layout
    height = float(lay.height or 500)
    m = lay.margin
    old_t = 100.0 if m.t is None else float(m.t)
    old_b = 80.0 if m.b is None else float(m.b)
    left = 80.0 if m.l is None else float(m.l)
    right = 80.0 if m.r is None else float(m.r)
    plot_h = max(260.0, height - old_t - old_b)
    plot_w = width - left - right

    # the title: wrapped, from the top of the image down
    title = lay.title.text or ""
    title_h = 0.0
    if title:
        size = lay.title.font.size or _TITLE_PX
        wrapped = wrap_html(title, width - 30, size)
        lines = _n_lines(wrapped)
        title_h = lines * size * 1.3  # plotly spaces every line by the main font
        # a title of several lines anchored at its top still draws its first line about one
        # line-height above the anchor (seen in kaleido's PNGs: the first line was cut), so
        # the pad keeps a line's worth of room above it
        pad = int(10 + size)
        out.update_layout(title={"text": wrapped, "x": 0.01, "xanchor": "left",
                                 "yref": "container", "y": 1.0, "yanchor": "top",
                                 "pad": {"t": pad}})
        title_h += pad

    # annotations above the plot area (subplot titles, "teacher", a vline's label): wrapped
    # to their panel, and the tallest one in the top row gets room under the title
    domains = [tuple(lay[k].domain) for k in lay if k.startswith("xaxis") and lay[k].domain]
    above = 0.0
    for a in lay.annotations:
        text = a.text or ""
        yref = str(a.yref or "")
        if (not text or a.showarrow or a.y is None or a.name == "shared x title"
                or not (yref == "paper" or yref.endswith("domain"))):
            continue
        size = (a.font.size if a.font and a.font.size else _SUBPLOT_TITLE_PX
                if yref == "paper" else _LEGEND_PX)
        if a.xref == "paper" and a.xanchor in (None, "center", "auto") and domains:
            d = min(domains, key=lambda dd: abs((dd[0] + dd[1]) / 2 - float(a.x or 0.5)))
            a.text = wrap_html(text, max(60.0, (d[1] - d[0]) * plot_w - 8), size)
        if float(a.y) >= 0.999 and a.yanchor == "bottom":
            above = max(above, _n_lines(a.text) * size * 1.3 + 6)

    # the legend: rows of equal columns at the bottom of the image
    groups = _legend_groups(out)
    legend_h = 0.0
    if groups:
        names = [n for g in groups for n in g]
        # plotly wraps a horizontal legend within the plot area's width, not the image's
        cols = _legend_columns(names, plot_w, _LEGEND_PX)
        stack = max(len(g) for g in groups)
        # entries in legend groups (e.g. method and seed): plotly stacks the groups one under
        # another even in a horizontal legend, so every entry takes a row
        grouped = any(t.legendgroup for t in out.data if t.showlegend is not False)
        rows = len(names) if grouped else -(-len(names) // cols)
        legend_h = rows * _LEGEND_ROW_PX + (10 if stack > 1 else 0) * -(-len(groups) // cols)
    cat = _category_ticks(out, plot_w)
    if cat is not None:  # what the room below the axes was sized for, not plotly's own choice
        out.update_xaxes(tickangle=-30 if cat[0] else 0)
    axis_px = _bottom_axis_px(out, plot_w)
    if groups:
        # right under the x axes' labels and titles (paper y: 0 is the plot area's bottom), so
        # that a legend shorter than estimated leaves room at the image's foot, not between
        # the axes and the legend
        out.update_layout(legend={"orientation": "h", "yref": "paper",
                                  "y": -(axis_px + 6) / plot_h, "yanchor": "top",
                                  "xanchor": "left", "x": 0.0,
                                  "entrywidthmode": "pixels",
                                  "entrywidth": int(plot_w / cols) - 40,
                                  "font": {"size": _LEGEND_PX}})
    top = title_h + above + 12
    bottom = axis_px + legend_h + 24
    out.update_layout(width=width, height=round(plot_h + top + bottom), autosize=False,
                      margin={"t": round(top), "b": round(bottom), "l": left, "r": right})
    meta = dict(lay.meta) if isinstance(lay.meta, dict) else {}
    meta["static_layout"] = {"width": width, "title_px": round(title_h),
                             "above_plot_px": round(above), "legend_px": round(legend_h),
                             "top": round(top), "bottom": round(bottom),
                             "plot_height": round(plot_h)}
    out.layout.meta = meta
    return out


def static_png(fig: go.Figure, width: int = NOTEBOOK_WIDTH, scale: float = NOTEBOOK_SCALE) -> bytes:
    """``fig`` as PNG bytes laid out by :func:`static_layout` for ``width`` CSS px, with
    ``scale`` times the pixels (kaleido and a Chrome / Chromium browser needed)."""
    static = static_layout(fig, width)
    return static.to_image(format="png", width=width, height=static.layout.height, scale=scale)


class NotebookPngRenderer(pio.base_renderers.PngRenderer):
    """plotly's ``png`` renderer for stored notebooks: each figure laid out by
    :func:`static_layout` at ``width`` CSS px and exported ``scale`` times as large."""

    def __init__(self, width: int = NOTEBOOK_WIDTH, scale: float = NOTEBOOK_SCALE) -> None:
        super().__init__(width=width, scale=scale)

    def to_mimebundle(self, fig_dict):
        static = static_layout(go.Figure(fig_dict), self.width)
        self.height = static.layout.height
        return super().to_mimebundle(static.to_dict())


#: figures of a widget picture, in reading order (others follow)
_PANEL_ORDER = ("drift", "accuracy", "umap")
#: the mark of the outputs :func:`show_widget_picture` adds (scripts/execute_notebooks.py
#: finds them by it)
PICTURE_MARK = "anchorviz_static_picture"


def show_widget_picture(obj, width: int = NOTEBOOK_WIDTH,
                        scale: float = NOTEBOOK_SCALE) -> int:
    """Display a static picture of a widget that has plotly figures (``obj.figures``, e.g.
    the ``SweepExplorer``): a line saying what it is, then each figure as a PNG laid out by
    :func:`static_layout`, shown ``width`` px wide. GitHub shows no widget; a stored notebook
    shows this instead. Returns the number of images displayed."""
    from IPython.display import display

    figs = dict(getattr(obj, "figures", {}) or {})
    names = [k for k in _PANEL_ORDER if k in figs] + [k for k in figs if k not in _PANEL_ORDER]
    status = str(getattr(obj, "status_text", "") or "")
    note = ("Static picture of the interactive explorer above as first drawn (GitHub does not "
            "show widgets): run the notebook to use its controls."
            + (f" Shown: {status}" if status else ""))
    display({"text/markdown": f"*{note}*", "text/plain": note}, raw=True,
            metadata={PICTURE_MARK: "note"})
    for name in names:
        png = static_png(go.Figure(figs[name]), width, scale)
        display({"image/png": base64.b64encode(png).decode("ascii"),
                 "text/plain": f"<{name} panel: static picture>"}, raw=True,
                metadata={"image/png": {"width": width}, PICTURE_MARK: name})
    return len(names)


def show_form_picture(obj) -> None:
    """Display a text picture of a form widget without figures (``obj.picture_text``, e.g. the
    ``RunLauncher``): GitHub shows no widget, so a stored notebook says what the form holds."""
    from IPython.display import display

    note = ("Static picture of the interactive form above (GitHub does not show widgets): "
            + str(obj.picture_text))
    display({"text/markdown": f"*{note}*", "text/plain": note}, raw=True,
            metadata={PICTURE_MARK: "form"})


class _IgnoredBrowserNoise:
    """Drops the browser driver's "JSONError decoding message. Ignoring" records: the message it
    skips is harmless, but the record carries a traceback that would be stored in a notebook."""

    def filter(self, record) -> bool:
        return "decoding message. Ignoring" not in record.getMessage()


def quiet_browser_noise() -> None:
    """Install :class:`_IgnoredBrowserNoise` on the logger of kaleido's browser pipe (once)."""
    pipe = logging.getLogger("choreographer.channels.pipe")
    if not any(isinstance(f, _IgnoredBrowserNoise) for f in pipe.filters):
        pipe.addFilter(_IgnoredBrowserNoise())


def use_notebook_images(width: int = NOTEBOOK_WIDTH, scale: float = NOTEBOOK_SCALE) -> None:
    """Static images for a stored notebook (scripts/execute_notebooks.py runs this in the
    kernel before the first cell): plotly's ``png`` renderer, made the default, lays each
    figure out for ``width`` CSS px (:class:`NotebookPngRenderer`); and a cell whose result is
    the ``widget`` of an object with ``figures`` (the explorer) gets a static picture of them
    after it (:func:`show_widget_picture`), a form's widget (``picture_text``) a line saying
    what it holds (:func:`show_form_picture`); the browser pipe's ignored-message tracebacks
    are kept out of the stored outputs (:func:`quiet_browser_noise`)."""
    pio.renderers["png"] = NotebookPngRenderer(width, scale)
    pio.renderers.default = "png"
    quiet_browser_noise()
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return

    def after_cell(result) -> None:
        value = getattr(result, "result", None)
        if value is None:
            return
        for obj in list(ip.user_ns.values()):
            try:
                mine = getattr(obj, "widget", None) is value and isinstance(
                    getattr(obj, "figures", None), dict)
            except Exception:  # an object whose attribute lookup fails is not the widget's
                mine = False
            if mine:
                show_widget_picture(obj, width, scale)
                return
            try:
                form = getattr(obj, "widget", None) is value and hasattr(obj, "picture_text")
            except Exception:
                form = False
            if form:
                show_form_picture(obj)
                return

    ip.events.register("post_run_cell", after_cell)
