"""The run store on its own (no training): names that could escape it, content hashes that
catch every kind of damage, atomic commits, failed runs, temporaries and locks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from filelock import Timeout
from hypothesis import given, settings
from hypothesis import strategies as st

from anchorviz.paths import file_sha256, read_yaml
from anchorviz.pipeline.store import MANIFEST, RunStore, StoreError, config_hash, safe_name

FILES = {"metrics.json": b'{"accuracy": 0.75}\n', "scores.parquet": b"PAR1" + bytes(range(256)) * 4,
         "hidden/student/source_test.safetensors": b"\x10" * 300, "config.yaml": b"seed: 0\n"}


def write_run(store: RunStore, run_id: str = "naive-abc", h: str = "h1",
              files: dict[str, bytes] | None = None) -> Path:
    tmp = store.begin(run_id)
    for rel, data in (files or FILES).items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)
    return store.commit(tmp, run_id, h)


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", [
    "../x", "..", "../../etc/passwd", "/abs", "/", "a/b", "a\\b", "runs/../../x", "x/..",
    "", ".", ".hidden", "-dash-first", "a..b", "a b", "run\n", "run\r", "run\x00", "tab\t",
    "é", "ａ", "x" * 129, "~user", "$HOME", "a:b", "a*b",
])
def test_safe_name_rejects_what_could_escape_the_store(name: str) -> None:
    with pytest.raises(ValueError, match=r"is not allowed: use letters, digits"):
        safe_name(name, "run id")


@pytest.mark.parametrize("name", [None, 5, b"abc", ["a"], Path("abc")])
def test_safe_name_rejects_non_strings(name: object) -> None:
    with pytest.raises(ValueError, match="is not allowed"):
        safe_name(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["teacher-1a2b3c4d5e6f", "naive-00", "reference-abc", "a",
                                  "A.b_c-d", "x" * 128, "0start"])
def test_safe_name_accepts_plain_names(name: str) -> None:
    assert safe_name(name) == name


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/b", "..", ".tmp-x"])
def test_store_methods_refuse_traversal_and_create_nothing_outside(tmp_path: Path, bad: str) -> None:
    root = tmp_path / "sweep"
    store = RunStore(root)
    before = sorted(p.name for p in tmp_path.iterdir())
    for call in (lambda: store.run_dir(bad), lambda: store.shared_dir(bad),
                 lambda: store.begin(bad), lambda: store.is_finished(bad)):
        with pytest.raises(ValueError, match="not allowed"):
            call()
    with pytest.raises(ValueError, match="not allowed"), store.lock(bad):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert sorted(p.name for p in root.iterdir()) == [".locks", "runs", "shared"]
    assert list((root / "runs").iterdir()) == [] and list((root / "shared").iterdir()) == []


# --------------------------------------------------------------------------- hashes


def test_commit_writes_a_manifest_of_every_file_and_verifies(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    d = write_run(store)
    man = json.loads((d / MANIFEST).read_text())
    assert man["status"] == "finished" and man["config_hash"] == "h1"
    assert set(man["files"]) == set(FILES)
    assert all(man["files"][rel] == file_sha256(d / rel) for rel in FILES)
    assert store.verify(d) == (True, "finished")
    assert store.is_finished("naive-abc", "h1") and store.finished_runs() == ["naive-abc"]
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _flip(p: Path) -> None:  # same size, one bit
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x80
    p.write_bytes(bytes(data))


def _append(p: Path) -> None:
    with open(p, "ab") as f:
        f.write(b"x")


def _delete(p: Path) -> None:
    p.unlink()


def _to_dir(p: Path) -> None:
    p.unlink()
    p.mkdir()


DAMAGE = {"truncated": _truncate, "emptied": _empty, "one bit flipped": _flip,
          "appended to": _append, "deleted": _delete, "replaced by a folder": _to_dir}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("rel", sorted(FILES))
def test_every_kind_of_file_damage_is_detected_and_names_the_file(tmp_path: Path, damage: str,
                                                                  rel: str) -> None:
    store = RunStore(tmp_path)
    d = write_run(store)
    DAMAGE[damage](d / rel)
    ok, why = store.verify(d)
    assert not ok and rel in why
    assert ("missing" if damage in ("deleted", "replaced by a folder") else "sha256") in why
    assert not store.is_finished("naive-abc", "h1") and store.finished_runs() == []
    # a new commit of the same run replaces the damaged folder whole
    d2 = write_run(store)
    assert d2 == d and store.verify(d)[0]
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("manifest", [
    "", "{not json", "[]", '{"status": "failed", "files": {}}', '{"files": {}}',
    '{"status": "running", "files": {}}', '{"status": "finished", "files": []}', "42",
    json.dumps({"status": "finished", "files": {
        "extra.bin": "0" * 64}}),
])
def test_a_damaged_or_unfinished_manifest_is_not_a_finished_run(tmp_path: Path,
                                                                 manifest: str) -> None:
    store = RunStore(tmp_path)
    d = write_run(store)
    (d / MANIFEST).write_text(manifest)
    ok, why = store.verify(d)
    assert not ok and why
    assert not store.is_finished("naive-abc") and store.finished_runs() == []


def test_a_manifest_naming_files_outside_the_run_is_not_trusted(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    d = write_run(store)
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    for rel in ("../../outside.txt", str(outside)):
        (d / MANIFEST).write_text(json.dumps({"status": "finished",
                                              "files": {rel: file_sha256(outside)}}))
        ok, why = store.verify(d)
        assert not ok and "outside the run folder" in why


def test_a_missing_or_undecodable_manifest_is_not_finished(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    d = write_run(store)
    (d / MANIFEST).write_bytes(b'{"status": "fin\xff\xfeished"}')
    assert store.verify(d) == (False, "no readable manifest (UnicodeDecodeError)")
    assert store.manifest("naive-abc") is None
    (d / MANIFEST).unlink()
    assert store.verify(d) == (False, "no readable manifest (FileNotFoundError)")
    (tmp_path / "runs" / "other-run").mkdir()
    assert store.finished_runs() == [] and not store.is_finished("other-run")


def test_same_run_id_with_another_config_is_an_error_not_an_overwrite(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    d = write_run(store, h="aaa")
    with pytest.raises(StoreError, match=r"different config \(hash aaa != bbb\)"):
        store.is_finished("naive-abc", "bbb")
    assert store.verify(d)[0]


# --------------------------------------------------------------------------- crashes in commit


def test_crash_between_the_two_renames_of_a_replacing_commit_loses_nothing_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore(tmp_path)
    d = write_run(store)
    _truncate(d / "scores.parquet")  # the earlier attempt is damaged: it gets replaced
    real = os.rename
    calls = []

    def crash_on_second(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise OSError("simulated crash between moving the old folder aside and renaming")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", crash_on_second)
    tmp = store.begin("naive-abc")
    for rel, data in FILES.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)
    with pytest.raises(OSError, match="simulated crash"):
        store.commit(tmp, "naive-abc", "h1")
    monkeypatch.setattr(os, "rename", real)
    assert not store.is_finished("naive-abc") and store.finished_runs() == []
    assert store.clean_temporaries() == 1  # the orphaned complete temporary is removed
    assert store.verify(write_run(store))[0]


def test_fail_marks_the_run_failed_and_never_clobbers_a_finished_one(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    tmp = store.begin("naive-abc")
    (tmp / "history.parquet").write_bytes(b"partial")
    d = store.fail(tmp, "naive-abc", "h1", "NonFiniteLossError: non-finite loss at step 3")
    man = json.loads((d / MANIFEST).read_text())
    assert man["status"] == "failed" and "step 3" in man["error"] and man["files"] == {}
    assert store.verify(d) == (False, "status 'failed'")
    assert not store.is_finished("naive-abc") and store.finished_runs() == []
    # a rerun that succeeds replaces the failed folder
    assert store.verify(write_run(store))[0]
    # a late failure of another attempt leaves the finished run alone
    tmp = store.begin("naive-abc")
    store.fail(tmp, "naive-abc", "h1", "late")
    assert store.verify(d)[0] and not tmp.exists()


def test_clean_temporaries_removes_stale_folders_but_not_those_of_a_live_writer(
        tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    stale, live = store.begin("teacher-aaa"), store.begin("naive-bbb")
    assert stale.name.startswith(".tmp-teacher-aaa-")
    with store.lock("naive-bbb"):
        assert store.clean_temporaries() == 1
    assert not stale.exists() and live.exists()
    assert store.clean_temporaries() == 1 and not live.exists()


# --------------------------------------------------------------------------- locks


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    lockfile = tmp_path / ".locks" / "naive-abc.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from filelock import FileLock\n"
         f"with FileLock({str(lockfile)!r}):\n"
         "    print('held', flush=True); sys.stdin.read(); time.sleep(0)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(Timeout), store.lock("naive-abc", timeout=0.2):
            pass
        assert time.monotonic() - t0 < 2
        assert store.clean_temporaries() == 0
        tmp = store.begin("naive-abc")
        assert store.clean_temporaries() == 0 and tmp.exists()  # the holder may be writing it
    finally:
        holder.stdin.close()  # the holder lets go
        holder.wait(timeout=30)
    with store.lock("naive-abc", timeout=5):
        pass


# --------------------------------------------------------------------------- YAML, hashes


def test_read_yaml_never_constructs_python_objects(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(yaml.YAMLError):
        read_yaml(path)
    path.write_text("a: !!python/object/new:builtins.list [[1]]\n")
    with pytest.raises(yaml.YAMLError):
        read_yaml(path)
    assert not marker.exists()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_config_hash_ignores_key_order_and_sees_every_value(d: dict) -> None:
    shuffled = dict(reversed(list(d.items())))
    assert config_hash(d) == config_hash(shuffled)
    assert len(config_hash(d)) == 12
    changed = {**d, "__extra__": 1}
    assert config_hash(changed) != config_hash(d)


# --------------------------------------------------------------------------- untrusted keys


def test_run_and_shared_keys_with_path_traversal_are_rejected(tmp_path: Path) -> None:
    from anchorviz.pipeline.store import RunStore

    store = RunStore(tmp_path / "sweep")
    for bad in ("../x", "/abs", "a/b", "..", "x\n"):
        for call in (store.run_dir, store.shared_dir, store.begin):
            with pytest.raises(ValueError, match="is not allowed"):
                call(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]
