"""Benchmark: float32 levers for a CPU without native bfloat16 (issue 40), side by side.

On one torch thread, interleaved rounds, medians, the demo's student `minilm-l6` on VADER movie
pairs at 48 tokens, in float32 (the arithmetic `auto` takes on such a CPU):

- ``step sdpa`` / ``step eager`` / ``step packed``: one training step of the real loop (batch
  16 pairs), with the library's attention kernel (the float32 demo's until the packed check),
  plain eager attention (the bfloat16 demo's) and the packed forward (`models.attention:
  packed`: the per-token arithmetic on real tokens only, `anchorviz.models.packed`). A switch changes run ids and, by rounding, numbers: a lever of that kind
  needs the pre-registered fresh-seed check;
- ``score 64 no_grad`` (what `score_pairs` does), ``score 64 inference_mode``, ``score 256
  no_grad``: a scoring pass over the same pairs, length-bucketed; inference mode changes no
  number; a larger batch changes the key (``capture.batch_size``) and, by rounding, possibly
  the last digits.

Run under ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` to take the path of a CPU
without native bfloat16 (bench/bench_precision.py checks the override).

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python bench/bench_fp32_levers.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_step  # noqa: E402
import common  # noqa: E402


def _score(s, batch: int, inference: bool) -> float:
    import torch

    from anchorviz.models.reward_model import eval_mode
    from anchorviz.models.tokenization import length_batches
    from anchorviz.training.loop import joint_batch, score_pairs

    t0 = time.perf_counter()
    if not inference:
        score_pairs(s.model, s.train, batch_size=batch)
    else:
        with eval_mode(s.model), torch.inference_mode():
            for idx in length_batches(s.train.lengths(), batch):
                b, _ = joint_batch(s.train, idx)
                s.model(b.input_ids, b.attention_mask, b.response_mask)
    return time.perf_counter() - t0


def measure(args) -> dict:
    import torch

    from anchorviz.models.packed import mark_packed

    torch.set_num_threads(1)
    pairs = bench_step.load_data(args.data, args.batch_size * args.steps, args.seed)
    setups = {}
    for name, attention in (("step sdpa", None), ("step eager", "eager"),
                            ("step packed", "packed")):
        s = bench_step.setup_variant("naive", args, pairs)
        s.config.bf16 = False
        if attention == "packed":  # what load_backbone does for models.attention: packed
            s.model.backbone.set_attn_implementation("eager")
            mark_packed(s.model.backbone)
        elif attention:
            s.model.backbone.set_attn_implementation(attention)
        setups[name] = s
    sdpa = setups["step sdpa"]
    variants = {
        **{name: (lambda s=s: bench_step.step_seconds(s)) for name, s in setups.items()},
        "score 64 no_grad": lambda: _score(sdpa, 64, False),
        "score 64 inference_mode": lambda: _score(sdpa, 64, True),
        "score 256 no_grad": lambda: _score(sdpa, 256, False),
    }
    return {"times": common.interleaved(variants, args.repeats), "pairs": len(pairs),
            "real": real_share(sdpa, args.batch_size)}


def real_share(s, batch_size: int) -> float:
    """The share of real tokens in the padded training batches of ``s`` (in data order)."""
    from anchorviz.training.loop import joint_batch

    real = padded = 0
    for start in range(0, len(s.train), batch_size):
        b, _ = joint_batch(s.train, range(start, min(start + batch_size, len(s.train))))
        real += int(b.attention_mask.sum())
        padded += b.attention_mask.numel()
    return real / padded


def main(argv: list[str] | None = None) -> int:
    ap = bench_step.build_parser()
    ap.description = __doc__.split("\n\n")[0]
    ap.set_defaults(max_length=48, steps=4, repeats=5)
    args = ap.parse_args(argv)
    facts = common.machine_facts()
    t0 = time.time()
    res = measure(args)
    t = {k: common.median(v) for k, v in res["times"].items()}
    r = {(k, base): common.ratio_summary(res["times"][k], res["times"][base])
         for k, base in (("step eager", "step sdpa"), ("step packed", "step sdpa"),
                         ("step packed", "step eager"), ("score 64 inference_mode", "score 64 no_grad"),
                         ("score 256 no_grad", "score 64 no_grad"))}
    rows = [[k, f"{1000 * v:.0f}"] for k, v in t.items()]
    table = common.md_table(["variant (float32)", "median ms"], rows)
    notes = "\n".join(f"- {k} / {base}: median ratio {a:.2f} (range {lo:.2f}-{hi:.2f})"
                      for (k, base), (a, lo, hi) in r.items())
    notes += f"\n- real tokens in the steps' batches: {res['real']:.0%} (the rest is padding)"
    intro = (f"One torch thread, float32, `minilm-l6`, {res['pairs']} VADER movie pairs at "
             f"{args.max_length} tokens, batch {args.batch_size} for the steps; {args.repeats} "
             "interleaved rounds, medians. What each variant changes: see bench/"
             "bench_fp32_levers.py.")
    md = common.section("bench_fp32_levers", intro, table, notes,
                        common.command_line("bench_fp32_levers.py", argv), facts,
                        time.time() - t0)
    print(md)
    if not args.no_write:
        common.update_section("bench_fp32_levers", md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
