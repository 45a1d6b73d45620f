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


# --------------------------------------------------------------------------- cheap reads, full hashes


def write_old_run(store: RunStore, run_id: str = "naive-abc", h: str = "h1",
                  files: dict[str, bytes] | None = None) -> Path:
    """A run whose files were written a while before the commit (as a trained run's are), so
    none is "racy": the manifest records the size and mtime of each."""
    tmp = store.begin(run_id)
    old = time.time_ns() - 60 * 10**9
    for rel, data in (files or FILES).items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)
        os.utime(tmp / rel, ns=(old, old))
    return store.commit(tmp, run_id, h)


def tamper_keeping_size_and_mtime(p: Path) -> None:
    st = p.stat()
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x80
    p.write_bytes(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns


@pytest.fixture
def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path the store hashes (its one hash function, counted)."""
    import anchorviz.pipeline.store as store_mod

    seen: list[str] = []

    def counting(path, *a, **k):
        seen.append(str(path))
        return file_sha256(path, *a, **k)

    monkeypatch.setattr(store_mod, "file_sha256", counting)
    return seen


def test_the_manifest_records_size_and_mtime_next_to_each_sha256(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    d = write_old_run(store)
    man = json.loads((d / MANIFEST).read_text())
    assert set(man["file_stats"]) == set(man["files"]) == set(FILES)
    for rel in FILES:
        st = (d / rel).stat()
        assert man["file_stats"][rel] == {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def test_a_racy_file_gets_no_stats_and_is_always_hashed(tmp_path: Path) -> None:
    # a file whose mtime is not before the commit's clock tick could change again unseen
    store = RunStore(tmp_path)
    tmp = store.begin("naive-abc")
    old, future = time.time_ns() - 60 * 10**9, time.time_ns() + 3600 * 10**9
    for rel, data in FILES.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)
        os.utime(tmp / rel, ns=(old, future if rel == "metrics.json" else old))
    d = store.commit(tmp, "naive-abc", "h1")
    assert set(store.manifest("naive-abc")["file_stats"]) == set(FILES) - {"metrics.json"}
    tamper_keeping_size_and_mtime(d / "metrics.json")
    assert store.verify(d) == (False, "file metrics.json does not match its sha256 "
                                      "(corrupted or truncated)")


def test_reading_finished_runs_checks_sizes_and_mtimes_only(tmp_path: Path,
                                                           count_hashes: list[str]) -> None:
    store = RunStore(tmp_path)
    for i in range(3):
        write_old_run(store, f"naive-{i}")
    count_hashes.clear()
    assert store.finished_runs() == ["naive-0", "naive-1", "naive-2"]
    assert all(store.is_finished(f"naive-{i}", "h1") for i in range(3))
    assert count_hashes == []
    # a changed size or a missing file is still refused without hashing
    (tmp_path / "runs" / "naive-0" / "scores.parquet").write_bytes(b"PAR1")
    (tmp_path / "runs" / "naive-1" / "metrics.json").unlink()
    finished, problems = store.scan()
    assert finished == ["naive-2"] and count_hashes == []
    assert "scores.parquet does not match its sha256 (size 4 bytes" in problems["naive-0"]
    assert problems["naive-1"] == "file metrics.json is missing"
    # a file rewritten with its size kept has a new mtime: hashed, and refused
    d = tmp_path / "runs" / "naive-2"
    (d / "config.yaml").write_bytes(b"seed: 1\n")
    assert not store.is_finished("naive-2") and count_hashes == [str(d / "config.yaml")]
    # touched only (a copy without its mtimes): hashed, and still the file written
    (d / "config.yaml").write_bytes(FILES["config.yaml"])
    assert store.is_finished("naive-2")
    # full: every file hashed
    count_hashes.clear()
    assert store.verify(d, full=True)[0] and len(count_hashes) == len(FILES)


def test_results_table_does_not_hash(tmp_path: Path, count_hashes: list[str]) -> None:
    from fake_sweep import write_fake_sweep

    from anchorviz.pipeline.results import results_table

    staging = write_fake_sweep(tmp_path / "staging", seeds=(0,), lambdas=(1.0,), layers=("last",))
    store = RunStore(tmp_path / "sweep")
    for src in sorted((staging / "runs").iterdir()):
        man = json.loads((src / MANIFEST).read_text())
        files = {str(p.relative_to(src)): p.read_bytes() for p in src.rglob("*")
                 if p.is_file() and p.name != MANIFEST}
        files["checkpoint/trainable.safetensors"] = os.urandom(4096)
        write_old_run(store, src.name, man["config_hash"], files)
    count_hashes.clear()
    table = results_table(tmp_path / "sweep")
    assert len(table) == len(list((staging / "runs").iterdir())) and not table.attrs["unreadable"]
    assert count_hashes == []


def test_older_manifests_without_stats_are_hashed_in_full(tmp_path: Path,
                                                         count_hashes: list[str]) -> None:
    store = RunStore(tmp_path)
    d = write_old_run(store)
    man = json.loads((d / MANIFEST).read_text())
    del man["file_stats"]
    (d / MANIFEST).write_text(json.dumps(man))
    count_hashes.clear()
    assert store.is_finished("naive-abc", "h1") and len(count_hashes) == len(FILES)
    assert "file_stats" not in json.loads((d / MANIFEST).read_text())  # reading never writes
    tamper_keeping_size_and_mtime(d / "scores.parquet")
    assert not store.is_finished("naive-abc", "h1")


def test_a_checkpoint_changed_in_place_with_its_mtime_restored_is_refused_when_loaded(
        tmp_path: Path) -> None:
    from anchorviz.models.reward_model import CHECKPOINT_FILE, ModelError
    from anchorviz.pipeline.store import load_run_model

    store = RunStore(tmp_path)
    d = write_old_run(store, files={**FILES, "config.yaml": b"kind: student\nmodel: none\n",
                                    CHECKPOINT_FILE: os.urandom(64 * 1024)})
    tamper_keeping_size_and_mtime(d / CHECKPOINT_FILE)
    # reading the run (results table, resume) does not see it: same size, same mtime ...
    assert store.is_finished("naive-abc", "h1")
    # ... loading its contents does, before a byte of the checkpoint is used
    with pytest.raises(ModelError, match=r"not a finished, intact run \(file "
                                         r"checkpoint/trainable.safetensors does not match"):
        load_run_model(d)
    assert not store.verify(d, full=True)[0]
    assert not store.verify(d, hash_files=[CHECKPOINT_FILE])[0]
    assert store.verify(d, hash_files=["nothing.bin"]) == (
        False, "file nothing.bin is not in the manifest")


def test_cli_verify_hashes_everything_and_names_each_bad_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from anchorviz.cli import EXIT_CONFIG, EXIT_DATA, EXIT_OK, main

    store = RunStore(tmp_path)
    good = write_old_run(store, "naive-good")
    bad = write_old_run(store, "anchor-bad")
    tamper_keeping_size_and_mtime(bad / "hidden/student/source_test.safetensors")
    assert store.finished_runs() == ["anchor-bad", "naive-good"]  # the cheap read misses it
    assert main(["verify", str(tmp_path)]) == EXIT_DATA
    out, err = capsys.readouterr()
    assert ("BAD anchor-bad: file hidden/student/source_test.safetensors does not match its "
            "sha256") in err and "naive-good" not in err
    assert "1 run(s) intact (every file hashed), 1 not" in out
    assert main(["verify", str(good)]) == EXIT_OK
    assert main(["verify", str(bad)]) == EXIT_DATA
    assert "BAD anchor-bad" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "runs")]) == EXIT_CONFIG  # neither a run nor a sweep


def test_the_sweep_file_a_sweep_writes_reads_back(tmp_path):
    """sweep.yaml holds the grid with its unset keys as null (artifact_strengths, detail_seeds);
    load_sweep once refused it ('grid.artifact_strengths: expected a non-empty list')."""
    from dataclasses import asdict

    from anchorviz.paths import write_yaml
    from anchorviz.pipeline.demo import demo_sweep
    from anchorviz.sweep_config import load_sweep, sweep_from_dict

    sw = demo_sweep()
    # exactly what anchorviz.pipeline.sweep.sweep writes
    write_yaml(tmp_path / "sweep.yaml", {
        "base": sw.base.to_dict(), "grid": {k: v for k, v in asdict(sw).items() if k != "base"}})
    back = load_sweep(tmp_path / "sweep.yaml")
    assert back.seeds == sw.seeds and back.detail_seeds == [0]
    assert back.artifact_strengths is None
    assert sweep_from_dict({"grid": {"detail_seeds": None}}).detail_seeds is None
