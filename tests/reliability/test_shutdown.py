"""Nothing left running or half-said: a sweep's workers stop with their driver (SIGTERM, or the
driver killed), and a worker that dies is reported under the node it was running."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anchorviz.pipeline.runner import Node, run_graph

HERE = Path(__file__).resolve().parents[1] / "support"  # the helper modules


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except FileNotFoundError:
            pass
    return out


def _start_driver(tmp_path: Path) -> subprocess.Popen:
    script = tmp_path / "sweep.py"
    script.write_text(
        "from graph_nodes import sleep_long\n"
        "from anchorviz.pipeline.runner import Node, run_graph\n"
        "if __name__ == '__main__':\n"
        "    nodes = [Node('a', 'teacher', {}), Node('b', 'teacher', {})]\n"
        f"    run_graph(nodes, {str(tmp_path)!r}, jobs=2, progress=False, execute=sleep_long)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env,
                            stdout=(tmp_path / "out.txt").open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 300
    while len(list(tmp_path.glob("started-*"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert len(list(tmp_path.glob("started-*"))) == 2, (tmp_path / "out.txt").read_text()
    return proc


def _wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.time() + seconds
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if _alive(p)}


@pytest.mark.slow  # a driver with two worker processes
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_workers_and_resource_tracker_stop_when_the_driver_is_terminated_or_killed(tmp_path, sig):
    proc = _start_driver(tmp_path)
    others = _children(proc.pid)  # the workers and multiprocessing's resource tracker
    workers = {int(p.name.rsplit("-", 1)[1]) for p in tmp_path.glob("started-*")}
    assert workers <= others and len(others) >= 3, (workers, others)
    try:
        os.kill(proc.pid, sig)  # the driver only, not its process group
        proc.wait(timeout=120)
        left = _wait_gone(others, 30)  # not the nodes' 60 s, nor forever
        assert not left, f"still running after the driver got {sig.name}: {left}"
    finally:
        for pid in others:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # two worker processes
def test_a_killed_worker_is_reported_under_its_own_node(tmp_path, caplog):
    nodes = [Node("a-sleeps", "teacher", {}), Node("b-dies", "teacher", {"die": 2}),
             Node("c-after", "student", {}, ("a-sleeps", "b-dies"))]
    from graph_nodes import die_or_sleep

    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError) as info:
        run_graph(nodes, tmp_path, jobs=2, progress=False, execute=die_or_sleep)
    msg = str(info.value)
    assert "b-dies" in msg and "a-sleeps" not in msg and "SIGKILL" in msg, msg
    # the other worker's node runs in a process of its own: it is never blamed, finishes, and
    # the node that needs both never starts
    assert not [r.getMessage() for r in caplog.records if "a-sleeps" in r.getMessage()]
    assert len(list(tmp_path.glob("finished-teacher-*"))) == 1
    assert not list(tmp_path.glob("started-student-*"))
