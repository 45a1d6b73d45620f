"""Issue 19.5: ``anchorviz report`` rebuilds the results table from the run folders instead of
trusting a results.parquet, and says which runs it could not read."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from tiny_project import tiny_config

from anchorviz.cli import EXIT_DATA, EXIT_OK, main
from anchorviz.pipeline.results import results_table
from anchorviz.pipeline.store import RunStore
from anchorviz.pipeline.sweep import run


@pytest.fixture
def finished(tmp_path):
    """A finished tiny run folder: {kind: run dir}, and its output folder."""
    out = tmp_path / "out"
    results = run(tiny_config(tmp_path), out, progress=False)
    return {r.kind: r.run_dir for r in results}, out


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_corrupted_metrics_file_drops_the_run_and_says_so(finished, capsys):
    runs, out = finished
    assert len(pd.read_parquet(out / "results.parquet")) == 3
    _flip_a_byte(runs["student"] / "metrics.json")  # same size: only its sha256 tells
    assert main(["report", str(out)]) == EXIT_OK
    err = capsys.readouterr().err
    assert "1 run folder(s)" in err and runs["student"].name in err
    assert "metrics.json does not match its sha256" in err
    table = pd.read_parquet(out / "results.parquet")  # rebuilt, not the stale one
    assert sorted(table["kind"]) == ["ceiling", "teacher"]
    assert (out / "report.html").is_file()


def test_a_truncated_results_table_is_rebuilt_from_the_runs(finished, capsys):
    runs, out = finished
    before = pd.read_parquet(out / "results.parquet")
    with open(out / "results.parquet", "r+b") as f:
        f.truncate(10)
    (out / "results.csv").write_text("garbage")
    assert main(["report", str(out)]) == EXIT_OK
    assert "Parquet" not in capsys.readouterr().err
    after = pd.read_parquet(out / "results.parquet")
    cols = [c for c in before.columns if c != "seconds"]
    pd.testing.assert_frame_equal(before[cols], after[cols])
    assert len(pd.read_csv(out / "results.csv")) == 3


def test_failed_and_unreadable_runs_are_listed_and_nothing_readable_is_an_error(finished, capsys):
    runs, out = finished
    store = RunStore(out)
    tmp = store.begin("naive-0123456789ab")
    store.fail(tmp, "naive-0123456789ab", "h", "NonFiniteLossError: non-finite loss at step 3\nTraceback")
    table = results_table(out)
    assert table.attrs["unreadable"] == {
        "naive-0123456789ab": "status 'failed': NonFiniteLossError: non-finite loss at step 3"}
    for d in runs.values():
        (d / "MANIFEST.json").write_text("{")
    assert main(["report", str(out)]) == EXIT_DATA
    err = capsys.readouterr().err
    assert "4 run folder(s)" in err and "no finished run that could be read" in err
    assert not (out / "results.parquet").exists()  # a stale table does not outlive its runs


def test_a_verified_run_that_cannot_be_parsed_is_listed_not_fatal(finished):
    runs, out = finished
    # a finished run whose metrics lack what the table needs (e.g. written by other code)
    d = runs["ceiling"]
    m = json.loads((d / "metrics.json").read_text())
    del m["accuracy"]
    (d / "metrics.json").write_text(json.dumps(m))
    man = json.loads((d / "MANIFEST.json").read_text())
    from anchorviz.paths import file_sha256

    man["files"]["metrics.json"] = file_sha256(d / "metrics.json")
    man.get("file_stats", {}).pop("metrics.json", None)  # no size / mtime recorded: hashed
    (d / "MANIFEST.json").write_text(json.dumps(man))
    table = results_table(out)
    assert sorted(table["kind"]) == ["student", "teacher"]
    assert "KeyError" in table.attrs["unreadable"][d.name]
