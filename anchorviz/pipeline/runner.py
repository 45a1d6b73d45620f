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

Two backends run the graph: ``local`` (worker processes on this machine) and ``ray`` (each node
a Ray task with its CPUs / GPU, the graph's edges as task dependencies, on a local Ray instance
or an existing cluster; a task whose worker dies is retried by Ray and redoes its half-written
run). With Ray the store must be a path that every worker sees at the same place (a shared
filesystem); URIs (``s3://...``) are not supported by the store.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from anchorviz.config import config_from_dict
from anchorviz.pipeline.keys import reference_key, run_id_for, student_key, teacher_key
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.pipeline.progress import KINDS
from anchorviz.pipeline.progress import Progress as _Progress
from anchorviz.pipeline.store import RunStore, config_hash

logger = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "KINDS",
    "RAY_MAX_RETRIES",
    "BackendUnavailable",
    "Node",
    "WorkerInterrupted",
    "build_graph",
    "check_backend",
    "default_jobs",
    "execute_node",
    "fresh_process",
    "node_resources",
    "run_graph",
]

BACKENDS = ("local", "ray")
RAY_MAX_RETRIES = 3  # a task whose worker dies (killed, OOM, node lost) runs again this often


class BackendUnavailable(ImportError, ValueError):
    """The chosen backend's package is not installed (a ValueError too: the CLI reports it as a
    usage error, exit code 2)."""


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


def build_graph(configs: Iterable, first: Callable[[Node], bool] | None = None) -> list[Node]:
    """The nodes for a list of ``RunConfig`` (students), deduplicated, in a runnable order:
    every node comes after its dependencies; teachers and reference captures first, then
    ceilings, then students (so the long chains start early). ``first``: the nodes it is true
    for go before all others, in that order among themselves (it must hold for every
    dependency of a node it holds for): `anchorviz demo` runs its verdict's runs first."""
    nodes: dict[str, Node] = {}
    for cfg in configs:
        d = cfg.to_dict()
        t = run_id_for(teacher_key(cfg))
        nodes.setdefault(t, Node(t, "teacher", d))
        deps: tuple[str, ...] = (t,)
        if cfg.capture.enabled:  # a scores-only run needs no reference capture
            r = f"reference-{config_hash(reference_key(cfg))}"
            nodes.setdefault(r, Node(r, "reference", d))
            deps = (t, r)
        if cfg.ceiling:
            c = run_id_for(student_key(cfg, "ceiling"))
            nodes.setdefault(c, Node(c, "ceiling", d, deps))
        s = run_id_for(student_key(cfg, "student"))
        nodes.setdefault(s, Node(s, "student", d, deps))
    return sorted(nodes.values(),
                  key=lambda n: (first is not None and not first(n), KINDS.index(n.kind)))


def execute_node(kind: str, config: dict, out_dir: str) -> dict:
    """Run one node in this process (what a worker does); returns a small summary."""
    # torch: the run graph is also built where no model loads (the report, the explorer)
    from anchorviz.pipeline.steps import (
        ensure_reference_capture,
        ensure_teacher,
        reference_capture_stored,
        release_memory,
        run_student,
    )

    t0 = time.perf_counter()
    cfg = config_from_dict(config)
    store = RunStore(out_dir)
    data = prepare_data(data_config(cfg))
    computed = True
    if kind == "reference":
        # a capture already in the store costs nothing: it must not feed the ETA as a computed node
        computed = not reference_capture_stored(store, cfg)
        ensure_reference_capture(store, cfg, data)
    else:
        teacher = ensure_teacher(store, cfg, data)
        if kind == "teacher":
            computed = teacher.computed
        else:
            res = run_student(store, cfg, data, kind="ceiling" if kind == "ceiling" else "student",
                              teacher=teacher)
            computed = res.computed
    release_memory()
    return {"kind": kind, "computed": computed, "seconds": time.perf_counter() - t0}



class WorkerInterrupted(SystemExit):
    """Ctrl-C in a worker process. A SystemExit, unlike KeyboardInterrupt, ends an idle worker
    without a traceback; inside a node it marks the half-done run as interrupted (the store
    keeps it as unfinished, so the next sweep redoes it) and goes back to the driver, which is
    stopping anyway."""

    def __str__(self) -> str:
        return "interrupted (Ctrl-C / SIGINT)"


def _quiet_exit(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    raise WorkerInterrupted(128 + signum)


PARENT_POLL_S = 1.0  # how often a local worker checks that its driver is still alive
_STARTED = None  # a local worker's queue of (pid, node id) to the driver (see `_tracked`)
_ORPHANED = threading.Event()  # set in a local worker whose driver is gone


def _watch_parent(parent: int) -> None:
    """In a local worker: stop (as on Ctrl-C) once the driver process is gone (SIGKILLed, or
    crashed), instead of finishing the node and then idling as an orphan; exit hard if the
    node does not give the interpreter back within a minute."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    logger.warning("worker %d: the driver (pid %d) is gone; stopping", os.getpid(), parent)
    _ORPHANED.set()  # `_tracked` exits once the node has given up (no driver to send it work)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(60)
    os._exit(128 + signal.SIGINT)


class _ForwardWarnings(logging.Handler):
    """In a worker process: hand each distinct WARNING-or-above record of the node it runs to
    ``send(text)`` (the driver shows it on its console, naming the run). A worker has no console
    of its own (its logging is not configured; the package's records reach only the run's
    ``run.log``), so without this a warning such as emulated bfloat16 went unseen."""

    def __init__(self, send: Callable[[str], None]) -> None:
        super().__init__(level=logging.WARNING)
        self.send = send
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.levelno > logging.WARNING:
                text = f"{record.levelname}: {text}"
            if text not in self.seen:
                self.seen.add(text)
                self.send(text)
        except Exception:  # noqa: BLE001 - logging must never break the node
            self.handleError(record)


@contextlib.contextmanager
def _forwarding_warnings(send: Callable[[str], None]):
    """Forward the WARNING-or-above records logged in this process while the block runs."""
    handler = _ForwardWarnings(send)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def _tracked(execute: Callable[[str, dict, str], dict], node_id: str, kind: str, config: dict,
             out_dir: str) -> dict:
    """Run one node in a local worker after telling the driver which process runs it (so a
    worker that dies is reported under its own node, not under another worker's); the node's
    warnings go to the driver as they happen (`_ForwardWarnings`)."""
    queue = _STARTED
    if queue is not None:
        queue.put(("started", os.getpid(), node_id))
    forward = (contextlib.nullcontext() if queue is None else
               _forwarding_warnings(lambda text: queue.put(("warning", node_id, text))))
    try:
        with forward:
            return execute(kind, config, out_dir)
    finally:
        if _ORPHANED.is_set():  # nobody will read the result nor tell this process to exit
            logging.shutdown()
            os._exit(128 + signal.SIGINT)


def _show_warning(node: Node | None, node_id: str, text: str, shown: set) -> None:
    """In the driver: a worker's warning, once per run, naming the run."""
    if (node_id, text) in shown:
        return
    shown.add((node_id, text))
    kind = node.kind if node is not None else "node"
    logger.warning("%s %s: %s", kind, node_id, text)


#: a local worker's allocator settings (`limit_heap`; measured in bench/bench_heap.py, numbers
#: in docs/BENCHMARKS.md). Both are off: oneDNN's primitive cache at 8 primitives lowered a
#: two-node chain's peak by 160 MB at the same CPU time, but the whole demo with it peaked at
#: 1,962 MB (1,931 MB without) and took 1,273 CPU-s (1,127 without; one run each); a fixed
#: mmap threshold of 1 MiB cut another 140 MB at 1.56x the CPU time
WORKER_ONEDNN_CACHE: int | None = None
WORKER_MMAP_THRESHOLD: int | None = None
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


def limit_heap(onednn_cache: int | None = 8,
               mmap_threshold: int | None = None) -> dict[str, bool]:
    """Keep a long-lived worker's resident memory near what it uses. Two settings, neither of
    which changes a number a run computes:

    - ``onednn_cache``: the capacity of oneDNN's primitive cache (``ONEDNN_PRIMITIVE_CACHE_
      CAPACITY``; the library's default is 1024). Under bf16 autocast every new batch shape
      (the loop buckets batches by length) builds matmul primitives that keep their own
      buffers; a small cache drops them instead of keeping them for the process's life. Read
      once, at the process's first oneDNN primitive: it must be set before the first bf16
      matmul, and a value already in the environment wins.
    - ``mmap_threshold``: glibc's ``M_MMAP_THRESHOLD`` (bytes). By default glibc raises the
      threshold after each large free, so a training step's and a scoring batch's large
      tensors end up in the heap, whose freed pages stay resident until ``malloc_trim``; at a
      fixed threshold a block of that size or more is its own mapping, returned on free.

    A local worker passes ``WORKER_ONEDNN_CACHE`` / ``WORKER_MMAP_THRESHOLD`` (both None, off:
    measured, neither lowered the demo's peak enough for its cost). Returns which settings took
    effect (Linux with glibc only for the second)."""
    done = {"onednn_cache": False, "mmap_threshold": False}
    if onednn_cache is not None:
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(int(onednn_cache)))
        done["onednn_cache"] = True
    if mmap_threshold is not None and sys.platform.startswith("linux"):
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        try:
            done["mmap_threshold"] = bool(name) and ctypes.CDLL(name).mallopt(
                _M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
        except (OSError, AttributeError):  # another libc (musl): no mallopt
            pass
    return done


def _init_worker(threads: int, parent: int | None = None, started=None) -> None:
    # Ctrl-C reaches the whole process group: the driver reports it once and keeps the finished
    # runs; a worker stops at once without a traceback of its own (its half-written run is a
    # temporary folder that the store never reads and the next sweep removes)
    signal.signal(signal.SIGINT, _quiet_exit)
    if parent is not None:  # a local worker: SIGTERM too, and stop when the driver is gone
        global _STARTED
        _STARTED = started
        signal.signal(signal.SIGTERM, _quiet_exit)
        threading.Thread(target=_watch_parent, args=(parent,), name="watch-driver",
                         daemon=True).start()
    limit_heap(WORKER_ONEDNN_CACHE, WORKER_MMAP_THRESHOLD)  # before torch's first oneDNN primitive
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    # numba (umap-learn) sizes its OpenMP pool from this, not from OMP_NUM_THREADS
    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    os.environ.setdefault("TQDM_DISABLE", "1")  # the parent draws one line per running node
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already set (torch allows it once per process)
        pass
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads)  # numpy's BLAS, if it was loaded before the variables


def run_graph(nodes: list[Node], out_dir: str | Path, jobs: int | None = None, threads: int = 1,
              progress: bool = True,
              execute: Callable[[str, dict, str], dict] = execute_node,
              backend: str = "local", address: str | None = None,
              on_done: Callable[[Node, dict], None] | None = None) -> dict[str, dict]:
    """Run every node once its dependencies are done.

    ``backend="local"``: on ``jobs`` local worker processes (None: `default_jobs`; ``jobs == 1``
    runs in this process, with the same thread pinning, so notebooks and debuggers see ordinary
    tracebacks). ``backend="ray"``: each node is a Ray task (see `_run_ray`) on the cluster at
    ``address`` (a running one found by Ray when None, else a local instance of ``jobs`` x
    ``threads`` CPUs). Each worker runs torch on ``threads`` threads. A failing node stops new
    nodes from starting; the nodes already running finish (and are kept in the store); then the
    first error is raised. Returns ``{node id: summary}`` of the nodes that ran.
    ``on_done(node, summary)`` is called in this process after each node that finished (a
    failing callback is logged, never stops the sweep): `anchorviz demo` prints its verdict
    from it as soon as the verdict's runs are done.
    """
    check_backend(out_dir, backend, address)
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
    results: dict[str, dict] = {}
    if backend == "ray":
        if any(order[d] >= order[n.id] for n in nodes for d in n.deps):
            raise ValueError("nodes must come after their dependencies (use build_graph)")
        _run_ray(nodes, os.path.abspath(out_dir), jobs, threads, progress, results, execute,
                 address, on_done)
        return results
    jobs = min(jobs, max(1, len(nodes)))
    prog = _Progress(list(nodes), jobs, enabled=progress)
    try:
        if jobs == 1:
            _run_inline(nodes, out_dir, threads, prog, results, execute, on_done)
        else:
            _run_pool(nodes, out_dir, jobs, threads, prog, results, execute, on_done)
    finally:
        prog.close()
    return results


def check_backend(out_dir: str | Path, backend: str = "local",
                  address: str | None = None) -> None:
    """Refuse an unknown backend, an address without Ray, Ray when it is not installed, and a
    store that is a URI (the run store is a local or mounted, shared folder), before anything
    is written."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if address is not None and backend != "ray":
        raise ValueError("an address is for the Ray backend: pass backend='ray' (--backend ray)")
    if backend == "ray":
        _import_ray()
    text = str(out_dir)
    if "://" in text:
        raise ValueError(
            f"the run store must be a folder path, not a URI ({text}): the store renames "
            "folders atomically and locks files, which object stores do not offer; mount the "
            "bucket / share (NFS, CephFS, Lustre, a FUSE mount) and pass its path")


def _run_inline(nodes, out_dir, threads, prog, results, execute, on_done=None) -> None:
    import torch
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # numpy's BLAS too (CKA, projections): sums in the same order as in a worker process
        with threadpool_limits(limits=threads):
            for node in nodes:
                prog.started(node)
                results[node.id] = execute(node.kind, node.config, out_dir)
                _log_done(node, results[node.id], on_done)
                prog.finished(node, results.get(node.id))
    finally:
        torch.set_num_threads(old)


def _log_done(node: Node, res: dict, on_done: Callable[[Node, dict], None] | None = None) -> None:
    if res.get("computed", True):
        logger.info("%s %s done in %.0f s", node.kind, node.id, res.get("seconds", float("nan")))
    else:
        logger.info("%s %s already finished in the store", node.kind, node.id)
    if on_done is not None:
        try:
            on_done(node, res)
        except Exception as err:  # noqa: BLE001 - a reader's callback never stops the sweep
            logger.warning("after %s %s: %s: %s", node.kind, node.id, type(err).__name__, err)


class _Terminated(KeyboardInterrupt):
    """SIGTERM to the driver: stopped as Ctrl-C stops it (the CLI's exit code 130)."""


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    raise _Terminated(f"terminated (signal {signum})")


def _exit_how(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _pool_failures(broken: list[Node], pid_of: dict[str, int], procs: dict,
                   by_id: dict[str, Node]) -> tuple[list, list]:
    """The errors ``(failed, stopped)`` of the nodes whose futures failed because the pool
    broke: the node whose own worker died (not SIGTERMed by the pool, which stops the others
    once one dies) is named as the failure; the others as stopped because of it."""
    deadline = time.monotonic() + 5.0  # the pool reaps its processes: their exit codes follow
    while time.monotonic() < deadline and any(
            procs[pid_of[n.id]].exitcode is None for n in broken if pid_of.get(n.id) in procs):
        time.sleep(0.05)
    stopped = {None, 0, -signal.SIGTERM, 128 + signal.SIGTERM, 128 + signal.SIGINT}
    last = {pid: nid for nid, pid in pid_of.items()}  # each worker's latest node (dict order)
    culprits = [by_id[nid] for pid, nid in last.items()
                if pid in procs and procs[pid].exitcode not in stopped]
    dead = [n for n in broken if n in culprits]
    if not culprits:  # no worker to blame: every one was stopped, or never reported its node
        names = ", ".join(f"{n.kind} {n.id}" for n in broken)
        return [(n, RuntimeError(
            f"a worker process died while running one of: {names} (killed, or out of "
            "memory?). Finished runs are kept; rerun to resume")) for n in broken], []
    out: list[tuple[Node, BaseException]] = []
    rest: list[tuple[Node, BaseException]] = []
    for n in dead:
        pid = pid_of[n.id]
        err = RuntimeError(
            f"the worker process (pid {pid}) running {n.kind} {n.id} died "
            f"({_exit_how(procs[pid].exitcode)}; killed, or out of memory?). Finished runs "
            "are kept; rerun to resume")
        logger.error("%s", err)
        out.append((n, err))
    culprit = ", ".join(f"{n.kind} {n.id}" for n in culprits)
    for n in broken:
        if n not in dead:
            logger.error("%s %s stopped: the worker running %s died", n.kind, n.id, culprit)
            rest.append((n, RuntimeError(
                f"{n.kind} {n.id} was stopped because the worker running {culprit} died")))
    return out, rest


def fresh_process(node: Node) -> bool:
    """Whether a local worker pool runs ``node`` in a process of its own, started for it and
    ended after it, instead of on a long-lived worker: a reference capture, and a student or
    ceiling that captures hidden states or trains with ANCHOR. Those are the nodes with the
    largest working set (a captured naive student peaks at about 1.5 GB, an ANCHOR student at
    1.6 GB, each in a fresh process); on a long-lived worker their peak stacks on what the
    previous nodes left resident (about 0.8-1.05 GB: imported code, allocator pages), which
    made the demo's largest process 1.9-2.1 GB. A teacher or a scores-only student reuses a
    worker: their peaks do not stack (docs/BENCHMARKS.md). A fresh process costs about 20
    CPU-seconds in the demo: its imports, first-call set-up, and the shared map's refit (a
    UMAP is rebuilt from its stored rows in each process that places states in it)."""
    if node.kind == "reference":
        return True
    if node.kind not in ("student", "ceiling"):
        return False
    cfg = node.config
    return bool(cfg.get("capture", {}).get("enabled")) or \
        cfg.get("method", {}).get("name") == "anchor"


def _run_pool(nodes, out_dir, jobs, threads, prog, results, execute, on_done=None) -> None:
    pending = list(nodes)
    done: set[str] = set()
    running: dict[Future, Node] = {}
    errors: list[tuple[Node, BaseException]] = []
    ctx = multiprocessing.get_context("spawn")  # no forked torch / thread state
    # ("started", pid, node id): which worker runs which node; ("warning", node id, text)
    started = ctx.SimpleQueue()
    pid_of: dict[str, int] = {}
    by_id = {n.id: n for n in nodes}
    procs: dict[int, multiprocessing.process.BaseProcess] = {}
    # one single-process executor per slot (at most ``jobs`` worker processes at any time): a
    # slot's process runs node after node, except that a `fresh_process` node gets a new process
    # (the slot's warm one is ended first) which ends after it; a slot left without a process
    # starts one when its next node comes
    slots: list[ProcessPoolExecutor | None] = [None] * jobs
    slot_of: dict[Future, int] = {}
    pools: list[ProcessPoolExecutor] = []  # every executor made, joined at the end

    def retire(i: int) -> None:
        if slots[i] is not None:
            slots[i].shutdown(wait=False)  # its process exits; `finally` below joins it
            slots[i] = None

    def submit(node: Node) -> None:
        busy = set(slot_of.values())
        fresh = fresh_process(node)
        # a slot with a warm process for a node that reuses one, an empty slot for one that
        # does not (a free slot's process only ever ran reusing nodes: see the retire below)
        i = min((i for i in range(jobs) if i not in busy),
                key=lambda i: ((slots[i] is None) != fresh, i))
        if fresh:
            retire(i)
        if slots[i] is None:
            slots[i] = ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_init_worker,
                                           initargs=(threads, os.getpid(), started))
            pools.append(slots[i])
        fut = slots[i].submit(_tracked, execute, node.id, node.kind, node.config, out_dir)
        running[fut] = node
        slot_of[fut] = i

    # SIGTERM (kill, a scheduler's time limit) stops the sweep as Ctrl-C does, workers included
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, _on_sigterm)

    shown: set[tuple[str, str]] = set()

    def note_workers() -> None:
        for ex in pools:
            procs.update(getattr(ex, "_processes", None) or {})
        while not started.empty():
            what, a, b = started.get()
            if what == "started":
                pid_of[b] = a
            else:  # "warning": (node id, text)
                _show_warning(by_id.get(a), a, b, shown)

    try:
        while pending or running:
            if not errors:
                for node in list(pending):
                    if len(running) >= jobs:
                        break
                    if all(d in done for d in node.deps):
                        submit(node)
                        pending.remove(node)
                        prog.started(node)
            note_workers()
            if all(fresh_process(n) for n in [*pending, *running.values()]):
                busy = set(slot_of.values())  # idle warm processes hold memory no node needs
                for i in range(jobs):
                    if i not in busy:
                        retire(i)
            if not running:
                break
            finished, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
            prog.refresh()
            note_workers()
            broken: list[Node] = []
            for fut in finished:
                node = running.pop(fut)
                i = slot_of.pop(fut)
                try:
                    results[node.id] = fut.result()
                except BrokenProcessPool:
                    broken.append(node)
                    retire(i)
                except BaseException as err:  # noqa: BLE001 - reported after the others finish
                    errors.append((node, err))
                    logger.error("%s %s failed: %s", node.kind, node.id, err)
                else:
                    done.add(node.id)
                    _log_done(node, results[node.id], on_done)
                if fresh_process(node):  # its process ends with it
                    retire(i)
                prog.finished(node, results.get(node.id))
            if broken:
                failed, stopped = _pool_failures(broken, pid_of, procs, by_id)
                errors[:0] = failed  # the node whose worker died is the error raised
                errors.extend(stopped)
    except KeyboardInterrupt as err:
        note_workers()
        _stop_workers(pools, procs, err)
        raise
    finally:
        for ex in pools:
            ex.shutdown(wait=True, cancel_futures=True)
        started.close()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    if errors:
        _raise_first(errors, len(pending))


def _stop_workers(pools: list[ProcessPoolExecutor],
                  procs: dict[int, multiprocessing.process.BaseProcess],
                  err: BaseException) -> None:
    """Cancel what is queued; on a SIGTERM (only this process got it) interrupt the workers too
    (Ctrl-C reached them already: the process group)."""
    for ex in pools:
        ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs.values() if isinstance(err, _Terminated) else ():
        if proc.exitcode is None:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass


def _raise_first(errors: list[tuple[Node, BaseException]], skipped: int) -> None:
    """Raise the first node's error, after logging how many nodes it kept from starting."""
    if skipped:
        logger.error("%d node(s) not started because %s %s failed", skipped, errors[0][0].kind,
                     errors[0][0].id)
    raise errors[0][1]


# --------------------------------------------------------------------------- Ray


def _import_ray():
    try:
        import ray
    except ImportError as err:
        raise BackendUnavailable(
            "the Ray backend needs the ray package: pip install 'anchorviz[ray]' "
            f"(or pip install ray) ({err})") from None
    return ray


def node_resources(node: Node, threads: int) -> dict:
    """Ray resources of one node: ``threads`` CPUs, and one GPU when a device it trains or
    scores on is CUDA (the teacher's for a teacher, the student's for a reference capture,
    either for a student / ceiling, which re-scores with the teacher)."""
    teacher = str(node.config.get("teacher_train", {}).get("device", "cpu"))
    student = str(node.config.get("student_train", {}).get("device", "cpu"))
    devices = {"teacher": [teacher], "reference": [student]}.get(node.kind, [teacher, student])
    return {"num_cpus": threads, "num_gpus": 1 if any(d.startswith("cuda") for d in devices)
            else 0}


class _Board:
    """A Ray actor (no CPU) that tasks tell when they start, so the driver can draw one line per
    running node; it also tells tasks not to start once a node has failed."""

    def __init__(self) -> None:
        self.running: dict[str, tuple[str, int, int]] = {}
        self.attempts: dict[str, int] = {}
        self.stopped = False
        self.warnings: list[tuple[str, str]] = []  # (node id, text), not yet read by the driver

    def begin(self, node_id: str, host: str, pid: int) -> bool:
        """Record a start; True when the task should not run (the sweep is stopping)."""
        if self.stopped:
            return True
        self.attempts[node_id] = self.attempts.get(node_id, 0) + 1
        self.running[node_id] = (host, pid, self.attempts[node_id])
        return False

    def end(self, node_id: str) -> None:
        self.running.pop(node_id, None)

    def stop(self) -> None:
        self.stopped = True

    def warn(self, node_id: str, text: str) -> None:
        self.warnings.append((node_id, text))

    def take_warnings(self) -> list[tuple[str, str]]:
        out, self.warnings = self.warnings, []
        return out

    def snapshot(self) -> dict[str, tuple[str, int, int]]:
        return dict(self.running)


BOARD_START_SECONDS = 120  # how long the board may take to start on the driver's node


def _start_board(ray):
    """The board, on the driver's node, so that losing a worker node never loses it. The
    affinity is hard: a soft one was seen to fall back to a worker node on a loaded machine
    (the second sweep of tests/pipeline/test_ray_cluster.py), and removing that node then
    stopped the sweep. If the driver's node cannot start it in time, it goes where Ray puts
    it, with a warning."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    actor = ray.remote(num_cpus=0)(_Board)
    board = actor.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
    try:
        ray.get(board.snapshot.remote(), timeout=BOARD_START_SECONDS)
        return board
    except ray.exceptions.GetTimeoutError:
        ray.kill(board)
        logger.warning("the sweep's bookkeeping actor did not start on the driver's node within "
                       "%d s; it runs where Ray puts it, and losing that node stops the sweep",
                       BOARD_START_SECONDS)
        return actor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True)).remote()


def _ray_node(execute, node_id: str, kind: str, config: dict, out_dir: str, threads: int,
              cwd: str, board, *upstream: dict) -> dict:
    """The body of one Ray task. ``upstream``: the results of the node's dependencies (passed as
    ObjectRefs, so Ray starts this task only once they are done)."""
    import ray

    if any(u.get("skipped") for u in upstream):
        return {"kind": kind, "computed": False, "skipped": True, "seconds": 0.0}
    if ray.get(board.begin.remote(node_id, socket.gethostname(), os.getpid())):
        return {"kind": kind, "computed": False, "skipped": True, "seconds": 0.0}
    if cwd and os.path.isdir(cwd):  # relative paths in configs mean what they mean to the driver
        os.chdir(cwd)
    from anchorviz.pipeline.store import RAY_NODE_ENV

    os.environ[RAY_NODE_ENV] = ray.get_runtime_context().get_node_id()  # in the run's manifest
    _init_worker(threads)
    try:
        with _forwarding_warnings(lambda text: board.warn.remote(node_id, text)):
            return execute(kind, config, out_dir)
    finally:
        board.end.remote(node_id)


def _ray_connect(ray, address: str | None, cpus: int) -> bool:
    """Connect to Ray; True when this call started it (and should shut it down)."""
    if ray.is_initialized():
        return False
    if address or os.environ.get("RAY_ADDRESS"):  # the cluster asked for, or an error
        ray.init(address=address or os.environ["RAY_ADDRESS"])
        return False
    try:  # a running instance (`ray start --head` on this machine)
        ray.init(address="auto")
        return False
    except ConnectionError:
        pass
    ray.init(num_cpus=cpus, include_dashboard=False)
    return True


def _run_ray(nodes, out_dir, jobs, threads, progress, results, execute, address,
             on_done=None) -> None:
    """Submit every node as a Ray task at once, upstream ObjectRefs as arguments.

    Each task asks for ``threads`` CPUs (and a GPU when its config uses CUDA) and runs with
    OMP_NUM_THREADS / MKL_NUM_THREADS / NUMBA_NUM_THREADS = ``threads`` and TQDM_DISABLE=1 (the driver draws the
    progress). A task whose worker process dies is retried up to `RAY_MAX_RETRIES` times; the
    retry finds the run unfinished (the dead writer's temporary folder is never read; its file
    lock died with it) and redoes it; a run finished in the store is read, not redone. An
    exception raised by a node is not retried: it stops nodes that have not started yet.
    """
    ray = _import_ray()
    started = _ray_connect(ray, address, jobs * threads)
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "NUMBA_NUM_THREADS": str(threads), "TQDM_DISABLE": "1"}
    task = ray.remote(_ray_node)
    # max_calls=1: the worker process exits after the node (see `fresh_process`); Ray takes it
    # only where the function is declared. The other keeps Ray's default (1 for a GPU task)
    fresh_task = ray.remote(max_calls=1)(_ray_node)
    board = _start_board(ray)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    slots = max(1, min(len(nodes), cpus // threads if cpus >= threads else jobs))
    if any(node_resources(n, threads)["num_gpus"] for n in nodes) and \
            not ray.cluster_resources().get("GPU"):
        logger.warning("some nodes need a GPU but the Ray cluster has none (yet): they wait "
                       "until one joins")
    prog = _Progress(list(nodes), slots, enabled=progress)
    refs: dict[str, object] = {}
    pending: dict[object, Node] = {}
    errors: list[tuple[Node, BaseException]] = []
    failed: set[str] = set()
    skipped = 0
    attempts: dict[str, int] = {}
    cwd = os.getcwd()
    shown: set[tuple[str, str]] = set()
    by_id = {n.id: n for n in nodes}

    def show_warnings() -> None:
        for nid, text in ray.get(board.take_warnings.remote()):
            _show_warning(by_id.get(nid), nid, text, shown)

    try:
        for node in nodes:
            fn = fresh_task if fresh_process(node) else task
            ref = fn.options(**node_resources(node, threads), max_retries=RAY_MAX_RETRIES,
                             runtime_env={"env_vars": env},
                             name=f"{node.kind}:{node.id}").remote(
                execute, node.id, node.kind, node.config, out_dir, threads, cwd, board,
                *(refs[d] for d in node.deps))
            refs[node.id] = ref
            pending[ref] = node
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for nid, (host, pid, attempt) in ray.get(board.snapshot.remote()).items():
                if attempts.get(nid) != attempt and nid in by_id and refs[nid] in pending:
                    attempts[nid] = attempt
                    if attempt > 1:
                        logger.warning("%s %s: attempt %d (a worker died)", by_id[nid].kind,
                                       nid, attempt)
                    prog.started(by_id[nid], f"{host} pid {pid}"
                                 + (f" (attempt {attempt})" if attempt > 1 else ""))
            prog.refresh()
            show_warnings()
            for ref in ready:
                node = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except BaseException as err:  # noqa: BLE001 - reported after the others finish
                    if isinstance(err, KeyboardInterrupt):
                        raise
                    failed.add(node.id)
                    errors.append((node, err))
                    board.stop.remote()  # nodes that have not started yet will not
                else:
                    if res.get("skipped"):
                        skipped += 1
                        failed.add(node.id)  # treated as not done for its dependents
                    else:
                        results[node.id] = res
                        _log_done(node, res, on_done)
                prog.finished(node, results.get(node.id))
        show_warnings()  # those told after the last poll
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)
        raise
    finally:
        prog.close()
        try:
            ray.kill(board)
        except Exception:  # noqa: BLE001 - the cluster may be gone already
            pass
        if started:
            ray.shutdown()
    if os.path.isdir(os.path.join(out_dir, "runs")):
        RunStore(out_dir).clean_temporaries()  # folders left by workers that died mid-run
    # a node whose upstream failed never started: Ray hands it its upstream's error
    roots = [(n, e) for n, e in errors if not any(d in failed for d in n.deps)]
    skipped += len(errors) - len(roots)
    for node, err in roots:
        logger.error("%s %s failed: %s", node.kind, node.id, err)  # with the remote traceback
    if roots:
        if skipped:
            logger.error("%d node(s) not started because %s %s failed", skipped,
                         roots[0][0].kind, roots[0][0].id)
        cause = getattr(roots[0][1], "cause", None)  # the node's own exception, not Ray's wrapper
        if isinstance(cause, BaseException):
            raise cause from roots[0][1]
        raise roots[0][1]
