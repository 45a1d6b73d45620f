#!/usr/bin/env python
"""Screenshots at 1280 px of the HTML report and notebooks 01-03, for docs/screenshots/.

    python scripts/screenshots.py                       # report of a small fake store
    python scripts/screenshots.py --store runs/demo     # report of a real sweep folder
    python scripts/screenshots.py --out docs/screenshots --height 2000

The report: ``anchorviz.viz.report.write_report`` of ``--store`` (default: ``runs/demo-quick`` when
it holds a results table, else a small fake sweep built with the test fixture
``tests/support/fake_sweep.py``: three seeds, the demo's marker artefact; nothing is trained). The
notebooks: ``jupyter nbconvert --to html`` of notebooks/01-03 as committed (their stored
outputs; nothing is executed -- run them first for outputs). Each page is photographed by
headless Chromium (``--window-size=1280,H --screenshot``), after a virtual-time budget that
lets plotly draw. PNGs are palette-quantised when that keeps them readable and makes them
smaller; the script says which files are over ``--max-kb`` (500 KB) and should not be
committed. Needs Chromium (Debian: ``apt-get install chromium``; or ``$ANCHORVIZ_CHROMIUM``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("01_failure_mode", "02_representation_drift", "03_anchor_explorer")
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", "--hide-scrollbars")


def chromium() -> str:
    for cand in (os.environ.get("ANCHORVIZ_CHROMIUM"), shutil.which("chromium"),
                 shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if cand and Path(cand).exists():
            return cand
    sys.exit("no Chromium found: apt-get install chromium (or set ANCHORVIZ_CHROMIUM)")


def build_store(store: str | None, work: Path) -> Path:
    if store:
        path = Path(store)
        if not (path / "results.parquet").is_file():
            sys.exit(f"{path} has no results.parquet (run `anchorviz report {path}` once first)")
        return path
    quick = ROOT / "runs" / "demo-quick"
    if (quick / "results.parquet").is_file():
        return quick
    sys.path.insert(0, str(ROOT / "tests"))
    from fake_sweep import write_fake_sweep  # the test fixture: a small, fully synthetic store

    return write_fake_sweep(work / "synthetic-fixture-store", seeds=(0, 1, 2), lambdas=(1.0, 10.0),
                            layers=("last",), methods=("naive", "anchor"),
                            artifact_strengths=(0.8,), artifact_kind="marker",
                            projection_layers=(6,))


def screenshot(browser: str, page: Path, png: Path, width: int, height: int,
               budget_ms: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, *CHROME_FLAGS, f"--user-data-dir={profile}",
               f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}",
               f"--screenshot={png}", page.resolve().as_uri()]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=180)
    if not png.is_file():
        raise RuntimeError(f"Chromium wrote no screenshot of {page}")


def shrink(png: Path) -> None:
    """Palette-quantise (256 colours) when it makes the file smaller: text stays crisp."""
    from PIL import Image

    before = png.stat().st_size
    tmp = png.with_suffix(".q.png")
    with Image.open(png) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
            tmp, optimize=True)
    if tmp.stat().st_size < before:
        tmp.replace(png)
    else:
        tmp.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=None, help="sweep folder for the report (default: "
                    "runs/demo-quick if present, else a small fake store)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=2000)
    ap.add_argument("--budget-ms", type=int, default=15000,
                    help="virtual time for scripts to draw before the shot")
    ap.add_argument("--max-kb", type=int, default=500)
    ap.add_argument("--no-notebooks", action="store_true")
    args = ap.parse_args(argv)

    browser = chromium()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        from anchorviz.viz.report import write_report

        store = build_store(args.store, work)
        if store.parent == work:  # the fake store: its page title says so, not a temp path
            cwd = Path.cwd()
            os.chdir(work)
            try:
                page = work / write_report(Path(store.name), Path("report.html"))
            finally:
                os.chdir(cwd)
        else:
            page = write_report(store, work / "report.html")
        shots.append((page, out / "report.png"))
        if not args.no_notebooks:
            for name in NOTEBOOKS:
                nb = ROOT / "notebooks" / f"{name}.ipynb"
                if not nb.is_file():
                    print(f"skip {nb}: not found")
                    continue
                subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html",
                                "--output-dir", str(work), str(nb)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                shots.append((work / f"{name}.html", out / f"notebook_{name}.png"))
        for page, png in shots:
            screenshot(browser, page, png, args.width, args.height, args.budget_ms)
            shrink(png)
    big = []
    for _, png in shots:
        kb = png.stat().st_size / 1024
        print(f"{png}: {kb:.0f} KB")
        if kb >= args.max_kb:
            big.append(png)
    if big:
        print(f"over {args.max_kb} KB (do not commit): " + ", ".join(p.name for p in big))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
