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
