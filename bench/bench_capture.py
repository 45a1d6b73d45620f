"""Benchmark: hidden-state capture vs a bare forward pass of the same model on the same batches.

Variants, each over ALL pairs of the same encoded set, in the same length-sorted batches
(``batch_size`` pairs = one joint forward of ``2 x batch_size`` sequences), eval mode:

- ``bare``         ``model.backbone(input_ids, attention_mask)`` under ``torch.inference_mode``, no
                   hidden-state output (batches built with ``anchorviz.training.loop.joint_batch``, as
                   capture does, so batch building is on both sides);
- ``bare+hidden``  the same with ``output_hidden_states=True`` (to show where the cost sits);
- ``capture``      ``anchorviz.analysis.capture.capture_states(model, encoded, layers="all")``: rewards
                   and pooled states (mean over response tokens) of every layer, float16
                   (float32 for a layer whose pooled values exceed float16's range); the
                   finiteness check runs on the pooled, stored values (b x d per layer and
                   batch), not on every token state (b x T x d) as it did before.

Interleaved rounds (order rotating), median per variant, ratios = medians of per-round ratios.

Usage (what produced docs/BENCHMARKS.md)::

    python bench/bench_capture.py --repeats 10
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def bare_pass(model, encoded, batch_size: int, hidden: bool = False) -> float:
    """Backbone forward over every pair in capture's batch order; returns a checksum."""
    import torch

    from anchorviz.training.loop import joint_batch

    order = np.argsort(encoded.lengths(), kind="stable")
    total = 0.0
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size].tolist()
            batch, _ = joint_batch(encoded, idx)
            out = model.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 output_hidden_states=hidden, return_dict=True)
            total += float(out.last_hidden_state[0, 0, 0])
    return total


def capture_pass(model, encoded, batch_size: int):
    from anchorviz.analysis.capture import capture_states

    return capture_states(model, encoded, layers="all", batch_size=batch_size, progress=False)


def measure(model, encoded, batch_size: int, repeats: int, log=print,
            cpu: dict | None = None) -> dict[str, list[float]]:
    model.eval()
    variants = {
        "bare": lambda: (bare_pass(model, encoded, batch_size), None)[1],
        "bare+hidden": lambda: (bare_pass(model, encoded, batch_size, hidden=True), None)[1],
        "capture": lambda: (capture_pass(model, encoded, batch_size), None)[1],
    }

    def show(r, rnd):
        log(f"round {r + 1}/{repeats}: " + ", ".join(f"{k} {v:.3f}s" for k, v in rnd.items()))

    return common.interleaved(variants, repeats=repeats, warmup=1, on_round=show, cpu=cpu)


def markdown(times, args, n_pairs, tokens, n_layers, command, facts, elapsed,
             cpu: dict | None = None) -> str:
    cpu = cpu or {}
    rows = []
    for name, ts in times.items():
        r, lo, hi = common.ratio_summary(ts, times["bare"])
        rmin = min(ts) / min(times["bare"])
        rc = (common.ratio_summary(cpu[name], cpu["bare"]) if cpu.get(name)
              else (float("nan"),) * 3)
        rows.append([f"`{name}`", f"{common.median(ts):.3f}",
                     f"{1e3 * common.median(ts) / n_pairs:.2f}", f"{r:.3f} ({lo:.2f}-{hi:.2f})",
                     f"{rmin:.3f}", f"{rc[0]:.3f} ({rc[1]:.2f}-{rc[2]:.2f})"])
    table = common.md_table(["variant", "median s (all pairs)", "ms / pair", "x bare (range)",
                             "x bare (min / min)", "CPU time x bare (range)"], rows)
    ratio = common.ratio_summary(times["capture"], times["bare"])[0]
    cpu_ratio = (common.ratio_summary(cpu["capture"], cpu["bare"])[0] if cpu.get("capture")
                 else float("nan"))
    intro = (
        f"Model `{args.model}` ({n_layers} blocks: {n_layers + 1} hidden-state layers captured), "
        f"{n_pairs} `{args.data}` pairs ({tokens:,} tokens, both sides), max_length "
        f"{args.max_length}, batch {args.batch_size} pairs ({2 * args.batch_size} sequences), "
        f"eval mode, fp32, CPU, {args.repeats} interleaved rounds (order rotating) after one "
        "warm-up round; ratios are medians of per-round ratios (range over rounds), 'min / min' "
        "the ratio of the fastest rounds, 'CPU time' the process CPU seconds (all threads) of "
        "the same calls, which other jobs' load disturbs less than wall time.")
    notes = "\n".join([
        f"- Target: capture within 10% of the bare forward: {common.met(ratio <= 1.10)} "
        f"(capture / bare = {ratio:.3f} in wall time; {cpu_ratio:.3f} in process CPU time, "
        f"{common.met(cpu_ratio <= 1.10)}).",
        "- capture runs under `torch.no_grad` (not `inference_mode`), computes the reward head, "
        "pools every layer (mean over response tokens), converts it to float16 on the CPU and "
        "checks the stored pooled values for non-finite ones (a NaN / inf among a row's tokens "
        "makes its mean non-finite); the earlier per-token-state check (every layer's full "
        "b x T x d tensor) is gone. `bare+hidden` shows how much of the "
        "difference is the hidden-state output itself.",
    ])
    return common.section("bench_capture", intro, table, notes, command, facts, elapsed)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm-l6")
    ap.add_argument("--data", default="vader-movie", help="a load_pairs name or 'synthetic'")
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads (0: torch's default; 1 is steadier on a shared "
                         "machine)")
    ap.add_argument("--no-write", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    args = build_parser().parse_args(argv)
    from bench_step import load_data

    from anchorviz.models.reward_model import load_reward_model
    from anchorviz.models.tokenization import encode_pairs

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    facts = common.machine_facts()
    t0 = time.time()
    model, tok = load_reward_model(args.model, dropout=False)
    enc = encode_pairs(tok, load_data(args.data, args.pairs, args.seed), max_length=args.max_length)
    tokens = sum(map(len, enc.chosen_ids)) + sum(map(len, enc.rejected_ids))
    cpu: dict = {}
    times = measure(model, enc, args.batch_size, args.repeats,
                    log=lambda m: print(m, file=sys.stderr, flush=True), cpu=cpu)
    md = markdown(times, args, len(enc), tokens, model.n_layers,
                  common.command_line("bench_capture.py", argv), facts, time.time() - t0, cpu)
    print(md)
    if not args.no_write:
        print(f"updated {common.update_section('bench_capture', md)}", file=sys.stderr)


if __name__ == "__main__":
    main()
