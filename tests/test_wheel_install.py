"""anchorviz installed from a wheel, not only editable (issue 18).

Builds a wheel of the checkout (from a copy of it, so that the build's ``build/`` and
``*.egg-info`` folders never land in the working tree), installs it with ``pip --target`` into a
temporary folder and runs the installed package from a folder outside the checkout, with only
that folder on ``PYTHONPATH``: the package imports from there (not through the editable
install's finder), ``anchorviz datasets`` lists the named datasets (their manifests are package
data) and ``anchorviz demo --quick`` trains and reports. The models and datasets come from the
usual cache (``$ANCHORVIZ_CACHE`` or ``~/.cache/anchorviz``), as for the other tests, so the
demo runs offline once the cache is filled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# generous: these bound a hang, not slowness (the demo trains for minutes on a busy CPU)
BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 1500
# a few of the named datasets, one per kind of manifest (hub, VADER, shared real-data file)
SOME_DATASETS = ("hh-rlhf-harmless", "helpsteer3", "vader-movie", "vader-tweets",
                 "realdata-pandalm")
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "venv", "runs", "test-artifacts", "build", "dist", "*.egg-info",
    "__pycache__", ".hypothesis", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", ".whl",
)


def _pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"pip {' '.join(args)}:\n{(proc.stdout + proc.stderr)[-4000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """``{"wheel", "site", "work"}``: the built wheel, the folder it is installed into and an
    empty working folder outside the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    dist = tmp / "dist"
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(src),
         cwd=tmp)
    wheels = sorted(dist.glob("anchorviz-*.whl"))
    assert len(wheels) == 1, wheels
    site = tmp / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheels[0]), cwd=tmp)
    work = tmp / "work"
    work.mkdir()
    return {"wheel": wheels[0], "site": site, "work": work}


def _run(installed: dict, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(installed["site"]), TQDM_DISABLE="1")
    return subprocess.run([sys.executable, *args], cwd=installed["work"], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_wheel_ships_the_manifests(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    shipped = {Path(n).stem for n in names
               if n.startswith("anchorviz/manifests/") and n.endswith(".yaml")}
    in_tree = {p.stem for p in (ROOT / "anchorviz" / "manifests").glob("*.yaml")}
    assert in_tree and shipped == in_tree
    assert not [n for n in names if n.split("/")[0] in ("tests", "data", "configs", "bench")]


def test_installed_package_is_imported(installed):
    proc = _run(installed, "-c", "import anchorviz; print(anchorviz.__file__)", timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    where = Path(proc.stdout.strip().splitlines()[-1]).resolve()
    assert where.is_relative_to(installed["site"].resolve()), where
    assert not where.is_relative_to(ROOT), where


def test_installed_package_lists_the_named_datasets(installed):
    proc = _run(installed, "-m", "anchorviz.cli", "datasets", timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lines = proc.stdout.splitlines()
    listed = {line.split()[0] for line in lines if line.strip()}
    for name in SOME_DATASETS:
        assert name in listed, proc.stdout[-4000:]


def test_installed_package_runs_the_quick_demo(installed):
    out = installed["work"] / "runs"
    proc = _run(installed, "-m", "anchorviz.cli", "demo", "--quick", "--out", str(out))
    log = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, log
    assert "Results (" in proc.stdout and "HTML report:" in proc.stdout, log
    report = Path(proc.stdout.split("HTML report:")[-1].strip().splitlines()[0])
    assert report.is_file(), log
