"""A real browser drives the ANCHOR explorer in JupyterLab.

JupyterLab serves a temporary copy of ``notebooks/`` (smoke mode, the sweeps trained beforehand,
once per test session, by conftest's ``smoke_runs``, so the notebook only reads them); headless
Chromium, driven by Playwright, opens ``03_anchor_explorer.ipynb`` in a 1280 px wide window with
the file browser open, runs all cells, waits for the lambda slider, moves it with the keyboard
and checks that the explorer's figures changed and that nothing of the explorer is cut off:
every control, figure, legend and title lies inside the output area (and the output area inside
the notebook). The report's figures at 1280 px and the notebooks' figures as exported
(``static_layout`` at ``NOTEBOOK_WIDTH``, from a fake sweep) are checked for text that runs
into other text: no title, legend, axis title or subplot title overlaps another. Screenshots go to ``test-artifacts/anchor_explorer.png`` and
``anchor_explorer_panels.png``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
except ImportError:  # the module is skipped below
    PlaywrightTimeout = sync_playwright = None

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOK = "03_anchor_explorer.ipynb"
ARTIFACTS = REPO / "test-artifacts"


def _chromium() -> str | None:
    for cand in (os.environ.get("ANCHORVIZ_CHROMIUM"), "/usr/bin/chromium",
                 shutil.which("chromium"), shutil.which("chromium-browser"),
                 shutil.which("google-chrome")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


CHROMIUM = _chromium()
HAVE_PLAYWRIGHT = sync_playwright is not None
HAVE_LAB = importlib.util.find_spec("jupyterlab") is not None

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium executable (/usr/bin/chromium or "
                                                "$ANCHORVIZ_CHROMIUM) for the browser test"),
    pytest.mark.skipif(not HAVE_PLAYWRIGHT, reason="playwright is not installed "
                                                   "(pip install playwright; no browser download "
                                                   "needed, the system Chromium is used)"),
    pytest.mark.skipif(not HAVE_LAB, reason="jupyterlab is not installed"),
]

CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage"]

# every .js-plotly-plot in the page: its title and a digest of each trace's data
_FIGURES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => ({
    title: (el.layout && el.layout.title && (el.layout.title.text || el.layout.title)) || '',
    traces: (el.data || []).map(t => ({
        name: t.name || '',
        y: Array.from(t.y || []).slice(0, 50).map(v => (typeof v === 'number' ? +v.toFixed(6) : v)),
    })),
}))"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, smoke_runs):
    """JupyterLab on a free localhost port over a copy of notebooks/; yields (url, runs)."""
    root = tmp_path_factory.mktemp("lab")
    nbdir = root / "notebooks"
    shutil.copytree(NOTEBOOK_DIR, nbdir,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    runs = smoke_runs  # the sweeps notebook 03 asks for, trained once per session (conftest)

    # render every cell (no virtual scrolling, so widgets out of view stay in the DOM) and
    # do not ask about news
    settings = root / "settings" / "@jupyterlab"
    for ext, name, value in (("notebook-extension", "tracker", {"windowingMode": "none"}),
                             ("apputils-extension", "notification", {"fetchNews": "false"})):
        (settings / ext).mkdir(parents=True, exist_ok=True)
        (settings / ext / f"{name}.jupyterlab-settings").write_text(json.dumps(value))

    port = _free_port()
    env = dict(os.environ, ANCHORVIZ_SMOKE="1", ANCHORVIZ_NOTEBOOK_RUNS=str(runs),
               TQDM_DISABLE="1", JUPYTER_RUNTIME_DIR=str(root / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"),
               JUPYTERLAB_SETTINGS_DIR=str(root / "settings"), PYDEVD_DISABLE_FILE_VALIDATION="1")
    log = open(root / "jupyterlab.log", "w")  # noqa: SIM115 -- closed in the teardown
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
           "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", "--ServerApp.token=",
           "--ServerApp.password=", f"--ServerApp.root_dir={nbdir}",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI runners often are root
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, cwd=nbdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {proc.returncode}: "
                                   + (root / "jupyterlab.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not answer within 120 s: "
                                   + (root / "jupyterlab.log").read_text()[-3000:])
            time.sleep(1)
        yield url, runs
    finally:
        # the server, its kernels and anything they started share one process group: ours
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        log.close()


#: the window of the explorer test: a laptop screen, with JupyterLab's file browser open
VIEWPORT = {"width": 1280, "height": 1000}

# the explorer's output area, the notebook's visible area, and the box of every element of the
# explorer: widgets (controls, status, figure boxes) against the output area, the parts of each
# plotly figure (its svg, legend, titles, axis titles) against the figure
_FIT_JS = """() => {
    const rect = el => { const r = el.getBoundingClientRect();
                         return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
                                 width: r.width, height: r.height}; };
    const title = el => String((el.layout && el.layout.title &&
                               (el.layout.title.text || el.layout.title)) || '');
    const drift = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(el => title(el).startsWith('Drift per layer'));
    if (!drift) return null;
    const area = drift.closest('.jp-OutputArea-output');
    const root = area.querySelector('.jupyter-widgets.widget-vbox');
    const notebook = drift.closest('.jp-Notebook');
    const name = el => (el.getAttribute('class') || el.tagName).split(' ').slice(0, 3).join(' ')
        + (el.innerText ? ': ' + el.innerText.slice(0, 40) : '');
    const widgets = Array.from(root.querySelectorAll(
            '.jupyter-widgets, .widget-toggle-button, button, select, .noUi-target'))
        .filter(el => el.getClientRects().length)  // hidden widgets have no box
        .map(el => ({name: name(el), ...rect(el)}));
    const figures = Array.from(root.querySelectorAll('.js-plotly-plot')).map(el => ({
        title: title(el), ...rect(el),
        parts: Array.from(el.querySelectorAll(
                'svg.main-svg, g.legend, g.g-gtitle, g.g-xtitle, g.g-ytitle, g.annotation'))
            .filter(p => p.getBoundingClientRect().width > 0)
            .map(p => ({name: name(p), ...rect(p)})),
    }));
    return {area: rect(area), notebook: rect(notebook), root: rect(root),
            scroll: {area: area.scrollWidth - area.clientWidth,
                     root: root.scrollWidth - root.clientWidth},
            filebrowser: !!Array.from(document.querySelectorAll('.jp-FileBrowser'))
                .find(el => el.getClientRects().length && el.getBoundingClientRect().width > 0),
            widgets, figures};
}"""


def _outside(box: dict, frame: dict, tol: float = 1.0, vertical: bool = False) -> bool:
    out = box["left"] < frame["left"] - tol or box["right"] > frame["right"] + tol
    if vertical:
        out = out or box["top"] < frame["top"] - tol or box["bottom"] > frame["bottom"] + tol
    return out


def _clipped(fit: dict) -> list[str]:
    """What of the explorer lies (partly) outside where it is shown: an empty list when all
    fits."""
    bad = []
    if _outside(fit["area"], fit["notebook"]):
        bad.append(f"output area {fit['area']} beyond the notebook {fit['notebook']}")
    for what, extra in fit["scroll"].items():
        if extra > 1:
            bad.append(f"{what} scrolls sideways by {extra} px")
    for w in [fit["root"], *fit["widgets"]]:
        if _outside(w, fit["area"]):
            bad.append(f"{w.get('name', 'explorer')} [{w['left']:.0f}, {w['right']:.0f}] "
                       f"outside the output area [{fit['area']['left']:.0f}, "
                       f"{fit['area']['right']:.0f}]")
    for f in fit["figures"]:
        if _outside(f, fit["area"]):
            bad.append(f"figure {f['title'][:40]!r} outside the output area")
        for part in f["parts"]:
            if _outside(part, f, vertical=True):  # e.g. a legend longer than the figure
                bad.append(f"{part['name']} x [{part['left']:.0f}, {part['right']:.0f}] y "
                           f"[{part['top']:.0f}, {part['bottom']:.0f}] cut off by figure "
                           f"{f['title'][:40]!r} x [{f['left']:.0f}, {f['right']:.0f}] y "
                           f"[{f['top']:.0f}, {f['bottom']:.0f}]")
    return bad


def _figures(page) -> list[dict]:
    return page.evaluate(_FIGURES_JS)


def _explorer_titles(figs: list[dict]) -> list[str]:
    return [f["title"] for f in figs if str(f["title"]).startswith(("Drift per layer",
                                                                    "Pairwise accuracy"))]


def _run_all_cells(page) -> None:
    """Run > Run All Cells, again if no cell was queued (the menu entry can be inert while
    the kernel session is still connecting)."""
    for _attempt in range(4):
        page.locator(".jp-NotebookPanel .jp-Cell").first.click()
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        try:  # a queued or finished cell shows [*] or [n] in its prompt
            page.wait_for_function(
                """() => Array.from(document.querySelectorAll('.jp-InputArea-prompt'))
                       .some(e => /\\[(\\*|\\d+)\\]/.test(e.innerText))""", timeout=20_000)
            return
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    raise AssertionError("Run > Run All Cells did not start any cell")


# the call only: the session's smoke sweeps are trained in a fixture, outside any test's time
@pytest.mark.timeout(1200, func_only=True)
def test_lambda_slider_changes_the_figures(lab, tmp_path):
    """Moving the slider redraws the panels; at 1280 px with the file browser open nothing of
    the explorer is cut off, as drawn first and after the redraw."""
    url, _runs = lab
    t0 = time.perf_counter()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=CHROME_ARGS, viewport=VIEWPORT)
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        try:
            page.set_default_timeout(60_000)
            page.goto(f"{url}/lab/tree/{NOTEBOOK}")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
            # the kernel named in the notebook starts by itself; wait until it is idle
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                                   timeout=180_000)
            _run_all_cells(page)

            handle = page.locator(".jupyter-widgets .noUi-handle").first  # the explorer's λ
            handle.wait_for(state="attached", timeout=600_000)
            # the explorer's panels (FigureWidgets) carry data ...
            page.wait_for_function(
                """() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(el =>
                       el.layout && el.layout.title && String(el.layout.title.text || '')
                       .startsWith('Drift per layer') && (el.data || []).some(t =>
                       t.y && t.y.length))""", timeout=300_000)
            # ... and the whole notebook has run when the launcher's status line printed
            page.wait_for_function(
                "() => document.body.innerText.includes('already finished, reused')",
                timeout=600_000)
            handle.scroll_into_view_if_needed()
            page.wait_for_timeout(1000)  # let the first drawing settle
            fit_first = page.evaluate(_FIT_JS)
            before = _figures(page)
            readout = page.locator(".widget-readout").first.inner_text()
            page.evaluate(f"() => {{ window.__figs = {_FIGURES_JS}; "
                          "window.__before = JSON.stringify(window.__figs()); }")

            handle.click()
            for key in ("Home", "End", "ArrowLeft", "ArrowRight"):
                page.keyboard.press(key)
                try:
                    page.wait_for_function(
                        "() => JSON.stringify(window.__figs()) !== window.__before",
                        timeout=15_000)
                    break
                except PlaywrightTimeout:  # at that end already: try the other way
                    continue
            page.wait_for_timeout(1000)  # let the last batch_update paint
            after = _figures(page)
            fit_after = page.evaluate(_FIT_JS)
            new_readout = page.locator(".widget-readout").first.inner_text()
            handle.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "anchor_explorer.png"))
            # the map and accuracy panels below the drift panel
            page.locator(".js-plotly-plot").nth(2).scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "anchor_explorer_panels.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "anchor_explorer_failure.png"))
            raise
        finally:
            ctx.close()
    print(f"browser test: {time.perf_counter() - t0:.0f} s in the browser")

    assert new_readout != readout, f"the slider did not move (readout stayed {readout!r})"
    old_titles, new_titles = _explorer_titles(before), _explorer_titles(after)
    assert old_titles, "no explorer figure (drift / accuracy panel) found in the page"
    assert new_titles != old_titles, f"explorer titles did not change: {old_titles}"
    assert any(f"λ={new_readout}" in t for t in new_titles), (new_readout, new_titles)
    drift_before = [f for f in before if str(f["title"]).startswith("Drift per layer")]
    drift_after = [f for f in after if str(f["title"]).startswith("Drift per layer")]
    assert drift_before[0]["traces"] != drift_after[0]["traces"], "drift curves did not change"

    # the explorer fits a 1280 px window with the file browser open: nothing is cut off
    for when, fit in (("as first drawn", fit_first), ("after the slider moved", fit_after)):
        assert fit is not None, f"{when}: no explorer in the page"
        assert fit["filebrowser"], "the file browser is not open (the narrow case to test)"
        assert len(fit["figures"]) == 3 and len(fit["widgets"]) >= 10, fit
        assert not _clipped(fit), f"{when}: " + "\n".join(_clipped(fit))


# the text of every plotly figure in the page: its title, legend, axis titles and annotations
# (subplot titles, a shared x title), each with its box, for the overlap check
_TEXT_BOXES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => {
    const rect = e => { const r = e.getBoundingClientRect();
                        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
    const parts = Array.from(el.querySelectorAll('g')).filter(g => {
        const c = g.getAttribute('class') || '';
        return /^g-(g|x\\d*|y\\d*)title$/.test(c) || c === 'legend' || c === 'annotation';
    }).filter(g => g.getBoundingClientRect().width > 0 && g.getBoundingClientRect().height > 0);
    const title = (el.layout && el.layout.title && (el.layout.title.text || '')) || '';
    return {title: String(title).slice(0, 60), box: rect(el),
            parts: parts.map(g => ({kind: g.getAttribute('class'),
                                    text: (g.textContent || '').slice(0, 50), ...rect(g)}))};
})"""


def _overlaps(figs: list[dict], tol: float = 1.0) -> list[str]:
    """Text of a figure that runs into other text of it (title over legend, one x title into
    the next, a subplot title over the title) or out of the figure (a cut title): empty when
    every text box stands free."""
    bad = []
    for f in figs:
        parts = f["parts"]
        for p in parts:
            if _outside(p, f["box"], tol, vertical=True):
                bad.append(f"{f['title']!r}: {p['kind']} {p['text']!r} cut off by the figure")
        for i, a in enumerate(parts):
            for b in parts[i + 1:]:
                if (min(a["right"], b["right"]) - max(a["left"], b["left"]) > tol
                        and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > tol):
                    bad.append(f"{f['title']!r}: {a['kind']} {a['text']!r} overlaps "
                               f"{b['kind']} {b['text']!r}")
    return bad


def test_notebook_figures_read_at_the_export_width(tmp_path):
    """The figures notebooks 01-03 store as images, built with the notebooks' calls from a fake
    sweep and laid out as scripts/execute_notebooks.py exports them (``static_layout`` at
    ``NOTEBOOK_WIDTH``), drawn in Chromium: no title, legend, axis title or subplot title runs
    into another or out of the figure."""
    sys.path.insert(0, str(REPO / "tests"))
    from notebook_figures import demo_like_sweep, notebook_figures

    from anchorviz.viz.export import NOTEBOOK_WIDTH, static_layout

    figs = notebook_figures(demo_like_sweep(tmp_path / "sweep"))
    body = []
    for i, (name, fig) in enumerate(figs.items()):
        s = static_layout(fig)
        body.append(f"<h3>{name}</h3>" + s.to_html(full_html=False, include_plotlyjs=(
            "inline" if i == 0 else False), config={"staticPlot": True}))
    page_file = tmp_path / "notebook_figures.html"
    page_file.write_text("<!doctype html><html><body style='margin:0'>" + "".join(body)
                         + "</body></html>", encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        try:
            page = browser.new_page(viewport={"width": NOTEBOOK_WIDTH + 40, "height": 900})
            page.goto(page_file.as_uri())
            page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                                   f".filter(el => el._fullLayout).length === {len(figs)}",
                                   timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "notebook_figures.png"), full_page=True)
            boxes = page.evaluate(_TEXT_BOXES_JS)
        finally:
            browser.close()
    assert len(boxes) == len(figs)
    assert all(abs(b["box"]["right"] - b["box"]["left"] - NOTEBOOK_WIDTH) <= 1 for b in boxes)
    assert not _overlaps(boxes), "\n".join(_overlaps(boxes))


def test_report_fits_1280_px_and_leads_with_the_verdict(tmp_path):
    """The HTML report at 1280 x 800: no horizontal scrolling, every figure and the table inside
    the page width, and the first screen showing the verdict in one sentence and, whole, the
    verdict figure (issue 41)."""
    sys.path.insert(0, str(REPO / "tests"))
    from fake_sweep import write_fake_sweep

    from anchorviz.viz.report import write_report

    root = write_fake_sweep(tmp_path / "sweep", seeds=(0, 1, 2), lambdas=(1.0, 10.0),
                            layers=("last",), methods=("naive", "anchor"),
                            artifact_strengths=(0.8,), artifact_kind="marker",
                            projection_layers=(6,))
    report = write_report(root)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(report.as_uri())
            page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length > 0"
                                   " && Array.from(document.querySelectorAll('.js-plotly-plot'))"
                                   ".every(el => el._fullLayout)", timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "report_1280.png"))
            boxes = page.evaluate("""() => ({
                scroll: document.documentElement.scrollWidth,
                verdict: document.getElementById('verdict-sentence').getBoundingClientRect().top,
                lead: (() => { const r = document.querySelector('#lead-figure .js-plotly-plot')
                                   .getBoundingClientRect();
                               return {top: r.top, bottom: r.bottom, height: r.height}; })(),
                figures: Array.from(document.querySelectorAll('.js-plotly-plot'))
                    .map(el => { const r = el.getBoundingClientRect();
                                 return {left: r.left, right: r.right, top: r.top}; }),
                table: document.querySelector('table.results').getBoundingClientRect().right,
            })""")
            text = page.evaluate(_TEXT_BOXES_JS)
        finally:
            browser.close()
    assert boxes["scroll"] <= 1280, f"the page scrolls sideways: {boxes['scroll']} px"
    assert boxes["table"] <= 1280
    assert all(0 <= f["left"] and f["right"] <= 1280 for f in boxes["figures"]), boxes["figures"]
    assert 0 <= boxes["verdict"] < min(f["top"] for f in boxes["figures"])
    # the first screen holds the verdict figure whole
    assert boxes["lead"]["top"] == min(f["top"] for f in boxes["figures"])
    assert boxes["lead"]["height"] > 200 and boxes["lead"]["bottom"] <= 800, boxes["lead"]
    # no figure's title, legend, axis titles or subplot titles run into each other or are cut
    assert text and not _overlaps(text), "\n".join(_overlaps(text))
