"""Benchmark: does this CPU run bfloat16 natively, and do the overrides that reproduce the
AVX2 class of CPU (no native bfloat16) really take it away?

For each environment (none; ``ATEN_CPU_CAPABILITY=avx2``; that plus ``ONEDNN_MAX_CPU_ISA=AVX2``)
a fresh subprocess on one thread times a matmul in float32 and under bfloat16 autocast (the
arithmetic of a ``bf16`` run), interleaved, median over rounds, and reports the ratio bf16 /
fp32, what torch says (``get_cpu_capability``) and what ``anchorviz.precision`` decides for
``auto``. Where bfloat16 is native the ratio is well below 1; emulated, well above.

Beside the square matmul, a Linear(384, 1536) forward + backward at 32 x 48 tokens (the width
and batch shape of the demo's student) shows the same at a training step's scale; the
demo-level cost is bench_demo's.

Usage::

    python bench/bench_precision.py            # writes its section of docs/BENCHMARKS.md
    python bench/bench_precision.py --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

ENVS = {
    "as is": {},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2": {"ATEN_CPU_CAPABILITY": "avx2",
                                                          "ONEDNN_MAX_CPU_ISA": "AVX2"},
}

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
sys.path.insert(0, {bench!r})
import common
from anchorviz.precision import native_bf16, resolve_bf16
n, rounds = {n}, {rounds}
a = torch.randn(n, n); b = torch.randn(n, n)
lin = torch.nn.Linear(384, 1536); x = torch.randn(32 * 48, 384, requires_grad=True)

def mm_fp32():
    t = time.perf_counter(); a @ b; return time.perf_counter() - t

def mm_bf16():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        t = time.perf_counter(); a @ b; return time.perf_counter() - t

def lin_fp32():
    t = time.perf_counter(); lin(x).sum().backward(); return time.perf_counter() - t

def lin_bf16():
    t = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = lin(x).float().sum()
    y.backward(); return time.perf_counter() - t

for f in (mm_fp32, mm_bf16, lin_fp32, lin_bf16):
    f()  # warm-up: primitives built once
res = common.interleaved({{"mm_fp32": mm_fp32, "mm_bf16": mm_bf16, "lin_fp32": lin_fp32,
                          "lin_bf16": lin_bf16}}, rounds)
print(json.dumps({{"capability": torch.backends.cpu.get_cpu_capability(),
                  "why": native_bf16("cpu")[1], "auto": resolve_bf16("auto"),
                  "times": {{k: common.median(v) for k, v in res.items()}}}}))
"""


def run_env(extra: dict, n: int, rounds: int) -> dict:
    env = {**os.environ, **extra, "OMP_NUM_THREADS": "1"}
    env.pop("ANCHORVIZ_PRECISION", None)
    for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        if k not in extra:
            env.pop(k, None)
    code = CHILD.format(bench=str(Path(__file__).resolve().parent), n=n, rounds=rounds)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_flags_line() -> str:
    from anchorviz.precision import _cpu_flags

    flags = _cpu_flags()
    want = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
    return ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in want)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=768, help="square matmul size")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    facts = common.machine_facts()
    rows = []
    for name, extra in ENVS.items():
        r = run_env(extra, args.n, args.rounds)
        t = r["times"]
        rows.append((name, r, t["mm_bf16"] / t["mm_fp32"], t["lin_bf16"] / t["lin_fp32"]))
        print(f"{name:50s} capability {r['capability']:8s} auto->{'bf16' if r['auto'] else 'fp32'}"
              f"  matmul bf16/fp32 {rows[-1][2]:.2f}  linear fwd+bwd {rows[-1][3]:.2f}",
              flush=True)
    lines = [
        f"## {common._TITLES['bench_precision']}", "",
        "Is bfloat16 native here, and do the overrides that reproduce a CPU without it (the AVX2 "
        "class) really take it away? Each environment is a fresh process on one thread: a "
        f"{args.n} x {args.n} matmul and a Linear(384, 1536) forward + backward at 32 x 48 tokens "
        "(the demo's batch shape), float32 against bfloat16 autocast, interleaved, median of "
        f"{args.rounds} rounds. `auto` is what `anchorviz.precision.resolve_bf16('auto')` "
        "decides in that environment.",
        "",
        f"CPU flags: {cpu_flags_line()}." + (
            " `ATEN_CPU_CAPABILITY=avx2` alone lowers PyTorch's own kernels but leaves "
            "oneDNN's bfloat16 matmuls native here (ratio below 1): both variables are needed."
            if rows[0][2] < 1 and rows[1][2] < 1 else ""),
        "",
        "| environment | torch capability | auto takes | matmul bf16 / fp32 | linear fwd+bwd bf16 / fp32 |",
        "|---|---|---|---|---|",
    ]
    for name, r, mm, lin in rows:
        lines.append(f"| `{name}` | {r['capability']} | {'bfloat16' if r['auto'] else 'float32'} "
                     f"| {mm:.2f} | {lin:.2f} |")
    lines += ["", common.facts_markdown(facts), "",
              f"Command: `{common.command_line('bench_precision.py', argv)}`"]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        common.update_section("bench_precision", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
