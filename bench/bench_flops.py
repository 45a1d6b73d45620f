"""Benchmark: how close a training step runs to this machine's limit, in float32 and under
bfloat16 autocast on the CPU.

On one torch thread, side by side (interleaved rounds, median):

- ``matmul fp32`` / ``matmul bf16``: a plain square matmul (``--matmul-n``, 1024), the practical
  limit of one core for dense arithmetic;
- ``step fp32`` / ``step bf16``: one training step of the real loop
  (`anchorviz.training.loop.train_reward_model`, naive soft Bradley-Terry, batch 16 pairs x 48
  tokens of VADER movie pairs, the demo's student `minilm-l6`, dropout off), with
  ``TrainConfig.bf16`` off / on (Accelerate's CPU autocast to bfloat16), in the library's
  attention kernel (PyTorch's fused SDPA);
- ``step bf16 eager``: the same bf16 step with ``models.attention: eager`` (plain matmul +
  softmax attention, the demo's setting);
- ``score bf16`` / ``score bf16 eager``: one scoring pass (`score_pairs`, eval mode, 64 pairs a
  batch) over the step's pairs under bf16 autocast, SDPA / eager: the other half of a demo
  node's time.

The step's floating-point operations are counted once with
``torch.utils.flop_counter.FlopCounterMode`` (forward and backward of both sides of the batch),
so the table gives achieved GFLOP/s and that as a share of the same thread's matmul rate.

    python bench/bench_flops.py              # the section in docs/BENCHMARKS.md
    python bench/bench_flops.py --quick      # smoke size (tests)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_step  # noqa: E402
import common  # noqa: E402


def matmul_seconds(n: int, dtype) -> float:
    import torch

    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm
    t0 = time.perf_counter()
    reps = 3
    for _ in range(reps):
        torch.mm(a, b)
    return (time.perf_counter() - t0) / reps


def step_flops(s) -> float:
    """Floating-point operations of one training step's forward + backward on the first batch
    (both sides of every pair in one padded batch, as the loop builds it), counted by torch's
    flop counter."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from anchorviz.training.loop import joint_batch

    n = min(s.config.batch_size, len(s.train))
    batch, _ = joint_batch(s.train, list(range(n)))
    counter = FlopCounterMode(display=False)
    with counter:
        r = s.model(batch.input_ids, batch.attention_mask, batch.response_mask).rewards
        loss = -torch.nn.functional.logsigmoid(r[:n] - r[n:]).mean()
        loss.backward()
    s.model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def _step(s) -> float:
    """One timed call of the real loop (which switches Accelerate's mixed precision between
    the alternating fp32 / bf16 variants itself)."""
    return bench_step.step_seconds(s)


def measure(args, log=lambda m: None, pairs=None) -> dict:
    import torch

    torch.set_num_threads(1)
    n_pairs = args.batch_size * args.steps
    pairs = pairs if pairs is not None else bench_step.load_data(args.data, n_pairs, args.seed)
    setups = {}
    for name, bf16, attention in (("step fp32", False, None), ("step bf16", True, None),
                                  ("step bf16 eager", True, "eager")):
        s = bench_step.setup_variant("naive", args, pairs)
        s.config.bf16 = bf16
        if attention:  # what the loader's attn_implementation gives (models.attention)
            s.model.backbone.set_attn_implementation(attention)
        setups[name] = s
    flops = step_flops(setups["step fp32"])
    mm_flops = 2.0 * args.matmul_n ** 3
    variants = {
        "matmul fp32": lambda: matmul_seconds(args.matmul_n, torch.float32),
        "matmul bf16": lambda: matmul_seconds(args.matmul_n, torch.bfloat16),
        **{name: (lambda s=s: _step(s)) for name, s in setups.items()},
        "score bf16": lambda: score_seconds(setups["step bf16"]),
        "score bf16 eager": lambda: score_seconds(setups["step bf16 eager"]),
    }
    times = common.interleaved(variants, args.repeats,
                               on_round=lambda r, t: log(f"round {r}: {t}"))
    return {"times": times, "step_flops": flops, "matmul_flops": mm_flops,
            "pairs": n_pairs, "max_length": args.max_length, "batch": args.batch_size}


def score_seconds(s) -> float:
    """One scoring pass over the setup's pairs under bf16 autocast (the run's `precision`)."""
    from anchorviz.training.loop import precision, score_pairs

    t0 = time.perf_counter()
    with precision(True, "cpu"):
        score_pairs(s.model, s.train, batch_size=64)
    return time.perf_counter() - t0


def markdown(res: dict, args, command: str, facts, elapsed: float) -> str:
    t = {k: common.median(v) for k, v in res["times"].items()}
    rate = {k: (res["matmul_flops"] if k.startswith("matmul") else res["step_flops"]) / v / 1e9
            for k, v in t.items()}
    rows = []
    for k in ("matmul fp32", "matmul bf16", "step fp32", "step bf16", "step bf16 eager"):
        same = "matmul fp32" if k.endswith("fp32") else "matmul bf16"
        rows.append([k, f"{1000 * t[k]:.1f}", f"{rate[k]:.1f}",
                     "-" if k.startswith("matmul") else f"{rate[k] / rate[same]:.0%}"])
    for k in ("score bf16", "score bf16 eager"):
        rows.append([f"{k} ({res['pairs']} pairs)", f"{1000 * t[k]:.1f}", "-", "-"])
    bf16_ratio = common.ratio_summary(res["times"]["step bf16"], res["times"]["step fp32"])
    eager_ratio = common.ratio_summary(res["times"]["step bf16 eager"], res["times"]["step bf16"])
    score_ratio = common.ratio_summary(res["times"]["score bf16 eager"], res["times"]["score bf16"])
    table = common.md_table(["variant", "median ms", "GFLOP/s", "share of the matmul rate "
                                                              "(same dtype, same thread)"], rows)
    intro = (f"One torch thread. A training step of `minilm-l6` (batch {res['batch']} pairs x "
             f"{res['max_length']} tokens, the real loop, naive soft-BT) does "
             f"{res['step_flops'] / 1e9:.1f} GFLOP (forward + backward, both sides, torch's flop "
             "counter, counted once on the float32 step; every step variant is rated against "
             f"that count); the matmul is {args.matmul_n}^2. {args.repeats} interleaved rounds, "
             "medians.")
    notes = (f"bf16 autocast step / fp32 step: median ratio {bf16_ratio[0]:.2f} (range "
             f"{bf16_ratio[1]:.2f}-{bf16_ratio[2]:.2f}). Eager / SDPA attention under bf16: "
             f"training step {eager_ratio[0]:.2f} ({eager_ratio[1]:.2f}-{eager_ratio[2]:.2f}), "
             f"scoring pass {score_ratio[0]:.2f} ({score_ratio[1]:.2f}-{score_ratio[2]:.2f}).")
    return common.section("bench_flops", intro, table, notes, command, facts, elapsed)


def build_parser() -> argparse.ArgumentParser:
    ap = bench_step.build_parser()
    ap.description = __doc__.split("\n\n")[0]
    ap.set_defaults(max_length=48, steps=3, repeats=5)
    ap.add_argument("--matmul-n", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="smoke size")
    return ap


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    args = build_parser().parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.matmul_n = 2, 1, 256
    import logging

    logging.basicConfig(level=logging.WARNING)
    np.random.seed(args.seed)
    common.publish("bench_flops", args, argv,
                   lambda: measure(args, log=lambda m: print(m, file=sys.stderr, flush=True)),
                   markdown)


if __name__ == "__main__":
    main()
