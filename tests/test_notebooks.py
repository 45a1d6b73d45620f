"""The notebooks: stored clean, and every one runs end to end in smoke mode.

``test_notebook_runs`` executes 01..04 in order with nbclient in a temporary copy of
``notebooks/`` (``ANCHORVIZ_SMOKE=1``, one shared ``ANCHORVIZ_NOTEBOOK_RUNS`` folder, so 02 and
03 reuse the sweep 01 trained, as they do for a user) and checks a few things each one must have
shown. Timings go to ``test-artifacts/notebook_timings.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from unittest import mock

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = [
    "01_failure_mode.ipynb",
    "02_representation_drift.ipynb",
    "03_anchor_explorer.ipynb",
    "04_your_own_models_and_data.ipynb",
]
CELL_TIMEOUT_S = 900
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
TIMINGS: dict[str, float] = {}


def _read(name: str):
    return nbformat.read(NOTEBOOK_DIR / name, as_version=4)


def _outputs(nb) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _text(nb) -> str:
    """All stream and text/plain output of an executed notebook, in order."""
    parts = []
    for o in _outputs(nb):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif "data" in o and "text/plain" in o["data"]:
            parts.append(str(o["data"]["text/plain"]))
    return "\n".join(parts)


def _mimes(nb) -> set[str]:
    return {m for o in _outputs(nb) for m in o.get("data", {})}


# --------------------------------------------------------------------------- stored form


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_stored_clean(name):
    """Valid nbformat 4, kernel python3, no outputs, a first code cell tagged parameters."""
    nb = _read(name)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code"
    for c in code:
        assert not c.get("outputs"), f"{name}: a cell is stored with outputs (clear them)"
        assert c.get("execution_count") is None, f"{name}: a cell is stored with an execution count"
    first = code[0]
    assert "parameters" in first.metadata.get("tags", []), f"{name}: first code cell not tagged"
    assert 'os.environ.get("ANCHORVIZ_SMOKE") == "1"' in first.source
    assert "ANCHORVIZ_NOTEBOOK_RUNS" in first.source


# --------------------------------------------------------------------------- execution


def _runs_folder(tmp_path_factory) -> Path:
    """The runs folder of this test session, shared by the notebook and browser tests (the
    smoke sweep is trained once). ``$ANCHORVIZ_TEST_NOTEBOOK_RUNS`` reuses a folder across
    sessions instead (a local shortcut: runs of older code in it would be reused too)."""
    env = os.environ.get("ANCHORVIZ_TEST_NOTEBOOK_RUNS")
    runs = Path(env) if env else tmp_path_factory.getbasetemp() / "anchorviz-notebook-runs"
    runs.mkdir(parents=True, exist_ok=True)
    return runs


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A temporary copy of notebooks/ and the runs folder all notebooks (and the browser test
    of the same session) share."""
    root = tmp_path_factory.mktemp("nbrun")
    nbdir = root / "notebooks"
    shutil.copytree(NOTEBOOK_DIR, nbdir,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    runs = _runs_folder(tmp_path_factory)
    return nbdir, runs


def _execute(path: Path, runs: Path):
    nb = nbformat.read(path, as_version=4)
    env = {"ANCHORVIZ_SMOKE": "1", "ANCHORVIZ_NOTEBOOK_RUNS": str(runs), "TQDM_DISABLE": "1",
           "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    with mock.patch.dict(os.environ, env):
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as exc:
            nbformat.write(nb, path.with_suffix(".failed.ipynb"))
            pytest.fail(f"{path.name}: a cell failed:\n{exc}", pytrace=False)
    nbformat.write(nb, path)  # the executed copy, for a look after a failure of the checks
    return nb


def _check_01(nb) -> None:
    text = _text(nb)
    assert "SMOKE MODE" in text
    assert "marker-label correlation" in text
    assert "naive student: WRG" in text and "naive student: AOG" in text
    assert "naive WRG > 0 (beats its teacher in distribution): " in text
    assert "naive AOG < WRG" in text
    assert ("shows the failure mode" in text) != ("does NOT show the failure mode" in text)
    assert PLOTLY_MIME in _mimes(nb)


def _check_02(nb) -> None:
    text = _text(nb)
    assert PLOTLY_MIME in _mimes(nb)
    assert "run x domain points" in text
    # the estimator either predicts (with the held-out truth beside it) or says why not
    assert ("Predicted AOG" in text) or ("too weak to predict" in text) or ("No estimate" in text)


def _check_03(nb) -> None:
    assert WIDGET_MIME in _mimes(nb), "03 displayed no widget view"
    text = _text(nb)
    assert "run shown:" in text
    assert "done -" in text, "the RunLauncher did not finish its (reused) run"
    assert "already finished, reused" in text


def _check_04(nb) -> None:
    from anchorviz.paths import realdata_dir

    text = _text(nb)
    # smoke mode never trains hub models, whatever the machine has: it says so and why
    assert "Not running the hub sweep here" in text and "smoke mode" in text
    assert "anchorviz sweep " in text
    if realdata_dir() is None:
        assert "was not found" in text
    else:
        assert "realdata-pku-safe:" in text
        assert "finished runs in" in text
        assert PLOTLY_MIME in _mimes(nb)


CHECKS = {"01": _check_01, "02": _check_02, "03": _check_03, "04": _check_04}


@pytest.mark.slow
@pytest.mark.timeout(4 * CELL_TIMEOUT_S)
@pytest.mark.parametrize("name", NOTEBOOKS)  # in this order: 02 and 03 reuse 01's sweep
def test_notebook_runs(name, workspace):
    nbdir, runs = workspace
    t0 = time.perf_counter()
    nb = _execute(nbdir / name, runs)
    TIMINGS[name] = round(time.perf_counter() - t0, 1)
    out = REPO / "test-artifacts"
    out.mkdir(exist_ok=True)
    (out / "notebook_timings.json").write_text(json.dumps(TIMINGS, indent=1) + "\n")
    print(f"{name}: {TIMINGS[name]:.0f} s in smoke mode")
    CHECKS[name[:2]](nb)
