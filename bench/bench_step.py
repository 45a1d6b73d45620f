"""Benchmark: training step time and peak memory, naive W2S vs ANCHOR's reference strategies.

Variants (same model, data, batch and seed; dropout off as in the experiment defaults):

- ``naive``               full fine-tuning, BT soft-label loss only;
- ``anchor-copy``         ANCHOR with a frozen deep copy run on every step (the paper's cost);
- ``anchor-cached``       ANCHOR with reference states computed once before training and read
                          back from a memory map (the one-off build is reported as setup seconds);
- ``lora-naive``          a LoRA student (r = 8 on query / value), BT loss only;
- ``anchor-adapter_off``  the LoRA student with ANCHOR, reference = the same model with its
                          adapters disabled (one extra forward per step, no second weight copy).

The measured thing is the real training code path: ``anchorviz.training.loop.train_reward_model`` on a
subset of ``steps x batch`` pairs for one epoch; a step's time is the loop's own clock
(``TrainResult.seconds``, which starts after the optimiser / Accelerate setup) divided by the
number of steps. Variants are interleaved round by round in one process (each keeps its own
model), the median over rounds is reported, and ratios to naive are medians of per-round ratios.
Peak memory: each variant again in a fresh subprocess (model load, reference build, the same
training steps), peak RSS from ``getrusage`` (and ``torch.cuda.max_memory_allocated`` on a GPU).

Usage (what produced docs/BENCHMARKS.md)::

    python bench/bench_step.py             # idle machine (torch default: 2 threads)
    python bench/bench_step.py --threads 1 # steadier while other jobs share the cores

GPU (not run here: no GPU was lent to this task) with a larger random-weight backbone::

    python bench/bench_step.py --device cuda --random-config bert-large --repeats 10
    python bench/bench_step.py --device cuda --random-config llama-1b --steps 8

``--model`` takes a zoo name or a local folder; ``--random-config`` a preset
(``bert-large``, ``llama-1b``, ``tiny-bert``) or a ``config.json`` path. ``--no-write`` keeps
docs/BENCHMARKS.md unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

VARIANTS = ("naive", "anchor-copy", "anchor-cached", "lora-naive", "anchor-adapter_off")
STRATEGY = {"anchor-copy": "copy", "anchor-cached": "cached", "anchor-adapter_off": "adapter_off"}
LORA = {"r": 8, "lora_alpha": 16}

#: random-weight backbones for a GPU run (tokenizer from the zoo model named in "tokenizer")
PRESETS = {
    "tiny-bert": {"type": "bert", "tokenizer": "minilm-l6", "kw": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)},
    "bert-large": {"type": "bert", "tokenizer": "minilm-l6", "kw": dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)},
    "llama-1b": {"type": "llama", "tokenizer": "smollm2-135m", "kw": dict(
        hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=8192, max_position_embeddings=2048)},
}

_WORDS = (
    "the a film movie story plot actor actress scene music ending script director camera light "
    "long short slow fast funny sad dark bright warm cold brilliant dull clever silly honest "
    "strange quiet loud tender brutal gentle bold tired fresh old new great good bad awful fine "
    "poor rich simple complex beautiful ugly charming boring moving flat sharp soft hard is was "
    "and but or not very really quite too so it this that with without about over under into "
    "from of to in on for by at as an every some most never always often seldom truly almost"
).split()


def synthetic_pairs(n: int, seed: int = 0) -> pd.DataFrame:
    """Random word sequences (8-40 words a side), no prompt, in the pair-table schema."""
    rng = np.random.default_rng(seed)

    def text() -> str:
        return " ".join(rng.choice(_WORDS, size=int(rng.integers(8, 41))))

    rows = [{"pair_id": f"syn-{i}", "dataset": "synthetic", "domain": "synthetic", "prompt": "",
             "chosen": text(), "rejected": text(), "prompt_turns": None, "meta": {}}
            for i in range(n)]
    return pd.DataFrame(rows)


def load_data(data: str, n: int, seed: int) -> pd.DataFrame:
    if data == "synthetic":
        return synthetic_pairs(n, seed)
    from anchorviz.data.readers import load_pairs

    df, _ = load_pairs(data, limit=n)
    if len(df) < n:
        raise SystemExit(f"{data}: only {len(df)} pairs, {n} needed")
    return df.reset_index(drop=True)


# --------------------------------------------------------------------------- one variant


@dataclass
class Setup:
    name: str
    model: object
    train: object
    q: np.ndarray
    objective: object
    reference: object
    config: object
    setup_s: float
    cpu: list | None = None  # process CPU seconds per steady step, one entry per call


def _random_backbone(spec: str, seed: int):
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer, BertConfig, LlamaConfig

    from anchorviz.models.zoo import resolve_model

    if spec in PRESETS:
        p = PRESETS[spec]
        tok = AutoTokenizer.from_pretrained(str(resolve_model(p["tokenizer"])))
        cls = BertConfig if p["type"] == "bert" else LlamaConfig
        cfg = cls(vocab_size=len(tok), **p["kw"])
    else:
        cfg = AutoConfig.from_pretrained(spec)
        tok = AutoTokenizer.from_pretrained(str(Path(spec).parent if Path(spec).is_file() else spec))
    torch.manual_seed(seed)  # the same random weights for every variant
    kwargs = {"add_pooling_layer": False} if cfg.model_type == "bert" else {}
    try:
        backbone = AutoModel.from_config(cfg, **kwargs)
    except TypeError:
        backbone = AutoModel.from_config(cfg)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return backbone, tok


def load_model(args, lora: bool):
    from anchorviz.models.reward_model import (
        RewardModel,
        apply_lora,
        disable_dropout,
        load_reward_model,
    )

    if args.random_config:
        backbone, tok = _random_backbone(args.random_config, args.seed)
        disable_dropout(backbone)
        if lora:
            backbone = apply_lora(backbone, LORA)
        return RewardModel(backbone), tok
    return load_reward_model(args.model, dropout=False, lora=LORA if lora else None)


def setup_variant(name: str, args, pairs: pd.DataFrame) -> Setup:
    """Load the model of ``name``, encode the pairs, build its reference (timed as setup)."""
    import torch

    from anchorviz.config import TrainConfig
    from anchorviz.models.tokenization import encode_pairs
    from anchorviz.training.loop import Objective
    from anchorviz.training.losses import resolve_anchor_layers
    from anchorviz.training.reference import make_reference

    torch.manual_seed(args.seed)
    model, tok = load_model(args, lora=name in ("lora-naive", "anchor-adapter_off"))
    train = encode_pairs(tok, pairs, max_length=args.max_length)
    q = np.random.default_rng(args.seed).uniform(0.2, 0.8, len(train))  # teacher-like soft labels
    cfg = TrainConfig(lr=5e-5, epochs=1, batch_size=args.batch_size, seed=args.seed,
                      device=args.device, progress=False, warmup_frac=0.0)
    objective, reference, setup_s = Objective(), None, 0.0
    if name in STRATEGY:
        layers = resolve_anchor_layers(args.layers, model.n_layers)
        objective = Objective(anchor_lambda=args.anchor_lambda, anchor_layers=layers)
        model.to(args.device)  # a copy / cache must live where training runs
        t0 = time.perf_counter()
        reference = make_reference(STRATEGY[name], model, layers, train,
                                   **({"device": args.device} if STRATEGY[name] == "cached" else {}))
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        setup_s = time.perf_counter() - t0
    return Setup(name, model, train, q, objective, reference, cfg, setup_s)


def step_seconds(s: Setup, n_pairs: int | None = None) -> float:
    """One epoch over the subset (or its first ``n_pairs``) through the real loop; the mean
    seconds of its steady-state steps.

    Every call builds a fresh optimiser, so the first step also allocates AdamW's state; that
    step is left out: a forward pre-hook on the reward model stamps the start of every step's
    forward, and the steady time is (end of the call - start of step 1) / (steps - 1). A
    one-step call returns the loop's own time for its single step.
    """
    from anchorviz.training.loop import train_reward_model

    train, q = s.train, s.q
    if n_pairs is not None:  # rows 0..n-1 keep their row numbers, so a cache stays valid
        train, q = train.subset(range(n_pairs)), q[:n_pairs]
    stamps: list[tuple[float, float]] = []
    handle = s.model.register_forward_pre_hook(
        lambda mod, inp: stamps.append((time.perf_counter(), time.process_time())))
    c0 = time.process_time()
    try:
        res = train_reward_model(s.model, train, q, s.config, objective=s.objective,
                                 reference=s.reference, desc=s.name)
        end, cend = time.perf_counter(), time.process_time()
    finally:
        handle.remove()
    if s.cpu is None:
        s.cpu = []
    if res.steps < 2 or len(stamps) != res.steps:
        s.cpu.append((cend - c0) / res.steps)
        return res.seconds / res.steps
    s.cpu.append((cend - stamps[1][1]) / (res.steps - 1))
    return (end - stamps[1][0]) / (res.steps - 1)


def worker(name: str, args) -> dict:
    """Fresh-process memory measurement of one variant (prints one JSON line)."""
    import torch

    pairs = load_data(args.data, args.batch_size * args.mem_steps, args.seed)
    import transformers  # noqa: F401 - imported before the peak counter is reset


    hwm_reset = common.reset_peak_rss()
    rss0 = common.current_rss_mb()
    s = setup_variant(name, args, pairs)
    rss_loaded = common.current_rss_mb()
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    sec = step_seconds(s)
    out = {"variant": name, "peak_rss_mb": common.hwm_rss_mb(), "hwm_reset": hwm_reset,
           "process_peak_rss_mb": common.peak_rss_mb(), "rss_before_load_mb": rss0,
           "rss_after_setup_mb": rss_loaded, "step_s": sec, "setup_s": s.setup_s,
           "n_params": sum(p.numel() for p in s.model.parameters()),
           "trainable": sum(p.numel() for p in s.model.parameters() if p.requires_grad)}
    if s.reference is not None and hasattr(s.reference, "nbytes"):
        out["cache_mb"] = s.reference.nbytes() / 1024**2
    if args.device.startswith("cuda"):
        out["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 1024**2
    if s.reference is not None:
        s.reference.close()
    return out


# --------------------------------------------------------------------------- the benchmark


def measure(args, variants=VARIANTS, log=print, pairs: pd.DataFrame | None = None) -> dict:
    """Interleaved step timing (in this process) and per-variant peak memory (subprocesses)."""
    n = args.batch_size * args.steps
    pairs = load_data(args.data, n, args.seed) if pairs is None else pairs.iloc[:n]
    setups = {}
    for name in variants:
        setups[name] = setup_variant(name, args, pairs)
        log(f"set up {name} ({setups[name].setup_s:.2f} s reference setup)")
    tokens = sum(len(x) for x in setups[variants[0]].train.chosen_ids) + \
        sum(len(x) for x in setups[variants[0]].train.rejected_ids)

    for s in setups.values():  # warm-up: one untimed call per variant
        step_seconds(s, n_pairs=min(n, 2 * args.batch_size))
        s.cpu = []

    def show(r, rnd):
        log(f"round {r + 1}/{args.repeats}: "
            + ", ".join(f"{k} {v:.3f}s" for k, v in rnd.items()))

    times = common.interleaved({k: (lambda s=s: step_seconds(s)) for k, s in setups.items()},
                               repeats=args.repeats, warmup=0, on_round=show)
    attribution = reference_costs(setups, args, log=log)
    mem = {}
    if not args.no_memory:
        for name in variants:
            cmd = [sys.executable, __file__, "--worker", name, *_forward_args(args)]
            try:
                mem[name] = common.run_json_worker(cmd, timeout=args.worker_timeout)
            except Exception as err:  # a failed worker leaves its memory cell empty
                mem[name] = {"error": str(err)[-400:]}
            log(f"memory {name}: {mem[name].get('peak_rss_mb', 'failed')}")
    for s in setups.values():
        if s.reference is not None:
            s.reference.close()
    return {"times": times, "cpu": {k: list(s.cpu) for k, s in setups.items()},
            "attribution": attribution,
            "setup_s": {k: s.setup_s for k, s in setups.items()}, "memory": mem,
            "n_pairs": n, "tokens": tokens,
            "n_params": {k: sum(p.numel() for p in s.model.parameters()) for k, s in setups.items()},
            "trainable": {k: sum(p.numel() for p in s.model.parameters() if p.requires_grad)
                          for k, s in setups.items()}}


def reference_costs(setups: dict, args, log=print) -> dict[str, list[float]]:
    """The reference's own cost per step, isolated: ``reference.states(index, batch)`` of every
    anchored variant on the same (first) batch, next to one no-grad student forward with the
    anchored layers' states (what the reference forward of ``copy`` repeats). Interleaved."""
    import torch

    from anchorviz.training.loop import joint_batch

    first = next(iter(setups.values()))
    idx = list(range(min(args.batch_size, len(first.train))))
    batch, index = joint_batch(first.train, idx)
    batch = batch.to(args.device)
    layers = next((s.reference.layers for s in setups.values() if s.reference is not None), [])
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    def student_forward(model=first.model):
        with torch.no_grad():
            model(batch.input_ids, batch.attention_mask, batch.response_mask, layers=layers)
        sync()

    variants = {"student forward (no grad)": student_forward}
    for name, s in setups.items():
        if s.reference is not None:
            variants[f"{name}: reference.states"] = (
                lambda ref=s.reference: (ref.states(index, batch), sync())[1])
    out = common.interleaved(variants, repeats=args.attribution_repeats, warmup=1)
    log("reference cost: " + ", ".join(f"{k} {1e3 * common.median(v):.1f} ms"
                                       for k, v in out.items()))
    return out


def _forward_args(args) -> list[str]:
    out = ["--data", args.data, "--batch-size", str(args.batch_size), "--max-length",
           str(args.max_length), "--seed", str(args.seed), "--device", args.device,
           "--layers", args.layers, "--anchor-lambda", str(args.anchor_lambda),
           "--mem-steps", str(args.mem_steps)]
    out += ["--threads", str(args.threads)] if args.threads else []
    out += ["--random-config", args.random_config] if args.random_config else ["--model", args.model]
    return out


def markdown(res: dict, args, command: str, facts: dict, elapsed: float) -> str:
    t = res["times"]
    base = "naive"
    mem = res["memory"]
    cuda = args.device.startswith("cuda")
    mkey = "cuda_peak_mb" if cuda else "peak_rss_mb"
    rows = []
    targets = {}
    for name in t:
        med = common.median(t[name])
        r, lo, hi = common.ratio_summary(t[name], t[base])
        extra = ""
        if name == "anchor-adapter_off" and "lora-naive" in t:
            rl, llo, lhi = common.ratio_summary(t[name], t["lora-naive"])
            extra = f"{rl:.3f} ({llo:.2f}-{lhi:.2f})"
        elif name == "lora-naive":
            extra = "1 (baseline)"
        m = mem.get(name, {})
        peak = m.get(mkey, float("nan"))
        mratio = peak / mem.get(base, {}).get(mkey, float("nan")) if mem else float("nan")
        setup = res["setup_s"][name]
        cpu = res.get("cpu", {})
        rc = common.ratio_summary(cpu[name], cpu[base]) if cpu.get(name) else (float("nan"),) * 3
        rows.append([f"`{name}`", f"{med:.3f}", f"{r:.3f} ({lo:.2f}-{hi:.2f})",
                     f"{common.median(cpu.get(name, [])):.3f}",
                     f"{rc[0]:.3f} ({rc[1]:.2f}-{rc[2]:.2f})",
                     extra or "",
                     f"{setup:.2f} ({1e3 * setup / res['n_pairs']:.0f} ms / pair)"
                     if name in STRATEGY else "-",
                     f"{peak:,.0f}" if peak == peak else "n/a",
                     f"{mratio:.3f}" if mratio == mratio else "n/a",
                     f"{res['trainable'][name] / 1e6:.2f} M"])
        if name == "anchor-cached":
            targets["time"] = r <= 1.05
            targets["cpu"] = rc[0] <= 1.05 if rc[0] == rc[0] else None
            targets["mem"] = mratio <= 1.10 if mratio == mratio else None
    headers = ["variant", "median s / step", "x naive (per-round range)", "CPU s / step", "CPU x naive (range)", "x LoRA naive (wall)",
               "reference setup s", "peak GPU MB" if cuda else "peak RSS MB",
               "mem x naive", "trainable params"]
    table = common.md_table(headers, rows)
    model = args.random_config and f"random-weight `{args.random_config}` config" or f"`{args.model}`"
    data = "synthetic random-word pairs" if args.data == "synthetic" else f"`{args.data}` pairs"
    intro = (
        f"Model {model}, {data}: {res['n_pairs']} pairs ({res['tokens']:,} tokens, both sides), "
        f"batch {args.batch_size} pairs (one joint forward of {2 * args.batch_size} sequences), "
        f"max_length {args.max_length}, seed {args.seed}, dropout off, fp32, device "
        f"`{args.device}`. ANCHOR: layers `{args.layers}`, lambda {args.anchor_lambda}; LoRA "
        f"r = {LORA['r']} on query / value. Step time: one `train_reward_model` call of "
        f"{args.steps} steps per variant per round; its first step (which also allocates the "
        "fresh AdamW state) is not timed, the others are (a forward pre-hook stamps each step's "
        f"start; steady time = (end - start of step 1) / (steps - 1)); {args.repeats} interleaved "
        "rounds (order rotating) after one untimed warm-up call per variant; 'x naive' is the "
        "median of the per-round ratios (range over rounds); 'CPU' is the process CPU time (all threads) of "
        "the same steps, which other jobs' load disturbs less than wall time. Reference setup: "
        "the one-off `make_reference` cost on these "
        f"{res['n_pairs']} pairs (cached: one inference pass over every training pair; it grows "
        "with the training set, not with the number of epochs), not included in the step time. "
        f"Peak memory: one fresh subprocess per variant ({args.mem_steps} training steps), "
        + ("`torch.cuda.max_memory_allocated`." if cuda else
           "peak RSS from the model load on (the kernel's VmHWM counter is reset after the "
           "imports, so the peak includes the ~RSS of Python + torch at that point, the model, "
           "the reference and the training working set).")
    )
    mem_note = ""
    if mem and not cuda:
        inc = []
        for name, m in mem.items():
            if "peak_rss_mb" in m:
                inc.append(f"`{name}` {m['peak_rss_mb'] - m['rss_before_load_mb']:,.0f}")
        mem_note = ("Peak RSS minus the RSS before the model was loaded (the model, reference and "
                    "training working set alone), MB: " + ", ".join(inc) + ".")
        if not all(m.get("hwm_reset", True) for m in mem.values()):
            mem_note += " (VmHWM could not be reset here: peaks are whole-process peaks.)"
        if "anchor-cached" in mem and "cache_mb" in mem["anchor-cached"]:
            mem_note += (f" The cached reference's memory map holds "
                         f"{mem['anchor-cached']['cache_mb']:.1f} MB for these pairs.")
    notes = "\n".join([
        f"- Target: `anchor-cached` within 5% of naive step time (median of per-round ratios): "
        f"{common.met(targets.get('time'))}; in process CPU time: "
        f"{common.met(targets.get('cpu'))}.",
        f"- Target: `anchor-cached` peak memory within 10% of naive: {common.met(targets.get('mem'))}.",
        f"- {mem_note}" if mem_note else "",
        "- A GPU run (`--device cuda --random-config bert-large` or `llama-1b`) is supported by the "
        "script but was **not run here**: no GPU was lent to this task." if not cuda else "",
    ])
    att = res.get("attribution") or {}
    if att:
        fwd = att.get("student forward (no grad)")
        arows = [[f"`{k}`", f"{1e3 * common.median(v):.1f}", f"{1e3 * common.p90(v):.1f}",
                  f"{common.ratio_summary(v, fwd)[0]:.3f}" if fwd else "n/a",
                  f"{common.median(v) / common.median(t['naive']):.3f}" if "naive" in t else "n/a"]
                 for k, v in att.items()]
        notes += ("\n\nThe reference's own cost per step, isolated (same first batch, "
                  f"{args.attribution_repeats} interleaved rounds): `reference.states(index, "
                  "batch)` of each anchored variant next to one no-grad student forward.\n\n"
                  + common.md_table(["what", "median ms", "p90 ms", "x student forward",
                                     "as a fraction of a naive step"], arows))
    return common.section("bench_step", intro, table, notes, command, facts, elapsed)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm-l6", help="zoo name or local folder")
    ap.add_argument("--random-config", default=None,
                    help=f"random-weight backbone: a preset {sorted(PRESETS)} or a config.json")
    ap.add_argument("--data", default="vader-movie", help="a load_pairs name or 'synthetic'")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2,
                    help="training steps per variant per round, the first untimed (the same "
                         "batches every round)")
    ap.add_argument("--repeats", type=int, default=8, help="interleaved rounds")
    ap.add_argument("--layers", default="last")
    ap.add_argument("--anchor-lambda", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads (0: torch's default). On a shared machine 1 "
                         "thread gives steadier ratios: a 2-thread step stalls whenever another "
                         "job holds one of the cores")
    ap.add_argument("--mem-steps", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    ap.add_argument("--attribution-repeats", type=int, default=10,
                    help="rounds of the isolated reference-cost timing")
    ap.add_argument("--worker-timeout", type=float, default=300)
    ap.add_argument("--no-write", action="store_true", help="do not update docs/BENCHMARKS.md")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    args = build_parser().parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    common.publish("bench_step", args, argv, lambda: measure(args, log=lambda m: print(m, file=sys.stderr, flush=True)), markdown)


if __name__ == "__main__":
    main()
