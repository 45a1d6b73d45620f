"""Shared helpers of the benchmark scripts: timing, peak memory, machine facts, markdown.

Every timing in ``docs/BENCHMARKS.md`` is a RATIO of variants measured side by side in one
process run, with the variants interleaved (``A B C, B C A, C A B, ...``: every round runs every
variant once, the order rotates so no variant always runs first) and the median over rounds taken,
so that background load on a shared machine slows all variants alike. The load average is
recorded next to every table.

``update_section(name, body)`` rewrites the part of ``docs/BENCHMARKS.md`` between the markers
``<!-- name -->`` and ``<!-- /name -->`` (creating the file or the section when missing) and
folds ``docs/results/benchmarks/linear_cka_implementations.md`` (written by
``bench/bench_cka.py``) into its own section.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "BENCHMARKS.md"
CKA_DOC = REPO / "docs" / "results" / "benchmarks" / "linear_cka_implementations.md"

#: section order in docs/BENCHMARKS.md
SECTIONS = ("bench_precision", "bench_step", "bench_trl", "bench_capture", "bench_widgets",
            "bench_demo", "bench_demo_avx2_auto", "bench_demo_asis_fp32", "bench_demo_asis_bf16",
            "bench_demo_avx2_fp32", "bench_demo_avx2_bf16", "profile_demo", "bench_fp32_levers",
            "bench_heap",
            "bench_jobs", "bench_rehash", "bench_cka")

_TITLES = {
    "bench_precision": "Native bfloat16 or not: the CPU, and the overrides that reproduce AVX2",
    "bench_step": "Training step: naive vs ANCHOR reference strategies",
    "bench_trl": "Naive W2S throughput: anchorviz loop vs TRL RewardTrainer",
    "bench_capture": "Hidden-state capture vs a bare forward pass",
    "bench_widgets": "Sweep explorer response time",
    "bench_demo": "`anchorviz demo` end to end",
    "bench_demo_avx2_auto": "`anchorviz demo` end to end on a CPU without native bfloat16 "
                            "(AVX2 override)",
    "bench_demo_asis_fp32": "`anchorviz demo --fp32` end to end",
    "bench_demo_asis_bf16": "`anchorviz demo --bf16` end to end",
    "bench_demo_avx2_fp32": "`anchorviz demo --fp32` end to end (AVX2 override)",
    "bench_demo_avx2_bf16": "`anchorviz demo --bf16` end to end (AVX2 override: emulated)",
    "profile_demo": "Where the float32 demo's CPU goes (AVX2 override)",
    "bench_fp32_levers": "Float32 levers for a CPU without native bfloat16: attention kernel, "
                         "inference mode, scoring batch",
    "bench_heap": "A demo worker's resident memory under allocator settings",
    "bench_jobs": "`anchorviz demo --jobs 1` vs `--jobs 2`",
    "bench_rehash": "Reading a finished sweep: full re-hash vs size + mtime check",
    "bench_flops": "Training step GFLOP/s against a plain matmul, float32 and bf16 autocast",
    "bench_cka": "Linear CKA implementations",
}

_HEADER = """# Benchmarks

Each section below is written by one script in `bench/` (between its `<!-- name -->` markers);
the command that reproduces it, the date and the machine facts are in the section. Run from the
repository root with the project venv active.

How the numbers are taken: the machine these ran on has 2 CPU cores that were **shared** with
other jobs, so absolute seconds carry that noise. Every time comparison is therefore a **ratio**
of variants measured side by side in ONE run, interleaved (each round runs every variant once,
the order rotating from round to round) with the median over rounds; the load average (1 / 5 /
15 min, from `os.getloadavg()`) is printed with each table. Peak memory is measured in a fresh
subprocess per variant (peak RSS from `getrusage`), so numbers do not bleed into each other.
Targets are reported as met / NOT met as measured; nothing was tuned to pass them.

"""


# --------------------------------------------------------------------------- machine facts


def loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:  # not available on this platform
        return (float("nan"),) * 3


def fmt_load(load: Sequence[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mem_total_gb() -> float:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return float("nan")


#: the CPU flags that decide the arithmetic (issue 40): named beside every figure
ARITHMETIC_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
#: the environment that reproduces a CPU without native bfloat16 (bench/bench_precision.py)
OVERRIDES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "ANCHORVIZ_PRECISION")


def cpu_flags() -> str:
    """The arithmetic-relevant CPU flags of /proc/cpuinfo and the overrides in force, e.g.
    ``avx2 avx512f avx512_bf16 (no amx_tile, amx_bf16); ONEDNN_MAX_CPU_ISA=AVX2``."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return platform.machine()
    have = [f for f in ARITHMETIC_FLAGS if f in flags]
    lack = [f for f in ARITHMETIC_FLAGS if f not in flags]
    text = " ".join(have) + (f" (no {', '.join(lack)})" if lack else "")
    env = [f"{k}={os.environ[k]}" for k in OVERRIDES if os.environ.get(k)]
    return text + ("; " + ", ".join(env) if env else "")


def machine_facts() -> dict:
    """Date, cores, CPU and its arithmetic flags, RAM, Python / torch versions, load average."""
    facts = {
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "ram_gb": round(mem_total_gb(), 1),
        "python": platform.python_version(),
        "load_before": loadavg(),
    }
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_threads"] = torch.get_num_threads()
        facts["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover - every bench needs torch
        facts["torch"] = "not installed"
    return facts


def facts_markdown(facts: Mapping, load_after: Sequence[float] | None = None,
                   elapsed_s: float | None = None) -> str:
    """One paragraph of machine facts for a section."""
    load_after = loadavg() if load_after is None else load_after
    parts = [
        f"Date {facts['date']}",
        f"{facts['nproc']} cores (`nproc`; {facts['cpu']}; flags "
        f"{facts.get('cpu_flags', 'not recorded')}), {facts['ram_gb']} GB RAM",
        f"Python {facts['python']}, torch {facts.get('torch')} "
        f"({facts.get('torch_threads', '?')} threads)",
    ]
    if facts.get("cuda"):
        parts.append(f"GPU {facts['cuda']}")
    parts.append(f"load average {fmt_load(facts['load_before'])} before, "
                 f"{fmt_load(load_after)} after")
    if elapsed_s is not None:
        parts.append(f"whole run {elapsed_s / 60:.1f} min")
    return "Machine: " + "; ".join(parts) + "."


def command_line(script: str, argv: Sequence[str] | None) -> str:
    argv = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python", f"bench/{script}", *(shlex.quote(a) for a in argv)])


# --------------------------------------------------------------------------- timing


def interleaved(variants: Mapping[str, Callable[[], float | None]], repeats: int,
                warmup: int = 1, rotate: bool = True,
                on_round: Callable[[int, dict], None] | None = None,
                cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Run every variant once per round, ``repeats`` rounds (after ``warmup`` untimed rounds).

    A variant returns the seconds it measured itself (e.g. only the training loop) or None, in
    which case the harness's wall time of the call is used. The order rotates every round
    (ABC, BCA, CAB, ...) unless ``rotate`` is False (ABC, ABC, ...). ``cpu``, if given, is
    filled with the process CPU seconds (all threads) of every timed call.
    """
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + repeats):
        order = names[r % len(names):] + names[: r % len(names)] if rotate else names
        this_round, this_cpu = {}, {}
        for name in order:
            c0, t0 = time.process_time(), time.perf_counter()
            got = variants[name]()
            wall = time.perf_counter() - t0
            this_cpu[name] = time.process_time() - c0
            this_round[name] = wall if got is None else float(got)
        if r >= warmup:
            for name, v in this_round.items():
                out[name].append(v)
                if cpu is not None:
                    cpu.setdefault(name, []).append(this_cpu[name])
            if on_round is not None:
                on_round(r - warmup, this_round)
    return out


def median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=float))) if len(xs) else float("nan")


def p90(xs: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(xs, dtype=float), 90)) if len(xs) else float("nan")


def paired_ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """Per-round ratios num[i] / den[i] (rounds are interleaved, so pairs share the load)."""
    return [a / b for a, b in zip(num, den) if b > 0]


def ratio_summary(num: Sequence[float], den: Sequence[float]) -> tuple[float, float, float]:
    """(median of per-round ratios, min, max)."""
    r = paired_ratios(num, den)
    if not r:
        return float("nan"), float("nan"), float("nan")
    return median(r), float(min(r)), float(max(r))


# --------------------------------------------------------------------------- memory


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (Linux: ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def children_peak_rss_mb() -> float:
    """Largest peak RSS among the waited-for children (not a sum over the tree)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def hwm_rss_mb() -> float:
    """Peak RSS since the last ``reset_peak_rss`` (VmHWM), else since the process started."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def current_rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024**2
    except OSError:
        return float("nan")


def run_json_worker(cmd: Sequence[str], timeout: float = 600, env: Mapping | None = None,
                    cwd: Path | str | None = None) -> dict:
    """Run a worker subprocess that prints one JSON object as its last stdout line."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env},
                          cwd=str(cwd or REPO))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-3000:]
        raise RuntimeError(f"worker {' '.join(cmd[:4])} ... failed (rc {proc.returncode}):\n{tail}")
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- markdown


def md_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    def cell(x) -> str:
        if isinstance(x, float):
            if x != x:  # NaN
                return "n/a"
            return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
        return str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def met(ok: bool | None) -> str:
    if ok is None:
        return "not measured"
    return "**met**" if ok else "**NOT met**"


def _skeleton() -> str:
    parts = [_HEADER]
    for name in SECTIONS:
        parts.append(f"<!-- {name} -->\n## {_TITLES[name]}\n\nNot run yet.\n<!-- /{name} -->\n")
    return "\n".join(parts)


def _replace(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        a = text.index(start)
        b = text.index(end, a) + len(end)
        return text[:a] + block + text[b:]
    # a missing section goes before the next one in SECTIONS order that exists, else at the end
    later = SECTIONS[SECTIONS.index(name) + 1:] if name in SECTIONS else ()
    for nxt in later:
        marker = f"<!-- {nxt} -->"
        if marker in text:
            a = text.index(marker)
            return text[:a] + block + "\n\n" + text[a:]
    return text.rstrip() + "\n\n" + block + "\n"


def cka_section() -> str:
    """The bench_cka section: docs/results/benchmarks/linear_cka_implementations.md
    (bench/bench_cka.py's output) folded in."""
    head = f"## {_TITLES['bench_cka']}\n\n"
    cmd = ("Written by `bench/bench_cka.py` to "
           "`docs/results/benchmarks/linear_cka_implementations.md` and copied here by the "
           "other bench scripts; reproduce with `python bench/bench_cka.py --n 20000 --dims 384 "
           "4096 --layers 7 --gram-layers-wide 1` (the exact command is in the text below).\n\n")
    if not CKA_DOC.is_file():
        return (head + cmd + "`docs/results/benchmarks/linear_cka_implementations.md` did not "
                "exist when this file was last written.\n")
    text = CKA_DOC.read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):  # demote headings below this section's own
            line = "##" + line if line.startswith("# ") else "#" + line
        lines.append(line)
    return head + cmd + "\n".join(lines).strip() + "\n"


def update_section(name: str, body: str, path: Path | str = DOC, fold_cka: bool = True) -> Path:
    """Rewrite section ``name`` of the benchmark document (and refresh the CKA section)."""
    path = Path(path)
    text = path.read_text() if path.is_file() else _skeleton()
    text = _replace(text, name, body)
    if fold_cka and name != "bench_cka":
        text = _replace(text, "bench_cka", cka_section())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def section(name: str, intro: str, table: str, notes: str, command: str, facts: Mapping,
            elapsed_s: float | None = None) -> str:
    """A whole section body: title, command, machine facts, intro, table, notes."""
    return "\n\n".join(s for s in [
        f"## {_TITLES[name]}",
        f"Command: `{command}`",
        facts_markdown(facts, elapsed_s=elapsed_s),
        intro.strip(),
        table.strip(),
        notes.strip(),
    ] if s) + "\n"

def publish(name: str, args, argv, measure: Callable[[], dict], markdown: Callable[..., str]) -> str:
    """Run ``measure()`` on this machine and print ``markdown(result, args, command, facts,
    elapsed seconds)``; unless ``args.no_write``, it also replaces the ``name`` section of
    docs/BENCHMARKS.md. Returns the markdown."""
    facts = machine_facts()
    t0 = time.time()
    res = measure()
    md = markdown(res, args, command_line(f"{name}.py", argv), facts, time.time() - t0)
    print(md)
    if not args.no_write:
        print(f"updated {update_section(name, md)}", file=sys.stderr)
    return md


if __name__ == "__main__":  # `python bench/common.py` refreshes the folded CKA section only
    print(update_section("bench_cka", cka_section(), fold_cka=False))
