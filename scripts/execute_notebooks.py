"""Execute the notebooks at full size and store them WITH their outputs, so they read on GitHub
and nbviewer without an hour of CPU.

    python scripts/execute_notebooks.py                 # 01-03, reading / training ../runs
    python scripts/execute_notebooks.py 01_failure_mode.ipynb

Run ``anchorviz demo`` (or ``bash scripts/demo.sh``) first: the notebooks read its runs in
``runs/demo`` and train only what is missing (notebook 03 trains the demo at two more teacher
visibilities: this script sets its ``TRAIN`` flag, ``ANCHORVIZ_NOTEBOOK_TRAIN=1``, which a reader's
Run All leaves off). Figures are stored as static PNG images (plotly's ``png``
renderer, through kaleido), which GitHub shows and which keep each notebook small; run the
notebook yourself for interactive figures and widgets. Each figure is laid out for the width GitHub
shows it at (``anchorviz.viz.export.static_layout``: ``NOTEBOOK_WIDTH`` CSS px, legend below the
plot, titles wrapped) and stored at twice the pixels; the explorer widget, which GitHub cannot
show, gets a static picture of its first state after it (``show_widget_picture``), both set up
in the kernel before the first cell (``use_notebook_images``). Refuses to run in smoke mode: a stored
notebook shows the full default's numbers. Each notebook gets ``metadata.anchorviz`` (what was
executed, when, with which version) so the tests can tell a stored execution from stray output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"
# 04 is stored clean: its cells need a GPU and the hub, or a local real-data folder, and its
# outputs would name that folder
DEFAULT = ["01_failure_mode.ipynb", "02_representation_drift.ipynb", "03_anchor_explorer.ipynb"]
MAX_BYTES = 3_000_000
# run in the kernel before the first cell: plotly's png renderer lays each figure out for the
# export width, and a widget with figures (the explorer) gets a static picture after it
KERNEL_SETUP = ("__import__('anchorviz.viz.export', fromlist=['use_notebook_images'])"
                ".use_notebook_images()")
PICTURE_MARK = "anchorviz_static_picture"  # anchorviz.viz.export.PICTURE_MARK
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _progress_widget(output) -> bool:
    """A tqdm widget's output: a widget view whose text form is empty or a bar."""
    data = output.get("data", {})
    if "application/vnd.jupyter.widget-view+json" not in data:
        return False
    text = str(data.get("text/plain", "")).strip()
    return not text or "%|" in text


def widget_pictures(nb) -> list[str]:
    """Give each stored widget output a short text form and check that a static picture
    follows it: GitHub shows a widget's ``text/plain`` (``VBox(children=(HBox(...``), so it
    now says that the picture below is the widget. Returns what is missing (empty: all
    pictured)."""
    missing = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        outs = cell.outputs
        for j, o in enumerate(outs):
            if WIDGET_MIME not in o.get("data", {}):
                continue
            after = outs[j + 1:]
            images = [a for a in after if PICTURE_MARK in a.get("metadata", {})
                      and ("image/png" in a.get("data", {})
                           or a["metadata"][PICTURE_MARK] == "form")]
            if not images:
                missing.append(f"cell {i}: a widget output without a static picture after it")
                continue
            o["data"]["text/plain"] = ("[interactive widget: run the notebook to use it; a static "
                                       "picture of its first state follows]")
    return missing


def stored_tracebacks(nb) -> list[str]:
    """Cells whose stored stream output holds a traceback (a library logging an error it then
    ignored, say): a stored notebook shows none, and a traceback names machine-local paths."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for o in cell.outputs:
            text = o.get("text", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            if o.get("output_type") == "stream" and "Traceback (most recent call last)" in text:
                found.append(f"cell {i}: a traceback in its {o.get('name', 'stream')} output")
    return found


def execute(path: Path, timeout: int = 3600) -> float:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}},
                                     extra_arguments=[f"--IPKernelApp.exec_lines={KERNEL_SETUP}"])
    t0 = time.perf_counter()
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError:
        failed = Path(tempfile.gettempdir()) / f"{path.stem}.failed.ipynb"
        nbformat.write(nb, failed)  # the stored notebook is left as it was
        print(f"{path.name}: a cell failed; the partly executed copy is {failed}")
        raise
    seconds = time.perf_counter() - t0
    from anchorviz import __version__

    nb.metadata.pop("widgets", None)  # widget state: not shown by GitHub, large
    for cell in nb.cells:  # progress-bar widgets would be stored frozen at their first frame
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not _progress_widget(o)]
    missing = widget_pictures(nb) + stored_tracebacks(nb)
    if missing:  # e.g. kaleido's browser failed in the picture hook: the cell itself ran
        failed = Path(tempfile.gettempdir()) / f"{path.stem}.failed.ipynb"
        nbformat.write(nb, failed)
        raise nbclient.exceptions.CellExecutionError(
            "; ".join(missing) + f" (the executed copy is {failed})", "", "")
    nb.metadata["anchorviz"] = {"executed": "full", "anchorviz_version": __version__,
                                "date": dt.date.today().isoformat(),
                                "seconds": round(seconds)}
    nbformat.write(nb, path)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{path.name}: {size} bytes stored, above {MAX_BYTES}: too large to commit")
    return seconds


def image_export_problem() -> str | None:
    """Why a static image cannot be written here (kaleido missing, no Chrome / Chromium), or
    None: one tiny figure is exported to find out."""
    try:
        import plotly.graph_objects as go
        import plotly.io as pio

        pio.to_image(go.Figure(), format="png", width=50, height=50)
    except Exception as exc:  # kaleido missing, no browser, browser crash ...
        return (f"a test export failed ({type(exc).__name__}: {str(exc).strip()[:200]}); "
                "install Chromium (Debian: apt-get install chromium) or run plotly_get_chrome")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", default=DEFAULT)
    args = ap.parse_args(argv)
    if os.environ.get("ANCHORVIZ_SMOKE") == "1":
        print("refusing: ANCHORVIZ_SMOKE=1 (stored notebooks show the full default)")
        return 2
    missing = [n for n in args.notebooks if not (NOTEBOOK_DIR / n).is_file()]
    if missing:
        print(f"no such notebook in {NOTEBOOK_DIR.name}/: {', '.join(missing)} "
              f"(expected names such as {DEFAULT[0]})")
        return 2
    problem = image_export_problem()
    if problem:  # before any cell runs: notebook 03 would train for minutes, then fail on a figure
        print(f"refusing: stored notebooks need static images, and {problem}")
        return 2
    os.environ["ANCHORVIZ_NOTEBOOK_RENDERER"] = "png"  # read by notebooks/_smoke.py
    os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars would fill the stored outputs
    # notebook 03 trains only when asked: the stored execution shows the whole explorer
    os.environ.setdefault("ANCHORVIZ_NOTEBOOK_TRAIN", "1")
    for name in args.notebooks:
        try:
            secs = execute(NOTEBOOK_DIR / name)
        except nbclient.exceptions.CellExecutionError:
            # kaleido's headless browser now and then fails to start on a loaded machine
            # ("kaleido_scopes is not defined"); the runs are stored, so a second pass is cheap
            print(f"{name}: executing once more")
            secs = execute(NOTEBOOK_DIR / name)
        print(f"{name}: executed in {secs:.0f} s, {(NOTEBOOK_DIR / name).stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
