"""Reliability (issue 43, point 3): every refusal a sentence.

* ``analyse`` compares the tokenizer's vocabulary with the model's embedding table before any
  forward pass (was: ``IndexError: index out of range in self`` from the first batch);
* a full disk / read-only file system while a run is written names the path and the run (was:
  ``[Errno 28] No space left on device``);
* ``anchorviz models --verify`` exits non-zero when an entry is unusable (was: exit 0);
* ``anchorviz models`` / ``datasets`` work on a read-only HOME and say where the cache would go
  and how to set ``$ANCHORVIZ_CACHE`` (was: exit 1, ``[Errno 30] Read-only file system``).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import WORDS, word_tokenizer
from tiny_project import tiny_config, write_pairs

from anchorviz import paths
from anchorviz.cli import EXIT_DATA, EXIT_OK, EXIT_OTHER, main

REPO = Path(__file__).resolve().parents[2]


def _big_tokenizer(n: int = 5001):
    """A word-level tokenizer of ``n`` tokens whose real words sit at the top ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    fillers = [f"w{i}" for i in range(n - len(specials) - len(WORDS))]
    vocab = {w: i for i, w in enumerate(specials + fillers + list(WORDS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]")


def test_analyse_refuses_a_tokenizer_larger_than_the_embedding_table(tmp_path, capsys):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    small = word_tokenizer("encoder")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(small), hidden_size=32, num_hidden_layers=1,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                     num_labels=1)
    rm = tmp_path / "rm"
    BertForSequenceClassification(cfg).save_pretrained(rm)
    big = _big_tokenizer()
    big.save_pretrained(rm)
    assert len(big) == 5001 and len(small) < 50
    src = write_pairs(tmp_path / "src.jsonl", 30, seed=0, domain="movie")
    code = main(["analyse", "--model", str(rm), "--reference", str(rm), "--source", str(src),
                 "--out", str(tmp_path / "an"), "--pairs", "8", "--max-length", "16"])
    err = capsys.readouterr().err
    assert code == EXIT_DATA, err
    assert "5001 tokens" in err and f"{len(small)} rows" in err and str(rm) in err, err
    assert "IndexError" not in err and "index out of range" not in err
    assert not (tmp_path / "an" / "runs").is_dir() or not any((tmp_path / "an" / "runs").iterdir())


def test_a_full_disk_while_a_run_is_written_names_the_path_and_the_run(tmp_path, monkeypatch):
    from anchorviz.pipeline.steps import run_guarded
    from anchorviz.pipeline.store import RunStore

    store = RunStore(tmp_path / "out")

    def body(tmp: Path) -> dict:
        (tmp / "a.bin").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "b.bin"))

    with pytest.raises(paths.StorageError) as info:
        run_guarded(store, "teacher-abc", {"kind": "teacher", "x": 1}, body)
    msg = str(info.value)
    assert "no space left" in msg and "run teacher-abc" in msg and "b.bin" in msg, msg
    assert "run the same command again" in msg
    assert info.value.errno == errno.ENOSPC
    # nothing half-written is left as a finished run, and the same call works once space is back
    assert not store.is_finished("teacher-abc")
    res = run_guarded(store, "teacher-abc", {"kind": "teacher", "x": 1}, lambda tmp: {"ok": 1})
    assert res.computed and store.is_finished("teacher-abc")


def test_a_full_disk_when_even_the_failure_note_cannot_be_written(tmp_path, monkeypatch):
    """The failure manifest is refused too (the disk is still full): the error still names the
    run, not the second failure, and no temporary folder is left behind."""
    from anchorviz.pipeline import store as store_mod
    from anchorviz.pipeline.steps import run_guarded

    store = store_mod.RunStore(tmp_path / "out")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod.RunStore, "fail", full)
    with pytest.raises(paths.StorageError, match="run ceiling-x"):
        run_guarded(store, "ceiling-x", {"kind": "ceiling"},
                    lambda tmp: full())
    assert not [p for p in (tmp_path / "out" / "runs").iterdir() if p.name.startswith(".tmp")]


def test_write_atomic_names_the_file_on_a_read_only_file_system(tmp_path):
    def refuse(tmp: Path) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(tmp))

    with pytest.raises(paths.StorageError) as info:
        paths.write_atomic(tmp_path / "results.parquet", refuse)
    assert "read-only" in str(info.value) and "results.parquet" in str(info.value)
    assert not list(tmp_path.iterdir())


def test_cli_run_on_a_full_disk_names_the_path_and_the_run(tmp_path, monkeypatch, capsys):
    """Through ``anchorviz run``: committing the first run fails with ENOSPC (as writing its
    manifest on a full disk does; the errno carries no file name)."""
    from anchorviz.pipeline import store as store_mod

    cfg = tiny_config(tmp_path)
    cfg_path = tmp_path / "run.yaml"
    paths.write_yaml(cfg_path, cfg.to_dict())

    def full(self, tmp, run_id, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod.RunStore, "commit", full)
    code = main(["run", str(cfg_path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == EXIT_OTHER, err
    assert "no space left on the device while writing run teacher-" in err, err
    assert str(tmp_path / "out" / "runs" / "teacher-") in err and "[Errno 28]" not in err


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    from anchorviz.models import wheels, zoo
    from anchorviz.models.convert import CONVERTERS

    monkeypatch.setenv("ANCHORVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wheels, "_installed_files", lambda spec: None)

    def convert(entry, out):
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 64)
        (out / "config.json").write_text("{}")
        return {"verification": {"passed": True}}

    monkeypatch.setitem(CONVERTERS, "smollm2-135m", convert)
    return zoo.prepare_model("smollm2-135m")


def test_models_verify_exits_non_zero_when_an_entry_is_unusable(fake_zoo, capsys):
    assert main(["models", "--verify"]) == EXIT_OK
    capsys.readouterr()
    with open(fake_zoo / "model.safetensors", "r+b") as f:  # one byte, same size
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    assert main(["models", "--verify"]) == EXIT_DATA
    captured = capsys.readouterr()
    assert "smollm2-135m" in captured.err and "failed verification" in captured.err
    assert main(["models"]) == EXIT_OK  # sizes only: the plain listing does not hash


def _read_only(monkeypatch, root: Path) -> None:
    """Make every creation under ``root`` fail as on a read-only file system (the tests run
    unprivileged in CI, where no file system can be mounted read-only)."""
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, *a, **k):
        if str(path).startswith(str(root)):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_mkdir(path, mode, *a, **k)

    monkeypatch.setattr(os, "mkdir", mkdir)
    real_statvfs = os.statvfs

    def statvfs(path):
        st = real_statvfs(path)
        if str(path).startswith(str(root)):
            return os.statvfs_result((*st[:8], st.f_flag | os.ST_RDONLY, st.f_namemax))
        return st

    monkeypatch.setattr(os, "statvfs", statvfs)


@pytest.mark.parametrize("command", ["models", "datasets"])
def test_listings_work_on_a_read_only_home(tmp_path, monkeypatch, capsys, command):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ANCHORVIZ_CACHE", raising=False)
    _read_only(monkeypatch, home)
    assert main([command]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "smollm2-135m" in out or "vader-movie" in out
    assert str(home / ".cache" / "anchorviz") in err and "$ANCHORVIZ_CACHE" in err, err
    assert "read-only" in err
    assert not (home / ".cache").exists()


def test_a_command_that_needs_the_cache_on_a_read_only_home_says_how_to_move_it(
        tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ANCHORVIZ_CACHE", raising=False)
    _read_only(monkeypatch, home)
    with pytest.raises(paths.StorageError, match=r"Set \$ANCHORVIZ_CACHE to a writable folder"):
        paths.cache_subdir("models")


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.geteuid() == 0),
                    reason="mounting a read-only or a tiny tmpfs needs root on Linux")
def test_real_read_only_home_and_full_tmpfs(tmp_path):
    """The same two faults on real file systems (a read-only tmpfs as HOME; a 200 KB tmpfs as
    --out), through the installed command line in a child process."""
    ro, small = tmp_path / "ro", tmp_path / "small"
    ro.mkdir()
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)]).returncode:
        pytest.skip("mount refused (no CAP_SYS_ADMIN in this container)")
    try:
        env = {**os.environ, "HOME": str(ro), "PYTHONPATH": str(REPO)}
        env.pop("ANCHORVIZ_CACHE", None)
        p = subprocess.run([sys.executable, "-m", "anchorviz.cli", "models"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "$ANCHORVIZ_CACHE" in p.stderr and "read-only" in p.stderr
    finally:
        subprocess.run(["umount", str(ro)])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(small)], check=True)
    try:
        cfg = tiny_config(tmp_path)
        cfg_path = tmp_path / "run.yaml"
        paths.write_yaml(cfg_path, cfg.to_dict())
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        p = subprocess.run([sys.executable, "-m", "anchorviz.cli", "run",
                            str(cfg_path), "--out", str(small / "out")], env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == EXIT_OTHER, p.stderr
        last = p.stderr.strip().splitlines()[-1]
        assert "no space left on the device while writing" in last, last
        assert str(small / "out") in last and "[Errno 28]" not in last
        man = [json.loads(m.read_text()) for m in (small / "out" / "runs").glob("*/MANIFEST.json")]
        assert all(m["status"] != "finished" or m["files"] for m in man)
    finally:
        subprocess.run(["umount", str(small)])
