"""The run graph of a sweep, and the local executor that runs it on several worker processes.

A sweep expands to a graph whose nodes are named by their content-hashed run ids::

    data preparation (parent process, cached on disk)
      -> teacher ------------------+--> ceiling
      -> reference capture --------+--> students (naive, confidence, ANCHOR at each lambda / layer)

Students of one teacher, and the gold ceiling, run in parallel; a node shared by several configs
(a teacher, a reference capture) is one node, so nothing is trained twice. Each worker runs torch
on ``threads`` threads (default 1), so a run's numbers do not depend on how many workers there
are: ``--jobs 1`` and ``--jobs 2`` give the same run ids and the same metrics.

The run store stays the single source of truth: a node whose run is finished in the store is
read, not redone, and an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

KINDS = ("teacher", "reference", "ceiling", "student")


@dataclass(frozen=True)
class Node:
    """One unit of work: ``kind`` for one config; ``id`` is its run id (or shared-artefact name)."""

    id: str
    kind: str  # teacher | reference | ceiling | student
    config: dict  # RunConfig.to_dict()
    deps: tuple[str, ...] = ()


def default_jobs() -> int:
    """``$ANCHORVIZ_JOBS`` if set, else the number of CPU cores this process may use."""
    env = os.environ.get("ANCHORVIZ_JOBS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"ANCHORVIZ_JOBS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"ANCHORVIZ_JOBS must be a positive integer, got {env!r}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def build_graph(configs: Iterable) -> list[Node]:
    """The nodes for a list of ``RunConfig`` (students), deduplicated, in a runnable order:
    every node comes after its dependencies; teachers and reference captures first, then
    ceilings, then students (so the long chains start early)."""
    from anchorviz.experiment import reference_key, run_id_for, student_key, teacher_key
    from anchorviz.store import config_hash

    nodes: dict[str, Node] = {}
    for cfg in configs:
        d = cfg.to_dict()
        t = run_id_for(teacher_key(cfg))
        r = f"reference-{config_hash(reference_key(cfg))}"
        nodes.setdefault(t, Node(t, "teacher", d))
        nodes.setdefault(r, Node(r, "reference", d))
        if cfg.ceiling:
            c = run_id_for(student_key(cfg, "ceiling"))
            nodes.setdefault(c, Node(c, "ceiling", d, (t, r)))
        s = run_id_for(student_key(cfg, "student"))
        nodes.setdefault(s, Node(s, "student", d, (t, r)))
    return sorted(nodes.values(), key=lambda n: KINDS.index(n.kind))


def execute_node(kind: str, config: dict, out_dir: str) -> dict:
    """Run one node in this process (what a worker does); returns a small summary."""
    from anchorviz.experiment import (
        config_from_dict,
        data_config,
        ensure_reference_capture,
        ensure_teacher,
        prepare_data,
        run_student,
    )
    from anchorviz.store import RunStore

    t0 = time.perf_counter()
    cfg = config_from_dict(config)
    store = RunStore(out_dir)
    data = prepare_data(data_config(cfg))
    computed = True
    if kind == "reference":
        ensure_reference_capture(store, cfg, data)
    else:
        teacher = ensure_teacher(store, cfg, data)
        if kind == "teacher":
            computed = teacher.computed
        else:
            res = run_student(store, cfg, data, kind="ceiling" if kind == "ceiling" else "student",
                              teacher=teacher)
            computed = res.computed
    return {"kind": kind, "computed": computed, "seconds": time.perf_counter() - t0}


def _init_worker(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    os.environ.setdefault("TQDM_DISABLE", "1")  # the parent draws one line per running node
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already set (torch allows it once per process)
        pass


class _Progress:
    """An overall bar plus one line per running node (tqdm, in the parent process)."""

    def __init__(self, total: int, slots: int, enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self.enabled = enabled
        self.bar = tqdm(total=total, desc="sweep", unit="node", disable=not enabled)
        self.lines = [tqdm(total=0, bar_format="{desc}", position=i + 1, leave=False,
                           disable=not enabled or slots < 2) for i in range(slots)]
        self.slot: dict[str, int] = {}
        self.start: dict[str, float] = {}

    def started(self, node: Node) -> None:
        free = [i for i in range(len(self.lines)) if i not in self.slot.values()]
        self.slot[node.id] = free[0] if free else 0
        self.start[node.id] = time.perf_counter()
        self.refresh()

    def finished(self, node: Node) -> None:
        i = self.slot.pop(node.id, None)
        self.start.pop(node.id, None)
        if i is not None:
            self.lines[i].set_description_str("")
        self.bar.update(1)

    def refresh(self) -> None:
        for nid, i in self.slot.items():
            secs = time.perf_counter() - self.start[nid]
            self.lines[i].set_description_str(f"  worker {i + 1}: {nid}  {secs:5.0f} s")

    def close(self) -> None:
        for line in self.lines:
            line.close()
        self.bar.close()


def run_graph(nodes: list[Node], out_dir: str | Path, jobs: int | None = None, threads: int = 1,
              progress: bool = True,
              execute: Callable[[str, dict, str], dict] = execute_node) -> dict[str, dict]:
    """Run every node once its dependencies are done, on ``jobs`` local worker processes.

    ``jobs`` None: `default_jobs`. ``jobs == 1`` runs in this process (same thread pinning), so
    notebooks and debuggers see ordinary tracebacks. A failing node stops new nodes from
    starting; the nodes already running finish (and are kept in the store); then the first
    error is raised. Returns ``{node id: summary}`` of the nodes that ran.
    """
    jobs = default_jobs() if jobs is None else int(jobs)
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    out_dir = str(out_dir)
    order = {n.id: i for i, n in enumerate(nodes)}
    unknown = {d for n in nodes for d in n.deps if d not in order}
    if unknown:
        raise ValueError(f"nodes depend on unknown nodes {sorted(unknown)}")
    jobs = min(jobs, max(1, len(nodes)))
    prog = _Progress(len(nodes), jobs, enabled=progress)
    results: dict[str, dict] = {}
    try:
        if jobs == 1:
            _run_inline(nodes, out_dir, threads, prog, results, execute)
        else:
            _run_pool(nodes, out_dir, jobs, threads, prog, results, execute)
    finally:
        prog.close()
    return results


def _run_inline(nodes, out_dir, threads, prog, results, execute) -> None:
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for node in nodes:
            prog.started(node)
            results[node.id] = execute(node.kind, node.config, out_dir)
            _log_done(node, results[node.id])
            prog.finished(node)
    finally:
        torch.set_num_threads(old)


def _log_done(node: Node, res: dict) -> None:
    if res.get("computed", True):
        logger.info("%s %s done in %.0f s", node.kind, node.id, res.get("seconds", float("nan")))
    else:
        logger.info("%s %s already finished in the store", node.kind, node.id)


def _run_pool(nodes, out_dir, jobs, threads, prog, results, execute) -> None:
    pending = list(nodes)
    done: set[str] = set()
    running: dict[Future, Node] = {}
    errors: list[tuple[Node, BaseException]] = []
    ctx = multiprocessing.get_context("spawn")  # no forked torch / thread state
    ex = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                             initargs=(threads,))
    try:
        while pending or running:
            if not errors:
                for node in list(pending):
                    if len(running) >= jobs:
                        break
                    if all(d in done for d in node.deps):
                        running[ex.submit(execute, node.kind, node.config, out_dir)] = node
                        pending.remove(node)
                        prog.started(node)
            if not running:
                break
            finished, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
            prog.refresh()
            for fut in finished:
                node = running.pop(fut)
                try:
                    results[node.id] = fut.result()
                except BrokenProcessPool as err:
                    errors.append((node, RuntimeError(
                        f"a worker process died while running {node.kind} {node.id} (killed, or "
                        f"out of memory?): {err}. Finished runs are kept; rerun to resume")))
                except BaseException as err:  # noqa: BLE001 - reported after the others finish
                    errors.append((node, err))
                    logger.error("%s %s failed: %s", node.kind, node.id, err)
                else:
                    done.add(node.id)
                    _log_done(node, results[node.id])
                prog.finished(node)
    except KeyboardInterrupt:
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    if errors:
        skipped = len(pending)
        if skipped:
            logger.error("%d node(s) not started because %s %s failed", skipped, errors[0][0].kind,
                         errors[0][0].id)
        raise errors[0][1]
