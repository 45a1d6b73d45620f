"""Issue 19.7: every name that becomes a path goes through one sanitiser (a target named
``vader-../../../../t.jsonl`` cannot write outside the run folder), and run folders get the
user's umask instead of mkdtemp's 0700."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_project import tiny_config, write_pairs

from anchorviz.config import with_overrides
from anchorviz.data.entries import target_name
from anchorviz.pipeline.store import RunStore
from anchorviz.pipeline.sweep import run


@given(st.text(min_size=0, max_size=300))
@settings(max_examples=300, deadline=None)
def test_safe_component_never_leaves_its_folder(name):
    from anchorviz.paths import safe_component

    out = safe_component(name)
    assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}", out) and ".." not in out
    root = Path("/r/s")
    assert (root / out).parent == root and os.path.normpath(root / out).startswith("/r/s/")


def test_plain_names_are_unchanged():
    from anchorviz.paths import safe_component

    for name in ("amazon", "nyt", "tweets", "realdata-pku-safe", "_tmp_x_data_tgt.jsonl", "a.b-c_d"):
        assert safe_component(name) == name
    assert target_name("vader-amazon") == "amazon"
    assert target_name("/data/t.jsonl") == "t"  # a local file: its stem
    assert target_name("vader-../../../../t.jsonl") == "________t.jsonl"
    assert safe_component("x" * 300) != safe_component("x" * 299 + "y")  # shortened apart


def test_a_target_name_with_dot_dot_writes_nothing_outside_the_run_folder(tmp_path, monkeypatch):
    cfg = tiny_config(tmp_path)
    # a working folder six levels down holding a folder literally named 'vader-..'
    work = tmp_path / "w" / "a" / "b" / "c" / "d" / "e"
    (work / "vader-..").mkdir(parents=True)
    target = "vader-" + "../" * 6 + "t.jsonl"
    real = Path(os.path.normpath(work / target))
    real.parent.mkdir(parents=True, exist_ok=True)
    write_pairs(real, 40, seed=5, domain="book")
    monkeypatch.chdir(work)
    cfg = with_overrides(cfg, **{"data.targets": [target]})
    out = tmp_path / "store" / "out"
    before = {p for p in tmp_path.rglob("*") if p.is_file()}
    run(cfg, out, progress=False)
    new = {p for p in tmp_path.rglob("*") if p.is_file()} - before
    outside = sorted(str(p) for p in new if out not in p.parents)
    assert not outside, outside
    captures = [p for p in new if p.suffix == ".safetensors" and "target_test" in p.name]
    assert captures and all(".." not in p.relative_to(out).parts for p in captures)
    short = target_name(target)
    assert "/" not in short and ".." not in short
    assert all(p.name == f"target_test__{short}.safetensors" for p in captures)


@pytest.mark.parametrize("umask, want", [(0o022, 0o755), (0o002, 0o775), (0o077, 0o700)])
def test_run_folders_follow_the_umask(tmp_path, umask, want):
    old = os.umask(umask)
    try:
        store = RunStore(tmp_path / "store")
        tmp = store.begin("naive-abc")
        (tmp / "metrics.json").write_text("{}")
        final = store.commit(tmp, "naive-abc", "h1")
    finally:
        os.umask(old)
    assert stat.S_IMODE(final.stat().st_mode) == want


def test_write_atomic_replaces_whole_or_leaves_the_old_file(tmp_path):
    from anchorviz.paths import file_sha256, write_atomic

    target = tmp_path / "table.csv"
    write_atomic(target, lambda tmp: tmp.write_text("old\n"))
    assert target.read_text() == "old\n"

    def half_then_fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, half_then_fail)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
    import hashlib

    assert file_sha256(target, chunk=2) == hashlib.sha256(b"old\n").hexdigest()
