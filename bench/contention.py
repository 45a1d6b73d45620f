"""How much does one process slow down when a second identical one runs beside it?

Issue 17's ``--jobs 2`` demo burned 1.66x the CPU of ``--jobs 1`` for the same runs. This
isolates the per-process slowdown of three workloads, each on one torch thread, run alone and
then as two processes at once (the ratio is the parallel time over the alone time; 1.0 = the
two cores do not disturb each other, 2.0 = no gain from the second core):

- ``matmul``: a 384 x 384 by 384 x 1536 matrix product (fits in cache: compute-bound);
- ``stream``: an in-place add over two 100 MB tensors (memory-bandwidth-bound);
- ``train``: MiniLM-L6 training steps (batch 16 pairs, 48 tokens, fused AdamW), the demo's
  real work.

    python bench/contention.py            # prints a markdown table
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def workload(name: str) -> float:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if name == "matmul":
        a, b = torch.randn(384, 384), torch.randn(384, 1536)
        t = time.perf_counter()
        for _ in range(600):
            a @ b
        return time.perf_counter() - t
    if name == "stream":
        a, b = torch.randn(25_000_000), torch.randn(25_000_000)
        t = time.perf_counter()
        for _ in range(40):
            a.add_(b, alpha=0.5)
        return time.perf_counter() - t
    if name == "train":
        from anchorviz.models.reward_model import load_reward_model

        model, _ = load_reward_model("minilm-l6", dropout=False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
        ids = torch.randint(1000, 2000, (32, 48))
        mask = torch.ones_like(ids)
        model.train()
        for _ in range(2):  # warm-up
            model(ids, mask, mask).rewards.sum().backward()
            opt.step()
            opt.zero_grad()
        t = time.perf_counter()
        for _ in range(8):
            model(ids, mask, mask).rewards.sum().backward()
            opt.step()
            opt.zero_grad()
        return time.perf_counter() - t
    raise ValueError(name)


def timed(name: str, copies: int) -> list[float]:
    cmd = [sys.executable, __file__, "--child", name]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workloads", nargs="+", default=["matmul", "stream", "train"])
    args = ap.parse_args(argv)
    if args.child:
        print(workload(args.child))
        return 0
    print("| workload | alone (s) | two at once (s, each) | slowdown |")
    print("|---|---|---|---|")
    for name in args.workloads:
        alone = timed(name, 1)[0]
        both = timed(name, 2)
        print(f"| {name} | {alone:.2f} | {both[0]:.2f} / {both[1]:.2f} | "
              f"{sum(both) / 2 / alone:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
