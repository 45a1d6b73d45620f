"""Benchmark: ``anchorviz demo`` end to end (wall time, peak memory) on this machine.

Runs ``anchorviz demo --out <fresh temporary folder>`` (``--quick``: the smoke-sized demo) as a
subprocess and reports:

- wall time of the command;
- peak memory: the largest peak RSS of any process of the child tree (``getrusage(
  RUSAGE_CHILDREN).ru_maxrss`` after it exits), and the peak of the SUM of RSS over the child
  tree sampled every 0.5 s with ``psutil`` (where installed; catches worker processes running
  at the same time);
- the load average sampled during the run (the 2 cores are shared, so this says how much of the
  wall time was other people's work).

The models come from the zoo cache (prepared beforehand; nothing is downloaded here).

Both arithmetics (issue 40): ``--precision auto|fp32|bf16`` runs ``anchorviz demo`` with
``--fp32`` / ``--bf16`` (auto: what the demo decides on this CPU), and ``--cpu-class avx2`` runs
it as on a CPU without native bfloat16 (``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``,
checked by bench/bench_precision.py), so that both classes of CPU can be timed on one machine
that has native bfloat16. Each variant writes its own section; the demo's first line (the
arithmetic it chose, and why) and the CPU's flags are in it.

Usage (what produced docs/BENCHMARKS.md)::

    python bench/bench_demo.py                      # the full demo as this CPU runs it
    python bench/bench_demo.py --cpu-class avx2     # as a CPU without native bfloat16
    python bench/bench_demo.py --quick              # the quick demo
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

TARGET_S = 600
TARGET_MB = 4096


def demo_command(out: Path, quick: bool, extra: list[str] | None = None) -> list[str]:
    exe = Path(sys.executable).with_name("anchorviz")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "anchorviz.cli"]
    return cmd + ["demo", "--out", str(out), *(["--quick"] if quick else []), *(extra or [])]


class _Sampler(threading.Thread):
    """Samples the RSS sum of a process tree, each process's own RSS (the largest sample per
    process, with its role: the driver, a worker process, or another) and the load average
    until stopped."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak_tree_mb = float("nan")
        self.max_procs = 0
        self.per_proc: dict[int, tuple[float, str]] = {}  # pid -> (largest sampled MB, role)
        self.loads: list[float] = []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        try:
            import psutil
        except ImportError:
            psutil = None
        peak = 0.0
        last_load = 0.0
        while not self._stop_evt.is_set():
            if psutil is not None:
                try:
                    root = psutil.Process(self.pid)
                    procs = [root, *root.children(recursive=True)]
                    total = 0
                    for p in procs:
                        try:
                            rss = p.memory_info().rss
                            total += rss
                            self._note(p, rss / 1024**2)
                        except psutil.Error:
                            pass
                    peak = max(peak, total / 1024**2)
                    self.max_procs = max(self.max_procs, len(procs))
                    self.peak_tree_mb = peak
                except psutil.Error:
                    pass
            now = time.monotonic()
            if now - last_load >= 5:
                self.loads.append(common.loadavg()[0])
                last_load = now
            self._stop_evt.wait(self.every)

    def _note(self, p, mb: float) -> None:
        if p.pid not in self.per_proc:
            try:
                line = " ".join(p.cmdline())
            except Exception:  # noqa: BLE001 - a process gone or unreadable: no role
                line = ""
            role = ("driver" if p.pid == self.pid else "worker"
                    if "multiprocessing" in line else (p.name() or "other"))
            self.per_proc[p.pid] = (mb, role)
        elif mb > self.per_proc[p.pid][0]:
            self.per_proc[p.pid] = (mb, self.per_proc[p.pid][1])

    def stop(self) -> None:
        self._stop_evt.set()


AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def variant_args(precision: str, cpu_class: str) -> tuple[list[str], dict[str, str]]:
    """The demo's extra arguments and environment for an arithmetic and a CPU class."""
    extra = {"auto": [], "fp32": ["--fp32"], "bf16": ["--bf16"]}[precision]
    return extra, (dict(AVX2_ENV) if cpu_class == "avx2" else {})


def run_demo(out: Path, quick: bool, timeout: float, extra: list[str] | None = None,
             log_path: Path | None = None, cmd: list[str] | None = None,
             env: dict[str, str] | None = None) -> dict:
    """Run the demo once (or ``cmd`` instead); returns wall seconds, peaks (MB), load samples
    and the return code."""
    cmd = demo_command(out, quick, extra) if cmd is None else cmd
    before = common.children_peak_rss_mb()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(common.REPO),
                                env={**os.environ, "TQDM_DISABLE": "1", **(env or {})})
        sampler = _Sampler(proc.pid)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            rc = f"killed after {timeout:.0f} s (rc {rc})"
        wall = time.perf_counter() - t0
        sampler.stop()
        sampler.join(5)
    finally:
        if log_path:
            log.close()
    peak_child = common.children_peak_rss_mb()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"cmd": cmd, "rc": rc, "wall_s": wall, "cpu_s": cpu_s, "peak_child_mb": peak_child,
            "peak_child_is_new": peak_child > before, "peak_tree_mb": sampler.peak_tree_mb,
            "max_procs": sampler.max_procs, "loads": sampler.loads,
            "per_process": sorted(sampler.per_proc.values(), reverse=True)}


def markdown(res: dict, args, command: str, facts: dict, elapsed: float, tail: str,
             name: str = "bench_demo") -> str:
    loads = res["loads"]
    tree = res["peak_tree_mb"]
    mem = max(res["peak_child_mb"], tree if tree == tree else 0)
    cpu_s = res.get("cpu_s", float("nan"))
    ncores = os.cpu_count() or 1
    vmin = res.get("verdict_min")
    verdict = f"{vmin:.1f} min" if vmin is not None else "with the table"
    rows = [[("`anchorviz demo --quick`" if args.quick else "`anchorviz demo`"), str(res["rc"]),
             verdict, f"{res['wall_s']:.0f} s ({res['wall_s'] / 60:.1f} min)",
             f"{cpu_s:.0f} s (/ {ncores} cores = {cpu_s / ncores / 60:.1f} min)",
             f"{res['peak_child_mb']:,.0f}", f"{res['peak_tree_mb']:,.0f}", res["max_procs"],
             (f"{sum(loads) / len(loads):.1f} / {max(loads):.1f}" if loads else "n/a")]]
    table = common.md_table(["command", "exit", "verdict printed after", "wall time",
                             "CPU time (user + sys)",
                             "peak RSS, largest process MB",
                             "peak RSS, sum over tree MB (0.5 s samples)", "processes (max)",
                             "load avg during run (mean / max)"], rows)
    ok = res["rc"] == 0
    shown = [Path(c).name if i == 0 else c for i, c in enumerate(res["cmd"])]
    if "--out" in shown:  # a temporary folder's name says nothing on another machine
        shown[shown.index("--out") + 1] = "<temporary folder>"
    intro = (f"`{' '.join(shown)}` "
             "into a fresh temporary folder, models from the zoo cache. On a machine whose 2 cores "
             "are shared with other jobs the wall time is inflated roughly by the load: a load "
             "average of L on 2 cores leaves this job about 2 / max(2, L) of the CPU. "
             f"CPU class: {'as is' if not res.get('env') else 'without native bfloat16, by '}"
             + " ".join(f"`{k}={v}`" for k, v in (res.get("env") or {}).items())
             + f"; the demo's first line: \"{res.get('arithmetic', 'not recorded')}\".")
    notes = "\n".join([
        f"- Target: < 10 minutes on 2 cores: {common.met(ok and res['wall_s'] < TARGET_S)} "
        f"({res['wall_s'] / 60:.1f} min at a mean load average of "
        f"{(sum(loads) / len(loads)) if loads else float('nan'):.1f}). The CPU time divided "
        f"by the {ncores} cores, {cpu_s / ncores / 60:.1f} min, is roughly what the demo would "
        "take on this machine unshared (a lower bound where the work does not use both cores "
        "all the time).",
        (f"- The five-seed verdict, printed as soon as its runs were done (the verdict's "
         f"runs go first): after {vmin:.1f} min, < 10 minutes: {common.met(ok and vmin < 10)}; "
         "the rest of the wall time is the first seed's illustration (gold ceiling, ANCHOR "
         "students), the table and the report." if vmin is not None else ""),
        f"- Target: < 4 GB peak memory: {common.met(ok and mem < TARGET_MB)} ({mem:,.0f} MB).",
        ("- Largest sampled RSS per process (0.5 s samples, so a short peak can be missed): "
         + ", ".join(f"{role} {mb:,.0f} MB" for mb, role in res["per_process"][:4]) + ".")
        if res.get("per_process") else "",
        ("- The demo's final output:\n\n```\n" + tail.strip() + "\n```") if tail.strip() else "",
    ])
    return common.section(name, intro, table, notes, command, facts, elapsed)


def verdict_minutes(text: str) -> float | None:
    """When the demo printed its verdict early (``VERDICT ... (after M min, from the teachers
    and naive students ...``): M; None when it printed it only with the full table."""
    m = re.search(r"^\(after ([0-9.]+) min, from the teachers", text, re.M)
    return float(m.group(1)) if m else None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the quick demo")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--keep", type=Path, default=None, help="write the demo here and keep it")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                    help="the demo's arithmetic (auto: what it decides on this CPU)")
    ap.add_argument("--cpu-class", choices=("as-is", "avx2"), default="as-is",
                    help="avx2: as a CPU without native bfloat16 (ATEN_CPU_CAPABILITY=avx2 "
                         "ONEDNN_MAX_CPU_ISA=AVX2)")
    ap.add_argument("--no-write", action="store_true")
    return ap


def section_name(args) -> str:
    """``bench_demo`` for the demo as this CPU runs it, ``bench_demo_<class>_<precision>`` for
    another variant."""
    if args.cpu_class == "as-is" and args.precision == "auto":
        return "bench_demo"
    return f"bench_demo_{args.cpu_class.replace('-', '')}_{args.precision}"


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    facts = common.machine_facts()
    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    out = args.keep if args.keep is not None else tmp / "demo"
    log_path = tmp / "demo.log"
    try:
        extra, env = variant_args(args.precision, args.cpu_class)
        res = run_demo(out, args.quick, args.timeout, extra=extra, log_path=log_path, env=env)
        text = log_path.read_text(errors="replace")
        res["arithmetic"] = next((ln for ln in text.splitlines()
                                  if ln.startswith("arithmetic:")), "not printed")
        res["env"] = env
        res["verdict_min"] = verdict_minutes(text)
        start = text.rfind("Results (")
        tail = text[start:] if start >= 0 else "\n".join(text.splitlines()[-15:])
        tail = "\n".join(ln for ln in tail.splitlines() if not ln.startswith("HTML report"))
        if res["rc"] != 0:
            print(text[-4000:], file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    name = section_name(args)
    md = markdown(res, args, common.command_line("bench_demo.py", argv), facts, time.time() - t0,
                  tail, name)
    print(md)
    if not args.no_write:
        print(f"updated {common.update_section(name, md)}", file=sys.stderr)


if __name__ == "__main__":
    main()
