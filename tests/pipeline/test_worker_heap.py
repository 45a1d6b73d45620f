"""A local worker's allocator settings (`anchorviz.pipeline.runner.limit_heap`): what each one
does, checked in a fresh interpreter so that this process's allocator and environment stay as
they are."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from anchorviz.pipeline import runner


def _run(code: str, env: dict | None = None) -> dict:
    import os

    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_onednn_cache_set_unless_the_user_set_it():
    code = """
        import json, os
        from anchorviz.pipeline.runner import limit_heap
        took = limit_heap(mmap_threshold=None)
        print(json.dumps({"took": took, "env": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")}))
    """
    got = _run(code, env={"ONEDNN_PRIMITIVE_CACHE_CAPACITY": ""})
    # an empty value counts as set (setdefault): the user's environment wins
    assert got["env"] == "" and got["took"]["onednn_cache"]
    import os

    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=env)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["env"] == "8" and got["took"]["mmap_threshold"] is False
    got = _run(code, env={"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"})
    assert got["env"] == "64"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_fixed_mmap_threshold_serves_large_blocks_from_their_own_mappings():
    """glibc raises its mmap threshold after a large block is freed, so the next block of that
    size lands in the heap (whose freed pages stay resident); at the fixed threshold it is
    mapped on its own (mallinfo2's hblkhd counts mapped bytes)."""
    code = """
        import ctypes, ctypes.util, json, sys
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        if not hasattr(libc, "mallinfo2"):
            print(json.dumps({"skip": True})); sys.exit()
        class MI(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                        "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
        libc.mallinfo2.restype = MI
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        from anchorviz.pipeline.runner import limit_heap
        took = (limit_heap(onednn_cache=None, mmap_threshold=1 << 20) if sys.argv[-1] == "fixed"
                else {})
        libc.free(libc.malloc(16 << 20))   # a large block freed: the default raises its threshold
        before = libc.mallinfo2().hblkhd
        p = libc.malloc(8 << 20)
        mapped = libc.mallinfo2().hblkhd - before
        libc.free(p)
        print(json.dumps({"mapped": mapped, "took": took}))
    """
    out = {}
    for mode in ("default", "fixed"):
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), mode],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["default"].get("skip"):
        pytest.skip("this libc has no mallinfo2 (glibc < 2.33): the mapped bytes are not visible")
    assert out["fixed"]["took"]["mmap_threshold"] is True
    assert out["fixed"]["mapped"] >= 8 << 20  # its own mapping
    assert out["default"]["mapped"] == 0  # in the heap, after the threshold rose


def test_worker_initialiser_applies_the_settings():
    import os

    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    code = """
        import json, os
        from anchorviz.pipeline.runner import _init_worker
        _init_worker(1)
        print(json.dumps({"env": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")}))
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # both settings are off in a worker (measured: neither paid for itself in the demo)
    want = None if runner.WORKER_ONEDNN_CACHE is None else str(runner.WORKER_ONEDNN_CACHE)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["env"] == want
