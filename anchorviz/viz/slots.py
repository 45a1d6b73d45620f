"""The widget pieces both explorers (`anchorviz.viz.widgets.SweepExplorer`,
`anchorviz.viz.story.StoryExplorer`) are built from: a figure updated in place (`FigureSlot`), a
row that wraps in a narrow output area (`wrap_row`), and the plain text of an HTML status line
(`plain_text`).

``go.FigureWidget`` needs the ``anywidget`` package with plotly >= 6. Without it a slot holds a
plain figure re-drawn into an ``ipywidgets.Output`` area after each update (slower, same data)
and logs a warning saying so.
"""

from __future__ import annotations

import logging
import re
from html import unescape
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

logger = logging.getLogger(__name__)

__all__ = ["MAX_WIDTH", "FigureSlot", "in_kernel", "plain_text", "wrap_row"]

#: the widest an explorer grows in a wide output area
MAX_WIDTH = "1600px"


def wrap_row(children: list[widgets.Widget], **layout: Any) -> widgets.HBox:
    """A row that wraps its children onto further lines when the output area is narrow."""
    layout = {"flex_flow": "row wrap", "width": "100%", "max_width": MAX_WIDTH,
              "align_items": "center", **layout}
    return widgets.HBox(children, layout=widgets.Layout(**layout))


def plain_text(html: str) -> str:
    """The text of one of the explorers' own status lines (tags dropped, entities decoded)."""
    return unescape(re.sub(r"<[^>]+>", "", html.replace("<br>", "\n")))


def in_kernel() -> bool:
    """Whether this runs inside a Jupyter kernel (where an ``Output`` area can be redrawn)."""
    try:
        from IPython import get_ipython  # optional: only a notebook has it
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class FigureSlot:
    """A figure an explorer updates in place, and the widget that shows it.

    With anywidget installed ``figure`` is a ``go.FigureWidget`` (its own widget); without it
    a plain ``go.Figure`` drawn into an ``Output`` area after every update. ``box`` holds the
    widget and is what the layout places: a column box (so the figure stretches to its width)
    sized by ``layout``; the figure itself has no width and follows the box (plotly autosize,
    ``responsive`` on window resizes).
    """

    _warned = False

    def __init__(self, fig: go.Figure, **layout: Any) -> None:
        try:
            self.figure: go.Figure = go.FigureWidget(fig)
            self.figure._config = {**self.figure._config, "responsive": True}
            self.widget: widgets.Widget = self.figure
            self.live = True
        except ImportError as exc:
            if not FigureSlot._warned:
                logger.warning("go.FigureWidget unavailable (%s); figures are re-drawn into "
                               "Output widgets instead (pip install anywidget for in-place "
                               "updates)", exc)
                FigureSlot._warned = True
            self.figure = go.Figure(fig)
            self.widget = widgets.Output()
            self.live = False
        self.box = widgets.VBox([self.widget], layout=widgets.Layout(
            align_items="stretch", min_width="0", **layout))

    def replace(self, new: go.Figure) -> None:
        """Show ``new`` in this slot: its traces and layout replace the figure's, in place."""
        with self.figure.batch_update():
            self.figure.data = ()
            self.figure.add_traces(list(new.data))
            self.figure.layout = new.layout
        self.refresh()

    def refresh(self) -> None:
        if self.live or not in_kernel():
            return
        from IPython.display import clear_output, display  # optional: only in a kernel

        with self.widget:
            clear_output(wait=True)
            display(self.figure)
