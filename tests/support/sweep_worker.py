"""A sweep in a child process, with hooks to SIGKILL itself at chosen points (fault tests).

Launched by ``tests/reliability/test_faults.py``; not a test module itself. Usage::

    python tests/support/sweep_worker.py SWEEP_YAML OUT_DIR --log EVENTS [--kill SPEC] [--reverse]
                                 [--barrier N] [--threads 1]

Every event is one line ``<pid> <event> <run_id>`` appended to EVENTS with a single
``write`` on a descriptor opened with ``O_APPEND`` (so several workers can share one log):

- ``ready -``        imports done, hooks installed, about to start the sweep;
- ``start <run>``    the run is not finished in the store, its body starts computing;
- ``train <run>``    ``train_reward_model`` is called for that run (it really trains);
- ``done <run>``     the run was committed (renamed into place) by this process;
- ``kill <what>``    the worker is about to SIGKILL itself at the point ``what``;
- ``finished -``     the whole sweep returned (results table written).

``--kill SPEC`` (the process kills itself with SIGKILL, no clean-up of any kind):

- ``hash:N:K``      inside the N-th ``RunStore.commit`` of this process, after K files were hashed
                    (a complete temporary run folder without a manifest);
- ``prerename:N``   inside the N-th commit, after the manifest is written and synced, before
                    the folder is renamed into place;
- ``reference:K``   after the K-th hidden-state file of the SHARED reference capture is written
                    (half a reference capture, no ``DONE.json``);
- ``aftertrain:N``  right after the N-th ``train_reward_model`` call returns (trained weights in
                    memory only, nothing of the run written yet);
- ``results``       while the results table is written (temporary parquet written, not renamed).

``--reverse`` runs the sweep's configs in reverse order (two workers then meet on different
runs); ``--barrier N`` waits until N workers have logged ``ready`` before starting.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


class EventLog:
    """One line per event, appended atomically (``O_APPEND``, one ``write`` per line)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: str, what: str = "-") -> None:
        os.write(self.fd, f"{os.getpid()} {event} {what}\n".encode())

    def count(self, event: str) -> int:
        with open(self.path, encoding="utf-8") as f:
            return sum(1 for line in f if line.split()[1:2] == [event])


def _die(log: EventLog, what: str) -> None:
    log.write("kill", what)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # never reached: SIGKILL cannot be caught


def install_hooks(log: EventLog, kill: str | None, reverse: bool) -> None:
    """Monkeypatch the pipeline: event logging everywhere, one SIGKILL point if asked."""
    import pandas as pd

    import anchorviz.analysis.capture as capture_mod
    import anchorviz.pipeline.steps as steps_mod
    import anchorviz.pipeline.store as store_mod
    import anchorviz.pipeline.sweep as sweep_mod

    kind, *nums = (kill or "none").split(":")
    args = [int(x) for x in nums]
    state: dict[str, Any] = {"run": "-", "commits": 0, "in_commit": 0, "hashed": 0,
                             "trains": 0, "ref_files": 0}

    real_guarded = steps_mod.run_guarded

    def guarded(store, run_id, key, body, **kw):
        def logged_body(tmp):
            state["run"] = run_id
            log.write("start", run_id)
            return body(tmp)

        res = real_guarded(store, run_id, key, logged_body, **kw)
        if res.computed:
            log.write("done", run_id)
        return res

    steps_mod.run_guarded = guarded

    real_train = steps_mod.train_reward_model

    def train(*a, **k):
        state["trains"] += 1
        log.write("train", state["run"])
        out = real_train(*a, **k)
        if kind == "aftertrain" and state["trains"] == args[0]:
            _die(log, f"aftertrain:{state['run']}")
        return out

    steps_mod.train_reward_model = train

    real_commit = store_mod.RunStore.commit

    def commit(self, tmp, run_id, *a, **k):
        state["commits"] += 1
        state["in_commit"] = state["commits"]
        state["hashed"] = 0
        state["run"] = run_id  # the body has returned: name the run being committed
        try:
            return real_commit(self, tmp, run_id, *a, **k)
        finally:
            state["in_commit"], state["run"] = 0, "-"

    store_mod.RunStore.commit = commit

    real_sha = store_mod.file_sha256

    def sha(path, *a, **k):
        out = real_sha(path, *a, **k)
        if kind == "hash" and state["in_commit"] == args[0]:
            state["hashed"] += 1
            if state["hashed"] == args[1]:
                _die(log, f"hash:{state['run']}")
        return out

    store_mod.file_sha256 = sha

    real_fsync = store_mod._fsync_dir

    def fsync_dir(path):
        real_fsync(path)
        if kind == "prerename" and state["in_commit"] == args[0]:
            _die(log, f"prerename:{state['run']}")

    store_mod._fsync_dir = fsync_dir

    real_save = capture_mod.save_captured

    def save_captured(path, cap):
        out = real_save(path, cap)
        if "shared" in Path(path).parts:
            state["ref_files"] += 1
            if kind == "reference" and state["ref_files"] == args[0]:
                _die(log, f"reference:{state['run']}")
        return out

    capture_mod.save_captured = save_captured
    steps_mod.save_captured = save_captured  # steps imports the name at its top

    real_to_parquet = pd.DataFrame.to_parquet

    def to_parquet(self, path=None, *a, **k):
        out = real_to_parquet(self, path, *a, **k)
        if kind == "results" and Path(str(path)).name.startswith(".results"):
            _die(log, "results")
        return out

    pd.DataFrame.to_parquet = to_parquet

    if reverse:
        real_expand = sweep_mod.expand_sweep
        sweep_mod.expand_sweep = lambda sw: list(reversed(real_expand(sw)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("sweep_yaml")
    p.add_argument("out")
    p.add_argument("--log", required=True)
    p.add_argument("--kill", default=None)
    p.add_argument("--reverse", action="store_true")
    p.add_argument("--barrier", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")

    import torch

    torch.set_num_threads(args.threads)
    from anchorviz.pipeline.sweep import sweep
    from anchorviz.sweep_config import load_sweep

    log = EventLog(args.log)
    install_hooks(log, args.kill, args.reverse)
    sw = load_sweep(args.sweep_yaml)
    log.write("ready")
    deadline = time.monotonic() + 120
    while args.barrier and log.count("ready") < args.barrier:
        if time.monotonic() > deadline:
            print("barrier timed out", file=sys.stderr)
            return 3
        time.sleep(0.02)
    sweep(sw, args.out)
    log.write("finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
