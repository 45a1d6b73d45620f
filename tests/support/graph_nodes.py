"""Module-level node executors for the run-graph tests (worker processes import them by name)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def record(kind: str, config: dict, out_dir: str) -> dict:
    """Append (kind, start, end, pid) to out_dir/log.jsonl; sleep a little so overlaps show."""
    t0 = time.time()
    time.sleep(0.3)
    with open(Path(out_dir) / "log.jsonl", "a") as f:
        f.write(json.dumps({"kind": kind, "seed": config["seed"],
                            "lam": config["method"]["anchor_lambda"], "start": t0,
                            "end": time.time(), "pid": os.getpid()}) + "\n")
    return {"kind": kind, "computed": True, "seconds": time.time() - t0}


def fail_teacher_of_seed_1(kind: str, config: dict, out_dir: str) -> dict:
    if kind == "teacher" and config["seed"] == 1:
        raise ValueError("teacher of seed 1 broke on purpose")
    return record(kind, config, out_dir)


def kill_first_student_mid_run(kind: str, config: dict, out_dir: str) -> dict:
    """The real node executor, except that the naive student SIGKILLs its own worker process at
    its first training step: its run folder is half-written (a temporary folder, the run's file
    lock held) when the process dies. A marker file in ``out_dir`` (holding the killed pid)
    makes it happen once, whichever worker runs the retry."""
    import signal

    import anchorviz.pipeline.steps as steps  # where the pipeline calls train_reward_model
    from anchorviz.pipeline.runner import execute_node

    marker = Path(out_dir) / "killed-once.txt"
    if kind != "student" or config["method"]["name"] != "naive" or marker.exists():
        return execute_node(kind, config, out_dir)
    real = steps.train_reward_model

    def die(*args, **kwargs):
        marker.write_text(json.dumps({"pid": os.getpid(), "seed": config["seed"],
                                      "method": config["method"]["name"],
                                      "lam": config["method"]["anchor_lambda"]}))
        os.kill(os.getpid(), signal.SIGKILL)

    steps.train_reward_model = die
    try:
        return execute_node(kind, config, out_dir)
    finally:
        steps.train_reward_model = real


def sleep_long(kind: str, config: dict, out_dir: str) -> dict:
    """A teacher takes a minute, any other node returns at once (for interrupting a sweep while
    some workers are busy and one is idle)."""
    (Path(out_dir) / f"started-{kind}-{os.getpid()}").write_text(kind)
    if kind == "teacher":
        time.sleep(60)
    return {"kind": kind, "computed": True, "seconds": 60.0 if kind == "teacher" else 0.0}


def die_or_sleep(kind: str, config: dict, out_dir: str) -> dict:
    """A node whose config says ``die`` SIGKILLs its worker once ``die`` nodes have started;
    any other sleeps 8 s (for failure attribution: which worker died running what; a node
    running in another worker process finishes)."""
    import signal

    (Path(out_dir) / f"started-{kind}-{os.getpid()}").write_text(kind)
    if config.get("die"):
        deadline = time.time() + 120
        while len(list(Path(out_dir).glob("started-*"))) < config["die"] and time.time() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(8)
    (Path(out_dir) / f"finished-{kind}-{os.getpid()}").write_text(kind)
    return {"kind": kind, "computed": True, "seconds": 8.0}


def warn_in_teacher(kind: str, config: dict, out_dir: str) -> dict:
    """A teacher logs a WARNING from inside the package (as the training loop does when bf16 is
    emulated) and an INFO line; every other node only records itself."""
    import logging

    if kind == "teacher":
        log = logging.getLogger("anchorviz.training.loop")
        log.info("an info line that stays in the worker")
        log.warning("teacher-of-seed-%d warns on purpose", config["seed"])
    return record(kind, config, out_dir)


def stall_naive_student_once(kind: str, config: dict, out_dir: str) -> dict:
    """The real node executor, logging each attempt (``attempts.jsonl``: node, Ray node id,
    pid, start / done, computed), except that the first attempt of the naive student stalls
    once its training has started (its temporary run folder written, the run's lock held) and
    writes ``stalled-once.json`` naming its Ray node, so that the test can remove that node
    under it. The retry (any later attempt) trains normally."""
    import anchorviz.pipeline.steps as steps
    from anchorviz.pipeline.runner import execute_node
    from anchorviz.pipeline.store import RAY_NODE_ENV

    node = os.environ.get(RAY_NODE_ENV, "")
    log = Path(out_dir) / "attempts.jsonl"
    name = f"{kind}:{config['method']['name']}"

    def event(what: str, **extra) -> None:
        with open(log, "a") as f:
            f.write(json.dumps({"node": name, "ray_node": node, "pid": os.getpid(),
                                "event": what, **extra}) + "\n")

    event("start")
    marker = Path(out_dir) / "stalled-once.json"
    stall = kind == "student" and config["method"]["name"] == "naive" and not marker.exists()
    real = steps.train_reward_model
    if stall:
        def hang(*args, **kwargs):
            marker.write_text(json.dumps({"ray_node": node, "pid": os.getpid()}))
            time.sleep(600)  # until the node is removed under it

        steps.train_reward_model = hang
    try:
        res = execute_node(kind, config, out_dir)
    finally:
        steps.train_reward_model = real
    event("done", computed=bool(res.get("computed")))
    return res
