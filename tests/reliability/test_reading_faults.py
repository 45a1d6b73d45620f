"""Reliability (issue 43, point 2): bounded reading.

A 2.2 MB ``.jsonl.gz`` that unpacks to about 1 GB made ``anchorviz cues`` peak at 3.2 GB RSS
and exit 0. Now local files are streamed (memory holds what is kept, not the unpacked file) and
read under two limits per dataset: bytes after decompression and rows parsed, each named in the
error with the setting that raises it (``$ANCHORVIZ_MAX_READ_BYTES`` / ``max_bytes=``,
``$ANCHORVIZ_MAX_READ_ROWS`` / ``max_rows=``). Peak RSS of the full-size bomb and of a
legitimate 200 MB file: docs/BENCHMARKS.md (``bench/bench_reading.py``).
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from anchorviz.cli import EXIT_DATA, main
from anchorviz.data.readers import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, load_pairs, read_limits
from anchorviz.data.schema import DataError

LINE = json.dumps({"prompt": "p " * 500, "chosen": "good " * 300, "rejected": "bad " * 300})


def _bomb(path: Path, lines: int) -> Path:
    """A gzip of ``lines`` identical JSON lines (about 3.3 KB each): tiny packed, big unpacked."""
    block = (LINE + "\n").encode() * 1000
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(lines // 1000):
            f.write(block)
    return path


def _pairs(path: Path, n: int, start: int = 0) -> Path:
    with open(path, "w") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"})
                    + "\n")
    return path


def test_defaults_are_documented_and_settable(monkeypatch):
    monkeypatch.delenv("ANCHORVIZ_MAX_READ_BYTES", raising=False)
    monkeypatch.delenv("ANCHORVIZ_MAX_READ_ROWS", raising=False)
    assert read_limits() == (DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS) == (1 << 30, 2_000_000)
    monkeypatch.setenv("ANCHORVIZ_MAX_READ_BYTES", "5_000")
    monkeypatch.setenv("ANCHORVIZ_MAX_READ_ROWS", "1e3")
    assert read_limits() == (5000, 1000)
    assert read_limits(max_bytes=7, max_rows=8) == (7, 8)
    monkeypatch.setenv("ANCHORVIZ_MAX_READ_ROWS", "lots")
    with pytest.raises(ValueError, match=r"\$ANCHORVIZ_MAX_READ_ROWS must be a positive"):
        read_limits()
    with pytest.raises(ValueError, match="max_bytes must be a positive whole number"):
        load_pairs("x.jsonl", max_bytes=0)


def test_a_gzip_bomb_is_stopped_at_the_byte_limit(tmp_path, monkeypatch):
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", 20_000)  # ~66 MB unpacked, ~0.1 MB packed
    assert bomb.stat().st_size < 1_000_000
    monkeypatch.setenv("ANCHORVIZ_MAX_READ_BYTES", str(8 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as info:
            load_pairs(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert "bomb.jsonl.gz" in msg and f"{8 << 20:,} bytes after decompression" in msg, msg
    assert "$ANCHORVIZ_MAX_READ_BYTES" in msg and "max_bytes=" in msg
    assert peak < 24 << 20, f"peak {peak / 2**20:.1f} MiB: the file was not streamed"
    # the same file under a limit raised by the argument: read, one pair kept
    df, report = load_pairs(bomb, max_bytes=1 << 30)
    assert len(df) == 1 and report.total == 20_000


def test_memory_grows_with_what_is_kept_not_with_the_unpacked_size(tmp_path):
    """66 MB unpacked of one repeated line: Python allocations stay far below the file's size
    (before: the bytes, the decoded text, its lines and every parsed row were all held)."""
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", 20_000)
    tracemalloc.start()
    try:
        df, report = load_pairs(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(df) == 1 and report.dropped.get("duplicate") == 19_999
    assert peak < 24 << 20, f"peak {peak / 2**20:.1f} MiB for 66 MB unpacked"


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "csv", "csv.gz", "json", "parquet"])
def test_the_row_limit_names_the_file_and_the_setting(tmp_path, monkeypatch, fmt):
    rows = pd.DataFrame({"prompt": [f"q{i}" for i in range(300)],
                         "chosen": [f"good {i}" for i in range(300)],
                         "rejected": [f"bad {i}" for i in range(300)]})
    path = tmp_path / f"d.{fmt}"
    if fmt.startswith("jsonl"):
        text = "".join(json.dumps(r) + "\n" for r in rows.to_dict("records"))
        (gzip.open(path, "wt") if fmt.endswith("gz") else open(path, "w")).write(text)
    elif fmt.startswith("csv"):
        rows.to_csv(path, index=False)
    elif fmt == "json":
        path.write_text(json.dumps(rows.to_dict("records")))
    else:
        rows.to_parquet(path)
    assert len(load_pairs(path)[0]) == 300
    monkeypatch.setenv("ANCHORVIZ_MAX_READ_ROWS", "100")
    with pytest.raises(DataError, match=r"more than 100 rows .*\$ANCHORVIZ_MAX_READ_ROWS "
                                        r"\(or load_pairs\(\.\.\., max_rows=N\)\)") as info:
        load_pairs(path)
    assert str(path) in str(info.value)
    assert len(load_pairs(path, max_rows=300)[0]) == 300
    monkeypatch.delenv("ANCHORVIZ_MAX_READ_ROWS")
    with pytest.raises(DataError, match=r"more than 2,000 bytes"):
        load_pairs(path, max_bytes=2000)


def test_the_limits_apply_to_a_folder_as_a_whole(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    for k in range(3):
        _pairs(folder / f"part{k}.jsonl", 60, start=100 * k)
    assert len(load_pairs(folder)[0]) == 180
    with pytest.raises(DataError, match="more than 150 rows"):
        load_pairs(folder, max_rows=150)


def test_cli_cues_on_a_bomb_is_refused_with_the_setting(tmp_path, monkeypatch, capsys):
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", 20_000)
    monkeypatch.setenv("ANCHORVIZ_MAX_READ_BYTES", str(4 << 20))
    assert main(["cues", str(bomb), "--n-boot", "10"]) == EXIT_DATA
    err = capsys.readouterr().err
    assert "bytes after decompression" in err and "$ANCHORVIZ_MAX_READ_BYTES" in err, err
